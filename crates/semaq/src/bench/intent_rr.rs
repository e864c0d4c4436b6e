//! `semaq bench intent-rr`: request/reply through intent routing against the same load through
//! a plain queue group, on one semaq-server.
//!
//! Four responders each way, each on its own connection, doing the same work: a queue group of
//! four async-nats subscribers echoing the payload inline, and four agents that are plain
//! async-nats clients (a heartbeat, then the same inline echo), so the difference is what the
//! broker's routing costs. `--sdk-agents` makes them semaq-agent SDK agents instead, whose
//! replies also carry a `Semaq-Agent` header (which the server and the requesters then parse)
//! and whose handlers run as futures of the serving loop: the SDK's cost on top. `--concurrency`
//! requesters (over four connections) keep one request in flight each for `--duration`; rounds alternate which side
//! goes first, and the ratios are medians of the per-round ratios, as in `bench compare`. A
//! server the bench starts runs on half the CPUs and the clients on the other half
//! (`bench/cpus.rs` says why; `--shared-cpus` turns it off).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use async_nats::Client;
use bytes::Bytes;
use futures::StreamExt;
use hdrhistogram::Histogram;
use semaq_agent::{Agent, Reply, Request, HEARTBEAT_SUBJECT};
use serde_json::json;

use super::agent_net::{start_agent, stop_agents, BenchServer};
use super::cpus::CpuSplit;
use super::server::{cpu_per_message, cpu_seconds};
use super::stats::{format_count, format_latency_ns, latency_histogram, median, median_ratio, record_latency};
use crate::connect::Target;
use crate::parse::parse_duration;

/// Responders on each side.
const RESPONDERS: usize = 4;
/// Connections the requesters share.
const REQUESTER_CONNECTIONS: usize = 4;
/// Round trips per side before measuring (subscriptions, reply inboxes, first synapses).
const WARMUP_REQUESTS: usize = 400;
/// Intent p99 may be at most this many times the queue group's.
const P99_RATIO_MAX: f64 = 1.1;
/// Intent throughput must be at least this share of the queue group's.
const THROUGHPUT_RATIO_MIN: f64 = 0.9;

/// Arguments of `semaq bench intent-rr`.
#[derive(clap::Args, Debug)]
pub struct IntentRrArgs {
    /// How long each side is measured per round
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Rounds; each measures both sides, alternating which goes first
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Requests in flight at once (one per requester)
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=4096))]
    concurrency: u64,
    /// Capacity each agent announces
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    capacity: u32,
    /// Payload size in bytes
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// Agents built with the semaq-agent SDK (their replies carry `Semaq-Agent`) instead of
    /// plain async-nats clients echoing inline as the queue group does: the SDK's cost on top
    /// of the broker's
    #[arg(long)]
    sdk_agents: bool,
    /// semaq-server executable, when no --server is given [default: semaq-server next to this program]
    #[arg(long, value_name = "PATH")]
    semaq_server: Option<PathBuf>,
    /// Run the server this bench starts on the same CPUs as the clients. By default, with two
    /// CPUs or more, the server gets the first half and the clients the rest, so that neither
    /// preempts the other and the tail measures the broker, not the scheduler
    #[arg(long)]
    shared_cpus: bool,
    /// The CPU split in force, set before the async runtime starts.
    #[arg(skip)]
    cpus: Option<CpuSplit>,
}

impl IntentRrArgs {
    /// Moves this process to the clients' CPUs, unless the server is named (`--server`) or
    /// `--shared-cpus` is given; must run before the async runtime starts.
    pub fn split_cpus(&mut self, server_named: bool) -> Result<()> {
        if server_named || self.shared_cpus {
            return Ok(());
        }
        self.cpus = CpuSplit::of_this_thread();
        if let Some(cpus) = &self.cpus {
            cpus.pin_clients().context("cannot move the clients to their CPUs")?;
        }
        Ok(())
    }
}

/// Which path a request takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Queue,
    Intent,
}

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::Queue => "queue group",
            Side::Intent => "intent",
        }
    }
}

/// One side's figures in one round.
#[derive(Debug)]
struct Figures {
    rate: f64,
    p50_ns: f64,
    p99_ns: f64,
    /// Server CPU seconds per request (when this bench started the server): robust to the
    /// scheduling noise that moves the p99 on a shared machine.
    server_cpu: Option<f64>,
    /// This process's CPU seconds per request: requesters and responders.
    client_cpu: Option<f64>,
    failures: u64,
}

/// Both sides' subjects and responders.
struct Setup {
    queue_subject: String,
    intent_subject: String,
    /// Queue group members and plain agents.
    tasks: Vec<tokio::task::JoinHandle<()>>,
    agents: Vec<Agent>,
    requesters: Vec<Client>,
}

impl Setup {
    fn subject(&self, side: Side) -> &str {
        match side {
            Side::Queue => &self.queue_subject,
            Side::Intent => &self.intent_subject,
        }
    }
}

/// Runs the benchmark and prints its table.
pub async fn run(target: &Target, args: IntentRrArgs) -> Result<()> {
    let server = BenchServer::named_or_started(target, args.semaq_server.clone(), args.cpus.as_ref())?;
    let setup = set_up(&server, &args).await?;
    for side in [Side::Queue, Side::Intent] {
        warm_up(&setup, side, args.size).await?;
    }
    println!(
        "intent-rr: {} requests in flight, {RESPONDERS} responders each way ({} agents), {} B payloads, {} round(s) of {:.1} s per side, {} ({})",
        args.concurrency,
        if args.sdk_agents { "SDK" } else { "plain async-nats" },
        args.size,
        args.rounds,
        args.duration.as_secs_f64(),
        server.target.url,
        args.cpus.as_ref().map_or_else(|| "server and clients on the same CPUs".to_string(), CpuSplit::to_string),
    );
    println!(
        "  {:<6} {:<12} {:>12} {:>10} {:>10} {:>13} {:>13}",
        "round", "side", "req/s", "p50", "p99", "server µs/req", "client µs/req"
    );
    let mut results: [Vec<Figures>; 2] = [Vec::new(), Vec::new()];
    for round in 1..=args.rounds {
        let order = if round % 2 == 1 { [Side::Queue, Side::Intent] } else { [Side::Intent, Side::Queue] };
        for side in order {
            let figures = measure(&setup, side, &args, server.pid()).await;
            print_row(&round.to_string(), side, &figures);
            results[side as usize].push(figures);
        }
    }
    stop_agents(&setup.agents).await;
    setup.tasks.iter().for_each(tokio::task::JoinHandle::abort);
    print_summary(&results)
}

async fn set_up(server: &BenchServer, args: &IntentRrArgs) -> Result<Setup> {
    let pid = std::process::id();
    let (queue_subject, intent) = (format!("semaq.bench.rr.{pid}"), format!("bench_rr_{pid}"));
    let mut tasks = Vec::new();
    for _ in 0..RESPONDERS {
        tasks.push(queue_responder(server, &queue_subject).await?);
    }
    let mut agents = Vec::new();
    for index in 1..=RESPONDERS {
        let id = format!("rr-{pid}-{index}");
        if args.sdk_agents {
            let echo = |request: Request| async move { Ok(Reply::new(request.payload().clone())) };
            agents.push(start_agent(server, &id, &intent, args.capacity, echo).await?);
        } else {
            tasks.push(plain_agent(server, &id, &intent, args.capacity).await?);
        }
    }
    let mut requesters = Vec::new();
    for _ in 0..REQUESTER_CONNECTIONS {
        requesters.push(server.connect().await?);
    }
    Ok(Setup { queue_subject, intent_subject: format!("intent.{intent}"), tasks, agents, requesters })
}

/// An agent without the SDK, as any NATS client can be one: the first heartbeat as a request,
/// then a beat a second and an inline echo on the same connection.
async fn plain_agent(
    server: &BenchServer,
    id: &str,
    intent: &str,
    capacity: u32,
) -> Result<tokio::task::JoinHandle<()>> {
    let client = server.connect().await?;
    let inbox = format!("agents.{id}");
    let mut requests = client.subscribe(inbox.clone()).await.context("subscribe")?;
    let beat = json!({ "agent_id": id, "intents": [intent], "inbox": inbox, "capacity": capacity });
    let beat = Bytes::from(beat.to_string());
    let answer = client.request(HEARTBEAT_SUBJECT, beat.clone()).await.context("heartbeat")?;
    let answer: serde_json::Value = serde_json::from_slice(&answer.payload).context("heartbeat answer")?;
    if answer["ok"] != true {
        bail!("heartbeat refused: {answer}");
    }
    Ok(tokio::spawn(async move {
        let mut beats = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = beats.tick() => {
                    // A lost beat is made up by the next; three lost expire the agent.
                    let _ = client.publish(HEARTBEAT_SUBJECT, beat.clone()).await;
                }
                request = requests.next() => {
                    let Some(request) = request else { break };
                    if let Some(reply) = request.reply {
                        // A lost reply shows up as a failed request on the requesting side.
                        let _ = client.publish(reply, request.payload).await;
                    }
                }
            }
        }
    }))
}

/// A queue group member on its own connection that echoes each request, as a plain NATS service would.
async fn queue_responder(server: &BenchServer, subject: &str) -> Result<tokio::task::JoinHandle<()>> {
    let client = server.connect().await?;
    let mut requests = client.queue_subscribe(subject.to_string(), "workers".to_string()).await.context("subscribe")?;
    client.flush().await.context("flush")?;
    Ok(tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            if let Some(reply) = request.reply {
                // A lost reply shows up as a failed request on the requesting side.
                let _ = client.publish(reply, request.payload).await;
            }
        }
    }))
}

async fn warm_up(setup: &Setup, side: Side, size: usize) -> Result<()> {
    let payload = Bytes::from(vec![b'w'; size]);
    for index in 0..WARMUP_REQUESTS {
        let client = &setup.requesters[index % setup.requesters.len()];
        client
            .request(setup.subject(side).to_string(), payload.clone())
            .await
            .with_context(|| format!("{} warm-up request failed", side.label()))?;
    }
    Ok(())
}

/// `--concurrency` requesters, one request in flight each, for `--duration`.
async fn measure(setup: &Setup, side: Side, args: &IntentRrArgs, server_pid: Option<u32>) -> Figures {
    let payload = Bytes::from(vec![b'r'; args.size]);
    let cpu = |pid: Option<u32>| pid.and_then(cpu_seconds);
    let (server_before, client_before) = (cpu(server_pid), cpu(Some(std::process::id())));
    let started = Instant::now();
    let deadline = started + args.duration;
    let mut workers = tokio::task::JoinSet::new();
    for index in 0..args.concurrency as usize {
        let client = setup.requesters[index % setup.requesters.len()].clone();
        let subject = setup.subject(side).to_string();
        workers.spawn(request_loop(client, subject, payload.clone(), deadline));
    }
    let (mut latency, mut failures) = (latency_histogram(), 0);
    while let Some(outcome) = workers.join_next().await {
        if let Ok((histogram, failed)) = outcome {
            // Same bounds on both: the add cannot fail.
            let _ = latency.add(&histogram);
            failures += failed;
        }
    }
    let elapsed = started.elapsed().as_secs_f64().max(1e-9);
    let requests = latency.len();
    Figures {
        rate: requests as f64 / elapsed,
        p50_ns: latency.value_at_quantile(0.5) as f64,
        p99_ns: latency.value_at_quantile(0.99) as f64,
        server_cpu: cpu_per_message(server_before, cpu(server_pid), requests),
        client_cpu: cpu_per_message(client_before, cpu(Some(std::process::id())), requests),
        failures,
    }
}

/// Requests one after another until `deadline`: the round trips, and how many failed.
async fn request_loop(client: Client, subject: String, payload: Bytes, deadline: Instant) -> (Histogram<u64>, u64) {
    let (mut latency, mut failures) = (latency_histogram(), 0);
    while Instant::now() < deadline {
        let sent = Instant::now();
        match client.request(subject.clone(), payload.clone()).await {
            Ok(_) => record_latency(&mut latency, sent.elapsed()),
            Err(_) => failures += 1,
        }
    }
    (latency, failures)
}

fn print_row(round: &str, side: Side, figures: &Figures) {
    let failures = if figures.failures > 0 { format!("  ({} failed)", figures.failures) } else { String::new() };
    let micros = |cpu: Option<f64>| cpu.map_or("-".to_string(), |seconds| format!("{:.1}", seconds * 1e6));
    println!(
        "  {round:<6} {:<12} {:>12} {:>10} {:>10} {:>13} {:>13}{failures}",
        side.label(),
        format_count(figures.rate.round() as u64),
        format_latency_ns(figures.p50_ns as u64),
        format_latency_ns(figures.p99_ns as u64),
        micros(figures.server_cpu),
        micros(figures.client_cpu),
    );
}

/// Medians per side, the median per-round ratios, and a PASS/FAIL line per target.
fn print_summary(results: &[Vec<Figures>; 2]) -> Result<()> {
    let column = |side: Side, pick: fn(&Figures) -> f64| results[side as usize].iter().map(pick).collect::<Vec<_>>();
    for side in [Side::Queue, Side::Intent] {
        let figures = Figures {
            rate: median(&column(side, |f| f.rate)).unwrap_or(0.0),
            p50_ns: median(&column(side, |f| f.p50_ns)).unwrap_or(0.0),
            p99_ns: median(&column(side, |f| f.p99_ns)).unwrap_or(0.0),
            server_cpu: median(&column(side, |f| f.server_cpu.unwrap_or(f64::NAN))).filter(|v| v.is_finite()),
            client_cpu: median(&column(side, |f| f.client_cpu.unwrap_or(f64::NAN))).filter(|v| v.is_finite()),
            failures: results[side as usize].iter().map(|f| f.failures).sum(),
        };
        print_row("median", side, &figures);
    }
    let ratio = |pick: fn(&Figures) -> f64| median_ratio(&column(Side::Intent, pick), &column(Side::Queue, pick));
    let (p99, throughput) = (ratio(|f| f.p99_ns).unwrap_or(f64::NAN), ratio(|f| f.rate).unwrap_or(f64::NAN));
    let p50 = ratio(|f| f.p50_ns).unwrap_or(f64::NAN);
    println!("  intent / queue group: p50 {p50:.2}×  p99 {p99:.2}×  throughput {throughput:.2}×");
    let cpu = |pick: fn(&Figures) -> Option<f64>| {
        let values =
            |side: Side| results[side as usize].iter().map(|f| pick(f).unwrap_or(f64::NAN)).collect::<Vec<_>>();
        median_ratio(&values(Side::Intent), &values(Side::Queue)).filter(|v| v.is_finite())
    };
    if let (Some(server), Some(client)) = (cpu(|f| f.server_cpu), cpu(|f| f.client_cpu)) {
        println!("  CPU per request, intent / queue group: server {server:.2}×  client {client:.2}×");
    }
    println!("  {} p99 {p99:.2}× (target ≤ {P99_RATIO_MAX:.2}×)", verdict(p99 <= P99_RATIO_MAX));
    println!(
        "  {} throughput {throughput:.2}× (target ≥ {THROUGHPUT_RATIO_MIN:.2}×)",
        verdict(throughput >= THROUGHPUT_RATIO_MIN)
    );
    let failed: u64 = results.iter().flatten().map(|f| f.failures).sum();
    if failed > 0 {
        bail!("{failed} requests failed");
    }
    Ok(())
}

/// `PASS` or `FAIL`.
pub fn verdict(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "FAIL"
    }
}
