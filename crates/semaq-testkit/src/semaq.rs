//! A real `semaq-server` process.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

use crate::binaries::semaq_server_path;
use crate::process::{output_within, start_logged, wait_for_exit, Log, Started, EXIT_TIMEOUT, READY_TIMEOUT};
use crate::raw::Raw;

/// How a [`SemaqServer`] is started: `-a 127.0.0.1 -p -1 -m -1 -sd <store>`, then `-c <config
/// file>` when there is config text, then the extra flags (nats-server syntax).
#[derive(Debug, Clone)]
pub struct ServerBuilder {
    program: Option<PathBuf>,
    defaults: bool,
    monitoring: bool,
    store: Option<PathBuf>,
    config: Option<String>,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    ready_within: Duration,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        Self {
            program: None,
            defaults: true,
            monitoring: true,
            store: None,
            config: None,
            args: Vec::new(),
            env: Vec::new(),
            ready_within: READY_TIMEOUT,
        }
    }
}

impl ServerBuilder {
    /// Runs `program` instead of the `semaq-server` next to the test binary.
    pub fn program(mut self, program: impl Into<PathBuf>) -> Self {
        self.program = Some(program.into());
        self
    }

    /// Passes none of the default flags: only the config file and what [`arg`](Self::arg) adds.
    pub fn bare(mut self) -> Self {
        self.defaults = false;
        self
    }

    /// Leaves out `-m -1` (no monitoring port).
    pub fn no_monitoring(mut self) -> Self {
        self.monitoring = false;
        self
    }

    /// Keeps the store in `store` (which outlives the server) instead of the server's temp dir.
    pub fn store(mut self, store: impl Into<PathBuf>) -> Self {
        self.store = Some(store.into());
        self
    }

    /// Writes `text` to `server.conf` in the server's temp dir and passes `-c` with it.
    pub fn config(mut self, text: &str) -> Self {
        self.config = Some(text.to_string());
        self
    }

    /// Adds one flag or value after the defaults.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds flags and values after the defaults.
    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for the server (failpoints, log levels).
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Bounds start-up to `within` instead of [`READY_TIMEOUT`].
    pub fn ready_within(mut self, within: Duration) -> Self {
        self.ready_within = within;
        self
    }

    /// Starts the server and waits until it is ready.
    pub fn start(self) -> SemaqServer {
        let dir = tempfile::tempdir().expect("server temp dir");
        let started = start_logged("semaq-server", self.command(dir.path()), self.ready_within);
        let Started { child, addr, http, log } = started;
        SemaqServer { child, addr, http, log, builder: self, dir }
    }

    /// Runs the server expecting it to exit by itself (a refused start-up): its output. Panics if
    /// it is still running after [`EXIT_TIMEOUT`].
    pub fn output(self) -> Output {
        let dir = tempfile::tempdir().expect("server temp dir");
        output_within(self.command(dir.path()), EXIT_TIMEOUT)
    }

    fn store_in(&self, dir: &Path) -> PathBuf {
        self.store.clone().unwrap_or_else(|| dir.join("store"))
    }

    /// The command line, with the config file written to `dir`.
    fn command(&self, dir: &Path) -> Command {
        let program = self.program.clone().unwrap_or_else(semaq_server_path);
        assert!(program.is_file(), "{} does not exist: build it with `cargo build -p semaq-server`", program.display());
        let mut command = Command::new(program);
        if self.defaults {
            command.args(["-a", "127.0.0.1", "-p", "-1"]);
            if self.monitoring {
                command.args(["-m", "-1"]);
            }
            command.arg("-sd").arg(self.store_in(dir));
        }
        if let Some(config) = &self.config {
            let path = dir.join("server.conf");
            std::fs::write(&path, config).expect("write server.conf");
            command.arg("-c").arg(path);
        }
        command.args(&self.args).envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }
}

/// A running `semaq-server`, killed on drop.
pub struct SemaqServer {
    child: Child,
    addr: SocketAddr,
    http: Option<SocketAddr>,
    log: Log,
    builder: ServerBuilder,
    /// Config file, default store, and the working directory CLI tests run `semaq` in.
    dir: tempfile::TempDir,
}

impl SemaqServer {
    /// How to start one with other flags, config, store or environment.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// Starts with the default flags.
    pub fn start() -> Self {
        Self::builder().start()
    }

    /// Starts with extra command-line flags (nats-server syntax).
    pub fn with_args(extra: &[&str]) -> Self {
        Self::builder().args(extra).start()
    }

    /// Starts with a config file holding `config`, plus extra flags.
    pub fn with_config(config: &str, extra: &[&str]) -> Self {
        Self::builder().config(config).args(extra).start()
    }

    /// Client address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `nats://host:port`.
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// Monitoring (HTTP) address; panics when the server runs without one.
    pub fn http_addr(&self) -> SocketAddr {
        self.http.expect("this server has no monitoring port (started with no_monitoring or bare, without -m)")
    }

    /// The server's temp dir: config file, default store, and a working directory for CLI runs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The store directory passed with `-sd` (not used by [`ServerBuilder::bare`] servers).
    pub fn store(&self) -> PathBuf {
        self.builder.store_in(self.dir.path())
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the server logged so far.
    pub fn log_text(&self) -> String {
        self.log.text()
    }

    /// Connects with async-nats using default options.
    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(self.url()).await.unwrap_or_else(|error| panic!("connect to {}: {error}", self.url()))
    }

    /// A raw TCP connection with the INFO line already read.
    pub fn raw(&self) -> Raw {
        Raw::connect(self.addr)
    }

    /// The INFO line a new raw connection receives.
    pub fn raw_info(&self) -> String {
        let stream = TcpStream::connect(self.addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).expect("INFO line");
        line
    }

    /// GETs a monitoring endpoint and parses the JSON.
    pub fn http_json(&self, path: &str) -> serde_json::Value {
        crate::http_get_json(self.http_addr(), path)
    }

    /// GETs a monitoring endpoint: the status code and the body as text.
    pub fn http_text(&self, path: &str) -> (u16, String) {
        crate::http_get(self.http_addr(), path, &[])
    }

    /// SIGKILL, and waits until the process is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        self.child.wait().expect("wait for semaq-server");
    }

    /// SIGTERM, and waits (at most [`EXIT_TIMEOUT`]) for the exit: its exit code (`None` after a
    /// signal). Panics, with the log, if the process is still running by then.
    pub fn terminate(&mut self) -> Option<i32> {
        let pid = self.child.id().to_string();
        // The `kill` command: no libc in the harness.
        let sent = Command::new("kill").args(["-TERM", &pid]).status().expect("run kill");
        assert!(sent.success(), "kill -TERM {pid} failed: {sent}");
        self.wait_exit_after("SIGTERM")
    }

    /// Waits (at most [`EXIT_TIMEOUT`]) for the process to exit on its own (a failpoint): its exit
    /// code (`None` after a signal). Panics, with the log, if it is still running by then.
    pub fn wait_exit(&mut self) -> Option<i32> {
        self.wait_exit_after("waiting for it to exit")
    }

    fn wait_exit_after(&mut self, what: &str) -> Option<i32> {
        let Some(status) = wait_for_exit(&mut self.child, EXIT_TIMEOUT) else {
            self.kill();
            panic!("semaq-server did not exit within {EXIT_TIMEOUT:?} of {what}; its log:\n{}", self.log.text());
        };
        status.code()
    }

    /// Starts the server again with the same flags, config, store and environment, once the
    /// previous process has exited ([`kill`](Self::kill), [`terminate`](Self::terminate)). It
    /// listens on new ports: connect again afterwards.
    pub fn restart(&mut self) {
        let running = self.child.try_wait().expect("try_wait").is_none();
        assert!(!running, "restart: semaq-server (pid {}) is still running; kill or terminate it first", self.pid());
        let Started { child, addr, http, log } =
            start_logged("semaq-server", self.builder.command(self.dir.path()), self.builder.ready_within);
        (self.child, self.addr, self.http, self.log) = (child, addr, http, log);
    }
}

impl Drop for SemaqServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
