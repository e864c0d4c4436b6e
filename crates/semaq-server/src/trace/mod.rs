//! Tracing a message through the broker: OpenTelemetry spans exported over OTLP/HTTP, and
//! nats-server's `Nats-Trace-Dest` message tracing.
//!
//! **Spans** (messaging semantic conventions, `messaging.system` = `nats`): a publish arriving
//! is a `publish <subject>` span (SERVER, `receive`) parented on the message's `traceparent`;
//! each stream that stores it adds a `store <stream>` span (INTERNAL, `process`: append and
//! fsync); each delivery to a client is a `deliver <subject>` span (PRODUCER, `send`), whose
//! context replaces the delivered message's `traceparent` so the consumer's span joins the
//! trace. A JetStream consumer's delivery is a `deliver` span parented on the stored message's
//! `traceparent`. Store and deliver spans link to the message's creation context.
//!
//! **Cost when off:** without an OTLP endpoint [`tracer`] is `None` (one atomic load). The
//! publish path then does no span work; only a message with headers is looked at once, for
//! `Nats-Trace-Dest`. Deliveries check one thread-local flag ([`in_traced_publish`]), set
//! only while a traced publish fans out.
//!
//! Finished spans wait in a bounded queue ([`crate::limits::TRACE_EXPORT_QUEUE_SPANS_MAX`]);
//! when it is full a span is dropped and counted ([`dropped_spans`]).

pub mod context;
pub mod export;
pub mod msgtrace;
pub mod otlp;
pub mod span;

use std::cell::{Cell, RefCell};
use std::fmt::Display;
use std::sync::OnceLock;

use bytes::Bytes;
use semaq_wire::headers::names::MSG_ID;
use semaq_wire::headers::Headers;
use semaq_wire::info::ServerInfo;

use self::context::{with_traceparent, TraceParent, TRACEPARENT};
use self::msgtrace::MsgTrace;
use self::span::{Kind, Span, Tracer};
use crate::limits;

/// The messaging system the spans name: SemaQ speaks the NATS protocol, so clients' NATS
/// instrumentations and the broker's spans group together.
pub const MESSAGING_SYSTEM: &str = "nats";

static TRACER: OnceLock<Tracer> = OnceLock::new();

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// The tracer when OTLP export is on: the hot path's one check.
#[inline]
pub fn tracer() -> Option<&'static Tracer> {
    TRACER.get()
}

/// Spans dropped because the export queue was full.
pub fn dropped_spans() -> u64 {
    tracer().map_or(0, Tracer::dropped)
}

/// Starts OTLP export when the `OTEL_*` variables name an endpoint (see [`export`]); call it
/// inside the runtime. The process has one exporter: later calls change nothing. Ok(true) when
/// export is on.
pub fn init(sample_ratio: Option<f64>) -> Result<bool, String> {
    if TRACER.get().is_some() {
        return Ok(true);
    }
    let Some(config) = export::ExportConfig::from_env(|name| std::env::var(name).ok(), sample_ratio)? else {
        return Ok(false);
    };
    let (sender, receiver) = tokio::sync::mpsc::channel(limits::TRACE_EXPORT_QUEUE_SPANS_MAX);
    if TRACER.set(Tracer::new(config.sampler.clone(), sender)).is_ok() {
        tracing::info!(endpoint = %format!("http://{}{}", config.authority, config.path), "exporting traces over OTLP/HTTP");
        tokio::spawn(export::run(config, receiver));
    }
    Ok(true)
}

/// What the deliveries of the publish being fanned out on this thread need to know.
#[derive(Debug)]
struct Current {
    /// The broker's publish span.
    span: Option<TraceParent>,
    /// The message's creation context (its `traceparent` as published).
    creation: Option<TraceParent>,
    msg_id: Option<String>,
    body_size: usize,
    msg: Option<MsgTrace>,
}

/// Whether a traced publish is being fanned out on this thread: deliveries' one check.
#[inline]
pub fn in_traced_publish() -> bool {
    ACTIVE.with(Cell::get)
}

/// A published message as it arrives.
#[derive(Debug, Clone, Copy)]
pub struct Arrival<'a> {
    /// The subject published to.
    pub subject: &'a str,
    /// The subject the account's mappings made of it, when one applied.
    pub mapped_to: Option<&'a str>,
    /// Its header block.
    pub headers: Option<&'a [u8]>,
    /// Its body's length.
    pub body_size: usize,
    /// The publishing connection.
    pub client_id: u64,
    /// That connection's name.
    pub client_name: Option<&'a str>,
    /// That connection's account (`$G` for the server's own users).
    pub account: &'a str,
    /// This server, for `Nats-Trace-Dest` events.
    pub server: &'a ServerInfo,
}

/// A traced publish while it fans out: ends the publish span and hands back the
/// `Nats-Trace-Dest` event when finished (or dropped).
#[derive(Debug)]
pub struct Publish {
    span: Option<Span>,
}

impl Publish {
    /// Starts tracing `arrival` when it is sampled or asks for `Nats-Trace-Dest`; `None` (and
    /// nothing done) otherwise.
    pub fn begin(arrival: &Arrival<'_>) -> Option<Publish> {
        let tracer = tracer();
        let headers = arrival.headers.map(Headers::new);
        if tracer.is_none() && headers.is_none() {
            return None;
        }
        let msg_size = arrival.headers.map_or(0, <[u8]>::len) + arrival.body_size;
        let ingress = msgtrace::Ingress {
            cid: arrival.client_id,
            name: arrival.client_name,
            subject: arrival.subject,
            account: arrival.account,
        };
        let mut msg = headers.and_then(|h| MsgTrace::start(h, arrival.server, msg_size, ingress));
        if let (Some(msg), Some(to)) = (msg.as_mut(), arrival.mapped_to) {
            msg.subject_mapping(to);
        }
        if tracer.is_none() && msg.is_none() {
            return None;
        }
        let [traceparent, msg_id] = headers.map_or([None, None], |h| h.get_many(&[TRACEPARENT, MSG_ID]));
        let creation = traceparent.and_then(TraceParent::parse);
        let span =
            tracer.and_then(|t| t.start(|| format!("publish {}", arrival.subject), Kind::Server, creation.as_ref()));
        if span.is_none() && msg.is_none() {
            return None;
        }
        let mut span = span;
        if let Some(span) = span.as_mut() {
            messaging(span, arrival.subject, "receive", "publish", msg_id, arrival.body_size);
            span.set("messaging.client.id", arrival.client_id.to_string());
        }
        let current = Current {
            span: span.as_ref().map(Span::context),
            creation,
            msg_id: msg_id.map(str::to_string),
            body_size: arrival.body_size,
            msg,
        };
        CURRENT.with(|c| *c.borrow_mut() = Some(current));
        ACTIVE.with(|a| a.set(true));
        Some(Publish { span })
    }

    /// Ends the publish span (`delivered` deliveries) and returns the `Nats-Trace-Dest` event to
    /// publish, as (subject, JSON).
    pub fn finish(mut self, delivered: usize) -> Option<(String, Vec<u8>)> {
        if let Some(span) = self.span.as_mut() {
            span.set("semaq.deliveries", delivered as i64);
        }
        take_current().and_then(|current| current.msg).map(MsgTrace::finish)
    }
}

impl Drop for Publish {
    fn drop(&mut self) {
        take_current();
    }
}

fn take_current() -> Option<Current> {
    ACTIVE.with(|a| a.set(false));
    CURRENT.with(|c| c.borrow_mut().take())
}

/// The messaging attributes every span carries.
fn messaging(span: &mut Span, subject: &str, kind: &'static str, name: &'static str, id: Option<&str>, size: usize) {
    span.set("messaging.system", MESSAGING_SYSTEM);
    span.set("messaging.destination.name", subject);
    span.set("messaging.operation.type", kind);
    span.set("messaging.operation.name", name);
    if let Some(id) = id {
        span.set("messaging.message.id", id);
    }
    span.set("messaging.message.body.size", size as i64);
}

/// The client subscription a delivery goes to.
#[derive(Debug, Clone, Copy)]
pub struct Recipient<'a> {
    /// The client's connection id.
    pub cid: u64,
    /// Its name.
    pub name: Option<&'a str>,
    /// Its account (`$G` for the server's own users).
    pub account: &'a str,
    /// The subscription's subject filter.
    pub subscription: &'a str,
    /// Its queue group.
    pub queue: Option<&'a str>,
    /// Whether the client reads headers (a `traceparent` can be sent).
    pub headers: bool,
}

/// What tracing makes of one delivery to a client; the deliver span ends when it is dropped.
#[derive(Debug, Default)]
pub struct Delivery {
    /// The header block to send instead of the message's (with the deliver span's `traceparent`).
    pub headers: Option<Vec<u8>>,
    /// `Nats-Trace-Only`: record the delivery, send nothing.
    pub skip: bool,
    _span: Option<Span>,
}

/// Traces one delivery of the publish on this thread (call when [`in_traced_publish`]).
pub fn deliver(to: &Recipient<'_>, subject: &str, headers: Option<&[u8]>) -> Delivery {
    CURRENT.with(|current| {
        let mut current = current.borrow_mut();
        let Some(current) = current.as_mut() else { return Delivery::default() };
        let mut skip = false;
        if let Some(msg) = current.msg.as_mut() {
            msg.egress(to.cid, to.name, to.account, to.subscription, to.queue);
            skip = msg.trace_only;
        }
        let span = match (tracer(), current.span.as_ref()) {
            (Some(tracer), Some(parent)) if !skip => {
                tracer.start(|| format!("deliver {subject}"), Kind::Producer, Some(parent))
            }
            _ => None,
        };
        let Some(mut span) = span else { return Delivery { headers: None, skip, _span: None } };
        messaging(&mut span, subject, "send", "deliver", current.msg_id.as_deref(), current.body_size);
        span.set("messaging.client.id", to.cid.to_string());
        span.set("messaging.destination.subscription.name", to.subscription);
        if let Some(queue) = to.queue {
            span.set("messaging.consumer.group.name", queue);
        }
        if let Some(creation) = current.creation {
            span.link(creation);
        }
        let headers = to.headers.then(|| with_traceparent(headers, &span.context().format()));
        Delivery { headers, skip, _span: Some(span) }
    })
}

/// An import a traced message crosses into another account.
#[derive(Debug, Clone, Copy)]
pub enum Import<'a> {
    /// A stream import, into `account` as subject `to`.
    Stream {
        /// The importing account.
        account: &'a str,
        /// The subject there.
        to: &'a str,
    },
    /// A service import, from the importer's subject `from` to the exporting `account`'s `to`.
    Service {
        /// The exporting account.
        account: &'a str,
        /// The importer's subject.
        from: &'a str,
        /// The exporter's subject.
        to: &'a str,
    },
}

/// What crossing an import makes of the `Nats-Trace-Dest` trace of the publish on this thread.
#[derive(Debug)]
pub enum Crossing {
    /// Deliver across; with the trace set aside (and put back when dropped) when the import
    /// does not allow it.
    Go(Option<SetAside>),
    /// The import allows the trace, which goes on across.
    Traced,
    /// Traced only, and the import does not allow the trace: deliver nothing across.
    Skip,
}

/// A `Nats-Trace-Dest` trace set aside while its message crosses an import that does not allow
/// tracing, so deliveries beyond record nothing; put back when dropped.
#[derive(Debug)]
pub struct SetAside(Option<MsgTrace>);

impl Drop for SetAside {
    fn drop(&mut self) {
        let msg = self.0.take();
        CURRENT.with(|current| {
            if let Some(current) = current.borrow_mut().as_mut() {
                current.msg = msg;
            }
        });
    }
}

/// Records the publish on this thread crossing `import` in its `Nats-Trace-Dest` trace (an `se`
/// or `si` event, as nats-server's `addStreamExportEvent` and `addServiceImportEvent`) and says
/// how to go on: past an import that does not `allow` tracing, nats-server traces no further
/// and delivers a traced-only message no further.
pub fn cross_import(import: Import<'_>, allow: bool) -> Crossing {
    if !in_traced_publish() {
        return Crossing::Go(None);
    }
    CURRENT.with(|current| {
        let mut current = current.borrow_mut();
        let Some(current) = current.as_mut() else { return Crossing::Go(None) };
        let Some(msg) = current.msg.as_mut() else { return Crossing::Go(None) };
        match import {
            Import::Stream { account, to } => msg.stream_export(account, to),
            Import::Service { account, from, to } => msg.service_import(account, from, to),
        }
        match (allow, msg.trace_only) {
            (true, _) => Crossing::Traced,
            (false, true) => Crossing::Skip,
            (false, false) => Crossing::Go(Some(SetAside(current.msg.take()))),
        }
    })
}

/// A stream's capture of the publish on this thread: whether to store it (not when traced
/// only) and the context its store span continues.
#[derive(Debug)]
pub struct Capture {
    /// `Nats-Trace-Only`: record the capture, store nothing.
    pub skip: bool,
    /// Carried with the message to the store.
    pub carried: Option<Carried>,
}

/// The trace context a message carries from its publish to the store.
#[derive(Debug, Clone)]
pub struct Carried {
    parent: TraceParent,
    creation: Option<TraceParent>,
    msg_id: Option<String>,
    body_size: usize,
}

/// Traces stream `stream` capturing the publish on this thread (call when [`in_traced_publish`]).
pub fn capture(stream: &str, subject: &str) -> Capture {
    CURRENT.with(|current| {
        let mut current = current.borrow_mut();
        let Some(current) = current.as_mut() else { return Capture { skip: false, carried: None } };
        let mut skip = false;
        if let Some(msg) = current.msg.as_mut() {
            msg.jetstream(stream, subject);
            skip = msg.trace_only;
        }
        let carried = current.span.filter(|_| !skip).map(|parent| Carried {
            parent,
            creation: current.creation,
            msg_id: current.msg_id.clone(),
            body_size: current.body_size,
        });
        Capture { skip, carried }
    })
}

/// The store spans of one ingest batch; they end when the batch is written (dropped).
#[derive(Debug, Default)]
pub struct Stores {
    spans: Vec<Span>,
    started_ns: u64,
}

impl Stores {
    /// Before a batch's first append: its spans start here (they cover append and fsync).
    pub fn start() -> Self {
        Self { spans: Vec::new(), started_ns: if tracer().is_some() { span::now_ns() } else { 0 } }
    }

    /// Starts the store span of one message the batch stored (or refused) as `outcome`:
    /// its stream sequence and whether it was a duplicate.
    pub fn stored<E: Display>(
        &mut self,
        carried: Carried,
        stream: &str,
        subject: &str,
        outcome: &Result<(u64, bool), E>,
    ) {
        let Some(tracer) = tracer() else { return };
        let Some(mut span) = tracer.start(|| format!("store {stream}"), Kind::Internal, Some(&carried.parent)) else {
            return;
        };
        if self.started_ns > 0 {
            span.started_at(self.started_ns);
        }
        messaging(&mut span, subject, "process", "store", carried.msg_id.as_deref(), carried.body_size);
        span.set("semaq.stream", stream);
        match outcome {
            Ok((seq, duplicate)) => {
                if *seq > 0 {
                    span.set("messaging.nats.stream.sequence", *seq as i64);
                }
                span.set("semaq.duplicate", *duplicate);
            }
            Err(error) => span.fail(error.to_string()),
        }
        if let Some(creation) = carried.creation {
            span.link(creation);
        }
        self.spans.push(span);
    }

    /// Store spans for an atomic batch's messages, committed (`stored`) or refused whole; the
    /// contexts were taken from the messages before the commit ([`Carried`] per subject).
    pub fn committed(&mut self, stream: &str, messages: Vec<(Carried, String)>, stored: bool) {
        let outcome: Result<(u64, bool), &str> = if stored { Ok((0, false)) } else { Err("atomic batch refused") };
        for (carried, subject) in messages {
            self.stored(carried, stream, &subject, &outcome);
            if let Some(span) = self.spans.last_mut() {
                span.set("semaq.batch", true);
            }
        }
    }

    /// Ends the spans after the batch's write: failed when `error`.
    pub fn written<E: Display>(mut self, error: Option<&E>) {
        if let Some(error) = error {
            for span in &mut self.spans {
                span.fail(format!("write failed: {error}"));
            }
        }
    }
}

/// A stored message a JetStream consumer is about to deliver.
#[derive(Debug, Clone, Copy)]
pub struct StoredDelivery<'a> {
    /// The stream.
    pub stream: &'a str,
    /// The consumer.
    pub consumer: &'a str,
    /// The message's subject.
    pub subject: &'a str,
    /// Its stream sequence.
    pub seq: u64,
    /// Which delivery of it this is, from 1.
    pub deliveries: u64,
    /// Its body's length.
    pub body_size: usize,
}

/// Traces a JetStream delivery: a deliver span under the stored message's `traceparent`, whose
/// context the returned headers carry instead. Unchanged headers and no span when export is off
/// or the trace is not sampled.
pub fn deliver_stored(headers: Option<Bytes>, delivery: &StoredDelivery<'_>) -> (Option<Bytes>, Option<Span>) {
    let Some(tracer) = tracer() else { return (headers, None) };
    let read = headers.as_deref().map(Headers::new);
    let [traceparent, msg_id] = read.map_or([None, None], |h| h.get_many(&[TRACEPARENT, MSG_ID]));
    let creation = traceparent.and_then(TraceParent::parse);
    let Some(mut span) = tracer.start(|| format!("deliver {}", delivery.subject), Kind::Producer, creation.as_ref())
    else {
        return (headers, None);
    };
    messaging(&mut span, delivery.subject, "send", "deliver", msg_id, delivery.body_size);
    span.set("messaging.nats.stream.sequence", delivery.seq as i64);
    span.set("semaq.stream", delivery.stream);
    span.set("messaging.consumer.group.name", delivery.consumer);
    span.set("semaq.deliveries", delivery.deliveries as i64);
    if let Some(creation) = creation {
        span.link(creation);
    }
    let rewritten = with_traceparent(headers.as_deref(), &span.context().format());
    (Some(Bytes::from(rewritten)), Some(span))
}
