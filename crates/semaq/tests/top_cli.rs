//! `semaq top --once` against a real `semaq-server` after a scripted workload: one frame with
//! the stream, the latency objective's deliveries, the token load by model, and the agents.

mod support;

use async_nats::jetstream::{self, consumer, stream};
use async_nats::HeaderMap;
use futures::TryStreamExt;
use semaq_testkit::SemaqServer;
use serde_json::json;
use support::{ok, stderr_of, stdout_of, Semaq};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_frame_shows_streams_latency_tokens_and_agents() {
    let server = SemaqServer::start();
    let client = server.client().await;
    let js = jetstream::new(client.clone());
    js.create_stream(stream::Config { name: "EVENTS".into(), subjects: vec!["ai.>".into()], ..Default::default() })
        .await
        .unwrap();
    for _ in 0..4 {
        let mut headers = HeaderMap::new();
        headers.insert("Semaq-Model", "llama3-70b");
        headers.insert("Semaq-Tokens-In", "250");
        js.publish_with_headers("ai.chat", headers, "hi".into()).await.unwrap().await.unwrap();
    }
    let reader: consumer::PullConsumer = js
        .get_stream("EVENTS")
        .await
        .unwrap()
        .create_consumer(consumer::pull::Config { durable_name: Some("reader".into()), ..Default::default() })
        .await
        .unwrap();
    let got: Vec<_> = reader.fetch().max_messages(4).messages().await.unwrap().try_collect().await.unwrap();
    assert_eq!(got.len(), 4);
    let _inbox = client.subscribe("agents.scorer").await.unwrap();
    let beat = json!({"agent_id": "scorer", "intents": ["score"], "inbox": "agents.scorer", "capacity": 2});
    client.request("$SEMAQ.AGENT.HB", beat.to_string().into()).await.unwrap();

    let http = format!("http://{}", server.http_addr());
    let server = std::sync::Arc::new(server);
    let cli = server.clone();
    let frame = tokio::task::spawn_blocking(move || stdout_of(&ok(cli.semaq(&["top", "--http", &http, "--once"]))))
        .await
        .unwrap();
    let line_with = |needle: &str| {
        frame.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no {needle:?} in\n{frame}"))
    };
    assert!(line_with("EVENTS").contains("L1"), "{frame}");
    assert!(line_with("latency objective").contains("15.00 ms"), "{frame}");
    let deliveries = frame.lines().filter(|l| l.contains("EVENTS")).any(|l| l.split_whitespace().any(|w| w == "4"));
    assert!(deliveries, "the stream's 4 messages and 4 deliveries show: {frame}");
    assert!(line_with("llama3-70b").contains("1000"), "{frame}");
    let agent = line_with("scorer");
    assert!(agent.contains("score") && agent.contains("1.00"), "{frame}");
}

#[test]
fn an_unreachable_monitoring_port_is_a_clear_error() {
    let server = SemaqServer::start();
    let failed = server.semaq(&["top", "--http", "http://127.0.0.1:1", "--once"]);
    assert!(!failed.status.success());
    assert!(stderr_of(&failed).contains("cannot connect to http://127.0.0.1:1"), "{}", stderr_of(&failed));
    let https = server.semaq(&["top", "--http", "https://127.0.0.1:8222", "--once"]);
    assert!(stderr_of(&https).contains("only http://"), "{}", stderr_of(&https));
}
