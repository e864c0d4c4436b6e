//! `Semaq-Priority` for JetStream consumers: a consumer whose metadata (or whose stream's) says
//! `semaq.priority: true` hands out its backlog lower numbers first, stream order within one
//! priority, with shares 8 : 4 : 2 : 1 so priority 3 still moves. A message read ahead but not
//! yet delivered is neither acknowledged nor skipped across a crash. Durable intents' backlogs
//! go by priority too.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream, Context};
use async_nats::HeaderMap;
use futures::{StreamExt, TryStreamExt};
use semaq_testkit::{wait_until_async, SemaqServer};
use serde_json::{json, Value};

/// Most hand-outs to other priorities while a message waits at the head of its queue.
const STARVATION_BOUND: usize = 14;

async fn publish(js: &Context, subject: &str, priority: u8, body: String) {
    let mut headers = HeaderMap::new();
    headers.insert("Semaq-Priority", priority.to_string().as_str());
    js.publish_with_headers(subject.to_string(), headers, body.into()).await.unwrap().await.unwrap();
}

async fn work_stream(js: &Context, retention: stream::RetentionPolicy, storage: stream::StorageType) {
    js.create_stream(stream::Config {
        name: "WORK".into(),
        subjects: vec!["work.>".into()],
        retention,
        storage,
        ..Default::default()
    })
    .await
    .unwrap();
}

async fn pull_consumer(js: &Context, name: &str, priority: Option<&str>) -> consumer::PullConsumer {
    let metadata = priority.map(|p| HashMap::from([("semaq.priority".to_string(), p.to_string())])).unwrap_or_default();
    let config = consumer::pull::Config { durable_name: Some(name.into()), metadata, ..Default::default() };
    js.get_stream("WORK").await.unwrap().create_consumer(config).await.unwrap()
}

/// Fetches `count` messages, acking each; returns their bodies, `"<priority>-<n>"`.
async fn take(consumer: &consumer::PullConsumer, count: usize) -> Vec<String> {
    let mut got = Vec::new();
    while got.len() < count {
        let batch = consumer.fetch().max_messages(count - got.len()).expires(Duration::from_secs(2));
        let messages: Vec<_> = batch.messages().await.unwrap().try_collect().await.unwrap();
        assert!(!messages.is_empty(), "the consumer ran dry after {got:?}");
        for message in messages {
            got.push(String::from_utf8_lossy(&message.payload).to_string());
            message.double_ack().await.unwrap();
        }
    }
    got
}

fn priority_of(body: &str) -> u8 {
    body[..1].parse().unwrap()
}

/// Ten messages of each priority, published interleaved 3, 2, 1, 0.
async fn backlog_of_forty(js: &Context) {
    for n in 0..10 {
        for priority in [3u8, 2, 1, 0] {
            publish(js, "work.job", priority, format!("{priority}-{n}")).await;
        }
    }
}

#[tokio::test]
async fn a_backlog_goes_lower_numbers_first_in_stream_order_and_priority_three_still_moves() {
    let server = SemaqServer::start();
    let js = jetstream::new(server.client().await);
    work_stream(&js, stream::RetentionPolicy::Limits, stream::StorageType::Memory).await;
    backlog_of_forty(&js).await;
    let consumer = pull_consumer(&js, "ordered", Some("true")).await;
    let got = take(&consumer, 40).await;

    assert_eq!(priority_of(&got[0]), 0, "priority 0 goes first: {got:?}");
    let mut shares = [0; 4];
    for body in &got[..15] {
        shares[usize::from(priority_of(body))] += 1;
    }
    assert_eq!(shares, [8, 4, 2, 1], "15 hand-outs with every priority backlogged: {got:?}");
    let first_three = got.iter().position(|b| priority_of(b) == 3).unwrap();
    assert!(first_three <= STARVATION_BOUND, "priority 3 waited behind {first_three}: {got:?}");
    for priority in 0..4u8 {
        let order: Vec<&String> = got.iter().filter(|b| priority_of(b) == priority).collect();
        let expected: Vec<String> = (0..10).map(|n| format!("{priority}-{n}")).collect();
        assert_eq!(order, expected.iter().collect::<Vec<_>>(), "stream order within priority {priority}");
    }
}

#[tokio::test]
async fn without_the_metadata_a_consumer_keeps_stream_order() {
    let server = SemaqServer::start();
    let js = jetstream::new(server.client().await);
    work_stream(&js, stream::RetentionPolicy::Limits, stream::StorageType::Memory).await;
    backlog_of_forty(&js).await;
    let got = take(&pull_consumer(&js, "plain", None).await, 8).await;
    assert_eq!(got, ["3-0", "2-0", "1-0", "0-0", "3-1", "2-1", "1-1", "0-1"]);
}

#[tokio::test]
async fn stream_metadata_orders_every_consumer_and_a_consumer_may_opt_out() {
    let server = SemaqServer::start();
    let js = jetstream::new(server.client().await);
    js.create_stream(stream::Config {
        name: "WORK".into(),
        subjects: vec!["work.>".into()],
        metadata: HashMap::from([("semaq.priority".into(), "true".into())]),
        ..Default::default()
    })
    .await
    .unwrap();
    backlog_of_forty(&js).await;
    assert_eq!(take(&pull_consumer(&js, "inherits", None).await, 1).await, ["0-0"]);
    assert_eq!(take(&pull_consumer(&js, "opts-out", Some("false")).await, 1).await, ["3-0"]);
}

#[tokio::test]
async fn read_ahead_messages_are_not_acknowledged_for_a_work_queue() {
    let server = SemaqServer::start();
    let js = jetstream::new(server.client().await);
    work_stream(&js, stream::RetentionPolicy::WorkQueue, stream::StorageType::Memory).await;
    for n in 0..5 {
        publish(&js, "work.job", 3, format!("3-{n}")).await;
    }
    publish(&js, "work.job", 0, "0-0".into()).await;
    let consumer = pull_consumer(&js, "ordered", Some("true")).await;
    assert_eq!(take(&consumer, 1).await, ["0-0"]);
    let mut info = js.get_stream("WORK").await.unwrap();
    assert_eq!(info.info().await.unwrap().state.messages, 5, "only the acked message left the work queue");
    let mut consumer = consumer;
    let state = consumer.info().await.unwrap().clone();
    assert_eq!(state.num_pending, 5, "messages read ahead still count as pending");
    assert_eq!(state.ack_floor.stream_sequence, 0, "the ack floor stays below the lowest undelivered message");
}

#[tokio::test]
async fn a_crash_after_out_of_order_deliveries_loses_and_repeats_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = SemaqServer::builder().store(dir.path()).start();
    let js = jetstream::new(server.client().await);
    work_stream(&js, stream::RetentionPolicy::WorkQueue, stream::StorageType::File).await;
    for n in 0..4 {
        publish(&js, "work.job", 3, format!("3-{n}")).await;
    }
    for n in 0..4 {
        publish(&js, "work.job", 0, format!("0-{n}")).await;
    }
    let consumer = pull_consumer(&js, "ordered", Some("true")).await;
    let before = take(&consumer, 3).await;
    assert_eq!(before, ["0-0", "3-0", "0-1"], "the stride rule's first hand-outs with priorities 0 and 3");
    // The double acks are on disk; wait out one state-save interval, then crash.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop((consumer, js));
    server.kill();
    server.restart();

    let js = jetstream::new(server.client().await);
    let consumer: consumer::PullConsumer = js.get_stream("WORK").await.unwrap().get_consumer("ordered").await.unwrap();
    let mut after = take(&consumer, 5).await;
    after.sort();
    assert_eq!(after, ["0-2", "0-3", "3-1", "3-2", "3-3"], "every message not yet acked, once");
    let more = consumer.fetch().max_messages(5).expires(Duration::from_millis(500)).messages().await.unwrap();
    let extra: Vec<_> = more.try_collect().await.unwrap();
    assert!(extra.is_empty(), "nothing delivered twice");
}

#[tokio::test]
async fn a_durable_intent_backlog_reaches_its_agent_by_priority() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = jetstream::new(client.clone());
    js.create_stream(stream::Config {
        name: "JOBS".into(),
        subjects: vec!["intent.evaluate".into()],
        retention: stream::RetentionPolicy::WorkQueue,
        metadata: HashMap::from([("semaq.intent".into(), "evaluate".into())]),
        ..Default::default()
    })
    .await
    .unwrap();
    for n in 0..6 {
        publish(&js, "intent.evaluate", 3, format!("3-{n}")).await;
    }
    for n in 0..6 {
        publish(&js, "intent.evaluate", 0, format!("0-{n}")).await;
    }
    // One job at a time, so the broker hands out the backlog in its order.
    let mut inbox = client.subscribe("agents.evaluator").await.unwrap();
    let beat = json!({"agent_id": "evaluator", "intents": ["evaluate"], "inbox": "agents.evaluator", "capacity": 1});
    let ack: Value =
        serde_json::from_slice(&client.request("$SEMAQ.AGENT.HB", beat.to_string().into()).await.unwrap().payload)
            .unwrap();
    assert_eq!(ack["ok"], true, "{ack}");
    let mut got = Vec::new();
    while got.len() < 12 {
        let job = tokio::time::timeout(Duration::from_secs(10), inbox.next()).await.unwrap().unwrap();
        got.push(String::from_utf8_lossy(&job.payload).to_string());
        client.publish(job.reply.unwrap(), "done".into()).await.unwrap();
    }
    let last_zero = got.iter().rposition(|b| priority_of(b) == 0).unwrap();
    assert!(last_zero <= 6, "all priority 0 work before all but one priority 3 job: {got:?}");
    wait_until_async("the work queue empties", Duration::from_secs(5), || {
        let js = js.clone();
        async move { js.get_stream("JOBS").await.unwrap().info().await.unwrap().state.messages == 0 }
    })
    .await;
}

#[tokio::test]
async fn a_priority_setting_that_is_not_true_or_false_is_refused() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let stream = json!({"name": "BAD", "subjects": ["bad.>"], "metadata": {"semaq.priority": "yes"}});
    let reply = client.request("$JS.API.STREAM.CREATE.BAD", stream.to_string().into()).await.unwrap();
    let body: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(body["error"]["err_code"], 10052, "{body}");
    assert!(body["error"]["description"].as_str().unwrap().contains("semaq.priority"), "{body}");

    let js = jetstream::new(client.clone());
    work_stream(&js, stream::RetentionPolicy::Limits, stream::StorageType::Memory).await;
    let consumer = json!({"stream_name": "WORK", "config": {"durable_name": "c", "ack_policy": "explicit",
        "metadata": {"semaq.priority": "sometimes"}}});
    let reply = client.request("$JS.API.CONSUMER.CREATE.WORK.c", consumer.to_string().into()).await.unwrap();
    let body: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert!(body["error"]["description"].as_str().unwrap().contains("semaq.priority"), "{body}");
    let names = js.get_stream("WORK").await.unwrap().consumer_names().try_collect::<Vec<_>>().await.unwrap();
    assert!(names.is_empty(), "nothing was created: {names:?}");
}
