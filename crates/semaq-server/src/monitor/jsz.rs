//! `/jsz` and `/accountz` with nats-server's field names (its `JSInfo`, `AccountDetail`,
//! `StreamDetail` and `Accountz`), so prometheus-nats-exporter's JetStream collection and other
//! nats-server tooling read SemaQ. `/jsz` sums every account's JetStream and, with `accounts`
//! or `acc`, details them (sorted by name, paged); `/accountz` lists every account.
//!
//! Query parameters are read as nats-server reads them: booleans as Go's `strconv.ParseBool`,
//! integers as `strconv.Atoi`; a value that does not parse is a 400 with an error JSON naming
//! the parameter, and unknown parameters are ignored.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use semaq_wire::clock;
use serde_json::{json, Value};

use super::Monitor;
use crate::jetstream::account::reserved;
use crate::jetstream::api::stream_info;
use crate::jetstream::config::Storage;
use crate::jetstream::JetStream;
use crate::limits;
use crate::mappings::SubjectMappings;
use crate::options::SyncPolicy;

pub use crate::options::GLOBAL_ACCOUNT;

/// A query parameter that did not parse: a 400 with nats-server's wording, as an error JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadParameter(pub String);

impl IntoResponse for BadParameter {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": 400, "description": self.0 } });
        (StatusCode::BAD_REQUEST, Json(body)).into_response()
    }
}

/// Go's `strconv.ParseBool`: the empty or missing value is false.
pub fn parse_bool(params: &HashMap<String, String>, name: &str) -> Result<bool, BadParameter> {
    match params.get(name).map(String::as_str) {
        None | Some("") => Ok(false),
        Some("1" | "t" | "T" | "TRUE" | "true" | "True") => Ok(true),
        Some("0" | "f" | "F" | "FALSE" | "false" | "False") => Ok(false),
        Some(other) => Err(BadParameter(format!(
            "Error decoding boolean for '{name}': strconv.ParseBool: parsing {other:?}: invalid syntax"
        ))),
    }
}

/// Go's `strconv.Atoi`: the empty or missing value is 0.
pub fn parse_int(params: &HashMap<String, String>, name: &str) -> Result<i64, BadParameter> {
    match params.get(name).map(String::as_str) {
        None | Some("") => Ok(0),
        Some(text) => text.parse::<i64>().map_err(|_| {
            BadParameter(format!("Error decoding int for '{name}': strconv.Atoi: parsing {text:?}: invalid syntax"))
        }),
    }
}

/// What one `/jsz` request asks for (nats-server's `JSzOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JszOptions {
    /// `acc`: one account by name.
    pub account: String,
    /// `accounts`: list the accounts.
    pub accounts: bool,
    /// `streams`: list each account's streams.
    pub streams: bool,
    /// `consumers` (also `consumer`): list each stream's consumers.
    pub consumers: bool,
    /// `config`: include stream and consumer configs.
    pub config: bool,
    /// `offset`: accounts skipped.
    pub offset: i64,
    /// `limit`: accounts listed (0: nats-server's default, 1024).
    pub limit: i64,
}

impl JszOptions {
    /// Reads the query as nats-server's `HandleJsz` does, defaults applied as its `Jsz` does.
    pub fn from_query(params: &HashMap<String, String>) -> Result<Self, BadParameter> {
        // Parsed (so a bad value is refused, as nats-server does) but meaningless on one server.
        for ignored in ["direct-consumers", "leader-only", "raft", "stream-leader-only"] {
            parse_bool(params, ignored)?;
        }
        let mut options = Self {
            account: params.get("acc").cloned().unwrap_or_default(),
            accounts: parse_bool(params, "accounts")?,
            streams: parse_bool(params, "streams")?,
            consumers: parse_bool(params, "consumers")? || parse_bool(params, "consumer")?,
            config: parse_bool(params, "config")?,
            offset: parse_int(params, "offset")?.max(0),
            limit: parse_int(params, "limit")?,
        };
        if options.limit == 0 {
            options.limit = limits::JSZ_PAGE_ENTRIES_MAX as i64;
        }
        if options.consumers {
            options.streams = true;
        }
        if options.streams && options.account.is_empty() {
            options.accounts = true;
        }
        Ok(options)
    }

    /// Which of the JetStream accounts `names` (sorted) are detailed, as nats-server's `Jsz`:
    /// the named one; else, with `accounts`, the page `offset`/`limit` (all for a negative
    /// limit); else none.
    fn listed(&self, names: &[&str]) -> Range<usize> {
        if let Some(index) = names.iter().position(|name| *name == self.account) {
            return index..index + 1;
        }
        if !self.accounts {
            return 0..0;
        }
        if self.limit < 0 {
            return 0..names.len();
        }
        let start = usize::try_from(self.offset).unwrap_or(usize::MAX).min(names.len());
        let limit = usize::try_from(self.limit).unwrap_or(usize::MAX);
        start..start.saturating_add(limit).min(names.len())
    }
}

/// `GET /jsz`.
pub async fn jsz(State(monitor): State<Arc<Monitor>>, Query(params): Query<HashMap<String, String>>) -> Response {
    match JszOptions::from_query(&params) {
        Ok(options) => Json(jsz_json(&monitor, &options)).into_response(),
        Err(bad) => bad.into_response(),
    }
}

/// The `/jsz` body.
pub fn jsz_json(monitor: &Monitor, options: &JszOptions) -> Value {
    let now = clock::rfc3339(SystemTime::now());
    let Some(jetstreams) = &monitor.jetstream else {
        return json!({
            "server_id": monitor.identity.server_id,
            "now": now,
            "disabled": true,
            "config": { "max_memory": 0, "max_storage": 0 },
            "memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0,
            "accounts": 0, "ha_assets": 0, "api": { "total": 0, "errors": 0 },
            "streams": 0, "consumers": 0, "messages": 0, "bytes": 0, "total": 0,
        });
    };
    let accounts = jetstreams.all();
    let streams = jetstreams.streams();
    let (mut messages, mut bytes, mut consumers) = (0u64, 0u64, 0usize);
    for stream in &streams {
        let state = stream.state();
        messages += state.msgs;
        bytes += state.bytes;
        consumers += stream.consumer_count();
    }
    let mut body = json!({
        "server_id": monitor.identity.server_id,
        "now": now,
        "config": config_json(monitor),
    });
    merge(&mut body, stats_json(&accounts, accounts.len()));
    merge(&mut body, json!({ "streams": streams.len(), "consumers": consumers, "messages": messages, "bytes": bytes }));
    let names: Vec<&str> = accounts.iter().map(|jetstream| jetstream.account().name.as_str()).collect();
    let listed = &accounts[options.listed(&names)];
    if !listed.is_empty() {
        let details: Vec<Value> = listed.iter().map(|jetstream| account_detail(monitor, jetstream, options)).collect();
        body["account_details"] = json!(details);
    }
    body["total"] = json!(accounts.len());
    body
}

/// nats-server's `JetStreamConfig`: the server's limits, store directory and sync policy.
pub fn config_json(monitor: &Monitor) -> Value {
    let options = &monitor.options;
    let limit = |value: Option<u64>| value.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX));
    let mut config = json!({
        "max_memory": limit(options.jetstream_memory_bytes_max),
        "max_storage": limit(options.jetstream_file_bytes_max),
        "store_dir": options.store_dir.join("jetstream").display().to_string(),
    });
    match options.jetstream_sync.as_deref().map_or(Some(SyncPolicy::Always), SyncPolicy::parse) {
        Some(SyncPolicy::Always) => config["sync_always"] = json!(true),
        Some(SyncPolicy::Interval(every)) => {
            config["sync_interval"] = json!(u64::try_from(every.as_nanos()).unwrap_or(u64::MAX));
        }
        Some(SyncPolicy::Never) | None => {}
    }
    if let Some(domain) = &options.jetstream_domain {
        config["domain"] = json!(domain);
    }
    config
}

/// nats-server's `JetStreamStats` of `jetstreams` together, with `accounts` as given (the
/// server counts them, an account's own detail says 0).
pub fn stats_json(jetstreams: &[Arc<JetStream>], accounts: usize) -> Value {
    let (mut memory, mut storage, mut total, mut errors) = (0u64, 0u64, 0u64, 0u64);
    let (mut reserved_memory, mut reserved_storage) = (0i64, 0i64);
    for jetstream in jetstreams {
        let (_, account_memory, account_storage) = jetstream.usage();
        memory += account_memory;
        storage += account_storage;
        // As nats-server's `memReserved`/`storeReserved`: the streams' `max_bytes`.
        let streams = jetstream.streams();
        reserved_memory = reserved_memory.saturating_add(reserved(&streams, Storage::Memory));
        reserved_storage = reserved_storage.saturating_add(reserved(&streams, Storage::File));
        total += jetstream.api_requests.load(Ordering::Relaxed);
        errors += jetstream.api_errors.load(Ordering::Relaxed);
    }
    json!({
        "memory": memory,
        "storage": storage,
        "reserved_memory": reserved_memory,
        "reserved_storage": reserved_storage,
        "accounts": accounts,
        "ha_assets": 0,
        "api": { "total": total, "errors": errors },
    })
}

/// nats-server's `AccountDetail` of one account's JetStream.
pub(crate) fn account_detail(monitor: &Monitor, jetstream: &Arc<JetStream>, options: &JszOptions) -> Value {
    let name = &jetstream.account().name;
    let mut detail = json!({ "name": name, "id": name });
    merge(&mut detail, stats_json(std::slice::from_ref(jetstream), 0));
    if options.streams {
        let streams: Vec<Value> =
            jetstream.streams().iter().map(|stream| stream_detail(monitor, stream, options)).collect();
        if !streams.is_empty() {
            detail["stream_detail"] = json!(streams);
        }
    }
    detail
}

/// nats-server's `StreamDetail`: name, created, cluster, config (with `config`), state and
/// consumers (with `consumers`; their configs with `config` too).
fn stream_detail(monitor: &Monitor, stream: &crate::jetstream::stream::Stream, options: &JszOptions) -> Value {
    let info = stream_info(stream);
    let mut detail = json!({
        "name": stream.name,
        "created": info["created"],
        "cluster": { "leader": monitor.identity.server_id },
        "state": info["state"],
    });
    if options.config {
        detail["config"] = info["config"].clone();
    }
    if options.consumers {
        let consumers: Vec<Value> = stream
            .consumers()
            .iter()
            .map(|consumer| {
                let mut info = consumer.info();
                if !options.config {
                    if let Some(fields) = info.as_object_mut() {
                        fields.remove("config");
                    }
                }
                info
            })
            .collect();
        if !consumers.is_empty() {
            detail["consumer_detail"] = json!(consumers);
        }
    }
    detail
}

/// Copies the fields of `extra` (an object) into `body` (an object).
fn merge(body: &mut Value, extra: Value) {
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
}

/// `GET /accountz`: the account list, or with `acc=$G` its detail (nats-server's `Accountz`).
pub async fn accountz(State(monitor): State<Arc<Monitor>>, Query(params): Query<HashMap<String, String>>) -> Response {
    let account = params.get("acc").map(String::as_str).filter(|name| !name.is_empty());
    match accountz_json(&monitor, account) {
        Ok(body) => Json(body).into_response(),
        Err(error) => BadParameter(error).into_response(),
    }
}

/// nats-server's `Accountz`: every account, or the detail of `account`; `Err` names an
/// account that does not exist.
pub fn accountz_json(monitor: &Monitor, account: Option<&str>) -> Result<Value, String> {
    let now = clock::rfc3339(SystemTime::now());
    let mut body = json!({ "server_id": monitor.identity.server_id, "now": now });
    if let Some(system) = monitor.options.system_account() {
        body["system_account"] = json!(system);
    }
    match account {
        None => {
            let mut accounts: Vec<&str> = monitor.bus.account_routers().map(|(name, _)| name).collect();
            accounts.sort_unstable();
            body["accounts"] = json!(accounts);
        }
        Some(name) => {
            let detail = account_detail_json(monitor, name).ok_or_else(|| format!("Account {name} does not exist"))?;
            body["account_detail"] = detail;
        }
    }
    Ok(body)
}

/// nats-server's `AccountInfo` of `name`, or `None` when there is no such account.
pub fn account_detail_json(monitor: &Monitor, name: &str) -> Option<Value> {
    let router = monitor.bus.account_router(name)?;
    let stats = router.stats();
    let connections = monitor.bus.clients.open().iter().filter(|c| account_of(c) == name).count();
    let mut detail = json!({
        "account_name": name,
        "update_time": clock::rfc3339(monitor.identity.started_at),
        "expired": false,
        "complete": true,
        "jetstream_enabled": monitor.jetstream.as_ref().is_some_and(|js| js.get(name).is_some()),
        "leafnode_connections": 0,
        "client_connections": connections,
        "subscriptions": stats.num_subscriptions,
        "sublist_stats": super::sublist_stats(&stats),
    });
    if monitor.options.system_account() == Some(name) {
        detail["is_system"] = json!(true);
    }
    if let Some(mappings) = monitor.mappings.get(name) {
        detail["mappings"] = mappings_json(mappings);
    }
    Some(detail)
}

/// nats-server's `ExtMap`: source → its destinations (`subject`, running `weight`, `cluster`).
fn mappings_json(mappings: &SubjectMappings) -> Value {
    let entries = mappings.describe().into_iter().map(|(source, destinations)| {
        let shown = destinations.into_iter().map(|d| {
            let mut entry = json!({ "subject": d.subject, "weight": d.weight });
            if !d.cluster.is_empty() {
                entry["cluster"] = json!(d.cluster);
            }
            entry
        });
        (source.to_string(), Value::Array(shown.collect()))
    });
    Value::Object(entries.collect())
}

/// The account a connection uses (`$G` until it has authenticated).
fn account_of(client: &crate::client::Client) -> &str {
    client.details().and_then(|details| details.account.as_deref()).unwrap_or(GLOBAL_ACCOUNT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn booleans_and_integers_parse_as_go_does() {
        assert_eq!(parse_bool(&query(&[("streams", "T")]), "streams"), Ok(true));
        assert_eq!(parse_bool(&query(&[("streams", "0")]), "streams"), Ok(false));
        assert_eq!(parse_bool(&query(&[]), "streams"), Ok(false));
        let bad = parse_bool(&query(&[("streams", "maybe")]), "streams").unwrap_err();
        assert_eq!(bad.0, "Error decoding boolean for 'streams': strconv.ParseBool: parsing \"maybe\": invalid syntax");
        assert_eq!(parse_int(&query(&[("limit", "-3")]), "limit"), Ok(-3));
        assert!(parse_int(&query(&[("limit", "x")]), "limit").unwrap_err().0.contains("'limit'"));
    }

    #[test]
    fn defaults_follow_nats_server() {
        let options = JszOptions::from_query(&query(&[("consumers", "true")])).unwrap();
        assert!(options.streams && options.accounts, "consumers implies streams implies accounts");
        assert_eq!(options.limit, limits::JSZ_PAGE_ENTRIES_MAX as i64);
        let names = ["$G", "A", "B"];
        assert_eq!(options.listed(&names), 0..3);
        let plain = JszOptions::from_query(&query(&[])).unwrap();
        assert_eq!(plain.listed(&names), 0..0, "no account details unless asked");
        let paged = JszOptions::from_query(&query(&[("accounts", "1"), ("offset", "1"), ("limit", "1")])).unwrap();
        assert_eq!(paged.listed(&names), 1..2);
        let past = JszOptions::from_query(&query(&[("accounts", "1"), ("offset", "5")])).unwrap();
        assert_eq!(past.listed(&names), 3..3, "an offset past the accounts lists none");
        let all = JszOptions::from_query(&query(&[("accounts", "1"), ("offset", "1"), ("limit", "-1")])).unwrap();
        assert_eq!(all.listed(&names), 0..3, "a negative limit lists all, offset or not");
        let named = JszOptions::from_query(&query(&[("acc", "B"), ("streams", "1")])).unwrap();
        assert_eq!(named.listed(&names), 2..3);
        assert!(!named.accounts);
        let unknown = JszOptions::from_query(&query(&[("acc", "nope"), ("streams", "1")])).unwrap();
        assert_eq!(unknown.listed(&names), 0..0, "a named account without JetStream lists none");
        let unknown_in_all = JszOptions::from_query(&query(&[("acc", "nope"), ("accounts", "1")])).unwrap();
        assert_eq!(unknown_in_all.listed(&names), 0..3, "...unless all are asked for too, as nats-server");
        assert!(JszOptions::from_query(&query(&[("raft", "yes")])).is_err(), "ignored flags still parse");
        assert!(JszOptions::from_query(&query(&[("unknown", "whatever")])).is_ok(), "unknown parameters are ignored");
    }
}
