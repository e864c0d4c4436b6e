//! The reply subjects of requests sent through service imports.
//!
//! A requester's reply subject means nothing in the exporting account, so the request goes on
//! with a fresh `_R_.` one, and the responder's answer to it is sent on to the original reply
//! subject in the importing account. The table of those mappings is bounded in size and in time:
//! a mapping lives until its one response (singleton) or the response timeout, and the table holds
//! two generations of at most half the bound each: when the newer one is full, the older one is
//! dropped to make room, so responders that never answer cost no more than the bound, and a
//! mapping survives at least half the bound's worth of newer requests.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::delivery::SubscriberRef;
use crate::imports::REPLY_PREFIX;
use crate::router::Router;
use crate::sync::lock;

/// Where a response goes.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The requester's reply subject, in the importing account.
    pub reply: Box<str>,
    /// The importing account's router.
    pub target: Weak<Router<SubscriberRef>>,
    /// The importing account's name, for the trace of a response crossing back.
    pub importer: Arc<str>,
    /// Whether the mapping ends with the first response.
    singleton: bool,
    /// Past it, responses go nowhere (the export's response threshold).
    expires: Instant,
}

/// The mappings from `_R_.` subjects to requesters' reply subjects.
#[derive(Debug)]
pub struct Responses {
    table: Mutex<Table>,
    /// Random per server, so `_R_.` subjects of two servers never meet.
    prefix: String,
    next: AtomicU64,
    entries_max: usize,
    timeout: Duration,
}

/// Two generations: mappings made since the last rotation, and before it. A rotation, every
/// `timeout` or when the newer generation holds half the bound, drops the older generation.
#[derive(Debug)]
struct Table {
    current: HashMap<Box<str>, Pending>,
    previous: HashMap<Box<str>, Pending>,
    rotated_at: Instant,
}

impl Responses {
    /// An empty table of at most `entries_max` mappings, each kept at most `timeout`.
    pub fn new(entries_max: usize, timeout: Duration) -> Self {
        let table = Table { current: HashMap::new(), previous: HashMap::new(), rotated_at: Instant::now() };
        let prefix = crate::identity::random_nonce().chars().filter(char::is_ascii_alphanumeric).take(10).collect();
        Self { table: Mutex::new(table), prefix, next: AtomicU64::new(0), entries_max, timeout }
    }

    /// Records where the responses to a request replying to `reply` go, for at most
    /// `threshold` (and the table's timeout); returns the `_R_.` subject the request carries
    /// instead (ending `.T` when its latency is measured, as in nats-server).
    pub fn register(
        &self,
        reply: &str,
        (target, importer): (Weak<Router<SubscriberRef>>, Arc<str>),
        singleton: bool,
        tracked: bool,
        threshold: Duration,
    ) -> String {
        let now = Instant::now();
        let mut table = lock(&self.table);
        table.rotate(now, self.timeout);
        if table.current.len() >= (self.entries_max / 2).max(1) {
            table.previous = std::mem::take(&mut table.current);
            table.rotated_at = now;
        }
        let subject = self.fresh(if tracked { ".T" } else { "" });
        let expires = now.checked_add(threshold.min(self.timeout)).unwrap_or(now);
        let pending = Pending { reply: reply.into(), target, importer, singleton, expires };
        table.current.insert(subject.as_str().into(), pending);
        subject
    }

    /// A fresh `_R_.` subject mapped to nothing: what nats-server rewrites a trace's
    /// `Nats-Trace-Dest` to as it crosses into a service that allows tracing. Its mapping back to
    /// the requester's destination lives there only while the message is routed to other servers
    /// (whose events come back on it), so on one server it goes nowhere once delivered.
    pub fn unmapped(&self) -> String {
        self.fresh("")
    }

    fn fresh(&self, tail: &str) -> String {
        let sequence = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{REPLY_PREFIX}{}.{sequence:x}{tail}", self.prefix)
    }

    /// Where a response on `subject` goes, forgetting the mapping after a singleton's response;
    /// `None` for a subject that is not (or no longer) mapped.
    pub fn take(&self, subject: &str) -> Option<Pending> {
        let now = Instant::now();
        let mut table = lock(&self.table);
        table.rotate(now, self.timeout);
        let generation = match table.current.contains_key(subject) {
            true => &mut table.current,
            false => &mut table.previous,
        };
        let pending = generation.get(subject)?;
        if now > pending.expires {
            generation.remove(subject);
            return None;
        }
        match pending.singleton {
            true => generation.remove(subject),
            false => Some(pending.clone()),
        }
    }

    /// The importing account's router a response on `subject` would go to, leaving the mapping
    /// in place (for a responder that answers for the importer, as nats-server's system services
    /// read its `Nats-Request-Info`).
    pub fn requester(&self, subject: &str) -> Option<Weak<Router<SubscriberRef>>> {
        let table = lock(&self.table);
        let pending = table.current.get(subject).or_else(|| table.previous.get(subject))?;
        (Instant::now() <= pending.expires).then(|| pending.target.clone())
    }

    /// Forgets the mapping of `subject` (its request reached no responder).
    pub fn forget(&self, subject: &str) {
        let mut table = lock(&self.table);
        if table.current.remove(subject).is_none() {
            table.previous.remove(subject);
        }
    }

    /// Mappings held, live or not yet dropped.
    pub fn len(&self) -> usize {
        lock(&self.table).len()
    }

    /// Whether no mapping is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Table {
    fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    fn rotate(&mut self, now: Instant, timeout: Duration) {
        if now.duration_since(self.rotated_at) >= timeout {
            self.previous = std::mem::take(&mut self.current);
            self.rotated_at = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_requester_of_a_mapping_is_known_until_its_response_is_taken() {
        let responses = Responses::new(10, Duration::from_secs(60));
        let router = Arc::new(Router::<SubscriberRef>::default());
        let subject =
            responses.register("_INBOX.a", (Arc::downgrade(&router), "B".into()), true, false, Duration::from_secs(60));
        let requester = responses.requester(&subject).and_then(|target| target.upgrade());
        assert!(requester.is_some_and(|target| Arc::ptr_eq(&target, &router)));
        assert!(responses.take(&subject).is_some(), "peeking left the mapping in place");
        assert!(responses.requester(&subject).is_none());
    }

    #[test]
    fn a_singleton_mapping_serves_one_response_and_a_stream_mapping_serves_many() {
        let responses = Responses::new(10, Duration::from_secs(60));
        let once = responses.register("_INBOX.a", (Weak::new(), "B".into()), true, false, Duration::from_secs(60));
        let many = responses.register("_INBOX.b", (Weak::new(), "B".into()), false, false, Duration::from_secs(60));
        assert!(once.starts_with(REPLY_PREFIX) && once != many);
        assert_eq!(responses.take(&once).map(|p| p.reply), Some("_INBOX.a".into()));
        assert!(responses.take(&once).is_none());
        assert!(responses.take(&many).is_some() && responses.take(&many).is_some());
        assert!(responses.take("_R_.unknown.1").is_none());
        responses.forget(&many);
        assert!(responses.is_empty());
    }

    #[test]
    fn the_table_stays_within_its_bound_dropping_the_oldest_and_mappings_expire() {
        let responses = Responses::new(4, Duration::from_millis(200));
        let subjects: Vec<_> = (0..100)
            .map(|_| responses.register("_INBOX.x", (Weak::new(), "B".into()), true, false, Duration::from_secs(60)))
            .collect();
        assert!(responses.len() <= 4);
        assert!(responses.take(&subjects[0]).is_none(), "dropped for newer ones");
        assert!(responses.take(&subjects[98]).is_some(), "the newest stay");
        std::thread::sleep(Duration::from_millis(250));
        assert!(responses.take(&subjects[99]).is_none(), "older than the timeout");
    }
}
