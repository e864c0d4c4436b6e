//! The broker's agent protocol (SPEC §6): subjects, header names, and the JSON bodies of
//! heartbeats, goodbyes and the broker's answers to them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::AgentError;

/// Where agents send heartbeats.
pub const HEARTBEAT_SUBJECT: &str = "$SEMAQ.AGENT.HB";
/// Where agents say goodbye.
pub const BYE_SUBJECT: &str = "$SEMAQ.AGENT.BYE";
/// Requests to `intent.<name>` are routed to an agent serving `<name>`.
pub const INTENT_PREFIX: &str = "intent.";

/// Header names the broker writes on routed requests and reads on replies.
pub mod headers {
    /// Written by the broker on a routed request: the agent it chose.
    pub const AGENT: &str = "Semaq-Agent";
    /// The intent a request was routed for.
    pub const INTENT: &str = "Semaq-Intent";
    /// A conversation key: the broker keeps a session with one agent while it is healthy.
    pub const SESSION: &str = "Semaq-Session";
    /// A reply's status: `ok` (the default), `error` or `retry`.
    pub const STATUS: &str = "Semaq-Status";
    /// Tokens a reply produced; the broker's latency estimate is per token when it is set.
    pub const TOKENS_OUT: &str = "Semaq-Tokens-Out";
}

/// The heartbeat body, sent as it is on every beat.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Heartbeat {
    pub agent_id: String,
    pub intents: Vec<String>,
    pub inbox: String,
    pub capacity: u32,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub descriptions: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Value::is_null")]
    pub metadata: Value,
}

/// A goodbye body.
#[derive(Debug, Serialize)]
pub(crate) struct Bye<'a> {
    pub agent_id: &'a str,
}

/// The broker's answer to a heartbeat or goodbye sent as a request.
#[derive(Debug, Deserialize)]
struct Answer {
    #[serde(default)]
    ok: bool,
    #[serde(default)]
    error: Option<AnswerError>,
}

#[derive(Debug, Deserialize)]
struct AnswerError {
    #[serde(default)]
    code: u16,
    #[serde(default)]
    description: String,
}

/// Reads the broker's answer: `Ok` for `{"ok":true}`, its reason for `{"error":{..}}`.
pub(crate) fn check_answer(payload: &[u8]) -> Result<(), AgentError> {
    let answer: Answer = serde_json::from_slice(payload)
        .map_err(|e| AgentError::Protocol(format!("unreadable answer {:?}: {e}", String::from_utf8_lossy(payload))))?;
    match answer {
        Answer { error: Some(error), .. } => {
            Err(AgentError::Refused { code: error.code, description: error.description })
        }
        Answer { ok: true, .. } => Ok(()),
        Answer { ok: false, .. } => Err(AgentError::Protocol("answer says neither ok nor error".to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_ok_or_the_brokers_reason() {
        assert!(check_answer(br#"{"ok":true,"agent_id":"a"}"#).is_ok());
        let refused = check_answer(br#"{"error":{"code":400,"description":"invalid heartbeat: x"}}"#);
        assert!(
            matches!(refused, Err(AgentError::Refused { code: 400, ref description }) if description == "invalid heartbeat: x")
        );
        assert!(matches!(check_answer(b"not json"), Err(AgentError::Protocol(_))));
        assert!(matches!(check_answer(b"{}"), Err(AgentError::Protocol(_))));
    }

    #[test]
    fn a_heartbeat_leaves_out_what_is_empty() {
        let heartbeat = Heartbeat {
            agent_id: "a".into(),
            intents: vec!["x".into()],
            inbox: "agents.a".into(),
            capacity: 4,
            descriptions: BTreeMap::new(),
            metadata: Value::Null,
        };
        let body = serde_json::to_string(&heartbeat).unwrap_or_default();
        assert_eq!(body, r#"{"agent_id":"a","intents":["x"],"inbox":"agents.a","capacity":4}"#);
    }
}
