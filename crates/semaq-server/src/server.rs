//! The listener: binds the client and monitoring ports, accepts connections up to the limit,
//! and on shutdown stops accepting, lets every connection flush, and returns.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use semaq_wire::info::ServerInfo;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::auth::Authenticator;
use crate::connection::{self, Client};
use crate::delivery::{self, FlushSet, InternalSink, Message, Sink, SubscriberRef, Subscription};
use crate::jetstream::JetStream;
use crate::limits;
use crate::options::Options;
use crate::outbound::CloseReason;
use crate::router::{Router, RouterError};
use crate::stats::{bump, ServerStats};
use crate::tls;

/// The version clients see: nats-server 2.10-compatible so they enable headers and JetStream.
pub const NATS_COMPATIBLE_VERSION: &str = "2.10.22";
/// SemaQ's own version.
pub const SEMAQ_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not bind.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// Address asked for.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// TLS could not be configured.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The schema registry's file is unreadable or damaged.
    #[error(transparent)]
    Registry(#[from] crate::registry::store::StoreFileError),
    /// JetStream could not start.
    #[error(transparent)]
    JetStream(#[from] crate::jetstream::JetStreamError),
    /// A file (pid, ports, store directory) could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
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

/// Closed connections remembered for monitoring.
const CLOSED_CLIENTS_MAX: usize = 1000;

/// State every connection and the monitor share.
pub struct Shared {
    /// Effective options.
    pub options: Options,
    /// Subject → subscriptions.
    pub router: Router<SubscriberRef>,
    /// Credentials and permissions.
    pub auth: Authenticator,
    /// Server-wide counters.
    pub stats: ServerStats,
    /// TLS acceptor when TLS is on.
    pub tls: Option<TlsAcceptor>,
    /// Random id of this server process.
    pub server_id: String,
    /// Configured or generated name.
    pub server_name: String,
    /// Start time, for uptime.
    pub started: Instant,
    /// Start time as wall clock, for `/varz`.
    pub started_at: SystemTime,
    /// Bound client address (after `-p -1` resolution).
    pub client_addr: Mutex<Option<SocketAddr>>,
    /// Bound monitoring address.
    pub http_addr: Mutex<Option<SocketAddr>>,
    /// Open connections by id.
    pub clients: Mutex<HashMap<u64, Arc<Client>>>,
    /// Recently closed connections.
    pub closed_clients: Mutex<std::collections::VecDeque<ClosedClient>>,
    /// Streams and consumers, when JetStream is on.
    pub jetstream: std::sync::OnceLock<Arc<JetStream>>,
    /// The schema registry, once opened.
    pub registry: std::sync::OnceLock<Arc<crate::registry::Registry>>,
    /// Filtered core subscriptions and the filter counters.
    pub filters: crate::filter::subscriptions::Registry,
    next_client_id: AtomicU64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("server_id", &self.server_id).finish_non_exhaustive()
    }
}

impl Shared {
    /// Builds the shared state from options.
    pub fn new(options: Options) -> Result<Self, StartError> {
        let tls = options.tls.as_ref().map(tls::acceptor).transpose()?;
        let server_id = random_server_id();
        let server_name = options.server_name.clone().unwrap_or_else(|| server_id.clone());
        Ok(Self {
            router: Router::new(limits::ROUTER_CACHE_ENTRIES_MAX),
            auth: Authenticator::from_options(&options),
            stats: ServerStats::default(),
            tls,
            server_id,
            server_name,
            started: Instant::now(),
            started_at: SystemTime::now(),
            client_addr: Mutex::new(None),
            http_addr: Mutex::new(None),
            clients: Mutex::new(HashMap::new()),
            closed_clients: Mutex::new(std::collections::VecDeque::new()),
            jetstream: std::sync::OnceLock::new(),
            registry: std::sync::OnceLock::new(),
            filters: crate::filter::subscriptions::Registry::default(),
            next_client_id: AtomicU64::new(1),
            options,
        })
    }

    /// A fresh connection id.
    pub fn next_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The INFO sent to a new connection.
    pub fn client_info(&self, client_id: u64, addr: SocketAddr) -> ServerInfo {
        let bound = lock(&self.client_addr).unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], self.options.port)));
        let auth_required = self.auth.is_required();
        ServerInfo {
            server_id: self.server_id.clone(),
            server_name: self.server_name.clone(),
            version: NATS_COMPATIBLE_VERSION.to_string(),
            proto: 1,
            go: format!("semaq {SEMAQ_VERSION}"),
            host: bound.ip().to_string(),
            port: bound.port(),
            headers: true,
            max_payload: self.options.payload_bytes_max,
            jetstream: self.jetstream.get().is_some(),
            client_id,
            client_ip: addr.ip().to_string(),
            auth_required,
            tls_required: self.tls.is_some(),
            tls_verify: self.options.tls.as_ref().is_some_and(|tls| tls.verify),
            nonce: auth_required.then(random_nonce),
            domain: self.options.jetstream_domain.clone(),
        }
    }

    /// Records an open connection.
    pub fn register(&self, client: &Arc<Client>) {
        lock(&self.clients).insert(client.id, client.clone());
    }

    /// Forgets an open connection, keeping it among the recently closed.
    pub fn unregister(&self, client: &Arc<Client>, reason: CloseReason) {
        lock(&self.clients).remove(&client.id);
        let (in_msgs, in_bytes) = client.inbound.snapshot();
        let (out_msgs, out_bytes) = client.outbound.traffic.snapshot();
        self.stats.inbound.record_many(in_msgs, in_bytes);
        self.stats.outbound.record_many(out_msgs, out_bytes);
        if matches!(reason, CloseReason::SlowConsumer | CloseReason::WriteTimeout) {
            bump(&self.stats.slow_consumers);
        }
        let mut closed = lock(&self.closed_clients);
        if closed.len() >= CLOSED_CLIENTS_MAX {
            closed.pop_front();
        }
        closed.push_back(ClosedClient { client: client.clone(), reason, stopped: SystemTime::now() });
    }
}

impl Shared {
    /// Publishes a message from the server itself (API replies, acks, consumer deliveries):
    /// routed by `route_subject`, delivered showing `message.subject`. Returns the deliveries.
    pub fn publish_as(&self, route_subject: &str, message: &Message<'_>) -> usize {
        let mut flush = FlushSet::default();
        let delivered = self.publish_batched(route_subject, message, &mut flush);
        flush.flush();
        delivered
    }

    /// Like [`Shared::publish_as`], leaving the writers' wake-up to the caller's `flush`, so a
    /// batch of server messages (acks, consumer deliveries) wakes each writer once.
    pub fn publish_batched(&self, route_subject: &str, message: &Message<'_>, flush: &mut FlushSet) -> usize {
        // Server messages mostly go to one-off inboxes: look them up without filling the cache.
        let matches = self.router.matches_uncached(route_subject);
        delivery::fan_out(&self.router, &matches, message, None, flush)
    }

    /// Publishes a message from the server itself to `subject`.
    pub fn publish(&self, subject: &str, headers: Option<&[u8]>, payload: &[u8]) -> usize {
        self.publish_as(subject, &Message { subject, reply: None, headers, payload, publisher: None })
    }

    /// Subscribes a server component to `filter`.
    pub fn subscribe_internal(
        &self,
        filter: &str,
        queue: Option<&str>,
        sink: Arc<dyn InternalSink>,
    ) -> Result<Arc<Subscription>, RouterError> {
        let subscription =
            Arc::new(Subscription::new(Sink::Internal(sink), filter.into(), queue.map(Into::into), "internal".into()));
        self.router.insert(filter, queue, SubscriberRef(subscription.clone()))?;
        Ok(subscription)
    }

    /// Removes a subscription made with [`Shared::subscribe_internal`].
    pub fn unsubscribe_internal(&self, subscription: &Arc<Subscription>) {
        let reference = SubscriberRef(subscription.clone());
        self.router.remove(&subscription.subject, subscription.queue.as_deref(), &reference);
    }

    /// Messages and bytes received and delivered since start: closed connections' totals plus
    /// the open ones'. Counting per connection keeps publishers off one shared cache line.
    pub fn traffic_totals(&self) -> ((u64, u64), (u64, u64)) {
        let (mut in_msgs, mut in_bytes) = self.stats.inbound.snapshot();
        let (mut out_msgs, mut out_bytes) = self.stats.outbound.snapshot();
        for client in lock(&self.clients).values() {
            let (msgs, bytes) = client.inbound.snapshot();
            in_msgs += msgs;
            in_bytes += bytes;
            let (msgs, bytes) = client.outbound.traffic.snapshot();
            out_msgs += msgs;
            out_bytes += bytes;
        }
        ((in_msgs, in_bytes), (out_msgs, out_bytes))
    }
}

/// Locks a mutex, recovering from poisoning: the maps it guards stay consistent per operation.
pub fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn random_server_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let tail: String = (0..55).map(|_| ALPHABET[rand::random::<u32>() as usize % ALPHABET.len()] as char).collect();
    format!("N{tail}")
}

fn random_nonce() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    (0..11).map(|_| ALPHABET[rand::random::<u32>() as usize % ALPHABET.len()] as char).collect()
}

/// A bound, not yet running server.
pub struct Server {
    shared: Arc<Shared>,
    listener: TcpListener,
    http_listener: Option<TcpListener>,
}

impl Server {
    /// Binds the listeners named by `options`.
    pub async fn bind(options: Options) -> Result<Self, StartError> {
        let shared = Shared::new(options)?;
        let address = format!("{}:{}", shared.options.host, shared.options.port);
        let listener = TcpListener::bind(&address).await.map_err(|source| StartError::Bind { address, source })?;
        *lock(&shared.client_addr) = listener.local_addr().ok();
        let http_listener = match shared.options.http_port {
            Some(port) => {
                let address = format!("{}:{}", shared.options.http_host, port);
                let http = TcpListener::bind(&address).await.map_err(|source| StartError::Bind { address, source })?;
                *lock(&shared.http_addr) = http.local_addr().ok();
                Some(http)
            }
            None => None,
        };
        let shared = Arc::new(shared);
        crate::registry::decode::bound_avro_allocations(shared.options.payload_bytes_max);
        crate::registry::start(&shared)?;
        crate::filter::subscriptions::start(&shared);
        if shared.options.jetstream {
            let jetstream = JetStream::start(&shared)?;
            crate::jetstream::api::start(&shared, jetstream.clone());
            crate::jetstream::consumers::subscribe(&shared, &jetstream);
            crate::jetstream::lineage::start(&shared, &jetstream);
            let _ = shared.jetstream.set(jetstream);
        }
        Ok(Self { shared, listener, http_listener })
    }

    /// The shared state (for tests and monitoring).
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// The bound client address.
    pub fn client_addr(&self) -> Option<SocketAddr> {
        *lock(&self.shared.client_addr)
    }

    /// The bound monitoring address.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        *lock(&self.shared.http_addr)
    }

    /// Writes the ports file (`<program>_<pid>.ports`) into `dir`.
    pub fn write_ports_file(&self, dir: &std::path::Path, program: &str) -> Result<PathBuf, StartError> {
        let nats: Vec<String> = self.client_addr().map(|a| format!("nats://{a}")).into_iter().collect();
        let monitoring: Vec<String> = self.http_addr().map(|a| format!("http://{a}")).into_iter().collect();
        let body = serde_json::json!({ "nats": nats, "monitoring": monitoring });
        let path = dir.join(format!("{program}_{}.ports", std::process::id()));
        std::fs::write(&path, body.to_string())
            .map_err(|source| StartError::Write { path: path.display().to_string(), source })?;
        Ok(path)
    }

    /// Serves until `shutdown` resolves, then drains connections and returns.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let Server { shared, listener, http_listener } = self;
        let http_task = http_listener.map(|http| tokio::spawn(crate::monitor::serve(shared.clone(), http)));
        let permits = Arc::new(Semaphore::new(shared.options.connections_max));
        let mut connections = tokio::task::JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => {
                    let Ok((socket, addr)) = accepted else { continue };
                    bump(&shared.stats.total_connections);
                    match permits.clone().try_acquire_owned() {
                        Ok(permit) => {
                            let shared = shared.clone();
                            connections.spawn(async move {
                                connection::serve(shared, socket, addr).await;
                                drop(permit);
                            });
                        }
                        Err(_) => refuse(&shared, socket),
                    }
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(listener);
        tracing::info!("Initiating Shutdown...");
        shutdown_connections(&shared, connections).await;
        if let Some(jetstream) = shared.jetstream.get() {
            jetstream.shutdown();
        }
        if let Some(task) = http_task {
            task.abort();
        }
        tracing::info!("Server Exiting..");
    }
}

fn refuse(shared: &Shared, socket: tokio::net::TcpStream) {
    bump(&shared.stats.refused_connections);
    tracing::warn!("maximum connections ({}) reached, refusing a connection", shared.options.connections_max);
    tokio::spawn(async move {
        let mut socket = socket;
        let _ = tokio::io::AsyncWriteExt::write_all(&mut socket, b"-ERR 'maximum connections exceeded'\r\n").await;
    });
}

async fn shutdown_connections(shared: &Shared, mut connections: tokio::task::JoinSet<()>) {
    let open: Vec<Arc<Client>> = lock(&shared.clients).values().cloned().collect();
    for client in open {
        client.outbound.close(CloseReason::ServerShutdown);
    }
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(limits::SHUTDOWN_FLUSH_TIMEOUT, drained).await.is_err() {
        tracing::warn!("connections did not flush in time; closing them");
        connections.abort_all();
    }
}
