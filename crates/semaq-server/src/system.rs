//! The system account's `$SYS` services, which `nats server ping`, `nats server info`, `nats
//! account info` and friends ask: `$SYS.REQ.SERVER.PING` (statsz),
//! `$SYS.REQ.SERVER.PING.<ENDPOINT>` and `$SYS.REQ.SERVER.<server id>.<ENDPOINT>` for `VARZ`,
//! `CONNZ`, `SUBSZ`, `JSZ`, `HEALTHZ`, `ACCOUNTZ`, `LEAFZ`, `ROUTEZ`, `GATEWAYZ`, `STATSZ`,
//! `IDZ` and the server's insides (`system/runtime.rs`: `PROFILEZ`, `EXPVARZ`, `IPQUEUESZ`, `RAFTZ`);
//! the account-scoped `$SYS.REQ.ACCOUNT.<account>.<ENDPOINT>` ([`account`]); the subscriber
//! counts `$SYS.REQ.ACCOUNT.NSUBS` and `$SYS.DEBUG.SUBSCRIBERS` (`system/subscribers.rs`). Answers carry
//! nats-server's `ServerAPIResponse` envelope `{server, data}` (or `{server, error}`), a request
//! body is read as nats-server's endpoint options with its event filter (a server it does not
//! name stays silent); `STATSZ` has its `{server, statsz}`, `IDZ` the server's info alone. The
//! same statsz goes out as the `$SYS.SERVER.<id>.STATSZ` heartbeat, on nats-server's schedule.
//!
//! All of it lives in the system account ([`crate::options::Options::system_account`]): the
//! one `system_account` names, an account named `$SYS` or the implicit `$SYS`, as in nats-server.
//! Every other account imports `$SYS.REQ.ACCOUNT.PING.CONNZ|STATZ` and
//! `$SYS.REQ.SERVER.PING.CONNZ`, answered for that account alone, and every account
//! `$SYS.REQ.USER.INFO`, answered with who asked, as nats-server's system imports do. Connection events are [`crate::sys_events`].

pub mod account;
mod encoding;
mod options;
mod runtime;
mod subscribers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::{Query, State};
use semaq_wire::clock;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::account_links::responses::Responses;
use crate::bus::Bus;
use crate::delivery::{self, FlushSet, InternalSink, Message, SubscriberRef};
use crate::limits;
use crate::monitor::subsz::SubszOptions;
use crate::monitor::{self, Monitor};
use crate::router::Router;
use crate::sys_events::{account_of, Events, Server};
use encoding::Encoding;
use options::{Filter, Outcome};

/// The subjects every other account imports from the system account, as nats-server's
/// `registerSystemImports` adds them; each is answered as `$SYS.REQ.ACCOUNT.<account>.<last token>`.
const SYSTEM_IMPORTS: [&str; 3] =
    ["$SYS.REQ.ACCOUNT.PING.CONNZ", "$SYS.REQ.SERVER.PING.CONNZ", "$SYS.REQ.ACCOUNT.PING.STATZ"];

/// Where a client asks who it is; every account, the system account too, imports it, answered
/// as `$SYS.REQ.USER.<account>.INFO`.
const USER_INFO: &str = "$SYS.REQ.USER.INFO";

/// A `$SYS` request: its subject as the system account sees it, where the answer goes, the
/// account the reply subject lives in, and the connection that asked.
#[derive(Debug)]
struct Request {
    subject: String,
    reply: String,
    payload: bytes::Bytes,
    /// How the asker would have the answer's data encoded.
    encoding: Encoding,
    answer_in: Arc<Router<SubscriberRef>>,
    publisher: Option<u64>,
    /// The importing account, for a request that came through a service import and is answered
    /// for its importer.
    importer: Option<String>,
}

/// Queues the `$SYS` requests heard in one account (bounded: past the bound, no answer); an
/// imported subject is mapped to the importing account's own.
#[derive(Debug)]
struct Requests {
    queue: mpsc::Sender<Request>,
    router: Arc<Router<SubscriberRef>>,
    imported_by: Option<Arc<str>>,
}

impl InternalSink for Requests {
    fn receive(&self, message: &Message<'_>) -> bool {
        let Some(reply) = message.reply else { return true };
        let subject = match &self.imported_by {
            Some(account) if message.subject == USER_INFO => format!("$SYS.REQ.USER.{account}.INFO"),
            Some(account) => {
                let endpoint = message.subject.rsplit('.').next().unwrap_or_default();
                format!("$SYS.REQ.ACCOUNT.{account}.{endpoint}")
            }
            None => message.subject.to_string(),
        };
        let request = Request {
            subject,
            reply: reply.to_string(),
            payload: bytes::Bytes::copy_from_slice(message.payload),
            encoding: Encoding::accepted(message.headers),
            answer_in: self.router.clone(),
            publisher: message.publisher,
            importer: None,
        };
        self.queue.try_send(request).is_ok()
    }
}

/// Starts answering `$SYS` requests in the system account, when there is one, and the system
/// imports of the other accounts; `responses` maps the replies of requests that came through
/// service imports to their importers. Returns what publishes its client events.
pub fn start(monitor: &Arc<Monitor>, responses: Option<Arc<Responses>>) -> Option<Arc<Events>> {
    let account = monitor.options.system_account()?;
    let Some(router) = monitor.bus.account_router(account).cloned() else {
        tracing::warn!(%account, "system account is not a trusted account; no $SYS services");
        return None;
    };
    let (queue, requests) = mpsc::channel(limits::SYSTEM_REQUESTS_QUEUED_MAX);
    let id = &monitor.identity.server_id;
    let own = Arc::new(Requests { queue: queue.clone(), router: router.clone(), imported_by: None });
    let filters = [
        "$SYS.REQ.SERVER.PING".to_string(),
        "$SYS.REQ.SERVER.PING.*".into(),
        format!("$SYS.REQ.SERVER.{id}.*"),
        "$SYS.REQ.ACCOUNT.*.*".into(),
        "$SYS.REQ.ACCOUNT.NSUBS".into(),
        subscribers::DEBUG_SUBSCRIBERS.into(),
    ];
    for filter in filters {
        subscribe(&router, &filter, own.clone());
    }
    for (name, other) in monitor.bus.account_routers() {
        let imports =
            Arc::new(Requests { queue: queue.clone(), router: other.clone(), imported_by: Some(name.into()) });
        subscribe(other, USER_INFO, imports.clone());
        if name != account {
            for filter in SYSTEM_IMPORTS {
                subscribe(other, filter, imports.clone());
            }
        }
    }
    let sequence = Arc::new(AtomicU64::new(0));
    tokio::spawn(serve(monitor.clone(), requests, responses, sequence.clone()));
    tokio::spawn(heartbeat(Arc::downgrade(monitor), router.clone(), sequence));
    let events = Arc::new(Events::new(server(monitor), router, monitor.bus.clone()));
    tokio::spawn(connections_heartbeat(Arc::downgrade(&events)));
    Some(events)
}

/// The accounts' `SERVER.CONNS` heartbeats as they fall due, until the server (which holds the
/// events) is gone.
async fn connections_heartbeat(events: std::sync::Weak<Events>) {
    loop {
        tokio::time::sleep(limits::ACCOUNT_CONNS_HEARTBEAT_TICK).await;
        let Some(events) = events.upgrade() else { return };
        events.connections_heartbeat();
    }
}

fn subscribe(router: &Router<SubscriberRef>, filter: &str, sink: Arc<Requests>) {
    if let Err(error) = Bus::subscribe_internal_in(router, filter, None, sink) {
        tracing::warn!(%error, %filter, "no $SYS subscription");
    }
}

async fn serve(
    monitor: Arc<Monitor>,
    mut requests: mpsc::Receiver<Request>,
    responses: Option<Arc<Responses>>,
    sequence: Arc<AtomicU64>,
) {
    while let Some(mut request) = requests.recv().await {
        if request.publisher.is_none() && request.subject == subscribers::DEBUG_SUBSCRIBERS {
            request.importer = responses.as_deref().and_then(|responses| importer(&monitor.bus, responses, &request));
        }
        let info = || server(&monitor).info(sequence.fetch_add(1, Ordering::Relaxed) + 1);
        let Some(answer) = answer(&monitor, &request, requests.len(), info).await else { continue };
        let (headers, body) = answer.encoded(request.encoding);
        let reply = Message {
            subject: &request.reply,
            reply: None,
            headers: headers.as_deref(),
            payload: &body,
            publisher: None,
        };
        let router = &request.answer_in;
        let mut flush = FlushSet::default();
        delivery::fan_out(router, &router.matches_uncached(&request.reply), &reply, None, &mut flush);
        flush.flush();
    }
}

/// The account whose service import brought `request` here, from its reply's mapping.
fn importer(bus: &Bus, responses: &Responses, request: &Request) -> Option<String> {
    let router = responses.requester(&request.reply)?.upgrade()?;
    let mut accounts = bus.account_routers();
    accounts.find(|(_, account)| Arc::ptr_eq(account, &router)).map(|(name, _)| name.to_string())
}

/// Publishes nats-server's `ServerStatsMsg` on `$SYS.SERVER.<id>.STATSZ` in the system
/// account on nats-server's schedule: soon after start, then at doubling intervals up to
/// [`limits::STATSZ_HEARTBEAT_INTERVAL`]; stops once the server is gone.
async fn heartbeat(monitor: std::sync::Weak<Monitor>, router: Arc<Router<SubscriberRef>>, sequence: Arc<AtomicU64>) {
    let mut wait = limits::STATSZ_HEARTBEAT_FIRST;
    loop {
        tokio::time::sleep(wait).await;
        wait = wait.saturating_mul(2).min(limits::STATSZ_HEARTBEAT_INTERVAL);
        let Some(monitor) = monitor.upgrade() else { return };
        let subject = format!("$SYS.SERVER.{}.STATSZ", monitor.identity.server_id);
        let info = server(&monitor).info(sequence.fetch_add(1, Ordering::Relaxed) + 1);
        let body = json!({ "server": info, "statsz": statsz(&monitor) }).to_string();
        let message =
            Message { subject: &subject, reply: None, headers: None, payload: body.as_bytes(), publisher: None };
        let mut flush = FlushSet::default();
        delivery::fan_out(&router, &router.matches(&subject), &message, None, &mut flush);
        flush.flush();
    }
}

/// The answer to `request`, with `pending` more waiting, or `None` where nats-server gives none
/// (an endpoint it does not serve, a filter naming another server, an account with nothing to
/// report).
async fn answer(
    monitor: &Arc<Monitor>,
    request: &Request,
    pending: usize,
    server: impl Fn() -> Value,
) -> Option<Answer> {
    let tokens: Vec<&str> = request.subject.split('.').collect();
    let (scope, endpoint) = match tokens.as_slice() {
        ["$SYS", "REQ", "SERVER", "PING"] => (Scope::Server, "STATSZ"),
        ["$SYS", "REQ", "SERVER", _, endpoint] => (Scope::Server, *endpoint),
        ["$SYS", "REQ", "ACCOUNT", "PING", "STATZ"] => (Scope::AllAccounts, "STATZ"),
        ["$SYS", "REQ", "USER", _, "INFO"] => {
            let data = account::user_info(monitor, request.publisher?)?;
            return Some(Answer::plain(envelope(server(), Outcome::Data(data))));
        }
        ["$SYS", "REQ", "ACCOUNT", account, endpoint] => (Scope::Account(account), *endpoint),
        ["$SYS", "REQ", "ACCOUNT", "NSUBS"] => return subscribers::nsubs(monitor, &request.payload).map(Answer::plain),
        ["$SYS", "DEBUG", "SUBSCRIBERS"] => {
            let asker = request.publisher.and_then(|id| monitor.bus.clients.get(id));
            let account = asker.as_deref().map(account_of).or(request.importer.as_deref())?;
            return Some(Answer::plain(subscribers::debug_subscribers(monitor, account, &request.payload)));
        }
        _ => return None,
    };
    if endpoint == "CONNS" {
        if let Scope::Account(name) = scope {
            return account::conns(monitor, name, server()).map(Answer::plain);
        }
    }
    let options = match options::read(&request.payload) {
        Ok(options) => options,
        Err(error) => return Some(Answer::endpoint(server(), Outcome::Error(400, error))),
    };
    if Filter::from(&options).excludes(monitor) {
        return None;
    }
    let outcome = match scope {
        Scope::Server => match endpoint {
            "IDZ" => return Some(Answer::plain(server())),
            "STATSZ" => return Some(Answer::plain(json!({ "server": server(), "statsz": statsz(monitor) }))),
            "IPQUEUESZ" => Outcome::Data(runtime::ipqueuesz(&options, pending)),
            _ => server_endpoint(monitor, endpoint, &options).await?,
        },
        Scope::AllAccounts => account::statz_all(monitor, &options)?,
        Scope::Account(name) => account::endpoint(monitor, name, endpoint, &options).await?,
    };
    Some(Answer::endpoint(server(), outcome))
}

/// An answer's JSON, and whether the asker's `Accept-Encoding` applies to it: it does to the
/// data of the endpoints nats-server serves through its `zReq` (every `{server, data}` answer
/// but `USER.INFO`), never to errors, statsz, `IDZ`, `CONNS` or the subscriber counts.
#[derive(Debug)]
struct Answer {
    body: Value,
    compressible: bool,
}

impl Answer {
    fn plain(body: Value) -> Self {
        Self { body, compressible: false }
    }

    fn endpoint(server: Value, outcome: Outcome) -> Self {
        let compressible = matches!(outcome, Outcome::Data(_));
        Self { body: envelope(server, outcome), compressible }
    }

    /// The header block (if any) and payload of the answer, as `encoding` asks.
    fn encoded(&self, encoding: Encoding) -> (Option<bytes::Bytes>, Vec<u8>) {
        let body = self.body.to_string().into_bytes();
        if self.compressible {
            encoding.encode(body)
        } else {
            (None, body)
        }
    }
}

/// Whom a request is about.
#[derive(Debug, Clone, Copy)]
enum Scope<'a> {
    /// The server as a whole.
    Server,
    /// Every account with connections (`$SYS.REQ.ACCOUNT.PING.STATZ`).
    AllAccounts,
    /// One account.
    Account(&'a str),
}

/// nats-server's `ServerAPIResponse`: the data, or the error with its HTTP-like code.
fn envelope(server: Value, outcome: Outcome) -> Value {
    match outcome {
        Outcome::Data(data) => json!({ "server": server, "data": data }),
        Outcome::Error(code, description) => {
            json!({ "server": server, "error": { "code": code, "description": description } })
        }
    }
}

/// The server endpoint's JSON, or `None` for one SemaQ does not serve (no answer, as nats-server
/// gives none to an unknown request).
async fn server_endpoint(monitor: &Arc<Monitor>, endpoint: &str, options: &Value) -> Option<Outcome> {
    let state = || State(monitor.clone());
    Some(Outcome::Data(match endpoint {
        "VARZ" => monitor::varz(state()).await.0,
        "CONNZ" => monitor::connz(state(), Query(options::connz(options, None))).await.0,
        "SUBSZ" => {
            return Some(match monitor::subsz::subsz_json(monitor, &SubszOptions::from_body(options)) {
                Ok(data) => Outcome::Data(data),
                Err(error) => Outcome::Error(500, error),
            })
        }
        "HEALTHZ" => monitor::healthz().await.0,
        "JSZ" => monitor::jsz::jsz_json(monitor, &options::jsz(options)),
        "LEAFZ" => account::leafz(monitor),
        "ROUTEZ" => account::routez(monitor),
        "GATEWAYZ" => account::gatewayz(monitor),
        "PROFILEZ" => runtime::profilez(options),
        "EXPVARZ" => runtime::expvarz(),
        "RAFTZ" => runtime::raftz(),
        "ACCOUNTZ" => {
            let name = options.get("account").and_then(Value::as_str).filter(|name| !name.is_empty());
            return Some(match monitor::jsz::accountz_json(monitor, name) {
                Ok(data) => Outcome::Data(data),
                Err(error) => Outcome::Error(500, error),
            });
        }
        _ => return None,
    }))
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
