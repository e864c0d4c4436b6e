//! Atomic batches on level-4 streams (SPEC §1: each level includes everything below it): a batch
//! is checked whole against the L4 rules before anything is appended, commits whole into the
//! hash chain, and whatever is refused or cut short by a crash leaves a chain that verifies and
//! goes on. Also: a message refused for its L4 context never auto-evolves the schema.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use async_nats::HeaderMap;
use futures::StreamExt;
use semaq_testkit::SemaqServer;
use serde_json::{json, Value};

use crate::exactly_once::{start_on, start_with_env};
use crate::provenance::{verify_through_api, wait_until_signed};

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const EVENT: &str = r#"{"model_id":"llama3-70b","confidence":0.92}"#;

async fn request(client: &async_nats::Client, subject: &str, body: Value) -> Value {
    let reply = client.request(subject.to_string(), body.to_string().into()).await.expect("answer");
    if reply.payload.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(&reply.payload).expect("JSON answer")
}

async fn register(client: &async_nats::Client, subject: &str, schema: Value, schema_type: &str) {
    let body = json!({"subject": subject, "schema": schema.to_string(), "schemaType": schema_type});
    let answer = request(client, "$SEMAQ.API.SCHEMA.REGISTER", body).await;
    assert!(answer["id"].is_u64(), "{answer}");
}

async fn versions(client: &async_nats::Client, subject: &str) -> Value {
    request(client, "$SEMAQ.API.SCHEMA.VERSIONS", json!({"subject": subject})).await
}

/// A file-backed L4 stream on `subjects` bound to schema subject `schema`, plus `metadata`.
async fn create_l4(client: &async_nats::Client, name: &str, subject: &str, schema: &str, metadata: &[(&str, &str)]) {
    let mut config = stream::Config {
        name: name.into(),
        subjects: vec![subject.into()],
        metadata: [("semaq.level", "4"), ("semaq.schema", schema)]
            .iter()
            .chain(metadata)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    config.storage = stream::StorageType::File;
    jetstream::new(client.clone()).create_stream(config).await.expect("L4 stream");
}

async fn create_events_stream(client: &async_nats::Client, name: &str, subject: &str) {
    let schema = json!({"type": "object", "properties": {"model_id": {"type": "string"}}, "required": ["model_id"]});
    register(client, "events", schema, "JSON").await;
    create_l4(client, name, subject, "events", &[]).await;
}

/// The context an L4 publish needs, with `event_time`, plus `extra`; `traceparent: false` leaves it out.
fn l4_headers(event_time: &str, traceparent: bool, extra: &[(&str, &str)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("Semaq-Event-Time", event_time);
    if traceparent {
        headers.insert("traceparent", TRACEPARENT);
    }
    headers.insert("Semaq-Session", "session-7");
    for (name, value) in extra {
        headers.insert(*name, *value);
    }
    headers
}

async fn publish(client: &async_nats::Client, subject: &str, headers: HeaderMap, payload: &str) -> Value {
    let reply = client.request_with_headers(subject.to_string(), headers, payload.to_string().into()).await;
    let reply = reply.expect("pub ack");
    if reply.payload.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(&reply.payload).expect("ack JSON")
}

/// One message of a batch: its subject, event time, whether it has `traceparent`, extra headers.
struct Item<'a> {
    subject: &'a str,
    event_time: &'a str,
    traceparent: bool,
    extra: &'a [(&'a str, &'a str)],
}

fn item<'a>(subject: &'a str, event_time: &'a str) -> Item<'a> {
    Item { subject, event_time, traceparent: true, extra: &[] }
}

/// Publishes `items` as batch `id` (committed on the last); the commit's answer.
async fn publish_batch(client: &async_nats::Client, id: &str, items: &[Item<'_>]) -> Value {
    for (index, message) in items.iter().enumerate() {
        let seq = (index + 1).to_string();
        let mut headers = l4_headers(message.event_time, message.traceparent, message.extra);
        headers.insert("Nats-Batch-Id", id);
        headers.insert("Nats-Batch-Sequence", seq.as_str());
        if index + 1 == items.len() {
            headers.insert("Nats-Batch-Commit", "1");
            return publish(client, message.subject, headers, EVENT).await;
        }
        assert_eq!(publish(client, message.subject, headers, EVENT).await, Value::Null, "staged");
    }
    panic!("an empty batch");
}

async fn state(client: &async_nats::Client, name: &str) -> (u64, u64) {
    let info = request(client, &format!("$JS.API.STREAM.INFO.{name}"), Value::Null).await;
    (info["state"]["messages"].as_u64().expect("messages"), info["state"]["last_seq"].as_u64().expect("last_seq"))
}

/// Every stored message as a consumer receives it: (stream seq, subject, headers).
async fn delivered(client: &async_nats::Client, name: &str) -> Vec<(u64, String, HeaderMap)> {
    let stream = jetstream::new(client.clone()).get_stream(name).await.expect("stream");
    let config = consumer::pull::Config { ack_policy: consumer::AckPolicy::None, ..Default::default() };
    let reader = stream.create_consumer(config).await.expect("reader");
    let mut found = Vec::new();
    let mut batch = reader.fetch().max_messages(100).expires(Duration::from_millis(300)).messages().await.unwrap();
    while let Some(Ok(message)) = batch.next().await {
        let seq = message.info().expect("ack subject").stream_sequence;
        found.push((seq, message.subject.to_string(), message.headers.clone().unwrap_or_default()));
    }
    found
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|value| value.as_str())
}

#[tokio::test]
async fn an_l4_batch_commits_whole_into_the_hash_chain() {
    let server = SemaqServer::start();
    let client = server.client().await;
    create_events_stream(&client, "CHAINED", "chained.>").await;
    assert_eq!(publish(&client, "chained.a", l4_headers("1000", true, &[]), EVENT).await["seq"], 1);
    let items = [item("chained.a", "2000"), item("chained.b", "1500"), item("chained.a", "3000")];
    let commit = publish_batch(&client, "b1", &items).await;
    assert_eq!(commit, json!({"stream": "CHAINED", "seq": 4, "batch": "b1", "count": 3}));

    let messages = delivered(&client, "CHAINED").await;
    let seqs: Vec<u64> = messages.iter().map(|(seq, _, _)| *seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4]);
    for pair in messages.windows(2) {
        let (previous, next) = (&pair[0].2, &pair[1].2);
        assert!(header(next, "Semaq-Hash").is_some(), "every message is chained: {next:?}");
        assert_eq!(header(next, "Semaq-Prev-Hash"), header(previous, "Semaq-Hash"), "each links to the one before");
    }
    assert_eq!(header(&messages[3].2, "Nats-Batch-Commit"), Some("1"));

    let info = request(&client, "$JS.API.STREAM.INFO.CHAINED", Value::Null).await;
    let enforces = info["semaq"]["enforces"].as_array().expect("enforces");
    assert!(enforces.contains(&json!("atomic batches")) && enforces.contains(&json!("hash chain")), "{info}");
    wait_until_signed(&client, "CHAINED").await;
    let summary = verify_through_api(&client, "CHAINED").await.expect("the chain verifies");
    assert_eq!((summary.verified, summary.signed_through, summary.skipped), (4, Some(4), 0));
}

#[tokio::test]
async fn a_batch_an_l4_check_refuses_is_refused_whole_and_the_chain_goes_on() {
    let server = SemaqServer::start();
    let client = server.client().await;
    create_events_stream(&client, "STRICT", "strict.>").await;
    assert_eq!(publish(&client, "strict.a", l4_headers("5000", true, &[]), EVENT).await["seq"], 1);

    // The 3rd message is not after the subject's stored event time...
    let stale = [item("strict.b", "100"), item("strict.b", "200"), item("strict.a", "5000")];
    let refused = publish_batch(&client, "stale", &stale).await;
    assert_eq!(refused["error"]["err_code"], 10442, "{refused}");
    // ...or not after an earlier message of the same batch (each is fine against the stream)...
    let reordered = [item("strict.a", "7000"), item("strict.b", "100"), item("strict.a", "6000")];
    let refused = publish_batch(&client, "reordered", &reordered).await;
    assert_eq!(refused["error"]["err_code"], 10442, "{refused}");
    assert!(refused["error"]["description"].as_str().unwrap().contains("strict.a"), "{refused}");
    // ...or lacks a required context header, or forges a chain header.
    let untraced =
        [item("strict.a", "7000"), item("strict.b", "100"), Item { traceparent: false, ..item("strict.c", "1") }];
    let refused = publish_batch(&client, "untraced", &untraced).await;
    assert_eq!(refused["error"]["err_code"], 10443, "{refused}");
    let forged = [item("strict.a", "7000"), Item { extra: &[("Semaq-Hash", "00")], ..item("strict.b", "100") }];
    assert_eq!(publish_batch(&client, "forged", &forged).await["error"]["err_code"], 10444);
    // Expectations are checked before anything is appended too.
    let elsewhere = [("Nats-Expected-Stream", "ELSEWHERE")];
    let misdirected = [item("strict.a", "7000"), Item { extra: &elsewhere, ..item("strict.c", "1") }];
    assert_eq!(publish_batch(&client, "misdirected", &misdirected).await["error"]["err_code"], 10060);
    let not_last = [("Nats-Expected-Last-Subject-Sequence", "0")];
    let expecting = [item("strict.b", "100"), Item { extra: &not_last, ..item("strict.a", "7000") }];
    let refused = publish_batch(&client, "expecting", &expecting).await;
    assert_eq!(refused["error"]["description"], "wrong last sequence: 1", "{refused}");
    assert_eq!(state(&client, "STRICT").await, (1, 1), "nothing stored, no sequence used");

    // The next publishes chain on from seq 1, a batch on the same subject with increasing times included.
    assert_eq!(publish(&client, "strict.a", l4_headers("6000", true, &[]), EVENT).await["seq"], 2);
    let fine = [item("strict.a", "7000"), item("strict.a", "8000")];
    assert_eq!(publish_batch(&client, "fine", &fine).await["seq"], 4);
    // A retried producer sequence with its old event time is a duplicate, not out of order.
    let producer = [("Semaq-Producer", "agent"), ("Semaq-Producer-Seq", "1")];
    assert_eq!(publish(&client, "strict.a", l4_headers("9000", true, &producer), EVENT).await["seq"], 5);
    let again = publish(&client, "strict.a", l4_headers("9000", true, &producer), EVENT).await;
    assert_eq!((again["seq"].as_u64(), again["duplicate"].as_bool()), (Some(5), Some(true)), "{again}");
    wait_until_signed(&client, "STRICT").await;
    let summary = verify_through_api(&client, "STRICT").await.expect("the chain verifies");
    assert_eq!((summary.verified, summary.skipped), (5, 0));
}

#[tokio::test]
async fn a_batch_the_store_refuses_while_appending_is_removed_and_the_chain_links_over_it() {
    let dir = tempfile::tempdir().unwrap();
    // The store refuses the 3rd message of every batch: two are appended by then.
    let broker = start_with_env(&dir.path().join("store"), &[("SEMAQ_FAILPOINT", "batch-store-error:3")]);
    let client = broker.client().await;
    create_events_stream(&client, "UNDONE", "undone.>").await;
    assert_eq!(publish(&client, "undone.a", l4_headers("1000", true, &[]), EVENT).await["seq"], 1);
    let items = [item("undone.a", "2000"), item("undone.b", "2000"), item("undone.c", "1")];
    let refused = publish_batch(&client, "late", &items).await;
    assert_eq!(refused["error"]["err_code"], 10077, "{refused}");
    assert_eq!(state(&client, "UNDONE").await, (1, 3), "the appended messages were removed");

    // The removed messages' event times are forgotten, and the chain links over their sequences.
    assert_eq!(publish(&client, "undone.a", l4_headers("1500", true, &[]), EVENT).await["seq"], 4);
    let provenance = request(&client, "$SEMAQ.API.STREAM.PROVENANCE.UNDONE", json!({})).await;
    assert_eq!(provenance["head"]["seq"], 4, "{provenance}");
    let messages = delivered(&client, "UNDONE").await;
    assert_eq!(header(&messages[1].2, "Semaq-Prev-Hash"), header(&messages[0].2, "Semaq-Hash"));
    wait_until_signed(&client, "UNDONE").await;
    let summary = verify_through_api(&client, "UNDONE").await.expect("the chain verifies");
    assert_eq!((summary.verified, summary.skipped, summary.signed_through), (2, 2, Some(4)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_in_the_middle_of_an_l4_batch_leaves_a_chain_that_verifies_and_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    // The server exits right after appending the 2nd message of a committed batch.
    let mut broker = start_with_env(&store, &[("SEMAQ_FAILPOINT", "batch-append:2")]);
    let client = broker.client().await;
    create_events_stream(&client, "TORN", "torn.>").await;
    for (n, time) in [(1, "1000"), (2, "2000")] {
        assert_eq!(publish(&client, "torn.a", l4_headers(time, true, &[]), EVENT).await["seq"], n);
    }
    wait_until_signed(&client, "TORN").await;
    let items = [item("torn.a", "3000"), item("torn.b", "3000"), item("torn.a", "4000"), item("torn.a", "5000")];
    let crashed = tokio::time::timeout(Duration::from_secs(1), publish_batch(&client, "cut", &items)).await;
    assert!(crashed.is_err(), "the commit must not be acknowledged");
    assert_eq!(broker.wait_exit(), Some(86), "the failpoint exits the server");
    drop(broker);

    let broker = start_on(&store);
    let client = broker.client().await;
    assert_eq!(state(&client, "TORN").await, (2, 4), "the cut batch's two appended messages are gone");
    let provenance = request(&client, "$SEMAQ.API.STREAM.PROVENANCE.TORN", json!({})).await;
    assert_eq!((provenance["head"]["seq"].as_u64(), provenance["signed_seq"].as_u64()), (Some(2), Some(2)));
    // The cut batch's event times were never accepted; the retried batch chains on.
    let retried = publish_batch(&client, "cut", &items).await;
    assert_eq!((retried["seq"].as_u64(), retried["count"].as_u64()), (Some(8), Some(4)), "{retried}");
    wait_until_signed(&client, "TORN").await;
    let summary = verify_through_api(&client, "TORN").await.expect("the chain verifies across the crash");
    assert_eq!((summary.verified, summary.skipped, summary.signed_through), (6, 2, Some(8)));
}

#[tokio::test]
async fn a_message_refused_for_its_event_time_does_not_evolve_the_schema() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let v1 = json!({"type": "record", "name": "AiEvent", "fields": [{"name": "model", "type": "string"}]});
    register(&client, "ai-event", v1, "AVRO").await;
    create_l4(&client, "EVOLVING", "ev.>", "ai-event", &[("semaq.evolve", "auto")]).await;
    let plain = r#"{"model": "m"}"#;
    let widened = r#"{"model": "m", "score": 0.5}"#;
    assert_eq!(publish(&client, "ev.a", l4_headers("2000", true, &[]), plain).await["seq"], 1);

    let stale = publish(&client, "ev.a", l4_headers("1000", true, &[]), widened).await;
    assert_eq!(stale["error"]["err_code"], 10442, "{stale}");
    let untraced = publish(&client, "ev.a", l4_headers("3000", false, &[]), widened).await;
    assert_eq!(untraced["error"]["err_code"], 10443, "{untraced}");
    assert_eq!(versions(&client, "ai-event").await, json!([1]), "no version was registered");
    // In a batch: the widened 1st message would evolve the schema, the 2nd is out of order.
    let mut first = l4_headers("3000", true, &[("Nats-Batch-Id", "w"), ("Nats-Batch-Sequence", "1")]);
    assert_eq!(publish(&client, "ev.a", first.clone(), widened).await, Value::Null);
    let commit = [("Nats-Batch-Id", "w"), ("Nats-Batch-Sequence", "2"), ("Nats-Batch-Commit", "1")];
    let refused = publish(&client, "ev.a", l4_headers("2500", true, &commit), plain).await;
    assert_eq!(refused["error"]["err_code"], 10442, "{refused}");
    assert_eq!(versions(&client, "ai-event").await, json!([1]), "no version was registered");

    // The same widened message in order evolves the schema.
    first.insert("Nats-Batch-Id", "w2");
    first.insert("Nats-Batch-Commit", "1");
    assert_eq!(publish(&client, "ev.a", first, widened).await["seq"], 2);
    assert_eq!(versions(&client, "ai-event").await, json!([1, 2]));
    assert_eq!(state(&client, "EVOLVING").await, (2, 2));
}
