//! The SemaQ broker.
//!
//! Follow one message through the rooms in this order:
//!
//! - [`server`]: binds the listeners, accepts connections (bounded), runs until shutdown.
//! - [`connection`]: one client: reads bytes, parses ops with `semaq_wire`, authorizes, dispatches.
//! - [`router`]: the subject trie that maps a published subject to the subscriptions it reaches.
//! - [`outbound`]: each client's bounded outbound buffer and the task that writes it to the socket.
//! - [`auth`]: who may connect and what each user may publish and subscribe to.
//! - [`tls`]: rustls configuration for the client listener.
//! - [`jetstream`]: streams (capture → checks → store append → ack) and consumers (delivery, acks).
//! - [`filter`]: CEL content filters for core subscriptions and JetStream consumers.
//! - [`monitor`]: the HTTP endpoints (`/varz`, `/connz`, `/subsz`, `/healthz`).
//! - [`registry`]: the schema registry (Confluent's REST API, `$SEMAQ.API.SCHEMA.*`) and L2 validation.
//! - [`stats`]: counters shared by the rooms above.
//!
//! Settings come from [`options`], filled by [`config_file`] (nats-server's format) and then
//! [`flags`] (nats-server's command line). Every default bound lives in [`limits`].

pub mod auth;
pub mod clock;
pub mod config_file;
pub mod connection;
pub mod delivery;
pub mod filter;
pub mod flags;
pub mod jetstream;
pub mod limits;
pub mod monitor;
pub mod options;
pub mod outbound;
pub mod registry;
pub mod router;
pub mod server;
pub mod stats;
pub mod tls;
