//! `semaq bench observe`: what observability costs. pubsub and js-pub run alternately on two
//! semaq-servers in one run: a plain one, and an observed one that exports traces over OTLP/HTTP
//! at 1% sampling (to a receiver in this process) while its `/metrics` is scraped every second.
//! Prints each side's median and the observed/plain ratio; the target is at least 0.95.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use indicatif::ProgressBar;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use super::server::{ServerProcess, ServerSpec};
use super::stats::{format_count, median, median_ratio};
use super::{LoadArgs, Scenario};
use crate::connect::Target;
use crate::http;
use crate::parse::parse_duration;

/// Throughput the observed server must keep, as a share of the plain one's.
const TARGET_RATIO: f64 = 0.95;
/// Longest OTLP request body the receiver reads.
const OTLP_BODY_BYTES_MAX: usize = 16 * 1024 * 1024;
/// How long the run waits at the end for the observed server's first trace export.
const EXPORT_WAIT: Duration = Duration::from_secs(5);
/// How long a bench connection waits for an answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Arguments of `semaq bench observe`.
#[derive(clap::Args, Debug)]
pub struct ObserveArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// Rounds; each runs both scenarios on both servers, alternating which goes first
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Trace sampling ratio of the observed server (OTEL_TRACES_SAMPLER_ARG)
    #[arg(long, default_value_t = 0.01)]
    sample: f64,
    /// Time between scrapes of the observed server's /metrics
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    scrape_interval: Duration,
    /// semaq-server executable [default: semaq-server next to this program]
    #[arg(long)]
    semaq_server: Option<std::path::PathBuf>,
}

/// Counts what an OTLP/HTTP exporter sends: requests and body bytes.
#[derive(Debug, Default)]
struct Received {
    requests: AtomicU64,
    bytes: AtomicU64,
}

/// An OTLP/HTTP receiver on a loopback port that answers every POST with an empty 200.
async fn otlp_receiver() -> Result<(String, Arc<Received>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await.context("cannot bind the OTLP receiver")?;
    let url = format!("http://{}", listener.local_addr()?);
    let received = Arc::new(Received::default());
    let counts = received.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let counts = counts.clone();
            tokio::spawn(async move {
                let _ = serve_otlp(socket, &counts).await;
            });
        }
    });
    Ok((url, received))
}

async fn serve_otlp(socket: tokio::net::TcpStream, counts: &Received) -> Result<()> {
    let mut reader = BufReader::new(socket);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            if line == "\r\n" {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(value) = lower.strip_prefix("content-length:") {
                length = value.trim().parse().context("bad content-length")?;
            }
        }
        if length > OTLP_BODY_BYTES_MAX {
            bail!("OTLP body of {length} bytes");
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await?;
        counts.requests.fetch_add(1, Ordering::Relaxed);
        counts.bytes.fetch_add(length as u64, Ordering::Relaxed);
        let answer = "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
        reader.get_mut().write_all(answer.as_bytes()).await?;
    }
}

/// Scrapes `/metrics` every `interval` until the task is aborted; counts good scrapes and failures.
fn scrape(authority: String, interval: Duration) -> (tokio::task::JoinHandle<()>, Arc<[AtomicU64; 2]>) {
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let tally = counts.clone();
    let task = tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        loop {
            ticker.tick().await;
            let ok = http::get_text(&authority, "/metrics", ANSWER_TIMEOUT).await.is_ok_and(|t| t.contains("semaq_"));
            tally[usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
        }
    });
    (task, counts)
}

/// Runs `semaq bench observe`.
pub async fn run(args: ObserveArgs) -> Result<()> {
    if !(0.0..=1.0).contains(&args.sample) {
        bail!("--sample must be from 0 to 1");
    }
    let program = match &args.semaq_server {
        Some(path) => path.clone(),
        None => super::compare::default_semaq_server()?,
    };
    let (otlp_url, received) = otlp_receiver().await?;
    let work = tempfile::Builder::new().prefix("semaq-bench-observe-").tempdir().context("cannot create a work dir")?;
    let plain = ServerSpec::new("plain", program.clone()).start(work.path())?;
    let observed = ServerSpec::new("observed", program)
        .with_env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_url.clone())
        .with_env("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
        .with_env("OTEL_TRACES_SAMPLER_ARG", args.sample.to_string())
        .start(work.path())?;
    let (scraper, scrapes) = scrape(observed.monitor_authority(), args.scrape_interval);
    println!(
        "observe: pubsub and js-pub, plain vs observed (traces to {otlp_url} at {}% sampling, /metrics every {:?}), {} round(s)",
        args.sample * 100.0,
        args.scrape_interval,
        args.rounds
    );
    let mut rates: Vec<[Vec<f64>; 2]> = vec![Default::default(), Default::default()];
    for round in 0..args.rounds {
        for (index, scenario) in [Scenario::Pubsub, Scenario::JsPub].into_iter().enumerate() {
            let load = scenario.load(&args.load)?;
            let sides: [(&ServerProcess, usize); 2] = match round % 2 {
                0 => [(&plain, 0), (&observed, 1)],
                _ => [(&observed, 1), (&plain, 0)],
            };
            for (server, side) in sides {
                let target = Target::plain(server.url.clone(), ANSWER_TIMEOUT);
                let report = scenario.run(&target, &load, &ProgressBar::hidden()).await?;
                println!(
                    "  round {} {:<7} {:<9} {:>12} msgs/s",
                    round + 1,
                    scenario.name(),
                    server.label,
                    format_count(report.rate() as u64)
                );
                rates[index][side].push(report.rate());
            }
        }
    }
    scraper.abort();
    // The exporter sends in batches a moment apart: give the last one time to arrive.
    let waited = std::time::Instant::now();
    while received.requests.load(Ordering::Relaxed) == 0 && waited.elapsed() < EXPORT_WAIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (requests, bytes) = (received.requests.load(Ordering::Relaxed), received.bytes.load(Ordering::Relaxed));
    let [good, failed] = [scrapes[0].load(Ordering::Relaxed), scrapes[1].load(Ordering::Relaxed)];
    println!(
        "  observed side: {requests} OTLP requests ({bytes} bytes); /metrics scraped {good} times, {failed} failed"
    );
    let mut passed = true;
    for (index, scenario) in [Scenario::Pubsub, Scenario::JsPub].into_iter().enumerate() {
        let [plain_rates, observed_rates] = &rates[index];
        let ratio = median_ratio(observed_rates, plain_rates).unwrap_or(0.0);
        let verdict = if ratio >= TARGET_RATIO { "PASS" } else { "FAIL" };
        passed &= ratio >= TARGET_RATIO;
        println!(
            "  {:<7} plain {:>12} msgs/s  observed {:>12} msgs/s  observed / plain {ratio:.2}×  {verdict} (target ≥ {TARGET_RATIO:.2}×)",
            scenario.name(),
            format_count(median(plain_rates).unwrap_or(0.0) as u64),
            format_count(median(observed_rates).unwrap_or(0.0) as u64),
        );
    }
    if requests == 0 || failed > 0 || good == 0 {
        bail!(
            "the observed server was not observed: {requests} OTLP requests, {good} good and {failed} failed scrapes"
        );
    }
    println!("  {}", if passed { "all targets met" } else { "a target was missed" });
    Ok(())
}
