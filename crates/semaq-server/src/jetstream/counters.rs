//! Counter streams (nats-server 2.12): with `allow_msg_counter`, every message carries a
//! `Nats-Incr` header and no payload; the stream stores `{"val":"<sum>"}`, the subject's last
//! value plus the increment.
//!
//! Values are `i128` (nats-server's are unbounded): an increment that would leave that range
//! is refused as invalid rather than wrapped.

use bytes::Bytes;
use semaq_wire::headers::{names, HeaderBlock};
use semaq_wire::Headers;
use serde::Deserialize;

use super::config::{Discard, StreamConfig};
use super::errors::ApiError;
use super::sources::STREAM_SOURCE_HEADER;
use super::stream::store_error;

/// Headers a counter increment may not carry (nats-server refuses them as invalid).
const INCOMPATIBLE_HEADERS: [&str; 6] = [
    "Nats-Rollup",
    names::EXPECTED_STREAM,
    names::EXPECTED_LAST_MSG_ID,
    names::EXPECTED_LAST_SEQUENCE,
    names::EXPECTED_LAST_SUBJECT_SEQUENCE,
    "Nats-Expected-Last-Subject-Sequence-Subject",
];

/// A stored counter's body.
#[derive(Debug, Deserialize)]
struct CounterValue {
    val: String,
}

/// Settings a counter stream cannot combine with (nats-server's words).
pub fn check_config(config: &StreamConfig) -> Result<(), ApiError> {
    if config.allow_msg_counter && config.discard == Discard::New {
        return Err(ApiError::invalid_stream_config("counter stream cannot use discard new"));
    }
    Ok(())
}

/// The counter setting cannot change on update.
pub fn check_update(old: &StreamConfig, new: &StreamConfig) -> Result<(), ApiError> {
    if old.allow_msg_counter != new.allow_msg_counter {
        return Err(ApiError::invalid_stream_config(
            "stream configuration update can not change message counter setting",
        ));
    }
    Ok(())
}

/// The header of a stored counter that sources others: the last value seen per origin stream
/// and subject, `{"<stream>":{"<subject>":"<value>"}}`.
pub const COUNTER_SOURCES_HEADER: &str = "Nats-Counter-Sources";

/// Last values seen per origin stream, then per origin subject (ordered: one encoding).
type CounterSources = std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>;

/// What a counter increment stores in place of what was sent.
#[derive(Debug)]
pub struct Counted {
    /// `{"val":"<sum>"}`.
    pub payload: Bytes,
    /// The header block rewritten for a sourced increment (its `Nats-Incr` made the difference
    /// from the last value seen from that origin, and `Nats-Counter-Sources` updated).
    pub headers: Option<Bytes>,
}

/// For a message about to be stored: `None` when counters are not involved, else what to store
/// in place of the message, or the refusal. A `sourced` message (copied from another stream)
/// is stored verbatim by a stream without counters and, by a counter stream, added as the
/// difference from the origin's value last seen, as nats-server aggregates sourced counters.
pub fn apply(
    config: &StreamConfig,
    store: &dyn semaq_store::StreamStore,
    subject: &str,
    headers: Option<&[u8]>,
    payload: &[u8],
    sourced: bool,
) -> Result<Option<Counted>, ApiError> {
    let Some(incr) = headers.and_then(|block| Headers::new(block).get(names::INCR)) else {
        return match config.allow_msg_counter {
            true => Err(ApiError::incr_missing()),
            false => Ok(None),
        };
    };
    let mut increment: i128 = incr.trim().parse().map_err(|_| ApiError::incr_invalid())?;
    let block = headers.unwrap_or_default();
    if sourced && !config.allow_msg_counter {
        return Ok(None);
    }
    if !sourced {
        check_increment(config, block, payload)?;
    }
    let (current, mut sources) = match store.get_last_for_subject(subject).map_err(store_error)? {
        Some(last) => (parse_value(&last.payload)?, parse_sources(last.headers.as_deref())?),
        None => (0, CounterSources::new()),
    };
    let origin = Headers::new(block).get(STREAM_SOURCE_HEADER).filter(|_| sourced).map(str::to_string);
    if let Some(origin) = &origin {
        increment = sourced_difference(&mut sources, origin, subject, payload)?;
    }
    let sum = current.checked_add(increment).ok_or_else(ApiError::incr_invalid)?;
    let payload = Bytes::from(format!(r#"{{"val":"{sum}"}}"#));
    let headers = match origin {
        None => None,
        Some(_) => Some(rewrite_headers(block, increment, &sources)?),
    };
    Ok(Some(Counted { payload, headers }))
}

/// The refusals of a client's increment, as nats-server's order has them.
fn check_increment(config: &StreamConfig, block: &[u8], payload: &[u8]) -> Result<(), ApiError> {
    if !config.allow_msg_counter {
        return Err(ApiError::incr_disabled());
    }
    if !payload.is_empty() {
        return Err(ApiError::incr_payload());
    }
    if Headers::new(block).get_many(&INCOMPATIBLE_HEADERS).iter().any(Option::is_some) {
        return Err(ApiError::incr_invalid());
    }
    Ok(())
}

fn parse_value(body: &[u8]) -> Result<i128, ApiError> {
    let value: CounterValue = serde_json::from_slice(body).map_err(|_| ApiError::counter_broken())?;
    value.val.parse::<i128>().map_err(|_| ApiError::counter_broken())
}

fn parse_sources(headers: Option<&[u8]>) -> Result<CounterSources, ApiError> {
    match headers.and_then(|block| Headers::new(block).get(COUNTER_SOURCES_HEADER)) {
        Some(text) => serde_json::from_str(text).map_err(|_| ApiError::counter_broken()),
        None => Ok(CounterSources::new()),
    }
}

/// A sourced counter's value minus the one last seen from the same origin stream and subject
/// (recorded in `sources`): what it adds to this stream's total.
fn sourced_difference(
    sources: &mut CounterSources,
    origin: &str,
    subject: &str,
    payload: &[u8],
) -> Result<i128, ApiError> {
    // `<stream> <seq> <filter> <destination> <origin subject>`.
    let fields: Vec<&str> = origin.split(' ').collect();
    let stream = fields.first().copied().unwrap_or_default();
    let origin_subject = fields.get(4).copied().unwrap_or(subject);
    let value = parse_value(payload)?;
    let seen = sources.entry(stream.to_string()).or_default();
    let previous = match seen.insert(origin_subject.to_string(), value.to_string()) {
        Some(text) => text.parse::<i128>().map_err(|_| ApiError::counter_broken())?,
        None => 0,
    };
    value.checked_sub(previous).ok_or_else(ApiError::incr_invalid)
}

fn rewrite_headers(block: &[u8], increment: i128, sources: &CounterSources) -> Result<Bytes, ApiError> {
    let mut rewritten = HeaderBlock::parse(block).map_err(|_| ApiError::incr_invalid())?;
    let sources = serde_json::to_string(sources).map_err(|_| ApiError::counter_broken())?;
    rewritten.entries.retain(|(name, _)| {
        !name.eq_ignore_ascii_case(names::INCR) && !name.eq_ignore_ascii_case(COUNTER_SOURCES_HEADER)
    });
    rewritten.insert(names::INCR, &increment.to_string());
    rewritten.insert(COUNTER_SOURCES_HEADER, &sources);
    Ok(rewritten.encode())
}

/// The value in a stored counter body, for the PubAck's `val`.
pub fn value_of(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<CounterValue>(body).ok().map(|value| value.val)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_bodies_read_back() {
        assert_eq!(value_of(br#"{"val":"-12"}"#).as_deref(), Some("-12"));
        assert_eq!(value_of(b"12"), None);
    }

    #[test]
    fn a_sourced_value_adds_its_difference_from_the_last_seen() {
        let mut sources = CounterSources::new();
        let origin = "A 3 > > hits.a";
        assert_eq!(sourced_difference(&mut sources, origin, "all.a", br#"{"val":"5"}"#).ok(), Some(5));
        assert_eq!(sourced_difference(&mut sources, origin, "all.a", br#"{"val":"7"}"#).ok(), Some(2));
        assert_eq!(sourced_difference(&mut sources, "B 1 > > hits.a", "all.a", br#"{"val":"1"}"#).ok(), Some(1));
        assert_eq!(serde_json::to_string(&sources).ok().as_deref(), Some(r#"{"A":{"hits.a":"7"},"B":{"hits.a":"1"}}"#));
    }
}
