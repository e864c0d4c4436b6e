//! Scope templates, activation tokens and exports naming the importer by subject token, side by
//! side with nats-server 2.9 given the same operator config: raw clients see the same
//! permission errors and refusals, and the same imports deliver.

use std::time::Duration;

use nkeys::KeyPair;
use semaq_testkit::{NatsServer, Raw, SemaqServer};
use serde_json::{json, Value};

use crate::account_limits::nats_server_with;
use crate::auth_nkeys::{account_claims, jwt_login, mint, operator_jwt_naming, raw_connect, round, sign};

/// How long a client that must not get a message waits for it.
const SILENCE: Duration = Duration::from_millis(400);

/// How far ahead of the test's start the expiry test's activations expire: room for both servers
/// to start and every check before it, on a loaded machine.
const ACTIVATION_LIFE_SECS: i64 = 8;

fn now() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock");
    i64::try_from(since.as_secs()).expect("seconds")
}

/// An operator, its system account, and the config trusting the accounts added to it.
pub(crate) struct Trusted {
    operator: KeyPair,
    system: KeyPair,
    preload: String,
}

impl Trusted {
    pub(crate) fn new() -> Self {
        let (operator, system) = (KeyPair::new_operator(), KeyPair::new_account());
        let jwt = mint(&operator, &system.public_key(), account_claims(json!({}), json!({})), json!({}));
        let preload = format!("  {}: {jwt}\n", system.public_key());
        Self { operator, system, preload }
    }

    /// Adds `account` with the `nats` claims in `extra` and the top-level claims in `top`.
    pub(crate) fn add(&mut self, account: &KeyPair, extra: Value, top: Value) {
        let jwt = mint(&self.operator, &account.public_key(), account_claims(json!({}), extra), top);
        self.preload.push_str(&format!("  {}: {jwt}\n", account.public_key()));
    }

    pub(crate) fn config(&self) -> String {
        format!(
            "operator: {}\nsystem_account: {}\nresolver: MEMORY\nresolver_preload {{\n{}}}\n",
            operator_jwt_naming(&self.operator, &self.system),
            self.system.public_key(),
            self.preload
        )
    }

    /// SemaQ and nats-server 2.9, each given the config.
    fn servers(&self) -> (SemaqServer, (NatsServer, tempfile::TempDir)) {
        let config = self.config();
        (SemaqServer::with_config(&config, &[]), nats_server_with(&config))
    }
}

/// A user of `account` signed by `signer` (the account or one of its keys), logged in raw.
fn login(addr: std::net::SocketAddr, account: &KeyPair, signer: &KeyPair, nats: Value, top: Value) -> Raw {
    let user = KeyPair::new_user();
    let mut claims = json!({ "type": "user", "version": 2 });
    if signer.public_key() != account.public_key() {
        claims["issuer_account"] = json!(account.public_key());
    }
    if let (Some(claims), Some(nats)) = (claims.as_object_mut(), nats.as_object()) {
        claims.extend(nats.clone());
    }
    jwt_login(addr, &mint(signer, &user.public_key(), claims, top), &user)
}

/// A user with no limits of its own, as plain account keys sign them.
fn unlimited() -> Value {
    json!({ "subs": -1, "data": -1, "payload": -1 })
}

fn scoped_account(signing_key: &KeyPair, template: Value) -> Value {
    let mut template_claims = unlimited();
    if let (Some(all), Some(template)) = (template_claims.as_object_mut(), template.as_object()) {
        all.extend(template.clone());
    }
    json!({
        "tags": ["region:eu", "region:us"],
        "signing_keys": [{ "kind": "user_scope", "key": signing_key.public_key(), "role": "r", "template": template_claims }],
    })
}

fn publish_violation(subject: &str) -> String {
    format!("-ERR 'Permissions Violation for Publish to \"{subject}\"'\r\n")
}

/// Publishes to each subject and returns what the server answered, one line per refusal.
fn publishes(raw: &mut Raw, subjects: &[&str]) -> String {
    let commands: String = subjects.iter().map(|subject| format!("PUB {subject} 1\r\nx\r\n")).collect();
    round(raw, &commands)
}

#[test]
fn scope_templates_fill_in_the_users_name_key_and_tags_as_nats_server_does() {
    let (account, scope) = (KeyPair::new_account(), KeyPair::new_account());
    let template = json!({ "pub": { "allow": [
        "n.{{name()}}.>", "t.{{tag(dept)}}", "a.{{account-name()}}.{{account-tag(region)}}",
        "k.{{account-subject()}}",
    ], "deny": ["n.{{name()}}.secret"] } });
    let mut trusted = Trusted::new();
    trusted.add(&account, scoped_account(&scope, template), json!({ "name": "sales" }));
    let (semaq, (nats, _dir)) = trusted.servers();
    let key_subject = format!("k.{}", account.public_key());
    let tried = [
        "n.alice.x",
        "n.bob.x",
        "n.alice.secret",
        "t.eng",
        "t.ops",
        "t.hr",
        "a.sales.eu",
        "a.sales.us",
        "a.sales.as",
        key_subject.as_str(),
        "k.other",
    ];
    let refused: String =
        ["n.bob.x", "n.alice.secret", "t.hr", "a.sales.as", "k.other"].map(publish_violation).concat();
    for addr in [semaq.addr(), nats.addr()] {
        let user = json!({ "tags": ["dept:eng", "dept:ops"] });
        let mut raw = login(addr, &account, &scope, user, json!({ "name": "alice" }));
        assert_eq!(publishes(&mut raw, &tried), refused, "{addr}");
    }
}

#[test]
fn a_scope_templates_user_subject_fills_in_per_user() {
    let (account, scope) = (KeyPair::new_account(), KeyPair::new_account());
    let template = json!({ "sub": { "allow": ["inbox.{{subject()}}.>"] } });
    let mut trusted = Trusted::new();
    trusted.add(&account, scoped_account(&scope, template), json!({}));
    let (semaq, (nats, _dir)) = trusted.servers();
    for addr in [semaq.addr(), nats.addr()] {
        let user = KeyPair::new_user();
        let claims = json!({ "type": "user", "version": 2, "issuer_account": account.public_key() });
        let mut raw = jwt_login(addr, &mint(&scope, &user.public_key(), claims, json!({})), &user);
        let own = format!("SUB inbox.{}.> 1\r\n", user.public_key());
        assert_eq!(round(&mut raw, &own), "", "{addr}");
        let refused = "-ERR 'Permissions Violation for Subscription to \"inbox.UOTHER.>\"'\r\n";
        assert_eq!(round(&mut raw, "SUB inbox.UOTHER.> 2\r\n"), refused, "{addr}");
    }
}

#[test]
fn a_missing_tag_allows_nothing_in_an_allow_list_and_refuses_the_user_in_a_deny_list() {
    let (account, allowing, denying) = (KeyPair::new_account(), KeyPair::new_account(), KeyPair::new_account());
    let mut claims = scoped_account(&allowing, json!({ "pub": { "allow": ["t.{{tag(team)}}"] } }));
    let deny_scope = json!({ "kind": "user_scope", "key": denying.public_key(), "role": "d",
        "template": { "subs": -1, "data": -1, "payload": -1, "pub": { "deny": ["t.{{tag(team)}}"] } } });
    claims["signing_keys"].as_array_mut().expect("keys").push(deny_scope);
    let mut trusted = Trusted::new();
    trusted.add(&account, claims, json!({}));
    let (semaq, (nats, _dir)) = trusted.servers();
    for addr in [semaq.addr(), nats.addr()] {
        let mut raw = login(addr, &account, &allowing, json!({}), json!({}));
        assert_eq!(publishes(&mut raw, &["t.x", "other"]), ["t.x", "other"].map(publish_violation).concat(), "{addr}");
        let user = KeyPair::new_user();
        let user_claims = json!({ "type": "user", "version": 2, "issuer_account": account.public_key() });
        let jwt = mint(&denying, &user.public_key(), user_claims, json!({}));
        let (line, closed) = raw_connect(addr, &|nonce: &str| json!({ "jwt": jwt, "sig": sign(&user, nonce) }));
        assert_eq!((line.as_str(), closed), ("-ERR 'Authorization Violation'", true), "{addr}");
    }
}

#[test]
fn placeholders_in_a_users_own_permissions_are_plain_subjects_as_in_nats_server() {
    let account = KeyPair::new_account();
    let mut trusted = Trusted::new();
    trusted.add(&account, json!({}), json!({}));
    let (semaq, (nats, _dir)) = trusted.servers();
    for addr in [semaq.addr(), nats.addr()] {
        let own = json!({ "subs": -1, "data": -1, "payload": -1, "pub": { "allow": ["n.{{name()}}"] } });
        let mut raw = login(addr, &account, &account, own, json!({ "name": "alice" }));
        assert_eq!(publishes(&mut raw, &["n.{{name()}}", "n.alice"]), publish_violation("n.alice"), "{addr}");
    }
}

/// An activation token from `signer` granting `importer` the `kind` import of `subject`.
fn activation(signer: &KeyPair, importer: &KeyPair, subject: &str, kind: &str, nats: Value, top: Value) -> String {
    let mut claims = json!({ "type": "activation", "version": 2, "subject": subject, "kind": kind });
    if let (Some(claims), Some(nats)) = (claims.as_object_mut(), nats.as_object()) {
        claims.extend(nats.clone());
    }
    mint(signer, &importer.public_key(), claims, top)
}

fn stream_import(exporter: &KeyPair, subject: &str, token: Option<String>) -> Value {
    let mut import = json!({ "name": "i", "subject": subject, "account": exporter.public_key(), "type": "stream" });
    if let Some(token) = token {
        import["token"] = json!(token);
    }
    json!({ "imports": [import] })
}

/// Which of `importers` (in order) receive what `exporter`'s user publishes on `subject`, each
/// subscribed to `listen`.
fn delivered(
    addr: std::net::SocketAddr,
    exporter: &KeyPair,
    importers: &[&KeyPair],
    listen: &str,
    subject: &str,
) -> Vec<bool> {
    let mut listeners: Vec<Raw> = importers
        .iter()
        .map(|importer| {
            let mut raw = login(addr, importer, importer, unlimited(), json!({}));
            assert_eq!(round(&mut raw, &format!("SUB {listen} 1\r\n")), "", "{addr}");
            raw
        })
        .collect();
    let mut publisher = login(addr, exporter, exporter, unlimited(), json!({}));
    assert_eq!(publishes(&mut publisher, &[subject]), "", "{addr}");
    listeners.iter_mut().map(|raw| raw.drain(SILENCE).contains(&format!("MSG {subject} 1 1\r\nx\r\n"))).collect()
}

/// A new account for each case's claims, trusted by one operator: the accounts with their
/// claims and whether each should be admitted.
fn trust_each(cases: impl IntoIterator<Item = (Value, bool)>) -> (Trusted, Vec<(KeyPair, Value, bool)>) {
    let mut trusted = Trusted::new();
    let accounts = cases
        .into_iter()
        .map(|(claims, admitted)| {
            let account = KeyPair::new_account();
            trusted.add(&account, claims.clone(), json!({}));
            (account, claims, admitted)
        })
        .collect();
    (trusted, accounts)
}

/// The logins of each of `accounts` on `addr`: the first line answered and whether it closed.
fn logins(addr: std::net::SocketAddr, accounts: &[&KeyPair]) -> Vec<(String, bool)> {
    let attempt = |account: &KeyPair| {
        let user = KeyPair::new_user();
        let claims = json!({ "type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1 });
        let jwt = mint(account, &user.public_key(), claims, json!({}));
        raw_connect(addr, &|nonce: &str| json!({ "jwt": jwt, "sig": sign(&user, nonce) }))
    };
    accounts.iter().copied().map(attempt).collect()
}

#[test]
fn an_import_token_failing_validation_refuses_its_account_and_one_out_of_time_or_revoked_only_the_import() {
    let (exporter, scope) = (KeyPair::new_account(), KeyPair::new_account());
    let importers: [KeyPair; 10] = std::array::from_fn(|_| KeyPair::new_account());
    let [valid, by_key, missing, expired, revoked, forged, other_importer, narrower, service_kind, capitalised] =
        &importers;
    let none = || json!({});
    let mut trusted = Trusted::new();
    trusted.add(
        &exporter,
        json!({
            "signing_keys": [scope.public_key()],
            "exports": [{ "name": "o", "subject": "orders.>", "type": "stream", "token_req": true,
                          "revocations": { (revoked.public_key()): now() + 3600 } }],
        }),
        json!({}),
    );
    let token = |signer: &KeyPair, to: &KeyPair, subject: &str, kind: &str, nats: Value, top: Value| {
        Some(activation(signer, to, subject, kind, nats, top))
    };
    let on_behalf = json!({ "issuer_account": exporter.public_key() });
    let tokens = [
        (valid, token(&exporter, valid, "orders.>", "stream", none(), none())),
        (by_key, token(&scope, by_key, "orders.>", "stream", on_behalf, none())),
        (missing, None),
        (expired, token(&exporter, expired, "orders.>", "stream", none(), json!({ "exp": now() - 1 }))),
        (revoked, token(&exporter, revoked, "orders.>", "stream", none(), none())),
        (forged, token(&KeyPair::new_account(), forged, "orders.>", "stream", none(), none())),
        (other_importer, token(&exporter, valid, "orders.>", "stream", none(), none())),
        (narrower, token(&exporter, narrower, "orders.eu.>", "stream", none(), none())),
        (service_kind, token(&exporter, service_kind, "orders.>", "service", none(), none())),
        (capitalised, token(&exporter, capitalised, "orders.>", "Stream", none(), none())),
    ];
    for (importer, token) in tokens {
        trusted.add(importer, stream_import(&exporter, "orders.>", token), json!({}));
    }
    let (semaq, (nats, _dir)) = trusted.servers();
    let refused = (String::from("-ERR 'Authorization Violation'"), true);
    for addr in [semaq.addr(), nats.addr()] {
        let seen = delivered(addr, &exporter, &[valid, by_key, missing, expired, revoked], "orders.>", "orders.new");
        assert_eq!(seen, [true, true, false, false, false], "{addr}");
        let answers = logins(addr, &[forged, other_importer, narrower, service_kind, capitalised]);
        assert_eq!(answers, vec![refused.clone(); 5], "{addr}: the whole account is not valid");
    }
}

/// Imports (first) and exports (second) that nats-server 2.9's JWT library finds blocking: each
/// account listing one is refused whole, as the ones listing only sound links are not.
/// A list of links (an account's `imports` or `exports`) and whether its account is admitted.
type Case = (Value, bool);

fn blocking_links(exporter: &str) -> (Vec<Case>, Vec<Case>) {
    let import = |extra: Value| {
        let mut import = json!({ "name": "i", "subject": "orders.*", "account": exporter, "type": "stream" });
        if let (Some(import), Some(extra)) = (import.as_object_mut(), extra.as_object()) {
            import.extend(extra.clone());
        }
        import
    };
    let service = |subject: &str| json!({ "subject": subject, "type": "service" });
    let imports = vec![
        (json!([import(json!({ "local_subject": "o.$1" }))]), true),
        (json!([import(json!({ "account": "not-a-key" }))]), true),
        (json!([{ "subject": "orders.*", "account": exporter }]), false),
        (json!([import(json!({ "type": "service", "local_subject": "o.*", "to": "p.*" }))]), false),
        (json!([import(json!({ "account": "" }))]), false),
        (json!([import(json!({ "share": true }))]), false),
        (json!([import(json!({ "subject": "orders new" }))]), false),
        (json!([import(json!({ "local_subject": "o.$2" }))]), false),
        (json!([import(json!({ "local_subject": "o.>" }))]), false),
        (json!([import(service("help.>")), import(service("help.me"))]), false),
        (json!([import(json!({ "type": "service" })), import(json!({ "type": "service", "subject": "other" }))]), true),
    ];
    let exports = vec![
        (json!([json!({ "subject": "a.*", "type": "service", "response_type": "Stream" })]), true),
        (json!([json!({ "subject": "a", "type": "service", "response_type": "stream" })]), false),
        (json!([json!({ "subject": "a", "type": "stream", "response_type": "Singleton" })]), false),
        (
            json!([json!({ "subject": "a", "type": "stream", "service_latency": { "sampling": 5, "results": "l" } })]),
            false,
        ),
        (
            json!([
                json!({ "subject": "a", "type": "service", "service_latency": { "sampling": 101, "results": "l" } })
            ]),
            false,
        ),
        (
            json!([
                json!({ "subject": "a", "type": "service", "service_latency": { "sampling": 5, "results": "l.*" } })
            ]),
            false,
        ),
        (json!([json!({ "subject": "a", "type": "service", "response_threshold": -1 })]), false),
        (json!([json!({ "subject": "a.b", "type": "service", "account_token_position": 2 })]), false),
        (json!([service("a.>"), service("a.b")]), false),
        (json!([json!({ "subject": "a.>", "type": "stream" }), service("a.b")]), true),
    ];
    (imports, exports)
}

/// nats-server 2.9's JWT library refuses an account listing more imports or exports than its
/// limits allow (a missing limit is 0), wildcard exports where `wildcards` is off, a blank tier
/// name, a signing key not an account's, or a default permission that is no subject (a queue only
/// where subscribing); plain JetStream limits beside tiers it drops as it decodes, so its check that they
/// exclude each other never refuses one.
#[test]
fn limits_signing_keys_and_default_permissions_the_jwt_library_blocks_refuse_the_account_as_in_nats_server() {
    let limits = |extra: Value| {
        let mut limits = json!({ "subs": -1, "data": -1, "payload": -1, "conn": -1 });
        if let (Some(limits), Some(extra)) = (limits.as_object_mut(), extra.as_object()) {
            limits.extend(extra.clone());
        }
        json!({ "limits": limits })
    };
    let tier = json!({ "mem_storage": 1_048_576, "disk_storage": 1_048_576, "streams": -1, "consumer": -1 });
    let with = |mut claims: Value, links: Value| {
        if let (Some(claims), Some(links)) = (claims.as_object_mut(), links.as_object()) {
            claims.extend(links.clone());
        }
        claims
    };
    let import =
        |subject: &str| json!({ "subject": subject, "account": KeyPair::new_account().public_key(), "type": "stream" });
    let two_imports = json!({ "imports": [import("a"), import("b")] });
    let wild_export = json!({ "exports": [{ "subject": "a.>", "type": "stream" }] });
    let cases = [
        (with(limits(json!({ "imports": 2 })), two_imports.clone()), true),
        (with(limits(json!({ "imports": 1 })), two_imports.clone()), false),
        (with(limits(json!({})), two_imports), false),
        (with(limits(json!({ "exports": -1 })), wild_export.clone()), true),
        (with(limits(json!({ "exports": 1, "wildcards": true })), wild_export.clone()), true),
        (with(limits(json!({ "exports": 1 })), wild_export), false),
        (with(limits(json!({})), json!({ "signing_keys": [KeyPair::new_account().public_key()] })), true),
        (with(limits(json!({})), json!({ "signing_keys": [KeyPair::new_user().public_key()] })), false),
        (with(limits(json!({})), json!({ "default_permissions": { "sub": { "allow": ["a q"] } } })), true),
        (with(limits(json!({})), json!({ "default_permissions": { "pub": { "allow": ["a q"] } } })), false),
        (with(limits(json!({})), json!({ "default_permissions": { "sub": { "deny": ["a q r"] } } })), false),
        (with(limits(json!({})), json!({ "default_permissions": { "pub": { "deny": [""] } } })), false),
        (limits(json!({ "tiered_limits": { "R1": tier } })), true),
        (limits(json!({ "mem_storage": 1_048_576 })), true),
        (limits(json!({ "streams": 3, "tiered_limits": { "R1": tier } })), true),
        (limits(json!({ "tiered_limits": { "": tier } })), false),
    ];
    let (trusted, accounts) = trust_each(cases);
    let (semaq, (nats, _dir)) = trusted.servers();
    for addr in [semaq.addr(), nats.addr()] {
        let answers = logins(addr, &accounts.iter().map(|(account, ..)| account).collect::<Vec<_>>());
        for ((line, _), (_, claims, admitted)) in answers.iter().zip(&accounts) {
            let side = if addr == semaq.addr() { "semaq" } else { "nats-server" };
            assert_eq!(line != "-ERR 'Authorization Violation'", *admitted, "{side}: {claims} got {line}");
        }
    }
}

#[test]
fn a_preloaded_account_jwt_the_jwt_library_cannot_decode_stops_the_server_as_in_nats_server() {
    let exporter = KeyPair::new_account();
    let import = json!({ "subject": "o", "account": exporter.public_key(), "type": "Stream" });
    let sampling =
        json!({ "subject": "a", "type": "service", "service_latency": { "sampling": "50%", "results": "l" } });
    for links in [json!({ "imports": [import] }), json!({ "exports": [sampling] })] {
        assert_both_refuse_to_start(&exporter, links);
    }
}

/// Starts SemaQ and nats-server with an operator config preloading `exporter` and an account
/// with the `nats` claims `claims`; asserts that both stop over an invalid account JWT.
fn assert_both_refuse_to_start(exporter: &KeyPair, claims: Value) {
    let mut trusted = Trusted::new();
    trusted.add(exporter, json!({}), json!({}));
    trusted.add(&KeyPair::new_account(), claims.clone(), json!({}));
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.conf");
    std::fs::write(&path, trusted.config()).expect("write config");
    let nats = std::process::Command::new("nats-server").arg("-c").arg(&path).output().expect("run nats-server");
    let semaq = SemaqServer::builder().bare().arg("-c").arg(&path).output();
    for (server, output) in [("semaq", semaq), ("nats-server", nats)] {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{server} started with {claims}");
        assert!(stderr.contains("invalid account JWT"), "{server}, {claims}: {stderr}");
    }
}

/// The jwt library decodes an import's or export's `type` only when it is `stream` or
/// `service`: one given as `""` or `null` fails the account JWT (nats-server stops), where a
/// missing one only refuses the account (see `blocking_links`). An account JWT whose own `type`
/// is `""` fails too, its signature then checked as a v1 JWT's.
#[test]
fn an_empty_or_null_type_in_an_account_jwt_stops_the_server_as_in_nats_server() {
    let exporter = KeyPair::new_account();
    let import = |kind: Value| json!({ "subject": "o", "account": exporter.public_key(), "type": kind });
    let export = |kind: Value| json!({ "subject": "a", "type": kind });
    let cases = [
        json!({ "imports": [import(json!(""))] }),
        json!({ "imports": [import(Value::Null)] }),
        json!({ "exports": [export(json!(""))] }),
        json!({ "exports": [export(Value::Null)] }),
        json!({ "type": "" }),
    ];
    for claims in cases {
        assert_both_refuse_to_start(&exporter, claims);
    }
}

/// The jwt library's `Info` check of an account and of each export: a `description` or an
/// `info_url` over 8 KiB, or an `info_url` that Go's `url.Parse` refuses or finds without a
/// scheme or a host, refuses the account.
#[test]
fn a_description_or_info_url_the_jwt_library_blocks_refuses_the_account_as_in_nats_server() {
    let bound = 8 * 1024;
    let export = |info: Value| {
        let mut export = json!({ "subject": "a", "type": "stream" });
        if let (Some(export), Some(info)) = (export.as_object_mut(), info.as_object()) {
            export.extend(info.clone());
        }
        json!({ "exports": [export] })
    };
    let cases = [
        (json!({ "description": "what it is", "info_url": "https://example.com/about?x#y" }), true),
        (json!({ "description": "d".repeat(bound), "info_url": "" }), true),
        (json!({ "info_url": "http://user@[::1]:8080/%41" }), true),
        (json!({ "description": "d".repeat(bound + 1) }), false),
        (json!({ "info_url": format!("https://example.com/{}", "u".repeat(bound)) }), false),
        (json!({ "info_url": "example.com" }), false),
        (json!({ "info_url": "http:example.com" }), false),
        (json!({ "info_url": "//example.com/about" }), false),
        (json!({ "info_url": "http:///about" }), false),
        (json!({ "info_url": "http://exa mple.com" }), false),
        (json!({ "info_url": "http://example.com:80x" }), false),
        (json!({ "info_url": "http://example.com/%zz" }), false),
        (export(json!({ "description": "d", "info_url": "https://example.com" })), true),
        (export(json!({ "info_url": "example.com" })), false),
        (export(json!({ "description": "d".repeat(bound + 1) })), false),
    ];
    let (trusted, accounts) = trust_each(cases);
    let (semaq, (nats, _dir)) = trusted.servers();
    for (addr, side) in [(semaq.addr(), "semaq"), (nats.addr(), "nats-server")] {
        let answers = logins(addr, &accounts.iter().map(|(account, ..)| account).collect::<Vec<_>>());
        for ((line, _), (_, claims, admitted)) in answers.iter().zip(&accounts) {
            let shown: String = claims.to_string().chars().take(120).collect();
            assert_eq!(line != "-ERR 'Authorization Violation'", *admitted, "{side}: {shown} got {line}");
        }
    }
}

#[test]
fn an_import_or_export_failing_the_jwt_librarys_blocking_checks_refuses_its_account_as_nats_server_does() {
    let exporter = KeyPair::new_account();
    let mut trusted = Trusted::new();
    let exports = json!([{ "subject": "orders.>", "type": "stream" }, { "subject": "help.>", "type": "service" }]);
    trusted.add(&exporter, json!({ "exports": exports }), json!({}));
    let (imports, exports) = blocking_links(&exporter.public_key());
    let mut accounts = Vec::new();
    for (links, admitted) in imports
        .into_iter()
        .map(|(l, a)| (json!({ "imports": l }), a))
        .chain(exports.into_iter().map(|(l, a)| (json!({ "exports": l }), a)))
    {
        let account = KeyPair::new_account();
        trusted.add(&account, links.clone(), json!({}));
        accounts.push((account, links, admitted));
    }
    let (semaq, (nats, _dir)) = trusted.servers();
    for addr in [semaq.addr(), nats.addr()] {
        let answers = logins(addr, &accounts.iter().map(|(account, ..)| account).collect::<Vec<_>>());
        for ((line, closed), (_, links, admitted)) in answers.iter().zip(&accounts) {
            let refused = line == "-ERR 'Authorization Violation'" && *closed;
            assert_eq!(refused, !admitted, "{addr}: {links} got {line}");
        }
    }
}

/// A client of each side of an exporter's stream `ticks` and service `help` and of an
/// importer's imports of them.
struct ImportSides {
    addr: std::net::SocketAddr,
    listener: Raw,
    publisher: Raw,
    responder: Raw,
    requester: Raw,
}

impl ImportSides {
    fn open(addr: std::net::SocketAddr, exporter: &KeyPair, importer: &KeyPair) -> Self {
        let mut listener = login(addr, importer, importer, unlimited(), json!({}));
        let mut responder = login(addr, exporter, exporter, unlimited(), json!({}));
        assert_eq!(round(&mut listener, "SUB ticks 1\r\n"), "", "{addr}");
        assert_eq!(round(&mut responder, "SUB help 1\r\n"), "", "{addr}");
        let user = KeyPair::new_user();
        let claims = json!({ "type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1 });
        let jwt = mint(importer, &user.public_key(), claims, json!({}));
        let (mut requester, info) = Raw::connect_with_info(addr);
        let nonce = info["nonce"].as_str().expect("a nonce").to_string();
        let connect = json!({ "jwt": jwt, "sig": sign(&user, &nonce), "verbose": false, "pedantic": false,
                              "headers": true, "no_responders": true });
        assert_eq!(round(&mut requester, &format!("CONNECT {connect}\r\nSUB re.> 9\r\n")), "", "{addr}");
        let publisher = login(addr, exporter, exporter, unlimited(), json!({}));
        Self { addr, listener, publisher, responder, requester }
    }

    /// Publishes a tick and sends a request; returns whether the importer's listener got the
    /// tick, whether the exporter's responder got the request, and what the requester got.
    fn exchange(&mut self) -> (bool, bool, String) {
        // The wait for the expiry may leave a server's keepalive PING unread on any of them.
        let unpinged = |read: String| read.replace("PING\r\n", "");
        let published = unpinged(round(&mut self.publisher, "PUB ticks 1\r\nt\r\n"));
        assert_eq!(published, "", "{}", self.addr);
        let answered = unpinged(round(&mut self.requester, "PUB help re.1 1\r\n?\r\n"));
        let ticked = self.listener.drain(SILENCE).contains("MSG ticks 1 1\r\nt\r\n");
        let asked = self.responder.drain(SILENCE).contains("\r\n?\r\n");
        (ticked, asked, answered + &unpinged(round(&mut self.requester, "")))
    }
}

#[test]
fn imports_end_when_their_activation_expires_while_the_server_runs_as_in_nats_server() {
    let (exporter, importer) = (KeyPair::new_account(), KeyPair::new_account());
    let mut trusted = Trusted::new();
    let exports = json!({ "exports": [
        { "name": "t", "subject": "ticks", "type": "stream", "token_req": true },
        { "name": "h", "subject": "help", "type": "service", "token_req": true },
    ] });
    trusted.add(&exporter, exports, json!({}));
    let expires_at = now() + ACTIVATION_LIFE_SECS;
    let import = |subject: &str, kind: &str| {
        let token = activation(&exporter, &importer, subject, kind, json!({}), json!({ "exp": expires_at }));
        json!({ "name": subject, "subject": subject, "account": exporter.public_key(), "type": kind, "token": token })
    };
    trusted.add(&importer, json!({ "imports": [import("ticks", "stream"), import("help", "service")] }), json!({}));
    let (semaq, (nats, _dir)) = trusted.servers();
    let mut sides = [semaq.addr(), nats.addr()].map(|addr| ImportSides::open(addr, &exporter, &importer));
    for side in &mut sides {
        assert_eq!(side.exchange(), (true, true, String::new()), "{}: in force before", side.addr);
    }
    assert!(now() < expires_at, "the checks meant to run before the expiry ran after it");
    // nats-server's timer counts whole seconds from its check, so it fires within a second after.
    let past = u64::try_from(expires_at + 2 - now()).unwrap_or(0);
    std::thread::sleep(Duration::from_secs(past));
    for side in &mut sides {
        assert_eq!(side.exchange(), (false, false, String::new()), "{}: ended, with no 503 either", side.addr);
    }
}

#[test]
fn a_token_required_service_export_answers_only_importers_with_an_activation() {
    let (exporter, valid, missing) = (KeyPair::new_account(), KeyPair::new_account(), KeyPair::new_account());
    let mut trusted = Trusted::new();
    let export = json!({ "exports": [{ "name": "s", "subject": "help", "type": "service", "token_req": true }] });
    trusted.add(&exporter, export, json!({}));
    for (importer, token) in
        [(&valid, Some(activation(&exporter, &valid, "help", "service", json!({}), json!({})))), (&missing, None)]
    {
        let mut import = json!({ "name": "s", "subject": "help", "account": exporter.public_key(), "type": "service" });
        if let Some(token) = token {
            import["token"] = json!(token);
        }
        trusted.add(importer, json!({ "imports": [import] }), json!({}));
    }
    let (semaq, (nats, _dir)) = trusted.servers();
    for addr in [semaq.addr(), nats.addr()] {
        let mut service = login(addr, &exporter, &exporter, unlimited(), json!({}));
        assert_eq!(round(&mut service, "SUB help 1\r\n"), "", "{addr}");
        let mut asking = login(addr, &valid, &valid, unlimited(), json!({}));
        assert_eq!(round(&mut asking, "PUB help r 1\r\n?\r\n"), "", "{addr}");
        let request = service.read_until("\r\n?\r\n");
        assert!(request.starts_with("MSG help 1 _R_."), "{addr}: {request:?}");
        let mut refused = login(addr, &missing, &missing, unlimited(), json!({}));
        assert_eq!(round(&mut refused, "PUB help r 1\r\n!\r\n"), "", "{addr}");
        assert_eq!(service.drain(SILENCE), "", "{addr}: the import without an activation is not there");
    }
}

#[test]
fn an_export_naming_the_importer_by_subject_token_admits_only_that_importer_as_nats_server_does() {
    let exporter = KeyPair::new_account();
    let (named, impostor, whole) = (KeyPair::new_account(), KeyPair::new_account(), KeyPair::new_account());
    let mut trusted = Trusted::new();
    let export = json!({ "exports": [
        { "name": "d", "subject": "deliver.*.>", "type": "stream", "account_token_position": 2 },
    ] });
    trusted.add(&exporter, export, json!({}));
    let own = format!("deliver.{}.>", named.public_key());
    trusted.add(&named, stream_import(&exporter, &own, None), json!({}));
    trusted.add(&impostor, stream_import(&exporter, &own, None), json!({}));
    trusted.add(&whole, stream_import(&exporter, "deliver.*.>", None), json!({}));
    let (semaq, (nats, _dir)) = trusted.servers();
    let subject = format!("deliver.{}.parcel", named.public_key());
    for addr in [semaq.addr(), nats.addr()] {
        let seen = delivered(addr, &exporter, &[&named, &impostor, &whole], "deliver.>", &subject);
        assert_eq!(seen, [true, false, false], "{addr}");
    }
}

/// Config accounts A (exporting `to.*.>` by account name at token 2) and B importing `to.B.>`;
/// `more` adds to the accounts block.
fn named_by_token_config(export: &str, more: &str) -> String {
    format!(
        "accounts {{\n  A {{ users: [{{user: a, password: a}}], exports: [ {export} ] }}\n  \
         B {{ users: [{{user: b, password: b}}], imports: [ {{stream: {{account: A, subject: \"to.B.>\"}}}} ] }}\n{more}}}\n"
    )
}

/// The first line of what the server printed when `config` stopped it (nats-server's, or
/// SemaQ's stderr), past its position in the file.
fn stopped_by(config: &str, nats: bool) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.conf");
    std::fs::write(&path, config).expect("write config");
    let output = if nats {
        std::process::Command::new("nats-server").arg("-c").arg(&path).output().expect("run nats-server")
    } else {
        SemaqServer::builder().bare().arg("-c").arg(&path).output()
    };
    assert!(!output.status.success(), "the server should not start with {config}");
    let text = String::from_utf8_lossy(&output.stderr).to_string();
    let start = ["Error adding", "unknown field"].iter().find_map(|words| text.find(words));
    let from = &text[start.unwrap_or_else(|| panic!("no error in {text:?}"))..];
    from.lines().next().unwrap_or_default().to_string()
}

#[test]
fn config_exports_name_the_importer_by_token_and_refuse_token_req_as_nats_server_does() {
    let export = "{stream: \"to.*.>\", account_token_position: 2}";
    let config = named_by_token_config(export, "");
    let (semaq, (nats, _dir)) = (SemaqServer::with_config(&config, &[]), nats_server_with(&config));
    for addr in [semaq.addr(), nats.addr()] {
        let mut raw = Raw::connect(addr);
        raw.send(b"CONNECT {\"user\":\"b\",\"pass\":\"b\",\"verbose\":false}\r\nPING\r\n");
        raw.expect("PONG\r\n");
    }
    let impostor =
        "  C { users: [{user: c, password: c}], imports: [ {stream: {account: A, subject: \"to.B.>\"}} ] }\n";
    let cases = [
        named_by_token_config(export, impostor),
        named_by_token_config("{stream: \"to.x.>\", account_token_position: 2}", ""),
        named_by_token_config("{stream: \"to.*.>\", token_req: true}", ""),
    ];
    for config in cases {
        assert_eq!(stopped_by(&config, false), stopped_by(&config, true), "{config}");
    }
}
