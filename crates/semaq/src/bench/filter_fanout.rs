//! `semaq bench filter-fanout`: content routing on the server against filtering in the client.
//!
//! One publisher sends ~200 B JSON inference events on one subject; 10 subscribers each want a
//! different ~10% of them. (a) semaq-server with a CEL filter per subscriber
//! (`$SEMAQ.API.SUB.CREATE`); (b) nats-server with the same 10 subscribers receiving everything
//! and filtering with serde_json. Reported: matched messages delivered per second (first publish
//! to last match received) and the payload bytes the subscribers received. `semaq bench compare`
//! runs the same measurement as its `filter-fanout` entry.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use serde_json::{json, Value};

use super::server::ServerSpec;

/// Subscribers, each with its own filter.
const SUBSCRIBERS: usize = 10;
/// The subject the events go to.
pub(super) const SUBJECT: &str = "ai.inference";
/// A subscriber that receives nothing for this long has everything it will get.
const QUIET: Duration = Duration::from_secs(2);
/// Messages each subscription may buffer in the client, so the client never drops any.
const SUBSCRIPTION_CAPACITY: usize = 4 * 1024 * 1024;
/// Events published when `--msgs` is not given.
pub const MSGS_DEFAULT: u64 = 200_000;

/// Arguments of `semaq bench filter-fanout`.
#[derive(clap::Args, Debug)]
pub struct FilterFanoutArgs {
    /// Events to publish
    #[arg(long, default_value_t = MSGS_DEFAULT)]
    msgs: u64,
    /// Give up waiting for deliveries after this long
    #[arg(long, default_value = "30s", value_parser = crate::parse::parse_duration)]
    timeout: Duration,
    /// semaq-server executable [default: semaq-server next to this program]
    #[arg(long, value_name = "PATH")]
    semaq_server: Option<PathBuf>,
    /// nats-server executable
    #[arg(long, value_name = "PATH", default_value = "nats-server")]
    nats_server: PathBuf,
}

/// One side's figures.
#[derive(Debug)]
pub struct Outcome {
    /// Matches the subscribers received (or found, filtering in the client).
    pub matched: u64,
    /// Matches there are among the published events.
    pub expected: u64,
    /// First publish to the last match received.
    pub elapsed: Duration,
    /// Payload bytes delivered to the subscribers, matches or not.
    pub delivered_bytes: u64,
}

impl Outcome {
    /// Matched messages delivered per second.
    pub fn rate(&self) -> f64 {
        self.matched as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs both sides and prints the comparison.
pub async fn run(args: FilterFanoutArgs) -> Result<()> {
    let semaq_program = match &args.semaq_server {
        Some(path) => path.clone(),
        None => std::env::current_exe()?.with_file_name("semaq-server"),
    };
    let work = tempfile::tempdir().context("cannot create a scratch directory")?;
    let semaq = ServerSpec::new("semaq", semaq_program).start(work.path())?;
    let server_side = measure(&semaq.url, args.msgs, args.timeout, true).await?;
    drop(semaq);
    let nats = ServerSpec::new("nats", args.nats_server.clone()).start(work.path())?;
    let client_side = measure(&nats.url, args.msgs, args.timeout, false).await?;
    drop(nats);
    for (label, outcome) in [("semaq-server", &server_side), ("nats-server", &client_side)] {
        if outcome.matched < outcome.expected {
            eprintln!("warning: {label}: received {} of {} matches", outcome.matched, outcome.expected);
        }
    }
    print_report(&args, &server_side, &client_side);
    Ok(())
}

fn print_report(args: &FilterFanoutArgs, semaq: &Outcome, nats: &Outcome) {
    println!("filter-fanout: 1 publisher, {} events of ~200 B, {SUBSCRIBERS} subscribers matching 10% each", args.msgs);
    println!("  {:<42} {:>14} {:>16} {:>10}", "", "matched msgs/s", "bytes to subs", "elapsed");
    for (label, outcome) in
        [("semaq-server, CEL filters on the server", semaq), ("nats-server, serde_json in the client", nats)]
    {
        println!(
            "  {label:<42} {:>14.0} {:>16} {:>9.3}s",
            outcome.rate(),
            outcome.delivered_bytes,
            outcome.elapsed.as_secs_f64()
        );
    }
    println!(
        "  ratio: {:.2}× matched msgs/s, {:.1}× fewer bytes sent to subscribers",
        semaq.rate() / nats.rate().max(1e-9),
        nats.delivered_bytes as f64 / semaq.delivered_bytes.max(1) as f64
    );
}

/// The `i`-th event: model `model-<i % 10>`, so each subscriber's filter matches exactly 10%.
pub(super) fn event(i: u64) -> Vec<u8> {
    json!({
        "model_id": format!("model-{}", i % SUBSCRIBERS as u64),
        "confidence": (i % 100) as f64 / 100.0,
        "input_tokens": 100 + i % 4000,
        "output_tokens": 20 + i % 500,
        "request_id": format!("req-{i:012}"),
        "region": "eu-west-1",
        "latency_ms": 12.5,
        "session": "c0ffee00-1234-5678-9abc-def012345678",
    })
    .to_string()
    .into_bytes()
}

fn filter(index: usize) -> String {
    format!(r#"model_id == "model-{index}" && input_tokens < 100000"#)
}

/// Publishes `msgs` events to the server at `url` with 10 subscribers, filtering `on_server`
/// (semaq-server's `$SEMAQ.API.SUB.CREATE`) or in the client.
pub async fn measure(url: &str, msgs: u64, timeout: Duration, on_server: bool) -> Result<Outcome> {
    let mut receivers = tokio::task::JoinSet::new();
    let mut clients = Vec::new();
    for index in 0..SUBSCRIBERS {
        let client = connect(url).await?;
        let share = msgs / SUBSCRIBERS as u64 + u64::from((index as u64) < msgs % SUBSCRIBERS as u64);
        let subscriber = if on_server {
            filtered_subscriber(&client, index).await?
        } else {
            client.subscribe(SUBJECT).await.context("subscribe")?
        };
        client.flush().await.context("flush")?;
        let model = format!("model-{index}");
        receivers.spawn(receive(subscriber, share, on_server, model, timeout));
        clients.push(client);
    }
    let publisher = connect(url).await?;
    let started = Instant::now();
    for i in 0..msgs {
        publisher.publish(SUBJECT, event(i).into()).await.context("publish")?;
    }
    publisher.flush().await.context("flush")?;
    let (mut matched, mut delivered_bytes, mut last) = (0, 0, started);
    while let Some(result) = receivers.join_next().await {
        let received = result.context("receiver")?;
        matched += received.matched;
        delivered_bytes += received.bytes;
        last = last.max(received.last);
    }
    drop(clients);
    Ok(Outcome { matched, expected: msgs, elapsed: last.duration_since(started), delivered_bytes })
}

pub(super) async fn connect(url: &str) -> Result<async_nats::Client> {
    let options = async_nats::ConnectOptions::new().subscription_capacity(SUBSCRIPTION_CAPACITY);
    options.connect(url).await.with_context(|| format!("cannot connect to {url}"))
}

pub(super) async fn filtered_subscriber(client: &async_nats::Client, index: usize) -> Result<async_nats::Subscriber> {
    let inbox = client.new_inbox();
    let subscriber = client.subscribe(inbox.clone()).await.context("subscribe")?;
    let body = json!({ "subject": SUBJECT, "filter": filter(index), "deliver": inbox });
    let reply = client.request("$SEMAQ.API.SUB.CREATE", body.to_string().into()).await.context("create")?;
    let reply: Value = serde_json::from_slice(&reply.payload).context("create reply")?;
    if reply.get("error").is_some() {
        bail!("filter refused: {reply}");
    }
    Ok(subscriber)
}

/// What one subscriber received.
pub(super) struct Received {
    /// Matches received.
    pub matched: u64,
    /// Payload bytes received, matches or not.
    pub bytes: u64,
    /// When the last match arrived.
    pub last: Instant,
}

/// Counts this subscriber's matches, the payload bytes it received and when the last match
/// arrived; on nats-server it parses every message to find them. Ends with all wanted, after
/// `QUIET` without a message, or at `timeout`.
pub(super) async fn receive(
    mut subscriber: async_nats::Subscriber,
    want: u64,
    on_server: bool,
    model: String,
    timeout: Duration,
) -> Received {
    let mut received = Received { matched: 0, bytes: 0, last: Instant::now() };
    let deadline = tokio::time::Instant::now() + timeout;
    while received.matched < want {
        let quiet = (tokio::time::Instant::now() + QUIET).min(deadline);
        let Ok(Some(message)) = tokio::time::timeout_at(quiet, subscriber.next()).await else { break };
        received.bytes += message.payload.len() as u64;
        let matched = on_server || {
            let parsed: Result<Value, _> = serde_json::from_slice(&message.payload);
            parsed.is_ok_and(|event| event["model_id"] == model.as_str())
        };
        if matched {
            received.matched += 1;
            received.last = Instant::now();
        }
    }
    received
}
