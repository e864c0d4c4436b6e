//! A running server on a failing disk (issue 15), through the test-only
//! `disk-faults:<control file>` failpoint: writing `eio` to the control file makes every fsync
//! of the streams' stores fail, `enospc` every write, as a dying or full disk would.
//!
//! - A failed fsync: the publish gets a JetStream error, never an ack; the stream says why in
//!   stream info (`semaq.write_error`) and the log, refuses every later publish even once the
//!   disk is back, and keeps serving reads; after a restart every acknowledged message is there.
//! - A full disk: publishes get nats-server's 10047, reads go on, and publishes are taken again
//!   as soon as space returns; nothing acknowledged is lost.

use std::path::Path;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use semaq_testkit::SemaqServer;

/// Bound on one publish's ack.
const ACK_WAIT: Duration = Duration::from_secs(5);

fn broker_on_faulty_disk(store: &Path, control: &Path) -> SemaqServer {
    SemaqServer::builder()
        .store(store)
        .no_monitoring()
        .arg("-js")
        .env("SEMAQ_FAILPOINT", format!("disk-faults:{}", control.display()))
        .start()
}

async fn file_stream(js: &jetstream::Context, name: &str) -> stream::Stream {
    let config = stream::Config {
        name: name.to_string(),
        subjects: vec![format!("{}.>", name.to_lowercase())],
        storage: stream::StorageType::File,
        ..Default::default()
    };
    js.create_stream(config).await.unwrap()
}

/// Publishes and waits for the ack: the sequence, or the JetStream error's code and text.
async fn publish(js: &jetstream::Context, subject: &str, payload: &str) -> Result<u64, String> {
    let ack = js.publish(subject.to_string(), payload.to_string().into()).await.map_err(|e| e.to_string())?;
    match tokio::time::timeout(ACK_WAIT, ack).await {
        Ok(Ok(ack)) => Ok(ack.sequence),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err("no ack".to_string()),
    }
}

/// Every payload in the stream, in order, read with a fresh ordered consumer.
async fn payloads(stream: &stream::Stream) -> Vec<String> {
    let expected = stream.get_info().await.unwrap().state.messages as usize;
    let consumer = stream.create_consumer(consumer::pull::OrderedConfig::default()).await.unwrap();
    let mut messages = consumer.messages().await.unwrap().take(expected);
    let mut payloads = Vec::new();
    while let Some(message) = tokio::time::timeout(ACK_WAIT, messages.next()).await.unwrap() {
        payloads.push(String::from_utf8(message.unwrap().payload.to_vec()).unwrap());
    }
    payloads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_stops_acks_reports_the_error_and_keeps_serving_reads() {
    let store = tempfile::tempdir().unwrap();
    let control = store.path().join("disk-faults");
    let mut broker = broker_on_faulty_disk(&store.path().join("data"), &control);
    let js = jetstream::new(broker.client().await);
    let mut stream = file_stream(&js, "ORDERS").await;
    for n in 1..=5 {
        assert_eq!(publish(&js, "orders.new", &format!("order-{n}")).await, Ok(n));
    }

    std::fs::write(&control, "eio").unwrap();
    let refused = publish(&js, "orders.new", "order-6").await;
    assert!(refused.is_err(), "a publish whose fsync failed was acknowledged: {refused:?}");
    let info = stream.info().await.unwrap().clone();
    let raw: serde_json::Value = serde_json::from_slice(
        &broker.client().await.request("$JS.API.STREAM.INFO.ORDERS", "".into()).await.unwrap().payload,
    )
    .unwrap();
    let reason = raw["semaq"]["write_error"].as_str().unwrap_or_default().to_string();
    assert!(!reason.is_empty(), "stream info names the write error: {raw}");
    assert!(broker.log_text().contains("critical write error"), "the log says it: {}", broker.log_text());

    // The disk is back, the stream is not: nothing more is acknowledged until a restart.
    std::fs::remove_file(&control).unwrap();
    assert!(publish(&js, "orders.new", "order-7").await.is_err());
    // Reads go on: a get and a consumer see the acknowledged messages.
    let first = stream.get_raw_message(1).await.unwrap();
    assert_eq!(&first.payload[..], b"order-1");
    let read = payloads(&stream).await;
    assert_eq!(&read[..5], ["order-1", "order-2", "order-3", "order-4", "order-5"]);
    assert!(info.state.messages >= 5);

    broker.kill();
    broker.restart();
    let js = jetstream::new(broker.client().await);
    let stream = js.get_stream("ORDERS").await.unwrap();
    let read = payloads(&stream).await;
    // Order 6 reached the OS before its fsync failed, so it may be there: like a publish whose
    // ack was lost. Order 7 was refused before it was stored.
    assert_eq!(&read[..5], ["order-1", "order-2", "order-3", "order-4", "order-5"]);
    assert!(!read.contains(&"order-7".to_string()), "a publish refused by a poisoned stream was stored: {read:?}");
    assert_eq!(publish(&js, "orders.new", "order-8").await, Ok(read.len() as u64 + 1), "a restart clears the error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_publishes_with_10047_and_service_resumes_when_space_returns() {
    let store = tempfile::tempdir().unwrap();
    let control = store.path().join("disk-faults");
    let mut broker = broker_on_faulty_disk(&store.path().join("data"), &control);
    let js = jetstream::new(broker.client().await);
    let stream = file_stream(&js, "EVENTS").await;
    for n in 1..=3 {
        assert_eq!(publish(&js, "events.new", &format!("event-{n}")).await, Ok(n));
    }

    std::fs::write(&control, "enospc").unwrap();
    for n in 4..=5 {
        let refused = publish(&js, "events.new", &format!("event-{n}")).await.unwrap_err();
        assert!(refused.contains("insufficient storage"), "refused with nats-server's 10047: {refused}");
    }
    // Reads go on while the disk is full.
    assert_eq!(&stream.get_raw_message(3).await.unwrap().payload[..], b"event-3");
    assert_eq!(payloads(&stream).await, ["event-1", "event-2", "event-3"], "nothing refused was stored");

    std::fs::remove_file(&control).unwrap();
    assert_eq!(publish(&js, "events.new", "event-6").await, Ok(4), "service resumes when space returns");

    broker.kill();
    broker.restart();
    let js = jetstream::new(broker.client().await);
    let stream = js.get_stream("EVENTS").await.unwrap();
    assert_eq!(payloads(&stream).await, ["event-1", "event-2", "event-3", "event-6"]);
}
