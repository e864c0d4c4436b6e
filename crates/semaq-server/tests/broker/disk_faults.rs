//! A running server on a failing disk (issue 15), through the test-only
//! `disk-faults:<control file>` failpoint: writing `eio` to the control file makes every fsync
//! of the streams' stores fail, `enospc` every write, as a dying or full disk would.
//!
//! - A failed fsync: the publish gets a JetStream error, never an ack; the stream says why in
//!   stream info (`semaq.write_error`) and the log, refuses every later publish even once the
//!   disk is back, and keeps serving reads; after a restart every acknowledged message is there.
//! - A full disk: publishes get nats-server's 10047, reads go on, and publishes are taken again
//!   as soon as space returns; nothing acknowledged is lost.
//! - A full disk met by a commit taken aside (a `MSG.DELETE`, an L3 producer snapshot) while
//!   publishes wait behind the ingest's commit in flight: the reload drops them, and they get
//!   10047, never a PubAck. The race is lined up with the control file's `hold-one` (the next
//!   fsync, the ingest's commit, waits while the file says `holding`) and `enospc-once` (the
//!   next write fails; the word is then gone).
//! - A full disk met by an L3 producer snapshot an atomic batch's rollup needs: the batch is
//!   refused whole, the rollup message included.

use std::path::Path;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use semaq_testkit::SemaqServer;

/// Bound on one publish's ack.
const ACK_WAIT: Duration = Duration::from_secs(5);

pub(super) fn broker_on_faulty_disk(store: &Path, control: &Path) -> SemaqServer {
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

/// Every payload of stream `name` once the broker is killed and restarted on the same store.
async fn payloads_after_kill(broker: &mut SemaqServer, name: &str) -> Vec<String> {
    broker.kill();
    broker.restart();
    let js = jetstream::new(broker.client().await);
    payloads(&js.get_stream(name).await.unwrap()).await
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

    set_control(&control, "eio");
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

    set_control(&control, "enospc");
    for n in 4..=5 {
        let refused = publish(&js, "events.new", &format!("event-{n}")).await.unwrap_err();
        assert!(refused.contains("insufficient storage"), "refused with nats-server's 10047: {refused}");
    }
    // Reads go on while the disk is full.
    assert_eq!(&stream.get_raw_message(3).await.unwrap().payload[..], b"event-3");
    assert_eq!(payloads(&stream).await, ["event-1", "event-2", "event-3"], "nothing refused was stored");

    std::fs::remove_file(&control).unwrap();
    assert_eq!(publish(&js, "events.new", "event-6").await, Ok(4), "service resumes when space returns");

    assert_eq!(payloads_after_kill(&mut broker, "EVENTS").await, ["event-1", "event-2", "event-3", "event-6"]);
}

/// How the tests' publishes look: plain, or as an L3 producer's (headers, and a body the
/// stream's JSON Schema takes).
#[derive(Clone, Copy)]
enum Shape {
    Plain,
    Producer,
}

impl Shape {
    /// The body of publish `n`, named `name`, as `payloads` reads it back.
    fn body(self, name: &str, n: u64) -> String {
        match self {
            Shape::Plain => name.to_string(),
            Shape::Producer => serde_json::json!({"n": n, "note": name}).to_string(),
        }
    }

    /// Publishes `name` as producer `producer`'s sequence `n`; the ack to wait for.
    async fn publish(
        self,
        js: &jetstream::Context,
        subject: &str,
        (producer, n): (&str, u64),
        name: &str,
    ) -> async_nats::jetstream::context::PublishAckFuture {
        let mut headers = async_nats::HeaderMap::new();
        if let Shape::Producer = self {
            headers.insert("Semaq-Producer", producer);
            headers.insert("Semaq-Producer-Seq", n.to_string().as_str());
        }
        let body = self.body(name, n).into();
        js.publish_with_headers(subject.to_string(), headers, body).await.unwrap()
    }
}

/// Replaces the control file's text at once: a server polling it mid-write would read it
/// empty and release a held fsync.
pub(super) fn set_control(control: &Path, text: &str) {
    let next = control.with_extension("set");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, control).unwrap();
}

/// Waits (bounded) until the control file's text passes `done`.
pub(super) async fn wait_for_control(control: &Path, done: impl Fn(&str) -> bool, what: &str) {
    let deadline = Instant::now() + ACK_WAIT;
    while !done(&std::fs::read_to_string(control).unwrap_or_default()) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (bounded) until stream info shows `seq` stored (appended, maybe not yet committed).
async fn wait_for_last_seq(stream: &mut stream::Stream, seq: u64) {
    let deadline = Instant::now() + ACK_WAIT;
    while stream.info().await.unwrap().state.last_sequence < seq {
        assert!(Instant::now() < deadline, "message {seq} was never appended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An ack that may still come: the sequence, or the JetStream error's text.
pub(super) async fn ack_of(ack: async_nats::jetstream::context::PublishAckFuture) -> Result<u64, String> {
    match tokio::time::timeout(ACK_WAIT, ack).await {
        Ok(Ok(ack)) => Ok(ack.sequence),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err("no ack".to_string()),
    }
}

/// After `kept` (sequence 1, acknowledged): publishes `in-flight` and holds its commit's
/// fsync (`hold-one`), then `behind`, appended behind it meanwhile; returns their acks to come.
async fn pipeline_two(
    js: &jetstream::Context,
    stream: &mut stream::Stream,
    (control, subject): (&Path, &str),
    shape: Shape,
) -> (async_nats::jetstream::context::PublishAckFuture, async_nats::jetstream::context::PublishAckFuture) {
    assert_eq!(ack_of(shape.publish(js, subject, ("p", 1), "kept").await).await, Ok(1));
    set_control(control, "hold-one");
    let in_flight = shape.publish(js, subject, ("p", 2), "in-flight").await;
    wait_for_control(control, |text| text.trim() == "holding", "the commit's fsync to be held").await;
    let behind = shape.publish(js, subject, ("p", 3), "behind").await;
    wait_for_last_seq(stream, 3).await;
    (in_flight, behind)
}

/// With the fsync in flight held, runs `aside` (which must meet the full disk: the next write
/// fails), releases the fsync, and checks that every acknowledged publish is stored and every
/// dropped one got 10047; then that service resumes. Returns the stream's payloads.
async fn full_disk_aside<F: std::future::Future<Output = bool>>(
    js: &jetstream::Context,
    stream: &mut stream::Stream,
    (control, subject): (&Path, &str),
    shape: Shape,
    aside: impl FnOnce() -> F,
) -> (Vec<String>, Result<u64, String>) {
    let (in_flight, behind) = pipeline_two(js, stream, (control, subject), shape).await;
    set_control(control, "holding enospc-once");
    assert!(!aside().await, "the work aside met the full disk");
    wait_for_control(control, |text| !text.contains("enospc-once"), "the full disk to be met").await;
    std::fs::remove_file(control).unwrap();

    let (in_flight, behind) = (ack_of(in_flight).await, ack_of(behind).await);
    assert_eq!(in_flight, Ok(2), "the commit in flight was durable before the full disk");
    let mut expected = vec![shape.body("kept", 1), shape.body("in-flight", 2)];
    match &behind {
        Err(refused) => assert!(refused.contains("insufficient storage"), "refused with 10047: {refused}"),
        Ok(_) => expected.push(shape.body("behind", 3)),
    }
    assert_eq!(payloads(stream).await, expected, "every acknowledged publish is stored, no refused one");
    let after = shape.publish(js, subject, ("q", 1), "after").await;
    assert_eq!(ack_of(after).await, Ok(expected.len() as u64 + 1), "service resumes when space returns");
    expected.push(shape.body("after", 1));
    assert_eq!(payloads(stream).await, expected);
    (expected, behind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_behind_a_commit_in_flight_dropped_by_a_message_deletes_full_disk_get_10047_never_an_ack() {
    let store = tempfile::tempdir().unwrap();
    let control = store.path().join("disk-faults");
    let mut broker = broker_on_faulty_disk(&store.path().join("data"), &control);
    let js = jetstream::new(broker.client().await);
    let stream = file_stream(&js, "HOLES").await;
    // The delete commits aside: its write hands `behind` to the OS and meets the full disk.
    let delete = || async { tokio::time::timeout(ACK_WAIT, stream.delete_message(1)).await.expect("answered").is_ok() };
    let (expected, behind) =
        full_disk_aside(&js, &mut stream.clone(), (&control, "holes.new"), Shape::Plain, delete).await;
    assert!(behind.is_err(), "the publish the reload dropped was acknowledged: {behind:?}");

    assert_eq!(payloads_after_kill(&mut broker, "HOLES").await, expected, "and durable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_behind_a_commit_in_flight_dropped_by_an_l3_producer_snapshots_full_disk_get_10047_never_an_ack() {
    use super::exactly_once::{create_stream, l3_config, register_schema};
    let store = tempfile::tempdir().unwrap();
    let control = store.path().join("disk-faults");
    let mut broker = broker_on_faulty_disk(&store.path().join("data"), &control);
    let client = broker.client().await;
    register_schema(&client).await;
    let created = create_stream(&client, l3_config("ONCE", &["once.>"], serde_json::json!({}))).await;
    assert!(created["config"].is_object(), "{created}");
    let js = jetstream::new(client);
    let stream = js.get_stream("ONCE").await.unwrap();
    // Deleting `in-flight` needs the producer snapshot first (its entry is newer than the last
    // one), whose ticket, taken aside, hands `behind` to the OS and meets the full disk. (Should
    // the periodic snapshot have covered `behind` just before, it is durable and acknowledged.)
    let delete = || async { tokio::time::timeout(ACK_WAIT, stream.delete_message(2)).await.expect("answered").is_ok() };
    let (expected, _) = full_disk_aside(&js, &mut stream.clone(), (&control, "once.a"), Shape::Producer, delete).await;

    assert_eq!(payloads_after_kill(&mut broker, "ONCE").await, expected, "and durable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_whose_own_write_meets_the_full_disk_gets_10047_and_the_next_is_taken_once_space_returns() {
    let store = tempfile::tempdir().unwrap();
    let control = store.path().join("disk-faults");
    let broker = broker_on_faulty_disk(&store.path().join("data"), &control);
    let js = jetstream::new(broker.client().await);
    let stream = file_stream(&js, "LARGE").await;
    assert_eq!(publish(&js, "large.new", "small").await, Ok(1));

    // Larger than the store's write buffer: written to the OS by the append itself, which
    // meets the full disk with nothing waiting for a commit behind it.
    set_control(&control, "enospc-once");
    let large = "x".repeat(300 * 1024);
    let refused = publish(&js, "large.new", &large).await.unwrap_err();
    assert!(refused.contains("insufficient storage"), "refused with 10047: {refused}");
    wait_for_control(&control, |text| !text.contains("enospc-once"), "the full disk to be met").await;

    assert_eq!(publish(&js, "large.new", "after").await, Ok(2), "the report of the full disk does not stop the stream");
    assert_eq!(payloads(&stream).await, ["small", "after"]);
}

/// An L3 atomic batch whose last message rolls up and so needs a producer snapshot, which a
/// full disk refused: the batch is refused whole, the rollup message with it (it was stored
/// before its purge found the snapshot missing), and the message it would have purged stays.
/// The periodic snapshot (every second) may meet the fault first, or have covered q already,
/// so that the batch's own write meets it: the scenario is then tried again on a fresh stream,
/// a bounded number of times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l3_atomic_rollup_whose_snapshot_met_a_full_disk_is_refused_whole_rollup_included() {
    use super::exactly_once::{create_stream, event, l3_config, publish_seq, register_schema};
    const TRIES_MAX: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let (store, control) = (dir.path().join("data"), dir.path().join("disk-faults"));
    let broker = broker_on_faulty_disk(&store, &control);
    let client = broker.client().await;
    register_schema(&client).await;
    let batch_headers = |n: u64, last: bool| {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Semaq-Producer", "p");
        headers.insert("Semaq-Producer-Seq", n.to_string().as_str());
        headers.insert("Nats-Batch-Id", "rollup");
        headers.insert("Nats-Batch-Sequence", n.to_string().as_str());
        if last {
            headers.insert("Nats-Batch-Commit", "1");
            headers.insert("Nats-Rollup", "all");
        }
        headers
    };
    for attempt in 1..=TRIES_MAX {
        let (name, prefix) = (format!("ROLLFULL{attempt}"), format!("rollfull{attempt}"));
        let extra = serde_json::json!({"allow_rollup_hdrs": true, "allow_direct": true});
        let created = create_stream(&client, l3_config(&name, &[&format!("{prefix}.>")], extra)).await;
        assert!(created["config"].is_object(), "{created}");
        assert_eq!(publish_seq(&client, &format!("{prefix}.other"), "q", 1, 1).await["seq"], 1);
        let subject = format!("{prefix}.key");
        for n in 1..=2 {
            let staged = client.request_with_headers(subject.clone(), batch_headers(n, false), event(n)).await;
            assert!(staged.unwrap().payload.is_empty(), "a staged message gets an empty reply");
        }
        // What q's commit writes after its ack (the checkpoint) is written by now.
        tokio::time::sleep(Duration::from_millis(200)).await;
        set_control(&control, "enospc-once");
        let reply = client.request_with_headers(subject.clone(), batch_headers(3, true), event(3)).await.unwrap();
        let reply: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
        set_control(&control, "");
        let mut stream = jetstream::new(client.clone()).get_stream(&name).await.unwrap();
        let state = stream.info().await.unwrap().state.clone();
        if reply["error"].is_null() {
            // The periodic snapshot took the fault; the batch rolled the stream up.
            assert_eq!((reply["seq"].as_u64(), state.messages), (Some(4), 1), "{reply}");
            continue;
        }
        assert_eq!(state.messages, 1, "only q's message stays: {reply}");
        if reply["error"]["err_code"] == 10047 {
            // The periodic snapshot had covered q: the batch's own write met the full disk.
            continue;
        }
        assert_eq!(reply["error"]["err_code"], 10077, "{reply}");
        assert!(reply["error"]["description"].as_str().unwrap_or_default().contains("snapshot"), "{reply}");
        assert_eq!(stream.direct_get(1).await.unwrap().payload, event(1));
        for seq in 2..=4 {
            assert!(stream.direct_get(seq).await.is_err(), "message {seq} of the refused batch stayed: {reply}");
        }
        return;
    }
    panic!("the batch never met the full disk in {TRIES_MAX} tries");
}
