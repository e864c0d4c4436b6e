//! JetStream tiered limits from account JWTs (`nats.limits.tiered_limits`, as modern nsc writes
//! them), side by side with nats-server 2.9: the same operator config and JWTs to both, the same
//! requests, the JSON compared. One server has only R1 streams, so the `R1` tier's limits are
//! held exactly as plain limits are, with nats-server's codes (more replicas are refused before
//! any tier is looked at, 10074); an account whose tiers lack `R1` has JetStream but may create
//! no stream (10120) and gets none of its old ones back at a restart; account info reports each
//! tier.
//!
//! Streams name `num_replicas: 1` in the side-by-side steps: nats-server 2.9 picks the tier
//! before it defaults replicas to 1, so a stream without it is in tier `R0` there (10120);
//! nats-server 2.10 and later, like SemaQ, count it as R1.

use std::path::Path;

use async_nats::Client;
use nkeys::KeyPair;
use semaq_testkit::SemaqServer;
use serde_json::{json, Value};

use crate::account_limits::{self, consumer, nats_server_in, nats_server_with, step, Step};
use crate::auth_nkeys::{creds, mint, operator_jwt_naming, preload_line, unlimited_user};
use crate::jetstream_api::api;

/// Every R1 limit set (as `ACCOUNT_CONFIG` of `account_limits` sets plain ones), and an R3 tier
/// a single server never uses.
fn r1_and_r3_tiers() -> Value {
    json!({
        "R1": {
            "mem_storage": 1_048_576, "disk_storage": 10_485_760, "streams": 3, "consumer": 1,
            "max_ack_pending": 100, "mem_max_stream_bytes": 500_000, "disk_max_stream_bytes": 4_194_304,
            "max_bytes_required": true,
        },
        "R3": { "mem_storage": 3000, "disk_storage": 30_000, "streams": 7, "consumer": 9 },
    })
}

/// An operator trusting a system account and one application account with `tiers`.
struct Operator {
    operator: KeyPair,
    system: KeyPair,
    account: KeyPair,
    config: String,
}

impl Operator {
    fn with_tiers(tiers: Value) -> Self {
        Self::with_limits(json!({ "tiered_limits": tiers }))
    }

    /// `limits` are the account JWT's `nats.limits` (besides the unlimited non-JetStream ones).
    fn with_limits(limits: Value) -> Self {
        let (operator, system, account) = (KeyPair::new_operator(), KeyPair::new_account(), KeyPair::new_account());
        let mut made = Self { operator, system, account, config: String::new() };
        made.config = made.config_with(limits);
        made
    }

    /// The config of the same operator and accounts, the application account's JWT now with `limits`.
    fn config_with(&self, limits: Value) -> String {
        let operator_jwt = operator_jwt_naming(&self.operator, &self.system);
        let preload = |key: &KeyPair, limits: Value| preload_line(&self.operator, key, limits);
        format!(
            "operator: {operator_jwt}\nsystem_account: {}\nresolver: MEMORY\nresolver_preload {{\n{}{}}}\n",
            self.system.public_key(),
            preload(&self.system, json!({})),
            preload(&self.account, limits),
        )
    }

    async fn user(&self, dir: &Path, url: &str) -> Client {
        let user = KeyPair::new_user();
        let jwt = mint(&self.account, &user.public_key(), unlimited_user(json!({})), json!({}));
        let seed = user.seed().expect("a new key has a seed");
        let options = async_nats::ConnectOptions::with_credentials_file(creds(dir, "user", &jwt, &seed))
            .await
            .expect("creds file");
        options.connect(url).await.unwrap_or_else(|error| panic!("user connects to {url}: {error}"))
    }
}

/// A memory stream in the R1 tier.
fn memory(name: &str, max_bytes: Option<i64>) -> Value {
    replicas(account_limits::memory(name, max_bytes), 1)
}

fn replicas(mut config: Value, replicas: u64) -> Value {
    config["num_replicas"] = json!(replicas);
    config
}

/// A file stream in the R1 tier by its `num_replicas` (nats-server 2.9 puts a stream without
/// one in no tier, so every stream here names it).
fn file(name: &str, max_bytes: i64) -> Value {
    replicas(account_limits::file(name, max_bytes), 1)
}

/// What two servers must agree on: errors whole, account info whole (less the 2.10 fields
/// nats-server 2.9 lacks, in its tiers too), of other replies their type.
fn comparable(mut reply: Value) -> Value {
    if reply.get("error").is_some() {
        return reply;
    }
    if reply["type"] != "io.nats.jetstream.api.v1.account_info_response" {
        return json!({ "type": reply["type"] });
    }
    let without_reserved = |object: &mut Value| {
        if let Some(object) = object.as_object_mut() {
            object.remove("reserved_memory");
            object.remove("reserved_storage");
        }
    };
    without_reserved(&mut reply);
    if let Some(tiers) = reply.get_mut("tiers").and_then(Value::as_object_mut) {
        tiers.values_mut().for_each(without_reserved);
    }
    reply
}

async fn run(operator: &Operator, dir: &Path, url: &str, steps: &[Step]) -> Vec<Value> {
    let client = operator.user(dir, url).await;
    let mut replies = Vec::new();
    for step in steps {
        replies.push(comparable(api(&client, step.subject, &step.body.to_string()).await));
    }
    replies
}

async fn side_by_side(operator: Operator, steps: &[Step]) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("temp dir");
    let semaq = SemaqServer::with_config(&operator.config, &[]);
    let (nats, _nats_dir) = nats_server_with(&operator.config);
    let expected = run(&operator, dir.path(), &nats.url(), steps).await;
    let actual = run(&operator, dir.path(), &semaq.url(), steps).await;
    for ((step, nats), semaq) in steps.iter().zip(&expected).zip(&actual) {
        let code = nats.pointer("/error/err_code").and_then(Value::as_u64);
        assert_eq!(code, step.err_code, "nats-server 2.9 on {} {}: {nats}", step.subject, step.body);
        assert_eq!(semaq, nats, "{} {}", step.subject, step.body);
    }
    actual
}

#[tokio::test]
async fn the_r1_tier_limits_a_tiered_account_as_plain_limits_do_in_nats_server() {
    let steps = [
        step("$JS.API.INFO", json!(null), None),
        step("$JS.API.STREAM.CREATE.r3", replicas(memory("r3", Some(100)), 3), Some(10074)),
        step("$JS.API.STREAM.CREATE.m", memory("m", None), Some(10113)),
        step("$JS.API.STREAM.CREATE.m", memory("m", Some(600_000)), Some(10122)),
        step("$JS.API.STREAM.CREATE.m", memory("m", Some(400_000)), None),
        step("$JS.API.STREAM.CREATE.m2", memory("m2", Some(400_000)), None),
        step("$JS.API.STREAM.CREATE.m3", memory("m3", Some(400_000)), Some(10028)),
        step("$JS.API.STREAM.CREATE.f", file("f", 4_000_000), None),
        step("$JS.API.STREAM.CREATE.g", file("g", 1000), Some(10027)),
        step("$JS.API.CONSUMER.CREATE.m", consumer("m", Some(101)), Some(10121)),
        step("$JS.API.CONSUMER.CREATE.m", consumer("m", None), None),
        step("$JS.API.CONSUMER.CREATE.m", consumer("m", None), Some(10026)),
        step("$JS.API.INFO", json!(null), None),
    ];
    let replies = side_by_side(Operator::with_tiers(r1_and_r3_tiers()), &steps).await;
    let info = &replies[replies.len() - 1];
    assert_eq!(info["streams"], 3, "top-level figures are the account's totals: {info}");
    assert_eq!(info["limits"]["max_streams"], 0, "top-level limits are zero for a tiered account: {info}");
    assert_eq!(info["tiers"]["R1"]["streams"], 3, "{info}");
    assert_eq!(info["tiers"]["R1"]["consumers"], 1, "{info}");
    assert_eq!(info["tiers"]["R1"]["limits"]["max_streams"], 3, "{info}");
    assert_eq!(info["tiers"]["R3"]["streams"], 0, "{info}");
    assert_eq!(info["tiers"]["R3"]["limits"]["max_consumers"], 9, "{info}");
}

#[tokio::test]
async fn a_tiered_account_without_an_r1_tier_has_jetstream_but_no_stream_as_in_nats_server() {
    let steps = [
        step("$JS.API.INFO", json!(null), None),
        step("$JS.API.STREAM.CREATE.m", memory("m", Some(1000)), Some(10120)),
        step("$JS.API.STREAM.CREATE.f", file("f", 1000), Some(10120)),
        step("$JS.API.INFO", json!(null), None),
    ];
    let tiers = json!({ "R3": { "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1 } });
    let replies = side_by_side(Operator::with_tiers(tiers), &steps).await;
    assert_eq!(replies[3]["streams"], 0, "nothing was created: {}", replies[3]);
    assert_eq!(replies[3]["tiers"]["R3"]["limits"]["max_streams"], -1, "{}", replies[3]);
}

/// Publishes 100-byte messages to stream `s` until one is refused (at most `PUBLISHES_MAX`),
/// and returns the refusal.
async fn publish_until_refused(client: &Client) -> Value {
    const PUBLISHES_MAX: usize = 100;
    for _ in 0..PUBLISHES_MAX {
        let ack = api(client, "s", &"x".repeat(100)).await;
        if ack.get("error").is_some() {
            return ack;
        }
    }
    panic!("{PUBLISHES_MAX} publishes of 100 bytes were all stored");
}

#[tokio::test]
async fn publishes_past_the_r1_tiers_storage_are_refused_as_in_nats_server() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tiers = json!({ "R1": { "mem_storage": 2000, "disk_storage": 2000, "streams": -1, "consumer": -1 } });
    let operator = Operator::with_tiers(tiers);
    let semaq = SemaqServer::with_config(&operator.config, &[]);
    let (nats, _nats_dir) = nats_server_with(&operator.config);
    let mut refusals = Vec::new();
    for url in [nats.url(), semaq.url()] {
        let client = operator.user(dir.path(), &url).await;
        let created = api(&client, "$JS.API.STREAM.CREATE.s", &memory("s", None).to_string()).await;
        assert!(created.get("error").is_none(), "{url}: {created}");
        refusals.push(publish_until_refused(&client).await);
    }
    assert_eq!(refusals[0]["error"]["err_code"], 10002, "nats-server 2.9: {}", refusals[0]);
    assert_eq!(refusals[1], refusals[0]);
}

#[tokio::test]
async fn a_stream_without_num_replicas_is_in_the_r1_tier_and_more_replicas_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let operator = Operator::with_tiers(r1_and_r3_tiers());
    let semaq = SemaqServer::with_config(&operator.config, &[]);
    let client = operator.user(dir.path(), &semaq.url()).await;
    let mut unset = memory("m", Some(1000));
    unset.as_object_mut().expect("a stream config is an object").remove("num_replicas");
    let created = api(&client, "$JS.API.STREAM.CREATE.m", &unset.to_string()).await;
    assert!(created.get("error").is_none(), "{created}");
    let three = replicas(memory("r3", Some(1000)), 3);
    let refused = api(&client, "$JS.API.STREAM.CREATE.r3", &three.to_string()).await;
    assert_eq!(refused["error"]["err_code"], 10074, "{refused}");
    let info = api(&client, "$JS.API.INFO", "").await;
    assert_eq!((&info["tiers"]["R1"]["streams"], &info["tiers"]["R3"]["streams"]), (&json!(1), &json!(0)), "{info}");
    let reserved_memory = |tier: &Value| tier["reserved_memory"].clone();
    assert_eq!(reserved_memory(&info), 1000, "the stream's max_bytes is reserved: {info}");
    assert_eq!(reserved_memory(&info["tiers"]["R1"]), 1000, "{info}");
    assert_eq!(reserved_memory(&info["tiers"]["R3"]), 0, "{info}");
}

#[tokio::test]
async fn plain_jwt_limits_report_zero_stream_bytes_as_unlimited_as_nats_server_does() {
    let plain = json!({
        "mem_storage": -1, "disk_storage": -1, "streams": 2, "consumer": -1, "max_ack_pending": 0,
        "mem_max_stream_bytes": 0, "disk_max_stream_bytes": 0,
    });
    let steps = [step("$JS.API.INFO", json!(null), None)];
    let replies = side_by_side(Operator::with_limits(plain), &steps).await;
    assert_eq!(replies[0]["limits"]["memory_max_stream_bytes"], -1, "{}", replies[0]);
    assert!(replies[0].get("tiers").is_none(), "plain limits have no tiers: {}", replies[0]);
}

/// What a publish to file stream `s`, created under an `R1` tier, gets once the server restarts
/// with the account's tiers lacking `R1`, and what `STREAM.INFO` says of `s`.
async fn publish_after_r1_is_gone(
    operator: &Operator,
    dir: &Path,
    start: impl Fn(&str) -> (String, Box<dyn std::any::Any>),
) -> (String, Value) {
    let (url, server) = start(&operator.config);
    let client = operator.user(dir, &url).await;
    let created = api(&client, "$JS.API.STREAM.CREATE.s", &file("s", 10_000).to_string()).await;
    assert!(created.get("error").is_none(), "{url}: {created}");
    drop((client, server));
    let without_r1 =
        json!({ "tiered_limits": { "R3": { "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1 } } });
    let (url, _server) = start(&operator.config_with(without_r1));
    let client = operator.user(dir, &url).await;
    let published = match client.request("s", "x".into()).await {
        Ok(reply) => format!("answered {}", String::from_utf8_lossy(&reply.payload)),
        Err(error) => format!("{:?}", error.kind()),
    };
    (published, api(&client, "$JS.API.STREAM.INFO.s", "").await)
}

#[tokio::test]
async fn a_stream_of_an_account_whose_tiers_lost_r1_is_not_restored_as_in_nats_server() {
    let dir = tempfile::tempdir().expect("temp dir");
    let operator =
        Operator::with_tiers(json!({ "R1": { "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1 } }));
    let nats_dir = tempfile::tempdir().expect("temp dir");
    let theirs = publish_after_r1_is_gone(&operator, dir.path(), |config| {
        let server = nats_server_in(nats_dir.path(), config);
        (server.url(), Box::new(server))
    })
    .await;
    let store = tempfile::tempdir().expect("temp dir");
    let ours = publish_after_r1_is_gone(&operator, dir.path(), |config| {
        let server = SemaqServer::builder().store(store.path()).config(config).start();
        (server.url(), Box::new(server))
    })
    .await;
    assert_eq!(theirs.0, "NoResponders", "nats-server 2.9");
    assert_eq!(theirs.1["error"]["err_code"], 10059, "nats-server 2.9: {}", theirs.1);
    assert_eq!(ours, theirs);
}

/// nats-server 2.9's JWT library drops plain JetStream limits beside tiers as it decodes the
/// account: only the tiers hold, whatever storage the plain ones give.
#[tokio::test]
async fn plain_limits_beside_tiers_are_ignored_as_in_nats_server() {
    let steps = [
        step("$JS.API.STREAM.CREATE.m", memory("m", None), None),
        step("$JS.API.STREAM.CREATE.m2", memory("m2", None), Some(10027)),
        step("$JS.API.INFO", json!(null), None),
    ];
    let limits = json!({
        "mem_storage": 1_048_576, "disk_storage": 1_048_576, "streams": -1, "consumer": -1,
        "tiered_limits": { "R1": { "mem_storage": -1, "disk_storage": -1, "streams": 1, "consumer": -1 } },
    });
    let replies = side_by_side(Operator::with_limits(limits), &steps).await;
    assert_eq!(replies[2]["tiers"]["R1"]["limits"]["max_streams"], 1, "{}", replies[2]);
}
