//! Starting the server the way nats-server's client test harnesses do, liveness, and shutdown.

use std::time::{Duration, Instant};

use semaq_testkit::{sync, SemaqServer};

#[tokio::test]
async fn starts_like_nats_server_from_a_config_file_with_a_ports_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("js");
    let config = format!(
        r#"
        # a typical client-library harness config
        server_name: harness
        http_port: -1
        authorization {{
          users = [ {{ user: "derek", password: "s3cr3t" }} ]
        }}
        jetstream {{
          store_dir: "{}"
          max_mem_store: 64MiB
          max_file_store: 1GB
        }}
        "#,
        store.display()
    );
    let config_path = dir.path().join("nats.conf");
    std::fs::write(&config_path, config).unwrap();
    let ports_dir = dir.path().join("ports");
    std::fs::create_dir(&ports_dir).unwrap();
    let server = SemaqServer::builder()
        .bare()
        .args(["-p", "-1", "-c"])
        .arg(&config_path)
        .arg("--ports_file_dir")
        .arg(&ports_dir)
        .start();
    let ports_file = ports_dir.join(format!("semaq-server_{}.ports", server.pid()));
    let ports: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&ports_file).unwrap()).unwrap();
    let nats_url = ports["nats"][0].as_str().unwrap().to_string();
    let monitoring = ports["monitoring"][0].as_str().unwrap();
    assert_eq!(nats_url, server.url());
    assert_eq!(monitoring, format!("http://{}", server.http_addr()));
    let varz = server.http_json("/varz");
    assert_eq!(varz["server_name"], "harness");
    assert_eq!(varz["auth_required"], true);
    assert!(store.is_dir(), "store directory created");
    let client = async_nats::ConnectOptions::with_user_and_password("derek".into(), "s3cr3t".into())
        .connect(nats_url)
        .await
        .unwrap();
    client.flush().await.unwrap();
}

#[test]
fn go_style_flags_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("-sd={}", dir.path().join("s").display());
    let server = SemaqServer::builder()
        .bare()
        .args(["--addr=127.0.0.1", "--port=-1", "-m=-1", "-js", &store, "-DV", "--name=flags"])
        .start();
    assert_eq!(server.http_json("/varz")["server_name"], "flags");
}

#[test]
fn a_malformed_config_file_stops_startup_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.conf");
    std::fs::write(&path, "port: 4222\nauthorization {\n  user: \"a\n").unwrap();
    let output = SemaqServer::builder().bare().arg("-c").arg(&path).output();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("line"), "{stderr}");
}

#[test]
fn clients_that_stop_answering_pings_are_closed_as_stale() {
    let server = SemaqServer::with_config("ping_interval: \"100ms\"\nping_max: 2\n", &[]);
    let mut raw = server.raw();
    raw.send(b"CONNECT {}\r\n");
    raw.expect("PING\r\n");
    raw.expect("-ERR 'Stale Connection'");
    assert!(raw.is_closed());
}

#[test]
fn clients_that_answer_pings_stay_connected() {
    let server = SemaqServer::with_config("ping_interval: \"100ms\"\nping_max: 2\n", &[]);
    let mut raw = server.raw();
    raw.send(b"CONNECT {}\r\n");
    for _ in 0..5 {
        raw.expect("PING\r\n");
        raw.send(b"PONG\r\n");
    }
    raw.send(b"PING\r\n");
    raw.expect("PONG\r\n");
}

#[tokio::test]
async fn sigterm_flushes_pending_messages_and_exits_zero() {
    let mut server = SemaqServer::start();
    let mut raw = server.raw();
    raw.send(b"CONNECT {}\r\nSUB bye 1\r\nPING\r\n");
    raw.expect("PONG");
    let client = server.client().await;
    for _ in 0..1000 {
        client.publish("bye", "x".into()).await.unwrap();
    }
    sync(&client).await;
    let started = Instant::now();
    assert_eq!(server.terminate(), Some(0));
    assert!(started.elapsed() < Duration::from_secs(8));
    let received = raw.drain(Duration::from_millis(500));
    let messages = received.matches("MSG bye 1 1\r\nx\r\n").count();
    assert_eq!(messages, 1000, "every accepted message was flushed before exit");
}

#[test]
fn the_first_keepalive_ping_comes_two_seconds_after_connect_as_from_nats_server() {
    // The default interval is two minutes; nats-server pings a client early (2 s, plus up to a
    // fifth at random) to measure its round trip soon after it connected.
    let semaq = SemaqServer::start();
    let (nats, _dir) = crate::account_limits::nats_server_with("");
    for addr in [semaq.addr(), nats.addr()] {
        let mut raw = semaq_testkit::Raw::connect(addr);
        let connected = Instant::now();
        raw.send(b"CONNECT {\"verbose\":false}\r\n");
        raw.expect("PING\r\n");
        let after = connected.elapsed();
        assert!(
            after >= Duration::from_millis(1_900) && after < Duration::from_secs(4),
            "{addr}: first PING after {after:?}"
        );
    }
}

/// Keepalive PINGs `raw` receives over `phase`, answered with PONGs; when `active`, it publishes
/// every 40 ms meanwhile.
fn pings_received(raw: &mut semaq_testkit::Raw, phase: Duration, active: bool) -> usize {
    let deadline = Instant::now() + phase;
    let mut pings = 0;
    while Instant::now() < deadline {
        if active {
            raw.send(b"PUB nobody.listens 0\r\n\r\n");
        }
        let arrived = raw.drain(Duration::from_millis(40)).matches("PING\r\n").count();
        raw.send(&b"PONG\r\n".repeat(arrived));
        pings += arrived;
    }
    pings
}

#[test]
fn an_active_client_gets_only_the_first_keepalive_ping_as_from_nats_server() {
    let config = "ping_interval: \"200ms\"\nping_max: 2\n";
    let semaq = SemaqServer::with_config(config, &[]);
    let (nats, _dir) = crate::account_limits::nats_server_with(config);
    for addr in [semaq.addr(), nats.addr()] {
        let mut raw = semaq_testkit::Raw::connect(addr);
        raw.send(b"CONNECT {\"verbose\":false}\r\nPING\r\n");
        raw.expect("PONG\r\n");
        // The first PING measures the round trip; later ones are skipped while data flows.
        let while_active = pings_received(&mut raw, Duration::from_millis(1500), true);
        assert_eq!(while_active, 1, "{addr}: PINGs while the client published");
        let while_idle = pings_received(&mut raw, Duration::from_millis(1000), false);
        assert!(while_idle >= 2, "{addr}: {while_idle} PINGs while the client was idle");
    }
}
