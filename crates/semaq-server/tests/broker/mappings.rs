//! Subject mappings (`mappings` in the config, top level and per account, and the account JWT
//! claim), side by side with nats-server 2.9 given the same config: raw clients see the same
//! subjects delivered, the same share of weighted destinations, the same losses, the same
//! refusals, the same `/accountz` mappings, the same `*` and `>` tokens of non-pedantic clients
//! mapped, the same `MAPPING` trace line; service requests take the exporter's mappings; a
//! stream on a mapped destination stores the mapped subject. SemaQ alone (2.9 has neither
//! here): the `sm` message-trace event of 2.11, and WebSocket clients.

use std::net::SocketAddr;
use std::time::Duration;

use async_nats::jetstream;
use nkeys::KeyPair;
use semaq_testkit::{NatsServer, Raw, SemaqServer};
use serde_json::{json, Value};

use crate::account_limits::nats_server_with;
use crate::auth_nkeys::{jwt_login, mint, raw_connect, round, sign};
use crate::jwt_scopes::Trusted;

/// Messages published to measure a weighted mapping's shares.
const DRAWS: usize = 2_000;

/// SemaQ and nats-server 2.9, each given `config`.
fn servers(config: &str) -> (SemaqServer, (NatsServer, tempfile::TempDir)) {
    (SemaqServer::with_config(config, &[]), nats_server_with(config))
}

/// A raw connection past CONNECT, as `user` (password = name) or as nobody.
fn connect(addr: SocketAddr, user: Option<&str>) -> Raw {
    let mut raw = Raw::connect(addr);
    let credentials = user.map_or_else(String::new, |user| format!(",\"user\":\"{user}\",\"pass\":\"{user}\""));
    raw.send(format!("CONNECT {{\"verbose\":false,\"pedantic\":false{credentials}}}\r\nPING\r\n").as_bytes());
    raw.expect("PONG\r\n");
    raw
}

/// The subjects `listener` (subscribed to `>`) received, in order.
fn received_subjects(listener: &mut Raw) -> Vec<String> {
    let text = round(listener, "");
    text.lines()
        .filter_map(|line| line.strip_prefix("MSG "))
        .map(|rest| rest.split(' ').next().unwrap_or("").to_string())
        .collect()
}

/// What a listener on `>` receives when `publisher` publishes to each of `subjects`, and what
/// the publisher was answered.
fn deliveries(listener: &mut Raw, publisher: &mut Raw, subjects: &[&str]) -> (Vec<String>, String) {
    let commands: String = subjects.iter().map(|subject| format!("PUB {subject} 1\r\nx\r\n")).collect();
    let answered = round(publisher, &commands);
    (received_subjects(listener), answered)
}

/// A listener on `>` and a publisher, both as `user`.
fn pair(addr: SocketAddr, user: Option<&str>) -> (Raw, Raw) {
    let mut listener = connect(addr, user);
    assert_eq!(round(&mut listener, "SUB > 1\r\n"), "", "{addr}");
    (listener, connect(addr, user))
}

/// How many of `received` are each of `subjects`.
fn counts(received: &[String], subjects: &[&str]) -> Vec<usize> {
    subjects.iter().map(|subject| received.iter().filter(|r| r == subject).count()).collect()
}

const PLAIN: &str = r#"
mappings {
  foo: bar
  "orders.*.*": "by.$2.$1"
  "region.*.*": "r.{{wildcard(2)}}.{{wildcard(1)}}"
  "part.*": "part.{{partition(5,1)}}.{{wildcard(1)}}"
  "code.*": "code.{{splitFromLeft(1,2)}}"
  "tail.>": "moved.>"
}
"#;

#[test]
fn plain_wildcard_and_function_mappings_rewrite_the_published_subject_as_nats_server_does() {
    let (semaq, (nats, _dir)) = servers(PLAIN);
    let subjects = ["foo", "orders.eu.7", "region.a.b", "code.abcd", "tail.x.y", "other", "foo.x"];
    let expected = ["bar", "by.7.eu", "r.b.a", "code.ab.cd", "moved.x.y", "other", "foo.x"];
    for addr in [semaq.addr(), nats.addr()] {
        let (mut listener, mut publisher) = pair(addr, None);
        let (received, answered) = deliveries(&mut listener, &mut publisher, &subjects);
        assert_eq!(answered, "", "{addr}");
        assert_eq!(received, expected, "{addr}");
    }
}

#[test]
fn partition_puts_each_key_in_the_same_bucket_every_time_and_as_nats_server_does() {
    let (semaq, (nats, _dir)) = servers(PLAIN);
    let keys: Vec<String> = (0..40).map(|i| format!("part.key{i}")).collect();
    let twice: Vec<&str> = keys.iter().chain(&keys).map(String::as_str).collect();
    let mut per_server = Vec::new();
    for addr in [semaq.addr(), nats.addr()] {
        let (mut listener, mut publisher) = pair(addr, None);
        let (received, _) = deliveries(&mut listener, &mut publisher, &twice);
        assert_eq!(received.len(), twice.len(), "{addr}");
        assert_eq!(received[..keys.len()], received[keys.len()..], "{addr}: a key changed bucket");
        let buckets: std::collections::BTreeSet<&str> =
            received.iter().filter_map(|subject| subject.split('.').nth(1)).collect();
        assert!(buckets.len() > 1 && buckets.iter().all(|b| ["0", "1", "2", "3", "4"].contains(b)), "{buckets:?}");
        per_server.push(received);
    }
    assert_eq!(per_server[0], per_server[1], "SemaQ's buckets differ from nats-server's");
}

const WILDCARD_TOKENS: &str = r#"
mappings {
  "foo.*": "bar.$1"
  "a.*.*": "b.$2.$1"
  "t.>": "u.>"
  "p.*": "p.{{partition(3,1)}}.$1"
}
"#;

/// A client that is not pedantic may publish a `*` or `>` token: nats-server maps it where the
/// source has a `*` there (or a `>` covering it), the token passing into the destination as it
/// is, and leaves it alone where the source has a literal.
#[test]
fn a_published_wildcard_token_is_mapped_where_the_source_has_a_wildcard_as_in_nats_server() {
    let (semaq, (nats, _dir)) = servers(WILDCARD_TOKENS);
    let subjects = ["foo.*", "foo.>", "a.*.x", "a.x.*", "a.*.*", "a.>", "t.*", "t.>", "p.*", ">", "foo.x"];
    for addr in [semaq.addr(), nats.addr()] {
        let (mut listener, mut publisher) = pair(addr, None);
        let (received, answered) = deliveries(&mut listener, &mut publisher, &subjects);
        assert_eq!(answered, "", "{addr}");
        let expected = ["bar.*", "foo.>", "b.x.*", "b.*.x", "b.*.*", "a.>", "u.*", "u.>", "p.0.*", ">", "bar.x"];
        assert_eq!(received, expected, "{addr}");
    }
}

/// The text of each of `log`'s trace lines from a client, past the client's address and id
/// (which it checks are there, as nats-server writes them: `127.0.0.1:port - cid:N - `).
fn client_trace_lines(log: &str) -> Vec<String> {
    let traced = log.lines().filter_map(|line| line.split_once(" [TRC] ").map(|(_, rest)| rest));
    let from_client = traced.filter_map(|rest| {
        let (addr, rest) = rest.split_once(" - ")?;
        let (id, text) = rest.split_once(" - ")?;
        let numbered = id.strip_prefix("cid:").is_some_and(|n| n.parse::<u64>().is_ok());
        (addr.parse::<SocketAddr>().is_ok() && numbered).then(|| text.to_string())
    });
    from_client.collect()
}

#[test]
fn with_trace_on_a_mapped_publish_writes_nats_servers_mapping_line() {
    let config = format!("trace: true\n{WILDCARD_TOKENS}");
    let (semaq, (nats, _dir)) = servers(&config);
    let logs: [(SocketAddr, &dyn Fn() -> String); 2] =
        [(semaq.addr(), &|| semaq.log_text()), (nats.addr(), &|| nats.log_text())];
    let expected = [
        "<<- [MAPPING foo.x -> bar.x]",
        "<<- [MAPPING a.*.y -> b.y.*]",
        "\"v1.2:raw:mapper\" - <<- [MAPPING foo.y -> bar.y]",
    ];
    for (addr, log) in logs {
        let mut anonymous = connect(addr, None);
        assert_eq!(round(&mut anonymous, "PUB foo.x 1\r\nx\r\nPUB other 1\r\nx\r\nPUB a.*.y 1\r\nx\r\n"), "", "{addr}");
        let mut named = Raw::connect(addr);
        let hello = r#"CONNECT {"verbose":false,"pedantic":false,"name":"mapper","lang":"raw","version":"1.2"}"#;
        assert_eq!(round(&mut named, &format!("{hello}\r\nPUB foo.y 1\r\nx\r\n")), "", "{addr}");
        let mapped = |log: &str| -> Vec<String> {
            client_trace_lines(log).into_iter().filter(|line| line.contains("MAPPING")).collect()
        };
        // The log is written apart from the replies: wait for the lines, then compare them.
        let enough = || mapped(&log()).len() >= expected.len();
        semaq_testkit::wait_until("the MAPPING lines", Duration::from_secs(10), enough);
        assert_eq!(mapped(&log()), expected, "{addr}");
    }
}

const WEIGHTED: &str = r#"
mappings {
  ab: [ {destination: a, weight: 30%}, {destination: b, weight: 70%} ]
  half: [ {destination: other, weight: 50} ]
  chaos: [ {destination: kept, weight: 40%}, {destination: chaos, weight: 20%} ]
}
"#;

/// Whether `count` of [`DRAWS`] is within a generous bound (over 6 standard deviations) of
/// `percent` per cent.
fn near(count: usize, percent: usize) -> bool {
    let expected = DRAWS * percent / 100;
    count.abs_diff(expected) <= DRAWS / 12
}

#[test]
fn weighted_destinations_share_the_messages_by_weight_as_in_nats_server() {
    let (semaq, (nats, _dir)) = servers(WEIGHTED);
    for addr in [semaq.addr(), nats.addr()] {
        let (mut listener, mut publisher) = pair(addr, None);
        let (received, _) = deliveries(&mut listener, &mut publisher, &vec!["ab"; DRAWS]);
        let [a, b] = counts(&received, &["a", "b"])[..] else { panic!("two counts") };
        assert_eq!(a + b, DRAWS, "{addr}: {received:?}");
        assert!(near(a, 30) && near(b, 70), "{addr}: a {a}, b {b}");
    }
}

#[test]
fn weights_short_of_100_keep_the_rest_on_the_subject_unless_it_is_listed_then_lose_it() {
    let (semaq, (nats, _dir)) = servers(WEIGHTED);
    for addr in [semaq.addr(), nats.addr()] {
        let (mut listener, mut publisher) = pair(addr, None);
        let (received, answered) = deliveries(&mut listener, &mut publisher, &vec!["half"; DRAWS]);
        assert_eq!(answered, "", "{addr}");
        let [other, half] = counts(&received, &["other", "half"])[..] else { panic!("two counts") };
        assert_eq!(other + half, DRAWS, "{addr}");
        assert!(near(other, 50) && near(half, 50), "{addr}: other {other}, half {half}");

        let (received, answered) = deliveries(&mut listener, &mut publisher, &vec!["chaos"; DRAWS]);
        assert_eq!(answered, "", "{addr}");
        let [kept, chaos] = counts(&received, &["kept", "chaos"])[..] else { panic!("two counts") };
        assert_eq!(received.len(), kept + chaos, "{addr}: {received:?}");
        assert!(near(kept, 40) && near(chaos, 20), "{addr}: kept {kept}, chaos {chaos}");
    }
}

const ACCOUNTS: &str = r#"
mappings { foo: global }
accounts {
  A { users: [{user: a, password: a, permissions: {publish: {allow: ["foo", "shared"]}}}], mappings { foo: in_a, guarded: shared } }
  B { users: [{user: b, password: b}] }
}
"#;

#[test]
fn each_account_maps_with_its_own_mappings_and_permissions_apply_to_the_mapped_subject() {
    let (semaq, (nats, _dir)) = servers(ACCOUNTS);
    for addr in [semaq.addr(), nats.addr()] {
        let (mut listener_a, mut publisher_a) = pair(addr, Some("a"));
        let (mut listener_b, mut publisher_b) = pair(addr, Some("b"));
        // Allowed to publish `foo`, not `in_a`, which `foo` becomes; `guarded` becomes `shared`.
        let (received, answered) = deliveries(&mut listener_a, &mut publisher_a, &["foo", "guarded"]);
        assert_eq!(received, ["shared"], "{addr}");
        assert_eq!(answered, "-ERR 'Permissions Violation for Publish to \"in_a\"'\r\n", "{addr}");
        let (received, answered) = deliveries(&mut listener_b, &mut publisher_b, &["foo"]);
        assert_eq!((received, answered), (vec!["foo".to_string()], String::new()), "{addr}");
        assert_eq!(received_subjects(&mut listener_a), Vec::<String>::new(), "{addr}");
    }
}

/// A user of `account`, logged in raw.
fn jwt_user(addr: SocketAddr, account: &KeyPair) -> Raw {
    let user = KeyPair::new_user();
    let claims = json!({ "type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1 });
    jwt_login(addr, &mint(account, &user.public_key(), claims, json!({})), &user)
}

#[test]
fn an_account_jwts_mappings_apply_to_its_publishes_as_in_nats_server() {
    let (mapped, plain) = (KeyPair::new_account(), KeyPair::new_account());
    let mut trusted = Trusted::new();
    let mappings = json!({
        "foo": [{ "subject": "bar" }],
        "orders.*": [{ "subject": "by.$1" }],
        "ab": [{ "subject": "a", "weight": 30 }, { "subject": "b", "weight": 70 }],
        "east": [{ "subject": "only.east", "cluster": "east" }],
    });
    trusted.add(&mapped, json!({ "mappings": mappings }), json!({}));
    trusted.add(&plain, json!({}), json!({}));
    let (semaq, (nats, _dir)) = servers(&trusted.config());
    for addr in [semaq.addr(), nats.addr()] {
        let (mut listener, mut publisher) = (jwt_user(addr, &mapped), jwt_user(addr, &mapped));
        assert_eq!(round(&mut listener, "SUB > 1\r\n"), "", "{addr}");
        let (received, _) = deliveries(&mut listener, &mut publisher, &["foo", "orders.7", "east"]);
        assert_eq!(received, ["bar", "by.7", "east"], "{addr}");
        let (received, _) = deliveries(&mut listener, &mut publisher, &vec!["ab"; DRAWS]);
        let [a, b] = counts(&received, &["a", "b"])[..] else { panic!("two counts") };
        assert!(a + b == DRAWS && near(a, 30) && near(b, 70), "{addr}: a {a}, b {b}");

        let (mut listener, mut publisher) = (jwt_user(addr, &plain), jwt_user(addr, &plain));
        assert_eq!(round(&mut listener, "SUB > 1\r\n"), "", "{addr}");
        assert_eq!(deliveries(&mut listener, &mut publisher, &["foo"]).0, ["foo"], "{addr}");
    }
}

#[test]
fn account_jwt_mappings_the_jwt_library_blocks_refuse_the_account_as_in_nats_server() {
    let cases = [
        (json!({ "foo": [{ "subject": "bar", "weight": 40 }, { "subject": "baz", "weight": 60 }] }), true),
        (json!({ "foo": [{ "subject": "bar", "weight": 60 }, { "subject": "baz", "weight": 50 }] }), false),
        (json!({ "foo": [{ "subject": "bar" }, { "subject": "baz", "cluster": "east" }] }), false),
        (json!({ "foo": [{ "subject": "bar.*" }] }), false),
        (json!({ "foo": [{ "subject": "" }] }), false),
        (json!({ "foo": [{ "subject": "a b" }] }), false),
        (json!({ "foo.*": [{ "subject": "bar.$2" }] }), true),
        // The library sums the weights in a byte: 200 + 100 wraps to 44 and passes.
        (json!({ "foo": [{ "subject": "bar", "weight": 200 }, { "subject": "baz", "weight": 100 }] }), true),
    ];
    let mut trusted = Trusted::new();
    let accounts: Vec<(KeyPair, Value, bool)> = cases
        .into_iter()
        .map(|(mappings, admitted)| {
            let account = KeyPair::new_account();
            trusted.add(&account, json!({ "mappings": mappings.clone() }), json!({}));
            (account, mappings, admitted)
        })
        .collect();
    let (semaq, (nats, _dir)) = servers(&trusted.config());
    for addr in [semaq.addr(), nats.addr()] {
        for (account, mappings, admitted) in &accounts {
            let user = KeyPair::new_user();
            let claims = json!({ "type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1 });
            let jwt = mint(account, &user.public_key(), claims, json!({}));
            let (line, _) = raw_connect(addr, &|nonce: &str| json!({ "jwt": jwt, "sig": sign(&user, nonce) }));
            assert_eq!(line != "-ERR 'Authorization Violation'", *admitted, "{addr}: {mappings} got {line}");
        }
    }
}

/// What the server printed when `config` stopped it (nats-server's, or SemaQ's stderr), from
/// the first of `words` on, to the end of that line.
fn stopped_by(config: &str, nats: bool) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.conf");
    std::fs::write(&path, config).expect("write config");
    let output = if nats {
        let mut command = std::process::Command::new("nats-server");
        command.arg("-c").arg(&path);
        semaq_testkit::output_within(command, Duration::from_secs(10))
    } else {
        SemaqServer::builder().bare().arg("-c").arg(&path).output()
    };
    assert!(!output.status.success(), "the server should not start with {config}");
    let text = String::from_utf8_lossy(&output.stderr).to_string();
    let words = ["Error adding", "Subject", "Invalid weight", "Missing weight", "Unknown field", "Expected an"];
    let start = words.iter().filter_map(|word| text.find(word)).min();
    let from = &text[start.unwrap_or_else(|| panic!("no mapping error in {text:?}"))..];
    from.lines().next().unwrap_or_default().trim_end().to_string()
}

#[test]
fn bad_mappings_stop_the_server_with_nats_servers_text() {
    let cases = [
        r#""foo.*": "bar.$2""#,
        r#""foo.*": "bar.{{nope(1)}}""#,
        r#""foo..x": bar"#,
        r#""foo.>": bar"#,
        r#"foo: "bar.*""#,
        "foo: [{destination: a, weight: 160%}]",
        "foo: [{destination: a}]",
        "foo: [{destination: a, weight: 10, colour: x}]",
        "foo: 5",
    ];
    for mapping in cases {
        for config in
            [format!("mappings {{ {mapping} }}\n"), format!("accounts {{ A {{ mappings {{ {mapping} }} }} }}\n")]
        {
            assert_eq!(stopped_by(&config, false), stopped_by(&config, true), "{config}");
        }
    }
}

#[tokio::test]
async fn a_stream_on_a_mapped_destination_stores_the_mapped_subject() {
    let config = "mappings { \"in.*\": \"stored.$1\" }\n";
    let (semaq, (nats, _dir)) = servers(config);
    for url in [semaq.url(), nats.url()] {
        let client = async_nats::connect(&url).await.expect("connect");
        let js = jetstream::new(client);
        let stream = jetstream::stream::Config {
            name: "MAPPED".into(),
            subjects: vec!["stored.>".into()],
            ..Default::default()
        };
        let mut stream = js.create_stream(stream).await.expect("create stream");
        let ack = js.publish("in.a", "x".into()).await.expect("publish").await.expect("ack");
        assert_eq!(ack.stream, "MAPPED", "{url}");
        let message = stream.get_raw_message(ack.sequence).await.expect("stored message");
        assert_eq!(message.subject.as_str(), "stored.a", "{url}");
        assert_eq!(stream.info().await.expect("info").state.messages, 1, "{url}");
    }
}

const SERVICE: &str = r#"
accounts {
  A { users: [{user: a, password: a}], exports: [{service: req}], mappings { req: "req.v2" } }
  B { users: [{user: b, password: b}], imports: [{service: {account: A, subject: req}}], mappings { ask: req } }
}
"#;

#[test]
fn a_service_request_takes_the_exporting_accounts_mappings_as_in_nats_server() {
    let (semaq, (nats, _dir)) = servers(SERVICE);
    for addr in [semaq.addr(), nats.addr()] {
        let mut responder = connect(addr, Some("a"));
        assert_eq!(round(&mut responder, "SUB req.v2 1\r\nSUB req 2\r\n"), "", "{addr}");
        let mut requester = connect(addr, Some("b"));
        assert_eq!(round(&mut requester, "SUB _INBOX.x 1\r\nPUB ask _INBOX.x 1\r\n?\r\n"), "", "{addr}");
        let request = round(&mut responder, "");
        assert!(request.starts_with("MSG req.v2 1 _R_."), "{addr}: {request:?}");
        let reply = request.split(' ').nth(3).unwrap_or_default().to_string();
        assert_eq!(round(&mut responder, &format!("PUB {reply} 1\r\n!\r\n")), "", "{addr}");
        assert_eq!(round(&mut requester, ""), "MSG _INBOX.x 1 1\r\n!\r\n", "{addr}");
    }
}

#[test]
fn a_jwt_mapping_weight_that_is_no_byte_stops_the_server_as_in_nats_server() {
    let mut trusted = Trusted::new();
    trusted.add(
        &KeyPair::new_account(),
        json!({ "mappings": { "foo": [{ "subject": "bar", "weight": 300 }] } }),
        json!({}),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.conf");
    std::fs::write(&path, trusted.config()).expect("write config");
    let mut command = std::process::Command::new("nats-server");
    command.arg("-c").arg(&path);
    let nats = semaq_testkit::output_within(command, Duration::from_secs(10));
    let semaq = SemaqServer::builder().bare().arg("-c").arg(&path).output();
    for (server, output) in [("semaq", semaq), ("nats-server", nats)] {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{server} started");
        assert!(stderr.contains("invalid account JWT"), "{server}: {stderr}");
    }
}

/// nats-server 2.11's message trace (2.9 has none): the ingress event names the published
/// subject, an `sm` event the mapped one, and the delivery follows it.
#[tokio::test]
async fn a_traced_publish_reports_its_mapping_as_nats_server_2_11_does() {
    use futures::StreamExt;

    let server = SemaqServer::with_config("mappings { \"orders.*\": \"by.$1\" }\n", &[]);
    let client = async_nats::connect(server.url()).await.expect("connect");
    let mut events = client.subscribe("trace.events").await.expect("subscribe");
    let mut mapped = client.subscribe("by.*").await.expect("subscribe");
    semaq_testkit::sync(&client).await;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Trace-Dest", "trace.events");
    client.publish_with_headers("orders.eu", headers, "x".into()).await.expect("publish");
    let within = Duration::from_secs(10);
    let delivered = tokio::time::timeout(within, mapped.next()).await.expect("in time").expect("a message");
    assert_eq!(delivered.subject.as_str(), "by.eu");
    let event = tokio::time::timeout(within, events.next()).await.expect("in time").expect("an event");
    let event: Value = serde_json::from_slice(&event.payload).expect("JSON");
    let types: Vec<&str> =
        event["events"].as_array().expect("events").iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types, ["in", "sm", "eg"], "{event}");
    assert_eq!(event["events"][0]["subj"], "orders.eu", "{event}");
    assert_eq!(event["events"][1]["to"], "by.eu", "{event}");
    assert_eq!(event["events"][2]["sub"], "by.*", "{event}");
}

#[test]
fn accountz_shows_an_accounts_mappings_as_nats_server_does() {
    let config = r#"
mappings {
  ab: [ {destination: a, weight: 30%}, {destination: b, weight: 70%} ]
  "x.*.*": [ {destination: "y.$2.$1", weight: 60}, {destination: "z.$1.$2", weight: 30, cluster: east} ]
  plain: other
}
"#;
    let semaq = SemaqServer::with_config(config, &[]);
    let nats = NatsServer::with_config(&format!("{config}http_port: -1\n"));
    let log = nats.log_text();
    let http = log.split("Starting http monitor on ").nth(1).and_then(|rest| rest.lines().next());
    let http: SocketAddr = http.and_then(|addr| addr.trim().parse().ok()).expect("nats-server's monitor address");
    let nats_detail = semaq_testkit::http_get_json(http, "/accountz?acc=$G");
    let semaq_detail = semaq.http_json("/accountz?acc=$G");
    let mappings = |detail: &Value| detail["account_detail"]["mappings"].clone();
    assert!(mappings(&nats_detail).is_object(), "{nats_detail}");
    assert_eq!(mappings(&semaq_detail), mappings(&nats_detail));
}

#[tokio::test]
async fn a_websocket_clients_publish_is_mapped_like_any_clients() {
    use futures::StreamExt;

    let config = "mappings { \"ws.*\": \"mapped.$1\" }\nwebsocket { host: \"127.0.0.1\", port: -1, no_tls: true }\n";
    let server = SemaqServer::with_config(config, &[]);
    let tcp = async_nats::connect(server.url()).await.expect("connect over TCP");
    let mut mapped = tcp.subscribe("mapped.*").await.expect("subscribe");
    semaq_testkit::sync(&tcp).await;
    let ws = async_nats::connect(crate::websocket::ws_url(&server)).await.expect("connect over ws://");
    ws.publish("ws.a", "x".into()).await.expect("publish");
    ws.flush().await.expect("flush");
    let within = Duration::from_secs(10);
    let message = tokio::time::timeout(within, mapped.next()).await.expect("in time").expect("a message");
    assert_eq!(message.subject.as_str(), "mapped.a");
}
