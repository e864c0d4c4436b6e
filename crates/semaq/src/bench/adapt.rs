//! `semaq bench adapt`: does intent routing shift traffic away from a failing or slow agent and
//! back when it heals, without anyone telling it?
//!
//! Four SDK agents serve intent `adapt`, each answering after `--work`. A steady open-loop load
//! of `--rate` requests per second goes to `intent.adapt`; each reply's `Semaq-Agent` says who
//! served it, so an agent's share of a second is its replies to the requests sent in that second.
//! Each phase runs `--warm-seconds` healthy, then `--sick-seconds` with the fault, then
//! `--heal-seconds` healed:
//!
//! - A: `adapt-1` answers half its requests with `Semaq-Status: error` at once (the fast
//!   failure that plain latency-based balancing rewards). Target: share < 5% within 10 s, then
//!   back to ≥ 15% within 30 s of healing.
//! - B: `adapt-4` answers 10× slower than the others. Target: share < 10% within 10 s, back to
//!   ≥ 15% within 30 s of healing.
//!
//! Printed: the per-second shares (with the victim's weight from `$SEMAQ.API.AGENT.LIST`), a
//! PASS/FAIL line per target; saved: a PNG of the shares over time (`--plot`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use async_nats::Client;
use bytes::Bytes;
use semaq_agent::{headers, HandlerError, Reply, Request};

use super::agent_net::{start_agent, stop_agents, weights, BenchServer};
use super::intent_rr::verdict;
use super::plot::{self, Panel};
use crate::connect::Target;
use crate::parse::parse_duration;

/// Agents serving the intent.
const AGENTS: usize = 4;
/// The intent they serve.
const INTENT: &str = "adapt";
/// How often the load generator sends a batch.
const LOAD_TICK: Duration = Duration::from_millis(10);
/// Requests in flight before the generator sheds (counted) instead of piling up.
const IN_FLIGHT_MAX: usize = 4096;
/// A fault must push the victim's share under its bound within this long.
const DROP_WITHIN_S: u64 = 10;
/// A healed victim must be back to [`RECOVERED_SHARE`] within this long.
const RECOVER_WITHIN_S: u64 = 30;
/// Share that counts as recovered (an even split is 25%).
const RECOVERED_SHARE: f64 = 0.15;

const HEALTHY: u8 = 0;
const FAIL_HALF: u8 = 1;
const SLOW: u8 = 2;

/// Arguments of `semaq bench adapt`.
#[derive(clap::Args, Debug)]
pub struct AdaptArgs {
    /// Requests per second offered to intent.adapt
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=100_000))]
    rate: u64,
    /// How long a healthy agent takes per request (the slow one takes 10×)
    #[arg(long, default_value = "2ms", value_parser = parse_duration)]
    work: Duration,
    /// Healthy seconds before each fault
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    warm_seconds: u64,
    /// Seconds each fault lasts
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=600))]
    sick_seconds: u64,
    /// Seconds watched after each fault heals
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    heal_seconds: u64,
    /// Capacity each agent announces
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    capacity: u32,
    /// Where to save the plot of shares over time
    #[arg(long, value_name = "PATH", default_value = "adapt.png")]
    plot: PathBuf,
    /// semaq-server executable, when no --server is given [default: semaq-server next to this program]
    #[arg(long, value_name = "PATH")]
    semaq_server: Option<PathBuf>,
}

/// One phase: which agent gets which fault, and the share it must fall under.
struct Phase {
    name: &'static str,
    victim: usize,
    fault: u8,
    what: &'static str,
    drop_below: f64,
}

const PHASES: [Phase; 2] = [
    Phase { name: "A", victim: 0, fault: FAIL_HALF, what: "errors on half its requests", drop_below: 0.05 },
    Phase { name: "B", victim: 3, fault: SLOW, what: "10× slower", drop_below: 0.10 },
];

/// Replies per agent to the requests sent in one second.
#[derive(Debug, Clone, Default)]
struct Second {
    replies: [u64; AGENTS],
    errors: u64,
    failed: u64,
    shed: u64,
}

impl Second {
    fn total(&self) -> u64 {
        self.replies.iter().sum()
    }

    /// Agent `index`'s share, or `None` in a second with no replies.
    fn share(&self, index: usize) -> Option<f64> {
        let total = self.total();
        (total > 0).then(|| self.replies[index] as f64 / total as f64)
    }
}

/// What one phase measured: the tally of each second.
struct Curve {
    seconds: Vec<Second>,
}

/// Runs both phases, prints the curves and verdicts, saves the plot.
pub async fn run(target: &Target, args: AdaptArgs) -> Result<()> {
    let server = BenchServer::named_or_started(target, args.semaq_server.clone(), None)?;
    let modes: Arc<[AtomicU8; AGENTS]> = Arc::new(std::array::from_fn(|_| AtomicU8::new(HEALTHY)));
    let mut agents = Vec::new();
    for index in 0..AGENTS {
        let handler = agent_handler(modes.clone(), index, args.work);
        agents.push(start_agent(&server, &agent_id(index), INTENT, args.capacity, handler).await?);
    }
    let requesters = [server.connect().await?, server.connect().await?];
    println!(
        "adapt: {AGENTS} agents on intent.{INTENT}, {} req/s, {:.1} ms per request, {} s healthy + {} s fault + {} s healed per phase, {}",
        args.rate,
        args.work.as_secs_f64() * 1e3,
        args.warm_seconds,
        args.sick_seconds,
        args.heal_seconds,
        server.target.url
    );
    let mut panels = Vec::new();
    let mut verdicts = Vec::new();
    for phase in &PHASES {
        let curve = run_phase(&requesters, &modes, phase, &args).await;
        verdicts.extend(judge(phase, &curve, &args));
        panels.push(panel(phase, &curve, &args));
    }
    stop_agents(&agents).await;
    for line in &verdicts {
        println!("{line}");
    }
    match plot::share_chart(&args.plot, &panels) {
        Ok(()) => println!("plot: {}", args.plot.display()),
        Err(error) => eprintln!("semaq: warning: no plot: {error:#}"),
    }
    Ok(())
}

fn agent_id(index: usize) -> String {
    format!("adapt-{}", index + 1)
}

/// A handler that behaves as `modes[index]` says at the moment each request arrives.
fn agent_handler(
    modes: Arc<[AtomicU8; AGENTS]>,
    index: usize,
    work: Duration,
) -> impl Fn(Request) -> futures::future::BoxFuture<'static, Result<Reply, HandlerError>> + Send + Sync + 'static {
    let served = Arc::new(AtomicU64::new(0));
    move |_request: Request| {
        let mode = modes[index].load(Ordering::Relaxed);
        let n = served.fetch_add(1, Ordering::Relaxed);
        Box::pin(async move {
            match mode {
                FAIL_HALF if n.is_multiple_of(2) => return Err(HandlerError::new("injected failure")),
                SLOW => tokio::time::sleep(work * 10).await,
                _ => tokio::time::sleep(work).await,
            }
            Ok(Reply::new("done"))
        })
    }
}

/// One phase: the load runs throughout; each second the fault is switched on or off on
/// schedule, the victim's weight is read, and the previous second's row is printed.
async fn run_phase(requesters: &[Client; 2], modes: &[AtomicU8; AGENTS], phase: &Phase, args: &AdaptArgs) -> Curve {
    let total = args.warm_seconds + args.sick_seconds + args.heal_seconds;
    let seconds = Arc::new(Mutex::new(vec![Second::default(); total as usize]));
    println!(
        "phase {}: {} {} from {} s to {} s",
        phase.name,
        agent_id(phase.victim),
        phase.what,
        args.warm_seconds,
        args.warm_seconds + args.sick_seconds
    );
    print_header(phase);
    let started = Instant::now();
    let load = tokio::spawn(offer_load(requesters.clone(), args.rate, started, total, seconds.clone()));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::from_std(started), Duration::from_secs(1));
    for second in 0..=total {
        tick.tick().await;
        if second == args.warm_seconds {
            modes[phase.victim].store(phase.fault, Ordering::Relaxed);
        } else if second == args.warm_seconds + args.sick_seconds {
            modes[phase.victim].store(HEALTHY, Ordering::Relaxed);
        }
        if second > 0 {
            let weight = victim_weight_now(&requesters[0], phase.victim).await;
            print_row(args, second - 1, &seconds, weight);
        }
    }
    // The generator stops after `total` seconds and waits for its replies; the last row has them.
    let _ = load.await;
    let seconds = seconds.lock().map(|s| s.clone()).unwrap_or_default();
    Curve { seconds }
}

async fn victim_weight_now(client: &Client, victim: usize) -> Option<f64> {
    let members = weights(client, INTENT).await.ok()?;
    members.into_iter().find(|(id, _)| *id == agent_id(victim)).map(|(_, weight)| weight)
}

/// Sends `rate` requests per second in batches every [`LOAD_TICK`] for `total` seconds, each
/// tallied in the second it was sent; returns once every reply is in.
async fn offer_load(requesters: [Client; 2], rate: u64, started: Instant, total: u64, tally: Arc<Mutex<Vec<Second>>>) {
    let in_flight = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT_MAX));
    let mut tick = tokio::time::interval(LOAD_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let per_tick = rate as f64 * LOAD_TICK.as_secs_f64();
    let (mut owed, mut sent) = (0.0, 0u64);
    while started.elapsed() < Duration::from_secs(total) {
        tick.tick().await;
        let second = started.elapsed().as_secs() as usize;
        owed += per_tick;
        while owed >= 1.0 {
            owed -= 1.0;
            let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                bump(&tally, second, |s| s.shed += 1);
                continue;
            };
            let client = requesters[(sent % 2) as usize].clone();
            sent += 1;
            let tally = tally.clone();
            tokio::spawn(async move {
                let outcome = client.request(format!("intent.{INTENT}"), Bytes::from_static(b"work")).await;
                bump(&tally, second, |s| count_reply(s, outcome));
                drop(permit);
            });
        }
    }
    let _ = in_flight.acquire_many(IN_FLIGHT_MAX as u32).await;
}

fn bump(tally: &Mutex<Vec<Second>>, second: usize, update: impl FnOnce(&mut Second)) {
    if let Ok(mut seconds) = tally.lock() {
        if let Some(slot) = seconds.get_mut(second) {
            update(slot);
        }
    }
}

/// Counts a reply under the agent its `Semaq-Agent` names; a failed request separately.
fn count_reply(second: &mut Second, outcome: Result<async_nats::Message, async_nats::RequestError>) {
    let Ok(reply) = outcome else {
        second.failed += 1;
        return;
    };
    let header = |name: &str| reply.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.as_str().to_string());
    let index = header(headers::AGENT).and_then(|id| (0..AGENTS).find(|i| agent_id(*i) == id));
    match index {
        Some(index) => second.replies[index] += 1,
        None => second.failed += 1,
    }
    if header(headers::STATUS).as_deref() == Some("error") {
        second.errors += 1;
    }
}

fn print_header(phase: &Phase) {
    let names: Vec<String> = (0..AGENTS).map(|i| format!("{:>8}", agent_id(i))).collect();
    println!(
        "  {:>4} {:<7} {} {:>8} {:>8} {:>7}",
        "t(s)",
        "state",
        names.join(" "),
        format!("w({})", phase.victim + 1),
        "replies",
        "errors"
    );
}

fn state_at(second: u64, args: &AdaptArgs) -> &'static str {
    if second < args.warm_seconds {
        "healthy"
    } else if second < args.warm_seconds + args.sick_seconds {
        "FAULT"
    } else {
        "healed"
    }
}

fn print_row(args: &AdaptArgs, second: u64, tally: &Mutex<Vec<Second>>, weight: Option<f64>) {
    let row = tally.lock().ok().and_then(|s| s.get(second as usize).cloned()).unwrap_or_default();
    let shares: Vec<String> = (0..AGENTS)
        .map(|i| row.share(i).map_or_else(|| format!("{:>8}", "-"), |s| format!("{:>7.1}%", s * 100.0)))
        .collect();
    let weight = weight.map_or_else(|| "-".to_string(), |w| format!("{w:.2}"));
    let mut line = format!(
        "  {:>4} {:<7} {} {weight:>8} {:>8} {:>7}",
        second,
        state_at(second, args),
        shares.join(" "),
        row.total(),
        row.errors
    );
    if row.failed > 0 || row.shed > 0 {
        line.push_str(&format!("  ({} failed, {} shed)", row.failed, row.shed));
    }
    println!("{line}");
}

/// The victim's share each second (`None` for an empty second).
fn victim_shares(phase: &Phase, curve: &Curve) -> Vec<Option<f64>> {
    curve.seconds.iter().map(|s| s.share(phase.victim)).collect()
}

/// Seconds from `from` until the end of the first second in `from..until` whose share passes `test`.
fn first_second(shares: &[Option<f64>], from: u64, until: u64, test: impl Fn(f64) -> bool) -> Option<u64> {
    (from..until.min(shares.len() as u64)).find(|s| shares[*s as usize].is_some_and(&test)).map(|s| s + 1 - from)
}

/// The PASS/FAIL lines of one phase.
fn judge(phase: &Phase, curve: &Curve, args: &AdaptArgs) -> Vec<String> {
    let shares = victim_shares(phase, curve);
    let (fault, heal) = (args.warm_seconds, args.warm_seconds + args.sick_seconds);
    let dropped = first_second(&shares, fault, heal, |s| s < phase.drop_below);
    let recovered = first_second(&shares, heal, heal + args.heal_seconds, |s| s >= RECOVERED_SHARE);
    let after_drop = dropped.map(|d| max_share(&shares, fault + d, heal));
    let victim = agent_id(phase.victim);
    let drop_line = match dropped {
        Some(seconds) => format!(
            "{} phase {}: {victim} share below {:.0}% after {seconds} s (target ≤ {DROP_WITHIN_S} s); at most {:.1}% for the rest of the fault",
            verdict(seconds <= DROP_WITHIN_S),
            phase.name,
            phase.drop_below * 100.0,
            after_drop.flatten().unwrap_or(0.0) * 100.0
        ),
        None => format!(
            "FAIL phase {}: {victim} share never below {:.0}% in {} s of fault (target ≤ {DROP_WITHIN_S} s)",
            phase.name,
            phase.drop_below * 100.0,
            args.sick_seconds
        ),
    };
    let recover_line = match recovered {
        Some(seconds) => format!(
            "{} phase {}: {victim} share back to ≥ {:.0}% {seconds} s after healing (target ≤ {RECOVER_WITHIN_S} s)",
            verdict(seconds <= RECOVER_WITHIN_S),
            phase.name,
            RECOVERED_SHARE * 100.0
        ),
        None => format!(
            "FAIL phase {}: {victim} share not back to ≥ {:.0}% within {} s of healing (target ≤ {RECOVER_WITHIN_S} s)",
            phase.name,
            RECOVERED_SHARE * 100.0,
            args.heal_seconds
        ),
    };
    vec![drop_line, recover_line]
}

/// Highest share in seconds `from..until`, if any second there had replies.
fn max_share(shares: &[Option<f64>], from: u64, until: u64) -> Option<f64> {
    let window = shares.get(from as usize..until.min(shares.len() as u64) as usize)?;
    window.iter().flatten().copied().reduce(f64::max)
}

/// One panel of the plot: each agent's share per second, the fault's start and end marked.
fn panel(phase: &Phase, curve: &Curve, args: &AdaptArgs) -> Panel {
    let series = (0..AGENTS)
        .map(|i| (agent_id(i), curve.seconds.iter().map(|s| s.share(i).map(|v| v * 100.0)).collect()))
        .collect();
    Panel {
        title: format!("phase {}: {} {}", phase.name, agent_id(phase.victim), phase.what),
        series,
        fault: (args.warm_seconds as f64, (args.warm_seconds + args.sick_seconds) as f64),
        thresholds: vec![phase.drop_below * 100.0, RECOVERED_SHARE * 100.0],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_second_counts_to_the_end_of_the_second_that_crossed() {
        let shares = [Some(0.25), Some(0.2), None, Some(0.04), Some(0.03)];
        assert_eq!(first_second(&shares, 1, 5, |s| s < 0.05), Some(3), "second 3 ends 3 s after second 1 starts");
        assert_eq!(first_second(&shares, 1, 3, |s| s < 0.05), None);
        assert_eq!(first_second(&shares, 0, 99, |s| s >= 0.25), Some(1));
        assert_eq!(max_share(&shares, 3, 5), Some(0.04));
    }

    #[test]
    fn a_second_without_replies_has_no_share() {
        let mut second = Second::default();
        assert_eq!(second.share(0), None);
        second.replies = [1, 1, 2, 0];
        assert_eq!(second.share(2), Some(0.5));
    }
}
