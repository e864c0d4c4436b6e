//! `semaq top`: the dashboard's key figures in the terminal, redrawn every interval: the server
//! and its traffic, streams, the latency objective, token load by model, and agents' weights.
//! Read from the monitoring port (`/varz`, `/api/streams`, `/api/latency`, `/api/tokens`,
//! `/semaq/agents`). `--once` prints one frame as text, for scripts and terminals without a TTY.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};
use ratatui::{Frame, Terminal};
use serde_json::Value;

use crate::http;
use crate::parse::parse_duration;

/// Token buckets drawn in a sparkline.
const SPARK_BUCKETS: usize = 24;
/// Rows of each table.
const ROWS_MAX: usize = 20;

/// `semaq top`
#[derive(clap::Args, Debug)]
pub struct TopArgs {
    /// The server's monitoring URL
    #[arg(long, env = "SEMAQ_HTTP", default_value = "http://127.0.0.1:8222")]
    http: String,
    /// Time between redraws, e.g. 2s or 500ms
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    interval: Duration,
    /// Print one frame as text and exit (no terminal needed)
    #[arg(long)]
    once: bool,
    /// Columns of a --once frame
    #[arg(long, default_value_t = 140)]
    width: u16,
    /// Lines of a --once frame
    #[arg(long, default_value_t = 40)]
    height: u16,
}

/// What one poll read.
struct Snapshot {
    at: Instant,
    varz: Value,
    streams: Value,
    latency: Value,
    tokens: Value,
    agents: Value,
}

impl Snapshot {
    async fn read(authority: &str, timeout: Duration) -> Result<Self> {
        let get = |path: &'static str| http::get_json(authority, path, timeout);
        let (varz, streams, latency, tokens, agents) = tokio::try_join!(
            get("/varz"),
            get("/api/streams"),
            get("/api/latency"),
            get("/api/tokens?by=model&window=10m"),
            get("/semaq/agents"),
        )?;
        Ok(Self { at: Instant::now(), varz, streams, latency, tokens, agents })
    }
}

/// Runs `semaq top`.
pub async fn run(args: TopArgs, timeout: Duration) -> Result<()> {
    let authority = http::authority(&args.http)?;
    if args.once {
        let now = Snapshot::read(&authority, timeout).await?;
        print!("{}", render_text(&now, None, args.width, args.height)?);
        return Ok(());
    }
    let mut terminal = ratatui::init();
    let result = interactive(&mut terminal, &authority, &args, timeout).await;
    ratatui::restore();
    result
}

async fn interactive(
    terminal: &mut ratatui::DefaultTerminal,
    authority: &str,
    args: &TopArgs,
    timeout: Duration,
) -> Result<()> {
    let mut before: Option<Snapshot> = None;
    loop {
        let now = Snapshot::read(authority, timeout).await?;
        terminal.draw(|frame| draw(frame, &now, before.as_ref()))?;
        before = Some(now);
        let deadline = Instant::now() + args.interval;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let key = tokio::task::block_in_place(|| -> Result<Option<KeyCode>> {
                if !event::poll(left)? {
                    return Ok(None);
                }
                Ok(match event::read()? {
                    Event::Key(key) if key.kind == KeyEventKind::Press => Some(key.code),
                    _ => None,
                })
            })?;
            if matches!(key, Some(KeyCode::Char('q') | KeyCode::Esc)) {
                return Ok(());
            }
        }
    }
}

/// One frame drawn off screen, as lines of text.
fn render_text(now: &Snapshot, before: Option<&Snapshot>, width: u16, height: u16) -> Result<String> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).context("cannot make an off-screen terminal")?;
    terminal.draw(|frame| draw(frame, now, before)).context("cannot draw")?;
    let buffer = terminal.backend().buffer();
    let mut text = String::new();
    for y in 0..height {
        let line: String = (0..width)
            .filter_map(|x| buffer.content().get(usize::from(y) * usize::from(width) + usize::from(x)))
            .map(|cell| cell.symbol())
            .collect();
        text.push_str(line.trim_end());
        text.push('\n');
    }
    Ok(text)
}

fn draw(frame: &mut Frame, now: &Snapshot, before: Option<&Snapshot>) {
    let [header, middle, bottom] =
        Layout::vertical([Constraint::Length(4), Constraint::Percentage(50), Constraint::Fill(1)]).areas(frame.area());
    let [streams, latency] = Layout::horizontal([Constraint::Percentage(55), Constraint::Fill(1)]).areas(middle);
    let [tokens, agents] = Layout::horizontal([Constraint::Percentage(55), Constraint::Fill(1)]).areas(bottom);
    frame.render_widget(header_widget(now, before), header);
    draw_streams(frame, streams, now, before);
    draw_latency(frame, latency, now);
    draw_tokens(frame, tokens, now);
    draw_agents(frame, agents, now);
}

fn block(title: &str) -> Block<'_> {
    Block::default().borders(Borders::ALL).title(format!(" {title} "))
}

fn u64_of(value: &Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

/// Per-second change of a counter between two polls.
fn per_second(now: u64, before: Option<u64>, seconds: f64) -> f64 {
    match before {
        Some(before) if seconds > 0.0 => now.saturating_sub(before) as f64 / seconds,
        _ => 0.0,
    }
}

fn seconds_between(now: &Snapshot, before: Option<&Snapshot>) -> f64 {
    before.map_or(0.0, |b| now.at.duration_since(b.at).as_secs_f64())
}

fn header_widget<'a>(now: &'a Snapshot, before: Option<&Snapshot>) -> Paragraph<'a> {
    let varz = &now.varz;
    let seconds = seconds_between(now, before);
    let rate = |key: &str| per_second(u64_of(&varz[key]), before.map(|b| u64_of(&b.varz[key])), seconds);
    let server = format!(
        "{} · semaq {} · up {} · q quits",
        varz["server_name"].as_str().unwrap_or("?"),
        varz["semaq_version"].as_str().unwrap_or("?"),
        varz["uptime"].as_str().unwrap_or("?"),
    );
    let traffic = format!(
        "{} connections · {} subscriptions · in {:.0} msg/s · out {:.0} msg/s · latency objective {}",
        u64_of(&varz["connections"]),
        u64_of(&varz["subscriptions"]),
        rate("in_msgs"),
        rate("out_msgs"),
        micros(u64_of(&now.latency["objective_us"])),
    );
    let line = vec![ratatui::text::Line::from(server), ratatui::text::Line::from(traffic)];
    Paragraph::new(line).block(block("semaq top"))
}

fn rows_of(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

fn draw_streams(frame: &mut Frame, area: Rect, now: &Snapshot, before: Option<&Snapshot>) {
    let seconds = seconds_between(now, before);
    let last_seq_before = |name: &str| {
        before.and_then(|b| {
            rows_of(&b.streams["streams"])
                .iter()
                .find(|s| s["config"]["name"] == name)
                .map(|s| u64_of(&s["state"]["last_seq"]))
        })
    };
    let rows = rows_of(&now.streams["streams"]).iter().take(ROWS_MAX).map(|s| {
        let name = s["config"]["name"].as_str().unwrap_or("?");
        let rate = per_second(u64_of(&s["state"]["last_seq"]), last_seq_before(name), seconds);
        Row::new(vec![
            name.to_string(),
            format!("L{}", u64_of(&s["level"])),
            u64_of(&s["state"]["messages"]).to_string(),
            bytes(u64_of(&s["state"]["bytes"])),
            format!("{rate:.1}"),
            rows_of(&s["consumers"]).len().to_string(),
        ])
    });
    let widths = [
        Constraint::Fill(2),
        Constraint::Length(5),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(9),
        Constraint::Length(9),
    ];
    let header = heading(["stream", "level", "messages", "bytes", "msgs/s", "consumers"]);
    frame.render_widget(Table::new(rows, widths).header(header).block(block("streams")), area);
}

fn draw_latency(frame: &mut Frame, area: Rect, now: &Snapshot) {
    let objective = u64_of(&now.latency["objective_us"]);
    let rows = rows_of(&now.latency["streams"]).iter().take(ROWS_MAX).map(|s| {
        let p99 = u64_of(&s["p99_us"]);
        let within = s["within_objective"].as_f64().unwrap_or(1.0);
        let style = Style::default().fg(if p99 <= objective { Color::Green } else { Color::Red });
        Row::new(vec![
            s["key"].as_str().unwrap_or("?").to_string(),
            u64_of(&s["count"]).to_string(),
            micros(u64_of(&s["p50_us"])),
            micros(p99),
            format!("{:.1}%", within * 100.0),
        ])
        .style(style)
    });
    let widths = [
        Constraint::Fill(1),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(8),
    ];
    let header = heading(["stream", "deliveries", "p50", "p99", "within"]);
    frame.render_widget(Table::new(rows, widths).header(header).block(block("publish → delivery")), area);
}

fn draw_tokens(frame: &mut Frame, area: Rect, now: &Snapshot) {
    let bucket_seconds = u64_of(&now.tokens["bucket_seconds"]).max(1);
    let rows = rows_of(&now.tokens["series"]).iter().take(ROWS_MAX).map(|s| {
        let sums: Vec<u64> = rows_of(&s["tokens_in"])
            .iter()
            .zip(rows_of(&s["tokens_out"]))
            .map(|(tokens_in, tokens_out)| u64_of(tokens_in) + u64_of(tokens_out))
            .collect();
        let last = sums.last().copied().unwrap_or(0);
        Row::new(vec![
            s["key"].as_str().unwrap_or("?").to_string(),
            u64_of(&s["total_in"]).to_string(),
            u64_of(&s["total_out"]).to_string(),
            format!("{:.0}", last as f64 / bucket_seconds as f64),
            sparkline(&sums[sums.len().saturating_sub(SPARK_BUCKETS)..]),
        ])
    });
    let widths = [
        Constraint::Fill(1),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(9),
        Constraint::Length(SPARK_BUCKETS as u16),
    ];
    let header = heading(["model", "in", "out", "tokens/s", "last 4 min"]);
    frame.render_widget(Table::new(rows, widths).header(header).block(block("token load, 10 min")), area);
}

fn draw_agents(frame: &mut Frame, area: Rect, now: &Snapshot) {
    let rows = rows_of(&now.agents["intents"]).iter().flat_map(|intent| {
        let name = intent["name"].as_str().unwrap_or("?").to_string();
        rows_of(&intent["agents"]).iter().map(move |agent| {
            Row::new(vec![
                name.clone(),
                agent["agent_id"].as_str().unwrap_or("?").to_string(),
                format!("{:.2}", agent["weight"].as_f64().unwrap_or(0.0)),
                u64_of(&agent["in_flight"]).to_string(),
                format!("{:.1} ms", agent["latency_ms"].as_f64().unwrap_or(0.0)),
                u64_of(&agent["errors"]).to_string(),
            ])
        })
    });
    let widths = [
        Constraint::Fill(1),
        Constraint::Fill(1),
        Constraint::Length(6),
        Constraint::Length(9),
        Constraint::Length(10),
        Constraint::Length(7),
    ];
    let header = heading(["intent", "agent", "weight", "in flight", "latency", "errors"]);
    frame.render_widget(Table::new(rows.take(ROWS_MAX), widths).header(header).block(block("agents")), area);
}

fn heading<const N: usize>(names: [&'static str; N]) -> Row<'static> {
    Row::new(names).style(Style::default().add_modifier(Modifier::BOLD))
}

/// Bars ▁ to █ scaled to the largest value; blank where zero.
fn sparkline(values: &[u64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let peak = values.iter().copied().max().unwrap_or(0);
    values
        .iter()
        .map(|&v| match v {
            0 => ' ',
            _ => BARS[((v as f64 / peak as f64) * (BARS.len() - 1) as f64).round() as usize],
        })
        .collect()
}

fn micros(us: u64) -> String {
    match us >= 1000 {
        true => format!("{:.2} ms", us as f64 / 1000.0),
        false => format!("{us} µs"),
    }
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut value, mut unit) = (n as f64, 0);
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{n} B"),
        _ => format!("{value:.1} {}", UNITS[unit]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparklines_scale_to_the_peak_and_leave_zeros_blank() {
        assert_eq!(sparkline(&[0, 1, 4, 8]), " ▂▅█");
        assert_eq!(sparkline(&[]), "");
        assert_eq!(sparkline(&[0, 0]), "  ");
    }

    #[test]
    fn rates_need_two_polls() {
        assert_eq!(per_second(100, None, 2.0), 0.0);
        assert_eq!(per_second(100, Some(40), 2.0), 30.0);
        assert_eq!(per_second(10, Some(40), 2.0), 0.0, "a restarted server's counters do not go negative");
    }

    #[test]
    fn figures_read_as_people_write_them() {
        assert_eq!(micros(950), "950 µs");
        assert_eq!(micros(15_000), "15.00 ms");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
