//! `semaq bench compare`'s `kv` and `objstore` entries, through async-nats's own KV and Object
//! Store clients: KV puts and gets per second with a fixed number in flight, and Object Store put
//! and get throughput of one large object.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use async_nats::jetstream::{self, kv, object_store};
use futures::StreamExt;
use tokio::io::AsyncReadExt;

/// Keys written, then read, per KV run.
pub const KV_KEYS: usize = 20_000;
/// KV operations in flight at once.
const KV_IN_FLIGHT: usize = 64;
/// Bytes of the KV values.
const KV_VALUE_BYTES: usize = 128;
/// Size of the object an objstore run puts and gets.
pub const OBJECT_BYTES: usize = 64 * 1024 * 1024;
/// Bound on one whole run.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// Operations per second of one KV run.
#[derive(Debug, Clone, Copy)]
pub struct KvFigures {
    /// Acknowledged puts per second.
    pub puts_per_second: f64,
    /// Gets per second (each returning the value put).
    pub gets_per_second: f64,
}

/// Bytes per second of one object put and read back.
#[derive(Debug, Clone, Copy)]
pub struct ObjectFigures {
    /// Put throughput, bytes/s.
    pub put_bytes_per_second: f64,
    /// Get throughput, bytes/s, digest checked by the client.
    pub get_bytes_per_second: f64,
}

fn per_second(count: f64, elapsed: Duration) -> f64 {
    count / elapsed.as_secs_f64().max(1e-9)
}

/// Puts `KV_KEYS` keys into a fresh bucket, then gets each; the bucket is deleted afterwards.
/// `no_sync` sets the bucket stream's metadata `semaq.sync: never` (nats-server ignores it).
pub async fn measure_kv(url: &str, bucket: &str, no_sync: bool) -> Result<KvFigures> {
    tokio::time::timeout(RUN_TIMEOUT, kv_run(url, bucket, no_sync)).await.context("the kv run timed out")?
}

async fn kv_run(url: &str, bucket: &str, no_sync: bool) -> Result<KvFigures> {
    let client = async_nats::connect(url).await.with_context(|| format!("cannot connect to {url}"))?;
    let js = jetstream::new(client);
    let store = create_bucket(&js, bucket, no_sync).await?;
    let value = bytes::Bytes::from(vec![b'v'; KV_VALUE_BYTES]);
    let started = Instant::now();
    let puts = futures::stream::iter(0..KV_KEYS)
        .map(|index| {
            let (store, value) = (&store, value.clone());
            async move { store.put(format!("key.{index}"), value).await }
        })
        .buffer_unordered(KV_IN_FLIGHT);
    let failed = puts.filter(|outcome| std::future::ready(outcome.is_err())).count().await;
    let put_elapsed = started.elapsed();
    if failed > 0 {
        bail!("{failed} of {KV_KEYS} puts failed");
    }
    let started = Instant::now();
    let gets = futures::stream::iter(0..KV_KEYS)
        .map(|index| {
            let store = &store;
            async move { store.get(format!("key.{index}")).await }
        })
        .buffer_unordered(KV_IN_FLIGHT);
    let found = gets
        .filter(|outcome| std::future::ready(matches!(outcome, Ok(Some(got)) if got.len() == KV_VALUE_BYTES)))
        .count()
        .await;
    let get_elapsed = started.elapsed();
    if found != KV_KEYS {
        bail!("{found} of {KV_KEYS} gets returned the value put");
    }
    js.delete_key_value(bucket).await.context("cannot delete the bucket")?;
    Ok(KvFigures {
        puts_per_second: per_second(KV_KEYS as f64, put_elapsed),
        gets_per_second: per_second(KV_KEYS as f64, get_elapsed),
    })
}

/// Creates a KV bucket of history 1 as async-nats's `create_key_value` would, but through
/// `STREAM.CREATE` itself: that call first reads the account info, which async-nats 0.51 cannot
/// decode from nats-server 2.9, so both servers get the same stream made the same way.
async fn create_bucket(js: &jetstream::Context, bucket: &str, no_sync: bool) -> Result<kv::Store> {
    let mut metadata = std::collections::HashMap::new();
    if no_sync {
        metadata.insert("semaq.sync".to_string(), "never".to_string());
    }
    let config = jetstream::stream::Config {
        metadata,
        name: format!("KV_{bucket}"),
        subjects: vec![format!("$KV.{bucket}.>")],
        max_messages_per_subject: 1,
        discard: jetstream::stream::DiscardPolicy::New,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        num_replicas: 1,
        ..Default::default()
    };
    js.create_stream(config).await.context("cannot create the bucket's stream")?;
    js.get_key_value(bucket).await.context("cannot open the bucket")
}

/// Puts one `OBJECT_BYTES` object into a fresh bucket and reads it back; the bucket is deleted afterwards.
pub async fn measure_object(url: &str, bucket: &str) -> Result<ObjectFigures> {
    tokio::time::timeout(RUN_TIMEOUT, object_run(url, bucket)).await.context("the objstore run timed out")?
}

async fn object_run(url: &str, bucket: &str) -> Result<ObjectFigures> {
    let client = async_nats::connect(url).await.with_context(|| format!("cannot connect to {url}"))?;
    let js = jetstream::new(client);
    let config = object_store::Config { bucket: bucket.to_string(), ..Default::default() };
    let store = js.create_object_store(config).await.context("cannot create the bucket")?;
    let data: Vec<u8> = (0..OBJECT_BYTES).map(|index| (index % 251) as u8).collect();
    let started = Instant::now();
    store.put("object", &mut data.as_slice()).await.context("put failed")?;
    let put_elapsed = started.elapsed();
    let started = Instant::now();
    let mut object = store.get("object").await.context("get failed")?;
    let mut read = Vec::with_capacity(OBJECT_BYTES);
    object.read_to_end(&mut read).await.context("reading the object failed (digest checked)")?;
    let get_elapsed = started.elapsed();
    if read != data {
        bail!("the object read back differs from the one put");
    }
    js.delete_object_store(bucket).await.context("cannot delete the bucket")?;
    Ok(ObjectFigures {
        put_bytes_per_second: per_second(OBJECT_BYTES as f64, put_elapsed),
        get_bytes_per_second: per_second(OBJECT_BYTES as f64, get_elapsed),
    })
}
