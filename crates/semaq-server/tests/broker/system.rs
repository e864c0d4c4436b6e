//! The system account's `$SYS` server requests, side by side with nats-server 2.9: a user of the
//! system account pings the server and asks it for its varz, statsz, healthz and subsz, and gets
//! nats-server's `{server, data}` envelope; it hears other accounts' clients connect and go.

use std::time::Duration;

use async_nats::Client;
use futures::StreamExt;
use nkeys::KeyPair;
use semaq_testkit::{NatsServer, SemaqServer};
use serde_json::{json, Value};

use crate::account_limits::nats_server_with;
use crate::auth_nkeys::{account_claims, creds, mint, unlimited_user};

/// An operator config trusting a system account and an application account.
fn config() -> (String, KeyPair, KeyPair) {
    config_where(SystemNamed::InConfigAndOperator)
}

/// Where an operator config names its system account.
#[derive(Debug, Clone, Copy, PartialEq)]
enum SystemNamed {
    /// `system_account` in the config, and in the operator's JWT.
    InConfigAndOperator,
    /// Only in the operator's JWT.
    InOperator,
    /// Nowhere: the "system" account is one more account.
    Nowhere,
}

/// An operator config trusting an account meant as the system account, named as `named` says,
/// and an application account.
fn config_where(named: SystemNamed) -> (String, KeyPair, KeyPair) {
    let operator = KeyPair::new_operator();
    let (system, app) = (KeyPair::new_account(), KeyPair::new_account());
    let mut operator_claims = json!({ "type": "operator", "version": 2 });
    if named != SystemNamed::Nowhere {
        operator_claims["system_account"] = json!(system.public_key());
    }
    let operator_jwt = mint(&operator, &operator.public_key(), operator_claims, json!({}));
    let account = |key: &KeyPair| {
        let jwt = mint(&operator, &key.public_key(), account_claims(json!({}), json!({})), json!({}));
        format!("  {}: {jwt}\n", key.public_key())
    };
    let system_line = match named {
        SystemNamed::InConfigAndOperator => format!("system_account: {}\n", system.public_key()),
        SystemNamed::InOperator | SystemNamed::Nowhere => String::new(),
    };
    let config = format!(
        "operator: {operator_jwt}\n{system_line}resolver: MEMORY\nresolver_preload {{\n{}{}}}\n",
        account(&system),
        account(&app),
    );
    (config, system, app)
}

async fn system_user(dir: &std::path::Path, url: &str, system: &KeyPair) -> Client {
    user_of(dir, url, system, "sys").await
}

async fn user_of(dir: &std::path::Path, url: &str, account: &KeyPair, name: &str) -> Client {
    let user = KeyPair::new_user();
    let jwt = mint(account, &user.public_key(), unlimited_user(json!({})), json!({}));
    let path = creds(dir, name, &jwt, &user.seed().unwrap());
    let options = async_nats::ConnectOptions::with_credentials_file(path).await.expect("creds file");
    options.connect(url).await.unwrap_or_else(|error| panic!("the system user connects to {url}: {error}"))
}

async fn ask(client: &Client, subject: &str) -> Value {
    let reply = tokio::time::timeout(Duration::from_secs(5), client.request(subject.to_string(), "".into()))
        .await
        .unwrap_or_else(|_| panic!("an answer to {subject}"))
        .unwrap_or_else(|error| panic!("{subject}: {error}"));
    serde_json::from_slice(&reply.payload).expect("a JSON answer")
}

/// What the answers say, in terms both servers share.
async fn answers(client: &Client) -> Vec<String> {
    let mut seen = Vec::new();
    let varz = ask(client, "$SYS.REQ.SERVER.PING.VARZ").await;
    let id = varz["server"]["id"].as_str().unwrap_or_default().to_string();
    seen.push(format!("varz of the server that answers: {}", varz["data"]["server_id"] == json!(id)));
    seen.push(format!(
        "envelope fields: {}",
        ["name", "host", "id", "ver", "seq", "time"].iter().all(|f| varz["server"].get(f).is_some())
    ));
    let statsz = ask(client, "$SYS.REQ.SERVER.PING").await;
    seen.push(format!("statsz connections: {}", statsz["statsz"]["connections"]));
    seen.push(format!("statsz has traffic: {}", statsz["statsz"]["received"]["msgs"].is_u64()));
    let healthz = ask(client, &format!("$SYS.REQ.SERVER.{id}.HEALTHZ")).await;
    seen.push(format!("healthz: {}", healthz["data"]["status"]));
    let subsz = ask(client, &format!("$SYS.REQ.SERVER.{id}.SUBSZ")).await;
    seen.push(format!("subsz counts: {}", subsz["data"]["num_subscriptions"].is_u64()));
    seen
}

#[tokio::test]
async fn the_system_account_answers_server_pings_with_nats_servers_envelope() {
    let dir = tempfile::tempdir().unwrap();
    let (config, system, _) = config();
    let semaq = SemaqServer::with_config(&config, &[]);
    let (nats, _nats_dir) = nats_server_with(&config);
    let expected = [
        "varz of the server that answers: true",
        "envelope fields: true",
        "statsz connections: 1",
        "statsz has traffic: true",
        "healthz: \"ok\"",
        "subsz counts: true",
    ];
    for url in [nats.url(), semaq.url()] {
        let client = system_user(dir.path(), &url, &system).await;
        assert_eq!(answers(&client).await, expected, "{url}");
    }
}

/// A client of the application account connects, then closes; what the system user hears.
async fn events(dir: &std::path::Path, url: &str, system: &KeyPair, app: &KeyPair) -> Vec<String> {
    let watcher = system_user(dir, url, system).await;
    // One subscription, so the two events keep the order the server sent them in. Only the
    // application account's: nats-server may announce the watcher's own connection after its
    // subscription is in place. Besides these both send the account's `SERVER.CONNS`.
    let mut events = watcher.subscribe(format!("$SYS.ACCOUNT.{}.>", app.public_key())).await.unwrap();
    semaq_testkit::sync(&watcher).await;
    let client = user_of(dir, url, app, "app").await;
    client.flush().await.unwrap();
    drop(client);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let event = tokio::time::timeout(Duration::from_secs(5), events.next()).await.expect("an event").unwrap();
        if !(event.subject.ends_with(".CONNECT") || event.subject.ends_with(".DISCONNECT")) {
            continue;
        }
        let body: Value = serde_json::from_slice(&event.payload).expect("JSON");
        let account_named =
            event.subject.as_str().contains(&app.public_key()) && body["client"]["acc"] == json!(app.public_key());
        seen.push(format!(
            "{} {} {} reason={}",
            event.subject.as_str().rsplit('.').next().unwrap_or_default(),
            body["type"].as_str().unwrap_or_default(),
            account_named,
            body["reason"].as_str().unwrap_or("-"),
        ));
    }
    seen
}

#[tokio::test]
async fn the_system_account_hears_clients_of_other_accounts_connect_and_disconnect() {
    let dir = tempfile::tempdir().unwrap();
    let (config, system, app) = config();
    let semaq = SemaqServer::with_config(&config, &[]);
    let (nats, _nats_dir) = nats_server_with(&config);
    let expected = [
        "CONNECT io.nats.server.advisory.v1.client_connect true reason=-",
        "DISCONNECT io.nats.server.advisory.v1.client_disconnect true reason=Client Closed",
    ];
    for url in [nats.url(), semaq.url()] {
        assert_eq!(events(dir.path(), &url, &system, &app).await, expected, "{url}");
    }
}

/// Whether anyone answers `subject` for `client`: `Some(JSON)`, or `None` on no responders.
async fn maybe_ask(client: &Client, subject: &str) -> Option<Value> {
    let reply = tokio::time::timeout(Duration::from_secs(5), client.request(subject.to_string(), "".into()))
        .await
        .unwrap_or_else(|_| panic!("an answer or no responders to {subject}"));
    match reply {
        Ok(reply) => Some(serde_json::from_slice(&reply.payload).expect("a JSON answer")),
        Err(error) if error.kind() == async_nats::RequestErrorKind::NoResponders => None,
        Err(error) => panic!("{subject}: {error}"),
    }
}

/// Who answers a ping in the system account, and the connz every other account imports.
async fn sys_services(dir: &std::path::Path, url: &str, system: &KeyPair, app: &KeyPair) -> Vec<String> {
    let system_user = system_user(dir, url, system).await;
    let app_user = user_of(dir, url, app, "app").await;
    let ping = maybe_ask(&system_user, "$SYS.REQ.SERVER.PING").await;
    let pinged = ping.map(|ping| ping["statsz"]["connections"].clone());
    let connz = maybe_ask(&app_user, "$SYS.REQ.SERVER.PING.CONNZ").await;
    let own_connections = connz.map(|connz| connz["data"]["num_connections"].clone());
    vec![format!("ping answered, connections: {pinged:?}"), format!("imported connz, connections: {own_connections:?}")]
}

#[tokio::test]
async fn an_operator_jwt_naming_a_system_account_makes_it_the_system_account_without_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let (config, system, app) = config_where(SystemNamed::InOperator);
    let semaq = SemaqServer::with_config(&config, &[]);
    let (nats, _nats_dir) = nats_server_with(&config);
    let expected = ["ping answered, connections: Some(Number(2))", "imported connz, connections: Some(Number(1))"];
    for url in [nats.url(), semaq.url()] {
        assert_eq!(sys_services(dir.path(), &url, &system, &app).await, expected, "{url}");
    }
}

#[tokio::test]
async fn operator_mode_naming_no_system_account_has_no_implicit_one_and_no_sys_services() {
    let dir = tempfile::tempdir().unwrap();
    let (config, system, app) = config_where(SystemNamed::Nowhere);
    let semaq = SemaqServer::with_config(&config, &[]);
    // Without JetStream: nats-server's needs a system account, and refuses to start without one.
    let nats = NatsServer::with_config(&config);
    let expected = ["ping answered, connections: None", "imported connz, connections: None"];
    for url in [nats.url(), semaq.url()] {
        assert_eq!(sys_services(dir.path(), &url, &system, &app).await, expected, "{url}");
    }
}

#[test]
fn an_operator_naming_a_system_account_it_did_not_preload_is_refused_as_in_nats_server() {
    let (config, system, _) = config_where(SystemNamed::InOperator);
    let preloaded = format!("  {}:", system.public_key());
    let config: String =
        config.lines().filter(|line| !line.starts_with(&preloaded)).map(|line| format!("{line}\n")).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.conf");
    std::fs::write(&path, &config).unwrap();
    let mut nats = std::process::Command::new(semaq_testkit::nats_server_path());
    nats.args(["-a", "127.0.0.1", "-p", "-1", "-c", path.to_str().expect("utf-8 path")]);
    let theirs = semaq_testkit::output_within(nats, Duration::from_secs(10));
    let theirs = String::from_utf8_lossy(&theirs.stderr).into_owned() + &String::from_utf8_lossy(&theirs.stdout);
    let refusal = "error resolving system account: account missing";
    assert!(theirs.contains(refusal), "nats-server: {theirs}");
    let ours = SemaqServer::builder().config(&config).output();
    let stderr = String::from_utf8_lossy(&ours.stderr);
    assert!(!ours.status.success(), "SemaQ started: {stderr}");
    assert!(stderr.contains(refusal), "{stderr}");
}
