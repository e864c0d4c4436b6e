//! Mirrors and sources, as nats-server's (`stream.go`: `processInboundMirrorMsg`,
//! `processInboundSourceMsg`, `checkStreamCfg`): a stream that copies what other streams of this
//! server store.
//!
//! One follower task per origin ("link"). It reads the origin's store in process (the
//! in-server equivalent of nats-server's internal consumer: no network, no loopback connection),
//! at most [`limits::SOURCE_INFLIGHT_MESSAGES_MAX`] messages at a time, hands them to the
//! sourcing stream's ingest queue with a reply subject on the bus, and moves on only once their
//! PubAcks came back, in order. So a copy is stored once: the follower's position is what the
//! sourcing stream has stored, read back from it at every (re)start: a mirror's last sequence
//! (mirrors keep origin sequences), a source's newest `Nats-Stream-Source` header.
//!
//! Remote origins (remote.rs): a stream whose metadata names a URL for an origin
//! (`"semaq.url.<origin>": "nats://host:4222"`) follows it on that server, nats-server or
//! SemaQ, through an ordered push consumer (flow control, heartbeats) at `external.api` there
//! (default `$JS.API`). An `external.api` of this server's own domain (`$JS.<domain>.API`)
//! is this server. Any other `external.api` needs a leafnode, which SemaQ has not: it is
//! accepted and reported as not reachable in stream info.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use semaq_wire::headers::HeaderBlock;
use semaq_wire::{clock, subject, Headers};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use super::config::{StreamConfig, StreamSource};
use super::errors::ApiError;
use super::stream::Stream;
use super::JetStream;
use crate::delivery::{InternalSink, Message};
use crate::limits;
use crate::sync::lock;
use crate::transform::{self, Transform};

/// The header a sourced message carries: `<origin> <seq> <filter> <destination> <subject>`.
pub const STREAM_SOURCE_HEADER: &str = "Nats-Stream-Source";
/// Stream metadata naming where a remote origin lives: `semaq.url.<origin stream>`.
pub const URL_KEY_PREFIX: &str = "semaq.url.";

/// The URL of a source or mirror's origin, when the stream's metadata names one.
pub fn remote_url<'a>(config: &'a StreamConfig, source: &StreamSource) -> Option<&'a str> {
    config.metadata.get(&format!("{URL_KEY_PREFIX}{}", source.name)).map(String::as_str)
}

/// Whether an origin is a stream of this server: not external, or external at this server's
/// own domain, and not at a URL.
fn is_local(config: &StreamConfig, source: &StreamSource, domain: Option<&str>) -> bool {
    let own_domain = |api: &str| domain.is_some_and(|domain| api == format!("$JS.{domain}.API"));
    remote_url(config, source).is_none() && source.external.as_ref().is_none_or(|e| own_domain(&e.api))
}

/// Reply subjects of sourced messages start with this; the stream acknowledges them even when
/// it is `no_ack` (the follower needs the outcome).
pub const ACK_PREFIX: &str = "$SEMAQ.SOURCE.ACK.";

/// The followers of every mirror and sourcing stream, by stream name.
#[derive(Debug, Default)]
pub struct Followers {
    by_stream: Mutex<std::collections::HashMap<String, Arc<Following>>>,
}

/// The links of one stream and the tasks that run them.
#[derive(Debug)]
struct Following {
    links: Vec<Arc<Link>>,
    stopped: AtomicBool,
    wake: Notify,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Following {
    fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.wake.notify_waiters();
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    fn wake(&self) -> &Notify {
        &self.wake
    }

    /// Waits until every task of this following ended (a new one must not overlap it).
    async fn finished(&self) {
        let tasks = std::mem::take(&mut *lock(&self.tasks));
        for task in tasks {
            let _ = task.await;
        }
    }
}

/// One origin of a mirror or source and what stream info reports about it.
#[derive(Debug)]
pub(super) struct Link {
    pub(super) spec: StreamSource,
    pub(super) mirror: bool,
    /// Where the origin is: this server, a remote URL, or out of reach.
    pub(super) place: Place,
    /// `<filter> <destination>` of the header, as nats-server composes them.
    filter_text: String,
    destination_text: String,
    /// Filters (with their transform) a message must match; empty: every message.
    routes: Vec<(String, Option<Transform>)>,
    status: Mutex<Status>,
}

/// Where a link's origin lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Place {
    /// A stream of this server.
    Local,
    /// A stream of the server at this URL.
    Remote(String),
    /// Behind a leafnode this server does not have.
    Unreachable,
}

#[derive(Debug, Default)]
struct Status {
    lag: u64,
    last_contact: Option<Instant>,
    error: Option<ApiError>,
}

impl Followers {
    /// Starts (or restarts, after an update) the followers of `stream`; stops them when the
    /// stream no longer mirrors or sources anything.
    pub fn follow(&self, jetstream: &Arc<JetStream>, stream: &Arc<Stream>) {
        let config = stream.config();
        let specs: Vec<(StreamSource, bool)> = match &config.mirror {
            Some(mirror) => vec![(mirror.clone(), true)],
            None => config.sources.iter().map(|source| (source.clone(), false)).collect(),
        };
        let previous = lock(&self.by_stream).remove(&stream.name);
        if let Some(previous) = &previous {
            previous.stop();
        }
        if specs.is_empty() {
            return;
        }
        let domain = jetstream.services().options.jetstream_domain.clone();
        let place = |spec: &StreamSource| match remote_url(&config, spec) {
            Some(url) => Place::Remote(url.to_string()),
            None if is_local(&config, spec, domain.as_deref()) => Place::Local,
            None => Place::Unreachable,
        };
        let links: Vec<Arc<Link>> = (specs.into_iter())
            .map(|(spec, mirror)| {
                let place = place(&spec);
                Arc::new(Link { place, ..Link::new(spec, mirror) })
            })
            .collect();
        let following = Arc::new(Following {
            links: links.clone(),
            stopped: AtomicBool::new(false),
            wake: Notify::new(),
            tasks: Mutex::new(Vec::new()),
        });
        let mut tasks = Vec::with_capacity(links.len());
        for link in links {
            let run = Run {
                jetstream: Arc::downgrade(jetstream),
                stream: Arc::downgrade(stream),
                link,
                following: following.clone(),
            };
            let previous = previous.clone();
            tasks.push(tokio::spawn(async move {
                if let Some(previous) = previous {
                    previous.finished().await;
                }
                run.run().await;
            }));
        }
        *lock(&following.tasks) = tasks;
        lock(&self.by_stream).insert(stream.name.clone(), following);
    }

    /// Stops the followers of a stream (deleted, or the server stops).
    pub fn stop(&self, name: &str) {
        if let Some(following) = lock(&self.by_stream).remove(name) {
            following.stop();
        }
    }

    /// Stops every follower.
    pub fn stop_all(&self) {
        for (_, following) in lock(&self.by_stream).drain() {
            following.stop();
        }
    }

    /// Adds `mirror` or `sources` to a stream info body, as nats-server reports them.
    pub fn describe(&self, name: &str, info: &mut Value) {
        let Some(following) = lock(&self.by_stream).get(name).cloned() else { return };
        let described: Vec<Value> = following.links.iter().map(|link| link.describe()).collect();
        match following.links.first() {
            Some(link) if link.mirror => info["mirror"] = described.into_iter().next().unwrap_or(Value::Null),
            _ => info["sources"] = Value::Array(described),
        }
    }
}

impl Link {
    fn new(spec: StreamSource, mirror: bool) -> Self {
        let or_all = |text: &str| if text.is_empty() { ">".to_string() } else { text.to_string() };
        let (filter_text, destination_text, routes) = if spec.subject_transforms.is_empty() {
            let routes =
                if spec.filter_subject.is_empty() { Vec::new() } else { vec![(spec.filter_subject.clone(), None)] };
            (or_all(&spec.filter_subject), ">".to_string(), routes)
        } else {
            let sources: Vec<String> = spec.subject_transforms.iter().map(|t| or_all(&t.source)).collect();
            let destinations: Vec<String> = spec.subject_transforms.iter().map(|t| or_all(&t.destination)).collect();
            // Checked at create: a transform that fails here cannot happen, and then copies as is.
            let routes = (spec.subject_transforms.iter())
                .map(|t| (or_all(&t.source), Transform::new(&t.source, &t.destination).ok().flatten()))
                .collect();
            (sources.join("\u{c}"), destinations.join("\u{c}"), routes)
        };
        let status = Mutex::new(Status::default());
        Link { spec, mirror, place: Place::Local, filter_text, destination_text, routes, status }
    }

    fn describe(&self) -> Value {
        let status = lock(&self.status);
        let active = status.last_contact.map_or(-1, |at| i64::try_from(at.elapsed().as_nanos()).unwrap_or(i64::MAX));
        let mut body = json!({ "name": self.spec.name, "lag": status.lag, "active": active });
        if !self.spec.filter_subject.is_empty() {
            body["filter_subject"] = json!(self.spec.filter_subject);
        }
        if !self.spec.subject_transforms.is_empty() {
            body["subject_transforms"] = json!(self.spec.subject_transforms);
        }
        if let Some(external) = &self.spec.external {
            body["external"] = json!(external);
        }
        if let Some(error) = &status.error {
            body["error"] = json!({ "code": error.code, "err_code": error.err_code, "description": error.description });
        }
        body
    }

    pub(super) fn wants(&self, subject: &str) -> bool {
        self.routes.is_empty() || self.routes.iter().any(|(filter, _)| subject::matches(filter, subject))
    }

    /// The subject a copy is stored under: the first matching transform's, else unchanged.
    fn destination(&self, subject: &str) -> String {
        (self.routes.iter())
            .filter_map(|(_, transform)| transform.as_ref().and_then(|t| t.apply(subject)))
            .next()
            .unwrap_or_else(|| subject.to_string())
    }

    /// The one filter the origin's store can apply itself, if there is exactly one.
    pub(super) fn store_filter(&self) -> Option<&str> {
        match self.routes.as_slice() {
            [(filter, _)] => Some(filter.as_str()),
            _ => None,
        }
    }

    pub(super) fn set_error(&self, error: Option<ApiError>) {
        lock(&self.status).error = error;
    }

    pub(super) fn contact(&self, lag: u64) {
        let mut status = lock(&self.status);
        status.last_contact = Some(Instant::now());
        status.lag = lag;
        status.error = None;
    }

    /// Whether a stored `Nats-Stream-Source` value came through this link; its origin sequence.
    fn sourced_seq(&self, value: &str) -> Option<u64> {
        let mut fields = value.split(' ');
        let (name, seq, filter, destination) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
        let ours = name == self.spec.name && filter == self.filter_text && destination == self.destination_text;
        ours.then(|| seq.parse().ok()).flatten()
    }
}

/// The acknowledgements of one link's copies, read off the bus.
#[derive(Debug)]
struct Acks {
    sender: mpsc::Sender<Result<(), ApiError>>,
}

impl InternalSink for Acks {
    fn receive(&self, message: &Message<'_>) -> bool {
        let body: Value = serde_json::from_slice(message.payload).unwrap_or(Value::Null);
        let outcome = match body.get("error") {
            Some(error) => Err(ApiError {
                code: error["code"].as_u64().and_then(|c| u16::try_from(c).ok()).unwrap_or(500),
                err_code: error["err_code"].as_u64().and_then(|c| u32::try_from(c).ok()).unwrap_or(0),
                description: error["description"].as_str().unwrap_or_default().to_string(),
            }),
            None => Ok(()),
        };
        self.sender.try_send(outcome).is_ok()
    }
}

/// One link's follower.
pub(super) struct Run {
    jetstream: Weak<JetStream>,
    stream: Weak<Stream>,
    pub(super) link: Arc<Link>,
    following: Arc<Following>,
}

/// A copy ready for the sourcing stream.
pub(super) struct Copy {
    pub(super) origin_seq: u64,
    subject: String,
    headers: Option<Bytes>,
    payload: Bytes,
}

/// The acknowledgements of a follower's copies.
pub(super) type AckReceiver = mpsc::Receiver<Result<(), ApiError>>;

/// How a batch of copies went.
pub(super) enum Outcome {
    /// Stored up to here (the next origin sequence to read).
    Advanced(u64),
    /// Nothing more to do until the origin changes.
    Idle,
    /// Something failed: wait, then read the sourcing stream's position again.
    Retry,
}

impl Run {
    async fn run(self) {
        let Some(stream) = self.stream.upgrade() else { return };
        let inbox = format!("{ACK_PREFIX}{}.{:016x}", stream.name, rand::random::<u64>());
        let (sender, mut acks) = mpsc::channel(limits::SOURCE_INFLIGHT_MESSAGES_MAX);
        let sink: Arc<dyn InternalSink> = Arc::new(Acks { sender });
        let subscription = match stream.services().bus.subscribe_internal(&inbox, None, sink) {
            Ok(subscription) => subscription,
            Err(error) => {
                tracing::error!(stream = %stream.name, %error, "cannot follow: no ack inbox");
                return;
            }
        };
        drop(stream);
        if let Place::Remote(url) = &self.link.place {
            super::remote::follow(&self, url, &inbox, &mut acks).await;
            if let Some(stream) = self.stream.upgrade() {
                stream.services().bus.unsubscribe_internal(&subscription);
            }
            return;
        }
        let mut backoff = limits::SOURCE_RETRY_BACKOFF_MIN;
        let mut next = None;
        while !self.following.is_stopped() {
            let Some(stream) = self.current_stream() else { break };
            let from = match next {
                Some(seq) => seq,
                None => match self.start_seq(&stream) {
                    Some(seq) => seq,
                    None => {
                        self.pause(backoff).await;
                        backoff = (backoff * 2).min(limits::SOURCE_RETRY_BACKOFF_MAX);
                        continue;
                    }
                },
            };
            match self.copy_batch(&stream, from, &inbox, &mut acks).await {
                Outcome::Advanced(seq) => {
                    next = Some(seq);
                    backoff = limits::SOURCE_RETRY_BACKOFF_MIN;
                }
                Outcome::Idle => {
                    next = Some(from);
                    self.wait_for_origin().await;
                }
                Outcome::Retry => {
                    next = None;
                    self.pause(backoff).await;
                    backoff = (backoff * 2).min(limits::SOURCE_RETRY_BACKOFF_MAX);
                }
            }
        }
        if let Some(stream) = self.stream.upgrade() {
            stream.services().bus.unsubscribe_internal(&subscription);
        }
    }

    /// The sourcing stream while it is still the one this follower was started for.
    pub(super) fn current_stream(&self) -> Option<Arc<Stream>> {
        let stream = self.stream.upgrade()?;
        let registered = self.jetstream.upgrade()?.stream(&stream.name)?;
        Arc::ptr_eq(&stream, &registered).then_some(stream)
    }

    fn origin(&self) -> Option<Arc<Stream>> {
        if self.link.place != Place::Local {
            return None;
        }
        self.jetstream.upgrade()?.stream(&self.link.spec.name)
    }

    /// Whether the follower was told to stop.
    pub(super) fn is_stopped(&self) -> bool {
        self.following.is_stopped()
    }

    /// Wakes when the follower is told to stop.
    pub(super) async fn stopped(&self) {
        let woken = self.following.wake().notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if !self.following.is_stopped() {
            woken.await;
        }
    }

    /// Sleeps, waking early when stopped.
    pub(super) async fn pause(&self, duration: Duration) {
        let woken = self.following.wake.notified();
        tokio::pin!(woken);
        // Registered before the check, so a stop in between still wakes it.
        woken.as_mut().enable();
        if !self.following.is_stopped() {
            let _ = tokio::time::timeout(duration, woken).await;
        }
    }

    /// Waits until the origin stores something (or a while passes: `active` is kept fresh).
    async fn wait_for_origin(&self) {
        let Some(origin) = self.origin() else {
            return self.pause(limits::SOURCE_IDLE_CHECK_INTERVAL).await;
        };
        let mut changed = origin.watch_last_seq();
        drop(origin);
        let woken = self.following.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if self.following.is_stopped() {
            return;
        }
        tokio::select! {
            _ = changed.changed() => {}
            _ = woken => {}
            _ = tokio::time::sleep(limits::SOURCE_IDLE_CHECK_INTERVAL) => {}
        }
    }

    /// The origin sequence to read next: after what the sourcing stream already holds, else
    /// where the config says to start. `None` when the origin is not reachable.
    /// The origin sequence after the last one this link stored, if it stored any.
    pub(super) fn resume_seq(&self, stream: &Stream) -> Option<u64> {
        let sourced = if self.link.mirror {
            let last = stream.state().last_seq;
            (last > 0).then_some(last)
        } else {
            self.last_sourced(stream)
        };
        sourced.map(|seq| seq + 1)
    }

    fn start_seq(&self, stream: &Stream) -> Option<u64> {
        let Some(origin) = self.origin() else {
            self.unreachable();
            return None;
        };
        if let Some(seq) = self.resume_seq(stream) {
            return Some(seq);
        }
        let spec = &self.link.spec;
        if spec.opt_start_seq > 0 {
            return Some(spec.opt_start_seq);
        }
        if let Some(start_ns) = spec.opt_start_time.as_deref().and_then(clock::parse_rfc3339) {
            return Some(first_at_or_after(&origin, start_ns));
        }
        Some(1)
    }

    fn unreachable(&self) {
        let error = match &self.link.spec.external {
            Some(external) => ApiError::stream_not_found_at(&external.api),
            None => ApiError::stream_not_found(),
        };
        self.link.set_error(Some(error));
    }

    /// The newest origin sequence this link stored, read from the headers, newest first.
    fn last_sourced(&self, stream: &Stream) -> Option<u64> {
        let state = stream.state();
        let mut seq = state.last_seq;
        while seq >= state.first_seq && seq > 0 {
            let message = stream.store().get(seq).ok().flatten();
            let found = message.as_ref().and_then(|m| m.headers.as_deref()).and_then(|headers| {
                Headers::new(headers).get(STREAM_SOURCE_HEADER).and_then(|value| self.link.sourced_seq(value))
            });
            if found.is_some() {
                return found;
            }
            seq -= 1;
        }
        None
    }

    /// Reads the next copies from the origin, hands them to the stream and waits for their acks.
    async fn copy_batch(
        &self,
        stream: &Arc<Stream>,
        from: u64,
        inbox: &str,
        acks: &mut mpsc::Receiver<Result<(), ApiError>>,
    ) -> Outcome {
        let Some(origin) = self.origin() else {
            self.unreachable();
            return Outcome::Retry;
        };
        let (copies, lag) = self.read(&origin, from);
        drop(origin);
        self.link.contact(lag);
        self.store_copies(stream, copies, inbox, acks).await
    }

    /// Hands copies to the sourcing stream in order and waits for their acks.
    pub(super) async fn store_copies(
        &self,
        stream: &Arc<Stream>,
        copies: Vec<Copy>,
        inbox: &str,
        acks: &mut AckReceiver,
    ) -> Outcome {
        let Some(first) = copies.first() else { return Outcome::Idle };
        if self.link.mirror && !self.align_mirror(stream, first.origin_seq) {
            return Outcome::Retry;
        }
        let mut sent = Vec::with_capacity(copies.len());
        for copy in &copies {
            if !stream.enqueue_sourced(&copy.subject, inbox, copy.headers.as_deref(), &copy.payload) {
                break;
            }
            sent.push(copy.origin_seq);
        }
        let mut stored_through = None;
        let mut refused = None;
        for origin_seq in &sent {
            match tokio::time::timeout(limits::SOURCE_ACK_TIMEOUT, acks.recv()).await {
                Ok(Some(Ok(()))) => stored_through = Some(*origin_seq),
                Ok(Some(Err(error))) => {
                    refused.get_or_insert((*origin_seq, error));
                }
                Ok(None) | Err(_) => return Outcome::Retry,
            }
        }
        if let Some((origin_seq, error)) = refused {
            tracing::warn!(stream = %stream.name, origin = %self.link.spec.name, origin_seq, %error, "copy refused");
            self.link.set_error(Some(error));
            // Retried only when nothing after it was stored: a copy is never stored twice.
            return match stored_through {
                Some(seq) if seq > origin_seq => Outcome::Advanced(seq + 1),
                _ => Outcome::Retry,
            };
        }
        match stored_through {
            Some(seq) => Outcome::Advanced(seq + 1),
            // The ingest queue was full: try again shortly.
            None => Outcome::Retry,
        }
    }

    /// Up to the in-flight bound of copies from `from` on (a mirror's stop at a sequence gap),
    /// and the lag left behind them.
    fn read(&self, origin: &Stream, from: u64) -> (Vec<Copy>, u64) {
        let store = origin.store();
        let last_seq = store.state().last_seq;
        let mut copies: Vec<Copy> = Vec::new();
        let mut bytes = 0;
        let mut seq = from;
        while copies.len() < limits::SOURCE_INFLIGHT_MESSAGES_MAX && bytes < limits::SOURCE_INFLIGHT_BYTES_MAX {
            let message = match store.get_next(seq, self.link.store_filter()) {
                Ok(Some(message)) => message,
                Ok(None) => break,
                Err(semaq_store::StoreError::Corrupt { seq: bad, .. }) => {
                    seq = bad + 1;
                    continue;
                }
                Err(_) => break,
            };
            seq = message.seq + 1;
            if !self.link.wants(&message.subject) {
                continue;
            }
            let contiguous = copies.last().is_none_or(|last| last.origin_seq + 1 == message.seq);
            if self.link.mirror && !contiguous {
                break;
            }
            bytes += message.payload.len() + message.headers.as_ref().map_or(0, Bytes::len);
            copies.push(self.copy_of(message));
        }
        let read_to = copies.last().map_or(from.saturating_sub(1), |copy| copy.origin_seq);
        let lag = if copies.is_empty() { 0 } else { last_seq.saturating_sub(read_to) };
        (copies, lag)
    }

    pub(super) fn copy_of(&self, message: semaq_store::StoredMessage) -> Copy {
        let subject = self.link.destination(&message.subject);
        let mut block = match message.headers.as_deref() {
            Some(raw) => HeaderBlock::parse(raw).unwrap_or_default(),
            None => HeaderBlock::default(),
        };
        // As nats-server: the origin's expectations were checked there, and batches do not
        // carry over; a chained source's header is replaced by this hop's.
        block.entries.retain(|(name, _)| {
            let lower = name.to_ascii_lowercase();
            !lower.starts_with("nats-expected-")
                && !lower.starts_with("nats-batch-")
                && (self.link.mirror || !lower.eq_ignore_ascii_case(STREAM_SOURCE_HEADER))
        });
        if !self.link.mirror {
            let value = format!(
                "{} {} {} {} {}",
                self.link.spec.name, message.seq, self.link.filter_text, self.link.destination_text, message.subject
            );
            block.insert(STREAM_SOURCE_HEADER, &value);
        }
        let headers = match (&message.headers, block.entries.is_empty() && block.status.is_none()) {
            (None, true) => None,
            _ => Some(block.encode()),
        };
        Copy { origin_seq: message.seq, subject, headers, payload: message.payload }
    }

    /// Mirrors keep origin sequences: a jump in them (the origin deleted or expired messages,
    /// or the mirror is empty and the origin starts later) is skipped over in the mirror's
    /// store, the skipped sequences counting as deleted there, as nats-server's `skipMsgs`.
    /// Unsynced: the skip is durable with the copy appended behind it, at that copy's commit,
    /// so no fsync runs under the store's lock (a crash before it loses both, and the mirror
    /// copies again from the last durable sequence).
    fn align_mirror(&self, stream: &Stream, origin_seq: u64) -> bool {
        let mut store = stream.store();
        let next = store.state().last_seq + 1;
        if origin_seq <= next {
            return true;
        }
        match store.skip_msgs_unsynced(origin_seq) {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(stream = %stream.name, from = next, to = origin_seq, "mirror: a gap this large in the origin's sequences is not kept");
            }
            Err(error) => {
                tracing::error!(stream = %stream.name, %error, "mirror: cannot skip to the origin's sequence");
                return false;
            }
        }
        drop(store);
        stream.notify_changed();
        true
    }
}

/// The first origin sequence stored at or after `start_ns`.
fn first_at_or_after(origin: &Stream, start_ns: i64) -> u64 {
    let state = origin.state();
    let mut seq = state.first_seq.max(1);
    loop {
        let message = origin.store().get_next(seq, None);
        match message {
            Ok(Some(message)) if message.timestamp_ns >= start_ns => return message.seq,
            Ok(Some(message)) => seq = message.seq + 1,
            Err(semaq_store::StoreError::Corrupt { seq: bad, .. }) => seq = bad + 1,
            _ => return state.last_seq + 1,
        }
    }
}

/// Checks a config's `mirror`, `sources` and `subject_transform` on their own, in
/// nats-server's order, before the subjects get their default.
pub fn check_shape(config: &StreamConfig) -> Result<(), ApiError> {
    if let Some(mirror) = &config.mirror {
        check_mirror(config, mirror)?;
    }
    let mut seen = std::collections::HashSet::new();
    for source in &config.sources {
        if !super::is_valid_name(&source.name) {
            return Err(ApiError::source_invalid_stream_name());
        }
        let link = Link::new(source.clone(), false);
        let api = source.external.as_ref().map(|e| e.api.as_str()).unwrap_or_default();
        if !seen.insert((source.name.clone(), api.to_string(), link.filter_text, link.destination_text)) {
            return Err(ApiError::source_duplicate());
        }
        check_transforms(source, false)?;
    }
    for source in config.mirror.iter().chain(&config.sources) {
        let url = remote_url(config, source);
        if let Some(url) = url {
            check_url(url)?;
        }
        if let Some(external) = &source.external {
            // At a URL, `$JS.API` is the other server's: no loop back into this one.
            check_external(external, url.is_none())?;
        }
    }
    if let Some(transform) = &config.subject_transform {
        if !transform.source.is_empty() && !subject::is_valid_filter(&transform.source) {
            return Err(ApiError::stream_transform_source(&transform.source));
        }
        if let Err(error) = Transform::new(&transform.source, &transform.destination) {
            return Err(ApiError::stream_create(format!(
                "stream subject transform from '{}' to '{}': {error}",
                transform.source, transform.destination
            )));
        }
    }
    Ok(())
}

fn check_mirror(config: &StreamConfig, mirror: &StreamSource) -> Result<(), ApiError> {
    if config.first_seq > 0 {
        return Err(ApiError::mirror_with_first_seq());
    }
    if !config.subjects.is_empty() {
        return Err(ApiError::mirror_with_subjects());
    }
    if !config.sources.is_empty() {
        return Err(ApiError::mirror_with_sources());
    }
    if config.allow_atomic || config.exactly_once() {
        return Err(ApiError::mirror_with_atomic_publish());
    }
    check_transforms(mirror, true)?;
    if mirror.external.is_none() && !super::is_valid_name(&mirror.name) {
        return Err(ApiError::mirror_invalid_stream_name());
    }
    Ok(())
}

fn check_transforms(source: &StreamSource, mirror: bool) -> Result<(), ApiError> {
    if !source.filter_subject.is_empty() && !source.subject_transforms.is_empty() {
        return Err(ApiError::source_multiple_filters(mirror));
    }
    if !source.filter_subject.is_empty() && !subject::is_valid_filter(&source.filter_subject) {
        let what = if mirror { "mirror" } else { "source" };
        return Err(ApiError::stream_create(format!(
            "subject filter '{}' for the {what}: invalid subject",
            source.filter_subject
        )));
    }
    let transforms = &source.subject_transforms;
    for (i, transform) in transforms.iter().enumerate() {
        if !transform.source.is_empty() && !subject::is_valid_filter(&transform.source) {
            return Err(ApiError::source_transform_source(mirror, &transform.source));
        }
        if let Err(error) = transform::validate_mapping(&transform.source, &transform.destination) {
            return Err(ApiError::source_transform_destination(mirror, &error));
        }
        let or_all = |text: &str| if text.is_empty() { ">".to_string() } else { text.to_string() };
        let overlapping = transforms.iter().enumerate().any(|(j, other)| {
            let (a, b) = (or_all(&transform.source), or_all(&other.source));
            // Mirrors refuse any overlap; sources only one filter inside another (nats-server).
            j != i && if mirror { subject::overlaps(&a, &b) } else { subject::is_subset(&a, &b) }
        });
        if overlapping {
            return Err(ApiError::source_overlapping_filters(mirror));
        }
    }
    Ok(())
}

/// A remote origin's URL: `nats://host:port` (or `host:port`), as async-nats takes it.
fn check_url(url: &str) -> Result<(), ApiError> {
    let refused = || {
        ApiError::invalid_stream_config(format!(
            "{URL_KEY_PREFIX}* must be a NATS URL like nats://host:4222, not {url:?}"
        ))
    };
    let rest = url.strip_prefix("nats://").or_else(|| url.strip_prefix("tls://")).unwrap_or(url);
    let host_port = rest.rsplit('@').next().unwrap_or(rest);
    let (host, port) = host_port.rsplit_once(':').ok_or_else(refused)?;
    if host.is_empty() || port.parse::<u16>().is_err() || url.contains(char::is_whitespace) {
        return Err(refused());
    }
    Ok(())
}

fn check_external(external: &super::config::ExternalStream, local_api: bool) -> Result<(), ApiError> {
    if !external.deliver.is_empty() && !subject::is_valid_literal(&external.deliver) {
        return Err(ApiError::external_deliver_wildcards(&external.deliver));
    }
    if !external.api.is_empty() {
        if !subject::is_valid_literal(&external.api) {
            return Err(ApiError::invalid_stream_config(format!(
                "stream external api prefix {:?} must be a valid subject without wildcards",
                external.api
            )));
        }
        if local_api && subject::overlaps(&external.api, "$JS.API") {
            return Err(ApiError::external_api_overlap(&external.api));
        }
    }
    Ok(())
}

/// Checks what depends on the other streams: message sizes against the origins, and cycles.
pub fn check_against(jetstream: &JetStream, config: &StreamConfig) -> Result<(), ApiError> {
    let domain = jetstream.services().options.jetstream_domain.clone();
    for (source, mirror) in (config.mirror.iter().map(|m| (m, true)))
        .chain(config.sources.iter().map(|s| (s, false)))
        .filter(|(source, _)| is_local(config, source, domain.as_deref()))
    {
        let Some(origin) = jetstream.stream(&source.name) else { continue };
        let origin_max = origin.config().max_msg_size;
        if config.max_msg_size > 0 && origin_max > 0 && config.max_msg_size < origin_max {
            return Err(ApiError::max_message_size_below_origin(mirror));
        }
    }
    check_cycles(jetstream, config)
}

/// nats-server's cycle check: walk the origins; a stream seen again is a cycle when the
/// subjects could actually flow round (mirrors: always).
fn check_cycles(jetstream: &JetStream, config: &StreamConfig) -> Result<(), ApiError> {
    let cycle = || ApiError::invalid_stream_config("detected cycle");
    let mut to_visit: Vec<Arc<StreamConfig>> = vec![Arc::new(config.clone())];
    let mut visited = std::collections::HashSet::new();
    let mut steps = 0;
    while let Some(current) = to_visit.pop() {
        steps += 1;
        if steps > limits::STREAMS_MAX {
            return Err(cycle());
        }
        visited.insert(current.name.clone());
        for source in current.sources.iter().filter(|s| s.external.is_none() && remote_url(&current, s).is_none()) {
            let lookup = || jetstream.stream(&source.name).map(|s| s.config());
            if visited.contains(&source.name) {
                let filter = &source.filter_subject;
                let overlaps = filter.is_empty() || current.subjects.iter().any(|s| subject::overlaps(s, filter));
                if overlaps {
                    return Err(cycle());
                }
            } else if let Some(origin) = if source.name == config.name { None } else { lookup() } {
                to_visit.push(origin);
            }
        }
        if let Some(mirror) =
            current.mirror.as_ref().filter(|m| m.external.is_none() && remote_url(&current, m).is_none())
        {
            if visited.contains(&mirror.name) {
                return Err(cycle());
            }
            if let Some(origin) = jetstream.stream(&mirror.name) {
                to_visit.push(origin.config());
            }
        }
    }
    Ok(())
}

/// Refuses the changes of `mirror` nats-server refuses on update (removing it is allowed).
pub fn check_update(old: &StreamConfig, new: &StreamConfig) -> Result<(), ApiError> {
    if new.mirror.is_some() && new.mirror != old.mirror {
        return Err(ApiError::mirror_not_updatable());
    }
    Ok(())
}

/// Whether an update changes what the stream follows.
pub fn follows_changed(old: &StreamConfig, new: &StreamConfig) -> bool {
    let urls = |config: &StreamConfig| -> Vec<(String, String)> {
        (config.metadata.iter())
            .filter(|(key, _)| key.starts_with(URL_KEY_PREFIX))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect()
    };
    old.mirror != new.mirror || old.sources != new.sources || urls(old) != urls(new)
}
