//! The SemaQ agent SDK: an agent announces the intents it serves to a SemaQ broker, which
//! routes each request on `intent.<name>` to one live agent chosen by what it has observed
//! (SPEC §6). The SDK speaks the plain NATS protocol the broker documents, over an
//! [`async_nats::Client`] the caller owns:
//!
//! - [`Agent::builder`] … [`AgentBuilder::connect`] subscribes the agent's inbox, sends the first
//!   heartbeat to `$SEMAQ.AGENT.HB` as a request (a refusal comes back as
//!   [`AgentError::Refused`] with the broker's reason), then beats every second in a task.
//! - [`Agent::serve`] runs a handler per routed [`Request`], at most `capacity` at once, and
//!   answers on the request's reply subject from the same connection: a [`Reply`], or for an
//!   `Err` a reply with `Semaq-Status: error` and the error's text, which weakens this agent's
//!   weight so the broker sends it less.
//! - [`Agent::shutdown`] leaves cleanly: heartbeats stop, `$SEMAQ.AGENT.BYE` takes the agent out
//!   of routing at once, messages already delivered are still served, and it returns once every
//!   handler has answered.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use semaq_agent::{Agent, HandlerError, Reply, Request};
//!
//! let client = async_nats::connect("nats://127.0.0.1:4222").await?;
//! let agent = Agent::builder("pay-1")
//!     .intent("resolve_payment", "settle a failed card payment")
//!     .capacity(8)
//!     .connect(&client)
//!     .await?;
//! let serving = tokio::spawn({
//!     let agent = agent.clone();
//!     async move {
//!         agent
//!             .serve(|request: Request| async move {
//!                 if request.payload().is_empty() {
//!                     return Err(HandlerError::new("empty payment"));
//!                 }
//!                 Ok(Reply::new("settled").tokens_out(42))
//!             })
//!             .await
//!     }
//! });
//! // ... later:
//! agent.shutdown().await?;
//! serving.await??;
//! # Ok(())
//! # }
//! ```

mod agent;
mod builder;
mod error;
mod message;
mod protocol;

pub use agent::Agent;
pub use builder::{AgentBuilder, CAPACITY_DEFAULT, HEARTBEAT_INTERVAL_DEFAULT};
pub use error::{AgentError, HandlerError};
pub use message::{Reply, Request, Status};
pub use protocol::{headers, BYE_SUBJECT, HEARTBEAT_SUBJECT, INTENT_PREFIX};
