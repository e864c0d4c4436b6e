//! `semaq bench compare`: the same scenarios against semaq-server and nats-server, alternately.
//!
//! Each round runs every entry on both servers, semaq first in odd rounds and nats first in even ones, so
//! drift of the machine (other load, caches, clock speed) and any first-or-second effect spread over both. The table shows each side's median and the median of the per-round ratios.
//! A new scenario is a new [`Entry`] with its metrics in [`Entry::metrics`] and a branch in [`measure`].

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use indicatif::ProgressBar;

use super::cpus::CpuSplit;
use super::disk;
use super::filter_fanout;
use super::idle;
use super::js_schema;
use super::js_store::{self, StoreReport};
use super::kv_obj;
use super::server::{ServerProcess, ServerSpec};
use super::stats::{format_bytes, format_count, format_latency_ns, median, median_ratio};
use super::{LoadArgs, Report, Scenario};
use crate::connect::Target;

/// Connect and request timeout for the local servers.
const LOCAL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long filter-fanout waits for its deliveries.
const FILTER_FANOUT_TIMEOUT: Duration = Duration::from_secs(30);

/// Arguments of `semaq bench compare`.
#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// Rounds; each runs every scenario on both servers, alternating which goes first
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// What to measure, comma-separated, in this order
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "pubsub,fanout,latency,queue,idle-conns,js-pub,js-pub-nosync,js-pub-sync,js-consume,js-pipeline,js-memory,js-restart,filter-fanout"
    )]
    scenarios: Vec<Entry>,
    /// semaq-server executable [default: semaq-server next to this program]
    #[arg(long, value_name = "PATH")]
    semaq_server: Option<PathBuf>,
    /// nats-server executable
    #[arg(long, value_name = "PATH", default_value = "nats-server")]
    nats_server: PathBuf,
    /// Also write the table as Markdown to FILE
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    /// Connections idle-conns opens to each server
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=20_000))]
    idle_conns: u64,
    /// Messages js-memory and js-restart store in a fresh server (--msgs does not apply to them)
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    store_msgs: u64,
    #[command(flatten)]
    load: LoadArgs,
    /// Run each server on the first half of the CPUs and this bench's clients on the rest, so
    /// that neither preempts the other (`cpus.rs` says why); both servers get the same half
    #[arg(long)]
    split_cpus: bool,
    /// The CPU split in force, set before the async runtime starts.
    #[arg(skip)]
    cpus: Option<CpuSplit>,
    /// Print only the table
    #[arg(long, short)]
    quiet: bool,
}

impl CompareArgs {
    /// Moves this process to the clients' CPUs when `--split-cpus` is given; must run before
    /// the async runtime starts, whose workers size themselves by the CPUs they may use.
    pub fn split_cpus(&mut self) -> Result<()> {
        if !self.split_cpus {
            return Ok(());
        }
        self.cpus = CpuSplit::of_this_thread();
        match &self.cpus {
            Some(cpus) => cpus.pin_clients().context("cannot move the clients to their CPUs"),
            None => bail!("--split-cpus needs at least two CPUs"),
        }
    }

    /// Where the servers and the clients run, for the table's header.
    fn arrangement(&self) -> String {
        self.cpus.as_ref().map_or_else(|| "servers and clients on the same CPUs".to_string(), CpuSplit::to_string)
    }
}

/// One line of the comparison: a load scenario or another measurement.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// 1 publisher → 1 subscriber, msgs/s
    Pubsub,
    /// 1 publisher → 8 subscribers, deliveries/s
    Fanout,
    /// request/reply round trips, p50 and p99
    Latency,
    /// 1 publisher → queue group of 4, deliveries/s
    Queue,
    /// server memory growth per idle connection (fresh servers)
    IdleConns,
    /// JetStream publish, 1,000 acks outstanding, server-default durability: acked msgs/s
    JsPub,
    /// JetStream publish, 1,000 acks outstanding, stream metadata semaq.sync=never: acked msgs/s
    JsPubNosync,
    /// JetStream publish, one ack outstanding: ack latency p50 and p99, msgs/s
    JsPubSync,
    /// as js-pub-sync, stream metadata semaq.sync=never
    JsPubSyncNosync,
    /// durable pull consumer with explicit acks on a pre-filled stream: msgs/s
    JsConsume,
    /// as js-consume on a work-queue stream (each ack removes its message), default durability: msgs/s
    JsConsumeWq,
    /// js-pub while a pull consumer acks each message: consumed msgs/s, publish→receive p50 and p99
    JsPipeline,
    /// server memory after storing --store-msgs messages in a file stream (fresh servers)
    JsMemory,
    /// SIGTERM and start again on the stored messages: time until STREAM.INFO reports them all
    JsRestart,
    /// 1 publisher → 10 subscribers matching 10% each: CEL filters on semaq, serde_json in nats clients
    FilterFanout,
    /// js-pub to L2 streams (JSON Schema; Avro with JSON and binary payloads) and the same streams without a schema
    JsPubSchema,
    /// async-nats KV: puts then gets of 20,000 keys, 64 in flight: ops/s each
    Kv,
    /// as kv, the bucket's stream with metadata semaq.sync=never (SemaQ acks without fsync)
    KvNosync,
    /// async-nats Object Store: put then get of one 64 MiB object: MiB/s each
    Objstore,
}

/// Whether a larger figure is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Better {
    Higher,
    Lower,
}

/// A figure the table reports, and how to print it.
#[derive(Debug, Clone, Copy)]
struct Metric {
    name: &'static str,
    better: Better,
    format: fn(f64) -> String,
}

const THROUGHPUT: Metric = Metric { name: "msgs/s", better: Better::Higher, format: format_rate };
const LATENCY_P50: Metric = Metric { name: "p50", better: Better::Lower, format: format_nanos };
const LATENCY_P99: Metric = Metric { name: "p99", better: Better::Lower, format: format_nanos };
const RSS_PER_CONNECTION: Metric = Metric { name: "RSS/conn", better: Better::Lower, format: format_bytes };
const RSS_TOTAL: Metric = Metric { name: "RSS", better: Better::Lower, format: format_bytes };
const RSS_PER_MESSAGE: Metric = Metric { name: "RSS/msg", better: Better::Lower, format: format_bytes };
const RESTART_TIME: Metric = Metric { name: "restart", better: Better::Lower, format: format_nanos };
const MATCHED_RATE: Metric = Metric { name: "matched/s", better: Better::Higher, format: format_rate };
const BYTES_TO_SUBSCRIBERS: Metric = Metric { name: "bytes out", better: Better::Lower, format: format_bytes };
const KV_PUTS: Metric = Metric { name: "puts/s", better: Better::Higher, format: format_rate };
const KV_GETS: Metric = Metric { name: "gets/s", better: Better::Higher, format: format_rate };
const OBJECT_PUT: Metric = Metric { name: "put MiB/s", better: Better::Higher, format: format_mebibytes };
const OBJECT_GET: Metric = Metric { name: "get MiB/s", better: Better::Higher, format: format_mebibytes };

fn format_mebibytes(bytes_per_second: f64) -> String {
    format!("{:.1}", bytes_per_second / (1024.0 * 1024.0))
}

fn format_rate(value: f64) -> String {
    format_count(value.max(0.0).round() as u64)
}

fn format_nanos(value: f64) -> String {
    format_latency_ns(value.max(0.0).round() as u64)
}

impl Entry {
    fn name(self) -> &'static str {
        match self {
            Entry::IdleConns => "idle-conns",
            Entry::JsMemory => "js-memory",
            Entry::JsRestart => "js-restart",
            Entry::FilterFanout => "filter-fanout",
            Entry::JsPubSchema => "js-pub-schema",
            Entry::Kv => "kv",
            Entry::KvNosync => "kv-nosync",
            Entry::Objstore => "objstore",
            other => other.scenario().map_or("?", Scenario::name),
        }
    }

    fn scenario(self) -> Option<Scenario> {
        match self {
            Entry::Pubsub => Some(Scenario::Pubsub),
            Entry::Fanout => Some(Scenario::Fanout),
            Entry::Latency => Some(Scenario::Latency),
            Entry::Queue => Some(Scenario::Queue),
            Entry::JsPub => Some(Scenario::JsPub),
            Entry::JsPubNosync => Some(Scenario::JsPubNosync),
            Entry::JsPubSync => Some(Scenario::JsPubSync),
            Entry::JsPubSyncNosync => Some(Scenario::JsPubSyncNosync),
            Entry::JsConsume => Some(Scenario::JsConsume),
            Entry::JsConsumeWq => Some(Scenario::JsConsumeWq),
            Entry::JsPipeline => Some(Scenario::JsPipeline),
            Entry::IdleConns | Entry::JsMemory | Entry::JsRestart | Entry::FilterFanout | Entry::JsPubSchema => None,
            Entry::Kv | Entry::KvNosync | Entry::Objstore => None,
        }
    }

    /// The figures this entry contributes, in table order.
    fn metrics(self) -> &'static [Metric] {
        match self {
            Entry::Pubsub | Entry::Fanout | Entry::Queue => &[THROUGHPUT],
            Entry::JsPub | Entry::JsPubNosync | Entry::JsConsume | Entry::JsConsumeWq => &[THROUGHPUT],
            Entry::Latency => &[LATENCY_P50, LATENCY_P99],
            Entry::JsPipeline => &[THROUGHPUT, LATENCY_P50, LATENCY_P99],
            Entry::JsPubSync | Entry::JsPubSyncNosync => &[LATENCY_P50, LATENCY_P99, THROUGHPUT],
            Entry::IdleConns => &[RSS_PER_CONNECTION],
            Entry::JsMemory => &[RSS_TOTAL, RSS_PER_MESSAGE],
            Entry::JsRestart => &[RESTART_TIME],
            Entry::FilterFanout => &[MATCHED_RATE, BYTES_TO_SUBSCRIBERS],
            Entry::JsPubSchema => &SCHEMA_RATES,
            Entry::Kv | Entry::KvNosync => &[KV_PUTS, KV_GETS],
            Entry::Objstore => &[OBJECT_PUT, OBJECT_GET],
        }
    }
}

/// One throughput row per [`js_schema::VARIANTS`] entry, in that order.
const SCHEMA_RATES: [Metric; 5] = [
    Metric { name: "plain", better: Better::Higher, format: format_rate },
    Metric { name: "json-schema", better: Better::Higher, format: format_rate },
    Metric { name: "avro-json", better: Better::Higher, format: format_rate },
    Metric { name: "plain-bin", better: Better::Higher, format: format_rate },
    Metric { name: "avro-bin", better: Better::Higher, format: format_rate },
];

/// The two servers; `sides[0]` is semaq, `sides[1]` nats.
struct Contenders {
    sides: [ServerSpec; 2],
    /// Long-running servers for the load scenarios; idle-conns starts fresh ones.
    running: Option<[ServerProcess; 2]>,
    work_dir: tempfile::TempDir,
    /// A js-memory measurement that also restarted the server, kept per side for js-restart.
    restarted: Mutex<[Option<StoreReport>; 2]>,
}

/// Per-round figures of one table row.
struct Row {
    entry: Entry,
    metric: Metric,
    /// Figures per side, one per round, in `Contenders::sides` order.
    values: [Vec<f64>; 2],
}

/// Runs the comparison, stopping both servers on completion, error or Ctrl-C.
pub async fn run(args: CompareArgs) -> Result<()> {
    tokio::select! {
        result = compare(args) => result,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted; servers stopped")),
    }
}

async fn compare(args: CompareArgs) -> Result<()> {
    if args.scenarios.is_empty() {
        bail!("--scenarios names nothing to measure");
    }
    // Check the load arguments before starting any server.
    let scenarios: Vec<Scenario> = args.scenarios.iter().filter_map(|entry| entry.scenario()).collect();
    for scenario in &scenarios {
        scenario.load(&args.load)?;
    }
    let on_running = [Entry::JsPubSchema, Entry::Kv, Entry::KvNosync, Entry::Objstore];
    let needs_servers = !scenarios.is_empty() || args.scenarios.iter().any(|entry| on_running.contains(entry));
    let contenders = Contenders::start(&args, needs_servers)?;
    let mut rows: Vec<Row> = args
        .scenarios
        .iter()
        .flat_map(|entry| {
            entry.metrics().iter().map(|metric| Row { entry: *entry, metric: *metric, values: [vec![], vec![]] })
        })
        .collect();
    let mut findings = Findings::default();
    let touches_disk = args.scenarios.iter().any(|entry| entry.name().starts_with("js-"));
    if touches_disk {
        findings.probe_disk("before the rounds", contenders.work_dir.path());
    }
    let outcome = run_rounds(&args, &contenders, &mut rows, &mut findings).await;
    if touches_disk && outcome.is_ok() {
        findings.probe_disk("after the rounds", contenders.work_dir.path());
    }
    // Dropping the servers kills them before the table is printed.
    drop(contenders);
    println!("{}", args.arrangement());
    print_table(&rows);
    let schema_lines = schema_summary(&rows, &findings.schema);
    for line in &schema_lines {
        println!("{line}");
    }
    findings.details.extend(schema_lines);
    for line in &findings.disk {
        println!("disk: {line}");
    }
    for problem in &findings.problems {
        eprintln!("semaq: warning: {problem}");
    }
    if let Some(path) = &args.markdown {
        std::fs::write(path, markdown(&args, &rows, &findings))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    outcome?;
    if !findings.problems.is_empty() {
        bail!("{} run(s) lost, duplicated or failed to acknowledge messages", findings.problems.len());
    }
    Ok(())
}

/// What the rounds found besides the figures.
#[derive(Debug, Default)]
struct Findings {
    /// Runs that lost, duplicated or failed to acknowledge messages.
    problems: Vec<String>,
    /// Details of measurements whose table row is only a summary (js-memory, js-restart).
    details: Vec<String>,
    /// The disk probe's lines: fsync latency in the store's file system before and after the rounds.
    disk: Vec<String>,
    /// semaq's server CPU per message in each js-pub-schema round.
    schema: js_schema::Tally,
}

impl Findings {
    fn probe_disk(&mut self, when: &str, dir: &Path) {
        match disk::probe(dir) {
            Ok(probe) => self.disk.push(format!("{}, {when}", probe.describe())),
            Err(error) => self.disk.push(format!("probe failed {when}: {error:#}")),
        }
    }
}

async fn run_rounds(
    args: &CompareArgs,
    contenders: &Contenders,
    rows: &mut [Row],
    findings: &mut Findings,
) -> Result<()> {
    for round in 1..=args.rounds {
        for entry in &args.scenarios {
            let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
            for side in order {
                let label = contenders.sides[side].label;
                let context = || format!("round {round}, {} on {label}", entry.name());
                let figures = measure(*entry, side, contenders, args, findings).await.with_context(context)?;
                for (metric, value) in entry.metrics().iter().zip(figures) {
                    if let Some(row) = rows.iter_mut().find(|row| row.entry == *entry && row.metric.name == metric.name)
                    {
                        row.values[side].push(value);
                    }
                    if !args.quiet {
                        eprintln!(
                            "round {round}/{}  {:<13} {label:<5}  {} {}",
                            args.rounds,
                            entry.name(),
                            (metric.format)(value),
                            metric.name
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

/// Takes one measurement of `entry` on one side; returns one figure per metric.
async fn measure(
    entry: Entry,
    side: usize,
    contenders: &Contenders,
    args: &CompareArgs,
    findings: &mut Findings,
) -> Result<Vec<f64>> {
    if entry == Entry::JsPubSchema {
        return measure_schema(side, contenders, args, findings).await;
    }
    if matches!(entry, Entry::Kv | Entry::KvNosync | Entry::Objstore) {
        return measure_kv_obj(entry, side, contenders).await;
    }
    let Some(scenario) = entry.scenario() else {
        return measure_fresh(entry, side, contenders, args, findings).await;
    };
    let load = scenario.load(&args.load)?;
    let server = contenders.running.as_ref().map(|servers| &servers[side]).context("servers not running")?;
    let target = Target::plain(server.url.clone(), LOCAL_TIMEOUT);
    let report = scenario.run(&target, &load, &ProgressBar::hidden()).await?;
    findings
        .problems
        .extend(report.problems.iter().map(|problem| format!("{} on {}: {problem}", scenario.name(), server.label)));
    Ok(figures(entry, &report))
}

/// kv and objstore on the running server, each run in a bucket of its own.
async fn measure_kv_obj(entry: Entry, side: usize, contenders: &Contenders) -> Result<Vec<f64>> {
    let server = contenders.running.as_ref().map(|servers| &servers[side]).context("servers not running")?;
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let bucket = format!("bench_{}", RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    if matches!(entry, Entry::Kv | Entry::KvNosync) {
        let figures = kv_obj::measure_kv(&server.url, &bucket, entry == Entry::KvNosync).await?;
        return Ok(vec![figures.puts_per_second, figures.gets_per_second]);
    }
    let figures = kv_obj::measure_object(&server.url, &bucket).await?;
    Ok(vec![figures.put_bytes_per_second, figures.get_bytes_per_second])
}

/// js-pub-schema: every variant on the running server (schemas on semaq only), one figure each.
async fn measure_schema(
    side: usize,
    contenders: &Contenders,
    args: &CompareArgs,
    findings: &mut Findings,
) -> Result<Vec<f64>> {
    let server = contenders.running.as_ref().map(|servers| &servers[side]).context("servers not running")?;
    let target = Target::plain(server.url.clone(), LOCAL_TIMEOUT);
    let load = Scenario::JsPub.load(&args.load)?;
    let reverse = findings.schema.len() % 2 == 1;
    let runs = js_schema::measure(&target, &load, side == 0, Some(server.pid()), reverse).await?;
    if side == 0 {
        findings.schema.add(&runs);
    }
    Ok(runs.iter().map(|run| run.rate).collect())
}

/// The L2 / no-schema ratios of semaq's js-pub-schema rows, and validations per second per core.
fn schema_summary(rows: &[Row], tally: &js_schema::Tally) -> Vec<String> {
    let semaq: Vec<Vec<f64>> =
        rows.iter().filter(|row| row.entry == Entry::JsPubSchema).map(|row| row.values[0].clone()).collect();
    match <[Vec<f64>; 5]>::try_from(semaq) {
        Ok(rates) => js_schema::summary(&rates, tally),
        Err(_) => Vec::new(),
    }
}

/// Measurements on a freshly started server: idle-conns, js-memory, js-restart and filter-fanout.
async fn measure_fresh(
    entry: Entry,
    side: usize,
    contenders: &Contenders,
    args: &CompareArgs,
    findings: &mut Findings,
) -> Result<Vec<f64>> {
    let spec = &contenders.sides[side];
    let work_dir = contenders.work_dir.path();
    match entry {
        Entry::JsMemory => {
            // One fill serves both entries when js-restart comes later in the list.
            let position = |wanted: Entry| args.scenarios.iter().position(|entry| *entry == wanted);
            let restart_later =
                matches!((position(Entry::JsMemory), position(Entry::JsRestart)), (Some(m), Some(r)) if m < r);
            let report = js_store::measure(spec, work_dir, args.store_msgs, args.load.size, restart_later).await?;
            note_store_report(spec.label, &report, args, findings);
            let figures = vec![report.rss_after as f64, report.growth_per_message()];
            if restart_later {
                lock(&contenders.restarted)[side] = Some(report);
            }
            Ok(figures)
        }
        Entry::JsRestart => {
            let stashed = lock(&contenders.restarted)[side].take();
            let report = match stashed {
                Some(report) => report,
                None => {
                    let report = js_store::measure(spec, work_dir, args.store_msgs, args.load.size, true).await?;
                    note_store_report(spec.label, &report, args, findings);
                    report
                }
            };
            let restart = report.restart.context("the restart was not measured")?;
            Ok(vec![restart.ready.as_nanos() as f64])
        }
        Entry::FilterFanout => {
            let server = spec.start(work_dir)?;
            let msgs = args.load.msgs.unwrap_or(filter_fanout::MSGS_DEFAULT);
            // semaq filters on the server; nats subscribers filter in the client.
            let outcome = filter_fanout::measure(&server.url, msgs, FILTER_FANOUT_TIMEOUT, side == 0).await?;
            if outcome.matched < outcome.expected {
                findings.problems.push(format!(
                    "filter-fanout on {}: {} of {} matches",
                    spec.label, outcome.matched, outcome.expected
                ));
            }
            Ok(vec![outcome.rate(), outcome.delivered_bytes as f64])
        }
        _ => {
            let server = spec.start(work_dir)?;
            let connections = usize::try_from(args.idle_conns).unwrap_or(usize::MAX);
            let report = idle::measure(&server, connections, LOCAL_TIMEOUT).await?;
            Ok(vec![report.bytes_per_connection()])
        }
    }
}

fn note_store_report(label: &str, report: &StoreReport, args: &CompareArgs, findings: &mut Findings) {
    let line = format!("{label}: {}", report.describe());
    if !args.quiet {
        eprintln!("  {line}");
    }
    findings.details.push(line);
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn figures(entry: Entry, report: &Report) -> Vec<f64> {
    let p50 = report.latency.value_at_quantile(0.50) as f64;
    let p99 = report.latency.value_at_quantile(0.99) as f64;
    match entry {
        Entry::Latency => vec![p50, p99],
        Entry::JsPubSync | Entry::JsPubSyncNosync => vec![p50, p99, report.rate()],
        Entry::JsPipeline => vec![report.rate(), p50, p99],
        _ => vec![report.rate()],
    }
}

impl Contenders {
    fn start(args: &CompareArgs, with_load_servers: bool) -> Result<Contenders> {
        let semaq_program = match &args.semaq_server {
            Some(path) => path.clone(),
            None => default_semaq_server()?,
        };
        let sides = [ServerSpec::new("semaq", semaq_program), ServerSpec::new("nats", args.nats_server.clone())]
            .map(|spec| spec.with_cpus(args.cpus.clone()));
        let work_dir = tempfile::Builder::new().prefix("semaq-bench-").tempdir().context("cannot create a work dir")?;
        let running = if with_load_servers {
            Some([sides[0].start(work_dir.path())?, sides[1].start(work_dir.path())?])
        } else {
            None
        };
        Ok(Contenders { sides, running, work_dir, restarted: Mutex::new([None, None]) })
    }
}

/// `semaq-server` in the same directory as this executable (the same cargo target dir).
pub(crate) fn default_semaq_server() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot locate the semaq executable")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidate = dir.join(format!("semaq-server{}", std::env::consts::EXE_SUFFIX));
    if !candidate.is_file() {
        bail!(
            "semaq-server not found at {}: build it with `cargo build --release -p semaq-server` or pass --semaq-server PATH",
            candidate.display()
        );
    }
    Ok(candidate)
}

/// The summary cells of a row: semaq median, nats median, and the median per-round ratio.
fn row_cells(row: &Row) -> [String; 3] {
    let show = |values: &[f64]| median(values).map_or("-".to_string(), row.metric.format);
    let ratio = median_ratio(&row.values[0], &row.values[1]).map_or("-".to_string(), |ratio| format!("{ratio:.2}"));
    [show(&row.values[0]), show(&row.values[1]), ratio]
}

fn metric_label(metric: &Metric) -> String {
    let arrow = match metric.better {
        Better::Higher => "↑",
        Better::Lower => "↓",
    };
    format!("{} {arrow}", metric.name)
}

fn print_table(rows: &[Row]) {
    let width = rows.iter().map(|row| row.entry.name().len()).max().unwrap_or(0).max(11);
    let metric_width = rows.iter().map(|row| metric_label(&row.metric).chars().count()).max().unwrap_or(0).max(11);
    println!("{:<width$} {:<metric_width$} {:>14} {:>14} {:>11}", "scenario", "metric", "semaq", "nats", "semaq/nats");
    for row in rows {
        let [semaq, nats, ratio] = row_cells(row);
        let metric = metric_label(&row.metric);
        println!("{:<width$} {metric:<metric_width$} {semaq:>14} {nats:>14} {ratio:>11}", row.entry.name());
    }
    println!(
        "↑ higher is better, ↓ lower is better; figures are medians over rounds, ratios medians of per-round ratios"
    );
}

/// The Markdown report: parameters, the table, and every round's figures.
fn markdown(args: &CompareArgs, rows: &[Row], findings: &Findings) -> String {
    let mut out = String::new();
    let command: Vec<String> = std::env::args().skip(1).collect();
    let _ = writeln!(out, "Command: `semaq {}`\n", command.join(" "));
    let _ = writeln!(
        out,
        "Rounds: {}; payload {} B; odd rounds run semaq-server first, even rounds nats-server; {}.\n",
        args.rounds,
        args.load.size,
        args.arrangement()
    );
    let _ = writeln!(out, "| scenario | metric | semaq-server | nats-server | semaq/nats |");
    let _ = writeln!(out, "|---|---|---:|---:|---:|");
    for row in rows {
        let [semaq, nats, ratio] = row_cells(row);
        let _ = writeln!(out, "| {} | {} | {semaq} | {nats} | {ratio} |", row.entry.name(), metric_label(&row.metric));
    }
    let _ = writeln!(out, "\n↑ higher is better, ↓ lower is better. Figures are medians over rounds; the ratio is the median of per-round ratios.\n");
    let _ = writeln!(out, "Per round (semaq / nats):\n");
    for row in rows {
        let per_round: Vec<String> = row.values[0]
            .iter()
            .zip(&row.values[1])
            .map(|(semaq, nats)| format!("{} / {}", (row.metric.format)(*semaq), (row.metric.format)(*nats)))
            .collect();
        let _ = writeln!(out, "- {} {}: {}", row.entry.name(), row.metric.name, per_round.join("; "));
    }
    if !findings.disk.is_empty() {
        let _ = writeln!(out, "\nDisk under the stores:\n");
        for line in &findings.disk {
            let _ = writeln!(out, "- {line}");
        }
    }
    if !findings.details.is_empty() {
        let _ = writeln!(out, "\nDetails:\n");
        for detail in &findings.details {
            let _ = writeln!(out, "- {detail}");
        }
    }
    for problem in &findings.problems {
        let _ = writeln!(out, "\n**Problem:** {problem}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_has_a_name_and_metrics() {
        use clap::ValueEnum;
        for entry in Entry::value_variants() {
            assert_ne!(entry.name(), "?");
            assert!(!entry.metrics().is_empty());
        }
        assert_eq!(Entry::IdleConns.name(), "idle-conns");
    }

    #[test]
    fn row_cells_show_medians_and_ratio() {
        let row =
            Row { entry: Entry::Pubsub, metric: THROUGHPUT, values: [vec![900.0, 1100.0, 1000.0], vec![1000.0; 3]] };
        assert_eq!(row_cells(&row), ["1,000".to_string(), "1,000".to_string(), "1.00".to_string()]);
        let empty = Row { entry: Entry::Latency, metric: LATENCY_P99, values: [vec![], vec![]] };
        assert_eq!(row_cells(&empty), ["-".to_string(), "-".to_string(), "-".to_string()]);
    }
}
