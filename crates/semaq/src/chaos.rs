//! `semaq chaos crash`: an independent crash loop against a real server.
//!
//! A producer publishes pipelined, each message with a `Nats-Msg-Id`, retrying what was not
//! acknowledged (same id) after every restart; a durable pull consumer double-acks each message
//! it gets. At a random moment of every cycle the server is SIGKILLed and started again on the
//! same store. At the end everything left is published and consumed on a calm server, the stream
//! is read whole, and the loop reports:
//!
//! - **lost**: acknowledged publishes missing from the stream;
//! - **duplicates**: messages stored more than once (the ids make retries idempotent);
//! - **confirmed-ack regressions**: messages delivered again after their double ack was
//!   confirmed (the server said "your ack is recorded", then forgot it).
//!
//! Any of them non-zero fails the command. `--nats` runs the same loop on nats-server, whose
//! double acks are confirmed before they are saved.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use async_nats::jetstream::{self, consumer};
use async_nats::HeaderMap;
use futures::StreamExt;
use serde_json::json;

use crate::bench::server::{ServerProcess, ServerSpec};

/// Subject the producer publishes to.
const SUBJECT: &str = "chaos.events";
/// The stream and its durable consumer.
const STREAM: &str = "CHAOS";
const CONSUMER: &str = "worker";
/// How long a publish, a fetch or an ack confirmation may take before it counts as lost.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the server may take to come back after a kill.
const RESTART_TIMEOUT: Duration = Duration::from_secs(30);
/// Messages fetched per pull request.
const FETCH_BATCH: usize = 100;
/// The calm end: how long draining may take before the run is declared stuck.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);
/// How far (acknowledged, not yet confirmed messages) the producer may run ahead of the consumer.
const BACKLOG_MESSAGES_MAX: u64 = 5_000;
/// Rounds of publishing everything still unacknowledged in the calm end.
const DRAIN_PUBLISH_ROUNDS_MAX: u32 = 20;
/// The registry subject of the payloads' schema, for a stream of level 2 and up.
const SCHEMA_SUBJECT: &str = "chaos-events-value";
/// The payloads (message numbers as text) are JSON integers.
const SCHEMA: &str = r#"{"type": "integer", "minimum": 0}"#;

/// Arguments of `semaq chaos`.
#[derive(clap::Args, Debug)]
pub struct ChaosArgs {
    #[command(subcommand)]
    command: ChaosCommand,
}

#[derive(clap::Subcommand, Debug)]
enum ChaosCommand {
    /// SIGKILL the server at random moments while a producer publishes and a consumer double-acks
    Crash(CrashArgs),
}

/// Arguments of `semaq chaos crash`.
#[derive(clap::Args, Debug)]
pub struct CrashArgs {
    /// Kill-and-restart cycles
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    cycles: u32,
    /// Longest a cycle runs before its kill, in milliseconds (each kill comes at a random moment up to this)
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    cycle_ms_max: u64,
    /// Publishes in flight at once (the producer pipelines)
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    window: u64,
    /// The stream's semantic level (semaq.level; ignored with --nats); levels 2 and 3 check the payloads against a JSON schema the loop registers
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=3))]
    level: u8,
    /// Run the loop on nats-server instead, for comparison
    #[arg(long)]
    nats: bool,
    /// semaq-server executable [default: semaq-server next to this program]
    #[arg(long, value_name = "PATH")]
    semaq_server: Option<PathBuf>,
    /// nats-server executable (with --nats)
    #[arg(long, value_name = "PATH", default_value = "nats-server")]
    nats_server: PathBuf,
}

/// Runs `semaq chaos`.
pub async fn run(args: ChaosArgs) -> Result<()> {
    match args.command {
        ChaosCommand::Crash(args) => crash(args).await,
    }
}

/// What both sides of the loop have seen, kept across restarts.
#[derive(Debug, Default)]
struct Ledger {
    /// Next message number to publish for the first time.
    next: u64,
    /// Published and acknowledged: number → stream sequence.
    acked: BTreeMap<u64, u64>,
    /// Published (or being published) but not acknowledged yet.
    unacked: BTreeSet<u64>,
    /// Messages whose double ack the server confirmed.
    confirmed: BTreeSet<u64>,
    /// Messages delivered again after their ack was confirmed.
    regressions: BTreeSet<u64>,
    deliveries: u64,
    publish_retries: u64,
}

async fn crash(args: CrashArgs) -> Result<()> {
    let spec = match args.nats {
        true => ServerSpec::new("nats", args.nats_server.clone()),
        false => {
            let program = match &args.semaq_server {
                Some(path) => path.clone(),
                None => crate::bench::default_semaq_server()?,
            };
            ServerSpec::new("semaq", program)
        }
    };
    let work = tempfile::tempdir().context("cannot create a scratch directory")?;
    let mut server = spec.start(work.path())?;
    create_stream_and_consumer(&server, &args).await?;
    let ledger = Arc::new(Mutex::new(Ledger { next: 1, ..Ledger::default() }));
    let started = Instant::now();
    for cycle in 1..=args.cycles {
        let client = connect(&server).await?;
        let producer = tokio::spawn(produce(client.clone(), ledger.clone(), args.window));
        let consumer = tokio::spawn(consume(client.clone(), ledger.clone()));
        let run_ms = rand::random_range(10..=args.cycle_ms_max);
        tokio::time::sleep(Duration::from_millis(run_ms)).await;
        server.kill().with_context(|| format!("cycle {cycle}: cannot kill the server"))?;
        producer.abort();
        consumer.abort();
        drop(client);
        server.start_again(RESTART_TIMEOUT).with_context(|| format!("cycle {cycle}: the server did not come back"))?;
        if cycle % 10 == 0 || cycle == args.cycles {
            let ledger = lock(&ledger)?;
            eprintln!(
                "cycle {cycle}/{}: {} acked, {} confirmed, {} regressions",
                args.cycles,
                ledger.acked.len(),
                ledger.confirmed.len(),
                ledger.regressions.len()
            );
        }
    }
    let client = connect(&server).await?;
    drain(&client, &ledger, args.window).await?;
    let stored = read_all(&client).await?;
    let ledger = lock(&ledger)?;
    report(&server, &args, &ledger, &stored, started.elapsed())
}

async fn connect(server: &ServerProcess) -> Result<async_nats::Client> {
    let options = async_nats::ConnectOptions::new().request_timeout(Some(ANSWER_TIMEOUT));
    options.connect(&server.url).await.with_context(|| format!("cannot connect to {}", server.url))
}

async fn create_stream_and_consumer(server: &ServerProcess, args: &CrashArgs) -> Result<()> {
    let client = connect(server).await?;
    let mut config = json!({"name": STREAM, "subjects": [SUBJECT], "storage": "file"});
    if !args.nats {
        config["metadata"] = json!({"semaq.level": args.level.to_string()});
    }
    if !args.nats && args.level >= 2 {
        register_schema(&client).await?;
        config["metadata"]["semaq.schema"] = SCHEMA_SUBJECT.into();
    }
    let created = client.request(format!("$JS.API.STREAM.CREATE.{STREAM}"), config.to_string().into()).await?;
    let answer: serde_json::Value = serde_json::from_slice(&created.payload).context("stream create answer")?;
    if answer.get("error").is_some() {
        bail!("cannot create the stream: {answer}");
    }
    let js = jetstream::new(client);
    let stream = js.get_stream(STREAM).await.context("the stream")?;
    let config = consumer::pull::Config {
        durable_name: Some(CONSUMER.into()),
        ack_wait: Duration::from_secs(1),
        ..Default::default()
    };
    stream.create_consumer(config).await.context("cannot create the durable consumer")?;
    Ok(())
}

/// Registers the payloads' schema, which levels 2 and up check every message against.
async fn register_schema(client: &async_nats::Client) -> Result<()> {
    let body = json!({"subject": SCHEMA_SUBJECT, "schema": SCHEMA, "schemaType": "JSON"});
    let registered = client.request("$SEMAQ.API.SCHEMA.REGISTER", body.to_string().into()).await?;
    let answer: serde_json::Value = serde_json::from_slice(&registered.payload).context("schema register answer")?;
    if answer.get("id").is_none() {
        bail!("cannot register the schema: {answer}");
    }
    Ok(())
}

/// Publishes new messages and retries unacknowledged ones, `window` in flight, until aborted.
/// It stays at most `BACKLOG_MESSAGES_MAX` ahead of the consumer's confirmations, so the calm end
/// has a bounded amount left to consume.
async fn produce(client: async_nats::Client, ledger: Arc<Mutex<Ledger>>, window: u64) {
    let js = jetstream::new(client);
    let mut retries: Vec<u64> = match ledger.lock() {
        Ok(ledger) => ledger.unacked.iter().copied().collect(),
        Err(_) => return,
    };
    loop {
        let batch = {
            let Ok(mut ledger) = ledger.lock() else { return };
            let cut = retries.len().min(window as usize);
            let mut batch: Vec<u64> = retries.drain(..cut).collect();
            ledger.publish_retries += cut as u64;
            let ahead = ledger.acked.len().saturating_sub(ledger.confirmed.len()) as u64;
            let fresh = if ahead > BACKLOG_MESSAGES_MAX { 0 } else { window - cut as u64 };
            let first = ledger.next;
            batch.extend(first..first + fresh);
            ledger.unacked.extend(first..first + fresh);
            ledger.next += fresh;
            batch
        };
        if batch.is_empty() {
            // Pacing: the consumer is behind; nothing to retry either.
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        let outcomes = futures::future::join_all(batch.iter().map(|&n| publish_one(&js, n))).await;
        let Ok(mut ledger) = ledger.lock() else { return };
        for (n, outcome) in batch.into_iter().zip(outcomes) {
            match outcome {
                Some(seq) => {
                    ledger.unacked.remove(&n);
                    ledger.acked.insert(n, seq);
                }
                None => retries.push(n),
            }
        }
    }
}

/// Publishes message `n` with its id; the stream sequence of the ack, or `None` when no ack came.
async fn publish_one(js: &jetstream::Context, n: u64) -> Option<u64> {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", format!("chaos-{n}").as_str());
    let sent = js.publish_with_headers(SUBJECT, headers, n.to_string().into()).await.ok()?;
    let ack = tokio::time::timeout(ANSWER_TIMEOUT, sent).await.ok()?.ok()?;
    Some(ack.sequence)
}

/// Pulls from the durable consumer and double-acks every message of a batch at once (the server
/// confirms them with one save), until aborted.
async fn consume(client: async_nats::Client, ledger: Arc<Mutex<Ledger>>) {
    let js = jetstream::new(client);
    let Ok(stream) = js.get_stream(STREAM).await else { return };
    let Ok(worker) = stream.get_consumer::<consumer::pull::Config>(CONSUMER).await else { return };
    loop {
        let fetched = worker.fetch().max_messages(FETCH_BATCH).expires(Duration::from_millis(500)).messages().await;
        let Ok(batch) = fetched else { return };
        let messages: Vec<_> = batch.filter_map(|message| async move { message.ok() }).collect().await;
        let numbered: Vec<(u64, &jetstream::Message)> = messages
            .iter()
            .filter_map(|message| {
                let n = std::str::from_utf8(&message.payload).ok()?.parse::<u64>().ok()?;
                Some((n, message))
            })
            .collect();
        {
            let Ok(mut ledger) = ledger.lock() else { return };
            for (n, _) in &numbered {
                ledger.deliveries += 1;
                if ledger.confirmed.contains(n) {
                    ledger.regressions.insert(*n);
                }
            }
        }
        let acks = numbered.iter().map(|(_, message)| tokio::time::timeout(ANSWER_TIMEOUT, message.double_ack()));
        let outcomes = futures::future::join_all(acks).await;
        let Ok(mut ledger) = ledger.lock() else { return };
        for ((n, _), outcome) in numbered.iter().zip(outcomes) {
            if matches!(outcome, Ok(Ok(()))) {
                ledger.confirmed.insert(*n);
            }
        }
    }
}

/// The calm end: publishes what is still unacknowledged and consumes until every stored message
/// is confirmed.
async fn drain(client: &async_nats::Client, ledger: &Arc<Mutex<Ledger>>, window: u64) -> Result<()> {
    let js = jetstream::new(client.clone());
    for _ in 0..DRAIN_PUBLISH_ROUNDS_MAX {
        let unacked: Vec<u64> = lock(ledger)?.unacked.iter().copied().collect();
        if unacked.is_empty() {
            break;
        }
        for chunk in unacked.chunks(window as usize) {
            let outcomes = futures::future::join_all(chunk.iter().map(|&n| publish_one(&js, n))).await;
            let mut ledger = lock(ledger)?;
            for (&n, outcome) in chunk.iter().zip(outcomes) {
                if let Some(seq) = outcome {
                    ledger.unacked.remove(&n);
                    ledger.acked.insert(n, seq);
                }
            }
        }
    }
    if !lock(ledger)?.unacked.is_empty() {
        bail!("publishes still unacknowledged on a calm server after {DRAIN_PUBLISH_ROUNDS_MAX} rounds");
    }
    let consumer = tokio::spawn(consume(client.clone(), ledger.clone()));
    let stream = js.get_stream(STREAM).await.context("the stream")?;
    let mut worker = stream
        .get_consumer::<consumer::pull::Config>(CONSUMER)
        .await
        .map_err(|error| anyhow::anyhow!("the durable consumer: {error}"))?;
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    let outcome = loop {
        // Done when the server has nothing left to deliver or awaiting an ack. (Not "every ack
        // confirmed": an ack that landed just before a kill lost only its confirmation, and its
        // message rightly never comes again.)
        let info = worker.info().await.context("consumer info")?;
        if info.num_pending == 0 && info.num_ack_pending == 0 {
            break Ok(());
        }
        if Instant::now() >= deadline {
            let left = (info.num_pending, info.num_ack_pending);
            break Err(anyhow::anyhow!(
                "the consumer did not finish within {DRAIN_TIMEOUT:?}: (pending, ack pending) {left:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    consumer.abort();
    outcome
}

fn lock(ledger: &Mutex<Ledger>) -> Result<std::sync::MutexGuard<'_, Ledger>> {
    ledger.lock().map_err(|_| anyhow::anyhow!("ledger poisoned"))
}

/// Every stored message: number → how many times it is stored.
async fn read_all(client: &async_nats::Client) -> Result<HashMap<u64, u64>> {
    let js = jetstream::new(client.clone());
    let stream = js.get_stream(STREAM).await.context("the stream")?;
    let last = stream.get_info().await.context("stream info")?.state.last_sequence;
    let config = consumer::pull::Config { ack_policy: consumer::AckPolicy::None, ..Default::default() };
    let reader = stream.create_consumer(config).await.context("a reader")?;
    let mut stored: HashMap<u64, u64> = HashMap::new();
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    let mut seen_seq = 0;
    while seen_seq < last {
        if Instant::now() >= deadline {
            bail!("could not read the stream to its end ({seen_seq} of {last})");
        }
        let mut batch = reader.fetch().max_messages(1000).expires(Duration::from_millis(500)).messages().await?;
        while let Some(Ok(message)) = batch.next().await {
            seen_seq = message.info().map_or(seen_seq, |info| info.stream_sequence);
            if let Some(n) = std::str::from_utf8(&message.payload).ok().and_then(|text| text.parse::<u64>().ok()) {
                *stored.entry(n).or_default() += 1;
            }
        }
    }
    Ok(stored)
}

fn report(
    server: &ServerProcess,
    args: &CrashArgs,
    ledger: &Ledger,
    stored: &HashMap<u64, u64>,
    elapsed: Duration,
) -> Result<()> {
    let lost = ledger.acked.keys().filter(|n| !stored.contains_key(n)).count();
    let duplicates = stored.values().filter(|count| **count > 1).count();
    let regressions = ledger.regressions.len();
    let level = if args.nats { String::new() } else { format!(", L{}", args.level) };
    println!("chaos crash on {}{level}: {} cycles in {:.1} s", server.label, args.cycles, elapsed.as_secs_f64());
    println!(
        "published {} ({} retries), acknowledged {}, stored {} distinct, {} deliveries, {} acks confirmed",
        ledger.next - 1,
        ledger.publish_retries,
        ledger.acked.len(),
        stored.len(),
        ledger.deliveries,
        ledger.confirmed.len()
    );
    println!("lost: {lost}, duplicates: {duplicates}, confirmed-ack regressions: {regressions}");
    if lost + duplicates + regressions > 0 {
        bail!("{lost} lost, {duplicates} duplicated, {regressions} confirmed acks forgotten");
    }
    Ok(())
}
