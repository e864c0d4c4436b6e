//! The OTLP/HTTP protobuf body for a batch of spans: an `ExportTraceServiceRequest`
//! (opentelemetry-proto `collector/trace/v1`), written field by field. The few messages it
//! needs are small, so a hand-written encoder saves the broker prost, tonic and their build.

use super::span::{SpanData, Value};

/// Protobuf wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

/// Who sends the spans: the resource's attributes and the instrumentation scope.
#[derive(Debug, Clone)]
pub struct Resource {
    /// Resource attributes (`service.name` first).
    pub attributes: Vec<(String, String)>,
    /// Instrumentation scope name.
    pub scope: String,
    /// Instrumentation scope version.
    pub version: String,
}

/// `ExportTraceServiceRequest { resource_spans: [ResourceSpans { resource, scope_spans: [..] }] }`.
pub fn encode_request(resource: &Resource, spans: &[Box<SpanData>]) -> Vec<u8> {
    let mut resource_message = Vec::new();
    for (key, value) in &resource.attributes {
        message(&mut resource_message, 1, &key_value(key, &Value::Str(value.clone())));
    }
    let mut scope = Vec::new();
    string(&mut scope, 1, &resource.scope);
    string(&mut scope, 2, &resource.version);
    let mut scope_spans = Vec::new();
    message(&mut scope_spans, 1, &scope);
    for span in spans {
        message(&mut scope_spans, 2, &encode_span(span));
    }
    let mut resource_spans = Vec::new();
    message(&mut resource_spans, 1, &resource_message);
    message(&mut resource_spans, 2, &scope_spans);
    let mut request = Vec::with_capacity(resource_spans.len() + 8);
    message(&mut request, 1, &resource_spans);
    request
}

/// One `Span`.
fn encode_span(span: &SpanData) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    bytes(&mut out, 1, &span.trace_id);
    bytes(&mut out, 2, &span.span_id);
    if let Some(parent) = &span.parent_span_id {
        bytes(&mut out, 4, parent);
    }
    string(&mut out, 5, &span.name);
    tag(&mut out, 6, VARINT);
    varint(&mut out, span.kind as u64);
    tag(&mut out, 7, FIXED64);
    out.extend_from_slice(&span.start_ns.to_le_bytes());
    tag(&mut out, 8, FIXED64);
    out.extend_from_slice(&span.end_ns.to_le_bytes());
    for (key, value) in &span.attributes {
        message(&mut out, 9, &key_value(key, value));
    }
    for link in &span.links {
        let mut encoded = Vec::with_capacity(40);
        bytes(&mut encoded, 1, &link.trace_id);
        bytes(&mut encoded, 2, &link.span_id);
        // Link.flags: the W3C flags (sampled) with "has is_remote" and "is_remote" set.
        tag(&mut encoded, 6, FIXED32);
        encoded.extend_from_slice(&(0x300 | u32::from(link.sampled)).to_le_bytes());
        message(&mut out, 13, &encoded);
    }
    let mut status = Vec::new();
    if let Some(error) = &span.error {
        string(&mut status, 2, error);
        tag(&mut status, 3, VARINT);
        varint(&mut status, 2);
    }
    message(&mut out, 15, &status);
    // Span.flags: the W3C flags (sampled); whether the parent is remote is left unsaid.
    tag(&mut out, 16, FIXED32);
    out.extend_from_slice(&1u32.to_le_bytes());
    out
}

/// `KeyValue { key, value: AnyValue }`.
fn key_value(key: &str, value: &Value) -> Vec<u8> {
    let mut any = Vec::new();
    match value {
        Value::Str(text) => string(&mut any, 1, text),
        Value::Bool(flag) => {
            tag(&mut any, 2, VARINT);
            varint(&mut any, u64::from(*flag));
        }
        Value::Int(number) => {
            tag(&mut any, 3, VARINT);
            varint(&mut any, *number as u64);
        }
    }
    let mut out = Vec::with_capacity(key.len() + any.len() + 4);
    string(&mut out, 1, key);
    message(&mut out, 2, &any);
    out
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from(field << 3 | wire));
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn bytes(out: &mut Vec<u8>, field: u32, value: &[u8]) {
    tag(out, field, LEN);
    varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

fn string(out: &mut Vec<u8>, field: u32, value: &str) {
    bytes(out, field, value.as_bytes());
}

fn message(out: &mut Vec<u8>, field: u32, value: &[u8]) {
    bytes(out, field, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_a_span_encode_as_protobuf_does() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        let mut out = Vec::new();
        varint(&mut out, (-1i64) as u64);
        assert_eq!(out.len(), 10);
        let span = SpanData { name: "x".into(), trace_id: [1; 16], span_id: [2; 8], ..SpanData::default() };
        let encoded = encode_span(&span);
        // trace_id: tag 0x0a, length 16.
        assert_eq!(&encoded[..2], &[0x0a, 16]);
        assert_eq!(&encoded[18..20], &[0x12, 8]);
    }
}
