//! End-to-end latency at `/api/latency`: store time to first delivery per stream and subject
//! prefix, and the share within the objective (`latency_objective`).

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream, AckKind};
use futures::TryStreamExt;
use semaq_testkit::{http_get_json_status as http_get, SemaqServer};

#[tokio::test]
async fn first_deliveries_are_measured_per_stream_and_subject_and_judged_against_the_objective() {
    let server = SemaqServer::with_config("latency_objective: \"5ms\"\n", &[]);
    let js = jetstream::new(server.client().await);
    js.create_stream(stream::Config { name: "EVENTS".into(), subjects: vec!["ai.>".into()], ..Default::default() })
        .await
        .unwrap();
    for n in 0..6 {
        let subject = if n % 2 == 0 { "ai.chat.one" } else { "ai.embed.two" };
        js.publish(subject, "x".into()).await.unwrap().await.unwrap();
    }
    // The backlog waits far longer than the objective before anyone consumes it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stream = js.get_stream("EVENTS").await.unwrap();
    let consumer: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config { durable_name: Some("late".into()), ..Default::default() })
        .await
        .unwrap();
    let messages: Vec<_> = consumer.fetch().max_messages(6).messages().await.unwrap().try_collect().await.unwrap();
    assert_eq!(messages.len(), 6);
    messages[0].ack_with(AckKind::Nak(None)).await.unwrap();
    for message in &messages[1..] {
        message.ack().await.unwrap();
    }
    let again: Vec<_> = consumer.fetch().max_messages(1).messages().await.unwrap().try_collect().await.unwrap();
    assert_eq!(again.len(), 1, "the nak'd message comes again");

    let (status, report) = http_get(server.http_addr(), "/api/latency");
    assert_eq!(status, 200);
    assert_eq!(report["objective_us"], 5_000);
    let stream = &report["streams"][0];
    assert_eq!(stream["key"], "EVENTS");
    assert_eq!(stream["count"], 6, "first deliveries only: {report}");
    assert_eq!(stream["within_objective"], 0.0, "every delivery waited past 5 ms: {report}");
    assert!(stream["p50_us"].as_u64().unwrap() >= 100_000, "{report}");
    let subjects: Vec<(&str, u64)> = report["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["key"].as_str().unwrap(), s["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(subjects, vec![("ai.chat", 3), ("ai.embed", 3)]);

    let (_, metrics) = semaq_testkit::http_get(server.http_addr(), "/metrics", &[]);
    let has = |line: &str| metrics.lines().any(|l| l == line);
    assert!(has(r#"semaq_stream_delivery_latency_seconds_count{stream="EVENTS"} 6"#), "{metrics}");
    assert!(has(r#"semaq_stream_delivery_within_objective_ratio{stream="EVENTS"} 0.0"#), "{metrics}");
    assert!(has("semaq_delivery_latency_objective_seconds 0.005"), "{metrics}");
}

#[tokio::test]
async fn an_objective_that_is_not_a_duration_is_refused_at_start() {
    let output = SemaqServer::builder().config("latency_objective: \"soon\"\n").output();
    assert!(!output.status.success());
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("latency_objective"), "{log}");
}
