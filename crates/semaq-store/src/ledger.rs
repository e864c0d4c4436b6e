//! What both stores share: one metadata slot per sequence (no payloads), the live counts, the
//! subject table, and every decision about which messages the limits and purges remove.
//!
//! A store keeps its bytes elsewhere and hangs a per-slot `body` here: the file store a record
//! offset, the memory store the message itself. The file store moves a segment's slots into
//! the sealed tier (`sealed.rs`) when it seals it: from then on only a live bit per sequence
//! stays in memory. Invariant after every public call: `first_seq` is live, or `first_seq ==
//! next_seq`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Range;
use std::path::PathBuf;

use crate::error::{fit, StoreError, StoreResult};
use crate::index::IndexFile;
use crate::limits::{index_entry as ie, RECORD_SIZE_MAX_BYTES, SUBJECT_LENGTH_MAX_BYTES};
use crate::sealed::{LiveBits, SealedSegment, SealedTier};
use crate::storage::StorageFile;
use crate::subjects::{SubjectFilter, SubjectId, SubjectRecord, Subjects};
use crate::types::{DiscardPolicy, PurgeRequest, SizeModel, StoreLimits, StreamState};

/// Whether a sequence still holds a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotState {
    Live,
    /// Removed by delete, purge or a limit.
    Deleted,
    /// Its record was destroyed by corruption.
    Lost,
}

/// Metadata of one sequence.
#[derive(Debug, Clone)]
pub(crate) struct Slot<B> {
    pub timestamp_ns: i64,
    /// Stored record size in bytes (where the file store reads it).
    pub size: u32,
    /// The message has a non-empty header block (nats-server's file store counts 4 more bytes).
    pub headers: bool,
    /// Meaningful only while `state == Live`.
    pub subject: SubjectId,
    pub state: SlotState,
    pub body: B,
}

/// What the ledger knows of a live message, from its slot or its sealed index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Meta {
    pub timestamp_ns: i64,
    pub size: u32,
    pub headers: bool,
    pub subject: SubjectId,
}

/// The shared in-memory metadata of a stream.
///
/// Sequences `first_seq..next_seq` are tracked in two tiers: the newest (the file store's active
/// segment, or every sequence in the memory store) as one slot each in `slots`; older ones in
/// `sealed`, which keeps a live bit per sequence and reads the rest from index files.
#[derive(Debug)]
pub(crate) struct Ledger<B> {
    /// Sequence the next append gets.
    next_seq: u64,
    /// The oldest live sequence, or `next_seq` when nothing is live.
    first_seq: u64,
    /// Timestamp of the message at `first_seq` (0 when nothing is live).
    first_ts: i64,
    /// One slot per sequence from `next_seq - slots.len()` to `next_seq - 1`.
    slots: VecDeque<Slot<B>>,
    /// Sequences below the slots, in sealed segments; any it does not cover are gone.
    sealed: SealedTier,
    last_ts: i64,
    live_msgs: u64,
    live_bytes: u64,
    subjects: Subjects,
    limits: StoreLimits,
    /// How a message's bytes are counted in `live_bytes` and against `max_bytes`.
    model: SizeModel,
    /// Sequences removed from the middle since the last `take_removed`; the file store writes
    /// them to delete logs (front removals need no record: the floor covers them).
    removed: Vec<u64>,
}

impl<B: Default> Ledger<B> {
    /// An empty ledger whose first append gets `next_seq`.
    pub(crate) fn new(next_seq: u64, limits: StoreLimits, model: SizeModel) -> Self {
        let next_seq = next_seq.max(1);
        Ledger {
            model,
            next_seq,
            first_seq: next_seq,
            first_ts: 0,
            slots: VecDeque::new(),
            sealed: SealedTier::default(),
            last_ts: 0,
            live_msgs: 0,
            live_bytes: 0,
            subjects: Subjects::default(),
            limits,
            removed: Vec::new(),
        }
    }

    /// Sequence of the oldest live message, or `next_seq` when empty.
    pub(crate) fn first_seq(&self) -> u64 {
        self.first_seq
    }

    /// Highest sequence assigned so far (0 before any).
    pub(crate) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// Sequence of the first slot (everything below it is sealed or gone).
    fn tail_first(&self) -> u64 {
        self.next_seq - self.slots.len() as u64
    }

    /// The slot of `seq`, if it is still tracked in the slot tier.
    pub(crate) fn slot(&self, seq: u64) -> Option<&Slot<B>> {
        let index = seq.checked_sub(self.tail_first())?;
        self.slots.get(usize::try_from(index).ok()?)
    }

    /// The live slot of `seq` (slot tier only).
    pub(crate) fn live_slot(&self, seq: u64) -> Option<&Slot<B>> {
        self.slot(seq).filter(|slot| slot.state == SlotState::Live && seq >= self.first_seq)
    }

    /// Whether `seq` holds a live message (no index read).
    pub(crate) fn is_live(&self, seq: u64) -> bool {
        if seq < self.first_seq || seq >= self.next_seq {
            return false;
        }
        match self.slot(seq) {
            Some(slot) => slot.state == SlotState::Live,
            None => self.sealed.is_live(seq),
        }
    }

    /// The metadata of the live message at `seq` (a sealed one's is read from its index).
    pub(crate) fn live_meta(&self, seq: u64) -> Option<Meta> {
        if seq < self.first_seq || seq >= self.next_seq {
            return None;
        }
        if seq >= self.tail_first() {
            let slot = self.live_slot(seq)?;
            return Some(Meta {
                timestamp_ns: slot.timestamp_ns,
                size: slot.size,
                headers: slot.headers,
                subject: slot.subject,
            });
        }
        let entry = self.sealed.entry(seq)?;
        Some(Meta {
            timestamp_ns: entry.timestamp_ns,
            size: entry.size,
            headers: entry.headers,
            subject: entry.subject,
        })
    }

    fn live_subject(&self, seq: u64) -> Option<SubjectId> {
        self.live_meta(seq).map(|meta| meta.subject)
    }

    /// The first live sequence in `from..end`.
    fn next_live(&self, from: u64, end: u64) -> Option<u64> {
        let (from, end) = (from.max(self.first_seq), end.min(self.next_seq));
        let tail_first = self.tail_first();
        if from < tail_first {
            if let Some(seq) = self.sealed.next_live(from, end.min(tail_first)) {
                return Some(seq);
            }
        }
        (from.max(tail_first)..end).find(|&seq| self.slot(seq).is_some_and(|slot| slot.state == SlotState::Live))
    }

    /// Current limits.
    pub(crate) fn limits(&self) -> &StoreLimits {
        &self.limits
    }

    /// Replaces the limits (the caller then runs `enforce_count_limits`).
    pub(crate) fn set_limits(&mut self, limits: StoreLimits) {
        self.limits = limits;
    }

    /// Sequences removed from the middle since the last call, for durable delete records.
    pub(crate) fn take_removed(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.removed)
    }

    /// Refuses a message that breaks a hard limit or a discard-new limit, or that `push` would
    /// refuse; `record_size` is its stored size, returned as the slot keeps it; `headers` says
    /// whether it has a non-empty header block.
    pub(crate) fn check_append(
        &self,
        subject: &str,
        message_size: usize,
        (record_size, headers): (usize, bool),
    ) -> StoreResult<u32> {
        check_subject(subject)?;
        if self.next_seq == u64::MAX {
            // Handing out the last sequence would wrap `next_seq` to 0; only a floor or skip that
            // far (a purge to any `seq`, a damaged meta file) gets here.
            return Err(StoreError::TooLarge { what: "sequence", value: self.next_seq, max: u64::MAX - 1 });
        }
        let max_message = self.limits.max_msg_size.map_or(usize::MAX, |max| max as usize);
        if message_size > max_message {
            return Err(StoreError::MessageTooLarge { size_bytes: message_size, max_bytes: max_message });
        }
        if record_size > RECORD_SIZE_MAX_BYTES {
            let max_bytes = RECORD_SIZE_MAX_BYTES - (record_size - message_size);
            return Err(StoreError::MessageTooLarge { size_bytes: message_size, max_bytes });
        }
        let size = fit("record length", record_size)?;
        self.subjects.check_room(subject)?;
        if self.limits.discard == DiscardPolicy::New {
            self.check_discard_new(subject, self.model.counted_bytes(size, headers))?;
        }
        Ok(size)
    }

    fn check_discard_new(&self, subject: &str, counted_bytes: u64) -> StoreResult<()> {
        if self.limits.max_msgs.is_some_and(|max| self.live_msgs >= max) {
            return Err(StoreError::MaxMsgs);
        }
        if self.limits.max_bytes.is_some_and(|max| self.live_bytes + counted_bytes > max) {
            return Err(StoreError::MaxBytes);
        }
        if self.limits.discard_new_per_subject {
            let count = self.subjects.id(subject).map_or(0, |id| self.subjects.count(id));
            if self.limits.max_msgs_per_subject.is_some_and(|max| count >= max) {
                return Err(StoreError::MaxMsgsPerSubject);
            }
        }
        Ok(())
    }

    /// Adds a live message (already checked) and returns its sequence; `TooLarge`, with nothing
    /// changed, when a new subject finds every id taken (which `check_append` refuses first).
    pub(crate) fn push(
        &mut self,
        subject: &str,
        (size, headers): (u32, bool),
        timestamp_ns: i64,
        body: B,
    ) -> StoreResult<u64> {
        let seq = self.next_seq;
        let subject = self.subjects.add(subject, seq)?;
        self.live_bytes += self.model.counted_bytes(size, headers);
        if self.first_seq == seq {
            self.first_ts = timestamp_ns;
        }
        self.slots.push_back(Slot { timestamp_ns, size, headers, subject, state: SlotState::Live, body });
        self.next_seq += 1;
        self.last_ts = timestamp_ns;
        self.live_msgs += 1;
        Ok(seq)
    }

    /// Adds a sequence that holds nothing (loaded as deleted or lost), keeping sequences contiguous.
    pub(crate) fn push_dead(&mut self, state: SlotState, timestamp_ns: i64) {
        self.push_gap(state, timestamp_ns);
        self.last_ts = timestamp_ns;
    }

    fn push_gap(&mut self, state: SlotState, timestamp_ns: i64) {
        debug_assert!(state != SlotState::Live);
        if !self.slots.is_empty() {
            self.slots.push_back(Slot { timestamp_ns, size: 0, headers: false, subject: 0, state, body: B::default() });
        }
        // With no slots the sequence just passes: below the slots, what the sealed tier does
        // not cover is gone; with nothing live at all, the first sequence passes it too.
        if self.first_seq == self.next_seq {
            self.first_seq += 1;
        }
        self.next_seq += 1;
    }

    /// Sequence the next append gets.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Removes the live message at `seq`; false when there is none.
    pub(crate) fn remove(&mut self, seq: u64) -> bool {
        if seq < self.first_seq || seq >= self.next_seq {
            return false;
        }
        let tail_first = self.tail_first();
        let meta = if seq >= tail_first {
            let Some(slot) = usize::try_from(seq - tail_first).ok().and_then(|index| self.slots.get_mut(index)) else {
                return false;
            };
            if slot.state != SlotState::Live {
                return false;
            }
            slot.state = SlotState::Deleted;
            slot.body = B::default();
            Some(Meta {
                timestamp_ns: slot.timestamp_ns,
                size: slot.size,
                headers: slot.headers,
                subject: slot.subject,
            })
        } else {
            let meta = self.live_meta(seq);
            let counted = meta.map(|meta| self.model.counted_bytes(meta.size, meta.headers));
            if !self.sealed.kill(seq, counted) {
                return false;
            }
            // `None`: its index entry could not be read (the tier records why, and the store
            // reports it): the message is gone, its bytes and subject stay counted.
            meta
        };
        self.live_msgs -= 1;
        if let Some(meta) = meta {
            let counted = self.model.counted_bytes(meta.size, meta.headers);
            self.live_bytes = self.live_bytes.saturating_sub(counted);
            self.subjects.remove(meta.subject, seq);
        }
        if seq == self.first_seq {
            self.trim_front();
        } else {
            self.removed.push(seq);
        }
        true
    }

    /// Removes every live message in `seqs` as [`Ledger::remove`] does, but queues no delete
    /// record: a rollback marker in the log records them (and recovery replays it). Returns how
    /// many went.
    pub(crate) fn remove_unlogged(&mut self, seqs: std::ops::RangeInclusive<u64>) -> u64 {
        let logged = self.removed.len();
        let removed = seqs.filter(|&seq| self.remove(seq)).count() as u64;
        self.removed.truncate(logged);
        removed
    }

    /// Moves `first_seq` to the oldest live message and lets go of everything below it.
    fn trim_front(&mut self) {
        self.first_seq = self.next_live(self.first_seq, self.next_seq).unwrap_or(self.next_seq);
        let kept = usize::try_from(self.next_seq - self.first_seq).unwrap_or(usize::MAX);
        while self.slots.len() > kept {
            self.slots.pop_front();
        }
        self.sealed.drop_below(self.first_seq);
        self.first_ts = self.live_meta(self.first_seq).map_or(0, |meta| meta.timestamp_ns);
    }

    /// Removes the oldest message: `Some(1)`, or `Some(0)` when only dead sequences went from
    /// the front, or `None` when nothing could go.
    fn remove_first(&mut self) -> Option<u64> {
        let first = self.first_seq;
        if first >= self.next_seq {
            return None;
        }
        if self.remove(first) {
            return Some(1);
        }
        self.trim_front();
        (self.first_seq != first).then_some(0)
    }

    /// Removes every message below `floor` (loading a persisted floor, or purge up to a sequence).
    pub(crate) fn remove_below(&mut self, floor: u64) -> u64 {
        let mut removed = 0;
        while self.first_seq < floor.min(self.next_seq) {
            let Some(count) = self.remove_first() else { break };
            removed += count;
        }
        // Everything below the floor is gone, so nothing is left to keep contiguous with.
        if self.first_seq == self.next_seq && self.next_seq < floor {
            self.slots.clear();
            self.sealed.clear();
            self.next_seq = floor;
            self.first_seq = floor;
        }
        removed
    }

    /// Applies discard-old `max_msgs` / `max_bytes` and the per-subject limit to every subject.
    pub(crate) fn enforce_count_limits(&mut self) -> u64 {
        let over: Vec<SubjectId> = match self.per_subject_max() {
            Some(max) => self.subjects.iter().filter(|&(_, _, count)| count > max).map(|(id, _, _)| id).collect(),
            None => Vec::new(),
        };
        let removed: u64 = over.into_iter().map(|id| self.enforce_subject(id)).sum();
        removed + self.enforce_discard_old()
    }

    /// The same limits after appending `seq`: only its subject can be over its limit.
    pub(crate) fn enforce_after_append(&mut self, seq: u64) -> u64 {
        let removed = self.live_slot(seq).map(|slot| slot.subject).map_or(0, |id| self.enforce_subject(id));
        removed + self.enforce_discard_old()
    }

    /// The per-subject maximum when it removes old messages (rather than refusing new ones).
    fn per_subject_max(&self) -> Option<u64> {
        let refuses = self.limits.discard == DiscardPolicy::New && self.limits.discard_new_per_subject;
        self.limits.max_msgs_per_subject.filter(|_| !refuses)
    }

    fn enforce_subject(&mut self, id: SubjectId) -> u64 {
        let Some(max) = self.per_subject_max() else { return 0 };
        let mut removed = 0;
        while self.subjects.count(id) > max {
            let Some(first) = self.subject_first(id) else { break };
            if !self.remove(first) {
                break;
            }
            removed += 1;
        }
        removed
    }

    fn enforce_discard_old(&mut self) -> u64 {
        if self.limits.discard != DiscardPolicy::Old {
            return 0;
        }
        let max_msgs = self.limits.max_msgs.unwrap_or(u64::MAX);
        let max_bytes = self.limits.max_bytes.unwrap_or(u64::MAX);
        let mut removed = 0;
        while self.live_msgs > max_msgs || self.live_bytes > max_bytes {
            let Some(count) = self.remove_first() else { break };
            removed += count;
        }
        removed
    }

    /// Removes messages from the front that are at least `max_age` old at `now_ns`.
    pub(crate) fn expire(&mut self, now_ns: i64) -> u64 {
        let Some(max_age) = self.limits.max_age else { return 0 };
        let max_age_ns = i64::try_from(max_age.as_nanos()).unwrap_or(i64::MAX);
        let cutoff_ns = now_ns.saturating_sub(max_age_ns);
        let mut removed = 0;
        // Timestamps are in append order in practice; a message that is not yet expired stops
        // the sweep, as in JetStream.
        while self.first_seq < self.next_seq && self.first_ts <= cutoff_ns {
            let Some(count) = self.remove_first() else { break };
            removed += count;
        }
        removed
    }

    /// Exact first live sequence of subject `id`, tightening the stored bound.
    fn subject_first(&mut self, id: SubjectId) -> Option<u64> {
        let (hint, last) = self.subjects.bounds(id)?;
        let end = last.saturating_add(1).min(self.next_seq);
        let mut seq = hint.max(self.first_seq);
        while let Some(live) = self.next_live(seq, end) {
            if self.live_subject(live) == Some(id) {
                self.subjects.set_first(id, live);
                return Some(live);
            }
            seq = live + 1;
        }
        None
    }

    /// Removes everything; `next_seq` stays, so sequences are never reused. Returns how many went.
    pub(crate) fn clear(&mut self) -> u64 {
        let purged = self.live_msgs;
        self.slots.clear();
        self.sealed.clear();
        self.subjects.clear();
        self.first_seq = self.next_seq;
        self.first_ts = 0;
        self.live_msgs = 0;
        self.live_bytes = 0;
        self.removed.clear();
        purged
    }

    /// Applies a purge request; returns how many messages went.
    pub(crate) fn purge(&mut self, request: &PurgeRequest) -> StoreResult<u64> {
        if request.keep.is_some() && request.up_to_seq.is_some() {
            return Err(StoreError::InvalidPurge);
        }
        let everything = matches!(request.subject.as_deref(), None | Some(">"));
        if !everything {
            return Ok(self.purge_filtered(request));
        }
        if let Some(keep) = request.keep {
            let mut purged = 0;
            while self.live_msgs > keep {
                let Some(count) = self.remove_first() else { break };
                purged += count;
            }
            return Ok(purged);
        }
        if let Some(up_to_seq) = request.up_to_seq {
            let mut purged = 0;
            while self.first_seq < up_to_seq.min(self.next_seq) {
                let Some(count) = self.remove_first() else { break };
                purged += count;
            }
            return Ok(purged);
        }
        Ok(self.clear())
    }

    fn purge_filtered(&mut self, request: &PurgeRequest) -> u64 {
        let mut filter = SubjectFilter::new(request.subject.as_deref(), &self.subjects);
        let end = request.up_to_seq.unwrap_or(self.next_seq).min(self.next_seq);
        let mut doomed = Vec::new();
        let keep = request.keep.unwrap_or(0);
        let mut kept = 0;
        // Newest first, so `keep` spares the newest matching messages, counted across every
        // matching subject (nats-server's PurgeEx).
        let mut seq = end;
        while seq > self.first_seq {
            seq -= 1;
            if !self.is_live(seq) {
                continue;
            }
            let Some(subject) = self.live_subject(seq) else { continue };
            if !filter.matches(subject, &self.subjects) {
                continue;
            }
            if kept < keep {
                kept += 1;
            } else {
                doomed.push(seq);
            }
        }
        // Oldest first, so front removals trim as they go.
        doomed.iter().rev().map(|&seq| u64::from(self.remove(seq))).sum()
    }

    /// First live sequence at or after `from_seq` whose subject matches `filter`.
    pub(crate) fn next_match(&self, from_seq: u64, filter: Option<&str>) -> Option<u64> {
        let mut filter = SubjectFilter::new(filter, &self.subjects);
        let (mut seq, mut end) = (from_seq.max(self.first_seq), self.next_seq);
        if let SubjectFilter::Literal(literal) = filter {
            let (first, last) = self.subjects.bounds(literal?)?;
            seq = seq.max(first);
            end = end.min(last.saturating_add(1));
        }
        while let Some(live) = self.next_live(seq, end) {
            if matches!(filter, SubjectFilter::All) {
                return Some(live);
            }
            if self.live_subject(live).is_some_and(|subject| filter.matches(subject, &self.subjects)) {
                return Some(live);
            }
            seq = live + 1;
        }
        None
    }

    /// Live messages matching `filter` with sequences in `seqs`; `None` when that would take a
    /// scan of more than `scan_max` sequences. A literal subject is scanned only within its
    /// bounds, and a range reaching the end from the other side when that is shorter.
    pub(crate) fn count_matching(&self, seqs: Range<u64>, filter: Option<&str>, scan_max: u64) -> Option<u64> {
        let mut matcher = SubjectFilter::new(filter, &self.subjects);
        // `first..stop` holds every live match; `total` counts them, when known.
        let (first, stop, total) = match matcher {
            SubjectFilter::Literal(Some(id)) => match self.subjects.bounds(id) {
                Some((first, last)) => (first, last.saturating_add(1), self.subjects.count(id)),
                None => return Some(0),
            },
            SubjectFilter::Literal(None) => return Some(0),
            SubjectFilter::All => (self.first_seq, self.next_seq, self.live_msgs),
            SubjectFilter::Wildcard { .. } => (self.first_seq, self.next_seq, u64::MAX),
        };
        let (from, end) = (seqs.start.max(first), seqs.end.min(stop));
        if from >= end {
            return Some(0);
        }
        let mut count_in = |range: Range<u64>| {
            let mut count = 0;
            let mut seq = range.start;
            while let Some(live) = self.next_live(seq, range.end) {
                let all = matches!(matcher, SubjectFilter::All);
                if all || self.live_subject(live).is_some_and(|subject| matcher.matches(subject, &self.subjects)) {
                    count += 1;
                }
                seq = live + 1;
            }
            count
        };
        let before = from - first;
        if end == stop && total != u64::MAX && before < end - from && before <= scan_max {
            return Some(total.saturating_sub(count_in(first..from)));
        }
        (end - from <= scan_max).then(|| count_in(from..end))
    }

    /// Last live sequence whose subject matches `filter`.
    pub(crate) fn last_match(&self, filter: &str) -> Option<u64> {
        let mut matcher = SubjectFilter::new(Some(filter), &self.subjects);
        let (first, mut seq) = (self.first_seq, self.next_seq);
        let mut lowest = first;
        if let SubjectFilter::Literal(literal) = matcher {
            let (subject_first, subject_last) = self.subjects.bounds(literal?)?;
            seq = seq.min(subject_last.saturating_add(1));
            lowest = lowest.max(subject_first);
        }
        while seq > lowest {
            seq -= 1;
            if !self.is_live(seq) {
                continue;
            }
            if self.live_subject(seq).is_some_and(|subject| matcher.matches(subject, &self.subjects)) {
                return Some(seq);
            }
        }
        None
    }

    /// Live message count per subject matching `filter`.
    pub(crate) fn subjects_state(&self, filter: Option<&str>) -> BTreeMap<String, u64> {
        let matcher = SubjectFilter::new(filter, &self.subjects);
        self.subjects
            .iter()
            .filter(|(_, name, _)| matcher.matches_name(name, &self.subjects))
            .map(|(_, name, count)| (name.to_string(), count))
            .collect()
    }

    /// Counts and bounds (the store adds `corruption`).
    pub(crate) fn state(&self) -> StreamState {
        let first_ts = if self.first_seq < self.next_seq { self.first_ts } else { 0 };
        StreamState {
            msgs: self.live_msgs,
            bytes: self.live_bytes,
            first_seq: self.first_seq,
            first_ts,
            last_seq: self.last_seq(),
            last_ts: self.last_ts,
            num_subjects: self.subjects.len() as u64,
            num_deleted: self.next_seq - self.first_seq - self.live_msgs,
            corruption: None,
        }
    }

    /// The live subject name of a slot.
    pub(crate) fn subject_name(&self, slot: &Slot<B>) -> &str {
        self.subjects.name(slot.subject)
    }

    /// The name of a live subject id.
    pub(crate) fn subject_name_of(&self, id: SubjectId) -> &str {
        self.subjects.name(id)
    }

    /// Slots held in memory (the slot tier), for tests of the memory budget.
    #[cfg(test)]
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// The first index entry that could not be read, if any (damage the store reports).
    pub(crate) fn sealed_failure(&self) -> Option<String> {
        self.sealed.failure()
    }
}

/// The sealed tier: how the file store moves slots into it and loads it at open.
impl Ledger<u32> {
    /// Where the live message at `seq` is stored (its offset in its segment's log) and what it is.
    pub(crate) fn live_record(&self, seq: u64) -> Option<(u32, Meta)> {
        if seq < self.first_seq {
            return None;
        }
        if seq >= self.tail_first() {
            let slot = self.live_slot(seq)?;
            let meta =
                Meta { timestamp_ns: slot.timestamp_ns, size: slot.size, headers: slot.headers, subject: slot.subject };
            return Some((slot.body, meta));
        }
        let entry = self.sealed.entry(seq)?;
        let meta =
            Meta { timestamp_ns: entry.timestamp_ns, size: entry.size, headers: entry.headers, subject: entry.subject };
        Some((entry.offset, meta))
    }

    /// The subject table `index::build` writes for `first_seq..end_seq` now, as ledger ids:
    /// live subjects, first use first.
    pub(crate) fn index_subjects(&self, first_seq: u64, end_seq: u64) -> Vec<SubjectId> {
        let mut seen = HashSet::new();
        (first_seq..end_seq)
            .filter_map(|seq| self.slot(seq).filter(|slot| slot.state == SlotState::Live))
            .filter(|slot| seen.insert(slot.subject))
            .map(|slot| slot.subject)
            .collect()
    }

    /// Moves the slots below `end_seq` into the sealed tier as the segment `first_seq..end_seq`,
    /// whose index (written from these slots, see `index::build`) is open as `file`. The slots
    /// from `end_seq` on (the next segment's, appended while the seal's commit ran) stay.
    /// `table` is the index's subject table when it was built earlier (`index_subjects` at a
    /// roll): messages removed since then no longer say what it holds.
    pub(crate) fn seal_tail(
        &mut self,
        (first_seq, end_seq): (u64, u64),
        table: Option<&[SubjectId]>,
        (file, path): (Box<dyn StorageFile>, PathBuf),
    ) {
        debug_assert!(end_seq <= self.next_seq);
        let tail_first = self.tail_first();
        let drained = usize::try_from(end_seq.saturating_sub(tail_first))
            .map_or(self.slots.len(), |count| count.min(self.slots.len()));
        let mut live = LiveBits::new(end_seq - first_seq);
        let mut local: HashMap<SubjectId, usize> = HashMap::new();
        let mut subjects = Vec::new();
        let (mut live_count, mut live_bytes, mut lost_count) = (0, 0, 0);
        for (seq, slot) in (tail_first..).zip(self.slots.range(..drained)) {
            lost_count += u64::from(slot.state == SlotState::Lost);
            if slot.state != SlotState::Live || seq < self.first_seq || seq < first_seq {
                continue;
            }
            live.set(seq - first_seq);
            live_count += 1;
            live_bytes += self.model.counted_bytes(slot.size, slot.headers);
            // The index's subject table in the order `index::build` fills it: first use first.
            local.entry(slot.subject).or_insert_with(|| {
                subjects.push(Some(slot.subject));
                subjects.len() - 1
            });
        }
        if let Some(table) = table {
            // An id no live message of the segment has may have been freed (and reused) since:
            // only live entries are ever read, so such a subject maps to none.
            subjects = table.iter().map(|id| local.contains_key(id).then_some(*id)).collect();
        }
        let sealed_last_ts = match self.slots.get(drained.wrapping_sub(1)) {
            Some(last) if drained < self.slots.len() => last.timestamp_ns,
            _ => self.last_ts,
        };
        self.slots.drain(..drained);
        let segment =
            SealedSegment { first_seq, end_seq, live, live_count, live_bytes, lost_count, subjects, file, path };
        self.sealed.push(segment);
        self.sealed.last_ts = sealed_last_ts;
        self.sealed.drop_below(self.first_seq);
    }

    /// Loads a sealed segment from its validated index (open without a checkpoint): counts its
    /// live messages and subjects and keeps its live bits; returns how many sequences were lost.
    pub(crate) fn load_sealed(
        &mut self,
        index: &IndexFile<'_>,
        first_seq: u64,
        file: Box<dyn StorageFile>,
        path: PathBuf,
    ) -> StoreResult<u64> {
        debug_assert!(self.slots.is_empty() && self.next_seq == first_seq);
        let mut live = LiveBits::new(index.len() as u64);
        let mut subjects: Vec<Option<SubjectId>> = vec![None; index.subjects.len()];
        let (mut live_count, mut live_bytes, mut lost_count) = (0, 0, 0);
        for (position, entry) in index.entries().enumerate() {
            if entry.flags & ie::FLAG_LOST != 0 {
                lost_count += 1;
            } else if entry.flags & ie::FLAG_DELETED == 0 {
                let local = entry.subject_index as usize;
                let id = self.subjects.add(index.subjects[local], entry.seq)?;
                subjects[local] = Some(id);
                let headers = entry.flags & ie::FLAG_HAS_HEADERS != 0;
                let counted = self.model.counted_bytes(entry.length, headers);
                live_bytes += counted;
                self.live_bytes += counted;
                self.live_msgs += 1;
                live.set(position as u64);
                live_count += 1;
            }
            self.last_ts = entry.timestamp_ns;
        }
        let end_seq = first_seq + index.len() as u64;
        if self.first_seq == self.next_seq && live_count == 0 {
            self.first_seq = end_seq;
        }
        self.next_seq = end_seq;
        let segment =
            SealedSegment { first_seq, end_seq, live, live_count, live_bytes, lost_count, subjects, file, path };
        self.sealed.push(segment);
        self.sealed.last_ts = self.last_ts;
        Ok(lost_count)
    }

    /// After loading: the front made live again (the invariant every other call keeps).
    pub(crate) fn settle_front(&mut self) {
        self.trim_front();
    }

    /// The sealed tier, for a checkpoint.
    pub(crate) fn sealed(&self) -> &SealedTier {
        &self.sealed
    }

    /// Per-subject counts and bounds of the sealed tier alone: the slots' messages taken out.
    pub(crate) fn sealed_subjects(&self) -> Vec<SubjectRecord> {
        let tail_first = self.tail_first();
        let mut in_slots: HashMap<SubjectId, u64> = HashMap::new();
        for slot in self.slots.iter().filter(|slot| slot.state == SlotState::Live) {
            *in_slots.entry(slot.subject).or_default() += 1;
        }
        let mut records = Vec::new();
        for (id, mut record) in self.subjects.records() {
            let slot_count = in_slots.get(&id).copied().unwrap_or(0);
            record.count -= slot_count.min(record.count);
            if record.count == 0 {
                continue;
            }
            if slot_count > 0 {
                // Its last sealed message is somewhere below the slots: a bound, not exact.
                (record.last, record.last_exact) = (record.last.min(tail_first - 1), false);
            }
            records.push(record);
        }
        records
    }

    /// A ledger whose sealed tier a checkpoint describes: `first_seq` the oldest live sequence
    /// then, `end_seq` where its segments end; segments follow with `restore_segment`.
    pub(crate) fn restore(
        limits: StoreLimits,
        (first_seq, end_seq, last_ts): (u64, u64, i64),
        subjects: Vec<SubjectRecord>,
    ) -> StoreResult<Option<Self>> {
        let mut ledger = Ledger::new(end_seq, limits, SizeModel::File);
        ledger.first_seq = first_seq.clamp(1, end_seq);
        ledger.last_ts = last_ts;
        for record in subjects {
            if ledger.subjects.restore(record)?.is_none() {
                return Ok(None);
            }
        }
        Ok(Some(ledger))
    }

    /// Adds a checkpointed segment to a restored ledger; `names` is its index's subject table.
    pub(crate) fn restore_segment(&mut self, mut segment: SealedSegment, names: &[&str]) {
        segment.subjects = names.iter().map(|name| self.subjects.id(name)).collect();
        self.live_msgs += segment.live_count;
        self.live_bytes += segment.live_bytes;
        self.sealed.push(segment);
        self.sealed.last_ts = self.last_ts;
    }
}

/// A subject a message may be stored under: literal, well-formed, not too long.
fn check_subject(subject: &str) -> StoreResult<()> {
    if subject.len() > SUBJECT_LENGTH_MAX_BYTES {
        return Err(StoreError::InvalidSubject(format!("longer than {SUBJECT_LENGTH_MAX_BYTES} bytes")));
    }
    if !semaq_wire::subject::is_valid_literal(subject) {
        return Err(StoreError::InvalidSubject(subject.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_store_slot_costs_24_bytes() {
        // The memory budget in docs/design.md depends on it.
        assert_eq!(std::mem::size_of::<Slot<u32>>(), 24);
    }

    #[test]
    fn removing_the_front_skips_the_gaps_behind_it() {
        let mut ledger: Ledger<u32> = Ledger::new(1, StoreLimits::default(), SizeModel::File);
        for _ in 0..4 {
            ledger.push("s", (60, false), 0, 0).unwrap();
        }
        assert!(ledger.remove(2) && ledger.remove(3));
        assert_eq!(ledger.take_removed(), vec![2, 3], "middle removals are reported for delete logs");
        assert!(ledger.remove(1));
        assert_eq!((ledger.first_seq(), ledger.state().num_deleted), (4, 0));
        assert!(ledger.take_removed().is_empty(), "front removals are covered by the floor");
    }

    #[test]
    fn count_matching_counts_live_messages_of_a_subject_or_filter_in_a_range() {
        let mut ledger: Ledger<u32> = Ledger::new(1, StoreLimits::default(), SizeModel::File);
        for subject in ["c.1", "m.a", "c.1", "c.2", "c.1", "m.b", "c.1"] {
            ledger.push(subject, (60, false), 0, 0).unwrap();
        }
        assert!(ledger.remove(3));
        let count = |seqs: Range<u64>, filter: Option<&str>| ledger.count_matching(seqs, filter, 100);
        assert_eq!(count(1..u64::MAX, Some("c.1")), Some(3), "1, 5, 7: the 3rd was removed");
        assert_eq!(count(2..u64::MAX, Some("c.1")), Some(2));
        assert_eq!(count(6..u64::MAX, Some("c.1")), Some(1));
        assert_eq!(count(8..u64::MAX, Some("c.1")), Some(0));
        assert_eq!(count(2..6, Some("c.1")), Some(1));
        assert_eq!(count(1..u64::MAX, Some("m.*")), Some(2));
        assert_eq!(count(3..u64::MAX, None), Some(4));
        assert_eq!(count(1..u64::MAX, Some("nothing")), Some(0));
        assert_eq!(ledger.count_matching(1..u64::MAX, Some("m.*"), 3), None, "more to scan than allowed");
    }

    #[test]
    fn bytes_count_as_nats_servers_file_and_memory_stores_count_them() {
        // fileStoreMsgSize and memStoreMsgSize in nats-server 2.9 and 2.10+.
        assert_eq!(SizeModel::File.message_bytes("orders", None, b"12345"), 22 + 6 + 5 + 8);
        assert_eq!(
            SizeModel::File.message_bytes("orders", Some(b"NATS/1.0\r\n\r\n"), b"12345"),
            22 + 6 + 4 + 12 + 5 + 8
        );
        assert_eq!(SizeModel::File.message_bytes("orders", Some(b""), b"12345"), 22 + 6 + 5 + 8);
        assert_eq!(SizeModel::Memory.message_bytes("orders", Some(b"NATS/1.0\r\n\r\n"), b"12345"), 6 + 12 + 5 + 16);
        let mut ledger: Ledger<u32> = Ledger::new(1, StoreLimits::default(), SizeModel::File);
        let record = u32::try_from(crate::record::record_size("orders", Some(b"NATS/1.0\r\n\r\n"), b"12345")).unwrap();
        ledger.push("orders", (record, true), 0, 0).unwrap();
        assert_eq!(ledger.state().bytes, 22 + 6 + 4 + 12 + 5 + 8, "derived from the record as stored");
    }
}
