//! The listener, and the one place that builds the whole server: it binds the client and
//! monitoring ports, starts each subsystem with the narrow handles it uses (bottom to top: bus,
//! registry, filters, JetStream), accepts connections up to the limit, and on shutdown stops
//! accepting, lets every connection flush, and returns.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use semaq_wire::info::ServerInfo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Semaphore};

use crate::agents::Agents;
use crate::auth::Authenticator;
use crate::bus::Bus;
use crate::connection::{self, Context};
use crate::filter::Filters;
use crate::identity::{Identity, NATS_COMPATIBLE_VERSION, SEMAQ_VERSION};
use crate::jetstream::per_account::JetStreams;
use crate::jetstream::Services;
pub use crate::lame_duck::Control;
use crate::latency::Latency;
use crate::limits;
use crate::mappings::{AccountMappings, SubjectMappings};
use crate::monitor::Monitor;
use crate::options::{Options, GLOBAL_ACCOUNT};
use crate::outbound::CloseReason;
use crate::registry::Registry;
use crate::stats::bump;
use crate::tls;
use crate::tokens::Tokens;
use crate::websocket;

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
    /// The agent network's subscriptions could not be made.
    #[error("cannot start the agent network: {0}")]
    Agents(crate::router::RouterError),
    /// JetStream could not start.
    #[error(transparent)]
    JetStream(#[from] crate::jetstream::JetStreamError),
    /// The operator JWT (decentralized auth) is not valid.
    #[error(transparent)]
    Trust(#[from] crate::auth::TrustError),
    /// An account import or export does not hold.
    #[error(transparent)]
    Imports(#[from] crate::account_links::StartError),
    /// JetStream is enabled in the system account, which nats-server does not allow.
    #[error("Not allowed to enable JetStream on the system account")]
    SystemAccountJetStream,
    /// The WebSocket listener could not start.
    #[error(transparent)]
    Websocket(#[from] crate::websocket::WebsocketError),
    /// A file (pid, ports, store directory) could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A bound, not yet running server.
pub struct Server {
    context: Arc<Context>,
    monitor: Arc<Monitor>,
    listener: TcpListener,
    http_listener: Option<TcpListener>,
    websocket: Option<websocket::Listener>,
}

impl Server {
    /// Binds the listeners named by `options` and starts every subsystem.
    pub async fn bind(mut options: Options) -> Result<Self, StartError> {
        let auth = Authenticator::from_options(&options)?;
        check_system_account(&options)?;
        add_jwt_accounts(&mut options, &auth);
        let options = Arc::new(options);
        if let Err(error) = crate::trace::init(options.trace_sample_ratio) {
            tracing::warn!(%error, "OpenTelemetry export is off");
        }
        let tls = options.tls.as_ref().map(tls::acceptor).transpose()?;
        let listener = bind(&options.host, options.port).await?;
        let http_listener = match options.http_port {
            Some(port) => Some(bind(&options.http_host, port).await?),
            None => None,
        };
        let websocket = match &options.websocket {
            Some(ws) => Some(websocket::Listener::bind(ws, options.payload_bytes_max).await?),
            None => None,
        };
        let client_addr = listener.local_addr().ok();
        let http_addr = http_listener.as_ref().and_then(|http| http.local_addr().ok());
        let identity = Identity::new(options.server_name.clone());
        let bus = Arc::new(account_bus(&options, &auth));
        let mappings = account_mappings(&options, &auth);
        let service_responses =
            crate::account_links::start(&bus, &options, auth.trust(), &identity.server_name, &mappings)?;
        if options.metrics.detail {
            bus.stats.subjects.enable(options.metrics.subject_depth);
        }
        crate::registry::decode::bound_avro_allocations(options.payload_bytes_max);
        let registry = crate::registry::start(&bus, &options)?;
        let filters = Arc::new(Filters::new(bus.clone(), Some(registry.clone())));
        crate::filter::subscriptions::start(&filters);
        let agents = crate::agents::start(&bus, &options.agents).map_err(StartError::Agents)?;
        let tokens = Arc::new(Tokens::default());
        let latency = Arc::new(Latency::new(options.latency_objective));
        let observe = Observe { tokens: tokens.clone(), latency: latency.clone() };
        let jetstream = match options.jetstream {
            true => Some(start_jetstream(&bus, &registry, &filters, (&agents, &observe), &options, &identity)?),
            false => None,
        };
        let info = info_template(&identity, &options, client_addr, &auth, jetstream.is_some());
        let monitor = Arc::new(Monitor {
            identity,
            options: options.clone(),
            bus: bus.clone(),
            client_addr,
            http_addr,
            auth_required: auth.is_required(),
            tls_required: tls.is_some(),
            registry,
            filters: filters.clone(),
            agents: agents.clone(),
            tokens: tokens.clone(),
            latency,
            jetstream,
            websocket_addr: websocket.as_ref().map(websocket::Listener::local_addr),
            mappings: mappings.clone(),
        });
        let events = crate::system::start(&monitor, service_responses);
        let context = Arc::new(Context { bus, options, auth, tls, info, filters, agents, tokens, events, mappings });
        Ok(Self { context, monitor, listener, http_listener, websocket })
    }

    /// The bound client address.
    pub fn client_addr(&self) -> Option<SocketAddr> {
        self.monitor.client_addr
    }

    /// The bound monitoring address.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.monitor.http_addr
    }

    /// The WebSocket listener's URL (`ws://` or `wss://`), when it is on.
    pub fn websocket_url(&self) -> Option<String> {
        self.websocket.as_ref().map(websocket::Listener::url)
    }

    /// Writes the ports file (`<program>_<pid>.ports`) into `dir`.
    pub fn write_ports_file(&self, dir: &std::path::Path, program: &str) -> Result<PathBuf, StartError> {
        let nats: Vec<String> = self.client_addr().map(|a| format!("nats://{a}")).into_iter().collect();
        let monitoring: Vec<String> = self.http_addr().map(|a| format!("http://{a}")).into_iter().collect();
        let mut body = serde_json::json!({ "nats": nats, "monitoring": monitoring });
        if let Some(url) = self.websocket_url() {
            body["websocket"] = serde_json::json!([url]);
        }
        let path = dir.join(format!("{program}_{}.ports", std::process::id()));
        std::fs::write(&path, body.to_string())
            .map_err(|source| StartError::Write { path: path.display().to_string(), source })?;
        Ok(path)
    }

    /// Serves until `shutdown` resolves, then drains connections and returns.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let (sender, control) = mpsc::channel(1);
        let signal = async move {
            shutdown.await;
            let _ = sender.send(Control::Interrupt).await;
            // Keep the sender: a closed channel means "no more signals", not "stop".
            std::future::pending::<()>().await
        };
        tokio::select! {
            () = self.run_controlled(control) => {}
            () = signal => {}
        }
    }

    /// Serves until `control` says to stop (at once, or after lame duck mode), then drains
    /// connections, closes JetStream and returns.
    pub async fn run_controlled(self, mut control: mpsc::Receiver<Control>) {
        let Server { context, monitor, listener, http_listener, websocket } = self;
        let http_task = http_listener.map(|http| tokio::spawn(crate::monitor::serve(monitor.clone(), http)));
        let permits = Arc::new(Semaphore::new(context.options.connections_max));
        let mut connections = tokio::task::JoinSet::new();
        let mut signals_open = true;
        let stop = loop {
            tokio::select! {
                next = control.recv(), if signals_open => match next {
                    Some(stop) => break stop,
                    None => signals_open = false,
                },
                accepted = listener.accept() => {
                    let Ok((socket, addr)) = accepted else { continue };
                    bump(&context.bus.stats.total_connections);
                    match permits.clone().try_acquire_owned() {
                        Ok(permit) => {
                            let context = context.clone();
                            connections.spawn(async move {
                                connection::serve(context, socket, addr).await;
                                drop(permit);
                            });
                        }
                        Err(_) => refuse(&context, socket),
                    }
                }
                accepted = websocket::accept(websocket.as_ref()) => {
                    if let (Ok(accepted), Some(ws)) = (accepted, &websocket) {
                        admit_websocket(&context, &permits, &mut connections, ws, accepted);
                    }
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        };
        // Closing the listener is what refuses new clients, in lame duck mode as in shutdown.
        drop(listener);
        drop(websocket);
        if stop == Control::LameDuck {
            crate::lame_duck::run(&context, &mut connections, &mut control).await;
        }
        tracing::info!("Initiating Shutdown...");
        shutdown_connections(&context.bus, connections).await;
        if let Some(jetstream) = &monitor.jetstream {
            tracing::info!("Initiating JetStream Shutdown...");
            jetstream.shutdown();
            tracing::info!("JetStream Shutdown");
        }
        if let Some(task) = http_task {
            task.abort();
        }
        tracing::info!("Server Exiting..");
    }
}

/// Serves a WebSocket client under the same connection limit as TCP clients, or refuses it.
fn admit_websocket(
    context: &Arc<Context>,
    permits: &Arc<Semaphore>,
    connections: &mut tokio::task::JoinSet<()>,
    ws: &websocket::Listener,
    (socket, addr): (tokio::net::TcpStream, SocketAddr),
) {
    bump(&context.bus.stats.total_connections);
    match permits.clone().try_acquire_owned() {
        Ok(permit) => {
            let serve = ws.serve(context.clone(), (socket, addr), websocket::Admission::Admitted);
            connections.spawn(async move {
                serve.await;
                drop(permit);
            });
        }
        Err(_) => {
            bump(&context.bus.stats.refused_connections);
            tracing::warn!("maximum connections ({}) reached, refusing a connection", context.options.connections_max);
            tokio::spawn(ws.serve(context.clone(), (socket, addr), websocket::Admission::Refused));
        }
    }
}

fn refuse(context: &Context, socket: tokio::net::TcpStream) {
    bump(&context.bus.stats.refused_connections);
    tracing::warn!("maximum connections ({}) reached, refusing a connection", context.options.connections_max);
    tokio::spawn(async move {
        let mut socket = socket;
        let _ = tokio::io::AsyncWriteExt::write_all(&mut socket, b"-ERR 'maximum connections exceeded'\r\n").await;
    });
}

async fn shutdown_connections(bus: &Bus, mut connections: tokio::task::JoinSet<()>) {
    for client in bus.clients.open() {
        client.outbound.close(CloseReason::ServerShutdown);
    }
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(limits::SHUTDOWN_FLUSH_TIMEOUT, drained).await.is_err() {
        tracing::warn!("connections did not flush in time; closing them");
        connections.abort_all();
    }
}

async fn bind(host: &str, port: u16) -> Result<TcpListener, StartError> {
    let address = format!("{host}:{port}");
    TcpListener::bind(&address).await.map_err(|source| StartError::Bind { address, source })
}

/// What JetStream feeds the observability endpoints.
struct Observe {
    tokens: Arc<Tokens>,
    latency: Arc<Latency>,
}

/// Starts a JetStream for every account that enables it (streams, API, ack routing, lineage
/// API), and the 10039 answers in the other accounts.
fn start_jetstream(
    bus: &Arc<Bus>,
    registry: &Arc<Registry>,
    filters: &Arc<Filters>,
    (agents, observe): (&Arc<Agents>, &Observe),
    options: &Arc<Options>,
    identity: &Identity,
) -> Result<Arc<JetStreams>, StartError> {
    let services = Services {
        bus: bus.clone(),
        registry: registry.clone(),
        filters: filters.clone(),
        options: options.clone(),
        server_id: identity.server_id.clone(),
        agents: agents.clone(),
        tokens: observe.tokens.clone(),
        latency: observe.latency.clone(),
    };
    let jetstreams = JetStreams::start(&services)?;
    crate::jetstream::not_enabled::start(bus, &jetstreams);
    Ok(jetstreams)
}

/// Each account's subject mappings (top-level ones are `$G`'s), for the accounts that have any.
/// The config's were checked as it was read, so one that fails here cannot happen; it would be
/// left out with an error.
fn account_mappings(options: &Options, auth: &Authenticator) -> AccountMappings {
    let configured = std::iter::once((GLOBAL_ACCOUNT, &options.mappings))
        .chain(options.accounts.iter().map(|account| (account.name.as_str(), &account.mappings)))
        .filter(|(_, mappings)| !mappings.is_empty());
    let mut tables = AccountMappings::new();
    for (account, mappings) in configured {
        match SubjectMappings::build(mappings) {
            Ok(table) => drop(tables.insert(account.to_string(), Arc::new(table))),
            Err((source, error)) => tracing::error!(%account, %source, %error, "subject mappings left out"),
        }
    }
    let from_jwts = auth.trust().into_iter().flat_map(|trust| trust.account_mappings());
    for (account, table) in from_jwts.filter(|(_, table)| !table.is_empty()) {
        tables.insert(account.to_string(), Arc::new(table.clone()));
    }
    tables
}

/// Lists the JWT accounts that have JetStream among the options' accounts, with their limits,
/// so each gets a JetStream as accounts from the config do. Sorted by key, so which one is the
/// home account when several have JetStream does not change between starts.
fn add_jwt_accounts(options: &mut Options, auth: &Authenticator) {
    let Some(trust) = auth.trust() else { return };
    let mut accounts: Vec<_> = trust.jetstream_accounts().collect();
    accounts.sort_by(|a, b| a.0.cmp(b.0));
    for (name, jetstream) in accounts {
        let account =
            crate::options::Account { name: name.to_string(), jetstream: Some(jetstream), ..Default::default() };
        options.accounts.push(account);
    }
}

/// A bus with a subject space for every account (config accounts by name, JWT accounts by
/// public key, `$G` and the system account), the broker's services in the home account.
fn account_bus(options: &Options, auth: &Authenticator) -> Bus {
    let home = options.home_account();
    let config_accounts = options.accounts.iter().map(|account| account.name.as_str());
    let jwt_accounts = auth.trust().into_iter().flat_map(|trust| trust.account_keys());
    // In operator mode the system account is one of the JWT accounts or none at all.
    let system = options.system_account().filter(|_| options.auth.operator.is_none());
    Bus::with_accounts(home, config_accounts.chain(jwt_accounts).chain(system))
}

/// nats-server refuses to start with JetStream in the system account.
fn check_system_account(options: &Options) -> Result<(), StartError> {
    let Some(system) = options.system_account() else { return Ok(()) };
    let jetstream = options.accounts.iter().any(|account| account.name == system && account.jetstream.is_some());
    match options.jetstream && jetstream {
        true => Err(StartError::SystemAccountJetStream),
        false => Ok(()),
    }
}

/// The INFO every connection is sent, before its own id, address and nonce are filled in.
fn info_template(
    identity: &Identity,
    options: &Options,
    client_addr: Option<SocketAddr>,
    auth: &Authenticator,
    jetstream: bool,
) -> ServerInfo {
    let bound = client_addr.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], options.port)));
    ServerInfo {
        server_id: identity.server_id.clone(),
        server_name: identity.server_name.clone(),
        version: NATS_COMPATIBLE_VERSION.to_string(),
        proto: 1,
        go: format!("semaq {SEMAQ_VERSION}"),
        host: bound.ip().to_string(),
        port: bound.port(),
        headers: true,
        max_payload: options.payload_bytes_max,
        jetstream,
        client_id: 0,
        client_ip: String::new(),
        auth_required: auth.is_required(),
        tls_required: options.tls.is_some(),
        tls_verify: options.tls.as_ref().is_some_and(|tls| tls.verify),
        nonce: None,
        domain: options.jetstream_domain.clone(),
        ldm: false,
    }
}
