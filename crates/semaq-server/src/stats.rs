//! Counters shared by connections and read by monitoring. Relaxed atomics: each counter is
//! independent and monitoring only needs eventually consistent totals.

use std::sync::atomic::{AtomicU64, Ordering};

/// Message and byte counters for one direction.
#[derive(Debug, Default)]
pub struct Traffic {
    /// Messages.
    pub msgs: AtomicU64,
    /// Payload bytes (headers included).
    pub bytes: AtomicU64,
}

impl Traffic {
    /// Counts one message of `bytes` bytes.
    pub fn record(&self, bytes: usize) {
        self.msgs.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Counts `msgs` messages of `bytes` bytes in all.
    pub fn record_many(&self, msgs: u64, bytes: u64) {
        if msgs > 0 {
            self.msgs.fetch_add(msgs, Ordering::Relaxed);
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// (messages, bytes) now.
    pub fn snapshot(&self) -> (u64, u64) {
        (self.msgs.load(Ordering::Relaxed), self.bytes.load(Ordering::Relaxed))
    }
}

/// Server-wide counters, with nats-server's `/varz` meanings.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Messages received from clients that have since disconnected.
    pub inbound: Traffic,
    /// Messages delivered to clients that have since disconnected.
    pub outbound: Traffic,
    /// Connections accepted since start.
    pub total_connections: AtomicU64,
    /// Clients disconnected for not keeping up.
    pub slow_consumers: AtomicU64,
    /// Connections refused because the connection limit was reached.
    pub refused_connections: AtomicU64,
    /// Authentication failures.
    pub auth_failures: AtomicU64,
}

/// Adds one to a counter.
pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}
