//! Creating, restoring and acknowledging consumers, and the `$JS.ACK.>` / `$JS.FC.>` subscriptions.

use std::sync::{Arc, Weak};
use std::time::SystemTime;

use serde::Deserialize;

use super::account::AccountLimits;
use super::config::{ConsumerConfig, Retention};
use super::consumer::{self, validate, AckKind, Consumer};
use super::errors::ApiError;
use super::stream::Stream;
use super::JetStream;
use crate::delivery::{InternalSink, Message};
use crate::limits;

/// Body of `CONSUMER.CREATE` and `CONSUMER.DURABLE.CREATE`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CreateRequest {
    /// The stream, as the request names it.
    pub stream_name: String,
    /// The consumer config.
    pub config: Option<ConsumerConfig>,
    /// `create`, `update`, or empty for either.
    pub action: String,
}

/// What the API subject says about the consumer being created.
#[derive(Debug, Default)]
pub struct CreateSubject<'a> {
    /// Name from `CONSUMER.CREATE.<stream>.<name>` or `CONSUMER.DURABLE.CREATE.<stream>.<name>`.
    pub name: Option<&'a str>,
    /// Filter from `CONSUMER.CREATE.<stream>.<name>.<filter>`.
    pub filter: Option<String>,
    /// The legacy durable form.
    pub durable: bool,
}

fn random_name() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    (0..limits::EPHEMERAL_NAME_CHARS)
        .map(|_| ALPHABET[rand::random::<u32>() as usize % ALPHABET.len()] as char)
        .collect()
}

/// Creates (or, where allowed, updates) a consumer as a create request asks, within the
/// limits of the stream's account.
pub fn create(
    stream: &Arc<Stream>,
    request: CreateRequest,
    subject: CreateSubject<'_>,
    limits: &AccountLimits,
) -> Result<serde_json::Value, ApiError> {
    if !request.stream_name.is_empty() && request.stream_name != stream.name {
        return Err(ApiError::stream_mismatch());
    }
    if !matches!(request.action.as_str(), "" | "create" | "update") {
        return Err(ApiError::invalid_json("unknown consumer action"));
    }
    // nats-server decodes a missing config as an empty one (an ephemeral consumer).
    let mut config = request.config.unwrap_or_default();
    if subject.durable {
        // The legacy durable subject: the config must name the same durable.
        match config.durable_name.as_deref() {
            None => return Err(ApiError::durable_name_not_set()),
            Some(durable) if Some(durable) != subject.name => return Err(ApiError::durable_name_mismatch()),
            Some(_) => {}
        }
    }
    match subject.name {
        Some(name) => {
            let durable = config.durable_name.as_deref();
            if durable.is_some_and(|d| d != name) || config.name.as_deref().is_some_and(|n| n != name) {
                return Err(ApiError::durable_name_mismatch());
            }
            if config.name.is_none() {
                config.name = Some(name.to_string());
            }
        }
        // The legacy ephemeral subject.
        None if config.durable_name.is_some() => return Err(ApiError::ephemeral_with_durable_name()),
        None => {}
    }
    if let Some(filter) = subject.filter {
        match config.filter_subject.as_deref() {
            Some(given) if given != filter => return Err(ApiError::filter_subject_mismatch()),
            _ => config.filter_subject = Some(filter),
        }
    }
    if config.name.is_none() {
        config.name = Some(config.durable_name.clone().unwrap_or_else(random_name));
    }
    let stream_config = stream.config();
    super::account::apply_consumer_defaults(limits, &mut config);
    let config = validate::normalize(config, &stream_config)?;
    super::account::check_consumer(limits, &config)?;
    let name = config.name.clone().unwrap_or_default();
    if let Some(existing) = stream.consumer(&name) {
        return update_existing(&existing, config, &request.action).map(|consumer| consumer.info());
    }
    if request.action == "update" {
        return Err(ApiError::consumer_does_not_exist());
    }
    let others = stream.consumers();
    let most = super::account::consumers_max(limits, &stream_config);
    if most.is_some_and(|most| others.len() >= most) || others.len() >= limits::CONSUMERS_PER_STREAM_MAX {
        return Err(ApiError::max_consumers());
    }
    if stream_config.retention == Retention::Workqueue {
        let configs: Vec<ConsumerConfig> = others.iter().map(|c| (*c.config()).clone()).collect();
        validate::check_workqueue_unique(&config, &configs)?;
    }
    let durable = config.durable_name.is_some();
    let dir = stream.dir().filter(|_| durable).map(|dir| dir.join("consumers").join(&name));
    let consumer = Consumer::start(stream, name, config, SystemTime::now(), dir, None);
    consumer.save_config();
    stream.add_consumer(consumer.clone());
    let info = consumer.info();
    consumer.run(stream);
    Ok(info)
}

fn update_existing(existing: &Arc<Consumer>, config: ConsumerConfig, action: &str) -> Result<Arc<Consumer>, ApiError> {
    let current = existing.config();
    if *current == config {
        return Ok(existing.clone());
    }
    if action == "create" {
        return Err(ApiError::consumer_exists());
    }
    validate::check_update(&current, &config)?;
    existing.set_config(config);
    Ok(existing.clone())
}

/// Restores a stream's durable consumers from disk.
pub fn restore(stream: &Arc<Stream>) {
    let Some(dir) = stream.dir().map(|dir| dir.join("consumers")) else { return };
    let Ok(entries) = std::fs::read_dir(&dir) else { return };
    for entry in entries.flatten() {
        let Some((saved, state)) = consumer::persist_load(&entry.path()) else {
            tracing::warn!("skipping unreadable consumer in {}", entry.path().display());
            continue;
        };
        let created = saved.created();
        let consumer = Consumer::start(stream, saved.name, saved.config, created, Some(entry.path()), state);
        stream.add_consumer(consumer.clone());
        consumer.run(stream);
    }
}

/// Routes `$JS.ACK.>` replies to their consumers.
#[derive(Debug)]
struct AckSink {
    jetstream: Weak<JetStream>,
}

impl InternalSink for AckSink {
    fn receive(&self, message: &Message<'_>) -> bool {
        let Some(ack) = consumer::AckSubject::parse(message.subject) else { return true };
        let Some(jetstream) = self.jetstream.upgrade() else { return false };
        let Some(stream) = jetstream.stream(ack.stream) else { return true };
        let Some(consumer) = stream.consumer(ack.consumer) else { return true };
        let kind = AckKind::parse(message.payload);
        let acknowledged = consumer.acknowledge(ack.stream_seq, &kind);
        stream.acknowledged(&acknowledged);
        if let Some(reply) = message.reply {
            match &kind {
                AckKind::Next(_) => consumer.request_next(reply, next_body(message.payload)),
                // Confirmed once the ack is on disk (the consumer's task saves, then replies).
                _ if consumer.confirms_durably() => consumer.confirm_when_saved(reply, ack.stream_seq, &kind),
                // The ack itself is acknowledged: the client knows it landed (double ack).
                _ => {
                    jetstream.services().bus.publish(reply, None, b"");
                }
            }
        }
        true
    }
}

fn next_body(payload: &[u8]) -> &[u8] {
    let text = payload.strip_prefix(b"+NXT").unwrap_or(payload);
    let start = text.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(text.len());
    &text[start..]
}

/// Routes `$JS.FC.<stream>.<consumer>.<id>` flow-control responses.
#[derive(Debug)]
struct FlowControlSink {
    jetstream: Weak<JetStream>,
}

impl InternalSink for FlowControlSink {
    fn receive(&self, message: &Message<'_>) -> bool {
        let tokens: Vec<&str> = message.subject.split('.').collect();
        let ["$JS", "FC", stream, consumer, id] = tokens.as_slice() else { return true };
        let Some(stream) = self.jetstream.upgrade().and_then(|js| js.stream(stream)) else { return true };
        if let (Some(consumer), Ok(id)) = (stream.consumer(consumer), id.parse()) {
            consumer.flow_control_response(id);
        }
        true
    }
}

/// Subscribes to acks and flow-control responses.
pub fn subscribe(jetstream: &Arc<JetStream>) {
    let acks = Arc::new(AckSink { jetstream: Arc::downgrade(jetstream) });
    let flow = Arc::new(FlowControlSink { jetstream: Arc::downgrade(jetstream) });
    for (subject, sink) in [("$JS.ACK.>", acks as Arc<dyn InternalSink>), ("$JS.FC.>", flow)] {
        if let Err(error) = jetstream.services().bus.subscribe_internal(subject, None, sink) {
            tracing::error!(%subject, %error, "cannot subscribe");
        }
    }
}
