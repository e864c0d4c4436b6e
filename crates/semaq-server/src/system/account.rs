//! The account-scoped `$SYS` requests, `$SYS.REQ.ACCOUNT.<account>.<ENDPOINT>`, as nats-server
//! answers them: `SUBSZ`, `CONNZ`, `JSZ`, `INFO`, `STATZ`, `LEAFZ` and `CONNS`; `USER.INFO`;
//! and the account statistics of `STATZ` and `CONNS` ([`crate::sys_events::stat`]).

use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Query, State};
use semaq_wire::clock;
use serde_json::{json, Value};

use super::options::{self, Outcome};
use crate::monitor::subsz::{subsz_json, SubszOptions};
use crate::monitor::{self, Monitor};
use crate::options::{ResponsePermission, SubjectPermission, GLOBAL_ACCOUNT};
use crate::sys_events::{connections_event, stat};

/// The answer to `$SYS.REQ.ACCOUNT.<account>.<endpoint>`, or `None` where nats-server gives none.
pub async fn endpoint(monitor: &Arc<Monitor>, account: &str, endpoint: &str, options: &Value) -> Option<Outcome> {
    Some(match endpoint {
        "CONNZ" => {
            let query = options::connz(options, Some(account));
            Outcome::Data(monitor::connz(State(monitor.clone()), Query(query)).await.0)
        }
        "SUBSZ" => {
            let mut subsz = SubszOptions::from_body(options);
            (subsz.subscriptions, subsz.account) = (true, Some(account.to_string()));
            match subsz_json(monitor, &subsz) {
                Ok(data) => Outcome::Data(data),
                Err(error) => Outcome::Error(500, error),
            }
        }
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

/// nats-server's `UserInfo` of the open connection `client_id`: its user, account and
/// permissions; `None` once it has closed.
pub fn user_info(monitor: &Monitor, client_id: u64) -> Option<Value> {
    let client = monitor.bus.clients.get(client_id)?;
    let details = client.details()?;
    let account = details.account.as_deref().unwrap_or(GLOBAL_ACCOUNT);
    let mut info = json!({
        "user": details.user.as_deref().unwrap_or_default(),
        "account": account,
        "account_name": account,
    });
    if let Some(permissions) = &details.permissions {
        info["permissions"] =
            json!({ "publish": rules(permissions.publish()), "subscribe": rules(permissions.subscribe()) });
        if let Some(responses) = permissions.responses() {
            info["permissions"]["responses"] = responses_json(responses);
        }
    }
    if let Some(left) = details.expires.and_then(|at| expires_in_ns(at, clock::unix_nanos_now())) {
        info["expires"] = json!(left);
    }
    Some(info)
}

/// nats-server's `claimExpiration`: the time left until `expires_s` (seconds since the epoch),
/// truncated to whole seconds, as a Go duration (nanoseconds); `None` once it has passed.
fn expires_in_ns(expires_s: i64, now_ns: i64) -> Option<i64> {
    const NS_PER_S: i64 = 1_000_000_000;
    let left_ns = expires_s.checked_mul(NS_PER_S)?.checked_sub(now_ns)?;
    let whole_ns = left_ns / NS_PER_S * NS_PER_S;
    (whole_ns > 0).then_some(whole_ns)
}

/// nats-server's `ResponsePermission`: `max` replies and their `ttl` (a Go duration), -1 for no
/// bound (nats-server shows the negative number it was given).
fn responses_json(responses: ResponsePermission) -> Value {
    let max = responses.msgs_max.map_or(-1, |most| i64::try_from(most).unwrap_or(i64::MAX));
    let ttl = responses.expires.map_or(-1, |ttl| i64::try_from(ttl.as_nanos()).unwrap_or(i64::MAX));
    json!({ "max": max, "ttl": ttl })
}

/// nats-server's `SubjectPermission`, its empty lists left out.
fn rules(rules: Option<&SubjectPermission>) -> Value {
    let mut json = json!({});
    if let Some(rules) = rules {
        if !rules.allow.is_empty() {
            json["allow"] = json!(rules.allow);
        }
        if !rules.deny.is_empty() {
            json["deny"] = json!(rules.deny);
        }
    }
    json
}

/// nats-server's `Routez` of a server without a cluster.
pub fn routez(monitor: &Monitor) -> Value {
    json!({
        "server_id": monitor.identity.server_id,
        "server_name": monitor.identity.server_name,
        "now": clock::rfc3339(SystemTime::now()),
        "num_routes": 0,
        "routes": [],
    })
}

/// nats-server's `Gatewayz` of a server without gateways.
pub fn gatewayz(monitor: &Monitor) -> Value {
    json!({
        "server_id": monitor.identity.server_id,
        "now": clock::rfc3339(SystemTime::now()),
        "outbound_gateways": {},
        "inbound_gateways": {},
    })
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

#[cfg(test)]
mod tests {
    use super::expires_in_ns;

    #[test]
    fn the_time_left_is_truncated_to_whole_seconds_and_gone_once_passed() {
        let second = 1_000_000_000;
        assert_eq!(expires_in_ns(100, 40 * second + 250_000_000), Some(59 * second));
        assert_eq!(expires_in_ns(100, 40 * second), Some(60 * second));
        assert_eq!(expires_in_ns(100, 99 * second + 1), None, "less than a second left");
        assert_eq!(expires_in_ns(100, 101 * second), None);
        assert_eq!(expires_in_ns(i64::MAX, 0), None, "no overflow");
    }
}
