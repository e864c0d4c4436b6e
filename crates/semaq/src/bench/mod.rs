//! `semaq bench`: load scenarios against any NATS URL, and `compare` of semaq-server with nats-server.
//!
//! `flow.rs` runs the publisher/subscriber scenarios, `latency.rs` the request/reply one, `jetstream.rs` the
//! JetStream publish and consume ones, `stats.rs` formats numbers, `compare.rs` runs both servers side by
//! side with `server.rs` starting them, `idle.rs` measuring memory per idle connection, `js_store.rs`
//! memory with a million stored messages and the restart time, `js_schema.rs` js-pub to streams bound to
//! a schema against the same stream without one, `disk.rs` probing the fsync latency the durable
//! figures depend on, `levels.rs` js-pub on L1, L2 and L3 streams side by side, and `provenance.rs` the
//! cost of level 4 and `semaq verify`'s speed. The agent network's benches: `intent_rr.rs` (intent
//! routing against a queue group, the server and the clients on CPUs of their own by `cpus.rs`) and `adapt.rs` (traffic shifting off a failing or slow agent and
//! back, plotted by `plot.rs`), on a server and SDK agents from `agent_net.rs`. `ws.rs` compares pubsub over
//! WebSocket with pubsub over TCP on one server, with async-nats and with the lean client of `wire_client.rs`. `scale.rs` draws cost curves (subscriptions, stored
//! messages, idle connections, filters) of both servers.

mod adapt;
mod agent_net;
mod compare;
mod cpus;
mod disk;
mod filter_fanout;
mod flow;
mod idle;
mod intent_rr;
mod jetstream;
mod js_schema;
mod js_store;
mod kv_obj;
mod latency;
mod levels;
mod observe;
mod pipeline;
mod plot;
mod provenance;
mod scale;
pub(crate) mod server;
mod stats;
mod wire_client;
mod ws;

pub(crate) use compare::default_semaq_server;

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::{bail, Result};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};

use crate::connect::Target;
use crate::parse::parse_duration;
use stats::{format_count, format_percentiles};

/// Arguments of `semaq bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(clap::Subcommand, Debug)]
enum BenchCommand {
    /// 1 publisher → 1 subscriber: messages received per second
    Pubsub(RunArgs),
    /// 1 publisher → 8 subscribers, each on its own connection: deliveries per second in total
    Fanout(RunArgs),
    /// Request/reply round trips to a responder on another connection: latency percentiles
    Latency(RunArgs),
    /// 1 publisher → a queue group of 4: deliveries per second, each message delivered exactly once
    Queue(RunArgs),
    /// JetStream publish to a file stream, 1,000 acks outstanding: acked messages per second
    JsPub(RunArgs),
    /// js-pub on an L1, an L2 (schema) and an L3 (producer sequences) stream of semaq-server, with ratios
    JsPubLevels(levels::LevelsArgs),
    /// As js-pub, with the stream's metadata semaq.sync=never (SemaQ acks without fsync)
    JsPubNosync(RunArgs),
    /// JetStream publish, one at a time: ack latency percentiles
    JsPubSync(RunArgs),
    /// As js-pub-sync, with the stream's metadata semaq.sync=never
    JsPubSyncNosync(RunArgs),
    /// Durable pull consumer with explicit acks on a pre-filled file stream: messages per second
    JsConsume(RunArgs),
    /// As js-consume on a work-queue stream (each ack removes its message), default durability
    JsConsumeWq(RunArgs),
    /// js-pub while a durable pull consumer takes and acks each message: consumed msgs/s, publish→receive latency
    JsPipeline(RunArgs),
    /// Start nats-server and semaq-server and run scenarios against both, alternately
    Compare(compare::CompareArgs),
    /// 1 publisher → 10 subscribers filtering 10% each: CEL on semaq-server vs serde_json in nats clients
    FilterFanout(filter_fanout::FilterFanoutArgs),
    /// js-pub on a level 4 stream vs a level 1 stream (ratio), and `semaq verify` msgs/s, on a fresh semaq-server
    Provenance(provenance::ProvenanceArgs),
    /// Request/reply through intent routing to 4 SDK agents vs a queue group of 4: p50, p99, req/s, ratios
    IntentRr(intent_rr::IntentRrArgs),
    /// 4 agents on intent.adapt, one failing then one slow: per-second shares, PASS/FAIL, a PNG plot
    Adapt(adapt::AdaptArgs),
    /// pubsub and js-pub on a plain semaq-server vs one exporting traces (1%) and scraped for metrics: ratios
    Observe(observe::ObserveArgs),
    /// pubsub with publisher and subscriber over TCP or WebSocket, on semaq-server and nats-server
    Ws(ws::WsArgs),
    /// Cost curves vs nats-server: subscriptions, stored messages, idle connections, CEL filters; PNGs
    Scale(scale::ScaleArgs),
}

/// Arguments of a single scenario run.
#[derive(clap::Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// No progress bar
    #[arg(long, short)]
    quiet: bool,
}

/// How much load a scenario applies.
#[derive(clap::Args, Debug, Clone)]
pub struct LoadArgs {
    /// Messages to publish (or round trips for latency) [default: per scenario]
    #[arg(long)]
    msgs: Option<u64>,
    /// Payload size in bytes
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// Stop publishing after this long even if --msgs is not reached
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    duration: Duration,
}

/// The load of one run, with the scenario's defaults filled in.
#[derive(Debug, Clone)]
pub struct Load {
    /// Messages to publish, or round trips to make.
    pub msgs: u64,
    /// Payload size in bytes.
    pub size: usize,
    /// Cap on the publishing phase.
    pub duration: Duration,
}

/// The measured load scenarios; `compare` runs the same ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// One publisher, one subscriber.
    Pubsub,
    /// One publisher, eight subscribers on separate connections.
    Fanout,
    /// Sequential request/reply.
    Latency,
    /// One publisher, a queue group of four.
    Queue,
    /// Pipelined acknowledged JetStream publishing, server-default durability.
    JsPub,
    /// Pipelined acknowledged JetStream publishing, SemaQ told not to fsync.
    JsPubNosync,
    /// Acknowledged JetStream publishing, one at a time.
    JsPubSync,
    /// Acknowledged JetStream publishing, one at a time, SemaQ told not to fsync.
    JsPubSyncNosync,
    /// Pull consumer with explicit acks.
    JsConsume,
    /// Pull consumer with explicit acks on a work-queue stream.
    JsConsumeWq,
    /// Pipelined publishing while a pull consumer reads the same stream.
    JsPipeline,
}

impl Scenario {
    /// The name used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Pubsub => "pubsub",
            Scenario::Fanout => "fanout",
            Scenario::Latency => "latency",
            Scenario::Queue => "queue",
            Scenario::JsPub => "js-pub",
            Scenario::JsPubNosync => "js-pub-nosync",
            Scenario::JsPubSync => "js-pub-sync",
            Scenario::JsPubSyncNosync => "js-pub-sync-nosync",
            Scenario::JsConsume => "js-consume",
            Scenario::JsConsumeWq => "js-consume-wq",
            Scenario::JsPipeline => "js-pipeline",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Scenario::Pubsub => "1 publisher → 1 subscriber",
            Scenario::Fanout => "1 publisher → 8 subscribers",
            Scenario::Latency => "request/reply round trips, 1 in flight",
            Scenario::Queue => "1 publisher → queue group of 4",
            Scenario::JsPub => "JetStream publish to a file stream, 1,000 acks outstanding",
            Scenario::JsPubNosync => "JetStream publish to a file stream (semaq.sync=never), 1,000 acks outstanding",
            Scenario::JsPubSync => "JetStream publish to a file stream, 1 ack outstanding",
            Scenario::JsPubSyncNosync => "JetStream publish to a file stream (semaq.sync=never), 1 ack outstanding",
            Scenario::JsConsume => "durable pull consumer, explicit acks, pre-filled file stream",
            Scenario::JsConsumeWq => "durable pull consumer, explicit acks, pre-filled work-queue file stream",
            Scenario::JsPipeline => {
                "JetStream publish, 1,000 acks outstanding, while a pull consumer acks each message"
            }
        }
    }

    /// What the latency line of a single run measures.
    fn latency_note(self) -> Option<&'static str> {
        match self {
            Scenario::Pubsub | Scenario::Fanout | Scenario::Queue => {
                Some("latency is publish→receive with the publisher at full speed (includes queueing)")
            }
            Scenario::Latency => None,
            Scenario::JsPub | Scenario::JsPubNosync => {
                Some("latency is publish→ack with up to 1,000 acks outstanding (includes queueing)")
            }
            Scenario::JsPubSync | Scenario::JsPubSyncNosync => Some("latency is publish→ack, one publish in flight"),
            Scenario::JsConsume | Scenario::JsConsumeWq => None,
            Scenario::JsPipeline => Some("latency is publish→receive through the stream, publisher at full speed"),
        }
    }

    /// Sized so a default run takes about a second on a small machine; `--duration` caps slower ones.
    fn default_msgs(self) -> u64 {
        match self {
            Scenario::Pubsub => 1_000_000,
            Scenario::Fanout => 200_000,
            Scenario::Latency => 20_000,
            Scenario::Queue => 1_000_000,
            Scenario::JsPub | Scenario::JsPubNosync => 300_000,
            Scenario::JsPubSync | Scenario::JsPubSyncNosync => 20_000,
            Scenario::JsConsume | Scenario::JsConsumeWq | Scenario::JsPipeline => 200_000,
        }
    }

    /// Checks the load arguments and fills in this scenario's defaults.
    pub fn load(self, args: &LoadArgs) -> Result<Load> {
        let msgs = args.msgs.unwrap_or(self.default_msgs());
        if msgs == 0 {
            bail!("--msgs must be at least 1");
        }
        if self.uses_stamps() && args.size < flow::STAMP_BYTES {
            bail!(
                "--size must be at least {} bytes: each message carries its send time and sequence",
                flow::STAMP_BYTES
            );
        }
        Ok(Load { msgs, size: args.size, duration: args.duration })
    }

    /// Whether payloads carry the send-time stamp of `flow.rs`.
    fn uses_stamps(self) -> bool {
        matches!(self, Scenario::Pubsub | Scenario::Fanout | Scenario::Queue | Scenario::JsPipeline)
    }

    /// Runs the scenario once against `target`.
    pub async fn run(self, target: &Target, load: &Load, progress: &ProgressBar) -> Result<Report> {
        let shape = |subscribers, queue_group| flow::Shape { subscribers, queue_group };
        match self {
            Scenario::Pubsub => flow::run(target, load, shape(1, false), progress).await,
            Scenario::Fanout => flow::run(target, load, shape(8, false), progress).await,
            Scenario::Queue => flow::run(target, load, shape(4, true), progress).await,
            Scenario::Latency => latency::run(target, load, progress).await,
            Scenario::JsPub => jetstream::run_publish(target, load, jetstream::Durability::Default, progress).await,
            Scenario::JsPubNosync => {
                jetstream::run_publish(target, load, jetstream::Durability::NoSync, progress).await
            }
            Scenario::JsPubSync => {
                jetstream::run_publish_sync(target, load, jetstream::Durability::Default, progress).await
            }
            Scenario::JsPubSyncNosync => {
                jetstream::run_publish_sync(target, load, jetstream::Durability::NoSync, progress).await
            }
            Scenario::JsConsume => jetstream::run_consume(target, load, progress).await,
            Scenario::JsConsumeWq => jetstream::run_consume_work_queue(target, load, progress).await,
            Scenario::JsPipeline => pipeline::run(target, load, progress).await,
        }
    }
}

/// The outcome of one scenario run.
#[derive(Debug)]
pub struct Report {
    /// Messages published (or requests completed).
    pub sent: u64,
    /// Messages received, summed over all subscribers.
    pub delivered: u64,
    /// Payload size of each message.
    pub payload_bytes: usize,
    /// From the first publish to the last receipt.
    pub elapsed: Duration,
    /// Per-message latency in nanoseconds.
    pub latency: Histogram<u64>,
    /// Extra lines worth printing.
    pub notes: Vec<String>,
    /// What went wrong (lost or duplicated messages); a run with problems fails.
    pub problems: Vec<String>,
}

impl Report {
    /// Deliveries per second.
    pub fn rate(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            self.delivered as f64 / seconds
        } else {
            0.0
        }
    }

    /// Payload megabytes (10^6 bytes) delivered per second.
    pub fn megabytes_per_second(&self) -> f64 {
        self.rate() * self.payload_bytes as f64 / 1e6
    }
}

/// What must happen before the async runtime starts, whose worker count follows the CPUs the
/// process may use: `intent-rr` on a server it starts, and `compare --split-cpus`, move their
/// clients to CPUs of their own.
pub fn before_runtime(args: &mut BenchArgs, server_named: bool) -> Result<()> {
    match &mut args.command {
        BenchCommand::IntentRr(rr_args) => rr_args.split_cpus(server_named),
        BenchCommand::Compare(compare_args) => compare_args.split_cpus(),
        _ => Ok(()),
    }
}

/// Runs `semaq bench ...`.
pub async fn run(target: &Target, args: BenchArgs) -> Result<()> {
    let (scenario, run_args) = match args.command {
        BenchCommand::Compare(compare_args) => return compare::run(compare_args).await,
        BenchCommand::FilterFanout(filter_args) => return filter_fanout::run(filter_args).await,
        BenchCommand::Provenance(provenance_args) => return provenance::run(provenance_args).await,
        BenchCommand::JsPubLevels(levels_args) => return levels::run(levels_args).await,
        BenchCommand::IntentRr(rr_args) => return intent_rr::run(target, rr_args).await,
        BenchCommand::Adapt(adapt_args) => return adapt::run(target, adapt_args).await,
        BenchCommand::Observe(observe_args) => return observe::run(observe_args).await,
        BenchCommand::Ws(ws_args) => return ws::run(ws_args).await,
        BenchCommand::Scale(scale_args) => return scale::run(scale_args).await,
        BenchCommand::Pubsub(run_args) => (Scenario::Pubsub, run_args),
        BenchCommand::Fanout(run_args) => (Scenario::Fanout, run_args),
        BenchCommand::Latency(run_args) => (Scenario::Latency, run_args),
        BenchCommand::Queue(run_args) => (Scenario::Queue, run_args),
        BenchCommand::JsPub(run_args) => (Scenario::JsPub, run_args),
        BenchCommand::JsPubNosync(run_args) => (Scenario::JsPubNosync, run_args),
        BenchCommand::JsPubSync(run_args) => (Scenario::JsPubSync, run_args),
        BenchCommand::JsPubSyncNosync(run_args) => (Scenario::JsPubSyncNosync, run_args),
        BenchCommand::JsConsume(run_args) => (Scenario::JsConsume, run_args),
        BenchCommand::JsConsumeWq(run_args) => (Scenario::JsConsumeWq, run_args),
        BenchCommand::JsPipeline(run_args) => (Scenario::JsPipeline, run_args),
    };
    let load = scenario.load(&run_args.load)?;
    let show_progress = !run_args.quiet && std::io::stdout().is_terminal();
    let progress = progress_bar(load.msgs, show_progress);
    let report = scenario.run(target, &load, &progress).await;
    progress.finish_and_clear();
    let report = report?;
    println!("{}", describe_report(scenario, &load, &target.url, &report));
    if !report.problems.is_empty() {
        bail!("{} run failed: {}", scenario.name(), report.problems.join("; "));
    }
    Ok(())
}

/// A progress bar over `length` messages, or a hidden one.
fn progress_bar(length: u64, visible: bool) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(length);
    if let Ok(style) = ProgressStyle::with_template("{elapsed:>4} [{bar:40}] {human_pos}/{human_len} {per_sec}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// The multi-line report printed by a single scenario run.
fn describe_report(scenario: Scenario, load: &Load, url: &str, report: &Report) -> String {
    let mut lines = vec![
        format!("{}: {}, {} B payloads, {url}", scenario.name(), scenario.describe(), load.size),
        format!("  sent       {} msgs", format_count(report.sent)),
        format!("  delivered  {} msgs in {:.3} s", format_count(report.delivered), report.elapsed.as_secs_f64()),
        format!(
            "  rate       {} msgs/s  {:.1} MB/s",
            format_count(report.rate().round() as u64),
            report.megabytes_per_second()
        ),
    ];
    if !report.latency.is_empty() {
        lines.push(format!("  latency    {}", format_percentiles(&report.latency)));
    }
    if let Some(note) = scenario.latency_note() {
        lines.push(format!("  note       {note}"));
    }
    lines.extend(report.notes.iter().map(|note| format!("  note       {note}")));
    lines.extend(report.problems.iter().map(|problem| format!("  PROBLEM    {problem}")));
    lines.join("\n")
}
