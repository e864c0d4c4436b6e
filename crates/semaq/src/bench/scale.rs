//! `semaq bench scale`: how cost grows with size, semaq-server and nats-server side by side.
//!
//! Four curves, each a table (x, semaq, nats, semaq/nats) per figure and a PNG per figure:
//! - `subs`: pubsub of one publisher/subscriber pair on one subject while N−1 other distinct
//!   subjects (siblings of the measured one) are subscribed, and the server's CPU per message;
//! - `stored`: js-pub (median of the rounds) at each fill level of one file stream, the server's RSS, and the restart
//!   (start → STREAM.INFO with every message, start → the first PubAck);
//! - `idle`: RSS per idle connection, and pubsub among the active ones while they are open;
//! - `filters`: events per second through one subject with N CEL filters on semaq-server, against
//!   N plain subscribers filtering in the client on nats-server (as `filter-fanout`).
//!
//! `subs` and `filters` run both servers at once and alternate which goes first; `stored` and
//! `idle` measure one server after the other (each holds many files or descriptors).
//! The subscriptions and the idle connections are raw NATS connections (CONNECT, SUB, PING): a
//! client library would spend more memory per subscription in this process than the server does.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use futures::{StreamExt, TryStreamExt};
use indicatif::ProgressBar;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::filter_fanout;
use super::flow::{self, Shape};
use super::jetstream::{publish_pipelined, BenchStream, Durability, PublishPlan};
use super::plot::{self, Curve as PlotCurve};
use super::server::{cpu_per_message, cpu_seconds, resident_bytes, ServerProcess, ServerSpec};
use super::stats::{format_count, median};
use super::Load;
use crate::connect::Target;

/// Subscription counts of the `subs` curve (the measured one included).
const SUBS_LEVELS: &[u64] = &[1, 10, 100, 1_000, 10_000, 100_000];
const SUBS_LEVELS_QUICK: &[u64] = &[1, 100];
/// Bound on the distinct subjects subscribed.
const SUBJECTS_MAX: u64 = 100_000;
/// SUB lines written before each PING that confirms them.
const SUBS_PER_BATCH: u64 = 10_000;
/// Stored-message levels of the `stored` curve, cut at `--stored-max`.
const STORED_LEVELS: &[u64] = &[1_000_000, 2_000_000, 5_000_000, 10_000_000, 20_000_000, 50_000_000];
const STORED_LEVELS_QUICK: &[u64] = &[1_000, 4_000];
/// `--stored-max` when not given: a run of a few minutes on 2 cores.
const STORED_MAX_DEFAULT: u64 = 5_000_000;
/// Largest `--stored-max` accepted.
const STORED_MAX_LIMIT: u64 = 50_000_000;
/// Idle connection counts of the `idle` curve.
const IDLE_LEVELS: &[u64] = &[10, 100, 1_000, 10_000];
const IDLE_LEVELS_QUICK: &[u64] = &[10, 50];
/// Bound on the idle connections opened to one server.
const IDLE_CONNECTIONS_MAX: u64 = 10_000;
/// Descriptors this process keeps beyond its idle connections: its own clients and files.
const DESCRIPTORS_SPARE: u64 = 256;
/// Idle connections opened at once; more would only queue in the server's accept backlog.
const CONNECT_CONCURRENCY: usize = 32;
/// Filter counts of the `filters` curve.
const FILTER_LEVELS: &[u64] = &[1, 10, 100];
const FILTER_LEVELS_QUICK: &[u64] = &[1, 4];
/// Bound on the filtered subscriptions on the one subject.
const FILTERS_MAX: u64 = 100;
/// Distinct models in filter-fanout's events; subscriber i wants model i mod this, 10% of events.
const FILTER_MODELS: u64 = 10;
/// How long a bench connection waits for an answer (a restarted server's first ack included).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a batch of SUB lines or a connection handshake may take to be answered.
const RAW_ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes read at once from a raw connection; its answers are a few short lines.
const RAW_READ_BYTES: usize = 4096;
/// Bound on what a raw connection buffers while waiting for PONG.
const RAW_BUFFER_BYTES_MAX: usize = 64 * 1024;
/// Bounds on the stop and the start of a restart, each.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(120);
const RESTART_TIMEOUT: Duration = Duration::from_secs(600);
/// Between attempts to read the stream while the server restarts.
const RESTART_POLL: Duration = Duration::from_millis(5);
/// Goals, as ratios of the largest size's figure to the smallest's (or to nats-server's).
const SUBS_PUBSUB_GOAL: f64 = 0.8;
const STORED_JS_PUB_GOAL: f64 = 0.9;
/// RSS growth per stored message at the largest level, in bytes (issue 15's lean memory).
const STORED_RSS_PER_MSG_GOAL_BYTES: f64 = 8.0;
/// Restart to the first PubAck at the largest level, semaq-server / nats-server.
const STORED_RESTART_GOAL: f64 = 1.5;

/// Which curve.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum CurveKind {
    /// Distinct-subject subscriptions
    Subs,
    /// Stored messages
    Stored,
    /// Idle connections
    Idle,
    /// CEL filters on one subject
    Filters,
}

/// Arguments of `semaq bench scale`.
#[derive(clap::Args, Debug)]
pub struct ScaleArgs {
    /// Tiny sizes on every curve (seconds, not minutes): checks the bench works, figures mean little
    #[arg(long)]
    quick: bool,
    /// Curves to run, comma-separated [default: all]
    #[arg(long, value_enum, value_delimiter = ',')]
    curves: Vec<CurveKind>,
    /// Largest stored-message level (levels: 1M, 2M, 5M, 10M, 20M, 50M up to this)
    #[arg(long, default_value_t = STORED_MAX_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..=STORED_MAX_LIMIT))]
    stored_max: u64,
    /// Measurements per point, alternating which server goes first; the median is reported [default: 3, 1 with --quick]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: Option<u32>,
    /// Payload size in bytes
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(16..=65_536))]
    size: u64,
    /// Directory the PNGs are saved in
    #[arg(long, value_name = "DIR", default_value = ".")]
    plot_dir: PathBuf,
    /// semaq-server executable [default: semaq-server next to this program]
    #[arg(long, value_name = "PATH")]
    semaq_server: Option<PathBuf>,
    /// nats-server executable
    #[arg(long, value_name = "PATH", default_value = "nats-server")]
    nats_server: PathBuf,
}

/// How much each measurement does.
struct Sizes {
    rounds: u32,
    /// One pubsub measurement.
    pubsub: Load,
    /// One js-pub measurement at a fill level.
    js_pub_msgs: u64,
    js_pub_duration: Duration,
    /// Events of one filters measurement.
    filter_msgs: u64,
    /// Time for a server to settle before its memory is read.
    settle: Duration,
}

impl Sizes {
    fn of(args: &ScaleArgs) -> Sizes {
        let size = usize::try_from(args.size).unwrap_or(128);
        if args.quick {
            return Sizes {
                rounds: args.rounds.unwrap_or(1),
                pubsub: Load { msgs: 20_000, size, duration: Duration::from_secs(1) },
                js_pub_msgs: 1_000,
                js_pub_duration: Duration::from_secs(1),
                filter_msgs: 500,
                settle: Duration::from_millis(200),
            };
        }
        Sizes {
            rounds: args.rounds.unwrap_or(3),
            pubsub: Load { msgs: 2_000_000, size, duration: Duration::from_secs(2) },
            js_pub_msgs: 300_000,
            js_pub_duration: Duration::from_secs(3),
            filter_msgs: 20_000,
            settle: Duration::from_secs(1),
        }
    }
}

/// Everything the curves share.
struct Bench {
    specs: [ServerSpec; 2],
    work: tempfile::TempDir,
    sizes: Sizes,
}

/// One figure of a curve: per size, the median of each server's measurements.
struct Figure {
    /// PNG file name, without `.png`.
    file: &'static str,
    /// What is measured, with its unit.
    title: &'static str,
    /// Writes one value.
    format: fn(f64) -> String,
    /// (size, [semaq, nats]).
    points: Vec<(u64, [Option<f64>; 2])>,
}

impl Figure {
    fn new(file: &'static str, title: &'static str, format: fn(f64) -> String) -> Figure {
        Figure { file, title, format, points: Vec::new() }
    }

    /// The figure of `side` at the smallest and the largest size.
    fn ends(&self, side: usize) -> Option<(f64, f64)> {
        Some((self.points.first()?.1[side]?, self.points.last()?.1[side]?))
    }
}

/// A curve's figures and what it found.
struct Report {
    name: &'static str,
    what: String,
    x_desc: &'static str,
    figures: Vec<Figure>,
    verdicts: Vec<String>,
}

/// Runs `semaq bench scale`.
pub async fn run(args: ScaleArgs) -> Result<()> {
    let semaq_program = match &args.semaq_server {
        Some(path) => path.clone(),
        None => super::compare::default_semaq_server()?,
    };
    let curves = if args.curves.is_empty() {
        vec![CurveKind::Subs, CurveKind::Stored, CurveKind::Idle, CurveKind::Filters]
    } else {
        args.curves.clone()
    };
    std::fs::create_dir_all(&args.plot_dir).with_context(|| format!("cannot create {}", args.plot_dir.display()))?;
    let work = tempfile::Builder::new().prefix("semaq-bench-scale-").tempdir().context("cannot create a work dir")?;
    let bench = Bench {
        specs: [ServerSpec::new("semaq", semaq_program), ServerSpec::new("nats", args.nats_server.clone())],
        work,
        sizes: Sizes::of(&args),
    };
    println!(
        "scale: semaq-server vs nats-server, {} B payloads, {} round(s) per point{}",
        args.size,
        bench.sizes.rounds,
        if args.quick { ", --quick sizes" } else { "" }
    );
    for curve in curves {
        let report = match curve {
            CurveKind::Subs => subs_curve(&bench, levels(&args, SUBS_LEVELS, SUBS_LEVELS_QUICK)).await?,
            CurveKind::Stored => stored_curve(&bench, &stored_levels(&args)).await?,
            CurveKind::Idle => idle_curve(&bench, &idle_levels(&args)?).await?,
            CurveKind::Filters => filters_curve(&bench, levels(&args, FILTER_LEVELS, FILTER_LEVELS_QUICK)).await?,
        };
        print_report(&report);
        save_plots(&report, &args.plot_dir);
    }
    Ok(())
}

fn levels<'a>(args: &ScaleArgs, full: &'a [u64], quick: &'a [u64]) -> &'a [u64] {
    if args.quick {
        quick
    } else {
        full
    }
}

/// The stored levels up to `--stored-max`, which is itself the last level when it falls between two.
fn stored_levels(args: &ScaleArgs) -> Vec<u64> {
    let mut levels: Vec<u64> =
        levels(args, STORED_LEVELS, STORED_LEVELS_QUICK).iter().copied().filter(|l| *l <= args.stored_max).collect();
    if levels.last().is_none_or(|last| *last < args.stored_max) && !args.quick {
        levels.push(args.stored_max);
    }
    if levels.is_empty() {
        levels.push(args.stored_max);
    }
    levels
}

/// The idle levels this process has descriptors for, after raising its soft limit to the hard one
/// (the servers it starts inherit the raised limit).
fn idle_levels(args: &ScaleArgs) -> Result<Vec<u64>> {
    let wanted = levels(args, IDLE_LEVELS, IDLE_LEVELS_QUICK);
    let available = raise_descriptor_limit().saturating_sub(DESCRIPTORS_SPARE);
    let levels: Vec<u64> = wanted.iter().copied().filter(|l| *l <= available.min(IDLE_CONNECTIONS_MAX)).collect();
    if levels.len() < wanted.len() {
        println!("idle: only {available} descriptors available (ulimit -n): levels above it are left out");
    }
    if levels.is_empty() {
        bail!("too few file descriptors for the idle curve: {available} (ulimit -n)");
    }
    Ok(levels)
}

/// Raises this process's soft descriptor limit to its hard limit; returns the soft limit now.
fn raise_descriptor_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let soft = limit.current.unwrap_or(u64::MAX);
    if limit.current.is_some() && limit.current != limit.maximum {
        let raised = Rlimit { current: limit.maximum, maximum: limit.maximum };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            println!("idle: raised this process's soft descriptor limit from {soft} to its hard limit");
            return limit.maximum.unwrap_or(u64::MAX);
        }
    }
    soft
}

/// Alternates which server goes first from one measurement to the next.
fn order(round: usize) -> [usize; 2] {
    if round.is_multiple_of(2) {
        [0, 1]
    } else {
        [1, 0]
    }
}

fn medians(values: &[Vec<f64>; 2]) -> [Option<f64>; 2] {
    [median(&values[0]), median(&values[1])]
}

// ---- subs ----

async fn subs_curve(bench: &Bench, levels: &[u64]) -> Result<Report> {
    let servers = [bench.specs[0].start(bench.work.path())?, bench.specs[1].start(bench.work.path())?];
    // The measured subject's siblings: the same first three tokens as flow.rs's subject.
    let prefix = format!("semaq.bench.{}.other", std::process::id());
    let mut holders = [RawConnection::open(&servers[0].url).await?, RawConnection::open(&servers[1].url).await?];
    let mut rate = Figure::new("scale-subs-pubsub", "pubsub msgs/s", format_rate);
    let mut cpu = Figure::new("scale-subs-cpu", "server CPU µs per message", format_micros);
    let mut subscribed = 0;
    for (index, &level) in levels.iter().enumerate() {
        let others = level.min(SUBJECTS_MAX).saturating_sub(1);
        for holder in &mut holders {
            holder.subscribe(&prefix, subscribed..others).await?;
        }
        subscribed = others;
        let (mut rates, mut cpus): ([Vec<f64>; 2], [Vec<f64>; 2]) = Default::default();
        for round in 0..bench.sizes.rounds as usize {
            for side in order(index + round) {
                let (r, c) = pubsub_once(&servers[side], &bench.sizes.pubsub).await?;
                rates[side].push(r);
                cpus[side].extend(c.map(|seconds| seconds * 1e6));
            }
        }
        rate.points.push((level, medians(&rates)));
        cpu.points.push((level, medians(&cpus)));
        eprintln!("subs: {level} done");
    }
    let mut verdicts = Vec::new();
    for (side, name) in [(0, "semaq-server"), (1, "nats-server")] {
        if let Some((first, last)) = rate.ends(side) {
            let (top, bottom) = (levels.last().copied().unwrap_or(1), levels.first().copied().unwrap_or(1));
            let goal = if side == 0 { Some(SUBS_PUBSUB_GOAL) } else { None };
            verdicts.push(verdict(&format!("{name}: pubsub at {top} subs / at {bottom}"), last / first, goal, true));
        }
    }
    Ok(Report {
        name: "subs",
        what: "1 publisher → 1 subscriber on one subject while N−1 other distinct sibling subjects are subscribed"
            .into(),
        x_desc: "subscriptions (distinct subjects)",
        figures: vec![rate, cpu],
        verdicts,
    })
}

/// One pubsub run on `server`: delivered msgs/s and the server's CPU seconds per message.
async fn pubsub_once(server: &ServerProcess, load: &Load) -> Result<(f64, Option<f64>)> {
    let target = Target::plain(server.url.clone(), CLIENT_TIMEOUT);
    let before = cpu_seconds(server.pid());
    let shape = Shape { subscribers: 1, queue_group: false };
    let report = flow::run(&target, load, shape, &ProgressBar::hidden()).await?;
    let after = cpu_seconds(server.pid());
    if !report.problems.is_empty() {
        bail!("pubsub on {} failed: {}", server.label, report.problems.join("; "));
    }
    Ok((report.rate(), cpu_per_message(before, after, report.delivered)))
}

/// A NATS connection spoken by hand: CONNECT, SUBs and PINGs, never reading messages (it is sent none).
struct RawConnection {
    stream: TcpStream,
    /// Subscription ids handed out.
    sids: u64,
}

impl RawConnection {
    /// Connects, reads INFO, sends CONNECT and waits for the PONG that says the server took it.
    async fn open(url: &str) -> Result<RawConnection> {
        let authority = url.trim_start_matches("nats://");
        let stream = TcpStream::connect(authority).await.with_context(|| format!("cannot connect to {url}"))?;
        stream.set_nodelay(true).context("cannot set TCP_NODELAY")?;
        let mut connection = RawConnection { stream, sids: 0 };
        connection.read_until(b"\r\n").await.context("no INFO")?;
        let connect =
            "CONNECT {\"verbose\":false,\"pedantic\":false,\"name\":\"semaq-bench-scale\",\"protocol\":1}\r\n";
        connection
            .confirm(connect.as_bytes().to_vec())
            .await
            .with_context(|| format!("{url} did not accept CONNECT"))?;
        Ok(connection)
    }

    /// Subscribes to `prefix.<i>` for each `i` in `range`, in batches each confirmed by a PONG.
    async fn subscribe(&mut self, prefix: &str, range: std::ops::Range<u64>) -> Result<()> {
        let mut next = range.start;
        while next < range.end {
            let end = range.end.min(next + SUBS_PER_BATCH);
            let mut lines = Vec::new();
            for i in next..end {
                self.sids += 1;
                lines.extend_from_slice(format!("SUB {prefix}.{i} {}\r\n", self.sids).as_bytes());
            }
            self.confirm(lines).await.context("subscriptions not confirmed")?;
            next = end;
        }
        Ok(())
    }

    /// Writes `bytes` and a PING, and waits for the PONG (the server handles a connection's input in order).
    async fn confirm(&mut self, mut bytes: Vec<u8>) -> Result<()> {
        bytes.extend_from_slice(b"PING\r\n");
        self.stream.write_all(&bytes).await.context("cannot write")?;
        let answer = self.read_until(b"PONG\r\n").await?;
        if let Some(start) = find(&answer, b"-ERR") {
            bail!("server said {}", String::from_utf8_lossy(&answer[start..]).trim_end());
        }
        Ok(())
    }

    /// Reads until the input ends with `end`; returns what was read.
    async fn read_until(&mut self, end: &[u8]) -> Result<Vec<u8>> {
        let mut answer = Vec::new();
        let mut chunk = [0u8; RAW_READ_BYTES];
        let deadline = tokio::time::Instant::now() + RAW_ANSWER_TIMEOUT;
        while !answer.ends_with(end) {
            let read = tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await;
            let read = read.context("no answer in time")?.context("cannot read")?;
            if read == 0 {
                bail!("connection closed: {}", String::from_utf8_lossy(&answer).trim_end());
            }
            answer.extend_from_slice(&chunk[..read]);
            if answer.len() > RAW_BUFFER_BYTES_MAX {
                bail!("unexpected answer: {}", String::from_utf8_lossy(&answer[..200]));
            }
        }
        Ok(answer)
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

// ---- stored ----

/// What one fill level measured on one server.
struct StoredPoint {
    js_pub: f64,
    rss: u64,
    /// RSS growth since the fresh server, per stored message.
    rss_per_msg: f64,
    info: Duration,
    ack: Duration,
}

async fn stored_curve(bench: &Bench, levels: &[u64]) -> Result<Report> {
    let mut per_side = Vec::new();
    for spec in &bench.specs {
        per_side.push(stored_side(bench, spec, levels).await?);
    }
    let figure = |file, title, format, value: fn(&StoredPoint) -> f64| {
        let mut figure = Figure::new(file, title, format);
        for (index, level) in levels.iter().enumerate() {
            figure.points.push((*level, [0, 1].map(|side| per_side[side].get(index).map(value))));
        }
        figure
    };
    let js_pub = figure("scale-stored-js-pub", "js-pub msgs/s", format_rate, |p| p.js_pub);
    let rss = figure("scale-stored-rss", "server RSS MiB", format_mebibytes, |p| p.rss as f64);
    let rss_per_msg =
        figure("scale-stored-rss-per-msg", "RSS growth per stored message", format_bytes_fraction, |p| p.rss_per_msg);
    let info =
        figure("scale-stored-restart-info", "restart → STREAM.INFO s", format_seconds, |p| p.info.as_secs_f64());
    let ack = figure("scale-stored-restart-ack", "restart → first PubAck s", format_seconds, |p| p.ack.as_secs_f64());
    let (bottom, top) = (levels.first().copied().unwrap_or(1), levels.last().copied().unwrap_or(1));
    let mut verdicts = Vec::new();
    if let Some((_, semaq)) = rss_per_msg.ends(0) {
        let pass = if semaq <= STORED_RSS_PER_MSG_GOAL_BYTES { "PASS" } else { "FAIL" };
        let nats = rss_per_msg.ends(1).map_or_else(|| "-".into(), |(_, nats)| format_bytes_fraction(nats));
        verdicts.push(format!(
            "semaq-server: RSS growth per stored message at {}: {}  {pass} (goal ≤ {STORED_RSS_PER_MSG_GOAL_BYTES} B; nats-server {nats})",
            format_count(top),
            format_bytes_fraction(semaq),
        ));
    }
    if let (Some((_, semaq)), Some((_, nats))) = (ack.ends(0), ack.ends(1)) {
        let what = format!("restart → first PubAck at {}: semaq-server / nats-server", format_count(top));
        verdicts.push(verdict(&what, semaq / nats.max(1e-9), Some(STORED_RESTART_GOAL), false));
    }
    for (side, name) in [(0, "semaq-server"), (1, "nats-server")] {
        let goal = |g| if side == 0 { Some(g) } else { None };
        if let Some((first, last)) = js_pub.ends(side) {
            let what = format!("{name}: js-pub at {} stored / at {}", format_count(top), format_count(bottom));
            verdicts.push(verdict(&what, last / first, goal(STORED_JS_PUB_GOAL), true));
        }
        if let Some((first, last)) = ack.ends(side) {
            let growth = top as f64 / bottom.max(1) as f64;
            let what = format!(
                "{name}: restart → first PubAck at {} / at {} (sublinear: under {growth:.1}×)",
                format_count(top),
                format_count(bottom)
            );
            // Sublinear: the restart grows by less than the store does.
            verdicts.push(verdict(&what, last / first.max(1e-9), goal(growth).filter(|_| growth > 1.0), false));
        }
    }
    Ok(Report {
        name: "stored",
        what: "one file stream filled to each level: js-pub (1,000 acks outstanding), RSS, restart".into(),
        x_desc: "messages stored",
        figures: vec![js_pub, rss, rss_per_msg, info, ack],
        verdicts,
    })
}

/// Fills a stream on a fresh server to each level, measuring js-pub, memory and a restart at each.
async fn stored_side(bench: &Bench, spec: &ServerSpec, levels: &[u64]) -> Result<Vec<StoredPoint>> {
    let mut server = spec.start(bench.work.path())?;
    let store_dir = server.store_dir().to_path_buf();
    let result = async {
        tokio::time::sleep(bench.sizes.settle).await;
        let fresh_rss = resident_bytes(server.pid())?;
        let target = Target::plain(server.url.clone(), CLIENT_TIMEOUT);
        let mut stream = BenchStream::create(&target, Durability::Default, "scale").await?;
        let mut stored = 0u64;
        let mut points = Vec::new();
        for &level in levels {
            let fill =
                PublishPlan { msgs: level.saturating_sub(stored), size: bench.sizes.pubsub.size, deadline: None };
            let started = Instant::now();
            stored += publish_all(&stream, &fill).await?;
            eprintln!(
                "stored: {} filled to {} in {:.1} s",
                spec.label,
                format_count(level),
                started.elapsed().as_secs_f64()
            );
            // Memory and restart at exactly `level`; js-pub afterwards adds messages the next fill counts.
            let (name, subject) = (stream.name.clone(), stream.subject.clone());
            // Closed before the stop, so the memory is the store's and the restart starts with no client.
            drop(stream);
            tokio::time::sleep(bench.sizes.settle).await;
            let rss = resident_bytes(server.pid())?;
            let restart = restart(&mut server, &name, &subject, stored).await?;
            stored += 1;
            stream = restart.stream;
            let (js_pub, acked) = js_pub_rounds(&stream, bench, spec.label).await?;
            stored += acked;
            let rss_per_msg = (rss as f64 - fresh_rss as f64).max(0.0) / level.max(1) as f64;
            points.push(StoredPoint { js_pub, rss, rss_per_msg, info: restart.info, ack: restart.ack });
        }
        Ok(points)
    }
    .await;
    drop(server);
    // Gigabytes at the larger levels; the work dir goes at the end anyway, so a failure here is harmless.
    let _ = std::fs::remove_dir_all(&store_dir);
    result
}

/// js-pub `rounds` times on the filled stream: the median rate, and the messages it added.
async fn js_pub_rounds(stream: &BenchStream, bench: &Bench, label: &str) -> Result<(f64, u64)> {
    let measure = PublishPlan {
        msgs: bench.sizes.js_pub_msgs,
        size: bench.sizes.pubsub.size,
        deadline: Some(bench.sizes.js_pub_duration),
    };
    let (mut rates, mut acked) = (Vec::new(), 0);
    for _ in 0..bench.sizes.rounds {
        let published = publish_pipelined(stream, &measure, &ProgressBar::hidden()).await?;
        if published.failed > 0 {
            bail!("{label}: {}", published.problems(None).join("; "));
        }
        acked += published.acked;
        rates.push(published.acked as f64 / published.elapsed.as_secs_f64().max(1e-9));
    }
    Ok((median(&rates).unwrap_or(0.0), acked))
}

/// Publishes `plan.msgs` with acks pipelined; fails unless every one was acknowledged.
async fn publish_all(stream: &BenchStream, plan: &PublishPlan) -> Result<u64> {
    let published = publish_pipelined(stream, plan, &ProgressBar::hidden()).await?;
    let problems = published.problems(None);
    if !problems.is_empty() || published.acked != plan.msgs {
        bail!("filling {}: {} of {} acked; {}", stream.name, published.acked, plan.msgs, problems.join("; "));
    }
    Ok(published.acked)
}

/// A restart's timings, and the stream reached through the restarted server.
struct Restarted {
    info: Duration,
    ack: Duration,
    stream: BenchStream,
}

/// Stops the server (SIGTERM), starts it again, and times STREAM.INFO reporting all `stored`
/// messages and the PubAck of one more.
async fn restart(server: &mut ServerProcess, name: &str, subject: &str, stored: u64) -> Result<Restarted> {
    server.terminate(SHUTDOWN_TIMEOUT)?;
    let started = Instant::now();
    server.start_again(RESTART_TIMEOUT)?;
    let deadline = started + RESTART_TIMEOUT;
    let target = Target::plain(server.url.clone(), CLIENT_TIMEOUT);
    let client = target.connect().await?;
    let context = async_nats::jetstream::ContextBuilder::new().timeout(CLIENT_TIMEOUT).build(client);
    loop {
        let last = match context.get_stream(name).await {
            Ok(stream) if stream.cached_info().state.messages == stored => break,
            Ok(stream) => format!("{} of {stored} messages", stream.cached_info().state.messages),
            Err(error) => error.to_string(),
        };
        if Instant::now() >= deadline {
            bail!("{}: stream {name} not back {}s after the restart: {last}", server.label, RESTART_TIMEOUT.as_secs());
        }
        tokio::time::sleep(RESTART_POLL).await;
    }
    let info = started.elapsed();
    let ack = context.publish(subject.to_string(), bytes::Bytes::from_static(b"after restart")).await;
    ack.context("cannot publish after the restart")?.await.context("no PubAck after the restart")?;
    let ack = started.elapsed();
    let stream = BenchStream { context, name: name.to_string(), subject: subject.to_string() };
    Ok(Restarted { info, ack, stream })
}

// ---- idle ----

async fn idle_curve(bench: &Bench, levels: &[u64]) -> Result<Report> {
    let mut rss = Figure::new("scale-idle-rss", "server RSS bytes per idle connection", format_bytes);
    let mut rate = Figure::new("scale-idle-pubsub", "pubsub msgs/s among the active connections", format_rate);
    let mut per_side = Vec::new();
    for spec in &bench.specs {
        per_side.push(idle_side(bench, spec, levels).await?);
    }
    for (index, level) in levels.iter().enumerate() {
        rss.points.push((*level, [0, 1].map(|side| per_side[side].get(index).map(|p| p.0))));
        rate.points.push((*level, [0, 1].map(|side| per_side[side].get(index).map(|p| p.1))));
    }
    let mut verdicts = Vec::new();
    if let (Some((_, semaq)), Some((_, nats))) = (rss.ends(0), rss.ends(1)) {
        let top = levels.last().copied().unwrap_or(1);
        let what = format!("RSS per idle connection at {top}: semaq-server / nats-server");
        verdicts.push(verdict(&what, semaq / nats.max(1.0), Some(1.0), false));
    }
    Ok(Report {
        name: "idle",
        what: "N idle connections (CONNECT, PING) held open; pubsub between two more meanwhile".into(),
        x_desc: "idle connections",
        figures: vec![rss, rate],
        verdicts,
    })
}

/// On a fresh server: first the memory at each level (connections only added, nothing else
/// running), then with the connections reopened, pubsub at each level. Returns (bytes per
/// connection, pubsub msgs/s) per level.
async fn idle_side(bench: &Bench, spec: &ServerSpec, levels: &[u64]) -> Result<Vec<(f64, f64)>> {
    let server = spec.start(bench.work.path())?;
    tokio::time::sleep(bench.sizes.settle).await;
    let base = resident_bytes(server.pid())?;
    let mut connections = Vec::new();
    let mut per_connection = Vec::new();
    for &level in levels {
        open_idle(&server.url, &mut connections, level).await?;
        tokio::time::sleep(bench.sizes.settle).await;
        let rss = resident_bytes(server.pid())?;
        per_connection.push((rss as f64 - base as f64) / level as f64);
    }
    connections.clear();
    let mut rates = Vec::new();
    for &level in levels {
        open_idle(&server.url, &mut connections, level).await?;
        let mut runs = Vec::new();
        for _ in 0..bench.sizes.rounds {
            runs.push(pubsub_once(&server, &bench.sizes.pubsub).await?.0);
        }
        rates.push(median(&runs).unwrap_or(0.0));
    }
    eprintln!("idle: {} done", spec.label);
    Ok(per_connection.into_iter().zip(rates).collect())
}

/// Opens connections until there are `level`.
async fn open_idle(url: &str, connections: &mut Vec<RawConnection>, level: u64) -> Result<()> {
    let missing = usize::try_from(level).unwrap_or(usize::MAX).saturating_sub(connections.len());
    let opened: Vec<RawConnection> = futures::stream::iter(0..missing)
        .map(|_| RawConnection::open(url))
        .buffer_unordered(CONNECT_CONCURRENCY)
        .try_collect()
        .await
        .with_context(|| format!("cannot open {level} connections"))?;
    connections.extend(opened);
    Ok(())
}

// ---- filters ----

async fn filters_curve(bench: &Bench, levels: &[u64]) -> Result<Report> {
    let servers = [bench.specs[0].start(bench.work.path())?, bench.specs[1].start(bench.work.path())?];
    let mut rate = Figure::new("scale-filters", "events/s through one subject", format_rate);
    for (index, &level) in levels.iter().enumerate() {
        let filters = level.min(FILTERS_MAX);
        let mut rates: [Vec<f64>; 2] = Default::default();
        for round in 0..bench.sizes.rounds as usize {
            for side in order(index + round) {
                rates[side].push(filters_once(&servers[side].url, filters, bench.sizes.filter_msgs, side == 0).await?);
            }
        }
        rate.points.push((level, medians(&rates)));
    }
    let mut verdicts = Vec::new();
    for (side, name) in [(0, "semaq-server, CEL on the server"), (1, "nats-server, serde_json in the client")] {
        if let Some((first, last)) = rate.ends(side) {
            let top = levels.last().copied().unwrap_or(1);
            verdicts.push(verdict(&format!("{name}: events/s with {top} filters / with 1"), last / first, None, true));
        }
    }
    Ok(Report {
        name: "filters",
        what: format!(
            "~200 B JSON events to one subject; N subscribers each wanting 1 in {FILTER_MODELS} (as filter-fanout)"
        ),
        x_desc: "filters on the subject",
        figures: vec![rate],
        verdicts,
    })
}

/// Publishes `msgs` events with `filters` subscribers on one connection each; returns events per
/// second from the first publish to the last match received.
async fn filters_once(url: &str, filters: u64, msgs: u64, on_server: bool) -> Result<f64> {
    let mut receivers = tokio::task::JoinSet::new();
    let mut clients = Vec::new();
    for index in 0..filters {
        let client = filter_fanout::connect(url).await?;
        let model = index % FILTER_MODELS;
        let subscriber = if on_server {
            filter_fanout::filtered_subscriber(&client, usize::try_from(model).unwrap_or(0)).await?
        } else {
            client.subscribe(filter_fanout::SUBJECT).await.context("subscribe")?
        };
        client.flush().await.context("flush")?;
        let want = msgs / FILTER_MODELS + u64::from(model < msgs % FILTER_MODELS);
        receivers.spawn(filter_fanout::receive(subscriber, want, on_server, format!("model-{model}"), CLIENT_TIMEOUT));
        clients.push(client);
    }
    let publisher = filter_fanout::connect(url).await?;
    let started = Instant::now();
    for i in 0..msgs {
        publisher.publish(filter_fanout::SUBJECT, filter_fanout::event(i).into()).await.context("publish")?;
    }
    publisher.flush().await.context("flush")?;
    let (mut matched, mut last) = (0, started);
    while let Some(result) = receivers.join_next().await {
        let received = result.context("receiver")?;
        matched += received.matched;
        last = last.max(received.last);
    }
    let expected = msgs * filters / FILTER_MODELS;
    if matched < expected {
        bail!("{url}: {filters} filters received {matched} of {expected} matches");
    }
    Ok(msgs as f64 / last.duration_since(started).as_secs_f64().max(1e-9))
}

// ---- output ----

fn verdict(what: &str, ratio: f64, goal: Option<f64>, higher_is_better: bool) -> String {
    match goal {
        Some(goal) => {
            let pass = if higher_is_better { ratio >= goal } else { ratio <= goal };
            let sign = if higher_is_better { "≥" } else { "≤" };
            format!("{what}: {ratio:.2}×  {} (goal {sign} {goal:.2}×)", if pass { "PASS" } else { "FAIL" })
        }
        None => format!("{what}: {ratio:.2}×"),
    }
}

fn print_report(report: &Report) {
    println!("\n{}: {}", report.name, report.what);
    for figure in &report.figures {
        println!("  {}", figure.title);
        println!("  {:>12} {:>14} {:>14} {:>11}", "N", "semaq", "nats", "semaq/nats");
        for (x, [semaq, nats]) in &figure.points {
            let cell = |value: &Option<f64>| value.map(figure.format).unwrap_or_else(|| "-".into());
            let ratio = match (semaq, nats) {
                (Some(s), Some(n)) if *n > 0.0 => format!("{:.2}×", s / n),
                _ => "-".into(),
            };
            println!("  {:>12} {:>14} {:>14} {ratio:>11}", format_count(*x), cell(semaq), cell(nats));
        }
    }
    for line in &report.verdicts {
        println!("  {line}");
    }
}

fn save_plots(report: &Report, dir: &Path) {
    for figure in &report.figures {
        let series = [(0, "semaq-server"), (1, "nats-server")].map(|(side, name)| {
            let points = figure.points.iter().filter_map(|(x, values)| Some((*x as f64, values[side]?))).collect();
            (name.to_string(), points)
        });
        let curve = PlotCurve {
            title: format!("{}: {}", report.name, figure.title),
            x_desc: report.x_desc.to_string(),
            y_desc: figure.title.to_string(),
            series: series.into(),
        };
        let path = dir.join(format!("{}.png", figure.file));
        match plot::curve_chart(&path, &curve) {
            Ok(()) => println!("  plot: {}", path.display()),
            Err(error) => eprintln!("semaq: warning: no plot {}: {error:#}", path.display()),
        }
    }
}

fn format_rate(value: f64) -> String {
    format_count(value.round() as u64)
}

fn format_micros(value: f64) -> String {
    format!("{value:.2} µs")
}

fn format_seconds(value: f64) -> String {
    format!("{value:.3} s")
}

fn format_mebibytes(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
}

fn format_bytes_fraction(bytes: f64) -> String {
    format!("{bytes:.1} B")
}

fn format_bytes(bytes: f64) -> String {
    format!("{} B", format_count(bytes.max(0.0).round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_compare_in_the_right_direction() {
        assert!(verdict("x", 0.85, Some(0.8), true).contains("PASS"));
        assert!(verdict("x", 0.75, Some(0.8), true).contains("FAIL"));
        assert!(verdict("x", 3.0, Some(5.0), false).contains("PASS"));
        assert!(!verdict("x", 3.0, None, false).contains("PASS"));
    }

    #[test]
    fn figure_ends_are_the_first_and_last_sizes() {
        let mut figure = Figure::new("f", "t", format_rate);
        figure.points = vec![(1, [Some(10.0), None]), (100, [Some(8.0), Some(1.0)])];
        assert_eq!(figure.ends(0), Some((10.0, 8.0)));
        assert_eq!(figure.ends(1), None);
    }
}
