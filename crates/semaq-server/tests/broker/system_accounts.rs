//! Account-scoped `$SYS` services, side by side with nats-server 2.9: the system user asks
//! `$SYS.REQ.ACCOUNT.<account>.<ENDPOINT>` and the account pings; a plain account's user asks
//! its own connections through the system imports every account has; the system user hears an
//! account's connection count change.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use semaq_testkit::SemaqServer;
use serde_json::{json, Value};

use crate::system_config::{ask, both_servers_agree, login, nats_with, SYS_CONFIG};

/// Bound on every wait for a reply or an event.
const WAIT: Duration = Duration::from_secs(5);

/// Both servers without JetStream, with `$SYS`, A and B.
fn servers() -> (semaq_testkit::NatsServer, tempfile::TempDir, SemaqServer) {
    let (nats, _http, dir) = nats_with(SYS_CONFIG, false);
    (nats, dir, SemaqServer::with_config(&format!("{SYS_CONFIG}jetstream: false\n"), &[]))
}

/// What the system user learns of account A while one client of A is connected.
async fn account_requests(url: String) -> Vec<String> {
    let sys = login(&url, "sys").await;
    let _a = login(&url, "a").await;
    // `auth` makes nats-server name each connection's account, as SemaQ always does.
    let connz = ask(&sys, "$SYS.REQ.ACCOUNT.A.CONNZ", r#"{"auth":true}"#).await;
    let info = ask(&sys, "$SYS.REQ.ACCOUNT.A.INFO", "").await;
    let statz = ask(&sys, "$SYS.REQ.ACCOUNT.A.STATZ", "").await;
    let subsz = ask(&sys, "$SYS.REQ.ACCOUNT.A.SUBSZ", "").await;
    let leafz = ask(&sys, "$SYS.REQ.ACCOUNT.A.LEAFZ", "").await;
    let jsz = ask(&sys, "$SYS.REQ.ACCOUNT.A.JSZ", "").await;
    let conns = ask(&sys, "$SYS.REQ.ACCOUNT.A.CONNS", "").await;
    let statz = &statz["data"]["account_statz"][0];
    vec![
        format!("envelope has the server: {}", connz["server"]["id"].is_string()),
        format!("connz: {} of {}", connz["data"]["num_connections"], connz["data"]["connections"][0]["account"]),
        format!("info: {} system={}", info["data"]["account_name"], info["data"]["is_system"]),
        format!("statz: {} conns={} total={}", statz["acc"], statz["conns"], statz["total_conns"]),
        format!("subsz counts: {}", subsz["data"]["num_subscriptions"].is_u64()),
        format!("leafz: {}", leafz["data"]["leafnodes"]),
        format!("jsz: {} {}", jsz["error"]["code"], jsz["error"]["description"]),
        format!("conns: {} {} conns={}", conns["type"], conns["acc"], conns["conns"]),
    ]
}

#[tokio::test]
async fn the_system_user_asks_about_one_account_and_gets_nats_servers_answers() {
    let expected = [
        "envelope has the server: true",
        "connz: 1 of \"A\"",
        "info: \"A\" system=null",
        "statz: \"A\" conns=1 total=1",
        "subsz counts: true",
        "leafz: 0",
        "jsz: 500 \"jetstream not enabled\"",
        "conns: \"io.nats.server.advisory.v1.account_connections\" \"A\" conns=1",
    ];
    both_servers_agree(SYS_CONFIG, expected, account_requests).await;
}

/// Answers to bodies that are not JSON, and to the account ping.
async fn bodies_and_pings(url: String) -> Vec<String> {
    let sys = login(&url, "sys").await;
    let _a = login(&url, "a").await;
    let bad = ask(&sys, "$SYS.REQ.ACCOUNT.A.CONNZ", "hello").await;
    let bad_server = ask(&sys, "$SYS.REQ.SERVER.PING.VARZ", "{nope").await;
    let statz = ask(&sys, "$SYS.REQ.ACCOUNT.PING.STATZ", r#"{"accounts":["A","B"]}"#).await;
    let unused = ask(&sys, "$SYS.REQ.ACCOUNT.PING.STATZ", r#"{"accounts":["B"],"include_unused":true}"#).await;
    let accountz = ask(&sys, "$SYS.REQ.SERVER.PING.ACCOUNTZ", r#"{"account":"A"}"#).await;
    let nope = ask(&sys, "$SYS.REQ.ACCOUNT.NOPE.INFO", "").await;
    let listed = |body: &Value| -> Vec<String> {
        let stats = body["data"]["account_statz"].as_array().cloned().unwrap_or_default();
        stats.iter().map(|stat| format!("{}:{}", stat["acc"].as_str().unwrap_or("?"), stat["conns"])).collect()
    };
    vec![
        format!("not JSON: {} {} data={}", bad["error"]["code"], bad["error"]["description"], bad["data"]),
        format!(
            "bad JSON: {} has a description: {}",
            bad_server["error"]["code"],
            bad_server["error"]["description"].is_string()
        ),
        format!("ping statz: {:?}", listed(&statz)),
        format!("ping statz include_unused: {:?}", listed(&unused)),
        format!(
            "accountz: {} system={}",
            accountz["data"]["account_detail"]["account_name"], accountz["data"]["system_account"]
        ),
        format!("unknown account: {} {}", nope["error"]["code"], nope["error"]["description"]),
    ]
}

#[tokio::test]
async fn request_bodies_are_read_as_nats_server_reads_them() {
    let expected = [
        "not JSON: 400 \"invalid character 'h' looking for beginning of value\" data=null",
        "bad JSON: 400 has a description: true",
        "ping statz: [\"A:1\"]",
        "ping statz include_unused: [\"B:0\"]",
        "accountz: \"A\" system=\"$SYS\"",
        "unknown account: 500 \"Account NOPE does not exist\"",
    ];
    both_servers_agree(SYS_CONFIG, expected, bodies_and_pings).await;
}

/// Two requests answered on one subscription: the first names another server; only the second
/// is answered, and requests are answered in the order they came.
async fn first_answered(url: String) -> String {
    let sys = login(&url, "sys").await;
    let mut replies = sys.subscribe("reply.>").await.expect("subscribe");
    for (reply, body) in [("reply.other", r#"{"server_name":"not-this-one","exact_match":true}"#), ("reply.any", "")] {
        sys.publish_with_reply("$SYS.REQ.SERVER.PING.HEALTHZ", reply, body.into()).await.expect("publish");
    }
    let first = tokio::time::timeout(WAIT, replies.next()).await.expect("an answer").expect("open");
    first.subject.to_string()
}

#[tokio::test]
async fn a_request_whose_filter_names_another_server_gets_no_answer() {
    both_servers_agree(SYS_CONFIG, "reply.any", first_answered).await;
}

/// What a user of A, outside the system account, learns through the system imports.
async fn imported(url: String) -> Vec<String> {
    let a = login(&url, "a").await;
    let _b = login(&url, "b").await;
    let mut seen = Vec::new();
    for subject in ["$SYS.REQ.ACCOUNT.PING.CONNZ", "$SYS.REQ.SERVER.PING.CONNZ"] {
        let connz = ask(&a, subject, r#"{"auth":true}"#).await;
        let connections = connz["data"]["connections"].as_array().cloned().unwrap_or_default();
        let accounts: Vec<&str> = connections.iter().filter_map(|c| c["account"].as_str()).collect();
        seen.push(format!("{subject}: {} {accounts:?}", connz["data"]["num_connections"]));
    }
    let statz = ask(&a, "$SYS.REQ.ACCOUNT.PING.STATZ", "").await;
    let stats = statz["data"]["account_statz"].as_array().cloned().unwrap_or_default();
    seen.push(format!("statz: {:?}", stats.iter().map(|s| s["acc"].clone()).collect::<Vec<_>>()));
    seen
}

#[tokio::test]
async fn every_account_asks_its_own_connections_through_the_system_imports() {
    let expected =
        ["$SYS.REQ.ACCOUNT.PING.CONNZ: 1 [\"A\"]", "$SYS.REQ.SERVER.PING.CONNZ: 1 [\"A\"]", "statz: [String(\"A\")]"];
    both_servers_agree(SYS_CONFIG, expected, imported).await;
}

/// The connection counts of A the system user hears on each subject while a client of A
/// connects and closes.
async fn connection_counts(url: String) -> BTreeMap<String, Vec<Value>> {
    let sys = login(&url, "sys").await;
    // One subscription: each subject's events keep the order the server sent them in.
    let mut events = sys.subscribe("$SYS.>").await.expect("subscribe");
    semaq_testkit::sync(&sys).await;
    let a = login(&url, "a").await;
    a.flush().await.expect("flush");
    drop(a);
    let subjects = ["$SYS.ACCOUNT.A.SERVER.CONNS", "$SYS.SERVER.ACCOUNT.A.CONNS"];
    let mut counts: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    while counts.values().map(Vec::len).sum::<usize>() < 4 {
        let event = tokio::time::timeout(WAIT, events.next()).await.expect("an event").expect("open");
        if !subjects.contains(&event.subject.as_str()) {
            continue;
        }
        let body: Value = serde_json::from_slice(&event.payload).expect("JSON");
        assert_eq!(body["type"], json!("io.nats.server.advisory.v1.account_connections"), "{body}");
        assert_eq!(body["acc"], json!("A"), "{body}");
        counts.entry(event.subject.to_string()).or_default().push(body["conns"].clone());
    }
    counts
}

#[tokio::test]
async fn the_system_account_hears_an_accounts_connection_count_change() {
    let expected: BTreeMap<String, Vec<Value>> = [
        ("$SYS.ACCOUNT.A.SERVER.CONNS".to_string(), vec![json!(1), json!(0)]),
        ("$SYS.SERVER.ACCOUNT.A.CONNS".to_string(), vec![json!(1), json!(0)]),
    ]
    .into();
    both_servers_agree(SYS_CONFIG, expected, connection_counts).await;
}

/// The subscriptions of A the system user is listed, after a client of A subscribed in a queue group.
async fn account_subscriptions(url: String) -> Vec<String> {
    let sys = login(&url, "sys").await;
    let a = login(&url, "a").await;
    let _orders = a.queue_subscribe("orders.>", "workers".into()).await.expect("subscribe");
    semaq_testkit::sync(&a).await;
    let subsz = ask(&sys, "$SYS.REQ.ACCOUNT.A.SUBSZ", "").await;
    let listed = subsz["data"]["subscriptions_list"].as_array().cloned().unwrap_or_default();
    // The client's request inbox (from the sync round trip) is async-nats', not the server's;
    // the `$SYS.REQ.USER.INFO` import came after nats-server 2.9 (it is in its source now).
    let mut seen: Vec<String> = listed
        .iter()
        .filter(|sub| !sub["subject"].as_str().unwrap_or_default().starts_with("_INBOX."))
        .filter(|sub| sub["subject"] != json!("$SYS.REQ.USER.INFO"))
        .map(|sub| format!("{} {} queue={}", sub["account"], sub["subject"], sub["qgroup"]))
        .collect();
    seen.sort();
    seen.push(format!("total is the list: {}", subsz["data"]["total"] == json!(listed.len())));
    seen
}

#[tokio::test]
async fn an_accounts_subscriptions_are_listed_with_the_system_imports() {
    let expected = [
        "\"A\" \"$SYS.REQ.ACCOUNT.PING.CONNZ\" queue=null",
        "\"A\" \"$SYS.REQ.ACCOUNT.PING.STATZ\" queue=null",
        "\"A\" \"$SYS.REQ.SERVER.PING.CONNZ\" queue=null",
        "\"A\" \"orders.>\" queue=\"workers\"",
        "total is the list: true",
    ];
    both_servers_agree(SYS_CONFIG, expected, account_subscriptions).await;
}

/// A's traffic as the account's statz counts it once the client that made it has closed.
async fn traffic_after_close(url: String) -> Vec<String> {
    let sys = login(&url, "sys").await;
    let mut gone = sys.subscribe("$SYS.ACCOUNT.A.DISCONNECT").await.expect("subscribe");
    semaq_testkit::sync(&sys).await;
    let a = login(&url, "a").await;
    for _ in 0..3 {
        a.publish("nobody.listens", "xy".into()).await.expect("publish");
    }
    a.flush().await.expect("flush");
    drop(a);
    tokio::time::timeout(WAIT, gone.next()).await.expect("the disconnect event").expect("open");
    let statz = ask(&sys, "$SYS.REQ.ACCOUNT.PING.STATZ", r#"{"accounts":["A"],"include_unused":true}"#).await;
    let stat = &statz["data"]["account_statz"][0];
    vec![
        format!("conns: {}", stat["conns"]),
        format!("received: {} msgs {} bytes", stat["received"]["msgs"], stat["received"]["bytes"]),
        format!("slow consumers: {}", stat["slow_consumers"]),
    ]
}

#[tokio::test]
async fn an_accounts_statz_counts_the_traffic_of_its_closed_connections() {
    let expected = ["conns: 0", "received: 3 msgs 6 bytes", "slow consumers: 0"];
    both_servers_agree(SYS_CONFIG, expected, traffic_after_close).await;
}

/// The connection counts of A on the new subject while one client of A stays connected: the
/// update its connect causes, then the heartbeat that follows it, and whether that heartbeat
/// came a whole interval after the update (the account's timer restarts with each update, so a
/// connect seconds after the server started moves the heartbeat).
async fn connections_heartbeat(url: String) -> (Vec<Value>, bool) {
    let sys = login(&url, "sys").await;
    let mut counts = sys.subscribe("$SYS.ACCOUNT.A.SERVER.CONNS").await.expect("subscribe");
    semaq_testkit::sync(&sys).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let _a = login(&url, "a").await;
    let mut seen = Vec::new();
    let mut arrivals = Vec::new();
    while seen.len() < 2 {
        // nats-server's heartbeat interval is 30 s.
        let event =
            tokio::time::timeout(Duration::from_secs(45), counts.next()).await.expect("an event").expect("open");
        arrivals.push(std::time::Instant::now());
        let body: Value = serde_json::from_slice(&event.payload).expect("JSON");
        seen.push(body["conns"].clone());
    }
    (seen, arrivals[1] - arrivals[0] >= Duration::from_secs(28))
}

#[tokio::test]
async fn an_account_with_connections_has_a_connection_count_heartbeat_an_interval_after_its_last_update() {
    let (nats, _dir, semaq) = servers();
    // Side by side at once: each waits for a heartbeat 30 s apart.
    let (theirs, ours) = tokio::join!(connections_heartbeat(nats.url()), connections_heartbeat(semaq.url()));
    assert_eq!(theirs, (vec![json!(1), json!(1)], true), "nats-server");
    assert_eq!(ours, (vec![json!(1), json!(1)], true), "SemaQ");
}

/// What the server-wide `SUBSZ` request lists with nats-server's options, after a client of A
/// subscribed to `orders.>` and a client of B to `orders.new`.
async fn server_subscriptions(url: String) -> Vec<String> {
    let sys = login(&url, "sys").await;
    let (a, b) = (login(&url, "a").await, login(&url, "b").await);
    let _a_orders = a.subscribe("orders.>").await.expect("subscribe");
    let _b_orders = b.subscribe("orders.new").await.expect("subscribe");
    semaq_testkit::sync(&a).await;
    semaq_testkit::sync(&b).await;
    let listed = |body: &Value| -> Vec<String> {
        let subs = body["data"]["subscriptions_list"].as_array().cloned().unwrap_or_default();
        let mut subs: Vec<String> =
            subs.iter().map(|sub| format!("{}:{}", sub["account"].as_str().unwrap_or("?"), sub["subject"])).collect();
        subs.sort();
        subs
    };
    let every = ask(&sys, "$SYS.REQ.SERVER.PING.SUBSZ", r#"{"subscriptions":true,"test":"orders.new"}"#).await;
    let in_a =
        ask(&sys, "$SYS.REQ.SERVER.PING.SUBSZ", r#"{"subscriptions":true,"test":"orders.new","account":"A"}"#).await;
    let figures = ask(&sys, "$SYS.REQ.SERVER.PING.SUBSZ", "").await;
    let bad = ask(&sys, "$SYS.REQ.SERVER.PING.SUBSZ", r#"{"subscriptions":true,"test":"orders.*"}"#).await;
    vec![
        format!("every account: {:?} total={}", listed(&every), every["data"]["total"]),
        format!("account A: {:?}", listed(&in_a)),
        format!("figures only: list={} total={}", figures["data"]["subscriptions_list"], figures["data"]["total"]),
        format!("wildcard test: {} {}", bad["error"]["code"], bad["error"]["description"]),
    ]
}

#[tokio::test]
async fn the_server_subsz_request_lists_subscriptions_a_test_subject_reaches() {
    let expected = [
        "every account: [\"A:\\\"orders.>\\\"\", \"B:\\\"orders.new\\\"\"] total=2",
        "account A: [\"A:\\\"orders.>\\\"\"]",
        "figures only: list=null total=0",
        "wildcard test: 500 \"invalid test subject, must be valid publish subject: orders.*\"",
    ];
    both_servers_agree(SYS_CONFIG, expected, server_subscriptions).await;
}

#[tokio::test]
async fn every_user_asks_who_it_is_through_the_user_info_import() {
    let config = "accounts {\n  $SYS { users [ {user: sys, password: sys} ] }\n  A { users [ {user: a, password: a, \
        permissions: { publish: { allow: [\"orders.>\", \"$SYS.REQ.USER.INFO\"] }, subscribe: { deny: [\"secret.>\"] } } } ] }\n}\n";
    let semaq = SemaqServer::with_config(config, &[]);
    let a = login(&semaq.url(), "a").await;
    let sys = login(&semaq.url(), "sys").await;
    // As nats-server's source answers it (nats-server 2.9 has no such import to compare with).
    let expected_a = json!({
        "user": "a",
        "account": "A",
        "account_name": "A",
        "permissions": { "publish": { "allow": ["orders.>", "$SYS.REQ.USER.INFO"] }, "subscribe": { "deny": ["secret.>"] } },
    });
    assert_eq!(ask(&a, "$SYS.REQ.USER.INFO", "").await["data"], expected_a);
    let expected_sys = json!({ "user": "sys", "account": "$SYS", "account_name": "$SYS" });
    assert_eq!(ask(&sys, "$SYS.REQ.USER.INFO", "").await["data"], expected_sys);
}

/// JetStream as the system user asks it of an account with JetStream and of one without.
async fn account_jetstream(url: &str) -> Vec<String> {
    let sys = login(url, "sys").await;
    let with = ask(&sys, "$SYS.REQ.ACCOUNT.A.JSZ", "").await;
    let without = ask(&sys, "$SYS.REQ.ACCOUNT.B.JSZ", "").await;
    vec![
        format!("A: {} {} memory={}", with["data"]["name"], with["data"]["id"], with["data"]["memory"]),
        format!("B: {} {}", without["error"]["code"], without["error"]["description"]),
    ]
}

#[tokio::test]
async fn an_accounts_jsz_is_its_jetstream_detail_or_nats_servers_error() {
    let config = "accounts {\n  $SYS { users [ {user: sys, password: sys} ] }\n  \
        A { jetstream: enabled, users [ {user: a, password: a} ] }\n  B { users [ {user: b, password: b} ] }\n}\n";
    let (nats, _http, _dir) = crate::system_config::nats_with(config, true);
    let semaq = SemaqServer::with_config(config, &[]);
    let expected = ["A: \"A\" \"A\" memory=0", "B: 500 \"account \\\"B\\\" not jetstream enabled\""];
    assert_eq!(account_jetstream(&nats.url()).await, expected, "nats-server");
    assert_eq!(account_jetstream(&semaq.url()).await, expected, "SemaQ");
}
