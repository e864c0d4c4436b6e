//! Levels and L2 streams: a stream whose metadata says `semaq.level` ≥ 2 and `semaq.schema`
//! (optionally `semaq.schema.version`) stores only messages that validate against that subject's
//! schema; on L4 with `semaq.evolve: auto` the schema widens from payloads (`registry::evolve`).
//! Here too: the checks of the `semaq.*` level keys at stream create/update, and what a level
//! enforces, for stream info.
//!
//! Payloads are JSON (Avro's JSON encoding for Avro) or Confluent's wire format: byte 0, a
//! 4-byte big-endian schema id that must be a live version of the bound subject, then the
//! Avro binary datum (or the JSON text for JSON Schema).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use semaq_wire::headers::names;
use semaq_wire::Headers;
use serde_json::{json, Value};

use crate::client::Clients;
use crate::jetstream::config::StreamConfig;
use crate::jetstream::errors::ApiError;
use crate::jetstream::stream::Inbound;
use crate::jetstream::Services;
use crate::limits;
use crate::registry::evolve::{self, Evolver, EVOLVE_KEY};
use crate::registry::format::Parsed;
use crate::registry::types::SchemaType;
use crate::registry::Registry;

/// Stream metadata key: the semantic level, `0`..=`4` (absent: 1).
pub const LEVEL_KEY: &str = "semaq.level";
/// Stream metadata key: the registry subject the stream is bound to.
pub const SCHEMA_KEY: &str = "semaq.schema";
/// Stream metadata key: a pinned version of that subject (absent: the latest).
pub const VERSION_KEY: &str = "semaq.schema.version";
/// Stream metadata key (L4): the headers every message must carry, comma-separated.
pub const REQUIRE_KEY: &str = "semaq.require";
/// The headers an L4 stream requires when `semaq.require` is absent.
pub const REQUIRE_DEFAULT: [&str; 2] = [names::TRACEPARENT, names::SESSION];
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
    let level = level_of(metadata)?;
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

/// The level in `semaq.level` (absent: 1): the one reading of the key.
pub fn level_of(metadata: &BTreeMap<String, String>) -> Result<u8, String> {
    match metadata.get(LEVEL_KEY) {
        None => Ok(1),
        Some(text) => match text.trim().parse::<u8>() {
            Ok(level) if level <= LEVEL_MAX => Ok(level),
            _ => Err(format!("{LEVEL_KEY} must be 0 to {LEVEL_MAX}, not {text:?}")),
        },
    }
}

/// Whether `semaq.evolve` says `auto`; anything but `auto` or `off` is an error.
fn evolves(metadata: &BTreeMap<String, String>) -> Result<bool, String> {
    match metadata.get(EVOLVE_KEY).map(|text| text.trim()) {
        None | Some("off") => Ok(false),
        Some("auto") => Ok(true),
        Some(other) => Err(format!("{EVOLVE_KEY} must be auto or off, not {other:?}")),
    }
}

/// The header names an L4 stream requires (`semaq.require`, else [`REQUIRE_DEFAULT`]).
pub fn required_headers(metadata: &BTreeMap<String, String>) -> Result<Vec<String>, String> {
    let names: Vec<String> = match metadata.get(REQUIRE_KEY) {
        Some(text) => text.split(',').map(str::trim).filter(|name| !name.is_empty()).map(str::to_string).collect(),
        None => REQUIRE_DEFAULT.iter().map(|name| name.to_string()).collect(),
    };
    if names.len() > limits::PROVENANCE_REQUIRED_HEADERS_MAX {
        return Err(format!("{REQUIRE_KEY} may list at most {} headers", limits::PROVENANCE_REQUIRED_HEADERS_MAX));
    }
    let valid = |name: &str| {
        name.len() <= limits::PROVENANCE_REQUIRED_HEADER_NAME_BYTES_MAX
            && name.bytes().all(|b| b.is_ascii_graphic() && b != b':')
    };
    match names.iter().find(|name| !valid(name)) {
        Some(bad) => Err(format!("{REQUIRE_KEY}: {bad:?} is not a header name")),
        None => Ok(names),
    }
}

/// Refuses a stream config whose level keys are malformed or whose binding names a subject or
/// version the registry does not have (called when a stream is created or updated).
pub fn check_stream_metadata(registry: Option<&Registry>, metadata: &BTreeMap<String, String>) -> Result<(), ApiError> {
    let invalid = ApiError::invalid_stream_config;
    let level = level_of(metadata).map_err(invalid)?;
    let evolve = evolves(metadata).map_err(invalid)?;
    if evolve && level < LEVEL_MAX {
        return Err(invalid(format!("{EVOLVE_KEY} auto needs {LEVEL_KEY} 4, not {level}")));
    }
    if metadata.contains_key(REQUIRE_KEY) && level < LEVEL_MAX {
        return Err(invalid(format!("{REQUIRE_KEY} needs {LEVEL_KEY} 4, not {level}")));
    }
    required_headers(metadata).map_err(invalid)?;
    let Some(binding) = from_metadata(metadata).map_err(invalid)? else { return Ok(()) };
    let Some(registry) = registry else {
        return Err(ApiError::invalid_stream_config("the schema registry is not available"));
    };
    let bound = registry
        .resolve(&binding.subject, binding.version)
        .map_err(|error| invalid(format!("{SCHEMA_KEY} {:?}: {error}", binding.subject)))?;
    if evolve {
        if binding.version.is_some() {
            return Err(invalid(format!("{EVOLVE_KEY} auto evolves the latest version: remove {VERSION_KEY}")));
        }
        let schema: Value = serde_json::from_str(&bound.schema.schema).unwrap_or(Value::Null);
        if evolve::top_level_fields(bound.schema.schema_type, &schema).is_none() {
            return Err(invalid(format!(
                "{EVOLVE_KEY} auto needs an Avro record or an object JSON Schema; {:?} is {}",
                binding.subject,
                describe_type(bound.schema.schema_type)
            )));
        }
    }
    Ok(())
}

fn describe_type(schema_type: SchemaType) -> &'static str {
    match schema_type {
        SchemaType::Protobuf => "Protobuf",
        SchemaType::Avro => "an Avro schema that is not a record",
        SchemaType::Json => "a JSON Schema that is not an object schema",
    }
}

/// [`check_stream_metadata`] with the server's registry (the one line JetStream calls).
pub fn check_stream(registry: &Registry, metadata: &BTreeMap<String, String>) -> Result<(), ApiError> {
    check_stream_metadata(Some(registry), metadata)
}

/// The level names of SPEC §1, by level.
const LEVEL_NAMES: [&str; 5] =
    ["ephemeral", "ordered durable", "schema-integral", "exactly-once", "traceable & autonomous"];

/// `{"level", "name", "enforces": [...]}` for stream info: what the stream's level has the
/// broker check on every message (each level includes those below it).
pub fn describe_level(registry: &Registry, config: &StreamConfig) -> Value {
    let metadata = &config.metadata;
    let level = level_of(metadata).unwrap_or(1);
    let mut enforces: Vec<String> = Vec::new();
    if level >= 1 {
        enforces.push("ordered durable storage".into());
    }
    if level >= 2 {
        if let Ok(Some(binding)) = from_metadata(metadata) {
            enforces.push(describe_schema(registry, &binding));
        }
        enforces.push("producer recorded".into());
    }
    if level >= 3 {
        enforces.extend(["producer sequences", "atomic batches", "double acks"].map(String::from));
    }
    if level >= 4 {
        enforces.push("event time order".into());
        if let Ok(headers) = required_headers(metadata) {
            enforces.push(format!("required headers {}", headers.join(", ")));
        }
        enforces.extend(["hash chain", "parent references"].map(String::from));
        if evolves(metadata) == Ok(true) {
            enforces.push("schema auto-evolution".into());
        }
    }
    json!({ "level": level, "name": LEVEL_NAMES[usize::from(level.min(LEVEL_MAX))], "enforces": enforces })
}

/// `schema ai-event-v1 v3` (with `(latest)` when not pinned).
fn describe_schema(registry: &Registry, binding: &Binding) -> String {
    let resolved = registry.resolve_id(&binding.subject, binding.version).ok();
    match (resolved, binding.version) {
        (Some((version, _)), Some(_)) => format!("schema {} v{version}", binding.subject),
        (Some((version, _)), None) => format!("schema {} v{version} (latest)", binding.subject),
        (None, _) => format!("schema {} (unavailable)", binding.subject),
    }
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
        /// Set on L4 streams with `semaq.evolve: auto`.
        evolver: Option<Box<Evolver>>,
    },
    /// The binding cannot be resolved now (subject deleted, ...): every message is refused.
    Unavailable(ApiError),
}

/// The check for a stream with this config, or `None` when it is not bound to a schema.
pub fn for_stream(services: &Services, config: &StreamConfig) -> Option<SchemaCheck> {
    let metadata = &config.metadata;
    if !metadata.contains_key(SCHEMA_KEY) && !metadata.contains_key(LEVEL_KEY) {
        return None;
    }
    let binding = match from_metadata(metadata) {
        Ok(binding) => binding?,
        Err(reason) => return Some(SchemaCheck::Unavailable(ApiError::schema_violation(reason))),
    };
    let registry = services.registry.clone();
    let resolved = registry.resolve_id(&binding.subject, binding.version).and_then(|(version, id)| {
        let parsed = registry.parsed(id)?;
        Ok((version, id, parsed))
    });
    let auto = config.level() >= LEVEL_MAX && evolves(metadata) == Ok(true);
    Some(match resolved {
        Ok((version, id, parsed)) => {
            let announce = (&services.bus, services.server_id.as_str());
            let evolver = auto.then(|| Evolver::new(&config.name, announce, &registry, id)).flatten().map(Box::new);
            SchemaCheck::Ready { subject: binding.subject, version, id, parsed, registry, evolver }
        }
        Err(error) => SchemaCheck::Unavailable(ApiError::schema_violation(format!(
            "schema {:?} cannot be used: {error}",
            binding.subject
        ))),
    })
}

impl SchemaCheck {
    /// Whether a check may register a new version (`semaq.evolve: auto`): a side effect that
    /// must not happen for a message something else refuses.
    pub fn may_evolve(&self) -> bool {
        matches!(self, SchemaCheck::Ready { evolver: Some(_), .. })
    }

    /// Announces the schema versions this batch's evolution registered (after the stream's locks
    /// are released).
    pub fn announce(&mut self) {
        if let SchemaCheck::Ready { evolver: Some(evolver), .. } = self {
            evolver.announce();
        }
    }

    /// Validates one payload (evolving the schema first where the stream says so); the refusal
    /// names the schema, version and first violation.
    pub fn check(&mut self, payload: &[u8]) -> Result<(), ApiError> {
        let outcome = match self {
            SchemaCheck::Unavailable(error) => return Err(error.clone()),
            SchemaCheck::Ready { subject, registry, .. } if payload.first() == Some(&0) => {
                wire_format(registry, subject, payload)
            }
            SchemaCheck::Ready { .. } => self.check_json(payload),
        };
        let SchemaCheck::Ready { subject, registry, .. } = self else { return Ok(()) };
        outcome.map_err(|(version, id, reason)| {
            registry.refusals.fetch_add(1, Ordering::Relaxed);
            ApiError::schema_violation(format!("schema {subject:?} version {version} (id {id}): {reason}"))
        })
    }

    /// A JSON payload (Avro's JSON encoding for Avro); on error (version, id, reason).
    fn check_json(&mut self, payload: &[u8]) -> Result<(), (u32, u32, String)> {
        let SchemaCheck::Ready { subject, version, id, parsed, registry, evolver } = self else { return Ok(()) };
        let value: Value = serde_json::from_slice(payload)
            .map_err(|error| (*version, *id, format!("$: payload is not JSON: {error}")))?;
        let verdict = parsed.validate_json(&value).map_err(|v| (*version, *id, v.to_string()));
        let Some(evolver) = evolver.as_mut() else { return verdict };
        let wanted = |object: &&serde_json::Map<String, Value>| verdict.is_err() || evolver.has_new_fields(object);
        let Some(object) = value.as_object().filter(wanted) else { return verdict };
        match evolver.attempt(registry, (subject, *version, *id), object, verdict.is_ok()) {
            evolve::Outcome::Unchanged => verdict,
            evolve::Outcome::Evolved(new_version, new_id, new_parsed) => {
                (*version, *id, *parsed) = (new_version, new_id, new_parsed);
                parsed.validate_json(&value).map_err(|v| (*version, *id, v.to_string()))
            }
            evolve::Outcome::Refused(report) => Err(match verdict {
                Ok(()) => (*version, *id, report),
                Err((version, id, violation)) => (version, id, format!("{violation}; {report}")),
            }),
        }
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

/// Single-hop lineage: an L2 message stored without a `Semaq-Producer` header gets one naming
/// the publishing connection (its CONNECT `name`, else `cid:<id>`). Its `Nats-Msg-Id`, if any,
/// is stored as sent. Messages the server publishes itself are left alone.
pub fn record_producer(clients: &Clients, message: &mut Inbound) {
    let Some(client_id) = message.publisher else { return };
    let block = message.headers.as_deref().unwrap_or_default();
    if !block.is_empty() && Headers::new(block).get(names::PRODUCER).is_some() {
        return;
    }
    let name = clients
        .get(client_id)
        .and_then(|client| client.details().and_then(|d| d.options.name.clone()))
        .map(|name| name.chars().filter(|c| !c.is_control()).collect::<String>())
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| format!("cid:{client_id}"));
    message.headers = Some(Bytes::from(with_header(block, names::PRODUCER, &name)));
}

/// `block` (a `NATS/1.0` header block, or empty) with one more header line.
pub(crate) fn with_header(block: &[u8], name: &str, value: &str) -> Vec<u8> {
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
        assert_eq!(Headers::new(&extended).get("Nats-Msg-Id"), Some("7"));
        assert_eq!(Headers::new(&extended).get("semaq-producer"), Some("p"));
    }

    #[test]
    fn level_keys_are_checked_at_create() {
        let meta = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let error = |pairs: &[(&str, &str)]| check_stream_metadata(None, &meta(pairs)).unwrap_err().description;
        assert!(error(&[(LEVEL_KEY, "five")]).contains("must be 0 to 4"));
        assert!(error(&[(EVOLVE_KEY, "auto")]).contains("needs semaq.level 4"));
        assert!(error(&[(LEVEL_KEY, "4"), (SCHEMA_KEY, "s"), (EVOLVE_KEY, "sometimes")]).contains("auto or off"));
        assert!(error(&[(LEVEL_KEY, "2"), (SCHEMA_KEY, "s"), (REQUIRE_KEY, "a")]).contains("needs semaq.level 4"));
        assert!(error(&[(LEVEL_KEY, "4"), (SCHEMA_KEY, "s"), (REQUIRE_KEY, "a b")]).contains("not a header name"));
        assert_eq!(required_headers(&meta(&[])).unwrap(), ["traceparent", "Semaq-Session"]);
        assert_eq!(required_headers(&meta(&[(REQUIRE_KEY, " x-a, x-b ")])).unwrap(), ["x-a", "x-b"]);
        let l1 = StreamConfig { name: "S".into(), ..StreamConfig::default() };
        assert_eq!(
            describe_level(&Registry::in_memory(), &l1),
            json!({"level": 1, "name": "ordered durable", "enforces": ["ordered durable storage"]})
        );
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
