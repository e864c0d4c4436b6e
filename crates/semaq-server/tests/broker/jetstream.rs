//! JetStream through async-nats' jetstream module, unchanged.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use semaq_testkit::{wait_until_async, SemaqServer};

async fn context(server: &SemaqServer) -> jetstream::Context {
    jetstream::new(server.client().await)
}

fn stream_config(name: &str, subjects: &[&str]) -> stream::Config {
    stream::Config {
        name: name.to_string(),
        subjects: subjects.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

#[tokio::test]
async fn account_info_reports_jetstream_enabled() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let info = js.query_account().await.expect("account info");
    assert_eq!(info.streams, 0);
}

#[tokio::test]
async fn publishes_are_acknowledged_with_increasing_sequences() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("ORDERS", &["orders.>"])).await.expect("create");
    assert_eq!(stream.cached_info().config.name, "ORDERS");
    for i in 1..=10u64 {
        let ack = js.publish("orders.new", format!("order {i}").into()).await.unwrap().await.unwrap();
        assert_eq!(ack.stream, "ORDERS");
        assert_eq!(ack.sequence, i);
        assert!(!ack.duplicate);
    }
    let mut stream = js.get_stream("ORDERS").await.unwrap();
    let info = stream.info().await.unwrap();
    assert_eq!(info.state.messages, 10);
    assert_eq!(info.state.first_sequence, 1);
    assert_eq!(info.state.last_sequence, 10);
    let message = stream.get_raw_message(3).await.unwrap();
    assert_eq!(message.payload, "order 3");
    assert_eq!(message.subject.as_str(), "orders.new");
}

#[tokio::test]
async fn msg_id_deduplicates_within_the_window() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    js.create_stream(stream_config("DEDUP", &["dedup"])).await.unwrap();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", "abc");
    let first = js.publish_with_headers("dedup", headers.clone(), "1".into()).await.unwrap().await.unwrap();
    let second = js.publish_with_headers("dedup", headers, "1".into()).await.unwrap().await.unwrap();
    assert_eq!(first.sequence, 1);
    assert!(!first.duplicate);
    assert_eq!(second.sequence, 1);
    assert!(second.duplicate);
    let info = js.get_stream("DEDUP").await.unwrap().info().await.unwrap().clone();
    assert_eq!(info.state.messages, 1);
}

#[tokio::test]
async fn expected_last_sequence_mismatch_is_refused_and_nothing_is_stored() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    js.create_stream(stream_config("EXPECT", &["expect.>"])).await.unwrap();
    js.publish("expect.a", "1".into()).await.unwrap().await.unwrap();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Expected-Last-Sequence", "5");
    let error = js.publish_with_headers("expect.a", headers, "2".into()).await.unwrap().await.unwrap_err();
    assert!(error.to_string().contains("wrong last sequence: 1"), "{error}");
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Expected-Stream", "OTHER");
    let error = js.publish_with_headers("expect.a", headers, "3".into()).await.unwrap().await.unwrap_err();
    assert!(error.to_string().contains("expected stream does not match"), "{error}");
    let info = js.get_stream("EXPECT").await.unwrap().info().await.unwrap().clone();
    assert_eq!(info.state.messages, 1);
}

#[tokio::test]
async fn bad_requests_get_error_json_and_change_nothing() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let reply = client.request("$JS.API.STREAM.INFO.NOPE", "".into()).await.unwrap();
    let body: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(body["error"]["code"], 404);
    assert_eq!(body["error"]["err_code"], 10059);
    let reply = client.request("$JS.API.STREAM.CREATE.BAD", "{not json".into()).await.unwrap();
    let body: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(body["error"]["err_code"], 10025);
    let reply = client
        .request("$JS.API.STREAM.CREATE.BAD", r#"{"name":"BAD","subjects":["x"],"max_msgs":"lots"}"#.into())
        .await
        .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(body["error"]["err_code"], 10025, "{body}");
    let names = client.request("$JS.API.STREAM.NAMES", "".into()).await.unwrap();
    let body: serde_json::Value = serde_json::from_slice(&names.payload).unwrap();
    assert_eq!(body["total"], 0, "nothing was created: {body}");
}

#[tokio::test]
async fn overlapping_stream_subjects_are_refused() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    js.create_stream(stream_config("A", &["shared.>"])).await.unwrap();
    let error = js.create_stream(stream_config("B", &["shared.x"])).await.unwrap_err();
    assert!(error.to_string().contains("overlap"), "{error}");
}

#[tokio::test]
async fn pull_consumer_fetches_and_acks() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("PULL", &["pull.>"])).await.unwrap();
    for i in 0..20 {
        js.publish("pull.job", i.to_string().into()).await.unwrap().await.unwrap();
    }
    let consumer: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config { durable_name: Some("worker".into()), ..Default::default() })
        .await
        .unwrap();
    let mut messages = consumer.fetch().max_messages(20).messages().await.unwrap();
    let mut seen = Vec::new();
    while let Some(message) = messages.next().await {
        let message = message.unwrap();
        seen.push(String::from_utf8(message.payload.to_vec()).unwrap());
        message.ack().await.unwrap();
    }
    assert_eq!(seen, (0..20).map(|i| i.to_string()).collect::<Vec<_>>());
    wait_until_async("every ack applied", Duration::from_secs(5), || async {
        let info = consumer.get_info().await.unwrap();
        info.num_ack_pending == 0 && info.ack_floor.stream_sequence == 20
    })
    .await;
    let mut consumer = consumer;
    let info = consumer.info().await.unwrap().clone();
    assert_eq!(info.num_ack_pending, 0);
    assert_eq!(info.ack_floor.stream_sequence, 20);
    assert_eq!(info.num_pending, 0);
}

#[tokio::test]
async fn push_consumer_delivers_to_its_subject() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("PUSH", &["push.>"])).await.unwrap();
    let consumer: consumer::PushConsumer = stream
        .create_consumer(consumer::push::Config {
            durable_name: Some("pusher".into()),
            deliver_subject: "deliver.push".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    for i in 0..5 {
        js.publish("push.event", i.to_string().into()).await.unwrap().await.unwrap();
    }
    for i in 0..5 {
        let message = tokio::time::timeout(Duration::from_secs(5), messages.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(message.payload, i.to_string().as_bytes());
        message.ack().await.unwrap();
    }
}

#[tokio::test]
async fn unacknowledged_messages_are_redelivered_after_ack_wait() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let stream = js.create_stream(stream_config("REDELIVER", &["redeliver"])).await.unwrap();
    js.publish("redeliver", "once".into()).await.unwrap().await.unwrap();
    let consumer: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some("slow".into()),
            ack_wait: Duration::from_millis(300),
            max_deliver: 3,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut deliveries = 0;
    let mut messages = consumer.stream().expires(Duration::from_millis(500)).messages().await.unwrap();
    while let Ok(Some(Ok(message))) = tokio::time::timeout(Duration::from_secs(3), messages.next()).await {
        deliveries += 1;
        assert_eq!(message.info().unwrap().delivered, deliveries);
        if deliveries == 3 {
            break;
        }
    }
    assert_eq!(deliveries, 3, "delivered up to max_deliver");
}

#[tokio::test]
async fn direct_get_serves_messages_with_stream_headers() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let config = stream::Config { allow_direct: true, ..stream_config("DIRECT", &["direct.>"]) };
    let stream = js.create_stream(config).await.unwrap();
    js.publish("direct.a", "first".into()).await.unwrap().await.unwrap();
    js.publish("direct.b", "second".into()).await.unwrap().await.unwrap();
    let message = stream.direct_get(1).await.unwrap();
    assert_eq!(message.payload, "first");
    assert_eq!(message.headers.get("Nats-Sequence").map(|v| v.as_str()), Some("1"));
    let last = stream.direct_get_last_for_subject("direct.b").await.unwrap();
    assert_eq!(last.payload, "second");
    let missing = stream.direct_get(99).await.unwrap_err();
    assert_eq!(missing.kind(), async_nats::jetstream::stream::DirectGetErrorKind::NotFound);
}

#[tokio::test]
async fn messages_older_than_max_age_expire() {
    let server = SemaqServer::start();
    let js = context(&server).await;
    let config = stream::Config { max_age: Duration::from_millis(500), ..stream_config("AGED", &["aged"]) };
    js.create_stream(config).await.unwrap();
    js.publish("aged", "old".into()).await.unwrap().await.unwrap();
    wait_until_async("message expired", Duration::from_secs(5), || async {
        js.get_stream("AGED").await.unwrap().info().await.unwrap().state.messages == 0
    })
    .await;
}
