//! A priority-ordered consumer's read-ahead: stream messages read past but not yet delivered,
//! one queue per `Semaq-Priority`, handed out by the stride rule of [`crate::priority`].
//!
//! A consumer orders by priority when its metadata or its stream's says `semaq.priority: true`
//! (durable intents' streams always do). It reads up to `PRIORITY_READ_AHEAD_MESSAGES_MAX`
//! messages beyond the last delivered, so the order holds within that window; stream order holds
//! within one priority. Only sequence numbers are kept: a message is read again when handed out,
//! so one deleted meanwhile (purge, limits, a delete) is passed over, not delivered.
//!
//! The consumer's read position may pass messages still waiting here. What is saved, and what
//! decides "acknowledged" for interest and work-queue retention, is the lowest waiting sequence
//! (`State::resume_seq`), so a restart never skips a message that was read ahead but not sent.

use std::collections::{BTreeSet, VecDeque};

use semaq_wire::headers::{names, Headers};

use crate::priority::{priority_of, Stride, PRIORITIES};

/// The metadata key (consumer or stream) that turns priority ordering on.
pub const PRIORITY_METADATA_KEY: &str = "semaq.priority";

/// Checks a `semaq.priority` value: `true` or `false`.
pub fn check(metadata: &std::collections::BTreeMap<String, String>) -> Result<(), String> {
    match metadata.get(PRIORITY_METADATA_KEY).map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(()),
        Some(value) if value == "true" || value == "false" => Ok(()),
        Some(_) => Err(format!("{PRIORITY_METADATA_KEY} must be true or false")),
    }
}

/// Whether a metadata value turns priority ordering on.
pub fn enabled(value: Option<&String>) -> bool {
    value.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The priority of a stored message, from its `Semaq-Priority` header.
pub fn priority_of_message(headers: Option<&[u8]>) -> u8 {
    priority_of(headers.and_then(|block| Headers::new(block).get(names::PRIORITY)))
}

/// Sequences read ahead, by priority.
#[derive(Debug, Default)]
pub struct ReadAhead {
    queues: [VecDeque<u64>; PRIORITIES],
    stride: Stride,
    seqs: BTreeSet<u64>,
}

impl ReadAhead {
    /// Sequences waiting.
    pub fn len(&self) -> usize {
        self.seqs.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// Whether `seq` waits here.
    pub fn contains(&self, seq: u64) -> bool {
        self.seqs.contains(&seq)
    }

    /// The lowest waiting sequence.
    pub fn first(&self) -> Option<u64> {
        self.seqs.first().copied()
    }

    fn backlogged(&self) -> [bool; PRIORITIES] {
        std::array::from_fn(|p| !self.queues[p].is_empty())
    }

    /// Queues `seq`, read in stream order, at `priority` (clamped to 0..=3).
    pub fn push(&mut self, priority: u8, seq: u64) {
        let priority = usize::from(priority).min(PRIORITIES - 1);
        if self.queues[priority].is_empty() {
            let backlogged = self.backlogged();
            self.stride.rejoin(priority, backlogged);
        }
        self.queues[priority].push_back(seq);
        self.seqs.insert(seq);
    }

    /// The next sequence by priority share, with its priority.
    pub fn pop(&mut self) -> Option<(u8, u64)> {
        let priority = self.stride.pick(self.backlogged())?;
        let seq = self.queues[priority].pop_front()?;
        self.seqs.remove(&seq);
        Some((priority as u8, seq))
    }

    /// Returns a popped sequence that could not be sent to the front of its queue, uncharged.
    pub fn put_back(&mut self, priority: u8, seq: u64) {
        let priority = usize::from(priority).min(PRIORITIES - 1);
        self.stride.unpick(priority);
        self.queues[priority].push_front(seq);
        self.seqs.insert(seq);
    }

    /// Forgets every sequence below `first` (the stream dropped them).
    pub fn forget_below(&mut self, first: u64) {
        if self.first().is_none_or(|lowest| lowest >= first) {
            return;
        }
        for queue in &mut self.queues {
            queue.retain(|seq| *seq >= first);
        }
        self.seqs = self.seqs.split_off(&first);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::priority::STARVATION_BOUND;

    #[test]
    fn stream_order_holds_within_one_priority() {
        let mut ahead = ReadAhead::default();
        for seq in 1..=5 {
            ahead.push(2, seq);
        }
        let order: Vec<u64> = std::iter::from_fn(|| ahead.pop().map(|(_, seq)| seq)).collect();
        assert_eq!(order, vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn lower_numbers_first_and_priority_three_within_the_bound() {
        let mut ahead = ReadAhead::default();
        let mut seq = 0;
        for _ in 0..100 {
            for priority in [3u8, 2, 1, 0] {
                seq += 1;
                ahead.push(priority, seq);
            }
        }
        let first = ahead.pop().unwrap();
        assert_eq!(first, (0, 4), "the first priority 0 message goes first");
        let position = (1..).find(|_| ahead.pop().unwrap().0 == 3).unwrap();
        assert!(position <= STARVATION_BOUND, "priority 3 waited behind {position}");
    }

    #[test]
    fn the_lowest_waiting_sequence_is_known_and_put_back_restores_it() {
        let mut ahead = ReadAhead::default();
        ahead.push(3, 1);
        ahead.push(0, 2);
        assert_eq!(ahead.pop(), Some((0, 2)));
        assert_eq!(ahead.first(), Some(1));
        ahead.put_back(0, 2);
        assert_eq!(ahead.pop(), Some((0, 2)), "put back at the front, uncharged");
        assert!(ahead.contains(1) && !ahead.contains(2));
    }

    #[test]
    fn sequences_the_stream_dropped_are_forgotten() {
        let mut ahead = ReadAhead::default();
        for seq in 1..=6 {
            ahead.push((seq % 4) as u8, seq);
        }
        ahead.forget_below(4);
        assert_eq!(ahead.len(), 3);
        assert_eq!(ahead.first(), Some(4));
        let mut left: Vec<u64> = std::iter::from_fn(|| ahead.pop().map(|(_, seq)| seq)).collect();
        left.sort_unstable();
        assert_eq!(left, vec![4, 5, 6]);
    }

    #[test]
    fn the_header_names_the_priority() {
        assert_eq!(priority_of_message(Some(b"NATS/1.0\r\nSemaq-Priority: 0\r\n\r\n")), 0);
        assert_eq!(priority_of_message(Some(b"NATS/1.0\r\nSemaq-Priority: nine\r\n\r\n")), 1);
        assert_eq!(priority_of_message(None), 1);
        assert!(enabled(Some(&"true".to_string())) && !enabled(Some(&"no".to_string())) && !enabled(None));
    }
}
