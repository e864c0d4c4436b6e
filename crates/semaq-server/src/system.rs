//! The system account's `$SYS` server requests, which `nats server ping`, `nats server info`
//! and friends send: `$SYS.REQ.SERVER.PING` (statsz), `$SYS.REQ.SERVER.PING.<ENDPOINT>` and
//! `$SYS.REQ.SERVER.<server id>.<ENDPOINT>` for `VARZ`, `CONNZ`, `SUBSZ`, `JSZ` and `HEALTHZ`,
//! answered with nats-server's `ServerAPIResponse` envelope `{server, data}` built from the
//! monitoring endpoints' JSON; `STATSZ` with its `{server, statsz}` and `IDZ` with the server's
//! info alone. Connections' `$SYS.ACCOUNT.<account>.CONNECT|DISCONNECT` events are [`crate::sys_events`].
//! Only in operator mode, where `system_account` names a
//! trusted account, as nats-server has them only in its system account.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::{Query, State};
use semaq_wire::clock;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::bus::Bus;
use crate::delivery::{self, FlushSet, Message, QueuedRequest, RequestQueue, SubscriberRef};
use crate::limits;
use crate::monitor::{self, Monitor};
use crate::router::Router;
use crate::sys_events::{Events, Server};

/// Starts answering `$SYS` server requests in the system account, when there is one; returns
/// what publishes its client events.
pub fn start(monitor: &Arc<Monitor>) -> Option<Arc<Events>> {
    let account = monitor.options.auth.operator.as_ref().and_then(|o| o.system_account.clone())?;
    let Some(router) = monitor.bus.account_router(&account).cloned() else {
        tracing::warn!(%account, "system account is not a trusted account; no $SYS services");
        return None;
    };
    let (queue, requests) = mpsc::channel(limits::SYSTEM_REQUESTS_QUEUED_MAX);
    let sink = Arc::new(RequestQueue { queue });
    let id = &monitor.identity.server_id;
    for filter in
        ["$SYS.REQ.SERVER.PING".to_string(), "$SYS.REQ.SERVER.PING.*".into(), format!("$SYS.REQ.SERVER.{id}.*")]
    {
        if let Err(error) = Bus::subscribe_internal_in(&router, &filter, None, sink.clone()) {
            tracing::warn!(%error, %filter, "no $SYS subscription");
        }
    }
    tokio::spawn(serve(monitor.clone(), router.clone(), requests));
    Some(Arc::new(Events::new(server(monitor), router)))
}

async fn serve(monitor: Arc<Monitor>, router: Arc<Router<SubscriberRef>>, mut requests: mpsc::Receiver<QueuedRequest>) {
    let sequence = AtomicU64::new(0);
    while let Some(request) = requests.recv().await {
        let endpoint = match request.subject.rsplit('.').next() {
            Some("PING") | None => "STATSZ",
            Some(endpoint) => endpoint,
        };
        let server = server(&monitor).info(sequence.fetch_add(1, Ordering::Relaxed) + 1);
        // As in nats-server: IDZ is the server's info alone, STATSZ a `ServerStatsMsg`.
        let body = match endpoint {
            "IDZ" => server,
            "STATSZ" => json!({ "server": server, "statsz": statsz(&monitor) }),
            _ => match endpoint_data(&monitor, endpoint).await {
                Some(data) => json!({ "server": server, "data": data }),
                None => continue,
            },
        }
        .to_string();
        let reply =
            Message { subject: &request.reply, reply: None, headers: None, payload: body.as_bytes(), publisher: None };
        let mut flush = FlushSet::default();
        delivery::fan_out(&router, &router.matches_uncached(&request.reply), &reply, None, &mut flush);
        flush.flush();
    }
}

/// The endpoint's JSON, or `None` for one SemaQ does not serve (no answer, as nats-server
/// gives none to an unknown request).
async fn endpoint_data(monitor: &Arc<Monitor>, endpoint: &str) -> Option<Value> {
    let state = || State(monitor.clone());
    Some(match endpoint {
        "VARZ" => monitor::varz(state()).await.0,
        "CONNZ" => monitor::connz(state(), Query(monitor::ConnzQuery::default())).await.0,
        "SUBSZ" => monitor::subsz(state()).await.0,
        "HEALTHZ" => monitor::healthz().await.0,
        "JSZ" => monitor::jsz::jsz_json(monitor, &monitor::jsz::JszOptions::default()),
        _ => return None,
    })
}

/// nats-server's `ServerStats`, from the same counters as `/varz`.
fn statsz(monitor: &Monitor) -> Value {
    let ((in_msgs, in_bytes), (out_msgs, out_bytes)) = monitor.bus.traffic_totals();
    let stats = &monitor.bus.stats;
    json!({
        "start": clock::rfc3339(monitor.identity.started_at),
        "mem": monitor::resident_memory_bytes(),
        "cores": std::thread::available_parallelism().map_or(1, usize::from),
        "connections": monitor.bus.clients.len(),
        "total_connections": stats.total_connections.load(Ordering::Relaxed),
        "active_accounts": monitor.bus.account_routers().filter(|(_, router)| router.count() > 0).count(),
        "subscriptions": monitor.bus.subscription_count(),
        "sent": { "msgs": out_msgs, "bytes": out_bytes },
        "received": { "msgs": in_msgs, "bytes": in_bytes },
        "slow_consumers": stats.slow_consumers.load(Ordering::Relaxed),
    })
}

/// Who answers, for the envelopes.
fn server(monitor: &Monitor) -> Server {
    Server {
        id: monitor.identity.server_id.clone(),
        name: monitor.identity.server_name.clone(),
        host: monitor.client_addr.map(|a| a.ip().to_string()).unwrap_or_default(),
        jetstream: monitor.jetstream.is_some(),
    }
}
