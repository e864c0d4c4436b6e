//! The store for `storage: memory`: the shared ledger with each message's bytes in its slot.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::error::StoreResult;
use crate::ledger::{Ledger, SlotState};
use crate::limits::SKIP_COUNT_MAX;
use crate::record::record_size;
use crate::types::{PurgeRequest, SizeModel, StoreLimits, StoredMessage, StreamState};
use crate::StreamStore;

/// A message's bytes, held while the message is live.
#[derive(Debug, Clone, Default)]
struct Body {
    headers: Option<Bytes>,
    payload: Bytes,
}

/// A stream kept only in memory; it is empty after a restart.
#[derive(Debug)]
pub struct MemoryStore {
    ledger: Ledger<Option<Body>>,
}

impl MemoryStore {
    /// An empty stream with these limits; the first message gets sequence 1.
    pub fn new(limits: StoreLimits) -> Self {
        MemoryStore { ledger: Ledger::new(1, limits, SizeModel::Memory) }
    }

    fn message(&self, seq: u64) -> Option<StoredMessage> {
        let slot = self.ledger.live_slot(seq)?;
        let body = slot.body.as_ref()?;
        Some(StoredMessage {
            seq,
            subject: self.ledger.subject_name(slot).to_string(),
            headers: body.headers.clone(),
            payload: body.payload.clone(),
            timestamp_ns: slot.timestamp_ns,
        })
    }

    /// Memory has no delete log: forget which sequences went from the middle.
    fn settle(&mut self) {
        self.ledger.take_removed();
    }
}

impl StreamStore for MemoryStore {
    fn append(
        &mut self,
        subject: &str,
        headers: Option<&[u8]>,
        payload: &[u8],
        timestamp_ns: i64,
    ) -> StoreResult<(u64, i64)> {
        let message_size = headers.map_or(0, <[u8]>::len) + payload.len();
        let has_headers = headers.is_some_and(|block| !block.is_empty());
        let sizes = (record_size(subject, headers, payload), has_headers);
        let size = self.ledger.check_append(subject, message_size, sizes)?;
        let body = Body { headers: headers.map(Bytes::copy_from_slice), payload: Bytes::copy_from_slice(payload) };
        let seq = self.ledger.push(subject, (size, has_headers), timestamp_ns, Some(body))?;
        self.ledger.enforce_after_append(seq);
        self.settle();
        Ok((seq, timestamp_ns))
    }

    fn get(&self, seq: u64) -> StoreResult<Option<StoredMessage>> {
        Ok(self.message(seq))
    }

    fn get_next(&self, from_seq: u64, filter: Option<&str>) -> StoreResult<Option<StoredMessage>> {
        Ok(self.ledger.next_match(from_seq, filter).and_then(|seq| self.message(seq)))
    }

    fn get_last_for_subject(&self, filter: &str) -> StoreResult<Option<StoredMessage>> {
        Ok(self.ledger.last_match(filter).and_then(|seq| self.message(seq)))
    }

    fn delete(&mut self, seq: u64) -> StoreResult<bool> {
        let removed = self.ledger.remove(seq);
        self.settle();
        Ok(removed)
    }

    fn purge(&mut self, request: &PurgeRequest) -> StoreResult<u64> {
        let purged = self.ledger.purge(request)?;
        self.settle();
        Ok(purged)
    }

    fn state(&self) -> StreamState {
        self.ledger.state()
    }

    fn subjects_state(&self, filter: Option<&str>) -> BTreeMap<String, u64> {
        self.ledger.subjects_state(filter)
    }

    fn enforce_limits(&mut self, now_ns: i64) -> StoreResult<u64> {
        let removed = self.ledger.expire(now_ns) + self.ledger.enforce_count_limits();
        self.settle();
        Ok(removed)
    }

    fn update_limits(&mut self, limits: StoreLimits) -> StoreResult<u64> {
        self.ledger.set_limits(limits);
        let removed = self.ledger.enforce_count_limits();
        self.settle();
        Ok(removed)
    }

    fn limits(&self) -> &StoreLimits {
        self.ledger.limits()
    }

    fn flush(&mut self) -> StoreResult<()> {
        Ok(())
    }

    fn sync(&mut self) -> StoreResult<()> {
        Ok(())
    }

    fn compact(&mut self) -> StoreResult<()> {
        Ok(())
    }

    fn close(&mut self) -> StoreResult<()> {
        Ok(())
    }

    fn size_model(&self) -> SizeModel {
        SizeModel::Memory
    }

    fn count_matching(&self, seqs: std::ops::Range<u64>, filter: Option<&str>, scan_max: u64) -> Option<u64> {
        self.ledger.count_matching(seqs, filter, scan_max)
    }

    fn stored_bytes(&self) -> u64 {
        self.ledger.state().bytes
    }

    fn skip_to(&mut self, next_seq: u64) -> StoreResult<bool> {
        if self.ledger.state().msgs > 0 || next_seq <= self.ledger.next_seq() {
            return Ok(false);
        }
        self.ledger.remove_below(next_seq);
        Ok(true)
    }

    fn skip_msgs(&mut self, next_seq: u64) -> StoreResult<bool> {
        let from = self.ledger.next_seq();
        let state = self.ledger.state();
        if state.msgs == 0 {
            return self.skip_to(next_seq);
        }
        if next_seq <= from || next_seq - from > SKIP_COUNT_MAX {
            return Ok(false);
        }
        for _ in from..next_seq {
            self.ledger.push_dead(SlotState::Deleted, state.last_ts);
        }
        Ok(true)
    }
}
