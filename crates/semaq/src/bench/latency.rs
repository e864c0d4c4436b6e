//! The `latency` scenario: sequential request/reply round trips to a responder on another connection.

use std::time::Instant;

use anyhow::{Context, Result};
use async_nats::Subject;
use bytes::Bytes;
use futures::StreamExt;
use indicatif::ProgressBar;

use super::stats::{latency_histogram, record_latency};
use super::{Load, Report};
use crate::connect::{sync_with_server, Target};

/// Round trips before measuring: the first request sets up async-nats' reply subscription.
const WARMUP_REQUESTS: u64 = 100;

/// Measures one request in flight at a time, so each sample is a pure round trip without queueing.
pub async fn run(target: &Target, load: &Load, progress: &ProgressBar) -> Result<Report> {
    let subject = Subject::from(format!("semaq.bench.latency.{}", std::process::id()));
    let responder = target.connect().await?;
    let mut requests = responder.subscribe(subject.clone()).await.context("cannot subscribe the responder")?;
    sync_with_server(&responder, target.timeout).await.context("responder subscription not confirmed")?;
    let echo = tokio::spawn({
        let responder = responder.clone();
        async move {
            while let Some(request) = requests.next().await {
                if let Some(reply) = request.reply {
                    // A failed reply shows up as a timeout on the requesting side.
                    let _ = responder.publish(reply, request.payload).await;
                }
            }
        }
    });
    let result = round_trips(target, &subject, load, progress).await;
    echo.abort();
    result
}

/// Sends requests one after another and records each round trip.
async fn round_trips(target: &Target, subject: &Subject, load: &Load, progress: &ProgressBar) -> Result<Report> {
    let requester = target.connect().await?;
    let payload = Bytes::from(vec![0u8; load.size]);
    for _ in 0..WARMUP_REQUESTS {
        requester.request(subject.clone(), payload.clone()).await.context("warm-up request failed")?;
    }
    let mut latency = latency_histogram();
    let started = Instant::now();
    let mut completed = 0u64;
    while completed < load.msgs && started.elapsed() < load.duration {
        let sent_at = Instant::now();
        requester.request(subject.clone(), payload.clone()).await.context("request failed")?;
        record_latency(&mut latency, sent_at.elapsed());
        completed += 1;
        if completed.is_multiple_of(256) {
            progress.set_position(completed);
        }
    }
    let elapsed = started.elapsed();
    progress.set_position(completed);
    Ok(Report {
        sent: completed,
        delivered: completed,
        payload_bytes: load.size,
        elapsed,
        latency,
        notes: vec!["latency is the request→reply round trip, one request in flight".to_string()],
        problems: Vec::new(),
    })
}
