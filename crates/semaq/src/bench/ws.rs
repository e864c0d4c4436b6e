//! `semaq bench ws`: what the WebSocket transport costs. semaq-server and nats-server, each with
//! a plain-text `websocket { }` listener, run pubsub in four arrangements: publisher and
//! subscriber each over TCP (`nats://`) or WebSocket (`ws://`, async-nats's `websockets`
//! transport). Prints each arrangement's median rate and the server's CPU per message, and each
//! server's WebSocket/TCP ratio; the target is at least 0.8 with both sides on WebSocket.
//!
//! Publisher, subscriber and server share the machine, so the client library's own WebSocket
//! cost (it masks every frame it sends) weighs on the rate as much as the server's; the
//! one-sided arrangements and nats-server's ratio in the same run tell the two apart.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};
use indicatif::ProgressBar;

use super::flow::{self, Shape};
use super::server::{cpu_per_message, cpu_seconds, free_port, ServerProcess, ServerSpec};
use super::stats::{format_count, median, median_ratio};
use super::{LoadArgs, Scenario};
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

/// One server with both listeners.
struct Side {
    process: ServerProcess,
    ws_url: String,
    /// Per arrangement: delivered msgs/s, and server CPU seconds per message, of each round.
    rates: [Vec<f64>; 4],
    cpu: [Vec<f64>; 4],
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

    fn target(&self, ws: bool) -> Target {
        Target::plain(if ws { self.ws_url.clone() } else { self.process.url.clone() }, ANSWER_TIMEOUT)
    }

    async fn run(&mut self, index: usize, load: &super::Load) -> Result<()> {
        let arrangement = Arrangement::ALL[index];
        let (publisher, subscriber) = (self.target(arrangement.publisher_ws), self.target(arrangement.subscriber_ws));
        let pid = self.process.pid();
        let before = cpu_seconds(pid);
        let shape = Shape { subscribers: 1, queue_group: false };
        let report = flow::run_between(&publisher, &subscriber, load, shape, &ProgressBar::hidden()).await?;
        if !report.problems.is_empty() {
            anyhow::bail!("{} on {} failed: {}", arrangement.name(), self.process.label, report.problems.join("; "));
        }
        self.rates[index].push(report.rate());
        if let Some(cpu) = cpu_per_message(before, cpu_seconds(pid), report.delivered) {
            self.cpu[index].push(cpu);
        }
        Ok(())
    }

    /// Median WebSocket/TCP ratio of arrangement `index`, over rounds.
    fn ratio(&self, index: usize) -> f64 {
        median_ratio(&self.rates[index], &self.rates[0]).unwrap_or(0.0)
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
        for index in 0..Arrangement::ALL.len() {
            for side in order {
                sides[side].run(index, &load).await?;
            }
        }
        println!("  round {} done", round + 1);
    }
    print_table(&sides);
    Ok(())
}

fn print_table(sides: &[Side; 2]) {
    println!(
        "  {:<10} {:>14} {:>14} {:>12} {:>12} {:>10} {:>10}",
        "pub → sub", "semaq msgs/s", "nats msgs/s", "semaq µs/msg", "nats µs/msg", "semaq /tcp", "nats /tcp"
    );
    for (index, arrangement) in Arrangement::ALL.iter().enumerate() {
        let rate = |side: &Side| format_count(median(&side.rates[index]).unwrap_or(0.0) as u64);
        let cpu = |side: &Side| median(&side.cpu[index]).map_or("-".to_string(), |s| format!("{:.2}", s * 1e6));
        println!(
            "  {:<10} {:>14} {:>14} {:>12} {:>12} {:>9.2}× {:>9.2}×",
            arrangement.name(),
            rate(&sides[0]),
            rate(&sides[1]),
            cpu(&sides[0]),
            cpu(&sides[1]),
            sides[0].ratio(index),
            sides[1].ratio(index),
        );
    }
    let both = Arrangement::ALL.len() - 1;
    let ratio = sides[0].ratio(both);
    let verdict = if ratio >= TARGET_RATIO { "PASS" } else { "FAIL" };
    println!(
        "  pubsub over WebSocket / TCP: semaq {ratio:.2}× {verdict} (target ≥ {TARGET_RATIO:.2}×); nats-server {:.2}× \
         in the same run",
        sides[1].ratio(both)
    );
}
