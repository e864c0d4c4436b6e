//! CEL filter costs, per evaluation and per message (issue 5's targets: ≥ 2 M simple-expression
//! evaluations/s per core on a pre-parsed ~200 B payload; 10 filters on one subject < 3× one).
//!
//! `cargo bench -p semaq-server --bench filter`; `cargo test` runs each case once as a check.

// criterion_group! generates a public function without a doc comment.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use semaq_server::filter::{Context, Filter, Prepared};
use semaq_server::registry::types::SchemaRequest;
use semaq_server::registry::Registry;

/// A ~200 B inference event, as the filter-fanout scenario publishes.
const EVENT: &str = r#"{"model_id":"llama3-70b","confidence":0.92,"input_tokens":1200,"output_tokens":80,"request_id":"req-000000000042","region":"eu-west-1","latency_ms":12.5,"session":"c0ffee00-1234-5678"}"#;

const AVRO_EVENT: &str = r#"{"type": "record", "name": "Inference", "fields": [
    {"name": "model_id", "type": "string"}, {"name": "confidence", "type": "double"},
    {"name": "input_tokens", "type": "long"}, {"name": "output_tokens", "type": "long"},
    {"name": "request_id", "type": "string"}, {"name": "region", "type": "string"},
    {"name": "latency_ms", "type": "double"}, {"name": "session", "type": "string"}]}"#;

fn compile(expression: &str) -> Filter {
    Filter::compile(expression).unwrap_or_else(|error| panic!("{expression}: {error}"))
}

/// Ten filters that differ as the filter-fanout subscribers' do.
fn ten_filters() -> Vec<Filter> {
    (0..10).map(|i| compile(&format!(r#"model_id == "model-{i}" && input_tokens < 100000"#))).collect()
}

/// Evaluations over a payload parsed once beforehand.
fn pre_parsed(c: &mut Criterion) {
    let message = Prepared::new("ai.inference", None, EVENT.as_bytes());
    message.payload().expect("the event is JSON");
    let mut group = c.benchmark_group("pre-parsed");
    group.throughput(Throughput::Elements(1));
    let cases = [
        ("simple", "confidence > 0.85"),
        ("three clauses", r#"model_id == "llama3-70b" && confidence >= 0.9 && input_tokens < 4096"#),
        ("regex", r#"model_id.matches("^llama[0-9]")"#),
        ("interpreter", "int(confidence * 100.0) > 85"),
    ];
    for (name, expression) in cases {
        let filter = compile(expression);
        group.bench_function(name, |b| b.iter(|| black_box(filter.evaluate(black_box(&message)))));
    }
    group.finish();
}

/// Whole messages, parse included: one filter, then ten sharing the parse.
fn per_message(c: &mut Criterion) {
    let filters = ten_filters();
    let mut group = c.benchmark_group("per message");
    group.throughput(Throughput::Elements(1));
    for count in [1, 10] {
        group.bench_function(format!("json, {count} filters"), |b| {
            b.iter(|| {
                let message = Prepared::new("ai.inference", None, black_box(EVENT.as_bytes()));
                filters[..count].iter().filter(|filter| filter.evaluate(&message).matched()).count()
            })
        });
    }
    let (registry, binary) = avro_event();
    let context = Context { registry: Some(&registry), ..Context::default() };
    for count in [1, 10] {
        group.bench_function(format!("avro binary, {count} filters"), |b| {
            b.iter(|| {
                let message = Prepared::new("ai.inference", None, black_box(&binary)).with_context(context);
                filters[..count].iter().filter(|filter| filter.evaluate(&message).matched()).count()
            })
        });
    }
    group.finish();
}

/// The event in Avro binary, Confluent wire format, with a registry that knows its schema.
fn avro_event() -> (Registry, Vec<u8>) {
    use apache_avro::types::Value as Avro;
    let registry = Registry::in_memory();
    let request = SchemaRequest { schema: AVRO_EVENT.into(), schema_type: None, references: vec![] };
    let id = registry.register("inference", &request).expect("register");
    let json: serde_json::Value = serde_json::from_str(EVENT).expect("json");
    let text = |name: &str| Avro::String(json[name].as_str().expect(name).into());
    let record = Avro::Record(vec![
        ("model_id".into(), text("model_id")),
        ("confidence".into(), Avro::Double(0.92)),
        ("input_tokens".into(), Avro::Long(1200)),
        ("output_tokens".into(), Avro::Long(80)),
        ("request_id".into(), text("request_id")),
        ("region".into(), text("region")),
        ("latency_ms".into(), Avro::Double(12.5)),
        ("session".into(), text("session")),
    ]);
    let schema = apache_avro::Schema::parse_str(AVRO_EVENT).expect("schema");
    let body = apache_avro::to_avro_datum(&schema, record).expect("encode");
    (registry, [&[0u8][..], &id.to_be_bytes(), &body].concat())
}

fn config() -> Criterion {
    Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3))
}

criterion_group! { name = benches; config = config(); targets = pre_parsed, per_message }
criterion_main!(benches);
