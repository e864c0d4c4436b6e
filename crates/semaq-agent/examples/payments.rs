//! A small multi-agent payments app on the agent network.
//!
//! Three agents announce themselves with the SDK: `pay-1` and `pay-flaky` serve
//! `resolve_payment`, `refund-1` serves `refund`. A steady load of requests goes to
//! `intent.resolve_payment` and `intent.refund` for `--seconds` (40). From 10 s to 22 s
//! `pay-flaky` fails every request (`Semaq-Status: error`), then recovers; the broker shifts
//! payments to `pay-1` and back with no one telling it. Each second's share of replies per
//! agent (from the `Semaq-Agent` header the SDK puts on every reply) is printed as a table and
//! saved as a PNG (`--plot`, default `agent-network.png`).
//!
//! ```text
//! cargo build -p semaq-server && cargo run -p semaq-agent --example payments
//! ```
//!
//! It uses the server at `--server URL` (default nats://127.0.0.1:4222); when none answers
//! there and no `--server` was given, it starts the `semaq-server` built next to it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::Client;
use bytes::Bytes;
use plotters::prelude::*;
use semaq_agent::{headers, Agent, HandlerError, Reply, Request};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Agents by intent, in table order.
const AGENTS: [(&str, &str); 3] =
    [("pay-1", "resolve_payment"), ("pay-flaky", "resolve_payment"), ("refund-1", "refund")];
/// When `pay-flaky` fails everything, in seconds from the start of the load.
const FAILING: std::ops::Range<u64> = 10..22;
/// Requests per second to each intent.
const RATE: u64 = 100;
/// How long a payment or refund takes an agent.
const WORK: Duration = Duration::from_millis(5);

struct Options {
    server: Option<String>,
    seconds: u64,
    plot: PathBuf,
}

fn options() -> Result<Options, Error> {
    let mut options = Options { server: None, seconds: 40, plot: PathBuf::from("agent-network.png") };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--server" => options.server = Some(value),
            "--seconds" => options.seconds = value.parse()?,
            "--plot" => options.plot = PathBuf::from(value),
            other => return Err(format!("unknown flag {other} (--server URL, --seconds N, --plot PATH)").into()),
        }
    }
    Ok(options)
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let options = options()?;
    let (url, _server) = server(options.server.as_deref()).await?;
    println!(
        "agent network on {url}: {} s, pay-flaky fails from {} s to {} s",
        options.seconds, FAILING.start, FAILING.end
    );
    let started = Instant::now();
    let mut agents = Vec::new();
    for (id, intent) in AGENTS {
        agents.push(start_agent(&url, id, intent, started).await?);
    }
    let requester = async_nats::connect(&url).await?;
    let tally = Arc::new(Mutex::new(vec![HashMap::<String, u64>::new(); options.seconds as usize]));
    let load = tokio::spawn(offer_load(requester, options.seconds, started, tally.clone()));
    print_table(options.seconds, started, &tally).await;
    load.await?;
    for agent in &agents {
        agent.shutdown().await?;
    }
    let tally = tally.lock().map_err(|_| "tally lock poisoned")?.clone();
    plot(&options.plot, &tally)?;
    println!("plot: {}", options.plot.display());
    Ok(())
}

/// Announces one agent on a connection of its own and serves it in a task.
async fn start_agent(url: &str, id: &'static str, intent: &str, started: Instant) -> Result<Agent, Error> {
    let client = async_nats::connect(url).await?;
    let agent = Agent::builder(id)
        .intent(intent, if intent == "refund" { "refund a settled payment" } else { "settle a failed card payment" })
        .capacity(8)
        .metadata(serde_json::json!({ "example": "payments" }))
        .connect(&client)
        .await?;
    let serving = agent.clone();
    tokio::spawn(async move {
        serving
            .serve(move |request: Request| async move {
                let now = started.elapsed().as_secs();
                if id == "pay-flaky" && FAILING.contains(&now) {
                    return Err(HandlerError::new("payment processor unavailable"));
                }
                tokio::time::sleep(WORK).await;
                Ok(Reply::new(format!("{} done", String::from_utf8_lossy(request.payload()))).tokens_out(12))
            })
            .await
    });
    Ok(agent)
}

/// [`RATE`] requests per second to each intent, each tallied under the second it was sent.
async fn offer_load(client: Client, seconds: u64, started: Instant, tally: Arc<Mutex<Vec<HashMap<String, u64>>>>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1) / RATE as u32);
    let mut requests = tokio::task::JoinSet::new();
    let mut sent = 0u64;
    while started.elapsed() < Duration::from_secs(seconds) {
        tick.tick().await;
        let second = started.elapsed().as_secs() as usize;
        // One request per intent per tick.
        for intent in ["resolve_payment", "refund"] {
            let (client, tally) = (client.clone(), tally.clone());
            sent += 1;
            requests.spawn(async move {
                let reply = client.request(format!("intent.{intent}"), Bytes::from(format!("order-{sent}"))).await;
                let agent = reply.ok().and_then(|r| r.headers?.get(headers::AGENT).map(|v| v.to_string()));
                if let (Some(agent), Ok(mut tally)) = (agent, tally.lock()) {
                    if let Some(slot) = tally.get_mut(second) {
                        *slot.entry(agent).or_default() += 1;
                    }
                }
            });
        }
    }
    while requests.join_next().await.is_some() {}
}

/// Agent `id`'s share of its intent's replies in one second, in percent.
fn share(second: &HashMap<String, u64>, id: &str) -> Option<f64> {
    let intent = AGENTS.iter().find(|(agent, _)| *agent == id).map(|(_, intent)| *intent)?;
    let total: u64 =
        AGENTS.iter().filter(|(_, i)| *i == intent).map(|(a, _)| second.get(*a).copied().unwrap_or(0)).sum();
    (total > 0).then(|| second.get(id).copied().unwrap_or(0) as f64 * 100.0 / total as f64)
}

/// Prints each second's row one second after it ends, when its replies are in.
async fn print_table(seconds: u64, started: Instant, tally: &Mutex<Vec<HashMap<String, u64>>>) {
    // Shares of the agent's own intent: payments for pay-1 and pay-flaky, refunds for refund-1.
    println!("{:>4}  {:>16} {:>16} {:>16}", "t(s)", "pay-1 %", "pay-flaky %", "refund-1 %");
    for second in 0..seconds {
        tokio::time::sleep_until((started + Duration::from_secs(second + 2)).into()).await;
        let Ok(tally) = tally.lock() else { return };
        let Some(row) = tally.get(second as usize) else { return };
        let cells: Vec<String> = AGENTS
            .iter()
            .map(|(id, _)| share(row, id).map_or_else(|| "-".to_string(), |s| format!("{s:.1}")))
            .collect();
        let note = if FAILING.contains(&second) { "  pay-flaky failing" } else { "" };
        println!("{second:>4}  {:>16} {:>16} {:>16}{note}", cells[0], cells[1], cells[2]);
    }
}

/// The server to use: `--server`, else the default URL, else a `semaq-server` started here.
async fn server(named: Option<&str>) -> Result<(String, Option<ServerGuard>), Error> {
    let url = named.unwrap_or("nats://127.0.0.1:4222").to_string();
    if named.is_some() || async_nats::connect(&url).await.is_ok() {
        return Ok((url, None));
    }
    let program = std::env::current_exe()?.parent().and_then(Path::parent).map(|dir| dir.join("semaq-server"));
    let program = program
        .filter(|p| p.is_file())
        .ok_or("no server at nats://127.0.0.1:4222 and no built semaq-server: run `cargo build -p semaq-server`")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let store = std::env::temp_dir().join(format!("semaq-payments-{port}"));
    let child = Command::new(program)
        .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-m", "-1", "-sd"])
        .arg(&store)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let guard = ServerGuard { child, store };
    let url = format!("nats://127.0.0.1:{port}");
    for _ in 0..200 {
        if async_nats::connect(&url).await.is_ok() {
            return Ok((url, Some(guard)));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err("the semaq-server started here did not accept connections".into())
}

/// A server this example started: stopped, and its store removed, on drop.
struct ServerGuard {
    child: Child,
    store: PathBuf,
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        // Best effort on the way out.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

/// Line colours, one per agent (the first of matplotlib's tab10).
const COLORS: [RGBColor; 3] = [RGBColor(31, 119, 180), RGBColor(214, 39, 40), RGBColor(44, 160, 44)];

/// Each agent's share per second as a PNG, the failing window shaded. plotters draws text with ab_glyph from a TrueType
/// file (DejaVu Sans on Debian); without one the lines are drawn unlabelled.
fn plot(path: &Path, tally: &[HashMap<String, u64>]) -> Result<(), Error> {
    let font = std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").ok();
    let text = font.is_some_and(|bytes| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, Box::leak(bytes.into_boxed_slice())).is_ok()
    });
    let root = BitMapBackend::new(path, (1000, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(12).x_label_area_size(if text { 36 } else { 0 }).y_label_area_size(if text { 52 } else { 0 });
    if text {
        builder.caption("share of each intent's replies: pay-flaky fails from 10 s to 22 s", ("sans-serif", 20));
    }
    // Head room above 100% for the legend, clear of the lines.
    let mut chart = builder.build_cartesian_2d(0f64..tally.len() as f64, 0f64..135f64)?;
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(WHITE);
    if text {
        mesh.x_desc("seconds").y_desc("share (%)");
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw()?;
    let failing = Rectangle::new([(FAILING.start as f64, 0.0), (FAILING.end as f64, 100.0)], RED.mix(0.08).filled());
    chart.draw_series(std::iter::once(failing))?;
    for (index, (id, _)) in AGENTS.iter().enumerate() {
        let color = COLORS[index % COLORS.len()];
        let points = tally.iter().enumerate().filter_map(|(s, second)| Some((s as f64 + 0.5, share(second, id)?)));
        let drawn = chart.draw_series(LineSeries::new(points, color.stroke_width(2)))?;
        if text {
            drawn.label(*id).legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
        }
    }
    if text {
        let mut labels = chart.configure_series_labels();
        labels.background_style(WHITE.mix(0.85)).border_style(BLACK).position(SeriesLabelPosition::UpperRight);
        labels.draw()?;
    }
    root.present()?;
    Ok(())
}
