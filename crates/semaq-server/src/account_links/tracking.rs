//! Service latency tracking, as nats-server has it (`server/accounts.go`): a request through a
//! service import whose export has `latency` is sampled ([`sample`]); when its response passes,
//! a [`ServiceLatency`] result is published in the exporting account on the export's results
//! subject. A request that reaches no responder is reported `503`, one without a reply subject
//! `400`, one whose response does not come within the export's response threshold `504`, one
//! whose requester stops listening on its reply subject before the response `408`.
//!
//! The requests awaiting their response are held in [`Tracked`], bounded in number and in time;
//! one timer per server reports those past their deadline or their requester's interest.
//! The requester's details (`requestor`) are its account and RTT unless the import shares them
//! (`share: true`); the same [`ClientInfo`] goes to the responder in `Nats-Request-Info`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use semaq_wire::clock;
use semaq_wire::headers::{HeaderBlock, Headers};
use serde::Serialize;

use crate::client::Client;
use crate::delivery::SubscriberRef;
use crate::imports::Sampling;
use crate::router::Router;
use crate::sync::lock;

/// The header carrying the requester's details to the responder.
pub const REQUEST_INFO: &str = "Nats-Request-Info";
/// nats-server's event type of a latency result.
pub const SERVICE_LATENCY_TYPE: &str = "io.nats.server.metric.v1.service_latency";

/// The tracing headers that triggered a measurement, by canonical name, as nats-server reports
/// them (`header`); empty when the sampling percentage chose the request.
pub type TriggerHeaders = BTreeMap<String, Vec<String>>;

/// Whether to measure a request with `headers`: `Some` with the headers that decided it.
pub fn sample(sampling: Sampling, headers: Option<&[u8]>) -> Option<TriggerHeaders> {
    if let Sampling::Percent(percent) = sampling {
        if percent >= 100 || rand::random::<u32>() % 100 < u32::from(percent) {
            return Some(TriggerHeaders::new());
        }
    }
    sample_by_headers(&canonical_headers(headers?))
}

/// The header block as Go's `http.Header`: canonical names, every value of each.
fn canonical_headers(block: &[u8]) -> TriggerHeaders {
    let mut headers = TriggerHeaders::new();
    for (name, value) in Headers::new(block).iter() {
        headers.entry(canonical(name)).or_default().push(value.to_string());
    }
    headers
}

/// Go's `CanonicalMIMEHeaderKey`: the first letter and each after a hyphen upper case.
fn canonical(name: &str) -> String {
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper { c.to_ascii_uppercase() } else { c.to_ascii_lowercase() };
            upper = c == '-';
            out
        })
        .collect()
}

/// nats-server's `shouldSample` past the percentage: Uber, B3 (multi and single header) and
/// W3C `traceparent`, in that order, each sampled when its flag says so.
fn sample_by_headers(h: &TriggerHeaders) -> Option<TriggerHeaders> {
    let pick = |names: &[&str]| -> TriggerHeaders {
        names.iter().filter_map(|name| h.get(*name).map(|v| (name.to_string(), v.clone()))).collect()
    };
    if let Some(id) = h.get("Uber-Trace-Id").and_then(|v| v.first()) {
        let flags = id.split(':').nth(3).filter(|_| id.split(':').count() == 4)?;
        let sampled = (1..=2).contains(&flags.len()) && u8::from_str_radix(flags, 16).is_ok_and(|f| f & 1 == 1);
        let mut picked = pick(&["Uber-Trace-Id"]);
        picked.extend(h.iter().filter(|(k, _)| k.starts_with("Uberctx-")).map(|(k, v)| (k.clone(), v.clone())));
        return sampled.then_some(picked);
    }
    let b3 = ["X-B3-Sampled", "X-B3-Traceid", "X-B3-Parentspanid", "X-B3-Spanid"];
    match h.get("X-B3-Sampled").and_then(|v| v.first()).map(String::as_str) {
        Some("1") => return Some(pick(&b3)),
        Some("0") => return None,
        _ => {}
    }
    if h.contains_key("X-B3-Traceid") {
        return Some(pick(&b3));
    }
    if let Some(single) = h.get("B3").and_then(|v| v.first()) {
        let tokens: Vec<&str> = single.split('-').collect();
        let denied = (tokens.len() > 2 && tokens[2] == "0") || tokens == ["0"];
        return (!denied).then(|| pick(&["B3"]));
    }
    let parent = h.get("Traceparent").and_then(|v| v.first())?;
    let tokens: Vec<&str> = parent.split('-').collect();
    let sampled = tokens.len() == 4
        && tokens[3].len() == 2
        && i8::from_str_radix(tokens[3], 16).is_ok_and(|flags| flags & 1 == 1);
    sampled.then(|| pick(&["Traceparent", "Tracestate"]))
}

/// nats-server's `ClientInfo` of a connection: its account and RTT always, the rest only when
/// `detailed`.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ClientInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    start: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    #[serde(skip_serializing_if = "String::is_empty")]
    acc: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lang: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ver: Option<String>,
    /// The connection's round trip, in nanoseconds, as nats-server's `time.Duration`.
    #[serde(skip_serializing_if = "Option::is_none")]
    rtt: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jwt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    issuer_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tags: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name_tag: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    client_type: Option<&'static str>,
}

impl ClientInfo {
    /// The details of `client`, of server `server`; all of them when `detailed`.
    pub fn of(client: &Client, server: &str, detailed: bool) -> Self {
        let details = client.details();
        let account = details.and_then(|d| d.account.as_deref());
        let acc = account.unwrap_or(crate::options::GLOBAL_ACCOUNT).to_string();
        let rtt = client.rtt().map(nanos);
        if !detailed {
            return Self { acc, rtt, ..Self::default() };
        }
        let nonempty = |text: &Option<String>| text.clone().filter(|t| !t.is_empty());
        let jwt = details.and_then(|d| nonempty(&d.options.jwt));
        // A JWT user's issuer is its account (SemaQ does not keep which signing key signed it).
        let issuer_key = jwt.as_ref().map(|_| acc.clone());
        Self {
            start: Some(clock::rfc3339_nanos(unix_nanos(client.started))),
            host: Some(client.addr.ip().to_string()),
            id: Some(client.id),
            acc,
            user: details.and_then(|d| nonempty(&d.user)),
            name: details.and_then(|d| nonempty(&d.options.name)),
            lang: details.and_then(|d| nonempty(&d.options.lang)),
            ver: details.and_then(|d| nonempty(&d.options.version)),
            rtt,
            server: Some(server.to_string()),
            jwt,
            issuer_key,
            tags: details.map(|d| d.jwt_tags.1.clone()).filter(|tags| !tags.is_empty()),
            name_tag: details.map(|d| d.jwt_tags.0.clone()).filter(|name| !name.is_empty()),
            kind: Some("Client"),
            client_type: Some("nats"),
        }
    }

    /// The JSON of `Nats-Request-Info`.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

fn unix_nanos(time: SystemTime) -> i64 {
    time.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn nanos(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

/// `header` with `name` set to `value` (any earlier value dropped), as a new block.
pub fn with_header(header: Option<&[u8]>, name: &str, value: &str) -> Vec<u8> {
    let headers = Headers::new(header.unwrap_or_default());
    let mut block = HeaderBlock {
        status: headers.status().map(|(code, _)| code),
        description: headers.status().map(|(_, text)| text.to_string()).filter(|text| !text.is_empty()),
        entries: headers
            .iter()
            .filter(|(key, _)| !key.eq_ignore_ascii_case(name))
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect(),
    };
    block.insert(name, value);
    block.encode().to_vec()
}

/// nats-server's `ServiceLatency` result.
#[derive(Debug, Clone, Serialize)]
pub struct ServiceLatency {
    #[serde(rename = "type")]
    kind: &'static str,
    id: String,
    timestamp: String,
    status: u16,
    #[serde(rename = "description", skip_serializing_if = "Option::is_none")]
    error: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    requestor: Option<ClientInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    responder: Option<ClientInfo>,
    #[serde(skip_serializing_if = "TriggerHeaders::is_empty")]
    header: TriggerHeaders,
    start: String,
    service: i64,
    system: i64,
    total: i64,
}

impl ServiceLatency {
    /// A result of `status` (`description` for errors) about `request`, with nats-server's
    /// arithmetic: the requester's RTT starts it earlier and adds to the total; the responder's
    /// comes out of the service time.
    fn new(status: u16, error: Option<&'static str>, request: &Request, responder: Option<ClientInfo>) -> Self {
        let requestor_rtt = request.requestor.rtt.unwrap_or(0);
        let (service, system, total) = match &responder {
            Some(responder) => {
                let answered = Instant::now();
                let elapsed = nanos(answered.duration_since(request.started));
                let responder_rtt = responder.rtt.unwrap_or(0);
                // nats-server counts the time from the response to now as the system's only
                // when it knows the responder's RTT.
                let system = if responder_rtt > 0 { nanos(answered.elapsed()) } else { 0 };
                let total = requestor_rtt.saturating_add(elapsed).saturating_add(system);
                ((elapsed - responder_rtt).max(0), system, total)
            }
            None => (0, 0, 0),
        };
        let start = unix_nanos(request.started_at).saturating_sub(requestor_rtt);
        Self {
            kind: SERVICE_LATENCY_TYPE,
            id: event_id(),
            timestamp: clock::rfc3339_nanos(clock::unix_nanos_now()),
            status,
            error,
            requestor: Some(request.requestor.clone()),
            responder,
            header: request.header.clone(),
            start: clock::rfc3339_nanos(start),
            service,
            system,
            total,
        }
    }

    /// The response passed, from `responder`.
    pub fn answered(request: &Request, responder: Option<ClientInfo>) -> Self {
        Self::new(200, None, request, responder)
    }

    /// The request reached no responder.
    pub fn unavailable(request: &Request) -> Self {
        Self::new(503, Some("Service Unavailable"), request, None)
    }

    /// No response within the response threshold.
    pub fn timed_out(request: &Request) -> Self {
        Self::new(504, Some("Service Timeout"), request, None)
    }

    /// The requester stopped listening on the reply subject before the response.
    pub fn interest_lost(request: &Request) -> Self {
        Self::new(408, Some("Request Timeout"), request, None)
    }

    /// The request had no reply subject.
    pub fn bad_request(request: &Request) -> Self {
        Self::new(400, Some("Bad Request"), request, None)
    }

    /// The JSON body.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// A nuid-like id: 22 base-62 characters, as nats-server's event ids.
fn event_id() -> String {
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    (0..22).map(|_| DIGITS[rand::random::<u32>() as usize % DIGITS.len()] as char).collect()
}

/// A measured request awaiting its response.
#[derive(Debug, Clone)]
pub struct Request {
    /// When it entered the import.
    pub started: Instant,
    /// The same, as wall clock.
    pub started_at: SystemTime,
    /// Who asked, as much as the import shares.
    pub requestor: ClientInfo,
    /// The tracing headers that triggered the measurement.
    pub header: TriggerHeaders,
    /// Where the result goes, in the exporting account.
    pub results: String,
    /// The exporting account's router.
    pub exporter: Weak<Router<SubscriberRef>>,
    /// Where the response goes: the requester's reply subject and the importing account's
    /// router, whose interest in it the request needs (`408` once it goes); `None` when nobody
    /// listened there when the request came.
    pub requester: Option<(Box<str>, Weak<Router<SubscriberRef>>)>,
    /// When it is reported `504` unless answered (the export's response threshold).
    pub deadline: Instant,
}

impl Request {
    /// A request measured from now, waiting at most `threshold` for its response.
    pub fn new(
        requestor: ClientInfo,
        header: TriggerHeaders,
        results: &str,
        exporter: Weak<Router<SubscriberRef>>,
        threshold: Duration,
    ) -> Self {
        let started = Instant::now();
        Self {
            started,
            started_at: SystemTime::now(),
            requestor,
            header,
            results: results.to_string(),
            exporter,
            requester: None,
            deadline: started.checked_add(threshold).unwrap_or(started),
        }
    }

    /// The same, its response going to `reply` in `importer`. Only a requester listening
    /// there now can lose interest: nats-server looks for the loss when a subscription goes, so
    /// a reply subject nobody listens on is never reported `408`.
    pub fn replying_to(self, reply: Option<&str>, importer: Weak<Router<SubscriberRef>>) -> Self {
        let reply = reply.filter(|reply| listens(reply, &importer));
        Self { requester: reply.map(|reply| (reply.into(), importer)), ..self }
    }

    /// Whether the importing account still listens on the reply subject (true when unknown).
    pub fn requester_listens(&self) -> bool {
        self.requester.as_ref().is_none_or(|(reply, importer)| listens(reply, importer))
    }
}

/// Whether `importer` has a subscription matching `reply`.
fn listens(reply: &str, importer: &Weak<Router<SubscriberRef>>) -> bool {
    importer.upgrade().is_some_and(|router| !router.matches(reply).is_empty())
}

/// The measured requests awaiting their response, by `_R_.` reply subject, at most
/// `entries_max` (past it new requests go unmeasured), with their deadlines in order so the
/// timer finds those past theirs without a scan.
#[derive(Debug)]
pub struct Tracked {
    table: Mutex<Table>,
    entries_max: usize,
}

#[derive(Debug, Default)]
struct Table {
    requests: HashMap<Box<str>, Request>,
    deadlines: BTreeSet<(Instant, Box<str>)>,
}

impl Tracked {
    /// An empty table.
    pub fn new(entries_max: usize) -> Self {
        Self { table: Mutex::new(Table::default()), entries_max }
    }

    /// Whether a request may be measured now.
    pub fn has_room(&self) -> bool {
        lock(&self.table).requests.len() < self.entries_max
    }

    /// Holds `request` until its response on `key` (dropped when the table is full); returns
    /// whether its deadline is now the first, so the timer must wake earlier.
    pub fn insert(&self, key: &str, request: Request) -> bool {
        let mut table = lock(&self.table);
        if let Some(earlier) = table.requests.remove(key) {
            table.deadlines.remove(&(earlier.deadline, Box::<str>::from(key)));
        }
        if table.requests.len() >= self.entries_max {
            return false;
        }
        let first = table.deadlines.first().is_none_or(|(deadline, _)| request.deadline < *deadline);
        table.deadlines.insert((request.deadline, key.into()));
        table.requests.insert(key.into(), request);
        first
    }

    /// The first deadline of the requests held.
    pub fn next_deadline(&self) -> Option<Instant> {
        lock(&self.table).deadlines.first().map(|(deadline, _)| *deadline)
    }

    /// The request whose response is on `key`, if measured.
    pub fn take(&self, key: &str) -> Option<Request> {
        let mut table = lock(&self.table);
        let request = table.requests.remove(key)?;
        table.deadlines.remove(&(request.deadline, Box::<str>::from(key)));
        Some(request)
    }

    /// The requests past their deadline at `now`, by key, taken out.
    pub fn expired(&self, now: Instant) -> Vec<(Box<str>, Request)> {
        let mut table = lock(&self.table);
        let mut expired = Vec::new();
        while table.deadlines.first().is_some_and(|(deadline, _)| *deadline <= now) {
            let Some((_, key)) = table.deadlines.pop_first() else { break };
            if let Some(request) = table.requests.remove(&key) {
                expired.push((key, request));
            }
        }
        expired
    }

    /// The requests whose requester no longer listens on their reply subject, by key, taken
    /// out. The routers are asked outside the table's lock.
    pub fn interest_lost(&self) -> Vec<(Box<str>, Request)> {
        type Held = (Box<str>, (Box<str>, Weak<Router<SubscriberRef>>));
        let held: Vec<Held> = {
            let table = lock(&self.table);
            let requesters = table.requests.iter().filter_map(|(k, r)| Some((k.clone(), r.requester.clone()?)));
            requesters.collect()
        };
        let lost: Vec<Box<str>> =
            held.into_iter().filter(|(_, (reply, importer))| !listens(reply, importer)).map(|(key, _)| key).collect();
        lost.iter().filter_map(|key| Some((key.clone(), self.take(key)?))).collect()
    }

    /// Requests held.
    pub fn len(&self) -> usize {
        lock(&self.table).requests.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests;
