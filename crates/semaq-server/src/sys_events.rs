//! The system account's client events: `$SYS.ACCOUNT.<account>.CONNECT` and `.DISCONNECT`,
//! nats-server's client connect and disconnect advisories, and, for an account other than
//! `$G`, its connection count `$SYS.ACCOUNT.<account>.SERVER.CONNS` (and the older
//! `$SYS.SERVER.ACCOUNT.<account>.CONNS`, also as a heartbeat while it has connections);
//! published by each connection through the context every connection shares, when the server
//! has a system account.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use semaq_wire::clock;
use serde_json::{json, Value};

use crate::bus::Bus;
use crate::client::Client;
use crate::delivery::{self, FlushSet, Message, SubscriberRef};
use crate::identity::NATS_COMPATIBLE_VERSION;
use crate::limits::ACCOUNT_CONNS_HEARTBEAT_INTERVAL;
use crate::options::GLOBAL_ACCOUNT;
use crate::outbound::CloseReason;
use crate::router::Router;
use crate::sync::lock;

/// nats-server's event type of `SERVER.CONNS` events and `CONNS` answers.
pub const ACCOUNT_CONNECTIONS_TYPE: &str = "io.nats.server.advisory.v1.account_connections";

/// nats-server's `AccountNumConns` event of an account's `stat`.
pub fn connections_event(mut stat: Value, server: Value) -> Value {
    stat["type"] = json!(ACCOUNT_CONNECTIONS_TYPE);
    stat["id"] = json!(crate::identity::random_nonce());
    stat["timestamp"] = json!(clock::rfc3339(SystemTime::now()));
    stat["server"] = server;
    stat
}

/// nats-server's `AccountStat` of `account` (which exists): its connections here, its
/// subscriptions, what its connections (closed ones too) sent and received, its slow
/// consumers; `None` for an account without connections unless `unused`.
pub fn stat(bus: &Bus, account: &str, unused: bool) -> Option<Value> {
    let clients: Vec<Arc<Client>> =
        bus.clients.open().into_iter().filter(|client| account_of(client) == account).collect();
    if clients.is_empty() && !unused {
        return None;
    }
    let closed = bus.closed_totals(account);
    let (mut received, mut sent) = closed.map_or(((0, 0), (0, 0)), |c| (c.received.snapshot(), c.sent.snapshot()));
    for client in &clients {
        let (in_msgs, in_bytes) = client.inbound.snapshot();
        let (out_msgs, out_bytes) = client.outbound.traffic.snapshot();
        received = (received.0 + in_msgs, received.1 + in_bytes);
        sent = (sent.0 + out_msgs, sent.1 + out_bytes);
    }
    let slow_consumers = closed.map_or(0, |c| c.slow_consumers.load(Ordering::Relaxed));
    let subscriptions = bus.account_router(account).map_or(0, |router| router.count());
    Some(json!({
        "acc": account,
        "name": account,
        "conns": clients.len(),
        "leafnodes": 0,
        "total_conns": clients.len(),
        "num_subscriptions": subscriptions,
        "sent": { "msgs": sent.0, "bytes": sent.1 },
        "received": { "msgs": received.0, "bytes": received.1 },
        "slow_consumers": slow_consumers,
    }))
}

/// The account a connection uses (`$G` until it has authenticated).
pub fn account_of(client: &Client) -> &str {
    client.details().and_then(|details| details.account.as_deref()).unwrap_or(GLOBAL_ACCOUNT)
}

/// Where an account's connection counts go: nats-server's subject and its older one.
fn connections_subjects(account: &str) -> [String; 2] {
    [format!("$SYS.ACCOUNT.{account}.SERVER.CONNS"), format!("$SYS.SERVER.ACCOUNT.{account}.CONNS")]
}

/// Who the server is, as `$SYS` messages name it.
#[derive(Debug, Clone)]
pub struct Server {
    /// Server id.
    pub id: String,
    /// Server name.
    pub name: String,
    /// Client listener host.
    pub host: String,
    /// Whether JetStream is on.
    pub jetstream: bool,
}

impl Server {
    /// nats-server's `ServerInfo` of `$SYS` messages, the `sequence`-th this server sends.
    pub fn info(&self, sequence: u64) -> Value {
        json!({
            "name": self.name,
            "host": self.host,
            "id": self.id,
            "ver": NATS_COMPATIBLE_VERSION,
            "jetstream": self.jetstream,
            "seq": sequence,
            "time": clock::rfc3339(SystemTime::now()),
        })
    }
}

/// Publishes `$SYS.ACCOUNT.<account>.CONNECT` and `.DISCONNECT` in the system account, with
/// nats-server's `ConnectEventMsg` and `DisconnectEventMsg`.
#[derive(Debug)]
pub struct Events {
    server: Server,
    router: Arc<Router<SubscriberRef>>,
    bus: Arc<Bus>,
    sequence: AtomicU64,
    /// When each account's next `SERVER.CONNS` heartbeat is due: an interval after its last
    /// count, as nats-server restarts an account's timer with each (one entry per account).
    connections_due: Mutex<HashMap<String, Instant>>,
}

impl Events {
    /// Events of `server` about the connections of `bus`, published in the system account of `router`.
    pub fn new(server: Server, router: Arc<Router<SubscriberRef>>, bus: Arc<Bus>) -> Self {
        Self { server, router, bus, sequence: AtomicU64::new(0), connections_due: Mutex::default() }
    }

    /// `client` has authenticated.
    pub fn connected(&self, client: &Client) {
        self.publish(client, "CONNECT", "io.nats.server.advisory.v1.client_connect", None);
        self.connections_changed(client);
    }

    /// `client`, which had authenticated, has closed for `reason`.
    pub fn disconnected(&self, client: &Client, reason: CloseReason) {
        self.publish(client, "DISCONNECT", "io.nats.server.advisory.v1.client_disconnect", Some(reason));
        self.connections_changed(client);
    }

    /// The periodic `SERVER.CONNS` of each account (but `$G`) that still has connections an
    /// interval after its last count, which nats-server sends so that counts lost on the way heal.
    pub fn connections_heartbeat(&self) {
        let now = Instant::now();
        let due: Vec<String> = {
            let mut accounts = lock(&self.connections_due);
            let due: Vec<String> =
                accounts.iter().filter(|(_, at)| **at <= now).map(|(name, _)| name.clone()).collect();
            for account in &due {
                accounts.remove(account);
            }
            due
        };
        for account in due {
            // The timer stops when the account has no connections left, as nats-server's does.
            if let Some(stat) = stat(&self.bus, &account, false) {
                self.rearm(&account);
                if self.hears_connections(&account) {
                    self.send_connections(&account, stat);
                }
            }
        }
    }

    /// nats-server's `AccountNumConns` on both its subjects, when the account of `client`
    /// (not `$G`, as nats-server leaves it out) gained or lost a connection.
    fn connections_changed(&self, client: &Client) {
        let Some(account) = client.details().and_then(|details| details.account.as_deref()) else { return };
        self.rearm(account);
        // `stat` walks every open connection: on each connect that would make n connects cost
        // n², for events nobody usually listens to.
        if !self.hears_connections(account) {
            return;
        }
        if let Some(stat) = stat(&self.bus, account, true) {
            self.send_connections(account, stat);
        }
    }

    /// Restarts `account`'s heartbeat timer.
    fn rearm(&self, account: &str) {
        if account == GLOBAL_ACCOUNT {
            return;
        }
        let due = Instant::now() + ACCOUNT_CONNS_HEARTBEAT_INTERVAL;
        let mut accounts = lock(&self.connections_due);
        accounts.insert(account.to_string(), due);
    }

    /// Whether anyone in the system account listens to `account`'s connection counts.
    fn hears_connections(&self, account: &str) -> bool {
        connections_subjects(account).iter().any(|subject| !self.router.matches_uncached(subject).is_empty())
    }

    fn send_connections(&self, account: &str, stat: Value) {
        let event = connections_event(stat, self.next_server_info()).to_string();
        for subject in connections_subjects(account) {
            self.send(&subject, &event);
        }
    }

    fn next_server_info(&self) -> Value {
        self.server.info(self.sequence.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn send(&self, subject: &str, payload: &str) {
        let message = Message { subject, reply: None, headers: None, payload: payload.as_bytes(), publisher: None };
        let mut flush = FlushSet::default();
        delivery::fan_out(&self.router, &self.router.matches(subject), &message, None, &mut flush);
        flush.flush();
    }

    fn publish(&self, client: &Client, event: &str, kind: &str, closed: Option<CloseReason>) {
        let Some(details) = client.details() else { return };
        let account = details.account.as_deref().unwrap_or(crate::options::GLOBAL_ACCOUNT);
        let now = SystemTime::now();
        let mut info = json!({
            "start": clock::rfc3339(client.started),
            "host": client.addr.ip().to_string(),
            "id": client.id,
            "acc": account,
            "user": details.user,
            "name": details.options.name,
            "lang": details.options.lang,
            "ver": details.options.version,
            "server": self.server.name,
            "kind": "Client",
            "client_type": "nats",
        });
        let mut body = json!({
            "type": kind,
            "id": crate::identity::random_nonce(),
            "timestamp": clock::rfc3339(now),
            "server": self.next_server_info(),
        });
        if let Some(reason) = closed {
            info["stop"] = json!(clock::rfc3339(now));
            let (in_msgs, in_bytes) = client.inbound.snapshot();
            let (out_msgs, out_bytes) = client.outbound.traffic.snapshot();
            body["sent"] = json!({ "msgs": out_msgs, "bytes": out_bytes });
            body["received"] = json!({ "msgs": in_msgs, "bytes": in_bytes });
            body["reason"] = json!(reason.as_str());
        }
        body["client"] = info;
        self.send(&format!("$SYS.ACCOUNT.{account}.{event}"), &body.to_string());
    }
}
