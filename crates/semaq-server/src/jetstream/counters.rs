//! Counter streams (nats-server 2.12): with `allow_msg_counter`, every message carries a
//! `Nats-Incr` header and no payload; the stream stores `{"val":"<sum>"}`, the subject's last
//! value plus the increment.
//!
//! Values are `i128` (nats-server's are unbounded): an increment that would leave that range
//! is refused as invalid rather than wrapped.

use bytes::Bytes;
use semaq_wire::headers::names;
use semaq_wire::Headers;
use serde::Deserialize;

use super::config::{Discard, StreamConfig};
use super::errors::ApiError;
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

/// For a message about to be stored: `None` when counters are not involved, else the body to
/// store in place of the (empty) payload, or the refusal.
pub fn apply(
    config: &StreamConfig,
    store: &dyn semaq_store::StreamStore,
    subject: &str,
    headers: Option<&[u8]>,
    payload: &[u8],
) -> Result<Option<Bytes>, ApiError> {
    let Some(incr) = headers.and_then(|block| Headers::new(block).get(names::INCR)) else {
        return match config.allow_msg_counter {
            true => Err(ApiError::incr_missing()),
            false => Ok(None),
        };
    };
    let increment: i128 = incr.trim().parse().map_err(|_| ApiError::incr_invalid())?;
    if !config.allow_msg_counter {
        return Err(ApiError::incr_disabled());
    }
    if !payload.is_empty() {
        return Err(ApiError::incr_payload());
    }
    let block = headers.unwrap_or_default();
    if Headers::new(block).get_many(&INCOMPATIBLE_HEADERS).iter().any(Option::is_some) {
        return Err(ApiError::incr_invalid());
    }
    let current = match store.get_last_for_subject(subject).map_err(store_error)? {
        Some(last) => {
            let value: CounterValue = serde_json::from_slice(&last.payload).map_err(|_| ApiError::counter_broken())?;
            value.val.parse::<i128>().map_err(|_| ApiError::counter_broken())?
        }
        None => 0,
    };
    let sum = current.checked_add(increment).ok_or_else(ApiError::incr_invalid)?;
    Ok(Some(Bytes::from(format!(r#"{{"val":"{sum}"}}"#))))
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
}
