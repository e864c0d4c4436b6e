//! L3 idempotent producers: `Semaq-Producer` + `Semaq-Producer-Seq` on a stream of level ≥ 3.
//!
//! Each producer's last stored sequence is remembered for as long as the stream exists (not
//! bounded by the dedup window): a repeat or older sequence is acknowledged as a duplicate and
//! not stored; a gap is accepted, stored, and counted for stream info.
//!
//! The duplicate's ack names the stream sequence the original was stored at (as nats-server does
//! for a `Nats-Msg-Id` duplicate) while the stream remembers it: the last
//! [`limits::PRODUCER_RECENT_SEQS_MAX`] sequences of each producer, and at most
//! [`limits::PRODUCER_RECENT_SEQS_PER_STREAM_MAX`] of all producers together (the oldest go
//! first). An older sequence, or one that was never stored (inside a gap), is acked with the
//! stream sequence of the producer's last stored message instead: still a duplicate, never stored.
//!
//! The table is derived from the stored messages, which carry their producer headers. On disk,
//! `producers.json` in the stream directory is a snapshot of the table that accounts for every
//! message up to `covered_seq`; start-up loads it and re-reads the messages stored after
//! `covered_seq`. That rebuild is exact as long as no message after `covered_seq` was removed
//! while it mattered, so every path that removes messages asks first (`*_needs_snapshot`) and the
//! stream writes a snapshot before the removal. `docs/design.md` has the argument.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use semaq_store::{DiscardPolicy, StoreLimits, StreamStore, SyncTicket, Synced};
use semaq_wire::headers::names::{PRODUCER, PRODUCER_SEQ};
use semaq_wire::Headers;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::errors::ApiError;
use crate::limits;

/// The snapshot's file name inside the stream directory.
pub const SNAPSHOT_FILE: &str = "producers.json";
const MAGIC: &str = "SEMAQ-PRODUCERS";
const FORMAT_VERSION: u32 = 1;

/// A producer id and the sequence it gave one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim<'a> {
    /// `Semaq-Producer`.
    pub producer: &'a str,
    /// `Semaq-Producer-Seq`.
    pub seq: u64,
}

/// Reads a message's producer headers: `None` when it has no `Semaq-Producer-Seq` (a
/// `Semaq-Producer` alone is plain lineage); an error when the sequence has no producer or is
/// not a positive integer.
pub fn claim(block: Option<&[u8]>) -> Result<Option<Claim<'_>>, ApiError> {
    let Some(block) = block else { return Ok(None) };
    let [Some(seq_text), producer] = Headers::new(block).get_many(&[PRODUCER_SEQ, PRODUCER]) else { return Ok(None) };
    let producer = producer.filter(|producer| !producer.is_empty());
    let Some(producer) = producer else {
        return Err(ApiError::invalid_producer(format!(
            "{PRODUCER_SEQ} needs a {PRODUCER} header naming the producer"
        )));
    };
    if producer.len() > limits::PRODUCER_ID_BYTES_MAX {
        let max = limits::PRODUCER_ID_BYTES_MAX;
        return Err(ApiError::invalid_producer(format!("{PRODUCER} is longer than {max} bytes")));
    }
    match seq_text.parse::<u64>() {
        Ok(seq) if seq > 0 => Ok(Some(Claim { producer, seq })),
        _ => Err(ApiError::invalid_producer(format!(
            "{PRODUCER_SEQ} must be an integer from 1 to {}, not {seq_text:?}",
            u64::MAX
        ))),
    }
}

/// What an arriving producer sequence is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Newer than anything stored from this producer: store it.
    Fresh,
    /// A repeat or an older sequence: acknowledge as a duplicate of this stream sequence (the
    /// original's while the stream remembers it, else the producer's last stored message).
    Duplicate {
        /// The stream sequence the duplicate ack names.
        stream_seq: u64,
    },
}

/// A producer's last stored message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Last {
    seq: u64,
    stream_seq: u64,
}

/// The most recent gap: a producer sequence stored after a missing one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    /// The producer.
    pub producer: String,
    /// The sequence that was due.
    pub expected: u64,
    /// The sequence that came.
    pub got: u64,
}

/// The snapshot file's body.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Snapshot {
    covered_seq: u64,
    gaps: u64,
    last_gap: Option<Gap>,
    /// Producer id → `[last producer seq, its stream seq]`.
    producers: HashMap<String, (u64, u64)>,
    /// Producer id → its recent `(producer seq, stream seq)` pairs, oldest first, flattened and
    /// delta-encoded: `[seq, stream seq, seq step, stream seq step, ...]` (absent in older files).
    #[serde(default)]
    recent: HashMap<String, Vec<u64>>,
}

/// Each producer's recent `(producer seq, stream seq)` pairs, so a duplicate is acked with its
/// original's stream sequence. Bounded per producer and per stream; the stream-wide bound drops
/// the entries of the oldest stored messages first.
#[derive(Debug, Default)]
struct Recent {
    /// Pairs by producer, both sequences strictly increasing.
    by_producer: HashMap<Arc<str>, VecDeque<(u64, u64)>>,
    /// (producer, stream seq) of every pair pushed, oldest first; pairs a producer's own bound
    /// dropped already stay here until they reach the front.
    order: VecDeque<(Arc<str>, u64)>,
}

impl Recent {
    fn push(&mut self, producer: &str, seq: u64, stream_seq: u64) {
        let key = match self.by_producer.get_key_value(producer) {
            Some((key, _)) => Arc::clone(key),
            None => Arc::from(producer),
        };
        let ring = self.by_producer.entry(Arc::clone(&key)).or_default();
        if ring.back().is_some_and(|&(last, last_stream)| seq <= last || stream_seq <= last_stream) {
            // Only fresh sequences are stored, so this is a table rebuilt without its snapshot.
            ring.clear();
        }
        ring.push_back((seq, stream_seq));
        if ring.len() > limits::PRODUCER_RECENT_SEQS_MAX {
            ring.pop_front();
        }
        self.order.push_back((key, stream_seq));
        while self.order.len() > limits::PRODUCER_RECENT_SEQS_PER_STREAM_MAX {
            let Some((id, oldest)) = self.order.pop_front() else { break };
            let Some(ring) = self.by_producer.get_mut(&id) else { continue };
            if ring.front().is_some_and(|&(_, stream_seq)| stream_seq == oldest) {
                ring.pop_front();
            }
            if ring.is_empty() {
                self.by_producer.remove(&id);
            }
        }
    }

    /// The stream sequence `producer` stored its `seq` at, if remembered.
    fn find(&self, producer: &str, seq: u64) -> Option<u64> {
        let ring = self.by_producer.get(producer)?;
        let at = ring.binary_search_by_key(&seq, |&(seq, _)| seq).ok()?;
        ring.get(at).map(|&(_, stream_seq)| stream_seq)
    }

    /// The snapshot's form: per producer, the first pair then the steps between pairs.
    fn encode(&self) -> HashMap<String, Vec<u64>> {
        let encode_ring = |ring: &VecDeque<(u64, u64)>| {
            let mut flat = Vec::with_capacity(ring.len() * 2);
            let mut previous = (0, 0);
            for &(seq, stream_seq) in ring {
                flat.extend([seq - previous.0, stream_seq - previous.1]);
                previous = (seq, stream_seq);
            }
            flat
        };
        self.by_producer.iter().map(|(id, ring)| (id.to_string(), encode_ring(ring))).collect()
    }

    /// Rebuilds from the snapshot's form, in stream order, so the bounds apply as they did.
    fn decode(encoded: &HashMap<String, Vec<u64>>) -> Self {
        let mut pairs = Vec::new();
        for (id, flat) in encoded {
            let mut previous = (0u64, 0u64);
            for step in flat.chunks_exact(2) {
                let (Some(seq), Some(stream_seq)) = (previous.0.checked_add(step[0]), previous.1.checked_add(step[1]))
                else {
                    break;
                };
                previous = (seq, stream_seq);
                pairs.push((stream_seq, seq, id.as_str()));
            }
        }
        pairs.sort_unstable();
        let mut recent = Self::default();
        for (stream_seq, seq, id) in pairs {
            recent.push(id, seq, stream_seq);
        }
        recent
    }
}

/// What an atomic batch being applied changed, so it can be undone or left out of a snapshot.
#[derive(Debug, Default)]
struct BatchMark {
    /// The stream's last sequence before the batch.
    start_seq: u64,
    /// Each entry the batch replaced, oldest first.
    undo: Vec<(String, Option<Last>)>,
    gaps: u64,
    last_gap: Option<Gap>,
    /// The batch's `(producer, seq, stream seq)`, remembered as recent once it commits.
    recent: Vec<(String, u64, u64)>,
    /// Whether the table as it was before the batch is not on disk yet.
    dirty: bool,
    since_msgs: u64,
    since_bytes: u64,
}

/// One stream's producer table and its snapshot.
#[derive(Debug)]
pub struct Producers {
    table: HashMap<String, Last>,
    recent: Recent,
    gaps: u64,
    last_gap: Option<Gap>,
    /// The snapshot file (`None` for memory streams, which a restart empties anyway).
    file: Option<PathBuf>,
    /// Whether the table was rebuilt from the snapshot and the store since start.
    loaded: bool,
    /// Every stored message up to here is accounted for in the snapshot on disk.
    covered_seq: u64,
    /// When that snapshot was taken (unix ns); later messages are stamped no earlier.
    snapshot_at_ns: i64,
    /// A message after `covered_seq` changed the table: the snapshot is behind.
    dirty: bool,
    /// Messages appended after `covered_seq`.
    since_msgs: u64,
    /// Stored bytes (record sizes) appended after `covered_seq`.
    since_bytes: u64,
    batch: Option<BatchMark>,
    /// Snapshots taken so far (in place or as a [`SnapshotJob`]), numbering them in table order.
    generation: u64,
    /// The generation whose `covered_seq`, `snapshot_at_ns` and counts are the ones above.
    applied_generation: u64,
    /// Entries recorded so far: a snapshot taken at `changes == n` holds every one up to n.
    changes: u64,
    /// The generation of the snapshot on disk, locked across its write: one writer at a time,
    /// and an older snapshot is never renamed over a newer one. Taken with no other lock, or
    /// last (after the store and the table, by an in-place write).
    written: Arc<Mutex<u64>>,
}

/// A producer snapshot whose content was taken under the store's lock ([`Producers::take_snapshot`]):
/// [`SnapshotJob::run`] makes the messages it covers durable and writes it with the lock let go.
#[derive(Debug)]
pub struct SnapshotJob {
    generation: u64,
    file: PathBuf,
    bytes: Vec<u8>,
    /// The store's changes up to the snapshot's `covered_seq`, handed to the OS.
    ticket: SyncTicket,
    written: Arc<Mutex<u64>>,
    done: SnapshotDone,
}

/// What a finished [`SnapshotJob`] tells the table ([`Producers::finish_snapshot`]).
#[derive(Debug)]
pub struct SnapshotDone {
    generation: u64,
    /// The applied generation when it was taken: the counts below are relative to it.
    base_generation: u64,
    covered_seq: u64,
    now_ns: i64,
    changes: u64,
    since_msgs: u64,
    since_bytes: u64,
    written: std::io::Result<()>,
}

impl SnapshotJob {
    /// Step 2, with no lock held: fsyncs the store's changes up to the covered sequence (the
    /// snapshot must never hold an entry of a message a crash could take), then writes the
    /// snapshot durably unless a newer one is on disk already. The store's outcome goes to
    /// `sync_finish`, the rest to [`Producers::finish_snapshot`].
    pub fn run(self) -> (Synced, SnapshotDone) {
        let SnapshotJob { generation, file, bytes, ticket, written, mut done } = self;
        let synced = ticket.run();
        done.written = if synced.succeeded() {
            // A poisoned lock only means a writer panicked: the generation it holds is still right.
            let mut on_disk = written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if generation > *on_disk {
                let wrote = write_durably(&file, &bytes);
                if wrote.is_ok() {
                    *on_disk = generation;
                }
                wrote
            } else {
                // A newer snapshot is durable: it holds every entry this one does.
                Ok(())
            }
        } else {
            Err(std::io::Error::other("the store's fsync failed; producer snapshot not written"))
        };
        (synced, done)
    }
}

impl Producers {
    /// An empty, not yet loaded table whose snapshot lives in `dir` (when the stream has one).
    pub fn new(dir: Option<&Path>) -> Self {
        Self {
            table: HashMap::new(),
            recent: Recent::default(),
            gaps: 0,
            last_gap: None,
            file: dir.map(|dir| dir.join(SNAPSHOT_FILE)),
            loaded: false,
            covered_seq: 0,
            snapshot_at_ns: 0,
            dirty: false,
            since_msgs: 0,
            since_bytes: 0,
            batch: None,
            generation: 0,
            applied_generation: 0,
            changes: 0,
            written: Arc::new(Mutex::new(0)),
        }
    }

    /// Rebuilds the table once: the snapshot, then every stored message after it. Then writes a
    /// fresh snapshot up to the last message, so the counts of what came since start at zero.
    /// In place, under the caller's locks: for a stream nobody reads yet (its start).
    pub fn ensure_loaded(&mut self, store: &mut dyn StreamStore, now_ns: i64) {
        if !self.load(store) {
            return;
        }
        if let Err(error) = self.write_snapshot(store, now_ns) {
            self.assume_unsaved();
            tracing::error!(%error, "cannot write the producer snapshot");
        }
    }

    /// [`ensure_loaded`](Self::ensure_loaded) without the write, for the ingest, which holds
    /// the store's lock that readers wait on (the table reloaded after a full disk unloaded it,
    /// or a stream raised to L3): the table counts as unsaved, so the unlocked paths write the
    /// snapshot (a batch split around it, a removal's, the periodic one).
    pub fn ensure_loaded_unwritten(&mut self, store: &mut dyn StreamStore) {
        if self.load(store) {
            self.assume_unsaved();
        }
    }

    /// Loads the table unless it is loaded; whether a fresh snapshot is then needed.
    fn load(&mut self, store: &mut dyn StreamStore) -> bool {
        if self.loaded {
            return false;
        }
        self.loaded = true;
        if let Some(file) = self.file.clone() {
            self.read_snapshot(&file);
        }
        let last_seq = store.state().last_seq;
        if self.covered_seq > last_seq {
            tracing::warn!("producer snapshot covers sequence {} past the stream's last {last_seq}", self.covered_seq);
        }
        self.dirty |= self.rescan(store, last_seq) > 0;
        let Some(file) = self.file.as_deref() else { return false };
        self.dirty || self.covered_seq != last_seq || !file.exists()
    }

    /// The counts since the snapshot are unknown: assume the worst until one is written.
    fn assume_unsaved(&mut self) {
        (self.dirty, self.since_msgs, self.since_bytes) = (true, u64::MAX / 2, u64::MAX / 2);
    }

    fn read_snapshot(&mut self, file: &Path) {
        let bytes = match std::fs::read(file) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return,
            Err(error) => {
                tracing::error!("cannot read {}: {error}; rebuilding from the stored messages", file.display());
                return;
            }
        };
        match decode(&bytes) {
            Ok(snapshot) => {
                self.covered_seq = snapshot.covered_seq;
                self.gaps = snapshot.gaps;
                self.last_gap = snapshot.last_gap;
                self.table = snapshot
                    .producers
                    .into_iter()
                    .map(|(id, (seq, stream_seq))| (id, Last { seq, stream_seq }))
                    .collect();
                self.recent = Recent::decode(&snapshot.recent);
            }
            Err(reason) => tracing::error!(
                "{} is damaged ({reason}); rebuilding producers from the stored messages (ones removed by retention are forgotten)",
                file.display()
            ),
        }
    }

    /// Applies the producer headers of every stored message after `covered_seq`; returns how many had some.
    fn rescan(&mut self, store: &dyn StreamStore, last_seq: u64) -> u64 {
        let mut found = 0;
        let mut next = self.covered_seq + 1;
        while next <= last_seq {
            match store.get_next(next, None) {
                Ok(Some(message)) => {
                    next = message.seq + 1;
                    if let Ok(Some(claim)) = claim(message.headers.as_deref()) {
                        self.record(claim, message.seq);
                        found += 1;
                    }
                }
                Ok(None) => break,
                Err(semaq_store::StoreError::Corrupt { seq, .. }) => next = seq + 1,
                Err(error) => {
                    tracing::error!(%error, "cannot re-read stored producers");
                    break;
                }
            }
        }
        found
    }

    /// Forgets the table, to be rebuilt from the snapshot and the store on next use: after the
    /// store undid appends (a full disk), whose producer sequences must not count as stored.
    pub fn unload(&mut self) {
        let file = self.file.take();
        let (generation, written) = (self.generation, Arc::clone(&self.written));
        // Snapshots still being written describe the table before it was undone: void them.
        *self = Producers { file, generation, applied_generation: generation, written, ..Producers::new(None) };
    }

    /// Whether the table is in use (the stream is L3 and has loaded it).
    pub fn is_loaded(&self) -> bool {
        self.loaded
    }

    /// Judges an arriving sequence against the producer's last stored one.
    pub fn check(&self, claim: Claim<'_>) -> Result<Verdict, ApiError> {
        match self.table.get(claim.producer) {
            Some(last) if claim.seq <= last.seq => {
                let original = self.recent.find(claim.producer, claim.seq);
                Ok(Verdict::Duplicate { stream_seq: original.unwrap_or(last.stream_seq) })
            }
            Some(_) => Ok(Verdict::Fresh),
            None if self.table.len() >= limits::PRODUCERS_PER_STREAM_MAX => {
                Err(ApiError::too_many_producers(limits::PRODUCERS_PER_STREAM_MAX))
            }
            None => Ok(Verdict::Fresh),
        }
    }

    /// Judges a batch's sequences in order, as if each earlier one had been stored: the first
    /// duplicate or error, with the stream sequence it duplicates.
    pub fn check_all<'a>(&self, claims: impl Iterator<Item = Claim<'a>>) -> Result<(), ApiError> {
        let mut staged: HashMap<&str, u64> = HashMap::new();
        for claim in claims {
            let last = staged.get(claim.producer).copied().or_else(|| self.table.get(claim.producer).map(|l| l.seq));
            match last {
                Some(last) if claim.seq <= last => {
                    return Err(ApiError::atomic_publish_duplicate(Some(self.duplicate_detail(claim))));
                }
                Some(_) => {}
                None if self.table.len() + staged.len() >= limits::PRODUCERS_PER_STREAM_MAX => {
                    return Err(ApiError::too_many_producers(limits::PRODUCERS_PER_STREAM_MAX));
                }
                None => {}
            }
            staged.insert(claim.producer, claim.seq);
        }
        Ok(())
    }

    /// Why a batch's `claim` is a duplicate: a stored sequence names its original's stream
    /// sequence when it is recent (else the producer's last), any other repeats within the batch.
    fn duplicate_detail(&self, claim: Claim<'_>) -> String {
        let (producer, seq) = (claim.producer, claim.seq);
        match self.table.get(producer).filter(|last| seq <= last.seq) {
            Some(last) => match self.recent.find(producer, seq) {
                Some(original) => {
                    format!("producer {producer:?} sequence {seq} is already stored at stream sequence {original}")
                }
                None => format!(
                    "producer {producer:?} sequence {seq} is already stored (its last is at stream sequence {})",
                    last.stream_seq
                ),
            },
            None => format!("producer {producer:?} sequence {seq} repeats within the batch"),
        }
    }

    /// Records a stored message's sequence; a sequence past the next one due counts as a gap.
    pub fn record(&mut self, claim: Claim<'_>, stream_seq: u64) {
        let previous = self.table.get(claim.producer).copied();
        let expected = previous.map_or(1, |last| last.seq.saturating_add(1));
        if claim.seq != expected {
            self.gaps += 1;
            self.last_gap = Some(Gap { producer: claim.producer.to_string(), expected, got: claim.seq });
        }
        match &mut self.batch {
            Some(batch) => {
                batch.undo.push((claim.producer.to_string(), previous));
                batch.recent.push((claim.producer.to_string(), claim.seq, stream_seq));
            }
            None => self.recent.push(claim.producer, claim.seq, stream_seq),
        }
        let last = Last { seq: claim.seq, stream_seq };
        match self.table.get_mut(claim.producer) {
            Some(entry) => *entry = last,
            // Only a new producer allocates its id.
            None => _ = self.table.insert(claim.producer.to_string(), last),
        }
        self.dirty = true;
        self.changes += 1;
    }

    /// Counts a message appended to the stream (with or without producer headers).
    pub fn appended(&mut self, stored_bytes: u64) {
        self.since_msgs += 1;
        self.since_bytes = self.since_bytes.saturating_add(stored_bytes);
        if let Some(batch) = &mut self.batch {
            batch.since_msgs += 1;
            batch.since_bytes = batch.since_bytes.saturating_add(stored_bytes);
        }
    }

    /// Whether appending a record of `stored_bytes` might make the store's limits remove a
    /// message stored after the snapshot (limits with discard old remove the oldest first, so
    /// that needs more messages or bytes after the snapshot than the limit allows).
    pub fn append_needs_snapshot(&self, limits: &StoreLimits, stored_bytes: u64) -> bool {
        self.appends_need_snapshot(limits, 1, stored_bytes)
    }

    /// Whether storing `count` messages of `stored_bytes` in all, which `purges` (a rollup, a
    /// one-shot schedule's copy) or not, could remove an entry the snapshot lacks.
    pub fn batch_needs_snapshot(&self, limits: &StoreLimits, (count, stored_bytes): (u64, u64), purges: bool) -> bool {
        self.appends_need_snapshot(limits, count, stored_bytes) || (purges && self.removal_needs_snapshot(u64::MAX))
    }

    /// [`Producers::append_needs_snapshot`] for `count` appends of `stored_bytes` in all (an
    /// ingest batch about to be stored, so the snapshot can be written before it, without the lock).
    pub fn appends_need_snapshot(&self, limits: &StoreLimits, count: u64, stored_bytes: u64) -> bool {
        if !self.unsaved() || self.file.is_none() {
            return false;
        }
        let since_msgs = self.since_msgs.saturating_add(count);
        let discard_old = limits.discard == DiscardPolicy::Old;
        let over_msgs = limits.max_msgs.is_some_and(|max| since_msgs > max) && discard_old;
        let over_bytes =
            limits.max_bytes.is_some_and(|max| self.since_bytes.saturating_add(stored_bytes) > max) && discard_old;
        // Per subject: conservatively, as if every message since the snapshot had one subject.
        let per_subject_refuses = limits.discard == DiscardPolicy::New && limits.discard_new_per_subject;
        let over_subject = limits.max_msgs_per_subject.is_some_and(|max| since_msgs > max) && !per_subject_refuses;
        over_msgs || over_bytes || over_subject
    }

    /// Whether removing stored message `seq` (delete, purge, workqueue or interest ack) could lose
    /// a producer's entry that the snapshot does not hold yet.
    pub fn removal_needs_snapshot(&self, seq: u64) -> bool {
        self.unsaved() && self.file.is_some() && seq > self.covered_seq
    }

    /// Whether the table holds entries the durable snapshot lacks. While an atomic batch is
    /// applied only those from before it count: a snapshot written then leaves the batch out,
    /// so one written for the batch's own entries would save none of them.
    fn unsaved(&self) -> bool {
        self.batch.as_ref().map_or(self.dirty, |batch| batch.dirty)
    }

    /// Whether expiring messages older than `max_age_ns` at `now_ns` could reach one stored
    /// after the snapshot (those are stamped no earlier than the snapshot).
    pub fn expiry_needs_snapshot(&self, max_age_ns: i64, now_ns: i64) -> bool {
        let margin_ns = limits::PRODUCER_SNAPSHOT_INTERVAL.as_nanos() as i64;
        self.dirty && self.file.is_some() && now_ns - self.snapshot_at_ns + margin_ns >= max_age_ns
    }

    /// Whether the periodic snapshot is due: producers changed, or the re-read at start grew long.
    pub fn periodic_due(&self, last_seq: u64) -> bool {
        self.file.is_some()
            && self.batch.is_none()
            && (self.dirty || last_seq > self.covered_seq.saturating_add(limits::PRODUCER_SNAPSHOT_LAG_MESSAGES_MAX))
    }

    /// Syncs the store, then replaces the snapshot with the table as of its last message, all
    /// under the caller's locks. While an atomic batch is being applied, the snapshot leaves that
    /// batch out (it covers up to the sequence before it): a crash could still remove the
    /// batch's partial tail at start-up. Outside ingest, [`Producers::take_snapshot`] does the
    /// same with the fsyncs and the write run without the store's lock.
    pub fn write_snapshot(&mut self, store: &mut dyn StreamStore, now_ns: i64) -> std::io::Result<()> {
        let Some(file) = self.file.clone() else { return Ok(()) };
        // A slow disk in tests (the `sync-delay-ms` failpoint), here under the caller's locks.
        super::failpoint::sync_delay();
        store.sync_aside().map_err(std::io::Error::other)?;
        let covered_seq = self.batch.as_ref().map_or_else(|| store.state().last_seq, |batch| batch.start_seq);
        let snapshot = self.snapshot_body(covered_seq);
        let bytes = encode(&snapshot).map_err(std::io::Error::other)?;
        self.generation += 1;
        {
            // Lock order: the store, the table, then the writer's lock (a job's write holds it alone).
            let mut on_disk = self.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            write_durably(&file, &bytes)?;
            *on_disk = self.generation;
        }
        self.applied_generation = self.generation;
        self.covered_seq = covered_seq;
        self.snapshot_at_ns = now_ns;
        (self.dirty, self.since_msgs, self.since_bytes) = match &mut self.batch {
            Some(batch) => {
                // The table as it was before the batch is on disk now.
                batch.dirty = false;
                (!batch.undo.is_empty(), batch.since_msgs, batch.since_bytes)
            }
            None => (false, 0, 0),
        };
        Ok(())
    }

    /// Step 1 of a snapshot written without the store's lock (the caller holds it now): takes
    /// the table as of the stream's last message and a sync ticket covering that message, for
    /// [`SnapshotJob::run`]. `None` for a stream without a snapshot file, or while an atomic
    /// batch is being applied (ingest holds the lock throughout; it is written before the batch).
    pub fn take_snapshot(&mut self, store: &mut dyn StreamStore, now_ns: i64) -> std::io::Result<Option<SnapshotJob>> {
        let Some(file) = self.file.clone() else { return Ok(None) };
        if self.batch.is_some() {
            return Ok(None);
        }
        let covered_seq = store.state().last_seq;
        let bytes = encode(&self.snapshot_body(covered_seq)).map_err(std::io::Error::other)?;
        let ticket = store.sync_begin_aside().map_err(std::io::Error::other)?;
        self.generation += 1;
        let done = SnapshotDone {
            generation: self.generation,
            base_generation: self.applied_generation,
            covered_seq,
            now_ns,
            changes: self.changes,
            since_msgs: self.since_msgs,
            since_bytes: self.since_bytes,
            written: Ok(()),
        };
        let written = Arc::clone(&self.written);
        Ok(Some(SnapshotJob { generation: self.generation, file, bytes, ticket, written, done }))
    }

    /// Step 3, under the store's lock again (after its `sync_finish`): a written snapshot newer
    /// than the one the table counts from becomes it; an older one changes nothing (a newer one
    /// was applied meanwhile, or the table was unloaded).
    pub fn finish_snapshot(&mut self, done: SnapshotDone) -> std::io::Result<()> {
        done.written?;
        if !self.loaded || done.generation <= self.applied_generation {
            return Ok(());
        }
        if done.base_generation == self.applied_generation {
            // Counted from the same snapshot: what came after this one is what came since it was taken.
            self.since_msgs = self.since_msgs.saturating_sub(done.since_msgs);
            self.since_bytes = self.since_bytes.saturating_sub(done.since_bytes);
        }
        // Else an older job was applied meanwhile: its counts (larger) stay, which only errs
        // towards an early snapshot.
        self.applied_generation = done.generation;
        self.covered_seq = done.covered_seq;
        self.snapshot_at_ns = done.now_ns;
        // An entry recorded while it was written is not in it.
        self.dirty = self.changes != done.changes;
        Ok(())
    }

    /// The table to write: without the batch being applied, if any.
    fn snapshot_body(&self, covered_seq: u64) -> Snapshot {
        let mut producers: HashMap<String, (u64, u64)> =
            self.table.iter().map(|(id, last)| (id.clone(), (last.seq, last.stream_seq))).collect();
        let (mut gaps, mut last_gap) = (self.gaps, self.last_gap.clone());
        if let Some(batch) = &self.batch {
            for (id, previous) in batch.undo.iter().rev() {
                match previous {
                    Some(last) => producers.insert(id.clone(), (last.seq, last.stream_seq)),
                    None => producers.remove(id),
                };
            }
            (gaps, last_gap) = (batch.gaps, batch.last_gap.clone());
        }
        // The batch's pairs join `recent` only when it commits.
        Snapshot { covered_seq, gaps, last_gap, producers, recent: self.recent.encode() }
    }

    /// Starts applying an atomic batch after stream sequence `last_seq`.
    pub fn begin_batch(&mut self, last_seq: u64) {
        self.batch = Some(BatchMark {
            start_seq: last_seq,
            undo: Vec::new(),
            gaps: self.gaps,
            last_gap: self.last_gap.clone(),
            recent: Vec::new(),
            dirty: self.dirty,
            since_msgs: 0,
            since_bytes: 0,
        });
    }

    /// The batch is stored: its changes stay.
    pub fn commit_batch(&mut self) {
        let Some(batch) = self.batch.take() else { return };
        for (id, seq, stream_seq) in batch.recent {
            self.recent.push(&id, seq, stream_seq);
        }
    }

    /// The batch failed: its changes are undone.
    pub fn rollback_batch(&mut self) {
        let Some(batch) = self.batch.take() else { return };
        for (id, previous) in batch.undo.into_iter().rev() {
            match previous {
                Some(last) => self.table.insert(id, last),
                None => self.table.remove(&id),
            };
        }
        (self.gaps, self.last_gap) = (batch.gaps, batch.last_gap);
        self.dirty = batch.dirty;
    }

    /// `{count, gaps, last_gap}` for stream info.
    pub fn info(&self) -> Value {
        let mut info = json!({ "count": self.table.len(), "gaps": self.gaps });
        if let Some(gap) = &self.last_gap {
            info["last_gap"] = json!(gap);
        }
        info
    }
}

/// The file's bytes: one header line `SEMAQ-PRODUCERS 1 <crc32 hex> <json length>`, then JSON.
fn encode(snapshot: &Snapshot) -> Result<Vec<u8>, serde_json::Error> {
    let body = serde_json::to_vec(snapshot)?;
    let mut bytes = format!("{MAGIC} {FORMAT_VERSION} {:08x} {}\n", crc32fast::hash(&body), body.len()).into_bytes();
    bytes.extend_from_slice(&body);
    Ok(bytes)
}

/// The snapshot in `bytes`, or what is wrong with them.
fn decode(bytes: &[u8]) -> Result<Snapshot, String> {
    let newline = bytes.iter().position(|b| *b == b'\n').ok_or("no header line")?;
    let header = std::str::from_utf8(&bytes[..newline]).map_err(|_| "header is not text")?;
    let body = &bytes[newline + 1..];
    let fields: Vec<&str> = header.split(' ').collect();
    let [MAGIC, version, crc, length] = fields.as_slice() else { return Err(format!("bad header {header:?}")) };
    if version.parse::<u32>().ok() != Some(FORMAT_VERSION) {
        return Err(format!("unknown format version {version}"));
    }
    if length.parse::<usize>().ok() != Some(body.len()) {
        return Err(format!("length {length} in the header, {} bytes in the file", body.len()));
    }
    if u32::from_str_radix(crc, 16).ok() != Some(crc32fast::hash(body)) {
        return Err("checksum mismatch".into());
    }
    serde_json::from_slice(body).map_err(|error| error.to_string())
}

/// Replaces `path` so a crash leaves the old or the new file, and the new one survives power
/// loss once this returns: temporary file, fsync, rename, directory fsync. On the streams'
/// storage, so the disk-faults failpoint reaches the snapshot too.
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    semaq_store::storage::write_atomic(&*super::stream_storage(), path, bytes, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(lines: &[&str]) -> Vec<u8> {
        format!("NATS/1.0\r\n{}\r\n", lines.iter().map(|l| format!("{l}\r\n")).collect::<String>()).into_bytes()
    }

    #[test]
    fn raw_headers_are_found_by_name_without_parsing_the_block() {
        let block = Headers::new(b"NATS/1.0\r\nNats-Msg-Id:  a:b \r\nno colon here\r\nX: 1\r\nx: 2\r\n\r\n");
        assert_eq!(block.get("nats-msg-id"), Some("a:b"));
        assert_eq!(block.get("X"), Some("1"), "the first of repeated names");
        assert_eq!(block.get("Nats-Msg"), None);
        assert_eq!(Headers::new(b"NATS/1.0 503\r\n\r\n").get("X"), None);
    }

    #[test]
    fn claims_are_read_case_insensitively_and_refused_when_malformed() {
        let good = block(&["semaq-producer: agent-1", "SEMAQ-PRODUCER-SEQ: 7"]);
        assert_eq!(claim(Some(&good)).unwrap(), Some(Claim { producer: "agent-1", seq: 7 }));
        assert_eq!(claim(Some(&block(&["Semaq-Producer: lineage-only"]))).unwrap(), None);
        assert_eq!(claim(None).unwrap(), None);
        let orphan = claim(Some(&block(&["Semaq-Producer-Seq: 1"]))).unwrap_err();
        assert!(orphan.description.contains("needs a Semaq-Producer header"), "{orphan}");
        for bad in ["0", "-1", "x", "18446744073709551616"] {
            let line = format!("Semaq-Producer-Seq: {bad}");
            let error = claim(Some(&block(&["Semaq-Producer: p", &line]))).unwrap_err();
            assert_eq!(error.err_code, 10430, "{bad}");
        }
    }

    #[test]
    fn repeats_and_older_sequences_are_duplicates_and_gaps_are_counted() {
        let mut producers = Producers::new(None);
        let claim = |seq| Claim { producer: "p", seq };
        assert_eq!(producers.check(claim(1)).unwrap(), Verdict::Fresh);
        producers.record(claim(1), 10);
        producers.record(claim(2), 11);
        assert_eq!(producers.check(claim(2)).unwrap(), Verdict::Duplicate { stream_seq: 11 });
        assert_eq!(producers.check(claim(1)).unwrap(), Verdict::Duplicate { stream_seq: 10 }, "the original");
        producers.record(claim(5), 12);
        assert_eq!(producers.info()["gaps"], 1);
        assert_eq!(producers.info()["last_gap"], json!({"producer": "p", "expected": 3, "got": 5}));
        producers.record(Claim { producer: "q", seq: 4 }, 13);
        assert_eq!(producers.info()["gaps"], 2);
        assert_eq!(producers.info()["count"], 2);
    }

    #[test]
    fn after_the_store_undid_appends_their_producer_sequences_are_fresh_again() {
        let mut producers = Producers::new(None);
        let mut store = semaq_store::MemoryStore::new(semaq_store::StoreLimits::default());
        producers.ensure_loaded(&mut store, 0);
        producers.record(Claim { producer: "p", seq: 1 }, 1); // stored, then undone by a full disk
        assert_eq!(producers.check(Claim { producer: "p", seq: 1 }).unwrap(), Verdict::Duplicate { stream_seq: 1 });
        producers.unload();
        assert!(!producers.is_loaded());
        producers.ensure_loaded(&mut store, 0);
        assert_eq!(producers.check(Claim { producer: "p", seq: 1 }).unwrap(), Verdict::Fresh);
    }

    #[test]
    fn a_duplicate_of_a_recent_sequence_is_acked_with_its_original_stream_sequence() {
        let mut producers = Producers::new(None);
        let claim = |producer, seq| Claim { producer, seq };
        for seq in 1..=5 {
            producers.record(claim("p", seq), 10 + 2 * seq);
            producers.record(claim("q", seq), 11 + 2 * seq);
        }
        assert_eq!(producers.check(claim("p", 2)).unwrap(), Verdict::Duplicate { stream_seq: 14 });
        assert_eq!(producers.check(claim("q", 2)).unwrap(), Verdict::Duplicate { stream_seq: 15 });
        assert_eq!(producers.check(claim("p", 5)).unwrap(), Verdict::Duplicate { stream_seq: 20 });
        producers.record(claim("p", 9), 30);
        assert_eq!(
            producers.check(claim("p", 7)).unwrap(),
            Verdict::Duplicate { stream_seq: 30 },
            "never stored (a gap): the last one"
        );
        let max = limits::PRODUCER_RECENT_SEQS_MAX as u64;
        for seq in 10..10 + max {
            producers.record(claim("p", seq), 100 + seq);
        }
        assert_eq!(producers.check(claim("p", 10)).unwrap(), Verdict::Duplicate { stream_seq: 110 });
        assert_eq!(
            producers.check(claim("p", 9)).unwrap(),
            Verdict::Duplicate { stream_seq: 109 + max },
            "older than the {max} remembered: the last one"
        );
    }

    #[test]
    fn the_stream_wide_bound_forgets_the_oldest_stored_first() {
        let mut producers = Producers::new(None);
        let per_producer = limits::PRODUCER_RECENT_SEQS_MAX as u64;
        let producer_count = (limits::PRODUCER_RECENT_SEQS_PER_STREAM_MAX as u64).div_ceil(per_producer) + 1;
        let ids: Vec<String> = (0..producer_count).map(|n| format!("p{n}")).collect();
        let mut stream_seq = 0;
        for id in &ids {
            for seq in 1..=per_producer {
                stream_seq += 1;
                producers.record(Claim { producer: id, seq }, stream_seq);
            }
        }
        let held: usize = producers.recent.by_producer.values().map(VecDeque::len).sum();
        assert_eq!(held, limits::PRODUCER_RECENT_SEQS_PER_STREAM_MAX);
        assert_eq!(producers.recent.order.len(), held);
        let first = Claim { producer: &ids[0], seq: 1 };
        assert_eq!(producers.check(first).unwrap(), Verdict::Duplicate { stream_seq: per_producer }, "forgotten");
        let last = ids.last().unwrap();
        assert_eq!(
            producers.check(Claim { producer: last, seq: 1 }).unwrap(),
            Verdict::Duplicate { stream_seq: stream_seq - per_producer + 1 }
        );
    }

    #[test]
    fn recent_sequences_survive_the_snapshot_and_older_snapshots_still_load() {
        let mut producers = Producers::new(None);
        for seq in 1..=3 {
            producers.record(Claim { producer: "p", seq }, seq * 7);
        }
        let snapshot = decode(&encode(&producers.snapshot_body(21)).unwrap()).unwrap();
        assert_eq!(snapshot.recent["p"], vec![1, 7, 1, 7, 1, 7], "delta-encoded");
        let restored = Recent::decode(&snapshot.recent);
        assert_eq!((restored.find("p", 2), restored.find("p", 4)), (Some(14), None));
        let old = br#"{"covered_seq":3,"gaps":0,"last_gap":null,"producers":{"p":[3,3]}}"#;
        let header = format!("{MAGIC} {FORMAT_VERSION} {:08x} {}\n", crc32fast::hash(old), old.len());
        let old_snapshot = decode(&[header.as_bytes(), old].concat()).unwrap();
        assert!(old_snapshot.recent.is_empty());
    }

    #[test]
    fn a_batch_joins_the_recent_sequences_only_when_it_commits() {
        let mut producers = Producers::new(None);
        producers.record(Claim { producer: "p", seq: 1 }, 1);
        producers.begin_batch(1);
        producers.record(Claim { producer: "p", seq: 2 }, 2);
        assert!(producers.snapshot_body(1).recent["p"].len() == 2, "the snapshot leaves the batch out");
        producers.rollback_batch();
        producers.begin_batch(2);
        producers.record(Claim { producer: "p", seq: 2 }, 3);
        producers.commit_batch();
        producers.record(Claim { producer: "p", seq: 3 }, 4);
        assert_eq!(producers.check(Claim { producer: "p", seq: 2 }).unwrap(), Verdict::Duplicate { stream_seq: 3 });
    }

    #[test]
    fn a_rolled_back_batch_leaves_the_table_as_it_was() {
        let mut producers = Producers::new(None);
        producers.record(Claim { producer: "p", seq: 1 }, 1);
        producers.begin_batch(1);
        producers.record(Claim { producer: "p", seq: 2 }, 2);
        producers.record(Claim { producer: "q", seq: 9 }, 3);
        assert_eq!(producers.snapshot_body(1).producers, HashMap::from([("p".to_string(), (1, 1))]));
        producers.rollback_batch();
        assert_eq!(producers.check(Claim { producer: "p", seq: 2 }).unwrap(), Verdict::Fresh);
        assert_eq!(producers.info(), json!({"count": 1, "gaps": 0}));
    }

    #[test]
    fn batches_are_checked_as_if_stored_in_order() {
        let mut producers = Producers::new(None);
        producers.record(Claim { producer: "p", seq: 3 }, 1);
        let fresh = [Claim { producer: "p", seq: 4 }, Claim { producer: "p", seq: 5 }];
        assert!(producers.check_all(fresh.into_iter()).is_ok());
        let repeat = [Claim { producer: "p", seq: 4 }, Claim { producer: "p", seq: 4 }];
        let error = producers.check_all(repeat.into_iter()).unwrap_err();
        assert_eq!(error.err_code, 10201);
        assert!(error.description.contains("repeats within the batch"), "{error}");
        let stored = producers.check_all([Claim { producer: "p", seq: 3 }].into_iter()).unwrap_err();
        assert!(stored.description.ends_with("sequence 3 is already stored at stream sequence 1"), "{stored}");
    }

    #[test]
    fn a_batch_duplicate_names_the_stream_sequence_of_its_original() {
        let mut producers = Producers::new(None);
        for seq in 1..=3 {
            producers.record(Claim { producer: "p", seq }, 10 * seq);
        }
        let detail = |claims: &[Claim<'static>]| producers.check_all(claims.iter().copied()).unwrap_err().description;
        let old = detail(&[Claim { producer: "p", seq: 4 }, Claim { producer: "p", seq: 2 }]);
        assert!(old.ends_with("producer \"p\" sequence 2 is already stored at stream sequence 20"), "{old}");
        let mut forgetful = Producers::new(None);
        forgetful.record(Claim { producer: "p", seq: 1 }, 10);
        forgetful.record(Claim { producer: "p", seq: 5 }, 50);
        let never_stored = forgetful.check_all([Claim { producer: "p", seq: 3 }].into_iter()).unwrap_err();
        assert!(never_stored.description.ends_with("(its last is at stream sequence 50)"), "a gap: {never_stored}");
    }

    /// An empty producer table loaded from (and saving to) a fresh directory, with its store.
    fn persisted_table() -> (tempfile::TempDir, semaq_store::MemoryStore, Producers) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = semaq_store::MemoryStore::new(semaq_store::StoreLimits::default());
        let mut producers = Producers::new(Some(dir.path()));
        producers.ensure_loaded(&mut store, 0);
        (dir, store, producers)
    }

    /// A message with `producer`'s sequence `seq`, appended to `store` and recorded.
    fn store_claim(producers: &mut Producers, store: &mut dyn StreamStore, producer: &str, seq: u64) {
        let headers = block(&[&format!("Semaq-Producer: {producer}"), &format!("Semaq-Producer-Seq: {seq}")]);
        let (stream_seq, _) = store.append("p.a", Some(&headers), b"x", 1).unwrap();
        producers.appended(10);
        producers.record(Claim { producer, seq }, stream_seq);
    }

    #[test]
    fn a_snapshot_written_unlocked_applies_only_if_newer_and_never_replaces_a_newer_file() {
        let (dir, mut store, mut producers) = persisted_table();
        store_claim(&mut producers, &mut store, "p", 1);
        let older = producers.take_snapshot(&mut store, 5).unwrap().unwrap();
        store_claim(&mut producers, &mut store, "p", 2);
        let newer = producers.take_snapshot(&mut store, 6).unwrap().unwrap();
        assert!(producers.removal_needs_snapshot(2), "nothing is applied before it is written");

        // The newer one is written first; the older one then neither replaces it nor applies.
        let (_, done) = newer.run();
        producers.finish_snapshot(done).unwrap();
        assert!(!producers.removal_needs_snapshot(2));
        store_claim(&mut producers, &mut store, "q", 1);
        let (_, done) = older.run();
        producers.finish_snapshot(done).unwrap();
        let on_disk = decode(&std::fs::read(dir.path().join(SNAPSHOT_FILE)).unwrap()).unwrap();
        assert_eq!((on_disk.covered_seq, on_disk.producers["p"]), (2, (2, 2)));
        assert!(!on_disk.producers.contains_key("q"), "taken before q");
        assert!(producers.removal_needs_snapshot(3), "q came after the snapshot: still dirty");
        assert!(!producers.removal_needs_snapshot(2), "the older job did not move covered_seq back");
        assert_eq!(producers.since_msgs, 1, "only q's message is counted after the snapshot");
    }

    #[test]
    fn inside_an_atomic_batch_only_entries_from_before_it_make_a_removal_need_the_snapshot() {
        let (_dir, mut store, mut producers) = persisted_table();
        store_claim(&mut producers, &mut store, "q", 1);
        producers.write_snapshot(&mut store, 5).unwrap();
        producers.begin_batch(1);
        store_claim(&mut producers, &mut store, "p", 1);
        assert!(
            !producers.removal_needs_snapshot(u64::MAX),
            "a snapshot now leaves the batch out: it would save none of p's entries"
        );
        producers.rollback_batch();
        store_claim(&mut producers, &mut store, "r", 1);
        producers.begin_batch(3);
        assert!(producers.removal_needs_snapshot(u64::MAX), "r's entry, from before the batch, is not saved");
        producers.write_snapshot(&mut store, 6).unwrap();
        assert!(!producers.removal_needs_snapshot(u64::MAX));
        producers.commit_batch();
    }

    #[test]
    fn an_unlocked_snapshot_taken_before_an_unload_is_void() {
        let (_dir, mut store, mut producers) = persisted_table();
        store_claim(&mut producers, &mut store, "p", 1);
        let job = producers.take_snapshot(&mut store, 5).unwrap().unwrap();
        producers.unload();
        producers.ensure_loaded(&mut store, 7);
        let covered = producers.covered_seq;
        let (_, done) = job.run();
        producers.finish_snapshot(done).unwrap();
        assert_eq!((producers.covered_seq, producers.snapshot_at_ns), (covered, 7), "the reload's snapshot stays");
    }

    #[test]
    fn snapshots_round_trip_and_damage_is_detected() {
        let mut producers = Producers::new(None);
        producers.record(Claim { producer: "p", seq: 2 }, 5);
        let bytes = encode(&producers.snapshot_body(5)).unwrap();
        let decoded = decode(&bytes).unwrap();
        assert_eq!((decoded.covered_seq, decoded.producers["p"]), (5, (2, 5)));
        let mut damaged = bytes.clone();
        let last = damaged.len() - 2;
        damaged[last] ^= 1;
        assert!(decode(&damaged).is_err());
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
    }
}
