//! Priority groups of pull consumers (nats-server 2.11): `priority_groups` and `priority_policy`
//! in the config, `group`, `min_pending`, `min_ack_pending`, `id` and `priority` in pull
//! requests, the pinned client's `Nats-Pin-Id`, and `CONSUMER.UNPIN`.
//!
//! Which waiting request gets the next message is decided here (`eligible`); the pump then
//! delivers to it as to any pull request.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use semaq_wire::headers::names;
use serde::Deserialize;

use super::state::PullRequest;
use crate::jetstream::config::{ConsumerConfig, PriorityPolicy, PRIORITY_TIMEOUT_DEFAULT_NS};
use crate::jetstream::errors::ApiError;

/// Longest priority group name, as nats-server.
const GROUP_NAME_CHARS_MAX: usize = 16;
/// Highest `priority` of a request to a `prioritized` consumer (0 is served first).
const PRIORITY_MAX: i64 = 9;
/// Characters of a pin id.
const PIN_ID_CHARS: usize = 22;

/// The priority-group fields of a pull request (nats-server embeds them in the request).
/// Clients send absent fields as `null` (async-nats does), so `null` reads as the default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct PullGroup {
    /// The group the request belongs to.
    #[serde(deserialize_with = "null_as_default")]
    pub group: String,
    /// Overflow: serve only while at least this many messages are pending.
    #[serde(deserialize_with = "null_as_default")]
    pub min_pending: i64,
    /// Overflow: serve only while at least this many acks are outstanding.
    #[serde(deserialize_with = "null_as_default")]
    pub min_ack_pending: i64,
    /// Pinned client: the pin id the client holds.
    #[serde(deserialize_with = "null_as_default")]
    pub id: String,
    /// Prioritized: 0 (first) to 9.
    #[serde(deserialize_with = "null_as_default")]
    pub priority: i64,
}

fn null_as_default<'de, D: serde::Deserializer<'de>, T: Default + Deserialize<'de>>(input: D) -> Result<T, D::Error> {
    Option::<T>::deserialize(input).map(Option::unwrap_or_default)
}

/// The client a `pinned_client` consumer delivers to.
#[derive(Debug, Clone)]
pub struct Pin {
    /// The id the pinned client sends back in its requests (`Nats-Pin-Id`).
    pub id: String,
    /// When it was pinned.
    pub since: SystemTime,
    /// When the pin lapses unless the client pulls again.
    pub expires: Instant,
}

/// Whether `name` is a valid priority group name.
fn valid_group_name(name: &str) -> bool {
    (1..=GROUP_NAME_CHARS_MAX).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'=' | b'-'))
}

/// nats-server's checks and defaults for the priority fields of a consumer config.
pub fn check_config(config: &mut ConsumerConfig) -> Result<(), ApiError> {
    if config.priority_timeout < 0 {
        config.priority_timeout = 0;
    }
    if config.priority_policy == PriorityPolicy::None {
        if !config.priority_groups.is_empty() {
            return Err(ApiError::priority_group_with_policy_none());
        }
        if config.priority_timeout > 0 {
            return Err(ApiError::pinned_ttl_without_policy());
        }
        return Ok(());
    }
    if config.deliver_subject.is_some() {
        return Err(ApiError::push_with_priority_group());
    }
    if config.priority_groups.is_empty() {
        return Err(ApiError::priority_policy_without_group());
    }
    for group in &config.priority_groups {
        if group.is_empty() {
            return Err(ApiError::empty_group_name());
        }
        if !valid_group_name(group) {
            return Err(ApiError::invalid_group_name());
        }
    }
    if config.priority_policy == PriorityPolicy::PinnedClient && config.priority_timeout == 0 {
        config.priority_timeout = PRIORITY_TIMEOUT_DEFAULT_NS;
    }
    Ok(())
}

/// Checks a pull request's group fields against the config; `Err` is the status to answer
/// (code, text) as nats-server does.
pub fn check_request(config: &ConsumerConfig, pin: Option<&Pin>, group: &PullGroup) -> Result<(), (u16, String)> {
    let bad = |text: &str| Err((400, format!("Bad Request - {text}")));
    let policy = config.priority_policy;
    if (group.min_pending != 0 || group.min_ack_pending != 0) && policy != PriorityPolicy::Overflow {
        return bad("Not a Overflow Priority consumer");
    }
    if !group.id.is_empty() && policy != PriorityPolicy::PinnedClient {
        return bad("Not a Pinned Client Priority consumer");
    }
    if !(0..=PRIORITY_MAX).contains(&group.priority) {
        return bad("Priority must be between 0 and 9");
    }
    if policy == PriorityPolicy::None {
        return Ok(());
    }
    if group.group.is_empty() {
        return bad("Priority Group missing");
    }
    if !config.priority_groups.contains(&group.group) {
        return bad("Invalid Priority Group");
    }
    match pin {
        Some(pin) if !group.id.is_empty() && group.id != pin.id => Err((423, "Nats-Pin-Id mismatch".to_string())),
        _ => Ok(()),
    }
}

/// A new pin id.
fn new_pin_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    (0..PIN_ID_CHARS).map(|_| ALPHABET[rand::random::<u32>() as usize % ALPHABET.len()] as char).collect()
}

/// How long a pin lasts without a pull from the pinned client.
pub fn pin_timeout(config: &ConsumerConfig) -> Duration {
    Duration::from_nanos(config.priority_timeout.max(0) as u64)
}

/// What the pump should do with the waiting requests before the next delivery.
#[derive(Debug, Default)]
pub struct Choice {
    /// The request to deliver to, by index in the waiting queue.
    pub index: Option<usize>,
    /// Requests holding a stale pin id: removed, each answered `423 Nats-Wrong-Pin-Id`.
    pub wrong_pin: Vec<PullRequest>,
}

/// Whether `eligible` needs the pending counts: an overflow consumer with a thresholded request.
pub fn needs_counts(config: &ConsumerConfig, waiting: &VecDeque<PullRequest>) -> bool {
    config.priority_policy == PriorityPolicy::Overflow
        && waiting.iter().any(|r| r.group.min_pending > 0 || r.group.min_ack_pending > 0)
}

/// `headers` with `Nats-Pin-Id: id` added (a header block is created when there is none).
pub fn with_pin_header(headers: Option<Bytes>, id: &str) -> Bytes {
    let line = format!("{}: {id}\r\n\r\n", names::PIN_ID);
    let text = match headers.as_deref().map(String::from_utf8_lossy) {
        Some(existing) => existing.trim_end_matches("\r\n").to_string() + "\r\n" + &line,
        None => format!("NATS/1.0\r\n{line}"),
    };
    Bytes::from(text)
}

/// Picks the waiting request that gets the next message under the consumer's priority policy.
/// `pending` is the number of messages still to deliver (for overflow), `ack_pending` the
/// outstanding acks. A `pinned_client` consumer may pin the chosen request's client here.
pub fn eligible(
    config: &ConsumerConfig,
    waiting: &mut VecDeque<PullRequest>,
    pin: &mut Option<Pin>,
    now: Instant,
    (pending, ack_pending): (u64, u64),
) -> Choice {
    let mut choice = Choice::default();
    match config.priority_policy {
        PriorityPolicy::None => choice.index = (!waiting.is_empty()).then_some(0),
        PriorityPolicy::Prioritized => {
            choice.index = waiting.iter().enumerate().min_by_key(|(i, r)| (r.group.priority, *i)).map(|(i, _)| i);
        }
        PriorityPolicy::Overflow => {
            choice.index = waiting.iter().position(|request| {
                let group = &request.group;
                let limited = group.min_pending > 0 || group.min_ack_pending > 0;
                !limited
                    || (group.min_pending > 0 && group.min_pending as u64 <= pending)
                    || (group.min_ack_pending > 0 && group.min_ack_pending as u64 <= ack_pending)
            });
        }
        PriorityPolicy::PinnedClient => {
            if pin.as_ref().is_some_and(|p| p.expires <= now) {
                *pin = None;
            }
            // Requests with an id other than the current pin's are stale: answered and dropped.
            let current = pin.as_ref().map(|p| p.id.clone());
            let (kept, stale): (Vec<_>, Vec<_>) = waiting
                .drain(..)
                .partition(|r| r.group.id.is_empty() || current.as_deref() == Some(r.group.id.as_str()));
            *waiting = kept.into();
            choice.wrong_pin = stale;
            match current {
                // Pinned: only the pinned client's requests are served.
                Some(id) => choice.index = waiting.iter().position(|r| r.group.id == id),
                // Not pinned: the first waiting request's client becomes the pinned one.
                None => {
                    if let Some(first) = waiting.front_mut() {
                        let new =
                            Pin { id: new_pin_id(), since: SystemTime::now(), expires: now + pin_timeout(config) };
                        first.group.id = new.id.clone();
                        *pin = Some(new);
                        choice.index = Some(0);
                    }
                }
            }
        }
    }
    choice
}
