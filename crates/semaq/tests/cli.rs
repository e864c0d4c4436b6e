//! End-to-end tests of the `semaq` binary against a real nats-server (a missing nats-server fails
//! them: `./scripts/test` installs it).

mod support;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use futures::StreamExt;
use semaq_testkit::{nats_server_path, wait_for_exit, NatsServer};
use support::{run, semaq_at, semaq_command, stderr_of};

const WAIT_LIMIT: Duration = Duration::from_secs(15);

/// A `semaq` command pointed at `server`.
fn semaq(server: &NatsServer, args: &[&str]) -> Command {
    semaq_at(&server.url(), args)
}

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0)).and_then(|listener| listener.local_addr()).expect("free port").port()
}

/// Starts `semaq sub ...` and returns once it reports the subscription is live.
fn spawn_subscriber(server: &NatsServer, args: &[&str]) -> Child {
    let mut child = semaq(server, args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("semaq sub");
    let stderr = child.stderr.take().expect("stderr piped");
    let (sender, first_line) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stderr).read_line(&mut line);
        let _ = sender.send(line);
    });
    let line = first_line.recv_timeout(WAIT_LIMIT).unwrap_or_else(|_| {
        let _ = child.kill();
        panic!("semaq sub said nothing within {WAIT_LIMIT:?}")
    });
    assert!(line.starts_with("Subscribing on"), "unexpected first line: {line}");
    child
}

/// Waits for a child with a deadline, so a broken test fails instead of hanging.
fn wait_with_deadline(mut child: Child) -> (std::process::ExitStatus, String) {
    let Some(status) = wait_for_exit(&mut child, WAIT_LIMIT) else {
        let _ = child.kill();
        panic!("child did not exit in time");
    };
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout piped"), &mut stdout).expect("read stdout");
    (status, stdout)
}

#[test]
fn pub_reaches_sub_with_count() {
    let server = NatsServer::start();
    let subscriber = spawn_subscriber(&server, &["sub", "demo.>", "--count", "2"]);
    let published = run(semaq(&server, &["pub", "demo.a", "hello {{i}}", "--count", "2"]));
    assert!(published.status.success(), "{}", stderr_of(&published));
    assert_eq!(stderr_of(&published), "Published 2 messages (14 bytes) to \"demo.a\"\n");
    let (status, stdout) = wait_with_deadline(subscriber);
    assert!(status.success());
    assert_eq!(stdout, "[#1] Received on \"demo.a\"\nhello 1\n\n[#2] Received on \"demo.a\"\nhello 2\n\n");
}

#[test]
fn sub_json_shows_headers_and_binary_payloads() {
    let server = NatsServer::start();
    let subscriber = spawn_subscriber(&server, &["sub", "ai.events", "--count", "2", "--json"]);
    let with_header = run(semaq(&server, &["pub", "ai.events", "{\"x\":1}", "-H", "Semaq-Model: llama3", "-q"]));
    assert!(with_header.status.success(), "{}", stderr_of(&with_header));
    let mut binary = semaq(&server, &["pub", "ai.events", "-q"]).stdin(Stdio::piped()).spawn().expect("semaq pub");
    std::io::Write::write_all(&mut binary.stdin.take().expect("stdin piped"), &[0xff, 0x00]).expect("write stdin");
    assert!(wait_for_exit(&mut binary, WAIT_LIMIT).expect("pub exits in time").success());
    let (status, stdout) = wait_with_deadline(subscriber);
    assert!(status.success());
    let lines: Vec<serde_json::Value> =
        stdout.lines().map(|line| serde_json::from_str(line).expect("one JSON object per line")).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["payload"], "{\"x\":1}");
    assert_eq!(lines[0]["headers"]["Semaq-Model"][0], "llama3");
    assert_eq!(lines[1]["payload"], "/wA=");
    assert_eq!(lines[1]["encoding"], "base64");
}

#[test]
fn req_prints_the_reply() {
    let server = NatsServer::start();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (client, requests) = runtime.block_on(async {
        let client = async_nats::connect(server.url()).await.expect("responder connects");
        let requests = client.subscribe("svc.echo").await.expect("responder subscribes");
        // A request through the server proves the SUB above was processed before semaq runs.
        let _ = client.request("svc.sync-check", "".into()).await;
        (client, requests)
    });
    let responder = runtime.spawn(echo_once(client, requests));
    let output = run(semaq(&server, &["req", "svc.echo", "ping", "-H", "X-Test: 1", "--headers"]));
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "Echo: yes\n\npong: ping\n");
    runtime.block_on(responder).expect("responder finished");
}

/// Answers one request with `pong: <payload>` and an `Echo: yes` header.
async fn echo_once(client: async_nats::Client, mut requests: async_nats::Subscriber) {
    let request = requests.next().await.expect("one request");
    let reply = request.reply.expect("request has a reply subject");
    let test_header = request.headers.and_then(|headers| headers.get("X-Test").map(|value| value.to_string()));
    assert_eq!(test_header.as_deref(), Some("1"));
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Echo", "yes");
    let payload = format!("pong: {}", String::from_utf8_lossy(&request.payload));
    client.publish_with_headers(reply, headers, payload.into()).await.expect("reply");
    client.flush().await.expect("flush");
}

#[test]
fn req_without_responders_fails_clearly() {
    let server = NatsServer::start();
    let output = run(semaq(&server, &["req", "nobody.home", "hi"]));
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stderr_of(&output), "semaq: no responders on nobody.home\n");
}

#[test]
fn sub_filter_on_a_server_without_filters_fails_clearly() {
    let server = NatsServer::start();
    let output = run(semaq(&server, &["sub", "ai.inference", "--filter", "confidence > 0.85"]));
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stderr_of(&output), "semaq: the server does not support filtered subscriptions\n");
}

#[test]
fn refused_connection_is_one_line() {
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let output = run(semaq_command(&["pub", "x", "y", "--server", &url]));
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stderr_of(&output), format!("semaq: cannot connect to {url}: connection refused\n"));
}

#[test]
fn bench_scenarios_deliver_everything() {
    let server = NatsServer::start();
    for scenario in ["pubsub", "fanout", "queue", "latency"] {
        let output = run(semaq(&server, &["bench", scenario, "--msgs", "5000", "--quiet"]));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{scenario}: {}{stdout}", stderr_of(&output));
        assert!(stdout.contains("p99"), "{scenario}: {stdout}");
        assert!(!stdout.contains("PROBLEM"), "{scenario}: {stdout}");
    }
    let queue = run(semaq(&server, &["bench", "queue", "--msgs", "5000", "--quiet"]));
    assert!(String::from_utf8_lossy(&queue.stdout).contains("exactly-once: every message delivered to one member"));
}

#[test]
fn bench_compare_runs_nats_against_itself() {
    let nats = nats_server_path();
    let dir = tempfile::tempdir().expect("temp dir");
    let markdown = dir.path().join("compare.md");
    let nats = nats.to_string_lossy().into_owned();
    let markdown_arg = markdown.to_string_lossy().into_owned();
    let args = [
        "bench",
        "compare",
        "--rounds",
        "1",
        "--scenarios",
        "pubsub,latency,idle-conns",
        "--msgs",
        "2000",
        "--idle-conns",
        "50",
        "--semaq-server",
        &nats,
        "--nats-server",
        &nats,
        "--markdown",
        &markdown_arg,
        "--quiet",
    ];
    let output = run(semaq_command(&args));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}{stdout}", stderr_of(&output));
    for row in ["pubsub", "latency", "idle-conns"] {
        assert!(stdout.lines().any(|line| line.starts_with(row)), "missing {row}: {stdout}");
    }
    let table = std::fs::read_to_string(&markdown).expect("markdown written");
    assert!(table.contains("| pubsub | msgs/s ↑ |"), "{table}");
}
