//! Measures L2 validation: validations per second on one core for each format and encoding,
//! and end to end, JetStream publishes (async-nats, acks awaited in windows) to a stream with
//! and without a bound schema, on an in-process server.
//!
//! `cargo run --release -p semaq-server --example schema_validation [messages]`

use std::time::{Duration, Instant};

use semaq_registry::types::SchemaRequest;
use semaq_registry::Registry;
use semaq_server::options::Options;
use serde_json::json;

const JSON_EVENT: &[u8] = br#"{"model_id":"llama3-70b","confidence":0.92,"input_tokens":128}"#;

fn request(schema: String, schema_type: &str) -> SchemaRequest {
    SchemaRequest { schema, schema_type: Some(schema_type.into()), references: vec![] }
}

fn schemas() -> Vec<(&'static str, SchemaRequest)> {
    let avro = json!({"type": "record", "name": "AiEvent", "fields": [
        {"name": "model_id", "type": "string"}, {"name": "confidence", "type": "double"},
        {"name": "input_tokens", "type": "int"}]});
    let json_schema = json!({"type": "object", "properties": {"model_id": {"type": "string"},
        "confidence": {"type": "number"}, "input_tokens": {"type": "integer"}}, "required": ["model_id", "confidence"]});
    let proto =
        "syntax = \"proto3\";\nmessage AiEvent { string model_id = 1; double confidence = 2; int32 input_tokens = 3; }";
    vec![
        ("avro", request(avro.to_string(), "AVRO")),
        ("json-schema", request(json_schema.to_string(), "JSON")),
        ("protobuf", request(proto.into(), "PROTOBUF")),
    ]
}

/// Avro binary of the JSON event: "llama3-70b", 0.92, 128.
fn avro_binary() -> Vec<u8> {
    let mut bytes = vec![20];
    bytes.extend_from_slice(b"llama3-70b");
    bytes.extend_from_slice(&0.92f64.to_le_bytes());
    bytes.extend_from_slice(&[0x80, 0x02]);
    bytes
}

fn per_core(count: usize) {
    let registry = Registry::in_memory();
    for (name, schema) in schemas() {
        let id = registry.register(name, &schema).expect("register");
        let parsed = registry.parsed(id).expect("parsed");
        let started = Instant::now();
        for _ in 0..count {
            let value: serde_json::Value = serde_json::from_slice(JSON_EVENT).expect("json");
            parsed.validate_json(&value).expect("valid");
        }
        report(&format!("{name}, JSON payload (parse + validate)"), count, started.elapsed(), "validations");
        if name == "avro" {
            let binary = avro_binary();
            let started = Instant::now();
            for _ in 0..count {
                parsed.validate_binary(&binary).expect("valid");
            }
            report("avro, binary datum", count, started.elapsed(), "validations");
        }
    }
}

fn report(what: &str, count: usize, took: Duration, unit: &str) {
    println!("{what:<45} {:>10.0} {unit}/s", count as f64 / took.as_secs_f64());
}

async fn end_to_end(count: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let options =
        Options { port: 0, http_port: None, jetstream: true, store_dir: dir.path().into(), ..Options::default() };
    let server = semaq_server::server::Server::bind(options).await.expect("bind");
    let url = format!("nats://{}", server.client_addr().expect("address"));
    tokio::spawn(server.run(std::future::pending()));
    let client = async_nats::connect(url).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    for (name, schema) in schemas() {
        register_over_nats(&js.client(), name, &schema).await;
    }
    let mut runs = vec![("no schema", None)];
    runs.extend(schemas().into_iter().map(|(name, _)| (name, Some(name))));
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    // Interleaved rounds, so drift on a shared machine hits every variant alike; medians reported.
    for round in 0..ROUNDS {
        for (index, (label, subject)) in runs.iter().enumerate() {
            let name = format!("BENCH_{}_{round}", label.replace([' ', '-'], "_").to_uppercase());
            create_stream(&js, &name, *subject).await;
            let started = Instant::now();
            publish_all(&js, &name, count).await;
            rates[index].push(count as f64 / started.elapsed().as_secs_f64());
        }
    }
    let baseline = median(&mut rates[0].clone());
    for ((label, _), samples) in runs.iter().zip(rates.iter_mut()) {
        let rate = median(samples);
        println!("js-pub, {label:<12} JSON payload, median of {ROUNDS} {rate:>10.0} msgs/s  {:.2}x", rate / baseline);
    }
}

/// Interleaved rounds of the end-to-end measurement.
const ROUNDS: usize = 5;

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

async fn create_stream(js: &async_nats::jetstream::Context, name: &str, subject: Option<&str>) {
    let mut metadata = std::collections::HashMap::new();
    if let Some(subject) = subject {
        metadata.insert("semaq.level".to_string(), "2".to_string());
        metadata.insert("semaq.schema".to_string(), subject.to_string());
    }
    let config = async_nats::jetstream::stream::Config {
        name: name.into(),
        subjects: vec![format!("{name}.>")],
        metadata,
        ..Default::default()
    };
    js.create_stream(config).await.expect("stream");
}

async fn publish_all(js: &async_nats::jetstream::Context, name: &str, count: usize) {
    let mut window = Vec::with_capacity(256);
    for _ in 0..count {
        window.push(js.publish(format!("{name}.e"), JSON_EVENT.into()).await.expect("publish"));
        if window.len() == 256 {
            for ack in window.drain(..) {
                ack.await.expect("ack");
            }
        }
    }
    for ack in window.drain(..) {
        ack.await.expect("ack");
    }
}

/// Registers a schema over `$SEMAQ.API.SCHEMA.REGISTER`.
async fn register_over_nats(client: &async_nats::Client, subject: &str, schema: &SchemaRequest) {
    let body = json!({"subject": subject, "schema": schema.schema, "schemaType": schema.schema_type});
    let reply = client.request("$SEMAQ.API.SCHEMA.REGISTER", body.to_string().into()).await.expect("request");
    let answer: serde_json::Value = serde_json::from_slice(&reply.payload).expect("json");
    assert!(answer["id"].is_u64(), "{answer}");
}

#[tokio::main]
async fn main() {
    let count: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(200_000);
    per_core(count);
    end_to_end(count / 8).await;
}
