//! The system account's `$SYS` server requests, side by side with nats-server 2.9: a user of the
//! system account pings the server and asks it for its varz, statsz, healthz and subsz, and gets
//! nats-server's `{server, data}` envelope; it hears other accounts' clients connect and go.

use std::time::Duration;

use async_nats::Client;
use futures::StreamExt;
use nkeys::KeyPair;
use semaq_testkit::SemaqServer;
use serde_json::{json, Value};

use crate::account_limits::nats_server_with;
use crate::auth_nkeys::{account_claims, creds, mint, unlimited_user};

/// An operator config trusting a system account and an application account.
fn config() -> (String, KeyPair, KeyPair) {
    let operator = KeyPair::new_operator();
    let (system, app) = (KeyPair::new_account(), KeyPair::new_account());
    let operator_jwt = mint(
        &operator,
        &operator.public_key(),
        json!({ "type": "operator", "version": 2, "system_account": system.public_key() }),
        json!({}),
    );
    let account = |key: &KeyPair| {
        let jwt = mint(&operator, &key.public_key(), account_claims(json!({}), json!({})), json!({}));
        format!("  {}: {jwt}\n", key.public_key())
    };
    let config = format!(
        "operator: {operator_jwt}\nsystem_account: {}\nresolver: MEMORY\nresolver_preload {{\n{}{}}}\n",
        system.public_key(),
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
    // subscription is in place. Besides these it sends `SERVER.CONNS`, which SemaQ does not.
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
