//! Acknowledgements: the replies clients publish to a delivery's `$JS.ACK...` subject.

use std::time::{Duration, Instant};

use super::pump::PullRequestBody;
use super::Consumer;
use crate::jetstream::config::{AckPolicy, Retention};
use crate::sync::lock;

/// What an ack reply asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum AckKind {
    /// `+ACK` (or an empty body): done.
    Ack,
    /// `-NAK`, optionally `{"delay": ns}`: redeliver, after the delay if given.
    Nak(Option<Duration>),
    /// `+WPI`: still working, restart the ack wait.
    Progress,
    /// `+TERM`: never redeliver.
    Term,
    /// `+NXT`, optionally a pull request body: ack and ask for more.
    Next(PullRequestBody),
}

impl AckKind {
    /// Reads an ack body; unknown bodies are plain acks, as nats-server treats them.
    pub fn parse(body: &[u8]) -> Self {
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        if let Some(rest) = text.strip_prefix("-NAK") {
            let delay = serde_json::from_str::<serde_json::Value>(rest.trim())
                .ok()
                .and_then(|v| v.get("delay").and_then(serde_json::Value::as_i64))
                .filter(|delay| *delay > 0)
                .map(|delay| Duration::from_nanos(delay as u64));
            return AckKind::Nak(delay);
        }
        if text.starts_with("+WPI") {
            return AckKind::Progress;
        }
        if text.starts_with("+TERM") {
            return AckKind::Term;
        }
        if let Some(rest) = text.strip_prefix("+NXT") {
            return AckKind::Next(PullRequestBody::parse(rest.trim().as_bytes()).unwrap_or_default());
        }
        AckKind::Ack
    }
}

/// The parts of an ack subject `$JS.ACK.<stream>.<consumer>.<deliveries>.<sseq>.<cseq>.<ts>.<pending>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckSubject<'a> {
    /// Stream name.
    pub stream: &'a str,
    /// Consumer name.
    pub consumer: &'a str,
    /// Stream sequence acknowledged.
    pub stream_seq: u64,
}

impl<'a> AckSubject<'a> {
    /// Parses the v1 (9 tokens) and v2 (12 tokens, with domain and account hash) forms.
    pub fn parse(subject: &'a str) -> Option<Self> {
        let tokens: Vec<&str> = subject.split('.').collect();
        let (stream, consumer, stream_seq) = match tokens.as_slice() {
            ["$JS", "ACK", stream, consumer, _, seq, _, _, _] => (*stream, *consumer, *seq),
            ["$JS", "ACK", _, _, stream, consumer, _, seq, _, _, _, ..] => (*stream, *consumer, *seq),
            _ => return None,
        };
        Some(Self { stream, consumer, stream_seq: stream_seq.parse().ok()? })
    }
}

impl Consumer {
    /// Applies one ack; returns the stream sequences that are now acknowledged (for retention).
    pub fn acknowledge(&self, stream_seq: u64, kind: &AckKind) -> Vec<u64> {
        let config = self.config();
        let now = Instant::now();
        let mut state = lock(&self.state);
        state.last_activity = Some(now);
        let mut done = Vec::new();
        match kind {
            AckKind::Ack | AckKind::Term | AckKind::Next(_) => {
                if config.ack_policy == AckPolicy::All {
                    let acked: Vec<u64> = state.pending.range(..=stream_seq).map(|(seq, _)| *seq).collect();
                    for seq in acked {
                        state.remove_pending(seq);
                        done.push(seq);
                    }
                } else if state.remove_pending(stream_seq).is_some() {
                    done.push(stream_seq);
                }
                state.last_acked = Some(now);
                state.update_ack_floor();
            }
            AckKind::Nak(delay) => {
                if state.pending.contains_key(&stream_seq) {
                    match delay {
                        Some(delay) => state.set_deadline(stream_seq, Some(now + *delay)),
                        None => {
                            state.set_deadline(stream_seq, None);
                            state.redeliveries.insert(stream_seq);
                        }
                    }
                }
            }
            AckKind::Progress => {
                let waiting = state.pending.get(&stream_seq).is_some_and(|p| p.deadline.is_some());
                if waiting {
                    state.set_deadline(stream_seq, Some(now + super::ack_wait(&config)));
                }
            }
        }
        drop(state);
        self.wake();
        done
    }

    /// Whether acknowledged messages leave the stream with this consumer's ack.
    pub fn removes_on_ack(&self, retention: Retention) -> bool {
        retention != Retention::Limits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_bodies_parse_like_nats() {
        assert_eq!(AckKind::parse(b""), AckKind::Ack);
        assert_eq!(AckKind::parse(b"+ACK"), AckKind::Ack);
        assert_eq!(AckKind::parse(b"-NAK"), AckKind::Nak(None));
        assert_eq!(AckKind::parse(b"-NAK {\"delay\": 2000000000}"), AckKind::Nak(Some(Duration::from_secs(2))));
        assert_eq!(AckKind::parse(b"+WPI"), AckKind::Progress);
        assert_eq!(AckKind::parse(b"+TERM reason"), AckKind::Term);
        assert!(matches!(AckKind::parse(b"+NXT {\"batch\": 5}"), AckKind::Next(body) if body.batch == 5));
    }

    #[test]
    fn ack_subjects_parse_in_both_forms() {
        let v1 = AckSubject::parse("$JS.ACK.ORDERS.worker.1.42.7.1700000000000000000.3").unwrap();
        assert_eq!((v1.stream, v1.consumer, v1.stream_seq), ("ORDERS", "worker", 42));
        let v2 = AckSubject::parse("$JS.ACK.hub.ACCHASH.ORDERS.worker.1.42.7.1700000000000000000.3.token").unwrap();
        assert_eq!((v2.stream, v2.consumer, v2.stream_seq), ("ORDERS", "worker", 42));
        assert!(AckSubject::parse("$JS.ACK.ORDERS").is_none());
    }
}
