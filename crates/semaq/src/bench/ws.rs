//! `semaq bench ws`: what the WebSocket transport costs. semaq-server and nats-server, each with
//! a plain-text `websocket { }` listener, run pubsub in four arrangements: publisher and
//! subscriber each over TCP (`nats://`) or WebSocket (`ws://`). Each arrangement runs with two
//! clients: the lean wire client (`wire_client.rs`), whose own cost is small and the same on
//! both transports, so the rate is what the server's transport carries, and async-nats (its
//! `websockets` transport), the client applications use. Prints each arrangement's median rate
//! and the server's CPU per message, and each server's WebSocket/TCP ratio; the target is at
//! least 0.8 with both sides on WebSocket, for the wire client.
//!
//! Publisher, subscriber and server share the machine, so with async-nats the client library's
//! own WebSocket cost (a copy of every frame each way, a mask on every frame it sends) weighs on
//! the rate as much as the server's; nats-server's ratio in the same run shows it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};
use indicatif::ProgressBar;

use super::flow::{self, Shape};
use super::server::{cpu_per_message, cpu_seconds, free_port, ServerProcess, ServerSpec};
use super::stats::{format_count, median, median_ratio};
use super::{wire_client, LoadArgs, Scenario};
use crate::connect::Target;

/// Throughput WebSocket clients must keep, as a share of TCP clients'.
const TARGET_RATIO: f64 = 0.8;
/// How long a bench connection waits for an answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Arguments of `semaq bench ws`.
#[derive(clap::Args, Debug)]
pub struct WsArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// Rounds; each runs every arrangement on both servers, alternating which server goes first
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// semaq-server executable [default: semaq-server next to this program]
    #[arg(long)]
    semaq_server: Option<PathBuf>,
    /// nats-server executable
    #[arg(long, value_name = "PATH", default_value = "nats-server")]
    nats_server: PathBuf,
}

/// Where the publisher and the subscriber connect: `true` is WebSocket.
#[derive(Debug, Clone, Copy)]
struct Arrangement {
    publisher_ws: bool,
    subscriber_ws: bool,
}

impl Arrangement {
    /// TCP → TCP first: every ratio is against it.
    const ALL: [Arrangement; 4] = [
        Arrangement { publisher_ws: false, subscriber_ws: false },
        Arrangement { publisher_ws: false, subscriber_ws: true },
        Arrangement { publisher_ws: true, subscriber_ws: false },
        Arrangement { publisher_ws: true, subscriber_ws: true },
    ];

    fn name(self) -> String {
        let side = |ws| if ws { "ws" } else { "tcp" };
        format!("{} → {}", side(self.publisher_ws), side(self.subscriber_ws))
    }
}

/// The clients every arrangement runs with; the first decides the verdict.
#[derive(Debug, Clone, Copy)]
enum Client {
    Wire,
    AsyncNats,
}

impl Client {
    const ALL: [Client; 2] = [Client::Wire, Client::AsyncNats];

    fn describe(self) -> &'static str {
        match self {
            Client::Wire => "the lean wire client (the server's transport)",
            Client::AsyncNats => "async-nats clients (its websockets transport)",
        }
    }
}

/// Per client and arrangement: a figure of each round.
type Figures = [[Vec<f64>; 4]; 2];

/// One server with both listeners.
struct Side {
    process: ServerProcess,
    ws_url: String,
    /// Delivered msgs/s, and server CPU seconds per message.
    rates: Figures,
    cpu: Figures,
}

impl Side {
    fn start(spec: ServerSpec, work: &std::path::Path) -> Result<Self> {
        let ws_port = free_port()?;
        let config = work.join(format!("{}-ws.conf", spec.label));
        std::fs::write(&config, format!("websocket {{ port: {ws_port}, no_tls: true }}\n"))
            .with_context(|| format!("cannot write {}", config.display()))?;
        let config = config.to_string_lossy().into_owned();
        let process = spec.with_args(&["-c", config.as_str()]).start(work)?;
        let ws_url = format!("ws://127.0.0.1:{ws_port}");
        Ok(Side { process, ws_url, rates: Default::default(), cpu: Default::default() })
    }

    fn url(&self, ws: bool) -> String {
        if ws {
            self.ws_url.clone()
        } else {
            self.process.url.clone()
        }
    }

    async fn run(&mut self, client: usize, index: usize, load: &super::Load) -> Result<()> {
        let arrangement = Arrangement::ALL[index];
        let (publisher, subscriber) = (self.url(arrangement.publisher_ws), self.url(arrangement.subscriber_ws));
        let pid = self.process.pid();
        let before = cpu_seconds(pid);
        let failed = |error| anyhow::anyhow!("{} on {} failed: {error}", arrangement.name(), self.process.label);
        let (rate, delivered) = match Client::ALL[client] {
            Client::Wire => {
                let run =
                    wire_client::pubsub(&publisher, &subscriber, load).await.map_err(|e| failed(format!("{e:#}")))?;
                (run.rate(), run.delivered)
            }
            Client::AsyncNats => {
                let (publisher, subscriber) =
                    (Target::plain(publisher, ANSWER_TIMEOUT), Target::plain(subscriber, ANSWER_TIMEOUT));
                let shape = Shape { subscribers: 1, queue_group: false };
                let report = flow::run_between(&publisher, &subscriber, load, shape, &ProgressBar::hidden()).await?;
                if !report.problems.is_empty() {
                    return Err(failed(report.problems.join("; ")));
                }
                (report.rate(), report.delivered)
            }
        };
        self.rates[client][index].push(rate);
        if let Some(cpu) = cpu_per_message(before, cpu_seconds(pid), delivered) {
            self.cpu[client][index].push(cpu);
        }
        Ok(())
    }

    /// Median WebSocket/TCP ratio of arrangement `index`, over rounds.
    fn ratio(&self, client: usize, index: usize) -> f64 {
        median_ratio(&self.rates[client][index], &self.rates[client][0]).unwrap_or(0.0)
    }
}

/// Runs `semaq bench ws`.
pub async fn run(args: WsArgs) -> Result<()> {
    let program = match &args.semaq_server {
        Some(path) => path.clone(),
        None => super::compare::default_semaq_server()?,
    };
    let work = tempfile::Builder::new().prefix("semaq-bench-ws-").tempdir().context("cannot create a work dir")?;
    let mut sides = [
        Side::start(ServerSpec::new("semaq", program), work.path())?,
        Side::start(ServerSpec::new("nats", args.nats_server.clone()), work.path())?,
    ];
    let load = Scenario::Pubsub.load(&args.load)?;
    println!(
        "ws: pubsub ({} B payloads), publisher and subscriber each over TCP or WebSocket, on semaq-server and \
         nats-server, {} round(s)",
        load.size, args.rounds
    );
    for round in 0..args.rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for client in 0..Client::ALL.len() {
            for index in 0..Arrangement::ALL.len() {
                for side in order {
                    sides[side].run(client, index, &load).await?;
                }
            }
        }
        println!("  round {} done", round + 1);
    }
    for client in 0..Client::ALL.len() {
        print_table(&sides, client);
    }
    Ok(())
}

fn print_table(sides: &[Side; 2], client: usize) {
    println!("  with {}:", Client::ALL[client].describe());
    println!(
        "  {:<10} {:>14} {:>14} {:>12} {:>12} {:>10} {:>10}",
        "pub → sub", "semaq msgs/s", "nats msgs/s", "semaq µs/msg", "nats µs/msg", "semaq /tcp", "nats /tcp"
    );
    for (index, arrangement) in Arrangement::ALL.iter().enumerate() {
        let rate = |side: &Side| format_count(median(&side.rates[client][index]).unwrap_or(0.0) as u64);
        let cpu = |side: &Side| median(&side.cpu[client][index]).map_or("-".to_string(), |s| format!("{:.2}", s * 1e6));
        println!(
            "  {:<10} {:>14} {:>14} {:>12} {:>12} {:>9.2}× {:>9.2}×",
            arrangement.name(),
            rate(&sides[0]),
            rate(&sides[1]),
            cpu(&sides[0]),
            cpu(&sides[1]),
            sides[0].ratio(client, index),
            sides[1].ratio(client, index),
        );
    }
    let both = Arrangement::ALL.len() - 1;
    let (ratio, nats) = (sides[0].ratio(client, both), sides[1].ratio(client, both));
    if client == 0 {
        let verdict = if ratio >= TARGET_RATIO { "PASS" } else { "FAIL" };
        println!(
            "  pubsub over WebSocket / TCP: semaq {ratio:.2}× {verdict} (target ≥ {TARGET_RATIO:.2}×); nats-server \
             {nats:.2}× in the same run"
        );
    } else {
        println!(
            "  pubsub over WebSocket / TCP: semaq {ratio:.2}×, nats-server {nats:.2}× (the client's cost included)"
        );
    }
}
