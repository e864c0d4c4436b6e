//! Running the `semaq` CLI in tests. Servers come from `semaq-testkit`: its `semaq-server` is the
//! one next to `semaq` in the same target directory. `cargo test --workspace` (`./scripts/test`)
//! builds it before any test runs; with `cargo test -p semaq` alone build it first with
//! `cargo build -p semaq-server`. A missing `semaq-server` (or `nats-server`) fails the test.

// Each test binary uses a subset of these helpers.
#![allow(dead_code)]

use std::process::{Command, Output};
use std::time::Duration;

use semaq_testkit::{output_within, SemaqServer};

/// The `semaq` binary under test.
pub const SEMAQ: &str = env!("CARGO_BIN_EXE_semaq");
/// Bound on one `semaq` run (benches included), so a hung run fails instead of hanging.
pub const RUN_LIMIT: Duration = Duration::from_secs(300);

/// `semaq ARGS`, without the environment's `SEMAQ_URL` / `NATS_URL`.
pub fn semaq_command(args: &[&str]) -> Command {
    let mut command = Command::new(SEMAQ);
    command.args(args).env_remove("SEMAQ_URL").env_remove("NATS_URL");
    command
}

/// `semaq ARGS --server URL`.
pub fn semaq_at(url: &str, args: &[&str]) -> Command {
    let mut command = semaq_command(args);
    command.args(["--server", url]);
    command
}

/// Runs `command` to its end within [`RUN_LIMIT`].
pub fn run(command: Command) -> Output {
    output_within(command, RUN_LIMIT)
}

/// Runs `semaq` against a [`SemaqServer`].
pub trait Semaq {
    /// Runs `semaq ARGS --server URL` in the server's temp dir.
    fn semaq(&self, args: &[&str]) -> Output;
}

impl Semaq for SemaqServer {
    fn semaq(&self, args: &[&str]) -> Output {
        let mut command = semaq_at(&self.url(), args);
        command.current_dir(self.dir());
        run(command)
    }
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
