//! A connection's shared half, and the table of open and recently closed connections.
//!
//! The reader task of each connection owns the parser and the subscription map; what
//! other tasks reach (the outbound buffer, CONNECT details, counters) lives in [`Client`].

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Instant, SystemTime};

use semaq_wire::info::ConnectOptions;

use crate::auth::responses::ReplyPermits;
use crate::auth::{AccountSlot, ClientPermissions};
use crate::limits;
use crate::outbound::{CloseReason, Outbound};
use crate::stats::{Shed, SubjectTraffic, Traffic};
use crate::sync::lock;

/// What a client told us in CONNECT, fixed once accepted.
#[derive(Debug, Clone, Default)]
pub struct ClientDetails {
    /// CONNECT options.
    pub options: ConnectOptions,
    /// The authenticated user, if any.
    pub user: Option<String>,
    /// Restrictions from the user's permissions.
    pub permissions: Option<Arc<ClientPermissions>>,
    /// The account whose subjects it uses; `None` for the global account `$G`.
    pub account: Option<String>,
    /// When the user's credentials expire (a user JWT's `exp`), seconds since the epoch.
    pub expires: Option<i64>,
    /// A JWT user's `name` and `tags`.
    pub jwt_tags: (String, Vec<String>),
}

/// The shared half of a connection: what publishers and monitoring need to reach.
#[derive(Debug)]
pub struct Client {
    /// Server-unique connection id.
    pub id: u64,
    /// Remote address.
    pub addr: SocketAddr,
    /// When the connection was accepted.
    pub started: SystemTime,
    /// Bytes waiting to be written to the socket.
    pub outbound: Outbound,
    /// Messages and bytes received from this client.
    pub inbound: Traffic,
    /// The server's shed counters, where deliveries shed for this client are counted (its own
    /// count is `outbound.lossy_shed`).
    pub server_shed: Arc<Shed>,
    /// The server's per-subject-prefix traffic, where deliveries to this client are counted.
    pub server_subjects: Arc<SubjectTraffic>,
    /// Subscriptions currently held.
    pub subscriptions: AtomicUsize,
    /// The server's signal that a subscription went (`Bus::interest_dropped`), for one that
    /// ends by reaching its auto-unsubscribe count.
    pub interest_dropped: Arc<tokio::sync::Notify>,
    /// Routed requests this connection has been handed and not yet answered: while above zero,
    /// its publishes are shown to the agent network, which watches for the replies.
    pub replies_owed: AtomicUsize,
    /// Set once at CONNECT.
    details: OnceLock<ClientDetails>,
    /// The round trip estimated at CONNECT, then measured by each PONG to the server's PING, in
    /// nanoseconds; 0 before CONNECT.
    rtt_nanos: AtomicU64,
    /// When the connection was accepted, the origin of `ping_sent_nanos`.
    accepted: Instant,
    /// When the server last sent a PING, in nanoseconds since `accepted`; 0 before the first.
    ping_sent_nanos: AtomicU64,
    /// Copied out of `details` for the per-message checks.
    echo: AtomicBool,
    headers: AtomicBool,
    filters_deliveries: AtomicBool,
    /// Whether the user has response permissions, so deliveries record their reply subjects.
    tracks_replies: AtomicBool,
    /// The reply subjects it may publish to under its response permissions; set at CONNECT.
    replies: Mutex<Option<ReplyPermits>>,
    /// Whether the connection runs over TLS.
    pub tls: bool,
    /// The connection's place in its account's connection limit, freed before the socket closes.
    account_slot: Mutex<Option<Arc<AccountSlot>>>,
}

/// Nanoseconds since `origin`, at least 1 so that 0 can mean "never".
fn nanos_since(origin: Instant) -> u64 {
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1)
}

impl Client {
    /// A new connection's shared half, counting what is shed for it in `server_shed` and what it
    /// is sent per subject prefix in `server_subjects`.
    pub fn new(
        id: u64,
        addr: SocketAddr,
        pending_bytes_max: usize,
        tls: bool,
        server_shed: Arc<Shed>,
        server_subjects: Arc<SubjectTraffic>,
        interest_dropped: Arc<tokio::sync::Notify>,
    ) -> Self {
        Self {
            id,
            addr,
            started: SystemTime::now(),
            outbound: Outbound::new(pending_bytes_max),
            inbound: Traffic::default(),
            server_shed,
            server_subjects,
            subscriptions: AtomicUsize::new(0),
            interest_dropped,
            replies_owed: AtomicUsize::new(0),
            details: OnceLock::new(),
            rtt_nanos: AtomicU64::new(0),
            accepted: Instant::now(),
            ping_sent_nanos: AtomicU64::new(0),
            echo: AtomicBool::new(true),
            headers: AtomicBool::new(false),
            filters_deliveries: AtomicBool::new(false),
            tracks_replies: AtomicBool::new(false),
            replies: Mutex::new(None),
            account_slot: Mutex::new(None),
            tls,
        }
    }

    /// CONNECT details, once received.
    pub fn details(&self) -> Option<&ClientDetails> {
        self.details.get()
    }

    /// Estimates the round trip as nats-server does at CONNECT: the time since the connection
    /// was accepted (the INFO out and the CONNECT back), at least a nanosecond.
    pub fn estimate_rtt(&self) {
        let since = self.started.elapsed().unwrap_or_default();
        let nanos = u64::try_from(since.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.rtt_nanos.store(nanos, Ordering::Relaxed);
    }

    /// Notes the server sending a PING, which the next PONG measures the round trip from.
    pub fn ping_sent(&self) {
        self.ping_sent_nanos.store(nanos_since(self.accepted), Ordering::Relaxed);
    }

    /// Whether the keepalive PING is due to measure the round trip anew: none was sent yet, or
    /// the last one is older than `RTT_MEASUREMENT_INTERVAL` (nats-server's `needRTT`).
    pub fn needs_rtt_ping(&self) -> bool {
        let sent = self.ping_sent_nanos.load(Ordering::Relaxed);
        let interval = crate::limits::RTT_MEASUREMENT_INTERVAL.as_nanos();
        sent == 0 || u128::from(nanos_since(self.accepted).saturating_sub(sent)) > interval
    }

    /// Measures the round trip from the last PING, as nats-server's `processPong` does (from the
    /// latest PING when several are out); a PONG before any PING measures nothing.
    pub fn pong_received(&self) {
        let sent = self.ping_sent_nanos.load(Ordering::Relaxed);
        if sent > 0 {
            let rtt = nanos_since(self.accepted).saturating_sub(sent).max(1);
            self.rtt_nanos.store(rtt, Ordering::Relaxed);
        }
    }

    /// The round trip estimated at CONNECT or measured by the last PONG, if CONNECT came.
    pub fn rtt(&self) -> Option<std::time::Duration> {
        let nanos = self.rtt_nanos.load(Ordering::Relaxed);
        (nanos > 0).then(|| std::time::Duration::from_nanos(nanos))
    }

    /// Whether routed requests await replies from this connection.
    pub fn owes_replies(&self) -> bool {
        self.replies_owed.load(Ordering::Relaxed) > 0
    }

    /// Whether the client asked to be told at once when a request reaches nobody (a 503).
    pub fn wants_no_responders(&self) -> bool {
        self.details().is_some_and(|d| d.options.no_responders && d.options.headers)
    }

    /// Whether the client wants its own messages back.
    pub fn echo(&self) -> bool {
        self.echo.load(Ordering::Relaxed)
    }

    /// Whether the client understands `HMSG`.
    pub fn headers(&self) -> bool {
        self.headers.load(Ordering::Relaxed)
    }

    /// Whether a message on `subject` may be delivered to this client under its permissions.
    pub fn may_receive(&self, subject: &str) -> bool {
        if !self.filters_deliveries.load(Ordering::Relaxed) {
            return true;
        }
        self.details().and_then(|d| d.permissions.as_ref()).is_none_or(|p| p.may_receive(subject))
    }

    /// Records that a request with `reply` was delivered, when the user's response permissions
    /// are what would let it answer.
    pub fn record_reply(&self, reply: &str) {
        if !self.tracks_replies.load(Ordering::Relaxed) {
            return;
        }
        let permissions = self.details().and_then(|d| d.permissions.as_ref());
        if permissions.is_none_or(|p| p.may_publish(reply)) {
            return;
        }
        if let Some(replies) = lock(&self.replies).as_mut() {
            replies.record(reply, Instant::now());
        }
    }

    /// Whether the response permissions let the client publish to `subject`, spending one of the
    /// replies allowed to the request delivered with it.
    pub fn may_reply(&self, subject: &str) -> bool {
        if !self.tracks_replies.load(Ordering::Relaxed) {
            return false;
        }
        lock(&self.replies).as_mut().is_some_and(|replies| replies.allow(subject, Instant::now()))
    }

    /// Holds the connection's place in its account's connection limit until
    /// [`Client::release_account_slot`].
    pub fn hold_account_slot(&self, slot: Option<Arc<AccountSlot>>) {
        *lock(&self.account_slot) = slot;
    }

    /// Frees the connection's place in its account's connection limit: done before the socket
    /// closes, so a client that sees the close and reconnects finds the place free, as in
    /// nats-server.
    pub fn release_account_slot(&self) {
        lock(&self.account_slot).take();
    }

    /// Fixes what CONNECT said, once accepted.
    pub fn accept_details(&self, details: ClientDetails) {
        self.echo.store(details.options.echo, Ordering::Relaxed);
        self.headers.store(details.options.headers, Ordering::Relaxed);
        let filters = details.permissions.as_ref().is_some_and(|p| p.filters_deliveries());
        self.filters_deliveries.store(filters, Ordering::Relaxed);
        if let Some(rule) = details.permissions.as_ref().and_then(|p| p.responses()) {
            *lock(&self.replies) = Some(ReplyPermits::new(rule, Instant::now()));
            self.tracks_replies.store(true, Ordering::Relaxed);
        }
        let _ = self.details.set(details);
    }
}

/// A closed connection, kept for `/connz?state=closed`.
#[derive(Debug, Clone)]
pub struct ClosedClient {
    /// The connection.
    pub client: Arc<Client>,
    /// Why it closed.
    pub reason: CloseReason,
    /// When.
    pub stopped: SystemTime,
}

/// Open connections by id, and the most recent closed ones.
#[derive(Debug)]
pub struct Clients {
    open: Mutex<HashMap<u64, Arc<Client>>>,
    closed: Mutex<VecDeque<ClosedClient>>,
    next_id: AtomicU64,
}

impl Default for Clients {
    fn default() -> Self {
        Self { open: Mutex::default(), closed: Mutex::default(), next_id: AtomicU64::new(1) }
    }
}

impl Clients {
    /// A fresh connection id.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Records an open connection.
    pub fn insert(&self, client: &Arc<Client>) {
        lock(&self.open).insert(client.id, client.clone());
    }

    /// Moves a connection from the open to the recently closed.
    pub fn close(&self, client: &Arc<Client>, reason: CloseReason) {
        lock(&self.open).remove(&client.id);
        let mut closed = lock(&self.closed);
        if closed.len() >= limits::CLOSED_CLIENTS_MAX {
            closed.pop_front();
        }
        closed.push_back(ClosedClient { client: client.clone(), reason, stopped: SystemTime::now() });
    }

    /// The open connection `id`.
    pub fn get(&self, id: u64) -> Option<Arc<Client>> {
        lock(&self.open).get(&id).cloned()
    }

    /// How many connections are open.
    pub fn len(&self) -> usize {
        lock(&self.open).len()
    }

    /// Whether no connection is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The open connections, copied out so the caller holds no lock.
    pub fn open(&self) -> Vec<Arc<Client>> {
        lock(&self.open).values().cloned().collect()
    }

    /// The recently closed connections, oldest first.
    pub fn closed(&self) -> Vec<ClosedClient> {
        lock(&self.closed).iter().cloned().collect()
    }

    /// Messages and bytes received and delivered by the open connections.
    pub fn open_traffic(&self) -> ((u64, u64), (u64, u64)) {
        let (mut inbound, mut outbound) = ((0, 0), (0, 0));
        for client in lock(&self.open).values() {
            let (msgs, bytes) = client.inbound.snapshot();
            inbound = (inbound.0 + msgs, inbound.1 + bytes);
            let (msgs, bytes) = client.outbound.traffic.snapshot();
            outbound = (outbound.0 + msgs, outbound.1 + bytes);
        }
        (inbound, outbound)
    }
}
