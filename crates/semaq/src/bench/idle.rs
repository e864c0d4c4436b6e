//! The `idle-conns` measurement: server memory growth per idle client connection.

use std::time::Duration;

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};

use super::server::{resident_bytes, ServerProcess};
use crate::connect::Target;

/// Connections opened at once; more would only queue in the server's accept backlog.
const CONNECT_CONCURRENCY: usize = 32;
/// Time for the server to finish per-connection set-up before its memory is read.
const SETTLE_TIME: Duration = Duration::from_millis(500);

/// Memory of a server before and after opening idle connections.
#[derive(Debug, Clone, Copy)]
pub struct IdleReport {
    /// Connections held open during the second reading.
    pub connections: usize,
    /// Resident bytes before connecting.
    pub before_bytes: u64,
    /// Resident bytes with all connections open.
    pub after_bytes: u64,
}

impl IdleReport {
    /// Resident-memory growth per connection in bytes (negative if the server gave memory back meanwhile).
    pub fn bytes_per_connection(&self) -> f64 {
        (self.after_bytes as f64 - self.before_bytes as f64) / self.connections.max(1) as f64
    }
}

/// Opens `connections` idle clients to `server`, reads its resident memory before and after, then closes them.
pub async fn measure(server: &ServerProcess, connections: usize, timeout: Duration) -> Result<IdleReport> {
    let target = Target::plain(server.url.clone(), timeout);
    tokio::time::sleep(SETTLE_TIME).await;
    let before_bytes = resident_bytes(server.pid())?;
    // async-nats' connect returns after the server answered CONNECT + PING, so each one is fully set up.
    let clients: Vec<async_nats::Client> = futures::stream::iter(0..connections)
        .map(|_| target.connect())
        .buffer_unordered(CONNECT_CONCURRENCY)
        .try_collect()
        .await
        .with_context(|| format!("cannot open {connections} connections to {}", server.label))?;
    tokio::time::sleep(SETTLE_TIME).await;
    let after_bytes = resident_bytes(server.pid())?;
    drop(clients);
    Ok(IdleReport { connections, before_bytes, after_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_divided_per_connection() {
        let report = IdleReport { connections: 1000, before_bytes: 10_000_000, after_bytes: 30_000_000 };
        assert_eq!(report.bytes_per_connection(), 20_000.0);
    }
}
