//! The throughput engine behind `pubsub`, `fanout` and `queue`: one publisher, N subscribers.
//!
//! Every payload starts with a 16-byte stamp (send time in nanoseconds since the run's epoch, then the
//! message's sequence number), so subscribers measure publish→receive latency and the queue scenario can
//! check that each message arrived exactly once. The publisher runs at most a bounded window ahead of its
//! subscribers: without it a fast publisher overruns the client's subscription buffer or the server's
//! slow-consumer limit, messages are dropped, and the run measures loss instead of throughput.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use async_nats::{Client, Subject, Subscriber};
use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use semaq_wire::clock;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::stats::{latency_histogram, record_latency};
use super::{Load, Report};
use crate::connect::{sync_with_server, Target};

/// Bytes every payload starts with: send time (u64) and sequence number (u64), little endian.
pub const STAMP_BYTES: usize = 16;

/// Bytes the publisher may have in flight beyond the slowest subscriber; well under nats-server's
/// 64 MiB slow-consumer limit.
const WINDOW_BYTES: u64 = 8 * 1024 * 1024;
/// Bounds on the in-flight window in messages. The lower one keeps 1 MiB messages (16 MiB) under the
/// server's limit; the upper one was measured on 2 cores: 2,048 starves the pipeline while the publisher
/// sleeps 1 ms, 32,768 only adds queueing delay, 8,192 gave the most messages per second.
const WINDOW_MSGS_MIN: u64 = 16;
const WINDOW_MSGS_MAX: u64 = 8_192;
/// How often (in messages) the publisher looks at the window, the clock and the progress bar.
const CHECK_EVERY_MSGS: u64 = 256;
/// A run gives up when no subscriber receives anything for this long.
pub(super) const STALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Commands async-nats may queue between the publisher and its connection task.
const PUBLISH_QUEUE_COMMANDS: usize = 65_536;

/// Messages of `size` bytes the publisher may run ahead of its slowest subscriber.
pub(super) fn window_msgs(size: usize) -> u64 {
    (WINDOW_BYTES / size.max(1) as u64).clamp(WINDOW_MSGS_MIN, WINDOW_MSGS_MAX)
}

/// How the subscribers of a run are arranged.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Number of subscribers, each on its own connection.
    pub subscribers: usize,
    /// All subscribers join one queue group: each message is delivered once in total, not once each.
    pub queue_group: bool,
}

impl Shape {
    /// Deliveries expected for `sent` published messages.
    fn deliveries_expected(self, sent: u64) -> u64 {
        if self.queue_group {
            sent
        } else {
            sent * self.subscribers as u64
        }
    }
}

/// What one subscriber saw.
struct Received {
    count: u64,
    last_at: Option<Instant>,
    latency: Histogram<u64>,
    /// Sequence numbers seen, kept only for the queue scenario's exactly-once check.
    sequences: Vec<u64>,
}

/// State shared by the publisher and the subscribers of one run.
struct Flow {
    subject: Subject,
    shape: Shape,
    /// Time zero for the stamps; all clients are in this process, so one clock serves them all.
    epoch: Instant,
    /// Messages each subscriber has received so far, one counter per subscriber.
    counters: Arc<[AtomicU64]>,
    /// Messages the publisher may run ahead of its subscribers.
    window: u64,
}

/// Runs one publisher against `shape.subscribers` subscribers and reports delivered throughput.
pub async fn run(target: &Target, load: &Load, shape: Shape, progress: &ProgressBar) -> Result<Report> {
    run_between(target, target, load, shape, progress).await
}

/// [`run`] with the publisher connected through `publisher` and the subscribers through
/// `subscribers`: two URLs of one server, such as its TCP and WebSocket listeners.
pub async fn run_between(
    publisher: &Target,
    subscribers: &Target,
    load: &Load,
    shape: Shape,
    progress: &ProgressBar,
) -> Result<Report> {
    let flow = Arc::new(Flow {
        // Now in nanoseconds names this run apart from concurrent benches on the same server.
        subject: Subject::from(format!("semaq.bench.{}.{}", std::process::id(), clock::unix_nanos_now())),
        shape,
        epoch: Instant::now(),
        counters: (0..shape.subscribers).map(|_| AtomicU64::new(0)).collect(),
        window: window_msgs(load.size),
    });
    let (stop_sender, stop) = watch::channel(false);
    // A JoinSet aborts the receivers when dropped, so an early error return leaves no task behind.
    let mut tasks = JoinSet::new();
    let mut subscriber_clients = Vec::with_capacity(shape.subscribers);
    for index in 0..shape.subscribers {
        let (client, subscriber) = subscribe(subscribers, &flow.subject, shape).await?;
        let (flow, stop) = (flow.clone(), stop.clone());
        tasks.spawn(async move { receive(subscriber, &flow, index, stop).await });
        subscriber_clients.push(client);
    }
    let publisher = publisher.connect_tuned(|options| options.client_capacity(PUBLISH_QUEUE_COMMANDS)).await?;
    let started = Instant::now();
    let sent = flow.publish(&publisher, load, progress).await?;
    flow.wait_for_deliveries(shape.deliveries_expected(sent)).await;
    // Stop is best-effort: a receiver that already ended has dropped its end of the channel.
    let _ = stop_sender.send(true);
    let mut received = Vec::with_capacity(tasks.len());
    while let Some(result) = tasks.join_next().await {
        received.push(result.context("subscriber task failed")?);
    }
    drop(subscriber_clients);
    Ok(summarize(load, shape, sent, started, received))
}

/// Connects one subscriber and waits until the server holds its subscription.
async fn subscribe(target: &Target, subject: &Subject, shape: Shape) -> Result<(Client, Subscriber)> {
    let client = target.connect().await?;
    let subscriber = if shape.queue_group {
        client.queue_subscribe(subject.clone(), "semaq-bench".to_string()).await
    } else {
        client.subscribe(subject.clone()).await
    }
    .context("cannot subscribe")?;
    sync_with_server(&client, target.timeout).await.context("subscription not confirmed")?;
    Ok((client, subscriber))
}

/// Receives until told to stop, recording each message's latency from its stamp.
async fn receive(mut subscriber: Subscriber, flow: &Flow, index: usize, mut stop: watch::Receiver<bool>) -> Received {
    let mut received = Received { count: 0, last_at: None, latency: latency_histogram(), sequences: Vec::new() };
    loop {
        let message = tokio::select! {
            biased;
            message = subscriber.next() => message,
            _ = stop.changed() => None,
        };
        let Some(message) = message else { break };
        let now = Instant::now();
        if let Some((sent_ns, sequence)) = read_stamp(&message.payload) {
            let sent_at = flow.epoch + Duration::from_nanos(sent_ns);
            record_latency(&mut received.latency, now.saturating_duration_since(sent_at));
            if flow.shape.queue_group {
                received.sequences.push(sequence);
            }
        }
        received.count += 1;
        received.last_at = Some(now);
        // Single writer: a plain store is enough for the publisher's window and the completion wait.
        flow.counters[index].store(received.count, Ordering::Relaxed);
    }
    received
}

impl Flow {
    /// Publishes until `load.msgs` or `load.duration`, whichever comes first; returns how many were sent.
    async fn publish(&self, client: &Client, load: &Load, progress: &ProgressBar) -> Result<u64> {
        let started = Instant::now();
        let mut template = BytesMut::zeroed(load.size);
        let mut sent = 0u64;
        while sent < load.msgs {
            if sent.is_multiple_of(CHECK_EVERY_MSGS) {
                if started.elapsed() >= load.duration {
                    break;
                }
                progress.set_position(sent);
                self.wait_for_window(sent).await?;
            }
            let payload = stamp(&mut template, self.epoch, sent);
            client.publish(self.subject.clone(), payload).await.context("cannot publish")?;
            sent += 1;
        }
        client.flush().await.context("cannot flush")?;
        progress.set_position(sent);
        Ok(sent)
    }

    /// Messages the subscribers have taken, counted so it compares with messages sent.
    fn progress(&self) -> u64 {
        let counts = self.counters.iter().map(|counter| counter.load(Ordering::Relaxed));
        if self.shape.queue_group {
            counts.sum()
        } else {
            counts.min().unwrap_or(0)
        }
    }

    fn total_delivered(&self) -> u64 {
        self.counters.iter().map(|counter| counter.load(Ordering::Relaxed)).sum()
    }

    /// Sleeps while the publisher is more than `window` messages ahead; fails if the subscribers stall.
    async fn wait_for_window(&self, sent: u64) -> Result<()> {
        let mut last_progress = self.progress();
        let mut last_change = Instant::now();
        while sent.saturating_sub(self.progress()) > self.window {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let progress = self.progress();
            if progress != last_progress {
                (last_progress, last_change) = (progress, Instant::now());
            } else if last_change.elapsed() > STALL_TIMEOUT {
                bail!("subscribers stopped receiving after {progress} of {sent} messages");
            }
        }
        Ok(())
    }

    /// Waits until every expected delivery arrived, or until deliveries stall (the loss is reported).
    async fn wait_for_deliveries(&self, expected: u64) {
        let mut last_total = self.total_delivered();
        let mut last_change = Instant::now();
        while last_total < expected && last_change.elapsed() < STALL_TIMEOUT {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let total = self.total_delivered();
            if total != last_total {
                (last_total, last_change) = (total, Instant::now());
            }
        }
    }
}

/// Copies the template with the current time and sequence written into its first 16 bytes.
pub fn stamp(template: &mut BytesMut, epoch: Instant, sequence: u64) -> Bytes {
    let elapsed_ns = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut header = &mut template[..STAMP_BYTES];
    header.put_u64_le(elapsed_ns);
    header.put_u64_le(sequence);
    Bytes::copy_from_slice(template)
}

/// Reads the (send time, sequence) stamp; `None` for a payload too short to carry one.
pub fn read_stamp(payload: &[u8]) -> Option<(u64, u64)> {
    let sent_ns = u64::from_le_bytes(payload.get(0..8)?.try_into().ok()?);
    let sequence = u64::from_le_bytes(payload.get(8..16)?.try_into().ok()?);
    Some((sent_ns, sequence))
}

fn summarize(load: &Load, shape: Shape, sent: u64, started: Instant, received: Vec<Received>) -> Report {
    let delivered: u64 = received.iter().map(|r| r.count).sum();
    let finished = received.iter().filter_map(|r| r.last_at).max().unwrap_or(started);
    let mut latency = latency_histogram();
    for r in &received {
        // Same bounds on both sides, so adding cannot fail.
        let _ = latency.add(&r.latency);
    }
    let mut problems = Vec::new();
    let expected = shape.deliveries_expected(sent);
    if delivered < expected {
        problems.push(format!("lost {} of {expected} deliveries", expected - delivered));
    }
    let mut notes = Vec::new();
    if shape.queue_group {
        let counts: Vec<String> = received.iter().map(|r| super::stats::format_count(r.count)).collect();
        notes.push(format!("per member: {}", counts.join(", ")));
        match check_exactly_once(sent, received.iter().map(|r| r.sequences.as_slice())) {
            Ok(()) => notes.push("exactly-once: every message delivered to one member".to_string()),
            Err(problem) => problems.push(problem),
        }
    }
    Report {
        sent,
        delivered,
        payload_bytes: load.size,
        elapsed: finished.saturating_duration_since(started),
        latency,
        notes,
        problems,
    }
}

/// Checks that each sequence in `0..sent` was seen exactly once across all members.
pub fn check_exactly_once<'a>(sent: u64, members: impl Iterator<Item = &'a [u64]>) -> Result<(), String> {
    let mut seen = vec![false; usize::try_from(sent).unwrap_or(usize::MAX)];
    let (mut duplicates, mut strays) = (0u64, 0u64);
    for sequence in members.flatten() {
        match usize::try_from(*sequence).ok().and_then(|index| seen.get_mut(index)) {
            Some(slot) if *slot => duplicates += 1,
            Some(slot) => *slot = true,
            None => strays += 1,
        }
    }
    let missing = seen.iter().filter(|seen| !**seen).count();
    if duplicates == 0 && missing == 0 && strays == 0 {
        return Ok(());
    }
    Err(format!("exactly-once violated: {duplicates} duplicates, {missing} missing, {strays} unknown sequences"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_round_trip() {
        let epoch = Instant::now();
        let mut template = BytesMut::zeroed(32);
        let payload = stamp(&mut template, epoch, 42);
        assert_eq!(payload.len(), 32);
        let (_, sequence) = read_stamp(&payload).unwrap();
        assert_eq!(sequence, 42);
        assert_eq!(read_stamp(&payload[..10]), None);
    }

    #[test]
    fn exactly_once_detects_duplicates_and_gaps() {
        let (a, b) = (vec![0, 2], vec![1, 3]);
        assert!(check_exactly_once(4, [a.as_slice(), b.as_slice()].into_iter()).is_ok());
        let duplicate = vec![0, 1, 1];
        let error = check_exactly_once(3, [duplicate.as_slice()].into_iter()).unwrap_err();
        assert!(error.contains("1 duplicates, 1 missing"), "{error}");
    }

    #[test]
    fn fanout_expects_one_delivery_per_subscriber() {
        assert_eq!(Shape { subscribers: 8, queue_group: false }.deliveries_expected(10), 80);
        assert_eq!(Shape { subscribers: 4, queue_group: true }.deliveries_expected(10), 10);
    }
}
