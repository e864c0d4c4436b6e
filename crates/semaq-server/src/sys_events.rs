//! The system account's client events: `$SYS.ACCOUNT.<account>.CONNECT` and `.DISCONNECT`,
//! nats-server's client connect and disconnect advisories, published by each connection
//! through the context every connection shares, when the server has a system account.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use semaq_wire::clock;
use serde_json::{json, Value};

use crate::client::Client;
use crate::delivery::{self, FlushSet, Message, SubscriberRef};
use crate::identity::NATS_COMPATIBLE_VERSION;
use crate::outbound::CloseReason;
use crate::router::Router;

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
    sequence: AtomicU64,
}

impl Events {
    /// Events of `server`, published in the system account of `router`.
    pub fn new(server: Server, router: Arc<Router<SubscriberRef>>) -> Self {
        Self { server, router, sequence: AtomicU64::new(0) }
    }

    /// `client` has authenticated.
    pub fn connected(&self, client: &Client) {
        self.publish(client, "CONNECT", "io.nats.server.advisory.v1.client_connect", None);
    }

    /// `client`, which had authenticated, has closed for `reason`.
    pub fn disconnected(&self, client: &Client, reason: CloseReason) {
        self.publish(client, "DISCONNECT", "io.nats.server.advisory.v1.client_disconnect", Some(reason));
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
            "server": self.server.info(self.sequence.fetch_add(1, Ordering::Relaxed) + 1),
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
        let subject = format!("$SYS.ACCOUNT.{account}.{event}");
        let payload = body.to_string();
        let message =
            Message { subject: &subject, reply: None, headers: None, payload: payload.as_bytes(), publisher: None };
        let mut flush = FlushSet::default();
        delivery::fan_out(&self.router, &self.router.matches(&subject), &message, None, &mut flush);
        flush.flush();
    }
}
