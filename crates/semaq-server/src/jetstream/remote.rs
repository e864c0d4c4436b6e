//! Mirrors and sources whose origin lives on another server (nats-server or SemaQ), named by
//! the stream's metadata `semaq.url.<origin>`: the follower connects there as a NATS client
//! (async-nats), reads the origin through an ordered push consumer (flow control and idle
//! heartbeats; the client recreates it past a gap) at the origin's API prefix
//! (`external.api`, else `$JS.API`), and stores each batch of copies as a local follower
//! does (`sources.rs`), moving on only once their PubAcks came back. Its position is what the
//! sourcing stream holds, read back at every (re)connect, so a restart of either side resumes
//! after the last copy stored, without loss or duplicates.

use async_nats::jetstream::consumer::{push, DeliverPolicy};
use async_nats::jetstream::{self, Message};
use futures::{FutureExt, StreamExt};
use semaq_wire::clock;
use semaq_wire::headers::HeaderBlock;

use super::errors::ApiError;
use super::sources::{AckReceiver, Copy, Outcome, Run};
use crate::limits;

/// Why a connection to the origin ended.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("origin stream: {0}")]
    Origin(String),
    #[error("ordered consumer: {0}")]
    Consumer(String),
    #[error("the sourcing stream refused a copy; resuming from what it holds")]
    Refused,
    #[error("the sourcing stream is gone")]
    Gone,
}

/// Follows the origin at `url` until the follower is stopped, reconnecting with backoff.
pub(super) async fn follow(run: &Run, url: &str, inbox: &str, acks: &mut AckReceiver) {
    let mut backoff = limits::SOURCE_RETRY_BACKOFF_MIN;
    while !run.is_stopped() {
        let outcome = tokio::select! {
            outcome = follow_once(run, url, inbox, acks) => outcome,
            _ = run.stopped() => return,
        };
        match outcome {
            Ok(()) | Err(Failure::Gone) => return,
            Err(Failure::Refused) => backoff = limits::SOURCE_RETRY_BACKOFF_MIN,
            Err(failure) => {
                tracing::warn!(origin = %run.link.spec.name, %url, %failure, "remote origin");
                let api = run.link.spec.external.as_ref().map_or("$JS.API", |e| e.api.as_str());
                let mut error = ApiError::stream_not_found_at(api);
                error.description = format!("{url}: {failure}");
                run.link.set_error(Some(error));
            }
        }
        run.pause(backoff).await;
        backoff = (backoff * 2).min(limits::SOURCE_RETRY_BACKOFF_MAX);
    }
}

/// One connection: an ordered consumer from the sourcing stream's position, copied batch by
/// batch until something fails.
async fn follow_once(run: &Run, url: &str, inbox: &str, acks: &mut AckReceiver) -> Result<(), Failure> {
    let options = async_nats::ConnectOptions::new()
        .name("semaq-source")
        .connection_timeout(limits::REMOTE_SOURCE_CONNECT_TIMEOUT)
        .request_timeout(Some(limits::REMOTE_SOURCE_REQUEST_TIMEOUT));
    let client = options.connect(url).await.map_err(|e| Failure::Connect(e.to_string()))?;
    let api =
        (run.link.spec.external.as_ref().map(|e| e.api.as_str())).filter(|api| !api.is_empty()).unwrap_or("$JS.API");
    let js = jetstream::with_prefix(client.clone(), api);
    let origin = js.get_stream(&run.link.spec.name).await.map_err(|e| Failure::Origin(e.to_string()))?;
    let stream = run.current_stream().ok_or(Failure::Gone)?;
    let config = push::OrderedConfig {
        deliver_subject: client.new_inbox(),
        filter_subject: run.link.store_filter().unwrap_or_default().to_string(),
        deliver_policy: deliver_policy(run, &stream),
        ..Default::default()
    };
    let consumer = origin.create_consumer(config).await.map_err(|e| Failure::Consumer(e.to_string()))?;
    let mut messages = consumer.messages().await.map_err(|e| Failure::Consumer(e.to_string()))?;
    drop(stream);
    run.link.contact(0);
    let mut held = None;
    loop {
        let first = match held.take() {
            Some(message) => message,
            None => match tokio::time::timeout(limits::SOURCE_IDLE_CHECK_INTERVAL, messages.next()).await {
                Err(_) => {
                    // Idle: the consumer's heartbeats keep it alive; `active` stays fresh.
                    run.link.contact(0);
                    continue;
                }
                Ok(None) => return Err(Failure::Consumer("ended".to_string())),
                Ok(Some(message)) => message.map_err(|e| Failure::Consumer(e.to_string()))?,
            },
        };
        let (copies, lag) = gather(run, first, &mut messages, &mut held)?;
        let Some(after) = copies.last().map(|copy| copy.origin_seq + 1) else { continue };
        let stream = run.current_stream().ok_or(Failure::Gone)?;
        let outcome = run.store_copies(&stream, copies, inbox, acks).await;
        run.link.contact(lag);
        // The consumer has moved past the batch: anything short of all of it (a full ingest
        // queue, a refusal to retry) reconnects from what the stream holds.
        match outcome {
            Outcome::Advanced(next) if next >= after => {}
            _ => return Err(Failure::Refused),
        }
    }
}

/// Where the consumer starts: after what the sourcing stream holds, else as configured.
fn deliver_policy(run: &Run, stream: &super::stream::Stream) -> DeliverPolicy {
    if let Some(start_sequence) = run.resume_seq(stream) {
        return DeliverPolicy::ByStartSequence { start_sequence };
    }
    let spec = &run.link.spec;
    if spec.opt_start_seq > 0 {
        return DeliverPolicy::ByStartSequence { start_sequence: spec.opt_start_seq };
    }
    let start = spec.opt_start_time.as_deref().and_then(clock::parse_rfc3339);
    match start.and_then(|ns| time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns)).ok()) {
        Some(start_time) => DeliverPolicy::ByStartTime { start_time },
        None => DeliverPolicy::All,
    }
}

/// The first message and those already waiting behind it, up to the in-flight bounds (a
/// mirror's batch ends at a sequence gap: the next batch starts there); the lag after them.
fn gather<S>(
    run: &Run,
    first: Message,
    messages: &mut S,
    held: &mut Option<Message>,
) -> Result<(Vec<Copy>, u64), Failure>
where
    S: futures::Stream<Item = Result<Message, push::OrderedError>> + Unpin,
{
    let mut copies = Vec::new();
    let mut bytes = 0;
    let mut lag = 0;
    let mut next = Some(first);
    while let Some(message) = next.take() {
        let Ok(info) = message.info() else { return Err(Failure::Consumer("no metadata".to_string())) };
        let (seq, pending) = (info.stream_sequence, info.pending);
        let contiguous = copies.last().is_none_or(|last: &Copy| last.origin_seq + 1 == seq);
        if run.link.mirror && !contiguous {
            *held = Some(message);
            break;
        }
        lag = pending;
        if run.link.wants(&message.subject) {
            bytes += message.length;
            copies.push(run.copy_of(stored(&message, seq)));
        }
        if copies.len() >= limits::SOURCE_INFLIGHT_MESSAGES_MAX || bytes >= limits::SOURCE_INFLIGHT_BYTES_MAX {
            break;
        }
        next = match messages.next().now_or_never() {
            Some(Some(Ok(message))) => Some(message),
            Some(Some(Err(error))) => return Err(Failure::Consumer(error.to_string())),
            Some(None) | None => None,
        };
    }
    Ok((copies, lag))
}

/// A delivered message as the origin stored it.
fn stored(message: &Message, seq: u64) -> semaq_store::StoredMessage {
    let headers = message.headers.as_ref().filter(|h| !h.is_empty()).map(|headers| {
        let entries = (headers.iter())
            .flat_map(|(name, values)| values.iter().map(move |value| (name.to_string(), value.to_string())))
            .collect();
        HeaderBlock { status: None, description: None, entries }.encode()
    });
    semaq_store::StoredMessage {
        seq,
        subject: message.subject.to_string(),
        headers,
        payload: message.payload.clone(),
        timestamp_ns: 0,
    }
}
