//! `/subsz` and the `SUBSZ` requests, as nats-server's `Subsz`: the routers' figures summed
//! over every account (or one), and with `subscriptions` the subscriptions themselves, those
//! matching the literal `test` subject if given, sorted by account, connection and sid, paged
//! by `offset` and `limit`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use semaq_wire::{clock, subject};
use serde_json::{json, Value};

use super::jsz::{parse_bool, parse_int, BadParameter};
use super::Monitor;
use crate::delivery::{Sink, Subscription};
use crate::limits;
use crate::router::RouterStats;

/// What one `/subsz` or `SUBSZ` request asks for (nats-server's `SubszOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubszOptions {
    /// List the subscriptions, not only the figures.
    pub subscriptions: bool,
    /// Listed subscriptions skipped.
    pub offset: usize,
    /// Listed subscriptions at most (0: the default page).
    pub limit: usize,
    /// Only this account.
    pub account: Option<String>,
    /// Only subscriptions a message on this literal subject would reach.
    pub test: Option<String>,
}

impl SubszOptions {
    /// nats-server's options from a `SUBSZ` request body.
    pub fn from_body(body: &Value) -> Self {
        let number = |key: &str| body.get(key).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok());
        let text = |key: &str| body.get(key).and_then(Value::as_str).filter(|t| !t.is_empty()).map(str::to_string);
        Self {
            subscriptions: body.get("subscriptions").and_then(Value::as_bool).unwrap_or(false),
            offset: number("offset").unwrap_or(0),
            limit: number("limit").unwrap_or(0),
            account: text("account"),
            test: text("test"),
        }
    }

    /// nats-server's `/subsz` query: `subs`, `offset`, `limit`, `acc`, `test`.
    fn from_query(params: &HashMap<String, String>) -> Result<Self, BadParameter> {
        let count = |name: &str| parse_int(params, name).map(|n| usize::try_from(n).unwrap_or(0));
        let text = |name: &str| params.get(name).filter(|t| !t.is_empty()).cloned();
        Ok(Self {
            subscriptions: parse_bool(params, "subs")?,
            offset: count("offset")?,
            limit: count("limit")?,
            account: text("acc"),
            test: text("test"),
        })
    }
}

/// `GET /subsz`.
pub async fn subsz(State(monitor): State<Arc<Monitor>>, Query(params): Query<HashMap<String, String>>) -> Response {
    let result =
        SubszOptions::from_query(&params).and_then(|options| subsz_json(&monitor, &options).map_err(BadParameter));
    match result {
        Ok(body) => Json(body).into_response(),
        Err(bad) => bad.into_response(),
    }
}

/// nats-server's `Subsz`; `Err` for a `test` subject that is not a literal subject.
pub fn subsz_json(monitor: &Monitor, options: &SubszOptions) -> Result<Value, String> {
    if let Some(test) = options.test.as_deref().filter(|test| !subject::is_valid_literal(test)) {
        return Err(format!("invalid test subject, must be valid publish subject: {test}"));
    }
    let limit = match options.limit {
        0 => limits::SUBSZ_PAGE_ENTRIES_MAX,
        limit => limit.min(limits::SUBSZ_PAGE_ENTRIES_MAX),
    };
    let wanted = |name: &str| options.account.as_deref().is_none_or(|account| account == name);
    let mut stats = RouterStats::default();
    let mut listed: Vec<(String, u64, String, Value)> = Vec::new();
    for (name, router) in monitor.bus.account_routers().filter(|(name, _)| wanted(name)) {
        stats.add(&router.stats());
        if options.subscriptions {
            let room = limits::SUBSZ_SCAN_SUBSCRIPTIONS_MAX.saturating_sub(listed.len());
            let found = router.subscribers(room);
            let reached =
                |s: &Subscription| options.test.as_deref().is_none_or(|test| subject::matches(&s.subject, test));
            listed.extend(found.iter().filter(|s| reached(&s.0)).map(|s| sub_detail(name, &s.0)));
        }
    }
    let mut body = super::sublist_stats(&stats);
    body["server_id"] = json!(monitor.identity.server_id);
    body["now"] = json!(clock::rfc3339(SystemTime::now()));
    body["total"] = json!(listed.len());
    body["offset"] = json!(options.offset);
    body["limit"] = json!(limit);
    if options.subscriptions {
        listed.sort_by(|a, b| (&a.0, a.1, &a.2).cmp(&(&b.0, b.1, &b.2)));
        let page: Vec<Value> = listed.into_iter().skip(options.offset).take(limit).map(|entry| entry.3).collect();
        if !page.is_empty() {
            body["subscriptions_list"] = json!(page);
        }
    }
    Ok(body)
}

/// nats-server's `SubDetail`, with the account, connection id and sid to sort by; the
/// server's own subscriptions have connection id 0.
fn sub_detail(account: &str, subscription: &Subscription) -> (String, u64, String, Value) {
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
    (account.to_string(), cid, sid, detail)
}
