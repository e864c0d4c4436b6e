//! What a handler gets ([`Request`]) and gives back ([`Reply`]).

use async_nats::HeaderMap;
use bytes::Bytes;

use crate::protocol::headers;

/// One routed message: the requester's payload and headers, plus what the broker added
/// (`Semaq-Agent`, `Semaq-Intent`).
#[derive(Debug, Clone)]
pub struct Request {
    message: async_nats::Message,
}

impl Request {
    pub(crate) fn new(message: async_nats::Message) -> Self {
        Self { message }
    }

    /// The subject it was delivered on: the agent's inbox (the requester sent to `intent.<name>`).
    pub fn subject(&self) -> &str {
        self.message.subject.as_str()
    }

    /// The intent it was routed for (`Semaq-Intent`).
    pub fn intent(&self) -> Option<&str> {
        self.header(headers::INTENT)
    }

    /// The conversation it belongs to (`Semaq-Session`), if the requester named one.
    pub fn session(&self) -> Option<&str> {
        self.header(headers::SESSION)
    }

    /// One header's value, by name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.message.headers.as_ref()?.get(name).map(|value| value.as_str())
    }

    /// All headers, as the broker delivered them.
    pub fn headers(&self) -> Option<&HeaderMap> {
        self.message.headers.as_ref()
    }

    /// The requester's payload.
    pub fn payload(&self) -> &Bytes {
        &self.message.payload
    }

    /// Where the answer goes; `None` for a plain publish, whose reply is dropped.
    pub fn reply_subject(&self) -> Option<&str> {
        self.message.reply.as_ref().map(|subject| subject.as_str())
    }

    /// The underlying NATS message.
    pub fn message(&self) -> &async_nats::Message {
        &self.message
    }
}

/// A reply's `Semaq-Status`, which the broker learns from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Status {
    /// Success: strengthens this agent's weight (the default; no header is sent).
    #[default]
    Ok,
    /// Failure: weakens this agent's weight, so the broker sends it less for a while.
    Error,
    /// Not now: counts as a refusal, and a durable intent gives the message to another agent.
    Retry,
}

impl Status {
    /// The header value.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Retry => "retry",
        }
    }
}

/// What a handler answers.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    payload: Bytes,
    status: Status,
    tokens_out: Option<u64>,
    headers: Option<HeaderMap>,
}

impl Reply {
    /// A successful reply carrying `payload`.
    pub fn new(payload: impl Into<Bytes>) -> Self {
        Self { payload: payload.into(), ..Self::default() }
    }

    /// An empty reply with `Semaq-Status: retry`.
    pub fn retry() -> Self {
        Self::default().status(Status::Retry)
    }

    /// A reply with `Semaq-Status: error` carrying `payload` (what an `Err` from a handler sends).
    pub fn error(payload: impl Into<Bytes>) -> Self {
        Self::new(payload).status(Status::Error)
    }

    /// Sets the status.
    pub fn status(mut self, status: Status) -> Self {
        self.status = status;
        self
    }

    /// Sets `Semaq-Tokens-Out`: the broker then judges latency per output token.
    pub fn tokens_out(mut self, tokens: u64) -> Self {
        self.tokens_out = Some(tokens);
        self
    }

    /// Adds a header of the caller's own.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.get_or_insert_with(HeaderMap::new).insert(name, value);
        self
    }

    /// The payload.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// The status it will be sent with.
    pub fn status_of(&self) -> Status {
        self.status
    }

    /// The header block on the wire: the caller's headers, then `Semaq-Agent` naming who answered
    /// (so requesters see it without the monitoring API), the status unless ok, the token count.
    pub(crate) fn into_parts(self, agent_id: &str) -> (Option<HeaderMap>, Bytes) {
        let mut map = self.headers.unwrap_or_default();
        map.insert(headers::AGENT, agent_id);
        if self.status != Status::Ok {
            map.insert(headers::STATUS, self.status.as_str());
        }
        if let Some(tokens) = self.tokens_out {
            map.insert(headers::TOKENS_OUT, tokens.to_string().as_str());
        }
        ((!map.is_empty()).then_some(map), self.payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(map: &Option<HeaderMap>, name: &str) -> Option<String> {
        map.as_ref()?.get(name).map(|value| value.as_str().to_string())
    }

    #[test]
    fn an_ok_reply_names_the_agent_and_sends_no_status() {
        let (map, payload) = Reply::new("done").tokens_out(42).into_parts("pay-1");
        assert_eq!(payload, Bytes::from_static(b"done"));
        assert_eq!(header(&map, headers::AGENT).as_deref(), Some("pay-1"));
        assert_eq!(header(&map, headers::STATUS), None);
        assert_eq!(header(&map, headers::TOKENS_OUT).as_deref(), Some("42"));
    }

    #[test]
    fn error_and_retry_replies_carry_their_status() {
        let (map, payload) = Reply::error("declined").into_parts("a");
        assert_eq!(header(&map, headers::STATUS).as_deref(), Some("error"));
        assert_eq!(payload, Bytes::from_static(b"declined"));
        let (map, payload) = Reply::retry().header("X-Why", "busy").into_parts("a");
        assert_eq!(header(&map, headers::STATUS).as_deref(), Some("retry"));
        assert_eq!(header(&map, "X-Why").as_deref(), Some("busy"));
        assert!(payload.is_empty());
    }
}
