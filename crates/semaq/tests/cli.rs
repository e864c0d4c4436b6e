//! End-to-end tests of the `semaq` binary against a real nats-server (skipped when it is not installed).

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;

const SEMAQ: &str = env!("CARGO_BIN_EXE_semaq");
const WAIT_LIMIT: Duration = Duration::from_secs(15);

/// A nats-server on a random loopback port, killed on drop.
struct NatsServer {
    url: String,
    child: Child,
    _ports_dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts nats-server from PATH, or returns `None` (with a notice) when it is not installed.
    fn start(test: &str) -> Option<NatsServer> {
        let Some(program) = nats_server_path() else {
            eprintln!("skipping {test}: nats-server is not on PATH");
            return None;
        };
        // `-p -1` lets nats-server pick its own port, named in its ports file: probing a port
        // chosen beforehand could reach another test's server on the same port.
        let ports_dir = tempfile::tempdir().expect("ports dir");
        let child = Command::new(program)
            .args(["-a", "127.0.0.1", "-p", "-1", "--ports_file_dir"])
            .arg(ports_dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        let ports_file = ports_dir.path().join(format!("nats-server_{}.ports", child.id()));
        let deadline = Instant::now() + WAIT_LIMIT;
        let url = loop {
            let ports =
                std::fs::read(&ports_file).ok().and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
            if let Some(url) = ports.as_ref().and_then(|p| p["nats"][0].as_str()) {
                break url.to_string();
            }
            assert!(Instant::now() < deadline, "nats-server did not write its ports file");
            std::thread::sleep(Duration::from_millis(20));
        };
        let address = url.trim_start_matches("nats://").to_string();
        while TcpStream::connect(&address).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not accept connections");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(NatsServer { url, child, _ports_dir: ports_dir })
    }

    /// A `semaq` command pointed at this server.
    fn semaq(&self, args: &[&str]) -> Command {
        let mut command = Command::new(SEMAQ);
        command.args(args).args(["--server", &self.url]).env_remove("SEMAQ_URL").env_remove("NATS_URL");
        command
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nats_server_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("nats-server")).find(|candidate| candidate.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0)).and_then(|listener| listener.local_addr()).expect("free port").port()
}

/// Starts `semaq sub ...` and returns once it reports the subscription is live.
fn spawn_subscriber(server: &NatsServer, args: &[&str]) -> Child {
    let mut child = server.semaq(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("semaq sub");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr piped"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("read stderr");
    assert!(line.starts_with("Subscribing on"), "unexpected first line: {line}");
    child
}

/// Waits for a child with a deadline, so a broken test fails instead of hanging.
fn wait_with_deadline(mut child: Child) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + WAIT_LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("child did not exit in time");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stdout = String::new();
    child.stdout.take().expect("stdout piped").read_to_string(&mut stdout).expect("read stdout");
    (status, stdout)
}

fn run(mut command: Command) -> Output {
    command.output().expect("semaq runs")
}

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn pub_reaches_sub_with_count() {
    let Some(server) = NatsServer::start("pub_reaches_sub_with_count") else { return };
    let subscriber = spawn_subscriber(&server, &["sub", "demo.>", "--count", "2"]);
    let published = run(server.semaq(&["pub", "demo.a", "hello {{i}}", "--count", "2"]));
    assert!(published.status.success(), "{}", stderr_of(&published));
    assert_eq!(stderr_of(&published), "Published 2 messages (14 bytes) to \"demo.a\"\n");
    let (status, stdout) = wait_with_deadline(subscriber);
    assert!(status.success());
    assert_eq!(stdout, "[#1] Received on \"demo.a\"\nhello 1\n\n[#2] Received on \"demo.a\"\nhello 2\n\n");
}

#[test]
fn sub_json_shows_headers_and_binary_payloads() {
    let Some(server) = NatsServer::start("sub_json_shows_headers_and_binary_payloads") else { return };
    let subscriber = spawn_subscriber(&server, &["sub", "ai.events", "--count", "2", "--json"]);
    let with_header = run(server.semaq(&["pub", "ai.events", "{\"x\":1}", "-H", "Semaq-Model: llama3", "-q"]));
    assert!(with_header.status.success(), "{}", stderr_of(&with_header));
    let mut binary = server.semaq(&["pub", "ai.events", "-q"]).stdin(Stdio::piped()).spawn().expect("semaq pub");
    std::io::Write::write_all(&mut binary.stdin.take().expect("stdin piped"), &[0xff, 0x00]).expect("write stdin");
    assert!(binary.wait().expect("pub exits").success());
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
    let Some(server) = NatsServer::start("req_prints_the_reply") else { return };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (client, requests) = runtime.block_on(async {
        let client = async_nats::connect(server.url.as_str()).await.expect("responder connects");
        let requests = client.subscribe("svc.echo").await.expect("responder subscribes");
        // A request through the server proves the SUB above was processed before semaq runs.
        let _ = client.request("svc.sync-check", "".into()).await;
        (client, requests)
    });
    let responder = runtime.spawn(echo_once(client, requests));
    let output = run(server.semaq(&["req", "svc.echo", "ping", "-H", "X-Test: 1", "--headers"]));
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
    let Some(server) = NatsServer::start("req_without_responders_fails_clearly") else { return };
    let output = run(server.semaq(&["req", "nobody.home", "hi"]));
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stderr_of(&output), "semaq: no responders on nobody.home\n");
}

#[test]
fn sub_filter_on_a_server_without_filters_fails_clearly() {
    let Some(server) = NatsServer::start("sub_filter_on_a_server_without_filters_fails_clearly") else { return };
    let output = run(server.semaq(&["sub", "ai.inference", "--filter", "confidence > 0.85"]));
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stderr_of(&output), "semaq: the server does not support filtered subscriptions\n");
}

#[test]
fn refused_connection_is_one_line() {
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let output = run({
        let mut command = Command::new(SEMAQ);
        command.args(["pub", "x", "y", "--server", &url]);
        command
    });
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(stderr_of(&output), format!("semaq: cannot connect to {url}: connection refused\n"));
}

#[test]
fn bench_scenarios_deliver_everything() {
    let Some(server) = NatsServer::start("bench_scenarios_deliver_everything") else { return };
    for scenario in ["pubsub", "fanout", "queue", "latency"] {
        let output = run(server.semaq(&["bench", scenario, "--msgs", "5000", "--quiet"]));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{scenario}: {}{stdout}", stderr_of(&output));
        assert!(stdout.contains("p99"), "{scenario}: {stdout}");
        assert!(!stdout.contains("PROBLEM"), "{scenario}: {stdout}");
    }
    let queue = run(server.semaq(&["bench", "queue", "--msgs", "5000", "--quiet"]));
    assert!(String::from_utf8_lossy(&queue.stdout).contains("exactly-once: every message delivered to one member"));
}

#[test]
fn bench_compare_runs_nats_against_itself() {
    let Some(nats) = nats_server_path() else {
        eprintln!("skipping bench_compare_runs_nats_against_itself: nats-server is not on PATH");
        return;
    };
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
    let output = run({
        let mut command = Command::new(SEMAQ);
        command.args(args);
        command
    });
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}{stdout}", stderr_of(&output));
    for row in ["pubsub", "latency", "idle-conns"] {
        assert!(stdout.lines().any(|line| line.starts_with(row)), "missing {row}: {stdout}");
    }
    let table = std::fs::read_to_string(&markdown).expect("markdown written");
    assert!(table.contains("| pubsub | msgs/s ↑ |"), "{table}");
}
