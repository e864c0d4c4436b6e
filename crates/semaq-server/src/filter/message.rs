//! One message as filters see it: the subject, and the headers and payload parsed lazily, at
//! most once, however many filters read them.

use std::cell::OnceCell;

use serde_json::Value as Json;

use crate::limits;

/// Header names as SPEC §2 writes them; a header sent in another case is also bound under this
/// spelling, so `headers["Semaq-Priority"]` finds `semaq-priority: 0`.
const KNOWN_HEADERS: &[&str] = &[
    "Nats-Msg-Id",
    "Semaq-Producer",
    "Semaq-Producer-Seq",
    "Nats-Batch-Id",
    "Nats-Batch-Sequence",
    "Nats-Batch-Commit",
    "Semaq-Model",
    "Semaq-Intent",
    "Semaq-Confidence",
    "Semaq-Priority",
    "Semaq-Lossy",
    "Semaq-Session",
    "Semaq-Tokens-In",
    "Semaq-Tokens-Out",
    "Semaq-Event-Time",
    "Semaq-Parent",
    "traceparent",
    "tracestate",
];

/// The `headers` binding: header name → first value.
#[derive(Debug, Default, PartialEq)]
pub struct Headers {
    entries: Vec<(String, String)>,
}

impl Headers {
    /// Reads a `NATS/1.0` block; a malformed block binds no headers.
    pub fn parse(block: Option<&[u8]>) -> Self {
        let Some(parsed) = block.and_then(|b| semaq_wire::HeaderBlock::parse(b).ok()) else {
            return Self::default();
        };
        let mut headers = Self::default();
        for (name, value) in parsed.entries {
            let known = KNOWN_HEADERS.iter().find(|k| k.eq_ignore_ascii_case(&name) && **k != name);
            if let Some(known) = known {
                headers.insert(known, &value);
            }
            headers.insert(&name, &value);
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
    /// Not JSON.
    NotJson,
    /// Larger than filters parse (`FILTER_PAYLOAD_BYTES_MAX`), to bound the work per message.
    TooLarge,
}

/// A message prepared for filters; parsing happens on first use.
#[derive(Debug)]
pub struct Prepared<'m> {
    /// The subject it was published to.
    pub subject: &'m str,
    raw_headers: Option<&'m [u8]>,
    raw_payload: &'m [u8],
    headers: OnceCell<Headers>,
    payload: OnceCell<Result<Json, PayloadIssue>>,
}

impl<'m> Prepared<'m> {
    /// Wraps a message; nothing is parsed yet.
    pub fn new(subject: &'m str, headers: Option<&'m [u8]>, payload: &'m [u8]) -> Self {
        Self { subject, raw_headers: headers, raw_payload: payload, headers: OnceCell::new(), payload: OnceCell::new() }
    }

    /// The headers, parsed on first call.
    pub fn headers(&self) -> &Headers {
        self.headers.get_or_init(|| Headers::parse(self.raw_headers))
    }

    /// The payload as JSON, parsed on first call.
    pub fn payload(&self) -> Result<&Json, PayloadIssue> {
        self.payload.get_or_init(|| parse_payload(self.raw_payload)).as_ref().map_err(|issue| *issue)
    }

    /// Whether the payload was parsed (for tests of the cost model).
    pub fn payload_parsed(&self) -> bool {
        self.payload.get().is_some()
    }
}

fn parse_payload(payload: &[u8]) -> Result<Json, PayloadIssue> {
    if payload.len() > limits::FILTER_PAYLOAD_BYTES_MAX {
        return Err(PayloadIssue::TooLarge);
    }
    serde_json::from_slice(payload).map_err(|_| PayloadIssue::NotJson)
}
