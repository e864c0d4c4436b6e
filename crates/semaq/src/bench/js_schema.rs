//! `js-pub-schema` in `semaq bench compare`: js-pub (1,000 acks outstanding, default durability)
//! to streams bound to a schema (L2) against the same stream without one, in the same run.
//!
//! Each measurement publishes the AI event `{"model_id":"llama3-70b","confidence":0.92,"input_tokens":128}`
//! to five fresh streams in turn: no schema (JSON payload), an L2 stream bound to a JSON Schema,
//! one bound to an Avro schema (Avro's JSON encoding), no schema with the Avro binary payload in
//! Confluent's wire format, and the Avro-bound stream with that binary payload. nats-server has
//! no registry: on it every stream is plain, which gives the table's reference figures.
//!
//! The ratios L2 / no schema (same payload) are the target (≥ 0.8×). The validation cost comes
//! from the server's CPU time (`/proc/PID/stat`, user + system) per acknowledged message on the
//! L2 stream minus the same on the plain one; its inverse is validations per second per core.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use async_nats::jetstream::context::ContextBuilder;
use bytes::Bytes;
use indicatif::ProgressBar;
use semaq_wire::clock;
use serde_json::{json, Value};

use super::jetstream::{publish_payload_pipelined, BenchStream, PublishPlan};
use super::server::{cpu_per_message, cpu_seconds};
use super::Load;
use crate::connect::Target;

/// The event every variant publishes, as JSON.
pub const EVENT_JSON: &[u8] = br#"{"model_id":"llama3-70b","confidence":0.92,"input_tokens":128}"#;
/// How long a publish may wait for its ack, and a registry request for its answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One stream and payload the measurement publishes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// No schema, JSON payload.
    Plain,
    /// Bound to a JSON Schema, JSON payload.
    JsonSchema,
    /// Bound to an Avro schema, Avro's JSON encoding.
    AvroJson,
    /// No schema, the Avro binary wire-format payload.
    PlainBinary,
    /// Bound to the Avro schema, Avro binary in Confluent's wire format.
    AvroBinary,
}

/// In measuring order; the table's rows for this entry.
pub const VARIANTS: [Variant; 5] =
    [Variant::Plain, Variant::JsonSchema, Variant::AvroJson, Variant::PlainBinary, Variant::AvroBinary];

impl Variant {
    /// The row label.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::JsonSchema => "json-schema",
            Variant::AvroJson => "avro-json",
            Variant::PlainBinary => "plain-bin",
            Variant::AvroBinary => "avro-bin",
        }
    }

    /// The schema-less variant with the same payload, for ratios.
    pub fn baseline(self) -> Variant {
        match self {
            Variant::AvroBinary | Variant::PlainBinary => Variant::PlainBinary,
            _ => Variant::Plain,
        }
    }

    fn binary(self) -> bool {
        matches!(self, Variant::PlainBinary | Variant::AvroBinary)
    }
}

/// What one variant measured.
#[derive(Debug, Clone, Copy)]
pub struct VariantRun {
    /// Acknowledged messages per second.
    pub rate: f64,
    /// Server CPU seconds per acknowledged message, when the server's process could be read.
    pub cpu_per_message: Option<f64>,
}

/// Per-round server CPU costs on semaq, to turn into validations per second per core.
#[derive(Debug, Default)]
pub struct Tally {
    rounds: Vec<[Option<f64>; 5]>,
}

impl Tally {
    /// Rounds kept so far.
    pub fn len(&self) -> usize {
        self.rounds.len()
    }

    /// Keeps one round's CPU figures.
    pub fn add(&mut self, runs: &[VariantRun; 5]) {
        self.rounds.push(runs.map(|run| run.cpu_per_message));
    }

    /// Median extra server CPU per message of `variant` over its baseline, in seconds.
    fn validation_cost(&self, variant: Variant) -> Option<f64> {
        let index = |v: Variant| VARIANTS.iter().position(|x| *x == v).unwrap_or(0);
        let mut costs: Vec<f64> = self
            .rounds
            .iter()
            .filter_map(|round| Some(round[index(variant)]? - round[index(variant.baseline())]?))
            .collect();
        costs.sort_by(f64::total_cmp);
        costs.get(costs.len() / 2).copied()
    }
}

/// The schema summary after the table: L2 / no-schema ratios (medians of per-round ratios of
/// semaq's figures, `rates` per variant in [`VARIANTS`] order) and validations per second per core.
pub fn summary(rates: &[Vec<f64>; 5], tally: &Tally) -> Vec<String> {
    let mut lines =
        vec!["js-pub-schema on semaq, L2 stream / the same stream without a schema (target ≥ 0.80×):".to_string()];
    for (index, variant) in VARIANTS.iter().enumerate() {
        if variant.baseline() == *variant {
            continue;
        }
        let baseline = &rates[VARIANTS.iter().position(|v| *v == variant.baseline()).unwrap_or(0)];
        let mut ratios: Vec<f64> =
            rates[index].iter().zip(baseline).filter(|(_, b)| **b > 0.0).map(|(l2, b)| l2 / b).collect();
        ratios.sort_by(f64::total_cmp);
        let ratio = ratios.get(ratios.len() / 2).map_or("-".to_string(), |r| format!("{r:.2}×"));
        let verdict = ratios.get(ratios.len() / 2).map_or("", |r| if *r >= 0.8 { "" } else { "  (below target)" });
        let cost = match tally.validation_cost(*variant) {
            Some(seconds) if seconds > 0.0 => format!(
                "validation {:.2} µs of server CPU per message ≈ {:.2} M validations/s per core",
                seconds * 1e6,
                1e-6 / seconds
            ),
            Some(_) => "validation cost below the CPU-time resolution".to_string(),
            None => "server CPU not measured".to_string(),
        };
        lines.push(format!("  {:<12} {ratio}{verdict}; {cost}", variant.name()));
    }
    lines
}

/// Publishes to every variant's stream once on the server at `target`, in [`VARIANTS`] order or
/// (`reverse`, every other round) the opposite, so drift during a round favours no variant. With
/// `schemas` false (nats-server) every stream is plain. `pid` is the server's, for its CPU time.
/// The runs come back in [`VARIANTS`] order.
pub async fn measure(
    target: &Target,
    load: &Load,
    schemas: bool,
    pid: Option<u32>,
    reverse: bool,
) -> Result<[VariantRun; 5]> {
    let client = target.connect().await?;
    // Now in nanoseconds names this run apart from concurrent benches on the same server.
    let unique = clock::unix_nanos_now();
    let subjects = [format!("semaq-bench-json-{unique}"), format!("semaq-bench-avro-{unique}")];
    let avro_id = if schemas {
        register(&client, &subjects[0], &json_schema(), "JSON").await?;
        register(&client, &subjects[1], &avro_schema(), "AVRO").await?
    } else {
        1
    };
    let mut runs: Vec<(usize, VariantRun)> = Vec::with_capacity(VARIANTS.len());
    let mut order: Vec<(usize, Variant)> = VARIANTS.into_iter().enumerate().collect();
    if reverse {
        order.reverse();
    }
    for (index, variant) in order {
        let bound = match variant {
            Variant::JsonSchema => Some(subjects[0].as_str()),
            Variant::AvroJson | Variant::AvroBinary => Some(subjects[1].as_str()),
            Variant::Plain | Variant::PlainBinary => None,
        };
        let payload = if variant.binary() { avro_wire(avro_id) } else { Bytes::from_static(EVENT_JSON) };
        runs.push((index, run_variant(&client, variant, bound.filter(|_| schemas), payload, load, pid).await?));
    }
    runs.sort_by_key(|(index, _)| *index);
    if schemas {
        for subject in &subjects {
            // Best effort: a leftover subject only takes space on a bench server.
            let _ = call(&client, "DELETE", json!({"subject": subject})).await;
            let _ = call(&client, "DELETE", json!({"subject": subject, "permanent": true})).await;
        }
    }
    let runs: Vec<VariantRun> = runs.into_iter().map(|(_, run)| run).collect();
    runs.try_into().map_err(|_| anyhow!("a variant was not measured"))
}

async fn run_variant(
    client: &async_nats::Client,
    variant: Variant,
    schema: Option<&str>,
    payload: Bytes,
    load: &Load,
    pid: Option<u32>,
) -> Result<VariantRun> {
    let stream = create_stream(client, variant, schema).await?;
    let plan = PublishPlan { msgs: load.msgs, size: payload.len(), deadline: Some(load.duration) };
    let cpu_before = pid.and_then(cpu_seconds);
    let published = publish_payload_pipelined(&stream, &plan, payload, &ProgressBar::hidden()).await;
    let cpu_after = pid.and_then(cpu_seconds);
    let stored = stream.stored_messages().await.ok();
    stream.delete().await;
    let published = published?;
    let problems = published.problems(stored);
    if !problems.is_empty() {
        bail!("{}: {}", variant.name(), problems.join("; "));
    }
    let seconds = published.elapsed.as_secs_f64();
    let rate = if seconds > 0.0 { published.acked as f64 / seconds } else { 0.0 };
    let cpu_per_message = cpu_per_message(cpu_before, cpu_after, published.acked);
    Ok(VariantRun { rate, cpu_per_message })
}

async fn create_stream(client: &async_nats::Client, variant: Variant, schema: Option<&str>) -> Result<BenchStream> {
    let context = ContextBuilder::new().timeout(REQUEST_TIMEOUT).build(client.clone());
    let mut metadata = HashMap::new();
    if let Some(schema) = schema {
        metadata.insert("semaq.level".to_string(), "2".to_string());
        metadata.insert("semaq.schema".to_string(), schema.to_string());
    }
    BenchStream::create_in(context, &format!("SCHEMA_{}", variant.name()), metadata).await
}

fn json_schema() -> Value {
    json!({"type": "object", "properties": {"model_id": {"type": "string"}, "confidence": {"type": "number"},
        "input_tokens": {"type": "integer"}}, "required": ["model_id", "confidence"]})
}

fn avro_schema() -> Value {
    json!({"type": "record", "name": "AiEvent", "namespace": "semaq.bench", "fields": [
        {"name": "model_id", "type": "string"}, {"name": "confidence", "type": "double"},
        {"name": "input_tokens", "type": "int"}]})
}

/// The event in Confluent's wire format: byte 0, the schema id, then the Avro binary datum.
pub fn avro_wire(schema_id: u32) -> Bytes {
    let mut bytes = vec![0];
    bytes.extend_from_slice(&schema_id.to_be_bytes());
    bytes.push(20); // "llama3-70b": length 10, zigzag
    bytes.extend_from_slice(b"llama3-70b");
    bytes.extend_from_slice(&0.92f64.to_le_bytes());
    bytes.extend_from_slice(&[0x80, 0x02]); // 128, zigzag varint
    Bytes::from(bytes)
}

async fn register(client: &async_nats::Client, subject: &str, schema: &Value, schema_type: &str) -> Result<u32> {
    let answer =
        call(client, "REGISTER", json!({"subject": subject, "schema": schema.to_string(), "schemaType": schema_type}))
            .await
            .with_context(|| format!("cannot register the bench schema {subject}"))?;
    answer["id"].as_u64().and_then(|id| u32::try_from(id).ok()).ok_or_else(|| anyhow!("no schema id in {answer}"))
}

async fn call(client: &async_nats::Client, operation: &str, body: Value) -> Result<Value> {
    let request = async_nats::Request::new().payload(body.to_string().into()).timeout(Some(REQUEST_TIMEOUT));
    let reply = client
        .send_request(format!("$SEMAQ.API.SCHEMA.{operation}"), request)
        .await
        .map_err(|error| anyhow!("schema registry request {operation} failed: {error}"))?;
    let answer: Value = serde_json::from_slice(&reply.payload).context("the registry's answer is not JSON")?;
    if let Some(code) = answer.get("error_code") {
        bail!("{} (error_code {code})", answer["message"].as_str().unwrap_or("?"));
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_validation_costs_are_medians_per_variant() {
        let rates = [
            vec![100.0, 200.0, 100.0],
            vec![90.0, 100.0, 95.0],
            vec![80.0, 160.0, 70.0],
            vec![100.0; 3],
            vec![99.0; 3],
        ];
        let run = |cpu: f64| VariantRun { rate: 0.0, cpu_per_message: Some(cpu) };
        let mut tally = Tally::default();
        tally.add(&[run(10e-6), run(11e-6), run(12e-6), run(9e-6), run(9.5e-6)]);
        let lines = summary(&rates, &tally);
        assert!(lines[1].contains("json-schema") && lines[1].contains("0.90×"), "{lines:?}");
        assert!(lines[1].contains("1.00 µs") && lines[1].contains("1.00 M validations/s per core"), "{lines:?}");
        assert!(lines[2].contains("0.80×") && !lines[2].contains("below"), "{lines:?}");
        assert!(lines[3].contains("avro-bin") && lines[3].contains("0.99×"), "{lines:?}");
        assert_eq!(lines.len(), 4, "plain rows are baselines, not lines");
    }

    #[test]
    fn the_wire_payload_names_its_schema() {
        let wire = avro_wire(7);
        assert_eq!(&wire[..5], &[0, 0, 0, 0, 7]);
        assert_eq!(wire.len(), 5 + 1 + 10 + 8 + 2);
    }
}
