//! One parsed schema of any format: parse, canonical text, compatibility, payload validation.

use serde_json::Value;

use super::error::RegistryError;
use super::references::Resolved;
use super::types::SchemaType;
use super::{avro, json_compat, json_schema, protobuf};

/// A schema ready to check compatibility and validate payloads.
pub enum Parsed {
    /// An Avro schema.
    Avro(Box<avro::AvroSchema>),
    /// A compiled JSON Schema, and its JSON (with its referenced documents) for compatibility checks.
    Json(Box<jsonschema::Validator>, json_compat::Documents),
    /// A compiled `.proto` file.
    Protobuf(protobuf::ProtoSchema),
}

impl std::fmt::Debug for Parsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Parsed::Avro(schema) => f.debug_tuple("Avro").field(schema).finish(),
            Parsed::Json(_, documents) => f.debug_tuple("Json").field(documents).finish(),
            Parsed::Protobuf(schema) => f.debug_tuple("Protobuf").field(schema).finish(),
        }
    }
}

/// The first problem found in a payload: where (a JSON path like `$.a[2].b`) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON path of the offending value.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Parses `text` as a schema of `schema_type`, with the schemas its references resolve to.
pub fn parse(schema_type: SchemaType, text: &str, references: &[Resolved]) -> Result<Parsed, RegistryError> {
    if let Some(other) = references.iter().find(|r| r.schema_type != schema_type) {
        return Err(RegistryError::InvalidSchema(format!(
            "reference {:?} is a {} schema, not {}",
            other.name,
            other.schema_type.name(),
            schema_type.name()
        )));
    }
    match schema_type {
        SchemaType::Avro => {
            let texts: Vec<&str> = references.iter().map(|r| r.text.as_str()).collect();
            avro::AvroSchema::parse(text, &texts)
                .map(|schema| Parsed::Avro(Box::new(schema)))
                .map_err(|e| RegistryError::InvalidSchema(format!("{text}, details: {e}")))
        }
        SchemaType::Json => json_schema::parse(text, references),
        SchemaType::Protobuf => protobuf::parse(text, references).map(Parsed::Protobuf),
    }
}

/// The text two registrations are compared by: the schema's JSON, compact, keys sorted (for
/// `.proto` text: its lines, trimmed, without blank ones).
pub fn canonical(schema_type: SchemaType, text: &str) -> Result<String, RegistryError> {
    if schema_type == SchemaType::Protobuf {
        let lines: Vec<&str> = text.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
        return Ok(lines.join("\n"));
    }
    let value: Value =
        serde_json::from_str(text).map_err(|e| RegistryError::InvalidSchema(format!("not valid JSON: {e}")))?;
    Ok(value.to_string())
}

/// Confluent's `normalize=true`: the schema rewritten in one standard form, so equivalent
/// texts register as one schema. Avro: the parsed schema written back (full names, `"type"`
/// objects for primitives only where needed, keys sorted); JSON Schema: compact with keys
/// sorted; Protobuf: comments dropped and the declarations one per line.
pub fn normalize(schema_type: SchemaType, parsed: &Parsed, text: &str) -> Result<String, RegistryError> {
    match (schema_type, parsed) {
        (SchemaType::Avro, Parsed::Avro(schema)) => {
            let value = serde_json::to_value(&schema.schema)
                .map_err(|e| RegistryError::InvalidSchema(format!("cannot normalize: {e}")))?;
            Ok(value.to_string())
        }
        (SchemaType::Protobuf, _) => Ok(protobuf::normalize_text(text)),
        _ => canonical(schema_type, text),
    }
}

/// Every reason data written with `writer` cannot be read with `reader` (empty: compatible).
pub fn incompatibilities(reader: &Parsed, writer: &Parsed) -> Vec<String> {
    match (reader, writer) {
        (Parsed::Avro(reader), Parsed::Avro(writer)) => {
            avro::incompatibilities(reader.comparable(), writer.comparable())
        }
        (Parsed::Json(_, reader), Parsed::Json(_, writer)) => json_compat::incompatibilities(reader, writer),
        (Parsed::Protobuf(reader), Parsed::Protobuf(writer)) => protobuf::incompatibilities(reader, writer),
        _ => vec!["the schema type differs".into()],
    }
}

impl Parsed {
    /// Checks a JSON payload (Avro's JSON encoding for Avro); the first violation.
    pub fn validate_json(&self, value: &Value) -> Result<(), Violation> {
        match self {
            Parsed::Avro(schema) => schema.validate_json(value),
            Parsed::Json(validator, _) => json_schema::validate(validator, value),
            Parsed::Protobuf(schema) => schema.validate_json(value),
        }
    }

    /// Checks the body of a Confluent wire-format payload (after magic byte and id).
    pub fn validate_binary(&self, body: &[u8]) -> Result<(), Violation> {
        match self {
            Parsed::Avro(schema) => schema.validate_binary(body),
            Parsed::Protobuf(schema) => schema.validate_binary(body),
            Parsed::Json(validator, _) => {
                let value: Value = serde_json::from_slice(body)
                    .map_err(|e| Violation { path: "$".into(), message: format!("payload is not JSON: {e}") })?;
                json_schema::validate(validator, &value)
            }
        }
    }
}
