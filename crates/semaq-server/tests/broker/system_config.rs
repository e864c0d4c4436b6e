//! The system account outside operator mode, side by side with nats-server 2.9: the account
//! `system_account` names, an account named `$SYS`, or the implicit `$SYS`; `/accountz` names
//! it; its users subscribe to `$SYS.>`, ask the server's `$SYS.REQ.SERVER` services and hear
//! other accounts' clients connect and go, and the server's statsz heartbeat.

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::Client;
use futures::StreamExt;
use semaq_testkit::{http_get_json, NatsServer, SemaqServer};
use serde_json::{json, Value};

/// Bound on every wait for a reply or an event.
const WAIT: Duration = Duration::from_secs(5);

/// A `$SYS` account with its user, and two application accounts.
pub(crate) const SYS_CONFIG: &str = "accounts {\n  $SYS { users [ {user: sys, password: sys} ] }\n  \
     A { users [ {user: a, password: a} ] }\n  B { users [ {user: b, password: b} ] }\n}\n";

/// nats-server with `config` and a monitoring port; JetStream only when `jetstream`.
pub(crate) fn nats_with(config: &str, jetstream: bool) -> (NatsServer, std::net::SocketAddr, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("server.conf");
    std::fs::write(&path, config).expect("write config");
    let http = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port");
    let store = dir.path().join("store");
    let (path, store, port) = (path.display().to_string(), store.display().to_string(), http.port().to_string());
    let mut args = vec!["-c", &path, "-m", &port];
    if jetstream {
        args.extend(["-js", "-sd", &store]);
    }
    (NatsServer::with_args(&args), http, dir)
}

pub(crate) async fn login(url: &str, user: &str) -> Client {
    async_nats::ConnectOptions::with_user_and_password(user.into(), user.into())
        .connect(url)
        .await
        .unwrap_or_else(|error| panic!("{user} connects to {url}: {error}"))
}

pub(crate) async fn ask(client: &Client, subject: &str, body: &str) -> Value {
    let reply = tokio::time::timeout(WAIT, client.request(subject.to_string(), body.to_string().into()))
        .await
        .unwrap_or_else(|_| panic!("an answer to {subject}"))
        .unwrap_or_else(|error| panic!("{subject}: {error}"));
    serde_json::from_slice(&reply.payload).expect("a JSON answer")
}

/// Runs `scenario` against nats-server and then SemaQ, both started with `config` and JetStream
/// off, and checks that each comes out as `expected`.
pub(crate) async fn both_servers_agree<T, E, F, Fut>(config: &str, expected: E, scenario: F)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = T>,
    T: PartialEq<E> + std::fmt::Debug,
    E: std::fmt::Debug,
{
    let (nats, _http, _dir) = nats_with(config, false);
    assert_eq!(scenario(nats.url()).await, expected, "nats-server");
    let semaq = SemaqServer::with_config(&format!("{config}jetstream: false\n"), &[]);
    assert_eq!(scenario(semaq.url()).await, expected, "SemaQ");
}

/// `/accountz` as both servers must agree on it: the system account and the set of accounts.
fn accountz(body: &Value) -> (Value, BTreeSet<String>) {
    let accounts = body["accounts"].as_array().into_iter().flatten();
    (body["system_account"].clone(), accounts.filter_map(|a| a.as_str().map(str::to_string)).collect())
}

#[test]
fn accountz_and_varz_name_the_system_account_as_nats_server_does() {
    let cases = [
        ("accounts { A { users [ {user: a, password: a} ] } }\n", json!("$SYS"), vec!["$G", "$SYS", "A"]),
        (SYS_CONFIG, json!("$SYS"), vec!["$G", "$SYS", "A", "B"]),
        ("system_account: A\naccounts { A { users [ {user: a, password: a} ] } }\n", json!("A"), vec!["$G", "A"]),
        ("no_system_account: true\n", Value::Null, vec!["$G"]),
    ];
    for (config, system, accounts) in cases {
        let expected = (system, accounts.into_iter().map(str::to_string).collect());
        let (_nats, http, _dir) = nats_with(config, false);
        assert_eq!(accountz(&http_get_json(http, "/accountz")), expected, "nats-server with {config}");
        let semaq = SemaqServer::with_config(&format!("{config}jetstream: false\n"), &[]);
        assert_eq!(accountz(&semaq.http_json("/accountz")), expected, "SemaQ with {config}");
        let varz = |body: Value| body["system_account"].clone();
        assert_eq!(varz(semaq.http_json("/varz")), varz(http_get_json(http, "/varz")), "/varz with {config}");
        if let Value::String(system) = &expected.0 {
            let detail = semaq.http_json(&format!("/accountz?acc={system}"));
            let reference = http_get_json(http, &format!("/accountz?acc={system}"));
            assert_eq!(detail["account_detail"]["is_system"], reference["account_detail"]["is_system"]);
            assert_eq!(detail["account_detail"]["is_system"], true);
        }
    }
}

#[test]
fn no_system_account_still_has_one_when_jetstream_is_on() {
    let config = "no_system_account: true\n";
    let (_nats, http, _dir) = nats_with(config, true);
    let expected = (json!("$SYS"), ["$G", "$SYS"].map(str::to_string).into());
    assert_eq!(accountz(&http_get_json(http, "/accountz")), expected);
    let semaq = SemaqServer::with_config(config, &[]);
    assert_eq!(accountz(&semaq.http_json("/accountz")), expected);
}

#[test]
fn jetstream_in_the_system_account_is_refused_at_start_as_in_nats_server() {
    let config = "system_account: A\naccounts { A { jetstream: enabled, users [ {user: a, password: a} ] } }\n";
    let output = SemaqServer::builder().config(config).output();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "SemaQ started: {stderr}");
    assert!(stderr.contains("Not allowed to enable JetStream on the system account"), "{stderr}");
}

#[test]
fn a_system_account_that_is_not_an_account_is_a_config_error() {
    let output = SemaqServer::builder().config("system_account: \"$SYS\"\n").output();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "SemaQ started: {stderr}");
    assert!(stderr.contains("error resolving system account: account missing"), "{stderr}");
}

/// What a client without credentials, and the `$SYS` user, can do when `$SYS` is the only account.
async fn only_system_account(url: String) -> Vec<String> {
    let anonymous = async_nats::connect(&url).await.map(|_| "connects");
    let sys = login(&url, "sys").await;
    let mut sub = sys.subscribe("$SYS.>").await.expect("the system user subscribes to $SYS.>");
    sys.publish("$SYS.custom", "x".into()).await.expect("publish");
    let heard = loop {
        let message = tokio::time::timeout(WAIT, sub.next()).await.expect("a $SYS message").expect("open");
        if message.subject.as_str() == "$SYS.custom" {
            break message.payload;
        }
    };
    vec![format!("anonymous: {:?}", anonymous.map_err(|_| "refused")), format!("sys hears: {heard:?}")]
}

#[tokio::test]
async fn with_only_a_system_account_clients_without_credentials_join_the_global_account() {
    let config = "accounts { $SYS { users [ {user: sys, password: sys} ] } }\n";
    let expected = ["anonymous: Ok(\"connects\")", "sys hears: b\"x\""];
    both_servers_agree(config, expected, only_system_account).await;
}

/// The `$SYS` user asks the server's services by ping and by id.
async fn server_services(url: String) -> Vec<String> {
    let sys = login(&url, "sys").await;
    let varz = ask(&sys, "$SYS.REQ.SERVER.PING.VARZ", "").await;
    let id = varz["server"]["id"].as_str().unwrap_or_default().to_string();
    let healthz = ask(&sys, &format!("$SYS.REQ.SERVER.{id}.HEALTHZ"), "").await;
    let statsz = ask(&sys, "$SYS.REQ.SERVER.PING", "").await;
    let connz = ask(&sys, "$SYS.REQ.SERVER.PING.CONNZ", "").await;
    let routez = ask(&sys, "$SYS.REQ.SERVER.PING.ROUTEZ", "").await;
    let gatewayz = ask(&sys, &format!("$SYS.REQ.SERVER.{id}.GATEWAYZ"), "").await;
    vec![
        format!("varz of the server that answers: {}", varz["data"]["server_id"] == json!(id)),
        format!("healthz: {}", healthz["data"]["status"]),
        format!("statsz connections: {}", statsz["statsz"]["connections"]),
        format!("connz connections: {}", connz["data"]["num_connections"]),
        format!("routez: {} {}", routez["data"]["num_routes"], routez["data"]["routes"]),
        format!("gatewayz: {} {}", gatewayz["data"]["outbound_gateways"], gatewayz["data"]["inbound_gateways"]),
    ]
}

#[tokio::test]
async fn the_config_system_account_answers_server_requests() {
    let expected = [
        "varz of the server that answers: true",
        "healthz: \"ok\"",
        "statsz connections: 1",
        "connz connections: 1",
        "routez: 0 []",
        "gatewayz: {} {}",
    ];
    both_servers_agree(SYS_CONFIG, expected, server_services).await;
}

/// A client of A connects then closes; what the `$SYS` user hears of account A.
async fn connection_events(url: String) -> Vec<String> {
    let sys = login(&url, "sys").await;
    // One subscription, so the events keep the order the server sent them in.
    let mut events = sys.subscribe("$SYS.ACCOUNT.A.>").await.expect("subscribe");
    semaq_testkit::sync(&sys).await;
    let client = login(&url, "a").await;
    client.flush().await.expect("flush");
    drop(client);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let event = tokio::time::timeout(WAIT, events.next()).await.expect("an event").expect("open");
        let Some(kind) =
            ["CONNECT", "DISCONNECT"].into_iter().find(|k| event.subject.as_str().ends_with(&format!(".{k}")))
        else {
            continue;
        };
        let body: Value = serde_json::from_slice(&event.payload).expect("JSON");
        seen.push(format!("{kind} {} acc={} user={}", body["type"], body["client"]["acc"], body["client"]["user"]));
    }
    seen
}

#[tokio::test]
async fn the_config_system_account_hears_clients_of_other_accounts_connect_and_disconnect() {
    let expected = [
        "CONNECT \"io.nats.server.advisory.v1.client_connect\" acc=\"A\" user=\"a\"",
        "DISCONNECT \"io.nats.server.advisory.v1.client_disconnect\" acc=\"A\" user=\"a\"",
    ];
    both_servers_agree(SYS_CONFIG, expected, connection_events).await;
}

/// The first statsz heartbeat the `$SYS` user hears: whether it names the server it comes from.
async fn statsz_heartbeat(url: String) -> Vec<String> {
    let sys = login(&url, "sys").await;
    let mut beats = sys.subscribe("$SYS.SERVER.*.STATSZ").await.expect("subscribe");
    // The interval grows to 10 s; a window longer than that holds a beat whenever it opens.
    let beat = tokio::time::timeout(Duration::from_secs(15), beats.next()).await.expect("a heartbeat").expect("open");
    let body: Value = serde_json::from_slice(&beat.payload).expect("JSON");
    let id = body["server"]["id"].as_str().unwrap_or_default();
    vec![
        format!("subject names the server: {}", beat.subject.as_str() == format!("$SYS.SERVER.{id}.STATSZ")),
        format!("connections: {}", body["statsz"]["connections"]),
        format!("has traffic: {}", body["statsz"]["sent"]["msgs"].is_u64()),
    ]
}

#[tokio::test]
async fn the_system_account_hears_the_servers_statsz_heartbeat() {
    let expected = ["subject names the server: true", "connections: 1", "has traffic: true"];
    both_servers_agree(SYS_CONFIG, expected, statsz_heartbeat).await;
}

/// `/subsz` as monitoring tools read it, after a client of A subscribed to `orders.>`.
async fn subsz_page(url: &str, get: impl Fn(&str) -> Value) -> Vec<String> {
    let a = login(url, "a").await;
    let _orders = a.subscribe("orders.>").await.expect("subscribe");
    semaq_testkit::sync(&a).await;
    let listed = get("/subsz?subs=1&test=orders.new");
    let subs = listed["subscriptions_list"].as_array().cloned().unwrap_or_default();
    let plain = get("/subsz");
    vec![
        format!("listed: {:?}", subs.iter().map(|s| format!("{}:{}", s["account"], s["subject"])).collect::<Vec<_>>()),
        format!("total {} offset {} limit {}", listed["total"], listed["offset"], listed["limit"]),
        // nats-server 2.9 gives the figures alone here; later versions add total, offset and limit.
        format!("without subs: list={} counts={}", plain["subscriptions_list"], plain["num_subscriptions"].is_u64()),
    ]
}

#[tokio::test]
async fn subsz_lists_the_subscriptions_a_test_subject_reaches_as_nats_server_does() {
    let (nats, http, _dir) = nats_with(SYS_CONFIG, false);
    let semaq = SemaqServer::with_config(SYS_CONFIG, &[]);
    let expected = [
        "listed: [\"\\\"A\\\":\\\"orders.>\\\"\"]",
        "total 1 offset 0 limit 1024",
        "without subs: list=null counts=true",
    ];
    assert_eq!(subsz_page(&nats.url(), |path| http_get_json(http, path)).await, expected, "nats-server");
    assert_eq!(subsz_page(&semaq.url(), |path| semaq.http_json(path)).await, expected, "SemaQ");
}
