//! Level-4 provenance (SPEC §1, §2, §5): what a `semaq.level: 4` stream enforces and proves.
//!
//! - On publish, in the ingest task (through [`ChainWriter`], under the store lock): a parseable
//!   `Semaq-Event-Time` strictly after the subject's last one, the required context headers
//!   (`traceparent`, `Semaq-Session`, or metadata `semaq.require`), then the message is chained:
//!   its stored header block gets `Semaq-Prev-Hash` and `Semaq-Hash` (`semaq_store::chain`).
//! - Checkpoints: the head is signed with the stream's Ed25519 key every
//!   [`limits::PROVENANCE_CHECKPOINT_MESSAGES`] messages (inside the batch) and, while messages
//!   arrive, every [`limits::PROVENANCE_CHECKPOINT_INTERVAL`] (after a batch, or by the ticker
//!   task when the stream goes quiet), always after the messages they sign are durable.
//! - On read: message get, direct get and deliveries add `Semaq-Checkpoint` ([`Provenance::annotate`]).
//! - [`api`]: `$SEMAQ.API.STREAM.PROVENANCE.<stream>` (key and checkpoints), `$SEMAQ.API.STREAM.CHAIN.<stream>`
//!   (messages in bulk for `semaq verify`), and `/semaq/streams/<name>/provenance` over HTTP.
//! - [`check_config`]: the configurations an append-only chain cannot live with.
//!
//! Lock order: `Stream.store`, then `Provenance.chain`, then `Provenance.log`; a consumer's
//! state, then `Provenance.log`. The log's fsync runs outside every lock.

pub mod api;
pub mod files;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use base64::Engine;
use bytes::Bytes;
use semaq_store::chain::{self, Checkpoint, Hash, KeyPair, Link, PublicKey};
use semaq_store::StreamStore;
use semaq_wire::headers::names;
use semaq_wire::Headers;
use serde_json::{json, Value};

use super::config::{Retention, StreamConfig};
use super::errors::ApiError;
use super::producers::{Claim, Verdict};
use super::schema::REQUIRE_KEY;
use super::stream::{header, store_error, Inbound, Ingest, Stream};
use crate::limits;
use crate::sync::lock;

/// The level that carries a provenance chain.
pub const LEVEL: u8 = 4;

/// The chain's moving part, written by the ingest task.
#[derive(Debug)]
struct Chain {
    /// The last chained sequence and its hash.
    head_seq: u64,
    head: Hash,
    /// The sequence the store assigns next: `head_seq + 1`, unless messages were removed from
    /// the tail since (an atomic batch refused or cut short), whose sequences the chain steps over.
    next_seq: u64,
    /// The last sequence signed (in `log`, or in `unwritten`).
    signed_seq: u64,
    /// When the head was last signed.
    signed_at: Instant,
    /// Signed inside the current batch, written once the batch is durable.
    unwritten: Vec<Checkpoint>,
    /// Last accepted event time per subject; a bounded cache over the store's last message.
    event_times: HashMap<String, i64>,
}

/// A level-4 stream's keys, chain head and checkpoints.
pub struct Provenance {
    stream: String,
    keys: KeyPair,
    chain: Mutex<Chain>,
    log: Mutex<files::CheckpointLog>,
}

impl std::fmt::Debug for Provenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provenance").field("stream", &self.stream).finish_non_exhaustive()
    }
}

/// The context headers `config` requires (its `semaq.require`, else the defaults), as
/// [`super::schema::required_headers`] reads them; stream create refuses a list it cannot read.
pub fn required_headers(config: &StreamConfig) -> Vec<String> {
    super::schema::required_headers(&config.metadata).unwrap_or_default()
}

/// Refuses configurations an append-only chain cannot keep: removal from the middle, level
/// changes to or from 4, and malformed `semaq.require`. `old` is the config being updated.
pub fn check_config(old: Option<&StreamConfig>, new: &StreamConfig) -> Result<(), ApiError> {
    if let Some(old) = old {
        if (old.level() == LEVEL) != (new.level() == LEVEL) {
            return Err(ApiError::invalid_stream_config(
                "semaq.level cannot change to or from 4: the hash chain covers a stream from its first message",
            ));
        }
    }
    if new.level() != LEVEL {
        if new.metadata.contains_key(REQUIRE_KEY) {
            return Err(ApiError::invalid_stream_config("semaq.require needs semaq.level 4"));
        }
        return Ok(());
    }
    let refuse = |what: &str| {
        Err(ApiError::invalid_stream_config(format!(
            "{what} would remove messages from the middle of a level 4 stream, breaking its hash chain"
        )))
    };
    if new.retention != Retention::Limits {
        return refuse("a retention other than limits");
    }
    if new.max_msgs_per_subject > 0 {
        return refuse("max_msgs_per_subject");
    }
    if new.allow_rollup_hdrs {
        return refuse("allow_rollup_hdrs");
    }
    let required = super::schema::required_headers(&new.metadata).map_err(ApiError::invalid_stream_config)?;
    for name in required {
        if chain::SERVER_HEADERS.iter().any(|reserved| reserved.eq_ignore_ascii_case(&name)) {
            return Err(ApiError::invalid_stream_config(format!(
                "semaq.require: {name:?} cannot be a required header"
            )));
        }
    }
    Ok(())
}

impl Provenance {
    /// The provenance of a level-4 stream (`None` below), with its key created on first use and
    /// its head rebuilt from the store's last message. `dir` is the stream's directory.
    pub fn open(
        config: &StreamConfig,
        dir: Option<&Path>,
        store: &dyn StreamStore,
    ) -> Result<Option<Arc<Self>>, ApiError> {
        if config.level() != LEVEL {
            return Ok(None);
        }
        let dir = dir.map(|dir| dir.join(files::DIR_NAME));
        let keys = files::load_or_create_keys(dir.as_deref()).map_err(ApiError::provenance_unavailable)?;
        let log = files::CheckpointLog::open(dir.as_deref()).map_err(ApiError::provenance_unavailable)?;
        let (head_seq, head) = rebuild_head(&config.name, store, log.last());
        let next_seq = store.state().last_seq + 1;
        let signed_seq = log.last().map_or(0, |c| c.seq);
        if signed_seq > head_seq {
            tracing::error!(stream = %config.name, "a checkpoint signs seq {signed_seq}, past the last stored seq {head_seq}");
        }
        let chain = Chain {
            head_seq,
            head,
            next_seq,
            signed_seq: signed_seq.min(head_seq),
            signed_at: Instant::now(),
            unwritten: Vec::new(),
            event_times: HashMap::new(),
        };
        let provenance =
            Provenance { stream: config.name.clone(), keys, chain: Mutex::new(chain), log: Mutex::new(log) };
        Ok(Some(Arc::new(provenance)))
    }

    /// The stream's public key.
    pub fn public_key(&self) -> PublicKey {
        self.keys.public()
    }

    /// Starts a batch: holds the chain until the returned writer is dropped.
    pub fn writer<'a>(&'a self, config: &StreamConfig) -> ChainWriter<'a> {
        ChainWriter { provenance: self, chain: lock(&self.chain), required: required_headers(config) }
    }

    /// Signs the head if messages arrived since the last checkpoint (the ticker and stream stop),
    /// and writes the checkpoints that sign only what is durable: up to `durable_seq`, the
    /// stream's last committed sequence (a commit's fsync may be running, its lock let go: the
    /// rest wait for its `finish_batch`). The caller holds the store, so nothing is appended
    /// meanwhile.
    pub fn checkpoint_pending(&self, durable_seq: u64) {
        let mut writer = ChainWriter { provenance: self, chain: lock(&self.chain), required: Vec::new() };
        writer.sign_head();
        writer.write_signed(durable_seq);
    }

    /// Makes written checkpoints durable; call without holding any lock.
    pub fn sync_log(&self) {
        let unsynced = lock(&self.log).take_unsynced();
        if let Some(file) = unsynced {
            if let Err(error) = file.sync_data() {
                tracing::error!(stream = %self.stream, %error, "fsync of the checkpoints file failed");
            }
        }
    }

    /// The checkpoint covering `seq`, if one was signed yet.
    pub fn covering(&self, seq: u64) -> Option<Checkpoint> {
        lock(&self.log).covering(seq)
    }

    /// A stored header block with `Semaq-Checkpoint` added for delivery: `<seq> <head hex>
    /// <signature base64>` of the checkpoint covering the message, or `pending` while none does
    /// (the next one is at most [`limits::PROVENANCE_CHECKPOINT_INTERVAL`] away).
    pub fn annotate(&self, seq: u64, headers: Option<Bytes>) -> Option<Bytes> {
        let block = headers?;
        let value = match self.covering(seq) {
            Some(checkpoint) => checkpoint_header_value(&checkpoint),
            None => "pending".to_string(),
        };
        let Some(head) = block.strip_suffix(b"\r\n\r\n") else { return Some(block) };
        let line = format!("\r\n{}: {value}\r\n\r\n", names::CHECKPOINT);
        Some(Bytes::from([head, line.as_bytes()].concat()))
    }

    /// The provenance part of stream info, and the head of the API answer.
    pub fn info(&self, config: &StreamConfig) -> Value {
        let (head_seq, head, signed_seq) = {
            let chain = lock(&self.chain);
            (chain.head_seq, chain.head, chain.signed_seq)
        };
        let checkpoints = lock(&self.log).total();
        json!({
            "algorithm": "ed25519",
            "public_key": self.keys.public().to_hex(),
            "head": { "seq": head_seq, "hash": chain::to_hex(&head) },
            "signed_seq": signed_seq,
            "checkpoints": checkpoints,
            "required_headers": required_headers(config),
        })
    }

    /// A page of checkpoints (see [`api`]).
    fn checkpoints_page(&self, offset: u64) -> (Vec<Checkpoint>, u64, u64) {
        let log = lock(&self.log);
        let offset = offset.max(log.first_available());
        (log.page(offset, limits::PROVENANCE_API_CHECKPOINTS_MAX), log.total(), offset)
    }
}

/// `<seq> <head hex> <signature base64>`.
pub fn checkpoint_header_value(checkpoint: &Checkpoint) -> String {
    let signature = base64::engine::general_purpose::STANDARD.encode(checkpoint.signature);
    format!("{} {} {signature}", checkpoint.seq, chain::to_hex(&checkpoint.head))
}

/// The checkpoint as the API shows it.
pub fn checkpoint_json(checkpoint: &Checkpoint) -> Value {
    let signature = base64::engine::general_purpose::STANDARD.encode(checkpoint.signature);
    json!({ "seq": checkpoint.seq, "head": chain::to_hex(&checkpoint.head), "signature": signature })
}

/// The head at open: the newest stored message's hash, else the last checkpoint if it signs the
/// last sequence (the stream was emptied from the head), else a fresh start. The newest stored
/// message is the last sequence's, or shortly before it when start-up removed an atomic batch a
/// crash cut short (`batch::remove_incomplete_tail`, which runs first): the chain then goes on
/// from the last committed message and steps over the removed sequences.
fn rebuild_head(stream: &str, store: &dyn StreamStore, last_checkpoint: Option<&Checkpoint>) -> (u64, Hash) {
    let state = store.state();
    let last_seq = state.last_seq;
    if last_seq == 0 {
        return (0, chain::GENESIS);
    }
    let lowest = state.first_seq.max(last_seq.saturating_sub(limits::ATOMIC_BATCH_TAIL_SCAN_MESSAGES_MAX));
    let newest = (lowest..=last_seq).rev().find_map(|seq| store.get(seq).ok().flatten());
    if let Some(message) = newest {
        if let Some(sealed) = message.headers.as_deref().and_then(|block| chain::unseal(block).ok()) {
            return (message.seq, sealed.hash);
        }
        tracing::error!(%stream, "the newest stored message (seq {}) carries no chain hash; the chain restarts", message.seq);
        return (message.seq, chain::GENESIS);
    }
    if let Some(checkpoint) = last_checkpoint.filter(|c| c.seq == last_seq) {
        return (last_seq, checkpoint.head);
    }
    (last_seq, chain::GENESIS)
}

/// What an L4 stream checks in a header block, found in one pass over its headers as
/// [`Headers`] reads them (names compared case-insensitively, first occurrence wins).
#[derive(Debug, Default, PartialEq, Eq)]
struct HeaderScan<'a> {
    /// The first `Semaq-Event-Time`.
    event_time: Option<&'a str>,
    /// A header only the server may write.
    reserved: Option<&'static str>,
    /// Bit `i`: required header `i` is present with a value.
    present: u64,
}

impl<'a> HeaderScan<'a> {
    fn of(block: &'a [u8], required: &[String]) -> Self {
        let mut scan = HeaderScan::default();
        for (name, value) in Headers::new(block) {
            if name.eq_ignore_ascii_case(names::EVENT_TIME) {
                // The first one counts, even if empty: the verifier reads it the same way.
                scan.event_time = scan.event_time.or(Some(value));
            } else if let Some(reserved) = chain::SERVER_HEADERS.iter().find(|r| r.eq_ignore_ascii_case(name)) {
                scan.reserved = scan.reserved.or(Some(reserved));
            }
            for (i, wanted) in required.iter().enumerate().take(limits::PROVENANCE_REQUIRED_HEADERS_MAX) {
                if !value.is_empty() && wanted.eq_ignore_ascii_case(name) {
                    scan.present |= 1 << i;
                }
            }
        }
        scan
    }
}

/// Where the chain stood before an atomic batch, to return to if the batch is removed.
#[derive(Debug)]
pub struct ChainMark {
    head_seq: u64,
    head: Hash,
    signed_seq: u64,
    signed_at: Instant,
    unwritten: usize,
}

/// One ingest batch's hold on the chain.
pub struct ChainWriter<'a> {
    provenance: &'a Provenance,
    chain: MutexGuard<'a, Chain>,
    required: Vec<String>,
}

impl ChainWriter<'_> {
    /// Checks an L4 message and appends it chained; replaces the plain `store.append`.
    pub fn append(&mut self, store: &mut dyn StreamStore, message: &Inbound, now_ns: i64) -> Result<u64, ApiError> {
        let block = message.headers.as_deref().unwrap_or_default();
        let event_time_ns = self.check_context(&*store, block, &message.subject)?;
        // Every append to an L4 stream goes through here, so the writer knows the store's next sequence.
        let seq = self.chain.next_seq;
        let link =
            Link { seq, event_time_ns, subject: &message.subject, headers: [block, b""], payload: &message.payload };
        let hash = chain::message_hash(&self.chain.head, &link);
        let sealed = chain::seal(block, &self.chain.head, &hash).ok_or_else(ApiError::provenance_malformed_headers)?;
        let (stored_seq, _) =
            store.append(&message.subject, Some(&sealed), &message.payload, now_ns).map_err(store_error)?;
        if stored_seq != seq {
            tracing::error!(stream = %self.provenance.stream, "chained seq {seq} but the store assigned {stored_seq}");
        }
        self.chain.next_seq = stored_seq + 1;
        self.accept(stored_seq, hash, &message.subject, event_time_ns);
        Ok(stored_seq)
    }

    /// What [`ChainWriter::append`] would refuse `message` for, without appending: run before
    /// anything else that could leave a trace (an auto-evolved schema version).
    pub fn check(&mut self, store: &dyn StreamStore, message: &Inbound) -> Result<(), ApiError> {
        let block = message.headers.as_deref().unwrap_or_default();
        self.check_context(store, block, &message.subject).map(drop)
    }

    /// What would refuse any message of an atomic batch, before any is appended: the context
    /// checks of each, with event times increasing per subject inside the batch too, and a header
    /// block that can be sealed. Changes nothing but the cache of stored event times.
    pub fn precheck(&mut self, store: &dyn StreamStore, messages: &[Inbound]) -> Result<(), ApiError> {
        let mut batch_times: HashMap<&str, i64> = HashMap::new();
        for message in messages {
            let block = message.headers.as_deref().unwrap_or_default();
            let (event_time_ns, text) = self.scan_context(block)?;
            let subject = message.subject.as_str();
            let last_ns = match batch_times.get(subject) {
                Some(&in_batch) => Some(in_batch),
                None => self.last_event_time(store, subject),
            };
            check_increasing(subject, text, event_time_ns, last_ns)?;
            chain::seal(block, &chain::GENESIS, &chain::GENESIS).ok_or_else(ApiError::provenance_malformed_headers)?;
            batch_times.insert(subject, event_time_ns);
        }
        Ok(())
    }

    /// Where the chain stands, before an atomic batch is appended.
    pub fn mark(&self) -> ChainMark {
        let chain = &self.chain;
        ChainMark {
            head_seq: chain.head_seq,
            head: chain.head,
            signed_seq: chain.signed_seq,
            signed_at: chain.signed_at,
            unwritten: chain.unwritten.len(),
        }
    }

    /// The messages appended since `mark` were removed from the store's tail: the head goes back
    /// to `mark`, checkpoints signed since are dropped (never written: nothing signs a removed
    /// message), and event times are read back from the store. The next message is chained at
    /// the store's next sequence, linking over the removed ones (the verifier steps over them).
    pub fn rollback(&mut self, mark: ChainMark, store: &dyn StreamStore) {
        let chain = &mut *self.chain;
        chain.head_seq = mark.head_seq;
        chain.head = mark.head;
        chain.signed_seq = mark.signed_seq;
        chain.signed_at = mark.signed_at;
        chain.unwritten.truncate(mark.unwritten);
        chain.next_seq = store.state().last_seq + 1;
        // Which subjects the batch touched is not kept: the cache refills from the store.
        chain.event_times.clear();
    }

    /// No server-written headers, the required ones, and an event time after the subject's
    /// last; returns the event time in unix nanoseconds.
    fn check_context(&mut self, store: &dyn StreamStore, block: &[u8], subject: &str) -> Result<i64, ApiError> {
        let (event_time_ns, text) = self.scan_context(block)?;
        let last_ns = self.last_event_time(store, subject);
        check_increasing(subject, text, event_time_ns, last_ns)?;
        Ok(event_time_ns)
    }

    /// The checks of one header block alone: no server-written headers, an event time that
    /// parses (returned in unix nanoseconds, with its text), the required context headers, and
    /// a well-formed block.
    fn scan_context<'b>(&self, block: &'b [u8]) -> Result<(i64, &'b str), ApiError> {
        let scan = HeaderScan::of(block, &self.required);
        if let Some(reserved) = scan.reserved {
            return Err(ApiError::provenance_header_reserved(reserved));
        }
        let text = scan.event_time.filter(|text| !text.is_empty()).ok_or_else(ApiError::event_time_missing)?;
        let event_time_ns = chain::parse_event_time(text).ok_or_else(|| ApiError::event_time_invalid(text))?;
        if let Some(missing) = self.required.iter().enumerate().find(|(i, _)| scan.present & (1 << i) == 0) {
            return Err(ApiError::context_missing(missing.1, &self.required));
        }
        // The chain proves these bytes to every reader, not only to ours: a line ours skips (a
        // stray LF, a value that is not UTF-8) could show another reader a header ours never saw.
        Headers::new(block).check().map_err(|_| ApiError::provenance_malformed_headers())?;
        Ok((event_time_ns, text))
    }

    /// The subject's last accepted event time: cached, else read from its last stored message.
    fn last_event_time(&mut self, store: &dyn StreamStore, subject: &str) -> Option<i64> {
        if let Some(&known) = self.chain.event_times.get(subject) {
            return Some(known);
        }
        let last = match store.get_last_for_subject(subject) {
            Ok(last) => last?,
            Err(error) => {
                tracing::warn!(stream = %self.provenance.stream, %subject, %error, "cannot read the subject's last event time");
                return None;
            }
        };
        let event_time_ns =
            Headers::new(last.headers.as_deref()?).get(names::EVENT_TIME).and_then(chain::parse_event_time)?;
        self.remember(subject, event_time_ns);
        Some(event_time_ns)
    }

    fn remember(&mut self, subject: &str, event_time_ns: i64) {
        let times = &mut self.chain.event_times;
        if let Some(known) = times.get_mut(subject) {
            *known = event_time_ns;
            return;
        }
        if times.len() >= limits::PROVENANCE_EVENT_TIMES_CACHED_MAX {
            // Forgotten times are read back from the store on the subject's next message.
            times.clear();
        }
        times.insert(subject.to_string(), event_time_ns);
    }

    fn accept(&mut self, seq: u64, hash: Hash, subject: &str, event_time_ns: i64) {
        self.chain.head_seq = seq;
        self.chain.head = hash;
        self.remember(subject, event_time_ns);
        if seq >= self.chain.signed_seq + limits::PROVENANCE_CHECKPOINT_MESSAGES {
            self.sign_head();
        }
    }

    /// Signs the head now, if it is not signed yet; written by [`ChainWriter::write_signed`].
    fn sign_head(&mut self) {
        if self.chain.head_seq <= self.chain.signed_seq {
            return;
        }
        let (seq, head) = (self.chain.head_seq, self.chain.head);
        let checkpoint = self.provenance.keys.sign(&self.provenance.stream, seq, &head);
        self.chain.unwritten.push(checkpoint);
        self.chain.signed_seq = seq;
        self.chain.signed_at = Instant::now();
    }

    /// After the batch's commit (the writer taken again after it, under the store's lock): signs
    /// the head when the interval has passed, and writes the checkpoints signed up to
    /// `durable_seq`, which the commit made durable. `written`: the batch's commit succeeded.
    pub fn finish_batch(&mut self, written: bool, durable_seq: u64) {
        if !written {
            // The store refused the batch's writes: what was signed may not be on disk.
            self.chain.unwritten.clear();
            return;
        }
        if self.chain.signed_at.elapsed() >= limits::PROVENANCE_CHECKPOINT_INTERVAL {
            self.sign_head();
        }
        self.write_signed(durable_seq);
    }

    /// After the store undid writes (a full disk: `StoreError::OutOfSpace`): the chain goes
    /// back to the last message the store still holds, so the next one links to it.
    pub fn reload(&mut self, store: &dyn StreamStore) {
        let last_checkpoint = lock(&self.provenance.log).last().copied();
        let (head_seq, head) = rebuild_head(&self.provenance.stream, store, last_checkpoint.as_ref());
        self.chain.head_seq = head_seq;
        self.chain.head = head;
        self.chain.next_seq = store.state().last_seq + 1;
        self.chain.signed_seq = last_checkpoint.map_or(0, |c| c.seq).min(head_seq);
        self.chain.unwritten.clear();
    }

    /// Appends the signed checkpoints to the log once the messages they sign are durable: those
    /// signing up to `durable_seq`; the rest wait for the commit that covers them, which may be
    /// running with the store's lock let go. Nothing is fsynced here: level 3 and above always
    /// sync every batch (`StreamConfig::apply_exactly_once`), so a commit always follows.
    fn write_signed(&mut self, durable_seq: u64) {
        // Signed in sequence order: the durable ones are a prefix.
        let ready = self.chain.unwritten.iter().take_while(|checkpoint| checkpoint.seq <= durable_seq).count();
        if ready == 0 {
            return;
        }
        let checkpoints: Vec<Checkpoint> = self.chain.unwritten.drain(..ready).collect();
        if let Err(error) = lock(&self.provenance.log).append(&checkpoints) {
            tracing::error!(stream = %self.provenance.stream, %error, "cannot write checkpoints");
        }
    }
}

/// L4 context checks of a message about to be checked against a schema that may auto-evolve
/// and register a version: a message refused for its context must leave no such trace (other
/// streams check the context as they append, with no extra pass over the headers). A
/// duplicate (L3 producer sequence or `Nats-Msg-Id`) is let through: it is answered with the
/// stored sequence, whatever its event time.
pub fn check_before_schema(
    ingest: &mut Ingest<'_, '_>,
    message: &Inbound,
    claim: Option<Claim<'_>>,
) -> Result<(), ApiError> {
    if ingest.chain.is_none() {
        return Ok(());
    }
    if claim.is_some_and(|claim| matches!(ingest.producers.check(claim), Ok(Verdict::Duplicate { .. }))) {
        return Ok(());
    }
    let block = message.headers.as_deref().unwrap_or_default();
    if Headers::new(block).get(header::MSG_ID).is_some_and(|id| ingest.knows_msg_id(id)) {
        return Ok(());
    }
    match ingest.chain.as_deref_mut() {
        Some(chain) => chain.check(&*ingest.store, message),
        None => Ok(()),
    }
}

/// An event time must be after the subject's last accepted one (`last_ns`, if any).
fn check_increasing(subject: &str, text: &str, event_time_ns: i64, last_ns: Option<i64>) -> Result<(), ApiError> {
    match last_ns {
        Some(last_ns) if event_time_ns <= last_ns => Err(ApiError::event_time_not_increasing(subject, text, last_ns)),
        _ => Ok(()),
    }
}

/// Signs what arrived, within [`limits::PROVENANCE_CHECKPOINT_INTERVAL`] of it arriving, and
/// fsyncs the checkpoints file; runs per L4 stream until the stream goes away.
pub async fn run_ticker(stream: Weak<Stream>) {
    let Some(mut changed) = stream.upgrade().map(|stream| stream.watch_last_seq()) else { return };
    while changed.changed().await.is_ok() {
        tokio::time::sleep(limits::PROVENANCE_CHECKPOINT_INTERVAL).await;
        let Some(stream) = stream.upgrade() else { return };
        let Some(provenance) = stream.provenance() else { return };
        tokio::task::block_in_place(|| {
            stream.checkpoint_pending();
            provenance.sync_log();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pass_finds_event_time_reserved_and_required_headers() {
        let required = vec!["traceparent".to_string(), "Semaq-Session".to_string()];
        let block =
            b"NATS/1.0\r\nsemaq-event-time: 5\r\nTRACEPARENT: t\r\nSemaq-Session:\r\nSemaq-Event-Time: 6\r\n\r\n";
        let scan = HeaderScan::of(block, &required);
        assert_eq!(scan, HeaderScan { event_time: Some("5"), reserved: None, present: 0b01 });
        let forged = HeaderScan::of(b"NATS/1.0\r\nsemaq-hash: x\r\n\r\n", &required);
        assert_eq!(forged.reserved, Some(names::HASH));
        assert_eq!(HeaderScan::of(b"", &required), HeaderScan::default());
    }

    fn l4_message(subject: &str, event_time: &str) -> Inbound {
        let block = format!("NATS/1.0\r\nSemaq-Event-Time: {event_time}\r\ntraceparent: t\r\nSemaq-Session: s\r\n\r\n");
        Inbound {
            subject: subject.into(),
            reply: None,
            headers: Some(Bytes::from(block)),
            payload: Bytes::from_static(b"{}"),
            publisher: None,
            received: std::time::Instant::now(),
            trace: None,
            internal: false,
        }
    }

    fn l4_stream() -> StreamConfig {
        let metadata = [("semaq.level".to_string(), "4".to_string())].into_iter().collect();
        StreamConfig { name: "S".into(), metadata, ..StreamConfig::default() }
    }

    /// Walks every stored message with the stream's key and no checkpoints.
    fn verify(provenance: &Provenance, store: &dyn StreamStore) -> Result<chain::Summary, chain::Break> {
        let mut verifier = chain::Verifier::new("S", &provenance.public_key(), &[], 0);
        let mut next = store.get_next(1, None).unwrap();
        while let Some(message) = next {
            verifier.check(message.view())?;
            next = store.get_next(message.seq + 1, None).unwrap();
        }
        verifier.finish(store.state().first_seq)
    }

    #[test]
    fn a_batch_is_prechecked_whole_including_event_times_within_it() {
        let config = l4_stream();
        let mut store = semaq_store::MemoryStore::new(semaq_store::StoreLimits::default());
        let provenance = Provenance::open(&config, None, &store).unwrap().unwrap();
        let mut writer = provenance.writer(&config);
        writer.append(&mut store, &l4_message("a", "10"), 1).unwrap();
        let in_order = [l4_message("a", "11"), l4_message("b", "1"), l4_message("a", "12")];
        assert!(writer.precheck(&store, &in_order).is_ok());
        let repeated = [l4_message("a", "11"), l4_message("b", "1"), l4_message("a", "11")];
        assert_eq!(writer.precheck(&store, &repeated).unwrap_err().err_code, 10442);
        let stale = [l4_message("b", "1"), l4_message("a", "10")];
        assert_eq!(writer.precheck(&store, &stale).unwrap_err().err_code, 10442);
        // Prechecks accept nothing: the batch's times are not the subject's last.
        writer.append(&mut store, &l4_message("a", "11"), 1).unwrap();
        assert_eq!(store.state().last_seq, 2);
    }

    #[test]
    fn a_removed_batch_is_stepped_over_by_the_next_link() {
        let config = l4_stream();
        let mut store = semaq_store::MemoryStore::new(semaq_store::StoreLimits::default());
        let provenance = Provenance::open(&config, None, &store).unwrap().unwrap();
        let mut writer = provenance.writer(&config);
        writer.append(&mut store, &l4_message("a", "10"), 1).unwrap();
        let mark = writer.mark();
        for time in ["20", "30"] {
            writer.append(&mut store, &l4_message("a", time), 1).unwrap();
        }
        for seq in [2, 3] {
            assert!(store.delete(seq).unwrap());
        }
        writer.rollback(mark, &store);
        // The removed messages' event times are forgotten with them.
        assert_eq!(writer.append(&mut store, &l4_message("a", "15"), 1).unwrap(), 4);
        drop(writer);
        let summary = verify(&provenance, &store).unwrap();
        assert_eq!((summary.verified, summary.skipped), (2, 2));
        assert_eq!(provenance.info(&config)["head"]["seq"], 4);
    }

    #[test]
    fn a_checkpoint_signed_during_a_commits_fsync_is_written_only_by_that_commit() {
        let config = l4_stream();
        let mut store = semaq_store::MemoryStore::new(semaq_store::StoreLimits::default());
        let provenance = Provenance::open(&config, None, &store).unwrap().unwrap();
        let mut writer = provenance.writer(&config);
        writer.append(&mut store, &l4_message("a", "10"), 1).unwrap();
        writer.append(&mut store, &l4_message("a", "11"), 1).unwrap();
        drop(writer);
        // The batch's fsync runs, the locks let go: the ticker signs the head, writes nothing.
        provenance.checkpoint_pending(0);
        assert_eq!(provenance.info(&config)["signed_seq"], 2, "signed");
        assert!(provenance.covering(2).is_none(), "written before what it signs is durable");
        // The commit ends: its writer, taken again, writes it.
        let mut writer = provenance.writer(&config);
        writer.finish_batch(true, 2);
        drop(writer);
        assert_eq!(provenance.covering(2).map(|checkpoint| checkpoint.seq), Some(2));

        // A failed commit drops what was signed over it.
        let mut writer = provenance.writer(&config);
        writer.append(&mut store, &l4_message("a", "12"), 1).unwrap();
        drop(writer);
        provenance.checkpoint_pending(2);
        let mut writer = provenance.writer(&config);
        writer.finish_batch(false, 2);
        writer.finish_batch(true, 3);
        drop(writer);
        assert!(provenance.covering(3).is_none(), "never written");
    }

    #[test]
    fn configs_that_would_break_the_chain_are_refused() {
        let level = |n: &str| StreamConfig {
            metadata: [("semaq.level".to_string(), n.to_string())].into_iter().collect(),
            ..StreamConfig::default()
        };
        assert!(check_config(None, &level("4")).is_ok());
        assert!(check_config(Some(&level("1")), &level("4")).is_err());
        assert!(check_config(Some(&level("4")), &level("2")).is_err());
        let mut workqueue = level("4");
        workqueue.retention = Retention::Workqueue;
        assert!(check_config(None, &workqueue).is_err());
        let mut reserved = level("4");
        reserved.metadata.insert(REQUIRE_KEY.into(), "traceparent, Semaq-Hash".into());
        assert!(check_config(None, &reserved).is_err());
        let mut custom = level("4");
        custom.metadata.insert(REQUIRE_KEY.into(), " traceparent ,, x-tenant ".into());
        assert!(check_config(None, &custom).is_ok());
        assert_eq!(required_headers(&custom), vec!["traceparent", "x-tenant"]);
    }
}
