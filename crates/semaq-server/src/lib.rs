//! The SemaQ broker.
//!
//! Follow one message through the rooms in this order: [`server`] accepts a socket;
//! [`connection`] reads it, parses ops with `semaq_wire`, maps a publish's subject with its
//! account's [`mappings`] and authorizes them ([`auth`]);
//! [`router`] maps the subject to subscriptions; [`delivery`] fans the message out to clients'
//! [`outbound`] buffers and to internal sinks, such as a stream of [`jetstream`] capturing its
//! subjects (checks, store append, PubAck), whose consumers deliver back through the same path.
//!
//! The modules form layers, bottom to top; a module uses only those below it (and those before
//! it in its own layer), so no import cycle spans two modules. `architecture.rs` tests this.
//!
//! 1. **Basics:** [`limits`] (every default bound), [`sync`] (lock helpers, byte
//!    budgets), [`transform`] (nats-server's subject transforms), [`mappings`] (accounts' subject
//!    mappings, applied to what clients publish before routing), [`imports`] (accounts' exports and imports, checked), [`stats`], [`identity`], [`options`], [`auth`]
//!    (credentials and permissions), [`config_file`] (nats-server's format, filling the options;
//!    it reads an operator's JWT with [`auth`]) and [`flags`] (its command line), [`tls`], [`priority`]
//!    (`Semaq-Priority`'s shares), [`latency`] (publish-to-delivery histograms), [`trace`]
//!    (OpenTelemetry spans and `Nats-Trace-Dest`).
//! 2. **Routing:** [`router`] (the subject trie), [`outbound`] (each client's bounded buffer and
//!    writer), [`client`] (a connection's shared half and the connection table), [`delivery`]
//!    (fan-out to subscriptions).
//! 3. **The bus:** [`bus`], the one way any subsystem publishes, subscribes internally and reaches
//!    the connections. Subsystems hold an `Arc<Bus>` (or, from sinks the router holds, a
//!    `Weak<Bus>`), never the whole server. [`account_links`] puts the imports in place on it.
//! 4. **Subsystems:** [`registry`] (the schema registry's REST and NATS APIs over the
//!    `semaq-registry` crate), [`filter`] (CEL content filters, filtered subscriptions),
//!    [`tokens`] (token load per model, subject, intent and agent), [`agents`] (the agent
//!    network: intent routing by learned weights), [`sys_events`] (the system account's client
//!    events), [`connection`]
//!    (one client), [`websocket`] (nats-server's WebSocket transport into the same connection),
//!    [`lame_duck`] (closing the connections gradually before shutdown).
//! 5. **[`jetstream`]:** streams and consumers, with the handles they use in
//!    [`jetstream::Services`] (bus, registry, filters, options).
//! 6. **Edges:** [`dashboard`] (the web page), [`monitor`] (the HTTP endpoints), [`system`]
//!    (`$SYS` server requests) and [`server`], the only place that builds the
//!    whole and wires it.

pub mod account_links;
pub mod agents;
pub mod auth;
pub mod bus;
pub mod client;
pub mod config_file;
pub mod connection;
pub mod dashboard;
pub mod delivery;
pub mod filter;
pub mod flags;
pub mod identity;
pub mod imports;
pub mod jetstream;
pub mod lame_duck;
pub mod latency;
pub mod limits;
pub mod mappings;
pub mod monitor;
pub mod options;
pub mod outbound;
pub mod priority;
pub mod registry;
pub mod router;
pub mod server;
pub mod stats;
pub mod sync;
pub mod sys_events;
pub mod system;
pub mod tls;
pub mod tokens;
pub mod trace;
pub mod transform;
pub mod websocket;

#[cfg(test)]
mod architecture;
