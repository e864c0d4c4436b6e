//! The sealed tier of the ledger: sealed segments keep no per-message slot in memory.
//!
//! A sealed segment's index file already holds one fixed-size entry per sequence, so the tier
//! keeps per segment only its sequence range, one live bit per sequence, its live count and
//! the map from the index's subject table to the ledger's subject ids. A message's time, size,
//! offset and subject are read from the index file on demand (one positioned read, O(1) by
//! sequence), through a small cache of index pages. The memory store leaves the tier empty.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::limits::{index_entry as ie, index_header as ih, INDEX_CACHE_PAGES_MAX_COUNT, INDEX_PAGE_BYTES};
use crate::record::{read_i64, read_u32, read_u64};
use crate::storage::StorageFile;
use crate::subjects::SubjectId;

/// A live message's metadata, read from a sealed segment's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SealedEntry {
    pub timestamp_ns: i64,
    /// Where the record starts in the segment's log.
    pub offset: u32,
    /// The record's stored size.
    pub size: u32,
    pub headers: bool,
    pub subject: SubjectId,
}

/// One bit per sequence of a segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LiveBits {
    words: Vec<u64>,
}

impl LiveBits {
    /// `count` bits, all clear.
    pub(crate) fn new(count: u64) -> Self {
        LiveBits { words: vec![0; usize::try_from(count.div_ceil(64)).unwrap_or(0)] }
    }

    pub(crate) fn get(&self, index: u64) -> bool {
        let word = usize::try_from(index / 64).ok().and_then(|word| self.words.get(word));
        word.is_some_and(|word| word & (1 << (index % 64)) != 0)
    }

    pub(crate) fn set(&mut self, index: u64) {
        if let Some(word) = usize::try_from(index / 64).ok().and_then(|word| self.words.get_mut(word)) {
            *word |= 1 << (index % 64);
        }
    }

    pub(crate) fn clear(&mut self, index: u64) {
        if let Some(word) = usize::try_from(index / 64).ok().and_then(|word| self.words.get_mut(word)) {
            *word &= !(1 << (index % 64));
        }
    }

    /// The bits as stored words (for the checkpoint).
    pub(crate) fn words(&self) -> &[u64] {
        &self.words
    }

    /// Bits from their stored words; `None` unless exactly enough words for `count` bits.
    pub(crate) fn from_words(words: Vec<u64>, count: u64) -> Option<Self> {
        (words.len() as u64 == count.div_ceil(64)).then_some(LiveBits { words })
    }

    /// Set bits.
    pub(crate) fn count(&self) -> u64 {
        self.words.iter().map(|word| u64::from(word.count_ones())).sum()
    }

    /// The first set bit at or after `from` and below `end`.
    pub(crate) fn next_set(&self, from: u64, end: u64) -> Option<u64> {
        let mut index = from;
        while index < end {
            let word = *self.words.get(usize::try_from(index / 64).ok()?)?;
            let masked = word & (u64::MAX << (index % 64));
            if masked != 0 {
                let found = index - index % 64 + u64::from(masked.trailing_zeros());
                return (found < end).then_some(found);
            }
            index = index - index % 64 + 64;
        }
        None
    }
}

/// A sealed segment as the tier keeps it.
#[derive(Debug)]
pub(crate) struct SealedSegment {
    pub first_seq: u64,
    /// One past its last sequence.
    pub end_seq: u64,
    pub live: LiveBits,
    pub live_count: u64,
    /// Counted bytes (`SizeModel`) of its live messages.
    pub live_bytes: u64,
    /// Sequences its index marks lost to corruption (reported at every open).
    pub lost_count: u64,
    /// The index's subject table, by position, as ledger subject ids (`None`: no live message
    /// of that subject was left when the map was made).
    pub subjects: Vec<Option<SubjectId>>,
    /// The open index file.
    pub file: Box<dyn StorageFile>,
    pub path: PathBuf,
}

/// A cached page of index entries.
#[derive(Debug)]
struct Page {
    segment_first_seq: u64,
    page: u64,
    bytes: Vec<u8>,
    used: u64,
}

/// Recently read index pages, bounded.
#[derive(Debug, Default)]
struct PageCache {
    pages: Vec<Page>,
    clock: u64,
}

/// The sealed segments of a ledger, oldest first; sequences they do not cover are dead.
#[derive(Debug, Default)]
pub(crate) struct SealedTier {
    segments: VecDeque<SealedSegment>,
    cache: Mutex<PageCache>,
    /// The first failure to read an index entry: the store reports it as damage.
    failure: Mutex<Option<String>>,
    /// Whether `failure` holds one: asked after every read, so kept apart from its lock.
    failed: AtomicBool,
    /// Timestamp of the last sequence sealed (of a removed message too).
    pub last_ts: i64,
}

impl SealedTier {
    /// Adds the next sealed segment (after every one held).
    pub(crate) fn push(&mut self, segment: SealedSegment) {
        self.segments.push_back(segment);
    }

    /// The segments, oldest first.
    pub(crate) fn segments(&self) -> impl Iterator<Item = &SealedSegment> {
        self.segments.iter()
    }

    fn position(&self, seq: u64) -> Option<usize> {
        let position = self.segments.partition_point(|segment| segment.first_seq <= seq).checked_sub(1)?;
        (seq < self.segments[position].end_seq).then_some(position)
    }

    /// Whether `seq` holds a live message here.
    pub(crate) fn is_live(&self, seq: u64) -> bool {
        self.position(seq).is_some_and(|position| {
            let segment = &self.segments[position];
            segment.live.get(seq - segment.first_seq)
        })
    }

    /// The first live sequence in `from..end`.
    pub(crate) fn next_live(&self, from: u64, end: u64) -> Option<u64> {
        let start = self.segments.partition_point(|segment| segment.end_seq <= from);
        for segment in self.segments.range(start..) {
            if segment.first_seq >= end {
                break;
            }
            if segment.live_count == 0 {
                continue;
            }
            let local_from = from.max(segment.first_seq) - segment.first_seq;
            let local_end = end.min(segment.end_seq) - segment.first_seq;
            if let Some(found) = segment.live.next_set(local_from, local_end) {
                return Some(segment.first_seq + found);
            }
        }
        None
    }

    /// Marks the live message at `seq` removed (it counted `counted_bytes`, when known); false
    /// when it was not live.
    pub(crate) fn kill(&mut self, seq: u64, counted_bytes: Option<u64>) -> bool {
        let Some(position) = self.position(seq) else { return false };
        let segment = &mut self.segments[position];
        let index = seq - segment.first_seq;
        if !segment.live.get(index) {
            return false;
        }
        segment.live.clear(index);
        segment.live_count -= 1;
        segment.live_bytes = segment.live_bytes.saturating_sub(counted_bytes.unwrap_or(0));
        true
    }

    /// Forgets segments that end at or below `first_seq`.
    pub(crate) fn drop_below(&mut self, first_seq: u64) {
        while self.segments.front().is_some_and(|segment| segment.end_seq <= first_seq) {
            if let Some(gone) = self.segments.pop_front() {
                self.forget_pages(gone.first_seq);
            }
        }
    }

    /// Forgets every segment.
    pub(crate) fn clear(&mut self) {
        self.segments.clear();
        self.cache.lock().unwrap_or_else(PoisonError::into_inner).pages.clear();
    }

    fn forget_pages(&mut self, segment_first_seq: u64) {
        let cache = self.cache.get_mut().unwrap_or_else(PoisonError::into_inner);
        cache.pages.retain(|page| page.segment_first_seq != segment_first_seq);
    }

    /// The metadata of the live message at `seq`, read from its index; `None` when it is not
    /// live, or when the index cannot be read or disagrees with itself (recorded as a failure).
    pub(crate) fn entry(&self, seq: u64) -> Option<SealedEntry> {
        let segment = &self.segments[self.position(seq)?];
        if !segment.live.get(seq - segment.first_seq) {
            return None;
        }
        match self.read_entry(segment, seq) {
            Ok(entry) => Some(entry),
            Err(detail) => {
                self.fail(format!("index {}: seq {seq}: {detail}", segment.path.display()));
                None
            }
        }
    }

    fn read_entry(&self, segment: &SealedSegment, seq: u64) -> Result<SealedEntry, String> {
        const ENTRIES_PER_PAGE: usize = INDEX_PAGE_BYTES / ie::SIZE_BYTES;
        let index = seq - segment.first_seq;
        let (page, slot) = (index / ENTRIES_PER_PAGE as u64, usize::try_from(index).unwrap_or(0) % ENTRIES_PER_PAGE);
        let raw = self.with_page(segment, page, |bytes| {
            bytes.get(slot * ie::SIZE_BYTES..(slot + 1) * ie::SIZE_BYTES).map(<[u8]>::to_vec)
        })?;
        let raw = raw.ok_or("entry beyond the index's end")?;
        if read_u64(&raw, ie::SEQ_OFFSET) != seq {
            return Err("entry names another sequence".into());
        }
        let flags = read_u32(&raw, ie::FLAGS_OFFSET);
        if flags & (ie::FLAG_DELETED | ie::FLAG_LOST) != 0 {
            return Err("entry of a live message is marked removed".into());
        }
        let subject_index = read_u32(&raw, ie::SUBJECT_INDEX_OFFSET) as usize;
        let subject = segment.subjects.get(subject_index).copied().flatten().ok_or("entry's subject is unknown")?;
        Ok(SealedEntry {
            timestamp_ns: read_i64(&raw, ie::TIMESTAMP_OFFSET),
            offset: read_u32(&raw, ie::OFFSET_OFFSET),
            size: read_u32(&raw, ie::LENGTH_OFFSET),
            headers: flags & ie::FLAG_HAS_HEADERS != 0,
            subject,
        })
    }

    /// Runs `use_page` on page `page` of the segment's entries, reading it into the cache first
    /// when it is not there (evicting the least recently used page past the bound).
    fn with_page<T>(&self, segment: &SealedSegment, page: u64, use_page: impl FnOnce(&[u8]) -> T) -> Result<T, String> {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.clock += 1;
        let clock = cache.clock;
        let found =
            cache.pages.iter_mut().find(|cached| cached.segment_first_seq == segment.first_seq && cached.page == page);
        if let Some(cached) = found {
            cached.used = clock;
            return Ok(use_page(&cached.bytes));
        }
        let entries_bytes = (segment.end_seq - segment.first_seq) * ie::SIZE_BYTES as u64;
        let start = page * INDEX_PAGE_BYTES as u64;
        let length = usize::try_from(entries_bytes.saturating_sub(start))
            .map_or(INDEX_PAGE_BYTES, |left| left.min(INDEX_PAGE_BYTES));
        let mut bytes = vec![0; length];
        segment.file.read_at(&mut bytes, ih::SIZE_BYTES as u64 + start).map_err(|error| error.to_string())?;
        let answer = use_page(&bytes);
        let fresh = Page { segment_first_seq: segment.first_seq, page, bytes, used: clock };
        if cache.pages.len() < INDEX_CACHE_PAGES_MAX_COUNT {
            cache.pages.push(fresh);
        } else if let Some(oldest) = cache.pages.iter_mut().min_by_key(|cached| cached.used) {
            *oldest = fresh;
        }
        Ok(answer)
    }

    fn fail(&self, detail: String) {
        let mut failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        failure.get_or_insert(detail);
        self.failed.store(true, Ordering::Release);
    }

    /// The first index read that failed, if any.
    pub(crate) fn failure(&self) -> Option<String> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        self.failure.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_bits_find_the_next_set_bit_across_words() {
        let mut bits = LiveBits::new(200);
        for index in [3, 64, 130, 199] {
            bits.set(index);
        }
        assert_eq!(bits.next_set(0, 200), Some(3));
        assert_eq!(bits.next_set(4, 200), Some(64));
        assert_eq!(bits.next_set(65, 130), None, "the end is exclusive");
        assert_eq!(bits.next_set(131, 200), Some(199));
        bits.clear(64);
        assert_eq!(bits.next_set(4, 200), Some(130));
    }
}
