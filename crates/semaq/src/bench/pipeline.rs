//! `js-pipeline`: a stream in use as a pipeline stage. One publisher keeps up to [`ACK_WINDOW`]
//! PubAcks outstanding on a file stream (default durability) while a durable pull consumer on the
//! same stream receives and acks each message as it arrives. The figures are messages consumed
//! per second (from the first publish to the last message received) and publish→receive latency
//! (payloads carry `flow.rs`'s send-time stamp), so a server whose readers wait behind its writers
//! shows here, where neither `js-pub` nor `js-consume` alone would.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use async_nats::jetstream::consumer::PullConsumer;
use bytes::BytesMut;
use futures::StreamExt;
use indicatif::ProgressBar;

use super::flow::{read_stamp, stamp};
use super::jetstream::{
    bench_consumer, publish_pipelined_with, wait_for_ack_floor, BenchStream, Durability, PublishPlan, ACK_WINDOW,
    CONSUME_STALL_TIMEOUT, PULL_BATCH,
};
use super::stats::{format_count, latency_histogram, record_latency};
use super::{Load, Report};
use crate::connect::Target;

/// Runs `js-pipeline` on a new stream, deleted afterwards.
pub async fn run(target: &Target, load: &Load, progress: &ProgressBar) -> Result<Report> {
    let stream = BenchStream::create(target, Durability::Default, "pipeline").await?;
    let result = publish_while_consuming(&stream, load, progress).await;
    stream.delete().await;
    result
}

async fn publish_while_consuming(stream: &BenchStream, load: &Load, progress: &ProgressBar) -> Result<Report> {
    let consumer = bench_consumer(stream).await?;
    let epoch = Instant::now();
    // Every message is published: the consumer knows how many to wait for.
    let plan = PublishPlan { msgs: load.msgs, size: load.size, deadline: None };
    let hidden = ProgressBar::hidden();
    let mut template = BytesMut::zeroed(load.size);
    let publish = publish_pipelined_with(stream, &plan, &hidden, |index| (None, stamp(&mut template, epoch, index)));
    let (published, consumed) = tokio::join!(publish, consume(&consumer, load, epoch, progress));
    let published = published?;
    let problems = published.problems(Some(stream.stored_messages().await?));
    if !problems.is_empty() {
        bail!("publishing failed: {}", problems.join("; "));
    }
    let (received, last_received, latency) = consumed?;
    stream.context.client().flush().await.context("cannot flush the acks")?;
    wait_for_ack_floor(&consumer, published.acked).await?;
    let notes = vec![
        format!("{ACK_WINDOW} PubAcks outstanding; pull batches of {PULL_BATCH}, explicit ack per message"),
        format!(
            "published {} in {:.3} s; the last one received at {:.3} s; latency is publish→receive",
            format_count(published.acked),
            published.elapsed.as_secs_f64(),
            last_received.as_secs_f64()
        ),
    ];
    Ok(Report {
        sent: published.acked,
        delivered: received,
        payload_bytes: load.size,
        elapsed: last_received,
        latency,
        notes,
        problems: Vec::new(),
    })
}

/// Receives and acks `load.msgs` messages; how many, when the last arrived, and their latencies.
async fn consume(
    consumer: &PullConsumer,
    load: &Load,
    epoch: Instant,
    progress: &ProgressBar,
) -> Result<(u64, Duration, hdrhistogram::Histogram<u64>)> {
    let mut latency = latency_histogram();
    let mut messages =
        consumer.stream().max_messages_per_batch(PULL_BATCH).messages().await.context("cannot start pulling")?;
    let mut received = 0u64;
    while received < load.msgs {
        let message = match tokio::time::timeout(CONSUME_STALL_TIMEOUT, messages.next()).await {
            Err(_) => bail!("no message for {}s after {received} of {}", CONSUME_STALL_TIMEOUT.as_secs(), load.msgs),
            Ok(None) => bail!("the pull stream ended after {received} of {}", load.msgs),
            Ok(Some(message)) => message.context("pull failed")?,
        };
        if let Some((sent_ns, _)) = read_stamp(&message.payload) {
            record_latency(&mut latency, epoch.elapsed().saturating_sub(Duration::from_nanos(sent_ns)));
        }
        message.ack().await.map_err(|error| anyhow::anyhow!("cannot ack: {error}"))?;
        received += 1;
        if received.is_multiple_of(1024) {
            progress.set_position(received);
        }
    }
    progress.set_position(received);
    Ok((received, epoch.elapsed(), latency))
}
