//! JSON Schema: compile (draft from `$schema`: 7 or 2020-12, ...) with the referenced schemas
//! as documents its `$ref`s reach, and validate with a JSON path. Compatibility: `json_compat`.

use serde_json::Value;

use super::error::RegistryError;
use super::format::{Parsed, Violation};
use super::json_compat::{Document, Documents};
use super::references::Resolved;

/// Where a schema without an `$id` lives, as the `jsonschema` crate resolves references.
pub const DEFAULT_BASE_URI: &str = "json-schema:///";

/// Compiles a JSON Schema; each reference becomes a document at its name, resolved against the
/// schema's `$id` (as Confluent registers them), so `{"$ref": "<name>"}` reaches it.
pub fn parse(text: &str, references: &[Resolved]) -> Result<Parsed, RegistryError> {
    let root = document(text)?;
    let base = match root.get("$id").and_then(Value::as_str) {
        Some(id) => absolute(DEFAULT_BASE_URI, id).unwrap_or_else(|| DEFAULT_BASE_URI.to_string()),
        None => DEFAULT_BASE_URI.to_string(),
    };
    let mut externals = Vec::with_capacity(references.len());
    for reference in references {
        let uri = absolute(&base, &reference.name).ok_or_else(|| {
            RegistryError::InvalidSchema(format!("reference name {:?} is not a URI reference", reference.name))
        })?;
        externals.push(Document { uri, root: document(&reference.text)? });
    }
    let invalid = |e: &dyn std::fmt::Display| RegistryError::InvalidSchema(e.to_string());
    let validator = if externals.is_empty() {
        jsonschema::validator_for(&root).map_err(|e| invalid(&e))?
    } else {
        let mut registry = jsonschema::Registry::new();
        for external in &externals {
            registry = registry.add(&external.uri, &external.root).map_err(|e| invalid(&e))?;
        }
        let registry = registry.prepare().map_err(|e| invalid(&e))?;
        jsonschema::options().with_registry(&registry).build(&root).map_err(|e| invalid(&e))?
    };
    let documents = Documents { main: Document { uri: base, root }, externals };
    Ok(Parsed::Json(Box::new(validator), documents))
}

fn document(text: &str) -> Result<Value, RegistryError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| RegistryError::InvalidSchema(format!("not valid JSON: {e}")))?;
    if !(value.is_object() || value.is_boolean()) {
        return Err(RegistryError::InvalidSchema("a JSON Schema is an object or a boolean".into()));
    }
    Ok(value)
}

/// `reference` resolved against `base`, without a fragment; `None` when either is malformed.
pub fn absolute(base: &str, reference: &str) -> Option<String> {
    let base = jsonschema::Uri::parse(base).ok()?;
    let resolved = jsonschema::uri::resolve_against(&base, reference).ok()?;
    let text = resolved.as_str();
    Some(text.split('#').next().unwrap_or(text).to_string())
}

/// The first violation, with its JSON path (`$.a[0].b`).
pub fn validate(validator: &jsonschema::Validator, value: &Value) -> Result<(), Violation> {
    // The yes/no check allocates no error; only a refusal pays for describing itself.
    if validator.is_valid(value) {
        return Ok(());
    }
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
