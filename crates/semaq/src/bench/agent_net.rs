//! What `intent-rr` and `adapt` share: the server they run on (the one `--server` names, or a
//! fresh semaq-server), SDK agents on connections of their own, and reading the broker's view of
//! an intent over `$SEMAQ.API.AGENT.LIST`.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use semaq_agent::{Agent, HandlerError, Reply, Request};
use serde_json::Value;

use super::cpus::CpuSplit;
use super::server::{ServerProcess, ServerSpec};
use crate::connect::Target;

/// The request subject that answers with what `/semaq/agents` shows.
const AGENT_LIST: &str = "$SEMAQ.API.AGENT.LIST";
/// Connect and request timeout against a server the bench started.
const LOCAL_TIMEOUT: Duration = Duration::from_secs(5);
/// Subscription buffer of each bench connection: load bursts must never drop messages.
pub const SUBSCRIPTION_CAPACITY: usize = 65_536;

/// The server a bench runs on; a server it started is stopped on drop.
pub struct BenchServer {
    /// Where to connect.
    pub target: Target,
    _process: Option<(ServerProcess, tempfile::TempDir)>,
}

impl BenchServer {
    /// The server `target` names (`--server`), or a fresh semaq-server (`program`, else the one
    /// next to this executable) on free loopback ports, on the server's half of `cpus` if given.
    pub fn named_or_started(target: &Target, program: Option<PathBuf>, cpus: Option<&CpuSplit>) -> Result<BenchServer> {
        if target.named {
            return Ok(BenchServer { target: target.clone(), _process: None });
        }
        let program = match program {
            Some(path) => path,
            None => super::compare::default_semaq_server()?,
        };
        let dir =
            tempfile::Builder::new().prefix("semaq-bench-agents-").tempdir().context("cannot create a work dir")?;
        let process = ServerSpec::new("semaq", program).with_cpus(cpus.cloned()).start(dir.path())?;
        let target = Target::plain(process.url.clone(), LOCAL_TIMEOUT);
        Ok(BenchServer { target, _process: Some((process, dir)) })
    }

    /// The server's process id, when this bench started it.
    pub fn pid(&self) -> Option<u32> {
        self._process.as_ref().map(|(process, _)| process.pid())
    }

    /// A connection whose subscriptions buffer [`SUBSCRIPTION_CAPACITY`] messages.
    pub async fn connect(&self) -> Result<async_nats::Client> {
        self.target.connect_tuned(|options| options.subscription_capacity(SUBSCRIPTION_CAPACITY)).await
    }
}

/// Announces an SDK agent for `intent` on a connection of its own and serves it in a task;
/// the task ends when the agent is shut down.
pub async fn start_agent<H, F>(server: &BenchServer, id: &str, intent: &str, capacity: u32, handler: H) -> Result<Agent>
where
    H: Fn(Request) -> F + Send + Sync + 'static,
    F: Future<Output = Result<Reply, HandlerError>> + Send + 'static,
{
    let client = server.connect().await?;
    let agent = Agent::builder(id)
        .intent(intent, "semaq bench")
        .capacity(capacity)
        .connect(&client)
        .await
        .with_context(|| format!("cannot announce agent {id} (is this a semaq-server?)"))?;
    let serving = agent.clone();
    tokio::spawn(async move { serving.serve(handler).await });
    Ok(agent)
}

/// Leaves every agent, waiting for their in-flight work.
pub async fn stop_agents(agents: &[Agent]) {
    for agent in agents {
        // The bench is over; a lost goodbye only leaves the agent to expire.
        let _ = agent.shutdown().await;
    }
}

/// The broker's view of `intent`'s agents: `(agent_id, weight)` per member, as
/// `$SEMAQ.API.AGENT.LIST` says it.
pub async fn weights(client: &async_nats::Client, intent: &str) -> Result<Vec<(String, f64)>> {
    let answer = client.request(AGENT_LIST, bytes::Bytes::new()).await.context("agent list request failed")?;
    let list: Value = serde_json::from_slice(&answer.payload).context("unreadable agent list")?;
    let Some(intents) = list["intents"].as_array() else { bail!("agent list without intents: {list}") };
    let members = intents.iter().find(|i| i["name"] == intent).and_then(|i| i["agents"].as_array());
    Ok(members
        .into_iter()
        .flatten()
        .filter_map(|m| Some((m["agent_id"].as_str()?.to_string(), m["weight"].as_f64()?)))
        .collect())
}
