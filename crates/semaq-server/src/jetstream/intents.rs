//! Streams that back durable intents (stream metadata `semaq.intent: NAME`): the rules such a
//! stream obeys, its dead-letter stream, and the list the agent network dispatches from.

use std::sync::Arc;

use super::config::{Retention, StreamConfig};
use super::errors::ApiError;
use super::stream::Stream;
use crate::agents::durable::{Durable, DEAD_LETTER_PREFIX};
use crate::agents::{is_valid_intent, INTENT_PREFIX};

/// Stream metadata naming the intent the stream backs.
pub const INTENT_KEY: &str = "semaq.intent";
/// Stream metadata: deliveries before a message is dead-lettered (1 to `MAX_DELIVER_MAX`).
pub const MAX_DELIVER_KEY: &str = "semaq.max_deliver";
/// Deliveries before a message is dead-lettered when the stream does not say.
pub const MAX_DELIVER_DEFAULT: u32 = 5;
/// Most deliveries a durable intent may allow.
pub const MAX_DELIVER_MAX: u32 = 1000;
/// A durable intent stream's dead letters go to the stream of this name with this suffix.
pub const DEAD_LETTER_STREAM_SUFFIX: &str = "_DLQ";

/// The durable intent `config` declares, if it declares one and obeys the rules.
pub fn durable_of(config: &StreamConfig) -> Result<Option<Durable>, ApiError> {
    let Some(intent) = config.metadata.get(INTENT_KEY) else { return Ok(None) };
    let invalid = ApiError::invalid_stream_config;
    if !is_valid_intent(intent) {
        return Err(invalid(format!("{INTENT_KEY} {intent:?} is not an intent name")));
    }
    if config.retention != Retention::Workqueue {
        return Err(invalid(format!("{INTENT_KEY} needs retention \"workqueue\"")));
    }
    let subject = format!("{INTENT_PREFIX}{intent}");
    if config.subjects != [subject.clone()] {
        return Err(invalid(format!("{INTENT_KEY} {intent:?} needs subjects [\"{subject}\"]")));
    }
    let max_deliver = match config.metadata.get(MAX_DELIVER_KEY) {
        None => MAX_DELIVER_DEFAULT,
        Some(text) => text
            .parse()
            .ok()
            .filter(|n| (1..=MAX_DELIVER_MAX).contains(n))
            .ok_or_else(|| invalid(format!("{MAX_DELIVER_KEY} must be 1 to {MAX_DELIVER_MAX}, not {text:?}")))?,
    };
    Ok(Some(Durable { intent: intent.clone(), stream: config.name.clone(), max_deliver }))
}

/// The dead-letter stream a durable intent stream gets: `<name>_DLQ` on `dlq.<intent>`.
pub fn dead_letter_config(config: &StreamConfig, durable: &Durable) -> StreamConfig {
    StreamConfig {
        name: format!("{}{DEAD_LETTER_STREAM_SUFFIX}", config.name),
        subjects: vec![format!("{DEAD_LETTER_PREFIX}{}", durable.intent)],
        storage: config.storage,
        ..StreamConfig::default()
    }
}

/// Every durable intent the streams declare.
pub fn declared(streams: &[Arc<Stream>]) -> Vec<Durable> {
    streams.iter().filter_map(|stream| durable_of(&stream.config()).ok().flatten()).collect()
}
