//! Response permissions: the reply subjects of requests delivered to a connection, each of which
//! it may publish to a bounded number of times for a bounded time, whatever its publish
//! permissions say (nats-server's `c.replies`).
//!
//! Delivery records a reply subject (on the publisher's thread, after the message is queued);
//! a publish the static permissions refuse spends one use of it. Spent and expired entries stay
//! until a prune, run as nats-server runs it: by a record after `REPLY_PERMITS_PRUNE_ADDED_MAX`
//! records or `REPLY_PERMITS_PRUNE_INTERVAL` since the last prune.

use std::collections::HashMap;
use std::time::Instant;

use crate::limits;
use crate::options::ResponsePermission;

/// One recorded reply subject.
#[derive(Debug, Clone, Copy)]
struct Permit {
    recorded: Instant,
    used: u64,
}

/// A connection's recorded reply subjects.
#[derive(Debug)]
pub struct ReplyPermits {
    rule: ResponsePermission,
    permits: HashMap<String, Permit>,
    added_since_prune: usize,
    last_prune: Instant,
}

impl ReplyPermits {
    /// An empty record under `rule`.
    pub fn new(rule: ResponsePermission, now: Instant) -> Self {
        Self { rule, permits: HashMap::new(), added_since_prune: 0, last_prune: now }
    }

    /// Records that a request with `reply` was delivered at `now`; a reply recorded before starts
    /// over. Past `REPLY_PERMITS_MAX` entries, even after a prune, it is not recorded.
    pub fn record(&mut self, reply: &str, now: Instant) {
        let due = self.added_since_prune >= limits::REPLY_PERMITS_PRUNE_ADDED_MAX
            || now.saturating_duration_since(self.last_prune) > limits::REPLY_PERMITS_PRUNE_INTERVAL;
        let full = self.permits.len() >= limits::REPLY_PERMITS_MAX && !self.permits.contains_key(reply);
        if due || full {
            self.prune(now);
        }
        if self.permits.len() >= limits::REPLY_PERMITS_MAX && !self.permits.contains_key(reply) {
            tracing::debug!(reply, "reply not recorded: the connection's reply record is full");
            return;
        }
        self.permits.insert(reply.to_string(), Permit { recorded: now, used: 0 });
        self.added_since_prune += 1;
    }

    /// Whether a reply may be published to `subject` at `now`, spending one use of it.
    pub fn allow(&mut self, subject: &str, now: Instant) -> bool {
        let rule = self.rule;
        let Some(permit) = self.permits.get_mut(subject) else { return false };
        permit.used += 1;
        let spent = rule.msgs_max.is_some_and(|most| permit.used > most);
        let expired = is_expired(rule, permit.recorded, now);
        if spent || expired {
            self.permits.remove(subject);
            return false;
        }
        true
    }

    /// Recorded reply subjects, spent and expired ones included until the next prune.
    pub fn len(&self) -> usize {
        self.permits.len()
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.permits.is_empty()
    }

    fn prune(&mut self, now: Instant) {
        let rule = self.rule;
        self.permits.retain(|_, permit| {
            let spent = rule.msgs_max.is_some_and(|most| permit.used >= most);
            !spent && !is_expired(rule, permit.recorded, now)
        });
        self.added_since_prune = 0;
        self.last_prune = now;
    }
}

fn is_expired(rule: ResponsePermission, recorded: Instant, now: Instant) -> bool {
    rule.expires.is_some_and(|ttl| now.saturating_duration_since(recorded) > ttl)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn rule(msgs_max: Option<u64>, expires: Option<Duration>) -> ResponsePermission {
        ResponsePermission { msgs_max, expires }
    }

    #[test]
    fn a_recorded_reply_allows_max_publishes_then_none() {
        let now = Instant::now();
        let mut permits = ReplyPermits::new(rule(Some(2), None), now);
        assert!(!permits.allow("_INBOX.a", now), "nothing recorded yet");
        permits.record("_INBOX.a", now);
        assert!(permits.allow("_INBOX.a", now));
        assert!(permits.allow("_INBOX.a", now));
        assert!(!permits.allow("_INBOX.a", now));
        assert!(!permits.allow("_INBOX.b", now));
    }

    #[test]
    fn a_reply_after_expires_is_refused() {
        let now = Instant::now();
        let mut permits = ReplyPermits::new(rule(None, Some(Duration::from_secs(5))), now);
        permits.record("_INBOX.a", now);
        permits.record("_INBOX.b", now);
        assert!(permits.allow("_INBOX.a", now + Duration::from_secs(5)));
        assert!(!permits.allow("_INBOX.b", now + Duration::from_secs(6)));
    }

    #[test]
    fn without_bounds_a_reply_stays_allowed() {
        let now = Instant::now();
        let mut permits = ReplyPermits::new(rule(None, None), now);
        permits.record("_INBOX.a", now);
        let later = now + Duration::from_secs(3600);
        assert!((0..100).all(|_| permits.allow("_INBOX.a", later)));
    }

    #[test]
    fn a_record_after_the_prune_interval_drops_spent_and_expired_replies() {
        let now = Instant::now();
        let at = |millis: u64| now + Duration::from_millis(millis);
        let mut permits = ReplyPermits::new(rule(Some(1), Some(Duration::from_secs(10))), now);
        permits.record("old", now);
        permits.record("spent", at(9_000));
        assert!(permits.allow("spent", at(9_000)));
        permits.record("fresh", at(9_500));
        assert_eq!(permits.len(), 3, "an interval has not passed since the last prune");
        permits.record("newer", at(11_000));
        assert_eq!(permits.len(), 2, "spent and old pruned, fresh and newer kept");
        assert!(permits.allow("fresh", at(11_000)));
    }

    #[test]
    fn the_record_never_grows_past_its_bound() {
        let now = Instant::now();
        let mut permits = ReplyPermits::new(rule(None, None), now);
        for n in 0..limits::REPLY_PERMITS_MAX + 10 {
            permits.record(&format!("_INBOX.{n}"), now);
        }
        assert_eq!(permits.len(), limits::REPLY_PERMITS_MAX);
        assert!(!permits.allow(&format!("_INBOX.{}", limits::REPLY_PERMITS_MAX), now), "past the bound: not recorded");
        assert!(permits.allow("_INBOX.0", now));
    }
}
