//! Lame duck mode and the INFO clients discover servers by, as nats-server: on SIGUSR2 (or
//! `--signal ldm=<pid>`) the server stops accepting, tells each client with an INFO carrying
//! `"ldm":true`, closes them all after the grace period, flushes JetStream and exits 0. INFO is
//! compared field by field with nats-server 2.9's (ids, names, versions and ports aside).

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use async_nats::Event;
use semaq_testkit::{nats_server_path, output_within, semaq_server_path, NatsServer, Raw, SemaqServer};
use serde_json::Value;
use tokio::sync::mpsc;

/// nats-server's shortest duration; the grace is short so the test is quick. Connections are
/// closed at most a second apart, so a few clients close long before the duration.
const LAME_DUCK_CONFIG: &str = "lame_duck_duration: \"30s\"\nlame_duck_grace_period: \"1s\"\n";

/// Bound on each wait for an event.
const WAIT: Duration = Duration::from_secs(10);

/// The fields that name a process or a connection, not a behaviour.
const PER_PROCESS: &[&str] = &["server_id", "server_name", "version", "go", "port", "client_id"];

/// An INFO body with the per-process fields blanked.
fn normalised(info: &str) -> Value {
    let body = info.trim().strip_prefix("INFO ").unwrap_or_else(|| panic!("not an INFO line: {info:?}"));
    let mut json: Value = serde_json::from_str(body).unwrap_or_else(|error| panic!("INFO JSON ({error}): {body}"));
    for field in PER_PROCESS {
        if let Some(value) = json.get_mut(*field) {
            *value = Value::String("*".to_string());
        }
    }
    json
}

/// The INFO line a new connection to `addr` receives.
fn first_info(addr: SocketAddr) -> String {
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).expect("INFO line");
    line
}

fn nats_server_with(config: &str, extra: &[&str]) -> (NatsServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("server.conf");
    std::fs::write(&path, config).expect("write config");
    let store = dir.path().join("store");
    let mut args = vec!["-c", path.to_str().expect("utf-8"), "-js", "-sd", store.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    (NatsServer::with_args(&args), dir)
}

#[test]
fn info_has_the_fields_nats_server_sends_without_a_cluster() {
    let semaq = SemaqServer::start();
    let (nats, _dir) = nats_server_with("", &[]);
    let (ours, theirs) = (normalised(&semaq.raw_info()), normalised(&first_info(nats.addr())));
    assert_eq!(ours, theirs, "INFO differs from nats-server 2.9's");
    for absent in ["connect_urls", "cluster", "ldm", "domain", "auth_required", "nonce"] {
        assert!(ours.get(absent).is_none(), "{absent} in {ours}");
    }
}

/// A raw client that sent CONNECT with protocol 1, so it is owed async INFO.
fn protocol_one_client(addr: SocketAddr) -> Raw {
    let mut raw = Raw::connect(addr);
    raw.send(b"CONNECT {\"verbose\":false,\"protocol\":1}\r\nPING\r\n");
    raw.expect("PONG\r\n");
    raw
}

/// The next INFO line the client receives.
fn next_info(raw: &mut Raw) -> String {
    raw.expect("INFO ");
    format!("INFO {}", raw.read_until("\r\n"))
}

#[test]
fn the_signal_flag_enters_lame_duck_mode_with_nats_servers_info() {
    let mut semaq = SemaqServer::with_config(LAME_DUCK_CONFIG, &[]);
    let pid_dir = tempfile::tempdir().expect("temp dir");
    let pid_file = pid_dir.path().join("nats.pid");
    let (nats, _dir) = nats_server_with(LAME_DUCK_CONFIG, &["-P", pid_file.to_str().expect("utf-8")]);
    let (mut ours, mut theirs) = (protocol_one_client(semaq.addr()), protocol_one_client(nats.addr()));
    let before = normalised(&semaq.raw_info());

    let mut signal = Command::new(semaq_server_path());
    signal.arg("--signal").arg(format!("ldm={}", semaq.pid()));
    let sent = output_within(signal, WAIT);
    assert!(sent.status.success(), "semaq-server --signal: {}", String::from_utf8_lossy(&sent.stderr));
    let mut signal = Command::new(nats_server_path());
    signal.arg("--signal").arg(format!("ldm={}", pid_file.display()));
    assert!(output_within(signal, WAIT).status.success(), "nats-server --signal");

    let (ldm_ours, ldm_theirs) = (normalised(&next_info(&mut ours)), normalised(&next_info(&mut theirs)));
    assert_eq!(ldm_ours, ldm_theirs, "the lame duck INFO differs from nats-server 2.9's");
    let mut expected = before;
    expected["ldm"] = Value::Bool(true);
    expected["client_id"] = ldm_ours["client_id"].clone();
    assert_eq!(ldm_ours, expected, "the lame duck INFO is the connect INFO with ldm");
    assert!(ours.is_closed(), "the only client is closed after the 1 s grace period");
    assert_eq!(semaq.wait_exit(), Some(0));
    let log = semaq.log_text();
    for line in ["Entering lame duck mode, stop accepting new clients", "Closing existing clients", "Server Exiting.."]
    {
        assert!(log.contains(line), "log lacks {line:?}:\n{log}");
    }
}

/// An async-nats client whose connection events arrive on the returned channel.
async fn watched_client(url: &str) -> (async_nats::Client, mpsc::UnboundedReceiver<Event>) {
    let (sender, events) = mpsc::unbounded_channel();
    let client = async_nats::ConnectOptions::new()
        .event_callback(move |event| {
            let sender = sender.clone();
            async move {
                let _ = sender.send(event);
            }
        })
        .connect(url)
        .await
        .expect("connect");
    (client, events)
}

async fn next_event(events: &mut mpsc::UnboundedReceiver<Event>, wanted: fn(&Event) -> bool, what: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, events.recv()).await {
            Ok(Some(event)) if wanted(&event) => return,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => panic!("no {what} event within {WAIT:?}"),
        }
    }
}

#[tokio::test]
async fn sigusr2_warns_every_client_refuses_new_ones_closes_all_and_keeps_acked_messages() {
    let mut server = SemaqServer::with_config(LAME_DUCK_CONFIG, &[]);
    let js = jetstream::new(server.client().await);
    let config = jetstream::stream::Config { name: "LDM".into(), subjects: vec!["ldm.>".into()], ..Default::default() };
    js.create_stream(config).await.expect("create stream");
    for index in 0..50 {
        js.publish(format!("ldm.{index}"), "kept".into()).await.expect("publish").await.expect("acked");
    }
    let mut watched = Vec::new();
    for _ in 0..3 {
        watched.push(watched_client(&server.url()).await);
    }
    let started = Instant::now();
    let sent = Command::new("kill").args(["-USR2", &server.pid().to_string()]).status().expect("run kill");
    assert!(sent.success(), "kill -USR2");
    for (_, events) in &mut watched {
        next_event(events, |event| matches!(event, Event::LameDuckMode), "lame duck mode").await;
    }
    assert!(TcpStream::connect(server.addr()).is_err(), "a new connection is refused in lame duck mode");
    for (_, events) in &mut watched {
        next_event(events, |event| matches!(event, Event::Disconnected), "disconnected").await;
    }
    assert!(started.elapsed() < Duration::from_secs(30), "every client closed within lame_duck_duration");
    assert_eq!(server.wait_exit(), Some(0), "lame duck mode ends in a clean exit");
    assert!(server.log_text().contains("Trapped \"user defined signal 2\" signal"));

    server.restart();
    let js = jetstream::new(server.client().await);
    let mut stream = js.get_stream("LDM").await.expect("stream after restart");
    assert_eq!(stream.info().await.expect("info").state.messages, 50, "every acknowledged message is kept");
}
