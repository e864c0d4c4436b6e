//! End-to-end latency: from a message's store time (its JetStream publish) to its first
//! delivery by a consumer, per stream and per subject prefix, with the share of deliveries
//! within the latency objective (`latency_objective`, default 15 ms, the seed's P99 target).
//!
//! Two histograms per key: one since start (for `/metrics`), one of the last minute (for the
//! dashboard and `semaq top`), which restarts every `LATENCY_RECENT_WINDOW`, keeping the
//! previous minute readable meanwhile. Histograms span 1 µs to an hour at 2 significant digits
//! (about 27 KB each, three a key); at most `LATENCY_KEYS_MAX` streams and as many subject
//! prefixes, then one `_other` each, so all of it is bounded at about 11 MB.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::limits;
use crate::sync::lock;

/// The key that collects everything past the bound.
pub const OVERFLOW_KEY: &str = "_other";
/// Longest latency a histogram holds; longer ones count as this.
const HIGHEST_US: u64 = 3_600_000_000;

fn histogram() -> Option<Histogram<u64>> {
    Histogram::new_with_bounds(1, HIGHEST_US, 2).ok()
}

/// One key's latencies.
#[derive(Debug)]
struct Entry {
    total: Histogram<u64>,
    recent: Histogram<u64>,
    previous: Histogram<u64>,
    /// Deliveries within the objective, since start.
    within: u64,
}

impl Entry {
    fn new() -> Option<Self> {
        Some(Self { total: histogram()?, recent: histogram()?, previous: histogram()?, within: 0 })
    }

    fn record(&mut self, latency_us: u64, objective_us: u64) {
        let value = latency_us.clamp(1, HIGHEST_US);
        self.total.saturating_record(value);
        self.recent.saturating_record(value);
        self.within += u64::from(latency_us <= objective_us);
    }

    fn rotate(&mut self) {
        std::mem::swap(&mut self.recent, &mut self.previous);
        self.recent.reset();
    }
}

/// Percentiles and the objective share of one key, as `/api/latency` serves it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// The stream or subject prefix.
    pub key: String,
    /// Deliveries since start.
    pub count: u64,
    /// Median since start, microseconds.
    pub p50_us: u64,
    /// 99th percentile since start, microseconds.
    pub p99_us: u64,
    /// 99.9th percentile since start, microseconds.
    pub p999_us: u64,
    /// Longest since start, microseconds.
    pub max_us: u64,
    /// Share of deliveries since start within the objective, 0 to 1 (1 with none).
    pub within_objective: f64,
    /// Deliveries in the last one to two minutes.
    pub recent_count: u64,
    /// 99th percentile of the last one to two minutes, microseconds.
    pub recent_p99_us: u64,
}

/// Every key's summary, and the objective.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// The latency objective, microseconds.
    pub objective_us: u64,
    /// Per stream.
    pub streams: Vec<Summary>,
    /// Per subject prefix (the first `LATENCY_SUBJECT_DEPTH` tokens).
    pub subjects: Vec<Summary>,
}

/// A since-start histogram for `/metrics`: cumulative counts at each bound (µs), the count, sum
/// and deliveries within the objective.
#[derive(Debug, Clone, PartialEq)]
pub struct Buckets {
    /// `stream` or `subject`.
    pub kind: &'static str,
    /// The stream or subject prefix.
    pub key: String,
    /// (upper bound µs, deliveries at or below it).
    pub cumulative: Vec<(u64, u64)>,
    /// Deliveries.
    pub count: u64,
    /// Sum of latencies, µs (from the histogram, so within its precision).
    pub sum_us: u64,
    /// Deliveries within the objective.
    pub within: u64,
}

/// Bounds of the exported histogram buckets, microseconds: 100 µs to 10 s.
pub const EXPORT_BOUNDS_US: [u64; 12] =
    [100, 250, 500, 1_000, 2_500, 5_000, 10_000, 15_000, 25_000, 100_000, 1_000_000, 10_000_000];

#[derive(Debug)]
struct Inner {
    streams: HashMap<String, Entry>,
    subjects: HashMap<String, Entry>,
    rotated: Instant,
}

/// End-to-end latencies, shared by consumers (which record) and the monitoring endpoints.
#[derive(Debug)]
pub struct Latency {
    objective_us: u64,
    inner: Mutex<Inner>,
}

fn entry<'a>(map: &'a mut HashMap<String, Entry>, key: &str) -> Option<&'a mut Entry> {
    let key = match map.contains_key(key) || map.len() < limits::LATENCY_KEYS_MAX {
        true => key,
        false => OVERFLOW_KEY,
    };
    if !map.contains_key(key) {
        map.insert(key.to_string(), Entry::new()?);
    }
    map.get_mut(key)
}

fn summary(key: &str, entry: &Entry) -> Summary {
    let total = &entry.total;
    let count = total.len();
    let mut recent = entry.previous.clone();
    let _ = recent.add(&entry.recent);
    Summary {
        key: key.to_string(),
        count,
        p50_us: total.value_at_quantile(0.5),
        p99_us: total.value_at_quantile(0.99),
        p999_us: total.value_at_quantile(0.999),
        max_us: total.max(),
        within_objective: if count == 0 { 1.0 } else { entry.within as f64 / count as f64 },
        recent_count: recent.len(),
        recent_p99_us: recent.value_at_quantile(0.99),
    }
}

fn summaries(map: &HashMap<String, Entry>) -> Vec<Summary> {
    let mut out: Vec<Summary> = map.iter().map(|(key, entry)| summary(key, entry)).collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

impl Latency {
    /// Latencies judged against `objective`.
    pub fn new(objective: Duration) -> Self {
        let inner = Inner { streams: HashMap::new(), subjects: HashMap::new(), rotated: Instant::now() };
        Self { objective_us: objective.as_micros().try_into().unwrap_or(u64::MAX), inner: Mutex::new(inner) }
    }

    /// The objective, microseconds.
    pub fn objective_us(&self) -> u64 {
        self.objective_us
    }

    /// Records first deliveries of `stream`: (subject, latency µs) each.
    pub fn record(&self, stream: &str, deliveries: &[(&str, u64)]) {
        if deliveries.is_empty() {
            return;
        }
        let mut inner = lock(&self.inner);
        self.rotate_if_due(&mut inner);
        if let Some(entry) = entry(&mut inner.streams, stream) {
            for (_, latency_us) in deliveries {
                entry.record(*latency_us, self.objective_us);
            }
        }
        for (subject, latency_us) in deliveries {
            if let Some(entry) =
                entry(&mut inner.subjects, crate::stats::subject_prefix(subject, limits::LATENCY_SUBJECT_DEPTH))
            {
                entry.record(*latency_us, self.objective_us);
            }
        }
    }

    fn rotate_if_due(&self, inner: &mut Inner) {
        if inner.rotated.elapsed() < limits::LATENCY_RECENT_WINDOW {
            return;
        }
        inner.rotated = Instant::now();
        inner.streams.values_mut().chain(inner.subjects.values_mut()).for_each(Entry::rotate);
    }

    /// Every key's percentiles and objective share.
    pub fn report(&self) -> Report {
        let mut inner = lock(&self.inner);
        self.rotate_if_due(&mut inner);
        Report {
            objective_us: self.objective_us,
            streams: summaries(&inner.streams),
            subjects: summaries(&inner.subjects),
        }
    }

    /// Since-start histograms at [`EXPORT_BOUNDS_US`], for `/metrics`.
    pub fn buckets(&self) -> Vec<Buckets> {
        let inner = lock(&self.inner);
        let export = |kind: &'static str, map: &HashMap<String, Entry>| {
            let mut out: Vec<Buckets> = map
                .iter()
                .map(|(key, entry)| Buckets {
                    kind,
                    key: key.clone(),
                    cumulative: EXPORT_BOUNDS_US
                        .iter()
                        .map(|bound| (*bound, entry.total.count_between(0, *bound)))
                        .collect(),
                    count: entry.total.len(),
                    sum_us: (entry.total.mean() * entry.total.len() as f64) as u64,
                    within: entry.within,
                })
                .collect();
            out.sort_by(|a, b| a.key.cmp(&b.key));
            out
        };
        let mut out = export("stream", &inner.streams);
        out.extend(export("subject", &inner.subjects));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_the_objective_share_per_stream_and_subject() {
        let latency = Latency::new(Duration::from_millis(15));
        let mut deliveries: Vec<(&str, u64)> = (0..99).map(|_| ("ai.chat.one", 1_000)).collect();
        deliveries.push(("ai.embed.x", 40_000));
        latency.record("EVENTS", &deliveries);
        let report = latency.report();
        let stream = &report.streams[0];
        assert_eq!((stream.key.as_str(), stream.count), ("EVENTS", 100));
        assert!((stream.within_objective - 0.99).abs() < 1e-9);
        assert!((990..=1010).contains(&stream.p50_us), "{stream:?}");
        assert!((39_500..=40_500).contains(&stream.max_us), "{stream:?}");
        let keys: Vec<&str> = report.subjects.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, vec!["ai.chat", "ai.embed"]);
        assert_eq!(report.subjects[1].within_objective, 0.0);
    }

    #[test]
    fn keys_past_the_bound_go_to_other() {
        let latency = Latency::new(Duration::from_millis(15));
        let names: Vec<String> = (0..limits::LATENCY_KEYS_MAX + 3).map(|n| format!("S{n}")).collect();
        for name in &names {
            latency.record(name, &[("a.b", 10)]);
        }
        let report = latency.report();
        assert_eq!(report.streams.len(), limits::LATENCY_KEYS_MAX + 1);
        assert_eq!(report.streams.iter().find(|s| s.key == OVERFLOW_KEY).map(|s| s.count), Some(3));
    }

    #[test]
    fn exported_buckets_are_cumulative() {
        let latency = Latency::new(Duration::from_millis(15));
        latency.record("S", &[("a", 200), ("a", 2_000), ("a", 20_000_000)]);
        let buckets = latency.buckets();
        let stream = buckets.iter().find(|b| b.kind == "stream").unwrap();
        assert_eq!(stream.cumulative[1], (250, 1));
        assert_eq!(stream.cumulative[4], (2_500, 2));
        assert_eq!(stream.cumulative.last(), Some(&(10_000_000, 2)), "20 s is past the largest bound");
        assert_eq!((stream.count, stream.within), (3, 2));
    }
}
