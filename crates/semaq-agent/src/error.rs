//! What can go wrong: [`AgentError`] for the SDK's own calls, [`HandlerError`] for a handler's
//! failure, which becomes a `Semaq-Status: error` reply.

use std::fmt;

/// Why an agent call failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The broker refused a heartbeat or goodbye and said why.
    #[error("the broker refused: {description} ({code})")]
    Refused {
        /// The broker's code: 400 for a refused heartbeat, 404 for an unknown goodbye.
        code: u16,
        /// The broker's reason, e.g. `invalid heartbeat: intent names are subject tokens without wildcards`.
        description: String,
    },
    /// A configuration the broker would refuse anyway, caught before anything is sent.
    #[error("invalid agent: {0}")]
    Invalid(String),
    /// Subscribing the agent's inbox failed.
    #[error("cannot subscribe the inbox: {0}")]
    Subscribe(#[from] async_nats::SubscribeError),
    /// A heartbeat or goodbye request got no answer (no SemaQ broker, or it timed out).
    #[error("no answer from the broker: {0}")]
    Request(#[from] async_nats::RequestError),
    /// The broker's answer was not what the protocol says.
    #[error("unexpected answer from the broker: {0}")]
    Protocol(String),
    /// [`Agent::serve`](crate::Agent::serve) runs once per agent; it was called again.
    #[error("this agent is already serving (or has been shut down)")]
    AlreadyServing,
}

/// A handler's failure: the agent replies with `Semaq-Status: error` and this text.
///
/// Any [`std::error::Error`] converts into it, so `?` works in handlers; like
/// `anyhow::Error`, it does not implement `Error` itself (the blanket conversion rules that out).
pub struct HandlerError {
    message: String,
}

impl HandlerError {
    /// A failure with this text as the reply's payload.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into() }
    }

    /// The text the error reply carries.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl<E: std::error::Error> From<E> for HandlerError {
    fn from(error: E) -> Self {
        Self::new(error.to_string())
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HandlerError").field(&self.message).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_error_converts_with_its_text() {
        let parse = "x".parse::<u32>().map_err(HandlerError::from);
        assert_eq!(parse.err().map(|e| e.to_string()), Some("invalid digit found in string".to_string()));
        assert_eq!(HandlerError::new("card declined").message(), "card declined");
    }
}
