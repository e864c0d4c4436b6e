//! A client that stops reading is cut off without stalling anyone else.

use std::time::Duration;

use futures::StreamExt;
use semaq_testkit::{sync, wait_until_async, SemaqServer};

#[tokio::test]
async fn a_slow_consumer_is_disconnected_and_other_clients_are_unaffected() {
    let server = SemaqServer::with_config("max_pending: 256KB\n", &[]);
    // A subscriber that never reads: its socket buffers fill, then its pending bytes grow.
    let mut stalled = server.raw();
    stalled.send(b"CONNECT {}\r\nSUB firehose 1\r\nPING\r\n");
    stalled.expect("PONG");
    let healthy = server.client().await;
    let mut subscriber = healthy.subscribe("firehose").await.unwrap();
    sync(&healthy).await;
    let publisher = server.client().await;
    let payload = bytes::Bytes::from(vec![b'x'; 1024]);
    // The healthy subscriber keeps up: each chunk is received before the next is sent, so only
    // the stalled client can fall behind.
    const CHUNKS: usize = 400;
    const CHUNK_MESSAGES: usize = 100;
    for _ in 0..CHUNKS {
        for _ in 0..CHUNK_MESSAGES {
            publisher.publish("firehose", payload.clone()).await.unwrap();
        }
        for _ in 0..CHUNK_MESSAGES {
            let message = tokio::time::timeout(Duration::from_secs(10), subscriber.next()).await;
            assert!(matches!(message, Ok(Some(_))), "the healthy subscriber gets every message");
        }
    }
    wait_until_async("slow consumer counted", Duration::from_secs(5), || {
        let counted = server.http_json("/varz")["slow_consumers"] == 1;
        async move { counted }
    })
    .await;
    let closed = server.http_json("/connz?state=closed");
    let reasons: Vec<String> =
        closed["connections"].as_array().unwrap().iter().map(|c| c["reason"].as_str().unwrap().to_string()).collect();
    assert!(reasons.iter().any(|r| r.starts_with("Slow Consumer")), "{reasons:?}");
    drop(stalled);
}
