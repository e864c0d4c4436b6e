//! One message as filters see it: the subject, and the headers and payload parsed lazily, at
//! most once, however many filters read them. With a [`Context`], a Confluent wire-format
//! payload (Avro, Protobuf) is decoded with its schema instead, and stored messages read by
//! several consumers share one parse through the [`PayloadCache`].

use std::cell::OnceCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use semaq_wire::headers::names;
use serde_json::Value as Json;

use super::cache::PayloadCache;
use super::FilterStats;
use crate::limits;
use crate::registry::{decode, Registry};

/// Header names as SPEC §2 writes them; a header sent in another case is also bound under this
/// spelling, so `headers["Semaq-Priority"]` finds `semaq-priority: 0`.
const KNOWN_HEADERS: &[&str] = &[
    names::MSG_ID,
    names::PRODUCER,
    names::PRODUCER_SEQ,
    names::BATCH_ID,
    names::BATCH_SEQUENCE,
    names::BATCH_COMMIT,
    names::MODEL,
    names::INTENT,
    names::CONFIDENCE,
    names::PRIORITY,
    names::LOSSY,
    names::SESSION,
    names::TOKENS_IN,
    names::TOKENS_OUT,
    names::EVENT_TIME,
    names::PARENT,
    names::TRACEPARENT,
    names::TRACESTATE,
];

/// The `headers` binding: header name → first value.
#[derive(Debug, Default, PartialEq)]
pub struct Headers {
    entries: Vec<(String, String)>,
}

impl Headers {
    /// Reads a `NATS/1.0` block as the broker reads it ([`semaq_wire::Headers`]): a malformed
    /// line binds nothing, the block's other headers still bind.
    pub fn parse(block: Option<&[u8]>) -> Self {
        let mut headers = Self::default();
        for (name, value) in semaq_wire::Headers::new(block.unwrap_or_default()) {
            let known = KNOWN_HEADERS.iter().find(|k| k.eq_ignore_ascii_case(name) && **k != name);
            if let Some(known) = known {
                headers.insert(known, value);
            }
            headers.insert(name, value);
        }
        headers
    }

    fn insert(&mut self, name: &str, value: &str) {
        if self.get(name).is_none() {
            self.entries.push((name.to_string(), value.to_string()));
        }
    }

    /// The value of `name`, spelled exactly.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
    }

    /// Names bound.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no header is bound.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every (name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// Why the payload has no JSON value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadIssue {
    /// Not JSON (nor a wire-format payload with a schema id the registry knows).
    NotJson,
    /// Larger than filters parse (`FILTER_PAYLOAD_BYTES_MAX`), to bound the work per message.
    TooLarge,
    /// A wire-format payload whose schema the registry knows, but whose body does not decode.
    Undecodable,
}

/// What a message's payload is read with besides a JSON parser; the default has nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<'m> {
    /// Decodes Confluent wire-format payloads (Avro, Protobuf) with the schema their id names.
    pub registry: Option<&'m Registry>,
    /// Payloads already parsed for other readers of the same stored message.
    pub cache: Option<&'m PayloadCache>,
    /// Counts parses, decodes and cache hits.
    pub stats: Option<&'m FilterStats>,
}

/// A message prepared for filters; parsing happens on first use.
#[derive(Debug)]
pub struct Prepared<'m> {
    /// The subject it was published to.
    pub subject: &'m str,
    raw_headers: Option<&'m [u8]>,
    raw_payload: &'m [u8],
    context: Context<'m>,
    headers: OnceCell<Headers>,
    /// Shared (`Arc`) so the payload cache can hand one parse to several readers.
    payload: OnceCell<Result<Arc<Json>, PayloadIssue>>,
}

impl<'m> Prepared<'m> {
    /// Wraps a message; nothing is parsed yet. Payloads are read as JSON only.
    pub fn new(subject: &'m str, headers: Option<&'m [u8]>, payload: &'m [u8]) -> Self {
        Self {
            subject,
            raw_headers: headers,
            raw_payload: payload,
            context: Context::default(),
            headers: OnceCell::new(),
            payload: OnceCell::new(),
        }
    }

    /// Reads the payload with `context` too (wire-format decoding, cache, counters).
    pub fn with_context(mut self, context: Context<'m>) -> Self {
        self.context = context;
        self
    }

    /// The headers, parsed on first call.
    pub fn headers(&self) -> &Headers {
        self.headers.get_or_init(|| Headers::parse(self.raw_headers))
    }

    /// The payload as JSON, parsed (or decoded) on first call.
    pub fn payload(&self) -> Result<&Json, PayloadIssue> {
        match self.payload.get_or_init(|| self.load()) {
            Ok(json) => Ok(json),
            Err(issue) => Err(*issue),
        }
    }

    /// Why the payload has no value, once it was looked at.
    pub fn payload_issue(&self) -> Option<PayloadIssue> {
        self.payload.get().and_then(|result| result.as_ref().err().copied())
    }

    /// Whether the payload was parsed (for tests of the cost model).
    pub fn payload_parsed(&self) -> bool {
        self.payload.get().is_some()
    }

    fn load(&self) -> Result<Arc<Json>, PayloadIssue> {
        let Some(cache) = self.context.cache else { return self.parse() };
        let (result, hit) = cache.get_or_parse(self.raw_payload, || self.parse());
        if hit {
            self.count(|stats| &stats.payload_cache_hits);
        }
        result
    }

    /// A wire-format payload whose schema id the registry knows is decoded; anything else is
    /// parsed as JSON (a JSON text never starts with byte 0, so nothing is tried twice).
    fn parse(&self) -> Result<Arc<Json>, PayloadIssue> {
        let raw = self.raw_payload;
        if raw.len() > limits::FILTER_PAYLOAD_BYTES_MAX {
            return Err(PayloadIssue::TooLarge);
        }
        if let Some(decoded) = self.context.registry.and_then(|registry| decode::decode(registry, raw)) {
            self.count(|stats| &stats.payload_decodes);
            return decoded.map(Arc::new).map_err(|_| PayloadIssue::Undecodable);
        }
        self.count(|stats| &stats.payload_parses);
        serde_json::from_slice(raw).map(Arc::new).map_err(|_| PayloadIssue::NotJson)
    }

    fn count(&self, counter: impl FnOnce(&FilterStats) -> &AtomicU64) {
        if let Some(stats) = self.context.stats {
            counter(stats).fetch_add(1, Ordering::Relaxed);
        }
    }
}
