//! JetStream account info and account limits, side by side with nats-server 2.9: the same
//! config file and the same requests to both, the JSON compared. Each limit is refused with
//! nats-server's `code`, `err_code` and description, and a refused stream or consumer is not
//! created (the final account info, which counts streams and consumers, matches). No messages
//! are stored: SemaQ counts a message's bytes with its own record header (32 bytes), where
//! nats-server counts 16 (memory) or 30 (file), so usage bytes would differ by design.

use semaq_testkit::{NatsServer, SemaqServer};
use serde_json::{json, Value};

use crate::jetstream_api::api;

/// One account with every JetStream limit, and the server's own memory and file bounds.
const ACCOUNT_CONFIG: &str = r#"
jetstream { max_memory_store: 2MB, max_file_store: 10MB }
accounts {
  A {
    users: [{ user: a, password: a }]
    jetstream {
      max_mem: 1MB, max_file: 10MB, max_streams: 3, max_consumers: 1, max_ack_pending: 100,
      max_bytes_required: true, memory_max_stream_bytes: 500000, store_max_stream_bytes: 4MB
    }
  }
}
"#;

/// No accounts: `$G`, unlimited, inside the server's bounds.
const SERVER_BOUNDS_CONFIG: &str = "jetstream { max_memory_store: 1MB, max_file_store: 10MB }\n";

/// A request, and the `err_code` nats-server answers it with (`None`: success).
pub(crate) struct Step {
    pub(crate) subject: &'static str,
    pub(crate) body: Value,
    pub(crate) err_code: Option<u64>,
}

pub(crate) fn step(subject: &'static str, body: Value, err_code: Option<u64>) -> Step {
    Step { subject, body, err_code }
}

pub(crate) fn memory(name: &str, max_bytes: Option<i64>) -> Value {
    let mut config = json!({ "name": name, "subjects": [name], "storage": "memory" });
    if let Some(max_bytes) = max_bytes {
        config["max_bytes"] = json!(max_bytes);
    }
    config
}

fn with_max_consumers(mut config: Value, max_consumers: i64) -> Value {
    config["max_consumers"] = json!(max_consumers);
    config
}

pub(crate) fn file(name: &str, max_bytes: i64) -> Value {
    json!({ "name": name, "subjects": [name], "storage": "file", "max_bytes": max_bytes })
}

pub(crate) fn consumer(stream: &str, max_ack_pending: Option<i64>) -> Value {
    let mut config = json!({ "ack_policy": "explicit" });
    if let Some(max) = max_ack_pending {
        config["max_ack_pending"] = json!(max);
    }
    json!({ "stream_name": stream, "config": config })
}

/// What two servers must agree on: errors whole, account info whole (less the 2.10 fields
/// nats-server 2.9 lacks), of other replies their type and the consumer's `max_ack_pending`.
fn comparable(mut reply: Value) -> Value {
    if reply.get("error").is_some() {
        return reply;
    }
    if reply["type"] == "io.nats.jetstream.api.v1.account_info_response" {
        let object = reply.as_object_mut().expect("account info is an object");
        object.remove("reserved_memory");
        object.remove("reserved_storage");
        return reply;
    }
    let mut kept = json!({ "type": reply["type"] });
    if let Some(max) = reply.pointer("/config/max_ack_pending") {
        kept["max_ack_pending"] = max.clone();
    }
    kept
}

async fn run(url: &str, user: Option<&str>, steps: &[Step]) -> Vec<Value> {
    let options = match user {
        Some(user) => async_nats::ConnectOptions::with_user_and_password(user.into(), user.into()),
        None => async_nats::ConnectOptions::new(),
    };
    let client = options.connect(url).await.unwrap_or_else(|error| panic!("connect to {url}: {error}"));
    let mut replies = Vec::new();
    for step in steps {
        let reply = api(&client, step.subject, &step.body.to_string()).await;
        replies.push(comparable(reply));
    }
    replies
}

pub(crate) fn nats_server_with(config: &str) -> (NatsServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = nats_server_in(dir.path(), config);
    (server, dir)
}

/// nats-server with JetStream and `config`, both kept in `dir` (so a second start there finds
/// the first one's store).
pub(crate) fn nats_server_in(dir: &std::path::Path, config: &str) -> NatsServer {
    let path = dir.join("server.conf");
    std::fs::write(&path, config).expect("write config");
    let store = dir.join("store");
    NatsServer::with_args(&[
        "-c",
        path.to_str().expect("utf-8 path"),
        "-js",
        "-sd",
        store.to_str().expect("utf-8 path"),
    ])
}

async fn side_by_side(config: &str, user: Option<&str>, steps: &[Step]) {
    let semaq = SemaqServer::with_config(config, &[]);
    let (nats, _dir) = nats_server_with(config);
    let expected = run(&nats.url(), user, steps).await;
    let actual = run(&semaq.url(), user, steps).await;
    for ((step, nats), semaq) in steps.iter().zip(&expected).zip(&actual) {
        let code = nats.pointer("/error/err_code").and_then(Value::as_u64);
        assert_eq!(code, step.err_code, "nats-server 2.9 on {} {}: {nats}", step.subject, step.body);
        assert_eq!(semaq, nats, "{} {}", step.subject, step.body);
    }
}

#[tokio::test]
async fn account_limits_refuse_as_nats_server_does_and_create_nothing() {
    let steps = [
        step("$JS.API.INFO", json!(null), None),
        step("$JS.API.STREAM.CREATE.m", memory("m", None), Some(10113)),
        step("$JS.API.STREAM.CREATE.m", memory("m", Some(600_000)), Some(10122)),
        step("$JS.API.STREAM.CREATE.m", memory("m", Some(400_000)), None),
        step("$JS.API.STREAM.CREATE.m2", with_max_consumers(memory("m2", Some(400_000)), 5), Some(10026)),
        step("$JS.API.STREAM.CREATE.m2", memory("m2", Some(400_000)), None),
        step("$JS.API.STREAM.CREATE.m3", memory("m3", Some(400_000)), Some(10028)),
        step("$JS.API.STREAM.CREATE.f", file("f", 4_000_000), None),
        step("$JS.API.STREAM.CREATE.g", file("g", 1000), Some(10027)),
        step("$JS.API.CONSUMER.CREATE.m", consumer("m", Some(101)), Some(10121)),
        step("$JS.API.CONSUMER.CREATE.m", consumer("m", None), None),
        step("$JS.API.CONSUMER.CREATE.m", consumer("m", None), Some(10026)),
        step("$JS.API.CONSUMER.CREATE.f", consumer("f", Some(100)), None),
        step("$JS.API.INFO", json!(null), None),
    ];
    side_by_side(ACCOUNT_CONFIG, Some("a"), &steps).await;
}

#[tokio::test]
async fn the_servers_own_bounds_limit_reservations_under_an_unlimited_global_account() {
    let steps = [
        step("$JS.API.INFO", json!(null), None),
        step("$JS.API.STREAM.CREATE.m", memory("m", Some(2_000_000)), Some(10028)),
        step("$JS.API.STREAM.CREATE.m", memory("m", Some(600_000)), None),
        step("$JS.API.STREAM.CREATE.m2", memory("m2", Some(600_000)), Some(10028)),
        step("$JS.API.STREAM.CREATE.m3", memory("m3", None), None),
        step("$JS.API.STREAM.CREATE.f", file("f", 20_000_000), Some(10047)),
        step("$JS.API.INFO", json!(null), None),
    ];
    side_by_side(SERVER_BOUNDS_CONFIG, None, &steps).await;
}

/// An account that may keep 2000 bytes in memory (no other limit).
const SMALL_MEMORY_ACCOUNT_CONFIG: &str = r#"
accounts { A { users: [{ user: a, password: a }], jetstream { max_mem: 2000, max_file: 1MB } } }
"#;

/// The server keeps at most 2000 bytes in memory; `$G` is unlimited.
const SMALL_MEMORY_SERVER_CONFIG: &str = "jetstream { max_memory_store: 2000, max_file_store: 1MB }\n";

/// Creates memory stream `m` and publishes `count` messages of 300 bytes to it; returns every
/// PubAck and the stream's final message count.
async fn publish_until_full(url: &str, user: Option<&str>, count: usize) -> (Vec<Value>, Value) {
    let options = match user {
        Some(user) => async_nats::ConnectOptions::with_user_and_password(user.into(), user.into()),
        None => async_nats::ConnectOptions::new(),
    };
    let client = options.connect(url).await.unwrap_or_else(|error| panic!("connect to {url}: {error}"));
    let created = api(&client, "$JS.API.STREAM.CREATE.m", &memory("m", None).to_string()).await;
    assert!(created.get("error").is_none(), "{url}: {created}");
    let mut acks = Vec::new();
    for _ in 0..count {
        let reply = client.request("m", vec![b'x'; 300].into()).await.expect("PubAck");
        acks.push(serde_json::from_slice(&reply.payload).expect("PubAck JSON"));
    }
    let info = api(&client, "$JS.API.STREAM.INFO.m", "").await;
    (acks, info["state"]["messages"].clone())
}

#[tokio::test]
async fn a_publish_over_the_accounts_memory_limit_is_refused_as_nats_server_does_and_not_stored() {
    let semaq = SemaqServer::with_config(SMALL_MEMORY_ACCOUNT_CONFIG, &[]);
    let (nats, _dir) = nats_server_with(SMALL_MEMORY_ACCOUNT_CONFIG);
    let (expected, expected_count) = publish_until_full(&nats.url(), Some("a"), 8).await;
    let (actual, actual_count) = publish_until_full(&semaq.url(), Some("a"), 8).await;
    // 317 bytes each as nats-server's memory store counts them: the seventh would pass 2000.
    assert_eq!(expected_count, 6, "nats-server 2.9: {expected:?}");
    assert_eq!(expected[6]["error"]["err_code"], 10002, "nats-server 2.9: {}", expected[6]);
    assert_eq!(actual, expected);
    assert_eq!(actual_count, expected_count);
}

#[tokio::test]
async fn a_publish_once_the_server_is_over_its_memory_store_is_refused_as_nats_server_does() {
    let semaq = SemaqServer::with_config(SMALL_MEMORY_SERVER_CONFIG, &[]);
    let (nats, _dir) = nats_server_with(SMALL_MEMORY_SERVER_CONFIG);
    let (expected, expected_count) = publish_until_full(&nats.url(), None, 9).await;
    let (actual, actual_count) = publish_until_full(&semaq.url(), None, 9).await;
    // The server's bound is checked before the message counts: the seventh takes it over.
    assert_eq!(expected_count, 7, "nats-server 2.9: {expected:?}");
    assert_eq!(expected[7]["error"]["err_code"], 10023, "nats-server 2.9: {}", expected[7]);
    assert_eq!(actual, expected);
    assert_eq!(actual_count, expected_count);
}

/// Memory streams `m` and `n`, four 300-byte publishes to each: every PubAck.
async fn fill_two_streams(url: &str) -> Vec<Value> {
    let options = async_nats::ConnectOptions::with_user_and_password("a".into(), "a".into());
    let client = options.connect(url).await.unwrap_or_else(|error| panic!("connect to {url}: {error}"));
    let mut acks = Vec::new();
    for name in ["m", "n"] {
        let created = api(&client, &format!("$JS.API.STREAM.CREATE.{name}"), &memory(name, None).to_string()).await;
        assert!(created.get("error").is_none(), "{url}: {created}");
        for _ in 0..4 {
            let reply = client.request(name, vec![b'x'; 300].into()).await.expect("PubAck");
            acks.push(serde_json::from_slice(&reply.payload).expect("PubAck JSON"));
        }
    }
    acks
}

#[tokio::test]
async fn the_accounts_memory_limit_counts_every_stream_as_nats_server_does() {
    let semaq = SemaqServer::with_config(SMALL_MEMORY_ACCOUNT_CONFIG, &[]);
    let (nats, _dir) = nats_server_with(SMALL_MEMORY_ACCOUNT_CONFIG);
    let expected = fill_two_streams(&nats.url()).await;
    let refused = expected.iter().filter(|ack| ack["error"]["err_code"] == 10002).count();
    assert_eq!(refused, 2, "nats-server 2.9: the last two publishes to n pass 2000 bytes: {expected:?}");
    assert_eq!(fill_two_streams(&semaq.url()).await, expected);
}
