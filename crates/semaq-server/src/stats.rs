//! Counters shared by connections and read by monitoring. Relaxed atomics: each counter is
//! independent and monitoring only needs eventually consistent totals.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::limits;
use crate::sync::lock;

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

/// Adds one to a counter.
pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

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
