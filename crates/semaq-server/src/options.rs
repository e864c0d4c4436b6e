//! The broker's settings: defaults, then the config file, then command-line flags on top.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::limits;

/// Everything that configures a running server.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Name reported in INFO and monitoring; generated when unset.
    pub server_name: Option<String>,
    /// Address the client listener binds.
    pub host: String,
    /// Client port; 0 picks a free port (nats-server's `-p -1`).
    pub port: u16,
    /// Address the monitoring HTTP listener binds.
    pub http_host: String,
    /// Monitoring port; `None` turns monitoring off, `Some(0)` picks a free port.
    pub http_port: Option<u16>,
    /// JetStream enabled.
    pub jetstream: bool,
    /// Where streams, consumers and the schema registry live.
    pub store_dir: PathBuf,
    /// Memory storage limit for JetStream, bytes.
    pub jetstream_memory_bytes_max: Option<u64>,
    /// File storage limit for JetStream, bytes.
    pub jetstream_file_bytes_max: Option<u64>,
    /// JetStream domain.
    pub jetstream_domain: Option<String>,
    /// When streams fsync: `always` (default), `never`, or an interval like `100ms`.
    pub jetstream_sync: Option<String>,
    /// Largest message accepted, headers included.
    pub payload_bytes_max: usize,
    /// Longest control line accepted.
    pub control_line_bytes_max: usize,
    /// Bytes queued per client before it is disconnected as a slow consumer.
    pub pending_bytes_max: usize,
    /// Concurrent connections accepted.
    pub connections_max: usize,
    /// Subscriptions per connection.
    pub subscriptions_per_connection_max: usize,
    /// Interval between server pings to a client.
    pub ping_interval: Duration,
    /// Unanswered pings before a client is closed.
    pub pings_outstanding_max: u32,
    /// Time a client has to authenticate.
    pub auth_timeout: Duration,
    /// Time one socket write may block.
    pub write_deadline: Duration,
    /// Who may connect, and what they may do.
    pub auth: AuthOptions,
    /// TLS for client connections.
    pub tls: Option<TlsOptions>,
    /// Log to this file instead of standard error.
    pub log_file: Option<PathBuf>,
    /// Write the process id here.
    pub pid_file: Option<PathBuf>,
    /// Write `<name>_<pid>.ports` JSON with the bound URLs in this directory.
    pub ports_file_dir: Option<PathBuf>,
    /// Debug logging.
    pub debug: bool,
    /// Protocol trace logging.
    pub trace: bool,
    /// Named accounts with their users.
    pub accounts: Vec<Account>,
    /// Subject mappings of the default account `$G` (top-level `mappings`).
    pub mappings: Vec<crate::mappings::SubjectMapping>,
    /// The account named by `system_account` outside operator mode.
    pub system_account: Option<String>,
    /// `no_system_account`: no implicit `$SYS` account (unless JetStream needs one).
    pub no_system_account: bool,
    /// The agent network: heartbeats, waits, timeouts, service discovery.
    pub agents: AgentOptions,
    /// The end-to-end latency objective, publish to delivery (`latency_objective`).
    pub latency_objective: Duration,
    /// What `/metrics` shows (config block `metrics { }`).
    pub metrics: MetricsOptions,
    /// OpenTelemetry sampling ratio (config `tracing { sample_ratio }`), parent-based, used
    /// when `OTEL_TRACES_SAMPLER` is unset; export itself follows the `OTEL_*` variables.
    pub trace_sample_ratio: Option<f64>,
    /// Lame duck mode: the span over which connections are closed (`lame_duck_duration`).
    pub lame_duck_duration: Duration,
    /// Lame duck mode: the wait before the first connection is closed (`lame_duck_grace_period`).
    pub lame_duck_grace_period: Duration,
    /// The WebSocket listener (config block `websocket { }`); `None` when off.
    pub websocket: Option<WebsocketOptions>,
}

/// What `/metrics` shows (config block `metrics { detail, subject_depth }`).
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsOptions {
    /// Adds the per-consumer and per-subject-prefix series (off: low cardinality by default).
    pub detail: bool,
    /// Subject tokens that make a prefix in the per-subject-prefix series.
    pub subject_depth: usize,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        Self { detail: false, subject_depth: limits::METRICS_SUBJECT_DEPTH }
    }
}

/// How the agent network judges liveness and waits (config block `agents { }`).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentOptions {
    /// How often agents are expected to beat, and how often services are asked `$SRV.INFO`.
    pub heartbeat_interval: Duration,
    /// Beats an agent may miss before it expires.
    pub heartbeats_missed_max: u32,
    /// Longest a request waits for an agent with free capacity before its 503.
    pub wait: Duration,
    /// Longest a routed request may go unanswered before it counts as a timeout.
    pub request_timeout: Duration,
    /// Whether NATS services (`$SRV.INFO`) are discovered as agents.
    pub service_discovery: bool,
    /// Service endpoint subjects routed as intents of the same name, metadata or not.
    pub service_subjects: Vec<String>,
}

impl Default for AgentOptions {
    fn default() -> Self {
        Self {
            heartbeat_interval: limits::AGENT_HEARTBEAT_INTERVAL,
            heartbeats_missed_max: limits::AGENT_HEARTBEATS_MISSED_MAX,
            wait: limits::AGENT_WAIT,
            request_timeout: limits::AGENT_REQUEST_TIMEOUT,
            service_discovery: true,
            service_subjects: Vec::new(),
        }
    }
}

impl AgentOptions {
    /// Silence after which an agent has expired.
    pub fn expiry(&self) -> Duration {
        self.heartbeat_interval.saturating_mul(self.heartbeats_missed_max.max(1))
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            server_name: None,
            host: "127.0.0.1".to_string(),
            port: NATS_DEFAULT_PORT,
            http_host: "127.0.0.1".to_string(),
            http_port: Some(8222),
            jetstream: true,
            store_dir: PathBuf::from("./semaq-data"),
            jetstream_memory_bytes_max: None,
            jetstream_file_bytes_max: None,
            jetstream_domain: None,
            jetstream_sync: None,
            payload_bytes_max: limits::PAYLOAD_BYTES_MAX,
            control_line_bytes_max: limits::CONTROL_LINE_BYTES_MAX,
            pending_bytes_max: limits::PENDING_BYTES_MAX,
            connections_max: limits::CONNECTIONS_MAX,
            subscriptions_per_connection_max: limits::SUBSCRIPTIONS_PER_CONNECTION_MAX,
            ping_interval: limits::PING_INTERVAL,
            pings_outstanding_max: limits::PINGS_OUTSTANDING_MAX,
            auth_timeout: limits::AUTH_TIMEOUT,
            write_deadline: limits::WRITE_DEADLINE,
            auth: AuthOptions::default(),
            tls: None,
            log_file: None,
            pid_file: None,
            ports_file_dir: None,
            debug: false,
            trace: false,
            accounts: Vec::new(),
            system_account: None,
            no_system_account: false,
            agents: AgentOptions::default(),
            latency_objective: limits::LATENCY_OBJECTIVE,
            metrics: MetricsOptions::default(),
            trace_sample_ratio: None,
            lame_duck_duration: limits::LAME_DUCK_DURATION,
            lame_duck_grace_period: limits::LAME_DUCK_GRACE_PERIOD,
            websocket: None,
            mappings: Vec::new(),
        }
    }
}

/// Authentication settings; with none set, anyone may connect.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuthOptions {
    /// A shared token (`--auth`, `authorization { token }`).
    pub token: Option<String>,
    /// Users with passwords (`--user/--pass`, `authorization { user, password }` or `users [...]`).
    pub users: Vec<User>,
    /// Clients that send no credentials are treated as this user.
    pub no_auth_user: Option<String>,
    /// Which of `users` is the single `authorization { user, password }` (or `--user`), which
    /// nats-server keeps apart from the `users` array: a WebSocket override replaces it.
    pub single_user: Option<String>,
    /// Clients that send no credentials at all join `$G` (nats-server's rule when the only
    /// account configured is the system account and there is no `authorization` block).
    pub no_auth_global: bool,
    /// Users that prove an nkey by signing the INFO nonce (`users [ { nkey: U... } ]`).
    pub nkeys: Vec<NkeyUser>,
    /// Decentralized JWT auth: the trusted operator and the accounts it signed.
    pub operator: Option<OperatorOptions>,
}

impl AuthOptions {
    /// Whether clients must present credentials.
    pub fn is_required(&self, accounts: &[Account]) -> bool {
        self.token.is_some()
            || !self.users.is_empty()
            || !self.nkeys.is_empty()
            || self.operator.is_some()
            || accounts.iter().any(|account| !account.users.is_empty() || !account.nkeys.is_empty())
    }
}

/// A user identified by a public nkey (`U...`) rather than a name and password.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NkeyUser {
    /// The user's public nkey.
    pub nkey: String,
    /// Publish/subscribe restrictions; `None` allows everything.
    pub permissions: Option<Permissions>,
}

/// Decentralized auth (`operator`, `resolver: MEMORY`, `resolver_preload`, `system_account`), as text:
/// the JWTs are decoded and verified when the server starts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperatorOptions {
    /// The trusted operators' JWTs (`operator: <file or JWT>`, several allowed).
    pub jwts: Vec<String>,
    /// Account public key → account JWT (`resolver_preload`).
    pub preload: Vec<(String, String)>,
    /// The system account's public key (`system_account`; else the operator's).
    pub system_account: Option<String>,
}

/// One user and what it may do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct User {
    /// Login name.
    pub username: String,
    /// Password, compared in constant time. A value starting with `$2` would be bcrypt (not supported).
    pub password: String,
    /// Publish/subscribe restrictions; `None` allows everything.
    pub permissions: Option<Permissions>,
}

/// Publish and subscribe restrictions of a user.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Permissions {
    /// Subjects the user may publish to.
    pub publish: Option<SubjectPermission>,
    /// Subjects the user may subscribe to.
    pub subscribe: Option<SubjectPermission>,
    /// Replies the user may send to the requests delivered to it (`allow_responses`, a user
    /// JWT's `resp`). With it, publishing without an allow list allows nothing but those replies.
    pub responses: Option<ResponsePermission>,
}

/// How many replies a user may send to each request delivered to it, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponsePermission {
    /// Replies per request; `None` unlimited.
    pub msgs_max: Option<u64>,
    /// How long after delivery a reply is allowed; `None` for ever.
    pub expires: Option<Duration>,
}

impl Default for ResponsePermission {
    fn default() -> Self {
        Self { msgs_max: Some(limits::RESPONSE_MSGS_MAX), expires: Some(limits::RESPONSE_EXPIRES) }
    }
}

/// Allow and deny lists of subject filters (wildcards allowed). Deny wins over allow.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SubjectPermission {
    /// When non-empty, only matching subjects are allowed.
    pub allow: Vec<String>,
    /// Matching subjects are refused.
    pub deny: Vec<String>,
}

/// TLS settings for the client listener.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsOptions {
    /// PEM certificate chain.
    pub cert_file: PathBuf,
    /// PEM private key.
    pub key_file: PathBuf,
    /// PEM CA bundle for verifying client certificates.
    pub ca_file: Option<PathBuf>,
    /// Require and verify client certificates (mutual TLS).
    pub verify: bool,
    /// `verify_and_map`: the client certificate names the user (implies `verify`).
    pub map: bool,
    /// Handshake timeout.
    pub timeout: Duration,
}

/// A named account (nats-server `accounts { NAME { users [...] } }`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Account {
    /// Account name.
    pub name: String,
    /// Users that belong to it.
    pub users: Vec<User>,
    /// JetStream enabled for the account, with its limits.
    pub jetstream: Option<AccountJetStream>,
    /// Nkey users that belong to it.
    pub nkeys: Vec<NkeyUser>,
    /// Streams and services it offers other accounts (`exports`).
    pub exports: Vec<crate::imports::Export>,
    /// Streams and services it takes from other accounts (`imports`).
    pub imports: Vec<crate::imports::Import>,
    /// Subject mappings applied to what its clients publish (`mappings`).
    pub mappings: Vec<crate::mappings::SubjectMapping>,
}

/// JetStream limits of an account.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AccountJetStream {
    /// Memory storage, bytes.
    pub memory_bytes_max: Option<u64>,
    /// File storage, bytes.
    pub file_bytes_max: Option<u64>,
    /// Streams.
    pub streams_max: Option<u64>,
    /// Consumers per stream.
    pub consumers_max: Option<u64>,
    /// Unacknowledged messages per consumer (`max_ack_pending`).
    pub ack_pending_max: Option<u64>,
    /// `max_bytes` of one memory stream (`memory_max_stream_bytes`).
    pub memory_stream_bytes_max: Option<u64>,
    /// `max_bytes` of one file stream (`store_max_stream_bytes`).
    pub file_stream_bytes_max: Option<u64>,
    /// Every stream must set `max_bytes` (`max_bytes_required`).
    pub max_bytes_required: bool,
    /// Tier name (`R1`, `R3`...) → its limits, when an account JWT has tiered limits; the
    /// fields above are then unused.
    pub tiers: BTreeMap<String, AccountJetStream>,
}

/// When appended messages are fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Before each batch is acknowledged (the default: an ack means on disk).
    Always,
    /// Every interval; an ack means written to the OS.
    Interval(Duration),
    /// Left to the OS.
    Never,
}

impl SyncPolicy {
    /// Reads `always`, `never`, or an interval like `100ms` / `1s`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "always" => Some(SyncPolicy::Always),
            "never" => Some(SyncPolicy::Never),
            other => parse_duration(other).map(SyncPolicy::Interval),
        }
    }

    /// The policy's name for stream info.
    pub fn describe(&self) -> String {
        match self {
            SyncPolicy::Always => "always".into(),
            SyncPolicy::Never => "never".into(),
            SyncPolicy::Interval(every) => format!("{}ms", every.as_millis()),
        }
    }
}

/// Reads `250ms`, `2s` or `1m`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let value: u64 = number.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(value)),
        "s" => Some(Duration::from_secs(value)),
        "m" => Some(Duration::from_secs(value * 60)),
        _ => None,
    }
}

/// Which listener settings a source gave explicitly rather than leaving at their defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Given {
    /// Client host (`-a`, `host`/`net`, `listen: "host:port"`).
    pub host: bool,
    /// Client port (`-p`, `port`, `listen`).
    pub port: bool,
    /// Monitoring host (`--http_host`, `http_host`, `http: "host:port"`).
    pub http_host: bool,
    /// Monitoring port (`-m`, `http_port`/`monitor_port`, `http`).
    pub http_port: bool,
}

impl Given {
    /// Settings given by either source.
    pub fn union(self, other: Given) -> Given {
        Given {
            host: self.host || other.host,
            port: self.port || other.port,
            http_host: self.http_host || other.http_host,
            http_port: self.http_port || other.http_port,
        }
    }
}

/// nats-server's client port, which it also uses when a port of 0 is given.
const NATS_DEFAULT_PORT: u16 = 4222;

/// The client port a nats-server port number means: -1 picks a free port (0), 0 means the default 4222.
pub fn client_port(number: i64) -> Result<u16, String> {
    match number {
        -1 => Ok(0),
        0 => Ok(NATS_DEFAULT_PORT),
        1..=65535 => Ok(number as u16),
        _ => Err("expected a port between 1 and 65535, or -1 for a random free port".to_string()),
    }
}

/// The monitoring port a nats-server port number means: -1 picks a free port, 0 turns monitoring off.
pub fn monitor_port(number: i64) -> Result<Option<u16>, String> {
    match number {
        -1 => Ok(Some(0)),
        0 => Ok(None),
        1..=65535 => Ok(Some(number as u16)),
        _ => Err("expected a port between 1 and 65535, -1 for a random free port, or 0 for none".to_string()),
    }
}

/// nats-server's WebSocket listener (config block `websocket { }`).
#[derive(Debug, Clone, PartialEq)]
pub struct WebsocketOptions {
    /// Address the WebSocket listener binds.
    pub host: String,
    /// WebSocket port; 0 picks a free port (`port: -1`).
    pub port: u16,
    /// TLS for WebSocket clients (`wss://`); `None` only with `no_tls: true`.
    pub tls: Option<TlsOptions>,
    /// Refuse (403) a browser whose `Origin` is not this server's own scheme, host and port.
    pub same_origin: bool,
    /// When non-empty, refuse (403) a browser whose `Origin` is not one of these.
    pub allowed_origins: Vec<Origin>,
    /// Time from accepting the socket to a finished upgrade (TLS included).
    pub handshake_timeout: Duration,
    /// `compression: true`: permessage-deflate is negotiated with clients that offer it.
    pub compression: bool,
    /// The block's own `authorization { }` and `no_auth_user`, for WebSocket clients only.
    pub auth: WebsocketAuth,
    /// Cookies of the upgrade request that stand in for credentials a CONNECT leaves out.
    pub cookies: CookieNames,
    /// Extra `name: value` lines of the `101 Switching Protocols` response (`headers { }`).
    pub headers: Vec<(String, String)>,
    /// How often an idle WebSocket client is pinged, instead of the server's `ping_interval`.
    pub ping_interval: Option<Duration>,
}

/// `websocket { authorization { user, password | token, timeout }, no_auth_user }`: when a
/// user, token or `no_auth_user` is set, WebSocket clients log in with these instead of the
/// server's single user, token and `no_auth_user` (nats-server's auth override).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WebsocketAuth {
    /// The single user's name.
    pub username: Option<String>,
    /// The single user's password.
    pub password: Option<String>,
    /// A shared token; checked before the single user when both are set, as nats-server does.
    pub token: Option<String>,
    /// Time a WebSocket client has to authenticate, instead of the server's `auth_timeout`.
    pub timeout: Option<Duration>,
    /// WebSocket clients without credentials are this user (of `authorization { users }` or an account).
    pub no_auth_user: Option<String>,
}

impl WebsocketAuth {
    /// Whether WebSocket clients log in with these settings rather than the server's.
    pub fn overrides(&self) -> bool {
        self.username.is_some() || self.token.is_some() || self.no_auth_user.is_some()
    }
}

/// Names of the cookies (`jwt_cookie`, `user_cookie`, `pass_cookie`, `token_cookie`) read from
/// a WebSocket upgrade request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CookieNames {
    /// The cookie holding a user JWT.
    pub jwt: Option<String>,
    /// The cookie holding a user name.
    pub user: Option<String>,
    /// The cookie holding a password.
    pub pass: Option<String>,
    /// The cookie holding a token.
    pub token: Option<String>,
}

impl CookieNames {
    /// Whether any cookie is configured, so the `Cookie` header is worth reading.
    pub fn any(&self) -> bool {
        self.jwt.is_some() || self.user.is_some() || self.pass.is_some() || self.token.is_some()
    }
}

impl Default for WebsocketOptions {
    fn default() -> Self {
        Self {
            host: "0.0.0.0".to_string(),
            port: 0,
            tls: None,
            same_origin: false,
            allowed_origins: Vec::new(),
            handshake_timeout: limits::WEBSOCKET_HANDSHAKE_TIMEOUT,
            compression: false,
            auth: WebsocketAuth::default(),
            cookies: CookieNames::default(),
            headers: Vec::new(),
            ping_interval: None,
        }
    }
}

/// A web origin: scheme, host and port (the port filled in from the scheme when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `http` or `https` (lowercase).
    pub scheme: String,
    /// Host name or address, without IPv6 brackets.
    pub host: String,
    /// Port, 80 or 443 when the origin names none.
    pub port: u16,
}

impl Origin {
    /// Reads `scheme://host[:port]` (a trailing path is ignored, as browsers send none).
    pub fn parse(text: &str) -> Result<Self, String> {
        let (scheme, rest) = text.split_once("://").ok_or_else(|| format!("{text:?} is not an absolute URL"))?;
        let scheme = scheme.to_ascii_lowercase();
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
        Self::from_authority(&scheme, authority).ok_or_else(|| format!("{text:?}: host is required"))
    }

    /// `host[:port]` as sent in a `Host` header, under `scheme`.
    pub fn from_authority(scheme: &str, authority: &str) -> Option<Self> {
        let (host, port) = match authority.strip_prefix('[') {
            Some(rest) => {
                let (host, after) = rest.split_once(']')?;
                (host, after.strip_prefix(':'))
            }
            None => match authority.rsplit_once(':') {
                Some((host, port)) if !host.contains(':') => (host, Some(port)),
                _ => (authority, None),
            },
        };
        if host.is_empty() {
            return None;
        }
        let port = match port {
            Some(digits) => digits.parse().ok()?,
            None if scheme.eq_ignore_ascii_case("https") || scheme.eq_ignore_ascii_case("wss") => 443,
            None => 80,
        };
        Some(Self { scheme: scheme.to_ascii_lowercase(), host: host.to_ascii_lowercase(), port })
    }
}

/// nats-server's global account: the users, token and no-auth clients of the server itself.
pub const GLOBAL_ACCOUNT: &str = "$G";

/// nats-server's default system account, made when no other is named.
pub const SYSTEM_ACCOUNT: &str = "$SYS";

impl Options {
    /// The account the broker's own services (JetStream, the agent network, `$SEMAQ.>` APIs)
    /// live in: the one that enables JetStream, else `$G`. nats-server gives each such account a
    /// JetStream; SemaQ has one, so with several the first listed gets it.
    pub fn home_account(&self) -> &str {
        self.home_account_config().map_or(GLOBAL_ACCOUNT, |account| account.name.as_str())
    }

    /// The system account, as nats-server picks it: in operator mode the one `system_account`
    /// names, else the one a lone operator's JWT names, else none (nats-server's implicit `$SYS`
    /// is no account a trusted operator signed, so it refuses it); otherwise the one
    /// `system_account` names, else an account named `$SYS`, else an implicit `$SYS`, which
    /// `no_system_account` turns off unless JetStream is on (nats-server's JetStream makes one
    /// regardless).
    pub fn system_account(&self) -> Option<&str> {
        if let Some(operator) = &self.auth.operator {
            return operator.system_account.as_deref();
        }
        if let Some(name) = &self.system_account {
            return Some(name);
        }
        let named = self.accounts.iter().any(|account| account.name == SYSTEM_ACCOUNT);
        (named || !self.no_system_account || self.jetstream).then_some(SYSTEM_ACCOUNT)
    }

    /// The configured account the broker's services live in, when it is not `$G`.
    pub fn home_account_config(&self) -> Option<&Account> {
        self.accounts.iter().find(|account| account.jetstream.is_some())
    }
}
