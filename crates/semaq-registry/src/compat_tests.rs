//! The compatibility matrix beyond record fields and properties: JSON Schema keywords,
//! combinators and `$ref`s, Protobuf enums, labels and maps. Each case registers the history
//! under NONE, switches the subject to each mode, and tries the candidate; the expected
//! verdicts are in the order below. "Narrowing is backward-incompatible, widening is
//! forward-incompatible": a reader (new schema, for BACKWARD) must accept what the writer did.

use serde_json::json;

use super::tests::{event_proto, expect, json_schema, try_after, ALL};
use super::RegistryError;

//                                          B      BT     F      FT     FULL   FULLT  NONE
const BACKWARD_ONLY: [bool; 7] = [true, true, false, false, false, false, true];
const FORWARD_ONLY: [bool; 7] = [false, false, true, true, false, false, true];
const NEITHER: [bool; 7] = [false, false, false, false, false, false, true];

fn string(extra: serde_json::Value) -> super::types::SchemaRequest {
    let mut schema = json!({"type": "string"});
    schema.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    json_schema(schema)
}

#[test]
fn json_enum_values_added_are_backward_and_removed_are_forward() {
    let ab = json_schema(json!({"enum": ["a", "b"]}));
    let abc = json_schema(json!({"enum": ["a", "b", "c"]}));
    expect(std::slice::from_ref(&ab), &abc, BACKWARD_ONLY);
    expect(std::slice::from_ref(&abc), &ab, FORWARD_ONLY);
    // A const is a one-value enum; a type that covers every listed value accepts them.
    expect(&[json_schema(json!({"const": "a"}))], &ab, BACKWARD_ONLY);
    expect(std::slice::from_ref(&ab), &json_schema(json!({"type": "string"})), BACKWARD_ONLY);
}

#[test]
fn json_pattern_added_narrows_and_changed_breaks_both_ways() {
    let plain = string(json!({}));
    let starts_a = string(json!({"pattern": "^a"}));
    expect(std::slice::from_ref(&plain), &starts_a, FORWARD_ONLY);
    expect(std::slice::from_ref(&starts_a), &plain, BACKWARD_ONLY);
    expect(&[starts_a], &string(json!({"pattern": "^b"})), NEITHER);
}

#[test]
fn json_string_number_and_array_bounds_follow_their_direction() {
    // (old, new, verdicts): raising a maximum or lowering a minimum widens; adding one narrows.
    let cases = [
        (string(json!({"maxLength": 10})), string(json!({"maxLength": 20})), BACKWARD_ONLY),
        (string(json!({"maxLength": 20})), string(json!({"maxLength": 10})), FORWARD_ONLY),
        (string(json!({"minLength": 2})), string(json!({"minLength": 1})), BACKWARD_ONLY),
        (string(json!({})), string(json!({"minLength": 1})), FORWARD_ONLY),
        (json_schema(json!({"type": "number", "minimum": 0})), json_schema(json!({"type": "number"})), BACKWARD_ONLY),
        (
            json_schema(json!({"type": "number", "maximum": 1})),
            json_schema(json!({"type": "number", "maximum": 0.5})),
            FORWARD_ONLY,
        ),
        (
            json_schema(json!({"type": "number", "exclusiveMinimum": 0})),
            json_schema(json!({"type": "number", "exclusiveMinimum": 1})),
            FORWARD_ONLY,
        ),
        (
            json_schema(json!({"type": "array", "minItems": 2})),
            json_schema(json!({"type": "array", "minItems": 1})),
            BACKWARD_ONLY,
        ),
        (json_schema(json!({"type": "array"})), json_schema(json!({"type": "array", "maxItems": 5})), FORWARD_ONLY),
        (
            json_schema(json!({"type": "array"})),
            json_schema(json!({"type": "array", "uniqueItems": true})),
            FORWARD_ONLY,
        ),
        (
            json_schema(json!({"type": "integer", "multipleOf": 2})),
            json_schema(json!({"type": "integer", "multipleOf": 4})),
            FORWARD_ONLY,
        ),
    ];
    for (old, new, verdicts) in cases {
        expect(&[old], &new, verdicts);
    }
}

#[test]
fn json_array_items_are_compared_position_by_position() {
    let pair = json_schema(json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}));
    let wider = json_schema(json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}]}));
    expect(std::slice::from_ref(&pair), &wider, BACKWARD_ONLY);
    let strings = json_schema(json!({"type": "array", "items": {"type": "string"}}));
    expect(&[strings], &json_schema(json!({"type": "array", "items": {"type": "integer"}})), NEITHER);
}

#[test]
fn json_a_new_required_property_with_a_default_is_compatible() {
    let v1 = json_schema(json!({"type": "object", "properties": {"a": {"type": "string"}}}));
    let v2 = json_schema(json!({"type": "object", "properties": {"a": {"type": "string", "default": "x"}},
        "required": ["a"]}));
    expect(&[v1], &v2, ALL);
}

#[test]
fn json_one_of_extended_is_backward_and_narrowed_is_forward() {
    let two = json_schema(json!({"oneOf": [{"type": "string"}, {"type": "integer"}]}));
    let three = json_schema(json!({"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}]}));
    expect(std::slice::from_ref(&two), &three, BACKWARD_ONLY);
    expect(&[three], &two, FORWARD_ONLY);
}

#[test]
fn json_a_type_becoming_one_branch_of_any_of_is_backward() {
    let string = json_schema(json!({"type": "string"}));
    let either = json_schema(json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}));
    expect(std::slice::from_ref(&string), &either, BACKWARD_ONLY);
    expect(&[either], &string, FORWARD_ONLY);
}

#[test]
fn json_all_of_branches_added_narrow() {
    let one = json_schema(json!({"allOf": [{"type": "object"}]}));
    let two = json_schema(json!({"allOf": [{"type": "object"}, {"required": ["id"]}]}));
    expect(&[one], &two, FORWARD_ONLY);
}

#[test]
fn json_one_of_becoming_any_of_widens_and_back_breaks() {
    let one_of = json_schema(json!({"oneOf": [{"type": "string"}, {"type": "integer"}]}));
    let any_of = json_schema(json!({"anyOf": [{"type": "string"}, {"type": "integer"}]}));
    expect(std::slice::from_ref(&one_of), &any_of, BACKWARD_ONLY);
    let Err(RegistryError::Incompatible { messages, .. }) = try_after(&[any_of], "BACKWARD", &one_of) else {
        panic!("anyOf → oneOf was accepted")
    };
    assert!(messages.iter().any(|m| m.contains("COMBINED_TYPE_CHANGED")), "{messages:?}");
}

#[test]
fn json_combinators_mixed_with_keywords_are_compared_branch_by_branch() {
    let v1 = json_schema(json!({"type": "object", "properties": {"id": {"type": "string"}},
        "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}));
    let v2 = json_schema(json!({"type": "object", "properties": {"id": {"type": "string"}},
        "anyOf": [{"required": ["a"]}, {"required": ["b"]}, {"required": ["c"]}]}));
    expect(std::slice::from_ref(&v1), &v2, BACKWARD_ONLY);
    expect(&[v2], &v1, FORWARD_ONLY);
}

#[test]
fn json_refs_are_followed_to_what_they_point_at() {
    let with = |kind: &str| {
        json_schema(json!({"type": "object", "definitions": {"n": {"type": kind}},
            "properties": {"a": {"$ref": "#/definitions/n"}, "b": {"$ref": "#/definitions/n"}}}))
    };
    // The $refs read the same; what they point at widened from integer to number.
    expect(&[with("integer")], &with("number"), BACKWARD_ONLY);
    let Err(RegistryError::Incompatible { messages, .. }) = try_after(&[with("string")], "BACKWARD", &with("integer"))
    else {
        panic!("string → integer behind a $ref was accepted")
    };
    assert!(messages.iter().any(|m| m.contains("#/properties/a") && m.contains("TYPE_NARROWED")), "{messages:?}");
}

#[test]
fn json_recursive_schemas_are_compared_without_looping() {
    let tree = |value: &str| {
        json_schema(json!({"type": "object", "additionalProperties": false, "properties": {
            "value": {"type": value}, "children": {"type": "array", "items": {"$ref": "#"}}}}))
    };
    expect(&[tree("integer")], &tree("number"), BACKWARD_ONLY);
}

#[test]
fn json_transitive_modes_check_bounds_against_every_version() {
    // v3 is looser than v2 but tighter than v1.
    let max = |n: u32| string(json!({"maxLength": n}));
    expect(&[max(30), max(10)], &max(20), [true, false, false, false, false, false, true]);
    // v3 is tighter than v2 but looser than v1.
    expect(&[max(10), max(30)], &max(20), [false, false, true, false, false, false, true]);
}

#[test]
fn protobuf_removing_enum_values_is_compatible_as_in_confluent() {
    // Readers keep unknown enum numbers (ENUM_CONST_REMOVED is one of Confluent's compatible changes).
    let v1 = event_proto("Kind kind = 1;\nenum Kind { TEXT = 0; IMAGE = 1; AUDIO = 2; }");
    let v2 = event_proto("Kind kind = 1;\nenum Kind { TEXT = 0; IMAGE = 1; }");
    expect(&[v1], &v2, ALL);
    // An enum field is a varint: an int32 reads it.
    let v3 = event_proto("Kind kind = 1;\nenum Kind { TEXT = 0; }");
    expect(&[v3], &event_proto("int32 kind = 1;"), ALL);
}

#[test]
fn protobuf_numeric_labels_must_not_change() {
    expect(&[event_proto("int32 n = 1;")], &event_proto("repeated int32 n = 1;"), NEITHER);
    expect(&[event_proto("repeated double d = 1;")], &event_proto("double d = 1;"), NEITHER);
    let proto2 = |label: &str| {
        super::tests::proto(&format!("syntax = \"proto2\";\npackage ai;\nmessage Event {{ {label} int32 n = 1; }}"))
    };
    expect(&[proto2("optional")], &proto2("required"), NEITHER);
    // Strings and bytes are length-delimited either way (FIELD_STRING_OR_BYTES_LABEL_CHANGED).
    expect(&[event_proto("string s = 1;")], &event_proto("repeated string s = 1;"), ALL);
}

#[test]
fn protobuf_maps_are_compared_by_key_and_value() {
    let v1 = event_proto("map<string, int32> tags = 1;");
    // Renaming the field renames the generated entry type; the wire form is unchanged.
    expect(std::slice::from_ref(&v1), &event_proto("map<string, int64> labels = 1;"), ALL);
    expect(std::slice::from_ref(&v1), &event_proto("map<string, string> tags = 1;"), NEITHER);
    expect(&[v1], &event_proto("int32 tags = 1;"), NEITHER);
}
