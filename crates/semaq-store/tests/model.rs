//! Both stores against a plain model (a sorted map of live messages) over random operation
//! sequences: appends, deletes, every purge variant, syncs, compactions and restarts.

mod common;

use std::collections::BTreeMap;

use proptest::prelude::*;
use semaq_store::{stored_size_bytes, FileStore, MemoryStore, PurgeRequest, StoreLimits, StreamStore};

const SUBJECTS: [&str; 4] = ["a.x", "a.y", "b.x", "c"];
const FILTERS: [Option<&str>; 6] = [None, Some("a.*"), Some("*.x"), Some(">"), Some("c"), Some("a.>")];

#[derive(Debug, Clone)]
enum Op {
    Append { subject: usize, with_headers: bool, payload_bytes: usize },
    Delete { pick: u64 },
    Purge { subject: Option<usize>, keep: Option<u64>, up_to_pick: Option<u64> },
    Sync,
    Compact,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..SUBJECTS.len(), any::<bool>(), 0..400usize)
            .prop_map(|(subject, with_headers, payload_bytes)| Op::Append { subject, with_headers, payload_bytes }),
        3 => any::<u64>().prop_map(|pick| Op::Delete { pick }),
        1 => (proptest::option::of(0..SUBJECTS.len() + 1), proptest::option::of(0..4u64), proptest::option::of(any::<u64>()))
            .prop_map(|(subject, keep, up_to_pick)| Op::Purge { subject, keep, up_to_pick }),
        1 => Just(Op::Sync),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

/// A live message in the model: subject, headers, payload, timestamp.
type Entry = (String, Option<Vec<u8>>, Vec<u8>, i64);

#[derive(Debug, Default)]
struct Model {
    live: BTreeMap<u64, Entry>,
    last_seq: u64,
    last_ts: i64,
}

impl Model {
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
            // Without a subject filter, keep counts across all subjects.
            let key = if filter.is_some() { subject.as_str() } else { "" };
            let count = kept.entry(key).or_insert(0);
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

/// Every observable the model predicts.
fn check(store: &dyn StreamStore, model: &Model) -> Result<(), TestCaseError> {
    let state = store.state();
    let first_seq = model.live.keys().next().copied().unwrap_or(model.last_seq + 1);
    let bytes: u64 = model.live.values().map(|(s, h, p, _)| stored_size_bytes(s, h.as_deref(), p)).sum();
    let subjects: BTreeMap<String, u64> = model.live.values().fold(BTreeMap::new(), |mut counts, (subject, ..)| {
        *counts.entry(subject.clone()).or_insert(0) += 1;
        counts
    });
    prop_assert_eq!(state.msgs, model.live.len() as u64);
    prop_assert_eq!(state.first_seq, first_seq);
    prop_assert_eq!(state.last_seq, model.last_seq);
    prop_assert_eq!(state.bytes, bytes);
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
        }
        let Some(filter) = filter else { continue };
        let last = model.live.iter().rev().find(|(_, (s, ..))| matches(filter, s)).map(|(&seq, _)| seq);
        prop_assert_eq!(store.get_last_for_subject(filter).unwrap().map(|message| message.seq), last);
    }
    Ok(())
}

/// Applies one operation to the store and the model; `reopen` rebuilds the store when asked.
fn apply(
    store: &mut Box<dyn StreamStore>,
    model: &mut Model,
    op: &Op,
    reopen: &mut dyn FnMut(Box<dyn StreamStore>) -> Box<dyn StreamStore>,
) -> Result<(), TestCaseError> {
    match *op {
        Op::Append { subject, with_headers, payload_bytes } => {
            let subject = SUBJECTS[subject];
            let headers = with_headers.then(|| format!("NATS/1.0\r\nN: {}\r\n\r\n", model.last_seq).into_bytes());
            let payload: Vec<u8> = (0..payload_bytes).map(|index| (index as u64 + model.last_seq) as u8).collect();
            let ts = model.last_ts + 7;
            let (seq, _) = store.append(subject, headers.as_deref(), &payload, ts).unwrap();
            prop_assert_eq!(seq, model.last_seq + 1);
            model.last_seq = seq;
            model.last_ts = ts;
            model.live.insert(seq, (subject.to_string(), headers, payload, ts));
        }
        Op::Delete { pick } => {
            let seq = pick % (model.last_seq + 2);
            prop_assert_eq!(store.delete(seq).unwrap(), model.live.remove(&seq).is_some());
        }
        Op::Purge { subject, keep, up_to_pick } => {
            let subject = subject.map(|index| SUBJECTS.get(index).copied().unwrap_or(">").to_string());
            let up_to_seq = up_to_pick.map(|pick| pick % (model.last_seq + 3));
            let request = PurgeRequest { subject, keep, up_to_seq };
            prop_assert_eq!(store.purge(&request).ok(), model.purge(&request));
        }
        Op::Sync => store.sync().unwrap(),
        Op::Compact => store.compact().unwrap(),
        Op::Reopen => {
            let placeholder: Box<dyn StreamStore> = Box::new(MemoryStore::new(StoreLimits::default()));
            let old = std::mem::replace(store, placeholder);
            *store = reopen(old);
        }
    }
    Ok(())
}

fn run(
    ops: &[Op],
    store: Box<dyn StreamStore>,
    mut reopen: impl FnMut(Box<dyn StreamStore>) -> Box<dyn StreamStore>,
) -> Result<(), TestCaseError> {
    let mut store = store;
    let mut model = Model::default();
    for op in ops {
        apply(&mut store, &mut model, op, &mut reopen)?;
        check(&*store, &model)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_memory_store_behaves_like_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        // Memory does not survive a restart: "reopen" keeps the same store.
        run(&ops, Box::new(MemoryStore::new(StoreLimits::default())), |store| store)?;
    }

}

proptest! {
    // Fewer cases: every delete, purge and segment roll fsyncs.
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn the_file_store_behaves_like_the_model_across_restarts(ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let store: Box<dyn StreamStore> = Box::new(common::open_file(&path, StoreLimits::default()));
        run(&ops, store, |old| {
            drop(old);
            let reopened: FileStore = common::open_file(&path, StoreLimits::default());
            assert_eq!(reopened.recovery_report().torn_bytes_truncated, 0);
            Box::new(reopened)
        })?;
    }
}
