//! Level-4 streams (SPEC §1, §2, §5) through real clients: event time strictly increasing per
//! subject, required context headers, the hash chain and its signed checkpoints on every read
//! path, the provenance API over NATS and HTTP, append-only refusals, and a restart.
//!
//! Tampering with the stored files is tested with the real `semaq verify` in
//! `crates/semaq/tests/verify_cli.rs`.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use async_nats::HeaderMap;
use base64::Engine;
use futures::StreamExt;
use semaq_store::chain::{self, page, Checkpoint, PublicKey, Verifier};
use semaq_testkit::{wait_until_async, SemaqServer};
use serde_json::{json, Value};

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const EVENT: &str = r#"{"model_id":"llama3-70b","confidence":0.92}"#;
/// Bound on signing the head: longer than a checkpoint interval (100 ms).
const CHECKPOINT_WAIT: Duration = Duration::from_millis(400);

pub(crate) async fn register_schema(client: &async_nats::Client) {
    let schema = json!({"type": "object", "properties": {"model_id": {"type": "string"}}, "required": ["model_id"]});
    let body = json!({"subject": "events", "schema": schema.to_string(), "schemaType": "JSON"});
    let reply = client.request("$SEMAQ.API.SCHEMA.REGISTER", body.to_string().into()).await.unwrap();
    let answer: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert!(answer["id"].is_u64(), "{answer}");
}

pub(crate) fn l4_config(name: &str, subject: &str, extra: &[(&str, &str)]) -> stream::Config {
    let mut metadata = HashMap::from([
        ("semaq.level".to_string(), "4".to_string()),
        ("semaq.schema".to_string(), "events".to_string()),
    ]);
    metadata.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    stream::Config {
        name: name.into(),
        subjects: vec![subject.into()],
        metadata,
        allow_direct: true,
        ..Default::default()
    }
}

/// Headers for an L4 publish; `None` leaves one out.
fn context(event_time: Option<&str>, traceparent: Option<&str>, session: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in [("Semaq-Event-Time", event_time), ("traceparent", traceparent), ("Semaq-Session", session)] {
        if let Some(value) = value {
            headers.insert(name, value);
        }
    }
    headers
}

pub(crate) fn full(event_time: &str) -> HeaderMap {
    context(Some(event_time), Some(TRACEPARENT), Some("session-42"))
}

/// Publishes through a plain request and returns the PubAck JSON.
pub(crate) async fn publish(client: &async_nats::Client, subject: &str, headers: HeaderMap) -> Value {
    let reply = client.request_with_headers(subject.to_string(), headers, EVENT.into()).await.expect("pub ack");
    serde_json::from_slice(&reply.payload).expect("ack json")
}

fn refusal(ack: &Value, err_code: u64) -> String {
    assert_eq!(ack["error"]["err_code"], err_code, "{ack}");
    ack["error"]["description"].as_str().unwrap().to_string()
}

pub(crate) async fn api(client: &async_nats::Client, subject: &str, body: Value) -> Value {
    let reply = client.request(subject.to_string(), body.to_string().into()).await.expect("api answer");
    serde_json::from_slice(&reply.payload).expect("api json")
}

async fn stored_messages(js: &jetstream::Context, name: &str) -> u64 {
    js.get_stream(name).await.unwrap().info().await.unwrap().state.messages
}

fn checkpoint_from_json(item: &Value) -> Checkpoint {
    let signature = base64::engine::general_purpose::STANDARD.decode(item["signature"].as_str().unwrap()).unwrap();
    Checkpoint {
        seq: item["seq"].as_u64().unwrap(),
        head: chain::hash_from_hex(item["head"].as_str().unwrap()).unwrap(),
        signature: signature.try_into().unwrap(),
    }
}

/// `Semaq-Checkpoint: <seq> <head hex> <signature base64>`.
fn checkpoint_from_header(value: &str) -> Checkpoint {
    let parts: Vec<&str> = value.split(' ').collect();
    assert_eq!(parts.len(), 3, "{value}");
    let signature = base64::engine::general_purpose::STANDARD.decode(parts[2]).unwrap();
    Checkpoint {
        seq: parts[0].parse().unwrap(),
        head: chain::hash_from_hex(parts[1]).unwrap(),
        signature: signature.try_into().unwrap(),
    }
}

/// Waits (at most [`CHECKPOINT_WAIT`]) until stream `name`'s head is signed: everything stored
/// so far is covered by a checkpoint.
pub(crate) async fn wait_until_signed(client: &async_nats::Client, name: &str) {
    let subject = format!("$SEMAQ.API.STREAM.PROVENANCE.{name}");
    wait_until_async(&format!("the head of {name} signed"), CHECKPOINT_WAIT, || async {
        let provenance = api(client, &subject, json!({})).await;
        provenance["head"]["seq"].as_u64().is_some_and(|head| provenance["signed_seq"] == head)
    })
    .await;
}

/// Walks the whole chain through `$SEMAQ.API.STREAM.CHAIN` with the served key and checkpoints.
pub(crate) async fn verify_through_api(
    client: &async_nats::Client,
    name: &str,
) -> Result<chain::Summary, chain::Break> {
    let provenance = api(client, &format!("$SEMAQ.API.STREAM.PROVENANCE.{name}"), json!({})).await;
    let key = PublicKey::from_hex(provenance["public_key"].as_str().unwrap()).unwrap();
    let checkpoints: Vec<Checkpoint> =
        provenance["checkpoints"].as_array().unwrap().iter().map(checkpoint_from_json).collect();
    let mut verifier = Verifier::new(name, &key, &checkpoints, 0);
    let mut next = 0;
    loop {
        let body = json!({"from_seq": next, "max_bytes": 2048}).to_string();
        let reply = client.request(format!("$SEMAQ.API.STREAM.CHAIN.{name}"), body.into()).await.unwrap();
        let page = page::decode(&reply.payload).expect("a chain page");
        for message in &page.messages {
            verifier.check(*message)?;
        }
        if page.next_seq > page.last_seq {
            return verifier.finish(page.first_seq);
        }
        next = page.next_seq;
    }
}

#[tokio::test]
async fn event_times_must_increase_per_subject_and_context_headers_are_required() {
    let server = SemaqServer::start();
    let client = server.client().await;
    register_schema(&client).await;
    let js = jetstream::new(client.clone());
    js.create_stream(l4_config("PROV", "prov.>", &[])).await.unwrap();

    assert_eq!(publish(&client, "prov.a", full("1000")).await["seq"], 1);
    let missing = refusal(&publish(&client, "prov.a", context(None, Some(TRACEPARENT), Some("s"))).await, 10441);
    assert!(missing.contains("requires a Semaq-Event-Time"), "{missing}");
    let unreadable = refusal(&publish(&client, "prov.a", full("yesterday")).await, 10441);
    assert!(unreadable.contains("\"yesterday\" is neither RFC 3339 nor integer unix nanoseconds"), "{unreadable}");
    let same = refusal(&publish(&client, "prov.a", full("1000")).await, 10442);
    assert!(
        same.contains(
            "not after the last accepted event time on subject prov.a: 1970-01-01T00:00:00.000001000Z (1000 ns)"
        ),
        "{same}"
    );
    let earlier = refusal(&publish(&client, "prov.a", full("1970-01-01T00:00:00.000000999Z")).await, 10442);
    assert!(earlier.contains("(1000 ns)"), "{earlier}");
    // Each subject has its own order; RFC 3339 and nanoseconds compare as instants.
    assert_eq!(publish(&client, "prov.b", full("5")).await["seq"], 2);
    assert_eq!(publish(&client, "prov.a", full("2024-05-01T12:00:00+02:00")).await["seq"], 3);

    let no_trace =
        refusal(&publish(&client, "prov.a", context(Some("2024-06-01T00:00:00Z"), None, Some("s"))).await, 10443);
    assert!(no_trace.contains("requires the header traceparent (required: traceparent, Semaq-Session"), "{no_trace}");
    let no_session = refusal(
        &publish(&client, "prov.a", context(Some("2024-06-01T00:00:00Z"), Some(TRACEPARENT), None)).await,
        10443,
    );
    assert!(no_session.contains("requires the header Semaq-Session"), "{no_session}");
    let mut forged = full("2024-06-01T00:00:00Z");
    forged.insert("Semaq-Hash", "00");
    assert!(refusal(&publish(&client, "prov.a", forged).await, 10444).contains("Semaq-Hash"));
    assert_eq!(stored_messages(&js, "PROV").await, 3, "nothing refused was stored");

    // A retried publish (same Nats-Msg-Id, same event time) is a duplicate, not out of order.
    let mut retried = full("2024-06-01T00:00:00Z");
    retried.insert("Nats-Msg-Id", "event-1");
    assert_eq!(publish(&client, "prov.a", retried.clone()).await["seq"], 4);
    let again = publish(&client, "prov.a", retried).await;
    assert_eq!((again["seq"].as_u64(), again["duplicate"].as_bool()), (Some(4), Some(true)), "{again}");

    // semaq.require replaces the default list.
    js.create_stream(l4_config("TRACED", "traced.>", &[("semaq.require", "traceparent")])).await.unwrap();
    assert_eq!(publish(&client, "traced.x", context(Some("1"), Some(TRACEPARENT), None)).await["seq"], 1);
    let untraced = refusal(&publish(&client, "traced.x", context(Some("2"), None, Some("s"))).await, 10443);
    assert!(untraced.contains("(required: traceparent;"), "{untraced}");
}

#[tokio::test]
async fn consumers_and_gets_see_the_context_the_chain_and_a_signed_checkpoint() {
    let server = SemaqServer::start();
    let client = server.client().await;
    register_schema(&client).await;
    let js = jetstream::new(client.clone());
    js.create_stream(l4_config("PROV", "prov.>", &[])).await.unwrap();
    for n in 1..=5 {
        let mut headers = full(&format!("2024-05-01T12:00:0{n}Z"));
        headers.insert("tracestate", "vendor=value");
        assert_eq!(publish(&client, "prov.a", headers).await["seq"], n);
    }
    wait_until_signed(&client, "PROV").await;

    let provenance = api(&client, "$SEMAQ.API.STREAM.PROVENANCE.PROV", json!({})).await;
    assert_eq!((provenance["algorithm"].as_str(), provenance["head"]["seq"].as_u64()), (Some("ed25519"), Some(5)));
    let key = PublicKey::from_hex(provenance["public_key"].as_str().unwrap()).unwrap();
    let checkpoints: Vec<Checkpoint> =
        provenance["checkpoints"].as_array().unwrap().iter().map(checkpoint_from_json).collect();
    assert!(!checkpoints.is_empty() && checkpoints.iter().all(|c| c.is_signed_by(&key, "PROV")), "{provenance}");
    assert_eq!(checkpoints.last().map(|c| c.seq), Some(5), "the head is signed within the interval");
    let http = server.http_json("/semaq/streams/PROV/provenance");
    assert_eq!(http["public_key"], provenance["public_key"]);
    assert_eq!(http["checkpoints"], provenance["checkpoints"]);
    let info = api(&client, "$JS.API.STREAM.INFO.PROV", json!({})).await;
    assert_eq!(info["semaq"]["provenance"]["public_key"], provenance["public_key"]);
    assert_eq!(info["semaq"]["provenance"]["required_headers"], json!(["traceparent", "Semaq-Session"]));

    let stream = js.get_stream("PROV").await.unwrap();
    let consumer = stream.create_consumer(consumer::pull::Config::default()).await.unwrap();
    let mut batch = consumer.fetch().max_messages(5).expires(Duration::from_secs(2)).messages().await.unwrap();
    let mut previous_hash = chain::to_hex(&chain::GENESIS);
    let mut seen = 0;
    while let Some(Ok(message)) = batch.next().await {
        seen += 1;
        let headers = message.headers.as_ref().expect("headers delivered");
        let value = |name: &str| headers.get(name).map(|v| v.as_str().to_string());
        assert_eq!(value("traceparent").as_deref(), Some(TRACEPARENT), "propagated unchanged");
        assert_eq!(value("Semaq-Session").as_deref(), Some("session-42"));
        assert_eq!(value("tracestate").as_deref(), Some("vendor=value"));
        assert_eq!(value("Semaq-Prev-Hash"), Some(previous_hash.clone()), "each message links to the one before");
        let hash = value("Semaq-Hash").expect("chain hash");
        let checkpoint = checkpoint_from_header(&value("Semaq-Checkpoint").expect("checkpoint header"));
        assert!(checkpoint.seq >= seen && checkpoint.is_signed_by(&key, "PROV"), "{checkpoint:?}");
        if checkpoint.seq == seen {
            assert_eq!(chain::to_hex(&checkpoint.head), hash);
        }
        previous_hash = hash;
    }
    assert_eq!(seen, 5);

    let got = api(&client, "$JS.API.STREAM.MSG.GET.PROV", json!({"seq": 2})).await;
    let raw = base64::engine::general_purpose::STANDARD.decode(got["message"]["hdrs"].as_str().unwrap()).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    assert!(raw.contains("Semaq-Hash: ") && raw.contains("Semaq-Checkpoint: 5 "), "{raw}");
    let direct = client.request("$JS.API.DIRECT.GET.PROV", json!({"seq": 3}).to_string().into()).await.unwrap();
    let direct_headers = direct.headers.expect("direct get headers");
    assert!(direct_headers.get("Semaq-Hash").is_some() && direct_headers.get("Semaq-Checkpoint").is_some());

    let summary = verify_through_api(&client, "PROV").await.expect("an untouched chain verifies");
    assert_eq!((summary.verified, summary.signed_through), (5, Some(5)));
}

#[tokio::test]
async fn checkpoints_come_every_thousand_messages_never_per_message() {
    let server = SemaqServer::start();
    let client = server.client().await;
    register_schema(&client).await;
    let js = jetstream::new(client.clone());
    js.create_stream(l4_config("MANY", "many", &[])).await.unwrap();
    let total = 2_500u64;
    let mut acks = Vec::new();
    for n in 1..=total {
        acks.push(js.publish_with_headers("many", full(&n.to_string()), EVENT.into()).await.unwrap());
    }
    for ack in acks {
        ack.await.expect("acked");
    }
    wait_until_signed(&client, "MANY").await;
    let provenance = api(&client, "$SEMAQ.API.STREAM.PROVENANCE.MANY", json!({})).await;
    let seqs: Vec<u64> =
        provenance["checkpoints"].as_array().unwrap().iter().map(|c| c["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs.last(), Some(&total), "{seqs:?}");
    let gaps_ok = std::iter::once(0)
        .chain(seqs.iter().copied())
        .collect::<Vec<_>>()
        .windows(2)
        .all(|w| w[1] > w[0] && w[1] - w[0] <= 1000);
    assert!(gaps_ok, "at most 1,000 messages between checkpoints: {seqs:?}");
    assert!((seqs.len() as u64) < total / 10, "signing is batched, not per message: {} checkpoints", seqs.len());
    let summary = verify_through_api(&client, "MANY").await.expect("verifies");
    assert_eq!((summary.verified, summary.checkpoints_matched), (total, seqs.len() as u64));
}

#[tokio::test]
async fn level_4_streams_are_append_only() {
    let server = SemaqServer::start();
    let client = server.client().await;
    register_schema(&client).await;
    let js = jetstream::new(client.clone());
    js.create_stream(l4_config("PROV", "prov.>", &[])).await.unwrap();
    for n in 1..=4 {
        publish(&client, &format!("prov.{}", n % 2), full(&n.to_string())).await;
    }
    let deleted = api(&client, "$JS.API.STREAM.MSG.DELETE.PROV", json!({"seq": 2})).await;
    assert!(refusal(&deleted, 10445).contains("deleting a message is not allowed on a level 4 stream"), "{deleted}");
    let filtered = api(&client, "$JS.API.STREAM.PURGE.PROV", json!({"filter": "prov.1"})).await;
    assert!(refusal(&filtered, 10445).contains("a purge with a subject filter"), "{filtered}");
    assert_eq!(stored_messages(&js, "PROV").await, 4);
    // Removing from the head stays allowed; the chain goes on after it.
    let purged = api(&client, "$JS.API.STREAM.PURGE.PROV", json!({"seq": 3})).await;
    assert_eq!(purged["purged"], 2, "{purged}");
    assert_eq!(publish(&client, "prov.1", full("10")).await["seq"], 5);
    wait_until_signed(&client, "PROV").await;
    let summary = verify_through_api(&client, "PROV").await.expect("verifies from the first stored message");
    // The walk starts from the hash message 3 records, unless a checkpoint signed message 2 before
    // the purge (a slow machine can take one between the publishes): then it links to that.
    let provenance = api(&client, "$SEMAQ.API.STREAM.PROVENANCE.PROV", json!({})).await;
    let signed_before = provenance["checkpoints"].as_array().unwrap().iter().any(|c| c["seq"] == 2);
    assert_eq!((summary.range, summary.anchored), (Some((3, 5)), !signed_before));

    let refused = |config: stream::Config| {
        let js = js.clone();
        async move { js.create_stream(config).await.expect_err("refused").to_string() }
    };
    let per_subject = stream::Config { max_messages_per_subject: 5, ..l4_config("A", "a", &[]) };
    assert!(refused(per_subject).await.contains("max_msgs_per_subject would remove messages from the middle"));
    let workqueue = stream::Config { retention: stream::RetentionPolicy::WorkQueue, ..l4_config("B", "b", &[]) };
    assert!(refused(workqueue).await.contains("retention other than limits"));
    let require_below_4 = stream::Config {
        metadata: HashMap::from([("semaq.require".to_string(), "traceparent".to_string())]),
        ..l4_config("C", "c", &[])
    };
    assert!(refused(require_below_4).await.contains("semaq.require needs semaq.level 4"));
    let mut downgrade = l4_config("PROV", "prov.>", &[]);
    downgrade.metadata.insert("semaq.level".into(), "2".into());
    let answer = api(&client, "$JS.API.STREAM.UPDATE.PROV", serde_json::to_value(&downgrade).unwrap()).await;
    assert!(answer["error"]["description"].as_str().unwrap().contains("cannot change to or from 4"), "{answer}");
    let l1 = api(&client, "$SEMAQ.API.STREAM.PROVENANCE.NOPE", json!({})).await;
    assert_eq!(l1["error"]["code"], 404, "{l1}");
}

#[tokio::test]
async fn memory_streams_chain_and_sign_with_a_key_held_in_memory() {
    let server = SemaqServer::start();
    let client = server.client().await;
    register_schema(&client).await;
    let js = jetstream::new(client.clone());
    let config = stream::Config { storage: stream::StorageType::Memory, ..l4_config("MEM", "mem", &[]) };
    js.create_stream(config).await.unwrap();
    for n in 1..=3 {
        assert_eq!(publish(&client, "mem", full(&n.to_string())).await["seq"], n);
    }
    wait_until_signed(&client, "MEM").await;
    let summary = verify_through_api(&client, "MEM").await.expect("verifies");
    assert_eq!((summary.verified, summary.signed_through), (3, Some(3)));
}

#[tokio::test]
async fn the_chain_and_each_subjects_last_event_time_survive_a_restart() {
    let mut broker = SemaqServer::builder().arg("-js").start();
    let client = broker.client().await;
    register_schema(&client).await;
    let js = jetstream::new(client.clone());
    js.create_stream(l4_config("PROV", "prov.>", &[])).await.unwrap();
    let key = api(&client, "$SEMAQ.API.STREAM.PROVENANCE.PROV", json!({})).await["public_key"].clone();
    assert_eq!(publish(&client, "prov.a", full("2024-05-01T12:00:00Z")).await["seq"], 1);
    assert_eq!(publish(&client, "prov.b", full("2024-05-01T13:00:00Z")).await["seq"], 2);
    drop(client);
    assert_eq!(broker.terminate(), Some(0), "clean exit after SIGTERM");

    broker.restart();
    let client = broker.client().await;
    let provenance = api(&client, "$SEMAQ.API.STREAM.PROVENANCE.PROV", json!({})).await;
    assert_eq!(provenance["public_key"], key, "the key is kept in the stream's directory");
    assert_eq!(provenance["signed_seq"], 2, "stopping signed the head");
    let late = refusal(&publish(&client, "prov.a", full("2024-05-01T11:59:59Z")).await, 10442);
    assert!(
        late.contains("prov.a: 2024-05-01T12:00:00.000000000Z"),
        "the last time was read back from the store: {late}"
    );
    assert_eq!(publish(&client, "prov.a", full("2024-05-01T12:00:01Z")).await["seq"], 3);
    wait_until_signed(&client, "PROV").await;
    let summary = verify_through_api(&client, "PROV").await.expect("the chain goes on across the restart");
    assert_eq!((summary.verified, summary.signed_through), (3, Some(3)));
}
