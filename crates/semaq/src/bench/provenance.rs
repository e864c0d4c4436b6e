//! `semaq bench provenance`: what level 4 costs. On one fresh semaq-server, alternating rounds
//! publish the same messages (event time, `traceparent`, `Semaq-Session`, a small JSON payload)
//! to a level 1 stream and to a level 4 stream (schema check, event time order, hash chain,
//! checkpoints), 1,000 acks outstanding, and print acked msgs/s per round and the median L4/L1
//! ratio (the target is ≥ 0.7). Then it fills a level 4 stream and times `semaq verify` on it,
//! online through the server and offline on its files once the server is stopped.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use async_nats::jetstream::context::{Context, ContextBuilder};
use async_nats::HeaderMap;
use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use semaq_wire::headers::names;
use serde_json::json;

use super::jetstream::{BenchStream, ACK_WINDOW};
use super::server::ServerSpec;
use super::stats::{format_count, median, median_ratio};
use crate::connect::Target;

/// How long a publish may wait for its ack, and a request for its answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The registry subject the level 4 streams are bound to.
const SCHEMA_SUBJECT: &str = "semaq-bench-event";
/// Longer than a checkpoint interval, so a filled stream is signed before it is verified.
const CHECKPOINT_WAIT: Duration = Duration::from_millis(300);
/// The payload every message carries (valid for the bench schema).
const PAYLOAD: &str = r#"{"model_id":"llama3-70b","confidence":0.92,"input_tokens":128}"#;

/// Arguments of `semaq bench provenance`.
#[derive(clap::Args, Debug)]
pub struct ProvenanceArgs {
    /// Rounds; each publishes to both streams, alternating which goes first
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Messages each publishing run sends
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    msgs: u64,
    /// Messages in the stream `semaq verify` is timed on (0: skip)
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    verify_msgs: u64,
    /// semaq-server executable [default: semaq-server next to this program]
    #[arg(long, value_name = "PATH")]
    semaq_server: Option<PathBuf>,
}

/// Which stream a run publishes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    L1,
    L4,
}

/// Runs the benchmark.
pub async fn run(args: ProvenanceArgs) -> Result<()> {
    let program = match &args.semaq_server {
        Some(path) => path.clone(),
        None => super::compare::default_semaq_server()?,
    };
    let work_dir = tempfile::Builder::new().prefix("semaq-bench-l4-").tempdir().context("cannot create a work dir")?;
    let mut server = ServerSpec::new("semaq", program).start(work_dir.path())?;
    let target = Target::plain(server.url.clone(), REQUEST_TIMEOUT);
    let client = target.connect().await?;
    register_schema(&client).await?;
    let context = ContextBuilder::new().timeout(REQUEST_TIMEOUT).build(client);
    println!(
        "provenance: js-pub, level 4 vs level 1 stream, same messages (3 headers, {} B JSON), window {ACK_WINDOW} acks, fsync before ack, {} msgs per run",
        PAYLOAD.len(),
        format_count(args.msgs)
    );
    let (mut l1, mut l4) = (Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        let order = if round % 2 == 1 { [Level::L1, Level::L4] } else { [Level::L4, Level::L1] };
        for level in order {
            let rate = publish_run(&context, level, &format!("R{round}"), args.msgs, false).await?.1;
            match level {
                Level::L1 => l1.push(rate),
                Level::L4 => l4.push(rate),
            }
        }
        let ratio = l4[l4.len() - 1] / l1[l1.len() - 1];
        println!(
            "round {round}  L1 {:>12} msgs/s  L4 {:>12} msgs/s  L4/L1 {ratio:.2}",
            rate(l1[l1.len() - 1]),
            rate(l4[l4.len() - 1])
        );
    }
    let ratio = median_ratio(&l4, &l1).unwrap_or(0.0);
    let show = |values: &[f64]| median(values).map_or("-".into(), rate);
    println!(
        "median   L1 {:>12} msgs/s  L4 {:>12} msgs/s  L4/L1 {ratio:.2} (median of per-round ratios)",
        show(&l1),
        show(&l4)
    );
    if args.verify_msgs > 0 {
        let (name, fill_rate) = publish_run(&context, Level::L4, "VERIFY", args.verify_msgs, true).await?;
        tokio::time::sleep(CHECKPOINT_WAIT).await;
        println!("verify: filled {} messages at {} msgs/s", format_count(args.verify_msgs), rate(fill_rate));
        let started = Instant::now();
        let online = crate::verify::online(&target, &name, 0, None).await?;
        report_verify("online ", online, started.elapsed())?;
        drop(context);
        server.terminate(Duration::from_secs(30))?;
        let started = Instant::now();
        let offline = crate::verify::offline(server.store_dir(), &name, 0, None)?;
        report_verify("offline", offline, started.elapsed())?;
    }
    Ok(())
}

fn rate(value: f64) -> String {
    format_count(value.max(0.0).round() as u64)
}

fn report_verify(how: &str, outcome: crate::verify::Outcome, elapsed: Duration) -> Result<()> {
    if let Err(found) = &outcome.result {
        bail!("verify {how} found a break in the bench stream: {found}");
    }
    let per_second = outcome.verified as f64 / elapsed.as_secs_f64().max(f64::EPSILON);
    println!(
        "verify {how}: {} messages in {:.2} s, {} msgs/s",
        format_count(outcome.verified),
        elapsed.as_secs_f64(),
        rate(per_second)
    );
    Ok(())
}

async fn register_schema(client: &async_nats::Client) -> Result<()> {
    let schema = json!({"type": "object", "properties": {"model_id": {"type": "string"}}, "required": ["model_id"]});
    let body = json!({"subject": SCHEMA_SUBJECT, "schema": schema.to_string(), "schemaType": "JSON"});
    let reply =
        client.request("$SEMAQ.API.SCHEMA.REGISTER", body.to_string().into()).await.context("schema register")?;
    let answer: serde_json::Value = serde_json::from_slice(&reply.payload).context("schema register answer")?;
    if !answer["id"].is_u64() {
        bail!("cannot register the bench schema: {answer}");
    }
    Ok(())
}

/// Creates a stream, publishes `msgs` pipelined and returns (stream name, acked msgs/s); the
/// stream is deleted afterwards unless `keep`.
async fn publish_run(context: &Context, level: Level, tag: &str, msgs: u64, keep: bool) -> Result<(String, f64)> {
    let mut metadata = HashMap::new();
    if level == Level::L4 {
        metadata.insert("semaq.level".to_string(), "4".to_string());
        metadata.insert("semaq.schema".to_string(), SCHEMA_SUBJECT.to_string());
    }
    let BenchStream { name, subject, .. } =
        BenchStream::create_in(context.clone(), &format!("{level:?}_{tag}"), metadata).await?;
    let outcome = publish_pipelined(context, &subject, msgs).await;
    if !keep {
        let _ = context.delete_stream(&name).await;
    }
    let (acked, elapsed) = outcome?;
    if acked != msgs {
        bail!("{name}: {acked} of {msgs} publishes acknowledged");
    }
    Ok((name, acked as f64 / elapsed.as_secs_f64().max(f64::EPSILON)))
}

/// Publishes with up to [`ACK_WINDOW`] acks outstanding; returns positive acks and the time taken.
async fn publish_pipelined(context: &Context, subject: &str, msgs: u64) -> Result<(u64, Duration)> {
    let payload = Bytes::from_static(PAYLOAD.as_bytes());
    let mut in_flight = FuturesUnordered::new();
    let (mut acked, mut first_failure) = (0u64, None);
    let mut record = |result: Result<_, async_nats::jetstream::context::PublishError>| match result {
        Ok(_) => acked += 1,
        Err(error) => {
            first_failure.get_or_insert(error.to_string());
        }
    };
    let started = Instant::now();
    for n in 1..=msgs {
        while let Some(Some(result)) = in_flight.next().now_or_never() {
            record(result);
        }
        while in_flight.len() >= ACK_WINDOW {
            match in_flight.next().await {
                Some(result) => record(result),
                None => break,
            }
        }
        let mut headers = HeaderMap::new();
        headers.insert(names::EVENT_TIME, n.to_string().as_str());
        headers.insert(names::TRACEPARENT, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        headers.insert(names::SESSION, "bench-session");
        let ack = context
            .publish_with_headers(subject.to_string(), headers, payload.clone())
            .await
            .context("cannot publish")?;
        in_flight.push(async move { ack.await });
    }
    while let Some(result) = in_flight.next().await {
        record(result);
    }
    let elapsed = started.elapsed();
    if let Some(failure) = first_failure {
        bail!("{} of {msgs} publishes failed; first: {failure}", msgs - acked);
    }
    Ok((acked, elapsed))
}
