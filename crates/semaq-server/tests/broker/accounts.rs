//! Accounts are separate subject spaces, side by side with nats-server 2.9: a message published
//! by a user of one account reaches only subscriptions of that account (plain, request/reply and
//! queue groups), `$G` (the server's own users) is one more account, `no_auth_user` puts a
//! client in its user's account, and JetStream answers only in the account that enables it;
//! elsewhere a `$JS.API` request finds no responders. Config accounts and JWT accounts alike.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use async_nats::{Client, RequestErrorKind};
use futures::StreamExt;
use nkeys::KeyPair;
use semaq_testkit::{sync, SemaqServer};
use serde_json::{json, Value};

use crate::account_limits::nats_server_with;
use crate::auth_nkeys::{account_claims, creds, mint, operator_jwt_naming, unlimited_user};

/// Two accounts (JetStream in A only), `$G` users, and anonymous clients in B.
const CONFIG: &str = r#"
authorization { users: [{ user: g, password: g }] }
accounts {
  A { users: [{ user: a, password: a }, { user: a2, password: a2 }], jetstream: enabled }
  B { users: [{ user: b, password: b }, { user: b2, password: b2 }] }
}
no_auth_user: b2
"#;

/// Longest wait for a message that should come.
const ARRIVAL: Duration = Duration::from_secs(5);
/// How long silence means nothing more is coming.
const QUIET: Duration = Duration::from_millis(300);

/// Connects as `user` (password = name), or with no credentials for `None`.
async fn login(url: &str, user: Option<&str>) -> Client {
    let options = match user {
        Some(user) => async_nats::ConnectOptions::with_user_and_password(user.into(), user.into()),
        None => async_nats::ConnectOptions::new(),
    };
    options.connect(url).await.unwrap_or_else(|error| panic!("{user:?} connects to {url}: {error}"))
}

/// Each of `publishers` publishes `orders.<name>` (all of them first, then `orders.end`); returns
/// what each of `subscribers`, subscribed to `orders.>`, received up to its first `orders.end`.
async fn who_hears_whom(
    subscribers: &[(&str, &Client)],
    publishers: &[(&str, &Client)],
) -> BTreeMap<String, Vec<String>> {
    let mut subscriptions = Vec::new();
    for (name, client) in subscribers {
        subscriptions.push((name.to_string(), client.subscribe("orders.>").await.unwrap()));
        sync(client).await;
    }
    for (name, client) in publishers {
        client.publish(format!("orders.{name}"), "x".into()).await.unwrap();
    }
    // Every publish is routed before any `end`, so a subscriber's `end` comes after all it gets.
    for (_, client) in publishers {
        sync(client).await;
    }
    for (_, client) in publishers {
        client.publish("orders.end", "x".into()).await.unwrap();
        client.flush().await.unwrap();
    }
    let mut heard = BTreeMap::new();
    for (name, mut subscription) in subscriptions {
        let mut subjects = Vec::new();
        while !subjects.iter().any(|s| s == "orders.end") {
            let next = tokio::time::timeout(ARRIVAL, subscription.next()).await;
            let message = next.unwrap_or_else(|_| panic!("{name}: no orders.end after {subjects:?}")).unwrap();
            subjects.push(message.subject.to_string());
        }
        heard.insert(name, subjects);
    }
    heard
}

fn heard(pairs: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    pairs.iter().map(|(name, subjects)| (name.to_string(), subjects.iter().map(|s| s.to_string()).collect())).collect()
}

async fn config_accounts_isolation(url: &str) -> BTreeMap<String, Vec<String>> {
    let (a, a2, b, g, anonymous) = (
        login(url, Some("a")).await,
        login(url, Some("a2")).await,
        login(url, Some("b")).await,
        login(url, Some("g")).await,
        login(url, None).await,
    );
    who_hears_whom(&[("a2", &a2), ("b", &b), ("g", &g), ("anonymous", &anonymous)], &[("a", &a), ("b", &b), ("g", &g)])
        .await
}

#[tokio::test]
async fn a_publish_reaches_only_subscribers_of_the_publishers_account_as_in_nats_server() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (nats, _dir) = nats_server_with(CONFIG);
    let expected = heard(&[
        ("a2", &["orders.a", "orders.end"]),
        ("b", &["orders.b", "orders.end"]),
        ("g", &["orders.g", "orders.end"]),
        // no_auth_user b2 is in B.
        ("anonymous", &["orders.b", "orders.end"]),
    ]);
    assert_eq!(config_accounts_isolation(&nats.url()).await, expected, "nats-server 2.9");
    assert_eq!(config_accounts_isolation(&semaq.url()).await, expected);
}

/// What a request on `subject` got: a reply's body (or, for `$JS.API`, its `type` and error
/// code), or why not.
async fn ask(client: &Client, subject: &str) -> String {
    match client.request(subject.to_string(), "".into()).await {
        Ok(reply) => match serde_json::from_slice::<Value>(&reply.payload) {
            Ok(body) => {
                let kind = body["type"].as_str().unwrap_or("a JSON reply without type");
                match body["error"]["err_code"].as_u64() {
                    Some(code) => format!("{kind} error {code}"),
                    None => kind.to_string(),
                }
            }
            Err(_) => String::from_utf8_lossy(&reply.payload).to_string(),
        },
        Err(error) if error.kind() == RequestErrorKind::NoResponders => "no responders".to_string(),
        Err(error) => format!("error: {error}"),
    }
}

async fn config_accounts_requests(url: &str) -> Vec<String> {
    let (a, a2, b, g, anonymous) = (
        login(url, Some("a")).await,
        login(url, Some("a2")).await,
        login(url, Some("b")).await,
        login(url, Some("g")).await,
        login(url, None).await,
    );
    let mut service = a2.subscribe("svc").await.unwrap();
    sync(&a2).await;
    let responder = a2.clone();
    let serving = tokio::spawn(async move {
        while let Some(request) = service.next().await {
            if let Some(reply) = request.reply {
                responder.publish(reply, "served in A".into()).await.unwrap();
                responder.flush().await.unwrap();
            }
        }
    });
    let mut seen = Vec::new();
    for (name, client) in [("a", &a), ("b", &b), ("g", &g), ("anonymous", &anonymous)] {
        seen.push(format!("{name} svc: {}", ask(client, "svc").await));
        seen.push(format!("{name} $JS.API.INFO: {}", ask(client, "$JS.API.INFO").await));
    }
    serving.abort();
    seen
}

#[tokio::test]
async fn requests_and_jetstream_are_answered_only_within_the_account_as_in_nats_server() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (nats, _dir) = nats_server_with(CONFIG);
    let expected = [
        "a svc: served in A",
        "a $JS.API.INFO: io.nats.jetstream.api.v1.account_info_response",
        // nats-server answers the JetStream API in every account, with 10039 where it is off.
        "b svc: no responders",
        "b $JS.API.INFO: io.nats.jetstream.api.v1.account_info_response error 10039",
        "g svc: no responders",
        "g $JS.API.INFO: io.nats.jetstream.api.v1.account_info_response error 10039",
        "anonymous svc: no responders",
        "anonymous $JS.API.INFO: io.nats.jetstream.api.v1.account_info_response error 10039",
    ];
    assert_eq!(config_accounts_requests(&nats.url()).await, expected, "nats-server 2.9");
    assert_eq!(config_accounts_requests(&semaq.url()).await, expected);
}

/// `$JS.API` requests from an account without JetStream, each with its own reply subject;
/// returns each answer (a JSON body, a status, or nothing) by request.
async fn jetstream_elsewhere(url: &str) -> Vec<(String, Value)> {
    let b = login(url, Some("b")).await;
    let mut replies = b.subscribe("answers.>").await.unwrap();
    sync(&b).await;
    let requests = [
        ("$JS.API.INFO", ""),
        ("$JS.API.STREAM.CREATE.s", r#"{"name":"s","subjects":["s.>"]}"#),
        ("$JS.API.STREAM.UPDATE.s", r#"{"name":"s"}"#),
        ("$JS.API.STREAM.INFO.s", ""),
        ("$JS.API.STREAM.DELETE.s", ""),
        ("$JS.API.STREAM.PURGE.s", ""),
        ("$JS.API.STREAM.NAMES", ""),
        ("$JS.API.STREAM.LIST", ""),
        ("$JS.API.STREAM.MSG.GET.s", r#"{"seq":1}"#),
        ("$JS.API.STREAM.MSG.DELETE.s", r#"{"seq":1}"#),
        ("$JS.API.CONSUMER.CREATE.s", r#"{"stream_name":"s","config":{}}"#),
        ("$JS.API.CONSUMER.DURABLE.CREATE.s.c", r#"{"stream_name":"s","config":{"durable_name":"c"}}"#),
        ("$JS.API.CONSUMER.CREATE.s.c.s.x", "not JSON"),
        ("$JS.API.CONSUMER.INFO.s.c", ""),
        ("$JS.API.CONSUMER.DELETE.s.c", ""),
        ("$JS.API.CONSUMER.NAMES.s", ""),
        ("$JS.API.CONSUMER.LIST.s", ""),
        // No answer from nats-server: a direct get, a pull request, an unknown API.
        ("$JS.API.DIRECT.GET.s", r#"{"seq":1}"#),
        ("$JS.API.CONSUMER.MSG.NEXT.s.c", r#"{"batch":1}"#),
        ("$JS.API.NOT.AN.API", ""),
    ];
    for (index, (subject, body)) in requests.iter().enumerate() {
        b.publish_with_reply(subject.to_string(), format!("answers.{index}"), body.to_string().into()).await.unwrap();
    }
    sync(&b).await;
    let mut answers = Vec::new();
    while let Ok(Some(message)) = tokio::time::timeout(Duration::from_secs(1), replies.next()).await {
        let index: usize = message.subject.trim_start_matches("answers.").parse().unwrap();
        let body = match message.status {
            Some(status) => json!(format!("status {status}")),
            None => serde_json::from_slice(&message.payload).unwrap_or(json!("not JSON")),
        };
        answers.push((requests[index].0.to_string(), body));
    }
    answers.sort_by(|x, y| x.0.cmp(&y.0));
    answers
}

#[tokio::test]
async fn the_jetstream_api_answers_other_accounts_as_nats_server_answers_an_account_without_it() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (nats, _dir) = nats_server_with(CONFIG);
    let expected = jetstream_elsewhere(&nats.url()).await;
    assert_eq!(expected.len(), 17, "nats-server 2.9 answers all but three: {expected:#?}");
    let invalid = expected.iter().filter(|(_, body)| body["error"]["err_code"] == 10025).count();
    assert_eq!(invalid, 1, "nats-server 2.9 reads a consumer create's body first: {expected:#?}");
    let ours = jetstream_elsewhere(&semaq.url()).await;
    assert_eq!(ours.len(), expected.len(), "{ours:#?}");
    for ((subject, ours), (_, theirs)) in ours.iter().zip(&expected) {
        if theirs["error"]["err_code"] == 10025 {
            // The description names the JSON parser's complaint, which differs by language.
            assert_eq!(ours["error"]["err_code"], 10025, "{subject}");
            continue;
        }
        assert_eq!(ours, theirs, "{subject}");
    }
}

/// Messages a queue subscription received until `QUIET` passed without one.
async fn drain(subscription: &mut async_nats::Subscriber) -> usize {
    let mut count = 0;
    while let Ok(Some(_)) = tokio::time::timeout(QUIET, subscription.next()).await {
        count += 1;
    }
    count
}

/// A publishes 10 jobs and B 4 to queue group `workers`, which has two members in A and one in
/// B; returns what each account's members received together.
async fn queue_group_shares(url: &str) -> (usize, usize) {
    let (a, a2, b) = (login(url, Some("a")).await, login(url, Some("a2")).await, login(url, Some("b")).await);
    let mut members = Vec::new();
    for client in [&a, &a2, &b] {
        members.push(client.queue_subscribe("jobs", "workers".into()).await.unwrap());
        sync(client).await;
    }
    for _ in 0..10 {
        a.publish("jobs", "x".into()).await.unwrap();
    }
    for _ in 0..4 {
        b.publish("jobs", "x".into()).await.unwrap();
    }
    sync(&a).await;
    sync(&b).await;
    let mut counts = Vec::new();
    for member in &mut members {
        counts.push(drain(member).await);
    }
    (counts[0] + counts[1], counts[2])
}

#[tokio::test]
async fn a_queue_group_is_per_account_as_in_nats_server() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (nats, _dir) = nats_server_with(CONFIG);
    assert_eq!(queue_group_shares(&nats.url()).await, (10, 4), "nats-server 2.9");
    assert_eq!(queue_group_shares(&semaq.url()).await, (10, 4));
}

#[tokio::test]
async fn connz_names_each_connections_account_and_filters_by_it() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let url = semaq.url();
    let _clients = [login(&url, Some("a")).await, login(&url, Some("g")).await, login(&url, None).await];
    let connz = semaq.http_json("/connz");
    let accounts: BTreeMap<String, Value> = connz["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["authorized_user"].as_str().unwrap_or("").to_string(), c["account"].clone()))
        .collect();
    // As nats-server's /connz?auth=true: the account unless it is `$G`.
    let expected: BTreeMap<String, Value> =
        [("a", json!("A")), ("g", Value::Null), ("b2", json!("B"))].map(|(u, a)| (u.to_string(), a)).into();
    assert_eq!(accounts, expected);
    let only_b = semaq.http_json("/connz?acc=B");
    assert_eq!(only_b["total"], 1);
    assert_eq!(only_b["connections"][0]["authorized_user"], "b2");
    assert_eq!(semaq.http_json("/connz?acc=$G")["total"], 1);
    let accountz = semaq.http_json("/accountz");
    // nats-server lists its implicit system account too.
    assert_eq!(accountz["accounts"], json!(["$G", "$SYS", "A", "B"]));
    assert_eq!(accountz["system_account"], "$SYS");
    let detail = semaq.http_json("/accountz?acc=A");
    assert_eq!(detail["account_detail"]["jetstream_enabled"], true);
    assert_eq!(detail["account_detail"]["client_connections"], 1);
    assert_eq!(semaq.http_json("/accountz?acc=B")["account_detail"]["jetstream_enabled"], false);
}

/// An operator trusting three accounts: the system account, X with JetStream and Y without.
struct JwtAccounts {
    x: KeyPair,
    y: KeyPair,
    config: String,
}

impl JwtAccounts {
    fn new() -> Self {
        let operator = KeyPair::new_operator();
        let (system, x, y) = (KeyPair::new_account(), KeyPair::new_account(), KeyPair::new_account());
        let operator_jwt = operator_jwt_naming(&operator, &system);
        let account = |key: &KeyPair, limits: Value| {
            format!(
                "  {}: {}\n",
                key.public_key(),
                mint(&operator, &key.public_key(), account_claims(limits, json!({})), json!({}))
            )
        };
        let jetstream = json!({ "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1 });
        let config = format!(
            "operator: {operator_jwt}\nsystem_account: {}\nresolver: MEMORY\nresolver_preload {{\n{}{}{}}}\n",
            system.public_key(),
            account(&system, json!({})),
            account(&x, jetstream),
            account(&y, json!({})),
        );
        Self { x, y, config }
    }

    async fn user(&self, dir: &Path, url: &str, account: &KeyPair, name: &str) -> Client {
        let user = KeyPair::new_user();
        let jwt = mint(account, &user.public_key(), unlimited_user(json!({})), json!({}));
        let path = creds(dir, name, &jwt, &user.seed().unwrap());
        let options = async_nats::ConnectOptions::with_credentials_file(path).await.expect("creds file");
        options.connect(url).await.unwrap_or_else(|error| panic!("{name} connects to {url}: {error}"))
    }
}

async fn jwt_accounts_scenario(
    accounts: &JwtAccounts,
    dir: &Path,
    url: &str,
) -> (BTreeMap<String, Vec<String>>, Vec<String>) {
    let x1 = accounts.user(dir, url, &accounts.x, "x1").await;
    let x2 = accounts.user(dir, url, &accounts.x, "x2").await;
    let y1 = accounts.user(dir, url, &accounts.y, "y1").await;
    let heard = who_hears_whom(&[("x2", &x2), ("y1", &y1)], &[("x1", &x1), ("y1", &y1)]).await;
    let asked =
        vec![format!("x1: {}", ask(&x1, "$JS.API.INFO").await), format!("y1: {}", ask(&y1, "$JS.API.INFO").await)];
    (heard, asked)
}

#[tokio::test]
async fn jwt_accounts_are_separate_subject_spaces_with_jetstream_where_the_jwt_grants_it() {
    let dir = tempfile::tempdir().unwrap();
    let accounts = JwtAccounts::new();
    let semaq = SemaqServer::with_config(&accounts.config, &[]);
    let (nats, _nats_dir) = nats_server_with(&accounts.config);
    let expected = (
        heard(&[("x2", &["orders.x1", "orders.end"]), ("y1", &["orders.y1", "orders.end"])]),
        vec![
            "x1: io.nats.jetstream.api.v1.account_info_response".to_string(),
            "y1: io.nats.jetstream.api.v1.account_info_response error 10039".to_string(),
        ],
    );
    assert_eq!(jwt_accounts_scenario(&accounts, dir.path(), &nats.url()).await, expected, "nats-server 2.9");
    assert_eq!(jwt_accounts_scenario(&accounts, dir.path(), &semaq.url()).await, expected);
    let connz = semaq.http_json(&format!("/connz?acc={}", accounts.y.public_key()));
    assert_eq!(connz["total"], 1, "the JWT account is named by its public key: {connz}");
}

/// Without accounts everyone is in `$G`, with JetStream, as before accounts were separated.
#[tokio::test]
async fn without_accounts_everyone_shares_g_and_its_jetstream() {
    let semaq = SemaqServer::start();
    let (one, two) = (semaq.client().await, semaq.client().await);
    let heard = who_hears_whom(&[("two", &two)], &[("one", &one)]).await;
    assert_eq!(heard, self::heard(&[("two", &["orders.one", "orders.end"])]));
    assert_eq!(ask(&two, "$JS.API.INFO").await, "io.nats.jetstream.api.v1.account_info_response");
}

/// A `Nats-Trace-Dest` event (nats-server 2.11, which 2.9 has not) names the publisher's account
/// and goes to that account's subscribers only.
#[tokio::test]
async fn a_trace_event_names_and_stays_in_the_publishers_account() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let url = semaq.url();
    let (a, a2, b) = (login(&url, Some("a")).await, login(&url, Some("a2")).await, login(&url, Some("b")).await);
    let mut events_in_a = a2.subscribe("trace.events").await.unwrap();
    let mut events_in_b = b.subscribe("trace.events").await.unwrap();
    sync(&a2).await;
    sync(&b).await;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Trace-Dest", "trace.events");
    a.publish_with_headers("orders.traced", headers, "x".into()).await.unwrap();
    sync(&a).await;
    let event = tokio::time::timeout(ARRIVAL, events_in_a.next()).await.expect("an event in A").unwrap();
    let event: Value = serde_json::from_slice(&event.payload).unwrap();
    assert_eq!(event["events"][0]["acc"], "A", "{event}");
    let stray = tokio::time::timeout(QUIET, events_in_b.next()).await;
    assert!(stray.is_err(), "B's subscriber on the same subject gets no event: {stray:?}");
}
