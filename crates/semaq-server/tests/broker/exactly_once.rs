//! L3 (exactly-once) streams, against the real binary: idempotent producers, atomic batches,
//! durable double acks, and a producer and a consumer that keep going while the server is
//! SIGKILLed again and again.
//!
//! An L3 stream is also L2, so each test registers a JSON Schema (`{"n": integer, ...}`) over
//! `$SEMAQ.API.SCHEMA.REGISTER` and binds the stream to it. Streams are created with raw
//! `$JS.API.STREAM.CREATE` requests so `allow_atomic` and `semaq.*` metadata can be set freely.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::IntoFuture;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer};
use async_nats::HeaderMap;
use futures::StreamExt;
use semaq_testkit::{wait_until_async, SemaqServer};
use serde_json::{json, Value};

const SCHEMA_SUBJECT: &str = "exact-event";
const SCHEMA: &str = r#"{"type": "object", "properties": {"n": {"type": "integer"}, "note": {"type": "string"}},
  "required": ["n"]}"#;
/// How long one publish or ack waits for its answer before it counts as lost.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// Starts a `semaq-server` with JetStream on `store`, a directory the test owns, so it can be
/// restarted on it.
pub(crate) fn start_on(store: &Path) -> SemaqServer {
    start_with_env(store, &[])
}

/// [`start_on`] with extra environment variables (failpoints).
pub(crate) fn start_with_env(store: &Path, env: &[(&str, &str)]) -> SemaqServer {
    let builder = SemaqServer::builder().store(store).no_monitoring().arg("-js");
    env.iter().fold(builder, |builder, (name, value)| builder.env(*name, *value)).start()
}

/// A JSON request/reply; `Value::Null` for an empty answer.
pub(crate) async fn request(client: &async_nats::Client, subject: &str, body: Value) -> Value {
    let reply = client.request(subject.to_string(), body.to_string().into()).await.expect("request answered");
    answer(&reply.payload)
}

fn answer(payload: &[u8]) -> Value {
    if payload.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(payload).expect("JSON answer")
    }
}

pub(crate) async fn register_schema(client: &async_nats::Client) {
    let body = json!({"subject": SCHEMA_SUBJECT, "schema": SCHEMA, "schemaType": "JSON"});
    let registered = request(client, "$SEMAQ.API.SCHEMA.REGISTER", body).await;
    assert!(registered["id"].is_u64(), "{registered}");
}

/// An L3 stream config on `subjects`, with `extra` fields merged in (metadata merged too).
pub(crate) fn l3_config(name: &str, subjects: &[&str], extra: Value) -> Value {
    let mut config = json!({
        "name": name,
        "subjects": subjects,
        "storage": "file",
        "metadata": {"semaq.level": "3", "semaq.schema": SCHEMA_SUBJECT},
    });
    if let Value::Object(fields) = extra {
        for (key, value) in fields {
            match (key.as_str(), value) {
                ("metadata", Value::Object(more)) => {
                    config["metadata"].as_object_mut().expect("metadata").extend(more);
                }
                (_, value) => config[key] = value,
            }
        }
    }
    config
}

/// Creates a stream from a raw config; the API's answer.
pub(crate) async fn create_stream(client: &async_nats::Client, config: Value) -> Value {
    let name = config["name"].as_str().expect("name").to_string();
    request(client, &format!("$JS.API.STREAM.CREATE.{name}"), config).await
}

async fn stream_info(client: &async_nats::Client, name: &str) -> Value {
    request(client, &format!("$JS.API.STREAM.INFO.{name}"), Value::Null).await
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, *value);
    }
    map
}

pub(crate) fn event(n: u64) -> bytes::Bytes {
    json!({"n": n, "note": "exactly once"}).to_string().into()
}

/// Publishes and returns the reply as JSON (`Null` for an empty one).
async fn publish(client: &async_nats::Client, subject: &str, pairs: &[(&str, &str)], payload: bytes::Bytes) -> Value {
    let reply = client.request_with_headers(subject.to_string(), headers(pairs), payload).await.expect("pub ack");
    answer(&reply.payload)
}

/// Publishes message `n` as `producer`'s sequence `seq`.
pub(crate) async fn publish_seq(client: &async_nats::Client, subject: &str, producer: &str, seq: u64, n: u64) -> Value {
    let seq = seq.to_string();
    publish(client, subject, &[("Semaq-Producer", producer), ("Semaq-Producer-Seq", &seq)], event(n)).await
}

/// Every stored message of `stream` in order: (stream seq, payload `n`, headers), read through
/// a fresh ephemeral consumer.
async fn stored(client: &async_nats::Client, stream: &str) -> Vec<(u64, u64, HeaderMap)> {
    let js = jetstream::new(client.clone());
    let stream = js.get_stream(stream).await.expect("stream");
    let config = consumer::pull::Config { ack_policy: consumer::AckPolicy::None, ..Default::default() };
    let reader = stream.create_consumer(config).await.expect("reader");
    let mut found = Vec::new();
    loop {
        let mut batch =
            reader.fetch().max_messages(1000).expires(Duration::from_millis(300)).messages().await.expect("fetch");
        let before = found.len();
        while let Some(Ok(message)) = batch.next().await {
            let info = message.info().expect("ack subject");
            let seq = info.stream_sequence;
            let n = serde_json::from_slice::<Value>(&message.payload).expect("json")["n"].as_u64().expect("n");
            found.push((seq, n, message.headers.clone().unwrap_or_default()));
        }
        if found.len() == before {
            return found;
        }
    }
}

fn numbers(messages: &[(u64, u64, HeaderMap)]) -> Vec<u64> {
    messages.iter().map(|(_, n, _)| *n).collect()
}

async fn server_with_schema() -> (SemaqServer, async_nats::Client) {
    let server = SemaqServer::start();
    let client = server.client().await;
    register_schema(&client).await;
    (server, client)
}

// ---------------------------------------------------------------------------------------------
// Idempotent producers
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn producers_dedup_repeats_and_older_sequences_beyond_the_window_and_report_gaps() {
    let (_server, client) = server_with_schema().await;
    // A 200 ms dedup window: the producer table must not depend on it.
    let created =
        create_stream(&client, l3_config("PRODUCERS", &["prod.>"], json!({"duplicate_window": 200_000_000}))).await;
    assert!(created["error"].is_null(), "{created}");
    assert_eq!(created["config"]["allow_atomic"], true, "L3 implies atomic batches: {created}");

    assert_eq!(publish_seq(&client, "prod.a", "agent-1", 1, 1).await, json!({"stream": "PRODUCERS", "seq": 1}));
    let repeat = publish_seq(&client, "prod.a", "agent-1", 1, 1).await;
    assert_eq!(repeat, json!({"stream": "PRODUCERS", "seq": 1, "duplicate": true}));
    assert_eq!(publish_seq(&client, "prod.a", "agent-1", 2, 2).await["seq"], 2);
    // The scenario: let the 200 ms dedup window pass.
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Past the dedup window: a repeat and an older sequence are still duplicates of what was stored.
    let older = publish_seq(&client, "prod.a", "agent-1", 1, 1).await;
    assert_eq!(older, json!({"stream": "PRODUCERS", "seq": 1, "duplicate": true}));
    let repeat_last = publish_seq(&client, "prod.b", "agent-1", 2, 2).await;
    assert_eq!(repeat_last, json!({"stream": "PRODUCERS", "seq": 2, "duplicate": true}));

    // A gap is stored and reported; other producers have their own sequences.
    assert_eq!(publish_seq(&client, "prod.a", "agent-1", 5, 5).await["seq"], 3);
    assert_eq!(publish_seq(&client, "prod.a", "agent-2", 1, 100).await["seq"], 4);
    let info = stream_info(&client, "PRODUCERS").await;
    let expected_gap = json!({"producer": "agent-1", "expected": 3, "got": 5});
    assert_eq!(info["semaq"]["producers"], json!({"count": 2, "gaps": 1, "last_gap": expected_gap}), "{info}");
    assert_eq!(info["state"]["messages"], 4);

    // Nats-Msg-Id dedup works as before, alone or beside a producer sequence.
    let with_id =
        |seq: &'static str| [("Nats-Msg-Id", "order-7"), ("Semaq-Producer", "agent-3"), ("Semaq-Producer-Seq", seq)];
    assert_eq!(publish(&client, "prod.a", &with_id("1"), event(7)).await["seq"], 5);
    let same_id = publish(&client, "prod.a", &with_id("2"), event(7)).await;
    assert_eq!(same_id, json!({"stream": "PRODUCERS", "seq": 5, "duplicate": true}));
    let plain_id = publish(&client, "prod.a", &[("Nats-Msg-Id", "order-7")], event(7)).await;
    assert_eq!(plain_id["duplicate"], true);
    assert_eq!(numbers(&stored(&client, "PRODUCERS").await), vec![1, 2, 5, 100, 7]);
}

#[tokio::test]
async fn a_duplicate_is_acked_with_its_original_stream_sequence_even_after_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut broker = start_on(&store);
    let client = broker.client().await;
    register_schema(&client).await;
    create_stream(&client, l3_config("ORIGINALS", &["orig.>"], json!({}))).await;
    // Another producer in between, so stream and producer sequences differ.
    for seq in 1..=5 {
        assert_eq!(publish_seq(&client, "orig.a", "p", seq, seq).await["seq"], 2 * seq - 1);
        assert_eq!(publish_seq(&client, "orig.b", "other", seq, seq).await["seq"], 2 * seq);
    }
    let repeat = publish_seq(&client, "orig.a", "p", 2, 2).await;
    assert_eq!(repeat, json!({"stream": "ORIGINALS", "seq": 3, "duplicate": true}));
    broker.kill();
    drop(broker);

    let broker = start_on(&store);
    let client = broker.client().await;
    let repeat = publish_seq(&client, "orig.a", "p", 3, 3).await;
    assert_eq!(repeat, json!({"stream": "ORIGINALS", "seq": 5, "duplicate": true}), "after a restart");
    assert_eq!(publish_seq(&client, "orig.a", "p", 6, 6).await["seq"], 11);
    assert_eq!(numbers(&stored(&client, "ORIGINALS").await), vec![1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6]);
}

#[tokio::test]
async fn producer_headers_are_checked_on_l3_and_ordinary_headers_below() {
    let (_server, client) = server_with_schema().await;
    create_stream(&client, l3_config("CHECKED", &["checked.>"], json!({}))).await;
    let orphan = publish(&client, "checked.a", &[("Semaq-Producer-Seq", "1")], event(1)).await;
    assert_eq!(orphan["error"]["err_code"], 10430, "{orphan}");
    let description = orphan["error"]["description"].as_str().unwrap();
    assert!(description.contains("Semaq-Producer-Seq needs a Semaq-Producer header"), "{description}");
    for bad in ["0", "seven", "-3", "18446744073709551616"] {
        let refused =
            publish(&client, "checked.a", &[("Semaq-Producer", "p"), ("Semaq-Producer-Seq", bad)], event(1)).await;
        assert_eq!(refused["error"]["err_code"], 10430, "{bad}: {refused}");
    }
    let long_id = "p".repeat(300);
    let too_long =
        publish(&client, "checked.a", &[("Semaq-Producer", &long_id), ("Semaq-Producer-Seq", "1")], event(1)).await;
    assert!(too_long["error"]["description"].as_str().unwrap().contains("longer than 256 bytes"), "{too_long}");
    // A producer without a sequence is plain L2 lineage, stored as sent.
    assert_eq!(publish(&client, "checked.a", &[("Semaq-Producer", "lineage")], event(1)).await["seq"], 1);
    let info = stream_info(&client, "CHECKED").await;
    assert_eq!((info["state"]["messages"].as_u64(), info["semaq"]["producers"]["count"].as_u64()), (Some(1), Some(0)));

    // Below L3 the same headers are ordinary: every repeat is stored, no producer table.
    let l2 = json!({"name": "PLAIN", "subjects": ["plain.>"], "metadata": {"semaq.level": "2", "semaq.schema": SCHEMA_SUBJECT}});
    create_stream(&client, l2).await;
    for expected in 1..=2 {
        assert_eq!(publish_seq(&client, "plain.a", "p", 1, 1).await["seq"], expected);
    }
    assert_eq!(publish(&client, "plain.a", &[("Semaq-Producer-Seq", "x")], event(1)).await["seq"], 3);
    assert!(stream_info(&client, "PLAIN").await["semaq"]["producers"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_sequences_survive_sigkill_after_retention_removed_their_messages() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut broker = start_on(&store);
    let client = broker.client().await;
    register_schema(&client).await;
    create_stream(&client, l3_config("KEPT", &["kept.>"], json!({"max_msgs": 5}))).await;
    create_stream(&client, l3_config("WORK", &["work.>"], json!({"retention": "workqueue"}))).await;
    create_stream(&client, l3_config("PURGED", &["purged.>"], json!({}))).await;
    // "early" publishes three, then "late" twenty: max_msgs 5 removes all of early's.
    for seq in 1..=3 {
        assert_eq!(publish_seq(&client, "kept.a", "early", seq, seq).await["seq"], seq);
    }
    for seq in 1..=20 {
        publish_seq(&client, "kept.a", "late", seq, 100 + seq).await;
    }
    assert_eq!(numbers(&stored(&client, "KEPT").await), (116..=120).collect::<Vec<_>>());
    // A workqueue message consumed and acked is deleted at once.
    publish_seq(&client, "work.a", "worker-feed", 1, 1).await;
    let js = jetstream::new(client.clone());
    let work = js.get_stream("WORK").await.unwrap();
    let taker =
        work.create_consumer(consumer::pull::Config { durable_name: Some("taker".into()), ..Default::default() });
    let taker = taker.await.unwrap();
    let mut messages = taker.fetch().max_messages(1).expires(Duration::from_secs(1)).messages().await.unwrap();
    messages.next().await.unwrap().unwrap().double_ack().await.unwrap();
    // A purge removes everything.
    publish_seq(&client, "purged.a", "purger", 1, 1).await;
    let purged = request(&client, "$JS.API.STREAM.PURGE.PURGED", Value::Null).await;
    assert_eq!(purged["purged"], 1, "{purged}");
    let info = stream_info(&client, "WORK").await;
    assert_eq!(info["state"]["messages"], 0, "{info}");
    broker.kill();
    drop(broker);

    let broker = start_on(&store);
    let client = broker.client().await;
    for (subject, producer, seq, expected_seq) in [
        ("kept.a", "early", 3, 3),
        ("kept.a", "late", 20, 23),
        ("kept.a", "late", 7, 10),
        ("work.a", "worker-feed", 1, 1),
        ("purged.a", "purger", 1, 1),
    ] {
        let ack = publish_seq(&client, subject, producer, seq, seq).await;
        assert_eq!(
            (ack["seq"].as_u64(), &ack["duplicate"]),
            (Some(expected_seq), &json!(true)),
            "{producer} {seq}: {ack}"
        );
    }
    assert_eq!(publish_seq(&client, "kept.a", "late", 21, 121).await["seq"], 24);
    assert_eq!(publish_seq(&client, "kept.a", "early", 4, 4).await["seq"], 25);
    let info = stream_info(&client, "KEPT").await;
    assert_eq!(info["semaq"]["producers"], json!({"count": 2, "gaps": 0}), "{info}");
}

#[tokio::test]
async fn producers_per_stream_are_bounded() {
    const PRODUCERS_MAX: usize = 10_000;
    let (_server, client) = server_with_schema().await;
    create_stream(&client, l3_config("CROWD", &["crowd.>"], json!({}))).await;
    let js = jetstream::new(client.clone());
    for window in (0..PRODUCERS_MAX).collect::<Vec<_>>().chunks(500) {
        let mut acks = Vec::with_capacity(window.len());
        for producer in window {
            let id = format!("agent-{producer}");
            let pairs = headers(&[("Semaq-Producer", &id), ("Semaq-Producer-Seq", "1")]);
            acks.push(js.publish_with_headers("crowd.a", pairs, event(*producer as u64)).await.unwrap().into_future());
        }
        for ack in futures::future::join_all(acks).await {
            ack.expect("each producer up to the bound is stored");
        }
    }
    let refused = publish_seq(&client, "crowd.a", "one-too-many", 1, 1).await;
    assert_eq!(refused["error"]["err_code"], 10431, "{refused}");
    assert!(refused["error"]["description"].as_str().unwrap().contains("at most 10000"), "{refused}");
    // Known producers carry on.
    assert_eq!(publish_seq(&client, "crowd.a", "agent-7", 2, 7).await["seq"], PRODUCERS_MAX as u64 + 1);
    assert_eq!(stream_info(&client, "CROWD").await["semaq"]["producers"]["count"], PRODUCERS_MAX);
}

// ---------------------------------------------------------------------------------------------
// Atomic batches
// ---------------------------------------------------------------------------------------------

/// Headers of message `seq` of batch `id`, with `commit` on the last and `extra` pairs.
fn batch_headers<'a>(
    id: &'a str,
    seq: &'a str,
    commit: Option<&'a str>,
    extra: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut pairs = vec![("Nats-Batch-Id", id), ("Nats-Batch-Sequence", seq)];
    pairs.extend(commit.map(|commit| ("Nats-Batch-Commit", commit)));
    pairs.extend_from_slice(extra);
    pairs
}

/// Publishes a batch of `payloads` (committed with `commit` on the last one); the commit's answer.
async fn publish_batch(
    client: &async_nats::Client,
    subject: &str,
    id: &str,
    payloads: &[bytes::Bytes],
    commit: &str,
) -> Value {
    let last = payloads.len();
    for (index, payload) in payloads.iter().enumerate() {
        let seq = (index + 1).to_string();
        let is_last = index + 1 == last;
        let pairs = batch_headers(id, &seq, is_last.then_some(commit), &[]);
        let answer = publish(client, subject, &pairs, payload.clone()).await;
        if is_last {
            return answer;
        }
        assert_eq!(answer, Value::Null, "a staged message gets an empty reply");
    }
    Value::Null
}

#[tokio::test]
async fn atomic_batches_are_stored_whole_with_one_ack() {
    let (_server, client) = server_with_schema().await;
    create_stream(&client, l3_config("BATCHED", &["batched.>"], json!({}))).await;
    let commit = publish_batch(&client, "batched.a", "b1", &[event(1), event(2), event(3)], "1").await;
    assert_eq!(commit, json!({"stream": "BATCHED", "seq": 3, "batch": "b1", "count": 3}));
    // `eob` commits without storing the marker message.
    let eob = publish_batch(&client, "batched.a", "b2", &[event(4), event(5), bytes::Bytes::new()], "eob").await;
    assert_eq!(eob, json!({"stream": "BATCHED", "seq": 5, "batch": "b2", "count": 2}));

    let messages = stored(&client, "BATCHED").await;
    assert_eq!(numbers(&messages), vec![1, 2, 3, 4, 5]);
    let commit_marks: Vec<Option<String>> =
        messages.iter().map(|(_, _, h)| h.get("Nats-Batch-Commit").map(|v| v.as_str().to_string())).collect();
    assert_eq!(commit_marks, vec![None, None, Some("1".into()), None, Some("1".into())]);
    assert_eq!(messages[3].2.get("Nats-Batch-Sequence").map(|v| v.as_str()), Some("1"));

    // The same id can be used again once committed; a batch of one is its own commit.
    let again = publish_batch(&client, "batched.b", "b1", &[event(6)], "1").await;
    assert_eq!(again, json!({"stream": "BATCHED", "seq": 6, "batch": "b1", "count": 1}));
}

#[tokio::test]
async fn atomic_batches_are_refused_whole() {
    let (_server, client) = server_with_schema().await;
    create_stream(&client, l3_config("WHOLE", &["whole.>"], json!({}))).await;
    let not_an_event = bytes::Bytes::from_static(br#"{"n": "two"}"#);
    let schema = publish_batch(&client, "whole.a", "s", &[event(1), not_an_event, event(3)], "1").await;
    assert_eq!(schema["error"]["err_code"], 10400, "{schema}");
    assert!(schema["error"]["description"].as_str().unwrap().contains("$.n"), "{schema}");

    // Producer sequences: one repeating inside the batch, or one already stored.
    assert_eq!(publish_seq(&client, "whole.a", "p", 1, 1).await["seq"], 1);
    let mut producer_repeat = Vec::new();
    for (seq, producer_seq, commit) in [("1", "2", None), ("2", "2", Some("1"))] {
        let pairs = batch_headers("r", seq, commit, &[("Semaq-Producer", "p"), ("Semaq-Producer-Seq", producer_seq)]);
        producer_repeat.push(publish(&client, "whole.a", &pairs, event(2)).await);
    }
    assert_eq!(producer_repeat[1]["error"]["err_code"], 10201, "{producer_repeat:?}");
    assert!(producer_repeat[1]["error"]["description"].as_str().unwrap().contains("repeats within the batch"));
    let pairs = batch_headers("old", "1", Some("1"), &[("Semaq-Producer", "p"), ("Semaq-Producer-Seq", "1")]);
    let already = publish(&client, "whole.a", &pairs, event(1)).await;
    assert!(already["error"]["description"].as_str().unwrap().contains("already stored"), "{already}");

    // Message ids: repeated in the batch, or still in the dedup window.
    assert_eq!(publish(&client, "whole.a", &[("Nats-Msg-Id", "m1")], event(9)).await["seq"], 2);
    let pairs = batch_headers("ids", "1", Some("1"), &[("Nats-Msg-Id", "m1")]);
    assert_eq!(publish(&client, "whole.a", &pairs, event(9)).await["error"]["err_code"], 10201);
    // Headers a batch cannot honour.
    let pairs = batch_headers("hdr", "1", Some("1"), &[("Nats-Expected-Last-Msg-Id", "m1")]);
    let unsupported = publish(&client, "whole.a", &pairs, event(9)).await;
    assert_eq!(
        unsupported["error"]["description"],
        "atomic publish unsupported header used: Nats-Expected-Last-Msg-Id"
    );
    let first = batch_headers("exp", "1", None, &[]);
    assert_eq!(publish(&client, "whole.a", &first, event(1)).await, Value::Null);
    let second = batch_headers("exp", "2", Some("1"), &[("Nats-Expected-Last-Sequence", "2")]);
    assert_eq!(publish(&client, "whole.a", &second, event(2)).await["error"]["err_code"], 10164);
    // A gap, an unknown commit value, a batch that never started.
    assert_eq!(publish(&client, "whole.a", &batch_headers("gap", "1", None, &[]), event(1)).await, Value::Null);
    let gap = publish(&client, "whole.a", &batch_headers("gap", "3", Some("1"), &[]), event(3)).await;
    assert_eq!(
        gap["error"],
        json!({"code": 400, "err_code": 10176, "description": "atomic publish batch is incomplete"})
    );
    let bad_commit = publish(&client, "whole.a", &batch_headers("c", "1", Some("yes"), &[]), event(1)).await;
    assert_eq!(bad_commit["error"]["err_code"], 10200);
    let no_start = publish(&client, "whole.a", &batch_headers("late", "2", Some("1"), &[]), event(2)).await;
    assert_eq!(no_start["error"]["err_code"], 10176);
    let too_large = publish(&client, "whole.a", &batch_headers("big", "1001", Some("1"), &[]), event(2)).await;
    assert_eq!(too_large["error"]["description"], "atomic publish batch is too large: 1000");

    let info = stream_info(&client, "WHOLE").await;
    assert_eq!((info["state"]["messages"].as_u64(), info["state"]["last_seq"].as_u64()), (Some(2), Some(2)), "{info}");
    assert_eq!(numbers(&stored(&client, "WHOLE").await), vec![1, 9]);

    // Below L3 a stream needs allow_atomic, as on nats-server.
    create_stream(&client, json!({"name": "L1", "subjects": ["l1.>"]})).await;
    let disabled = publish(&client, "l1.a", &batch_headers("x", "1", Some("1"), &[]), event(1)).await;
    assert_eq!(disabled["error"], json!({"code": 400, "err_code": 10174, "description": "atomic publish is disabled"}));
    create_stream(&client, json!({"name": "L1A", "subjects": ["l1a.>"], "allow_atomic": true})).await;
    let allowed = publish_batch(&client, "l1a.a", "x", &[event(1), event(2)], "1").await;
    assert_eq!(allowed["count"], 2, "{allowed}");
}

#[tokio::test]
async fn an_abandoned_batch_times_out_and_stores_nothing() {
    let (_server, client) = server_with_schema().await;
    let config = l3_config("IDLE", &["idle.>"], json!({"metadata": {"semaq.batch_timeout": "300ms"}}));
    assert!(create_stream(&client, config).await["error"].is_null());
    let mut advisories = client.subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.*").await.unwrap();
    client.flush().await.unwrap();
    for seq in ["1", "2"] {
        assert_eq!(publish(&client, "idle.a", &batch_headers("slow", seq, None, &[]), event(1)).await, Value::Null);
    }
    // nats-server's advisory, once the batch has been idle past its timeout.
    let advisory = tokio::time::timeout(Duration::from_secs(5), advisories.next()).await.unwrap().unwrap();
    assert_eq!(advisory.subject.as_str(), "$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.IDLE");
    let body: Value = serde_json::from_slice(&advisory.payload).unwrap();
    assert_eq!(body["type"], "io.nats.jetstream.advisory.v1.stream_batch_abandoned", "{body}");
    assert_eq!((&body["stream"], &body["batch"], &body["reason"]), (&json!("IDLE"), &json!("slow"), &json!("timeout")));
    let late = publish(&client, "idle.a", &batch_headers("slow", "3", Some("1"), &[]), event(3)).await;
    assert_eq!(late["error"]["err_code"], 10176, "{late}");
    assert_eq!(stream_info(&client, "IDLE").await["state"]["messages"], 0);
    // A gap abandons a batch too; the late commit above was for no open batch and told nobody.
    assert_eq!(publish(&client, "idle.a", &batch_headers("gap", "1", None, &[]), event(1)).await, Value::Null);
    let gap = publish(&client, "idle.a", &batch_headers("gap", "3", None, &[]), event(1)).await;
    assert_eq!(gap["error"]["err_code"], 10176, "{gap}");
    let advisory = tokio::time::timeout(Duration::from_secs(5), advisories.next()).await.unwrap().unwrap();
    let body: Value = serde_json::from_slice(&advisory.payload).unwrap();
    assert_eq!((&body["batch"], &body["reason"]), (&json!("gap"), &json!("incomplete")), "one advisory per batch");

    let refused =
        create_stream(&client, l3_config("BAD", &["bad.>"], json!({"metadata": {"semaq.batch_timeout": "2h"}}))).await;
    assert!(refused["error"]["description"].as_str().unwrap().contains("semaq.batch_timeout"), "{refused}");
    let never =
        create_stream(&client, l3_config("NOSYNC", &["nosync.>"], json!({"metadata": {"semaq.sync": "never"}}))).await;
    assert!(never["error"]["description"].as_str().unwrap().contains("semaq.sync must be always"), "{never}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_commit_or_between_appends_leaves_no_part_of_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    // Crash point: the server exits after appending the 3rd message of a committed batch.
    let mut broker = start_with_env(&store, &[("SEMAQ_FAILPOINT", "batch-append:3")]);
    let client = broker.client().await;
    register_schema(&client).await;
    create_stream(&client, l3_config("TORN", &["torn.>"], json!({}))).await;
    assert_eq!(publish_seq(&client, "torn.a", "p", 1, 1).await["seq"], 1);
    // A batch left open by a SIGKILL...
    assert_eq!(publish(&client, "torn.a", &batch_headers("open", "1", None, &[]), event(10)).await, Value::Null);
    // ...and one whose commit crashes the server between its 3rd and 4th append.
    for seq in 1..=4 {
        let seq = seq.to_string();
        let producer_seq = (seq.parse::<u64>().unwrap() + 1).to_string();
        let extra = [("Semaq-Producer", "p"), ("Semaq-Producer-Seq", producer_seq.as_str())];
        let pairs = batch_headers("cut", &seq, None, &extra);
        assert_eq!(publish(&client, "torn.a", &pairs, event(20)).await, Value::Null);
    }
    let commit = batch_headers("cut", "5", Some("1"), &[("Semaq-Producer", "p"), ("Semaq-Producer-Seq", "6")]);
    let crashed =
        tokio::time::timeout(ANSWER_TIMEOUT, client.request_with_headers("torn.a", headers(&commit), event(20)));
    assert!(!matches!(crashed.await, Ok(Ok(_))), "the commit must not be acknowledged");
    assert_eq!(broker.wait_exit(), Some(86), "the failpoint exits the server");
    drop(broker);

    let broker = start_on(&store);
    let client = broker.client().await;
    let info = stream_info(&client, "TORN").await;
    assert_eq!(info["state"]["messages"], 1, "the 3 appended messages of the cut batch are gone: {info}");
    assert_eq!(numbers(&stored(&client, "TORN").await), vec![1]);
    // The open batch died with the server; the cut batch's producer sequences were never stored.
    let unknown = publish(&client, "torn.a", &batch_headers("open", "2", Some("1"), &[]), event(11)).await;
    assert_eq!(unknown["error"]["err_code"], 10176, "{unknown}");
    let retried = publish_batch(&client, "torn.a", "cut", &[event(20), event(21)], "1").await;
    assert_eq!(retried["count"], 2, "{retried}");
    assert_eq!(publish_seq(&client, "torn.a", "p", 2, 2).await["duplicate"], Value::Null);
    assert_eq!(numbers(&stored(&client, "TORN").await), vec![1, 20, 21, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_the_store_refuses_leaves_nothing_for_readers_nor_after_a_sigkill_behind_later_messages() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    // The store refuses the 3rd message of every batch: two are appended by then, and removed
    // with no fsync of their own (a rollback marker the next publish's commit carries).
    let mut broker = start_with_env(&store, &[("SEMAQ_FAILPOINT", "batch-store-error:3")]);
    let client = broker.client().await;
    register_schema(&client).await;
    create_stream(&client, l3_config("UNDONE", &["undone.>"], json!({"allow_direct": true}))).await;
    assert_eq!(publish_seq(&client, "undone.a", "p", 1, 1).await["seq"], 1);
    let refused = publish_batch(&client, "undone.a", "r", &[event(20), event(21), event(22)], "1").await;
    assert_eq!(refused["error"]["err_code"], 10077, "{refused}");
    let info = stream_info(&client, "UNDONE").await;
    assert_eq!((info["state"]["messages"].as_u64(), info["state"]["last_seq"].as_u64()), (Some(1), Some(3)), "{info}");
    let got = client.request("$JS.API.DIRECT.GET.UNDONE", json!({"seq": 2}).to_string().into()).await.unwrap();
    assert_eq!(got.status.map(u16::from), Some(404), "direct get answers: no message");
    assert_eq!(publish_seq(&client, "undone.a", "p", 2, 2).await["seq"], 4);
    broker.kill();
    drop(broker);

    // The in-memory removal died with the process: what is on disk says the batch is gone,
    // though it is no longer the stream's tail (start-up only looks there).
    let broker = start_on(&store);
    let client = broker.client().await;
    let info = stream_info(&client, "UNDONE").await;
    assert_eq!((info["state"]["messages"].as_u64(), info["state"]["last_seq"].as_u64()), (Some(2), Some(4)), "{info}");
    assert_eq!(numbers(&stored(&client, "UNDONE").await), vec![1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_batch_whose_last_message_was_consumed_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut broker = start_on(&store);
    let client = broker.client().await;
    register_schema(&client).await;
    create_stream(&client, l3_config("QUEUE", &["queue.>"], json!({"retention": "workqueue"}))).await;
    let ack = publish_batch(&client, "queue.a", "q", &[event(1), event(2), event(3)], "1").await;
    assert_eq!(ack["count"], 3, "{ack}");
    let js = jetstream::new(client.clone());
    let config = consumer::pull::Config { durable_name: Some("taker".into()), ..Default::default() };
    let taker: consumer::PullConsumer = js.get_stream("QUEUE").await.unwrap().create_consumer(config).await.unwrap();
    let mut messages = taker.fetch().max_messages(3).expires(Duration::from_secs(1)).messages().await.unwrap();
    let mut delivered = Vec::new();
    while let Some(Ok(message)) = messages.next().await {
        delivered.push(message);
    }
    // Only the batch's last message (the one with the commit marker) is taken off the queue.
    delivered.last().expect("three delivered").double_ack().await.unwrap();
    assert_eq!(stream_info(&client, "QUEUE").await["state"]["messages"], 2);
    broker.kill();
    drop(broker);

    let broker = start_on(&store);
    let js = jetstream::new(broker.client().await);
    let queue = js.get_stream("QUEUE").await.unwrap();
    for (seq, n) in [(1, 1), (2, 2)] {
        let message = queue.get_raw_message(seq).await.expect("a committed batch is not a torn tail");
        assert_eq!(serde_json::from_slice::<Value>(&message.payload).unwrap()["n"], n);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumers_never_see_part_of_a_batch() {
    const BATCHES: u64 = 30;
    const SIZE: u64 = 20;
    let (_server, client) = server_with_schema().await;
    create_stream(&client, l3_config("VISIBLE", &["visible.>"], json!({}))).await;
    let js = jetstream::new(client.clone());
    let stream = js.get_stream("VISIBLE").await.unwrap();
    let config = consumer::pull::Config { ack_policy: consumer::AckPolicy::None, ..Default::default() };
    let reader: consumer::PullConsumer = stream.create_consumer(config).await.unwrap();

    let publisher = client.clone();
    let publishing = tokio::spawn(async move {
        for batch in 0..BATCHES {
            let payloads: Vec<bytes::Bytes> = (0..SIZE).map(|i| event(batch * SIZE + i)).collect();
            let ack = publish_batch(&publisher, "visible.a", &format!("v{batch}"), &payloads, "1").await;
            assert_eq!(ack["count"], SIZE, "{ack}");
        }
    });
    // A fetch takes everything visible at that moment: always whole batches, in order. Stream
    // info, read at any moment, counts whole batches too.
    let mut received = 0;
    let mut fetches = 0;
    while received < BATCHES * SIZE {
        let visible = stream_info(&client, "VISIBLE").await["state"]["messages"].as_u64().unwrap();
        assert_eq!(visible % SIZE, 0, "stream info shows part of a batch: {visible}");
        let mut batch = reader.fetch().max_messages(1000).messages().await.unwrap();
        let mut got = 0;
        while let Some(Ok(message)) = batch.next().await {
            let n = serde_json::from_slice::<Value>(&message.payload).unwrap()["n"].as_u64().unwrap();
            assert_eq!(n, received, "deliveries out of order");
            received += 1;
            got += 1;
        }
        assert_eq!(got % SIZE, 0, "a fetch returned part of a batch ({got} messages)");
        fetches += 1;
    }
    publishing.await.unwrap();
    eprintln!("{BATCHES} batches of {SIZE} read in {fetches} fetches, each a whole number of batches");
}

// ---------------------------------------------------------------------------------------------
// Durable double acks
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_ack_is_on_disk_before_the_confirmation() {
    confirmed_acks_survive_a_kill(l3_config("ACKED", &["acked.>"], json!({}))).await;
}

/// Below L3 too: a double ack means "on disk" at every level (nats-server confirms at once, so a
/// confirmed ack can come back after a crash there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_ack_on_an_l1_stream_is_on_disk_before_the_confirmation() {
    confirmed_acks_survive_a_kill(json!({"name": "ACKED", "subjects": ["acked.>"], "storage": "file"})).await;
}

/// Ten messages, every other one double-acked, SIGKILL at once: after the restart exactly the
/// five unconfirmed ones come again.
async fn confirmed_acks_survive_a_kill(config: Value) {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut broker = start_on(&store);
    let client = broker.client().await;
    register_schema(&client).await;
    create_stream(&client, config).await;
    for n in 1..=10 {
        publish(&client, "acked.a", &[], event(n)).await;
    }
    let js = jetstream::new(client.clone());
    let stream = js.get_stream("ACKED").await.unwrap();
    let config = consumer::pull::Config {
        durable_name: Some("worker".into()),
        ack_wait: Duration::from_secs(1),
        ..Default::default()
    };
    let worker: consumer::PullConsumer = stream.create_consumer(config).await.unwrap();
    let mut batch = worker.fetch().max_messages(10).expires(Duration::from_secs(1)).messages().await.unwrap();
    let mut delivered = Vec::new();
    while let Some(Ok(message)) = batch.next().await {
        delivered.push(message);
    }
    assert_eq!(delivered.len(), 10);
    let confirmed: Vec<u64> = delivered.iter().step_by(2).map(|m| m.info().unwrap().stream_sequence).collect();
    let acks = delivered.iter().step_by(2).map(|message| message.double_ack());
    for ack in futures::future::join_all(acks).await {
        ack.expect("confirmed");
    }
    // No pause: the confirmation itself must mean "on disk" (the periodic save is 100 ms away).
    broker.kill();
    drop(broker);

    let broker = start_on(&store);
    let client = broker.client().await;
    let js = jetstream::new(client.clone());
    let worker: consumer::PullConsumer = js.get_stream("ACKED").await.unwrap().get_consumer("worker").await.unwrap();
    let mut again = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while again.len() < 5 {
        assert!(Instant::now() < deadline, "the unacked messages did not come back: {again:?}");
        let mut batch = worker.fetch().max_messages(10).expires(Duration::from_millis(500)).messages().await.unwrap();
        while let Some(Ok(message)) = batch.next().await {
            let seq = message.info().unwrap().stream_sequence;
            assert!(!confirmed.contains(&seq), "seq {seq} delivered again after its ack was confirmed");
            again.insert(seq);
            message.double_ack().await.unwrap();
        }
    }
    assert_eq!(again, (1..=10).filter(|seq| seq % 2 == 0).collect());
}

// ---------------------------------------------------------------------------------------------
// The crash test: a producer and a consumer through repeated SIGKILLs
// ---------------------------------------------------------------------------------------------

/// What the producer has done so far (kept across server restarts).
#[derive(Debug, Default)]
struct ProducerLog {
    /// The next producer sequence to publish (the same again after a lost answer).
    next: u64,
    /// Producer sequence → the stream sequence its ack named.
    acked: BTreeMap<u64, u64>,
    /// The highest producer sequence sent so far.
    attempted: u64,
    /// Publishes that repeated a producer sequence already sent.
    retries: u64,
    /// Acks that said `duplicate` (a retry of a message that had been stored).
    duplicates: u64,
}

/// What the consumer has done so far.
#[derive(Debug, Default)]
struct ConsumerLog {
    /// Messages whose ack the server confirmed.
    confirmed: HashSet<u64>,
    /// Acks sent but not confirmed: message → the ack subject, to retry.
    unconfirmed: HashMap<u64, String>,
    /// Messages delivered after their ack was confirmed (must stay empty).
    after_confirm: Vec<u64>,
    deliveries: u64,
    /// Acks sent again because no confirmation came.
    ack_retries: u64,
}

const CRASH_MESSAGES: u64 = 10_000;
const CRASH_STREAM: &str = "EXACT";

/// Publishes `producer`'s sequences one at a time until all are acknowledged or the task is
/// dropped; a lost answer (timeout, disconnect, refusal while restarting) is retried with the
/// same producer sequence.
async fn produce(client: async_nats::Client, log: Arc<Mutex<ProducerLog>>) {
    loop {
        let seq = {
            let mut log = log.lock().unwrap();
            if log.next > CRASH_MESSAGES {
                return;
            }
            log.retries += u64::from(log.attempted >= log.next);
            log.attempted = log.attempted.max(log.next);
            log.next
        };
        let pairs = [("Semaq-Producer", "crash-producer"), ("Semaq-Producer-Seq", &seq.to_string())];
        let sent = client.request_with_headers("exact.events", headers(&pairs), event(seq));
        let ack = match tokio::time::timeout(ANSWER_TIMEOUT, sent).await {
            Ok(Ok(reply)) => answer(&reply.payload),
            _ => {
                // Pacing: a short pause before retrying while the server restarts.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let Some(stream_seq) = ack["seq"].as_u64() else { panic!("publish {seq} refused: {ack}") };
        let mut log = log.lock().unwrap();
        log.duplicates += u64::from(ack["duplicate"] == true);
        log.acked.insert(seq, stream_seq);
        log.next = seq + 1;
    }
}

/// Double-acks through a raw request, so an ack can be retried on its old subject after a restart.
async fn confirm(client: &async_nats::Client, ack_subject: String) -> bool {
    let sent = client.request(ack_subject, "+ACK".into());
    matches!(tokio::time::timeout(ANSWER_TIMEOUT, sent).await, Ok(Ok(_)))
}

/// Retries every ack not confirmed yet (on its old subject: the server applies an ack by stream
/// sequence, and confirms only one that landed).
async fn retry_unconfirmed(client: &async_nats::Client, log: &Mutex<ConsumerLog>) {
    let retries: Vec<(u64, String)> = log.lock().unwrap().unconfirmed.iter().map(|(n, s)| (*n, s.clone())).collect();
    log.lock().unwrap().ack_retries += retries.len() as u64;
    let outcomes = futures::future::join_all(
        retries.into_iter().map(|(n, subject)| async move { (n, confirm(client, subject).await) }),
    );
    for (n, confirmed) in outcomes.await {
        if confirmed {
            let mut log = log.lock().unwrap();
            log.unconfirmed.remove(&n);
            log.confirmed.insert(n);
        }
    }
}

/// Pulls and double-acks until every message is confirmed or the task is dropped; acks that
/// get no confirmation are retried until they are, or until the message comes again.
async fn consume(client: async_nats::Client, log: Arc<Mutex<ConsumerLog>>) {
    let js = jetstream::new(client.clone());
    let worker: consumer::PullConsumer = loop {
        match js.get_consumer_from_stream("worker", CRASH_STREAM).await {
            Ok(worker) => break worker,
            // Pacing: a short pause before retrying while the server restarts.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    loop {
        if log.lock().unwrap().confirmed.len() as u64 == CRASH_MESSAGES {
            return;
        }
        retry_unconfirmed(&client, &log).await;
        let Ok(mut batch) = worker.fetch().max_messages(200).expires(Duration::from_millis(200)).messages().await
        else {
            // Pacing: a short pause before retrying while the server restarts.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let mut delivered = Vec::new();
        while let Some(Ok(message)) = batch.next().await {
            let n = serde_json::from_slice::<Value>(&message.payload).unwrap()["n"].as_u64().unwrap();
            let Some(reply) = message.reply.clone() else { continue };
            let mut log = log.lock().unwrap();
            log.deliveries += 1;
            if log.confirmed.contains(&n) {
                log.after_confirm.push(n);
            } else {
                // Noted before the ack is sent: a kill may cut this task off before the answer.
                log.unconfirmed.insert(n, reply.to_string());
            }
            delivered.push((n, reply.to_string()));
        }
        let acks = delivered.into_iter().map(|(n, subject)| {
            let client = client.clone();
            async move { (n, confirm(&client, subject).await) }
        });
        for (n, confirmed) in futures::future::join_all(acks).await {
            if confirmed {
                let mut log = log.lock().unwrap();
                log.unconfirmed.remove(&n);
                log.confirmed.insert(n);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_exactly_once_through_repeated_sigkills() {
    const KILLS: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut broker = start_on(&store);
    let client = broker.client().await;
    register_schema(&client).await;
    let created = create_stream(&client, l3_config(CRASH_STREAM, &["exact.>"], json!({}))).await;
    assert!(created["error"].is_null(), "{created}");
    let js = jetstream::new(client.clone());
    let config = consumer::pull::Config {
        durable_name: Some("worker".into()),
        ack_wait: Duration::from_secs(2),
        max_ack_pending: 1000,
        ..Default::default()
    };
    js.get_stream(CRASH_STREAM).await.unwrap().create_consumer(config).await.unwrap();
    drop((js, client));

    let producer = Arc::new(Mutex::new(ProducerLog { next: 1, ..Default::default() }));
    let consumer = Arc::new(Mutex::new(ConsumerLog::default()));
    // Kill points spread over the run whatever the machine's speed: when the producer passes a
    // random count, after a random few milliseconds more (mid-publish, mid-fsync, mid-ack,
    // mid-state-save). The consumer trails the producer, so it is cut off at random points too.
    let mut kill_points: Vec<u64> = (0..KILLS).map(|_| rand::random_range(100..CRASH_MESSAGES - 100)).collect();
    kill_points.sort_unstable();
    let started = Instant::now();
    for (cycle, point) in kill_points.iter().map(Some).chain([None]).enumerate() {
        let (publisher, reader) = (broker.client().await, broker.client().await);
        let work = async {
            tokio::join!(produce(publisher, producer.clone()), consume(reader, consumer.clone()));
        };
        let Some(point) = point else {
            let finished = tokio::time::timeout(Duration::from_secs(60), work).await;
            assert!(
                finished.is_ok(),
                "not done a minute after the last kill: {:?}",
                consumer.lock().unwrap().confirmed.len()
            );
            break;
        };
        let reached = async {
            let what = format!("the producer passes {point} before kill {}", cycle + 1);
            wait_until_async(&what, Duration::from_secs(60), || {
                let passed = producer.lock().unwrap().next > *point;
                async move { passed }
            })
            .await;
            // The scenario: kill a random few milliseconds later (mid-publish, mid-fsync, mid-ack).
            tokio::time::sleep(Duration::from_millis(rand::random_range(0..40))).await;
        };
        tokio::select! {
            _ = work => panic!("finished before kill {}", cycle + 1),
            _ = reached => {}
        }
        broker.kill();
        eprintln!(
            "kill {}: {:.1} s, published {}, confirmed {}",
            cycle + 1,
            started.elapsed().as_secs_f64(),
            producer.lock().unwrap().next - 1,
            consumer.lock().unwrap().confirmed.len()
        );
        broker.restart();
    }

    let client = broker.client().await;
    let messages = stored(&client, CRASH_STREAM).await;
    let found = numbers(&messages);
    let first_wrong = found.iter().zip(1..).position(|(n, expected)| *n != expected);
    assert!(
        found.len() as u64 == CRASH_MESSAGES && first_wrong.is_none(),
        "each message once, in producer order: {} stored, first out of place at index {first_wrong:?}: {:?}",
        found.len(),
        first_wrong.map(|i| &found[i.saturating_sub(3)..(i + 3).min(found.len())])
    );
    let info = stream_info(&client, CRASH_STREAM).await;
    assert_eq!(info["semaq"]["producers"], json!({"count": 1, "gaps": 0}), "{info}");
    let producer = producer.lock().unwrap();
    let stream_seqs: Vec<u64> = messages.iter().map(|(seq, _, _)| *seq).collect();
    assert_eq!(producer.acked.values().copied().collect::<Vec<_>>(), stream_seqs, "acks name where each message is");
    let consumer = consumer.lock().unwrap();
    assert!(consumer.after_confirm.is_empty(), "delivered again after a confirmed ack: {:?}", consumer.after_confirm);
    assert_eq!(consumer.confirmed.len() as u64, CRASH_MESSAGES);
    eprintln!(
        "exactly-once crash test: {KILLS} SIGKILLs in {:.1} s; {} publishes retried with the same producer \
         sequence ({} answered as duplicates); {} deliveries of {CRASH_MESSAGES} messages; {} acks retried",
        started.elapsed().as_secs_f64(),
        producer.retries,
        producer.duplicates,
        consumer.deliveries,
        consumer.ack_retries
    );
}
