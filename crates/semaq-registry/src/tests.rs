//! The registry's rules, as Confluent Schema Registry defines them.

use serde_json::json;

use super::types::SchemaRequest;
use super::{Registry, RegistryError};

pub(super) fn avro(text: serde_json::Value) -> SchemaRequest {
    SchemaRequest { schema: text.to_string(), schema_type: None, references: vec![] }
}

pub(super) fn json_schema(text: serde_json::Value) -> SchemaRequest {
    SchemaRequest { schema: text.to_string(), schema_type: Some("JSON".into()), references: vec![] }
}

pub(super) fn proto(text: &str) -> SchemaRequest {
    SchemaRequest { schema: text.to_string(), schema_type: Some("PROTOBUF".into()), references: vec![] }
}

pub(super) fn event_proto(fields: &str) -> SchemaRequest {
    proto(&format!("syntax = \"proto3\";\npackage ai;\nmessage Event {{\n{fields}\n}}\n"))
}

pub(super) fn record(fields: serde_json::Value) -> SchemaRequest {
    avro(json!({"type": "record", "name": "Event", "namespace": "ai", "fields": fields}))
}

fn object(properties: serde_json::Value, required: &[&str], closed: bool) -> SchemaRequest {
    let mut schema = json!({"type": "object", "properties": properties, "required": required});
    if closed {
        schema["additionalProperties"] = json!(false);
    }
    json_schema(schema)
}

/// Registers `history` with no check, sets `mode`, then tries `candidate`.
pub(super) fn try_after(
    history: &[SchemaRequest],
    mode: &str,
    candidate: &SchemaRequest,
) -> Result<u32, RegistryError> {
    let registry = Registry::in_memory();
    registry.set_config(Some("s"), "NONE").unwrap();
    for schema in history {
        registry.register("s", schema).unwrap();
    }
    registry.set_config(Some("s"), mode).unwrap();
    registry.register("s", candidate)
}

fn verdicts(history: &[SchemaRequest], candidate: &SchemaRequest) -> Vec<(&'static str, bool)> {
    const MODES: [&str; 7] =
        ["BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE"];
    MODES.iter().map(|mode| (*mode, try_after(history, mode, candidate).is_ok())).collect()
}

pub(super) fn expect(history: &[SchemaRequest], candidate: &SchemaRequest, accepted: [bool; 7]) {
    let got = verdicts(history, candidate);
    let want: Vec<(&str, bool)> = got.iter().map(|(m, _)| *m).zip(accepted).collect();
    assert_eq!(got, want, "candidate {}", candidate.schema);
}

//                                  B      BT     F      FT     FULL   FULLT  NONE
pub(super) const ALL: [bool; 7] = [true, true, true, true, true, true, true];

#[test]
fn avro_adding_a_field_with_a_default_is_compatible_in_every_mode() {
    let v1 = record(json!([{"name": "a", "type": "string"}]));
    let v2 = record(json!([{"name": "a", "type": "string"}, {"name": "b", "type": "int", "default": 0}]));
    expect(&[v1], &v2, ALL);
}

#[test]
fn avro_adding_a_field_without_default_is_forward_only() {
    let v1 = record(json!([{"name": "a", "type": "string"}]));
    let v2 = record(json!([{"name": "a", "type": "string"}, {"name": "b", "type": "int"}]));
    expect(&[v1], &v2, [false, false, true, true, false, false, true]);
}

#[test]
fn avro_removing_a_field_without_default_is_backward_only() {
    let v1 = record(json!([{"name": "a", "type": "string"}, {"name": "b", "type": "int"}]));
    let v2 = record(json!([{"name": "a", "type": "string"}]));
    expect(&[v1], &v2, [true, true, false, false, false, false, true]);
}

#[test]
fn avro_type_promotion_int_to_long_is_backward_only() {
    let v1 = record(json!([{"name": "n", "type": "int"}]));
    let v2 = record(json!([{"name": "n", "type": "long"}]));
    expect(&[v1], &v2, [true, true, false, false, false, false, true]);
}

#[test]
fn avro_transitive_modes_check_every_earlier_version() {
    // v2 gave b a default; v3 drops the default again: v3 reads v2 data, not v1 data.
    let v1 = record(json!([{"name": "a", "type": "string"}]));
    let v2 = record(json!([{"name": "a", "type": "string"}, {"name": "b", "type": "int", "default": 0}]));
    let v3 = record(json!([{"name": "a", "type": "string"}, {"name": "b", "type": "int"}]));
    expect(&[v1, v2], &v3, [true, false, true, true, true, false, true]);
}

#[test]
fn avro_forward_transitive_checks_every_earlier_reader() {
    let v1 = record(json!([{"name": "a", "type": "string"}, {"name": "c", "type": "string"}]));
    let v2 = record(json!([{"name": "a", "type": "string"}, {"name": "c", "type": "string", "default": ""}]));
    let v3 = record(json!([{"name": "a", "type": "string"}]));
    expect(&[v1, v2], &v3, [true, true, true, false, true, false, true]);
}

#[test]
fn avro_every_incompatibility_is_listed() {
    let v1 = record(json!([{"name": "a", "type": "string"}]));
    let v2 =
        record(json!([{"name": "a", "type": "int"}, {"name": "b", "type": "int"}, {"name": "c", "type": "string"}]));
    let Err(RegistryError::Incompatible { messages, .. }) = try_after(&[v1], "BACKWARD", &v2) else { panic!() };
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert!(messages.iter().any(|m| m.contains("'a'")) && messages.iter().any(|m| m.contains("'c'")), "{messages:?}");
}

#[test]
fn json_optional_property_added_to_an_open_model_is_forward_only() {
    let v1 = object(json!({"a": {"type": "string"}}), &[], false);
    let v2 = object(json!({"a": {"type": "string"}, "b": {"type": "integer"}}), &[], false);
    expect(&[v1], &v2, [false, false, true, true, false, false, true]);
}

#[test]
fn json_optional_property_added_to_a_closed_model_is_backward_only() {
    let v1 = object(json!({"a": {"type": "string"}}), &[], true);
    let v2 = object(json!({"a": {"type": "string"}, "b": {"type": "integer"}}), &[], true);
    expect(&[v1], &v2, [true, true, false, false, false, false, true]);
}

#[test]
fn json_a_new_required_property_is_not_backward() {
    let v1 = object(json!({"a": {"type": "string"}, "b": {"type": "string"}}), &[], true);
    let v2 = object(json!({"a": {"type": "string"}, "b": {"type": "string"}}), &["b"], true);
    expect(&[v1], &v2, [false, false, true, true, false, false, true]);
}

#[test]
fn json_type_narrowing_and_widening() {
    let number = object(json!({"n": {"type": "number"}}), &[], true);
    let integer = object(json!({"n": {"type": "integer"}}), &[], true);
    expect(std::slice::from_ref(&number), &integer, [false, false, true, true, false, false, true]);
    expect(&[integer], &number, [true, true, false, false, false, false, true]);
}

#[test]
fn json_transitive_modes_check_every_earlier_version() {
    // v1 allowed strings, v2 (registered under NONE) only integers; v3 = integers or numbers.
    let v1 = object(json!({"n": {"type": "string"}}), &[], true);
    let v2 = object(json!({"n": {"type": "integer"}}), &[], true);
    let v3 = object(json!({"n": {"type": "number"}}), &[], true);
    expect(&[v1, v2], &v3, [true, false, false, false, false, false, true]);
}

#[test]
fn json_every_incompatibility_is_listed() {
    let v1 = object(json!({"a": {"type": "string"}, "b": {"type": "string"}}), &[], true);
    let v2 = object(json!({"a": {"type": "integer"}, "b": {"type": "string"}}), &["a", "b"], true);
    let Err(RegistryError::Incompatible { messages, .. }) = try_after(&[v1], "BACKWARD", &v2) else { panic!() };
    assert_eq!(messages.len(), 3, "{messages:?}");
}

#[test]
fn the_same_schema_gets_the_same_id_everywhere_and_no_new_version() {
    let registry = Registry::in_memory();
    let schema = record(json!([{"name": "a", "type": "string"}]));
    let first = registry.register("one", &schema).unwrap();
    assert_eq!(registry.register("one", &schema).unwrap(), first);
    assert_eq!(registry.versions("one", false).unwrap(), vec![1]);
    // Whitespace and key order do not matter.
    let spaced = SchemaRequest { schema: format!("  {}\n", schema.schema), ..schema.clone() };
    assert_eq!(registry.register("two", &spaced).unwrap(), first);
    assert_eq!(registry.uses_of(first).unwrap(), vec![("one".into(), 1), ("two".into(), 1)]);
}

#[test]
fn soft_delete_hides_and_hard_delete_needs_a_soft_delete_first() {
    let registry = Registry::in_memory();
    registry.register("s", &record(json!([{"name": "a", "type": "string"}]))).unwrap();
    assert_eq!(registry.delete_subject("s", true), Err(RegistryError::SubjectNotSoftDeleted("s".into())));
    assert_eq!(registry.delete_subject("s", false).unwrap(), vec![1]);
    assert!(registry.subjects(false).is_empty());
    assert_eq!(registry.subjects(true), vec!["s".to_string()]);
    assert!(matches!(registry.version("s", "1", false), Err(RegistryError::SubjectNotFound(_))));
    assert_eq!(registry.version("s", "1", true).unwrap().version, 1);
    assert_eq!(registry.delete_subject("s", true).unwrap(), vec![1]);
    assert!(registry.subjects(true).is_empty());
}

#[test]
fn version_selectors_and_their_errors() {
    let registry = Registry::in_memory();
    registry.set_config(None, "NONE").unwrap();
    registry.register("s", &avro(json!("string"))).unwrap();
    registry.register("s", &avro(json!("int"))).unwrap();
    assert_eq!(registry.version("s", "latest", false).unwrap().version, 2);
    assert_eq!(registry.version("s", "-1", false).unwrap().version, 2);
    assert_eq!(registry.version("s", "3", false).unwrap_err().error_code(), 40402);
    assert_eq!(registry.version("s", "zero", false).unwrap_err().error_code(), 42202);
    assert_eq!(registry.version("nope", "1", false).unwrap_err().error_code(), 40401);
    assert_eq!(registry.delete_version("s", "2", false).unwrap(), 2);
    assert_eq!(registry.version("s", "latest", false).unwrap().version, 1);
    // Numbering goes on past deleted versions.
    registry.register("s", &avro(json!("long"))).unwrap();
    assert_eq!(registry.versions("s", true).unwrap(), vec![1, 2, 3]);
}

#[test]
fn invalid_schemas_and_levels_are_refused_with_confluent_codes() {
    let registry = Registry::in_memory();
    assert_eq!(registry.register("s", &avro(json!({"type": "record"}))).unwrap_err().error_code(), 42201);
    assert_eq!(registry.register("s", &json_schema(json!({"type": 12}))).unwrap_err().error_code(), 42201);
    let protobuf = SchemaRequest {
        schema: "syntax = \"proto3\";".into(),
        schema_type: Some("PROTOBUF".into()),
        references: vec![],
    };
    assert_eq!(registry.register("s", &protobuf).unwrap_err().error_code(), 42201);
    assert_eq!(registry.set_config(None, "SIDEWAYS").unwrap_err().error_code(), 42203);
    assert_eq!(registry.schema_by_id(99).unwrap_err().error_code(), 40403);
}

#[test]
fn subject_level_config_overrides_the_global_one() {
    let registry = Registry::in_memory();
    assert_eq!(registry.config(None, false).unwrap().name(), "BACKWARD");
    registry.set_config(None, "full").unwrap();
    assert_eq!(registry.config(Some("s"), true).unwrap().name(), "FULL");
    assert_eq!(registry.config(Some("s"), false).unwrap_err().error_code(), 40408);
    registry.set_config(Some("s"), "NONE").unwrap();
    assert_eq!(registry.config(Some("s"), false).unwrap().name(), "NONE");
    assert_eq!(registry.delete_config(Some("s")).unwrap().name(), "NONE");
    assert_eq!(registry.config(Some("s"), true).unwrap().name(), "FULL");
}

#[test]
fn lookup_finds_the_version_holding_a_schema() {
    let registry = Registry::in_memory();
    let schema = record(json!([{"name": "a", "type": "string"}]));
    let id = registry.register("s", &schema).unwrap();
    let found = registry.lookup("s", &schema, false).unwrap();
    assert_eq!((found.id, found.version), (id, 1));
    assert_eq!(registry.lookup("s", &avro(json!("int")), false).unwrap_err().error_code(), 40403);
    assert_eq!(registry.lookup("t", &schema, false).unwrap_err().error_code(), 40401);
}

#[test]
fn the_registry_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry");
    let id = {
        let registry = Registry::open(path.clone()).unwrap();
        registry.set_config(Some("s"), "FULL").unwrap();
        registry.register("s", &record(json!([{"name": "a", "type": "string"}]))).unwrap()
    };
    let registry = Registry::open(path).unwrap();
    assert_eq!(registry.version("s", "latest", false).unwrap().id, id);
    assert_eq!(registry.config(Some("s"), false).unwrap().name(), "FULL");
    assert_eq!(registry.register("t", &avro(json!("int"))).unwrap(), id + 1);
}

fn violation(schema: &SchemaRequest, payload: serde_json::Value) -> Option<String> {
    let registry = Registry::in_memory();
    let id = registry.register("s", schema).unwrap();
    registry.parsed(id).unwrap().validate_json(&payload).err().map(|v| v.to_string())
}

#[test]
fn avro_json_payloads_are_checked_with_a_json_path() {
    let schema = record(json!([
        {"name": "model_id", "type": "string"},
        {"name": "confidence", "type": "double"},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
        {"name": "note", "type": ["null", "string"], "default": null},
    ]));
    let good = json!({"model_id": "m", "confidence": 0.5, "tags": ["x"], "note": {"string": "n"}});
    assert_eq!(violation(&schema, good), None);
    assert_eq!(violation(&schema, json!({"model_id": "m", "confidence": 0.5, "note": "bare"})), None);
    assert_eq!(
        violation(&schema, json!({"model_id": "m", "confidence": "high"})).as_deref(),
        Some("$.confidence: \"high\" is not a number")
    );
    assert_eq!(
        violation(&schema, json!({"model_id": "m", "confidence": 1, "tags": ["a", 2]})).as_deref(),
        Some("$.tags[1]: 2 is not a string")
    );
    assert!(violation(&schema, json!({"confidence": 1.0}))
        .unwrap()
        .starts_with("$.model_id: required field is missing"));
    assert!(violation(&schema, json!({"model_id": "m", "confidence": 1, "x": 1}))
        .unwrap()
        .starts_with("$.x: is not a field"));
}

#[test]
fn json_schema_payloads_are_checked_with_a_json_path() {
    let schema = object(
        json!({"confidence": {"type": "number"}, "items": {"type": "array", "items": {"type": "integer"}}}),
        &["confidence"],
        false,
    );
    assert_eq!(violation(&schema, json!({"confidence": 0.9})), None);
    let refused = violation(&schema, json!({"confidence": "high"})).unwrap();
    assert!(refused.starts_with("$.confidence: \"high\" is not of type \"number\""), "{refused}");
    let refused = violation(&schema, json!({"confidence": 1, "items": [1, "x"]})).unwrap();
    assert!(refused.starts_with("$.items[1]:"), "{refused}");
}

#[test]
fn avro_binary_datums_must_decode_exactly() {
    let registry = Registry::in_memory();
    let id = registry
        .register("s", &record(json!([{"name": "n", "type": "long"}, {"name": "s", "type": "string"}])))
        .unwrap();
    let parsed = registry.parsed(id).unwrap();
    // zigzag(3) = 6; string "hi" = length zigzag(2) = 4, then the bytes.
    assert_eq!(parsed.validate_binary(&[6, 4, b'h', b'i']), Ok(()));
    assert!(parsed.validate_binary(&[6, 4, b'h']).is_err());
    assert!(parsed.validate_binary(&[6, 4, b'h', b'i', 0]).unwrap_err().message.contains("left over"));
}

#[test]
fn protobuf_adding_a_field_or_widening_within_a_wire_type_is_compatible() {
    let v1 = event_proto("string model_id = 1; int32 tokens = 2;");
    expect(
        std::slice::from_ref(&v1),
        &event_proto("string model_id = 1; int32 tokens = 2; double confidence = 3;"),
        ALL,
    );
    expect(&[v1], &event_proto("string model_id = 1; int64 tokens = 2;"), ALL);
}

#[test]
fn protobuf_changing_a_fields_wire_type_is_incompatible_both_ways() {
    let v1 = event_proto("string model_id = 1; double confidence = 2;");
    let v2 = event_proto("string model_id = 1; string confidence = 2;");
    expect(&[v1], &v2, [false, false, false, false, false, false, true]);
}

#[test]
fn protobuf_removing_a_message_is_not_backward() {
    let v1 = proto("syntax = \"proto3\";\nmessage A { string a = 1; }\nmessage B { string b = 1; }");
    let v2 = proto("syntax = \"proto3\";\nmessage A { string a = 1; }");
    expect(&[v1], &v2, [false, false, true, true, false, false, true]);
}

#[test]
fn protobuf_moving_fields_into_a_new_oneof_is_not_backward() {
    let v1 = event_proto("string a = 1; string b = 2;");
    let v2 = event_proto("oneof choice { string a = 1; string b = 2; }");
    expect(&[v1], &v2, [false, false, true, true, false, false, true]);
}

#[test]
fn protobuf_transitive_modes_check_every_earlier_version() {
    let v1 = event_proto("double confidence = 2;");
    let v2 = event_proto("string confidence = 2;");
    let v3 = event_proto("string confidence = 2; int32 tokens = 3;");
    expect(&[v1, v2], &v3, [true, false, true, false, true, false, true]);
}

#[test]
fn protobuf_payloads_are_checked_as_json_and_as_binary() {
    let schema = event_proto("string model_id = 1; double confidence = 2; repeated int32 tokens = 3; Kind kind = 4;\nenum Kind { TEXT = 0; IMAGE = 1; }");
    assert_eq!(
        violation(&schema, json!({"modelId": "m", "confidence": 0.5, "tokens": [1, "2"], "kind": "IMAGE"})),
        None
    );
    assert_eq!(
        violation(&schema, json!({"model_id": "m", "confidence": "high"})).as_deref(),
        Some("$.confidence: \"high\" is not a number")
    );
    assert_eq!(violation(&schema, json!({"tokens": [1, 2.5]})).as_deref(), Some("$.tokens[1]: 2.5 is not an int32"));
    assert!(violation(&schema, json!({"kind": "VIDEO"})).unwrap().starts_with("$.kind:"));
    assert!(violation(&schema, json!({"nope": 1})).unwrap().starts_with("$.nope: is not a field"));
    let registry = Registry::in_memory();
    let id = registry.register("s", &schema).unwrap();
    let parsed = registry.parsed(id).unwrap();
    // Message indexes [] (the first message), then field 1 (tag 0x0a) = "hi", field 2 (0x11) = 8 bytes.
    let mut binary = vec![0, 0x0a, 2, b'h', b'i', 0x11];
    binary.extend_from_slice(&0.5f64.to_le_bytes());
    assert_eq!(parsed.validate_binary(&binary), Ok(()));
    assert!(parsed.validate_binary(&binary[..binary.len() - 3]).is_err());
    assert!(parsed.validate_binary(&[2, 2, 0x0a]).unwrap_err().message.contains("no message at indexes"));
}

/// The registry file goes through the store's I/O seam: on a simulated disk, a write that
/// fails (fsync EIO, a full disk) is refused with 50001 and changes nothing, in memory or on
/// disk; power lost after a registration keeps it; service resumes once the disk does.
#[test]
fn a_registry_write_that_fails_keeps_the_old_state() {
    use semaq_store::storage::sim::{SimDisk, Tear};
    let disk = SimDisk::new();
    let dir = std::path::PathBuf::from("/registry");
    let registry = Registry::open_on(dir.clone(), disk.shared()).unwrap();
    let first = registry.register("orders", &record(json!([{"name": "id", "type": "long"}]))).unwrap();
    let second =
        record(json!([{"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": null}]));

    disk.fail_syncs(true);
    let refused = registry.register("orders", &second).unwrap_err();
    assert!(matches!(refused, RegistryError::Storage(_)) && refused.error_code() == 50001, "{refused:?}");
    disk.fail_syncs(false);
    disk.set_free_bytes(Some(16));
    let refused = registry.register("payments", &second).unwrap_err();
    assert_eq!(refused.error_code(), 50001, "{refused:?}");
    disk.set_free_bytes(None);
    assert_eq!(registry.subjects(false), vec!["orders".to_string()]);
    assert_eq!(registry.versions("orders", false).unwrap(), vec![1]);

    disk.crash(Tear::Sectors { seed: 7 });
    let reopened = Registry::open_on(dir.clone(), disk.shared()).unwrap();
    assert_eq!(reopened.subjects(false), vec!["orders".to_string()], "the confirmed registration survives");
    assert_eq!(reopened.schema_by_id(first).unwrap().schema, registry.schema_by_id(first).unwrap().schema);
    assert_eq!(reopened.register("orders", &second).unwrap(), first + 1, "writes resume");
    drop(reopened);
    disk.crash(Tear::LoseUnsynced);
    let reopened = Registry::open_on(dir, disk.shared()).unwrap();
    assert_eq!(reopened.versions("orders", false).unwrap(), vec![1, 2]);
}
