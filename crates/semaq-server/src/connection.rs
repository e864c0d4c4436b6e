//! One client connection: send INFO, read bytes, parse ops, authorize them, dispatch them.
//!
//! The reader runs in the connection's own task and is the only owner of the parser and the
//! subscription map. Everything other tasks need (the outbound buffer, CONNECT options,
//! counters) lives in [`Client`], shared through an `Arc`. What all connections share is a
//! [`Context`] the server builds once: the bus, auth, options and the INFO template.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use bytes::BytesMut;
use semaq_wire::info::{ConnectOptions, ServerInfo};
use semaq_wire::op::Publish;
use semaq_wire::{encode, subject, ByteString, ClientOp, HeaderBlock, ParseError, Parser, ParserLimits};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use crate::agents::Agents;
use crate::auth::certificate::CertificateNames;
use crate::auth::{AuthError, Authenticator, ClientPermissions, ConnectionLimits, Cookies, Grant, Transport};
use crate::bus::Bus;
use crate::client::{Client, ClientDetails};
use crate::delivery::{self, FlushSet, Message, Sink, SubscriberRef, Subscription};
use crate::filter::Filters;
use crate::identity::random_nonce;
use crate::limits;
use crate::mappings::{AccountMappings, SubjectMappings};
use crate::options::{Options, GLOBAL_ACCOUNT};
use crate::outbound::CloseReason;
use crate::router::Router;
use crate::stats::bump;
use crate::tokens::Tokens;

/// What every connection shares, built once by the server.
pub struct Context {
    /// Routing, the connection table and the counters.
    pub bus: Arc<Bus>,
    /// Effective options.
    pub options: Arc<Options>,
    /// Credentials and permissions.
    pub auth: Authenticator,
    /// TLS acceptor when TLS is on.
    pub tls: Option<TlsAcceptor>,
    /// The INFO every connection is sent, before its own id, address and nonce are filled in.
    pub info: ServerInfo,
    /// Filtered subscriptions, which end with the connection that made them.
    pub filters: Arc<Filters>,
    /// The agent network, which watches agents' replies and forgets a closed connection's agents.
    pub agents: Arc<Agents>,
    /// Token load, counted from the headers of every publish that names token counts.
    pub tokens: Arc<Tokens>,
    /// The system account's connect and disconnect events, when there is a system account.
    pub events: Option<Arc<crate::sys_events::Events>>,
    /// Each account's subject mappings, for the accounts that have any; fixed at start.
    pub mappings: AccountMappings,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("server_id", &self.info.server_id).finish_non_exhaustive()
    }
}

impl Context {
    /// The INFO sent to connection `client_id` from `addr`.
    pub fn client_info(&self, client_id: u64, addr: SocketAddr) -> ServerInfo {
        ServerInfo {
            client_id,
            client_ip: addr.ip().to_string(),
            nonce: self.info.auth_required.then(random_nonce),
            ..self.info.clone()
        }
    }
}

/// Serves one accepted TCP connection until it closes.
pub async fn serve(context: Arc<Context>, socket: TcpStream, addr: SocketAddr) {
    let _ = socket.set_nodelay(true);
    let id = context.bus.clients.next_id();
    let tls = context.tls.clone();
    let (shed, subjects) = (context.bus.stats.shed.clone(), context.bus.stats.subjects.clone());
    let (pending, dropped) = (context.options.pending_bytes_max, context.bus.interest_dropped.clone());
    let client = Arc::new(Client::new(id, addr, pending, tls.is_some(), shed, subjects, dropped));
    let info = context.client_info(id, addr);
    let mut hello = BytesMut::new();
    encode::info(&mut hello, &info);
    let nonce = info.nonce;
    let Some(acceptor) = tls else {
        let (reader, writer) = socket.into_split();
        return run(context, client, reader, writer, (hello, nonce), Entry::default()).await;
    };
    // INFO goes out in plain text first; the client then starts the TLS handshake.
    let mut socket = socket;
    if tokio::io::AsyncWriteExt::write_all(&mut socket, &hello).await.is_err() {
        return;
    }
    let timeout = context.options.tls.as_ref().map_or(limits::TLS_HANDSHAKE_TIMEOUT, |tls| tls.timeout);
    match tokio::time::timeout(timeout, acceptor.accept(socket)).await {
        Ok(Ok(stream)) => {
            let maps = context.options.tls.as_ref().is_some_and(|tls| tls.map);
            let certificate = if maps { peer_names(stream.get_ref().1) } else { None };
            let entry = Entry { certificate, ..Entry::default() };
            let (reader, writer) = tokio::io::split(stream);
            run(context, client, reader, writer, (BytesMut::new(), nonce), entry).await;
        }
        Ok(Err(error)) => tracing::debug!(%addr, %error, "TLS handshake failed"),
        Err(_) => tracing::debug!(%addr, "TLS handshake timed out"),
    }
}

/// The names of the client certificate `connection` was given, for `verify_and_map`.
pub fn peer_names(connection: &tokio_rustls::rustls::ServerConnection) -> Option<CertificateNames> {
    CertificateNames::from_der(connection.peer_certificates()?.first()?)
}

/// The listener a connection came through when it is not the client port (a WebSocket):
/// what its INFO says about TLS and where to connect.
#[derive(Debug, Clone)]
pub struct Via {
    /// TLS is on for this listener (INFO `tls_required`).
    pub tls_required: bool,
    /// Client certificates are verified (INFO `tls_verify`).
    pub tls_verify: bool,
    /// The listener's host (INFO `host`).
    pub host: String,
    /// The listener's port (INFO `port`).
    pub port: u16,
    /// Credentials the upgrade request's cookies carried.
    pub cookies: Cookies,
    /// The listener's own time to authenticate, instead of the server's.
    pub auth_timeout: Option<std::time::Duration>,
    /// The client certificate's names, when the listener maps certificates to users.
    pub certificate: Option<CertificateNames>,
    /// The listener's own ping interval, instead of the server's.
    pub ping_interval: Option<std::time::Duration>,
}

/// How a connection came in, as far as logging in goes.
#[derive(Debug, Default)]
struct Entry {
    transport: Transport,
    cookies: Cookies,
    auth_timeout: Option<std::time::Duration>,
    certificate: Option<CertificateNames>,
    ping_interval: Option<std::time::Duration>,
}

/// Serves a connection whose transport (TLS included) another listener already set up, such
/// as an upgraded WebSocket: INFO first, then everything a TCP client gets.
pub async fn serve_via<R, W>(context: Arc<Context>, addr: SocketAddr, via: Via, reader: R, writer: W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let id = context.bus.clients.next_id();
    let (shed, subjects) = (context.bus.stats.shed.clone(), context.bus.stats.subjects.clone());
    let pending = context.options.pending_bytes_max;
    let dropped = context.bus.interest_dropped.clone();
    let client = Arc::new(Client::new(id, addr, pending, via.tls_required, shed, subjects, dropped));
    let mut info = context.client_info(id, addr);
    // The WebSocket override may ask for credentials the client port does not.
    info.auth_required = context.auth.is_required_on(Transport::Websocket);
    let info = ServerInfo {
        tls_required: via.tls_required,
        tls_verify: via.tls_verify,
        host: via.host,
        port: via.port,
        ..info
    };
    let mut hello = BytesMut::new();
    encode::info(&mut hello, &info);
    let nonce = info.nonce;
    let entry = Entry {
        transport: Transport::Websocket,
        cookies: via.cookies,
        auth_timeout: via.auth_timeout,
        certificate: via.certificate,
        ping_interval: via.ping_interval,
    };
    run(context, client, reader, writer, (hello, nonce), entry).await;
}

/// `hello` is what to send first, with the nonce it carries (which the client must sign).
async fn run<R, W>(
    context: Arc<Context>,
    client: Arc<Client>,
    reader: R,
    writer: W,
    hello: (BytesMut, Option<String>),
    entry: Entry,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (hello, nonce) = hello;
    context.bus.register(&client);
    client.outbound.send(&hello);
    let write_deadline = context.options.write_deadline;
    let writer = SlotReleasingWriter { inner: writer, client: client.clone() };
    let writer_client = client.clone();
    let writer_task = tokio::spawn(async move { writer_client.outbound.run_writer(writer, write_deadline).await });
    let mut connection = Connection::new(context.clone(), client.clone(), nonce, entry);
    let reason = connection.read_loop(reader).await;
    client.release_account_slot();
    client.outbound.close(reason);
    connection.remove_subscriptions();
    let reason = writer_task.await.unwrap_or(reason);
    context.bus.unregister(&client, reason);
    if let Some(events) = &context.events {
        events.disconnected(&client, reason);
    }
    // After unregister: a filtered subscription is only created while its requester is open.
    context.filters.connection_closed(client.id);
    context.agents.connection_closed(client.id);
}

/// The reader's private state for one connection.
struct Connection {
    context: Arc<Context>,
    client: Arc<Client>,
    parser: Parser,
    /// The subject space of the connection's account, resolved once when it authenticates.
    router: Arc<Router<SubscriberRef>>,
    /// The subject mappings of the connection's account, when it has any.
    mappings: Option<Arc<SubjectMappings>>,
    subscriptions: HashMap<ByteString, Arc<Subscription>>,
    flush: FlushSet,
    publish_allowed: HashMap<ByteString, bool>,
    pings_outstanding: u32,
    /// When the client last sent anything: a keepalive PING is skipped while it is active.
    last_in: tokio::time::Instant,
    connected: bool,
    /// CONNECT was just accepted: the keepalive starts again, its first PING early.
    ping_restart: bool,
    /// The nonce sent in INFO, which nkey and JWT users sign.
    nonce: Option<String>,
    /// The listener the client came through, with its cookies and time to authenticate.
    entry: Entry,
    /// Bounds the user's credentials set, beyond the server's.
    limits: ConnectionLimits,
    /// Subscriptions held when exhausted ones (auto-unsubscribed by a delivery, which leaves
    /// them in `subscriptions`) are next swept out; doubles with what a sweep keeps.
    sweep_at: usize,
}

impl Connection {
    fn new(context: Arc<Context>, client: Arc<Client>, nonce: Option<String>, entry: Entry) -> Self {
        let limits = ParserLimits {
            control_line_bytes_max: context.options.control_line_bytes_max,
            payload_bytes_max: context.options.payload_bytes_max,
        };
        // Until CONNECT says otherwise (and without auth, always) a client is in `$G`.
        let router = context.bus.account_router(GLOBAL_ACCOUNT).unwrap_or(&context.bus.router).clone();
        let mappings = context.mappings.get(GLOBAL_ACCOUNT).cloned();
        Self {
            context,
            client,
            parser: Parser::new(limits),
            router,
            mappings,
            subscriptions: HashMap::new(),
            flush: FlushSet::default(),
            publish_allowed: HashMap::new(),
            pings_outstanding: 0,
            last_in: tokio::time::Instant::now(),
            connected: false,
            ping_restart: false,
            nonce,
            entry,
            sweep_at: crate::limits::SUBSCRIPTION_SWEEP_MIN,
            limits: ConnectionLimits::default(),
        }
    }

    async fn read_loop<R: AsyncRead + Unpin>(&mut self, mut reader: R) -> CloseReason {
        let mut buffer = BytesMut::with_capacity(limits::READ_BUFFER_BYTES);
        let ping_interval = self.entry.ping_interval.unwrap_or(self.context.options.ping_interval);
        let mut ping_timer = tokio::time::interval_at(tokio::time::Instant::now() + ping_interval, ping_interval);
        let auth_timer = tokio::time::sleep(self.entry.auth_timeout.unwrap_or(self.context.options.auth_timeout));
        let auth_required = self.context.auth.is_required_on(self.entry.transport);
        let client = self.client.clone();
        let closed = client.outbound.closed();
        // Armed once CONNECT brings credentials that expire (a user JWT's `exp`).
        let expiry = tokio::time::sleep(std::time::Duration::MAX / 4);
        let mut expiry_armed = false;
        tokio::pin!(auth_timer, closed, expiry);
        loop {
            if buffer.capacity() - buffer.len() < limits::READ_BUFFER_BYTES / 4 {
                buffer.reserve(limits::READ_BUFFER_BYTES.max(self.parser.bytes_wanted()));
            }
            tokio::select! {
                read = reader.read_buf(&mut buffer) => match read {
                    Ok(0) => return CloseReason::ClientClosed,
                    Ok(_) => {
                        self.last_in = tokio::time::Instant::now();
                        let outcome = self.process(&mut buffer);
                        self.flush.flush();
                        if std::mem::take(&mut self.ping_restart) {
                            ping_timer = ping_timer_after_connect(ping_interval);
                        }
                        if let Err(reason) = outcome {
                            return reason;
                        }
                        if let (false, Some(at)) = (expiry_armed, self.limits.expires) {
                            expiry.as_mut().reset(instant_of(at));
                            expiry_armed = true;
                        }
                    }
                    Err(_) => return CloseReason::IoError,
                },
                _ = &mut closed => return client.outbound.close_reason().unwrap_or(CloseReason::ServerShutdown),
                _ = &mut expiry, if expiry_armed => {
                    client.outbound.close_with_error(CloseReason::AuthenticationFailure, "User Authentication Expired");
                    return CloseReason::AuthenticationFailure;
                }
                _ = &mut auth_timer, if auth_required && !self.connected => {
                    client.outbound.close_with_error(CloseReason::AuthenticationFailure, "Authentication Timeout");
                    return CloseReason::AuthenticationFailure;
                }
                _ = ping_timer.tick() => {
                    if let Some(reason) = self.ping(ping_interval) {
                        return reason;
                    }
                }
            }
        }
    }

    /// The keepalive PING, skipped as nats-server skips it for a client that sent something
    /// within the interval (its data or its own PING show it is alive), unless the round trip
    /// is due to be measured.
    fn ping(&mut self, interval: std::time::Duration) -> Option<CloseReason> {
        if self.last_in.elapsed() < interval && !self.client.needs_rtt_ping() {
            return None;
        }
        if self.pings_outstanding >= self.context.options.pings_outstanding_max {
            self.client.outbound.close_with_error(CloseReason::StaleConnection, "Stale Connection");
            return Some(CloseReason::StaleConnection);
        }
        self.pings_outstanding += 1;
        self.client.ping_sent();
        self.client.outbound.send(encode::PING);
        None
    }

    /// Handles every whole op in `buffer`.
    fn process(&mut self, buffer: &mut BytesMut) -> Result<(), CloseReason> {
        loop {
            match self.parser.next_op(buffer) {
                Ok(Some(op)) => self.handle(op)?,
                Ok(None) => return Ok(()),
                Err(error) => self.parse_error(error)?,
            }
        }
    }

    fn parse_error(&mut self, error: ParseError) -> Result<(), CloseReason> {
        if error.is_fatal() {
            self.client.outbound.close_with_error(CloseReason::ProtocolViolation, &error.to_string());
            return Err(CloseReason::ProtocolViolation);
        }
        self.send_err(&error.to_string());
        Ok(())
    }

    fn handle(&mut self, op: ClientOp) -> Result<(), CloseReason> {
        if !self.connected
            && !matches!(op, ClientOp::Connect(_))
            && self.context.auth.is_required_on(self.entry.transport)
        {
            return self.refuse_auth();
        }
        match op {
            ClientOp::Connect(json) => return self.connect(&json),
            ClientOp::Publish(publish) => {
                self.check_payload(&publish)?;
                self.publish(publish)
            }
            ClientOp::Subscribe { subject, queue, sid } => self.subscribe(subject, queue, sid),
            ClientOp::Unsubscribe { sid, max_msgs } => self.unsubscribe(&sid, max_msgs),
            ClientOp::Ping => {
                self.client.outbound.send(encode::PONG);
                return Ok(());
            }
            ClientOp::Pong => {
                self.pings_outstanding = 0;
                self.client.pong_received();
                return Ok(());
            }
        }
        Ok(())
    }

    fn refuse_auth(&mut self) -> Result<(), CloseReason> {
        bump(&self.context.bus.stats.auth_failures);
        self.client.outbound.close_with_error(CloseReason::AuthenticationFailure, "Authorization Violation");
        Err(CloseReason::AuthenticationFailure)
    }

    fn refuse(&mut self, error: AuthError) -> Result<(), CloseReason> {
        match error {
            AuthError::Violation => self.refuse_auth(),
            AuthError::AccountConnectionsExceeded => {
                self.client.outbound.close_with_error(CloseReason::MaxConnectionsExceeded, &error.to_string());
                Err(CloseReason::MaxConnectionsExceeded)
            }
        }
    }

    fn connect(&mut self, json: &[u8]) -> Result<(), CloseReason> {
        let Ok(mut options) = serde_json::from_slice::<ConnectOptions>(json) else {
            self.client.outbound.close_with_error(CloseReason::ProtocolViolation, "Invalid CONNECT JSON");
            return Err(CloseReason::ProtocolViolation);
        };
        if self.connected {
            // A second CONNECT may only change nothing that matters; nats clients never send one.
            self.ok();
            return Ok(());
        }
        self.entry.cookies.fill(&mut options);
        let Grant { user, permissions, limits, slot, account, jwt_tags } = match self.context.auth.authenticate_on(
            &options,
            self.nonce.as_deref(),
            self.entry.transport,
            Some(self.client.addr.ip()),
            self.entry.certificate.as_ref(),
        ) {
            Ok(grant) => grant,
            Err(error) => return self.refuse(error),
        };
        let Some(router) = self.context.bus.account_router(account.as_deref().unwrap_or(GLOBAL_ACCOUNT)) else {
            // Every account a user can log into has a subject space from the start.
            tracing::error!(?account, "no subject space for the account");
            return self.refuse_auth();
        };
        // Subscriptions made before CONNECT (possible only without auth, so in `$G`) keep theirs.
        if self.subscriptions.is_empty() {
            self.router = router.clone();
        }
        self.mappings = self.context.mappings.get(account.as_deref().unwrap_or(GLOBAL_ACCOUNT)).cloned();
        self.limits = limits;
        self.client.hold_account_slot(slot);
        if self.limits.subscriptions_max == Some(0) {
            // nats-server closes a client whose JWT allows no subscription (a JWT without `subs`).
            self.client.outbound.close_with_error(CloseReason::ProtocolViolation, "maximum subscriptions exceeded");
            return Err(CloseReason::ProtocolViolation);
        }
        let verbose = options.verbose;
        let expires = self.limits.expires;
        self.client.estimate_rtt();
        self.client.accept_details(ClientDetails { options, user, permissions, account, expires, jwt_tags });
        self.connected = true;
        self.ping_restart = true;
        if let Some(events) = &self.context.events {
            events.connected(&self.client);
        }
        if verbose {
            self.client.outbound.send(encode::OK);
        }
        Ok(())
    }

    /// The connection as nats-server 2.9 names a client in its log lines: its address and id,
    /// then, once CONNECT gave any, `"v<version>:<lang>:<name>"` of those given.
    fn log_name(&self) -> String {
        let kind = match self.entry.transport {
            Transport::Tcp => "cid",
            Transport::Websocket => "wid",
        };
        let mut name = format!("{} - {kind}:{}", self.client.addr, self.client.id);
        let parts: Vec<String> = self
            .client
            .details()
            .map(|details| {
                let given = |field: &Option<String>| field.clone().filter(|text| !text.is_empty());
                let version = given(&details.options.version).map(|version| format!("v{version}"));
                [version, given(&details.options.lang), given(&details.options.name)].into_iter().flatten().collect()
            })
            .unwrap_or_default();
        if !parts.is_empty() {
            name.push_str(&format!(" - {:?}", parts.join(":")));
        }
        name
    }

    fn verbose(&self) -> bool {
        self.client.details().is_some_and(|details| details.options.verbose)
    }

    fn ok(&self) {
        if self.verbose() {
            self.client.outbound.send(encode::OK);
        }
    }

    fn send_err(&self, text: &str) {
        let mut line = BytesMut::new();
        encode::err(&mut line, text);
        self.client.outbound.send(&line);
    }

    fn permissions(&self) -> Option<&Arc<ClientPermissions>> {
        self.client.details().and_then(|details| details.permissions.as_ref())
    }

    /// Whether the permissions let the client publish to `subject`, or its response permissions
    /// a reply there (which spends one).
    fn may_publish(&mut self, subject: &ByteString) -> bool {
        self.may_publish_statically(subject) || self.client.may_reply(subject)
    }

    /// Whether the permissions alone let the client publish to `subject`; cached, since replies
    /// allowed by response permissions are not part of it.
    fn may_publish_statically(&mut self, subject: &ByteString) -> bool {
        let Some(permissions) = self.permissions().cloned() else { return true };
        if let Some(allowed) = self.publish_allowed.get(subject) {
            return *allowed;
        }
        let allowed = permissions.may_publish(subject);
        if self.publish_allowed.len() >= limits::PUBLISH_PERMISSION_CACHE_ENTRIES_MAX {
            self.publish_allowed.clear();
        }
        self.publish_allowed.insert(subject.clone(), allowed);
        allowed
    }

    /// Enforces the user's or account's payload bound, below the server's that the parser enforces.
    fn check_payload(&self, publish: &Publish) -> Result<(), CloseReason> {
        let size = publish.headers.as_ref().map_or(0, |h| h.len()) + publish.payload.len();
        if self.limits.payload_bytes_max.is_some_and(|most| size > most) {
            self.client.outbound.close_with_error(CloseReason::ProtocolViolation, "Maximum Payload Violation");
            return Err(CloseReason::ProtocolViolation);
        }
        Ok(())
    }

    fn publish(&mut self, mut publish: Publish) {
        // Like nats-server, the mapped subject is the message's from here on (permissions,
        // routing, what subscribers see); the published one is kept for the trace.
        let published = self
            .mappings
            .as_ref()
            .and_then(|mappings| mappings.select(&publish.subject))
            .map(|mapped| std::mem::replace(&mut publish.subject, ByteString::from(mapped)));
        if let Some(published) = &published {
            tracing::trace!("{} - <<- [MAPPING {published} -> {}]", self.log_name(), publish.subject);
        }
        let size = publish.headers.as_ref().map_or(0, |h| h.len()) + publish.payload.len();
        self.client.inbound.record(size);
        self.client.server_subjects.record_in(&publish.subject, size);
        // Like nats-server, only pedantic clients have publish subjects checked; others may
        // publish a `*` or `>` token (nats-py does so to create filtered consumers), which then
        // matches wildcard subscriptions as a literal token.
        let pedantic = self.client.details().is_some_and(|d| d.options.pedantic);
        if pedantic && !subject::is_valid_literal(&publish.subject) {
            self.send_err("Invalid Publish Subject");
            return;
        }
        if !self.may_publish(&publish.subject) {
            self.send_err(&format!("Permissions Violation for Publish to \"{}\"", publish.subject));
            return;
        }
        let answered = match self.client.owes_replies() {
            true => self.context.agents.observe_reply(self.client.id, &publish.subject, publish.headers.as_deref()),
            false => None,
        };
        if let Some(headers) = publish.headers.as_deref() {
            let routed = answered.as_ref().map(|a| (&*a.agent_id, &*a.intent));
            self.context.tokens.record_headers(headers, &publish.subject, routed);
        }
        let message = Message {
            subject: &publish.subject,
            reply: publish.reply.as_deref(),
            headers: publish.headers.as_deref(),
            payload: &publish.payload,
            publisher: Some(self.client.id),
        };
        let traced = crate::trace::Publish::begin(&crate::trace::Arrival {
            subject: published.as_deref().unwrap_or(&publish.subject),
            mapped_to: published.is_some().then_some(&*publish.subject),
            headers: message.headers,
            body_size: message.payload.len(),
            client_id: self.client.id,
            client_name: self.client.details().and_then(|d| d.options.name.as_deref()),
            account: self.client.details().and_then(|d| d.account.as_deref()).unwrap_or(GLOBAL_ACCOUNT),
            server: &self.context.info,
        });
        let matches = self.router.matches(&publish.subject);
        let delivered = delivery::fan_out(&self.router, &matches, &message, Some(&self.client), &mut self.flush);
        let trace_event = traced.and_then(|traced| traced.finish(delivered));
        if delivered == 0 {
            self.no_responders(&message);
        }
        if let Some((dest, event)) =
            trace_event.filter(|(dest, _)| self.may_publish_statically(&ByteString::from(dest.as_str())))
        {
            // The trace event stays in the publisher's account, as in nats-server.
            let event = Message { subject: &dest, reply: None, headers: None, payload: &event, publisher: None };
            let matches = self.router.matches_uncached(&dest);
            delivery::fan_out(&self.router, &matches, &event, None, &mut self.flush);
        }
        self.ok();
    }

    /// Tells a requester at once that nobody is listening, when it asked for that.
    fn no_responders(&mut self, message: &Message<'_>) {
        let Some(reply) = message.reply else { return };
        let wants_status = self.client.details().is_some_and(|d| d.options.no_responders && d.options.headers);
        if !wants_status {
            return;
        }
        let Some(subscription) = self.subscriptions.values().find(|s| subject::matches(&s.subject, reply)).cloned()
        else {
            return;
        };
        let status = HeaderBlock::status(503, "").encode();
        let notice = Message { subject: reply, reply: None, headers: Some(&status), payload: b"", publisher: None };
        delivery::deliver(&self.router, &subscription, &notice, &mut self.flush);
    }

    fn subscribe(&mut self, subject: ByteString, queue: Option<ByteString>, sid: ByteString) {
        if !subject::is_valid_filter(&subject) || queue.as_deref().is_some_and(|q| !subject::is_valid_queue(q)) {
            self.send_err("Invalid Subject");
            return;
        }
        if self.permissions().is_some_and(|p| !p.may_subscribe(&subject)) {
            self.send_err(&format!("Permissions Violation for Subscription to \"{subject}\""));
            return;
        }
        if self.subscriptions.contains_key(&sid) {
            // nats-server ignores a SUB that reuses a live sid.
            self.ok();
            return;
        }
        let most = self.limits.subscriptions_max.map_or(usize::MAX, |most| most);
        let limit = self.context.options.subscriptions_per_connection_max.min(most);
        // A sweep on every SUB made n subscriptions cost O(n²) (100,000 took minutes); swept when
        // the map has doubled, each SUB costs O(1) amortized. At the limit the exhausted ones must
        // not count, so it sweeps first, as it always did.
        if self.subscriptions.len() >= self.sweep_at || self.subscriptions.len() >= limit {
            self.subscriptions.retain(|_, s| !s.is_exhausted());
            self.sweep_at = self.subscriptions.len().saturating_mul(2).max(crate::limits::SUBSCRIPTION_SWEEP_MIN);
        }
        if self.subscriptions.len() >= limit {
            self.send_err("maximum subscriptions exceeded");
            return;
        }
        let subscription = Arc::new(Subscription::new(Sink::Client(self.client.clone()), subject, queue, sid.clone()));
        let reference = SubscriberRef(subscription.clone());
        if self.router.insert(&subscription.subject, subscription.queue.as_deref(), reference).is_err() {
            self.send_err("Invalid Subject");
            return;
        }
        self.subscriptions.insert(sid, subscription);
        self.client.subscriptions.store(self.subscriptions.len(), Ordering::Relaxed);
        self.ok();
    }

    fn unsubscribe(&mut self, sid: &ByteString, max_msgs: Option<u64>) {
        let Some(subscription) = self.subscriptions.get(sid).cloned() else {
            self.ok();
            return;
        };
        match max_msgs {
            Some(max) if max > subscription.delivered() => subscription.set_max_msgs(max),
            _ => {
                self.subscriptions.remove(sid);
                self.remove_from_router(&subscription);
                self.context.bus.interest_dropped.notify_one();
            }
        }
        self.client.subscriptions.store(self.subscriptions.len(), Ordering::Relaxed);
        self.ok();
    }

    fn remove_from_router(&self, subscription: &Arc<Subscription>) {
        let reference = SubscriberRef(subscription.clone());
        self.router.remove(&subscription.subject, subscription.queue.as_deref(), &reference);
    }

    fn remove_subscriptions(&mut self) {
        let subscriptions = std::mem::take(&mut self.subscriptions);
        for subscription in subscriptions.values() {
            self.remove_from_router(subscription);
        }
        if !subscriptions.is_empty() {
            self.context.bus.interest_dropped.notify_one();
        }
        self.client.subscriptions.store(0, Ordering::Relaxed);
    }
}

/// A socket's write half that frees the connection's place in its account's connection limit
/// before it closes (the writer shuts it down, or drops it), so a client that sees the close
/// and reconnects finds the place free, as nats-server frees it before closing.
struct SlotReleasingWriter<W> {
    inner: W,
    client: Arc<Client>,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for SlotReleasingWriter<W> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        self.client.release_account_slot();
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<W> Drop for SlotReleasingWriter<W> {
    fn drop(&mut self) {
        self.client.release_account_slot();
    }
}

/// The tokio instant of `at`, seconds since the epoch (now when it has passed).
fn instant_of(at: i64) -> tokio::time::Instant {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::try_from(at).unwrap_or(0));
    let left = at.duration_since(std::time::SystemTime::now()).unwrap_or_default();
    tokio::time::Instant::now() + left
}

/// The keepalive from CONNECT on, as nats-server's `setFirstPingTimer`: the first PING after
/// at most `FIRST_CLIENT_PING_INTERVAL`, later by up to a fifth of that (random, so clients
/// that connected together are not pinged together), then one every `interval`.
fn ping_timer_after_connect(interval: std::time::Duration) -> tokio::time::Interval {
    let first = interval.min(limits::FIRST_CLIENT_PING_INTERVAL);
    let jitter = first.mul_f64(rand::random::<f64>() / 5.0);
    tokio::time::interval_at(tokio::time::Instant::now() + first + jitter, interval)
}
