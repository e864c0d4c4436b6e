//! A real `nats-server` process, for side-by-side tests.

use std::net::SocketAddr;
use std::process::{Child, Command};

use crate::binaries::nats_server_path;
use crate::process::{start_logged, Log, Started, READY_TIMEOUT};

/// A running `nats-server` on a random loopback port, killed on drop.
pub struct NatsServer {
    child: Child,
    addr: SocketAddr,
    log: Log,
    /// Holds the config file of [`NatsServer::with_config`] while the server runs.
    _config_dir: Option<tempfile::TempDir>,
}

impl NatsServer {
    /// Starts `nats-server -a 127.0.0.1 -p -1` and waits until it is ready.
    pub fn start() -> Self {
        Self::with_args(&[])
    }

    /// Starts with extra command-line flags.
    pub fn with_args(extra: &[&str]) -> Self {
        let mut command = Command::new(nats_server_path());
        command.args(["-a", "127.0.0.1", "-p", "-1"]).args(extra);
        let Started { child, addr, log, .. } = start_logged("nats-server", command, READY_TIMEOUT);
        Self { child, addr, log, _config_dir: None }
    }

    /// Starts with `config` as its config file (`-c`).
    pub fn with_config(config: &str) -> Self {
        let dir = tempfile::tempdir().expect("a temp dir for nats-server's config");
        let path = dir.path().join("nats-server.conf");
        std::fs::write(&path, config).expect("write nats-server's config");
        let mut server = Self::with_args(&["-c", path.to_str().expect("a UTF-8 temp path")]);
        server._config_dir = Some(dir);
        server
    }

    /// Client address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `nats://host:port`.
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// Everything the server logged so far.
    pub fn log_text(&self) -> String {
        self.log.text()
    }

    /// Connects with async-nats using default options.
    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(self.url()).await.unwrap_or_else(|error| panic!("connect to {}: {error}", self.url()))
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
