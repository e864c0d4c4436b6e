//! Service latency tracking and `share`, side by side with nats-server 2.9: a request through
//! an import of a service export with `latency` publishes nats-server's `ServiceLatency` result
//! in the exporting account (its fields, the requester's details only when the import shares
//! them, client RTTs estimated at CONNECT, `503` when no responder answers, `400` without a
//! reply subject, `408` when the requester stops listening, `504` past the export's
//! `response_threshold`); the responder sees the requester in `Nats-Request-Info`; `sampling:
//! headers` measures only requests whose `traceparent` says sampled; JWT exports' `latency`
//! claims measure alike; a bad `latency` stops startup with nats-server's message.

use std::time::Duration;

use async_nats::{Client, HeaderMap};
use futures::StreamExt;
use nkeys::KeyPair;
use semaq_testkit::{sync, SemaqServer};
use serde_json::{json, Value};

use crate::account_limits::nats_server_with;
use crate::auth_nkeys::{account_claims, mint, operator_jwt_naming};
use crate::imports::{jwt_user, refusal};

const CONFIG: &str = r#"
accounts {
  A {
    users: [{ user: a, password: a }]
    exports: [
      { service: "svc", latency: { sampling: 100, subject: "latency.svc" } }
      { service: "plain", latency: "latency.plain" }
      { service: "hdr", latency: { sampling: headers, subject: "latency.hdr" } }
      { service: "slow", latency: { sampling: 100, subject: "latency.slow" }, response_threshold: "500ms" }
    ]
  }
  B {
    users: [{ user: b, password: b }]
    imports: [
      { service: { account: A, subject: "svc" }, share: true }
      { service: { account: A, subject: "plain" } }
      { service: { account: A, subject: "hdr" } }
      { service: { account: A, subject: "slow" } }
    ]
  }
}
"#;

/// Longest wait for a message that should come.
const ARRIVAL: Duration = Duration::from_secs(5);
const SAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const UNSAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";

async fn login(url: &str, user: &str) -> Client {
    let options = async_nats::ConnectOptions::with_user_and_password(user.into(), user.into()).name(user);
    options.connect(url).await.unwrap_or_else(|error| panic!("{user} connects to {url}: {error}"))
}

async fn next(subscriber: &mut async_nats::Subscriber) -> async_nats::Message {
    tokio::time::timeout(ARRIVAL, subscriber.next()).await.expect("in time").expect("a message")
}

/// A's responder on `subject`: answers each request, after sending its `Nats-Request-Info` to `seen`.
async fn serve(a: &Client, subject: &str) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (seen, info) = tokio::sync::mpsc::unbounded_channel();
    let mut requests = a.subscribe(subject.to_string()).await.unwrap();
    sync(a).await;
    let a = a.clone();
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let header = request.headers.as_ref().and_then(|h| h.get("Nats-Request-Info")).map(|v| v.to_string());
            let _ = seen.send(header.unwrap_or_default());
            if let Some(reply) = request.reply {
                a.publish(reply, "answer".into()).await.unwrap();
            }
        }
    });
    info
}

/// The object's keys, sorted.
fn keys(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default();
    keys.sort_unstable();
    keys
}

/// What a result shows, values normalised: its keys, its requestor's and responder's keys, the
/// status and description, the requestor's account and name.
fn shape(result: &Value) -> Value {
    serde_json::json!({
        "keys": keys(result),
        "requestor": keys(&result["requestor"]),
        "responder": keys(&result["responder"]),
        "type": result["type"],
        "status": result["status"],
        "description": result["description"],
        "requestor_acc": result["requestor"]["acc"],
        "requestor_name": result["requestor"]["name"],
        "responder_name": result["responder"]["name"],
        "header": result["header"],
    })
}

/// B's request on `subject` (with `headers`) answered through the import: the result on
/// `latency.<subject>`, checked against the clock, and the `Nats-Request-Info` A saw.
async fn measured(url: &str, subject: &str, headers: HeaderMap) -> (Value, Value) {
    let (a, b) = (login(url, "a").await, login(url, "b").await);
    measured_between(&a, &b, url, subject, headers).await
}

/// [`measured`] with exporter `a` and importer `b` already connected.
async fn measured_between(a: &Client, b: &Client, url: &str, subject: &str, headers: HeaderMap) -> (Value, Value) {
    let mut results = a.subscribe(format!("latency.{subject}")).await.unwrap();
    let mut info = serve(a, subject).await;
    let started = std::time::Instant::now();
    let answer = tokio::time::timeout(ARRIVAL, b.request_with_headers(subject.to_string(), headers, "q".into()))
        .await
        .expect("in time")
        .expect("answered");
    assert_eq!(&answer.payload[..], b"answer");
    let result: Value = serde_json::from_slice(&next(&mut results).await.payload).expect("JSON");
    let elapsed = i64::try_from(started.elapsed().as_nanos()).unwrap();
    let total = result["total"].as_i64().expect("total in nanoseconds");
    // The total adds the requester's RTT, estimated at connect, to the time the request took.
    let bound = elapsed + result["requestor"]["rtt"].as_i64().unwrap_or(0) + 5_000_000;
    assert!((0..=bound).contains(&total), "{url}: total {total} ns within the {elapsed} ns round trip");
    let seen = tokio::time::timeout(ARRIVAL, info.recv()).await.unwrap().unwrap();
    (result, serde_json::from_str(&seen).unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_request_through_a_shared_import_reports_nats_servers_latency_result_with_the_requester() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (nats, _dir) = nats_server_with(CONFIG);
    let (semaq_result, semaq_info) = measured(&semaq.url(), "svc", HeaderMap::new()).await;
    let (nats_result, nats_info) = measured(&nats.url(), "svc", HeaderMap::new()).await;
    assert_eq!(shape(&semaq_result), shape(&nats_result));
    assert_eq!(semaq_result["status"], 200);
    assert_eq!(semaq_result["requestor"]["name"], "b", "the import shares the requester's details");
    assert_eq!(
        keys(&semaq_result),
        ["id", "requestor", "responder", "service", "start", "status", "system", "timestamp", "total", "type"]
    );
    assert_eq!(keys(&semaq_info), keys(&nats_info), "Nats-Request-Info holds the same details");
    let (requestor_rtt, responder_rtt) =
        (semaq_result["requestor"]["rtt"].as_i64(), semaq_result["responder"]["rtt"].as_i64());
    assert!(requestor_rtt > Some(0) && responder_rtt > Some(0), "both RTTs estimated at CONNECT");
    let (service, total) = (semaq_result["service"].as_i64().unwrap(), semaq_result["total"].as_i64().unwrap());
    assert!(total >= service + requestor_rtt.unwrap_or(0), "the requester's RTT counts in the total");
    assert_eq!((&semaq_info["acc"], &semaq_info["name"]), (&Value::from("B"), &Value::from("b")));
}

#[tokio::test]
async fn an_import_that_does_not_share_reports_only_the_requesters_account() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (nats, _dir) = nats_server_with(CONFIG);
    let (semaq_result, semaq_info) = measured(&semaq.url(), "plain", HeaderMap::new()).await;
    let (nats_result, nats_info) = measured(&nats.url(), "plain", HeaderMap::new()).await;
    assert_eq!(shape(&semaq_result), shape(&nats_result));
    assert_eq!(keys(&semaq_result["requestor"]), ["acc", "rtt"]);
    assert_eq!(semaq_result["requestor"]["acc"], "B");
    assert_eq!(semaq_result["responder"]["name"], "a", "the responder's details are the exporter's own");
    let account_and_rtt = vec!["acc".to_string(), "rtt".to_string()];
    assert_eq!((keys(&semaq_info), keys(&nats_info)), (account_and_rtt.clone(), account_and_rtt));
}

fn traced(parent: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("traceparent", parent);
    headers
}

#[tokio::test]
async fn header_sampling_measures_only_requests_whose_traceparent_says_sampled() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (nats, _dir) = nats_server_with(CONFIG);
    for url in [semaq.url(), nats.url()] {
        let (a, b) = (login(&url, "a").await, login(&url, "b").await);
        let mut results = a.subscribe("latency.hdr").await.unwrap();
        let _info = serve(&a, "hdr").await;
        for parent in [UNSAMPLED, SAMPLED] {
            let request = b.request_with_headers("hdr", traced(parent), "q".into());
            tokio::time::timeout(ARRIVAL, request).await.expect("in time").expect("answered");
        }
        // The unsampled request went first: had it been measured, its result would come first.
        let result: Value = serde_json::from_slice(&next(&mut results).await.payload).unwrap();
        assert_eq!(result["header"], serde_json::json!({ "Traceparent": [SAMPLED] }), "{url}");
        assert_eq!(result["status"], 200, "{url}");
    }
}

/// The first result on `latency.svc` after B's `publish`.
async fn error_result(url: &str, respond: bool, with_reply: bool) -> Value {
    let (a, b) = (login(url, "a").await, login(url, "b").await);
    let mut results = a.subscribe("latency.svc").await.unwrap();
    let _info = if respond { Some(serve(&a, "svc").await) } else { None };
    sync(&a).await;
    // nats-server 2.9 sends the requester nothing when nobody answers, so no request waits here.
    match with_reply {
        true => b.publish_with_reply("svc", "inbox.b", "q".into()).await.unwrap(),
        false => b.publish("svc", "q".into()).await.unwrap(),
    }
    serde_json::from_slice(&next(&mut results).await.payload).unwrap()
}

#[tokio::test]
async fn a_request_no_responder_takes_is_reported_503_and_one_without_a_reply_400() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (nats, _dir) = nats_server_with(CONFIG);
    let unavailable = error_result(&semaq.url(), false, true).await;
    assert_eq!(shape(&unavailable), shape(&error_result(&nats.url(), false, true).await));
    assert_eq!((&unavailable["status"], &unavailable["description"]), (&503.into(), &"Service Unavailable".into()));
    let bad = error_result(&semaq.url(), true, false).await;
    assert_eq!(shape(&bad), shape(&error_result(&nats.url(), true, false).await));
    assert_eq!((&bad["status"], &bad["description"]), (&400.into(), &"Bad Request".into()));
}

/// A request B sent that A's responder holds unanswered.
struct Unanswered {
    a: Client,
    b: Client,
    /// The request as A received it.
    request: async_nats::Message,
    /// B's subscription to the request's reply subject.
    inbox: async_nats::Subscriber,
    /// A's subscription to the latency results.
    results: async_nats::Subscriber,
}

/// B's request on `subject` replying to `inbox.<subject>`, received by A and not answered.
async fn unanswered(url: &str, subject: &str) -> Unanswered {
    let (a, b) = (login(url, "a").await, login(url, "b").await);
    let results = a.subscribe(format!("latency.{subject}")).await.unwrap();
    let mut requests = a.subscribe(subject.to_string()).await.unwrap();
    sync(&a).await;
    let inbox = b.subscribe(format!("inbox.{subject}")).await.unwrap();
    b.publish_with_reply(subject.to_string(), format!("inbox.{subject}"), "q".into()).await.unwrap();
    sync(&b).await;
    let request = next(&mut requests).await;
    Unanswered { a, b, request, inbox, results }
}

/// Nothing arrives on `subscriber` for a while.
async fn quiet(subscriber: &mut async_nats::Subscriber) -> bool {
    tokio::time::timeout(Duration::from_millis(300), subscriber.next()).await.is_err()
}

#[tokio::test]
async fn a_requester_that_stops_listening_before_the_response_is_reported_408_and_the_response_dropped() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (nats, _dir) = nats_server_with(CONFIG);
    let mut shapes = Vec::new();
    for url in [semaq.url(), nats.url()] {
        let Unanswered { a, b, request, mut inbox, mut results } = unanswered(&url, "svc").await;
        inbox.unsubscribe().await.unwrap();
        sync(&b).await;
        let result: Value = serde_json::from_slice(&next(&mut results).await.payload).unwrap();
        // Listening again after the result: the request is given up by then.
        let mut watch = b.subscribe("inbox.svc").await.unwrap();
        sync(&b).await;
        a.publish(request.reply.expect("a reply subject"), "late".into()).await.unwrap();
        sync(&a).await;
        assert_eq!((&result["status"], &result["description"]), (&408.into(), &"Request Timeout".into()), "{url}");
        assert_eq!(result["requestor"]["name"], "b", "{url}: the import shares the requester");
        assert!(quiet(&mut results).await, "{url}: no second result for the late response");
        assert!(quiet(&mut watch).await, "{url}: the late response went nowhere");
        shapes.push(shape(&result));
    }
    assert_eq!(shapes[0], shapes[1]);
}

/// Well under `TRACKED_RECHECK_INTERVAL` (1 s): only a wake by the unsubscribe itself is this quick.
const AT_ONCE: Duration = Duration::from_millis(200);

#[tokio::test]
async fn a_requester_unsubscribing_disconnecting_or_auto_unsubscribed_is_reported_408_at_once_as_in_nats_server() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (nats, _dir) = nats_server_with(CONFIG);
    for url in [semaq.url(), nats.url()] {
        // Clear of the servers' first periodic checks, which could find a lost requester by chance.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        for round in 0..4 {
            let Unanswered { a: _a, b, request: _request, mut inbox, mut results } = unanswered(&url, "svc").await;
            let started = std::time::Instant::now();
            if round == 2 {
                drop(inbox);
                b.drain().await.expect("disconnect");
            } else if round == 0 {
                // Auto-unsubscribed after one message, which something else sends first; the
                // subscriber is kept, so the client sends no UNSUB (the first round: no client
                // of an earlier one goes meanwhile either).
                inbox.unsubscribe_after(1).await.expect("auto-unsubscribe");
                b.publish("inbox.svc", "not the response".into()).await.expect("publish");
                sync(&b).await;
            } else {
                inbox.unsubscribe().await.expect("unsubscribe");
                sync(&b).await;
            }
            let result: Value = serde_json::from_slice(&next(&mut results).await.payload).expect("a result");
            let waited = started.elapsed();
            assert_eq!(result["status"], 408, "{url}: {result}");
            assert!(waited < AT_ONCE, "{url}, round {round}: {waited:?}");
        }
    }
}

#[tokio::test]
async fn a_response_to_a_reply_subject_nobody_listened_on_is_reported_200_not_408() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (nats, _dir) = nats_server_with(CONFIG);
    for url in [semaq.url(), nats.url()] {
        let (a, b) = (login(&url, "a").await, login(&url, "b").await);
        let mut results = a.subscribe("latency.svc").await.unwrap();
        let _info = serve(&a, "svc").await;
        b.publish_with_reply("svc", "inbox.nobody", "q".into()).await.unwrap();
        let result: Value = serde_json::from_slice(&next(&mut results).await.payload).unwrap();
        assert_eq!(result["status"], 200, "{url}: {result}");
    }
}

#[tokio::test]
async fn a_request_unanswered_past_the_response_threshold_is_reported_504_on_time() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (nats, _dir) = nats_server_with(CONFIG);
    let mut shapes = Vec::new();
    for url in [semaq.url(), nats.url()] {
        let started = std::time::Instant::now();
        let Unanswered { a, b: _b, request, mut inbox, mut results } = unanswered(&url, "slow").await;
        let result: Value = serde_json::from_slice(&next(&mut results).await.payload).unwrap();
        let waited = started.elapsed();
        assert_eq!((&result["status"], &result["description"]), (&504.into(), &"Service Timeout".into()), "{url}");
        // nats-server's timer may fire up to twice the threshold after the request.
        assert!(waited >= Duration::from_millis(450), "{url}: not before the 500ms threshold: {waited:?}");
        if url == semaq.url() {
            assert!(waited < Duration::from_millis(900), "on its own timer, not at the next request: {waited:?}");
        }
        a.publish(request.reply.expect("a reply subject"), "late".into()).await.unwrap();
        sync(&a).await;
        assert!(quiet(&mut inbox).await, "{url}: a response past the threshold goes nowhere");
        shapes.push(shape(&result));
    }
    assert_eq!(shapes[0], shapes[1]);
}

#[test]
fn a_bad_latency_stops_startup_with_nats_servers_message() {
    let cases = [
        (
            "sampling: 100, subject: \"latency.svc\"",
            "sampling: 101, subject: \"latency.svc\"",
            "bad sampling percentage, should be 1-100",
        ),
        ("sampling: 100, subject: \"latency.svc\"", "sampling: 100", "Latency subject required, but missing"),
        (
            "sampling: 100, subject: \"latency.svc\"",
            "sampling: 100, subject: \"latency.*\"",
            "Error adding service latency sampling for \"svc\" on subject \"latency.*\": invalid publish subject",
        ),
        (
            "{ service: \"plain\", latency: \"latency.plain\" }",
            "{ stream: \"plain\", latency: \"latency.plain\" }",
            "Detected latency directive on non-service",
        ),
        (
            "response_threshold: \"500ms\"",
            "response_threshold: \"soon\"",
            "Expected response threshold to be a parseable time duration, got \"soon\"",
        ),
    ];
    for (from, to, message) in cases {
        let stderr = refusal(&CONFIG.replace(from, to));
        assert!(stderr.contains(message), "{to}: {stderr}");
    }
}

/// An operator trusting X, which exports `svc` measured on `latency.svc` and `hdr` measured on
/// `latency.hdr` by headers, and Y, which imports both (`svc` shared).
fn jwt_config() -> (String, KeyPair, KeyPair) {
    let operator = KeyPair::new_operator();
    let (system, x, y) = (KeyPair::new_account(), KeyPair::new_account(), KeyPair::new_account());
    let exports = json!({ "exports": [
        { "name": "svc", "subject": "svc", "type": "service", "service_latency": { "sampling": 100, "results": "latency.svc" } },
        { "name": "hdr", "subject": "hdr", "type": "service", "service_latency": { "sampling": "headers", "results": "latency.hdr" } },
    ]});
    let imports = json!({ "imports": [
        { "name": "svc", "subject": "svc", "account": x.public_key(), "type": "service", "share": true },
        { "name": "hdr", "subject": "hdr", "account": x.public_key(), "type": "service" },
    ]});
    let account = |key: &KeyPair, extra: Value| {
        let claims = mint(&operator, &key.public_key(), account_claims(json!({}), extra), json!({}));
        format!("  {}: {claims}\n", key.public_key())
    };
    let config = format!(
        "operator: {}\nsystem_account: {}\nresolver: MEMORY\nresolver_preload {{\n{}{}{}}}\n",
        operator_jwt_naming(&operator, &system),
        system.public_key(),
        account(&system, json!({})),
        account(&x, exports),
        account(&y, imports),
    );
    (config, x, y)
}

/// A JWT export's `service_latency` (the jwt library's name for it) measures as nats-server's.
#[tokio::test]
async fn a_jwt_exports_service_latency_claim_measures_as_in_nats_server() {
    let dir = tempfile::tempdir().unwrap();
    let (config, x, y) = jwt_config();
    let semaq = SemaqServer::with_config(&config, &[]);
    let (nats, _nats_dir) = nats_server_with(&config);
    let mut shapes = Vec::new();
    for url in [semaq.url(), nats.url()] {
        let (a, b) = (jwt_user(dir.path(), &url, &x, "x").await, jwt_user(dir.path(), &url, &y, "y").await);
        let (result, info) = measured_between(&a, &b, &url, "svc", HeaderMap::new()).await;
        assert_eq!(result["status"], 200, "{url}");
        assert_eq!(result["requestor"]["acc"], Value::from(y.public_key()), "{url}");
        assert_eq!(info["acc"], Value::from(y.public_key()), "{url}");
        assert!(result["requestor"]["jwt"].is_string(), "{url}: the import shares the requester's details");
        let (traced_result, _) = measured_between(&a, &b, &url, "hdr", traced(SAMPLED)).await;
        assert_eq!(traced_result["header"], json!({ "Traceparent": [SAMPLED] }), "{url}");
        shapes.push(shape(&result));
    }
    assert_eq!(shapes[0], shapes[1]);
}

#[tokio::test]
async fn connz_shows_each_clients_rtt_estimated_at_connect() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let _clients = [login(&semaq.url(), "a").await, login(&semaq.url(), "b").await];
    let connz = semaq.http_json("/connz");
    let connections = connz["connections"].as_array().expect("connections");
    assert_eq!(connections.len(), 2);
    for connection in connections {
        // A Go duration, as nats-server's `rtt`: "1.234ms", "950µs".
        let rtt = connection["rtt"].as_str().unwrap_or_default();
        assert!(rtt.ends_with('s') && rtt != "0s", "{connection}");
    }
}

/// A Go duration's text (`"150.2ms"`, `"950µs"`, `"1.2s"`) in milliseconds.
fn go_millis(text: &str) -> f64 {
    let units = [("ns", 1e-6), ("µs", 1e-3), ("us", 1e-3), ("ms", 1.0), ("s", 1e3)];
    let (number, scale) = units
        .iter()
        .find_map(|(unit, scale)| text.strip_suffix(unit).and_then(|n| n.parse::<f64>().ok()).map(|n| (n, *scale)))
        .unwrap_or_else(|| panic!("a Go duration: {text:?}"));
    number * scale
}

/// The one client connection's `rtt` in `connz`, in milliseconds.
fn rtt_millis(connz: &Value) -> f64 {
    go_millis(connz["connections"][0]["rtt"].as_str().unwrap_or_else(|| panic!("an rtt: {connz}")))
}

/// How long the raw client holds its PONG back.
const PONG_DELAY: Duration = Duration::from_millis(200);

#[test]
fn a_pong_to_the_servers_ping_measures_the_rtt_again_as_in_nats_server() {
    let semaq = SemaqServer::with_config("ping_interval: \"1s\"\n", &[]);
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let (nats, _dir) = nats_server_with(&format!("ping_interval: \"1s\"\nhttp_port: {port}\n"));
    let nats_monitor = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let connz = |semaq_side: bool| {
        if semaq_side {
            semaq.http_json("/connz")
        } else {
            semaq_testkit::http_get_json(nats_monitor, "/connz")
        }
    };
    for (addr, semaq_side) in [(semaq.addr(), true), (nats.addr(), false)] {
        let mut raw = semaq_testkit::Raw::connect(addr);
        raw.send(b"CONNECT {\"verbose\":false,\"pedantic\":false}\r\nPING\r\n");
        raw.expect("PONG\r\n");
        let delay_millis = PONG_DELAY.as_secs_f64() * 1e3;
        let at_connect = rtt_millis(&connz(semaq_side));
        assert!(at_connect < delay_millis / 2.0, "{addr}: {at_connect} ms at CONNECT");
        raw.expect("PING\r\n");
        // The delay is what the server measures, not a wait for something to happen.
        std::thread::sleep(PONG_DELAY);
        raw.send(b"PONG\r\nPING\r\n");
        raw.expect("PONG\r\n");
        let measured = rtt_millis(&connz(semaq_side));
        assert!(measured >= delay_millis, "{addr}: {measured} ms after a delayed PONG");
    }
}
