//! Binary payloads as filters see them: a Confluent wire-format payload (byte 0, a 4-byte
//! big-endian schema id, then the body) decoded with the registry's schema of that id into the
//! JSON value a CEL filter evaluates, so `confidence > 0.85` reads an Avro or Protobuf record
//! exactly as it reads the same record sent as JSON.
//!
//! - Avro: the record in Avro's JSON encoding, union values given bare (as the registry's JSON
//!   validation also accepts them), `float`s as their shortest decimal (`0.9`, not `0.899999976`).
//! - Protobuf: the message selected by Confluent's message indexes, by declared field names.
//!   Fields without presence (proto3 scalars, lists, maps) are bound with their default when
//!   absent; fields with presence (`optional`, messages, oneof members) only when set. 64-bit
//!   integers are numbers, enums their value names, bytes base64.
//! - JSON Schema: the body is JSON text.
//!
//! Non-finite floats become `null` (JSON has no NaN). Nesting is bounded by
//! `SCHEMA_NESTING_DEPTH_MAX`; the caller bounds the payload size.

use apache_avro::types::Value as Avro;
use base64::Engine as _;
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MapKey, ReflectMessage as _, Value as Proto};
use serde_json::{Map, Number, Value as Json};

use super::format::Parsed;
use super::Registry;
use crate::limits;

/// Bytes before the body of a wire-format payload: the magic byte and the schema id.
const HEADER_BYTES: usize = 5;

/// Why a wire-format payload with a known schema id did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The body is not a datum of the schema.
    #[error("schema id {id}: {reason}")]
    Body {
        /// The schema id the payload names.
        id: u32,
        /// What the decoder reported.
        reason: String,
    },
    /// The decoded value nests deeper than `SCHEMA_NESTING_DEPTH_MAX`.
    #[error("schema id {id}: nested too deeply")]
    TooDeep {
        /// The schema id the payload names.
        id: u32,
    },
}

/// Caps what the Avro decoder allocates for one length it reads (a string, bytes, or an array or
/// map block count) at `payload_bytes_max`. No honest datum declares more than its payload
/// holds, while a forged count (a 5-byte body claiming 500 M array items) would otherwise make
/// apache-avro reserve 28 GB and abort the process. The setting is process-wide and only the
/// first call counts, so the server makes it before anything decodes (validation or filters).
pub fn bound_avro_allocations(payload_bytes_max: usize) {
    let in_force = apache_avro::util::max_allocation_bytes(payload_bytes_max);
    if in_force != payload_bytes_max {
        tracing::warn!(in_force, wanted = payload_bytes_max, "Avro decoding allocations were bounded already");
    }
}

/// The schema id of a wire-format payload, or `None` when it is not one.
pub fn schema_id(payload: &[u8]) -> Option<u32> {
    match payload {
        [0, a, b, c, d, ..] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// Decodes `payload` when it is in the wire format with a schema id the registry knows;
/// `None` when it is not (first byte not 0, shorter than the header, or an unknown id).
pub fn decode(registry: &Registry, payload: &[u8]) -> Option<Result<Json, DecodeError>> {
    let id = schema_id(payload)?;
    let parsed = registry.parsed(id).ok()?;
    Some(decode_body(&parsed, id, &payload[HEADER_BYTES..]))
}

/// Decodes the body of a wire-format payload written with schema `parsed` (global id `id`).
pub fn decode_body(parsed: &Parsed, id: u32, body: &[u8]) -> Result<Json, DecodeError> {
    let fail = |reason: String| DecodeError::Body { id, reason };
    match parsed {
        Parsed::Avro(schema) => {
            let value = schema.decode_binary(body).map_err(|violation| fail(violation.message))?;
            avro_to_json(value, 0).ok_or(DecodeError::TooDeep { id })
        }
        Parsed::Protobuf(schema) => {
            let message = schema.decode_binary(body).map_err(|violation| fail(violation.message))?;
            message_to_json(message, 0).ok_or(DecodeError::TooDeep { id })
        }
        Parsed::Json(..) => serde_json::from_slice(body).map_err(|e| fail(format!("payload is not JSON: {e}"))),
    }
}

/// Avro bytes in Avro's JSON encoding: one character per byte (U+0000..U+00FF).
fn latin1(bytes: &[u8]) -> Json {
    Json::String(bytes.iter().map(|b| char::from(*b)).collect())
}

fn double(value: f64) -> Json {
    Number::from_f64(value).map_or(Json::Null, Json::Number)
}

/// A `float` as its shortest decimal, so `0.9f32` compares equal to the literal `0.9`.
fn float(value: f32) -> Json {
    double(value.to_string().parse::<f64>().unwrap_or(f64::from(value)))
}

/// An Avro value as JSON; `None` when it nests deeper than allowed.
fn avro_to_json(value: Avro, depth: usize) -> Option<Json> {
    if depth > limits::SCHEMA_NESTING_DEPTH_MAX {
        return None;
    }
    Some(match value {
        Avro::Null => Json::Null,
        Avro::Boolean(b) => Json::Bool(b),
        Avro::Int(i) | Avro::Date(i) | Avro::TimeMillis(i) => Json::from(i),
        Avro::Long(i)
        | Avro::TimeMicros(i)
        | Avro::TimestampMillis(i)
        | Avro::TimestampMicros(i)
        | Avro::TimestampNanos(i)
        | Avro::LocalTimestampMillis(i)
        | Avro::LocalTimestampMicros(i)
        | Avro::LocalTimestampNanos(i) => Json::from(i),
        Avro::Float(f) => float(f),
        Avro::Double(d) => double(d),
        Avro::String(s) | Avro::Enum(_, s) => Json::String(s),
        Avro::Bytes(bytes) | Avro::Fixed(_, bytes) => latin1(&bytes),
        Avro::Uuid(uuid) => Json::String(uuid.to_string()),
        Avro::Decimal(decimal) => latin1(&Vec::<u8>::try_from(&decimal).unwrap_or_default()),
        Avro::BigDecimal(decimal) => Json::String(decimal.to_string()),
        Avro::Duration(duration) => {
            let parts = [u32::from(duration.months()), u32::from(duration.days()), u32::from(duration.millis())];
            latin1(&parts.iter().flat_map(|part| part.to_le_bytes()).collect::<Vec<u8>>())
        }
        Avro::Union(_, inner) => avro_to_json(*inner, depth + 1)?,
        Avro::Array(items) => {
            Json::Array(items.into_iter().map(|item| avro_to_json(item, depth + 1)).collect::<Option<_>>()?)
        }
        Avro::Map(entries) => Json::Object(
            entries.into_iter().map(|(k, v)| Some((k, avro_to_json(v, depth + 1)?))).collect::<Option<_>>()?,
        ),
        Avro::Record(fields) => Json::Object(
            fields.into_iter().map(|(k, v)| Some((k, avro_to_json(v, depth + 1)?))).collect::<Option<_>>()?,
        ),
    })
}

/// A decoded message as a JSON object by declared field names; `None` when too deep.
fn message_to_json(mut message: DynamicMessage, depth: usize) -> Option<Json> {
    if depth > limits::SCHEMA_NESTING_DEPTH_MAX {
        return None;
    }
    let descriptor = message.descriptor();
    let mut object = Map::new();
    for field in descriptor.fields() {
        if field.supports_presence() && !message.has_field(&field) {
            continue;
        }
        let value = message.take_field(&field).unwrap_or_else(|| field.default_value());
        object.insert(field.name().to_string(), field_to_json(&field, value, depth)?);
    }
    Some(Json::Object(object))
}

fn field_to_json(field: &FieldDescriptor, value: Proto, depth: usize) -> Option<Json> {
    // A map field's kind is its entry message; its values have the entry's value kind.
    let kind = match field.kind() {
        Kind::Message(entry) if field.is_map() => entry.map_entry_value_field().kind(),
        kind => kind,
    };
    proto_to_json(&kind, value, depth)
}

fn map_key(key: MapKey) -> String {
    match key {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(i) => i.to_string(),
        MapKey::I64(i) => i.to_string(),
        MapKey::U32(u) => u.to_string(),
        MapKey::U64(u) => u.to_string(),
        MapKey::String(s) => s,
    }
}

fn proto_to_json(kind: &Kind, value: Proto, depth: usize) -> Option<Json> {
    Some(match value {
        Proto::Bool(b) => Json::Bool(b),
        Proto::I32(i) => Json::from(i),
        Proto::I64(i) => Json::from(i),
        Proto::U32(u) => Json::from(u),
        Proto::U64(u) => Json::from(u),
        Proto::F32(f) => float(f),
        Proto::F64(d) => double(d),
        Proto::String(s) => Json::String(s),
        Proto::Bytes(bytes) => Json::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
        Proto::EnumNumber(number) => match kind {
            Kind::Enum(e) => e.get_value(number).map_or(Json::from(number), |v| Json::String(v.name().to_string())),
            _ => Json::from(number),
        },
        Proto::Message(message) => message_to_json(message, depth + 1)?,
        Proto::List(items) => {
            Json::Array(items.into_iter().map(|item| proto_to_json(kind, item, depth + 1)).collect::<Option<_>>()?)
        }
        Proto::Map(entries) => Json::Object(
            entries
                .into_iter()
                .map(|(k, v)| Some((map_key(k), proto_to_json(kind, v, depth + 1)?)))
                .collect::<Option<_>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::types::SchemaRequest;

    fn register(registry: &Registry, schema: &str, schema_type: Option<&str>) -> u32 {
        let request =
            SchemaRequest { schema: schema.to_string(), schema_type: schema_type.map(Into::into), references: vec![] };
        registry.register("events", &request).expect("register")
    }

    fn wire(id: u32, body: &[u8]) -> Vec<u8> {
        [&[0u8][..], &id.to_be_bytes(), body].concat()
    }

    const AVRO_EVENT: &str = r#"{"type": "record", "name": "Event", "fields": [
        {"name": "model_id", "type": "string"},
        {"name": "confidence", "type": "float"},
        {"name": "input_tokens", "type": "long"},
        {"name": "region", "type": ["null", "string"], "default": null},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["CHAT", "EMBED"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}}
    ]}"#;

    fn avro_event(region: Option<&str>) -> Vec<u8> {
        let schema = apache_avro::Schema::parse_str(AVRO_EVENT).expect("schema");
        let region = match region {
            Some(region) => Avro::Union(1, Box::new(Avro::String(region.into()))),
            None => Avro::Union(0, Box::new(Avro::Null)),
        };
        let record = Avro::Record(vec![
            ("model_id".into(), Avro::String("llama3-70b".into())),
            ("confidence".into(), Avro::Float(0.9)),
            ("input_tokens".into(), Avro::Long(1200)),
            ("region".into(), region),
            ("kind".into(), Avro::Enum(1, "EMBED".into())),
            ("tags".into(), Avro::Array(vec![Avro::String("eu".into())])),
        ]);
        apache_avro::to_avro_datum(&schema, record).expect("encode")
    }

    #[test]
    fn an_avro_record_decodes_to_its_json_encoding_with_bare_unions() {
        let registry = Registry::in_memory();
        let id = register(&registry, AVRO_EVENT, None);
        let decoded = decode(&registry, &wire(id, &avro_event(Some("eu-west-1")))).expect("wire format");
        let expected = json!({"model_id": "llama3-70b", "confidence": 0.9, "input_tokens": 1200,
            "region": "eu-west-1", "kind": "EMBED", "tags": ["eu"]});
        assert_eq!(decoded, Ok(expected));
        let without = decode(&registry, &wire(id, &avro_event(None))).expect("wire format").expect("decodes");
        assert_eq!(without["region"], Json::Null);
    }

    #[test]
    fn a_broken_avro_body_is_an_error_and_foreign_payloads_are_not_wire_format() {
        let registry = Registry::in_memory();
        let id = register(&registry, AVRO_EVENT, None);
        let body = avro_event(None);
        let truncated = decode(&registry, &wire(id, &body[..body.len() - 2])).expect("wire format");
        assert!(matches!(truncated, Err(DecodeError::Body { .. })), "{truncated:?}");
        let extra = decode(&registry, &wire(id, &[&body[..], &[7]].concat())).expect("wire format");
        assert!(matches!(extra, Err(DecodeError::Body { .. })), "{extra:?}");
        assert!(decode(&registry, &wire(id + 100, &body)).is_none(), "unknown id");
        assert!(decode(&registry, br#"{"a": 1}"#).is_none(), "JSON");
        assert!(decode(&registry, &[0, 0, 1]).is_none(), "shorter than the header");
    }

    const PROTO_EVENT: &str = r#"syntax = "proto3";
        package ai;
        message Event {
          enum Kind { CHAT = 0; EMBED = 1; }
          string model_id = 1;
          double confidence = 2;
          int64 input_tokens = 3;
          optional string region = 4;
          Kind kind = 5;
          repeated string tags = 6;
          map<string, int32> counts = 7;
          Usage usage = 8;
          bytes blob = 9;
        }
        message Usage { int32 total = 1; }"#;

    /// Protobuf binary, written out by hand: (field number, wire type, bytes after the tag).
    fn proto_fields(fields: &[(u8, u8, Vec<u8>)]) -> Vec<u8> {
        fields
            .iter()
            .flat_map(|(number, wire_type, bytes)| [vec![number << 3 | wire_type], bytes.clone()].concat())
            .collect()
    }

    fn length_delimited(bytes: &[u8]) -> Vec<u8> {
        [vec![bytes.len() as u8], bytes.to_vec()].concat()
    }

    #[test]
    fn a_protobuf_message_decodes_by_field_names_with_proto3_defaults() {
        let registry = Registry::in_memory();
        let id = register(&registry, PROTO_EVENT, Some("PROTOBUF"));
        let entry = proto_fields(&[(1, 2, length_delimited(b"a")), (2, 0, vec![3])]);
        let message = proto_fields(&[
            (1, 2, length_delimited(b"llama3-70b")),
            (2, 1, 0.92f64.to_le_bytes().to_vec()),
            (5, 0, vec![1]),
            (6, 2, length_delimited(b"eu")),
            (7, 2, length_delimited(&entry)),
            (8, 2, length_delimited(&proto_fields(&[(1, 0, vec![42])]))),
            (9, 2, length_delimited(&[0xff])),
        ]);
        // Message indexes: [0] written as the single byte 0.
        let decoded = decode(&registry, &wire(id, &[&[0u8][..], &message].concat())).expect("wire format");
        let expected = json!({"model_id": "llama3-70b", "confidence": 0.92, "input_tokens": 0, "kind": "EMBED",
            "tags": ["eu"], "counts": {"a": 3}, "usage": {"total": 42}, "blob": "/w=="});
        assert_eq!(decoded, Ok(expected), "region (optional, unset) is absent; input_tokens has its default");
    }

    #[test]
    fn protobuf_message_indexes_select_the_message_and_bad_ones_fail() {
        let registry = Registry::in_memory();
        let id = register(&registry, PROTO_EVENT, Some("PROTOBUF"));
        // Indexes [1] (count 1, index 1, zig-zag encoded as 2, 2): the second top-level message, Usage.
        let usage = decode(&registry, &wire(id, &[2, 2, 8, 7])).expect("wire format");
        assert_eq!(usage, Ok(json!({"total": 7})));
        let missing = decode(&registry, &wire(id, &[2, 8, 8, 7])).expect("wire format");
        assert!(matches!(missing, Err(DecodeError::Body { .. })), "{missing:?}");
        let garbage = decode(&registry, &wire(id, &[0, 0x0a, 0x05, b'a'])).expect("wire format");
        assert!(matches!(garbage, Err(DecodeError::Body { .. })), "{garbage:?}");
    }

    #[test]
    fn a_json_schema_body_is_json_text() {
        let registry = Registry::in_memory();
        let id = register(&registry, r#"{"type": "object"}"#, Some("JSON"));
        assert_eq!(decode(&registry, &wire(id, br#"{"a": 1}"#)), Some(Ok(json!({"a": 1}))));
        assert!(matches!(decode(&registry, &wire(id, b"{")), Some(Err(DecodeError::Body { .. }))));
    }
}
