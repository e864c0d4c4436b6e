//! A `semaq-server` for CLI tests, and helpers to run `semaq` against it.
//!
//! Cargo gives this crate's tests only `semaq`'s own binaries, so `semaq-server` is found next to
//! `semaq` in the same target directory; `cargo test --workspace` (`./scripts/test`) builds it.
//! With only `cargo test -p semaq` it may be missing, and the test says so and skips.

// Each test binary uses a subset of these helpers.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SEMAQ: &str = env!("CARGO_BIN_EXE_semaq");

/// A semaq-server on a random loopback port with its store in a temp dir, killed on drop.
pub struct SemaqServer {
    /// `nats://host:port`.
    pub url: String,
    child: Child,
    /// The server's working directory (and the CLI's).
    pub dir: tempfile::TempDir,
}

impl SemaqServer {
    /// Starts a server, or `None` (the test skips) when the binary is not built.
    pub fn start(test: &str) -> Option<SemaqServer> {
        let program = server_path();
        if !program.is_file() {
            eprintln!("skipping {test}: {} is not built (cargo build -p semaq-server)", program.display());
            return None;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let (child, url) = spawn_server(&["-a", "127.0.0.1", "-p", "-1", "-m", "-1"], &dir.path().join("store"));
        Some(SemaqServer { url, child, dir })
    }

    /// Runs `semaq ARGS --server URL` in the server's temp dir.
    pub fn semaq(&self, args: &[&str]) -> Output {
        Command::new(SEMAQ)
            .args(args)
            .args(["--server", &self.url])
            .current_dir(self.dir.path())
            .env_remove("SEMAQ_URL")
            .env_remove("NATS_URL")
            .output()
            .expect("semaq runs")
    }
}

impl Drop for SemaqServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `semaq-server ARGS -sd STORE` and waits until it is ready; the child and its client URL.
pub fn spawn_server(args: &[&str], store: &Path) -> (Child, String) {
    let mut child = Command::new(server_path())
        .args(args)
        .arg("-sd")
        .arg(store)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("semaq-server starts");
    let stderr = child.stderr.take().expect("stderr piped");
    let (sender, log) = mpsc::channel();
    std::thread::spawn(move || {
        // Keep draining so the server never blocks on a full pipe.
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut address = None;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let line = log.recv_timeout(remaining).expect("semaq-server did not become ready");
        if let Some(rest) = line.split("Listening for client connections on ").nth(1) {
            address = Some(rest.trim().to_string());
        }
        if line.contains("Server is ready") {
            break;
        }
    }
    (child, format!("nats://{}", address.expect("client address logged")))
}

pub fn server_path() -> PathBuf {
    let semaq = Path::new(SEMAQ);
    semaq.with_file_name(format!("semaq-server{}", std::env::consts::EXE_SUFFIX))
}

pub fn stdout_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts success, showing stderr otherwise.
pub fn ok(output: Output) -> Output {
    assert!(output.status.success(), "semaq failed: {}", stderr_of(&output));
    output
}

/// Asserts exit code 1 with exactly one `semaq: ...` line on stderr, and returns that line.
pub fn one_line_failure(output: Output) -> String {
    assert_eq!(output.status.code(), Some(1), "expected failure, got stdout {}", stdout_of(&output));
    let stderr = stderr_of(&output);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one error line: {stderr}");
    assert!(lines[0].starts_with("semaq: "), "{stderr}");
    lines[0].to_string()
}
