//! `semaq bench filter-fanout`: content routing on the server against filtering in the client.
//!
//! One publisher sends ~200 B JSON inference events on one subject; 10 subscribers each want a
//! different ~10% of them. (a) semaq-server with a CEL filter per subscriber
//! (`$SEMAQ.API.SUB.CREATE`); (b) nats-server with the same 10 subscribers receiving everything
//! and filtering with serde_json. Reported: matched messages delivered per second (first publish
//! to last match received) and the bytes the server sent to subscribers (`/varz` `out_bytes`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use serde_json::{json, Value};

/// Subscribers, each with its own filter.
const SUBSCRIBERS: usize = 10;
/// The subject the events go to.
const SUBJECT: &str = "ai.inference";
/// A subscriber that receives nothing for this long has everything it will get.
const QUIET: Duration = Duration::from_secs(2);
/// Messages each subscription may buffer in the client, so the client never drops any.
const SUBSCRIPTION_CAPACITY: usize = 4 * 1024 * 1024;
/// How long a server may take to start.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Arguments of `semaq bench filter-fanout`.
#[derive(clap::Args, Debug)]
pub struct FilterFanoutArgs {
    /// Events to publish
    #[arg(long, default_value_t = 200_000)]
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
struct Outcome {
    matched: u64,
    elapsed: Duration,
    out_bytes: u64,
}

/// Runs both sides and prints the comparison.
pub async fn run(args: FilterFanoutArgs) -> Result<()> {
    let semaq_program = match &args.semaq_server {
        Some(path) => path.clone(),
        None => std::env::current_exe()?.with_file_name("semaq-server"),
    };
    let work = tempfile::tempdir().context("cannot create a scratch directory")?;
    let semaq = Server::start(&semaq_program, work.path())?;
    let server_side = measure(&semaq, &args, true).await?;
    drop(semaq);
    let nats = Server::start(&args.nats_server, work.path())?;
    let client_side = measure(&nats, &args, false).await?;
    drop(nats);
    print_report(&args, &server_side, &client_side);
    Ok(())
}

fn print_report(args: &FilterFanoutArgs, semaq: &Outcome, nats: &Outcome) {
    let rate = |o: &Outcome| o.matched as f64 / o.elapsed.as_secs_f64().max(1e-9);
    println!("filter-fanout: 1 publisher, {} events of ~200 B, {SUBSCRIBERS} subscribers matching 10% each", args.msgs);
    println!("  {:<42} {:>14} {:>16} {:>10}", "", "matched msgs/s", "bytes to subs", "elapsed");
    for (label, outcome) in
        [("semaq-server, CEL filters on the server", semaq), ("nats-server, serde_json in the client", nats)]
    {
        println!(
            "  {label:<42} {:>14.0} {:>16} {:>9.3}s",
            rate(outcome),
            outcome.out_bytes,
            outcome.elapsed.as_secs_f64()
        );
    }
    println!(
        "  ratio: {:.2}× matched msgs/s, {:.1}× fewer bytes sent to subscribers",
        rate(semaq) / rate(nats).max(1e-9),
        nats.out_bytes as f64 / semaq.out_bytes.max(1) as f64
    );
}

/// The `i`-th event: model `model-<i % 10>`, so each subscriber's filter matches exactly 10%.
fn event(i: u64) -> Vec<u8> {
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

async fn measure(server: &Server, args: &FilterFanoutArgs, on_server: bool) -> Result<Outcome> {
    let expected = args.msgs / SUBSCRIBERS as u64;
    let mut receivers = tokio::task::JoinSet::new();
    let mut clients = Vec::new();
    for index in 0..SUBSCRIBERS {
        let client = connect(&server.url).await?;
        let share = args.msgs / SUBSCRIBERS as u64 + u64::from((index as u64) < args.msgs % SUBSCRIBERS as u64);
        let subscriber = if on_server {
            filtered_subscriber(&client, index).await?
        } else {
            client.subscribe(SUBJECT).await.context("subscribe")?
        };
        client.flush().await.context("flush")?;
        let model = format!("model-{index}");
        receivers.spawn(receive(subscriber, share, on_server, model, args.timeout));
        clients.push(client);
    }
    let before = server.out_bytes()?;
    let publisher = connect(&server.url).await?;
    let started = Instant::now();
    for i in 0..args.msgs {
        publisher.publish(SUBJECT, event(i).into()).await.context("publish")?;
    }
    publisher.flush().await.context("flush")?;
    let (mut matched, mut last) = (0, started);
    while let Some(result) = receivers.join_next().await {
        let (count, at) = result.context("receiver")?;
        matched += count;
        last = last.max(at);
    }
    let elapsed = last.duration_since(started);
    if matched < expected * SUBSCRIBERS as u64 {
        eprintln!("warning: {} received {matched} of {} matches", server.label, args.msgs);
    }
    let out_bytes = server.out_bytes()?.saturating_sub(before);
    drop(clients);
    Ok(Outcome { matched, elapsed, out_bytes })
}

async fn connect(url: &str) -> Result<async_nats::Client> {
    let options = async_nats::ConnectOptions::new().subscription_capacity(SUBSCRIPTION_CAPACITY);
    options.connect(url).await.with_context(|| format!("cannot connect to {url}"))
}

async fn filtered_subscriber(client: &async_nats::Client, index: usize) -> Result<async_nats::Subscriber> {
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

/// Counts this subscriber's matches and when the last arrived; on nats-server it parses every
/// message to find them. Ends with all wanted, after `QUIET` without a message, or at `timeout`.
async fn receive(
    mut subscriber: async_nats::Subscriber,
    want: u64,
    on_server: bool,
    model: String,
    timeout: Duration,
) -> (u64, Instant) {
    let mut matched = 0;
    let mut last = Instant::now();
    let deadline = tokio::time::Instant::now() + timeout;
    while matched < want {
        let quiet = (tokio::time::Instant::now() + QUIET).min(deadline);
        let Ok(Some(message)) = tokio::time::timeout_at(quiet, subscriber.next()).await else { break };
        last = Instant::now();
        if on_server {
            matched += 1;
            continue;
        }
        let parsed: Result<Value, _> = serde_json::from_slice(&message.payload);
        if parsed.is_ok_and(|event| event["model_id"] == model.as_str()) {
            matched += 1;
        }
    }
    (matched, last)
}

/// A server process on free ports, killed on drop.
struct Server {
    label: String,
    url: String,
    monitor: u16,
    child: Child,
}

impl Server {
    fn start(program: &PathBuf, dir: &std::path::Path) -> Result<Self> {
        let (port, monitor) = (free_port()?, free_port()?);
        let child = Command::new(program)
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-m", &monitor.to_string()])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", program.display()))?;
        let label = program.file_name().map_or("server".into(), |n| n.to_string_lossy().into_owned());
        let server = Server { label, url: format!("nats://127.0.0.1:{port}"), monitor, child };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        while TcpStream::connect(("127.0.0.1", monitor)).is_err() || TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("{} did not start", program.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    /// `/varz` `out_bytes`.
    fn out_bytes(&self) -> Result<u64> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.monitor)).context("connect to /varz")?;
        write!(stream, "GET /varz HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let body = response.split("\r\n\r\n").nth(1).context("no /varz body")?;
        let varz: Value = serde_json::from_str(body).context("/varz JSON")?;
        varz["out_bytes"].as_u64().context("no out_bytes in /varz")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // The process may already be gone; nothing else to do then.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).context("no free port")?;
    Ok(listener.local_addr()?.port())
}
