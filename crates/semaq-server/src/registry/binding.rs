//! L2 streams: a stream whose metadata says `semaq.level` ≥ 2 and `semaq.schema` (optionally
//! `semaq.schema.version`) stores only messages that validate against that subject's schema.
//!
//! Payloads are JSON (Avro's JSON encoding for Avro) or Confluent's wire format: byte 0, a
//! 4-byte big-endian schema id that must be a live version of the bound subject, then the
//! Avro binary datum (or the JSON text for JSON Schema).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use bytes::Bytes;

use super::format::Parsed;
use super::Registry;
use crate::jetstream::errors::ApiError;
use crate::jetstream::stream::{header_value, Inbound};
use crate::server::{lock, Shared};

/// Stream metadata key: the semantic level, `0`..=`4` (absent: 1).
pub const LEVEL_KEY: &str = "semaq.level";
/// Stream metadata key: the registry subject the stream is bound to.
pub const SCHEMA_KEY: &str = "semaq.schema";
/// Stream metadata key: a pinned version of that subject (absent: the latest).
pub const VERSION_KEY: &str = "semaq.schema.version";
/// The highest semantic level.
const LEVEL_MAX: u8 = 4;

/// Which subject and version a stream is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Registry subject.
    pub subject: String,
    /// Pinned version, or `None` for the latest.
    pub version: Option<u32>,
}

/// Reads a stream's binding from its metadata; `None` below L2.
pub fn from_metadata(metadata: &BTreeMap<String, String>) -> Result<Option<Binding>, String> {
    let level = match metadata.get(LEVEL_KEY) {
        None => 1,
        Some(text) => match text.trim().parse::<u8>() {
            Ok(level) if level <= LEVEL_MAX => level,
            _ => return Err(format!("{LEVEL_KEY} must be 0 to {LEVEL_MAX}, not {text:?}")),
        },
    };
    let subject = metadata.get(SCHEMA_KEY).filter(|s| !s.is_empty());
    let version = match metadata.get(VERSION_KEY) {
        None => None,
        Some(text) => match text.trim().parse::<u32>() {
            Ok(version) if version >= 1 => Some(version),
            _ => return Err(format!("{VERSION_KEY} must be a version number, not {text:?}")),
        },
    };
    match (level, subject) {
        (0 | 1, None) if version.is_none() => Ok(None),
        (0 | 1, _) => Err(format!("{SCHEMA_KEY} and {VERSION_KEY} need {LEVEL_KEY} 2 or higher")),
        (_, None) => Err(format!("{LEVEL_KEY} {level} needs a schema: set {SCHEMA_KEY} to a registry subject")),
        (_, Some(subject)) => Ok(Some(Binding { subject: subject.clone(), version })),
    }
}

/// Refuses a stream config whose binding is malformed or names a subject or version the
/// registry does not have (called when a stream is created or updated).
pub fn check_stream_metadata(registry: Option<&Registry>, metadata: &BTreeMap<String, String>) -> Result<(), ApiError> {
    let Some(binding) = from_metadata(metadata).map_err(ApiError::invalid_stream_config)? else { return Ok(()) };
    let Some(registry) = registry else {
        return Err(ApiError::invalid_stream_config("the schema registry is not available"));
    };
    registry
        .resolve(&binding.subject, binding.version)
        .map_err(|error| ApiError::invalid_stream_config(format!("{SCHEMA_KEY} {:?}: {error}", binding.subject)))?;
    Ok(())
}

/// [`check_stream_metadata`] with the server's registry (the one line JetStream calls).
pub fn check_stream(shared: &Weak<Shared>, metadata: &BTreeMap<String, String>) -> Result<(), ApiError> {
    let shared = shared.upgrade();
    let registry = shared.as_ref().and_then(|shared| shared.registry.get());
    check_stream_metadata(registry.map(|registry| &**registry), metadata)
}

/// A stream's schema, resolved once per ingest batch.
#[derive(Debug)]
pub enum SchemaCheck {
    /// The bound version, ready to validate.
    Ready {
        /// Bound subject.
        subject: String,
        /// Resolved version.
        version: u32,
        /// Its global id.
        id: u32,
        /// The parsed schema.
        parsed: Arc<Parsed>,
        /// For wire-format ids and counting refusals.
        registry: Arc<Registry>,
    },
    /// The binding cannot be resolved now (subject deleted, ...): every message is refused.
    Unavailable(ApiError),
}

/// The check for a stream with this metadata, or `None` when it is not bound to a schema.
pub fn for_stream(shared: &Weak<Shared>, metadata: &BTreeMap<String, String>) -> Option<SchemaCheck> {
    if !metadata.contains_key(SCHEMA_KEY) && !metadata.contains_key(LEVEL_KEY) {
        return None;
    }
    let binding = match from_metadata(metadata) {
        Ok(binding) => binding?,
        Err(reason) => return Some(SchemaCheck::Unavailable(ApiError::schema_violation(reason))),
    };
    let registry = shared.upgrade().and_then(|shared| shared.registry.get().cloned());
    let Some(registry) = registry else {
        return Some(SchemaCheck::Unavailable(ApiError::schema_violation("the schema registry is not available")));
    };
    let resolved = registry.resolve_id(&binding.subject, binding.version).and_then(|(version, id)| {
        let parsed = registry.parsed(id)?;
        Ok((version, id, parsed))
    });
    Some(match resolved {
        Ok((version, id, parsed)) => SchemaCheck::Ready { subject: binding.subject, version, id, parsed, registry },
        Err(error) => SchemaCheck::Unavailable(ApiError::schema_violation(format!(
            "schema {:?} cannot be used: {error}",
            binding.subject
        ))),
    })
}

impl SchemaCheck {
    /// Validates one payload; the refusal names the schema, version and first violation.
    pub fn check(&self, payload: &[u8]) -> Result<(), ApiError> {
        let SchemaCheck::Ready { subject, version, id, parsed, registry } = self else {
            let SchemaCheck::Unavailable(error) = self else { return Ok(()) };
            return Err(error.clone());
        };
        let outcome = match payload.first() {
            Some(0) => wire_format(registry, subject, payload),
            _ => match serde_json::from_slice(payload) {
                Ok(value) => parsed.validate_json(&value).map_err(|v| (*version, *id, v.to_string())),
                Err(error) => Err((*version, *id, format!("$: payload is not JSON: {error}"))),
            },
        };
        outcome.map_err(|(version, id, reason)| {
            registry.refusals.fetch_add(1, Ordering::Relaxed);
            ApiError::schema_violation(format!("schema {subject:?} version {version} (id {id}): {reason}"))
        })
    }
}

/// Validates a Confluent wire-format payload; on error (version, id, reason).
fn wire_format(registry: &Registry, subject: &str, payload: &[u8]) -> Result<(), (u32, u32, String)> {
    let Some(id_bytes) = payload.get(1..5) else {
        return Err((0, 0, "$: a wire-format payload (magic byte 0) needs a 4-byte schema id".into()));
    };
    let id = u32::from_be_bytes([id_bytes[0], id_bytes[1], id_bytes[2], id_bytes[3]]);
    let Some(version) = registry.version_of_id(subject, id) else {
        return Err((0, id, format!("$: schema id {id} is not a version of subject {subject:?}")));
    };
    let parsed = registry.parsed(id).map_err(|e| (version, id, format!("$: {e}")))?;
    parsed.validate_binary(&payload[5..]).map_err(|v| (version, id, v.to_string()))
}

/// The header naming a message's producer (SPEC §2); L2 streams fill it in when absent.
pub const PRODUCER_HEADER: &str = "Semaq-Producer";

/// Single-hop lineage: an L2 message stored without a `Semaq-Producer` header gets one naming
/// the publishing connection (its CONNECT `name`, else `cid:<id>`). Its `Nats-Msg-Id`, if any,
/// is stored as sent. Messages the server publishes itself are left alone.
pub fn record_producer(shared: &Weak<Shared>, message: &mut Inbound) {
    let Some(client_id) = message.publisher else { return };
    let block = message.headers.as_deref().unwrap_or_default();
    if !block.is_empty() && header_value(block, PRODUCER_HEADER).is_some() {
        return;
    }
    let name = shared
        .upgrade()
        .and_then(|shared| lock(&shared.clients).get(&client_id).cloned())
        .and_then(|client| client.details().and_then(|d| d.options.name.clone()))
        .map(|name| name.chars().filter(|c| !c.is_control()).collect::<String>())
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| format!("cid:{client_id}"));
    message.headers = Some(Bytes::from(with_header(block, PRODUCER_HEADER, &name)));
}

/// `block` (a `NATS/1.0` header block, or empty) with one more header line.
fn with_header(block: &[u8], name: &str, value: &str) -> Vec<u8> {
    let line = format!("{name}: {value}\r\n");
    match block.strip_suffix(b"\r\n\r\n") {
        Some(head) => [head, b"\r\n", line.as_bytes(), b"\r\n"].concat(),
        None => format!("NATS/1.0\r\n{line}\r\n").into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_producer_header_is_added_to_a_block_or_starts_one() {
        assert_eq!(with_header(b"", "Semaq-Producer", "p"), b"NATS/1.0\r\nSemaq-Producer: p\r\n\r\n");
        let block = b"NATS/1.0\r\nNats-Msg-Id: 7\r\n\r\n";
        let extended = with_header(block, "Semaq-Producer", "p");
        assert_eq!(extended, b"NATS/1.0\r\nNats-Msg-Id: 7\r\nSemaq-Producer: p\r\n\r\n");
        assert_eq!(header_value(&extended, "Nats-Msg-Id").as_deref(), Some("7"));
        assert_eq!(header_value(&extended, "semaq-producer").as_deref(), Some("p"));
    }

    #[test]
    fn levels_and_bindings_are_read_from_metadata() {
        let meta = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(from_metadata(&meta(&[])), Ok(None));
        assert_eq!(from_metadata(&meta(&[(LEVEL_KEY, "1")])), Ok(None));
        let bound = from_metadata(&meta(&[(LEVEL_KEY, "2"), (SCHEMA_KEY, "s"), (VERSION_KEY, "3")]));
        assert_eq!(bound, Ok(Some(Binding { subject: "s".into(), version: Some(3) })));
        assert!(from_metadata(&meta(&[(LEVEL_KEY, "2")])).is_err());
        assert!(from_metadata(&meta(&[(LEVEL_KEY, "9"), (SCHEMA_KEY, "s")])).is_err());
        assert!(from_metadata(&meta(&[(SCHEMA_KEY, "s")])).is_err());
        assert!(from_metadata(&meta(&[(LEVEL_KEY, "2"), (SCHEMA_KEY, "s"), (VERSION_KEY, "x")])).is_err());
    }
}
