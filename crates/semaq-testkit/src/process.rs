//! Child processes: start-up on a logged `Server is ready`, logs kept, bounded waits for exit.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Bound on a server's start-up, until it logs `Server is ready`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on a server's exit after SIGTERM, or on its own.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Every line a server process logged so far; it keeps filling while the process runs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    /// The lines so far.
    pub(crate) fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The lines so far, joined with newlines.
    pub(crate) fn text(&self) -> String {
        self.lines().join("\n")
    }

    fn push(&self, line: String) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(line);
    }
}

/// A server process that logged `Server is ready`, and the addresses it logged.
pub(crate) struct Started {
    pub child: Child,
    pub addr: SocketAddr,
    pub http: Option<SocketAddr>,
    pub log: Log,
}

/// Spawns `command` (semaq-server or nats-server, which log alike), keeps draining its stderr
/// into a [`Log`], and waits at most `ready_within` for `Server is ready`; panics with the log
/// when the process exits first or takes longer.
pub(crate) fn start_logged(name: &str, mut command: Command, ready_within: Duration) -> Started {
    let mut child =
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap_or_else(|error| {
            panic!("cannot start {name} ({}): {error}", command.get_program().to_string_lossy())
        });
    let stderr = child.stderr.take().expect("stderr piped");
    let log = Log::default();
    let (sender, lines) = mpsc::channel();
    let kept = log.clone();
    std::thread::spawn(move || {
        // Keeps draining after start-up, so the server never blocks on a full pipe.
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            kept.push(line.clone());
            let _ = sender.send(line);
        }
    });
    let (mut addr, mut http) = (None, None);
    let deadline = Instant::now() + ready_within;
    loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                if let Some(rest) = line.split("Listening for client connections on ").nth(1) {
                    addr = rest.trim().parse().ok();
                }
                if let Some(rest) = line.split("Starting http monitor on ").nth(1) {
                    http = rest.trim().parse().ok();
                }
                if line.contains("Server is ready") {
                    break;
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{name} did not log `Server is ready` within {ready_within:?}; its log:\n{}", log.text());
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = wait_for_exit(&mut child, EXIT_TIMEOUT);
                panic!("{name} exited before it was ready ({status:?}); its log:\n{}", log.text());
            }
        }
    }
    let Some(addr) = addr else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{name} was ready without logging its client address; its log:\n{}", log.text());
    };
    Started { child, addr, http, log }
}

/// Waits at most `within` for `child` to exit; its status, or `None` if it is still running.
pub fn wait_for_exit(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `command` to completion like [`Command::output`] (stdin closed), but kills it and panics,
/// with what it wrote so far, if it runs longer than `within`.
pub fn output_within(mut command: Command, within: Duration) -> Output {
    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot start {program}: {error}"));
    let read_all = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = read_all(Box::new(child.stdout.take().expect("stdout piped")));
    let stderr = read_all(Box::new(child.stderr.take().expect("stderr piped")));
    let Some(status) = wait_for_exit(&mut child, within) else {
        let _ = child.kill();
        let _ = child.wait();
        let (stdout, stderr) = (stdout.join().unwrap_or_default(), stderr.join().unwrap_or_default());
        panic!(
            "{program} still running after {within:?}; stdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        );
    };
    Output { status, stdout: stdout.join().expect("stdout reader"), stderr: stderr.join().expect("stderr reader") }
}
