//! nats-server's command line: the same flags, spelled every way Go's `flag` package accepts them.
//!
//! Each flag may be written `-name` or `--name`, its value either the next argument or after `=`
//! (`-p 4222`, `-p=4222`, `--port 4222`, `--port=4222`). Switches take no separate value but accept
//! `=true`/`=false` (`-js`, `-js=false`). Multi-letter short flags such as `-DV` are flags of their own,
//! not bundles of `-D` and `-V`, exactly as in nats-server. The first argument that is not a flag ends
//! the flags; like nats-server, only `help` and `version` are accepted there.
//!
//! Settings are layered: [`Options::default`], then the config file (`-c`), then the flags given, then
//! [`finalize`] for the rules that depend on which sources set what. [`Flags::resolve`] does all four.

use std::path::PathBuf;

use crate::config_file::{self, ConfigError};
use crate::limits;
use crate::options::{client_port, monitor_port, Given, Options, TlsOptions, User};

/// What the command line asked for; `None` fields were not given and leave the option alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Flags {
    /// `-c/--config`: the configuration file to load before applying the flags.
    pub config_file: Option<PathBuf>,
    /// `-h/--help` (or a `help` argument): print [`usage`] and exit.
    pub help: bool,
    /// `-v/--version` (or a `version` argument): print the version and exit.
    pub version: bool,
    /// `-a/--addr/--net`: client listener host.
    pub host: Option<String>,
    /// `-p/--port`: client port, already translated (`-1` → 0 for a random port, 0 → 4222).
    pub port: Option<u16>,
    /// `-n/--name/--server_name`.
    pub server_name: Option<String>,
    /// `--http_host`: monitoring listener host.
    pub http_host: Option<String>,
    /// `-m/--http_port`, translated: `Some(None)` is monitoring off (`-m 0`), `Some(Some(0))` a random port (`-m -1`).
    pub http_port: Option<Option<u16>>,
    /// `-js/--jetstream`.
    pub jetstream: Option<bool>,
    /// `-sd/--store_dir`.
    pub store_dir: Option<PathBuf>,
    /// `-l/--log`.
    pub log_file: Option<PathBuf>,
    /// `-P/--pid`.
    pub pid_file: Option<PathBuf>,
    /// `--ports_file_dir`.
    pub ports_file_dir: Option<PathBuf>,
    /// `--user`; always given together with `--pass`.
    pub user: Option<String>,
    /// `--pass`.
    pub password: Option<String>,
    /// `--auth`: a shared token.
    pub token: Option<String>,
    /// `-D/--debug` (and `-DV`).
    pub debug: Option<bool>,
    /// `-V/--trace` (and `-DV`, `-VV`).
    pub trace: Option<bool>,
    /// `--tls`; `Some(false)` (`--tls=false`) turns TLS off whatever else says.
    pub tls: Option<bool>,
    /// `--tlscert`.
    pub tls_cert: Option<PathBuf>,
    /// `--tlskey`.
    pub tls_key: Option<PathBuf>,
    /// `--tlsverify`: require client certificates; implies TLS.
    pub tls_verify: Option<bool>,
    /// `--tlscacert`: CA bundle for client certificates.
    pub tls_ca_cert: Option<PathBuf>,
    /// `-sl/--signal <command>[=<pid>]`: signal a running server instead of starting one.
    pub signal: Option<SignalRequest>,
}

/// What `--signal` asks of a running server (nats-server's commands).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalCommand {
    /// `ldm`: lame duck mode (SIGUSR2).
    LameDuck,
    /// `stop`: kill at once (SIGKILL).
    Stop,
    /// `quit`: shut down (SIGINT).
    Quit,
    /// `term`: shut down unless in lame duck mode (SIGTERM).
    Term,
}

/// A parsed `--signal` value: the command, and the pid (or pid file) when given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalRequest {
    /// The command.
    pub command: SignalCommand,
    /// What follows `=`: a pid, or a file holding one; `None` to find the one running server.
    pub pid: Option<String>,
}

/// Reads `--signal`'s value: `ldm`, `stop`, `quit` or `term`, optionally `=<pid>` or `=<pid file>`.
pub fn signal_request(flag: &str, value: &str) -> Result<SignalRequest, FlagError> {
    let mut parts = value.split('=');
    let command = match parts.next().unwrap_or_default() {
        "ldm" => SignalCommand::LameDuck,
        "stop" => SignalCommand::Stop,
        "quit" => SignalCommand::Quit,
        "term" => SignalCommand::Term,
        "reopen" | "reload" => {
            return Err(invalid(flag, value, "SemaQ does not reopen logs or reload its configuration".to_string()))
        }
        other => return Err(invalid(flag, value, format!("unknown signal {other:?}"))),
    };
    let pid = parts.next().map(str::to_string);
    let extra: Vec<&str> = parts.collect();
    if !extra.is_empty() {
        return Err(invalid(flag, value, format!("invalid signal parameters: {extra:?}")));
    }
    Ok(SignalRequest { command, pid })
}

/// A command line that cannot be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    /// A flag neither SemaQ nor nats-server knows.
    #[error("unknown flag {0} (see --help)")]
    Unknown(String),
    /// A nats-server flag for a feature SemaQ does not have.
    #[error("flag {0} is a nats-server flag SemaQ does not support (see --help)")]
    Unsupported(String),
    /// A flag that needs a value came last.
    #[error("flag {0} needs a value")]
    MissingValue(String),
    /// A flag's value could not be read.
    #[error("invalid value {value:?} for flag {flag}: {reason}")]
    InvalidValue {
        /// The flag as written.
        flag: String,
        /// The value given.
        value: String,
        /// What was expected.
        reason: String,
    },
    /// An argument that starts with `-` but is not shaped like a flag (`---p`, `-=x`).
    #[error("bad flag syntax: {0}")]
    BadSyntax(String),
    /// A positional argument other than `help` or `version`.
    #[error("unrecognized command {0:?} (only \"help\" and \"version\" may follow the flags)")]
    UnexpectedArgument(String),
    /// Flags that only make sense together, or not together.
    #[error("{0}")]
    Conflict(String),
}

/// Applies the rules that depend on which sources gave what, once the config file and flags are in.
///
/// - Monitoring: `Options::default()` serves monitoring on 8222, SemaQ's embedded default for a bare
///   `semaq-server`. When the client port was given (`-p`, `port`, `listen`) but no monitoring port was
///   given anywhere (`-m`, `http`, `http_port`), monitoring is turned off, which is what nats-server does
///   with the same command line or config, so SemaQ can stand in for it without opening an extra port.
/// - Monitoring host: when the client host was given but the monitoring host was not, monitoring binds
///   the client host too (nats-server's rule), so `-a 0.0.0.0 -m 8222` serves both on all interfaces.
pub fn finalize(options: &mut Options, given: Given) {
    if given.port && !given.http_port {
        options.http_port = None;
    }
    if given.host && !given.http_host {
        options.http_host = options.host.clone();
    }
}

/// What a flag name sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Host,
    Port,
    ServerName,
    PidFile,
    HttpHost,
    HttpPort,
    Config,
    PortsFileDir,
    LogFile,
    Debug,
    Trace,
    DebugTrace,
    JetStream,
    StoreDir,
    User,
    Pass,
    Auth,
    Tls,
    TlsCert,
    TlsKey,
    TlsVerify,
    TlsCaCert,
    Signal,
    Help,
    Version,
}

impl Target {
    /// Switches are booleans that need no separate value argument.
    fn is_switch(self) -> bool {
        matches!(
            self,
            Target::Debug
                | Target::Trace
                | Target::DebugTrace
                | Target::JetStream
                | Target::Tls
                | Target::TlsVerify
                | Target::Help
                | Target::Version
        )
    }
}

/// Every flag name SemaQ accepts, with nats-server's spellings (names are case-sensitive: `-P` ≠ `-p`).
const FLAGS: &[(&str, Target)] = &[
    ("a", Target::Host),
    ("addr", Target::Host),
    ("net", Target::Host),
    ("p", Target::Port),
    ("port", Target::Port),
    ("n", Target::ServerName),
    ("name", Target::ServerName),
    ("server_name", Target::ServerName),
    ("P", Target::PidFile),
    ("pid", Target::PidFile),
    ("m", Target::HttpPort),
    ("http_port", Target::HttpPort),
    ("http_host", Target::HttpHost),
    ("c", Target::Config),
    ("config", Target::Config),
    ("ports_file_dir", Target::PortsFileDir),
    ("l", Target::LogFile),
    ("log", Target::LogFile),
    ("D", Target::Debug),
    ("debug", Target::Debug),
    ("V", Target::Trace),
    ("trace", Target::Trace),
    ("VV", Target::Trace),
    ("DV", Target::DebugTrace),
    ("DVV", Target::DebugTrace),
    ("js", Target::JetStream),
    ("jetstream", Target::JetStream),
    ("sd", Target::StoreDir),
    ("store_dir", Target::StoreDir),
    ("user", Target::User),
    ("pass", Target::Pass),
    ("auth", Target::Auth),
    ("tls", Target::Tls),
    ("tlscert", Target::TlsCert),
    ("tlskey", Target::TlsKey),
    ("tlsverify", Target::TlsVerify),
    ("tlscacert", Target::TlsCaCert),
    ("sl", Target::Signal),
    ("signal", Target::Signal),
    ("h", Target::Help),
    ("help", Target::Help),
    ("v", Target::Version),
    ("version", Target::Version),
];

/// nats-server flags for features SemaQ lacks; named apart so the error says so instead of "unknown".
const NATS_ONLY_FLAGS: &[&str] = &[
    "ms",
    "https_port",
    "t",
    "client_advertise",
    "T",
    "logtime",
    "logtime_utc",
    "s",
    "syslog",
    "r",
    "remote_syslog",
    "log_size_limit",
    "max_traced_msg_len",
    "routes",
    "cluster",
    "cluster_listen",
    "cluster_name",
    "cluster_advertise",
    "no_advertise",
    "connect_retries",
    "profile",
    "help_tls",
];

const USAGE: &str = "\
Usage: semaq-server [options]

With no options: clients on 127.0.0.1:4222, monitoring on 127.0.0.1:8222,
JetStream on, data in ./semaq-data. Giving a client port without a monitoring
port turns monitoring off, as nats-server does.

Server Options:
    -a, --addr, --net <host>         Bind to host address (default: 127.0.0.1)
    -p, --port <port>                Use port for clients (default: 4222, -1 for random)
    -n, --name,
        --server_name <server_name>  Server name (default: auto)
    -P, --pid <file>                 File to store PID
    -m, --http_port <port>           Use port for http monitoring (-1 random, 0 off)
        --http_host <host>           Bind monitoring to host (default: the client host)
    -c, --config <file>              Configuration file
        --ports_file_dir <dir>       Creates a ports file in the specified directory
                                     (<executable_name>_<pid>.ports)

Logging Options:
    -l, --log <file>                 File to redirect log output
    -D, --debug                      Enable debugging output
    -V, --trace                      Trace the raw protocol
    -DV                              Debug and trace
    -VV, -DVV                        Same as -V and -DV (no separate verbose trace)

JetStream Options:
    -js, --jetstream                 Enable JetStream functionality (default: on)
    -sd, --store_dir <dir>           Set the storage directory

Authorization Options:
        --user <user>                User required for connections
        --pass <password>            Password required for connections
        --auth <token>               Authorization token required for connections

TLS Options:
        --tls                        Enable TLS, do not verify clients (default: false)
        --tlscert <file>             Server certificate file
        --tlskey <file>              Private key for server certificate
        --tlsverify                  Enable TLS, verify client certificates
        --tlscacert <file>           Client certificate CA for verification

Signal Options:
    -sl, --signal <signal>[=<pid>]   Send signal to a semaq-server process (ldm, stop, quit, term);
                                     <pid> may be a pid file

Common Options:
    -h, --help                       Show this message
    -v, --version                    Show version

Flags may be written -name or --name, with the value after a space or '='.
Switches accept =true or =false (e.g. -js=false).
";

/// The `--help` text.
pub fn usage() -> &'static str {
    USAGE
}

/// Reads the command line (without the program name) the way nats-server does.
pub fn parse(args: &[String]) -> Result<Flags, FlagError> {
    let mut flags = Flags::default();
    let mut index = 0;
    while let Some(arg) = args.get(index) {
        index += 1;
        if arg == "--" {
            return flags.finish(&args[index..]);
        }
        let Some(body) = flag_body(arg)? else {
            return flags.finish(&args[index - 1..]);
        };
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (body, None),
        };
        let spelled = format!("{}{name}", if arg.starts_with("--") { "--" } else { "-" });
        let target = lookup(name, &spelled)?;
        if target.is_switch() {
            let on = match inline {
                None => true,
                Some(text) => parse_bool(text).ok_or_else(|| FlagError::InvalidValue {
                    flag: spelled.clone(),
                    value: text.to_string(),
                    reason: "expected true or false".to_string(),
                })?,
            };
            flags.switch(target, on);
        } else {
            let value = match inline {
                Some(value) => value,
                None => {
                    let value = args.get(index).ok_or_else(|| FlagError::MissingValue(spelled.clone()))?;
                    index += 1;
                    value.as_str()
                }
            };
            flags.set(target, &spelled, value)?;
        }
    }
    flags.finish(&[])
}

/// The name (and `=value`) of a flag argument, or `None` when the argument is not a flag.
fn flag_body(arg: &str) -> Result<Option<&str>, FlagError> {
    if arg == "-" {
        return Ok(None);
    }
    let Some(body) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
        return Ok(None);
    };
    if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
        return Err(FlagError::BadSyntax(arg.to_string()));
    }
    Ok(Some(body))
}

fn lookup(name: &str, spelled: &str) -> Result<Target, FlagError> {
    if let Some((_, target)) = FLAGS.iter().find(|(known, _)| *known == name) {
        return Ok(*target);
    }
    if NATS_ONLY_FLAGS.contains(&name) {
        return Err(FlagError::Unsupported(spelled.to_string()));
    }
    Err(FlagError::Unknown(spelled.to_string()))
}

/// Go's `strconv.ParseBool`, which is what `-flag=value` accepts.
fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

fn parse_number(flag: &str, value: &str) -> Result<i64, FlagError> {
    value.parse().map_err(|_| invalid(flag, value, "expected a whole number".to_string()))
}

fn invalid(flag: &str, value: &str, reason: String) -> FlagError {
    FlagError::InvalidValue { flag: flag.to_string(), value: value.to_string(), reason }
}

impl Flags {
    fn switch(&mut self, target: Target, on: bool) {
        match target {
            Target::Debug => self.debug = Some(on),
            Target::Trace => self.trace = Some(on),
            Target::DebugTrace => {
                self.debug = Some(on);
                self.trace = Some(on);
            }
            Target::JetStream => self.jetstream = Some(on),
            Target::Tls => self.tls = Some(on),
            Target::TlsVerify => self.tls_verify = Some(on),
            Target::Help => self.help = on,
            Target::Version => self.version = on,
            _ => {}
        }
    }

    fn set(&mut self, target: Target, flag: &str, value: &str) -> Result<(), FlagError> {
        let text = || Some(value.to_string());
        let path = || Some(PathBuf::from(value));
        match target {
            Target::Host => self.host = text(),
            Target::Port => {
                self.port = Some(client_port(parse_number(flag, value)?).map_err(|why| invalid(flag, value, why))?)
            }
            Target::ServerName => self.server_name = text(),
            Target::PidFile => self.pid_file = path(),
            Target::HttpHost => self.http_host = text(),
            Target::HttpPort => {
                self.http_port =
                    Some(monitor_port(parse_number(flag, value)?).map_err(|why| invalid(flag, value, why))?)
            }
            Target::Config => self.config_file = path(),
            Target::PortsFileDir => self.ports_file_dir = path(),
            Target::LogFile => self.log_file = path(),
            Target::StoreDir => self.store_dir = path(),
            Target::User => self.user = text(),
            Target::Pass => self.password = text(),
            Target::Auth => self.token = text(),
            Target::TlsCert => self.tls_cert = path(),
            Target::TlsKey => self.tls_key = path(),
            Target::TlsCaCert => self.tls_ca_cert = path(),
            Target::Signal => self.signal = Some(signal_request(flag, value)?),
            _ => {}
        }
        Ok(())
    }

    /// Handles what follows the flags, then checks the flags that depend on each other.
    fn finish(mut self, rest: &[String]) -> Result<Flags, FlagError> {
        if let Some(first) = rest.first() {
            match first.to_ascii_lowercase().as_str() {
                "help" => self.help = true,
                "version" => self.version = true,
                _ => return Err(FlagError::UnexpectedArgument(first.clone())),
            }
        }
        if !self.help && !self.version && self.signal.is_none() {
            self.check_pairs()?;
        }
        Ok(self)
    }

    fn check_pairs(&self) -> Result<(), FlagError> {
        match (&self.user, &self.password) {
            (Some(_), None) => return Err(FlagError::Conflict("--user needs --pass".to_string())),
            (None, Some(_)) => return Err(FlagError::Conflict("--pass needs --user".to_string())),
            _ => {}
        }
        if self.user.is_some() && self.token.is_some() {
            return Err(FlagError::Conflict("--auth cannot be combined with --user/--pass".to_string()));
        }
        if self.gives_tls() && (self.tls_cert.is_none() || self.tls_key.is_none()) {
            // nats-server builds TLS from the flags alone once any TLS flag is given, so both are required.
            return Err(FlagError::Conflict("TLS from the command line needs both --tlscert and --tlskey".to_string()));
        }
        Ok(())
    }

    /// Whether the flags configure TLS (any TLS flag except `--tls=false`, which turns TLS off).
    fn gives_tls(&self) -> bool {
        self.tls != Some(false)
            && (self.tls == Some(true)
                || self.tls_cert.is_some()
                || self.tls_key.is_some()
                || self.tls_verify.is_some()
                || self.tls_ca_cert.is_some())
    }

    /// The listener settings these flags give.
    pub fn given(&self) -> Given {
        Given {
            host: self.host.is_some(),
            port: self.port.is_some(),
            http_host: self.http_host.is_some(),
            http_port: self.http_port.is_some(),
        }
    }

    /// Overrides `options` with what the flags gave, leaving everything else as it is.
    ///
    /// `--user/--pass` and `--auth` replace the config file's top-level credentials (the
    /// `authorization` user list and token; account users stay). TLS flags replace the config's TLS
    /// settings as a whole, keeping only its handshake timeout; `--tls=false` turns TLS off.
    pub fn apply(&self, options: &mut Options) {
        set(&mut options.host, &self.host);
        set(&mut options.port, &self.port);
        set(&mut options.http_host, &self.http_host);
        set(&mut options.http_port, &self.http_port);
        set(&mut options.jetstream, &self.jetstream);
        set(&mut options.store_dir, &self.store_dir);
        set(&mut options.debug, &self.debug);
        set(&mut options.trace, &self.trace);
        if self.server_name.is_some() {
            options.server_name.clone_from(&self.server_name);
        }
        if self.log_file.is_some() {
            options.log_file.clone_from(&self.log_file);
        }
        if self.pid_file.is_some() {
            options.pid_file.clone_from(&self.pid_file);
        }
        if self.ports_file_dir.is_some() {
            options.ports_file_dir.clone_from(&self.ports_file_dir);
        }
        self.apply_credentials(options);
        self.apply_tls(options);
    }

    fn apply_credentials(&self, options: &mut Options) {
        if let (Some(username), Some(password)) = (&self.user, &self.password) {
            options.auth.users =
                vec![User { username: username.clone(), password: password.clone(), permissions: None }];
            options.auth.single_user = Some(username.clone());
            options.auth.token = None;
        }
        if let Some(token) = &self.token {
            options.auth.token = Some(token.clone());
            options.auth.users.clear();
            options.auth.single_user = None;
        }
    }

    fn apply_tls(&self, options: &mut Options) {
        if self.tls == Some(false) {
            options.tls = None;
            return;
        }
        if !self.gives_tls() {
            return;
        }
        // `parse` guarantees both; a hand-built `Flags` without them leaves TLS alone.
        let (Some(cert_file), Some(key_file)) = (&self.tls_cert, &self.tls_key) else {
            return;
        };
        let timeout = options.tls.as_ref().map_or(limits::TLS_HANDSHAKE_TIMEOUT, |tls| tls.timeout);
        // As nats-server's `TLSMap`, `verify_and_map` is the file's alone: the flags keep it.
        let map = options.tls.as_ref().is_some_and(|tls| tls.map);
        options.tls = Some(TlsOptions {
            cert_file: cert_file.clone(),
            key_file: key_file.clone(),
            ca_file: self.tls_ca_cert.clone(),
            verify: self.tls_verify.unwrap_or(false) || map,
            map,
            timeout,
        });
    }

    /// The options to run with: defaults, then the config file (if `-c`), then these flags, then [`finalize`].
    ///
    /// Returns the config file's warnings alongside (unknown keys and the like), for the caller to log.
    pub fn resolve(&self) -> Result<(Options, Vec<String>), ConfigError> {
        let mut options = Options::default();
        let mut report = config_file::LoadReport::default();
        if let Some(path) = &self.config_file {
            report = config_file::load_report(path, &mut options)?;
        }
        self.apply(&mut options);
        finalize(&mut options, report.given.union(self.given()));
        Ok((options, report.warnings))
    }
}

fn set<T: Clone>(target: &mut T, value: &Option<T>) {
    if let Some(value) = value {
        target.clone_from(value);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    fn flags(line: &str) -> Flags {
        match parse(&args(line)) {
            Ok(flags) => flags,
            Err(error) => panic!("{line:?} should parse: {error}"),
        }
    }

    fn error(line: &str) -> FlagError {
        match parse(&args(line)) {
            Ok(flags) => panic!("{line:?} should fail, got {flags:?}"),
            Err(error) => error,
        }
    }

    fn applied(line: &str) -> Options {
        let mut options = Options::default();
        flags(line).apply(&mut options);
        options
    }

    #[test]
    fn no_arguments_is_no_flags() {
        assert_eq!(flags(""), Flags::default());
    }

    #[test]
    fn a_value_flag_takes_every_go_spelling() {
        for line in ["-p 4333", "-p=4333", "--port 4333", "--port=4333"] {
            assert_eq!(flags(line).port, Some(4333), "{line}");
        }
    }

    #[test]
    fn a_switch_takes_every_go_spelling() {
        for line in ["-js", "--js", "-jetstream", "--jetstream", "-js=true", "--jetstream=1", "-js=T"] {
            assert_eq!(flags(line).jetstream, Some(true), "{line}");
        }
        for line in ["-js=false", "--jetstream=0", "-js=F"] {
            assert_eq!(flags(line).jetstream, Some(false), "{line}");
        }
    }

    #[test]
    fn debug_and_trace_flags() {
        assert_eq!((flags("-D").debug, flags("-D").trace), (Some(true), None));
        assert_eq!((flags("-V").debug, flags("-V").trace), (None, Some(true)));
        assert_eq!((flags("-DV").debug, flags("-DV").trace), (Some(true), Some(true)));
        assert_eq!((flags("-DVV").debug, flags("-DVV").trace), (Some(true), Some(true)));
        assert_eq!(flags("--debug --trace").trace, Some(true));
        assert_eq!(flags("-DV=false").debug, Some(false));
    }

    #[test]
    fn dash_one_ports_mean_random_and_zero_means_nats_defaults() {
        assert_eq!(flags("-p -1").port, Some(0));
        assert_eq!(flags("-p 0").port, Some(4222));
        assert_eq!(flags("-m -1").http_port, Some(Some(0)));
        assert_eq!(flags("-m 0").http_port, Some(None));
        assert_eq!(flags("--http_port=8333").http_port, Some(Some(8333)));
    }

    #[test]
    fn every_setting_flag_reaches_its_option() {
        let options = applied(
            "-a 0.0.0.0 -p 4333 -m 8333 --http_host 10.0.0.1 -js=false -sd /data -l server.log -P server.pid \
             --ports_file_dir /run -D -V -n alpha",
        );
        assert_eq!(options.host, "0.0.0.0");
        assert_eq!(options.port, 4333);
        assert_eq!(options.http_port, Some(8333));
        assert_eq!(options.http_host, "10.0.0.1");
        assert!(!options.jetstream);
        assert_eq!(options.store_dir, PathBuf::from("/data"));
        assert_eq!(options.log_file, Some(PathBuf::from("server.log")));
        assert_eq!(options.pid_file, Some(PathBuf::from("server.pid")));
        assert_eq!(options.ports_file_dir, Some(PathBuf::from("/run")));
        assert!(options.debug && options.trace);
        assert_eq!(options.server_name.as_deref(), Some("alpha"));
    }

    #[test]
    fn long_aliases_match_short_flags() {
        let short = flags("-a h -p 1 -n x -P f -m 2 -c c.conf -l l -sd d");
        let long =
            flags("--addr h --port 1 --server_name x --pid f --http_port 2 --config c.conf --log l --store_dir d");
        assert_eq!(short, long);
        assert_eq!(flags("--net h").host, flags("-a h").host);
        assert_eq!(flags("--name x").server_name, flags("-n x").server_name);
        assert_eq!(long.config_file, Some(PathBuf::from("c.conf")));
    }

    #[test]
    fn a_value_may_start_with_a_dash() {
        assert_eq!(flags("--user -me- --pass -pw").user.as_deref(), Some("-me-"));
    }

    #[test]
    fn the_last_repeat_of_a_flag_wins() {
        assert_eq!(flags("-p 1 --port 2").port, Some(2));
    }

    #[test]
    fn help_and_version() {
        for line in ["-h", "--help", "help", "-p 1 help"] {
            assert!(flags(line).help, "{line}");
        }
        for line in ["-v", "--version", "version", "VERSION"] {
            assert!(flags(line).version, "{line}");
        }
        assert!(flags("--user alone -h").help, "help skips the pairing checks");
    }

    #[test]
    fn double_dash_ends_the_flags() {
        assert!(flags("-p 1 -- version").version);
        assert_eq!(error("-- -p"), FlagError::UnexpectedArgument("-p".to_string()));
    }

    #[test]
    fn unknown_and_unsupported_flags_are_named() {
        let unknown = error("-p 1 --frobnicate").to_string();
        assert!(unknown.contains("--frobnicate") && unknown.contains("unknown"), "{unknown}");
        let unsupported = error("--routes nats://a:6222").to_string();
        assert!(unsupported.contains("--routes") && unsupported.contains("not support"), "{unsupported}");
        assert_eq!(error("-x"), FlagError::Unknown("-x".to_string()));
    }

    #[test]
    fn names_are_case_sensitive() {
        assert_eq!(flags("-P x").pid_file, Some(PathBuf::from("x")));
        assert_eq!(error("-PORT 1"), FlagError::Unknown("-PORT".to_string()));
    }

    #[test]
    fn missing_and_malformed_values_are_errors() {
        assert_eq!(error("-p"), FlagError::MissingValue("-p".to_string()));
        assert_eq!(error("--config"), FlagError::MissingValue("--config".to_string()));
        for line in ["-p abc", "-p 65536", "-p -2", "--port=", "-m x", "-js=maybe", "-D=yes"] {
            let message = error(line).to_string();
            assert!(message.starts_with("invalid value"), "{line}: {message}");
        }
        assert!(error("-p 99999").to_string().contains("-p"));
    }

    #[test]
    fn bad_syntax_and_stray_arguments() {
        assert_eq!(error("---p 1"), FlagError::BadSyntax("---p".to_string()));
        assert_eq!(error("-=1"), FlagError::BadSyntax("-=1".to_string()));
        assert_eq!(error("-p 1 start"), FlagError::UnexpectedArgument("start".to_string()));
        assert_eq!(error("-"), FlagError::UnexpectedArgument("-".to_string()));
        // As in Go, a switch takes no separate value: "false" here is a stray argument.
        assert_eq!(error("-js false"), FlagError::UnexpectedArgument("false".to_string()));
    }

    #[test]
    fn user_and_pass_make_one_user_replacing_config_credentials() {
        let mut options = Options::default();
        options.auth.token = Some("from-config".to_string());
        options.auth.users.push(User { username: "old".into(), password: "old".into(), permissions: None });
        flags("--user alice --pass secret").apply(&mut options);
        assert_eq!(
            options.auth.users,
            vec![User { username: "alice".into(), password: "secret".into(), permissions: None }]
        );
        assert_eq!(options.auth.token, None);
    }

    #[test]
    fn auth_sets_a_token_replacing_config_users() {
        let mut options = Options::default();
        options.auth.users.push(User::default());
        flags("--auth s3cr3t").apply(&mut options);
        assert_eq!(options.auth.token.as_deref(), Some("s3cr3t"));
        assert!(options.auth.users.is_empty());
    }

    #[test]
    fn credentials_must_pair_up() {
        assert!(matches!(error("--user alice"), FlagError::Conflict(m) if m.contains("--pass")));
        assert!(matches!(error("--pass x"), FlagError::Conflict(m) if m.contains("--user")));
        assert!(matches!(error("--user a --pass b --auth t"), FlagError::Conflict(_)));
    }

    #[test]
    fn tls_flags_build_tls_with_the_default_timeout() {
        let options = applied("--tls --tlscert server.pem --tlskey server.key");
        let tls = options.tls.expect("tls on");
        assert_eq!(tls.cert_file, PathBuf::from("server.pem"));
        assert_eq!(tls.key_file, PathBuf::from("server.key"));
        assert_eq!(tls.ca_file, None);
        assert!(!tls.verify);
        assert_eq!(tls.timeout, limits::TLS_HANDSHAKE_TIMEOUT);
    }

    #[test]
    fn tlsverify_implies_tls_and_verification() {
        let options = applied("--tlsverify --tlscert c --tlskey k --tlscacert ca");
        let tls = options.tls.expect("tls on");
        assert!(tls.verify);
        assert_eq!(tls.ca_file, Some(PathBuf::from("ca")));
    }

    #[test]
    fn tls_flags_need_cert_and_key() {
        for line in ["--tls", "--tlscert c", "--tlsverify --tlskey k", "--tlscacert ca"] {
            assert!(matches!(error(line), FlagError::Conflict(m) if m.contains("--tlscert")), "{line}");
        }
    }

    fn with_tls(tls: TlsOptions) -> Options {
        Options { tls: Some(tls), ..Options::default() }
    }

    #[test]
    fn tls_false_turns_config_tls_off() {
        let mut options = with_tls(TlsOptions {
            cert_file: "c".into(),
            key_file: "k".into(),
            ca_file: None,
            verify: false,
            map: false,
            timeout: Duration::from_secs(5),
        });
        flags("--tls=false --tlscert x").apply(&mut options);
        assert_eq!(options.tls, None);
    }

    #[test]
    fn tls_flags_keep_the_config_timeout() {
        let mut options = with_tls(TlsOptions {
            cert_file: "old".into(),
            key_file: "old".into(),
            ca_file: Some("old-ca".into()),
            verify: true,
            map: false,
            timeout: Duration::from_secs(5),
        });
        flags("--tls --tlscert c --tlskey k").apply(&mut options);
        let tls = options.tls.expect("tls on");
        assert_eq!((tls.cert_file, tls.ca_file, tls.verify), (PathBuf::from("c"), None, false));
        assert_eq!(tls.timeout, Duration::from_secs(5));
    }

    #[test]
    fn apply_changes_only_what_was_given() {
        let mut options = Options { port: 5000, debug: true, server_name: Some("config".into()), ..Options::default() };
        options.auth.token = Some("t".into());
        let before = options.clone();
        Flags::default().apply(&mut options);
        assert_eq!(options, before);
        flags("-V").apply(&mut options);
        assert_eq!((options.port, options.debug, options.trace), (5000, true, true));
    }

    #[test]
    fn given_reports_listener_flags() {
        assert_eq!(flags("").given(), Given::default());
        assert_eq!(
            flags("-a h -p 1 --http_host x -m 0").given(),
            Given { host: true, port: true, http_host: true, http_port: true }
        );
    }

    #[test]
    fn with_no_port_given_monitoring_keeps_its_embedded_default() {
        let mut options = Options::default();
        finalize(&mut options, Given::default());
        assert_eq!(options.http_port, Some(8222));
    }

    #[test]
    fn a_client_port_without_a_monitoring_port_turns_monitoring_off() {
        let mut options = Options::default();
        finalize(&mut options, Given { port: true, ..Given::default() });
        assert_eq!(options.http_port, None);
    }

    #[test]
    fn a_monitoring_port_given_anywhere_keeps_monitoring_on() {
        let mut options = Options { http_port: Some(8333), ..Options::default() };
        finalize(&mut options, Given { port: true, http_port: true, ..Given::default() });
        assert_eq!(options.http_port, Some(8333));
    }

    #[test]
    fn monitoring_binds_the_client_host_unless_given_its_own() {
        let mut options = applied("-a 0.0.0.0");
        finalize(&mut options, flags("-a 0.0.0.0").given());
        assert_eq!(options.http_host, "0.0.0.0");
        let mut options = applied("-a 0.0.0.0 --http_host 127.0.0.2");
        finalize(&mut options, flags("-a 0.0.0.0 --http_host 127.0.0.2").given());
        assert_eq!(options.http_host, "127.0.0.2");
    }

    #[test]
    fn resolve_without_config_uses_defaults_then_flags() {
        let (options, warnings) = flags("-p 4333 -js=false").resolve().expect("resolves");
        assert!(warnings.is_empty());
        assert_eq!(options.port, 4333);
        assert!(!options.jetstream);
        assert_eq!(options.http_port, None, "-p alone turns monitoring off");
        let (options, _) = flags("").resolve().expect("resolves");
        assert_eq!(options, Options::default());
    }

    fn config_file(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), text).expect("write config");
        file
    }

    fn resolve_with(config: &tempfile::NamedTempFile, extra: &str) -> Options {
        let mut line = args(extra);
        line.extend(["-c".to_string(), config.path().display().to_string()]);
        let flags = parse(&line).expect("flags parse");
        flags.resolve().expect("resolves").0
    }

    #[test]
    fn flags_override_the_config_file() {
        let config = config_file("port: 5000\ndebug: true\nserver_name: from-config\nhttp_port: 8300\n");
        let options = resolve_with(&config, "-p 6000 -D=false");
        assert_eq!(options.port, 6000);
        assert!(!options.debug);
        assert_eq!(options.server_name.as_deref(), Some("from-config"));
        assert_eq!(options.http_port, Some(8300));
    }

    #[test]
    fn monitoring_rule_spans_config_and_flags() {
        let port_in_config = config_file("port: 5000\n");
        assert_eq!(resolve_with(&port_in_config, "").http_port, None);
        assert_eq!(resolve_with(&port_in_config, "-m 8400").http_port, Some(8400));
        let http_in_config = config_file("http_port: 8222\n");
        assert_eq!(resolve_with(&http_in_config, "-p 5000").http_port, Some(8222));
        let neither = config_file("debug: true\n");
        assert_eq!(resolve_with(&neither, "").http_port, Some(8222));
    }

    #[test]
    fn resolve_reports_config_errors_and_warnings() {
        let broken = config_file("port: \"abc\"\n");
        let flags = parse(&["-c".to_string(), broken.path().display().to_string()]).expect("parse");
        assert!(matches!(flags.resolve(), Err(ConfigError::Invalid { .. })));
        let odd = config_file("frobnicate: 1\n");
        let flags = parse(&["-c".to_string(), odd.path().display().to_string()]).expect("parse");
        let (_, warnings) = flags.resolve().expect("resolves");
        assert_eq!(warnings.len(), 1);
    }

    #[test]
    fn usage_lists_every_flag() {
        for (name, _) in FLAGS {
            let dashed = if name.len() <= 3 { format!("-{name}") } else { format!("--{name}") };
            assert!(usage().contains(&dashed), "usage lacks {dashed}");
        }
    }

    #[test]
    fn signal_takes_a_command_and_an_optional_pid() {
        let request = flags("--signal ldm=1234").signal.expect("signal");
        assert_eq!(request, SignalRequest { command: SignalCommand::LameDuck, pid: Some("1234".to_string()) });
        assert_eq!(flags("-sl quit").signal.map(|r| (r.command, r.pid)), Some((SignalCommand::Quit, None)));
        assert_eq!(flags("-sl=stop=x.pid").signal.map(|r| r.command), Some(SignalCommand::Stop));
        for line in ["--signal frob=1", "--signal ldm=1=2", "--signal reload=1"] {
            assert!(matches!(error(line), FlagError::InvalidValue { .. }), "{line}");
        }
    }
}
