//! The streaming verifier behind `semaq verify`: messages go in, in sequence order, from any
//! source (the server's chain pages or a stopped stream's files); out comes the first sequence
//! where the chain breaks, and why, or a summary of what was proved.
//!
//! Memory is bounded by the checkpoints (one per ~1,000 messages), never by the messages.

use std::ops::RangeInclusive;

use semaq_wire::headers::{names, Headers};

use super::checkpoint::{Checkpoint, PublicKey};
use super::{event_time, message_hash, to_hex, unseal, Hash, Link, GENESIS};
use crate::types::MessageRef;

/// How far a record that does not link to its predecessor is searched for the sequence it was
/// chained as (to tell "removed and renumbered" and "moved" from plain tampering).
const SHIFT_SEARCH_MAX: u64 = 16;

/// Why the chain breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakKind {
    /// A sequence the chain needs is not stored (removed from the middle, unreadable, or cut off the end).
    MissingSequence,
    /// A record sits where another was chained: records swapped, moved or their links replaced.
    Reordered,
    /// A message's subject, headers or payload differ from what was hashed.
    HashMismatch,
    /// A message lacks the chain headers or its event time.
    NotChained,
    /// A checkpoint's signature is not the stream key's (or checkpoints are out of order).
    BadSignature,
    /// A validly signed checkpoint names another head than the chain has: the chain was rewritten.
    CheckpointMismatch,
}

impl std::fmt::Display for BreakKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BreakKind::MissingSequence => "missing sequence",
            BreakKind::Reordered => "reordered",
            BreakKind::HashMismatch => "hash mismatch",
            BreakKind::NotChained => "not chained",
            BreakKind::BadSignature => "bad signature",
            BreakKind::CheckpointMismatch => "checkpoint mismatch",
        })
    }
}

/// The first place the chain breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    /// The first broken sequence.
    pub seq: u64,
    /// What kind of break.
    pub kind: BreakKind,
    /// Details for a person.
    pub detail: String,
}

impl std::fmt::Display for Break {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "seq {}: {}: {}", self.seq, self.kind, self.detail)
    }
}

impl std::error::Error for Break {}

fn broken(seq: u64, kind: BreakKind, detail: impl Into<String>) -> Break {
    Break { seq, kind, detail: detail.into() }
}

/// What a clean walk proved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Messages whose hash and link were checked.
    pub verified: u64,
    /// First and last sequence checked (`None` when the range held no message).
    pub range: Option<(u64, u64)>,
    /// Checkpoint signatures checked against the key.
    pub signatures_checked: u64,
    /// Checkpoints whose head matched the recomputed chain.
    pub checkpoints_matched: u64,
    /// The highest checkpoint inside the range: every message up to it is signed.
    pub signed_through: Option<u64>,
    /// The first message's predecessor was not stored, so the walk started from the hash the
    /// message records (its own hash still covers it, and later checkpoints sign both).
    pub anchored: bool,
    /// Sequences the chain steps over: used by messages removed before anything chained on
    /// them (an atomic batch refused or cut short by a crash), so the next message links to the
    /// one before them, and its hash covers its own sequence.
    pub skipped: u64,
}

impl Summary {
    /// Messages after the last checkpoint: hashed and linked, not yet signed.
    pub fn unsigned(&self) -> Option<(u64, u64)> {
        let (first, last) = self.range?;
        let from = self.signed_through.map_or(first, |signed| signed + 1);
        (from <= last).then_some((from, last))
    }
}

/// A record that did not link to its predecessor, held until the next message shows whether
/// it was swapped with that one.
#[derive(Debug, Clone, Copy)]
struct Unlinked {
    seq: u64,
    /// The hash the record should have named as its predecessor.
    expected_prev: Hash,
    /// The sequence the record's own hash says it was chained as, if found near `seq`.
    chained_as: Option<u64>,
}

/// Walks a stream's chain; see the module doc.
#[derive(Debug)]
pub struct Verifier {
    stream: String,
    /// Checkpoints at or after `from_seq`, sorted by sequence.
    checkpoints: Vec<Checkpoint>,
    from_seq: u64,
    /// The last message verified and its hash.
    last: Option<(u64, Hash)>,
    summary: Summary,
    /// The earliest bad signature (or out-of-order checkpoint), found up front.
    signature_break: Option<Break>,
    unlinked: Option<Unlinked>,
}

impl Verifier {
    /// A verifier for `stream` whose checkpoints (in file order) must be signed by `key`;
    /// messages before `from_seq` and the checkpoints before it are left out.
    pub fn new(stream: &str, key: &PublicKey, checkpoints: &[Checkpoint], from_seq: u64) -> Self {
        let mut signature_break: Option<Break> = None;
        let mut earliest = |candidate: Break| {
            if signature_break.as_ref().is_none_or(|found| candidate.seq < found.seq) {
                signature_break = Some(candidate);
            }
        };
        let mut previous_seq = None;
        let mut signatures_checked = 0;
        for checkpoint in checkpoints.iter().filter(|c| c.seq >= from_seq) {
            signatures_checked += 1;
            if !checkpoint.is_signed_by(key, stream) {
                let detail = format!("the checkpoint at seq {} is not signed by key {}", checkpoint.seq, key.to_hex());
                earliest(broken(checkpoint.seq, BreakKind::BadSignature, detail));
            }
            if let Some(previous) = previous_seq.filter(|&previous| checkpoint.seq <= previous) {
                let detail = format!("the checkpoint at seq {} follows one at seq {previous}", checkpoint.seq);
                earliest(broken(checkpoint.seq, BreakKind::BadSignature, detail));
            }
            previous_seq = Some(checkpoint.seq);
        }
        let mut sorted: Vec<Checkpoint> = checkpoints.iter().filter(|c| c.seq >= from_seq).copied().collect();
        sorted.sort_by_key(|c| c.seq);
        Verifier {
            stream: stream.to_string(),
            checkpoints: sorted,
            from_seq,
            last: None,
            summary: Summary { signatures_checked, ..Summary::default() },
            signature_break,
            unlinked: None,
        }
    }

    /// The stream's name.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// Messages verified so far.
    pub fn verified(&self) -> u64 {
        self.summary.verified
    }

    fn checkpoint_at(&self, seq: u64) -> Option<&Checkpoint> {
        self.checkpoints.binary_search_by_key(&seq, |c| c.seq).ok().map(|at| &self.checkpoints[at])
    }

    /// The earlier of `found` and a bad signature found up front.
    fn first_of(&self, found: Break) -> Break {
        match &self.signature_break {
            Some(signature) if signature.seq <= found.seq => signature.clone(),
            _ => found,
        }
    }

    /// Checks the next stored message (call in increasing sequence order). After an `Err`, the
    /// walk is over.
    pub fn check(&mut self, message: MessageRef<'_>) -> Result<(), Break> {
        if message.seq < self.from_seq {
            return Ok(());
        }
        if let Some(unlinked) = self.unlinked.take() {
            return Err(self.first_of(self.resolve(unlinked, Some(message))));
        }
        match self.check_one(message) {
            Ok(hash) => {
                self.last = Some((message.seq, hash));
                self.summary.verified += 1;
                let first = self.summary.range.map_or(message.seq, |(first, _)| first);
                self.summary.range = Some((first, message.seq));
                match &self.signature_break {
                    Some(signature) if signature.seq <= message.seq => Err(signature.clone()),
                    _ => Ok(()),
                }
            }
            Err(None) => Ok(()), // an unlinked record, decided by the next message
            Err(Some(found)) => Err(self.first_of(found)),
        }
    }

    /// A sequence the source could not read (a damaged record): the chain breaks there.
    pub fn unreadable(&mut self, seq: u64, detail: &str) -> Break {
        self.first_of(broken(seq, BreakKind::MissingSequence, format!("its record cannot be read: {detail}")))
    }

    /// `Ok(hash)`, `Err(Some(break))`, or `Err(None)` when the record is held as unlinked.
    fn check_one(&mut self, message: MessageRef<'_>) -> Result<Hash, Option<Break>> {
        let seq = message.seq;
        let expected_prev = match self.last {
            Some((last_seq, _)) if seq <= last_seq => {
                return Err(Some(broken(seq, BreakKind::Reordered, format!("seq {seq} comes after seq {last_seq}"))));
            }
            Some((last_seq, last_hash)) if seq > last_seq + 1 => {
                self.step_over(last_seq + 1..=seq - 1, &last_hash, message.headers).map_err(Some)?;
                Some(last_hash)
            }
            Some((_, last_hash)) => Some(last_hash),
            None if seq == 1 => Some(GENESIS),
            None => self.checkpoint_at(seq - 1).map(|c| c.head),
        };
        let not_chained = |detail: String| Some(broken(seq, BreakKind::NotChained, detail));
        let headers = message.headers.ok_or_else(|| not_chained("it has no header block".into()))?;
        let sealed = unseal(headers).map_err(|reason| not_chained(reason.into()))?;
        let text = Headers::new(headers)
            .get(names::EVENT_TIME)
            .ok_or_else(|| not_chained("it has no Semaq-Event-Time".into()))?;
        let event_time_ns = event_time::parse_event_time(text)
            .ok_or_else(|| not_chained(format!("its Semaq-Event-Time {text:?} cannot be read")))?;
        let link = |seq| Link {
            seq,
            event_time_ns,
            subject: message.subject,
            headers: sealed.covered(),
            payload: message.payload,
        };
        match expected_prev {
            Some(expected) if expected != sealed.prev => {
                let chained_as = (1..=SHIFT_SEARCH_MAX)
                    .flat_map(|shift| [seq + shift, seq.saturating_sub(shift)])
                    .find(|&candidate| candidate != seq && message_hash(&sealed.prev, &link(candidate)) == sealed.hash);
                self.unlinked = Some(Unlinked { seq, expected_prev: expected, chained_as });
                return Err(None);
            }
            None => self.summary.anchored = true,
            Some(_) => {}
        }
        if message_hash(&sealed.prev, &link(seq)) != sealed.hash {
            let detail =
                "its subject, headers or payload do not hash to its recorded Semaq-Hash (edited after it was stored)";
            return Err(Some(broken(seq, BreakKind::HashMismatch, detail)));
        }
        if let Some(checkpoint) = self.checkpoint_at(seq) {
            if checkpoint.head != sealed.hash {
                let detail = format!(
                    "the checkpoint at seq {seq} signed head {} but the chain has {}: the chain was rewritten after it was signed",
                    to_hex(&checkpoint.head),
                    to_hex(&sealed.hash)
                );
                return Err(Some(broken(seq, BreakKind::CheckpointMismatch, detail)));
            }
            self.summary.checkpoints_matched += 1;
            self.summary.signed_through = Some(seq);
        }
        Ok(sealed.hash)
    }

    /// Sequences `gap` are not stored: the chain steps over them only when the message after
    /// them links to the one before (nothing was ever chained on them; its own hash, checked next,
    /// covers its sequence) and no checkpoint signed one of them. Otherwise they were removed.
    fn step_over(&mut self, gap: RangeInclusive<u64>, last_hash: &Hash, next: Option<&[u8]>) -> Result<(), Break> {
        let links_over = next.and_then(|headers| unseal(headers).ok()).is_some_and(|sealed| sealed.prev == *last_hash);
        let signed = self.checkpoints.iter().find(|c| gap.contains(&c.seq));
        if links_over && signed.is_none() {
            self.summary.skipped += gap.end() - gap.start() + 1;
            return Ok(());
        }
        let (first, last) = (*gap.start(), *gap.end());
        let detail = match signed {
            Some(checkpoint) => {
                format!("seqs {first}..={last} are not stored, but a checkpoint signs seq {}", checkpoint.seq)
            }
            None => format!("seqs {first}..={last} are not stored; the next stored message is seq {}", last + 1),
        };
        Err(broken(first, BreakKind::MissingSequence, detail))
    }

    /// Names an unlinked record's break, using the message after it when there is one.
    fn resolve(&self, unlinked: Unlinked, next: Option<MessageRef<'_>>) -> Break {
        let seq = unlinked.seq;
        let next_links_back = next.filter(|next| next.seq == seq + 1).and_then(|next| {
            let sealed = unseal(next.headers?).ok()?;
            Some(sealed.prev == unlinked.expected_prev)
        });
        match (unlinked.chained_as, next_links_back) {
            (Some(chained_as), Some(true)) => broken(
                seq,
                BreakKind::Reordered,
                format!("seq {seq} holds the record chained as seq {chained_as}, and seq {} the one chained as seq {seq}: records were swapped", seq + 1),
            ),
            (Some(chained_as), _) if chained_as > seq => broken(
                seq,
                BreakKind::MissingSequence,
                format!(
                    "seq {seq} holds the record chained as seq {chained_as}: {} record(s) were removed here and the ones after renumbered",
                    chained_as - seq
                ),
            ),
            (Some(chained_as), _) => {
                broken(seq, BreakKind::Reordered, format!("seq {seq} holds the record chained as seq {chained_as}: records were moved"))
            }
            (None, _) => broken(
                seq,
                BreakKind::Reordered,
                "its recorded predecessor hash is not the hash of the message before it: a record was removed, inserted or moved here",
            ),
        }
    }

    /// Ends the walk. `first_seq_if_empty`: the stream's first sequence, used when the range held
    /// no message (every checkpoint from there on names a message that should exist).
    pub fn finish(&mut self, first_seq_if_empty: u64) -> Result<Summary, Break> {
        if let Some(unlinked) = self.unlinked.take() {
            return Err(self.first_of(self.resolve(unlinked, None)));
        }
        let (boundary, last) = match self.last {
            Some((last_seq, _)) => (last_seq + 1, Some(last_seq)),
            None => (first_seq_if_empty.max(self.from_seq), None),
        };
        if let Some(beyond) = self.checkpoints.iter().find(|c| c.seq >= boundary) {
            let ends = last.map_or("no message is stored from there on".to_string(), |last| {
                format!("the stored messages end at seq {last}")
            });
            let detail = format!("a checkpoint signs seq {}, but {ends}: messages were cut off", beyond.seq);
            return Err(self.first_of(broken(boundary, BreakKind::MissingSequence, detail)));
        }
        if let Some(signature) = &self.signature_break {
            return Err(signature.clone());
        }
        Ok(self.summary.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::super::checkpoint::KeyPair;
    use super::super::{message_hash, seal, Link};
    use super::*;

    /// Stored header blocks of a chained stream of `count` messages, as the server writes them.
    fn chain(count: u64) -> Vec<(u64, Vec<u8>, Vec<u8>, Hash)> {
        chain_with_skip(count, count + 1, count + 1)
    }

    fn view<'a>(seq: u64, headers: &'a [u8], payload: &'a [u8]) -> MessageRef<'a> {
        MessageRef { seq, subject: "ai.x", headers: Some(headers), payload, timestamp_ns: 0 }
    }

    fn walk(
        messages: &[(u64, Vec<u8>, Vec<u8>, Hash)],
        checkpoints: &[Checkpoint],
        keys: &KeyPair,
    ) -> Result<Summary, Break> {
        let mut verifier = Verifier::new("S", &keys.public(), checkpoints, 0);
        for (seq, headers, payload, _) in messages {
            verifier.check(view(*seq, headers, payload))?;
        }
        verifier.finish(1)
    }

    #[test]
    fn an_untouched_chain_verifies_and_says_what_is_signed() {
        let keys = KeyPair::from_seed(&[1; 32]);
        let messages = chain(10);
        let checkpoints = [keys.sign("S", 4, &messages[3].3), keys.sign("S", 8, &messages[7].3)];
        let summary = walk(&messages, &checkpoints, &keys).unwrap();
        assert_eq!((summary.verified, summary.range, summary.checkpoints_matched), (10, Some((1, 10)), 2));
        assert_eq!((summary.signed_through, summary.unsigned(), summary.anchored), (Some(8), Some((9, 10)), false));
    }

    #[test]
    fn each_kind_of_tampering_names_the_first_broken_sequence() {
        let keys = KeyPair::from_seed(&[1; 32]);
        let messages = chain(10);
        let checkpoints = [keys.sign("S", 10, &messages[9].3)];
        let failure = |messages: &[(u64, Vec<u8>, Vec<u8>, Hash)]| walk(messages, &checkpoints, &keys).unwrap_err();

        let mut edited = messages.clone();
        edited[4].2[2] ^= 1;
        assert_eq!((failure(&edited).seq, failure(&edited).kind), (5, BreakKind::HashMismatch));

        let mut removed = messages.clone();
        removed.remove(3);
        assert_eq!((failure(&removed).seq, failure(&removed).kind), (4, BreakKind::MissingSequence));

        let mut renumbered = messages.clone();
        renumbered.remove(3);
        renumbered.iter_mut().enumerate().for_each(|(i, m)| m.0 = i as u64 + 1);
        let found = failure(&renumbered);
        assert_eq!((found.seq, found.kind), (4, BreakKind::MissingSequence), "{found}");
        assert!(found.detail.contains("chained as seq 5"), "{found}");

        let mut swapped = messages.clone();
        swapped.swap(5, 6);
        swapped[5].0 = 6;
        swapped[6].0 = 7;
        let found = failure(&swapped);
        assert_eq!((found.seq, found.kind), (6, BreakKind::Reordered), "{found}");

        let mut cut = messages.clone();
        cut.truncate(7);
        let found = failure(&cut);
        assert_eq!((found.seq, found.kind), (8, BreakKind::MissingSequence), "{found}");

        let mut unchained = messages.clone();
        unchained[2].1 = b"NATS/1.0\r\nSemaq-Event-Time: 30\r\n\r\n".to_vec();
        assert_eq!(failure(&unchained).kind, BreakKind::NotChained);
    }

    /// `chain(count)`, but message `skip_to` links to message `skip_from - 1`: the sequences
    /// between were used by messages removed before the chain went on (as after a refused batch).
    fn chain_with_skip(count: u64, skip_from: u64, skip_to: u64) -> Vec<(u64, Vec<u8>, Vec<u8>, Hash)> {
        let mut prev = GENESIS;
        let mut out = Vec::new();
        for seq in (1..skip_from).chain(skip_to..=count) {
            let covered = format!("NATS/1.0\r\nSemaq-Event-Time: {}\r\n\r\n", seq * 10).into_bytes();
            let payload = format!("{{\"n\":{seq}}}").into_bytes();
            let link = Link {
                seq,
                event_time_ns: i64::try_from(seq).unwrap() * 10,
                subject: "ai.x",
                headers: [&covered, b""],
                payload: &payload,
            };
            let hash = message_hash(&prev, &link);
            out.push((seq, seal(&covered, &prev, &hash).unwrap(), payload, hash));
            prev = hash;
        }
        out
    }

    #[test]
    fn sequences_the_chain_links_over_are_skipped_but_removed_ones_are_not() {
        let keys = KeyPair::from_seed(&[1; 32]);
        // Seqs 4..=6 were used by a batch removed before seq 7 was chained on seq 3.
        let messages = chain_with_skip(9, 4, 7);
        let checkpoints = [keys.sign("S", 8, &messages[4].3)];
        let summary = walk(&messages, &checkpoints, &keys).unwrap();
        assert_eq!((summary.verified, summary.skipped, summary.range), (6, 3, Some((1, 9))));

        // A checkpoint that signed a skipped sequence: it was stored, then removed.
        let signed_inside = [keys.sign("S", 5, &[7; 32])];
        let found = walk(&messages, &signed_inside, &keys).unwrap_err();
        assert_eq!((found.seq, found.kind), (4, BreakKind::MissingSequence), "{found}");
        assert!(found.detail.contains("a checkpoint signs seq 5"), "{found}");

        // Removing the message before the gap: the next one links to a message not stored.
        let mut removed = messages.clone();
        removed.remove(2);
        let found = walk(&removed, &[], &keys).unwrap_err();
        assert_eq!((found.seq, found.kind), (3, BreakKind::MissingSequence), "{found}");

        // Renumbering the message after the gap: its hash covers its sequence.
        let mut renumbered = messages.clone();
        renumbered[3].0 = 5;
        assert_eq!(walk(&renumbered, &[], &keys).unwrap_err().kind, BreakKind::HashMismatch);
    }

    #[test]
    fn signatures_and_rewritten_chains_are_caught() {
        let keys = KeyPair::from_seed(&[1; 32]);
        let messages = chain(6);
        let mut forged = keys.sign("S", 3, &messages[2].3);
        forged.signature[0] ^= 1;
        let found = walk(&messages, &[forged], &keys).unwrap_err();
        assert_eq!((found.seq, found.kind), (3, BreakKind::BadSignature));
        let other_key = KeyPair::from_seed(&[2; 32]).sign("S", 3, &messages[2].3);
        assert_eq!(walk(&messages, &[other_key], &keys).unwrap_err().kind, BreakKind::BadSignature);
        let rewritten = keys.sign("S", 3, &[9; 32]);
        let found = walk(&messages, &[rewritten], &keys).unwrap_err();
        assert_eq!((found.seq, found.kind), (3, BreakKind::CheckpointMismatch));
    }

    #[test]
    fn a_stream_whose_head_was_removed_is_anchored_on_its_first_message() {
        let keys = KeyPair::from_seed(&[1; 32]);
        let messages = chain(8);
        let checkpoints = [keys.sign("S", 2, &messages[1].3), keys.sign("S", 6, &messages[5].3)];
        let summary = walk(&messages[4..], &checkpoints, &keys).unwrap();
        assert_eq!((summary.range, summary.anchored, summary.checkpoints_matched), (Some((5, 8)), true, 1));
        // With a checkpoint on the removed predecessor, the anchor is checked against it.
        let summary = walk(&messages[2..], &checkpoints, &keys).unwrap();
        assert!(!summary.anchored);
        let mut edited = messages[2..].to_vec();
        edited[0].2[0] ^= 1;
        assert_eq!(walk(&edited, &checkpoints, &keys).unwrap_err().kind, BreakKind::HashMismatch);
    }
}
