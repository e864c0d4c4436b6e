//! Server-side content routing (SPEC §3): filtered core subscriptions through
//! `$SEMAQ.API.SUB.CREATE` / `DELETE`, and JetStream consumers with `semaq.filter` metadata.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, push, AckPolicy, PullConsumer, PushConsumer};
use async_nats::jetstream::{self, stream};
use futures::StreamExt;
use semaq_testkit::{sync, wait_until_async, SemaqServer};
use serde_json::{json, Value};

use crate::jetstream_api::{api, context, publish, stream_config, WAIT};

const CREATE: &str = "$SEMAQ.API.SUB.CREATE";
const DELETE: &str = "$SEMAQ.API.SUB.DELETE";

fn event(model: &str, confidence: f64, tokens: u64) -> String {
    json!({ "model_id": model, "confidence": confidence, "input_tokens": tokens, "request_id": "r-1" }).to_string()
}

/// Subscribes to a fresh inbox and creates a filtered subscription delivering to it.
async fn filtered(
    client: &async_nats::Client,
    subject: &str,
    filter: &str,
    queue: Option<&str>,
) -> (Value, async_nats::Subscriber) {
    let inbox = client.new_inbox();
    let subscriber = client.subscribe(inbox.clone()).await.expect("subscribe");
    let mut body = json!({ "subject": subject, "filter": filter, "deliver": inbox });
    if let Some(queue) = queue {
        body["queue"] = json!(queue);
    }
    let reply = api(client, CREATE, &body.to_string()).await;
    assert!(reply.get("error").is_none(), "create: {reply}");
    (reply, subscriber)
}

/// Everything that arrives within `quiet` of the previous message.
async fn drain(subscriber: &mut async_nats::Subscriber, quiet: Duration) -> Vec<async_nats::Message> {
    let mut received = Vec::new();
    while let Ok(Some(message)) = tokio::time::timeout(quiet, subscriber.next()).await {
        received.push(message);
    }
    received
}

fn confidences(messages: &[async_nats::Message]) -> Vec<f64> {
    messages
        .iter()
        .map(|m| serde_json::from_slice::<Value>(&m.payload).expect("json")["confidence"].as_f64().expect("number"))
        .collect()
}

fn filter_counts(server: &SemaqServer) -> Value {
    server.http_json("/varz")["semaq_filters"].clone()
}

#[tokio::test]
async fn a_filtered_subscription_receives_only_matching_messages_with_their_subject() {
    let server = SemaqServer::start();
    let subscriber_client = server.client().await;
    let (reply, mut inbox) = filtered(&subscriber_client, "ai.inference", "confidence > 0.85", None).await;
    assert!(reply["id"].as_u64().is_some(), "{reply}");
    assert_eq!(reply["native"], json!(true));
    let publisher = server.client().await;
    for confidence in [0.5, 0.9, 0.86, 0.2, 0.99, 0.85] {
        publisher.publish("ai.inference", event("llama3-70b", confidence, 100).into()).await.expect("publish");
    }
    publisher.flush().await.expect("flush");
    let received = drain(&mut inbox, Duration::from_millis(500)).await;
    assert_eq!(confidences(&received), vec![0.9, 0.86, 0.99]);
    assert!(received.iter().all(|m| m.subject.as_str() == "ai.inference"));
}

#[tokio::test]
async fn spec_examples_route_on_payload_headers_and_subject() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let (_, mut by_model) = filtered(&client, "ai.>", r#"model_id == "llama3-70b" && confidence >= 0.9"#, None).await;
    let (_, mut by_header) = filtered(&client, "ai.>", r#"headers["Semaq-Priority"] == "0""#, None).await;
    let (_, mut by_subject) =
        filtered(&client, "ai.>", r#"subject.startsWith("ai.inference.") && input_tokens < 4096"#, None).await;
    let publisher = server.client().await;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Semaq-Priority", "0");
    publisher.publish_with_headers("ai.batch", headers, event("gpt-4", 0.1, 9000).into()).await.expect("publish");
    publisher.publish("ai.inference.eu", event("llama3-70b", 0.95, 100).into()).await.expect("publish");
    publisher.publish("ai.inference.us", event("llama3-70b", 0.5, 5000).into()).await.expect("publish");
    publisher.flush().await.expect("flush");
    let quiet = Duration::from_millis(400);
    let subjects = |messages: Vec<async_nats::Message>| -> Vec<String> {
        messages.into_iter().map(|m| m.subject.to_string()).collect()
    };
    assert_eq!(subjects(drain(&mut by_model, quiet).await), ["ai.inference.eu"]);
    let with_header = drain(&mut by_header, quiet).await;
    assert_eq!(with_header.len(), 1);
    let header = with_header[0].headers.as_ref().and_then(|h| h.get("Semaq-Priority")).map(|v| v.to_string());
    assert_eq!(header.as_deref(), Some("0"), "headers are delivered");
    assert_eq!(subjects(drain(&mut by_subject, quiet).await), ["ai.inference.eu"]);
}

#[tokio::test]
async fn an_expression_that_does_not_compile_is_refused_with_its_position() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let cases = [
        ("confidence > ", 1, 14),
        ("confidence > 0.5 && subject > 3", 1, 29),
        ("frobnicate(confidence)", 1, 11),
        ("1 + 2", 1, 3),
    ];
    for (filter, line, column) in cases {
        let body = json!({ "subject": "ai.x", "filter": filter, "deliver": "inbox.x" });
        let reply = api(&client, CREATE, &body.to_string()).await;
        assert_eq!(reply["error"]["code"], json!(400), "{filter}: {reply}");
        assert_eq!((reply["error"]["line"].clone(), reply["error"]["column"].clone()), (json!(line), json!(column)));
        let description = reply["error"]["description"].as_str().expect("description");
        assert!(description.contains(&format!("line {line}, column {column}")), "{description}");
    }
    for body in [
        r#"{"subject": "ai.x", "filter": "true"}"#,
        r#"{"subject": "ai..x", "filter": "true", "deliver": "inbox"}"#,
        r#"{"subject": "ai.x", "filter": "true", "deliver": "inbox.*"}"#,
        "not json",
    ] {
        let reply = api(&client, CREATE, body).await;
        assert_eq!(reply["error"]["code"], json!(400), "{body}: {reply}");
    }
    assert_eq!(server.http_json("/varz")["semaq_filters"]["subscriptions"], json!(0));
}

#[tokio::test]
async fn non_json_payloads_missing_fields_and_run_time_errors_are_counted_non_matches() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let (_, mut inbox) = filtered(&client, "ai.x", "input_tokens / divisor > 1", None).await;
    let publisher = server.client().await;
    for payload in ["not json", r#"{"input_tokens": 10}"#, r#"{"input_tokens": 10, "divisor": 0}"#] {
        publisher.publish("ai.x", payload.to_string().into()).await.expect("publish");
    }
    publisher.publish("ai.x", r#"{"input_tokens": 10, "divisor": 2}"#.into()).await.expect("publish");
    publisher.flush().await.expect("flush");
    let received = drain(&mut inbox, Duration::from_millis(400)).await;
    assert_eq!(received.len(), 1);
    assert_eq!(&received[0].payload[..], br#"{"input_tokens": 10, "divisor": 2}"#);
    let counts = filter_counts(&server);
    assert_eq!(counts["evaluations"], json!(4), "{counts}");
    assert_eq!(counts["matches"], json!(1));
    assert_eq!(counts["non_matches"], json!(3));
    assert_eq!(counts["not_json"], json!(1));
    assert_eq!(counts["missing_field"], json!(1));
    assert_eq!(counts["runtime_errors"], json!(1));
}

#[tokio::test]
async fn filters_on_subject_and_headers_deliver_non_json_payloads() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let (_, mut inbox) = filtered(&client, "bin.>", r#"subject.endsWith(".png")"#, None).await;
    let publisher = server.client().await;
    publisher.publish("bin.a.png", vec![0u8, 159, 146, 150].into()).await.expect("publish");
    publisher.publish("bin.a.jpg", vec![1u8, 2].into()).await.expect("publish");
    publisher.flush().await.expect("flush");
    let received = drain(&mut inbox, Duration::from_millis(400)).await;
    assert_eq!(received.len(), 1);
    assert_eq!(&received[0].payload[..], &[0u8, 159, 146, 150]);
    assert_eq!(filter_counts(&server)["not_json"], json!(0));
}

#[tokio::test]
async fn filtered_queue_subscriptions_share_each_matching_message() {
    let server = SemaqServer::start();
    let mut members = Vec::new();
    for _ in 0..3 {
        let client = server.client().await;
        let (_, inbox) = filtered(&client, "work", "priority == 0", Some("workers")).await;
        members.push((client, inbox));
    }
    let client = server.client().await;
    let (_, mut watcher) = filtered(&client, "work", "priority == 0", None).await;
    let publisher = server.client().await;
    for i in 0..300 {
        let body = json!({ "n": i, "priority": i % 3 });
        publisher.publish("work", body.to_string().into()).await.expect("publish");
    }
    publisher.flush().await.expect("flush");
    let mut seen = Vec::new();
    let mut per_member = Vec::new();
    for (_, inbox) in &mut members {
        let received = drain(inbox, Duration::from_millis(400)).await;
        per_member.push(received.len());
        for message in received {
            seen.push(serde_json::from_slice::<Value>(&message.payload).expect("json")["n"].as_u64().expect("n"));
        }
    }
    seen.sort_unstable();
    let expected: Vec<u64> = (0..300).filter(|i| i % 3 == 0).collect();
    assert_eq!(seen, expected, "each match exactly once across the group");
    assert!(per_member.iter().all(|count| *count > 0), "{per_member:?}");
    assert_eq!(
        drain(&mut watcher, Duration::from_millis(200)).await.len(),
        100,
        "a plain filtered subscriber sees all"
    );
}

#[tokio::test]
async fn delete_ends_a_filtered_subscription_and_only_its_owner_may_delete() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let (reply, mut inbox) = filtered(&client, "ai.x", "true", None).await;
    let id = reply["id"].as_u64().expect("id");
    let stranger = server.client().await;
    let refused = api(&stranger, DELETE, &json!({ "id": id }).to_string()).await;
    assert_eq!(refused["error"]["code"], json!(404), "{refused}");
    let deleted = api(&client, DELETE, &json!({ "id": id }).to_string()).await;
    assert_eq!(deleted, json!({ "success": true }));
    client.publish("ai.x", "{}".into()).await.expect("publish");
    sync(&client).await;
    assert!(drain(&mut inbox, Duration::from_millis(200)).await.is_empty());
    let again = api(&client, DELETE, &json!({ "id": id }).to_string()).await;
    assert_eq!(again["error"]["code"], json!(404));
}

#[tokio::test]
async fn no_filtered_subscription_leaks_after_1000_connect_create_close_cycles() {
    let server = SemaqServer::start();
    let baseline = server.http_json("/subsz")["num_subscriptions"].clone();
    let body = json!({ "subject": "leak.test", "filter": "confidence > 0.5", "deliver": "leak.inbox" }).to_string();
    for i in 0..1000 {
        let mut raw = server.raw();
        raw.send(format!("CONNECT {{}}\r\nSUB r.{i} 1\r\nPUB {CREATE} r.{i} {}\r\n{body}\r\n", body.len()).as_bytes());
        raw.read_until("\"id\"");
    }
    let mut last = Value::Null;
    wait_until_async("router subscriptions back to the baseline", Duration::from_secs(5), || {
        last = server.http_json("/subsz")["num_subscriptions"].clone();
        let back = last == baseline;
        async move { back }
    })
    .await;
    assert_eq!(last, baseline, "router subscriptions back to the baseline");
    assert_eq!(filter_counts(&server)["subscriptions"], json!(0));
}

// ---------------------------------------------------------------------------------------------
// JetStream consumers with `semaq.filter`.

fn with_filter(filter: &str) -> HashMap<String, String> {
    HashMap::from([("semaq.filter".to_string(), filter.to_string())])
}

async fn publish_events(js: &jetstream::Context, confidences: &[f64]) {
    for confidence in confidences {
        publish(js, "ai.inference", &event("llama3-70b", *confidence, 10)).await;
    }
}

async fn fetch(consumer: &PullConsumer, max: usize) -> Vec<jetstream::Message> {
    let mut batch =
        consumer.batch().max_messages(max).expires(Duration::from_millis(500)).messages().await.expect("pull");
    let mut received = Vec::new();
    while let Ok(Some(Ok(message))) = tokio::time::timeout(WAIT, batch.next()).await {
        received.push(message);
    }
    received
}

fn js_confidences(messages: &[jetstream::Message]) -> Vec<f64> {
    messages
        .iter()
        .map(|m| serde_json::from_slice::<Value>(&m.payload).expect("json")["confidence"].as_f64().expect("number"))
        .collect()
}

#[tokio::test]
async fn a_filtered_pull_consumer_skips_non_matches_and_redelivers_unacked_matches() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("EVENTS", &["ai.>"])).await.expect("stream");
    publish_events(&js, &[0.5, 0.9, 0.2, 0.95, 0.3, 0.99, 0.1]).await;
    let config = pull::Config {
        durable_name: Some("hi".into()),
        ack_wait: Duration::from_secs(1),
        metadata: with_filter("confidence > 0.85"),
        ..Default::default()
    };
    let mut consumer: PullConsumer = stream.create_consumer(config).await.expect("consumer");
    assert_eq!(consumer.info().await.expect("info").num_pending, 3, "only matches are pending");
    let first = fetch(&consumer, 10).await;
    assert_eq!(js_confidences(&first), vec![0.9, 0.95, 0.99]);
    for message in &first[..2] {
        message.ack().await.expect("ack");
    }
    let redelivered = fetch(&consumer, 10).await;
    let redelivered = if redelivered.is_empty() { fetch(&consumer, 10).await } else { redelivered };
    assert_eq!(js_confidences(&redelivered), vec![0.99], "the unacked match comes back");
    assert_eq!(redelivered[0].info().expect("info").delivered, 2);
    redelivered[0].ack().await.expect("ack");
    wait_until_async("everything acknowledged", WAIT, || {
        let consumer = consumer.clone();
        async move {
            let mut consumer = consumer;
            let info = consumer.info().await.expect("info").clone();
            info.num_ack_pending == 0 && info.num_pending == 0 && info.ack_floor.stream_sequence == 7
        }
    })
    .await;
    let info = consumer.info().await.expect("info");
    assert_eq!(info.num_pending, 0);
}

#[tokio::test]
async fn a_filtered_push_consumer_delivers_only_matches() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("PUSHED", &["ai.>"])).await.expect("stream");
    let config = push::Config {
        durable_name: Some("pushed".into()),
        deliver_subject: "deliver.pushed".into(),
        ack_policy: AckPolicy::Explicit,
        metadata: with_filter(r#"model_id == "llama3-70b" && input_tokens < 4096"#),
        ..Default::default()
    };
    let consumer: PushConsumer = stream.create_consumer(config).await.expect("consumer");
    let mut messages = consumer.messages().await.expect("messages");
    publish(&js, "ai.inference", &event("gpt-4", 0.9, 10)).await;
    publish(&js, "ai.inference", &event("llama3-70b", 0.9, 10)).await;
    publish(&js, "ai.inference", "not json").await;
    publish(&js, "ai.inference", &event("llama3-70b", 0.9, 9000)).await;
    publish(&js, "ai.inference", &event("llama3-70b", 0.4, 20)).await;
    let mut tokens = Vec::new();
    while let Ok(Some(Ok(message))) = tokio::time::timeout(Duration::from_millis(700), messages.next()).await {
        message.ack().await.expect("ack");
        let body: Value = serde_json::from_slice(&message.payload).expect("json");
        tokens.push(body["input_tokens"].as_u64().expect("tokens"));
    }
    assert_eq!(tokens, vec![10, 20]);
    let counts = filter_counts(&server);
    assert_eq!(counts["not_json"], json!(1), "{counts}");
}

#[tokio::test]
async fn a_consumer_with_an_invalid_filter_is_refused_with_the_position() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    js.create_stream(stream_config("BAD", &["bad.>"])).await.expect("stream");
    let body = json!({
        "stream_name": "BAD",
        "config": { "durable_name": "c", "ack_policy": "explicit", "metadata": { "semaq.filter": "confidence >> 1" } },
    });
    let reply = api(&js.client(), "$JS.API.CONSUMER.CREATE.BAD.c", &body.to_string()).await;
    assert_eq!(reply["error"]["code"], json!(400), "{reply}");
    let description = reply["error"]["description"].as_str().expect("description");
    assert!(description.contains("semaq.filter") && description.contains("line 1, column"), "{description}");
    let names = api(&js.client(), "$JS.API.CONSUMER.NAMES.BAD", "").await;
    assert_eq!(names["total"], json!(0), "{names}");
}

#[tokio::test]
async fn an_interest_stream_removes_messages_a_filtered_consumer_skipped() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let mut config = stream_config("INTEREST", &["ai.>"]);
    config.retention = stream::RetentionPolicy::Interest;
    let stream = js.create_stream(config).await.expect("stream");
    let consumer: PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("c".into()),
            metadata: with_filter("confidence > 0.85"),
            ..Default::default()
        })
        .await
        .expect("consumer");
    publish_events(&js, &[0.1, 0.9, 0.2]).await;
    for message in fetch(&consumer, 10).await {
        message.ack().await.expect("ack");
    }
    wait_until_async("the stream is empty", WAIT, || {
        let js = js.clone();
        async move {
            let mut stream = js.get_stream("INTEREST").await.expect("stream");
            stream.info().await.expect("info").state.messages == 0
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Parsing once, whatever the patterns.

#[tokio::test]
async fn a_message_reaching_filters_through_several_patterns_is_parsed_once() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let (_, mut everything) = filtered(&client, "ai.>", "confidence > 0.85", None).await;
    let (_, mut one_token) = filtered(&client, "ai.*", "confidence < 0.3", None).await;
    let (_, mut literal) = filtered(&client, "ai.inference", r#"model_id == "gpt-4""#, None).await;
    let publisher = server.client().await;
    for (model, confidence) in [("llama3-70b", 0.9), ("gpt-4", 0.2), ("gpt-4", 0.5), ("llama3-70b", 0.1)] {
        publisher.publish("ai.inference", event(model, confidence, 10).into()).await.expect("publish");
    }
    publisher.flush().await.expect("flush");
    let quiet = Duration::from_millis(400);
    assert_eq!(confidences(&drain(&mut everything, quiet).await), vec![0.9]);
    assert_eq!(confidences(&drain(&mut one_token, quiet).await), vec![0.2, 0.1]);
    assert_eq!(confidences(&drain(&mut literal, quiet).await), vec![0.2, 0.5]);
    let counts = filter_counts(&server);
    assert_eq!(counts["evaluations"], json!(12), "3 filters × 4 messages: {counts}");
    assert_eq!(counts["payload_parses"], json!(4), "one parse per message: {counts}");
}

#[tokio::test]
async fn a_filtered_queue_group_spanning_patterns_delivers_each_match_once() {
    let server = SemaqServer::start();
    let first = server.client().await;
    let (_, mut wide) = filtered(&first, "work.*", "priority == 0", Some("workers")).await;
    let second = server.client().await;
    let (_, mut narrow) = filtered(&second, "work.eu", "priority == 0", Some("workers")).await;
    let publisher = server.client().await;
    for i in 0..60 {
        let body = json!({ "n": i, "priority": i % 2 });
        publisher.publish("work.eu", body.to_string().into()).await.expect("publish");
    }
    publisher.flush().await.expect("flush");
    let quiet = Duration::from_millis(400);
    let (wide, narrow) = (drain(&mut wide, quiet).await.len(), drain(&mut narrow, quiet).await.len());
    assert_eq!(wide + narrow, 30, "each match once across the group: {wide} + {narrow}");
    assert!(wide > 0 && narrow > 0, "both members take a share: {wide} + {narrow}");
}

// ---------------------------------------------------------------------------------------------
// Binary payloads: Confluent wire format decoded with the registry's schema.

const AVRO_EVENT: &str = r#"{"type": "record", "name": "Inference", "namespace": "ai", "fields": [
    {"name": "model_id", "type": "string"},
    {"name": "confidence", "type": "double"},
    {"name": "input_tokens", "type": "long"},
    {"name": "region", "type": ["null", "string"], "default": null}
]}"#;

const PROTO_EVENT: &str = r#"syntax = "proto3";
package ai;
message Inference {
  string model_id = 1;
  double confidence = 2;
  int64 input_tokens = 3;
}"#;

/// Registers a schema over `$SEMAQ.API.SCHEMA.REGISTER`; returns its global id.
async fn register(client: &async_nats::Client, subject: &str, schema: &str, schema_type: &str) -> u32 {
    let body = json!({ "subject": subject, "schema": schema, "schemaType": schema_type });
    let reply = api(client, "$SEMAQ.API.SCHEMA.REGISTER", &body.to_string()).await;
    let id = reply["id"].as_u64().unwrap_or_else(|| panic!("register: {reply}"));
    u32::try_from(id).expect("id")
}

/// Confluent's wire format: magic byte 0, the schema id big-endian, the body.
fn wire(id: u32, body: &[u8]) -> Vec<u8> {
    [&[0u8][..], &id.to_be_bytes(), body].concat()
}

/// An `ai.Inference` in Avro binary (written by the apache-avro crate), in the wire format.
fn avro_event(id: u32, model: &str, confidence: f64, tokens: i64) -> Vec<u8> {
    use apache_avro::types::Value as Avro;
    let schema = apache_avro::Schema::parse_str(AVRO_EVENT).expect("schema");
    let record = Avro::Record(vec![
        ("model_id".into(), Avro::String(model.into())),
        ("confidence".into(), Avro::Double(confidence)),
        ("input_tokens".into(), Avro::Long(tokens)),
        ("region".into(), Avro::Union(1, Box::new(Avro::String("eu-west-1".into())))),
    ]);
    wire(id, &apache_avro::to_avro_datum(&schema, record).expect("avro"))
}

/// An `ai.Inference` in Protobuf binary, field by field, after the message indexes `[0]`.
fn proto_event(id: u32, model: &str, confidence: f64, tokens: u8) -> Vec<u8> {
    let mut body = vec![0]; // message indexes: the first message
    body.extend([0x0a, model.len() as u8]); // field 1, length-delimited
    body.extend(model.as_bytes());
    body.push(0x11); // field 2, 64-bit
    body.extend(confidence.to_le_bytes());
    body.extend([0x18, tokens]); // field 3, varint (< 128)
    wire(id, &body)
}

/// Decodes the `confidence` back out of delivered Avro payloads (the broker delivers them as sent).
fn avro_confidences(payloads: &[&[u8]]) -> Vec<f64> {
    let schema = apache_avro::Schema::parse_str(AVRO_EVENT).expect("schema");
    payloads
        .iter()
        .map(|payload| {
            let datum = apache_avro::from_avro_datum(&schema, &mut &payload[5..], None).expect("avro");
            let apache_avro::types::Value::Record(fields) = datum else { panic!("not a record") };
            match fields.iter().find(|(name, _)| name == "confidence") {
                Some((_, apache_avro::types::Value::Double(confidence))) => *confidence,
                other => panic!("confidence: {other:?}"),
            }
        })
        .collect()
}

fn l2_stream(name: &str, subject: &str, schema: &str) -> stream::Config {
    let mut config = stream_config(name, &[subject]);
    config.metadata = HashMap::from([("semaq.level".into(), "2".into()), ("semaq.schema".into(), schema.into())]);
    config
}

async fn publish_binary(js: &jetstream::Context, subject: &str, payload: Vec<u8>) {
    js.publish(subject.to_string(), payload.into()).await.expect("publish").await.expect("stored");
}

#[tokio::test]
async fn filtered_pull_and_push_consumers_read_avro_binary_records_decoded_once() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let id = register(&js.client(), "ai-inference", AVRO_EVENT, "AVRO").await;
    let stream = js.create_stream(l2_stream("AVRO_EVENTS", "ai.>", "ai-inference")).await.expect("stream");
    let events = [("llama3-70b", 0.5), ("llama3-70b", 0.9), ("gpt-4", 0.95), ("llama3-70b", 0.99)];
    for (model, confidence) in events {
        publish_binary(&js, "ai.inference", avro_event(id, model, confidence, 100)).await;
    }
    let filter = r#"confidence > 0.85 && model_id == "llama3-70b" && region == "eu-west-1""#;
    let pull_config =
        pull::Config { durable_name: Some("pull".into()), metadata: with_filter(filter), ..Default::default() };
    let mut pulled: PullConsumer = stream.create_consumer(pull_config).await.expect("pull consumer");
    assert_eq!(pulled.info().await.expect("info").num_pending, 2, "only matches are pending");
    let push_config = push::Config {
        durable_name: Some("push".into()),
        deliver_subject: "deliver.avro".into(),
        ack_policy: AckPolicy::Explicit,
        metadata: with_filter(filter),
        ..Default::default()
    };
    let pushed: PushConsumer = stream.create_consumer(push_config).await.expect("push consumer");

    let fetched = fetch(&pulled, 10).await;
    let payloads: Vec<&[u8]> = fetched.iter().map(|m| &m.payload[..]).collect();
    assert_eq!(avro_confidences(&payloads), vec![0.9, 0.99], "delivered as sent, binary");
    let mut messages = pushed.messages().await.expect("messages");
    let mut received = Vec::new();
    while let Ok(Some(Ok(message))) = tokio::time::timeout(Duration::from_millis(700), messages.next()).await {
        message.ack().await.expect("ack");
        received.push(message.payload.to_vec());
    }
    let payloads: Vec<&[u8]> = received.iter().map(Vec::as_slice).collect();
    assert_eq!(avro_confidences(&payloads), vec![0.9, 0.99]);
    let counts = filter_counts(&server);
    assert_eq!(counts["payload_decodes"], json!(4), "each stored record decoded once for both consumers: {counts}");
    assert_eq!(counts["payload_parses"], json!(0), "{counts}");
    assert_eq!(counts["undecodable"], json!(0), "{counts}");
}

#[tokio::test]
async fn a_filtered_consumer_reads_protobuf_binary_messages() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let id = register(&js.client(), "ai-inference-proto", PROTO_EVENT, "PROTOBUF").await;
    let stream = js.create_stream(l2_stream("PROTO_EVENTS", "ai.>", "ai-inference-proto")).await.expect("stream");
    for (model, confidence, tokens) in [("llama3-70b", 0.9, 100), ("gpt-4", 0.95, 5), ("llama3-70b", 0.2, 7)] {
        publish_binary(&js, "ai.inference", proto_event(id, model, confidence, tokens)).await;
    }
    let filter = r#"model_id.startsWith("llama") && input_tokens < 50 || confidence > 0.9"#;
    let config = pull::Config { durable_name: Some("c".into()), metadata: with_filter(filter), ..Default::default() };
    let consumer: PullConsumer = stream.create_consumer(config).await.expect("consumer");
    let sequences: Vec<u64> =
        fetch(&consumer, 10).await.iter().map(|m| m.info().expect("info").stream_sequence).collect();
    assert_eq!(sequences, vec![2, 3], "gpt-4 at 0.95, then llama3-70b with 7 tokens");
    assert_eq!(filter_counts(&server)["payload_decodes"], json!(3));
}

#[tokio::test]
async fn a_filtered_subscription_decodes_wire_format_payloads_and_counts_failures() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let id = register(&client, "ai-inference", AVRO_EVENT, "AVRO").await;
    let (_, mut inbox) = filtered(&client, "ai.inference", "confidence > 0.85 && input_tokens < 4096", None).await;
    let publisher = server.client().await;
    let mut undecodable = avro_event(id, "llama3-70b", 0.99, 10);
    undecodable.truncate(undecodable.len() - 4);
    let payloads = [
        avro_event(id, "llama3-70b", 0.9, 100),
        avro_event(id, "llama3-70b", 0.2, 100),
        undecodable,
        avro_event(id + 1000, "llama3-70b", 0.99, 10), // an id the registry does not know: not JSON either
        avro_event(id, "gpt-4", 0.97, 9000),
        avro_event(id, "gpt-4", 0.96, 20),
    ];
    for payload in payloads {
        publisher.publish("ai.inference", payload.into()).await.expect("publish");
    }
    publisher.flush().await.expect("flush");
    let received = drain(&mut inbox, Duration::from_millis(400)).await;
    let payloads: Vec<&[u8]> = received.iter().map(|m| &m.payload[..]).collect();
    assert_eq!(avro_confidences(&payloads), vec![0.9, 0.96]);
    let counts = filter_counts(&server);
    assert_eq!(counts["evaluations"], json!(6), "{counts}");
    assert_eq!(counts["undecodable"], json!(1), "{counts}");
    assert_eq!(counts["not_json"], json!(1), "{counts}");
    assert_eq!(counts["payload_decodes"], json!(5), "{counts}");
}

/// An Avro array body whose block count claims 500 M items in 5 bytes.
fn forged_avro_array(id: u32) -> Vec<u8> {
    let mut count: u64 = 500_000_000 << 1; // zig-zag
    let mut body = Vec::new();
    while count >= 0x80 {
        body.push((count & 0x7f) as u8 | 0x80);
        count >>= 7;
    }
    body.push(count as u8);
    wire(id, &body)
}

#[tokio::test]
async fn a_forged_avro_length_is_refused_without_taking_the_server_down() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let client = js.client();
    let id = register(&client, "tags", r#"{"type": "array", "items": "string"}"#, "AVRO").await;
    let (_, mut inbox) = filtered(&client, "tags.core", "size(payload) > 0", None).await;
    js.create_stream(l2_stream("TAGS", "tags.stored", "tags")).await.expect("stream");
    client.publish("tags.core", forged_avro_array(id).into()).await.expect("publish");
    let stored = js.publish("tags.stored", forged_avro_array(id).into()).await.expect("publish").await;
    let error = stored.expect_err("the L2 stream refuses it").to_string();
    assert!(error.contains("does not decode"), "{error}");
    // One block of one string, "eu" (zig-zag: count 1 → 2, length 2 → 4), then the end block.
    client.publish("tags.core", wire(id, &[2, 4, b'e', b'u', 0]).into()).await.expect("publish");
    client.flush().await.expect("flush");
    assert_eq!(drain(&mut inbox, Duration::from_millis(400)).await.len(), 1, "the server is still up");
    assert_eq!(filter_counts(&server)["undecodable"], json!(1));
}

#[tokio::test]
async fn a_filter_may_not_deliver_where_its_creator_may_not_publish() {
    let config = r#"
        authorization {
          users = [ { user: "reader", password: "pw", permissions: { publish: { allow: ["$SEMAQ.API.SUB.>", "mine.>"] } } } ]
        }
    "#;
    let server = SemaqServer::with_config(config, &[]);
    let client = async_nats::ConnectOptions::with_user_and_password("reader".into(), "pw".into())
        .connect(server.url())
        .await
        .expect("connect");
    let forbidden = json!({ "subject": "ai.x", "filter": "true", "deliver": "payments.approve" });
    let reply = api(&client, CREATE, &forbidden.to_string()).await;
    assert_eq!(reply["error"]["code"], json!(403), "{reply}");
    assert!(reply["error"]["description"].as_str().unwrap().contains("payments.approve"), "{reply}");
    let allowed = json!({ "subject": "ai.x", "filter": "true", "deliver": "mine.inbox" });
    assert!(api(&client, CREATE, &allowed.to_string()).await.get("error").is_none());
    assert_eq!(server.http_json("/varz")["semaq_filters"]["subscriptions"], json!(1), "only the allowed one exists");
}
