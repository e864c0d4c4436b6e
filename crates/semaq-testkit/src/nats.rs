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
        Self { child, addr, log }
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
