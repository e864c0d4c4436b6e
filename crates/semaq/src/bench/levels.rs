//! `semaq bench js-pub-levels`: `js-pub` on an L1, an L2 and an L3 stream of one fresh
//! semaq-server, in the same run, so the table shows what each semantic level costs a pipelined
//! publisher.
//!
//! - L1: a plain file stream; messages carry the JSON payload and no headers.
//! - L1+h: the same stream, with the producer headers L3 needs, stored as ordinary headers: the
//!   cost of the bigger messages (client, wire, disk) without any L3 check.
//! - L2: the same, bound to a JSON Schema the bench registers over `$SEMAQ.API.SCHEMA.REGISTER`:
//!   every payload is validated (and lineage records the producer).
//! - L3: the same schema and `semaq.level: 3`; every message carries `Semaq-Producer` and
//!   `Semaq-Producer-Seq`, checked against the producer table (which the server snapshots).
//!
//! Every stream syncs before it acks (L3 always does; the others get the server's default).
//! Rounds alternate the order of the levels; the table shows each level's median rate and the
//! median of the per-round ratios. nats-server has no levels, so this runs against SemaQ only.
//!
//! The bench starts the server itself, so it can also show where the CPU goes: the server's and
//! this client's CPU time per acknowledged message (`/proc/PID/stat`). On a small machine the
//! client shares the cores with the server, and what headers cost the client shows up in every
//! ratio against header-less L1; the level's own cost is the ratio against L1+h.

use std::collections::HashMap;

use anyhow::{bail, Context as _, Result};
use async_nats::jetstream::context::ContextBuilder;
use async_nats::{HeaderName, HeaderValue};
use bytes::Bytes;
use indicatif::ProgressBar;
use semaq_wire::headers::names;

use super::jetstream::{publish_pipelined_with, BenchStream, PublishPlan, ACK_WINDOW};
use super::server::{cpu_per_message, cpu_seconds, ServerSpec};
use super::stats::{format_count, median, median_ratio};
use super::{Load, LoadArgs, Scenario};
use crate::connect::Target;

/// The registry subject the bench registers its schema under.
const SCHEMA_SUBJECT: &str = "semaq-bench-levels";
/// What every payload is: `{"n": <index>, "pad": "xxx..."}`.
const SCHEMA: &str =
    r#"{"type": "object", "properties": {"n": {"type": "integer"}, "pad": {"type": "string"}}, "required": ["n"]}"#;
/// `Semaq-Producer`, made once.
const PRODUCER: HeaderName = HeaderName::from_static(names::PRODUCER);
/// `Semaq-Producer-Seq`, made once.
const PRODUCER_SEQ: HeaderName = HeaderName::from_static(names::PRODUCER_SEQ);
/// Issue 6's target: js-pub on L3 at least this fraction of L1's.
const L3_TARGET_RATIO: f64 = 0.9;
/// How long a publish may wait for its ack, and a request for its answer.
const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Arguments of `semaq bench js-pub-levels`.
#[derive(clap::Args, Debug)]
pub struct LevelsArgs {
    /// Rounds; each publishes to a new stream of every level, alternating the order
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Which levels to run, comma-separated
    #[arg(long, value_enum, value_delimiter = ',', default_value = "l1,l1h,l2,l3")]
    levels: Vec<Level>,
    #[command(flatten)]
    load: LoadArgs,
    /// Print only the table
    #[arg(long, short)]
    quiet: bool,
    /// semaq-server executable [default: semaq-server next to this program]
    #[arg(long, value_name = "PATH")]
    semaq_server: Option<std::path::PathBuf>,
}

/// The semantic levels compared.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// file stream, no headers
    L1,
    /// L1 with L3's producer headers, unchecked
    #[value(name = "l1h")]
    L1Headers,
    /// L1 + JSON Schema validation
    L2,
    /// L2 + producer sequences checked
    L3,
}

const LEVELS: [Level; 4] = [Level::L1, Level::L1Headers, Level::L2, Level::L3];

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::L1 => "L1",
            Level::L1Headers => "L1+h",
            Level::L2 => "L2",
            Level::L3 => "L3",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Level::L1 => "file stream, no headers",
            Level::L1Headers => "L1 with L3's producer headers, unchecked",
            Level::L2 => "L1 + JSON Schema validation",
            Level::L3 => "L2 + producer sequences checked",
        }
    }

    /// The stream metadata that declares the level.
    fn metadata(self) -> HashMap<String, String> {
        let level = match self {
            Level::L1 | Level::L1Headers => return HashMap::new(),
            Level::L2 => "2",
            Level::L3 => "3",
        };
        HashMap::from([
            ("semaq.level".to_string(), level.to_string()),
            ("semaq.schema".to_string(), SCHEMA_SUBJECT.to_string()),
        ])
    }
}

/// What one run on one level measured.
#[derive(Debug, Clone, Copy, Default)]
struct LevelRun {
    /// Acknowledged messages per second.
    rate: f64,
    /// Server CPU seconds per acknowledged message.
    server_cpu: Option<f64>,
    /// This process's CPU seconds per acknowledged message.
    client_cpu: Option<f64>,
}

/// Runs `semaq bench js-pub-levels` on a semaq-server it starts.
pub async fn run(args: LevelsArgs) -> Result<()> {
    let program = match &args.semaq_server {
        Some(path) => path.clone(),
        None => super::compare::default_semaq_server()?,
    };
    let work_dir =
        tempfile::Builder::new().prefix("semaq-bench-levels-").tempdir().context("cannot create a work dir")?;
    let server = ServerSpec::new("semaq", program).start(work_dir.path())?;
    let target = Target::plain(server.url.clone(), ANSWER_TIMEOUT);
    let load = Scenario::JsPub.load(&args.load)?;
    register_schema(&target).await?;
    let mut runs: [Vec<LevelRun>; 4] = Default::default();
    for round in 0..args.rounds {
        let mut order = args.levels.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for level in order {
            let run = publish_to(&target, &load, level, server.pid()).await?;
            if !args.quiet {
                println!("round {}: {} {} msgs/s", round + 1, level.name(), format_count(run.rate.round() as u64));
            }
            runs[level as usize].push(run);
        }
    }
    println!("{}", table(&load, &runs, args.rounds));
    Ok(())
}

async fn register_schema(target: &Target) -> Result<()> {
    let client = target.connect().await?;
    let body = serde_json::json!({"subject": SCHEMA_SUBJECT, "schema": SCHEMA, "schemaType": "JSON"});
    let request = client.request("$SEMAQ.API.SCHEMA.REGISTER", body.to_string().into());
    let reply = tokio::time::timeout(ANSWER_TIMEOUT, request)
        .await
        .context("the schema registry did not answer")?
        .context("cannot register the bench schema (js-pub-levels needs semaq-server)")?;
    let answer: serde_json::Value = serde_json::from_slice(&reply.payload).context("schema registry answer")?;
    if !answer["id"].is_u64() {
        bail!("cannot register the bench schema: {answer}");
    }
    Ok(())
}

/// One `js-pub` run on a new stream of `level`: its rate and CPU costs.
async fn publish_to(target: &Target, load: &Load, level: Level, server_pid: u32) -> Result<LevelRun> {
    let client = target.connect().await?;
    let context = ContextBuilder::new().timeout(ANSWER_TIMEOUT).build(client);
    let stream = BenchStream::create_in(context, level.name(), level.metadata()).await?;
    let plan = PublishPlan { msgs: load.msgs, size: load.size, deadline: Some(load.duration) };
    let producer = format!("semaq-bench-{}", std::process::id());
    let message = |index: u64| {
        let headers = matches!(level, Level::L1Headers | Level::L3).then(|| {
            // Names made once and values handed over owned: the cheapest way async-nats offers.
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(PRODUCER, HeaderValue::from(producer.clone()));
            headers.insert(PRODUCER_SEQ, HeaderValue::from((index + 1).to_string()));
            headers
        });
        (headers, payload(index, load.size))
    };
    let cpu = || (cpu_seconds(server_pid), cpu_seconds(std::process::id()));
    let before = cpu();
    let published = publish_pipelined_with(&stream, &plan, &ProgressBar::hidden(), message).await;
    let after = cpu();
    let stored = stream.stored_messages().await.ok();
    stream.delete().await;
    let published = published?;
    let problems = published.problems(stored);
    if !problems.is_empty() {
        bail!("{} run failed: {}", level.name(), problems.join("; "));
    }
    let seconds = published.elapsed.as_secs_f64();
    Ok(LevelRun {
        rate: if seconds > 0.0 { published.acked as f64 / seconds } else { 0.0 },
        server_cpu: cpu_per_message(before.0, after.0, published.acked),
        client_cpu: cpu_per_message(before.1, after.1, published.acked),
    })
}

/// `{"n": index, "pad": "xx..."}`, padded to `size` bytes when that is long enough.
fn payload(index: u64, size: usize) -> Bytes {
    let head = format!(r#"{{"n":{index},"pad":""#);
    let pad = size.saturating_sub(head.len() + 2);
    let mut text = String::with_capacity(head.len() + pad + 2);
    text.push_str(&head);
    text.extend(std::iter::repeat_n('x', pad));
    text.push_str("\"}");
    Bytes::from(text)
}

/// The result table: each level's median rate, its median per-round ratios to L1, L1+h and L2,
/// and the median server and client CPU per message; then the L3 target line.
fn table(load: &Load, runs: &[Vec<LevelRun>; 4], rounds: u32) -> String {
    let rates = |level: Level| runs[level as usize].iter().map(|run| run.rate).collect::<Vec<_>>();
    let micros = |values: Vec<f64>| median(&values).map_or_else(|| "-".to_string(), |cpu| format!("{:.2}", cpu * 1e6));
    let mut lines = vec![
        format!(
            "js-pub-levels: JetStream publish, {ACK_WINDOW} acks outstanding, {} B payloads, {rounds} rounds (medians)",
            load.size
        ),
        format!(
            "  {:<5} {:<42} {:>10} {:>7} {:>7} {:>7} {:>11} {:>11}",
            "level", "", "msgs/s", "vs L1", "vs L1+h", "vs L2", "server µs", "client µs"
        ),
    ];
    let ratio = |level: Level, base: Level| median_ratio(&rates(level), &rates(base));
    let shown = |ratio: Option<f64>| ratio.map_or_else(|| "-".to_string(), |ratio| format!("{ratio:.2}×"));
    for level in LEVELS.into_iter().filter(|level| !runs[*level as usize].is_empty()) {
        let own = &runs[level as usize];
        let rate = median(&rates(level)).map_or_else(|| "-".to_string(), |rate| format_count(rate.round() as u64));
        lines.push(format!(
            "  {:<5} {:<42} {:>10} {:>7} {:>7} {:>7} {:>11} {:>11}",
            level.name(),
            level.describe(),
            rate,
            shown(ratio(level, Level::L1)),
            shown(ratio(level, Level::L1Headers)),
            shown(ratio(level, Level::L2)),
            micros(own.iter().filter_map(|run| run.server_cpu).collect()),
            micros(own.iter().filter_map(|run| run.client_cpu).collect()),
        ));
    }
    if let Some(same_messages) = ratio(Level::L3, Level::L1Headers) {
        let verdict = if same_messages >= L3_TARGET_RATIO { "meets" } else { "below" };
        lines.push(format!(
            "  L3 / L1 with the same messages: {same_messages:.2}× ({verdict} the {L3_TARGET_RATIO}× target); \
             against header-less L1: {} (the headers' cost, mostly the client's: see client µs)",
            shown(ratio(Level::L3, Level::L1))
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_json_of_the_asked_size() {
        for (index, size) in [(0, 128), (12_345, 128), (7, 10)] {
            let bytes = payload(index, size);
            let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(value["n"], index);
            if size >= 30 {
                assert_eq!(bytes.len(), size);
            }
        }
    }
}
