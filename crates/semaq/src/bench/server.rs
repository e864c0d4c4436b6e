//! Starting and stopping the servers `compare` measures, on free loopback ports.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// How long a server may take to accept its first connection.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of a server's log quoted when it fails to start.
const LOG_TAIL_BYTES: usize = 2_000;

/// A server program and the name it goes by in tables.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// `semaq` or `nats`.
    pub label: &'static str,
    /// The executable to start.
    pub program: PathBuf,
}

/// A running server; dropping it kills the process.
#[derive(Debug)]
pub struct ServerProcess {
    /// Which server this is.
    pub label: &'static str,
    /// Client URL on loopback.
    pub url: String,
    child: Child,
}

impl ServerSpec {
    /// Starts the server with nats-server's flags on free ports, its data and log under `work_dir`,
    /// and waits until it accepts connections.
    pub fn start(&self, work_dir: &Path) -> Result<ServerProcess> {
        let client_port = free_port()?;
        let monitor_port = free_port()?;
        let store_dir = work_dir.join(format!("{}-{client_port}", self.label));
        std::fs::create_dir_all(&store_dir).with_context(|| format!("cannot create {}", store_dir.display()))?;
        let log_path = store_dir.join("server.log");
        let log = File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
        let log_for_stderr = log.try_clone().context("cannot share the server log file")?;
        let child = Command::new(&self.program)
            .args(["-a", "127.0.0.1", "-p", &client_port.to_string(), "-m", &monitor_port.to_string(), "-js"])
            .arg("-sd")
            .arg(&store_dir)
            .stdin(Stdio::null())
            // A file, not a pipe: a pipe nobody reads would block a server that logs every connection.
            .stdout(log)
            .stderr(log_for_stderr)
            .spawn()
            .with_context(|| format!("cannot start {}", self.program.display()))?;
        let mut server = ServerProcess { label: self.label, url: format!("nats://127.0.0.1:{client_port}"), child };
        let address = SocketAddr::from(([127, 0, 0, 1], client_port));
        if let Err(error) = server.wait_until_accepting(address) {
            eprintln!("{}", log_tail(&log_path));
            bail!("{} ({}) did not start: {error}", self.label, self.program.display());
        }
        Ok(server)
    }
}

impl ServerProcess {
    /// The server's operating-system process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_until_accepting(&mut self, address: SocketAddr) -> Result<()> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().context("cannot check the server process")? {
                bail!("exited with {status}");
            }
            if TcpStream::connect_timeout(&address, Duration::from_millis(100)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("no connection accepted on {address} within {}s", STARTUP_TIMEOUT.as_secs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Nothing useful can be done if the process is already gone.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port that was free a moment ago: bind port 0, read the port, release it.
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).context("cannot find a free loopback port")?;
    Ok(listener.local_addr().context("cannot read the bound port")?.port())
}

/// Resident memory of a process in bytes, from `/proc/PID/status` (Linux only).
pub fn resident_bytes(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read the memory of process {pid} (needs Linux /proc)"))?;
    parse_vm_rss(&status).with_context(|| format!("no VmRSS line for process {pid}"))
}

/// Parses `VmRSS:   12345 kB` out of a `/proc/PID/status` text.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kibibytes: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kibibytes * 1024)
}

/// The last part of a log file, for error messages.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let start = text.len().saturating_sub(LOG_TAIL_BYTES);
    let start = (start..text.len()).find(|index| text.is_char_boundary(*index)).unwrap_or(text.len());
    format!("server log ({}):\n{}", path.display(), &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tnats-server\nVmPeak:\t  900 kB\nVmRSS:\t   12345 kB\nThreads: 7\n";
        assert_eq!(parse_vm_rss(status), Some(12345 * 1024));
        assert_eq!(parse_vm_rss("Name: x\n"), None);
    }

    #[test]
    fn free_ports_are_nonzero() {
        assert_ne!(free_port().unwrap(), 0);
    }
}
