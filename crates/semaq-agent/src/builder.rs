//! [`AgentBuilder`]: what an agent announces, and [`connect`](AgentBuilder::connect), which
//! announces it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::agent::Agent;
use crate::error::AgentError;
use crate::protocol::Heartbeat;

/// Requests in flight an agent takes when the builder is not told (the broker's default too).
pub const CAPACITY_DEFAULT: u32 = 16;
/// How often the agent beats: twice per the broker's default 2 s interval, so one lost or late
/// beat never comes near the 3 missed that expire an agent.
pub const HEARTBEAT_INTERVAL_DEFAULT: Duration = Duration::from_secs(1);

/// Configures an agent; [`connect`](Self::connect) announces it. From [`Agent::builder`].
#[derive(Debug, Clone)]
pub struct AgentBuilder {
    agent_id: String,
    intents: Vec<String>,
    descriptions: BTreeMap<String, String>,
    inbox: Option<String>,
    capacity: u32,
    metadata: Value,
    heartbeat_interval: Duration,
}

impl AgentBuilder {
    pub(crate) fn new(agent_id: impl Into<String>) -> Self {
        Self {
            agent_id: agent_id.into(),
            intents: Vec::new(),
            descriptions: BTreeMap::new(),
            inbox: None,
            capacity: CAPACITY_DEFAULT,
            metadata: Value::Null,
            heartbeat_interval: HEARTBEAT_INTERVAL_DEFAULT,
        }
    }

    /// Serves `name` (requests on `intent.<name>`); a non-empty `description` is announced with it.
    pub fn intent(mut self, name: impl Into<String>, description: impl Into<String>) -> Self {
        let (name, description) = (name.into(), description.into());
        if !description.is_empty() {
            self.descriptions.insert(name.clone(), description);
        }
        if !self.intents.contains(&name) {
            self.intents.push(name);
        }
        self
    }

    /// Most requests in flight at once, here and in the broker's routing (default 16, at most 4096).
    pub fn capacity(mut self, capacity: u32) -> Self {
        self.capacity = capacity;
        self
    }

    /// The subject routed requests arrive on (default `agents.<agent_id>`).
    pub fn inbox(mut self, subject: impl Into<String>) -> Self {
        self.inbox = Some(subject.into());
        self
    }

    /// Free-form JSON object the broker shows in `/semaq/agents` (model, version, region…).
    pub fn metadata(mut self, metadata: Value) -> Self {
        self.metadata = metadata;
        self
    }

    /// How often to beat (default 1 s); keep it under the broker's `agents.heartbeat_interval`.
    pub fn heartbeat_interval(mut self, every: Duration) -> Self {
        self.heartbeat_interval = every;
        self
    }

    /// Subscribes the inbox on `client`, sends the first heartbeat as a request (a refusal
    /// returns the broker's reason), and starts beating. Routed requests wait in the
    /// subscription until [`Agent::serve`] takes them.
    pub async fn connect(self, client: &async_nats::Client) -> Result<Agent, AgentError> {
        if self.heartbeat_interval.is_zero() {
            return Err(AgentError::Invalid("the heartbeat interval must be above zero".to_string()));
        }
        let inbox = self.inbox.unwrap_or_else(|| format!("agents.{}", self.agent_id));
        let heartbeat = Heartbeat {
            agent_id: self.agent_id,
            intents: self.intents,
            inbox,
            capacity: self.capacity,
            descriptions: self.descriptions,
            metadata: self.metadata,
        };
        Agent::announce(client.clone(), heartbeat, self.heartbeat_interval).await
    }
}
