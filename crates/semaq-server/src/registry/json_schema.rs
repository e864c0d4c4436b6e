//! JSON Schema: compile (draft from `$schema`: 7 or 2020-12, ...), validate with a JSON path, and
//! Confluent's compatibility rules: the reader must accept every document the writer accepts
//! (types, enums, bounds, required properties, and open or closed content models).

use serde_json::{Map, Value};

use super::error::RegistryError;
use super::format::{Parsed, Violation};
use crate::limits;

/// Compiles a JSON Schema.
pub fn parse(text: &str) -> Result<Parsed, RegistryError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| RegistryError::InvalidSchema(format!("not valid JSON: {e}")))?;
    if !(value.is_object() || value.is_boolean()) {
        return Err(RegistryError::InvalidSchema("a JSON Schema is an object or a boolean".into()));
    }
    let validator = jsonschema::validator_for(&value).map_err(|e| RegistryError::InvalidSchema(e.to_string()))?;
    Ok(Parsed::Json(Box::new(validator), value))
}

/// The first violation, with its JSON path (`$.a[0].b`).
pub fn validate(validator: &jsonschema::Validator, value: &Value) -> Result<(), Violation> {
    validator
        .validate(value)
        .map_err(|e| Violation { path: pointer_to_path(e.instance_path().as_str()), message: e.to_string() })
}

/// `/a/0/b` → `$.a[0].b`.
pub fn pointer_to_path(pointer: &str) -> String {
    let mut path = String::from("$");
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
            path.push_str(&format!("[{segment}]"));
        } else if !segment.is_empty() && segment.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            path.push('.');
            path.push_str(&segment);
        } else {
            path.push_str(&format!("[{}]", Value::from(segment)));
        }
    }
    path
}

/// Every reason a document valid under `writer` may be invalid under `reader`.
pub fn incompatibilities(reader: &Value, writer: &Value) -> Vec<String> {
    let mut found = Vec::new();
    compare(reader, writer, "#", &mut found, 0);
    found
}

fn accepts_anything(schema: &Value) -> bool {
    schema == &Value::Bool(true) || schema.as_object().is_some_and(|o| o.keys().all(|k| is_annotation(k)))
}

fn is_annotation(key: &str) -> bool {
    matches!(key, "$schema" | "$id" | "title" | "description" | "default" | "examples" | "$comment")
}

fn types(schema: &Map<String, Value>) -> Option<Vec<String>> {
    match schema.get("type")? {
        Value::String(one) => Some(vec![one.clone()]),
        Value::Array(many) => Some(many.iter().filter_map(|t| t.as_str().map(str::to_string)).collect()),
        _ => None,
    }
}

fn compare(reader: &Value, writer: &Value, at: &str, found: &mut Vec<String>, depth: usize) {
    if depth > limits::SCHEMA_NESTING_DEPTH_MAX || accepts_anything(reader) || writer == &Value::Bool(false) {
        return;
    }
    if reader == writer {
        return;
    }
    let (Some(r), Some(w)) = (reader.as_object(), writer.as_object()) else {
        found.push(format!("{at}: the schema now rejects documents it accepted (SCHEMA_NARROWED)"));
        return;
    };
    compare_types(r, w, at, found);
    compare_enum(r, w, at, found);
    compare_bounds(r, w, at, found);
    for keyword in ["pattern", "format", "const", "$ref", "oneOf", "anyOf", "allOf", "not"] {
        if r.get(keyword).is_some_and(|value| Some(value) != w.get(keyword)) {
            found.push(format!("{at}: '{keyword}' was added or changed ({}_CHANGED)", keyword_code(keyword)));
        }
    }
    compare_object(r, w, at, found, depth);
    if let Some(items) = r.get("items") {
        let written = w.get("items").unwrap_or(&Value::Bool(true));
        compare(items, written, &format!("{at}/items"), found, depth + 1);
    }
}

fn keyword_code(keyword: &str) -> String {
    keyword.trim_start_matches('$').to_ascii_uppercase()
}

fn compare_types(r: &Map<String, Value>, w: &Map<String, Value>, at: &str, found: &mut Vec<String>) {
    let Some(allowed) = types(r) else { return };
    let written = types(w).unwrap_or_else(|| {
        ["null", "boolean", "object", "array", "number", "string"].iter().map(|t| t.to_string()).collect()
    });
    for kind in written {
        let covered = allowed.contains(&kind) || (kind == "integer" && allowed.iter().any(|a| a == "number"));
        if !covered {
            found.push(format!("{at}: type '{kind}' is no longer allowed (TYPE_NARROWED)"));
        }
    }
}

fn compare_enum(r: &Map<String, Value>, w: &Map<String, Value>, at: &str, found: &mut Vec<String>) {
    let Some(allowed) = r.get("enum").and_then(Value::as_array) else { return };
    match w.get("enum").and_then(Value::as_array) {
        Some(written) => {
            for value in written.iter().filter(|v| !allowed.contains(v)) {
                found.push(format!("{at}: enum value {value} was removed (ENUM_ARRAY_NARROWED)"));
            }
        }
        None => found.push(format!("{at}: an enum was added (ENUM_ARRAY_NARROWED)")),
    }
}

fn compare_bounds(r: &Map<String, Value>, w: &Map<String, Value>, at: &str, found: &mut Vec<String>) {
    // (keyword, true when a larger value is looser)
    let bounds = [
        ("maximum", true),
        ("exclusiveMaximum", true),
        ("maxLength", true),
        ("maxItems", true),
        ("maxProperties", true),
        ("minimum", false),
        ("exclusiveMinimum", false),
        ("minLength", false),
        ("minItems", false),
        ("minProperties", false),
    ];
    for (keyword, larger_is_looser) in bounds {
        let Some(limit) = r.get(keyword).and_then(Value::as_f64) else { continue };
        let narrowed = match w.get(keyword).and_then(Value::as_f64) {
            None => true,
            Some(old) if larger_is_looser => limit < old,
            Some(old) => limit > old,
        };
        if narrowed {
            let code = if larger_is_looser { "DECREASED" } else { "INCREASED" };
            found.push(format!("{at}: '{keyword}' was added or narrowed ({}_{code})", keyword.to_ascii_uppercase()));
        }
    }
}

fn required(schema: &Map<String, Value>) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map_or(Vec::new(), |r| r.iter().filter_map(Value::as_str).collect())
}

fn compare_object(r: &Map<String, Value>, w: &Map<String, Value>, at: &str, found: &mut Vec<String>, depth: usize) {
    let empty = Map::new();
    let reader_props = r.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    let writer_props = w.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    let open = Value::Bool(true);
    let reader_extra = r.get("additionalProperties").unwrap_or(&open);
    let writer_extra = w.get("additionalProperties").unwrap_or(&open);
    let writer_required = required(w);
    for name in required(r).into_iter().filter(|name| !writer_required.contains(name)) {
        found.push(format!("{at}: property '{name}' became required (REQUIRED_PROPERTY_ADDED)"));
    }
    for (name, schema) in reader_props {
        let where_ = format!("{at}/properties/{name}");
        match writer_props.get(name) {
            Some(written) => compare(schema, written, &where_, found, depth + 1),
            None if writer_extra == &Value::Bool(false) => {}
            None if accepts_anything(writer_extra) && !accepts_anything(schema) => found.push(format!(
                "{where_}: property added to an open content model, where old documents may hold any value \
                 (PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL)"
            )),
            None => compare(schema, writer_extra, &where_, found, depth + 1),
        }
    }
    for (name, written) in writer_props.iter().filter(|(name, _)| !reader_props.contains_key(*name)) {
        let where_ = format!("{at}/properties/{name}");
        if reader_extra == &Value::Bool(false) {
            found.push(format!(
                "{where_}: property removed from a closed content model (PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL)"
            ));
        } else {
            compare(reader_extra, written, &where_, found, depth + 1);
        }
    }
    if !accepts_anything(reader_extra) {
        let where_ = format!("{at}/additionalProperties");
        if writer_extra == &Value::Bool(false) {
            return;
        }
        if reader_extra == &Value::Bool(false) {
            found.push(format!("{where_}: the content model was closed (ADDITIONAL_PROPERTIES_REMOVED)"));
        } else {
            compare(reader_extra, writer_extra, &where_, found, depth + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_pointers_become_json_paths() {
        assert_eq!(pointer_to_path(""), "$");
        assert_eq!(pointer_to_path("/confidence"), "$.confidence");
        assert_eq!(pointer_to_path("/items/2/a b"), "$.items[2][\"a b\"]");
    }
}
