//! A stream's fsync does not hold its lock (issue 15): while a batch's fsync runs, stream info,
//! message gets and consumers are answered; the batch's PubAck waits for the fsync; consumers
//! deliver the batch only once it is durable. The disk is made slow with the
//! `sync-delay-ms:<n>` failpoint, which starts each commit's fsyncs `n` ms late with the lock
//! free, as a slow disk would, or one fsync is held with the disk fault switch's `hold-one`.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use semaq_testkit::SemaqServer;

/// How long each commit's fsync takes on the slowed disk.
const SYNC_DELAY: Duration = Duration::from_millis(1500);

/// A broker on `store` whose fsyncs take [`SYNC_DELAY`], and a client of it.
async fn slow_broker(store: &std::path::Path) -> (SemaqServer, async_nats::Client) {
    let failpoint = format!("sync-delay-ms:{}", SYNC_DELAY.as_millis());
    let broker = super::exactly_once::start_with_env(store, &[("SEMAQ_FAILPOINT", &failpoint)]);
    let client = broker.client().await;
    (broker, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_consumers_are_answered_while_a_batch_is_being_fsynced() {
    let store = tempfile::tempdir().unwrap();
    let (_broker, js, mut stream) = slow_disk_broker_with_stream(store.path(), "SLOW").await;
    let first = js.publish("slow.a", "one".into()).await.unwrap().await.unwrap();
    assert_eq!(first.sequence, 1);
    let durable = consumer::pull::Config { durable_name: Some("reader".to_string()), ..Default::default() };
    let consumer = stream.create_consumer(durable).await.unwrap();

    let published = Instant::now();
    let second = js.publish("slow.b", "two".into()).await.unwrap();
    // The batch is stored and its fsync under way: stream info shows it without waiting.
    loop {
        let info = stream.info().await.unwrap();
        if info.state.last_sequence == 2 {
            break;
        }
        assert!(published.elapsed() < SYNC_DELAY, "stream info waited for the fsync");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = stream.get_raw_message(1).await.unwrap();
    assert_eq!(&got.payload[..], b"one");
    // The consumer gets what is durable at once, and not the message still being fsynced.
    let mut batch = consumer.fetch().max_messages(2).expires(Duration::from_millis(300)).messages().await.unwrap();
    let mut delivered = Vec::new();
    while let Some(message) = batch.next().await {
        let message = message.unwrap();
        delivered.push(message.info().unwrap().stream_sequence);
        message.ack().await.unwrap();
    }
    assert_eq!(delivered, vec![1], "only the durable message is delivered during the fsync");
    assert!(published.elapsed() < SYNC_DELAY, "the reads waited for the fsync: {:?}", published.elapsed());

    // The ack comes only after the fsync, and the message is then delivered.
    let acked = second.await.unwrap();
    assert_eq!(acked.sequence, 2);
    assert!(published.elapsed() >= SYNC_DELAY, "acked before the fsync ran");
    let mut batch = consumer.fetch().max_messages(1).expires(Duration::from_secs(3)).messages().await.unwrap();
    let message = batch.next().await.expect("the committed message").unwrap();
    assert_eq!(message.info().unwrap().stream_sequence, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_published_during_the_previous_ones_fsync_is_appended_at_once_and_acked_after_its_own() {
    let store = tempfile::tempdir().unwrap();
    let (_broker, js, mut stream) = slow_disk_broker_with_stream(store.path(), "PIPE").await;

    let published = Instant::now();
    let first = js.publish("pipe.a", "one".into()).await.unwrap();
    wait_for_last_sequence(&mut stream, 1, published).await;
    // The first batch's fsync is under way; the second is appended meanwhile, not after it.
    let second_published = Instant::now();
    let second = js.publish("pipe.b", "two".into()).await.unwrap();
    wait_for_last_sequence(&mut stream, 2, published).await;

    // In the order they arrive.
    let acks: futures::stream::FuturesUnordered<_> =
        [first, second].into_iter().map(|ack| async move { (ack.await.unwrap().sequence, Instant::now()) }).collect();
    let acks: Vec<(u64, Instant)> = acks.collect().await;
    let order: Vec<u64> = acks.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(order, vec![1, 2], "acks arrive in order");
    let (first_acked, second_acked) = (acks[0].1, acks[1].1);
    assert!(first_acked.duration_since(published) >= SYNC_DELAY, "acked before its fsync ran");
    // The second batch's own fsync starts once the first's ended: two delays after the first
    // publish. (Measured from it, not from the first ack's arrival, which a busy client may
    // note late.)
    assert!(
        second_acked.duration_since(published) >= 2 * SYNC_DELAY,
        "the second batch was acked before its own fsync: {:?} after the first publish",
        second_acked.duration_since(published)
    );
    assert!(second_acked.duration_since(second_published) >= SYNC_DELAY);
}

/// Waits until stream info shows `seq` as its last sequence, which must happen before the
/// fsync that started at `since` ends.
async fn wait_for_last_sequence(stream: &mut stream::Stream, seq: u64, since: Instant) {
    loop {
        let info = stream.info().await.unwrap();
        if info.state.last_sequence == seq {
            return;
        }
        assert!(since.elapsed() < SYNC_DELAY, "message {seq} was appended only after the fsync");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A broker whose commits' fsyncs start `SYNC_DELAY` late, with a file stream `name` on the
/// subjects `<name in lower case>.>`.
async fn slow_disk_broker_with_stream(
    store: &std::path::Path,
    name: &str,
) -> (SemaqServer, jetstream::Context, stream::Stream) {
    slow_disk_broker_with(store, stream::Config { name: name.to_string(), ..Default::default() }).await
}

/// [`slow_disk_broker_with_stream`] with more of the stream's config given.
async fn slow_disk_broker_with(
    store: &std::path::Path,
    config: stream::Config,
) -> (SemaqServer, jetstream::Context, stream::Stream) {
    let name = config.name.clone();
    let failpoint = format!("sync-delay-ms:{}", SYNC_DELAY.as_millis());
    let broker =
        SemaqServer::builder().store(store).no_monitoring().arg("-js").env("SEMAQ_FAILPOINT", failpoint).start();
    let js = jetstream::new(broker.client().await);
    let config = stream::Config {
        subjects: vec![format!("{}.>", name.to_lowercase())],
        storage: stream::StorageType::File,
        ..config
    };
    let stream = js.create_stream(config).await.unwrap();
    (broker, js, stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_delete_is_answered_only_after_its_fsync() {
    // The delete's fsync runs with the store's lock let go, like a batch's; its answer waits for
    // it. (It is served off the API task, so the requests behind it are not held up either.)
    let store = tempfile::tempdir().unwrap();
    let (broker, js, mut stream) = slow_disk_broker_with_stream(store.path(), "ERASE").await;
    for body in ["one", "two"] {
        js.publish("erase.a", body.into()).await.unwrap().await.unwrap();
    }

    let started = Instant::now();
    let answer = broker.client().await.request("$JS.API.STREAM.MSG.DELETE.ERASE", r#"{"seq":1}"#.into()).await.unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&answer.payload).unwrap();
    assert_eq!(answer["success"], true, "{answer}");
    assert!(started.elapsed() >= SYNC_DELAY, "answered before the fsync ran: {:?}", started.elapsed());
    let state = stream.info().await.unwrap().state.clone();
    assert_eq!((state.messages, state.first_sequence), (1, 2));
}

/// Publishes `bodies` to `subject` together (one group commit behind the slowed fsync).
async fn publish_all(js: &jetstream::Context, subject: &str, bodies: &[&'static str]) {
    let mut acks = Vec::new();
    for body in bodies {
        acks.push(js.publish(subject.to_string(), (*body).into()).await.unwrap());
    }
    for ack in acks {
        ack.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_are_answered_while_a_purge_is_being_fsynced_and_the_purge_after_it() {
    let store = tempfile::tempdir().unwrap();
    let config = stream::Config { name: "WIPE".to_string(), allow_direct: true, ..Default::default() };
    let (broker, js, mut stream) = slow_disk_broker_with(store.path(), config).await;
    publish_all(&js, "wipe.a", &["one", "two"]).await;
    publish_all(&js, "wipe.b", &["three"]).await;
    let client = broker.client().await;

    let started = Instant::now();
    let purge = tokio::spawn({
        let client = client.clone();
        async move {
            let answer = client.request("$JS.API.STREAM.PURGE.WIPE", r#"{"filter":"wipe.a"}"#.into()).await.unwrap();
            (serde_json::from_slice::<serde_json::Value>(&answer.payload).unwrap(), Instant::now())
        }
    });
    // The purge is applied and its fsync under way: stream info shows it without waiting.
    loop {
        let info = stream.info().await.unwrap();
        if info.state.messages == 1 {
            assert_eq!(info.state.first_sequence, 3);
            break;
        }
        assert!(started.elapsed() < SYNC_DELAY, "stream info waited for the purge's fsync");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = stream.get_raw_message(3).await.unwrap();
    assert_eq!(&got.payload[..], b"three");
    let direct = stream.direct_get(3).await.unwrap();
    assert_eq!(&direct.payload[..], b"three");
    assert!(started.elapsed() < SYNC_DELAY, "the reads waited for the purge's fsync: {:?}", started.elapsed());
    assert!(!purge.is_finished(), "the purge was answered before its fsync");

    let (answer, answered) = purge.await.unwrap();
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(answer["purged"], 2, "{answer}");
    assert!(answered.duration_since(started) >= SYNC_DELAY, "answered before the fsync ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_to_a_later_sequence_is_answered_after_its_fsync_and_the_stream_goes_on_there() {
    let store = tempfile::tempdir().unwrap();
    let (broker, js, mut stream) = slow_disk_broker_with_stream(store.path(), "JUMP").await;
    publish_all(&js, "jump.a", &["one", "two"]).await;

    let started = Instant::now();
    let answer = broker.client().await.request("$JS.API.STREAM.PURGE.JUMP", r#"{"seq":100}"#.into()).await.unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&answer.payload).unwrap();
    assert_eq!(answer["success"], true, "{answer}");
    assert!(started.elapsed() >= SYNC_DELAY, "answered before the fsync ran: {:?}", started.elapsed());
    let ack = js.publish("jump.a", "three".into()).await.unwrap().await.unwrap();
    assert_eq!(ack.sequence, 100);
    let state = stream.info().await.unwrap().state.clone();
    assert_eq!((state.messages, state.first_sequence, state.last_sequence), (1, 100, 100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_are_answered_while_a_kv_rollup_is_being_fsynced_and_its_ack_comes_after() {
    let store = tempfile::tempdir().unwrap();
    let config = stream::Config { name: "ROLL".to_string(), allow_rollup: true, ..Default::default() };
    let (_broker, js, mut stream) = slow_disk_broker_with(store.path(), config).await;
    publish_all(&js, "roll.key", &["v1", "v2"]).await;
    publish_all(&js, "roll.other", &["kept"]).await;

    let started = Instant::now();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Rollup", "sub");
    let rollup = js.publish_with_headers("roll.key", headers, "v3".into()).await.unwrap();
    // Stored and rolled up, its commit's fsync under way: readers see it without waiting.
    loop {
        let info = stream.info().await.unwrap();
        if info.state.last_sequence == 4 {
            assert_eq!(info.state.messages, 2, "the rollup's purge is applied with the message");
            break;
        }
        assert!(started.elapsed() < SYNC_DELAY, "stream info waited for the rollup's fsync");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = stream.get_raw_message(3).await.unwrap();
    assert_eq!(&got.payload[..], b"kept");
    assert!(started.elapsed() < SYNC_DELAY, "the reads waited for the rollup's fsync: {:?}", started.elapsed());

    let acked = rollup.await.unwrap();
    assert_eq!(acked.sequence, 4);
    assert!(started.elapsed() >= SYNC_DELAY, "acked before the fsync ran");
    assert!(stream.get_raw_message(1).await.is_err(), "the rolled-up value is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l3_purge_writes_its_producer_snapshot_with_the_lock_let_go_and_dedup_survives_a_kill() {
    use super::exactly_once::{create_stream, l3_config, publish_seq, register_schema, request};
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let (mut broker, client) = slow_broker(&store).await;
    register_schema(&client).await;
    let created = create_stream(&client, l3_config("ONCE", &["once.>"], json!({"allow_direct": true}))).await;
    assert!(created["config"].is_object(), "{created}");
    let js = jetstream::new(client.clone());
    let mut stream = js.get_stream("ONCE").await.unwrap();
    let (first, second) =
        tokio::join!(publish_seq(&client, "once.a", "p", 1, 1), publish_seq(&client, "once.a", "p", 2, 2));
    assert_eq!((first["seq"].as_u64(), second["seq"].as_u64()), (Some(1), Some(2)), "{first} {second}");

    // A fresh producer entry the snapshot does not hold yet: appended, its commit under way.
    let started = Instant::now();
    let third = tokio::spawn({
        let client = client.clone();
        async move { publish_seq(&client, "once.a", "p", 3, 3).await }
    });
    wait_for_last_sequence(&mut stream, 3, started).await;
    // The purge needs the snapshot first: the table's content is taken under the lock, its
    // fsyncs and write run without it, then the purge is made and committed the same way.
    let purge_started = Instant::now();
    let purge = tokio::spawn({
        let client = client.clone();
        async move {
            let answer = request(&client, "$JS.API.STREAM.PURGE.ONCE", serde_json::Value::Null).await;
            (answer, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..5 {
        let asked = Instant::now();
        let state = stream.info().await.unwrap().state.clone();
        assert!(state.last_sequence >= 3);
        let got = stream.direct_get(1).await;
        assert!(asked.elapsed() < SYNC_DELAY / 3, "a read waited for the snapshot's fsync: {:?}", asked.elapsed());
        assert!(got.is_ok() || state.messages == 0, "message 1 is there until the purge is made");
        assert!(!purge.is_finished(), "the purge was answered before its fsyncs ran");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (answer, answered) = purge.await.unwrap();
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(answer["purged"], 3, "{answer}");
    // The snapshot's fsync, then the purge's own commit.
    let took = answered.duration_since(purge_started);
    assert!(took >= 2 * SYNC_DELAY, "answered before the snapshot's and the purge's fsyncs ran: {took:?}");
    assert_eq!(third.await.unwrap()["seq"], 3);
    broker.kill();
    drop(broker);

    // Every acknowledged producer sequence is still known, though its message is gone.
    let broker = super::exactly_once::start_on(&store);
    let client = broker.client().await;
    for seq in 1..=3 {
        let repeat = publish_seq(&client, "once.a", "p", seq, seq).await;
        assert_eq!(repeat["duplicate"], true, "sequence {seq} after the restart: {repeat}");
    }
    assert_eq!(publish_seq(&client, "once.a", "p", 4, 4).await["seq"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l4_publish_and_purge_are_fsynced_with_the_lock_let_go_and_the_chain_verifies_after_a_kill() {
    use super::provenance::{api, full, l4_config, publish, register_schema, verify_through_api, wait_until_signed};
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let (mut broker, client) = slow_broker(&store).await;
    register_schema(&client).await;
    let js = jetstream::new(client.clone());
    let config = stream::Config { storage: stream::StorageType::File, ..l4_config("CHAIN", "chain.>", &[]) };
    let mut stream = js.create_stream(config).await.unwrap();
    assert_eq!(publish(&client, "chain.a", full("1")).await["seq"], 1);

    // A publish: its commit's fsync runs with the store's and the chain's locks let go.
    let started = Instant::now();
    let second = tokio::spawn({
        let client = client.clone();
        async move { (publish(&client, "chain.a", full("2")).await, Instant::now()) }
    });
    wait_for_last_sequence(&mut stream, 2, started).await;
    let got = stream.direct_get(1).await.unwrap();
    assert!(got.headers.get("Semaq-Hash").is_some(), "the read path still annotates");
    let provenance = api(&client, "$SEMAQ.API.STREAM.PROVENANCE.CHAIN", json!({})).await;
    assert!(provenance["public_key"].is_string(), "{provenance}");
    let signed = provenance["checkpoints"].as_array().map_or(0, |all| all.iter().filter(|c| c["seq"] == 2).count());
    assert_eq!(signed, 0, "a checkpoint signing message 2 is written before its fsync: {provenance}");
    assert!(started.elapsed() < SYNC_DELAY, "the reads waited for the publish's fsync: {:?}", started.elapsed());
    let (ack, acked) = second.await.unwrap();
    assert_eq!(ack["seq"], 2, "{ack}");
    assert!(acked.duration_since(started) >= SYNC_DELAY, "acked before the fsync ran");
    assert_eq!(publish(&client, "chain.b", full("3")).await["seq"], 3);

    // A purge from the head: readers are answered during its fsync, the answer comes after.
    let started = Instant::now();
    let purge = tokio::spawn({
        let client = client.clone();
        async move { (api(&client, "$JS.API.STREAM.PURGE.CHAIN", json!({"seq": 2})).await, Instant::now()) }
    });
    loop {
        let state = stream.info().await.unwrap().state.clone();
        if state.first_sequence == 2 {
            break;
        }
        assert!(started.elapsed() < SYNC_DELAY, "stream info waited for the purge's fsync");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        &stream.get_raw_message(3).await.unwrap().payload[..],
        br#"{"model_id":"llama3-70b","confidence":0.92}"#
    );
    assert!(started.elapsed() < SYNC_DELAY, "the reads waited for the purge's fsync: {:?}", started.elapsed());
    let (answer, answered) = purge.await.unwrap();
    assert_eq!(answer["purged"], 1, "{answer}");
    assert!(answered.duration_since(started) >= SYNC_DELAY, "answered before the fsync ran");
    wait_until_signed(&client, "CHAIN").await;
    broker.kill();
    drop(broker);

    let broker = super::exactly_once::start_on(&store);
    let client = broker.client().await;
    assert_eq!(publish(&client, "chain.a", full("4")).await["seq"], 4);
    wait_until_signed(&client, "CHAIN").await;
    let summary = verify_through_api(&client, "CHAIN").await.expect("the chain verifies after the kill");
    // Anchored on message 2 or checked against a checkpoint on 1, as the ticker signed it.
    assert_eq!((summary.range, summary.verified, summary.signed_through), (Some((2, 4)), 3, Some(4)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l3_eviction_by_max_msgs_writes_its_producer_snapshot_before_the_batch_without_the_lock() {
    use super::exactly_once::{create_stream, event, l3_config, publish_seq, register_schema};
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let (mut broker, client) = slow_broker(&store).await;
    register_schema(&client).await;
    let config = l3_config("KEEP3", &["keep3.>"], json!({"max_msgs": 3, "allow_direct": true}));
    let created = create_stream(&client, config).await;
    assert!(created["config"].is_object(), "{created}");
    let js = jetstream::new(client.clone());
    let mut stream = js.get_stream("KEEP3").await.unwrap();

    // Three fresh entries, appended (their commit, or a periodic snapshot, may be under way);
    // the fourth message evicts the first, so the snapshot must hold p's entries first. The
    // ingest task writes it before taking the lock for the fourth's batch (unless the periodic
    // snapshot did already), and readers are answered throughout.
    // Sent in order on one connection (publishes from tasks of their own could arrive out of
    // order, and an L3 stream takes a lower producer sequence after a higher one as a duplicate).
    let mut acks = Vec::new();
    for seq in 1..=3u64 {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Semaq-Producer", "p");
        headers.insert("Semaq-Producer-Seq", seq.to_string().as_str());
        acks.push(js.publish_with_headers("keep3.a", headers, event(seq)).await.unwrap());
    }
    let appended = async {
        while stream.info().await.unwrap().state.last_sequence < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), appended).await.expect("the three publishes appended");
    let fourth_sent = Instant::now();
    let fourth = tokio::spawn({
        let client = client.clone();
        async move { (publish_seq(&client, "keep3.a", "p", 4, 4).await, Instant::now()) }
    });
    while !fourth.is_finished() {
        let asked = Instant::now();
        let state = stream.info().await.unwrap().state.clone();
        assert!(state.last_sequence >= 3);
        assert!(stream.direct_get(3).await.is_ok());
        assert!(asked.elapsed() < SYNC_DELAY / 3, "a read waited for an fsync: {:?}", asked.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (ack, acked) = fourth.await.unwrap();
    assert_eq!(ack["seq"], 4, "{ack}");
    assert!(acked.duration_since(fourth_sent) >= SYNC_DELAY, "acked before its fsync");
    for ack in acks {
        ack.await.expect("the first three acknowledged");
    }
    let state = stream.info().await.unwrap().state.clone();
    assert_eq!((state.messages, state.first_sequence), (3, 2), "max_msgs evicted the first");
    broker.kill();
    drop(broker);

    // The evicted message's producer sequence is still a duplicate after the kill.
    let broker = super::exactly_once::start_on(&store);
    let client = broker.client().await;
    let repeat = publish_seq(&client, "keep3.a", "p", 1, 1).await;
    assert_eq!(repeat["duplicate"], true, "{repeat}");
    assert_eq!(publish_seq(&client, "keep3.a", "p", 5, 5).await["seq"], 5);
}

/// Polls stream info and a direct get of `seq` until `task` is done: each read is answered
/// well within an fsync of the slowed disk (none waits for one).
async fn read_until_finished<T>(stream: &mut stream::Stream, seq: u64, task: &tokio::task::JoinHandle<T>) {
    while !task.is_finished() {
        let asked = Instant::now();
        let state = stream.info().await.unwrap().state.clone();
        assert!(state.last_sequence >= seq);
        assert!(stream.direct_get(seq).await.is_ok(), "message {seq} is readable");
        assert!(asked.elapsed() < SYNC_DELAY / 3, "a read waited for an fsync: {:?}", asked.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l3_interest_streams_unwanted_message_is_dropped_after_its_snapshot_written_without_the_lock() {
    use super::exactly_once::{create_stream, l3_config, publish_seq, register_schema};
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let (mut broker, client) = slow_broker(&store).await;
    register_schema(&client).await;
    let config = l3_config("WANT", &["want.>"], json!({"retention": "interest", "allow_direct": true}));
    let created = create_stream(&client, config).await;
    assert!(created["config"].is_object(), "{created}");
    let js = jetstream::new(client.clone());
    let mut stream = js.get_stream("WANT").await.unwrap();
    // A consumer on want.kept: messages on it stay, those on want.dropped no consumer wants.
    let kept = consumer::pull::Config {
        durable_name: Some("kept".to_string()),
        filter_subject: "want.kept".to_string(),
        ..Default::default()
    };
    stream.create_consumer(kept).await.unwrap();
    assert_eq!(publish_seq(&client, "want.kept", "p", 1, 1).await["seq"], 1);

    // Stored with a fresh producer entry, then dropped: the snapshot holding the entry is
    // written first, its fsyncs with the lock let go (the batch stops there), then the drop
    // and the batch's commit. Readers are answered throughout; the ack comes after both.
    let sent = Instant::now();
    let unwanted = tokio::spawn({
        let client = client.clone();
        async move { (publish_seq(&client, "want.dropped", "p", 2, 2).await, Instant::now()) }
    });
    read_until_finished(&mut stream, 1, &unwanted).await;
    let (ack, acked) = unwanted.await.unwrap();
    assert_eq!(ack["seq"], 2, "{ack}");
    let took = acked.duration_since(sent);
    assert!(took >= 2 * SYNC_DELAY, "acked before the snapshot's and the batch's fsyncs: {took:?}");
    let state = stream.info().await.unwrap().state.clone();
    assert_eq!((state.messages, state.last_sequence), (1, 2), "nothing kept of the unwanted message");
    broker.kill();
    drop(broker);

    // The dropped message's producer sequence is still a duplicate after the kill.
    let broker = super::exactly_once::start_on(&store);
    let client = broker.client().await;
    let repeat = publish_seq(&client, "want.dropped", "p", 2, 2).await;
    assert_eq!(repeat["duplicate"], true, "{repeat}");
    assert_eq!(publish_seq(&client, "want.kept", "p", 3, 3).await["seq"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l3_rollup_in_the_batch_that_made_its_entries_purges_after_a_snapshot_written_without_the_lock() {
    use super::exactly_once::{create_stream, event, l3_config, publish_seq, register_schema};
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let (mut broker, client) = slow_broker(&store).await;
    register_schema(&client).await;
    let config = l3_config("ROLL3", &["roll3.>"], json!({"allow_rollup_hdrs": true, "allow_direct": true}));
    let created = create_stream(&client, config).await;
    assert!(created["config"].is_object(), "{created}");
    let js = jetstream::new(client.clone());
    let mut stream = js.get_stream("ROLL3").await.unwrap();
    assert_eq!(publish_seq(&client, "roll3.other", "q", 1, 1).await["seq"], 1);

    // Two values and a rollup of the key, sent in order on one connection: whichever batch the
    // rollup lands in, an entry the snapshot does not hold yet (its own batch's, or one the
    // periodic snapshot has not taken) may make its purge wait for the snapshot.
    let sent = Instant::now();
    let mut acks = Vec::new();
    for seq in 1..=3u64 {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Semaq-Producer", "p");
        headers.insert("Semaq-Producer-Seq", seq.to_string().as_str());
        if seq == 3 {
            headers.insert("Nats-Rollup", "sub");
        }
        acks.push(js.publish_with_headers("roll3.key", headers, event(seq)).await.unwrap());
    }
    let acked = tokio::spawn(async move {
        let mut seqs = Vec::new();
        for ack in acks {
            seqs.push(ack.await.unwrap().sequence);
        }
        (seqs, Instant::now())
    });
    read_until_finished(&mut stream, 1, &acked).await;
    let (seqs, acked_at) = acked.await.unwrap();
    assert_eq!(seqs, vec![2, 3, 4]);
    assert!(acked_at.duration_since(sent) >= SYNC_DELAY, "acked before an fsync");
    let state = stream.info().await.unwrap().state.clone();
    assert_eq!((state.messages, state.last_sequence), (2, 4), "the rollup left itself and roll3.other");
    broker.kill();
    drop(broker);

    // Every rolled-up producer sequence is still a duplicate after the kill.
    let broker = super::exactly_once::start_on(&store);
    let client = broker.client().await;
    for seq in 1..=3 {
        let repeat = publish_seq(&client, "roll3.key", "p", seq, seq).await;
        assert_eq!(repeat["duplicate"], true, "sequence {seq} after the restart: {repeat}");
    }
    let js = jetstream::new(client.clone());
    let state = js.get_stream("ROLL3").await.unwrap().info().await.unwrap().state.clone();
    assert_eq!(state.messages, 2, "the purge survived the kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l3_batch_that_alone_exceeds_max_msgs_is_split_for_its_snapshots_without_the_lock() {
    use super::exactly_once::{create_stream, event, l3_config, publish_seq, register_schema};
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let (mut broker, client) = slow_broker(&store).await;
    register_schema(&client).await;
    let config = l3_config("KEEP1", &["keep1.>"], json!({"max_msgs": 1, "allow_direct": true}));
    let created = create_stream(&client, config).await;
    assert!(created["config"].is_object(), "{created}");
    // Each eviction waits for a snapshot's fsync: more than the default 5 s for the last ack.
    let js = jetstream::ContextBuilder::new().timeout(Duration::from_secs(30)).build(client.clone());
    let mut stream = js.get_stream("KEEP1").await.unwrap();
    assert_eq!(publish_seq(&client, "keep1.a", "q", 1, 1).await["seq"], 1);

    // Four fresh entries sent at once, in order on one connection: in one batch, each append
    // after the first evicts a message whose entry no snapshot holds yet, so the batch stops
    // before it and the snapshot is written with the lock let go. Readers are answered
    // throughout; the acks come after the fsyncs.
    let sent = Instant::now();
    let mut acks = Vec::new();
    for seq in 1..=4u64 {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Semaq-Producer", "p");
        headers.insert("Semaq-Producer-Seq", seq.to_string().as_str());
        acks.push(js.publish_with_headers("keep1.a", headers, event(seq)).await.unwrap());
    }
    let acked = tokio::spawn(async move {
        let mut seqs = Vec::new();
        for ack in acks {
            seqs.push(ack.await.unwrap().sequence);
        }
        (seqs, Instant::now())
    });
    while !acked.is_finished() {
        let asked = Instant::now();
        let state = stream.info().await.unwrap().state.clone();
        assert!(state.messages <= 1, "max_msgs 1 holds: {state:?}");
        assert!(asked.elapsed() < SYNC_DELAY / 3, "a read waited for an fsync: {:?}", asked.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (seqs, acked_at) = acked.await.unwrap();
    assert_eq!(seqs, vec![2, 3, 4, 5]);
    assert!(acked_at.duration_since(sent) >= SYNC_DELAY, "acked before an fsync");
    let state = stream.info().await.unwrap().state.clone();
    assert_eq!((state.messages, state.first_sequence), (1, 5), "max_msgs evicted the rest");
    broker.kill();
    drop(broker);

    // Every evicted message's producer sequence is still a duplicate after the kill.
    let broker = super::exactly_once::start_on(&store);
    let client = broker.client().await;
    for seq in 1..=4 {
        let repeat = publish_seq(&client, "keep1.a", "p", seq, seq).await;
        assert_eq!(repeat["duplicate"], true, "sequence {seq} after the restart: {repeat}");
    }
    assert_eq!(publish_seq(&client, "keep1.a", "p", 5, 5).await["seq"], 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l3_atomic_batch_whose_rollup_purges_writes_its_producer_snapshot_before_the_lock_and_dedup_survives_a_kill()
{
    use super::exactly_once::publish_seq;
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let limits = json!({"allow_rollup_hdrs": true, "allow_direct": true});
    let (mut broker, client, mut stream) = slow_l3_stream_with_q(&store, ("ATOM3", "atom3"), limits).await;

    // An atomic batch of p's sequences 1..=3 whose last message rolls the whole stream up: its
    // purge takes q's message, so q's entry must be in the durable snapshot first. Nothing can
    // be held inside an atomic batch's appends; the snapshot is written before the batch takes
    // the lock, and readers are answered throughout (a snapshot written in place, under the
    // lock, would hold them for an fsync of the slowed disk).
    let committed = commit_p_batch(&client, &mut stream, ("atom3.key", "rollup", 3), &[("Nats-Rollup", "all")]).await;
    assert_eq!(committed, json!({"stream": "ATOM3", "seq": 4, "batch": "rollup", "count": 3}));
    let state = stream.info().await.unwrap().state.clone();
    assert_eq!((state.messages, state.first_sequence), (1, 4), "the rollup left only itself");
    broker.kill();
    drop(broker);

    // Every producer sequence, rolled up or not, is still a duplicate after the kill.
    let broker = super::exactly_once::start_on(&store);
    let client = broker.client().await;
    assert_eq!(publish_seq(&client, "atom3.other", "q", 1, 1).await["duplicate"], true, "q's entry survived");
    for seq in 1..=3 {
        let repeat = publish_seq(&client, "atom3.key", "p", seq, seq).await;
        assert_eq!(repeat["duplicate"], true, "sequence {seq} after the restart: {repeat}");
    }
    assert_eq!(publish_seq(&client, "atom3.key", "p", 4, 4).await["seq"], 5);
}

/// A slowed broker on `store` with the L3 stream `name` on `<prefix>.>` (and `extra` config),
/// its schema registered, and producer q's sequence 1 stored on `<prefix>.other`.
async fn slow_l3_stream_with_q(
    store: &std::path::Path,
    (name, prefix): (&str, &str),
    extra: serde_json::Value,
) -> (SemaqServer, async_nats::Client, stream::Stream) {
    use super::exactly_once::{create_stream, l3_config, publish_seq, register_schema};
    let (broker, client) = slow_broker(store).await;
    register_schema(&client).await;
    let created = create_stream(&client, l3_config(name, &[&format!("{prefix}.>")], extra)).await;
    assert!(created["config"].is_object(), "{created}");
    let stream = jetstream::new(client.clone()).get_stream(name).await.unwrap();
    assert_eq!(publish_seq(&client, &format!("{prefix}.other"), "q", 1, 1).await["seq"], 1);
    (broker, client, stream)
}

/// Stages producer p's sequences `1..count` as atomic batch `id` on `subject`, then commits it
/// with sequence `count` (carrying `last_headers` too), reading stream info throughout: each
/// read, which takes the store's lock, is answered well within an fsync of the slowed disk.
/// Returns the commit's PubAck.
async fn commit_p_batch(
    client: &async_nats::Client,
    stream: &mut stream::Stream,
    (subject, id, count): (&'static str, &'static str, u64),
    last_headers: &[(&'static str, &'static str)],
) -> serde_json::Value {
    let message = |n: u64, last: bool| batch_headers(("p", n), (id, n), last);
    stage(client, subject, ("p", id), 1..count).await;
    let mut last = message(count, true);
    for (name, value) in last_headers {
        last.insert(*name, *value);
    }
    let committed = tokio::spawn({
        let client = client.clone();
        async move {
            let reply = client.request_with_headers(subject, last, super::exactly_once::event(count)).await.unwrap();
            serde_json::from_slice::<serde_json::Value>(&reply.payload).unwrap()
        }
    });
    // Not a message get: the batch may remove any message meanwhile.
    info_until_finished(stream, &committed).await;
    committed.await.unwrap()
}

/// Headers of an L3 atomic batch's message: `producer`'s sequence, batch `id`'s sequence, and
/// the commit when `last`.
fn batch_headers((producer, seq): (&str, u64), (id, n): (&str, u64), last: bool) -> async_nats::HeaderMap {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Semaq-Producer", producer);
    headers.insert("Semaq-Producer-Seq", seq.to_string().as_str());
    headers.insert("Nats-Batch-Id", id);
    headers.insert("Nats-Batch-Sequence", n.to_string().as_str());
    if last {
        headers.insert("Nats-Batch-Commit", "1");
    }
    headers
}

/// Stages `producer`'s sequences `seqs` as the first messages of atomic batch `id` on `subject`.
async fn stage(
    client: &async_nats::Client,
    subject: &'static str,
    (producer, id): (&str, &str),
    seqs: std::ops::Range<u64>,
) {
    for n in seqs {
        let event = super::exactly_once::event(n);
        let staged = client.request_with_headers(subject, batch_headers((producer, n), (id, n), false), event).await;
        assert!(staged.unwrap().payload.is_empty(), "a staged message gets an empty reply");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_raised_to_l3_loads_its_producers_at_the_next_publish_and_readers_go_on() {
    use super::exactly_once::{create_stream, event, l3_config, publish_seq, register_schema, request};
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let (_broker, client) = slow_broker(&dir.path().join("store")).await;
    register_schema(&client).await;
    let mut config = l3_config("RAISED", &["raised.>"], json!({"metadata": {"semaq.level": "2"}}));
    assert!(create_stream(&client, config.clone()).await["config"].is_object());
    let js = jetstream::new(client.clone());
    for n in 1..=3 {
        js.publish("raised.a", event(n)).await.unwrap().await.unwrap();
    }
    config["metadata"]["semaq.level"] = "3".into();
    let updated = request(&client, "$JS.API.STREAM.UPDATE.RAISED", config).await;
    assert_eq!(updated["config"]["metadata"]["semaq.level"], "3", "{updated}");
    let mut stream = js.get_stream("RAISED").await.unwrap();

    // The first L3 publish loads the producer table under the store's lock; its snapshot is
    // written by the unlocked paths, so no read waits for a flush meanwhile.
    let published = tokio::spawn({
        let client = client.clone();
        async move { publish_seq(&client, "raised.a", "p", 1, 4).await }
    });
    info_until_finished(&mut stream, &published).await;
    assert_eq!(published.await.unwrap()["seq"], 4);
    assert_eq!(publish_seq(&client, "raised.a", "p", 1, 4).await["duplicate"], true);
}

/// Polls stream info until `task` is done: each read, which takes the store's lock, is
/// answered well within an fsync of the slowed disk (none waits for one).
async fn info_until_finished<T>(stream: &mut stream::Stream, task: &tokio::task::JoinHandle<T>) {
    while !task.is_finished() {
        let asked = Instant::now();
        assert!(stream.info().await.unwrap().state.last_sequence >= 1);
        assert!(asked.elapsed() < SYNC_DELAY / 3, "a read waited for an fsync: {:?}", asked.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l3_atomic_rollup_behind_a_plain_entry_of_the_same_ingest_batch_gets_its_snapshot_without_the_lock() {
    use super::exactly_once::{event, publish_seq};
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let limits = json!({"allow_rollup_hdrs": true, "allow_direct": true});
    let (mut broker, client, mut stream) = slow_l3_stream_with_q(&store, ("MIXED3", "mixed3"), limits).await;
    let js = jetstream::new(client.clone());
    stage(&client, "mixed3.key", ("p", "rollup"), 1..3).await;

    // r's one-message batch keeps the ingest task in its commit's fsync, so that q's plain
    // message and p's rollup commit, sent in order behind it, are stored as one ingest batch:
    // q's entry, recorded first, is one no snapshot before the batch could hold, and the
    // rollup's purge needs it. Nothing can be held inside the atomic batch's appends.
    let blocker = js.publish_with_headers("mixed3.block", batch_headers(("r", 1), ("block", 1), true), event(1));
    let blocker = blocker.await.unwrap();
    tokio::time::sleep(SYNC_DELAY / 4).await;
    let mut plain = async_nats::HeaderMap::new();
    plain.insert("Semaq-Producer", "q");
    plain.insert("Semaq-Producer-Seq", "2");
    let plain = js.publish_with_headers("mixed3.other", plain, event(2)).await.unwrap();
    let mut last = batch_headers(("p", 3), ("rollup", 3), true);
    last.insert("Nats-Rollup", "sub");
    let committed = js.publish_with_headers("mixed3.key", last, event(3)).await.unwrap();
    let acked = tokio::spawn(async move {
        let acks = [blocker.await, plain.await, committed.await];
        acks.map(|ack| ack.map(|ack| ack.sequence).ok())
    });
    info_until_finished(&mut stream, &acked).await;
    assert_eq!(acked.await.unwrap(), [Some(2), Some(3), Some(6)], "r's batch, q's message, p's batch");
    let state = stream.info().await.unwrap().state.clone();
    assert_eq!(state.messages, 4, "the rollup left q's two messages, r's and itself");
    broker.kill();
    drop(broker);

    // Every producer sequence, rolled up or not, is still a duplicate after the kill.
    let broker = super::exactly_once::start_on(&store);
    let client = broker.client().await;
    for (subject, producer, seqs) in
        [("mixed3.other", "q", 1..=2), ("mixed3.block", "r", 1..=1), ("mixed3.key", "p", 1..=3)]
    {
        for seq in seqs {
            let repeat = publish_seq(&client, subject, producer, seq, seq).await;
            assert_eq!(repeat["duplicate"], true, "{producer}'s sequence {seq} after the restart: {repeat}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l3_purge_under_steady_ingest_holds_the_ingest_back_for_its_snapshot_and_readers_go_on() {
    use super::exactly_once::{event, publish_seq, request};
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let limits = serde_json::json!({"allow_direct": true});
    let (mut broker, client, mut stream) = slow_l3_stream_with_q(&store, ("STEADY3", "steady3"), limits).await;

    // p stores a new sequence every 50 ms, each round of the purge's producer snapshot (an
    // fsync of the slowed disk) finds entries it does not hold: the purge holds the ingest
    // task back for a last round, rather than write the snapshot under the store's lock.
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let publisher = tokio::spawn({
        let (js, stop) = (jetstream::new(client.clone()), stop.clone());
        async move {
            let mut acks = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let seq = acks.len() as u64 + 1;
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Semaq-Producer", "p");
                headers.insert("Semaq-Producer-Seq", seq.to_string().as_str());
                acks.push(js.publish_with_headers("steady3.key", headers, event(seq)).await.unwrap());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let mut acked = Vec::new();
            for (seq, ack) in (1u64..).zip(acks) {
                if ack.await.is_ok() {
                    acked.push(seq);
                }
            }
            acked
        }
    });
    tokio::time::sleep(SYNC_DELAY).await;
    let purge = tokio::spawn({
        let client = client.clone();
        async move { request(&client, "$JS.API.STREAM.PURGE.STEADY3", serde_json::Value::Null).await }
    });
    info_until_finished(&mut stream, &purge).await;
    let answer = purge.await.unwrap();
    assert_eq!(answer["success"], true, "{answer}");
    stop.store(true, Ordering::Relaxed);
    let acked = publisher.await.unwrap();
    assert!(acked.len() > 10, "steady ingest: {} acknowledged", acked.len());
    broker.kill();
    drop(broker);

    // Every acknowledged producer sequence is still known, though the purge took its message.
    let broker = super::exactly_once::start_on(&store);
    let client = broker.client().await;
    for seq in acked {
        let repeat = publish_seq(&client, "steady3.key", "p", seq, seq).await;
        assert_eq!(repeat["duplicate"], true, "sequence {seq} after the restart: {repeat}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l3_atomic_batch_that_evicts_by_max_msgs_writes_no_producer_snapshot_under_the_lock_and_dedup_survives_a_kill(
) {
    use super::exactly_once::publish_seq;
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let (mut broker, client, mut stream) =
        slow_l3_stream_with_q(&store, ("EVICT3", "evict3"), json!({"max_msgs": 3})).await;

    // Four messages where three fit: q's message and p's first go. q's entry must be durable
    // in the snapshot first (written before the batch takes the lock, if the periodic one has
    // not taken it); p's entries are the batch's own, which a snapshot written during the batch
    // would leave out anyway, so none is written in place.
    let committed = commit_p_batch(&client, &mut stream, ("evict3.key", "evict", 4), &[]).await;
    assert_eq!(committed, json!({"stream": "EVICT3", "seq": 5, "batch": "evict", "count": 4}));
    let state = stream.info().await.unwrap().state.clone();
    assert_eq!((state.messages, state.first_sequence), (3, 3), "max_msgs evicted q's and p's first");
    broker.kill();
    drop(broker);

    let broker = super::exactly_once::start_on(&store);
    let client = broker.client().await;
    assert_eq!(publish_seq(&client, "evict3.other", "q", 1, 1).await["duplicate"], true, "q's entry survived");
    for seq in 1..=4 {
        let repeat = publish_seq(&client, "evict3.key", "p", seq, seq).await;
        assert_eq!(repeat["duplicate"], true, "sequence {seq} after the restart: {repeat}");
    }
}

/// Payload of the messages that fill a segment: near the default `max_payload` (1 MiB).
const BIG_PAYLOAD_BYTES: usize = 1_000_000;
/// A record's header in a segment log and the log's own header (docs/design.md, "Segment log").
const RECORD_HEADER_BYTES: u64 = 32;
const SEGMENT_HEADER_BYTES: u64 = 24;
/// Bound on a read answered while an fsync is held.
const READ_WAIT: Duration = Duration::from_secs(5);

/// The segment logs in a file stream's message directory, by name.
fn segment_logs(store: &std::path::Path, stream: &str) -> Vec<String> {
    let msgs = store.join("jetstream").join("streams").join(stream).join("msgs");
    let mut logs: Vec<String> = std::fs::read_dir(&msgs)
        .unwrap_or_else(|e| panic!("{}: {e}", msgs.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".log"))
        .collect();
    logs.sort();
    logs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_are_answered_while_a_publish_whose_limit_drops_a_segment_is_fsynced_and_its_ack_comes_after() {
    use super::disk_faults::{ack_of, broker_on_faulty_disk, set_control, wait_for_control};
    let dir = tempfile::tempdir().unwrap();
    let (store, control) = (dir.path().join("data"), dir.path().join("disk-faults"));
    let broker = broker_on_faulty_disk(&store, &control);
    let js = jetstream::new(broker.client().await);
    let config = stream::Config {
        name: "BOUNDED".to_string(),
        subjects: vec!["bounded.>".to_string()],
        storage: stream::StorageType::File,
        // One message at a time: each publish pushes the one before it out.
        max_bytes: i64::try_from(BIG_PAYLOAD_BYTES * 3 / 2).unwrap(),
        allow_direct: true,
        ..Default::default()
    };
    let mut stream = js.create_stream(config).await.unwrap();
    let subject = "bounded.reading";
    // The first segment fills with these; the next publish rolls, and empties it.
    let fit = big_payloads_per_segment(subject);
    for seq in 1..=fit {
        assert_eq!(ack_of(js.publish(subject, body(seq)).await.unwrap()).await, Ok(seq));
    }
    assert_eq!(segment_logs(&store, "BOUNDED"), vec![format!("{:020}.log", 1)], "one segment so far");

    set_control(&control, "hold-one");
    let dropping = fit + 1;
    let ack = js.publish(subject, body(dropping)).await.unwrap();
    wait_for_control(&control, |text| text.trim() == "holding", "the publish's commit to be fsyncing").await;
    let acked = tokio::spawn(ack_of(ack));
    // The roll, the drop and the append are done; the commit's fsync is held on the disk.
    let info = tokio::time::timeout(READ_WAIT, stream.info()).await.expect("stream info waited for the fsync").unwrap();
    let state = &info.state;
    assert_eq!((state.messages, state.first_sequence, state.last_sequence), (1, dropping, dropping));
    let got = tokio::time::timeout(READ_WAIT, stream.get_raw_message(dropping)).await.expect("MSG.GET waited").unwrap();
    assert_eq!(got.payload, body(dropping));
    let direct =
        tokio::time::timeout(READ_WAIT, stream.direct_get(dropping)).await.expect("DIRECT.GET waited").unwrap();
    assert_eq!(direct.payload, body(dropping));
    assert!(!acked.is_finished(), "acknowledged before its commit's fsync ran");

    set_control(&control, "");
    assert_eq!(acked.await.unwrap(), Ok(dropping));
    // The commit gave the emptied segment back before the ack.
    assert_eq!(segment_logs(&store, "BOUNDED"), vec![format!("{dropping:020}.log")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_stream_that_never_syncs_still_gives_the_segments_its_limit_emptied_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let broker = SemaqServer::builder().store(&store).no_monitoring().arg("-js").start();
    let js = jetstream::new(broker.client().await);
    let config = stream::Config {
        name: "LOOSE".to_string(),
        subjects: vec!["loose.>".to_string()],
        storage: stream::StorageType::File,
        max_bytes: i64::try_from(BIG_PAYLOAD_BYTES * 3 / 2).unwrap(),
        metadata: [("semaq.sync".to_string(), "never".to_string())].into(),
        ..Default::default()
    };
    js.create_stream(config).await.unwrap();
    let subject = "loose.reading";
    let dropping = big_payloads_per_segment(subject) + 1;
    for seq in 1..=dropping {
        let ack = js.publish(subject, vec![b'.'; BIG_PAYLOAD_BYTES].into()).await.unwrap();
        assert_eq!(ack.await.unwrap().sequence, seq);
    }
    // No publish commits here: a commit of its own gives the emptied segment back.
    let deadline = Instant::now() + READ_WAIT;
    while segment_logs(&store, "LOOSE") != vec![format!("{dropping:020}.log")] {
        assert!(Instant::now() < deadline, "the emptied segment stayed: {:?}", segment_logs(&store, "LOOSE"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_limit_is_answered_at_once_and_readers_are_answered_while_its_segments_are_given_back() {
    use super::disk_faults::{ack_of, broker_on_faulty_disk, set_control, wait_for_control};
    let dir = tempfile::tempdir().unwrap();
    let (store, control) = (dir.path().join("data"), dir.path().join("disk-faults"));
    let broker = broker_on_faulty_disk(&store, &control);
    let js = jetstream::new(broker.client().await);
    let mut config = stream::Config {
        name: "LOWERED".to_string(),
        subjects: vec!["lowered.>".to_string()],
        storage: stream::StorageType::File,
        ..Default::default()
    };
    let mut stream = js.create_stream(config.clone()).await.unwrap();
    let subject = "lowered.reading";
    // The first segment full, one message in the second.
    let last = big_payloads_per_segment(subject) + 1;
    for seq in 1..=last {
        assert_eq!(ack_of(js.publish(subject, vec![b'.'; BIG_PAYLOAD_BYTES].into()).await.unwrap()).await, Ok(seq));
    }
    assert_eq!(segment_logs(&store, "LOWERED").len(), 2);

    // The next fsync is the commit that makes the lowered limit's floor durable.
    set_control(&control, "hold-one");
    config.max_messages = 1;
    let updated = tokio::time::timeout(READ_WAIT, js.update_stream(config)).await.expect("the update waited").unwrap();
    assert_eq!(updated.state.messages, 1);
    wait_for_control(&control, |text| text.trim() == "holding", "the limit's commit to be fsyncing").await;
    let info = tokio::time::timeout(READ_WAIT, stream.info()).await.expect("stream info waited for the fsync").unwrap();
    assert_eq!((info.state.messages, info.state.first_sequence), (1, last));
    let got = tokio::time::timeout(READ_WAIT, stream.get_raw_message(last)).await.expect("MSG.GET waited").unwrap();
    assert_eq!(got.payload.len(), BIG_PAYLOAD_BYTES);
    assert_eq!(segment_logs(&store, "LOWERED").len(), 2, "given back only once the floor is durable");

    set_control(&control, "");
    let deadline = Instant::now() + READ_WAIT;
    while segment_logs(&store, "LOWERED") != vec![format!("{last:020}.log")] {
        assert!(Instant::now() < deadline, "the emptied segment stayed: {:?}", segment_logs(&store, "LOWERED"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An object's bytes made on demand (xorshift), so a large object is never held in memory:
/// the put reads one instance, the check after it another with the same seed.
struct GeneratedObject {
    state: u64,
    left_bytes: usize,
}

impl GeneratedObject {
    fn new(length_bytes: usize, seed: u64) -> Self {
        GeneratedObject { state: seed | 1, left_bytes: length_bytes }
    }

    /// The next `out.len()` bytes of the object (fewer at its end); how many.
    fn fill(&mut self, out: &mut [u8]) -> usize {
        let count = out.len().min(self.left_bytes);
        for byte in &mut out[..count] {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            *byte = self.state as u8;
        }
        self.left_bytes -= count;
        count
    }
}

impl tokio::io::AsyncRead for GeneratedObject {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let mut bytes = vec![0; buf.remaining().min(self.left_bytes)];
        let count = self.fill(&mut bytes);
        buf.put_slice(&bytes[..count]);
        std::task::Poll::Ready(Ok(()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_of_a_bucket_are_answered_while_an_object_of_three_segments_is_put_and_fsynced() {
    use super::disk_faults::{broker_on_faulty_disk, set_control};
    use async_nats::jetstream::object_store;
    use tokio::io::AsyncReadExt;

    /// Larger than two 64 MiB segments: its chunks roll the stream's segment twice with no
    /// commit in between (they wait for the meta message's).
    const OBJECT_BYTES: usize = 160 * 1024 * 1024;
    /// async-nats's chunk size for an object put with default options.
    const CHUNK_BYTES: usize = 128 * 1024;
    /// Bound on the whole put (debug builds, 2 cores shared).
    const PUT_WAIT: Duration = Duration::from_secs(300);
    const SEED: u64 = 0x5eed;

    let dir = tempfile::tempdir().unwrap();
    let (store, control) = (dir.path().join("data"), dir.path().join("disk-faults"));
    let broker = broker_on_faulty_disk(&store, &control);
    let js = jetstream::new(broker.client().await);
    let bucket = object_store::Config { bucket: "BIG".to_string(), ..Default::default() };
    let bucket = js.create_object_store(bucket).await.unwrap();

    // Another client reads the bucket's stream in a loop for as long as the put runs; every
    // read is bounded, so one stuck behind an fsync under the stream's lock fails the test.
    let reading = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let reader = tokio::spawn({
        let (js, reading) = (jetstream::new(broker.client().await), reading.clone());
        async move {
            let mut stream = js.get_stream("OBJ_BIG").await.unwrap();
            let mut reads_count = 0u64;
            while reading.load(std::sync::atomic::Ordering::Relaxed) {
                let info = tokio::time::timeout(READ_WAIT, stream.info()).await.expect("stream info waited").unwrap();
                let (messages, first_seq) = (info.state.messages, info.state.first_sequence);
                if messages > 0 {
                    let first = tokio::time::timeout(READ_WAIT, stream.direct_get(first_seq))
                        .await
                        .expect("DIRECT.GET waited")
                        .unwrap();
                    assert_eq!(first.payload.len(), CHUNK_BYTES);
                }
                reads_count += 1;
            }
            reads_count
        }
    });

    // The first fsync on the stream's disk is held: the chunks' first commit aside (no ack waits
    // for it), run without the stream's lock. The chunks go on being acknowledged and rolling
    // the segment; the meta message's commit, with the rolls' seals, waits behind it.
    set_control(&control, "hold-one");
    let put = tokio::spawn({
        let bucket = bucket.clone();
        async move { bucket.put("video.mp4", &mut GeneratedObject::new(OBJECT_BYTES, SEED)).await }
    });
    let deadline = Instant::now() + PUT_WAIT;
    while std::fs::read_to_string(&control).unwrap_or_default().trim() != "holding" {
        assert!(Instant::now() < deadline, "no fsync was ever held");
        assert!(!put.is_finished(), "the put finished with no fsync held: {:?}", put.await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let chunks = OBJECT_BYTES.div_ceil(CHUNK_BYTES) as u64;
    let mut stream = js.get_stream("OBJ_BIG").await.unwrap();
    let info = tokio::time::timeout(READ_WAIT, stream.info()).await.expect("stream info waited for the fsync");
    // Held after the first `STREAM_SYNC_AHEAD_BYTES` (8 MiB) of a 160 MiB object.
    assert!(info.unwrap().state.messages < chunks, "the chunks' commit aside starts while they stream");
    loop {
        let info = tokio::time::timeout(READ_WAIT, stream.info()).await.expect("stream info waited for the fsync");
        if info.unwrap().state.messages == chunks + 1 {
            break; // every chunk and the meta message are stored
        }
        assert!(Instant::now() < deadline, "the object's messages were never all stored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let last =
        tokio::time::timeout(READ_WAIT, stream.direct_get(chunks + 1)).await.expect("DIRECT.GET waited").unwrap();
    assert!(last.subject.starts_with("$O.BIG.M."), "the meta message is last: {}", last.subject);
    assert_eq!(segment_logs(&store, "OBJ_BIG").len(), 3, "the chunks filled two segments and started a third");
    assert!(!put.is_finished(), "the object was acknowledged before its fsync");

    set_control(&control, "");
    let put = tokio::time::timeout(PUT_WAIT, put).await.expect("the put never finished").unwrap().expect("put");
    reading.store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(tokio::time::timeout(READ_WAIT, reader).await.expect("the reader hung").unwrap() > 0);
    assert_eq!(put.size, OBJECT_BYTES);

    // Read back whole, compared with the generator; async-nats fails the read on a wrong digest.
    let mut object = bucket.get("video.mp4").await.unwrap();
    let (mut expected, mut read_bytes) = (GeneratedObject::new(OBJECT_BYTES, SEED), 0);
    let (mut got, mut want) = (vec![0; CHUNK_BYTES], vec![0; CHUNK_BYTES]);
    loop {
        let count = tokio::time::timeout(PUT_WAIT, object.read(&mut got)).await.expect("the read hung").unwrap();
        if count == 0 {
            break;
        }
        assert_eq!(expected.fill(&mut want[..count]), count);
        assert!(got[..count] == want[..count], "bytes {read_bytes}.. differ");
        read_bytes += count;
    }
    assert_eq!(read_bytes, OBJECT_BYTES);
    assert_eq!(object.info.digest, put.digest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_are_answered_while_appends_that_roll_past_the_pending_seals_bound_commit_them_aside() {
    use super::disk_faults::{ack_of, broker_on_faulty_disk, set_control};
    let dir = tempfile::tempdir().unwrap();
    let (store, control) = (dir.path().join("data"), dir.path().join("disk-faults"));
    let broker = broker_on_faulty_disk(&store, &control);
    let js = jetstream::new(broker.client().await);
    let config = stream::Config {
        name: "ROLLING".to_string(),
        subjects: vec!["rolling.>".to_string()],
        storage: stream::StorageType::File,
        allow_direct: true,
        ..Default::default()
    };
    let mut stream = js.create_stream(config).await.unwrap();
    let subject = "rolling.frame";
    let last = big_payloads_per_segment(subject) * (semaq_store::SEALS_PENDING_MAX_COUNT as u64 + 1) + 1;
    let mut acks = fill_the_pending_seals(&js, &mut stream, &control, subject, last).await;
    // The last one waits for the seals' commit before its append.
    acks.push(js.publish(subject, body(last)).await.unwrap());
    wait_for_seals_commit(&control, Instant::now() + SEALS_COMMIT_START_WAIT).await;

    // The seals' fsyncs are held: the lock is free, so readers are answered.
    let info = tokio::time::timeout(READ_WAIT, stream.info()).await.expect("stream info waited for the fsync").unwrap();
    assert_eq!(info.state.last_sequence, last - 1, "the roll waits for the seals' commit");
    let got = tokio::time::timeout(READ_WAIT, stream.direct_get(last - 1)).await.expect("DIRECT.GET waited").unwrap();
    assert_eq!(got.payload, body(last - 1));
    assert_eq!(segment_logs(&store, "ROLLING").len(), semaq_store::SEALS_PENDING_MAX_COUNT + 1);

    set_control(&control, "");
    for (seq, ack) in (1..).zip(acks) {
        assert_eq!(ack_of(ack).await, Ok(seq + 1));
    }
    assert_eq!(stream.info().await.unwrap().state.messages, last);
    assert_eq!(segment_logs(&store, "ROLLING").len(), semaq_store::SEALS_PENDING_MAX_COUNT + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_are_answered_while_an_atomic_batch_that_would_roll_into_full_pending_seals_commits_them_aside() {
    use super::disk_faults::{ack_of, set_control, wait_for_control};
    /// Small segments: the batch rolls four times with little data.
    const SEGMENT_BYTES: u64 = 64 * 1024;
    /// Payloads several of which fill a segment, with room for a batch message's headers.
    const PAYLOAD_BYTES: usize = 9_000;
    let dir = tempfile::tempdir().unwrap();
    let (store, control) = (dir.path().join("data"), dir.path().join("disk-faults"));
    let failpoint = format!("disk-faults-segment-bytes:{SEGMENT_BYTES}:{}", control.display());
    let broker = super::exactly_once::start_with_env(&store, &[("SEMAQ_FAILPOINT", &failpoint)]);
    let client = broker.client().await;
    let js = jetstream::new(client.clone());
    // Not pipelined (an atomic batch would first wait for the commit in flight, which completes
    // every seal): no commit per publish, so the seals that rolls begin stay pending.
    let config = serde_json::json!({"name": "ATOMROLL", "subjects": ["atomroll.>"], "allow_atomic": true,
        "allow_direct": true, "metadata": {"semaq.sync": "never"}});
    let created = super::exactly_once::create_stream(&client, config).await;
    assert!(created["config"].is_object(), "{created}");
    let mut stream = js.get_stream("ATOMROLL").await.unwrap();
    let subject = "atomroll.frame";
    let payload = |seq: u64| {
        let mut payload = vec![b'.'; PAYLOAD_BYTES];
        payload[..20].copy_from_slice(format!("{seq:020}").as_bytes());
        bytes::Bytes::from(payload)
    };
    let fit =
        (SEGMENT_BYTES - SEGMENT_HEADER_BYTES) / (RECORD_HEADER_BYTES + subject.len() as u64 + PAYLOAD_BYTES as u64);
    // One roll: one seal pending (a tick commits them aside only from three on).
    for seq in 1..=fit + 1 {
        assert_eq!(ack_of(js.publish(subject, payload(seq)).await.unwrap()).await, Ok(seq));
    }
    assert_eq!(segment_logs(&store, "ATOMROLL").len(), 2);

    // A batch filling four more segments: its fourth roll would find the bound of pending seals
    // and complete the oldest in place, its fsyncs under the lock. The next fsync is held.
    set_control(&control, "hold-one");
    let mut committed = client.subscribe("batch.committed").await.unwrap();
    let count = 4 * fit;
    for n in 1..=count {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Batch-Id", "rolls");
        headers.insert("Nats-Batch-Sequence", n.to_string().as_str());
        let reply = if n == count { "batch.committed" } else { "batch.staged" };
        if n == count {
            headers.insert("Nats-Batch-Commit", "1");
        }
        client.publish_with_reply_and_headers(subject, reply, headers, payload(fit + 1 + n)).await.unwrap();
    }
    client.flush().await.unwrap();
    wait_for_control(&control, |text| text.trim() == "holding", "the seals' commit to be held").await;

    // The seals' fsync is held before the batch's appends: the lock is free, readers are answered.
    let info = tokio::time::timeout(READ_WAIT, stream.info()).await.expect("stream info waited for the fsync").unwrap();
    assert_eq!(info.state.last_sequence, fit + 1, "the batch waits for the seals' commit");
    let got = tokio::time::timeout(READ_WAIT, stream.direct_get(fit + 1)).await.expect("DIRECT.GET waited").unwrap();
    assert_eq!(got.payload, payload(fit + 1));

    set_control(&control, "");
    let reply = tokio::time::timeout(READ_WAIT, committed.next()).await.expect("the commit's reply").unwrap();
    let reply: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!((reply["seq"].as_u64(), reply["count"].as_u64()), (Some(fit + 1 + count), Some(count)), "{reply}");
    assert_eq!(stream.info().await.unwrap().state.messages, fit + 1 + count);
    // Four rolls after the commit aside: four seals pending, none completed in place.
    assert_eq!(segment_logs(&store, "ATOMROLL").len(), 6);
}

/// Bound on the appends that fill the pending seals (debug builds, 2 cores shared); below the
/// fault switch's bound on a hold (`FAULT_HOLD_WAIT_MAX`), past which the held commit would run.
const SEALS_COMMIT_WAIT: Duration = Duration::from_secs(240);
/// Bound on the start of the seals' commit once the roll that needs it is published.
const SEALS_COMMIT_START_WAIT: Duration = Duration::from_secs(30);

/// Publishes big payloads numbered 1 to `last - 1` to `subject` on a broker on the fault switch
/// `control`: 1 is committed, the commit of 2 is held, and the others are appended behind it,
/// each roll beginning a seal that no commit completes; the next fsync (the one that completes
/// the pending seals) is held too. Returns the acks of 2 to `last - 1`.
async fn fill_the_pending_seals(
    js: &jetstream::Context,
    stream: &mut stream::Stream,
    control: &std::path::Path,
    subject: &'static str,
    last: u64,
) -> Vec<jetstream::context::PublishAckFuture> {
    use super::disk_faults::{ack_of, set_control, wait_for_control};
    /// Messages published before waiting for them to be appended: the ingest queue's bytes
    /// stay far below its bound while every ack waits behind the held commit.
    const PUBLISHED_AHEAD_COUNT: u64 = 8;
    assert_eq!(ack_of(js.publish(subject, body(1)).await.unwrap()).await, Ok(1));
    set_control(control, "hold-one");
    let mut acks = vec![js.publish(subject, body(2)).await.unwrap()];
    wait_for_control(control, |text| text.trim() == "holding", "the commit's fsync to be held").await;
    let started = Instant::now();
    set_control(control, "holding hold-one");
    let deadline = Instant::now() + SEALS_COMMIT_WAIT;
    for seq in 3..last {
        acks.push(js.publish(subject, body(seq)).await.unwrap());
        if seq % PUBLISHED_AHEAD_COUNT == 0 || seq == last - 1 {
            while stream.info().await.unwrap().state.last_sequence < seq {
                assert!(Instant::now() < deadline, "message {seq} was never appended");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    assert!(deadline < started + semaq_store::FAULT_HOLD_WAIT_MAX, "the first hold outlasts the appends");
    acks
}

/// Waits until the fsync that completes the pending seals is held (by `deadline`).
async fn wait_for_seals_commit(control: &std::path::Path, deadline: Instant) {
    while std::fs::read_to_string(control).unwrap_or_default().trim() != "holding holding" {
        assert!(Instant::now() < deadline, "the seals' commit never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How many big payloads published to `subject` fill a segment of the default size.
fn big_payloads_per_segment(subject: &str) -> u64 {
    let record_bytes = RECORD_HEADER_BYTES + subject.len() as u64 + BIG_PAYLOAD_BYTES as u64;
    (semaq_store::SEGMENT_SIZE_DEFAULT_BYTES - SEGMENT_HEADER_BYTES) / record_bytes
}

/// A big payload numbered `seq` in its first 20 bytes.
fn body(seq: u64) -> bytes::Bytes {
    let mut body = vec![b'.'; BIG_PAYLOAD_BYTES];
    body[..20].copy_from_slice(format!("{seq:020}").as_bytes());
    body.into()
}

/// Under `semaq.sync: never` a KV purge (a rollup) is still durable before its PubAck, so a
/// crash never brings the purged revisions back, but its fsync runs with the stream's lock let
/// go: readers are answered while it is held, and the purge is already what they see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_of_a_never_syncing_bucket_are_answered_while_a_purge_is_fsynced_and_it_survives_a_kill() {
    use super::disk_faults::{ack_of, broker_on_faulty_disk, set_control, wait_for_control};
    let dir = tempfile::tempdir().unwrap();
    let (store, control) = (dir.path().join("data"), dir.path().join("disk-faults"));
    let mut broker = broker_on_faulty_disk(&store, &control);
    let js = jetstream::new(broker.client().await);
    let config = stream::Config {
        name: "KV_NEVER".to_string(),
        subjects: vec!["$KV.NEVER.>".to_string()],
        max_messages_per_subject: 5,
        allow_rollup: true,
        allow_direct: true,
        metadata: [("semaq.sync".to_string(), "never".to_string())].into(),
        ..Default::default()
    };
    let mut stream = js.create_stream(config).await.unwrap();
    for revision in 1..=3u64 {
        let value = bytes::Bytes::from(format!("v{revision}"));
        assert_eq!(ack_of(js.publish("$KV.NEVER.a", value).await.unwrap()).await, Ok(revision));
    }

    set_control(&control, "hold-one");
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("KV-Operation", "PURGE");
    headers.insert("Nats-Rollup", "sub");
    let ack = js.publish_with_headers("$KV.NEVER.a", headers, bytes::Bytes::new()).await.unwrap();
    wait_for_control(&control, |text| text.trim() == "holding", "the purge's commit to be fsyncing").await;
    let acked = tokio::spawn(ack_of(ack));
    let info = tokio::time::timeout(READ_WAIT, stream.info()).await.expect("stream info waited for the fsync").unwrap();
    assert_eq!((info.state.messages, info.state.first_sequence), (1, 4), "the purge is made, its fsync held");
    let marker = tokio::time::timeout(READ_WAIT, stream.direct_get(4)).await.expect("DIRECT.GET waited").unwrap();
    assert_eq!(marker.headers.get("KV-Operation").map(|value| value.as_str()), Some("PURGE"));
    assert!(!acked.is_finished(), "acknowledged before the purge's fsync ran");

    set_control(&control, "");
    assert_eq!(acked.await.unwrap(), Ok(4));
    broker.kill();
    broker.restart();
    let js = jetstream::new(broker.client().await);
    let info = js.get_stream("KV_NEVER").await.unwrap().info().await.unwrap().state.clone();
    assert_eq!((info.messages, info.first_sequence, info.last_sequence), (1, 4, 4), "the purged revisions came back");
}
