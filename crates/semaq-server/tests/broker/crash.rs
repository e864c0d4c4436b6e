//! Crash safety and on-disk damage, against the real binary.
//!
//! - SIGKILL while a client has up to 256 acknowledged publishes in flight, at several points
//!   (after ~500 acks, after ~3,000 more, and at a random time), restarting on the same store
//!   each time: every acknowledged message must come back exactly once, at the sequence its ack
//!   named, with sequences contiguous from 1; the only extra messages allowed are unacknowledged
//!   ones from the tail that was in flight. SIGKILL leaves the OS page cache alone, so this checks
//!   that an ack is sent only after the batch left the process (and never out of order), not that
//!   `fsync` reaches the disk; the store's own tests simulate losing unsynced bytes.
//! - With `semaq.sync` set to an interval or `never`, acks must still survive SIGKILL (an ack
//!   then means "written to the OS"). Ignored: the server acks from its user-space write buffer.
//! - A durable pull consumer resumes from its confirmed (double-acked) position after SIGKILL.
//!   Consumer state is saved every 100 ms (`CONSUMER_STATE_SAVE_INTERVAL`), so an ack confirmed
//!   less than that before a crash may be lost and its message redelivered; the strict check
//!   waits until the consumer's state file holds the last confirmed ack before killing. Acks
//!   sent later (unconfirmed, or not saved yet) may or may not survive: those messages may or
//!   may not be redelivered.
//! - Deletes and purges survive SIGKILL. So do a work queue's removals of double-acked
//!   messages: made durable only on the stream's next tick or commit, they are redone at start
//!   from the consumer's saved state when a crash came first.
//! - A flipped byte in the middle of a segment and a torn segment tail, written while the server
//!   is stopped: the server starts, serves what is intact, reports the damage (stream info's
//!   `semaq.corruption` and the log), and the stream keeps taking publishes. A durable consumer
//!   that had already passed the lost tail gets the new messages that reuse those sequences.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::IntoFuture;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use semaq_testkit::{wait_until_async, SemaqServer};
use tokio::sync::watch;

/// Outstanding publish acks the publisher keeps in flight.
const ACK_WINDOW: usize = 256;
/// How long a publish ack may take before the publisher gives up on it (after a kill).
const ACK_TIMEOUT: Duration = Duration::from_secs(2);
/// Segment header size (`limits::segment_header` in semaq-store).
const SEGMENT_HEADER_BYTES: usize = 24;

/// Starts a `semaq-server` with JetStream on `store`, a directory the test owns, so it can be
/// restarted on it.
fn start_on(store: &Path) -> SemaqServer {
    SemaqServer::builder().store(store).arg("-js").start()
}

async fn jetstream(broker: &SemaqServer) -> jetstream::Context {
    jetstream::new(broker.client().await)
}

fn file_stream(name: &str, subjects: &[&str]) -> stream::Config {
    stream::Config {
        name: name.to_string(),
        subjects: subjects.iter().map(|s| s.to_string()).collect(),
        storage: stream::StorageType::File,
        ..Default::default()
    }
}

/// The raw `STREAM.INFO` response, to see fields async-nats does not model (`semaq`).
async fn raw_stream_info(client: &async_nats::Client, name: &str) -> serde_json::Value {
    let reply = client.request(format!("$JS.API.STREAM.INFO.{name}"), "".into()).await.expect("stream info");
    serde_json::from_slice(&reply.payload).expect("stream info json")
}

/// Reads sequences `1..=last` with `STREAM.MSG.GET`, 32 at a time: `None` where there is no message.
async fn read_all(js: &jetstream::Context, name: &str, last: u64) -> Vec<(u64, Option<Vec<u8>>)> {
    let stream = js.get_stream(name).await.expect("get stream");
    let stream = &stream;
    futures::stream::iter(1..=last)
        .map(|seq| async move {
            match stream.get_raw_message(seq).await {
                Ok(message) => {
                    assert_eq!(message.sequence, seq, "MSG.GET {seq} answered with another sequence");
                    (seq, Some(message.payload.to_vec()))
                }
                Err(_) => (seq, None),
            }
        })
        .buffered(32)
        .collect()
        .await
}

// ---------------------------------------------------------------------------------------------
// Acknowledged publishes across SIGKILL
// ---------------------------------------------------------------------------------------------

/// A publish's ack, awaited later.
type AckFuture = <PublishAckFuture as IntoFuture>::IntoFuture;

/// What one publishing run saw.
#[derive(Debug, Default)]
struct Run {
    /// The counters this run published (payload `n:<counter>`), a contiguous range.
    first_counter: u64,
    end_counter: u64,
    /// Counter → sequence, for every publish whose ack arrived.
    acked: BTreeMap<u64, u64>,
    /// Errors seen before the kill (there should be none).
    errors_before_kill: Vec<String>,
}

fn payload(counter: u64) -> bytes::Bytes {
    // Padded so records have some size; the counter is what the checks read back.
    format!("n:{counter:010}:{}", "x".repeat(64)).into()
}

fn counter_of(payload: &[u8]) -> u64 {
    let text = std::str::from_utf8(payload).expect("utf-8 payload");
    text.split(':').nth(1).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("foreign payload {text:?}"))
}

/// Publishes `first_counter..` with up to [`ACK_WINDOW`] acks outstanding until `stop` is set,
/// then waits (bounded) for the acks still in flight.
async fn publish_until_stopped(
    js: jetstream::Context,
    subject: &'static str,
    first_counter: u64,
    mut stop: watch::Receiver<bool>,
    acked_count: Arc<AtomicU64>,
) -> Run {
    let mut run = Run { first_counter, end_counter: first_counter, ..Run::default() };
    let mut outstanding: VecDeque<(u64, AckFuture)> = VecDeque::new();
    let settle = |run: &mut Run, counter: u64, outcome: Result<u64, String>, stopped: bool| match outcome {
        Ok(seq) => {
            run.acked.insert(counter, seq);
            acked_count.fetch_add(1, Ordering::SeqCst);
        }
        Err(error) if !stopped => run.errors_before_kill.push(format!("counter {counter}: {error}")),
        Err(_) => {}
    };
    let stopped = |stop: &watch::Receiver<bool>| *stop.borrow();
    while !stopped(&stop) {
        if outstanding.len() >= ACK_WINDOW {
            let (counter, mut ack) = outstanding.pop_front().unwrap();
            let outcome = tokio::select! {
                outcome = tokio::time::timeout(ACK_TIMEOUT, &mut ack) => match outcome {
                    Ok(Ok(ack)) => Ok(ack.sequence),
                    Ok(Err(error)) => Err(error.to_string()),
                    Err(_) => Err("ack timed out".to_string()),
                },
                _ = stop.wait_for(|stop| *stop) => {
                    // Killed while waiting: this ack joins the others still in flight.
                    outstanding.push_front((counter, ack));
                    break;
                }
            };
            settle(&mut run, counter, outcome, stopped(&stop));
            continue;
        }
        let counter = run.end_counter;
        run.end_counter += 1;
        match tokio::time::timeout(ACK_TIMEOUT, js.publish(subject, payload(counter))).await {
            Ok(Ok(ack)) => outstanding.push_back((counter, ack.into_future())),
            Ok(Err(error)) => settle(&mut run, counter, Err(error.to_string()), stopped(&stop)),
            Err(_) => settle(&mut run, counter, Err("publish timed out".into()), stopped(&stop)),
        }
    }
    // Acks that arrived before the kill are already in their futures; the rest time out.
    let remaining: Vec<_> = outstanding.into_iter().collect();
    let outcomes =
        futures::future::join_all(remaining.into_iter().map(|(counter, ack)| async move {
            (counter, tokio::time::timeout(Duration::from_millis(500), ack).await)
        }))
        .await;
    for (counter, outcome) in outcomes {
        if let Ok(Ok(ack)) = outcome {
            settle(&mut run, counter, Ok(ack.sequence), true);
        }
    }
    run
}

/// When to SIGKILL a publishing run.
#[derive(Debug, Clone, Copy)]
enum KillPoint {
    /// Once this many acks arrived.
    AfterAcks(u64),
    /// After this long, whatever was acked.
    After(Duration),
}

/// Publishes against a fresh server on `store` and SIGKILLs it at `kill`.
async fn publish_and_kill(store: &Path, first_counter: u64, kill: KillPoint) -> Run {
    let mut broker = start_on(store);
    let js = jetstream(&broker).await;
    let (stop, stopped) = watch::channel(false);
    let acked = Arc::new(AtomicU64::new(0));
    let publisher = tokio::spawn(publish_until_stopped(js.clone(), "crash.pub", first_counter, stopped, acked.clone()));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(20);
    loop {
        let due = match kill {
            KillPoint::AfterAcks(count) => acked.load(Ordering::SeqCst) >= count,
            KillPoint::After(delay) => started.elapsed() >= delay,
        };
        if due {
            break;
        }
        assert!(Instant::now() < deadline, "{kill:?} not reached in 20 s ({} acks)", acked.load(Ordering::SeqCst));
        assert!(!publisher.is_finished(), "publisher stopped early");
        // A bounded poll (the deadline above), every 1 ms so the kill lands close to its point.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let acked_at_kill = acked.load(Ordering::SeqCst);
    broker.kill();
    let killed_after = started.elapsed();
    stop.send_replace(true);
    let run = tokio::time::timeout(Duration::from_secs(10), publisher).await.expect("publisher ends").expect("join");
    eprintln!(
        "crash: {kill:?}: killed after {killed_after:?} at {acked_at_kill} acks; published {} (counters {}..{}), acked {}",
        run.end_counter - run.first_counter,
        run.first_counter,
        run.end_counter,
        run.acked.len()
    );
    assert!(run.errors_before_kill.is_empty(), "publish errors before the kill: {:?}", run.errors_before_kill);
    run
}

/// Restarts on `store` and checks every run so far against what the stream holds.
async fn check_after_restart(store: &Path, runs: &[Run]) -> SemaqServer {
    let broker = start_on(store);
    let js = jetstream(&broker).await;
    let mut stream = js.get_stream("CRASH").await.expect("stream restored after SIGKILL");
    let state = stream.info().await.expect("stream info").state.clone();
    assert_eq!(state.first_sequence, 1, "{state:?}");
    assert_eq!(state.messages, state.last_sequence, "sequences contiguous from 1: {state:?}");
    let stored = read_all(&js, "CRASH", state.last_sequence).await;
    let mut counters = Vec::with_capacity(stored.len());
    for (seq, payload) in &stored {
        let payload = payload.as_ref().unwrap_or_else(|| panic!("seq {seq} missing below last_seq {state:?}"));
        counters.push(counter_of(payload));
    }
    for pair in counters.windows(2) {
        assert!(pair[0] < pair[1], "counters out of order or duplicated: {} then {}", pair[0], pair[1]);
    }
    let position: BTreeMap<u64, u64> = counters.iter().enumerate().map(|(i, c)| (*c, i as u64 + 1)).collect();
    for run in runs {
        for (counter, seq) in &run.acked {
            assert_eq!(
                position.get(counter),
                Some(seq),
                "acked counter {counter} (ack seq {seq}) is not at its sequence after restart"
            );
        }
        let last_acked = run.acked.keys().next_back().copied().unwrap_or(0);
        let tail: Vec<u64> = position
            .keys()
            .filter(|c| (run.first_counter..run.end_counter).contains(*c) && !run.acked.contains_key(*c))
            .copied()
            .collect();
        for counter in &tail {
            assert!(*counter > last_acked, "unacked counter {counter} stored before acked counter {last_acked}");
        }
        eprintln!(
            "crash: run {}..{}: {} acked all present; {} unacked tail messages survived",
            run.first_counter,
            run.end_counter,
            run.acked.len(),
            tail.len()
        );
    }
    assert!(
        position.keys().all(|c| runs.iter().any(|r| (r.first_counter..r.end_counter).contains(c))),
        "a stored message no run published"
    );
    broker
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_acked_publishes_survive_repeated_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    {
        let broker = start_on(&store);
        let js = jetstream(&broker).await;
        js.create_stream(file_stream("CRASH", &["crash.>"])).await.expect("create stream");
    }
    let delay = Duration::from_millis(rand::random_range(20..400));
    let kill_points = [KillPoint::AfterAcks(500), KillPoint::AfterAcks(3_000), KillPoint::After(delay)];
    let mut runs: Vec<Run> = Vec::new();
    let mut next_counter = 1;
    for kill in kill_points {
        let run = publish_and_kill(&store, next_counter, kill).await;
        next_counter = run.end_counter;
        runs.push(run);
        drop(check_after_restart(&store, &runs).await);
    }
    // After the last crash the stream continues with the next sequence.
    let broker = check_after_restart(&store, &runs).await;
    let js = jetstream(&broker).await;
    let last = js.get_stream("CRASH").await.unwrap().info().await.unwrap().state.last_sequence;
    let ack = js.publish("crash.pub", payload(next_counter)).await.unwrap().await.expect("publish after crashes");
    assert_eq!(ack.sequence, last + 1);
}

// ---------------------------------------------------------------------------------------------
// A durable consumer across SIGKILL
// ---------------------------------------------------------------------------------------------

async fn pull_batch(consumer: &consumer::PullConsumer, count: usize) -> Vec<jetstream::Message> {
    let mut batch =
        consumer.batch().max_messages(count).expires(Duration::from_millis(1_000)).messages().await.expect("batch");
    let mut messages = Vec::new();
    while let Some(message) = batch.next().await {
        messages.push(message.expect("pulled message"));
        if messages.len() == count {
            break;
        }
    }
    messages
}

fn stream_seq(message: &jetstream::Message) -> u64 {
    message.info().expect("ack subject").stream_sequence
}

#[tokio::test]
async fn crash_durable_consumer_resumes_from_confirmed_acks() {
    const TOTAL: u64 = 200;
    const CONFIRMED: u64 = 50;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut broker = start_on(&store);
    let js = jetstream(&broker).await;
    let stream = js.create_stream(file_stream("CONS", &["cons.>"])).await.unwrap();
    let mut acks = Vec::new();
    for i in 1..=TOTAL {
        acks.push(js.publish("cons.job", payload(i)).await.unwrap());
    }
    for ack in acks {
        ack.await.unwrap();
    }
    let config = consumer::pull::Config {
        durable_name: Some("worker".into()),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: Duration::from_secs(1),
        ..Default::default()
    };
    let worker: consumer::PullConsumer = stream.create_consumer(config).await.unwrap();
    let mut confirmed = 0;
    while confirmed < CONFIRMED {
        for message in pull_batch(&worker, (CONFIRMED - confirmed) as usize).await {
            confirmed += 1;
            assert_eq!(stream_seq(&message), confirmed);
            message.double_ack().await.expect("double ack confirmed");
        }
    }
    // The confirmed acks are on disk once the consumer's state file holds them (it is saved
    // every 100 ms and replaced atomically).
    let state_file = store.join("jetstream/streams/CONS/consumers/worker/state.json");
    wait_until_async("the confirmed acks saved in the consumer's state file", Duration::from_secs(5), || {
        let saved = std::fs::read(&state_file).ok().and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
        let floor = saved.and_then(|state| state["ack_floor_stream_seq"].as_u64()).unwrap_or(0);
        async move { floor >= CONFIRMED }
    })
    .await;
    // Acked without confirmation, then delivered and left unacked: either may survive the crash.
    let unconfirmed = pull_batch(&worker, 10).await;
    for message in &unconfirmed {
        message.ack().await.unwrap();
    }
    let unacked = pull_batch(&worker, 5).await;
    assert_eq!(unconfirmed.len() + unacked.len(), 15);
    let last_touched = stream_seq(unacked.last().unwrap());
    assert_eq!(last_touched, CONFIRMED + 15);
    broker.kill();
    drop(broker);

    let broker = start_on(&store);
    let js = jetstream(&broker).await;
    let stream = js.get_stream("CONS").await.expect("stream restored");
    let mut worker: consumer::PullConsumer = stream.get_consumer("worker").await.expect("durable consumer restored");
    let info = worker.info().await.unwrap().clone();
    assert!(
        (CONFIRMED..=CONFIRMED + 10).contains(&info.ack_floor.stream_sequence),
        "ack floor after restart: {:?} (confirmed {CONFIRMED})",
        info.ack_floor
    );
    let mut seen = BTreeSet::new();
    let mut redelivered = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(CONFIRMED + 11..=TOTAL).all(|seq| seen.contains(&seq)) {
        assert!(Instant::now() < deadline, "not everything after the confirmed acks came back: seen {seen:?}");
        for message in pull_batch(&worker, 100).await {
            let seq = stream_seq(&message);
            assert!(seq > CONFIRMED, "seq {seq} redelivered though its ack was confirmed before the crash");
            assert_eq!(counter_of(&message.payload), seq);
            if !seen.insert(seq) {
                redelivered.push(seq);
            }
            message.ack().await.unwrap();
        }
    }
    eprintln!(
        "crash: consumer resumed at ack floor {}; unconfirmed acks redelivered: {:?}; repeats {redelivered:?}",
        info.ack_floor.stream_sequence,
        (CONFIRMED + 1..=CONFIRMED + 10).filter(|s| seen.contains(s)).collect::<Vec<_>>()
    );
    assert!(seen.iter().all(|seq| *seq <= TOTAL));
}

// ---------------------------------------------------------------------------------------------
// Damage written while the server is stopped
// ---------------------------------------------------------------------------------------------

/// Creates stream `name` on a fresh store, publishes `count` messages, stops with SIGTERM, and
/// returns the store and the stream's only segment log.
async fn stream_on_disk(dir: &Path, name: &str, count: u64) -> (PathBuf, PathBuf) {
    let store = dir.join("store");
    let mut broker = start_on(&store);
    let js = jetstream(&broker).await;
    let subject = format!("{}.msg", name.to_lowercase());
    js.create_stream(file_stream(name, &[&format!("{}.>", name.to_lowercase())])).await.unwrap();
    let mut acks = Vec::new();
    for i in 1..=count {
        acks.push(js.publish(subject.clone(), payload(i)).await.unwrap());
    }
    for (i, ack) in acks.into_iter().enumerate() {
        assert_eq!(ack.await.unwrap().sequence, i as u64 + 1);
    }
    drop(js);
    assert_eq!(broker.terminate(), Some(0), "clean exit after SIGTERM");
    let msgs = store.join("jetstream").join("streams").join(name).join("msgs");
    let logs: Vec<PathBuf> = std::fs::read_dir(&msgs)
        .unwrap_or_else(|e| panic!("{}: {e}", msgs.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "log"))
        .collect();
    assert_eq!(logs.len(), 1, "one (active) segment expected: {logs:?}");
    (store, logs[0].clone())
}

/// Offset and length of every record in a segment log (see docs/design.md, "Segment log").
fn record_spans(log: &[u8]) -> Vec<(usize, usize)> {
    assert_eq!(&log[..4], b"SQLG", "segment magic");
    let mut spans = Vec::new();
    let mut offset = SEGMENT_HEADER_BYTES;
    while offset + 4 <= log.len() {
        let length = u32::from_le_bytes(log[offset..offset + 4].try_into().unwrap()) as usize;
        assert!(length >= 32 && offset + length <= log.len(), "record at {offset} has length {length}");
        let seq = u64::from_le_bytes(log[offset + 8..offset + 16].try_into().unwrap());
        assert_eq!(seq, spans.len() as u64 + 1, "record at {offset}");
        spans.push((offset, length));
        offset += length;
    }
    assert_eq!(offset, log.len(), "log ends on a record boundary");
    spans
}

#[tokio::test]
async fn crash_flipped_byte_in_a_segment_is_reported_and_the_rest_served() {
    const COUNT: u64 = 1_000;
    const DAMAGED: u64 = 500;
    let dir = tempfile::tempdir().unwrap();
    let (store, log_path) = stream_on_disk(dir.path(), "DAMAGE", COUNT).await;
    let mut log = std::fs::read(&log_path).unwrap();
    let spans = record_spans(&log);
    assert_eq!(spans.len() as u64, COUNT);
    let (offset, length) = spans[DAMAGED as usize - 1];
    log[offset + length / 2] ^= 0x5a;
    std::fs::write(&log_path, &log).unwrap();

    for restart in 0..2 {
        let mut broker = start_on(&store);
        let client = broker.client().await;
        let info = raw_stream_info(&client, "DAMAGE").await;
        assert!(info.get("error").is_none(), "stream unavailable after damage: {info}");
        let corruption = info["semaq"]["corruption"].as_str().unwrap_or_else(|| panic!("no semaq.corruption: {info}"));
        assert!(!corruption.is_empty());
        assert_eq!(info["state"]["first_seq"], 1, "{info}");
        assert_eq!(info["state"]["last_seq"], COUNT + restart, "{info}");
        assert_eq!(info["state"]["messages"], COUNT - 1 + restart, "only the damaged record is lost: {info}");
        let log_text = broker.log_text();
        assert!(log_text.contains("damaged"), "damage not logged:\n{log_text}");
        let js = jetstream::new(client.clone());
        let stored = read_all(&js, "DAMAGE", COUNT).await;
        for (seq, payload) in &stored {
            if *seq == DAMAGED {
                assert!(payload.is_none(), "damaged seq {seq} served");
                continue;
            }
            let payload = payload.as_ref().unwrap_or_else(|| panic!("intact seq {seq} not served"));
            assert_eq!(counter_of(payload), *seq);
        }
        if restart == 0 {
            eprintln!("crash: corruption reported as {corruption:?}");
            let ack = js.publish("damage.msg", payload(COUNT + 1)).await.unwrap().await.expect("publish after damage");
            assert_eq!(ack.sequence, COUNT + 1);
        }
        drop(js);
        drop(client);
        assert_eq!(broker.terminate(), Some(0), "clean exit after SIGTERM");
    }
}

#[tokio::test]
async fn crash_torn_segment_tail_is_cut_and_the_stream_continues() {
    const COUNT: u64 = 1_000;
    const TORN: u64 = 700;
    let dir = tempfile::tempdir().unwrap();
    let (store, log_path) = stream_on_disk(dir.path(), "TORN", COUNT).await;
    let log = std::fs::read(&log_path).unwrap();
    let spans = record_spans(&log);
    let (offset, length) = spans[TORN as usize - 1];
    let file = std::fs::OpenOptions::new().write(true).open(&log_path).unwrap();
    file.set_len((offset + length / 2) as u64).unwrap();
    drop(file);

    let mut broker = start_on(&store);
    let js = jetstream(&broker).await;
    let mut stream = js.get_stream("TORN").await.expect("stream available after a torn tail");
    let state = stream.info().await.unwrap().state.clone();
    assert_eq!((state.first_sequence, state.last_sequence, state.messages), (1, TORN - 1, TORN - 1), "{state:?}");
    for (seq, payload) in read_all(&js, "TORN", TORN - 1).await {
        let payload = payload.unwrap_or_else(|| panic!("seq {seq} before the cut not served"));
        assert_eq!(counter_of(&payload), seq);
    }
    let ack = js.publish("torn.msg", payload(TORN)).await.unwrap().await.expect("publish after the cut");
    assert_eq!(ack.sequence, TORN, "next sequence after the cut");
    // The appended record landed on a clean boundary: it survives a crash and a rescan.
    broker.kill();
    drop((js, stream));
    drop(broker);
    let broker = start_on(&store);
    let js = jetstream(&broker).await;
    let state = js.get_stream("TORN").await.unwrap().info().await.unwrap().state.clone();
    assert_eq!((state.last_sequence, state.messages), (TORN, TORN), "{state:?}");
    let stored = read_all(&js, "TORN", TORN).await;
    assert_eq!(counter_of(stored[TORN as usize - 1].1.as_deref().expect("new message after restart")), TORN);
    let info = raw_stream_info(&broker.client().await, "TORN").await;
    eprintln!("crash: after a torn tail, semaq = {}", info["semaq"]);
}

#[tokio::test]
async fn crash_consumer_past_a_torn_tail_gets_the_messages_that_reuse_its_sequences() {
    const COUNT: u64 = 300;
    const TORN: u64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut broker = start_on(&store);
    let js = jetstream(&broker).await;
    let stream = js.create_stream(file_stream("TORNC", &["tornc.>"])).await.unwrap();
    for i in 1..=COUNT {
        js.publish("tornc.msg", payload(i)).await.unwrap().await.unwrap();
    }
    let worker: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some("worker".into()),
            ack_wait: Duration::from_secs(1),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut done = 0;
    while done < COUNT {
        for message in pull_batch(&worker, 100).await {
            message.double_ack().await.unwrap();
            done += 1;
        }
    }
    drop((js, stream, worker));
    assert_eq!(broker.terminate(), Some(0), "clean exit after SIGTERM");
    drop(broker);
    let log_path = store.join("jetstream/streams/TORNC/msgs/00000000000000000001.log");
    let spans = record_spans(&std::fs::read(&log_path).unwrap());
    let (offset, length) = spans[TORN as usize - 1];
    std::fs::OpenOptions::new().write(true).open(&log_path).unwrap().set_len((offset + length / 2) as u64).unwrap();

    let broker = start_on(&store);
    let js = jetstream(&broker).await;
    let ack = js.publish("tornc.msg", payload(TORN)).await.unwrap().await.unwrap();
    assert_eq!(ack.sequence, TORN);
    let stream = js.get_stream("TORNC").await.unwrap();
    let mut worker: consumer::PullConsumer = stream.get_consumer("worker").await.unwrap();
    let info = worker.info().await.unwrap().clone();
    eprintln!(
        "crash: consumer past the cut: delivered {:?}, ack floor {:?}, num_pending {}",
        info.delivered, info.ack_floor, info.num_pending
    );
    let delivered = pull_batch(&worker, 1).await;
    assert_eq!(
        delivered.iter().map(stream_seq).collect::<Vec<_>>(),
        vec![TORN],
        "the message stored at seq {TORN} after the cut never reaches the consumer (info {info:?})"
    );
}

/// With `semaq.sync` set to an interval (or `never`), an ack promises the message was written to
/// the OS (`SyncPolicy::Interval` in stream.rs), so a process crash, which leaves the page cache
/// alone, must not lose it.
async fn acks_survive_sigkill_with_sync(policy: &str) {
    const COUNT: u64 = 500;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut broker = start_on(&store);
    let js = jetstream(&broker).await;
    let mut config = file_stream("LAZY", &["lazy.>"]);
    config.metadata.insert("semaq.sync".into(), policy.into());
    js.create_stream(config).await.unwrap();
    let mut acks = Vec::new();
    for i in 1..=COUNT {
        acks.push(js.publish("lazy.msg", payload(i)).await.unwrap());
    }
    for (i, ack) in acks.into_iter().enumerate() {
        assert_eq!(ack.await.unwrap().sequence, i as u64 + 1);
    }
    broker.kill();
    drop((js, broker));
    let broker = start_on(&store);
    let js = jetstream(&broker).await;
    let state = js.get_stream("LAZY").await.unwrap().info().await.unwrap().state.clone();
    assert_eq!(
        (state.messages, state.last_sequence),
        (COUNT, COUNT),
        "semaq.sync={policy}: acknowledged messages lost to SIGKILL"
    );
}

#[tokio::test]
async fn crash_acks_survive_sigkill_with_interval_sync() {
    acks_survive_sigkill_with_sync("10s").await;
}

#[tokio::test]
async fn crash_acks_survive_sigkill_with_sync_never() {
    acks_survive_sigkill_with_sync("never").await;
}

#[tokio::test]
async fn crash_deletes_and_workqueue_acks_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut broker = start_on(&store);
    let js = jetstream(&broker).await;
    js.create_stream(file_stream("EDITS", &["edits.>"])).await.unwrap();
    let mut work = file_stream("WORK", &["work.>"]);
    work.retention = stream::RetentionPolicy::WorkQueue;
    let work = js.create_stream(work).await.unwrap();
    for i in 1..=20 {
        js.publish("edits.x", payload(i)).await.unwrap().await.unwrap();
        js.publish("work.job", payload(i)).await.unwrap().await.unwrap();
    }
    let edits = js.get_stream("EDITS").await.unwrap();
    assert!(edits.delete_message(5).await.unwrap());
    let purged = edits.purge().sequence(3).await.unwrap();
    assert_eq!(purged.purged, 2);
    let worker: consumer::PullConsumer = work
        .create_consumer(consumer::pull::Config { durable_name: Some("w".into()), ..Default::default() })
        .await
        .unwrap();
    let taken = pull_batch(&worker, 10).await;
    assert_eq!(taken.len(), 10);
    for message in &taken {
        message.double_ack().await.unwrap();
    }
    // No wait: the removals may not be durable yet (the stream syncs them on its next tick),
    // but the confirmed acks are, and the start removes what they acknowledged.
    broker.kill();
    drop((js, edits, work, worker, taken, broker));

    let broker = start_on(&store);
    let js = jetstream(&broker).await;
    let mut edits = js.get_stream("EDITS").await.unwrap();
    let state = edits.info().await.unwrap().state.clone();
    assert_eq!((state.first_sequence, state.last_sequence, state.messages), (3, 20, 17), "{state:?}");
    assert!(edits.get_raw_message(5).await.is_err(), "deleted message came back");
    let mut work = js.get_stream("WORK").await.unwrap();
    let state = work.info().await.unwrap().state.clone();
    assert_eq!((state.first_sequence, state.messages), (11, 10), "acked work came back: {state:?}");
    let worker: consumer::PullConsumer = work.get_consumer("w").await.unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen.len() < 10 {
        assert!(Instant::now() < deadline, "work after restart: {seen:?}");
        for message in pull_batch(&worker, 10).await {
            seen.push(stream_seq(&message));
            message.ack().await.unwrap();
        }
    }
    assert_eq!(seen, (11..=20).collect::<Vec<_>>());
}
