//! A JetStream for every account that enables it, side by side with nats-server 2.9 where a
//! client can tell: two accounts each have a stream `ORDERS` on the same subjects, and each
//! stores, delivers and counts only its own account's messages; consumers, KV buckets, account
//! info, sources, mirrors, direct gets and limits are per account, the server's own bounds
//! cover all of them; both accounts' streams survive a restart, and a store written when SemaQ
//! had one JetStream opens with nothing moved. Config accounts and JWT accounts alike; an
//! account without JetStream still gets 10039.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv};
use async_nats::Client;
use futures::StreamExt;
use nkeys::KeyPair;
use semaq_testkit::{sync, wait_until_async, SemaqServer};
use serde_json::{json, Value};

use crate::account_limits::nats_server_with;
use crate::auth_nkeys::{creds, mint, operator_jwt_naming, preload_line, unlimited_user};
use crate::jetstream_api::{api, WAIT};

/// Accounts A and B with JetStream, C without; users named as their account.
const CONFIG: &str = r#"
accounts {
  A { users: [{ user: a, password: a }], jetstream: enabled }
  B { users: [{ user: b, password: b }], jetstream: enabled }
  C { users: [{ user: c, password: c }] }
}
"#;

/// How long silence means nothing more is coming.
const QUIET: Duration = Duration::from_millis(300);

/// Connects as `user` (password = name).
async fn login(url: &str, user: &str) -> Client {
    let options = async_nats::ConnectOptions::with_user_and_password(user.into(), user.into());
    options.connect(url).await.unwrap_or_else(|error| panic!("{user} connects to {url}: {error}"))
}

/// The response's type, or its error code: what two servers must agree on.
fn outcome(reply: &Value) -> String {
    match reply["error"]["err_code"].as_u64() {
        Some(code) => format!("error {code}"),
        None => reply["type"].as_str().unwrap_or("no type").trim_start_matches("io.nats.jetstream.api.v1.").to_string(),
    }
}

/// A JetStream publish as a raw request: the PubAck's stream and sequence, or what came back.
async fn publish(client: &Client, subject: &str, payload: &str) -> String {
    let reply = tokio::time::timeout(WAIT, client.request(subject.to_string(), payload.to_string().into())).await;
    match reply {
        Ok(Ok(message)) => {
            let ack: Value = serde_json::from_slice(&message.payload).unwrap_or(json!("not JSON"));
            format!("{} {}", ack["stream"].as_str().unwrap_or("?"), ack["seq"])
        }
        Ok(Err(error)) => format!("{:?}", error.kind()),
        Err(_) => "no answer".to_string(),
    }
}

/// The messages of `stream` as seen by `client`, and the subject and payload of its first.
async fn stored(client: &Client, stream: &str) -> String {
    let info = api(client, &format!("$JS.API.STREAM.INFO.{stream}"), "").await;
    let first = api(client, &format!("$JS.API.STREAM.MSG.GET.{stream}"), r#"{"seq":1}"#).await;
    let payload = first["message"]["data"].as_str().unwrap_or_default();
    let payload = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, payload).unwrap_or_default();
    format!(
        "{} messages, first {} {:?}",
        info["state"]["messages"],
        first["message"]["subject"].as_str().unwrap_or("-"),
        String::from_utf8_lossy(&payload)
    )
}

async fn two_orders_streams(url: &str) -> Vec<String> {
    let (a, b, c) = (login(url, "a").await, login(url, "b").await, login(url, "c").await);
    let orders = r#"{"name":"ORDERS","subjects":["orders.>"],"storage":"memory"}"#;
    let mut seen = vec![
        format!("a creates: {}", outcome(&api(&a, "$JS.API.STREAM.CREATE.ORDERS", orders).await)),
        format!("b creates: {}", outcome(&api(&b, "$JS.API.STREAM.CREATE.ORDERS", orders).await)),
    ];
    for n in 1..=3 {
        seen.push(format!("a publishes: {}", publish(&a, &format!("orders.{n}"), "from a").await));
    }
    seen.push(format!("b publishes: {}", publish(&b, "orders.b", "from b").await));
    seen.push(format!("c publishes: {}", publish(&c, "orders.c", "from c").await));
    seen.push(format!("A's ORDERS: {}", stored(&a, "ORDERS").await));
    seen.push(format!("B's ORDERS: {}", stored(&b, "ORDERS").await));
    seen.push(format!("c asks INFO: {}", outcome(&api(&c, "$JS.API.INFO", "").await)));
    seen.push(format!("c asks ORDERS: {}", outcome(&api(&c, "$JS.API.STREAM.INFO.ORDERS", "").await)));
    seen
}

#[tokio::test]
async fn two_accounts_each_store_only_their_own_publishes_in_a_stream_of_the_same_name_as_nats_server() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (nats, _dir) = nats_server_with(CONFIG);
    let expected = [
        "a creates: stream_create_response",
        "b creates: stream_create_response",
        "a publishes: ORDERS 1",
        "a publishes: ORDERS 2",
        "a publishes: ORDERS 3",
        "b publishes: ORDERS 1",
        "c publishes: NoResponders",
        "A's ORDERS: 3 messages, first orders.1 \"from a\"",
        "B's ORDERS: 1 messages, first orders.b \"from b\"",
        "c asks INFO: error 10039",
        "c asks ORDERS: error 10039",
    ];
    assert_eq!(two_orders_streams(&nats.url()).await, expected, "nats-server 2.9");
    assert_eq!(two_orders_streams(&semaq.url()).await, expected);
}

/// What a durable pull consumer named `worker` on `ORDERS` fetches (payloads), up to 10.
async fn fetch_all(js: &jetstream::Context) -> Vec<String> {
    let stream = js.get_stream("ORDERS").await.expect("ORDERS");
    let config = consumer::pull::Config { durable_name: Some("worker".into()), ..Default::default() };
    let worker = stream.get_or_create_consumer("worker", config).await.expect("worker");
    let mut batch = worker.fetch().max_messages(10).expires(QUIET).messages().await.expect("fetch");
    let mut payloads = Vec::new();
    while let Some(message) = batch.next().await {
        let message = message.expect("a message");
        payloads.push(String::from_utf8_lossy(&message.payload).to_string());
        message.ack().await.expect("ack");
    }
    payloads
}

/// Pushes to `deliver.orders` in A, and what subscribers of that subject in A and in B got.
async fn push_deliveries(a: &Client, b: &Client) -> (usize, usize) {
    let (mut in_a, mut in_b) =
        (a.subscribe("deliver.orders").await.unwrap(), b.subscribe("deliver.orders").await.unwrap());
    sync(a).await;
    sync(b).await;
    let config = json!({ "stream_name": "ORDERS", "config": { "deliver_subject": "deliver.orders" } });
    assert_eq!(
        outcome(&api(a, "$JS.API.CONSUMER.CREATE.ORDERS", &config.to_string()).await),
        "consumer_create_response"
    );
    let mut counts = (0, 0);
    while let Ok(Some(_)) = tokio::time::timeout(QUIET, in_a.next()).await {
        counts.0 += 1;
    }
    while let Ok(Some(_)) = tokio::time::timeout(QUIET, in_b.next()).await {
        counts.1 += 1;
    }
    counts
}

#[tokio::test]
async fn consumers_kv_buckets_and_account_info_are_each_accounts_own() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    let (a, b) = (login(&semaq.url(), "a").await, login(&semaq.url(), "b").await);
    let (js_a, js_b) = (jetstream::new(a.clone()), jetstream::new(b.clone()));
    for (js, payloads) in [(&js_a, &["a1", "a2"][..]), (&js_b, &["b1"][..])] {
        let config = jetstream::stream::Config {
            name: "ORDERS".into(),
            subjects: vec!["orders.>".into()],
            ..Default::default()
        };
        js.create_stream(config).await.expect("ORDERS");
        for payload in payloads {
            js.publish("orders.new", payload.to_string().into()).await.unwrap().await.expect("stored");
        }
    }
    assert_eq!(fetch_all(&js_a).await, ["a1", "a2"]);
    assert_eq!(fetch_all(&js_b).await, ["b1"], "B's worker of the same name has B's message only");
    assert_eq!(push_deliveries(&a, &b).await, (2, 0), "deliveries go to the consumer's account's subjects");

    let (kv_a, kv_b) = (
        js_a.create_key_value(kv::Config { bucket: "settings".into(), ..Default::default() })
            .await
            .expect("A's bucket"),
        js_b.create_key_value(kv::Config { bucket: "settings".into(), ..Default::default() })
            .await
            .expect("B's bucket"),
    );
    kv_a.put("color", "red".into()).await.unwrap();
    kv_a.put("size", "large".into()).await.unwrap();
    kv_b.put("color", "blue".into()).await.unwrap();
    assert_eq!(kv_a.get("color").await.unwrap().as_deref(), Some(&b"red"[..]));
    assert_eq!(kv_b.get("color").await.unwrap().as_deref(), Some(&b"blue"[..]));
    assert_eq!(kv_b.get("size").await.unwrap(), None, "A's key is not in B's bucket");

    let only_a = jetstream::stream::Config { name: "ONLY_A".into(), ..Default::default() };
    js_a.create_stream(only_a).await.expect("ONLY_A");
    let (info_a, info_b) = (api(&a, "$JS.API.INFO", "").await, api(&b, "$JS.API.INFO", "").await);
    assert_eq!((info_a["streams"].as_u64(), info_a["consumers"].as_u64()), (Some(3), Some(2)), "{info_a}");
    assert_eq!((info_b["streams"].as_u64(), info_b["consumers"].as_u64()), (Some(2), Some(1)), "{info_b}");
    let names = api(&b, "$JS.API.STREAM.NAMES", "").await;
    assert_eq!(names["streams"], json!(["KV_settings", "ORDERS"]), "B lists its own streams");
}

/// Messages in `stream`, as `client` sees it.
async fn messages(client: &Client, stream: &str) -> u64 {
    api(client, &format!("$JS.API.STREAM.INFO.{stream}"), "").await["state"]["messages"].as_u64().unwrap_or(0)
}

#[tokio::test]
async fn a_source_a_mirror_and_direct_gets_read_the_streams_of_their_own_account() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    fill(&semaq.url(), "a", &["a1", "a2", "a3"], false).await;
    fill(&semaq.url(), "b", &["b1"], false).await;
    let b = login(&semaq.url(), "b").await;
    let copy = json!({ "name": "COPY", "storage": "memory", "sources": [{ "name": "ORDERS" }] });
    assert_eq!(outcome(&api(&b, "$JS.API.STREAM.CREATE.COPY", &copy.to_string()).await), "stream_create_response");
    let mirror = json!({ "name": "MIRROR", "storage": "memory", "mirror": { "name": "ORDERS" } });
    assert_eq!(outcome(&api(&b, "$JS.API.STREAM.CREATE.MIRROR", &mirror.to_string()).await), "stream_create_response");
    for follower in ["COPY", "MIRROR"] {
        wait_until_async(follower, WAIT, || async { messages(&b, follower).await == 1 }).await;
    }
    tokio::time::sleep(QUIET).await;
    assert_eq!((messages(&b, "COPY").await, messages(&b, "MIRROR").await), (1, 1), "B's one message, not A's three");
    let direct = json!({ "name": "ORDERS", "subjects": ["orders.>"], "allow_direct": true });
    assert_eq!(outcome(&api(&b, "$JS.API.STREAM.UPDATE.ORDERS", &direct.to_string()).await), "stream_update_response");
    let got = b.request("$JS.API.DIRECT.GET.ORDERS", r#"{"last_by_subj":"orders.new"}"#.into()).await.unwrap();
    assert_eq!(&got.payload[..], b"b1", "B's last message on the subject, not A's");
}

/// A at most one stream, B two and 1MB (1,048,576 bytes) of memory, the server 1MB of memory
/// for all accounts.
const LIMITS_CONFIG: &str = r#"
jetstream { max_memory_store: 1MB }
accounts {
  A { users: [{ user: a, password: a }], jetstream { max_streams: 1 } }
  B { users: [{ user: b, password: b }], jetstream { max_streams: 2, max_mem: 1MB } }
}
"#;

/// Each request as (user, subject, body) and its outcome; account infos' counts and limits.
async fn limits_scenario(url: &str) -> Vec<String> {
    let (a, b) = (login(url, "a").await, login(url, "b").await);
    let memory = |name: &str, max_bytes: i64| {
        json!({ "name": name, "subjects": [format!("{name}.>")], "storage": "memory", "max_bytes": max_bytes })
            .to_string()
    };
    let file = |name: &str| json!({ "name": name, "subjects": [format!("{name}.>")], "storage": "file" }).to_string();
    let steps = [
        ("a", &a, "$JS.API.STREAM.CREATE.m", memory("m", 600_000)),
        ("a", &a, "$JS.API.STREAM.CREATE.n", memory("n", 1000)),
        ("b", &b, "$JS.API.STREAM.CREATE.m", memory("m", 600_000)),
        ("b", &b, "$JS.API.STREAM.CREATE.m", memory("m", 300_000)),
        ("b", &b, "$JS.API.STREAM.CREATE.f", file("f")),
        ("b", &b, "$JS.API.STREAM.CREATE.g", file("g")),
    ];
    let mut seen = Vec::new();
    for (user, client, subject, body) in steps {
        seen.push(format!("{user} {subject}: {}", outcome(&api(client, subject, &body).await)));
    }
    for (user, client) in [("a", &a), ("b", &b)] {
        let info = api(client, "$JS.API.INFO", "").await;
        let limits = &info["limits"];
        seen.push(format!(
            "{user} INFO: {} streams, max_streams {}, max_memory {}",
            info["streams"], limits["max_streams"], limits["max_memory"]
        ));
    }
    seen
}

#[tokio::test]
async fn each_accounts_limits_apply_to_it_alone_and_the_servers_bound_to_all_as_in_nats_server() {
    let semaq = SemaqServer::with_config(LIMITS_CONFIG, &[]);
    let (nats, _dir) = nats_server_with(LIMITS_CONFIG);
    let expected = [
        "a $JS.API.STREAM.CREATE.m: stream_create_response",
        "a $JS.API.STREAM.CREATE.n: error 10027",
        // The server's 1MB of memory: A's stream reserved 600,000 bytes of it.
        "b $JS.API.STREAM.CREATE.m: error 10028",
        "b $JS.API.STREAM.CREATE.m: stream_create_response",
        "b $JS.API.STREAM.CREATE.f: stream_create_response",
        "b $JS.API.STREAM.CREATE.g: error 10027",
        "a INFO: 1 streams, max_streams 1, max_memory -1",
        "b INFO: 2 streams, max_streams 2, max_memory 1048576",
    ];
    assert_eq!(limits_scenario(&nats.url()).await, expected, "nats-server 2.9");
    assert_eq!(limits_scenario(&semaq.url()).await, expected);
}

/// Starts SemaQ with `config` on `store`.
fn start_on(store: &Path, config: &str) -> SemaqServer {
    SemaqServer::builder().store(store).config(config).start()
}

/// Creates file stream `ORDERS` and publishes `payloads` as `user`; with `durable`, a durable
/// consumer `worker` too.
async fn fill(url: &str, user: &str, payloads: &[&str], durable: bool) {
    let client = login(url, user).await;
    let create = api(&client, "$JS.API.STREAM.CREATE.ORDERS", r#"{"name":"ORDERS","subjects":["orders.>"]}"#).await;
    assert_eq!(outcome(&create), "stream_create_response", "{user}: {create}");
    for (index, payload) in payloads.iter().enumerate() {
        assert_eq!(publish(&client, "orders.new", payload).await, format!("ORDERS {}", index + 1));
    }
    if durable {
        let config =
            json!({ "stream_name": "ORDERS", "config": { "durable_name": "worker", "ack_policy": "explicit" } });
        let created = api(&client, "$JS.API.CONSUMER.CREATE.ORDERS.worker", &config.to_string()).await;
        assert_eq!(outcome(&created), "consumer_create_response", "{created}");
    }
}

/// What `user`'s account has: its stream names, and `ORDERS`' messages and consumers.
async fn holdings(url: &str, user: &str) -> String {
    let client = login(url, user).await;
    let names = api(&client, "$JS.API.STREAM.NAMES", "").await;
    let info = api(&client, "$JS.API.STREAM.INFO.ORDERS", "").await;
    format!(
        "{} streams {}, ORDERS: {} messages, {} consumers",
        user, names["streams"], info["state"]["messages"], info["state"]["consumer_count"]
    )
}

/// Every file under `dir`, relative to it.
fn files(dir: &Path) -> BTreeSet<PathBuf> {
    let mut found = BTreeSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                found.insert(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    found
}

/// Only A has JetStream: the store as SemaQ wrote it when it had one JetStream.
const BEFORE: &str = r#"
accounts {
  A { users: [{ user: a, password: a }], jetstream: enabled }
  B { users: [{ user: b, password: b }] }
}
"#;

/// B is given JetStream too, listed first, so B is now the home account.
const B_FIRST: &str = r#"
accounts {
  B { users: [{ user: b, password: b }], jetstream: enabled }
  A { users: [{ user: a, password: a }], jetstream: enabled }
}
"#;

#[tokio::test]
async fn a_store_from_one_jetstream_opens_unchanged_and_both_accounts_streams_survive_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut before = start_on(&store, BEFORE);
    fill(&before.url(), "a", &["a1", "a2"], true).await;
    before.terminate();
    // The version before wrote no owner file: as if this store came from it.
    std::fs::remove_file(store.join("jetstream/streams.account")).unwrap();
    let written = files(&store);
    assert!(written.contains(Path::new("jetstream/streams/ORDERS/stream.json")), "{written:?}");

    let mut both = start_on(&store, &CONFIG.replace("  C { users: [{ user: c, password: c }] }\n", ""));
    assert_eq!(holdings(&both.url(), "a").await, r#"a streams ["ORDERS"], ORDERS: 2 messages, 1 consumers"#);
    assert_eq!(api(&login(&both.url(), "b").await, "$JS.API.STREAM.NAMES", "").await["total"], 0);
    fill(&both.url(), "b", &["b1"], false).await;
    both.terminate();
    let now = files(&store);
    assert!(written.iter().all(|file| now.contains(file)), "nothing moved: {written:?} within {now:?}");
    assert!(now.contains(Path::new("jetstream/accounts/B/streams/ORDERS/stream.json")), "{now:?}");
    assert_eq!(std::fs::read_to_string(store.join("jetstream/streams.account")).unwrap(), "A\n");

    let reordered = start_on(&store, B_FIRST);
    assert_eq!(holdings(&reordered.url(), "a").await, r#"a streams ["ORDERS"], ORDERS: 2 messages, 1 consumers"#);
    assert_eq!(holdings(&reordered.url(), "b").await, r#"b streams ["ORDERS"], ORDERS: 1 messages, 0 consumers"#);
    drop(reordered);
    both.restart();
    assert_eq!(holdings(&both.url(), "a").await, r#"a streams ["ORDERS"], ORDERS: 2 messages, 1 consumers"#);
    assert_eq!(holdings(&both.url(), "b").await, r#"b streams ["ORDERS"], ORDERS: 1 messages, 0 consumers"#);
}

#[tokio::test]
async fn monitoring_sums_every_accounts_jetstream_and_lists_each() {
    let semaq = SemaqServer::with_config(CONFIG, &[]);
    fill(&semaq.url(), "a", &["a1", "a2"], true).await;
    fill(&semaq.url(), "b", &["b1"], false).await;
    let jsz = semaq.http_json("/jsz");
    let totals = (&jsz["streams"], &jsz["consumers"], &jsz["messages"], &jsz["accounts"], &jsz["total"]);
    assert_eq!(totals, (&json!(2), &json!(1), &json!(3), &json!(2), &json!(2)), "{jsz}");
    assert!(jsz.get("account_details").is_none(), "no details unless asked: {jsz}");
    let listed = semaq.http_json("/jsz?accounts=true");
    let names: Vec<&Value> = listed["account_details"].as_array().unwrap().iter().map(|d| &d["name"]).collect();
    assert_eq!(names, [&json!("A"), &json!("B")], "{listed}");
    let only_b = semaq.http_json("/jsz?acc=B&streams=true");
    let details = only_b["account_details"].as_array().unwrap();
    assert_eq!(details.len(), 1, "{only_b}");
    assert_eq!(details[0]["stream_detail"][0]["state"]["messages"], 1, "{only_b}");
    assert_eq!(semaq.http_json("/varz")["jetstream"]["stats"]["accounts"], 2);
    for (account, enabled) in [("A", true), ("B", true), ("C", false)] {
        assert_eq!(
            semaq.http_json(&format!("/accountz?acc={account}"))["account_detail"]["jetstream_enabled"],
            enabled
        );
    }
    let (_, metrics) = semaq.http_text("/metrics");
    let value = |series: &str| {
        let line = metrics.lines().find(|line| line.rsplit_once(' ').is_some_and(|(name, _)| name == series));
        line.and_then(|line| line.rsplit_once(' ')).and_then(|(_, value)| value.parse::<f64>().ok())
    };
    assert_eq!(value("semaq_jetstream_streams"), Some(2.0), "{metrics}");
    // The home account's streams keep the series they had; the others' name their account.
    assert_eq!(value(r#"semaq_stream_messages{stream="ORDERS"}"#), Some(2.0), "{metrics}");
    assert_eq!(value(r#"semaq_stream_messages{account="B",stream="ORDERS"}"#), Some(1.0), "{metrics}");
}

/// An operator trusting X (JetStream, one stream at most), Z (JetStream) and Y (none).
struct Operator {
    accounts: [KeyPair; 3],
    config: String,
}

impl Operator {
    fn new() -> Self {
        let operator = KeyPair::new_operator();
        let system = KeyPair::new_account();
        let accounts = [KeyPair::new_account(), KeyPair::new_account(), KeyPair::new_account()];
        let operator_jwt = operator_jwt_naming(&operator, &system);
        let preload = |key: &KeyPair, limits: Value| preload_line(&operator, key, limits);
        let jetstream =
            |streams: i64| json!({ "mem_storage": -1, "disk_storage": -1, "streams": streams, "consumer": -1 });
        let config = format!(
            "operator: {operator_jwt}\nsystem_account: {}\nresolver: MEMORY\nresolver_preload {{\n{}{}{}{}}}\n",
            system.public_key(),
            preload(&system, json!({})),
            preload(&accounts[0], jetstream(1)),
            preload(&accounts[1], json!({})),
            preload(&accounts[2], jetstream(-1)),
        );
        Self { accounts, config }
    }

    async fn user(&self, dir: &Path, url: &str, index: usize) -> Client {
        let user = KeyPair::new_user();
        let jwt = mint(&self.accounts[index], &user.public_key(), unlimited_user(json!({})), json!({}));
        let path = creds(dir, &format!("user{index}"), &jwt, &user.seed().unwrap());
        let options = async_nats::ConnectOptions::with_credentials_file(path).await.expect("creds file");
        options.connect(url).await.unwrap_or_else(|error| panic!("user of account {index} connects: {error}"))
    }
}

async fn jwt_scenario(operator: &Operator, dir: &Path, url: &str) -> Vec<String> {
    let (x, y, z) =
        (operator.user(dir, url, 0).await, operator.user(dir, url, 1).await, operator.user(dir, url, 2).await);
    let orders = r#"{"name":"ORDERS","subjects":["orders.>"],"storage":"memory"}"#;
    let mut seen = Vec::new();
    for (name, client) in [("x", &x), ("z", &z), ("y", &y)] {
        seen.push(format!("{name} creates: {}", outcome(&api(client, "$JS.API.STREAM.CREATE.ORDERS", orders).await)));
    }
    let more = r#"{"name":"MORE","storage":"memory"}"#;
    seen.push(format!("x creates another: {}", outcome(&api(&x, "$JS.API.STREAM.CREATE.MORE", more).await)));
    seen.push(format!("z creates another: {}", outcome(&api(&z, "$JS.API.STREAM.CREATE.MORE", more).await)));
    seen.push(format!("z publishes: {}", publish(&z, "orders.z", "from z").await));
    seen.push(format!("X's ORDERS: {}", api(&x, "$JS.API.STREAM.INFO.ORDERS", "").await["state"]["messages"]));
    seen.push(format!("Z's ORDERS: {}", api(&z, "$JS.API.STREAM.INFO.ORDERS", "").await["state"]["messages"]));
    seen
}

#[tokio::test]
async fn jwt_accounts_with_jetstream_limits_each_get_their_own_jetstream_as_in_nats_server() {
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::new();
    let semaq = SemaqServer::with_config(&operator.config, &[]);
    let (nats, _nats_dir) = nats_server_with(&operator.config);
    let expected = [
        "x creates: stream_create_response",
        "z creates: stream_create_response",
        "y creates: error 10039",
        "x creates another: error 10027",
        "z creates another: stream_create_response",
        "z publishes: ORDERS 1",
        "X's ORDERS: 0",
        "Z's ORDERS: 1",
    ];
    assert_eq!(jwt_scenario(&operator, dir.path(), &nats.url()).await, expected, "nats-server 2.9");
    assert_eq!(jwt_scenario(&operator, dir.path(), &semaq.url()).await, expected);
}

#[test]
fn more_accounts_with_jetstream_than_the_bound_refuse_to_start() {
    let accounts: String = (0..1001).map(|n| format!("  A{n} {{ jetstream: enabled }}\n")).collect();
    let output = SemaqServer::builder().config(&format!("accounts {{\n{accounts}}}\n")).output();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("1001 accounts enable JetStream; at most 1000 may"), "{stderr}");
}
