//! Durable consumers on disk: `consumers/<name>/consumer.json` (config, creation time) and
//! `consumers/<name>/state.json` (delivery and ack state), each replaced atomically.
//!
//! At every level a durable consumer's double ack (an ack with a reply subject) is confirmed only
//! once the state holding it is on disk: the ack is applied in memory on the connection's read path, its reply
//! waits in `confirmations`, and the consumer's task saves the state once for all the replies
//! that arrived meanwhile (group commit), then sends them.

use std::path::Path;
use std::time::SystemTime;

use semaq_wire::clock;
use serde::{Deserialize, Serialize};

use super::{AckKind, Consumer};
use crate::bus::Bus;
use crate::delivery::{FlushSet, Message};
use crate::jetstream::config::ConsumerConfig;
use crate::jetstream::producers::write_durably;
use crate::jetstream::write_atomically;
use crate::limits;
use crate::sync::lock;

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
        clock::system_time(self.created_unix_ns)
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
            created_unix_ns: clock::unix_nanos(self.created),
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
        if let Err(error) = self.save_state_checked() {
            tracing::error!(consumer = %self.name, %error, "cannot save consumer state");
        }
    }

    /// Saves delivery state if it changed; `Ok` means every change made before the call is on
    /// disk: the file and its directory are synced, so a confirmed ack survives power loss. The
    /// periodic save and the confirmations' group commit are the only writers, so this costs at
    /// most one fsync per save interval plus one per round of confirmations.
    fn save_state_checked(&self) -> std::io::Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let _one_at_a_time = lock(&self.save_lock);
        let saved = {
            let mut state = lock(&self.state);
            if !state.dirty {
                return Ok(());
            }
            state.dirty = false;
            state.save()
        };
        let path = dir.join("state.json");
        let written =
            serde_json::to_vec(&saved).map_err(std::io::Error::other).and_then(|bytes| write_durably(&path, &bytes));
        if written.is_err() {
            lock(&self.state).dirty = true;
        }
        written
    }

    /// Whether a double ack is confirmed only once the ack is on disk: every consumer whose state
    /// is on disk (durable consumers of file streams, at every level). nats-server confirms at
    /// once, so a confirmed ack can come back after a crash there; here it cannot. Ephemeral
    /// consumers and memory streams confirm at once: they do not survive a restart anyway.
    pub fn confirms_durably(&self) -> bool {
        self.dir.is_some()
    }

    /// Queues the confirmation of an ack of `stream_seq` until the next state save. An ack
    /// that did not land (the message is not delivered and pending here, e.g. the delivery was
    /// lost with a crash) is not confirmed: the client's double ack times out, and the message
    /// comes again. Beyond the bound the confirmation is dropped the same way.
    pub fn confirm_when_saved(&self, reply: &str, stream_seq: u64, kind: &AckKind) {
        if matches!(kind, AckKind::Ack | AckKind::Term) && !lock(&self.state).has_acked(stream_seq) {
            return;
        }
        {
            let mut confirmations = lock(&self.confirmations);
            if confirmations.len() >= limits::ACK_CONFIRMATIONS_PENDING_MAX {
                return;
            }
            confirmations.push(reply.to_string());
        }
        self.wake();
    }

    /// Saves the state once for every confirmation queued so far, then sends them (group commit,
    /// in the consumer's task: never on the connection that sent the ack). If the save fails they
    /// are not sent; the clients ack again.
    pub(super) fn confirm_saved(&self, bus: &Bus) {
        let replies = std::mem::take(&mut *lock(&self.confirmations));
        if replies.is_empty() {
            return;
        }
        if let Err(error) = tokio::task::block_in_place(|| self.save_state_checked()) {
            tracing::error!(consumer = %self.name, %error, "cannot save consumer state; acks stay unconfirmed");
            return;
        }
        let mut flush = FlushSet::default();
        for reply in &replies {
            let message = Message { subject: reply, reply: None, headers: None, payload: b"", publisher: None };
            bus.publish_batched(reply, &message, &mut flush);
        }
        flush.flush();
    }

    /// Removes the consumer's files.
    pub fn remove_files(&self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
