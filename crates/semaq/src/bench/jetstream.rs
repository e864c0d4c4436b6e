//! The JetStream scenarios: acknowledged publishing to a file stream and pulling from one.
//!
//! - `js-pub` / `js-pub-nosync`: one publisher keeps up to [`ACK_WINDOW`] PubAcks outstanding; the figure
//!   is acknowledged messages per second. `js-pub` leaves the stream at the server's default durability
//!   (SemaQ fsyncs before it acks); `js-pub-nosync` sets the stream metadata `semaq.sync: never`, which
//!   nats-server stores and ignores (it never fsyncs per message by default).
//! - `js-pub-sync` / `js-pub-sync-nosync`: one publish at a time, each ack awaited; the figures are the ack
//!   latency percentiles.
//! - `js-consume`: a stream is filled first (not timed), then a durable pull consumer receives and
//!   explicitly acks every message; the clock stops when the server reports the last ack processed.
//!
//! Every run creates its own stream on a fresh subject and deletes it afterwards, so runs on a
//! long-lived server neither see each other's messages nor pile up data.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use async_nats::jetstream::consumer::{pull, AckPolicy, PullConsumer};
use async_nats::jetstream::context::{Context, ContextBuilder};
use async_nats::jetstream::stream::{Config as StreamConfig, RetentionPolicy, StorageType};
use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use semaq_wire::clock;

use super::stats::{format_count, latency_histogram, record_latency};
use super::{Load, Report};
use crate::connect::Target;

/// PubAcks one pipelined publisher may wait for at once (the "window 1,000").
pub const ACK_WINDOW: usize = 1_000;
/// How long a publish may wait for its ack, and an API request for its answer.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);
/// Messages one pull request asks for; the client asks for more when half have arrived.
pub const PULL_BATCH: usize = 1_000;
/// Unacknowledged deliveries the bench consumer allows; above what a batch keeps in flight, so it does
/// not throttle the pull, and set explicitly because the servers' defaults differ.
const CONSUMER_MAX_ACK_PENDING: i64 = 10_000;
/// A consumer run fails when nothing arrives for this long.
pub const CONSUME_STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the server may take to report the last ack processed after the client sent it.
const ACK_FLOOR_TIMEOUT: Duration = Duration::from_secs(10);
/// Acked publishes before the timed part of `js-pub-sync`: the first sets up async-nats' reply inbox.
const SYNC_WARMUP_PUBLISHES: u64 = 100;
/// How often the publisher looks at the clock and the progress bar.
const CHECK_EVERY_MSGS: u64 = 256;

/// Whether the stream asks SemaQ to skip the fsync before each ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The server's default: SemaQ fsyncs before acking, nats-server syncs every two minutes.
    Default,
    /// Stream metadata `semaq.sync: never` (nats-server stores and ignores it).
    NoSync,
}

/// A file stream created for one run.
pub struct BenchStream {
    /// The JetStream context the stream was created with.
    pub context: Context,
    /// Stream name.
    pub name: String,
    /// The one subject the stream captures.
    pub subject: String,
}

impl BenchStream {
    /// Connects and creates a file stream with a fresh name and subject.
    pub async fn create(target: &Target, durability: Durability, tag: &str) -> Result<BenchStream> {
        let client = target.connect().await?;
        let context = ContextBuilder::new().timeout(ACK_TIMEOUT).build(client);
        let mut metadata = HashMap::new();
        if durability == Durability::NoSync {
            metadata.insert("semaq.sync".to_string(), "never".to_string());
        }
        Self::create_in(context, tag, metadata).await
    }

    /// Creates a file stream with a fresh name and subject, and `metadata`, through `context`.
    pub async fn create_in(context: Context, tag: &str, metadata: HashMap<String, String>) -> Result<BenchStream> {
        Self::create_retaining(context, tag, metadata, RetentionPolicy::Limits).await
    }

    /// As [`create_in`](Self::create_in), with `retention`.
    async fn create_retaining(
        context: Context,
        tag: &str,
        metadata: HashMap<String, String>,
        retention: RetentionPolicy,
    ) -> Result<BenchStream> {
        // Now in nanoseconds names this run apart from concurrent benches on the same server.
        let unique = clock::unix_nanos_now();
        let name = format!("SEMAQ_BENCH_{}_{tag}_{unique}", std::process::id()).replace('-', "_");
        let subject = format!("semaq.bench.js.{}.{unique}", std::process::id());
        let config = StreamConfig {
            name: name.clone(),
            subjects: vec![subject.clone()],
            storage: StorageType::File,
            metadata,
            retention,
            ..Default::default()
        };
        context.create_stream(config).await.with_context(|| format!("cannot create stream {name}"))?;
        Ok(BenchStream { context, name, subject })
    }

    /// Messages the server reports stored.
    pub async fn stored_messages(&self) -> Result<u64> {
        let stream = self.context.get_stream(&self.name).await.context("STREAM.INFO failed")?;
        Ok(stream.cached_info().state.messages)
    }

    /// Deletes the stream and its data; best effort, a failure only leaves data behind.
    pub async fn delete(self) {
        if let Err(error) = self.context.delete_stream(&self.name).await {
            eprintln!("semaq: warning: cannot delete bench stream {}: {error}", self.name);
        }
    }
}

/// What a publishing run saw.
pub struct Published {
    /// Publishes sent.
    pub sent: u64,
    /// Positive acks received (duplicates excluded).
    pub acked: u64,
    /// From the first publish to the last ack.
    pub elapsed: Duration,
    /// Publish→ack latency per message.
    pub latency: Histogram<u64>,
    /// Acks that were errors, timeouts or duplicates.
    pub failed: u64,
    /// The first failure, for the report.
    pub first_failure: Option<String>,
}

impl Published {
    /// Nothing sent yet.
    fn new() -> Self {
        Published {
            sent: 0,
            acked: 0,
            elapsed: Duration::ZERO,
            latency: latency_histogram(),
            failed: 0,
            first_failure: None,
        }
    }
}

/// How a pipelined publisher stops: after `msgs`, or when `deadline` has passed since the first publish.
pub struct PublishPlan {
    /// Messages to publish.
    pub msgs: u64,
    /// Payload size.
    pub size: usize,
    /// Stop publishing after this long (`None`: publish all `msgs`).
    pub deadline: Option<Duration>,
}

/// Publishes with up to [`ACK_WINDOW`] acks outstanding and waits for all of them.
pub async fn publish_pipelined(stream: &BenchStream, plan: &PublishPlan, progress: &ProgressBar) -> Result<Published> {
    let payload = Bytes::from(vec![b'x'; plan.size]);
    publish_pipelined_with(stream, plan, progress, |_| (None, payload.clone())).await
}

/// [`publish_pipelined`] with a given payload (`plan.size` is not used).
pub async fn publish_payload_pipelined(
    stream: &BenchStream,
    plan: &PublishPlan,
    payload: Bytes,
    progress: &ProgressBar,
) -> Result<Published> {
    publish_pipelined_with(stream, plan, progress, |_| (None, payload.clone())).await
}

/// [`publish_pipelined`] with each message's headers and payload made by `message(index)`.
pub async fn publish_pipelined_with(
    stream: &BenchStream,
    plan: &PublishPlan,
    progress: &ProgressBar,
    mut message: impl FnMut(u64) -> (Option<async_nats::HeaderMap>, Bytes),
) -> Result<Published> {
    let mut in_flight = FuturesUnordered::new();
    let mut outcome = Published::new();
    let started = Instant::now();
    while outcome.sent < plan.msgs {
        if outcome.sent.is_multiple_of(CHECK_EVERY_MSGS) {
            if plan.deadline.is_some_and(|deadline| started.elapsed() >= deadline) {
                break;
            }
            progress.set_position(outcome.acked);
        }
        // Take the acks that already arrived, then wait only if the window is full.
        while let Some(Some(result)) = in_flight.next().now_or_never() {
            outcome.record(result);
        }
        while in_flight.len() >= ACK_WINDOW {
            match in_flight.next().await {
                Some(result) => outcome.record(result),
                None => break,
            }
        }
        let sent_at = Instant::now();
        let ack = match message(outcome.sent) {
            (None, payload) => stream.context.publish(stream.subject.clone(), payload).await,
            (Some(headers), payload) => {
                stream.context.publish_with_headers(stream.subject.clone(), headers, payload).await
            }
        };
        let ack = ack.context("cannot publish")?;
        in_flight.push(async move { (ack.await, sent_at.elapsed()) });
        outcome.sent += 1;
    }
    while let Some(result) = in_flight.next().await {
        outcome.record(result);
    }
    outcome.elapsed = started.elapsed();
    progress.set_position(outcome.acked);
    Ok(outcome)
}

type AckResult =
    (Result<async_nats::jetstream::publish::PublishAck, async_nats::jetstream::context::PublishError>, Duration);

impl Published {
    fn record(&mut self, (result, latency): AckResult) {
        match result {
            Ok(ack) if !ack.duplicate => {
                self.acked += 1;
                record_latency(&mut self.latency, latency);
            }
            Ok(ack) => self.fail(format!("ack for seq {} says duplicate", ack.sequence)),
            Err(error) => self.fail(error.to_string()),
        }
    }

    fn fail(&mut self, error: String) {
        self.failed += 1;
        self.first_failure.get_or_insert(error);
    }

    /// Problems worth failing a run for: failed acks, or a stored count that differs from the acks.
    pub fn problems(&self, stored: Option<u64>) -> Vec<String> {
        let mut problems = Vec::new();
        if self.failed > 0 {
            problems.push(format!(
                "{} of {} publishes not acknowledged (first: {})",
                self.failed,
                self.sent,
                self.first_failure.as_deref().unwrap_or("?")
            ));
        }
        if let Some(stored) = stored {
            if stored != self.acked {
                problems.push(format!("stream holds {stored} messages after {} acks", self.acked));
            }
        }
        problems
    }
}

/// `js-pub` and `js-pub-nosync`: acknowledged messages per second with a window of [`ACK_WINDOW`].
pub async fn run_publish(
    target: &Target,
    load: &Load,
    durability: Durability,
    progress: &ProgressBar,
) -> Result<Report> {
    let stream = BenchStream::create(target, durability, "pub").await?;
    let plan = PublishPlan { msgs: load.msgs, size: load.size, deadline: Some(load.duration) };
    let result = publish_pipelined(&stream, &plan, progress).await;
    let stored = stream.stored_messages().await.ok();
    stream.delete().await;
    let published = result?;
    let mut problems = published.problems(stored);
    if stored.is_none() {
        problems.push("cannot read the stream's message count".to_string());
    }
    let notes = vec![format!("window {ACK_WINDOW} acks outstanding; {}", describe_durability(durability))];
    Ok(Report {
        sent: published.sent,
        delivered: published.acked,
        payload_bytes: load.size,
        elapsed: published.elapsed,
        latency: published.latency,
        notes,
        problems,
    })
}

fn describe_durability(durability: Durability) -> &'static str {
    match durability {
        Durability::Default => "stream at the server's default durability (SemaQ: fsync before ack)",
        Durability::NoSync => "stream metadata semaq.sync=never (SemaQ: ack after write, no fsync)",
    }
}

/// `js-pub-sync`: one publish at a time, each ack awaited; publish→ack latency.
pub async fn run_publish_sync(
    target: &Target,
    load: &Load,
    durability: Durability,
    progress: &ProgressBar,
) -> Result<Report> {
    let stream = BenchStream::create(target, durability, "sync").await?;
    let result = publish_one_at_a_time(&stream, load, progress).await;
    let stored = stream.stored_messages().await.ok();
    stream.delete().await;
    let published = result?;
    let expected_stored = stored.map(|stored| stored.saturating_sub(SYNC_WARMUP_PUBLISHES));
    let mut problems = published.problems(expected_stored);
    if stored.is_none() {
        problems.push("cannot read the stream's message count".to_string());
    }
    Ok(Report {
        sent: published.sent,
        delivered: published.acked,
        payload_bytes: load.size,
        elapsed: published.elapsed,
        latency: published.latency,
        notes: vec![describe_durability(durability).to_string()],
        problems,
    })
}

async fn publish_one_at_a_time(stream: &BenchStream, load: &Load, progress: &ProgressBar) -> Result<Published> {
    let payload = Bytes::from(vec![b'x'; load.size]);
    for _ in 0..SYNC_WARMUP_PUBLISHES {
        let ack = stream.context.publish(stream.subject.clone(), payload.clone()).await.context("cannot publish")?;
        ack.await.context("warm-up publish not acknowledged")?;
    }
    let mut outcome = Published::new();
    let started = Instant::now();
    while outcome.sent < load.msgs && started.elapsed() < load.duration {
        let sent_at = Instant::now();
        let ack = stream.context.publish(stream.subject.clone(), payload.clone()).await.context("cannot publish")?;
        let result = ack.await;
        outcome.record((result, sent_at.elapsed()));
        outcome.sent += 1;
        if outcome.sent.is_multiple_of(CHECK_EVERY_MSGS) {
            progress.set_position(outcome.sent);
        }
    }
    outcome.elapsed = started.elapsed();
    progress.set_position(outcome.sent);
    Ok(outcome)
}

/// `js-consume`: fills a stream with `load.msgs` messages (not timed), then pulls and acks them all.
pub async fn run_consume(target: &Target, load: &Load, progress: &ProgressBar) -> Result<Report> {
    // The fill is not measured; skipping SemaQ's fsync only makes it quicker.
    let stream = BenchStream::create(target, Durability::NoSync, "consume").await?;
    let result = fill_and_consume(&stream, load, progress).await;
    stream.delete().await;
    result
}

/// `js-consume-wq`: as `js-consume` on a work-queue stream with the server's default
/// durability, where every ack removes its message; checks that the stream ends empty.
pub async fn run_consume_work_queue(target: &Target, load: &Load, progress: &ProgressBar) -> Result<Report> {
    let context = ContextBuilder::new().timeout(ACK_TIMEOUT).build(target.connect().await?);
    let stream = BenchStream::create_retaining(context, "work", HashMap::new(), RetentionPolicy::WorkQueue).await?;
    let result = fill_and_consume(&stream, load, progress).await;
    let left = stream.stored_messages().await;
    stream.delete().await;
    let mut report = result?;
    match left {
        Ok(0) => {}
        Ok(left) => report.problems.push(format!("{left} acknowledged messages left in the work queue")),
        Err(error) => report.problems.push(format!("cannot read what the work queue kept: {error:#}")),
    }
    Ok(report)
}

async fn fill_and_consume(stream: &BenchStream, load: &Load, progress: &ProgressBar) -> Result<Report> {
    let plan = PublishPlan { msgs: load.msgs, size: load.size, deadline: None };
    let filled = publish_pipelined(stream, &plan, &ProgressBar::hidden()).await?;
    let problems = filled.problems(Some(stream.stored_messages().await?));
    if !problems.is_empty() {
        bail!("filling the stream failed: {}", problems.join("; "));
    }
    let total = filled.acked;
    let consumer = bench_consumer(stream).await?;
    let mut seen = vec![false; usize::try_from(total).context("too many messages")?];
    let (mut received, mut duplicates, mut strays) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    let mut messages =
        consumer.stream().max_messages_per_batch(PULL_BATCH).messages().await.context("cannot start pulling")?;
    while received < total {
        let next = tokio::time::timeout(CONSUME_STALL_TIMEOUT, messages.next()).await;
        let message = match next {
            Err(_) => bail!("no message for {}s after {received} of {total}", CONSUME_STALL_TIMEOUT.as_secs()),
            Ok(None) => bail!("the pull stream ended after {received} of {total}"),
            Ok(Some(message)) => message.context("pull failed")?,
        };
        let sequence = message.info().map(|info| info.stream_sequence).map_err(|e| anyhow::anyhow!("{e}"))?;
        match usize::try_from(sequence).ok().and_then(|s| s.checked_sub(1)).and_then(|index| seen.get_mut(index)) {
            Some(slot) if *slot => duplicates += 1,
            Some(slot) => {
                *slot = true;
                received += 1;
            }
            None => strays += 1,
        }
        message.ack().await.map_err(|e| anyhow::anyhow!("cannot ack: {e}"))?;
        if received.is_multiple_of(CHECK_EVERY_MSGS) {
            progress.set_position(received);
        }
    }
    let last_received = started.elapsed();
    drop(messages);
    stream.context.client().flush().await.context("cannot flush the acks")?;
    wait_for_ack_floor(&consumer, total).await?;
    let elapsed = started.elapsed();
    progress.set_position(received);
    let mut problems = Vec::new();
    if duplicates > 0 || strays > 0 {
        problems.push(format!("{duplicates} messages delivered twice, {strays} with unknown sequences"));
    }
    let notes = vec![
        format!("pull batches of {PULL_BATCH}, explicit ack per message, max_ack_pending {CONSUMER_MAX_ACK_PENDING}"),
        format!(
            "every one of {} stored messages received once; last received at {:.3} s, last ack processed at {:.3} s",
            format_count(total),
            last_received.as_secs_f64(),
            elapsed.as_secs_f64()
        ),
    ];
    Ok(Report {
        sent: total,
        delivered: received,
        payload_bytes: load.size,
        elapsed,
        latency: latency_histogram(),
        notes,
        problems,
    })
}

/// The durable pull consumer with explicit acks that the consuming scenarios read with.
pub async fn bench_consumer(stream: &BenchStream) -> Result<PullConsumer> {
    let config = pull::Config {
        durable_name: Some("semaq-bench".to_string()),
        ack_policy: AckPolicy::Explicit,
        max_ack_pending: CONSUMER_MAX_ACK_PENDING,
        ..Default::default()
    };
    stream
        .context
        .create_consumer_on_stream(config, stream.name.as_str())
        .await
        .context("cannot create the pull consumer")
}

/// Waits until the server reports every message acknowledged.
pub async fn wait_for_ack_floor(consumer: &PullConsumer, last_sequence: u64) -> Result<()> {
    let deadline = Instant::now() + ACK_FLOOR_TIMEOUT;
    loop {
        let info = consumer.get_info().await.context("CONSUMER.INFO failed")?;
        if info.ack_floor.stream_sequence >= last_sequence && info.num_ack_pending == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "the server reports acks up to {} of {last_sequence} ({} pending) after {}s",
                info.ack_floor.stream_sequence,
                info.num_ack_pending,
                ACK_FLOOR_TIMEOUT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::super::js_store;
    use super::super::server::ServerSpec;
    use super::super::Scenario;
    use super::*;

    fn nats_server() -> Option<PathBuf> {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path).map(|dir| dir.join("nats-server")).find(|candidate| candidate.is_file())
    }

    /// Every JetStream scenario completes without problems on nats-server and leaves no stream behind;
    /// the store measurement restarts it and finds every message.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scenarios_run_against_nats_server() {
        let Some(program) = nats_server() else {
            eprintln!("skipping scenarios_run_against_nats_server: nats-server is not on PATH");
            return;
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let spec = ServerSpec::new("nats", program);
        let server = spec.start(dir.path()).expect("nats-server starts");
        let target = Target::plain(server.url.clone(), Duration::from_secs(5));
        let load = Load { msgs: 3_000, size: 128, duration: Duration::from_secs(10) };
        let scenarios = [
            Scenario::JsPub,
            Scenario::JsPubNosync,
            Scenario::JsPubSync,
            Scenario::JsPubSyncNosync,
            Scenario::JsConsume,
            Scenario::JsConsumeWq,
            Scenario::JsPipeline,
        ];
        for scenario in scenarios {
            let report = scenario.run(&target, &load, &ProgressBar::hidden()).await;
            let report = report.unwrap_or_else(|error| panic!("{}: {error:#}", scenario.name()));
            assert!(report.problems.is_empty(), "{}: {:?}", scenario.name(), report.problems);
            assert_eq!((report.sent, report.delivered), (3_000, 3_000), "{}", scenario.name());
            assert!(report.rate() > 0.0);
        }
        let context = async_nats::jetstream::new(target.connect().await.expect("connect"));
        let left: Vec<String> = context.stream_names().filter_map(|name| async { name.ok() }).collect().await;
        assert!(left.is_empty(), "bench streams left behind: {left:?}");

        let report = js_store::measure(&spec, dir.path(), 5_000, 128, true).await.expect("store and restart");
        assert_eq!(report.msgs, 5_000);
        assert!(report.rss_after > 0);
        let restart = report.restart.expect("restart measured");
        assert!(restart.ready >= restart.accepting, "{restart:?}");
    }
}
