//! `semaq agent ls` and `semaq agent watch`: the agent network as the server sees it, from
//! `$SEMAQ.API.AGENT.LIST` — each (intent, agent) synapse's weight, in-flight requests,
//! latency, errors, and the sessions each agent holds.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{anyhow, Context as _, Result};
use serde_json::Value;

use crate::connect::Target;
use crate::parse::parse_duration;

/// The request subject the server answers with its agent table.
const API_LIST: &str = "$SEMAQ.API.AGENT.LIST";

/// `semaq agent ...`
#[derive(clap::Args, Debug)]
pub struct AgentArgs {
    #[command(subcommand)]
    command: AgentCommand,
}

#[derive(clap::Subcommand, Debug)]
enum AgentCommand {
    /// List live agents and each intent's synapses: weight, in flight, latency, errors, sessions
    Ls(LsArgs),
    /// As ls, redrawn every interval until interrupted
    Watch(WatchArgs),
    /// Durable intents: `intent add NAME --durable` backs an intent with a work-queue stream
    #[command(subcommand)]
    Intent(IntentCommand),
}

#[derive(clap::Subcommand, Debug)]
enum IntentCommand {
    /// Back intent NAME with a work-queue stream: work waits for agents and survives restarts
    Add(IntentAddArgs),
}

#[derive(clap::Args, Debug)]
struct IntentAddArgs {
    /// The intent, as in `intent.<NAME>`
    name: String,
    /// Store its messages (the only kind of intent that needs declaring)
    #[arg(long)]
    durable: bool,
    /// Deliveries before a message moves to the dead-letter stream
    #[arg(long, default_value_t = 5)]
    max_deliver: u32,
    /// The stream's name (default: INTENT_ then the intent, dots as underscores)
    #[arg(long)]
    stream: Option<String>,
    /// Keep the stream in memory instead of on disk
    #[arg(long)]
    memory: bool,
}

#[derive(clap::Args, Debug)]
struct LsArgs {
    /// Print the server's JSON instead of tables
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct WatchArgs {
    /// Time between redraws, e.g. 1s or 500ms
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// Stop after this many redraws (0: until interrupted)
    #[arg(long, default_value_t = 0)]
    count: u64,
}

/// Runs `semaq agent`.
pub async fn run(target: &Target, args: AgentArgs) -> Result<()> {
    let client = target.connect().await?;
    match args.command {
        AgentCommand::Ls(ls) => {
            let table = fetch(&client, target).await?;
            match ls.json {
                true => println!("{}", serde_json::to_string_pretty(&table)?),
                false => print!("{}", render(&table)),
            }
        }
        AgentCommand::Watch(watch) => {
            let mut drawn = 0;
            loop {
                let table = fetch(&client, target).await?;
                // Clear the screen and home the cursor, like `watch(1)`.
                print!("\x1b[2J\x1b[H{}", render(&table));
                drawn += 1;
                if watch.count != 0 && drawn >= watch.count {
                    break;
                }
                tokio::time::sleep(watch.interval).await;
            }
        }
        AgentCommand::Intent(IntentCommand::Add(add)) => add_durable_intent(&client, add).await?,
    }
    Ok(())
}

async fn add_durable_intent(client: &async_nats::Client, args: IntentAddArgs) -> Result<()> {
    if !args.durable {
        anyhow::bail!("intents exist as soon as an agent announces one; --durable backs {} with a stream", args.name);
    }
    let stream = args.stream.unwrap_or_else(|| format!("INTENT_{}", args.name.replace('.', "_")));
    let metadata = std::collections::HashMap::from([
        ("semaq.intent".to_string(), args.name.clone()),
        ("semaq.max_deliver".to_string(), args.max_deliver.to_string()),
    ]);
    let config = async_nats::jetstream::stream::Config {
        name: stream.clone(),
        subjects: vec![format!("intent.{}", args.name)],
        retention: async_nats::jetstream::stream::RetentionPolicy::WorkQueue,
        storage: match args.memory {
            true => async_nats::jetstream::stream::StorageType::Memory,
            false => async_nats::jetstream::stream::StorageType::File,
        },
        metadata,
        ..Default::default()
    };
    let js = async_nats::jetstream::new(client.clone());
    js.create_stream(config).await.map_err(|error| anyhow!("cannot create stream {stream}: {error}"))?;
    println!("intent {} is durable: stream {stream} on intent.{}, dead letters in {stream}_DLQ on dlq.{} after {} deliveries",
        args.name, args.name, args.name, args.max_deliver);
    Ok(())
}

async fn fetch(client: &async_nats::Client, target: &Target) -> Result<Value> {
    let request = async_nats::Request::new().payload(bytes::Bytes::new()).timeout(Some(target.timeout));
    let reply = client
        .send_request(API_LIST, request)
        .await
        .map_err(|error| anyhow!("{API_LIST} failed (is this a semaq-server?): {error}"))?;
    serde_json::from_slice(&reply.payload).context("the server's answer is not JSON")
}

/// The agent table as text: one block for agents, one per intent.
pub fn render(table: &Value) -> String {
    let mut out = String::new();
    let agents = table["agents"].as_array().map(Vec::as_slice).unwrap_or_default();
    let _ = writeln!(out, "{} agents", agents.len());
    if !agents.is_empty() {
        let _ = writeln!(
            out,
            "{:<28} {:<9} {:>9} {:>8} {:>9}  intents",
            "AGENT", "SOURCE", "IN FLIGHT", "SESSIONS", "SEEN AGO"
        );
        for agent in agents {
            let intents: Vec<&str> =
                agent["intents"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            let in_flight = format!("{}/{}", agent["in_flight"], agent["capacity"]);
            let seen = format!("{}ms", agent["last_seen_ms_ago"]);
            let id = agent["agent_id"].as_str().unwrap_or_default();
            let source = agent["source"].as_str().unwrap_or_default();
            let sessions = &agent["sessions"];
            let _ = writeln!(out, "{id:<28} {source:<9} {in_flight:>9} {sessions:>8} {seen:>9}  {}", intents.join(","));
        }
    }
    for intent in table["intents"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "\nintent {}: routed {} · waiting {} · no responders {} · wait timeouts {} · session moves {}",
            intent["name"].as_str().unwrap_or_default(),
            intent["routed"],
            intent["waiting"],
            intent["no_responders"],
            intent["wait_timeouts"],
            intent["session_moves"]
        );
        let _ = writeln!(
            out,
            "  {:<26} {:>6} {:>9} {:>11} {:>8} {:>7} {:>7} {:>8}",
            "AGENT", "WEIGHT", "IN FLIGHT", "LATENCY ms", "ROUTED", "OK", "ERRORS", "TIMEOUTS"
        );
        for member in intent["agents"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "  {:<26} {:>6.2} {:>9} {:>11.3} {:>8} {:>7} {:>7} {:>8}",
                member["agent_id"].as_str().unwrap_or_default(),
                member["weight"].as_f64().unwrap_or_default(),
                member["in_flight"],
                member["latency_ms"].as_f64().unwrap_or_default(),
                member["routed"],
                member["ok"],
                member["errors"],
                member["timeouts"]
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_shows_agents_and_each_synapse() {
        let table = json!({
            "agents": [{"agent_id": "pay-1", "source": "heartbeat", "in_flight": 2, "capacity": 8, "sessions": 3,
                        "last_seen_ms_ago": 120, "intents": ["resolve_payment", "refund"]}],
            "intents": [{"name": "resolve_payment", "routed": 10, "waiting": 0, "no_responders": 1, "wait_timeouts": 0,
                         "session_moves": 0,
                         "agents": [{"agent_id": "pay-1", "weight": 0.75, "in_flight": 2, "latency_ms": 1.5,
                                     "routed": 10, "ok": 9, "errors": 1, "timeouts": 0}]}]
        });
        let text = render(&table);
        assert!(text.contains("1 agents"));
        assert!(text.contains("pay-1") && text.contains("2/8") && text.contains("resolve_payment,refund"));
        assert!(text.contains("intent resolve_payment: routed 10"));
        assert!(text.contains("0.75"), "{text}");
    }
}
