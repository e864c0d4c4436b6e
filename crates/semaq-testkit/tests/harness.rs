//! The harness against stand-in servers (shell scripts that log like semaq-server), a real
//! nats-server, and loopback sockets: start-up, failures that must not pass, exit and restart.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use semaq_testkit::{wait_until, NatsServer, Raw, SemaqServer};

const READY_LOG: &str = r#"echo "[1] [INF] Listening for client connections on 127.0.0.1:4999" >&2
echo "[1] [INF] Starting http monitor on 127.0.0.1:8999" >&2
echo "[1] [INF] Server is ready" >&2"#;

/// An executable shell script in `dir` that logs like semaq-server, then runs `body`.
fn stand_in(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Whether process `pid` still exists.
fn alive(pid: u32) -> bool {
    Command::new("kill").args(["-0", &pid.to_string()]).stderr(std::process::Stdio::null()).status().unwrap().success()
}

#[test]
fn start_reads_the_logged_addresses_and_passes_the_default_flags() {
    let scripts = tempfile::tempdir().unwrap();
    let program = stand_in(scripts.path(), "server", &format!("echo \"args: $*\" >&2\n{READY_LOG}\nexec sleep 30"));
    let server = SemaqServer::builder().program(&program).config("port: 1\n").arg("-js").start();
    assert_eq!(server.url(), "nats://127.0.0.1:4999");
    assert_eq!(server.http_addr().to_string(), "127.0.0.1:8999");
    let store = server.store();
    assert_eq!(store, server.dir().join("store"));
    let config = server.dir().join("server.conf");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "port: 1\n");
    let expected = format!("args: -a 127.0.0.1 -p -1 -m -1 -sd {} -c {} -js", store.display(), config.display());
    assert!(server.log_text().lines().any(|line| line == expected), "{}", server.log_text());
}

#[test]
fn a_server_is_killed_on_drop() {
    let scripts = tempfile::tempdir().unwrap();
    let program = stand_in(scripts.path(), "server", &format!("{READY_LOG}\nexec sleep 30"));
    let server = SemaqServer::builder().program(&program).start();
    let pid = server.pid();
    assert!(alive(pid));
    drop(server);
    assert!(!alive(pid), "pid {pid} outlived its SemaqServer");
}

#[test]
#[should_panic(expected = "cargo build -p semaq-server")]
fn a_missing_binary_fails_saying_how_to_build_it() {
    SemaqServer::builder().program("/nonexistent/semaq-server").start();
}

#[test]
#[should_panic(expected = "exited before it was ready")]
fn a_server_that_exits_during_start_up_fails_the_test() {
    let scripts = tempfile::tempdir().unwrap();
    let program = stand_in(scripts.path(), "server", "echo 'bad config' >&2\nexit 1");
    SemaqServer::builder().program(&program).start();
}

#[test]
fn a_server_that_never_gets_ready_fails_within_the_bound_with_its_log() {
    let scripts = tempfile::tempdir().unwrap();
    let program = stand_in(scripts.path(), "server", "echo 'still loading' >&2\nexec sleep 30");
    let started = Instant::now();
    let outcome = std::panic::catch_unwind(|| {
        SemaqServer::builder().program(&program).ready_within(Duration::from_millis(300)).start();
    });
    let message = *outcome.expect_err("start-up must fail").downcast::<String>().unwrap();
    assert!(message.contains("did not log `Server is ready` within 300ms"), "{message}");
    assert!(message.contains("still loading"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[test]
fn terminate_wait_exit_and_restart_on_the_same_store() {
    let scripts = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    // Counts its starts in the store; exits 0 on SIGTERM, or 86 on its own at the second start.
    let body = format!(
        "trap 'exit 0' TERM\nstore=\"$6\"\necho x >> \"$store/starts\"\n{READY_LOG}\n\
         if [ \"$(wc -l < \"$store/starts\")\" -eq 2 ]; then exit 86; fi\n\
         while :; do sleep 0.05; done"
    );
    let program = stand_in(scripts.path(), "server", &body);
    let mut server = SemaqServer::builder().program(&program).no_monitoring().store(store.path()).start();
    assert_eq!(server.store(), store.path());
    assert_eq!(server.terminate(), Some(0));
    server.restart();
    assert_eq!(server.wait_exit(), Some(86));
    server.restart();
    let pid = server.pid();
    server.kill();
    assert!(!alive(pid));
    let starts = std::fs::read_to_string(store.path().join("starts")).unwrap();
    assert_eq!(starts.lines().count(), 3);
}

#[test]
#[should_panic(expected = "still running; kill or terminate it first")]
fn restarting_a_running_server_fails() {
    let scripts = tempfile::tempdir().unwrap();
    let program = stand_in(scripts.path(), "server", &format!("{READY_LOG}\nexec sleep 30"));
    let mut server = SemaqServer::builder().program(&program).start();
    server.restart();
}

#[test]
fn output_runs_a_refused_start_up_to_its_end() {
    let scripts = tempfile::tempdir().unwrap();
    let program = stand_in(scripts.path(), "server", "echo \"refused: $*\" >&2\nexit 3");
    let output = SemaqServer::builder().program(&program).bare().args(["-c", "x.conf"]).output();
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&output.stderr), "refused: -c x.conf\n");
}

#[test]
fn raw_reads_past_info_expects_text_and_sees_the_close() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream.write_all(b"INFO {\"server_id\":\"x\"}\r\n").unwrap();
        let mut line = String::new();
        BufReader::new(stream.try_clone().unwrap()).read_line(&mut line).unwrap();
        stream.write_all(b"PONG\r\n").unwrap();
        line
    });
    let mut raw = Raw::connect(addr);
    raw.send(b"PING\r\n");
    raw.expect("PONG\r\n");
    assert_eq!(peer.join().unwrap(), "PING\r\n");
    assert!(raw.is_closed());
}

#[tokio::test]
async fn a_real_nats_server_starts_and_takes_clients() {
    let server = NatsServer::start();
    assert!(server.url().starts_with("nats://127.0.0.1:"), "{}", server.url());
    let client = server.client().await;
    let mut subscriber = client.subscribe("kit.check").await.unwrap();
    client.publish("kit.check", "hello".into()).await.unwrap();
    let message = tokio::time::timeout(Duration::from_secs(5), subscriber.next()).await.unwrap().unwrap();
    assert_eq!(message.payload, "hello");
    assert!(server.log_text().contains("Server is ready"), "{}", server.log_text());
}

#[test]
fn wait_until_sees_a_condition_another_thread_makes_true() {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let setter = flag.clone();
    std::thread::spawn(move || setter.store(true, std::sync::atomic::Ordering::SeqCst));
    wait_until("the flag is set", Duration::from_secs(5), || flag.load(std::sync::atomic::Ordering::SeqCst));
}
