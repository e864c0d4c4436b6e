//! The values that cross the store's API: messages, state, limits and purge requests.

use std::time::Duration;

use bytes::Bytes;

/// A message as stored: what `get` and `get_next` return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// Stream sequence, from 1, never reused.
    pub seq: u64,
    /// The literal subject it was published to.
    pub subject: String,
    /// The raw `NATS/1.0` header block, if the message had one.
    pub headers: Option<Bytes>,
    /// The payload.
    pub payload: Bytes,
    /// Unix nanoseconds, as given to `append`.
    pub timestamp_ns: i64,
}

/// What a stream holds right now (the store's part of JetStream's stream info).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamState {
    /// Live messages.
    pub msgs: u64,
    /// Bytes of the live messages, counted as stored record sizes.
    pub bytes: u64,
    /// Sequence of the oldest live message; `last_seq + 1` when empty.
    pub first_seq: u64,
    /// Timestamp of the oldest live message; 0 when empty.
    pub first_ts: i64,
    /// Highest sequence ever assigned; 0 before the first append.
    pub last_seq: u64,
    /// Timestamp of the message at `last_seq` (kept after it is removed); 0 before the first append.
    pub last_ts: i64,
    /// Distinct subjects among live messages.
    pub num_subjects: u64,
    /// Sequences between `first_seq` and `last_seq` that hold no live message.
    pub num_deleted: u64,
    /// Damage found on disk (at open or on read), if any; the stream stays usable around it.
    pub corruption: Option<String>,
}

/// Which end gives way when a limit is reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DiscardPolicy {
    /// Remove the oldest messages to make room.
    #[default]
    Old,
    /// Refuse the new message.
    New,
}

/// A stream's retention limits; `None` means unlimited.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreLimits {
    /// Most live messages.
    pub max_msgs: Option<u64>,
    /// Most live bytes (record sizes).
    pub max_bytes: Option<u64>,
    /// Oldest a message may get before `enforce_limits` removes it.
    pub max_age: Option<Duration>,
    /// Most live messages per subject; the oldest of the subject gives way unless
    /// `discard_new_per_subject` is set with `DiscardPolicy::New`.
    pub max_msgs_per_subject: Option<u64>,
    /// Largest headers + payload, in bytes.
    pub max_msg_size: Option<u32>,
    /// What happens at `max_msgs` / `max_bytes`.
    pub discard: DiscardPolicy,
    /// With `DiscardPolicy::New`, also refuse at `max_msgs_per_subject` (JetStream's `discard_new_per_subject`).
    pub discard_new_per_subject: bool,
}

/// What `purge` removes. All fields `None`: everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeRequest {
    /// Only messages whose subject matches this filter (wildcards allowed).
    pub subject: Option<String>,
    /// Keep this many newest messages (per matching subject when `subject` is set).
    pub keep: Option<u64>,
    /// Remove messages with sequence strictly below this one (JetStream's purge `seq`).
    pub up_to_seq: Option<u64>,
}

/// A stored message borrowed from wherever its bytes are (a [`StoredMessage`], or a segment read
/// whole by [`crate::reader::LogReader`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRef<'a> {
    /// Stream sequence.
    pub seq: u64,
    /// The literal subject.
    pub subject: &'a str,
    /// The raw header block, if any.
    pub headers: Option<&'a [u8]>,
    /// The payload.
    pub payload: &'a [u8],
    /// Unix nanoseconds, as stored.
    pub timestamp_ns: i64,
}

impl StoredMessage {
    /// A borrowed view of this message.
    pub fn view(&self) -> MessageRef<'_> {
        MessageRef {
            seq: self.seq,
            subject: &self.subject,
            headers: self.headers.as_deref(),
            payload: &self.payload,
            timestamp_ns: self.timestamp_ns,
        }
    }
}

/// How a message's bytes count in `StreamState::bytes` and against `max_bytes`: nats-server's
/// numbers for its file and memory stores (`fileStoreMsgSize`, `memStoreMsgSize`, the same in
/// 2.9 and 2.10+), so stream info and limits agree with nats-server's whatever this store keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeModel {
    /// `22 + subject + payload + 8`, plus `4 + headers` when there is a header block.
    File,
    /// `subject + headers + payload + 16`.
    Memory,
}

impl SizeModel {
    /// The counted bytes of a message with these parts; an empty header block counts as none.
    pub fn message_bytes(self, subject: &str, headers: Option<&[u8]>, payload: &[u8]) -> u64 {
        let headers_length = headers.map_or(0, <[u8]>::len) as u64;
        let parts = subject.len() as u64 + headers_length + payload.len() as u64;
        match self {
            SizeModel::File if headers_length > 0 => 22 + 4 + parts + 8,
            SizeModel::File => 22 + parts + 8,
            SizeModel::Memory => parts + 16,
        }
    }

    /// The counted bytes of a stored record of `record_size` bytes (32 bytes of header, then
    /// subject, headers and payload); `headers`: its header block is not empty.
    pub(crate) fn counted_bytes(self, record_size: u32, headers: bool) -> u64 {
        let parts = u64::from(record_size).saturating_sub(crate::limits::record_header::SIZE_BYTES as u64);
        match self {
            SizeModel::File if headers => 22 + 4 + parts + 8,
            SizeModel::File => 22 + parts + 8,
            SizeModel::Memory => parts + 16,
        }
    }
}
