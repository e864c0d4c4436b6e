//! Starting and stopping the servers `compare` measures, on free loopback ports.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::cpus::CpuSplit;

/// How long a server may take to accept its first connection.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often start-up and shutdown are checked; fine enough to time a restart.
const RESTART_POLL: Duration = Duration::from_millis(5);
/// Bytes of a server's log quoted when it fails to start.
const LOG_TAIL_BYTES: usize = 2_000;

/// A server program and the name it goes by in tables.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// `semaq` or `nats`.
    pub label: &'static str,
    /// The executable to start.
    pub program: PathBuf,
    /// Environment variables set for it.
    pub env: Vec<(String, String)>,
    /// Flags after the standard ones (such as `-c FILE`).
    pub args: Vec<String>,
    /// The CPUs it runs on, when the bench splits them (`cpus.rs`); otherwise all of them.
    pub cpus: Option<CpuSplit>,
}

/// A running server; dropping it kills the process.
#[derive(Debug)]
pub struct ServerProcess {
    /// Which server this is.
    pub label: &'static str,
    /// Client URL on loopback.
    pub url: String,
    child: Child,
    program: PathBuf,
    env: Vec<(String, String)>,
    args: Vec<String>,
    cpus: Option<CpuSplit>,
    launch: Launch,
}

/// What a server was started with, so it can be started again on the same store and ports.
#[derive(Debug, Clone)]
struct Launch {
    client_port: u16,
    monitor_port: u16,
    store_dir: PathBuf,
    log_path: PathBuf,
}

impl ServerSpec {
    /// A server started with no extra environment.
    pub fn new(label: &'static str, program: PathBuf) -> Self {
        Self { label, program, env: Vec::new(), args: Vec::new(), cpus: None }
    }

    /// The same server on the server's half of `cpus`, when given.
    pub fn with_cpus(mut self, cpus: Option<CpuSplit>) -> Self {
        self.cpus = cpus;
        self
    }

    /// The same server with `args` after the standard flags.
    pub fn with_args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|arg| arg.to_string()));
        self
    }

    /// The same server with `name=value` in its environment.
    pub fn with_env(mut self, name: &str, value: impl Into<String>) -> Self {
        self.env.push((name.to_string(), value.into()));
        self
    }

    /// Starts the server with nats-server's flags on free ports, its data and log under `work_dir`,
    /// and waits until it accepts connections.
    pub fn start(&self, work_dir: &Path) -> Result<ServerProcess> {
        let client_port = free_port()?;
        let monitor_port = free_port()?;
        let store_dir = work_dir.join(format!("{}-{client_port}", self.label));
        std::fs::create_dir_all(&store_dir).with_context(|| format!("cannot create {}", store_dir.display()))?;
        let log_path = store_dir.join("server.log");
        let launch = Launch { client_port, monitor_port, store_dir, log_path };
        let child = spawn(&self.program, (&self.env, &self.args), self.cpus.as_ref(), &launch, false)?;
        let mut server = ServerProcess {
            label: self.label,
            url: format!("nats://127.0.0.1:{client_port}"),
            child,
            program: self.program.clone(),
            env: self.env.clone(),
            args: self.args.clone(),
            cpus: self.cpus.clone(),
            launch,
        };
        server.wait_until_accepting(STARTUP_TIMEOUT)?;
        Ok(server)
    }
}

/// Starts `program` with nats-server's flags, its output going to the launch's log file, on the
/// server's CPUs when they are split.
fn spawn(
    program: &Path,
    (env, args): (&[(String, String)], &[String]),
    cpus: Option<&CpuSplit>,
    launch: &Launch,
    append_log: bool,
) -> Result<Child> {
    let log_path = &launch.log_path;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append_log)
        .truncate(!append_log)
        .open(log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let log_for_stderr: File = log.try_clone().context("cannot share the server log file")?;
    let mut command = Command::new(program);
    command
        .args(["-a", "127.0.0.1", "-p", &launch.client_port.to_string(), "-m", &launch.monitor_port.to_string()])
        .arg("-js")
        .arg("-sd")
        .arg(&launch.store_dir)
        .args(args)
        .envs(env.iter().map(|(name, value)| (name, value)))
        .stdin(Stdio::null())
        // A file, not a pipe: a pipe nobody reads would block a server that logs every connection.
        .stdout(log)
        .stderr(log_for_stderr);
    let spawned = match cpus {
        Some(cpus) => cpus.on_server_cpus(|| command.spawn()).context("cannot pin the server to its CPUs")?,
        None => command.spawn(),
    };
    spawned.with_context(|| format!("cannot start {}", program.display()))
}

impl ServerProcess {
    /// The server's operating-system process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The monitoring port's address, `127.0.0.1:PORT`.
    pub fn monitor_authority(&self) -> String {
        format!("127.0.0.1:{}", self.launch.monitor_port)
    }

    /// The directory the server keeps its data (and log) in.
    pub fn store_dir(&self) -> &Path {
        &self.launch.store_dir
    }

    /// Asks the server to shut down with SIGTERM and waits until it exits; returns how long that took.
    /// A server still running after `timeout` is killed and the call fails.
    pub fn terminate(&mut self, timeout: Duration) -> Result<Duration> {
        let started = Instant::now();
        // `kill` is POSIX; it saves a dependency on libc for one signal.
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("cannot run kill")?;
        if !status.success() {
            bail!("kill -TERM {} failed: {status}", self.pid());
        }
        loop {
            if self.child.try_wait().context("cannot check the server process")?.is_some() {
                return Ok(started.elapsed());
            }
            if started.elapsed() >= timeout {
                // Best effort: the error below is what matters.
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!("{} did not exit within {}s of SIGTERM; killed", self.label, timeout.as_secs());
            }
            std::thread::sleep(RESTART_POLL);
        }
    }

    /// Kills the server at once (SIGKILL: no shutdown, only what the kernel already has survives)
    /// and waits until it is gone.
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill().context("cannot kill the server process")?;
        self.child.wait().context("cannot reap the server process")?;
        Ok(())
    }

    /// Starts the program again on the same ports and store directory (after [`terminate`](Self::terminate))
    /// and waits up to `timeout` until it accepts connections.
    pub fn start_again(&mut self, timeout: Duration) -> Result<()> {
        if self.child.try_wait().context("cannot check the server process")?.is_none() {
            bail!("{} is still running", self.label);
        }
        self.child = spawn(&self.program, (&self.env, &self.args), self.cpus.as_ref(), &self.launch, true)?;
        self.wait_until_accepting(timeout)
    }

    fn wait_until_accepting(&mut self, timeout: Duration) -> Result<()> {
        let address = SocketAddr::from(([127, 0, 0, 1], self.launch.client_port));
        let deadline = Instant::now() + timeout;
        let outcome = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Err(anyhow!("exited with {status}")),
                Ok(None) => {}
                Err(error) => break Err(anyhow!("cannot check the server process: {error}")),
            }
            if TcpStream::connect_timeout(&address, Duration::from_millis(100)).is_ok() {
                break Ok(());
            }
            if Instant::now() >= deadline {
                break Err(anyhow!("no connection accepted on {address} within {}s", timeout.as_secs()));
            }
            std::thread::sleep(RESTART_POLL);
        };
        outcome.map_err(|error| {
            eprintln!("{}", log_tail(&self.launch.log_path));
            anyhow!("{} ({}) did not start: {error}", self.label, self.program.display())
        })
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
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).context("cannot find a free loopback port")?;
    Ok(listener.local_addr().context("cannot read the bound port")?.port())
}

/// Linux reports process CPU time in clock ticks of 1/100 s (USER_HZ, fixed in its user ABI).
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

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

/// CPU seconds per message between two [`cpu_seconds`] readings; `None` if either is missing
/// or nothing was handled.
pub fn cpu_per_message(before: Option<f64>, after: Option<f64>, messages: u64) -> Option<f64> {
    match (before, after) {
        (Some(before), Some(after)) if messages > 0 => Some((after - before) / messages as f64),
        _ => None,
    }
}

/// User plus system CPU seconds the process has used (Linux `/proc/PID/stat`).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    parse_cpu_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
        .map(|t| t as f64 / CLOCK_TICKS_PER_SECOND)
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line; the command name in
/// parentheses may hold spaces, so fields are counted after its closing parenthesis.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
    // After the name come field 3 (state) onwards: utime is field 14, index 11 here.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
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
    fn cpu_ticks_are_read_after_the_command_name() {
        let stat = "4242 (semaq server) S 1 4242 4242 0 -1 4194560 900 0 0 0 350 25 0 0 20 0 9 0 100 1 2";
        assert_eq!(parse_cpu_ticks(stat), Some(375));
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }

    #[test]
    fn free_ports_are_nonzero() {
        assert_ne!(free_port().unwrap(), 0);
    }
}
