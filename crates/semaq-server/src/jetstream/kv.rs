//! What Key-Value buckets need at publish time, as nats-server 2.11 does it: `Nats-Rollup`
//! (a KV purge keeps only its marker), per-message TTL (`Nats-TTL` with `allow_msg_ttl`), the
//! delete marker left when a subject's last message ages out (`subject_delete_marker_ttl`),
//! and `republish`. The checks run before a message is appended and refuse it with
//! nats-server's error; the effects run once it is stored.

use std::collections::BTreeSet;

use bytes::Bytes;
use semaq_store::{PurgeRequest, StreamStore};
use semaq_wire::headers::names;
use semaq_wire::{clock, subject, Headers};

use super::config::{RePublish, StreamConfig};
use super::errors::ApiError;
use super::stream::{store_error, Inbound, Ingest, Stream};
use crate::limits;

const NANOS_PER_SECOND: i64 = 1_000_000_000;

/// Checks and fills the KV settings of a stream config the way nats-server does.
pub fn normalize(config: &mut StreamConfig) -> Result<(), ApiError> {
    if config.deny_purge && config.allow_rollup_hdrs {
        return Err(ApiError::invalid_stream_config("roll-ups require the purge permission"));
    }
    if config.subject_delete_marker_ttl > 0 {
        if config.subject_delete_marker_ttl < NANOS_PER_SECOND {
            return Err(ApiError::invalid_stream_config("subject delete marker TTL must be at least 1 second"));
        }
        // Markers are TTL'd rollups: nats-server switches both on rather than refuse.
        config.allow_msg_ttl = true;
        if !config.allow_rollup_hdrs {
            config.allow_rollup_hdrs = true;
            config.deny_purge = false;
        }
    } else if config.subject_delete_marker_ttl < 0 {
        return Err(ApiError::invalid_stream_config("subject delete marker TTL must not be negative"));
    }
    if let Some(republish) = &mut config.republish {
        if republish.src.is_empty() {
            republish.src = ">".to_string();
        }
        if config.subjects.iter().any(|s| subject::overlaps(&republish.dest, s)) {
            return Err(ApiError::invalid_stream_config(
                "stream configuration for republish destination forms a cycle",
            ));
        }
        if Transform::new(&republish.src, &republish.dest).is_none() {
            return Err(ApiError::invalid_stream_config(format!(
                "stream configuration for republish with transform from '{}' to '{}' not valid",
                republish.src, republish.dest
            )));
        }
    }
    Ok(())
}

/// Refuses the KV changes nats-server refuses on update.
pub fn check_update(old: &StreamConfig, new: &StreamConfig) -> Result<(), ApiError> {
    if old.allow_msg_ttl && !new.allow_msg_ttl {
        return Err(ApiError::invalid_stream_config("message TTL status can not be disabled"));
    }
    Ok(())
}

/// What a `Nats-Rollup` header asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rollup {
    /// Only this message remains on its subject.
    Subject,
    /// Only this message remains in the stream.
    All,
}

/// What one publish asks of the KV machinery, decided before it is appended.
#[derive(Debug, Default)]
pub struct Publish {
    rollup: Option<Rollup>,
    /// Seconds the message lives, when it has a TTL.
    ttl_secs: Option<i64>,
    /// Republish: where to, and the subject's previous sequence.
    republish: Option<(String, u64)>,
}

/// Checks a message's KV headers against the stream's settings (nothing is stored on refusal).
pub fn check(config: &StreamConfig, store: &dyn StreamStore, message: &Inbound) -> Result<Publish, ApiError> {
    let mut publish = Publish::default();
    if let Some(block) = message.headers.as_deref() {
        let [ttl, rollup] = Headers::new(block).get_many(&[names::TTL, names::ROLLUP]);
        if let Some(text) = ttl {
            match parse_ttl(text) {
                None => return Err(ApiError::msg_ttl_invalid()),
                Some(0) => {}
                Some(_) if !config.allow_msg_ttl => return Err(ApiError::msg_ttl_disabled()),
                Some(secs) => publish.ttl_secs = (secs > 0).then_some(secs),
            }
        }
        if let Some(value) = rollup {
            if !config.allow_rollup_hdrs || config.deny_purge {
                return Err(ApiError::rollup_failed("rollup not permitted"));
            }
            publish.rollup = Some(match value {
                "sub" => Rollup::Subject,
                "all" => Rollup::All,
                other => return Err(ApiError::rollup_failed(format!("rollup value invalid: {other:?}"))),
            });
        }
    }
    if let Some(republish) = &config.republish {
        if let Some(dest) = Transform::new(&republish.src, &republish.dest).and_then(|t| t.apply(&message.subject)) {
            let last = store.get_last_for_subject(&message.subject).map_err(store_error)?.map_or(0, |m| m.seq);
            publish.republish = Some((dest, last));
        }
    }
    Ok(publish)
}

impl Publish {
    /// Applies what the stored message `seq` asked for: the rollup's purge, its expiry time, the
    /// republished copy.
    pub fn stored(
        self,
        stream: &Stream,
        ingest: &mut Ingest<'_, '_>,
        message: &Inbound,
        seq: u64,
    ) -> Result<(), ApiError> {
        if let Some(rollup) = self.rollup {
            let subject = (rollup == Rollup::Subject).then(|| message.subject.clone());
            let purge = PurgeRequest { subject, keep: None, up_to_seq: Some(seq) };
            ingest.purge(purge)?;
        }
        if let Some(secs) = self.ttl_secs {
            stream.expiries().record(seq, ingest.now.saturating_add(secs.saturating_mul(NANOS_PER_SECOND)));
        }
        if let (Some((dest, last)), Some(republish)) = (self.republish, &ingest.config.republish) {
            republish_one(stream, republish, message, (seq, ingest.now, last), &dest);
        }
        Ok(())
    }
}

/// Publishes the stored message again to `dest` with nats-server's headers.
fn republish_one(
    stream: &Stream,
    republish: &RePublish,
    message: &Inbound,
    (seq, now, last): (u64, i64, u64),
    dest: &str,
) {
    let mut headers = match message.headers.as_deref() {
        Some(block) => String::from_utf8_lossy(block).trim_end_matches("\r\n").to_string() + "\r\n",
        None => "NATS/1.0\r\n".to_string(),
    };
    let fields = [
        (names::STREAM, stream.name.clone()),
        (names::SUBJECT, message.subject.clone()),
        (names::SEQUENCE, seq.to_string()),
        (names::TIME_STAMP, go_rfc3339_nano(now)),
        (names::LAST_SEQUENCE, last.to_string()),
    ];
    for (name, value) in fields {
        headers.push_str(&format!("{name}: {value}\r\n"));
    }
    let payload: &[u8] = if republish.headers_only {
        headers.push_str(&format!("{}: {}\r\n", names::MSG_SIZE, message.payload.len()));
        b""
    } else {
        &message.payload
    };
    headers.push_str("\r\n");
    stream.services().bus.publish(dest, Some(headers.as_bytes()), payload);
}

/// A `Nats-TTL` value in seconds: `never` is -1, `0` none; `None` (refused) for a Go duration
/// under 1s, a negative number or anything else.
pub fn parse_ttl(text: &str) -> Option<i64> {
    if text.eq_ignore_ascii_case("never") {
        return Some(-1);
    }
    if let Some(nanos) = parse_go_duration(text) {
        return (nanos >= NANOS_PER_SECOND as i128).then(|| (nanos / NANOS_PER_SECOND as i128) as i64);
    }
    text.parse::<i64>().ok().filter(|secs| *secs >= 0)
}

/// Go's `time.ParseDuration` in nanoseconds (`1h30m`, `1.5s`, `500ms`); a bare number is not one.
pub(super) fn parse_go_duration(text: &str) -> Option<i128> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest.is_empty() {
        return None;
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        if number.is_empty() || number == "." {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        let unit_end = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_end);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += value * scale;
        rest = after;
    }
    if total > i64::MAX as f64 {
        return None;
    }
    Some(if negative { -(total as i128) } else { total as i128 })
}

/// Go's `time.Duration` text for whole seconds (`30s`, `5m0s`, `1h0m0s`), as markers carry it.
fn go_duration_secs(secs: i64) -> String {
    clock::go_duration_text(secs.saturating_mul(NANOS_PER_SECOND))
}

/// Go's `time.RFC3339Nano` in UTC: nanoseconds with trailing zeros dropped (`…:05.5Z`, `…:05Z`),
/// the form of `Nats-Time-Stamp`.
pub fn go_rfc3339_nano(unix_ns: i64) -> String {
    let full = clock::rfc3339_nanos(unix_ns);
    let Some(without_zone) = full.strip_suffix('Z') else { return full };
    let trimmed = without_zone.trim_end_matches('0').trim_end_matches('.');
    format!("{trimmed}Z")
}

/// The messages of a stream that carry a TTL, by expiry time. Rebuilt after a restart by
/// reading the stored headers once, a bounded slice at each limits check.
#[derive(Debug, Default)]
pub struct Expiries {
    due: BTreeSet<(i64, u64)>,
    /// Next sequence to read while rebuilding, and the last one to read.
    rebuild: Option<(u64, u64)>,
}

impl Expiries {
    /// An index to be rebuilt from `first..=last` (empty when `last` is 0).
    pub fn rebuild_from(first: u64, last: u64) -> Self {
        Self { due: BTreeSet::new(), rebuild: (last > 0).then_some((first.max(1), last)) }
    }

    /// Remembers that `seq` expires at `at_ns`.
    pub fn record(&mut self, seq: u64, at_ns: i64) {
        self.due.insert((at_ns, seq));
    }

    /// Reads the next slice of stored headers while rebuilding after a restart.
    fn rebuild_step(&mut self, store: &dyn StreamStore) {
        let Some((mut next, last)) = self.rebuild else { return };
        for _ in 0..limits::MSG_TTL_REBUILD_MESSAGES_PER_CHECK {
            let Ok(Some(message)) = store.get_next(next, None).map(|m| m.filter(|m| m.seq <= last)) else {
                self.rebuild = None;
                return;
            };
            let ttl = message.headers.as_deref().and_then(|h| Headers::new(h).get(names::TTL)).map(parse_ttl);
            if let Some(secs) = ttl.flatten().filter(|secs| *secs > 0) {
                self.record(message.seq, message.timestamp_ns.saturating_add(secs.saturating_mul(NANOS_PER_SECOND)));
            }
            next = message.seq + 1;
        }
        self.rebuild = Some((next, last));
    }

    /// Takes the sequences due at `now_ns`, at most a bounded number.
    fn take_due(&mut self, now_ns: i64) -> Vec<u64> {
        let mut taken = Vec::new();
        while taken.len() < limits::MSG_TTL_EXPIRE_PER_CHECK {
            match self.due.first() {
                Some(&(at, seq)) if at <= now_ns => {
                    self.due.pop_first();
                    taken.push(seq);
                }
                _ => break,
            }
        }
        taken
    }
}

/// Removes the messages whose TTL has passed and, with `subject_delete_marker_ttl`, leaves a
/// marker where one was its subject's last. Returns how many messages went.
pub fn expire_ttls(stream: &Stream, store: &mut dyn StreamStore, now_ns: i64) -> u64 {
    let config = stream.config();
    if !config.allow_msg_ttl {
        return 0;
    }
    let due = {
        let mut expiries = stream.expiries();
        expiries.rebuild_step(store);
        expiries.take_due(now_ns)
    };
    let mut removed = 0;
    for seq in due {
        let Ok(Some(message)) = store.get(seq) else { continue };
        let marker = marker_due(&config, store, &message);
        // Durable at the limits tick's commit (`Stream::enforce_limits`), whose fsync runs
        // with the store's lock let go; nobody waits on an expiry.
        if store.remove(seq).unwrap_or(false) {
            removed += 1;
            if marker {
                leave_marker(stream, &config, &message.subject);
            }
        }
    }
    removed
}

/// With `subject_delete_marker_ttl` and `max_age`: the subjects whose last message is about to
/// age out (read before the store removes them; bounded).
pub fn aging_out_last(config: &StreamConfig, store: &dyn StreamStore, now_ns: i64) -> Vec<String> {
    if config.subject_delete_marker_ttl <= 0 || config.max_age <= 0 {
        return Vec::new();
    }
    let cutoff = now_ns - config.max_age;
    let mut subjects = Vec::new();
    let mut next = store.state().first_seq;
    for _ in 0..limits::MSG_TTL_EXPIRE_PER_CHECK {
        let Ok(Some(message)) = store.get_next(next, None) else { break };
        if message.timestamp_ns > cutoff {
            break;
        }
        if marker_due(config, store, &message) {
            subjects.push(message.subject.clone());
        }
        next = message.seq + 1;
    }
    subjects
}

/// Whether removing `message` for age leaves a marker: markers are on, it is its subject's
/// last message, and not a marker itself.
fn marker_due(config: &StreamConfig, store: &dyn StreamStore, message: &semaq_store::StoredMessage) -> bool {
    if config.subject_delete_marker_ttl <= 0 {
        return false;
    }
    let is_marker = message.headers.as_deref().is_some_and(|h| Headers::new(h).get(names::MARKER_REASON).is_some());
    let newest = store.get_last_for_subject(&message.subject).ok().flatten();
    let last = newest.is_none_or(|newest| newest.seq <= message.seq);
    last && !is_marker
}

/// Stores a delete marker for `subject` through the stream's own ingest (so it rolls up and
/// carries its TTL like any publish).
pub fn leave_marker(stream: &Stream, config: &StreamConfig, subject: &str) {
    let ttl = go_duration_secs(config.subject_delete_marker_ttl / NANOS_PER_SECOND);
    let headers = format!(
        "NATS/1.0\r\n{}: MaxAge\r\n{}: {ttl}\r\n{}: sub\r\n\r\n",
        names::MARKER_REASON,
        names::TTL,
        names::ROLLUP
    );
    if !stream.enqueue_internal(subject, Bytes::from(headers)) {
        tracing::warn!(stream = %stream.name, %subject, "delete marker not stored: the ingest queue is full");
    }
}

/// A subject transform for republish: `src` tokens with `*` and `>`, `dest` tokens that name
/// the source's wildcards (`$1` or `{{wildcard(1)}}`) or its `>` (as `>`).
#[derive(Debug)]
struct Transform<'a> {
    src: Vec<&'a str>,
    dest: Vec<DestToken<'a>>,
}

#[derive(Debug)]
enum DestToken<'a> {
    Literal(&'a str),
    Wildcard(usize),
    Rest,
}

impl<'a> Transform<'a> {
    fn new(src: &'a str, dest: &'a str) -> Option<Self> {
        if !subject::is_valid_filter(src) || dest.is_empty() {
            return None;
        }
        let src: Vec<&str> = src.split('.').collect();
        let wildcards = src.iter().filter(|t| **t == "*").count();
        let tokens: Vec<&str> = dest.split('.').collect();
        let mut parsed = Vec::with_capacity(tokens.len());
        for (i, token) in tokens.iter().enumerate() {
            let index = token.strip_prefix('$').or_else(|| {
                let inner = token.strip_prefix("{{")?.strip_suffix("}}")?.trim();
                inner.strip_prefix("wildcard(")?.strip_suffix(')').map(str::trim)
            });
            parsed.push(match (index, *token) {
                (Some(index), _) => {
                    let index: usize = index.parse().ok()?;
                    (1..=wildcards).contains(&index).then_some(DestToken::Wildcard(index))?
                }
                (None, ">") if i + 1 == tokens.len() && src.last() == Some(&">") => DestToken::Rest,
                (None, literal) if !literal.is_empty() && literal != "*" && literal != ">" => {
                    DestToken::Literal(literal)
                }
                _ => return None,
            });
        }
        Some(Self { src, dest: parsed })
    }

    /// The destination for `subject`, or `None` when it does not match the source.
    fn apply(&self, subject: &str) -> Option<String> {
        let tokens: Vec<&str> = subject.split('.').collect();
        let mut wildcards = Vec::new();
        let mut rest = None;
        for (i, pattern) in self.src.iter().enumerate() {
            match *pattern {
                ">" => {
                    (tokens.len() > i).then_some(())?;
                    rest = Some(tokens[i..].join("."));
                    break;
                }
                "*" => wildcards.push(*tokens.get(i)?),
                literal => (tokens.get(i) == Some(&literal)).then_some(())?,
            }
            if i + 1 == self.src.len() && tokens.len() != self.src.len() {
                return None;
            }
        }
        let parts: Vec<String> = self
            .dest
            .iter()
            .map(|token| match token {
                DestToken::Literal(literal) => literal.to_string(),
                DestToken::Wildcard(index) => wildcards[index - 1].to_string(),
                DestToken::Rest => rest.clone().unwrap_or_default(),
            })
            .collect();
        Some(parts.join("."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_values_read_as_nats_server_reads_them() {
        assert_eq!(parse_ttl("never"), Some(-1));
        assert_eq!(parse_ttl("5s"), Some(5));
        assert_eq!(parse_ttl("1h30m"), Some(5400));
        assert_eq!(parse_ttl("90"), Some(90));
        assert_eq!(parse_ttl("0"), Some(0));
        assert_eq!(parse_ttl("500ms"), None);
        assert_eq!(parse_ttl("-3"), None);
        assert_eq!(parse_ttl("soon"), None);
    }

    #[test]
    fn timestamps_drop_trailing_zeros_like_go() {
        assert_eq!(go_rfc3339_nano(1_500_000_000), "1970-01-01T00:00:01.5Z");
        assert_eq!(go_rfc3339_nano(2_000_000_000), "1970-01-01T00:00:02Z");
        assert_eq!(go_rfc3339_nano(123), "1970-01-01T00:00:00.000000123Z");
        assert_eq!(go_duration_secs(300), "5m0s");
        assert_eq!(go_duration_secs(3600), "1h0m0s");
        assert_eq!(go_duration_secs(30), "30s");
    }

    #[test]
    fn republish_transforms_map_wildcards() {
        let transform = Transform::new("$KV.b.*", "repub.$1").expect("valid");
        assert_eq!(transform.apply("$KV.b.key").as_deref(), Some("repub.key"));
        assert_eq!(transform.apply("$KV.b.key.more"), None);
        let all = Transform::new(">", "copy.>").expect("valid");
        assert_eq!(all.apply("a.b").as_deref(), Some("copy.a.b"));
        let braces = Transform::new("x.*.*", "y.{{wildcard(2)}}.{{ wildcard(1) }}").expect("valid");
        assert_eq!(braces.apply("x.1.2").as_deref(), Some("y.2.1"));
        assert!(Transform::new("x.*", "y.$2").is_none());
        assert!(Transform::new("x.*", "y.*").is_none());
    }
}
