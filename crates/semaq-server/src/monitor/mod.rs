//! The monitoring HTTP endpoints, with nats-server's field names so existing tooling reads them:
//! `/varz`, `/connz`, `/subsz`, `/healthz`, `/jsz` and `/accountz` ([`jsz`]); Prometheus text at
//! `/metrics` ([`metrics`]); and SemaQ's own, under `/semaq/`: `/semaq/shed`, the
//! `Semaq-Lossy` messages shed per subject, and `/semaq/agents`.

pub mod jsz;
pub mod metrics;
pub mod subsz;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use semaq_wire::clock;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::agents::Agents;
use crate::bus::Bus;
use crate::client::Client;
use crate::filter::Filters;
use crate::identity::{Identity, NATS_COMPATIBLE_VERSION, SEMAQ_VERSION};
use crate::jetstream::per_account::JetStreams;
use crate::limits;
use crate::options::Options;
use crate::registry::Registry;

/// What the monitoring endpoints read, handed over by the server once everything is started.
#[derive(Debug)]
pub struct Monitor {
    /// Who this server is.
    pub identity: Identity,
    /// Effective options.
    pub options: Arc<Options>,
    /// Routing, connections and counters.
    pub bus: Arc<Bus>,
    /// Bound client address.
    pub client_addr: Option<SocketAddr>,
    /// Bound monitoring address.
    pub http_addr: Option<SocketAddr>,
    /// Whether clients must authenticate.
    pub auth_required: bool,
    /// Whether the client listener speaks TLS.
    pub tls_required: bool,
    /// The schema registry, also served over Confluent's REST API here.
    pub registry: Arc<Registry>,
    /// Filter counters and filtered subscriptions.
    pub filters: Arc<Filters>,
    /// The agent network.
    pub agents: Arc<Agents>,
    /// Token load per model, subject, intent and agent.
    pub tokens: Arc<crate::tokens::Tokens>,
    /// End-to-end latency per stream and subject prefix.
    pub latency: Arc<crate::latency::Latency>,
    /// Every account's streams and consumers, when JetStream is on.
    pub jetstream: Option<Arc<JetStreams>>,
    /// Bound WebSocket address, when the WebSocket listener is on.
    pub websocket_addr: Option<SocketAddr>,
    /// Each account's subject mappings, shown in `/accountz`.
    pub mappings: crate::mappings::AccountMappings,
}

/// Serves the monitoring endpoints on `listener` until the task is aborted.
pub async fn serve(monitor: Arc<Monitor>, listener: TcpListener) {
    // The dashboard and the provenance pages show the home account's streams.
    let home_jetstream = monitor.jetstream.as_ref().and_then(|jetstreams| jetstreams.home());
    let app = Router::new()
        .route("/varz", get(varz))
        .route("/connz", get(connz))
        .route("/subsz", get(subsz::subsz))
        .route("/healthz", get(healthz))
        .route("/jsz", get(jsz::jsz))
        .route("/accountz", get(jsz::accountz))
        .route("/metrics", get(metrics::metrics))
        .route("/semaq/agents", get(agents))
        .route("/semaq/shed", get(shed))
        .route("/api/latency", get(latency))
        .with_state(monitor.clone())
        .merge(crate::registry::http::routes().with_state(monitor.registry.clone()))
        .merge(crate::tokens::http::routes().with_state(monitor.tokens.clone()))
        .merge(crate::dashboard::routes().with_state(home_jetstream.clone()))
        .merge(crate::jetstream::provenance::api::routes().with_state(home_jetstream));
    if let Err(error) = axum::serve(listener, app).await {
        tracing::error!(%error, "monitoring server failed");
    }
}

async fn latency(State(monitor): State<Arc<Monitor>>) -> Json<crate::latency::Report> {
    Json(monitor.latency.report())
}

/// `/healthz`.
pub(crate) async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// Resident memory of this process in bytes, from /proc (0 where unavailable).
pub fn resident_memory_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

async fn agents(State(monitor): State<Arc<Monitor>>) -> Json<Value> {
    Json(monitor.agents.snapshot())
}

/// `/varz`.
pub(crate) async fn varz(State(monitor): State<Arc<Monitor>>) -> Json<Value> {
    let options = &monitor.options;
    let ((in_msgs, in_bytes), (out_msgs, out_bytes)) = monitor.bus.traffic_totals();
    let (client_addr, http_addr) = (monitor.client_addr, monitor.http_addr);
    let (identity, stats) = (&monitor.identity, &monitor.bus.stats);
    let stat = |counter: &std::sync::atomic::AtomicU64| counter.load(std::sync::atomic::Ordering::Relaxed);
    let mut varz = json!({
        "server_id": identity.server_id,
        "server_name": identity.server_name,
        "version": NATS_COMPATIBLE_VERSION,
        "semaq_version": SEMAQ_VERSION,
        "proto": 1,
        "go": format!("semaq {SEMAQ_VERSION}"),
        "host": client_addr.map(|a| a.ip().to_string()),
        "port": client_addr.map(|a| a.port()),
        "http_host": http_addr.map(|a| a.ip().to_string()),
        "http_port": http_addr.map(|a| a.port()),
        "auth_required": monitor.auth_required,
        "tls_required": monitor.tls_required,
        "tls_verify": options.tls.as_ref().is_some_and(|tls| tls.verify),
        "max_connections": options.connections_max,
        "max_subscriptions": options.subscriptions_per_connection_max,
        "ping_interval": options.ping_interval.as_nanos() as u64,
        "ping_max": options.pings_outstanding_max,
        "max_control_line": options.control_line_bytes_max,
        "max_payload": options.payload_bytes_max,
        "max_pending": options.pending_bytes_max,
        "write_deadline": options.write_deadline.as_nanos() as u64,
        "start": clock::rfc3339(identity.started_at),
        "now": clock::rfc3339(SystemTime::now()),
        "uptime": clock::go_duration(identity.started.elapsed()),
        "mem": resident_memory_bytes(),
        "cores": std::thread::available_parallelism().map_or(1, usize::from),
        "connections": monitor.bus.clients.len(),
        "total_connections": stat(&stats.total_connections),
        "routes": 0,
        "remotes": 0,
        "leafnodes": 0,
        "in_msgs": in_msgs,
        "out_msgs": out_msgs,
        "in_bytes": in_bytes,
        "out_bytes": out_bytes,
        "slow_consumers": stat(&stats.slow_consumers),
        "subscriptions": monitor.bus.subscription_count(),
        "auth_failures": stat(&stats.auth_failures),
        "refused_connections": stat(&stats.refused_connections),
        "schema_refusals": stat(&monitor.registry.refusals),
        "semaq_filters": filters_json(&monitor.filters),
    });
    // Set apart: one more key in the literal passes `json!`'s recursion limit.
    varz["semaq_lossy_shed"] = json!(stats.shed.total.snapshot().0);
    varz["websocket"] = websocket_varz(options, monitor.websocket_addr);
    varz["jetstream"] = jetstream_varz(&monitor);
    if let Some(system) = monitor.options.system_account() {
        varz["system_account"] = json!(system);
    }
    Json(varz)
}

/// nats-server's `jetstream` block of `/varz`: the server's JetStream config and every
/// account's usage summed (empty when JetStream is off).
fn jetstream_varz(monitor: &Monitor) -> Value {
    let Some(jetstreams) = &monitor.jetstream else { return json!({}) };
    let accounts = jetstreams.all();
    json!({ "config": jsz::config_json(monitor), "stats": jsz::stats_json(&accounts, accounts.len()) })
}

/// nats-server's `websocket` block of `/varz` (empty when the listener is off); unset fields
/// are left out, as Go's `omitempty` does.
fn websocket_varz(options: &Options, addr: Option<SocketAddr>) -> Value {
    let (Some(ws), Some(addr)) = (&options.websocket, addr) else { return json!({}) };
    let mut varz = json!({
        "host": ws.host,
        "port": addr.port(),
        "handshake_timeout": ws.handshake_timeout.as_nanos() as u64,
    });
    if ws.tls.is_none() {
        varz["no_tls"] = json!(true);
    }
    if ws.same_origin {
        varz["same_origin"] = json!(true);
    }
    if !ws.allowed_origins.is_empty() {
        let origins: Vec<String> =
            ws.allowed_origins.iter().map(|o| format!("{}://{}:{}", o.scheme, o.host, o.port)).collect();
        varz["allowed_origins"] = json!(origins);
    }
    varz
}

/// Filter counters (core subscriptions and consumers together) and open filtered subscriptions.
fn filters_json(filters: &Filters) -> Value {
    let mut counts = json!(filters.stats.snapshot());
    counts["subscriptions"] = json!(filters.len());
    counts
}

/// `/connz` query: paging and which connections.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ConnzQuery {
    pub(crate) offset: Option<usize>,
    pub(crate) limit: Option<usize>,
    pub(crate) state: Option<String>,
    /// Only the connections of this account (nats-server's `acc`).
    pub(crate) acc: Option<String>,
}

fn connection_json(client: &Client, now: SystemTime, closed: Option<(&str, SystemTime)>) -> Value {
    let (in_msgs, in_bytes) = client.inbound.snapshot();
    let (out_msgs, out_bytes) = client.outbound.traffic.snapshot();
    let details = client.details();
    let options = details.map(|d| &d.options);
    let uptime_end = closed.map_or(now, |(_, stopped)| stopped);
    let mut entry = json!({
        "cid": client.id,
        "kind": "Client",
        "type": "nats",
        "ip": client.addr.ip().to_string(),
        "port": client.addr.port(),
        "start": clock::rfc3339(client.started),
        "uptime": clock::go_duration(uptime_end.duration_since(client.started).unwrap_or_default()),
        "pending_bytes": client.outbound.pending_bytes(),
        "in_msgs": in_msgs,
        "out_msgs": out_msgs,
        "in_bytes": in_bytes,
        "out_bytes": out_bytes,
        "subscriptions": client.subscriptions.load(std::sync::atomic::Ordering::Relaxed),
        "lossy_shed": client.outbound.lossy_shed.snapshot().0,
        "name": options.and_then(|o| o.name.clone()).unwrap_or_default(),
        "lang": options.and_then(|o| o.lang.clone()).unwrap_or_default(),
        "version": options.and_then(|o| o.version.clone()).unwrap_or_default(),
        "tls": client.tls,
    });
    if let Some(rtt) = client.rtt() {
        // Go's `Duration.String`, as nats-server prints it: "1.234567ms".
        let nanos = i64::try_from(rtt.as_nanos()).unwrap_or(i64::MAX);
        entry["rtt"] = json!(clock::go_duration_text(nanos));
    }
    if let Some(user) = details.and_then(|d| d.user.clone()) {
        entry["authorized_user"] = json!(user);
    }
    // nats-server names the account unless it is the global one.
    if let Some(account) = details.and_then(|d| d.account.clone()) {
        entry["account"] = json!(account);
    }
    if let Some((reason, stopped)) = closed {
        entry["stop"] = json!(clock::rfc3339(stopped));
        entry["reason"] = json!(reason);
    }
    entry
}

/// `/connz`.
pub(crate) async fn connz(State(monitor): State<Arc<Monitor>>, Query(query): Query<ConnzQuery>) -> Json<Value> {
    let now = SystemTime::now();
    let state = query.state.as_deref().unwrap_or("open");
    let mut entries: Vec<(u64, Value)> = Vec::new();
    let wanted = |client: &Client| {
        let account = client.details().and_then(|d| d.account.as_deref()).unwrap_or(crate::options::GLOBAL_ACCOUNT);
        query.acc.as_deref().is_none_or(|acc| acc == account)
    };
    if state == "open" || state == "any" || state == "all" {
        let open = monitor.bus.clients.open();
        let open = open.iter().filter(|client| wanted(client));
        entries.extend(open.map(|client| (client.id, connection_json(client, now, None))));
    }
    if state == "closed" || state == "any" || state == "all" {
        let closed = monitor.bus.clients.closed();
        let closed = closed.iter().filter(|c| wanted(&c.client));
        entries.extend(
            closed.map(|c| (c.client.id, connection_json(&c.client, now, Some((c.reason.as_str(), c.stopped))))),
        );
    }
    entries.sort_by_key(|(id, _)| *id);
    let total = entries.len();
    let offset = query.offset.unwrap_or(0).min(total);
    let limit = query.limit.unwrap_or(limits::CONNZ_PAGE_ENTRIES_MAX).min(limits::CONNZ_PAGE_ENTRIES_MAX);
    let page: Vec<Value> = entries.into_iter().skip(offset).take(limit).map(|(_, entry)| entry).collect();
    Json(json!({
        "server_id": monitor.identity.server_id,
        "now": clock::rfc3339(now),
        "num_connections": page.len(),
        "total": total,
        "offset": offset,
        "limit": limit,
        "connections": page,
    }))
}

/// `Semaq-Lossy` messages shed since start: in all, and per subject (bounded; the rest under
/// [`limits::SHED_OTHER_SUBJECTS_KEY`]).
async fn shed(State(monitor): State<Arc<Monitor>>) -> Json<Value> {
    let shed = &monitor.bus.stats.shed;
    let (total_msgs, total_bytes) = shed.total.snapshot();
    Json(json!({ "total_msgs": total_msgs, "total_bytes": total_bytes, "subjects": shed.subjects() }))
}

/// The subject router's figures with nats-server's `SublistStats` names (`/subsz`, `/accountz`).
pub(crate) fn sublist_stats(stats: &crate::router::RouterStats) -> Value {
    json!({
        "num_subscriptions": stats.num_subscriptions,
        "num_cache": stats.num_cache,
        "num_inserts": stats.num_inserts,
        "num_removes": stats.num_removes,
        "num_matches": stats.num_matches,
        "cache_hit_rate": stats.cache_hit_rate,
        "max_fanout": stats.max_fanout,
        "avg_fanout": stats.avg_fanout,
    })
}
