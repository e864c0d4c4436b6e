//! Schema references, modes, normalization and listings, as Confluent Schema Registry
//! defines them.

use serde_json::json;

use super::queries::Deleted;
use super::tests::{avro, json_schema, proto, record};
use super::types::{Reference, RegisterOptions, SchemaRequest};
use super::{Registry, RegistryError};

fn reference(name: &str, subject: &str, version: i64) -> Reference {
    Reference { name: name.into(), subject: subject.into(), version }
}

fn with_references(mut request: SchemaRequest, references: Vec<Reference>) -> SchemaRequest {
    request.references = references;
    request
}

fn address(fields: serde_json::Value) -> SchemaRequest {
    avro(json!({"type": "record", "name": "Address", "namespace": "geo", "fields": fields}))
}

fn customer() -> SchemaRequest {
    let schema = record(json!([{"name": "name", "type": "string"}, {"name": "home", "type": "geo.Address"}]));
    with_references(schema, vec![reference("geo.Address", "address", -1)])
}

const ADDRESS_PROTO: &str = "syntax = \"proto3\";\npackage geo;\nmessage Address { string city = 1; }\n";
const CUSTOMER_PROTO: &str = "syntax = \"proto3\";\npackage shop;\nimport \"geo/address.proto\";\nmessage Customer { string name = 1; geo.Address home = 2; }\n";

#[test]
fn avro_named_types_come_from_referenced_schemas() {
    let registry = Registry::in_memory();
    registry.register("address", &address(json!([{"name": "city", "type": "string"}]))).unwrap();
    assert_eq!(
        registry
            .register("customer", &record(json!([{"name": "home", "type": "geo.Address"}])))
            .unwrap_err()
            .error_code(),
        42201,
        "without the reference the type is unknown"
    );
    let id = registry.register("customer", &customer()).unwrap();
    // -1 was pinned to the version it meant; the version response shows the references.
    let latest = registry.version("customer", "latest", false).unwrap();
    assert_eq!(latest.schema.references, vec![reference("geo.Address", "address", 1)]);
    assert_eq!(latest.to_json()["references"], json!([{"name": "geo.Address", "subject": "address", "version": 1}]));
    let parsed = registry.parsed(id).unwrap();
    assert_eq!(parsed.validate_json(&json!({"name": "n", "home": {"city": "Oslo"}})), Ok(()));
    let refused = parsed.validate_json(&json!({"name": "n", "home": {"city": 7}})).unwrap_err();
    assert_eq!(refused.to_string(), "$.home.city: 7 is not a string");
    // Binary: "n" (length 1), then the Address's "Oslo".
    assert_eq!(parsed.validate_binary(&[2, b'n', 8, b'O', b's', b'l', b'o']), Ok(()));
    assert!(parsed.validate_binary(&[2, b'n', 8, b'O']).is_err());
}

#[test]
fn same_text_and_references_share_an_id_and_different_references_do_not() {
    let registry = Registry::in_memory();
    registry.set_config(None, "NONE").unwrap();
    registry.register("address", &address(json!([{"name": "city", "type": "string"}]))).unwrap();
    let first = registry.register("customer", &customer()).unwrap();
    // The same text, references spelled with the pinned version: the same id, in any subject.
    let pinned = with_references(customer(), vec![reference("geo.Address", "address", 1)]);
    assert_eq!(registry.register("customer-copy", &pinned).unwrap(), first);
    assert_eq!(registry.lookup("customer", &pinned, false).unwrap().id, first);
    // A new Address version: the same text now means something else, so it is another schema.
    registry
        .register(
            "address",
            &address(json!([{"name": "city", "type": "string"},
        {"name": "zip", "type": "string", "default": ""}])),
        )
        .unwrap();
    let second = registry.register("customer", &customer()).unwrap();
    assert_ne!(second, first);
    assert_eq!(registry.version("customer", "latest", false).unwrap().schema.references[0].version, 2);
}

#[test]
fn a_change_in_a_referenced_schema_is_checked_for_compatibility() {
    let registry = Registry::in_memory();
    registry.set_config(Some("address"), "NONE").unwrap();
    registry.register("address", &address(json!([{"name": "city", "type": "string"}]))).unwrap();
    registry.register("customer", &customer()).unwrap();
    // Address v2 drops "city" and adds a required "zip": customers written with v1 cannot be read.
    registry.register("address", &address(json!([{"name": "zip", "type": "string"}]))).unwrap();
    let Err(RegistryError::Incompatible { messages, .. }) = registry.register("customer", &customer()) else {
        panic!("an incompatible referenced type was accepted")
    };
    assert!(messages.iter().any(|m| m.contains("home")), "{messages:?}");
}

#[test]
fn protobuf_imports_resolve_to_referenced_schemas() {
    let registry = Registry::in_memory();
    registry.register("geo-address", &proto(ADDRESS_PROTO)).unwrap();
    assert_eq!(registry.register("customer", &proto(CUSTOMER_PROTO)).unwrap_err().error_code(), 42201);
    let request = with_references(proto(CUSTOMER_PROTO), vec![reference("geo/address.proto", "geo-address", 1)]);
    let id = registry.register("customer", &request).unwrap();
    let parsed = registry.parsed(id).unwrap();
    assert_eq!(parsed.validate_json(&json!({"name": "n", "home": {"city": "Oslo"}})), Ok(()));
    assert_eq!(
        parsed.validate_json(&json!({"home": {"city": 1}})).unwrap_err().to_string(),
        "$.home.city: 1 is not a string"
    );
    // Wire format body: message indexes [] then field 2 (0x12) holding field 1 (0x0a) = "O".
    assert_eq!(parsed.validate_binary(&[0, 0x12, 3, 0x0a, 1, b'O']), Ok(()));
}

#[test]
fn json_schema_refs_reach_referenced_schemas_by_name() {
    let registry = Registry::in_memory();
    let address = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    registry.register("address", &json_schema(address)).unwrap();
    let customer = json!({"type": "object", "properties": {"home": {"$ref": "address.json"}}});
    let request = with_references(json_schema(customer.clone()), vec![reference("address.json", "address", 1)]);
    let id = registry.register("customer", &request).unwrap();
    let parsed = registry.parsed(id).unwrap();
    assert_eq!(parsed.validate_json(&json!({"home": {"city": "Oslo"}})), Ok(()));
    assert!(parsed.validate_json(&json!({"home": {}})).unwrap_err().to_string().starts_with("$.home:"));
    // With an $id, the name resolves against it, as in Confluent.
    let mut based = customer;
    based["$id"] = json!("https://example.com/schemas/customer.json");
    let request = with_references(json_schema(based), vec![reference("address.json", "address", 1)]);
    let id = registry.register("customer-based", &request).unwrap();
    assert!(registry.parsed(id).unwrap().validate_json(&json!({"home": {"city": 3}})).is_err());
}

#[test]
fn bad_references_are_invalid_schemas() {
    let registry = Registry::in_memory();
    registry.register("address", &address(json!([{"name": "city", "type": "string"}]))).unwrap();
    let missing = with_references(customer(), vec![reference("geo.Address", "address", 9)]);
    let error = registry.register("customer", &missing).unwrap_err();
    assert_eq!(error.error_code(), 42201);
    assert!(error.to_string().contains("No schema reference found for subject \"address\" and version 9"), "{error}");
    let nameless = with_references(customer(), vec![reference("", "address", 1)]);
    assert_eq!(registry.register("customer", &nameless).unwrap_err().error_code(), 42201);
    let other_type = with_references(json_schema(json!({"$ref": "a"})), vec![reference("a", "address", 1)]);
    assert_eq!(registry.register("customer", &other_type).unwrap_err().error_code(), 42201);
    // A new schema may not refer to a soft-deleted version.
    registry.delete_version("address", "1", false).unwrap();
    assert_eq!(registry.register("customer", &customer()).unwrap_err().error_code(), 42201);
}

#[test]
fn referenced_versions_cannot_be_deleted_and_are_listed() {
    let registry = Registry::in_memory();
    registry.register("address", &address(json!([{"name": "city", "type": "string"}]))).unwrap();
    let id = registry.register("customer", &customer()).unwrap();
    assert_eq!(registry.referenced_by("address", "1", false).unwrap(), vec![id]);
    assert_eq!(registry.referenced_by("address", "latest", false).unwrap(), vec![id]);
    let refused = registry.delete_version("address", "1", false).unwrap_err();
    assert_eq!(refused.error_code(), 42206);
    assert_eq!(
        refused.to_string(),
        "One or more references exist to the schema {magic=1,keytype=SCHEMA,subject=address,version=1}."
    );
    assert_eq!(registry.delete_subject("address", false).unwrap_err().error_code(), 42206);
    // Once the referrer is soft-deleted, a soft delete goes through; a hard one still may not.
    registry.delete_subject("customer", false).unwrap();
    assert!(registry.referenced_by("address", "1", false).unwrap().is_empty());
    assert_eq!(registry.referenced_by("address", "1", true).unwrap(), vec![id]);
    registry.delete_version("address", "1", false).unwrap();
    assert_eq!(registry.delete_version("address", "1", true).unwrap_err().error_code(), 42206);
    registry.delete_subject("customer", true).unwrap();
    assert_eq!(registry.delete_version("address", "1", true).unwrap(), 1);
}

#[test]
fn a_subject_may_refer_to_its_own_earlier_version_and_still_be_deleted_whole() {
    let registry = Registry::in_memory();
    registry.set_config(None, "NONE").unwrap();
    registry.register("geo", &address(json!([{"name": "city", "type": "string"}]))).unwrap();
    let wrapper = avro(json!({"type": "record", "name": "Wrapper", "namespace": "geo",
        "fields": [{"name": "a", "type": "geo.Address"}]}));
    registry.register("geo", &with_references(wrapper, vec![reference("geo.Address", "geo", 1)])).unwrap();
    assert_eq!(registry.delete_version("geo", "1", false).unwrap_err().error_code(), 42206);
    assert_eq!(registry.delete_subject("geo", false).unwrap(), vec![1, 2]);
    assert_eq!(registry.delete_subject("geo", true).unwrap(), vec![1, 2]);
}

#[test]
fn read_only_modes_refuse_every_change() {
    let registry = Registry::in_memory();
    registry.register("s", &avro(json!("string"))).unwrap();
    assert_eq!(registry.mode(None, false).unwrap().name(), "READWRITE");
    assert_eq!(registry.mode(Some("s"), false).unwrap_err().error_code(), 40409);
    registry.set_mode(Some("s"), "readonly", false).unwrap();
    let refused = registry.register("s", &avro(json!("int"))).unwrap_err();
    assert_eq!(
        (refused.error_code(), refused.to_string()),
        (42205, "Subject s in context . is in read-only mode".into())
    );
    assert_eq!(registry.delete_subject("s", false).unwrap_err().error_code(), 42205);
    assert_eq!(registry.delete_version("s", "1", false).unwrap_err().error_code(), 42205);
    assert_eq!(registry.set_config(Some("s"), "NONE").unwrap_err().error_code(), 42205);
    assert_eq!(registry.register("t", &avro(json!("int"))).map(|_| ()), Ok(()), "other subjects stay writable");
    assert_eq!(registry.delete_mode(Some("s")).unwrap().name(), "READONLY");
    assert_eq!(registry.delete_mode(Some("s")).unwrap_err().error_code(), 40401);
    // A global READONLY_OVERRIDE wins over a subject's own READWRITE.
    registry.set_mode(Some("s"), "READWRITE", false).unwrap();
    registry.set_mode(None, "READONLY_OVERRIDE", false).unwrap();
    assert_eq!(registry.mode(Some("s"), true).unwrap().name(), "READONLY_OVERRIDE");
    assert_eq!(registry.register("s", &avro(json!("int"))).unwrap_err().error_code(), 42205);
    assert_eq!(registry.set_mode(None, "SIDEWAYS", false).unwrap_err().error_code(), 42204);
    assert_eq!(registry.delete_mode(None).unwrap().name(), "READONLY_OVERRIDE");
    assert_eq!(registry.mode(Some("s"), true).unwrap().name(), "READWRITE");
}

#[test]
fn import_mode_keeps_ids_and_versions() {
    let registry = Registry::in_memory();
    registry.register("s", &avro(json!("string"))).unwrap();
    let refused = registry.set_mode(None, "IMPORT", false).unwrap_err();
    assert_eq!(
        (refused.error_code(), refused.to_string()),
        (42205, "Cannot import since found existing subjects".into())
    );
    registry.set_mode(Some("imported"), "IMPORT", false).unwrap();
    let at = |id, version| RegisterOptions { normalize: false, id: Some(id), version };
    assert_eq!(registry.register_with("imported", &avro(json!("int")), at(100, Some(5))).unwrap(), 100);
    assert_eq!(registry.version("imported", "5", false).unwrap().id, 100);
    // No id in IMPORT mode, or an id outside it, is refused; so is reusing an id for other text.
    assert_eq!(registry.register("imported", &avro(json!("long"))).unwrap_err().error_code(), 42205);
    assert_eq!(registry.register_with("s", &avro(json!("long")), at(7, None)).unwrap_err().error_code(), 42205);
    assert_eq!(
        registry.register_with("imported", &avro(json!("long")), at(100, None)).unwrap_err().error_code(),
        42205
    );
    // Back in READWRITE, new ids come after the imported ones and versions go on from 5.
    registry.set_mode(Some("imported"), "READWRITE", false).unwrap();
    registry.set_config(Some("imported"), "NONE").unwrap();
    assert_eq!(registry.register("imported", &avro(json!("long"))).unwrap(), 101);
    assert_eq!(registry.versions("imported", false).unwrap(), vec![5, 6]);
}

#[test]
fn normalize_makes_equivalent_texts_one_schema() {
    let registry = Registry::in_memory();
    let normalized = RegisterOptions { normalize: true, ..RegisterOptions::default() };
    let short = record(json!([{"name": "a", "type": "string"}]));
    let long = record(json!([{"name": "a", "type": {"type": "string"}}]));
    let id = registry.register_with("s", &short, normalized).unwrap();
    assert_eq!(registry.register_with("s", &long, normalized).unwrap(), id);
    assert_eq!(registry.lookup_with("s", &long, false, true).unwrap().id, id);
    assert!(registry.lookup("s", &long, false).is_err(), "without normalize the texts differ");
    let spaced = "syntax = \"proto3\";\n// an event\nmessage E {\n  string a = 1;   /* why */\n}\n";
    let tight = "syntax = \"proto3\"; message E { string a = 1; }";
    let first = registry.register_with("p", &proto(spaced), normalized).unwrap();
    assert_eq!(registry.register_with("p", &proto(tight), normalized).unwrap(), first);
    assert_eq!(registry.schema_by_id(first).unwrap().schema, "syntax = \"proto3\";\nmessage E {\nstring a = 1;\n}");
}

#[test]
fn listings_filter_by_prefix_and_deletion() {
    let registry = Registry::in_memory();
    registry.set_config(None, "NONE").unwrap();
    for subject in ["orders-value", "orders-key", "users-value"] {
        registry.register(subject, &avro(json!("string"))).unwrap();
    }
    registry.register("orders-value", &avro(json!("int"))).unwrap();
    registry.delete_subject("users-value", false).unwrap();
    registry.delete_version("orders-value", "1", false).unwrap();
    assert_eq!(registry.list_subjects("orders", Deleted::Exclude), vec!["orders-key", "orders-value"]);
    assert_eq!(registry.list_subjects("", Deleted::Only), vec!["users-value"]);
    assert_eq!(registry.list_subjects("", Deleted::Include).len(), 3);
    assert_eq!(registry.list_versions("orders-value", Deleted::Only).unwrap(), vec![1]);
    let versions = |listed: Vec<super::types::VersionInfo>| -> Vec<(String, u32)> {
        listed.into_iter().map(|v| (v.subject, v.version)).collect()
    };
    assert_eq!(
        versions(registry.schemas("orders", false, false)),
        vec![("orders-key".into(), 1), ("orders-value".into(), 2)]
    );
    assert_eq!(
        versions(registry.schemas("orders-v", true, false)),
        vec![("orders-value".into(), 1), ("orders-value".into(), 2)]
    );
    assert_eq!(versions(registry.schemas("", true, true)).len(), 3);
    let id = registry.version("orders-key", "1", false).unwrap().id;
    assert_eq!(registry.uses_of_with(id, true).unwrap().len(), 3, "the same text shares its id everywhere");
    assert_eq!(registry.uses_of(id).unwrap(), vec![("orders-key".into(), 1)]);
}

#[test]
fn references_modes_and_ids_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry");
    let id = {
        let registry = Registry::open(path.clone()).unwrap();
        registry.register("address", &address(json!([{"name": "city", "type": "string"}]))).unwrap();
        registry.set_mode(Some("address"), "READONLY", false).unwrap();
        registry.register("customer", &customer()).unwrap()
    };
    let registry = Registry::open(path).unwrap();
    assert_eq!(registry.mode(Some("address"), false).unwrap().name(), "READONLY");
    assert_eq!(registry.register("customer", &customer()).unwrap(), id, "the id index is rebuilt");
    assert!(registry.parsed(id).unwrap().validate_json(&json!({"name": "n", "home": {"city": "x"}})).is_ok());
}
