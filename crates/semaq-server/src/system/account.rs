//! The account-scoped `$SYS` requests, `$SYS.REQ.ACCOUNT.<account>.<ENDPOINT>`, as nats-server
//! answers them: `SUBSZ`, `CONNZ`, `JSZ`, `INFO`, `STATZ`, `LEAFZ` and `CONNS`; and the
//! account statistics of `STATZ` and `CONNS` ([`crate::sys_events::stat`]).

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Query, State};
use semaq_wire::clock;
use serde_json::{json, Value};

use super::options::{self, Outcome};
use crate::delivery::{Sink, Subscription};
use crate::limits;
use crate::monitor::{self, Monitor};
use crate::sys_events::{connections_event, stat};

/// The answer to `$SYS.REQ.ACCOUNT.<account>.<endpoint>`, or `None` where nats-server gives none.
pub async fn endpoint(monitor: &Arc<Monitor>, account: &str, endpoint: &str, options: &Value) -> Option<Outcome> {
    Some(match endpoint {
        "CONNZ" => {
            let query = options::connz(options, Some(account));
            Outcome::Data(monitor::connz(State(monitor.clone()), Query(query)).await.0)
        }
        "SUBSZ" => Outcome::Data(subsz(monitor, account, options)),
        "LEAFZ" => Outcome::Data(leafz(monitor)),
        "JSZ" => jsz(monitor, account, options),
        "INFO" => match monitor::jsz::account_detail_json(monitor, account) {
            Some(detail) => Outcome::Data(detail),
            None => Outcome::Error(500, format!("Account {account} does not exist")),
        },
        // The PING subject also matches `$SYS.REQ.ACCOUNT.*.STATZ`; nats-server skips it there.
        "STATZ" if account == "PING" => return None,
        "STATZ" => {
            let unused = include_unused(options);
            let stat = monitor.bus.account_router(account).and_then(|_| stat(&monitor.bus, account, unused))?;
            Outcome::Data(statz_body(monitor, vec![stat]))
        }
        _ => return None,
    })
}

/// `$SYS.REQ.ACCOUNT.PING.STATZ`: the accounts the body lists (`accounts`), else every
/// account; only those with connections unless `include_unused`; no answer when none is left.
pub fn statz_all(monitor: &Monitor, options: &Value) -> Option<Outcome> {
    let unused = include_unused(options);
    let listed: Option<Vec<&str>> =
        options.get("accounts").and_then(Value::as_array).map(|names| names.iter().filter_map(Value::as_str).collect());
    let mut names: Vec<&str> = match listed.filter(|names| !names.is_empty()) {
        Some(names) => names.into_iter().filter(|name| monitor.bus.account_router(name).is_some()).collect(),
        None => monitor.bus.account_routers().map(|(name, _)| name).collect(),
    };
    names.sort_unstable();
    let stats: Vec<Value> = names.into_iter().filter_map(|name| stat(&monitor.bus, name, unused)).collect();
    if stats.is_empty() && !unused {
        return None;
    }
    Some(Outcome::Data(statz_body(monitor, stats)))
}

/// `$SYS.REQ.ACCOUNT.<account>.CONNS`: nats-server's `AccountNumConns`, only for an account
/// with connections here.
pub fn conns(monitor: &Monitor, account: &str, server: Value) -> Option<Value> {
    monitor.bus.account_router(account)?;
    let stat = stat(&monitor.bus, account, false)?;
    Some(connections_event(stat, server))
}

/// nats-server's `Leafz`: SemaQ has no leaf nodes.
pub fn leafz(monitor: &Monitor) -> Value {
    json!({
        "server_id": monitor.identity.server_id,
        "now": clock::rfc3339(SystemTime::now()),
        "leafnodes": 0,
        "leafs": [],
    })
}

fn include_unused(options: &Value) -> bool {
    options.get("include_unused").and_then(Value::as_bool).unwrap_or(false)
}

fn statz_body(monitor: &Monitor, stats: Vec<Value>) -> Value {
    json!({
        "server_id": monitor.identity.server_id,
        "now": clock::rfc3339(SystemTime::now()),
        "account_statz": stats,
    })
}

/// nats-server's `Subsz` of one account with its `subscriptions_list`, paged by the body's
/// `offset` and `limit`, sorted by connection and sid (server subscriptions, cid 0, first).
fn subsz(monitor: &Monitor, account: &str, options: &Value) -> Value {
    let Some(router) = monitor.bus.account_router(account) else {
        return json!({ "server_id": monitor.identity.server_id, "now": clock::rfc3339(SystemTime::now()) });
    };
    let stats = router.stats();
    let mut listed: Vec<(u64, String, Value)> = router
        .subscribers(limits::SUBSZ_SCAN_SUBSCRIPTIONS_MAX)
        .iter()
        .map(|subscriber| sub_detail(account, &subscriber.0))
        .collect();
    listed.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let number = |key: &str| options.get(key).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok());
    let offset = number("offset").unwrap_or(0).min(listed.len());
    let limit = number("limit").filter(|limit| *limit > 0).unwrap_or(limits::SUBSZ_PAGE_ENTRIES_MAX);
    let limit = limit.min(limits::SUBSZ_PAGE_ENTRIES_MAX);
    let page: Vec<Value> = listed.into_iter().skip(offset).take(limit).map(|(_, _, detail)| detail).collect();
    let mut subsz = monitor::sublist_stats(&stats);
    subsz["server_id"] = json!(monitor.identity.server_id);
    subsz["now"] = json!(clock::rfc3339(SystemTime::now()));
    subsz["total"] = json!(stats.num_subscriptions);
    subsz["offset"] = json!(offset);
    subsz["limit"] = json!(limit);
    if !page.is_empty() {
        subsz["subscriptions_list"] = json!(page);
    }
    subsz
}

/// nats-server's `SubDetail`, with the connection id and sid to sort by.
fn sub_detail(account: &str, subscription: &Subscription) -> (u64, String, Value) {
    let cid = match &subscription.sink {
        Sink::Client(client) => client.id,
        Sink::Internal(_) => 0,
    };
    let sid = subscription.sid.to_string();
    let mut detail = json!({
        "account": account,
        "subject": &*subscription.subject,
        "sid": sid,
        "msgs": subscription.delivered(),
        "cid": cid,
    });
    if let Some(queue) = &subscription.queue {
        detail["qgroup"] = json!(&**queue);
    }
    (cid, sid, detail)
}

/// nats-server's `JszAccount`: the account's JetStream detail, or its errors.
fn jsz(monitor: &Monitor, account: &str, options: &Value) -> Outcome {
    let Some(jetstreams) = &monitor.jetstream else {
        return Outcome::Error(500, "jetstream not enabled".to_string());
    };
    if monitor.bus.account_router(account).is_none() {
        return Outcome::Error(500, format!("account {account:?} not found"));
    }
    let Some(jetstream) = jetstreams.get(account) else {
        return Outcome::Error(500, format!("account {account:?} not jetstream enabled"));
    };
    Outcome::Data(monitor::jsz::account_detail(monitor, &jetstream, &options::jsz(options)))
}
