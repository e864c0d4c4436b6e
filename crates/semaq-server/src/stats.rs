//! Counters shared by connections and read by monitoring. Relaxed atomics: each counter is
//! independent and monitoring only needs eventually consistent totals.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::limits;
use crate::sync::{lock, read, write};

/// Message and byte counters for one direction.
#[derive(Debug, Default)]
pub struct Traffic {
    /// Messages.
    pub msgs: AtomicU64,
    /// Payload bytes (headers included).
    pub bytes: AtomicU64,
}

impl Traffic {
    /// Counts one message of `bytes` bytes.
    pub fn record(&self, bytes: usize) {
        self.msgs.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Counts `msgs` messages of `bytes` bytes in all.
    pub fn record_many(&self, msgs: u64, bytes: u64) {
        if msgs > 0 {
            self.msgs.fetch_add(msgs, Ordering::Relaxed);
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// (messages, bytes) now.
    pub fn snapshot(&self) -> (u64, u64) {
        (self.msgs.load(Ordering::Relaxed), self.bytes.load(Ordering::Relaxed))
    }
}

/// What one account's closed connections received and sent, and how many of them were slow
/// consumers; the open ones count themselves.
#[derive(Debug, Default)]
pub struct AccountTotals {
    /// Messages the account's clients published.
    pub received: Traffic,
    /// Messages delivered to the account's clients.
    pub sent: Traffic,
    /// Connections closed as slow consumers.
    pub slow_consumers: AtomicU64,
}

/// Server-wide counters, with nats-server's `/varz` meanings.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Messages received from clients that have since disconnected.
    pub inbound: Traffic,
    /// Messages delivered to clients that have since disconnected.
    pub outbound: Traffic,
    /// Connections accepted since start.
    pub total_connections: AtomicU64,
    /// Clients disconnected for not keeping up.
    pub slow_consumers: AtomicU64,
    /// Connections refused because the connection limit was reached.
    pub refused_connections: AtomicU64,
    /// Authentication failures.
    pub auth_failures: AtomicU64,
    /// `Semaq-Lossy` messages shed; each client holds it too, to count its own sheds here.
    pub shed: Arc<Shed>,
    /// Traffic per subject prefix (off unless `metrics { detail: true }`); each client holds it too.
    pub subjects: Arc<SubjectTraffic>,
    /// JetStream publishes: time from capture to the PubAck being sent.
    pub publish_ack_latency: Histogram,
    /// Stream stores: time one fsync (or flush) of an ingest batch took.
    pub store_sync_latency: Histogram,
}

/// `Semaq-Lossy: true` deliveries dropped for clients past their high-water mark: in all, and
/// per subject up to a bound, past which new subjects share one key, so none goes uncounted.
#[derive(Debug)]
pub struct Shed {
    /// Messages and bytes (headers and payload) shed.
    pub total: Traffic,
    subjects: Mutex<HashMap<String, u64>>,
    subjects_max: usize,
}

impl Default for Shed {
    fn default() -> Self {
        Self::new(limits::SHED_SUBJECTS_MAX)
    }
}

impl Shed {
    /// Counters that name at most `subjects_max` subjects one by one.
    pub fn new(subjects_max: usize) -> Self {
        Self { total: Traffic::default(), subjects: Mutex::default(), subjects_max }
    }

    /// Counts one message of `bytes` bytes shed on `subject`.
    pub fn record(&self, subject: &str, bytes: usize) {
        self.total.record(bytes);
        let mut subjects = lock(&self.subjects);
        let known = subjects.contains_key(subject) || subjects.len() < self.subjects_max;
        // A real subject spelled like the overflow key shares its count: both are still counted.
        let key = if known { subject } else { limits::SHED_OTHER_SUBJECTS_KEY };
        match subjects.get_mut(key) {
            Some(count) => *count += 1,
            None => {
                subjects.insert(key.to_owned(), 1);
            }
        }
    }

    /// Messages shed per subject (and under the overflow key), sorted by subject.
    pub fn subjects(&self) -> BTreeMap<String, u64> {
        lock(&self.subjects).iter().map(|(subject, count)| (subject.clone(), *count)).collect()
    }
}

/// Messages and bytes in and out per subject prefix (the first `depth` tokens), for at most
/// `prefixes_max` prefixes; traffic on further prefixes is counted under
/// [`limits::SUBJECT_PREFIX_OTHER_KEY`]. Counting is off (one relaxed load per message) until
/// [`SubjectTraffic::enable`] sets a depth.
#[derive(Debug)]
pub struct SubjectTraffic {
    depth: AtomicUsize,
    prefixes_max: usize,
    prefixes: RwLock<HashMap<String, Arc<PrefixTraffic>>>,
}

/// One prefix's row of [`SubjectTraffic::snapshot`]: the prefix, (messages, bytes) in, (messages, bytes) out.
pub type PrefixRow = (String, (u64, u64), (u64, u64));

/// One subject prefix's counters.
#[derive(Debug, Default)]
pub struct PrefixTraffic {
    /// Messages published by clients.
    pub inbound: Traffic,
    /// Messages delivered to clients.
    pub outbound: Traffic,
}

impl Default for SubjectTraffic {
    fn default() -> Self {
        Self::new(limits::METRICS_SUBJECT_PREFIXES_MAX)
    }
}

impl SubjectTraffic {
    /// Counters that name at most `prefixes_max` prefixes one by one (counting off).
    pub fn new(prefixes_max: usize) -> Self {
        Self { depth: AtomicUsize::new(0), prefixes_max, prefixes: RwLock::default() }
    }

    /// Starts counting by the first `depth` tokens of each subject (0 turns counting off).
    pub fn enable(&self, depth: usize) {
        self.depth.store(depth, Ordering::Relaxed);
    }

    /// Whether traffic is counted per prefix.
    pub fn is_enabled(&self) -> bool {
        self.depth.load(Ordering::Relaxed) > 0
    }

    /// Counts one message of `bytes` bytes published on `subject`.
    pub fn record_in(&self, subject: &str, bytes: usize) {
        if let Some(prefix) = self.counters(subject) {
            prefix.inbound.record(bytes);
        }
    }

    /// Counts one message of `bytes` bytes delivered on `subject`.
    pub fn record_out(&self, subject: &str, bytes: usize) {
        if let Some(prefix) = self.counters(subject) {
            prefix.outbound.record(bytes);
        }
    }

    /// The counters of `subject`'s prefix (or of the overflow key), None when counting is off.
    fn counters(&self, subject: &str) -> Option<Arc<PrefixTraffic>> {
        let depth = self.depth.load(Ordering::Relaxed);
        if depth == 0 {
            return None;
        }
        let prefix = subject_prefix(subject, depth);
        if let Some(found) = read(&self.prefixes).get(prefix) {
            return Some(found.clone());
        }
        let mut prefixes = write(&self.prefixes);
        let key = if prefixes.contains_key(prefix) || prefixes.len() < self.prefixes_max {
            prefix
        } else {
            limits::SUBJECT_PREFIX_OTHER_KEY
        };
        Some(prefixes.entry(key.to_owned()).or_default().clone())
    }

    /// (prefix, messages and bytes in, messages and bytes out), sorted by prefix.
    pub fn snapshot(&self) -> Vec<PrefixRow> {
        let prefixes = read(&self.prefixes);
        let mut rows: Vec<_> = prefixes
            .iter()
            .map(|(prefix, traffic)| (prefix.clone(), traffic.inbound.snapshot(), traffic.outbound.snapshot()))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    }
}

/// The first `depth` tokens of `subject` (all of it when it has fewer). Reply inboxes are
/// `_INBOX` whatever the depth: their second token is random, one per connection or request, and
/// would spend the prefix bound on noise.
pub fn subject_prefix(subject: &str, depth: usize) -> &str {
    if subject.starts_with(semaq_wire::subject::REPLY_INBOX_PREFIX) {
        return "_INBOX";
    }
    match subject.match_indices('.').nth(depth.saturating_sub(1)) {
        Some((at, _)) => &subject[..at],
        None => subject,
    }
}

/// A latency histogram of relaxed atomics: fixed bucket bounds, a count and a sum, so recording
/// is a few atomic adds with no lock.
#[derive(Debug)]
pub struct Histogram {
    /// Upper bounds of the buckets, in seconds, ascending (the `+Inf` bucket is implied).
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative); the last one counts those above every bound.
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new(limits::LATENCY_BUCKETS_SECONDS)
    }
}

impl Histogram {
    /// A histogram with these bucket bounds (seconds, ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let bucket = self.bounds.iter().position(|bound| seconds <= *bound).unwrap_or(self.bounds.len());
        if let Some(counter) = self.buckets.get(bucket) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// (sum in seconds, count, per-bucket (upper bound, observations) including `+Inf`).
    pub fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let upper = self.bounds.iter().copied().chain(std::iter::once(f64::INFINITY));
        let buckets = upper.zip(&self.buckets).map(|(bound, n)| (bound, n.load(Ordering::Relaxed))).collect();
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        (sum, self.count.load(Ordering::Relaxed), buckets)
    }
}

/// Why a JetStream publish was refused, as counted per stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// L2: the payload does not match the bound schema.
    Schema,
    /// L4: a required context header missing, or a server-written header published.
    Level,
    /// L4: `Semaq-Event-Time` missing, malformed or not increasing.
    EventTime,
    /// L4: an invalid `Semaq-Parent`.
    Lineage,
    /// The stream's limits (messages, bytes, per subject, message size) with discard new.
    Limits,
    /// A duplicate inside an atomic batch (a plain duplicate is acked, not refused).
    Dedup,
    /// An expected-stream, -sequence or -msg-id header that did not hold.
    Expected,
    /// L3: malformed producer headers, or too many producers.
    Producer,
    /// An atomic batch that is invalid, incomplete or too large.
    Batch,
    /// The stream is sealed.
    Sealed,
    /// The ingest queue was full.
    QueueFull,
    /// The store failed.
    Storage,
    /// Anything else.
    Other,
}

impl Refusal {
    /// Every reason, in label order.
    pub const ALL: [Refusal; 13] = [
        Refusal::Schema,
        Refusal::Level,
        Refusal::EventTime,
        Refusal::Lineage,
        Refusal::Limits,
        Refusal::Dedup,
        Refusal::Expected,
        Refusal::Producer,
        Refusal::Batch,
        Refusal::Sealed,
        Refusal::QueueFull,
        Refusal::Storage,
        Refusal::Other,
    ];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Schema => "schema",
            Refusal::Level => "level",
            Refusal::EventTime => "event_time",
            Refusal::Lineage => "lineage",
            Refusal::Limits => "limits",
            Refusal::Dedup => "dedup",
            Refusal::Expected => "expected",
            Refusal::Producer => "producer",
            Refusal::Batch => "batch",
            Refusal::Sealed => "sealed",
            Refusal::QueueFull => "queue_full",
            Refusal::Storage => "storage",
            Refusal::Other => "other",
        }
    }
}

/// One stream's publish counters.
#[derive(Debug, Default)]
pub struct PublishCounters {
    /// Publishes stored.
    pub stored: AtomicU64,
    /// Publishes acknowledged as duplicates (`Nats-Msg-Id` or L3 producer sequence).
    pub duplicates: AtomicU64,
    refused: [AtomicU64; Refusal::ALL.len()],
}

impl PublishCounters {
    /// Counts one refused publish.
    pub fn refuse(&self, reason: Refusal) {
        if let Some(counter) = self.refused.get(reason as usize) {
            bump(counter);
        }
    }

    /// Refusals per reason, in [`Refusal::ALL`] order.
    pub fn refusals(&self) -> [(Refusal, u64); Refusal::ALL.len()] {
        Refusal::ALL.map(|reason| (reason, self.refused[reason as usize].load(Ordering::Relaxed)))
    }
}

/// Adds one to a counter.
pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_the_first_tokens() {
        assert_eq!(subject_prefix("orders.eu.paid", 1), "orders");
        assert_eq!(subject_prefix("orders.eu.paid", 2), "orders.eu");
        assert_eq!(subject_prefix("orders", 2), "orders");
        assert_eq!(subject_prefix("orders.eu", 5), "orders.eu");
        assert_eq!(subject_prefix("_INBOX.abc123.7", 2), "_INBOX", "inboxes are one prefix");
    }

    #[test]
    fn subject_traffic_is_off_until_enabled_then_bounded() {
        let traffic = SubjectTraffic::new(2);
        traffic.record_in("a.x", 5);
        assert!(traffic.snapshot().is_empty(), "off by default");
        traffic.enable(1);
        traffic.record_in("a.x", 5);
        traffic.record_in("a.y", 5);
        traffic.record_out("b.x", 7);
        traffic.record_in("c.x", 1);
        traffic.record_in("d", 1);
        let rows = traffic.snapshot();
        let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(names, ["_other", "a", "b"]);
        assert_eq!(rows[1].1, (2, 10));
        assert_eq!(rows[2].2, (1, 7));
        assert_eq!(rows[0].1, (2, 2), "new prefixes past the bound share one key");
    }

    #[test]
    fn histogram_buckets_count_and_sum() {
        let histogram = Histogram::new(&[0.001, 0.01]);
        histogram.observe(Duration::from_micros(500));
        histogram.observe(Duration::from_millis(5));
        histogram.observe(Duration::from_secs(1));
        let (sum, count, buckets) = histogram.snapshot();
        assert_eq!(count, 3);
        assert!((sum - 1.0055).abs() < 1e-9);
        assert_eq!(buckets, [(0.001, 1), (0.01, 1), (f64::INFINITY, 1)]);
    }

    #[test]
    fn refusals_are_counted_per_reason() {
        let counters = PublishCounters::default();
        counters.refuse(Refusal::Schema);
        counters.refuse(Refusal::Schema);
        counters.refuse(Refusal::Other);
        let refusals = counters.refusals();
        assert_eq!(refusals[0], (Refusal::Schema, 2));
        assert_eq!(refusals[Refusal::ALL.len() - 1], (Refusal::Other, 1));
        assert!(Refusal::ALL.iter().enumerate().all(|(i, r)| *r as usize == i), "ALL is in discriminant order");
    }

    #[test]
    fn shed_counts_each_subject_until_the_bound_then_the_rest_under_one_key() {
        let shed = Shed::default();
        for n in 0..limits::SHED_SUBJECTS_MAX {
            shed.record(&format!("lossy.{n}"), 10);
        }
        shed.record("lossy.0", 10);
        shed.record("late.a", 10);
        shed.record("late.b", 10);
        shed.record("late.a", 10);

        let subjects = shed.subjects();
        assert_eq!(subjects.len(), limits::SHED_SUBJECTS_MAX + 1, "the bound, plus the overflow key");
        assert_eq!(subjects["lossy.0"], 2, "a subject already named keeps its own count");
        assert_eq!(subjects[limits::SHED_OTHER_SUBJECTS_KEY], 3, "new subjects past the bound share one key");
        assert!(!subjects.contains_key("late.a"));
        let counted: u64 = subjects.values().sum();
        assert_eq!(shed.total.snapshot(), (counted, counted * 10), "every shed message is counted");
    }
}
