//! Counter streams as nats-server 2.12 has them: each PubAck carries the subject's new value
//! (`"val":"<n>"`), and a counter stream that sources other counter streams adds up their
//! values, keeping the last value seen from each origin in `Nats-Counter-Sources`, so the
//! total stays right however the origins' increments interleave.

use std::time::Duration;

use async_nats::jetstream;
use semaq_testkit::SemaqServer;
use serde_json::{json, Value};

use crate::jetstream_api::{api, context, publish_raw};

/// Sourcing is asynchronous: copies appear within this.
const FOLLOW: Duration = Duration::from_secs(10);

async fn create(client: &async_nats::Client, config: Value) {
    let name = config["name"].as_str().expect("name").to_string();
    let created = api(client, &format!("$JS.API.STREAM.CREATE.{name}"), &config.to_string()).await;
    assert!(created.get("error").is_none(), "{created}");
}

async fn incr(client: &async_nats::Client, subject: &str, by: &str) -> Value {
    publish_raw(client, subject, &[("Nats-Incr", by)], b"").await
}

/// The last message on `subject` in `stream`: its body and `Nats-Counter-Sources`.
async fn last(js: &jetstream::Context, stream: &str, subject: &str) -> Option<(String, Option<String>)> {
    let stream = js.get_stream(stream).await.expect("stream");
    let message = stream.get_last_raw_message_by_subject(subject).await.ok()?;
    let sources = message.headers.get("Nats-Counter-Sources").map(|value| value.to_string());
    Some((String::from_utf8_lossy(&message.payload).into_owned(), sources))
}

#[tokio::test]
async fn a_counters_puback_carries_the_subjects_new_value() {
    let server = SemaqServer::start();
    let client = server.client().await;
    create(&client, json!({"name": "HITS", "subjects": ["hits.>"], "allow_msg_counter": true})).await;
    let mut seen = Vec::new();
    for (subject, by) in [("hits.a", "5"), ("hits.a", "-2"), ("hits.b", "1"), ("hits.a", "10")] {
        seen.push(incr(&client, subject, by).await);
    }
    let expected =
        [(1, "5"), (2, "3"), (3, "1"), (4, "13")].map(|(seq, val)| json!({"stream": "HITS", "seq": seq, "val": val}));
    assert_eq!(seen, expected);
    let refused = publish_raw(&client, "hits.a", &[("Nats-Incr", "x")], b"").await;
    assert!(refused.get("val").is_none(), "a refusal has no value: {refused}");

    // Streams without counters answer as before, with no `val`.
    create(&client, json!({"name": "PLAIN", "subjects": ["plain"]})).await;
    assert_eq!(publish_raw(&client, "plain", &[], b"x").await, json!({"stream": "PLAIN", "seq": 1}));
}

#[tokio::test]
async fn a_counter_stream_sourcing_counters_adds_up_their_values() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = context(&server).await;
    for (name, subject) in [("EU", "eu.hits"), ("US", "us.hits")] {
        create(&client, json!({"name": name, "subjects": [subject], "allow_msg_counter": true})).await;
    }
    let transforms =
        |name: &str, from: &str| json!({"name": name, "subject_transforms": [{"src": from, "dest": "all.hits"}]});
    let total = json!({
        "name": "ALL", "subjects": ["all.hits"], "allow_msg_counter": true,
        "sources": [transforms("EU", "eu.hits"), transforms("US", "us.hits")],
    });
    create(&client, total).await;

    for (subject, by) in [("eu.hits", "5"), ("us.hits", "7"), ("eu.hits", "-1"), ("us.hits", "100")] {
        let ack = incr(&client, subject, by).await;
        assert!(ack.get("error").is_none(), "{ack}");
    }
    let want = r#"{"val":"111"}"#;
    let deadline = tokio::time::Instant::now() + FOLLOW;
    let mut got = last(&js, "ALL", "all.hits").await;
    while got.as_ref().map(|(body, _)| body.as_str()) != Some(want) {
        assert!(tokio::time::Instant::now() < deadline, "ALL's total is not {want} within {FOLLOW:?}: {got:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        got = last(&js, "ALL", "all.hits").await;
    }
    let (_, sources) = got.expect("a total");
    let sources: Value = serde_json::from_str(&sources.expect("Nats-Counter-Sources")).expect("JSON");
    assert_eq!(sources, json!({"EU": {"eu.hits": "4"}, "US": {"us.hits": "107"}}));

    // Increments on the total itself add to it too.
    assert_eq!(incr(&client, "all.hits", "1000").await["val"], "1111");
}

#[tokio::test]
async fn a_stream_without_counters_sources_a_counter_verbatim() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = context(&server).await;
    create(&client, json!({"name": "HITS", "subjects": ["hits"], "allow_msg_counter": true})).await;
    create(&client, json!({"name": "COPY", "subjects": [], "sources": [{"name": "HITS"}]})).await;
    for by in ["2", "3"] {
        incr(&client, "hits", by).await;
    }
    let deadline = tokio::time::Instant::now() + FOLLOW;
    while last(&js, "COPY", "hits").await.map(|(body, _)| body) != Some(r#"{"val":"5"}"#.to_string()) {
        assert!(tokio::time::Instant::now() < deadline, "COPY does not hold the counter's value");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let info = api(&client, "$JS.API.STREAM.INFO.COPY", "").await;
    assert_eq!(info["state"]["messages"], 2, "{info}");
}
