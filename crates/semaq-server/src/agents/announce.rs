//! What an agent says of itself: heartbeats on `$SEMAQ.AGENT.HB`, leaves on
//! `$SEMAQ.AGENT.BYE` (SPEC §6), and the endpoints of a NATS service's `$SRV.INFO` reply.
//! Pure parsing with every bound checked; a refusal says which rule was broken.

use std::collections::BTreeMap;

use semaq_wire::subject;
use serde::Deserialize;
use serde_json::Value;

use crate::limits;

/// Where agents send heartbeats.
pub const HEARTBEAT_SUBJECT: &str = "$SEMAQ.AGENT.HB";
/// Where agents say goodbye.
pub const BYE_SUBJECT: &str = "$SEMAQ.AGENT.BYE";
/// Endpoint metadata key that makes a NATS service endpoint an agent for that intent.
pub const SERVICE_INTENT_KEY: &str = "semaq.intent";
/// Endpoint metadata key for a service endpoint's capacity.
pub const SERVICE_CAPACITY_KEY: &str = "semaq.capacity";

/// One agent's announcement, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Announcement {
    /// The agent's id, unique among live agents.
    pub agent_id: String,
    /// Intents it serves, without duplicates, in the order given.
    pub intents: Vec<String>,
    /// Subject its connection subscribes to for routed messages.
    pub inbox: String,
    /// Requests it may have in flight.
    pub capacity: u32,
    /// Optional text per intent.
    pub descriptions: BTreeMap<String, String>,
    /// Free-form metadata, kept for `agent ls`.
    pub metadata: Value,
}

/// Why an announcement was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnnounceError {
    /// The body is not the JSON object SPEC §6 describes.
    #[error("malformed heartbeat: {0}")]
    Malformed(String),
    /// A field breaks a rule.
    #[error("invalid heartbeat: {0}")]
    Invalid(String),
    /// The inbox is a subject the announcing connection may not subscribe to.
    #[error("inbox {0:?} is not a subject this connection may subscribe to")]
    InboxNotPermitted(String),
    /// Another live connection already announced this agent id.
    #[error("agent id {0:?} is held by another connection")]
    IdTaken(String),
    /// The server holds as many agents as it may.
    #[error("too many agents (at most {0})")]
    TooManyAgents(usize),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Heartbeat {
    agent_id: String,
    intents: Vec<String>,
    inbox: String,
    #[serde(default)]
    capacity: Option<u64>,
    #[serde(default)]
    descriptions: BTreeMap<String, String>,
    #[serde(default)]
    metadata: Option<Value>,
}

#[derive(Deserialize)]
struct Bye {
    agent_id: String,
}

/// Reads and checks a heartbeat body.
pub fn parse_heartbeat(body: &[u8]) -> Result<Announcement, AnnounceError> {
    let heartbeat: Heartbeat = serde_json::from_slice(body).map_err(|e| AnnounceError::Malformed(e.to_string()))?;
    let capacity = match heartbeat.capacity {
        None => limits::AGENT_CAPACITY_DEFAULT,
        Some(0) => return Err(invalid("capacity must be at least 1")),
        Some(n) => u32::try_from(n).ok().filter(|n| *n <= limits::AGENT_CAPACITY_MAX).ok_or_else(|| {
            invalid(&format!("capacity {n} is above the most an agent may take ({})", limits::AGENT_CAPACITY_MAX))
        })?,
    };
    let metadata = heartbeat.metadata.unwrap_or(Value::Null);
    if !(metadata.is_null() || metadata.is_object()) {
        return Err(invalid("metadata must be an object"));
    }
    let announcement = Announcement {
        agent_id: heartbeat.agent_id,
        intents: heartbeat.intents,
        inbox: heartbeat.inbox,
        capacity,
        descriptions: heartbeat.descriptions,
        metadata,
    };
    check(announcement)
}

/// Reads a goodbye's agent id.
pub fn parse_bye(body: &[u8]) -> Result<String, AnnounceError> {
    let bye: Bye = serde_json::from_slice(body).map_err(|e| AnnounceError::Malformed(e.to_string()))?;
    check_agent_id(&bye.agent_id)?;
    Ok(bye.agent_id)
}

fn invalid(reason: &str) -> AnnounceError {
    AnnounceError::Invalid(reason.to_string())
}

fn check_agent_id(agent_id: &str) -> Result<(), AnnounceError> {
    let printable = agent_id.chars().all(|c| c.is_ascii_graphic());
    if agent_id.is_empty() || agent_id.len() > limits::AGENT_ID_BYTES_MAX || !printable {
        return Err(invalid(&format!("agent_id must be 1 to {} visible ASCII characters", limits::AGENT_ID_BYTES_MAX)));
    }
    Ok(())
}

/// Whether `name` can be an intent: one or more subject tokens without wildcards.
pub fn is_valid_intent(name: &str) -> bool {
    !name.is_empty() && name.len() <= limits::INTENT_NAME_BYTES_MAX && subject::is_valid_literal(name)
}

/// Applies the rules every announcement obeys, whatever its source.
pub fn check(mut announcement: Announcement) -> Result<Announcement, AnnounceError> {
    check_agent_id(&announcement.agent_id)?;
    if announcement.intents.is_empty() {
        return Err(invalid("intents must name at least one intent"));
    }
    if announcement.intents.len() > limits::INTENTS_PER_AGENT_MAX {
        return Err(invalid(&format!("an agent may serve at most {} intents", limits::INTENTS_PER_AGENT_MAX)));
    }
    if let Some(bad) = announcement.intents.iter().find(|name| !is_valid_intent(name)) {
        return Err(invalid(&format!("intent {bad:?} is not a subject token sequence without wildcards")));
    }
    let mut seen = std::collections::HashSet::new();
    announcement.intents.retain(|name| seen.insert(name.clone()));
    if !subject::is_valid_literal(&announcement.inbox) || announcement.inbox.len() > limits::AGENT_INBOX_BYTES_MAX {
        return Err(invalid("inbox must be a subject without wildcards"));
    }
    if announcement.inbox.starts_with("intent.") || announcement.inbox.starts_with("$SEMAQ.AGENT.") {
        return Err(invalid("inbox may not be an intent or agent-protocol subject"));
    }
    let described = announcement.descriptions.iter();
    if described.clone().any(|(_, text)| text.len() > limits::AGENT_DESCRIPTION_BYTES_MAX) {
        return Err(invalid(&format!("descriptions are at most {} bytes", limits::AGENT_DESCRIPTION_BYTES_MAX)));
    }
    announcement.descriptions.retain(|name, _| announcement.intents.contains(name));
    Ok(announcement)
}

/// The agents a `$SRV.INFO` reply describes: one per endpoint that names an intent, either in
/// its metadata (`semaq.intent`) or because its subject is one the configuration routes.
/// The agent id is `<service name>.<instance id>.<endpoint name>`.
pub fn service_agents(info: &Value, routed_subjects: &[String]) -> Vec<Announcement> {
    let name = info["name"].as_str().unwrap_or_default();
    let id = info["id"].as_str().unwrap_or_default();
    let Some(endpoints) = info["endpoints"].as_array() else { return Vec::new() };
    let mut agents = Vec::new();
    for endpoint in endpoints.iter().take(limits::INTENTS_PER_AGENT_MAX) {
        let Some(subject) = endpoint["subject"].as_str() else { continue };
        let metadata = &endpoint["metadata"];
        let intent = match metadata[SERVICE_INTENT_KEY].as_str() {
            Some(intent) => intent.to_string(),
            None if routed_subjects.iter().any(|s| s == subject) => subject.to_string(),
            None => continue,
        };
        let capacity = metadata[SERVICE_CAPACITY_KEY]
            .as_str()
            .and_then(|text| text.parse::<u32>().ok())
            .filter(|n| (1..=limits::AGENT_CAPACITY_MAX).contains(n))
            .unwrap_or(limits::AGENT_CAPACITY_DEFAULT);
        let endpoint_name = endpoint["name"].as_str().unwrap_or(subject);
        let announcement = Announcement {
            agent_id: format!("{name}.{id}.{endpoint_name}"),
            intents: vec![intent],
            inbox: subject.to_string(),
            capacity,
            descriptions: BTreeMap::new(),
            metadata: serde_json::json!({ "service": name, "service_id": id, "endpoint": endpoint_name }),
        };
        if let Ok(announcement) = check(announcement) {
            agents.push(announcement);
        }
    }
    agents
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn heartbeat(body: Value) -> Result<Announcement, AnnounceError> {
        parse_heartbeat(body.to_string().as_bytes())
    }

    #[test]
    fn a_full_heartbeat_is_read() {
        let announcement = heartbeat(json!({
            "agent_id": "pay-1", "intents": ["resolve_payment", "refund", "refund"], "inbox": "agents.pay-1",
            "capacity": 4, "descriptions": {"refund": "give money back", "other": "dropped"},
            "metadata": {"model": "llama3"}
        }))
        .unwrap();
        assert_eq!(announcement.intents, vec!["resolve_payment", "refund"]);
        assert_eq!(announcement.capacity, 4);
        assert_eq!(announcement.descriptions.len(), 1);
        assert_eq!(announcement.metadata["model"], "llama3");
    }

    #[test]
    fn capacity_defaults_and_is_bounded() {
        let base = json!({"agent_id": "a", "intents": ["x"], "inbox": "in.a"});
        assert_eq!(heartbeat(base.clone()).unwrap().capacity, limits::AGENT_CAPACITY_DEFAULT);
        let mut zero = base.clone();
        zero["capacity"] = json!(0);
        assert!(matches!(heartbeat(zero), Err(AnnounceError::Invalid(_))));
        let mut huge = base;
        huge["capacity"] = json!(u64::MAX);
        assert!(matches!(heartbeat(huge), Err(AnnounceError::Invalid(_))));
    }

    #[test]
    fn malformed_and_invalid_heartbeats_say_why() {
        assert!(matches!(parse_heartbeat(b"not json"), Err(AnnounceError::Malformed(_))));
        assert!(matches!(heartbeat(json!({"agent_id": "a"})), Err(AnnounceError::Malformed(_))));
        assert!(matches!(
            heartbeat(json!({"agent_id": "a", "intents": [], "inbox": "x"})),
            Err(AnnounceError::Invalid(_))
        ));
        assert!(matches!(
            heartbeat(json!({"agent_id": "a", "intents": ["pay.*"], "inbox": "x"})),
            Err(AnnounceError::Invalid(_))
        ));
        assert!(matches!(
            heartbeat(json!({"agent_id": "a", "intents": ["pay"], "inbox": "in.>"})),
            Err(AnnounceError::Invalid(_))
        ));
        assert!(matches!(
            heartbeat(json!({"agent_id": "a", "intents": ["pay"], "inbox": "intent.pay"})),
            Err(AnnounceError::Invalid(_))
        ));
        assert!(matches!(
            heartbeat(json!({"agent_id": "has space", "intents": ["pay"], "inbox": "x"})),
            Err(AnnounceError::Invalid(_))
        ));
        assert!(matches!(
            heartbeat(json!({"agent_id": "a", "intents": ["pay"], "inbox": "x", "surprise": 1})),
            Err(AnnounceError::Malformed(_))
        ));
    }

    #[test]
    fn a_bye_names_an_agent() {
        assert_eq!(parse_bye(br#"{"agent_id":"pay-1"}"#).unwrap(), "pay-1");
        assert!(parse_bye(b"{}").is_err());
    }

    #[test]
    fn service_endpoints_with_an_intent_become_agents() {
        let info = json!({
            "name": "payments", "id": "ABC", "version": "1.0.0",
            "endpoints": [
                {"name": "resolve", "subject": "payments.resolve", "queue_group": "q",
                 "metadata": {"semaq.intent": "resolve_payment", "semaq.capacity": "3"}},
                {"name": "status", "subject": "payments.status", "queue_group": "q", "metadata": null},
                {"name": "audit", "subject": "payments.audit", "queue_group": "q"}
            ]
        });
        let agents = service_agents(&info, &["payments.audit".to_string()]);
        assert_eq!(agents.len(), 2);
        assert_eq!(agents[0].agent_id, "payments.ABC.resolve");
        assert_eq!(agents[0].intents, vec!["resolve_payment"]);
        assert_eq!(agents[0].inbox, "payments.resolve");
        assert_eq!(agents[0].capacity, 3);
        assert_eq!(agents[1].intents, vec!["payments.audit"]);
    }
}
