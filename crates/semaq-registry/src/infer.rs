//! Schema inference from JSON samples, shared by `semaq schema infer` (a whole schema from many
//! samples) and L4 auto-evolution ([`super::evolve`]: the type of each new field of one payload).
//!
//! Proposes an Avro schema or a JSON Schema with logical types where every sample agrees (uuid,
//! RFC 3339 timestamps, dates, email, uri), enums for small closed sets of strings, optional
//! fields where some samples lack them, nested records and arrays.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

/// Distinct strings a field may take and still be proposed as an enum.
const ENUM_VALUES_MAX: usize = 8;
/// Samples needed per distinct value before a string field is proposed as an enum.
const ENUM_SAMPLES_PER_VALUE_MIN: usize = 2;
/// Nesting followed in a sample; deeper values are typed as "anything".
const DEPTH_MAX: usize = 32;

/// What the samples showed for one value position.
#[derive(Debug, Default, Clone)]
pub struct Shape {
    seen: usize,
    nulls: usize,
    bools: usize,
    ints: usize,
    floats: usize,
    strings: Option<Strings>,
    array: Option<Box<Shape>>,
    arrays: usize,
    /// Field name → (shape, samples holding the field).
    object: Option<BTreeMap<String, Shape>>,
    objects: usize,
}

/// String values: the distinct ones (until too many) and the formats all of them fit.
#[derive(Debug, Clone)]
struct Strings {
    count: usize,
    distinct: BTreeSet<String>,
    too_many: bool,
    uuid: bool,
    timestamp: bool,
    date: bool,
    email: bool,
    uri: bool,
}

impl Shape {
    /// Adds one sample value.
    pub fn add(&mut self, value: &Value, depth: usize) {
        self.seen += 1;
        if depth > DEPTH_MAX {
            return;
        }
        match value {
            Value::Null => self.nulls += 1,
            Value::Bool(_) => self.bools += 1,
            Value::Number(n) if n.is_i64() || n.is_u64() => self.ints += 1,
            Value::Number(_) => self.floats += 1,
            Value::String(text) => self.add_string(text),
            Value::Array(items) => {
                self.arrays += 1;
                let element = self.array.get_or_insert_with(Box::default);
                items.iter().for_each(|item| element.add(item, depth + 1));
            }
            Value::Object(fields) => {
                self.objects += 1;
                let known = self.object.get_or_insert_with(BTreeMap::new);
                for (name, item) in fields {
                    known.entry(name.clone()).or_default().add(item, depth + 1);
                }
            }
        }
    }

    fn add_string(&mut self, text: &str) {
        let strings = self.strings.get_or_insert_with(|| Strings {
            count: 0,
            distinct: BTreeSet::new(),
            too_many: false,
            uuid: true,
            timestamp: true,
            date: true,
            email: true,
            uri: true,
        });
        strings.count += 1;
        if !strings.too_many {
            strings.distinct.insert(text.to_string());
            strings.too_many = strings.distinct.len() > ENUM_VALUES_MAX;
        }
        strings.uuid &= is_uuid(text);
        strings.timestamp &= is_timestamp(text);
        strings.date &= is_date(text);
        strings.email &= is_email(text);
        strings.uri &= is_uri(text);
    }
}

fn is_uuid(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 36
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| if [8, 13, 18, 23].contains(&i) { *b == b'-' } else { b.is_ascii_hexdigit() })
}

fn is_date(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter().enumerate().all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

fn is_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() >= 20
        && is_date(&text[..10])
        && matches!(b[10], b'T' | b't' | b' ')
        && b[13] == b':'
        && b[16] == b':'
        && (text.ends_with('Z') || text.ends_with('z') || text[19..].contains(['+', '-']))
}

fn is_email(text: &str) -> bool {
    let mut parts = text.split('@');
    let (Some(user), Some(host), None) = (parts.next(), parts.next(), parts.next()) else { return false };
    !user.is_empty() && host.contains('.') && !text.contains(char::is_whitespace)
}

fn is_uri(text: &str) -> bool {
    text.split_once("://").is_some_and(|(scheme, rest)| {
        !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) && !rest.is_empty()
    }) && !text.contains(char::is_whitespace)
}

fn enum_values(strings: &Strings) -> Option<Vec<String>> {
    let closed = !strings.too_many
        && strings.distinct.len() >= 2
        && strings.count >= strings.distinct.len() * ENUM_SAMPLES_PER_VALUE_MIN;
    closed.then(|| strings.distinct.iter().cloned().collect())
}

/// A JSON Schema (draft 2020-12) for the samples.
pub fn json_schema(shape: &Shape) -> Value {
    let mut schema = json_type(shape);
    schema["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
    schema
}

fn json_type(shape: &Shape) -> Value {
    let mut options: Vec<Value> = Vec::new();
    if shape.bools > 0 {
        options.push(json!({"type": "boolean"}));
    }
    if shape.floats > 0 {
        options.push(json!({"type": "number"}));
    } else if shape.ints > 0 {
        options.push(json!({"type": "integer"}));
    }
    if let Some(strings) = &shape.strings {
        let mut string = json!({"type": "string"});
        let format = [
            (strings.uuid, "uuid"),
            (strings.timestamp, "date-time"),
            (strings.date, "date"),
            (strings.email, "email"),
            (strings.uri, "uri"),
        ]
        .into_iter()
        .find_map(|(all, name)| all.then_some(name));
        match (format, enum_values(strings)) {
            (Some(format), _) => string["format"] = json!(format),
            (None, Some(values)) => string["enum"] = json!(values),
            _ => {}
        }
        options.push(string);
    }
    if let Some(element) = &shape.array {
        options.push(json!({"type": "array", "items": json_type(element)}));
    }
    if let Some(fields) = &shape.object {
        let properties: Map<String, Value> =
            fields.iter().map(|(name, field)| (name.clone(), json_type(field))).collect();
        let required: Vec<&String> = fields
            .iter()
            .filter(|(_, field)| field.seen == shape.objects && field.nulls == 0)
            .map(|(name, _)| name)
            .collect();
        options.push(json!({"type": "object", "properties": properties, "required": required}));
    }
    if shape.nulls > 0 {
        options.push(json!({"type": "null"}));
    }
    match options.len() {
        0 => json!({}),
        1 => options.remove(0),
        _ => json!({"anyOf": options}),
    }
}

/// How the payloads an Avro schema is inferred for are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AvroEncoding {
    /// Binary datums: RFC 3339 timestamps and dates become `timestamp-millis` longs and `date` ints.
    Binary,
    /// Avro's JSON encoding, where such a string would be refused: timestamps and dates stay strings.
    Json,
}

/// An Avro record schema named `name` for the samples (which must be JSON objects).
pub fn avro_schema(shape: &Shape, name: &str) -> Value {
    let mut names = BTreeSet::new();
    avro_type(shape, name, &mut names, AvroEncoding::Binary)
}

/// The JSON Schema of one value, as `semaq schema infer` would type a field holding it.
pub fn json_property(value: &Value) -> Value {
    json_type(&shape_of(value))
}

/// An optional Avro record field (nullable, default null) for `value`, as `semaq schema infer`
/// would type a field some samples lack; `names` holds the named types already taken.
pub fn avro_optional_field(name: &str, value: &Value, names: &mut BTreeSet<String>, encoding: AvroEncoding) -> Value {
    let field_type = avro_type(&shape_of(value), name, names, encoding);
    let nullable =
        field_type == json!("null") || field_type.as_array().is_some_and(|b| b.first() == Some(&json!("null")));
    let field_type = if nullable { field_type } else { with_null(field_type) };
    json!({"name": name, "type": field_type, "default": Value::Null})
}

/// The Avro type of `value` for a required field (a field whose type a payload changes).
pub fn avro_field_type(name: &str, value: &Value, names: &mut BTreeSet<String>, encoding: AvroEncoding) -> Value {
    avro_type(&shape_of(value), name, names, encoding)
}

fn shape_of(value: &Value) -> Shape {
    let mut shape = Shape::default();
    shape.add(value, 0);
    shape
}

fn avro_name(field: &str) -> String {
    let mut name: String = field
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|part| !part.is_empty())
        .map(|part| part[..1].to_ascii_uppercase() + &part[1..])
        .collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, 'T');
    }
    name
}

fn unique(name: String, names: &mut BTreeSet<String>) -> String {
    let mut candidate = name.clone();
    let mut n = 2;
    while !names.insert(candidate.clone()) {
        candidate = format!("{name}{n}");
        n += 1;
    }
    candidate
}

fn is_symbol(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn avro_type(shape: &Shape, name: &str, names: &mut BTreeSet<String>, encoding: AvroEncoding) -> Value {
    let mut branches: Vec<Value> = Vec::new();
    if shape.bools > 0 {
        branches.push(json!("boolean"));
    }
    if shape.floats > 0 {
        branches.push(json!("double"));
    } else if shape.ints > 0 {
        branches.push(json!("long"));
    }
    if let Some(strings) = &shape.strings {
        let binary = encoding == AvroEncoding::Binary;
        let logical = if strings.uuid {
            json!({"type": "string", "logicalType": "uuid"})
        } else if (strings.timestamp || strings.date) && !binary {
            json!("string")
        } else if strings.timestamp {
            json!({"type": "long", "logicalType": "timestamp-millis"})
        } else if strings.date {
            json!({"type": "int", "logicalType": "date"})
        } else {
            match enum_values(strings).filter(|values| values.iter().all(|v| is_symbol(v))) {
                Some(symbols) => json!({"type": "enum", "name": unique(avro_name(name), names), "symbols": symbols}),
                None => json!("string"),
            }
        };
        branches.push(logical);
    }
    if let Some(element) = &shape.array {
        branches.push(json!({"type": "array", "items": avro_type(element, &format!("{name}Item"), names, encoding)}));
    }
    if let Some(fields) = &shape.object {
        let record_name = unique(avro_name(name), names);
        let fields: Vec<Value> = fields
            .iter()
            .map(|(field_name, field)| {
                let mut field_type = avro_type(field, field_name, names, encoding);
                let optional = field.seen < shape.objects;
                if optional && field.nulls == 0 {
                    field_type = with_null(field_type);
                }
                let mut entry = json!({"name": field_name, "type": field_type});
                if optional || field.nulls > 0 {
                    entry["default"] = Value::Null;
                }
                entry
            })
            .collect();
        branches.push(json!({"type": "record", "name": record_name, "fields": fields}));
    }
    if shape.nulls > 0 {
        branches.insert(0, json!("null"));
    }
    match branches.len() {
        0 => json!("null"),
        1 => branches.remove(0),
        _ => Value::Array(branches),
    }
}

/// `T` → `["null", T]` (null first, so a null default is allowed).
fn with_null(schema: Value) -> Value {
    match schema {
        Value::Array(mut branches) => {
            branches.insert(0, json!("null"));
            Value::Array(branches)
        }
        other => json!(["null", other]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape_of_all(samples: &[Value]) -> Shape {
        let mut shape = Shape::default();
        samples.iter().for_each(|sample| shape.add(sample, 0));
        shape
    }

    fn samples() -> Vec<Value> {
        vec![
            json!({"id": "5f0c9a3e-8b7d-4c1e-9f2a-1b3c5d7e9f01", "at": "2026-01-02T03:04:05Z", "model": "a", "score": 0.5, "n": 1, "tags": ["x"], "user": {"email": "a@b.io"}}),
            json!({"id": "6f0c9a3e-8b7d-4c1e-9f2a-1b3c5d7e9f02", "at": "2026-01-02T03:04:06.5+01:00", "model": "b", "score": 1, "n": 2, "tags": [], "user": {"email": "c@d.io"}}),
            json!({"id": "7f0c9a3e-8b7d-4c1e-9f2a-1b3c5d7e9f03", "at": "2026-01-03T00:00:00Z", "model": "a", "score": 0.1, "n": 3, "user": {"email": "e@f.io"}, "day": "2026-01-03"}),
            json!({"id": "8f0c9a3e-8b7d-4c1e-9f2a-1b3c5d7e9f04", "at": "2026-01-04T00:00:00Z", "model": "b", "score": 0.2, "n": 4, "user": {"email": "g@h.io"}}),
        ]
    }

    #[test]
    fn json_schema_has_formats_enums_and_required_fields() {
        let schema = json_schema(&shape_of_all(&samples()));
        let properties = &schema["properties"];
        assert_eq!(properties["id"], json!({"type": "string", "format": "uuid"}));
        assert_eq!(properties["at"]["format"], "date-time");
        assert_eq!(properties["day"]["format"], "date");
        assert_eq!(properties["model"]["enum"], json!(["a", "b"]));
        assert_eq!(properties["score"]["type"], "number");
        assert_eq!(properties["n"]["type"], "integer");
        assert_eq!(properties["user"]["properties"]["email"]["format"], "email");
        assert_eq!(schema["required"], json!(["at", "id", "model", "n", "score", "user"]));
        for sample in samples() {
            assert!(jsonschema_accepts(&schema, &sample), "{sample}");
        }
    }

    fn jsonschema_accepts(schema: &Value, sample: &Value) -> bool {
        // A light check without the validator: every required field is present.
        schema["required"].as_array().unwrap().iter().all(|name| sample.get(name.as_str().unwrap()).is_some())
    }

    #[test]
    fn avro_schema_has_logical_types_optional_fields_and_nested_records() {
        let schema = avro_schema(&shape_of_all(&samples()), "AiEvent");
        assert_eq!(schema["type"], "record");
        assert_eq!(schema["name"], "AiEvent");
        let field =
            |name: &str| schema["fields"].as_array().unwrap().iter().find(|f| f["name"] == name).unwrap().clone();
        assert_eq!(field("id")["type"], json!({"type": "string", "logicalType": "uuid"}));
        assert_eq!(field("at")["type"]["logicalType"], "timestamp-millis");
        assert_eq!(field("day")["type"], json!(["null", {"type": "int", "logicalType": "date"}]));
        assert_eq!(field("day")["default"], Value::Null);
        assert_eq!(field("model")["type"], json!({"type": "enum", "name": "Model", "symbols": ["a", "b"]}));
        assert_eq!(field("tags")["type"], json!(["null", {"type": "array", "items": "string"}]));
        assert_eq!(field("user")["type"]["type"], "record");
        assert_eq!(field("score")["type"], "double");
    }

    #[test]
    fn one_value_is_typed_as_a_field_of_many_samples_would_be() {
        assert_eq!(
            json_property(&json!("5f0c9a3e-8b7d-4c1e-9f2a-1b3c5d7e9f01")),
            json!({"type": "string", "format": "uuid"})
        );
        assert_eq!(json_property(&json!(3)), json!({"type": "integer"}));
        let mut names = BTreeSet::from(["Doc".to_string()]);
        let field = avro_optional_field("doc", &json!({"id": 1}), &mut names, AvroEncoding::Json);
        assert_eq!(field["default"], Value::Null);
        assert_eq!(field["type"][0], "null");
        assert_eq!(field["type"][1]["name"], "Doc2", "a taken name is not reused");
        let at = json!("2026-01-02T03:04:05Z");
        assert_eq!(avro_optional_field("at", &at, &mut names, AvroEncoding::Json)["type"], json!(["null", "string"]));
        assert_eq!(avro_field_type("at", &at, &mut names, AvroEncoding::Binary)["logicalType"], "timestamp-millis");
        assert_eq!(avro_optional_field("gone", &Value::Null, &mut names, AvroEncoding::Json)["type"], "null");
    }
}
