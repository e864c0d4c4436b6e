//! `semaq bench ws`: what the WebSocket transport costs. One semaq-server with a plain-text
//! `websocket { }` listener; pubsub runs alternately over TCP (`nats://`) and over WebSocket
//! (`ws://`, async-nats's `websockets` transport) on that same server. Prints each side's
//! median and the WebSocket/TCP ratio; the target is at least 0.8.

use std::time::Duration;

use anyhow::{Context as _, Result};
use indicatif::ProgressBar;

use super::server::{free_port, ServerSpec};
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
    /// Rounds; each runs pubsub over both transports, alternating which goes first
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// semaq-server executable [default: semaq-server next to this program]
    #[arg(long)]
    semaq_server: Option<std::path::PathBuf>,
}

/// Runs `semaq bench ws`.
pub async fn run(args: WsArgs) -> Result<()> {
    let program = match &args.semaq_server {
        Some(path) => path.clone(),
        None => super::compare::default_semaq_server()?,
    };
    let work = tempfile::Builder::new().prefix("semaq-bench-ws-").tempdir().context("cannot create a work dir")?;
    let ws_port = free_port()?;
    let config = work.path().join("ws.conf");
    std::fs::write(&config, format!("websocket {{ port: {ws_port}, no_tls: true }}\n"))
        .with_context(|| format!("cannot write {}", config.display()))?;
    let config = config.to_string_lossy().into_owned();
    let server = ServerSpec::new("semaq", program).with_args(&["-c", config.as_str()]).start(work.path())?;
    let urls = [server.url.clone(), format!("ws://127.0.0.1:{ws_port}")];
    let load = Scenario::Pubsub.load(&args.load)?;
    println!(
        "ws: pubsub ({} B payloads) over TCP ({}) and WebSocket ({}) on one semaq-server, {} round(s)",
        load.size, urls[0], urls[1], args.rounds
    );
    let mut rates: [Vec<f64>; 2] = Default::default();
    for round in 0..args.rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let target = Target::plain(urls[side].clone(), ANSWER_TIMEOUT);
            let report = Scenario::Pubsub.run(&target, &load, &ProgressBar::hidden()).await?;
            if !report.problems.is_empty() {
                anyhow::bail!("pubsub over {} failed: {}", urls[side], report.problems.join("; "));
            }
            let name = ["tcp", "ws"][side];
            println!("  round {} {name:<3} {:>12} msgs/s", round + 1, format_count(report.rate() as u64));
            rates[side].push(report.rate());
        }
    }
    let ratio = median_ratio(&rates[1], &rates[0]).unwrap_or(0.0);
    let verdict = if ratio >= TARGET_RATIO { "PASS" } else { "FAIL" };
    println!(
        "  pubsub  tcp {:>12} msgs/s  ws {:>12} msgs/s  ws / tcp {ratio:.2}×  {verdict} (target ≥ {TARGET_RATIO:.2}×)",
        format_count(median(&rates[0]).unwrap_or(0.0) as u64),
        format_count(median(&rates[1]).unwrap_or(0.0) as u64),
    );
    Ok(())
}
