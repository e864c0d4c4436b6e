//! Parsed payloads of stored messages, shared by the filtered consumers that read them.
//!
//! Each consumer reads a stored message on its own, at its own time, so the one-`Prepared`-per-
//! message sharing of core subscriptions does not reach across consumers. This cache does: the
//! JSON value a payload parses (or decodes) to, keyed by the payload's bytes. The value is a
//! pure function of those bytes (a schema id names one immutable schema), so an entry can never
//! be stale. First in, first out; bounded in entries and in payload bytes. A reader that finds
//! an entry being filled waits for it rather than parsing again.

use std::collections::{HashMap, VecDeque};
use std::hash::Hasher;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value as Json;

use super::message::PayloadIssue;
use crate::limits;
use crate::sync::lock;

type Parse = Result<Arc<Json>, PayloadIssue>;

struct Entry {
    payload: Box<[u8]>,
    value: OnceLock<Parse>,
}

#[derive(Default)]
struct Entries {
    by_hash: HashMap<u64, Arc<Entry>>,
    /// Hashes in insertion order; each key of `by_hash` once.
    order: VecDeque<u64>,
    /// Payload bytes held.
    bytes: usize,
}

/// Parsed stored payloads, keyed by their bytes.
#[derive(Default)]
pub struct PayloadCache {
    entries: Mutex<Entries>,
}

impl std::fmt::Debug for PayloadCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayloadCache").field("entries", &lock(&self.entries).by_hash.len()).finish()
    }
}

fn hash(payload: &[u8]) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    hasher.write(payload);
    hasher.finish()
}

impl PayloadCache {
    /// The parse of `payload`: from the cache, or by `parse` (then cached). True when it came
    /// from the cache. Payloads over `FILTER_CACHE_PAYLOAD_BYTES_MAX` are parsed, not cached.
    pub fn get_or_parse(&self, payload: &[u8], parse: impl FnOnce() -> Parse) -> (Parse, bool) {
        if payload.len() > limits::FILTER_CACHE_PAYLOAD_BYTES_MAX {
            return (parse(), false);
        }
        let entry = self.entry(payload);
        let mut parsed_here = false;
        let value = entry.value.get_or_init(|| {
            parsed_here = true;
            parse()
        });
        (value.clone(), !parsed_here)
    }

    /// The entry for `payload`, made (and older ones evicted) when absent.
    fn entry(&self, payload: &[u8]) -> Arc<Entry> {
        let key = hash(payload);
        let mut entries = lock(&self.entries);
        if let Some(found) = entries.by_hash.get(&key).filter(|found| *found.payload == *payload) {
            return found.clone();
        }
        let entry = Arc::new(Entry { payload: payload.into(), value: OnceLock::new() });
        // A different payload with the same hash is replaced; its place in `order` is kept.
        match entries.by_hash.insert(key, entry.clone()) {
            Some(replaced) => entries.bytes -= replaced.payload.len(),
            None => entries.order.push_back(key),
        }
        entries.bytes += payload.len();
        while entries.order.len() > limits::FILTER_CACHE_ENTRIES_MAX || entries.bytes > limits::FILTER_CACHE_BYTES_MAX {
            let Some(oldest) = entries.order.pop_front() else { break };
            if let Some(evicted) = entries.by_hash.remove(&oldest) {
                entries.bytes -= evicted.payload.len();
            }
        }
        entry
    }

    /// Entries held (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.entries).by_hash.len()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn parse_counting<'a>(calls: &'a Cell<u32>, payload: &'a [u8]) -> impl FnOnce() -> Parse + 'a {
        move || {
            calls.set(calls.get() + 1);
            serde_json::from_slice(payload).map(Arc::new).map_err(|_| PayloadIssue::NotJson)
        }
    }

    #[test]
    fn a_payload_is_parsed_once_for_every_reader() {
        let cache = PayloadCache::default();
        let calls = Cell::new(0);
        let payload = br#"{"confidence": 0.9}"#;
        let (first, hit) = cache.get_or_parse(payload, parse_counting(&calls, payload));
        assert!(!hit);
        let (second, hit) = cache.get_or_parse(payload, parse_counting(&calls, payload));
        assert!(hit);
        assert_eq!(calls.get(), 1);
        assert!(Arc::ptr_eq(&first.expect("json"), &second.expect("json")));
        let (issue, _) = cache.get_or_parse(b"not json", parse_counting(&calls, b"not json"));
        let (again, hit) = cache.get_or_parse(b"not json", parse_counting(&calls, b"not json"));
        assert_eq!((issue, again.clone(), hit), (Err(PayloadIssue::NotJson), Err(PayloadIssue::NotJson), true));
        assert_eq!(calls.get(), 2, "failures are cached too");
    }

    #[test]
    fn the_oldest_entries_leave_when_full() {
        let cache = PayloadCache::default();
        let calls = Cell::new(0);
        let payloads: Vec<Vec<u8>> =
            (0..=limits::FILTER_CACHE_ENTRIES_MAX).map(|i| format!("{{\"n\": {i}}}").into_bytes()).collect();
        for payload in &payloads {
            let (parsed, hit) = cache.get_or_parse(payload, parse_counting(&calls, payload));
            assert!(parsed.is_ok() && !hit);
        }
        assert_eq!(cache.len(), limits::FILTER_CACHE_ENTRIES_MAX);
        let (_, hit) = cache.get_or_parse(&payloads[0], parse_counting(&calls, &payloads[0]));
        assert!(!hit, "the first payload was evicted");
        let last = payloads.last().expect("payloads");
        assert!(cache.get_or_parse(last, parse_counting(&calls, last)).1, "the last one is still there");
    }

    #[test]
    fn large_payloads_are_parsed_but_not_kept() {
        let cache = PayloadCache::default();
        let calls = Cell::new(0);
        let large = format!("[{}0]", "0,".repeat(limits::FILTER_CACHE_PAYLOAD_BYTES_MAX / 2)).into_bytes();
        for _ in 0..2 {
            let (parsed, hit) = cache.get_or_parse(&large, parse_counting(&calls, &large));
            assert!(parsed.is_ok() && !hit);
        }
        assert_eq!((calls.get(), cache.len()), (2, 0));
    }
}
