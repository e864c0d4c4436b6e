//! Durable consumers on disk: `consumers/<name>/consumer.json` (config, creation time) and
//! `consumers/<name>/state.json` (delivery and ack state), each replaced atomically.

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::Consumer;
use crate::jetstream::config::ConsumerConfig;
use crate::jetstream::write_atomically;
use crate::server::lock;

/// A consumer's saved delivery state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SavedState {
    /// Next stream sequence for a first delivery.
    pub next_seq: u64,
    /// Highest consumer sequence assigned.
    pub delivered_consumer_seq: u64,
    /// Stream sequence of the latest delivery.
    pub delivered_stream_seq: u64,
    /// Acknowledged up to this consumer sequence.
    pub ack_floor_consumer_seq: u64,
    /// Acknowledged up to this stream sequence.
    pub ack_floor_stream_seq: u64,
    /// Pending deliveries: (stream sequence, consumer sequence, deliveries).
    pub pending: Vec<(u64, u64, u64)>,
}

/// A consumer's saved config.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedConsumer {
    /// Its name.
    pub name: String,
    /// Its config.
    pub config: ConsumerConfig,
    /// Creation time, unix nanoseconds.
    pub created_unix_ns: i64,
}

impl SavedConsumer {
    /// The creation time.
    pub fn created(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_nanos(self.created_unix_ns.max(0) as u64)
    }
}

/// Reads a consumer directory; `None` when it holds nothing usable.
pub fn load(dir: &Path) -> Option<(SavedConsumer, Option<SavedState>)> {
    let config = std::fs::read(dir.join("consumer.json")).ok()?;
    let saved: SavedConsumer = serde_json::from_slice(&config).ok()?;
    let state = std::fs::read(dir.join("state.json")).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok());
    Some((saved, state))
}

impl Consumer {
    /// Saves the config of a durable consumer.
    pub fn save_config(&self) {
        let Some(dir) = &self.dir else { return };
        let saved = SavedConsumer {
            name: self.name.clone(),
            config: (*self.config()).clone(),
            created_unix_ns: self.created.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64),
        };
        let result = std::fs::create_dir_all(dir).and_then(|()| {
            let bytes = serde_json::to_vec_pretty(&saved).map_err(std::io::Error::other)?;
            write_atomically(&dir.join("consumer.json"), &bytes)
        });
        if let Err(error) = result {
            tracing::error!(consumer = %self.name, %error, "cannot save consumer config");
        }
    }

    /// Saves delivery state if it changed since the last save.
    pub fn save_state(&self) {
        let Some(dir) = &self.dir else { return };
        let saved = {
            let mut state = lock(&self.state);
            if !state.dirty {
                return;
            }
            state.dirty = false;
            state.save()
        };
        let result = serde_json::to_vec(&saved)
            .map_err(std::io::Error::other)
            .and_then(|bytes| write_atomically(&dir.join("state.json"), &bytes));
        if let Err(error) = result {
            tracing::error!(consumer = %self.name, %error, "cannot save consumer state");
        }
    }

    /// Removes the consumer's files.
    pub fn remove_files(&self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
