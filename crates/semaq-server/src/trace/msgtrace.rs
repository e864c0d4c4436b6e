//! nats-server 2.11's message tracing: a message with `Nats-Trace-Dest: <subject>` has a
//! `MsgTraceEvent` published to that subject, in nats-server's JSON (`server/msgtrace.go`):
//! `server`, `request` (`header`, `msgsize`), `events` with `type` codes `in` (ingress), `sm`
//! (the account's subject mapping changed its subject), `eg`
//! (egress, one per client delivery), `se` and `si` (it crossed a stream or service import into
//! another account) and `js` (a stream stored it).

use std::sync::atomic::{AtomicU64, Ordering};

use semaq_wire::clock;
use semaq_wire::headers::Headers;
use semaq_wire::info::ServerInfo;
use serde_json::{json, Map, Value};

/// The header naming where trace events go.
pub const TRACE_DEST: &str = semaq_wire::headers::names::TRACE_DEST;
/// `Nats-Trace-Dest`'s value past an import that does not allow tracing (not a subject, so
/// nothing further traces it).
pub const TRACE_DISABLED: &str = "trace disabled";
/// `1`, `true` or `on`: trace the message but deliver and store it nowhere.
pub const TRACE_ONLY: &str = "Nats-Trace-Only";
/// nats-server's kind code for a client connection.
const KIND_CLIENT: u64 = 0;

/// Numbers the events this server sends, as nats-server numbers its system messages.
static EVENT_SEQ: AtomicU64 = AtomicU64::new(0);

/// The connection a traced message came in on.
#[derive(Debug, Clone, Copy)]
pub struct Ingress<'a> {
    /// The connection id.
    pub cid: u64,
    /// The connection's name, when it gave one.
    pub name: Option<&'a str>,
    /// The subject published to.
    pub subject: &'a str,
    /// The connection's account (`$G` for the server's own users).
    pub account: &'a str,
}

/// One traced message's event, filled in as the message moves through the server.
#[derive(Debug)]
pub struct MsgTrace {
    /// Where the event goes.
    pub dest: String,
    /// Whether the message is traced only, not delivered.
    pub trace_only: bool,
    /// The account the message was published in; egress to another one names that one.
    account: String,
    server: Value,
    request: Value,
    events: Vec<Value>,
}

impl MsgTrace {
    /// The trace `headers` ask for, if any: `Nats-Trace-Dest` set to a valid subject.
    pub fn start(headers: Headers<'_>, server: &ServerInfo, msg_size: usize, ingress: Ingress<'_>) -> Option<Self> {
        let [dest, only] = headers.get_many(&[TRACE_DEST, TRACE_ONLY]);
        let dest = dest.filter(|dest| semaq_wire::subject::is_valid_literal(dest))?;
        let trace_only = only.is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "on"));
        let mut header = Map::new();
        for (name, value) in headers.iter() {
            let values = header.entry(name.to_string()).or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(values) = values {
                values.push(Value::String(value.to_string()));
            }
        }
        let server = json!({
            "name": server.server_name,
            "host": server.host,
            "id": server.server_id,
            "ver": server.version,
            "jetstream": server.jetstream,
            "flags": u64::from(server.jetstream),
            "seq": EVENT_SEQ.fetch_add(1, Ordering::Relaxed) + 1,
            "time": now(),
        });
        let mut ingress_event = json!({
            "type": "in",
            "ts": now(),
            "kind": KIND_CLIENT,
            "cid": ingress.cid,
            "acc": ingress.account,
            "subj": ingress.subject,
        });
        if let Some(name) = ingress.name.filter(|n| !n.is_empty()) {
            ingress_event["name"] = json!(name);
        }
        Some(Self {
            dest: dest.to_string(),
            trace_only,
            account: ingress.account.to_string(),
            server,
            request: json!({ "header": header, "msgsize": msg_size }),
            events: vec![ingress_event],
        })
    }

    /// A delivery (or, traced only, a delivery it would have been) to client `cid` of `account`.
    pub fn egress(&mut self, cid: u64, name: Option<&str>, account: &str, subscription: &str, queue: Option<&str>) {
        let mut event = json!({ "type": "eg", "ts": now(), "kind": KIND_CLIENT, "cid": cid, "sub": subscription });
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            event["name"] = json!(name);
        }
        // Reached through an import: nats-server names the other account.
        if account != self.account {
            event["acc"] = json!(account);
        }
        if let Some(queue) = queue {
            event["queue"] = json!(queue);
        }
        self.events.push(event);
    }

    /// The account's subject mappings sent the message to `to` instead.
    pub fn subject_mapping(&mut self, to: &str) {
        self.events.push(json!({ "type": "sm", "ts": now(), "to": to }));
    }

    /// The message crossed a stream import into `account`, as `to` there.
    pub fn stream_export(&mut self, account: &str, to: &str) {
        self.events.push(json!({ "type": "se", "ts": now(), "acc": account, "to": to }));
    }

    /// The message crossed a service import from `from` to `to` in the exporting `account`.
    pub fn service_import(&mut self, account: &str, from: &str, to: &str) {
        self.events.push(json!({ "type": "si", "ts": now(), "acc": account, "from": from, "to": to }));
    }

    /// Stream `stream` captured the message (published on `subject`).
    pub fn jetstream(&mut self, stream: &str, subject: &str) {
        self.events.push(json!({ "type": "js", "ts": now(), "stream": stream, "subject": subject }));
    }

    /// The event's subject and JSON body.
    pub fn finish(self) -> (String, Vec<u8>) {
        let event = json!({ "server": self.server, "request": self.request, "events": self.events });
        (self.dest, event.to_string().into_bytes())
    }
}

fn now() -> String {
    clock::rfc3339_nanos(clock::unix_nanos_now())
}
