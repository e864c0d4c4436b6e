//! Fuzz properties for the registry's inputs: schema texts of every format (random text, random
//! JSON, damaged real schemas), references, compatibility checks, and the payloads validated or
//! decoded against whatever schema got registered.
//!
//! Whatever comes in, the registry answers with a schema id or an error carrying Confluent's
//! `error_code` and a message, never a panic; and it allocates no more than the bytes it holds
//! justify (Avro's item counts are bounded by `bound_avro_allocations`, as the server sets it).

use proptest::prelude::*;
use semaq_registry::types::{Reference, SchemaRequest};
use semaq_registry::{decode, Registry};
use serde_json::Value;

/// The server's bound on one Avro decode (its payload limit); see `decode::bound_avro_allocations`.
const AVRO_ALLOCATION_BYTES_MAX: usize = 1024 * 1024;

const AVRO: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
  {"name":"id","type":"long"},{"name":"tags","type":{"type":"array","items":"string"}},
  {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B"]}},
  {"name":"note","type":["null","string"],"default":null},
  {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
  {"name":"attrs","type":{"type":"map","values":"double"}}]}"#;
const JSON_SCHEMA: &str = r##"{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
  "properties":{"id":{"type":"integer","minimum":0},"name":{"type":"string","pattern":"^[a-z]+$"},
  "tags":{"type":"array","items":{"$ref":"#/definitions/tag"}}},"required":["id"],
  "additionalProperties":false,"definitions":{"tag":{"enum":["x","y"]}}}"##;
const PROTOBUF: &str = r#"syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  repeated string tags = 2;
  oneof pay { string card = 3; bytes token = 4; }
  map<string, double> attrs = 5;
  enum Kind { A = 0; B = 1; }
  Kind kind = 6;
  google.protobuf.Timestamp at = 7;
}"#;

fn config() -> ProptestConfig {
    ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() }
}

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        prop_oneof![
            "[a-z]{0,8}",
            Just("record".to_string()),
            Just("string".to_string()),
            Just("array".to_string()),
            Just("#/definitions/x".to_string()),
            Just("object".to_string()),
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    "[a-z]{1,6}",
                    Just("type".to_string()),
                    Just("fields".to_string()),
                    Just("items".to_string()),
                    Just("properties".to_string()),
                    Just("$ref".to_string()),
                    Just("name".to_string()),
                    Just("symbols".to_string()),
                ],
                inner,
                0..6
            )
            .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// A real schema with a stretch of it replaced by random text.
fn damaged(text: &'static str) -> impl Strategy<Value = String> {
    (0..text.len(), 0usize..12, "[ -~\n]{0,6}").prop_map(move |(start, cut, insert)| {
        let start = text.floor_char_boundary(start);
        let end = text.floor_char_boundary((start + cut).min(text.len()));
        format!("{}{}{}", &text[..start], insert, &text[end..])
    })
}

fn schema_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[{}\\[\\]\":,a-z0-9 ;=]{0,64}",
        json_value().prop_map(|value| value.to_string()),
        damaged(AVRO),
        damaged(JSON_SCHEMA),
        damaged(PROTOBUF),
    ]
}

fn schema_type() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some("AVRO".to_string())),
        Just(Some("JSON".to_string())),
        Just(Some("PROTOBUF".to_string())),
        "[A-Za-z]{0,8}".prop_map(Some),
    ]
}

fn references() -> impl Strategy<Value = Vec<Reference>> {
    prop::collection::vec(
        ("[a-z./]{0,12}", "[a-z-]{0,6}", prop_oneof![Just(-1i64), Just(0), Just(1), any::<i64>()])
            .prop_map(|(name, subject, version)| Reference { name, subject, version }),
        0..3,
    )
}

fn request() -> impl Strategy<Value = SchemaRequest> {
    (schema_text(), schema_type(), references()).prop_map(|(schema, schema_type, references)| SchemaRequest {
        schema,
        schema_type,
        references,
    })
}

/// An error the registry returns is one a client can read: a Confluent code and a message.
fn assert_answerable(error: &semaq_registry::RegistryError) {
    let body = error.to_json();
    assert!(body["error_code"].as_u64().is_some_and(|code| code >= 400), "{body}");
    assert!(body["message"].as_str().is_some_and(|message| !message.is_empty()), "{body}");
    assert!((400..600).contains(&error.http_status()), "{body}");
}

/// A registry holding one schema of each format, so checks and references have something to meet.
fn seeded() -> Registry {
    decode::bound_avro_allocations(AVRO_ALLOCATION_BYTES_MAX);
    let registry = Registry::in_memory();
    for (subject, text, kind) in
        [("avro", AVRO, "AVRO"), ("json", JSON_SCHEMA, "JSON"), ("proto", PROTOBUF, "PROTOBUF")]
    {
        let request =
            SchemaRequest { schema: text.to_string(), schema_type: Some(kind.to_string()), references: vec![] };
        registry.register(subject, &request).unwrap_or_else(|error| panic!("{subject}: {error}"));
    }
    registry
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_schema_registers_or_is_refused_with_a_code(
        request in request(),
        subject in prop_oneof![Just("avro".to_string()), Just("json".to_string()), Just("proto".to_string()), "[a-z.-]{0,10}"],
        selector in prop::option::of(prop_oneof![Just("latest".to_string()), Just("1".to_string()), "[-0-9a-z]{0,5}"]),
    ) {
        let registry = seeded();
        match registry.check(&subject, selector.as_deref(), &request) {
            Ok(_) => {}
            Err(error) => assert_answerable(&error),
        }
        match registry.register(&subject, &request) {
            Ok(id) => {
                // A registered schema is usable: lookups find it and payloads validate against it.
                prop_assert!(registry.parsed(id).is_ok());
                prop_assert!(registry.lookup(&subject, &request, false).is_ok());
            }
            Err(error) => assert_answerable(&error),
        }
    }

    #[test]
    fn any_payload_validates_or_decodes_to_an_answer(
        value in json_value(),
        body in prop::collection::vec(any::<u8>(), 0..64),
        id in 1u32..4,
    ) {
        let registry = seeded();
        let parsed = registry.parsed(id).unwrap();
        let _ = parsed.validate_json(&value);
        let _ = parsed.validate_binary(&body);
        let _ = decode::decode_body(&parsed, id, &body);
        let mut wire = vec![0, 0, 0, 0, u8::try_from(id).unwrap()];
        wire.extend_from_slice(&body);
        let _ = decode::decode(&registry, &wire);
    }
}

/// Avro item counts far beyond the bytes present must not reserve memory for them.
#[test]
fn a_forged_avro_count_is_refused_without_reserving_it() {
    let registry = seeded();
    let parsed = registry.parsed(1).unwrap();
    // id, then `tags` claiming ~2^62 items (zig-zag varint), then nothing.
    let body = [0x02, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
    assert!(decode::decode_body(&parsed, 1, &body).is_err());
    assert!(parsed.validate_binary(&body).is_err());
}

/// `apache-avro` unwraps some name checks while parsing; each such schema must come back as
/// Confluent's invalid-schema error, not a panic, and leave nothing registered.
#[test]
fn avro_names_the_parser_would_panic_on_are_refused_as_invalid_schemas() {
    let registry = seeded();
    for text in [
        r#"{"type":"record","name":"O&%Ifrder","fields":[]}"#,
        r#"{"type":"enum","name":"a b","symbols":["A"]}"#,
        r#"{"type":"fixed","name":"ok","aliases":["not ok"],"size":4}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"f","type":{"type":"record","name":"-x","fields":[]}}]}"#,
    ] {
        let request = SchemaRequest { schema: text.to_string(), schema_type: None, references: vec![] };
        let error = registry.register("names", &request).expect_err(text);
        assert_eq!(error.to_json()["error_code"], 42201, "{text}: {}", error.to_json());
        assert!(registry.lookup("names", &request, false).is_err(), "{text}");
    }
}
