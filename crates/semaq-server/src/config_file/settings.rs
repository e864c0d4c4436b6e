//! Maps the parsed tree onto [`Options`], one function per block, keys matched case-insensitively.
//!
//! Rules every setting follows:
//! - A key SemaQ does not know is a warning naming it (with its block path) and its line. A key used
//!   as `$variable` is a variable definition, not a mistake, and draws no warning.
//! - Inside `permissions` an unknown key is an error instead: ignoring a misspelt `deny` would grant
//!   more than the file says.
//! - A value of the wrong type or out of range is an error at the value's line and column.
//! - Limits of 0 mean the default, as in nats-server; `max_connections: 0` refuses every client, as in
//!   nats-server, and draws a warning.
//! - Durations are Go duration strings (`"2s"`, `"1m30s"`, `"300ms"`) or plain numbers of seconds.
//!   An unquoted `1m` is the number 1,000,000 to nats-server's parser, so it is rejected as ambiguous.
//! - Sizes are numbers (suffixes applied by the parser: `1k` = 1000, `1KB` = 1024) or strings, where a
//!   lone letter is binary as in nats-server (`"1G"` = 1024³) and `"64MB"` reads as unquoted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use semaq_wire::subject;

use super::syntax::{size_multiplier, Entry, Kind, Map, Value};
use super::{ConfigError, LoadReport, Location};
use crate::limits;
use crate::options::{
    self, Account, AccountJetStream, NkeyUser, Options, Permissions, ResponsePermission, SubjectPermission, TlsOptions,
    User,
};

mod imports;
mod mappings;
mod operator;
mod websocket;

/// Top-level nats-server settings for features SemaQ lacks; warned about as such rather than as unknown.
const NATS_ONLY_KEYS: &[&str] = &[
    "cluster",
    "gateway",
    "leafnodes",
    "leaf",
    "mqtt",
    "operator",
    "operators",
    "resolver",
    "resolver_preload",
    "trusted",
    "trusted_keys",
    "https",
    "https_port",
    "http_base_path",
    "client_advertise",
    "logtime",
    "logtime_utc",
    "syslog",
    "remote_syslog",
    "log_size_limit",
    "logfile_size_limit",
    "log_max_num",
    "logfile_max_num",
    "max_traced_msg_len",
    "trace_verbose",
    "trace_headers",
    "prof_port",
    "prof_block_rate",
    "ocsp",
    "ocsp_cache",
    "allow_non_tls",
    "no_header_support",
    "disable_sublist_cache",
    "no_sublist_cache",
    "connect_error_reports",
    "reconnect_error_reports",
    "default_js_domain",
    "max_sub_tokens",
    "max_subscription_tokens",
    "write_timeout",
    "proxy_protocol",
    "server_tags",
    "server_metadata",
];

/// Applies a parsed config to `options`, returning its warnings and which listener settings it gave.
pub(super) fn apply(tree: &Map, root: Option<Arc<Path>>, options: &mut Options) -> Result<LoadReport, ConfigError> {
    let mut mapper = Mapper {
        options,
        root,
        report: LoadReport::default(),
        store_dir_at: None,
        payload_at: None,
        no_auth_user_at: None,
        user_sites: Vec::new(),
        lame_duck_at: None,
        trust: operator::Pending::default(),
        link_sites: Vec::new(),
        authorization_given: false,
        websocket_at: None,
    };
    for entry in &tree.entries {
        mapper.top(entry)?;
    }
    mapper.finish_operator()?;
    mapper.check()?;
    mapper.open_global_beside_system_account();
    Ok(mapper.report)
}

struct Mapper<'o> {
    options: &'o mut Options,
    /// The loaded file; warnings about it say "line N", about included files "line N of FILE".
    root: Option<Arc<Path>>,
    report: LoadReport,
    store_dir_at: Option<Location>,
    payload_at: Option<Location>,
    no_auth_user_at: Option<Location>,
    /// Every user defined (authorization and accounts) with where, to catch duplicates.
    user_sites: Vec<(String, Location)>,
    /// Where the last lame duck setting was, for the grace-below-duration check.
    lame_duck_at: Option<Location>,
    /// Decentralized auth settings, gathered from several top-level keys.
    trust: operator::Pending,
    /// Where each account's exports and imports were written.
    link_sites: Vec<imports::LinkSite>,
    /// Whether the file has an `authorization` block.
    authorization_given: bool,
    /// Where the listening `websocket` block is, for the checks that need every user.
    websocket_at: Option<Location>,
}

impl Mapper<'_> {
    fn top(&mut self, entry: &Entry) -> Result<(), ConfigError> {
        let value = &entry.value;
        let key = entry.key.to_ascii_lowercase();
        let key = key.as_str();
        match key {
            "listen" => self.listen(value)?,
            "host" | "net" => {
                self.options.host = string(key, value)?;
                self.report.given.host = true;
            }
            "port" => {
                self.options.port = port(key, value, options::client_port)?;
                self.report.given.port = true;
            }
            "server_name" => self.server_name(value)?,
            "http" => self.http(value)?,
            "http_port" | "monitor_port" => {
                self.options.http_port = port(key, value, options::monitor_port)?;
                self.report.given.http_port = true;
            }
            "http_host" => {
                self.options.http_host = string(key, value)?;
                self.report.given.http_host = true;
            }
            _ => return self.top_limits(key, entry),
        }
        Ok(())
    }

    fn top_limits(&mut self, key: &str, entry: &Entry) -> Result<(), ConfigError> {
        let value = &entry.value;
        let i32_max = i64::from(i32::MAX);
        match key {
            "max_payload" => {
                self.options.payload_bytes_max = byte_limit(key, value, i32_max, limits::PAYLOAD_BYTES_MAX)?;
                self.payload_at = Some(value.at.clone());
            }
            "max_control_line" => {
                self.options.control_line_bytes_max = byte_limit(key, value, i32_max, limits::CONTROL_LINE_BYTES_MAX)?
            }
            "max_pending" => {
                self.options.pending_bytes_max = byte_limit(key, value, i64::MAX, limits::PENDING_BYTES_MAX)?
            }
            "max_connections" | "max_conn" => self.max_connections(key, value)?,
            "max_subscriptions" | "max_subs" => {
                self.options.subscriptions_per_connection_max =
                    count_limit(key, value, limits::SUBSCRIPTIONS_PER_CONNECTION_MAX)?
            }
            "ping_interval" => self.options.ping_interval = or_default(duration(key, value)?, limits::PING_INTERVAL),
            "ping_max" => self.options.pings_outstanding_max = pings(key, value)?,
            "write_deadline" => self.options.write_deadline = or_default(duration(key, value)?, limits::WRITE_DEADLINE),
            "lame_duck_duration" | "lame_duck_grace_period" => self.lame_duck(key, value)?,
            _ => return self.top_files(key, entry),
        }
        Ok(())
    }

    fn top_files(&mut self, key: &str, entry: &Entry) -> Result<(), ConfigError> {
        let value = &entry.value;
        match key {
            "no_auth_user" => {
                self.options.auth.no_auth_user = Some(string(key, value)?);
                self.no_auth_user_at = Some(value.at.clone());
            }
            "ports_file_dir" => self.options.ports_file_dir = Some(path(key, value)?),
            "pid_file" | "pidfile" => self.options.pid_file = Some(path(key, value)?),
            "log_file" | "logfile" => self.options.log_file = Some(path(key, value)?),
            "debug" => self.options.debug = boolean(key, value)?,
            "trace" => self.options.trace = boolean(key, value)?,
            "store_dir" | "storedir" => self.store_dir(key, value)?,
            "authorization" => self.authorization(value)?,
            "tls" => self.tls(value)?,
            "jetstream" => self.jetstream(value)?,
            "agents" => self.agents(value)?,
            "latency_objective" => self.options.latency_objective = positive_duration(key, value)?,
            "metrics" => self.metrics(value)?,
            "tracing" => self.tracing(value)?,
            "accounts" => self.accounts(value)?,
            "mappings" | "maps" => self.options.mappings = self.mappings(key, value)?,
            "operator" | "operators" | "trusted_operators" => self.operator(key, value)?,
            "resolver" => self.resolver(value)?,
            "resolver_preload" => self.resolver_preload(value)?,
            "system_account" | "system" => self.system_account(value)?,
            "no_system_account" | "no_system" | "no_sys_acc" => self.options.no_system_account = boolean(key, value)?,
            "websocket" | "ws" => self.websocket(value)?,
            _ => self.unknown(entry, ""),
        }
        Ok(())
    }

    /// nats-server's rules: a duration of at least 30 s, a grace period not negative and
    /// shorter than the duration.
    fn lame_duck(&mut self, key: &str, value: &Value) -> Result<(), ConfigError> {
        let given = duration(key, value)
            .map_err(|_| invalid(&value.at, format!("error parsing {key}: invalid duration {:?}", value.text)))?;
        if key == "lame_duck_duration" {
            if given < limits::LAME_DUCK_DURATION_MIN {
                return Err(invalid(
                    &value.at,
                    format!("invalid lame_duck_duration of {given:?}, minimum is 30 seconds"),
                ));
            }
            self.options.lame_duck_duration = given;
        } else {
            self.options.lame_duck_grace_period = given;
        }
        self.lame_duck_at = Some(value.at.clone());
        Ok(())
    }

    /// "line N" in the loaded file, "line N of FILE" in an included one.
    fn line_of(&self, at: &Location) -> String {
        match &at.file {
            Some(file) if Some(file) != self.root.as_ref() => format!("line {} of {}", at.line, file.display()),
            _ => format!("line {}", at.line),
        }
    }

    fn unknown(&mut self, entry: &Entry, block: &str) {
        if entry.referenced {
            return;
        }
        let name = if block.is_empty() { entry.key.clone() } else { format!("{block}.{}", entry.key) };
        let line = self.line_of(&entry.at);
        let warning = if block.is_empty() && NATS_ONLY_KEYS.contains(&entry.key.to_ascii_lowercase().as_str()) {
            format!("config key \"{name}\" at {line} is a nats-server feature SemaQ does not support, ignored")
        } else {
            format!("unknown config key \"{name}\" at {line}, ignored")
        };
        self.report.warnings.push(warning);
    }

    fn listen(&mut self, value: &Value) -> Result<(), ConfigError> {
        let (host, port) = host_port("listen", value, options::client_port)?;
        if let Some(host) = host {
            self.options.host = host;
            self.report.given.host = true;
        }
        self.options.port = port;
        self.report.given.port = true;
        Ok(())
    }

    fn http(&mut self, value: &Value) -> Result<(), ConfigError> {
        let (host, port) = host_port("http", value, options::monitor_port)?;
        if let Some(host) = host {
            self.options.http_host = host;
            self.report.given.http_host = true;
        }
        self.options.http_port = port;
        self.report.given.http_port = true;
        Ok(())
    }

    fn server_name(&mut self, value: &Value) -> Result<(), ConfigError> {
        let name = string("server_name", value)?;
        if name.contains(char::is_whitespace) {
            return Err(invalid(&value.at, format!("server_name cannot contain spaces, found {name:?}")));
        }
        self.options.server_name = Some(name);
        Ok(())
    }

    fn max_connections(&mut self, key: &str, value: &Value) -> Result<(), ConfigError> {
        let count = integer(key, value)?;
        self.options.connections_max = usize::try_from(count)
            .map_err(|_| invalid(&value.at, format!("\"{key}\" cannot be negative, found {count}")))?;
        if count == 0 {
            let line = self.line_of(&value.at);
            self.report
                .warnings
                .push(format!("{key}: 0 at {line} refuses every client connection (as in nats-server)"));
        }
        Ok(())
    }

    /// `store_dir` may be set at the top or in `jetstream`, not both (nats-server's rule against ambiguity).
    fn store_dir(&mut self, key: &str, value: &Value) -> Result<(), ConfigError> {
        if let Some(first) = &self.store_dir_at {
            let message = format!("store_dir is set twice (first at {})", self.line_of(first));
            return Err(invalid(&value.at, message));
        }
        self.options.store_dir = path(key, value)?;
        self.store_dir_at = Some(value.at.clone());
        Ok(())
    }

    fn authorization(&mut self, value: &Value) -> Result<(), ConfigError> {
        let map = block("authorization", value)?;
        self.authorization_given = true;
        let mut single: Option<(String, Location)> = None;
        let mut password = None;
        let mut token = None;
        let mut users: Option<Vec<User>> = None;
        let mut nkeys = Vec::new();
        let mut defaults = None;
        for entry in &map.entries {
            let v = &entry.value;
            match entry.key.to_ascii_lowercase().as_str() {
                "user" | "username" => single = Some((string("authorization.user", v)?, v.at.clone())),
                "pass" | "password" => password = Some((string("authorization.password", v)?, entry.referenced)),
                "token" => token = Some(string("authorization.token", v)?),
                "timeout" => {
                    self.options.auth_timeout = or_default(duration("authorization.timeout", v)?, limits::AUTH_TIMEOUT)
                }
                "users" => {
                    let (named, keyed) = self.users("authorization.users", v)?;
                    (users, nkeys) = (Some(named), keyed);
                }
                "permissions" | "default_permission" | "default_permissions" => {
                    defaults = Some(self.permissions("authorization.permissions", v)?)
                }
                _ => self.unknown(entry, "authorization"),
            }
        }
        let conflict = match (&single, &token, &users, &password) {
            (Some(_), Some(_), _, _) => Some("authorization cannot have both a user and a token"),
            (Some(_), _, Some(_), _) => Some("authorization cannot have both a single user and a users array"),
            (_, Some(_), Some(_), _) => Some("authorization cannot have both a token and a users array"),
            // A key such as `PASS` used as `$PASS` is a variable definition, which nats-server allows here.
            (None, _, _, Some((_, false))) => Some("authorization has a password but no user"),
            _ => None,
        };
        if let Some(message) = conflict {
            return Err(invalid(&value.at, message.to_string()));
        }
        let mut list = users.unwrap_or_default();
        self.options.auth.single_user = single.as_ref().map(|(username, _)| username.clone());
        if let Some((username, at)) = single {
            self.user_sites.push((username.clone(), at));
            let password = password.map(|(password, _)| password).unwrap_or_default();
            list.push(User { username, password, permissions: None });
        }
        give_default_permissions_to_nkeys(&mut nkeys, defaults.as_ref());
        give_default_permissions(&mut list, defaults);
        self.options.auth.users = list;
        self.options.auth.nkeys = nkeys;
        self.options.auth.token = token;
        Ok(())
    }

    /// The users of a `users` array: those with a name and password, and those with an nkey.
    fn users(&mut self, path: &str, value: &Value) -> Result<(Vec<User>, Vec<NkeyUser>), ConfigError> {
        let Kind::Array(items) = &value.kind else {
            return Err(wrong_type(path, "an array of users", value));
        };
        let (mut users, mut nkeys) = (Vec::new(), Vec::new());
        for item in items {
            match self.nkey_user(path, item)? {
                Some(nkey) => nkeys.push(nkey),
                None => users.push(self.user(path, item)?),
            }
        }
        Ok((users, nkeys))
    }

    fn user(&mut self, path: &str, item: &Value) -> Result<User, ConfigError> {
        let map = block(path, item)?;
        let mut user = User::default();
        let mut named = false;
        for entry in &map.entries {
            let v = &entry.value;
            match entry.key.to_ascii_lowercase().as_str() {
                "user" | "username" => {
                    user.username = string(&format!("{path}.user"), v)?;
                    named = true;
                }
                "pass" | "password" => user.password = string(&format!("{path}.password"), v)?,
                "permission" | "permissions" | "authorization" => {
                    user.permissions = Some(self.permissions(&format!("{path}.permissions"), v)?)
                }
                _ => self.unknown(entry, path),
            }
        }
        if !named {
            return Err(invalid(&item.at, format!("a user in \"{path}\" needs a user name")));
        }
        self.user_sites.push((user.username.clone(), item.at.clone()));
        Ok(user)
    }

    fn permissions(&mut self, path: &str, value: &Value) -> Result<Permissions, ConfigError> {
        let map = block(path, value)?;
        let mut permissions = Permissions::default();
        for entry in &map.entries {
            let v = &entry.value;
            match entry.key.to_ascii_lowercase().as_str() {
                "pub" | "publish" | "import" => {
                    permissions.publish = subject_permission(&format!("{path}.publish"), v, false)?
                }
                "sub" | "subscribe" | "export" => {
                    permissions.subscribe = subject_permission(&format!("{path}.subscribe"), v, true)?
                }
                "allow_responses" | "publish_allow_responses" => {
                    permissions.responses = self.allow_responses(&format!("{path}.{}", entry.key), v)?
                }
                _ if entry.referenced => {}
                _ => {
                    let message =
                        format!("unknown key \"{}\" in \"{path}\"; permissions take publish and subscribe", entry.key);
                    return Err(invalid(&entry.at, message));
                }
            }
        }
        Ok(permissions)
    }

    /// `allow_responses`: `true`, or `{ max, expires }` where 0 keeps nats-server's default and a
    /// negative value means no bound.
    fn allow_responses(&mut self, path: &str, value: &Value) -> Result<Option<ResponsePermission>, ConfigError> {
        let map = match &value.kind {
            Kind::Bool(on) => return Ok(on.then(ResponsePermission::default)),
            Kind::Map(map) => map,
            _ => return Err(wrong_type(path, "true, false or a block { max, expires }", value)),
        };
        let mut responses = ResponsePermission::default();
        for entry in &map.entries {
            let v = &entry.value;
            match entry.key.to_ascii_lowercase().as_str() {
                "max" | "max_msgs" | "max_messages" | "max_responses" => {
                    let max = integer(&format!("{path}.max"), v)?;
                    if max != 0 {
                        responses.msgs_max = u64::try_from(max).ok();
                    }
                }
                "expires" | "expiration" | "ttl" => {
                    let expires = response_expiry(&format!("{path}.expires"), v)?;
                    if expires != Some(Duration::ZERO) {
                        responses.expires = expires;
                    }
                }
                _ if entry.referenced => {}
                _ => {
                    let message = format!("unknown key \"{}\" in \"{path}\"; it takes max and expires", entry.key);
                    return Err(invalid(&entry.at, message));
                }
            }
        }
        Ok(Some(responses))
    }

    fn tls(&mut self, value: &Value) -> Result<(), ConfigError> {
        self.options.tls = Some(self.tls_options("tls", value)?);
        Ok(())
    }

    /// A `tls { }` block; `name` is its path (`tls`, `websocket.tls`) in messages.
    fn tls_options(&mut self, name: &str, value: &Value) -> Result<TlsOptions, ConfigError> {
        let map = block(name, value)?;
        let (mut cert_file, mut key_file, mut ca_file) = (None, None, None);
        let (mut verify, mut map_users) = (false, false);
        let mut timeout = limits::TLS_HANDSHAKE_TIMEOUT;
        for entry in &map.entries {
            let v = &entry.value;
            match entry.key.to_ascii_lowercase().as_str() {
                "cert_file" => cert_file = Some(path("tls.cert_file", v)?),
                "key_file" => key_file = Some(path("tls.key_file", v)?),
                "ca_file" => ca_file = Some(path("tls.ca_file", v)?),
                "verify" => verify = boolean("tls.verify", v)?,
                "verify_and_map" => {
                    // As nats-server: mapping needs a verified certificate, so it sets verify too.
                    map_users = boolean("tls.verify_and_map", v)?;
                    verify = map_users;
                }
                "timeout" => timeout = or_default(duration("tls.timeout", v)?, limits::TLS_HANDSHAKE_TIMEOUT),
                _ => self.unknown(entry, name),
            }
        }
        let (Some(cert_file), Some(key_file)) = (cert_file, key_file) else {
            return Err(invalid(&value.at, format!("{name} needs both cert_file and key_file")));
        };
        Ok(TlsOptions { cert_file, key_file, ca_file, verify, map: map_users, timeout })
    }

    fn jetstream(&mut self, value: &Value) -> Result<(), ConfigError> {
        self.options.jetstream = match &value.kind {
            Kind::Bool(on) => *on,
            Kind::String(text) => enabled_word("jetstream", text, value)?,
            Kind::Map(map) => self.jetstream_block(map)?,
            _ => return Err(wrong_type("jetstream", "a boolean, \"enabled\", \"disabled\" or a block", value)),
        };
        Ok(())
    }

    /// A `jetstream { }` block enables JetStream unless it says `enabled: false`.
    fn jetstream_block(&mut self, map: &Map) -> Result<bool, ConfigError> {
        let mut enabled = true;
        for entry in &map.entries {
            let v = &entry.value;
            match entry.key.to_ascii_lowercase().as_str() {
                "store_dir" | "store" | "storedir" => self.store_dir("jetstream.store_dir", v)?,
                "max_memory_store" | "max_mem_store" | "max_mem" => {
                    self.options.jetstream_memory_bytes_max = optional_size("jetstream.max_memory_store", v)?
                }
                "max_file_store" | "max_file" => {
                    self.options.jetstream_file_bytes_max = optional_size("jetstream.max_file_store", v)?
                }
                "domain" => self.options.jetstream_domain = Some(string("jetstream.domain", v)?),
                "sync" | "sync_interval" => {
                    let text = string("jetstream.sync", v)?;
                    if crate::options::SyncPolicy::parse(&text).is_none() {
                        let message = format!(
                            "jetstream.sync must be \"always\", \"never\" or an interval like \"100ms\", not {text:?}"
                        );
                        return Err(invalid(&v.at, message));
                    }
                    self.options.jetstream_sync = Some(text);
                }
                "enabled" | "enable" => enabled = boolean("jetstream.enabled", v)?,
                _ => self.unknown(entry, "jetstream"),
            }
        }
        Ok(enabled)
    }

    /// `agents { heartbeat_interval, heartbeats_missed_max, wait, request_timeout,
    /// service_discovery, service_subjects }`.
    fn agents(&mut self, value: &Value) -> Result<(), ConfigError> {
        for entry in &block("agents", value)?.entries {
            let v = &entry.value;
            let agents = &mut self.options.agents;
            match entry.key.to_ascii_lowercase().as_str() {
                "heartbeat_interval" => agents.heartbeat_interval = positive_duration("agents.heartbeat_interval", v)?,
                "heartbeats_missed_max" => {
                    let missed = integer("agents.heartbeats_missed_max", v)?;
                    agents.heartbeats_missed_max = u32::try_from(missed)
                        .ok()
                        .filter(|n| (1..=100).contains(n))
                        .ok_or_else(|| invalid(&v.at, "agents.heartbeats_missed_max must be 1 to 100".to_string()))?;
                }
                "wait" => agents.wait = duration("agents.wait", v)?,
                "request_timeout" => agents.request_timeout = positive_duration("agents.request_timeout", v)?,
                "service_discovery" => agents.service_discovery = boolean("agents.service_discovery", v)?,
                "service_subjects" => {
                    let Kind::Array(items) = &v.kind else {
                        return Err(wrong_type("agents.service_subjects", "an array of subjects", v));
                    };
                    agents.service_subjects =
                        items.iter().map(|item| string("agents.service_subjects", item)).collect::<Result<_, _>>()?;
                }
                _ => self.unknown(entry, "agents"),
            }
        }
        Ok(())
    }

    /// `metrics { detail, subject_depth }`.
    fn metrics(&mut self, value: &Value) -> Result<(), ConfigError> {
        for entry in &block("metrics", value)?.entries {
            let v = &entry.value;
            match entry.key.to_ascii_lowercase().as_str() {
                "detail" => self.options.metrics.detail = boolean("metrics.detail", v)?,
                "subject_depth" => {
                    let depth = integer("metrics.subject_depth", v)?;
                    let most = limits::METRICS_SUBJECT_DEPTH_MAX;
                    self.options.metrics.subject_depth = usize::try_from(depth)
                        .ok()
                        .filter(|n| (1..=most).contains(n))
                        .ok_or_else(|| invalid(&v.at, format!("metrics.subject_depth must be 1 to {most}")))?;
                }
                _ => self.unknown(entry, "metrics"),
            }
        }
        Ok(())
    }

    /// `tracing { sample_ratio }`: the OpenTelemetry sampling ratio, 0 to 1.
    fn tracing(&mut self, value: &Value) -> Result<(), ConfigError> {
        for entry in &block("tracing", value)?.entries {
            let v = &entry.value;
            match entry.key.to_ascii_lowercase().as_str() {
                "sample_ratio" => {
                    let ratio = match v.kind {
                        Kind::Float(ratio) => ratio,
                        Kind::Integer(ratio) => ratio as f64,
                        _ => return Err(wrong_type("tracing.sample_ratio", "a number from 0 to 1", v)),
                    };
                    if !(0.0..=1.0).contains(&ratio) {
                        return Err(invalid(&v.at, "tracing.sample_ratio must be 0 to 1".to_string()));
                    }
                    self.options.trace_sample_ratio = Some(ratio);
                }
                _ => self.unknown(entry, "tracing"),
            }
        }
        Ok(())
    }

    fn accounts(&mut self, value: &Value) -> Result<(), ConfigError> {
        let mut accounts: Vec<Account> = Vec::new();
        match &value.kind {
            Kind::Array(items) => {
                for item in items {
                    let name = string("accounts", item)?;
                    if accounts.iter().any(|account| account.name == name) {
                        return Err(invalid(&item.at, format!("account \"{name}\" is listed twice")));
                    }
                    accounts.push(Account { name, ..Account::default() });
                }
            }
            Kind::Map(map) => {
                // Keys referenced as `$variables` are definitions, not accounts (nats-server skips them too).
                for entry in map.entries.iter().filter(|entry| !entry.referenced) {
                    accounts.push(self.account(entry)?);
                }
            }
            _ => return Err(wrong_type("accounts", "a block of accounts or an array of names", value)),
        }
        if accounts.len() > limits::ACCOUNTS_MAX {
            return Err(invalid(&value.at, format!("accounts lists more than {} accounts", limits::ACCOUNTS_MAX)));
        }
        self.options.accounts = accounts;
        Ok(())
    }

    fn account(&mut self, entry: &Entry) -> Result<Account, ConfigError> {
        let path = format!("accounts.{}", entry.key);
        let map = block(&path, &entry.value)?;
        let mut account = Account { name: entry.key.clone(), ..Account::default() };
        let mut defaults = None;
        for inner in &map.entries {
            let v = &inner.value;
            match inner.key.to_ascii_lowercase().as_str() {
                "users" => (account.users, account.nkeys) = self.users(&format!("{path}.users"), v)?,
                "jetstream" => account.jetstream = self.account_jetstream(&format!("{path}.jetstream"), v)?,
                "default_permissions" => defaults = Some(self.permissions(&format!("{path}.default_permissions"), v)?),
                "exports" => account.exports = self.exports(&entry.key, &format!("{path}.exports"), v)?,
                "imports" => account.imports = self.imports(&entry.key, &format!("{path}.imports"), v)?,
                "mappings" | "maps" => account.mappings = self.mappings(&format!("{path}.mappings"), v)?,
                _ => self.unknown(inner, &path),
            }
        }
        give_default_permissions_to_nkeys(&mut account.nkeys, defaults.as_ref());
        give_default_permissions(&mut account.users, defaults);
        Ok(account)
    }

    fn account_jetstream(&mut self, path: &str, value: &Value) -> Result<Option<AccountJetStream>, ConfigError> {
        let map = match &value.kind {
            Kind::Bool(on) => return Ok(on.then(AccountJetStream::default)),
            Kind::String(text) => return Ok(enabled_word(path, text, value)?.then(AccountJetStream::default)),
            Kind::Map(map) => map,
            _ => return Err(wrong_type(path, "a boolean, \"enabled\", \"disabled\" or a block", value)),
        };
        let mut limits = AccountJetStream::default();
        for entry in &map.entries {
            let v = &entry.value;
            let key = format!("{path}.{}", entry.key);
            match entry.key.to_ascii_lowercase().as_str() {
                "max_memory" | "max_mem" | "mem" | "memory" => limits.memory_bytes_max = optional_size(&key, v)?,
                "max_store" | "max_file" | "max_disk" | "store" | "disk" => {
                    limits.file_bytes_max = optional_size(&key, v)?
                }
                "max_streams" | "streams" => limits.streams_max = optional_count(&key, v)?,
                "max_consumers" | "consumers" => limits.consumers_max = optional_count(&key, v)?,
                "max_ack_pending" => limits.ack_pending_max = optional_count(&key, v)?,
                "max_bytes_required" | "max_stream_bytes" | "max_bytes" => {
                    limits.max_bytes_required = boolean(&key, v)?
                }
                "mem_max_stream_bytes" | "memory_max_stream_bytes" => {
                    limits.memory_stream_bytes_max = optional_size(&key, v)?
                }
                "disk_max_stream_bytes" | "store_max_stream_bytes" => {
                    limits.file_stream_bytes_max = optional_size(&key, v)?
                }
                _ => self.unknown(entry, path),
            }
        }
        Ok(Some(limits))
    }

    /// Checks that span settings: unique user names, `no_auth_user` naming a user, payload within
    /// pending, operator mode without users or accounts of its own.
    fn check(&self) -> Result<(), ConfigError> {
        self.check_operator()?;
        self.check_imports()?;
        self.check_websocket()?;
        for (index, (name, at)) in self.user_sites.iter().enumerate() {
            if let Some((_, first)) = self.user_sites[..index].iter().find(|(other, _)| other == name) {
                let message = format!("user \"{name}\" is defined twice (first at {})", self.line_of(first));
                return Err(invalid(at, message));
            }
        }
        if let (Some(at), Some(name)) = (&self.no_auth_user_at, &self.options.auth.no_auth_user) {
            if !self.user_sites.iter().any(|(user, _)| user == name) {
                let message = format!("no_auth_user \"{name}\" is not a user defined in authorization or accounts");
                return Err(invalid(at, message));
            }
        }
        if let Some(at) = &self.payload_at {
            let (payload, pending) = (self.options.payload_bytes_max, self.options.pending_bytes_max);
            if payload > pending {
                let message = format!("max_payload ({payload}) cannot be larger than max_pending ({pending})");
                return Err(invalid(at, message));
            }
        }
        if let Some(at) = &self.lame_duck_at {
            let (grace, duration) = (self.options.lame_duck_grace_period, self.options.lame_duck_duration);
            if grace >= duration {
                let message = format!(
                    "lame duck grace period ({grace:?}) should be strictly lower than lame duck duration ({duration:?})"
                );
                return Err(invalid(at, message));
            }
        }
        Ok(())
    }
}

impl Mapper<'_> {
    /// nats-server gives clients without credentials `$G` when the system account is the only
    /// account configured (it is there to hold the system users), with no `authorization`
    /// block nor `no_auth_user`: the file's accounts must not lock out everyone else.
    fn open_global_beside_system_account(&mut self) {
        let options = &mut *self.options;
        let only_system = match options.accounts.as_slice() {
            [account] => options.system_account() == Some(account.name.as_str()),
            _ => false,
        };
        if only_system && options.auth.operator.is_none() && options.auth.no_auth_user.is_none() {
            options.auth.no_auth_global = !self.authorization_given;
        }
    }
}

fn give_default_permissions(users: &mut [User], defaults: Option<Permissions>) {
    let Some(defaults) = defaults else { return };
    for user in users.iter_mut().filter(|user| user.permissions.is_none()) {
        user.permissions = Some(defaults.clone());
    }
}

fn give_default_permissions_to_nkeys(users: &mut [NkeyUser], defaults: Option<&Permissions>) {
    let Some(defaults) = defaults else { return };
    for user in users.iter_mut().filter(|user| user.permissions.is_none()) {
        user.permissions = Some(defaults.clone());
    }
}

fn invalid(at: &Location, message: String) -> ConfigError {
    ConfigError::Invalid { at: at.clone(), message }
}

fn found(value: &Value) -> String {
    match &value.kind {
        Kind::String(text) => format!("the string {text:?}"),
        Kind::Integer(_) | Kind::Float(_) => format!("the number {}", value.text),
        Kind::Bool(_) => format!("the boolean {}", value.text),
        Kind::Array(_) => "an array".to_string(),
        Kind::Map(_) => "a block".to_string(),
    }
}

fn wrong_type(key: &str, expected: &str, value: &Value) -> ConfigError {
    invalid(&value.at, format!("expected {expected} for \"{key}\", found {}", found(value)))
}

fn string(key: &str, value: &Value) -> Result<String, ConfigError> {
    match &value.kind {
        Kind::String(text) => Ok(text.clone()),
        _ => Err(wrong_type(key, "a string", value)),
    }
}

fn path(key: &str, value: &Value) -> Result<PathBuf, ConfigError> {
    string(key, value).map(PathBuf::from)
}

fn boolean(key: &str, value: &Value) -> Result<bool, ConfigError> {
    match &value.kind {
        Kind::Bool(on) => Ok(*on),
        _ => Err(wrong_type(key, "true or false", value)),
    }
}

fn integer(key: &str, value: &Value) -> Result<i64, ConfigError> {
    match &value.kind {
        Kind::Integer(number) => Ok(*number),
        _ => Err(wrong_type(key, "an integer", value)),
    }
}

fn block<'v>(key: &str, value: &'v Value) -> Result<&'v Map, ConfigError> {
    match &value.kind {
        Kind::Map(map) => Ok(map),
        _ => Err(wrong_type(key, "a block { ... }", value)),
    }
}

fn enabled_word(key: &str, text: &str, value: &Value) -> Result<bool, ConfigError> {
    match text.to_ascii_lowercase().as_str() {
        "enabled" | "enable" => Ok(true),
        "disabled" | "disable" => Ok(false),
        _ => Err(invalid(&value.at, format!("expected \"enabled\" or \"disabled\" for \"{key}\", found {text:?}"))),
    }
}

fn port<T>(key: &str, value: &Value, meaning: fn(i64) -> Result<T, String>) -> Result<T, ConfigError> {
    let number = integer(key, value)?;
    meaning(number).map_err(|why| invalid(&value.at, format!("invalid port {number} for \"{key}\": {why}")))
}

/// `"host:port"` (host optional, IPv6 in brackets) or a bare port number.
fn host_port<T>(
    key: &str,
    value: &Value,
    meaning: fn(i64) -> Result<T, String>,
) -> Result<(Option<String>, T), ConfigError> {
    let text = match &value.kind {
        Kind::Integer(_) => return Ok((None, port(key, value, meaning)?)),
        Kind::String(text) => text,
        _ => return Err(wrong_type(key, "\"host:port\" or a port", value)),
    };
    let malformed = || invalid(&value.at, format!("expected \"host:port\" or a port for \"{key}\", found {text:?}"));
    let (host, port_text) = split_host_port(text).ok_or_else(malformed)?;
    let number: i64 = port_text.parse().map_err(|_| malformed())?;
    let port =
        meaning(number).map_err(|why| invalid(&value.at, format!("invalid port {number} for \"{key}\": {why}")))?;
    // Go's ":4222" listens on every interface.
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    Ok((Some(host.to_string()), port))
}

fn split_host_port(text: &str) -> Option<(&str, &str)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return Some((host, after.strip_prefix(':')?));
    }
    let (host, port) = text.rsplit_once(':')?;
    (!host.contains(':')).then_some((host, port))
}

/// A byte size: a number or a size string such as `"1G"` or `"64MB"`.
fn size(key: &str, value: &Value) -> Result<i64, ConfigError> {
    match &value.kind {
        Kind::Integer(number) => Ok(*number),
        Kind::String(text) => parse_size(text).ok_or_else(|| {
            invalid(&value.at, format!("expected a size such as 64MB or \"1G\" for \"{key}\", found {text:?}"))
        }),
        _ => Err(wrong_type(key, "a size", value)),
    }
}

fn parse_size(text: &str) -> Option<i64> {
    let text = text.trim();
    let digits_end = text.find(|c: char| !c.is_ascii_digit() && c != '-').unwrap_or(text.len());
    let (number, suffix) = text.split_at(digits_end);
    let number: i64 = number.parse().ok()?;
    let multiplier = match suffix.len() {
        0 => 1,
        // nats-server's getStorageSize reads a lone letter in a string as binary.
        1 => size_multiplier(&format!("{suffix}b"))?,
        _ => size_multiplier(suffix)?,
    };
    number.checked_mul(multiplier)
}

fn at_least_zero(key: &str, value: &Value, number: i64) -> Result<u64, ConfigError> {
    u64::try_from(number).map_err(|_| invalid(&value.at, format!("\"{key}\" cannot be negative, found {}", value.text)))
}

/// A byte limit where 0 means the default and `most` is the largest accepted.
fn byte_limit(key: &str, value: &Value, most: i64, default: usize) -> Result<usize, ConfigError> {
    let number = size(key, value)?;
    bounded(key, value, number, most, default)
}

/// A count where 0 means the default.
fn count_limit(key: &str, value: &Value, default: usize) -> Result<usize, ConfigError> {
    let number = integer(key, value)?;
    bounded(key, value, number, i64::MAX, default)
}

fn bounded(key: &str, value: &Value, number: i64, most: i64, default: usize) -> Result<usize, ConfigError> {
    let number = at_least_zero(key, value, number)?;
    let too_big = || invalid(&value.at, format!("\"{key}\" is too large: {} (at most {most})", value.text));
    if number > most.unsigned_abs() {
        return Err(too_big());
    }
    match number {
        0 => Ok(default),
        _ => usize::try_from(number).map_err(|_| too_big()),
    }
}

fn pings(key: &str, value: &Value) -> Result<u32, ConfigError> {
    let number = at_least_zero(key, value, integer(key, value)?)?;
    match number {
        0 => Ok(limits::PINGS_OUTSTANDING_MAX),
        _ => u32::try_from(number).map_err(|_| invalid(&value.at, format!("\"{key}\" is too large: {number}"))),
    }
}

/// A size where -1 means no limit (`None`), as nats-server's JetStream settings use it.
fn optional_size(key: &str, value: &Value) -> Result<Option<u64>, ConfigError> {
    match size(key, value)? {
        -1 => Ok(None),
        number => at_least_zero(key, value, number).map(Some),
    }
}

/// A count where -1 means no limit (`None`).
fn optional_count(key: &str, value: &Value) -> Result<Option<u64>, ConfigError> {
    match integer(key, value)? {
        -1 => Ok(None),
        number => at_least_zero(key, value, number).map(Some),
    }
}

fn or_default(duration: Duration, default: Duration) -> Duration {
    if duration.is_zero() {
        default
    } else {
        duration
    }
}

/// A duration: a Go duration string, or a number of seconds.
fn positive_duration(key: &str, value: &Value) -> Result<Duration, ConfigError> {
    let given = duration(key, value)?;
    if given.is_zero() {
        return Err(invalid(&value.at, format!("{key} must be longer than zero")));
    }
    Ok(given)
}

fn duration(key: &str, value: &Value) -> Result<Duration, ConfigError> {
    let negative = || invalid(&value.at, format!("\"{key}\" cannot be negative, found {}", value.text));
    match &value.kind {
        Kind::String(text) => parse_go_duration(text).ok_or_else(|| {
            let message =
                format!("expected a duration such as \"2s\", \"300ms\" or \"1m30s\" for \"{key}\", found {text:?}");
            invalid(&value.at, message)
        }),
        Kind::Integer(number) if value.text.trim_start_matches('-').contains(|c: char| !c.is_ascii_digit()) => {
            let text = &value.text;
            let message = format!(
                "ambiguous value {text} for \"{key}\": unquoted it is the number {number} (size suffix), not a duration; write \"{text}\""
            );
            Err(invalid(&value.at, message))
        }
        Kind::Integer(seconds) => u64::try_from(*seconds).map(Duration::from_secs).map_err(|_| negative()),
        Kind::Float(seconds) if *seconds < 0.0 => Err(negative()),
        Kind::Float(seconds) => Duration::try_from_secs_f64(*seconds)
            .map_err(|_| invalid(&value.at, format!("\"{key}\" is out of range: {}", value.text))),
        _ => Err(wrong_type(key, "a duration", value)),
    }
}

/// Go's `time.ParseDuration` for non-negative values: `300ms`, `1.5s`, `1h2m3s`, units ns us µs ms s m h.
fn parse_go_duration(text: &str) -> Option<Duration> {
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        let unit_end = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_end);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        nanos = nanos.checked_add(scaled(number, unit_nanos)?)?;
        rest = after;
    }
    u64::try_from(nanos).ok().map(Duration::from_nanos)
}

/// `number` (digits with an optional fraction) times `unit` nanoseconds.
fn scaled(number: &str, unit: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
    let mut nanos = whole.checked_mul(unit)?;
    if !fraction.is_empty() {
        let digits = &fraction[..fraction.len().min(18)];
        let parsed: u128 = digits.parse().ok()?;
        nanos = nanos.checked_add(parsed * unit / 10_u128.pow(digits.len() as u32))?;
    }
    Some(nanos)
}

/// A response permission's `expires`: a Go duration string as nats-server requires (no plain
/// number of seconds); a negative one is `None`, no expiry.
fn response_expiry(key: &str, value: &Value) -> Result<Option<Duration>, ConfigError> {
    let Kind::String(text) = &value.kind else {
        return Err(wrong_type(key, "a duration string such as \"1m\"", value));
    };
    let (negative, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    let Some(parsed) = parse_go_duration(magnitude) else {
        let message =
            format!("expected a duration such as \"2s\", \"300ms\" or \"1m30s\" for \"{key}\", found {text:?}");
        return Err(invalid(&value.at, message));
    };
    Ok((!negative || parsed.is_zero()).then_some(parsed))
}

/// A subject permission: a subject, an array of them (both an allow list), or `{ allow, deny }`.
fn subject_permission(path: &str, value: &Value, queues: bool) -> Result<Option<SubjectPermission>, ConfigError> {
    let Kind::Map(map) = &value.kind else {
        return Ok(Some(SubjectPermission { allow: subjects(path, value, queues)?, deny: Vec::new() }));
    };
    if map.entries.is_empty() {
        return Ok(None);
    }
    let mut permission = SubjectPermission::default();
    for entry in &map.entries {
        match entry.key.to_ascii_lowercase().as_str() {
            "allow" => permission.allow = subjects(&format!("{path}.allow"), &entry.value, queues)?,
            "deny" => permission.deny = subjects(&format!("{path}.deny"), &entry.value, queues)?,
            _ if entry.referenced => {}
            _ => {
                let message = format!("unknown key \"{}\" in \"{path}\"; only allow and deny are permitted", entry.key);
                return Err(invalid(&entry.at, message));
            }
        }
    }
    Ok(Some(permission))
}

fn subjects(path: &str, value: &Value, queues: bool) -> Result<Vec<String>, ConfigError> {
    let items: Vec<&Value> = match &value.kind {
        Kind::String(_) => vec![value],
        Kind::Array(items) => items.iter().collect(),
        _ => return Err(wrong_type(path, "a subject or an array of subjects", value)),
    };
    items
        .into_iter()
        .map(|item| {
            let text = string(path, item)?;
            if !is_permission_subject(&text, queues) {
                return Err(invalid(&item.at, format!("invalid subject {text:?} in \"{path}\"")));
            }
            Ok(text)
        })
        .collect()
}

/// A subject filter; subscribe permissions may also name a queue group as `"subject queue"`.
fn is_permission_subject(text: &str, queues: bool) -> bool {
    if subject::is_valid_filter(text) {
        return true;
    }
    let mut parts = text.split_whitespace();
    match (parts.next(), parts.next(), parts.next()) {
        (Some(filter), Some(queue), None) => {
            queues && subject::is_valid_filter(filter) && subject::is_valid_queue(queue)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let cases = [
            ("0", Duration::ZERO),
            ("2s", Duration::from_secs(2)),
            ("300ms", Duration::from_millis(300)),
            ("1m", Duration::from_secs(60)),
            ("2h", Duration::from_secs(7200)),
            ("1h2m3s", Duration::from_secs(3723)),
            ("1.5s", Duration::from_millis(1500)),
            ("250us", Duration::from_micros(250)),
            ("250µs", Duration::from_micros(250)),
            ("10ns", Duration::from_nanos(10)),
            ("+5s", Duration::from_secs(5)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_go_duration(text), Some(expected), "{text}");
        }
        for text in ["", "5", "-1s", "1d", "s", "1.2.3s", "1s2", "abc"] {
            assert_eq!(parse_go_duration(text), None, "{text}");
        }
    }

    #[test]
    fn size_strings() {
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("1K"), Some(1024));
        assert_eq!(parse_size("64MB"), Some(64 << 20));
        assert_eq!(parse_size("2GiB"), Some(2 << 30));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("-1"), Some(-1));
        assert_eq!(parse_size("1Q"), None);
        assert_eq!(parse_size("lots"), None);
    }

    #[test]
    fn host_and_port_splitting() {
        assert_eq!(split_host_port("0.0.0.0:4222"), Some(("0.0.0.0", "4222")));
        assert_eq!(split_host_port(":4222"), Some(("", "4222")));
        assert_eq!(split_host_port("[::1]:4222"), Some(("::1", "4222")));
        assert_eq!(split_host_port("::1:4222"), None);
        assert_eq!(split_host_port("localhost"), None);
    }

    #[test]
    fn permission_subjects() {
        assert!(is_permission_subject("orders.>", false));
        assert!(is_permission_subject("orders.* workers", true));
        assert!(!is_permission_subject("orders.* workers", false));
        assert!(!is_permission_subject("orders..x", true));
        assert!(!is_permission_subject("a b c", true));
    }
}
