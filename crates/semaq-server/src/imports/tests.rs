use super::*;

fn export(kind: Kind, subject: &str, accounts: &[&str]) -> Export {
    Export::new(kind, subject.into(), accounts.iter().map(|a| a.to_string()).collect(), ResponseType::Singleton)
}

fn import(kind: Kind, account: &str, subject: &str, to: Option<&str>, prefix: Option<&str>) -> Import {
    Import {
        kind,
        account: account.into(),
        subject: subject.into(),
        to: to.map(Into::into),
        prefix: prefix.map(Into::into),
        activation: None,
        share: false,
        allow_trace: false,
    }
}

fn errors(accounts: &[AccountLinks<'_>]) -> Vec<String> {
    resolve(accounts).1.into_iter().map(|(_, error)| error.to_string()).collect()
}

#[test]
fn an_import_inside_an_export_for_the_importer_resolves_with_its_mapping() {
    let exports = [export(Kind::Stream, "orders.>", &[]), export(Kind::Service, "req.*", &["B"])];
    let imports = [
        import(Kind::Stream, "A", "orders.eu.>", None, Some("a")),
        import(Kind::Service, "A", "req.*", Some("areq.*"), None),
    ];
    let a = AccountLinks { name: "A", exports: &exports, imports: &[] };
    let b = AccountLinks { name: "B", exports: &[], imports: &imports };
    let (links, errors) = resolve(&[a, b]);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(links[0].mapping.apply("orders.eu.1"), "a.orders.eu.1");
    assert_eq!((links[0].exporter.as_str(), links[0].importer.as_str()), ("A", "B"));
    assert_eq!(links[1].mapping.from(), "areq.*");
    assert_eq!(links[1].mapping.apply("areq.7"), "req.7");
}

#[test]
fn imports_not_exported_or_not_to_the_importer_are_refused_in_nats_servers_words() {
    let exports = [export(Kind::Stream, "public.>", &[]), export(Kind::Service, "private", &["C"])];
    let imports = [
        import(Kind::Stream, "A", "secret.>", None, None),
        import(Kind::Stream, "A", ">", None, None),
        import(Kind::Service, "A", "private", None, None),
        import(Kind::Service, "A", "public.x", None, None),
        import(Kind::Stream, "Z", "x", None, None),
        import(Kind::Stream, "A", "public.x", None, Some("a.*")),
        import(Kind::Stream, "A", "public.*", Some("p"), None),
    ];
    let a = AccountLinks { name: "A", exports: &exports, imports: &[] };
    let b = AccountLinks { name: "B", exports: &[], imports: &imports };
    assert_eq!(
        errors(&[a, b]),
        [
            "Error adding stream import \"secret.>\": stream import not authorized",
            "Error adding stream import \">\": stream import not authorized",
            "Error adding service import \"private\": service import not authorized",
            "Error adding service import \"public.x\": service import not authorized",
            "\"Z\" account not defined for stream import",
            "Error adding stream import \"public.x\": stream import prefix can not contain wildcard tokens",
            "Error adding stream import \"public.*\": failed to create mapping transform for subject from \"public.*\" to \"p\": wildcards do not match",
        ]
    );
}

#[test]
fn imports_that_close_a_loop_are_refused() {
    let stream_exports = [export(Kind::Stream, "foo.>", &[])];
    let a_imports = [import(Kind::Stream, "B", "foo.>", None, None)];
    let b_imports = [import(Kind::Stream, "A", "foo.>", None, None)];
    let a = AccountLinks { name: "A", exports: &stream_exports, imports: &a_imports };
    let b = AccountLinks { name: "B", exports: &stream_exports, imports: &b_imports };
    assert_eq!(errors(&[a, b]), ["Error adding stream import \"foo.>\": import forms a cycle"]);

    let service_exports = [export(Kind::Service, "svc", &[])];
    let a_imports = [import(Kind::Service, "B", "svc", None, None)];
    let b_imports = [import(Kind::Service, "A", "svc", None, None)];
    let a = AccountLinks { name: "A", exports: &service_exports, imports: &a_imports };
    let b = AccountLinks { name: "B", exports: &service_exports, imports: &b_imports };
    assert_eq!(errors(&[a, b]), ["Error adding service import \"svc\": import forms a cycle"]);

    // Under a prefix the stream does not come back on the subject it left on: no loop.
    let b_imports = [import(Kind::Stream, "A", "foo.>", None, Some("a"))];
    let a_imports = [import(Kind::Stream, "B", "foo.>", None, Some("b"))];
    let a = AccountLinks { name: "A", exports: &stream_exports, imports: &a_imports };
    let b = AccountLinks { name: "B", exports: &stream_exports, imports: &b_imports };
    assert!(errors(&[a, b]).is_empty());
}

#[test]
fn the_same_import_twice_is_refused() {
    let exports = [export(Kind::Stream, "foo", &[])];
    let imports = [import(Kind::Stream, "A", "foo", None, None), import(Kind::Stream, "A", "foo", None, Some("x"))];
    let a = AccountLinks { name: "A", exports: &exports, imports: &[] };
    let b = AccountLinks { name: "B", exports: &[], imports: &imports };
    assert_eq!(errors(&[a, b]), ["Error adding stream import \"foo\": stream import already exists"]);
}

#[test]
fn a_token_required_export_admits_only_imports_with_an_activation_not_revoked() {
    let exports = [Export {
        token_required: true,
        revocations: HashMap::from([("C".to_string(), 100)]),
        ..export(Kind::Stream, "orders.>", &[])
    }];
    let activated = |issued_at| Import {
        activation: Some(Activation { issued_at, expires: None }),
        ..import(Kind::Stream, "A", "orders.>", None, None)
    };
    let a = AccountLinks { name: "A", exports: &exports, imports: &[] };
    let (with, without) = ([activated(50)], [import(Kind::Stream, "A", "orders.>", None, None)]);
    let (revoked, newer) = ([activated(100)], [activated(101)]);
    let importers = [
        AccountLinks { name: "B", exports: &[], imports: &with },
        AccountLinks { name: "D", exports: &[], imports: &without },
        AccountLinks { name: "C", exports: &[], imports: &revoked },
        AccountLinks { name: "C", exports: &[], imports: &newer },
    ];
    let admitted: Vec<bool> = importers.iter().map(|b| errors(&[a, *b]).is_empty()).collect();
    assert_eq!(admitted, [true, false, false, true], "revoked when issued at or before the revocation");
}

#[test]
fn a_link_ends_when_the_activation_a_token_required_export_took_expires() {
    let required = [Export { token_required: true, ..export(Kind::Stream, "orders.>", &[]) }];
    let public = [export(Kind::Stream, "orders.>", &[])];
    let expiring = [Import {
        activation: Some(Activation { issued_at: 1, expires: Some(2_000) }),
        ..import(Kind::Stream, "A", "orders.>", None, None)
    }];
    let expires = |exports: &[Export]| {
        let a = AccountLinks { name: "A", exports, imports: &[] };
        let (links, _) = resolve(&[a, AccountLinks { name: "B", exports: &[], imports: &expiring }]);
        links.first().map(|link| link.expires)
    };
    assert_eq!(expires(&required), Some(Some(2_000)));
    assert_eq!(expires(&public), Some(None), "an export not asking for the token does not time the import");
}

#[test]
fn an_export_naming_the_importer_by_subject_token_wants_its_name_there() {
    let exports = [Export { account_token_position: 2, ..export(Kind::Stream, "to.*.>", &[]) }];
    let a = AccountLinks { name: "A", exports: &exports, imports: &[] };
    let own = [import(Kind::Stream, "A", "to.B.>", None, None)];
    let whole = [import(Kind::Stream, "A", "to.*.>", None, None)];
    assert!(errors(&[a, AccountLinks { name: "B", exports: &[], imports: &own }]).is_empty());
    let refused = ["Error adding stream import \"to.B.>\": stream import not authorized"];
    assert_eq!(errors(&[a, AccountLinks { name: "C", exports: &[], imports: &own }]), refused);
    let refused = ["Error adding stream import \"to.*.>\": stream import not authorized"];
    assert_eq!(errors(&[a, AccountLinks { name: "B", exports: &[], imports: &whole }]), refused);
    let literal = [Export { account_token_position: 2, ..export(Kind::Stream, "to.B.>", &[]) }];
    let a = AccountLinks { name: "A", exports: &literal, imports: &[] };
    let bad_export = "Error adding stream export \"to.B.>\": sublist: invalid subject";
    let refused = "Error adding stream import \"to.B.>\": stream import not authorized";
    assert_eq!(errors(&[a, AccountLinks { name: "B", exports: &[], imports: &own }]), [bad_export, refused]);
}
