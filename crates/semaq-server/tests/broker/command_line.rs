//! `semaq-server`'s own command line: what it prints when asked for help or its version.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// `semaq-server <flag>` with its standard output a pipe whose reader has already gone, as
/// `semaq-server --help | head -1` leaves it once `head` has its line: its exit and its stderr.
fn with_stdout_closed(flag: &str) -> (ExitStatus, String) {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let mut child = Command::new(semaq_testkit::semaq_server_path())
        .arg(flag)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .spawn()
        .expect("semaq-server starts");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("its status") {
            break status;
        }
        assert!(Instant::now() < deadline, "semaq-server {flag} did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    child.stderr.take().expect("stderr piped").read_to_string(&mut stderr).expect("stderr read");
    (status, stderr)
}

#[test]
fn help_and_version_to_a_reader_that_left_exit_cleanly_without_a_panic() {
    for flag in ["--help", "--version"] {
        let (status, stderr) = with_stdout_closed(flag);
        assert!(status.success(), "{flag}: {status:?} {stderr}");
        assert!(!stderr.contains("panicked"), "{flag}: {stderr}");
    }
}
