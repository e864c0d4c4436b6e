//! Spans: what one records (name, kind, ids, times, attributes, links), the sampler that decides
//! whether one is recorded at all, and the bounded queue finished spans wait in for export.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::mpsc;

use super::context::TraceParent;

/// OTLP span kinds (the numbers are OTLP's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kind {
    /// Work inside the broker (the store's append and fsync).
    #[default]
    Internal = 1,
    /// The broker serving a client's request (a publish arriving).
    Server = 2,
    /// The broker handing a message on to a consumer.
    Producer = 4,
}

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
}

impl From<&str> for Value {
    fn from(value: &str) -> Self {
        Value::Str(value.to_string())
    }
}

impl From<String> for Value {
    fn from(value: String) -> Self {
        Value::Str(value)
    }
}

impl From<i64> for Value {
    fn from(value: i64) -> Self {
        Value::Int(value)
    }
}

impl From<bool> for Value {
    fn from(value: bool) -> Self {
        Value::Bool(value)
    }
}

/// A finished span, ready to encode.
#[derive(Debug, Clone, Default)]
pub struct SpanData {
    /// Trace id.
    pub trace_id: [u8; 16],
    /// Span id.
    pub span_id: [u8; 8],
    /// The parent span, when the span continues a trace.
    pub parent_span_id: Option<[u8; 8]>,
    /// Span name, `operation destination`.
    pub name: String,
    /// Span kind.
    pub kind: Kind,
    /// Start, unix nanoseconds.
    pub start_ns: u64,
    /// End, unix nanoseconds.
    pub end_ns: u64,
    /// Attributes in the order set.
    pub attributes: Vec<(&'static str, Value)>,
    /// Links (the message's creation context).
    pub links: Vec<TraceParent>,
    /// An error description, when the operation failed.
    pub error: Option<String>,
}

/// A span being recorded; it ends (and is queued for export) when dropped.
#[derive(Debug)]
pub struct Span {
    data: Box<SpanData>,
    tracer: &'static Tracer,
    context: TraceParent,
}

impl Span {
    /// This span's identity, to parent other spans on or to send on in `traceparent`.
    pub fn context(&self) -> TraceParent {
        self.context
    }

    /// Sets an attribute.
    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        self.data.attributes.push((key, value.into()));
    }

    /// Links the span to another context (a message's creation context).
    pub fn link(&mut self, context: TraceParent) {
        self.data.links.push(context);
    }

    /// Marks the span failed.
    pub fn fail(&mut self, description: impl Into<String>) {
        self.data.error = Some(description.into());
    }

    /// Moves the start back to `start_ns` (unix nanoseconds).
    pub fn started_at(&mut self, start_ns: u64) {
        self.data.start_ns = start_ns;
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        let end = now_ns().max(self.data.start_ns);
        self.data.end_ns = end;
        let finished = std::mem::take(&mut self.data);
        self.tracer.queue(finished);
    }
}

/// Unix nanoseconds now.
pub fn now_ns() -> u64 {
    u64::try_from(semaq_wire::clock::unix_nanos_now()).unwrap_or(0)
}

/// Which traces are recorded: the OpenTelemetry samplers `OTEL_TRACES_SAMPLER` names.
#[derive(Debug, Clone, PartialEq)]
pub enum Sampler {
    /// Every trace.
    AlwaysOn,
    /// None.
    AlwaysOff,
    /// A fraction in [0, 1], decided by the trace id (so every service decides alike).
    Ratio(f64),
    /// The parent's `sampled` flag when there is a parent, else the inner sampler.
    ParentBased(Box<Sampler>),
}

impl Sampler {
    /// Whether a span in trace `trace_id` (under `parent`, if any) is recorded.
    pub fn samples(&self, parent: Option<&TraceParent>, trace_id: &[u8; 16]) -> bool {
        match self {
            Sampler::AlwaysOn => true,
            Sampler::AlwaysOff => false,
            Sampler::Ratio(ratio) => {
                // As the OpenTelemetry SDKs do: the trace id's low 63 bits against the ratio.
                let mut low = [0u8; 8];
                low.copy_from_slice(&trace_id[8..]);
                let bound = (ratio.clamp(0.0, 1.0) * (1u64 << 63) as f64) as u64;
                (u64::from_be_bytes(low) >> 1) < bound
            }
            Sampler::ParentBased(root) => match parent {
                Some(parent) => parent.sampled,
                None => root.samples(None, trace_id),
            },
        }
    }
}

/// Starts spans and queues finished ones (bounded; a full queue drops the span and counts it).
#[derive(Debug)]
pub struct Tracer {
    sampler: Sampler,
    queue: mpsc::Sender<Box<SpanData>>,
    dropped: AtomicU64,
}

impl Tracer {
    /// A tracer queuing finished spans on `queue`.
    pub fn new(sampler: Sampler, queue: mpsc::Sender<Box<SpanData>>) -> Self {
        Self { sampler, queue, dropped: AtomicU64::new(0) }
    }

    /// Starts a span under `parent` (a new trace when `None`), or `None` when not sampled. The
    /// name is made only for a sampled span: at 1% sampling the other 99% allocate nothing.
    pub fn start(
        &'static self,
        name: impl FnOnce() -> String,
        kind: Kind,
        parent: Option<&TraceParent>,
    ) -> Option<Span> {
        let trace_id = match parent {
            Some(parent) => parent.trace_id,
            None => random_nonzero(),
        };
        if !self.sampler.samples(parent, &trace_id) {
            return None;
        }
        let data = Box::new(SpanData {
            trace_id,
            span_id: random_nonzero(),
            parent_span_id: parent.map(|p| p.span_id),
            name: name(),
            kind,
            start_ns: now_ns(),
            end_ns: 0,
            attributes: Vec::with_capacity(8),
            links: Vec::new(),
            error: None,
        });
        let context = TraceParent { trace_id, span_id: data.span_id, sampled: true };
        Some(Span { data, tracer: self, context })
    }

    /// Spans dropped because the export queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn queue(&self, data: Box<SpanData>) {
        if self.queue.try_send(data).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Random bytes, not all zero (W3C forbids all-zero ids).
fn random_nonzero<const N: usize>() -> [u8; N] {
    loop {
        let bytes: [u8; N] = rand::random();
        if bytes.iter().any(|b| *b != 0) {
            return bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_samplers_decide_as_named() {
        let low = [0u8; 16];
        let high = [0xffu8; 16];
        assert!(Sampler::Ratio(0.5).samples(None, &low));
        assert!(!Sampler::Ratio(0.5).samples(None, &high));
        assert!(!Sampler::Ratio(0.0).samples(None, &low));
        let parent = TraceParent { trace_id: high, span_id: [1; 8], sampled: true };
        let based = Sampler::ParentBased(Box::new(Sampler::AlwaysOff));
        assert!(based.samples(Some(&parent), &high));
        assert!(!based.samples(Some(&TraceParent { sampled: false, ..parent }), &high));
        assert!(!based.samples(None, &high));
    }

    #[test]
    fn a_full_export_queue_drops_and_counts() {
        let (sender, mut receiver) = mpsc::channel(2);
        let tracer: &'static Tracer = Box::leak(Box::new(Tracer::new(Sampler::AlwaysOn, sender)));
        let parent = tracer.start(|| "a".into(), Kind::Server, None).expect("sampled");
        let child = tracer.start(|| "b".into(), Kind::Producer, Some(&parent.context())).expect("sampled");
        assert_eq!(child.context().trace_id, parent.context().trace_id);
        let parent_id = parent.context().span_id;
        drop(child);
        drop(parent);
        for _ in 0..3 {
            drop(tracer.start(|| "c".into(), Kind::Internal, None));
        }
        assert_eq!(tracer.dropped(), 3);
        let first = receiver.try_recv().expect("queued");
        assert_eq!((first.name.as_str(), first.parent_span_id), ("b", Some(parent_id)));
        assert!(first.end_ns >= first.start_ns);
        let off: &'static Tracer = Box::leak(Box::new(Tracer::new(Sampler::AlwaysOff, mpsc::channel(1).0)));
        assert!(off.start(|| "d".into(), Kind::Internal, None).is_none());
    }
}
