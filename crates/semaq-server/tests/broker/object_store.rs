//! The Object Store through async-nats's own client, unchanged: objects put in chunks and read
//! back through an ordered push consumer with flow control (the client checks the digest), list,
//! watch, links, delete, info; and stream byte counts equal to nats-server's for the same workload.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, object_store, stream};
use futures::StreamExt;
use semaq_testkit::{NatsServer, SemaqServer};
use tokio::io::AsyncReadExt;

/// Bytes that differ from chunk to chunk (xorshift), so a chunk out of order fails the digest.
fn object_bytes(length: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..length)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

async fn bucket(client: async_nats::Client, name: &str) -> object_store::ObjectStore {
    let js = jetstream::new(client);
    let config = object_store::Config { bucket: name.to_string(), ..Default::default() };
    js.create_object_store(config).await.expect("create the bucket")
}

async fn read_all(store: &object_store::ObjectStore, name: &str) -> Vec<u8> {
    let mut object = store.get(name).await.unwrap_or_else(|error| panic!("get {name}: {error}"));
    let mut data = Vec::new();
    // async-nats fails the read when the chunks' SHA-256 differs from the object's digest.
    object.read_to_end(&mut data).await.unwrap_or_else(|error| panic!("read {name}: {error}"));
    data
}

async fn names(list: object_store::List) -> Vec<String> {
    let mut names: Vec<String> = list.map(|info| info.expect("list entry").name).collect().await;
    names.sort();
    names
}

#[tokio::test]
async fn objects_of_a_few_mib_and_of_many_chunks_round_trip_with_their_digest() {
    let server = SemaqServer::start();
    let store = bucket(server.client().await, "files").await;

    let three_mib = object_bytes(3 * 1024 * 1024 + 17, 1);
    let info = store.put("reports/q3.pdf", &mut three_mib.as_slice()).await.expect("put");
    assert_eq!((info.size, info.chunks), (three_mib.len(), 25), "128 KiB chunks, the last one partial");
    assert!(info.digest.as_deref().is_some_and(|digest| digest.starts_with("SHA-256=")));
    assert_eq!(read_all(&store, "reports/q3.pdf").await, three_mib);

    let many = object_bytes(2 * 1024 * 1024, 2);
    let meta = object_store::ObjectMetadata { name: "many".to_string(), chunk_size: Some(1024), ..Default::default() };
    let info = store.put(meta, &mut many.as_slice()).await.expect("put in 1 KiB chunks");
    assert_eq!(info.chunks, 2048);
    assert_eq!(read_all(&store, "many").await, many, "2048 chunks in order");

    let described = store.info("many").await.expect("info");
    assert_eq!((described.name.as_str(), described.size, described.bucket.as_str()), ("many", many.len(), "files"));
    assert_eq!(described.digest, info.digest);
    assert!(!described.deleted);
}

#[tokio::test]
async fn list_watch_links_and_delete() {
    let server = SemaqServer::start();
    let store = bucket(server.client().await, "docs").await;
    store.put("a.txt", &mut &b"alpha"[..]).await.unwrap();
    let bravo = object_bytes(300_000, 3);
    let b_info = store.put("b.txt", &mut bravo.as_slice()).await.unwrap();
    assert_eq!(names(store.list().await.unwrap()).await, ["a.txt", "b.txt"]);

    let mut watch = store.watch().await.expect("watch");
    let mut next_update = async || {
        let update = tokio::time::timeout(Duration::from_secs(5), watch.next()).await.expect("an update in time");
        let info = update.expect("the watch goes on").expect("an object info");
        (info.name, info.deleted)
    };
    store.put("c.txt", &mut &b"charlie"[..]).await.unwrap();
    assert_eq!(next_update().await, ("c.txt".into(), false), "a watcher sees new objects, not the current ones");

    let link = store.add_link("latest", &b_info).await.expect("add a link");
    assert_eq!(link.options.and_then(|options| options.link).map(|link| link.name), Some(Some("b.txt".into())));
    assert_eq!(next_update().await, ("latest".into(), false));
    assert_eq!(read_all(&store, "latest").await, bravo, "a link reads its target");

    store.delete("a.txt").await.expect("delete");
    assert_eq!(next_update().await, ("a.txt".into(), true));
    assert!(store.get("a.txt").await.is_err(), "a deleted object is gone");
    assert!(store.info("a.txt").await.expect("info of a deleted object").deleted);

    let js = jetstream::new(server.client().await);
    let mut stream = js.get_stream("OBJ_docs").await.unwrap();
    let info = stream.info().await.unwrap();
    assert_eq!(info.config.subjects, ["$O.docs.C.>", "$O.docs.M.>"]);
    assert!(info.config.allow_direct && info.config.allow_rollup);
    let chunks = stream.info_with_subjects("$O.docs.C.>").await.unwrap();
    let chunk_counts: Vec<usize> = chunks.map(|subject| subject.unwrap().1).collect().await;
    assert_eq!(chunk_counts.iter().sum::<usize>(), 3 + 1, "b.txt's 3 chunks and c.txt's; a.txt's were purged");
}

/// fsyncs so far (`semaq_store_sync_seconds_count` in /metrics).
fn syncs(server: &SemaqServer) -> u64 {
    let (status, text) = server.http_text("/metrics");
    assert_eq!(status, 200, "{text}");
    let line = text.lines().find(|line| line.starts_with("semaq_store_sync_seconds_count "));
    let count = line.and_then(|line| line.rsplit_once(' ')).and_then(|(_, count)| count.parse::<f64>().ok());
    count.unwrap_or_else(|| panic!("no sync count in:\n{text}")) as u64
}

/// The chunks of an object are made durable by the fsync before its meta message is
/// acknowledged (which covers the whole log), not one fsync each: a 32-chunk put costs one sync,
/// the meta's. A bucket whose stream sets `semaq.sync: always` itself syncs every chunk.
#[tokio::test]
async fn an_objects_chunks_are_synced_with_its_meta_message_not_one_by_one() {
    let server = SemaqServer::start();
    let data = object_bytes(32 * 128 * 1024, 4);
    let store = bucket(server.client().await, "grouped").await;
    let before = syncs(&server);
    let info = store.put("big", &mut data.as_slice()).await.expect("put");
    assert_eq!((info.chunks, syncs(&server) - before), (32, 1), "32 chunks, one sync (the meta's)");
    assert_eq!(read_all(&store, "big").await, data);

    let js = jetstream::new(server.client().await);
    js.create_stream(stream::Config {
        name: "OBJ_strict".into(),
        subjects: vec!["$O.strict.C.>".into(), "$O.strict.M.>".into()],
        discard: stream::DiscardPolicy::New,
        allow_rollup: true,
        allow_direct: true,
        metadata: [("semaq.sync".to_string(), "always".to_string())].into(),
        ..Default::default()
    })
    .await
    .expect("the strict bucket's stream");
    let strict = js.get_object_store("strict").await.expect("open the strict bucket");
    let before = syncs(&server);
    strict.put("big", &mut data.as_slice()).await.expect("put");
    assert_eq!(syncs(&server) - before, 33, "one sync per chunk and one for the meta");
    assert_eq!(read_all(&strict, "big").await, data);
}

/// A workload with and without headers on a few subjects; returns the stream's state and the
/// info of a filtered pull consumer that fetched and acked part of it.
async fn byte_workload(client: async_nats::Client, storage: stream::StorageType) -> (stream::State, [u64; 6]) {
    let js = jetstream::new(client);
    let config = stream::Config {
        name: "BYTES".to_string(),
        subjects: vec!["bytes.>".to_string()],
        storage,
        ..Default::default()
    };
    let mut stream = js.create_stream(config).await.expect("create");
    for index in 0..40u32 {
        let subject = format!("bytes.{}", ["eu", "us", "asia.east"][index as usize % 3]);
        let payload = object_bytes(index as usize * 37, u64::from(index) + 7);
        if index % 2 == 0 {
            js.publish(subject, payload.into()).await.unwrap().await.unwrap();
        } else {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Order-Id", format!("order-{index}").as_str());
            js.publish_with_headers(subject, headers, payload.into()).await.unwrap().await.unwrap();
        }
    }
    let consumer_config = consumer::pull::Config {
        durable_name: Some("eu".into()),
        filter_subject: "bytes.eu".into(),
        ..Default::default()
    };
    let consumer = stream.create_consumer(consumer_config).await.unwrap();
    let mut batch = consumer.fetch().max_messages(5).messages().await.unwrap();
    for _ in 0..5 {
        let message = batch.next().await.expect("a message").unwrap();
        if message.info().unwrap().stream_sequence != 4 {
            // Confirmed, so the info below sees it on both servers (nats-server takes a plain
            // ack in its own time, and sometimes answers the info first).
            message.double_ack().await.unwrap();
        }
    }
    let mut consumer = stream.get_consumer::<consumer::pull::Config>("eu").await.unwrap();
    let info = consumer.info().await.unwrap().clone();
    let numbers = [
        info.num_pending,
        info.delivered.consumer_sequence,
        info.delivered.stream_sequence,
        info.ack_floor.stream_sequence,
        info.num_ack_pending as u64,
        info.num_waiting as u64,
    ];
    (stream.info().await.unwrap().state.clone(), numbers)
}

async fn max_bytes_workload(client: async_nats::Client, storage: stream::StorageType) -> stream::State {
    let js = jetstream::new(client);
    let config = stream::Config {
        name: "CAPPED".to_string(),
        subjects: vec!["capped".to_string()],
        storage,
        max_bytes: 1000,
        ..Default::default()
    };
    let mut stream = js.create_stream(config).await.expect("create");
    for index in 0..30usize {
        js.publish("capped", object_bytes(index * 5, 11).into()).await.unwrap().await.unwrap();
    }
    stream.info().await.unwrap().state.clone()
}

#[tokio::test]
async fn stream_bytes_and_limits_count_as_nats_server_does() {
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsServer::with_args(&["-js", "-sd", &dir.path().display().to_string()]);
    for storage in [stream::StorageType::File, stream::StorageType::Memory] {
        let server = SemaqServer::start();
        let (ours, our_consumer) = byte_workload(server.client().await, storage).await;
        let (theirs, their_consumer) = byte_workload(nats.client().await, storage).await;
        assert_eq!((ours.messages, ours.bytes), (theirs.messages, theirs.bytes), "{storage:?}");
        assert_eq!(our_consumer, their_consumer, "{storage:?}: pending, delivered, ack floor, ack pending, waiting");

        let ours = max_bytes_workload(server.client().await, storage).await;
        let theirs = max_bytes_workload(nats.client().await, storage).await;
        assert_eq!(
            (ours.messages, ours.bytes, ours.first_sequence),
            (theirs.messages, theirs.bytes, theirs.first_sequence)
        );

        let js = jetstream::new(nats.client().await);
        js.delete_stream("BYTES").await.unwrap();
        js.delete_stream("CAPPED").await.unwrap();
    }
}
