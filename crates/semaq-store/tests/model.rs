//! Both stores against a plain model (a sorted map of live messages) over random operation
//! sequences: appends, deletes, every purge variant, limits, syncs, compactions, clean restarts
//! and (file store) crashes that lose every unsynced byte.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound::{Excluded, Included};
use std::path::{Path, PathBuf};
use std::time::Duration;

use proptest::prelude::*;
use semaq_store::{DiscardPolicy, MemoryStore, PurgeRequest, SizeModel, StoreError, StoreLimits, StreamStore};

const SUBJECTS: [&str; 4] = ["a.x", "a.y", "b.x", "c"];
const FILTERS: [Option<&str>; 6] = [None, Some("a.*"), Some("*.x"), Some(">"), Some("c"), Some("a.>")];
/// Bytes of a segment file that are durable as soon as it exists (its header).
const SEGMENT_HEADER_BYTES: u64 = 24;
/// Model time advances this much per append.
const TICK_NS: i64 = 7;

#[derive(Debug, Clone)]
enum Op {
    Append {
        subject: usize,
        with_headers: bool,
        payload_bytes: usize,
    },
    Delete {
        pick: u64,
    },
    Purge {
        subject: Option<usize>,
        keep: Option<u64>,
        up_to_pick: Option<u64>,
    },
    EnforceLimits {
        later_ns: i64,
    },
    UpdateLimits(StoreLimits),
    Sync,
    Compact,
    /// Clean shutdown (`close`), then open again.
    Reopen,
    /// Power loss: every byte not synced is gone, then open again (file store only).
    Crash,
}

fn append() -> impl Strategy<Value = Op> {
    (0..SUBJECTS.len(), any::<bool>(), 0..400usize).prop_map(|(subject, with_headers, payload_bytes)| Op::Append {
        subject,
        with_headers,
        payload_bytes,
    })
}

fn purge() -> impl Strategy<Value = Op> {
    let subject = proptest::option::of(0..SUBJECTS.len() + 1);
    (subject, proptest::option::of(0..4u64), proptest::option::of(any::<u64>()))
        .prop_map(|(subject, keep, up_to_pick)| Op::Purge { subject, keep, up_to_pick })
}

fn limits() -> impl Strategy<Value = StoreLimits> {
    let discard = prop_oneof![Just(DiscardPolicy::Old), Just(DiscardPolicy::New)];
    (
        proptest::option::of(1..12u64),
        proptest::option::of(200..3_000u64),
        proptest::option::of(1..200u64),
        proptest::option::of(1..4u64),
        proptest::option::of(50..400u32),
        discard,
        any::<bool>(),
    )
        .prop_map(|(max_msgs, max_bytes, max_age_ns, max_msgs_per_subject, max_msg_size, discard, per_subject)| {
            StoreLimits {
                max_msgs,
                max_bytes,
                max_age: max_age_ns.map(Duration::from_nanos),
                max_msgs_per_subject,
                max_msg_size,
                discard,
                discard_new_per_subject: per_subject,
            }
        })
}

/// Operations without limits, crashes included.
fn plain_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => append(),
        3 => any::<u64>().prop_map(|pick| Op::Delete { pick }),
        1 => purge(),
        2 => Just(Op::Sync),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

/// Operations under changing limits (no crashes: unsynced limit removals are re-derived at
/// open only for count limits, which the model does not try to follow).
fn limited_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => append(),
        2 => any::<u64>().prop_map(|pick| Op::Delete { pick }),
        1 => purge(),
        2 => (0..100i64).prop_map(|later_ns| Op::EnforceLimits { later_ns }),
        1 => limits().prop_map(Op::UpdateLimits),
        1 => Just(Op::Sync),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

/// A live message in the model: subject, headers, payload, timestamp.
type Entry = (String, Option<Vec<u8>>, Vec<u8>, i64);

#[derive(Debug, Default, Clone)]
struct Model {
    live: BTreeMap<u64, Entry>,
    last_seq: u64,
    last_ts: i64,
    limits: StoreLimits,
    /// Counts bytes as nats-server's file store does (else as its memory store).
    file: bool,
}

impl Model {
    fn size_of(&self, entry: &Entry) -> u64 {
        let model = if self.file { SizeModel::File } else { SizeModel::Memory };
        model.message_bytes(&entry.0, entry.1.as_deref(), &entry.2)
    }

    fn bytes(&self) -> u64 {
        self.live.values().map(|entry| self.size_of(entry)).sum()
    }

    fn count(&self, subject: &str) -> u64 {
        self.live.values().filter(|entry| entry.0 == subject).count() as u64
    }

    /// The naive statement of the append rules.
    fn append(&mut self, entry: Entry) -> Result<u64, &'static str> {
        let limits = self.limits.clone();
        let message_bytes = entry.1.as_ref().map_or(0, Vec::len) + entry.2.len();
        if limits.max_msg_size.is_some_and(|max| message_bytes > max as usize) {
            return Err("MessageTooLarge");
        }
        if limits.discard == DiscardPolicy::New {
            if limits.max_msgs.is_some_and(|max| self.live.len() as u64 >= max) {
                return Err("MaxMsgs");
            }
            if limits.max_bytes.is_some_and(|max| self.bytes() + self.size_of(&entry) > max) {
                return Err("MaxBytes");
            }
            let per_subject_full = limits.max_msgs_per_subject.is_some_and(|max| self.count(&entry.0) >= max);
            if limits.discard_new_per_subject && per_subject_full {
                return Err("MaxMsgsPerSubject");
            }
        }
        self.last_seq += 1;
        self.last_ts = entry.3;
        let subject = entry.0.clone();
        self.live.insert(self.last_seq, entry);
        self.enforce_subject(&subject);
        self.enforce_discard_old();
        Ok(self.last_seq)
    }

    fn per_subject_max(&self) -> Option<u64> {
        let refuses = self.limits.discard == DiscardPolicy::New && self.limits.discard_new_per_subject;
        self.limits.max_msgs_per_subject.filter(|_| !refuses)
    }

    fn enforce_subject(&mut self, subject: &str) {
        let Some(max) = self.per_subject_max() else { return };
        while self.count(subject) > max {
            let oldest = self.live.iter().find(|(_, entry)| entry.0 == subject).map(|(&seq, _)| seq);
            self.live.remove(&oldest.unwrap());
        }
    }

    fn enforce_discard_old(&mut self) {
        if self.limits.discard != DiscardPolicy::Old {
            return;
        }
        let max_msgs = self.limits.max_msgs.unwrap_or(u64::MAX);
        let max_bytes = self.limits.max_bytes.unwrap_or(u64::MAX);
        while self.live.len() as u64 > max_msgs || self.bytes() > max_bytes {
            self.live.pop_first();
        }
    }

    fn enforce_counts(&mut self) {
        for subject in SUBJECTS {
            self.enforce_subject(subject);
        }
        self.enforce_discard_old();
    }

    fn expire(&mut self, now_ns: i64) {
        let Some(max_age) = self.limits.max_age else { return };
        let cutoff = now_ns - i64::try_from(max_age.as_nanos()).unwrap();
        while self.live.first_key_value().is_some_and(|(_, entry)| entry.3 <= cutoff) {
            self.live.pop_first();
        }
    }

    fn purge(&mut self, request: &PurgeRequest) -> Option<u64> {
        if request.keep.is_some() && request.up_to_seq.is_some() {
            return None;
        }
        let filter = request.subject.as_deref().filter(|subject| *subject != ">");
        let below = request.up_to_seq.unwrap_or(u64::MAX);
        let mut kept: BTreeMap<&str, u64> = BTreeMap::new();
        let mut doomed = Vec::new();
        for (&seq, (subject, ..)) in self.live.iter().rev() {
            let matching = filter.is_none_or(|filter| matches(filter, subject));
            if !matching || seq >= below {
                continue;
            }
            // `keep` counts across every matching subject, as nats-server's PurgeEx.
            let count = kept.entry("").or_insert(0);
            if *count < request.keep.unwrap_or(0) {
                *count += 1;
            } else {
                doomed.push(seq);
            }
        }
        for seq in &doomed {
            self.live.remove(seq);
        }
        Some(doomed.len() as u64)
    }
}

fn matches(filter: &str, subject: &str) -> bool {
    let mut filter_tokens = filter.split('.');
    let mut subject_tokens = subject.split('.');
    loop {
        match (filter_tokens.next(), subject_tokens.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(f), Some(s)) if f == s => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

fn error_name(error: &StoreError) -> &'static str {
    match error {
        StoreError::MaxMsgs => "MaxMsgs",
        StoreError::MaxBytes => "MaxBytes",
        StoreError::MaxMsgsPerSubject => "MaxMsgsPerSubject",
        StoreError::MessageTooLarge { .. } => "MessageTooLarge",
        _ => "other",
    }
}

/// Every observable the model predicts.
fn check(store: &dyn StreamStore, model: &Model) -> Result<(), TestCaseError> {
    let state = store.state();
    let first_seq = model.live.keys().next().copied().unwrap_or(model.last_seq + 1);
    let subjects: BTreeMap<String, u64> = model.live.values().fold(BTreeMap::new(), |mut counts, (subject, ..)| {
        *counts.entry(subject.clone()).or_insert(0) += 1;
        counts
    });
    prop_assert_eq!(state.msgs, model.live.len() as u64);
    prop_assert_eq!(state.first_seq, first_seq);
    prop_assert_eq!(state.last_seq, model.last_seq);
    prop_assert_eq!(state.bytes, model.bytes());
    prop_assert_eq!(state.num_subjects, subjects.len() as u64);
    let span = if model.live.is_empty() { 0 } else { model.last_seq - first_seq + 1 };
    prop_assert_eq!(state.num_deleted, span - model.live.len() as u64);
    prop_assert_eq!(&store.subjects_state(None), &subjects);
    prop_assert_eq!(state.corruption, None);
    for seq in 0..=model.last_seq + 1 {
        let found = store.get(seq).unwrap();
        let expected = model.live.get(&seq);
        prop_assert_eq!(found.is_some(), expected.is_some(), "seq {}", seq);
        if let (Some(found), Some((subject, headers, payload, ts))) = (found, expected) {
            prop_assert_eq!(&found.subject, subject);
            prop_assert_eq!(found.headers.as_deref(), headers.as_deref());
            prop_assert_eq!(&found.payload[..], &payload[..]);
            prop_assert_eq!(found.timestamp_ns, *ts);
        }
    }
    for filter in FILTERS {
        for from in [0, first_seq, first_seq + 3, model.last_seq] {
            let expected = model.live.range(from..).find(|(_, (s, ..))| filter.is_none_or(|f| matches(f, s)));
            let found = store.get_next(from, filter).unwrap().map(|message| message.seq);
            prop_assert_eq!(found, expected.map(|(&seq, _)| seq), "get_next({}, {:?})", from, filter);
            let to = from + 5;
            let counted =
                model.live.range(from..=to).filter(|(_, (s, ..))| filter.is_none_or(|f| matches(f, s))).count();
            prop_assert_eq!(
                store.count_matching(from..to + 1, filter, u64::MAX),
                Some(counted as u64),
                "count_matching({}, {}, {:?})",
                from,
                to,
                filter
            );
        }
        let Some(filter) = filter else { continue };
        let last = model.live.iter().rev().find(|(_, (s, ..))| matches(filter, s)).map(|(&seq, _)| seq);
        prop_assert_eq!(store.get_last_for_subject(filter).unwrap().map(|message| message.seq), last);
    }
    Ok(())
}

/// What is on disk for a file store, as far as a crash is concerned.
struct Disk {
    dir: tempfile::TempDir,
    /// File lengths at the last point where everything was durable.
    synced_lengths: HashMap<PathBuf, u64>,
    /// The model at that point.
    synced_model: Model,
}

impl Disk {
    fn mark_synced(&mut self, model: &Model) {
        self.synced_lengths = common::file_lengths(self.dir.path());
        self.synced_model = model.clone();
    }

    /// Power loss: unsynced bytes go, except that sealed segments (those with an index) were
    /// fsynced when sealed, and new segment files keep their header (fsynced at creation).
    fn lose_unsynced(&self) {
        let dir = self.dir.path();
        for (path, length) in common::file_lengths(dir) {
            let sealed = path.with_extension("idx").exists();
            let keep = match self.synced_lengths.get(&path) {
                _ if sealed => length,
                Some(&synced) => synced.min(length),
                None if path.extension().is_some_and(|extension| extension == "log") => SEGMENT_HEADER_BYTES,
                None => length,
            };
            std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(keep).unwrap();
        }
    }
}

struct Harness {
    store: Box<dyn StreamStore>,
    model: Model,
    disk: Option<Disk>,
}

impl Harness {
    fn memory(limits: StoreLimits) -> Self {
        let model = Model { limits: limits.clone(), ..Model::default() };
        Harness { store: Box::new(MemoryStore::new(limits)), model, disk: None }
    }

    fn file(limits: StoreLimits) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = common::open_file(dir.path(), limits.clone());
        let model = Model { limits, file: true, ..Model::default() };
        let mut disk = Disk { dir, synced_lengths: HashMap::new(), synced_model: model.clone() };
        disk.mark_synced(&model);
        Harness { store: Box::new(store), model, disk: Some(disk) }
    }

    fn dir(&self) -> Option<&Path> {
        self.disk.as_ref().map(|disk| disk.dir.path())
    }

    /// After an operation that makes everything durable.
    fn synced(&mut self) {
        if let Some(disk) = &mut self.disk {
            disk.mark_synced(&self.model);
        }
    }

    fn reopen(&mut self) {
        let Some(dir) = self.dir().map(Path::to_path_buf) else { return };
        let placeholder: Box<dyn StreamStore> = Box::new(MemoryStore::new(StoreLimits::default()));
        drop(std::mem::replace(&mut self.store, placeholder));
        let reopened = common::open_file(&dir, self.model.limits.clone());
        assert_eq!(reopened.recovery_report().torn_bytes_truncated, 0);
        self.store = Box::new(reopened);
        self.synced();
    }

    fn crash(&mut self) -> Result<(), TestCaseError> {
        let Some(disk) = &self.disk else { return Ok(()) };
        let dir = disk.dir.path().to_path_buf();
        let placeholder: Box<dyn StreamStore> = Box::new(MemoryStore::new(StoreLimits::default()));
        drop(std::mem::replace(&mut self.store, placeholder));
        disk.lose_unsynced();
        let store = common::open_file(&dir, self.model.limits.clone());
        // Everything synced survives; of what was not, at most a prefix of the appends (those
        // that a segment seal happened to make durable).
        let recovered_last = store.state().last_seq;
        let synced = &disk.synced_model;
        prop_assert!(synced.last_seq <= recovered_last && recovered_last <= self.model.last_seq);
        let mut model = synced.clone();
        for (&seq, entry) in self.model.live.range((Excluded(synced.last_seq), Included(recovered_last))) {
            model.live.insert(seq, entry.clone());
            model.last_ts = entry.3;
        }
        model.last_seq = recovered_last;
        self.model = model;
        self.store = Box::new(store);
        self.synced();
        Ok(())
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Append { subject, with_headers, payload_bytes } => {
                let subject = SUBJECTS[*subject];
                let headers =
                    with_headers.then(|| format!("NATS/1.0\r\nN: {}\r\n\r\n", self.model.last_seq).into_bytes());
                // The low byte of `index + last_seq`: a pattern that differs from message to message.
                let payload: Vec<u8> =
                    (0..*payload_bytes).map(|index| (index as u64 + self.model.last_seq).to_le_bytes()[0]).collect();
                let ts = self.model.last_ts.max(0) + TICK_NS;
                let stored = self.store.append(subject, headers.as_deref(), &payload, ts);
                let expected = self.model.append((subject.to_string(), headers, payload, ts));
                prop_assert_eq!(stored.map(|(seq, _)| seq).map_err(|error| error_name(&error)), expected);
            }
            Op::Delete { pick } => {
                let seq = pick % (self.model.last_seq + 2);
                prop_assert_eq!(self.store.delete(seq).unwrap(), self.model.live.remove(&seq).is_some());
                self.synced();
            }
            Op::Purge { subject, keep, up_to_pick } => {
                let subject = subject.map(|index| SUBJECTS.get(index).copied().unwrap_or(">").to_string());
                let up_to_seq = up_to_pick.map(|pick| pick % (self.model.last_seq + 3));
                let request = PurgeRequest { subject, keep: *keep, up_to_seq };
                let purged = self.store.purge(&request).ok();
                prop_assert_eq!(purged, self.model.purge(&request));
                if purged.is_some() {
                    self.synced(); // a refused purge changes nothing, syncs nothing
                }
            }
            Op::EnforceLimits { later_ns } => {
                let now_ns = self.model.last_ts + later_ns;
                self.store.enforce_limits(now_ns).unwrap();
                self.model.expire(now_ns);
                self.model.enforce_counts();
            }
            Op::UpdateLimits(limits) => {
                self.store.update_limits(limits.clone()).unwrap();
                self.model.limits = limits.clone();
                self.model.enforce_counts();
            }
            Op::Sync => {
                self.store.sync().unwrap();
                self.synced();
            }
            Op::Compact => {
                self.store.compact().unwrap();
                self.synced();
            }
            Op::Reopen => {
                self.store.close().unwrap();
                self.reopen();
            }
            Op::Crash => self.crash()?,
        }
        Ok(())
    }

    fn run(mut self, ops: &[Op]) -> Result<(), TestCaseError> {
        for op in ops {
            self.apply(op)?;
            check(&*self.store, &self.model)?;
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_memory_store_behaves_like_the_model(ops in proptest::collection::vec(plain_op(), 1..60)) {
        Harness::memory(StoreLimits::default()).run(&ops)?;
    }

    #[test]
    fn the_memory_store_applies_limits_like_the_model(
        limits in limits(),
        ops in proptest::collection::vec(limited_op(), 1..60),
    ) {
        Harness::memory(limits).run(&ops)?;
    }
}

proptest! {
    // Fewer cases: every delete, purge and segment roll fsyncs.
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn the_file_store_behaves_like_the_model_across_restarts_and_crashes(
        ops in proptest::collection::vec(plain_op(), 1..60),
    ) {
        Harness::file(StoreLimits::default()).run(&ops)?;
    }

    #[test]
    fn the_file_store_applies_limits_like_the_model_across_restarts(
        limits in limits(),
        ops in proptest::collection::vec(limited_op(), 1..60),
    ) {
        Harness::file(limits).run(&ops)?;
    }
}
