//! `js-memory` and `js-restart`: a fresh server stores many messages in a file stream; its resident
//! memory is read afterwards, then it is stopped with SIGTERM and started again on the same store,
//! and the restart is timed until STREAM.INFO reports every message.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use indicatif::ProgressBar;

use super::jetstream::{publish_pipelined, BenchStream, Durability, PublishPlan};
use super::server::{resident_bytes, ServerSpec};
use crate::connect::Target;

/// Time for the server to settle (flush timers, release per-connection memory) before reading its memory.
const SETTLE_TIME: Duration = Duration::from_secs(1);
/// Connect and request timeout while filling.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bounds on the stop and the start of a restart, each.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(60);
const RESTART_TIMEOUT: Duration = Duration::from_secs(120);
/// Between attempts to connect and read the stream while the server restarts.
const RESTART_POLL: Duration = Duration::from_millis(5);

/// What one store-and-restart measurement saw.
#[derive(Debug, Clone)]
pub struct StoreReport {
    /// Messages stored (and acknowledged).
    pub msgs: u64,
    /// Resident bytes of the fresh server, before the stream was created.
    pub rss_before: u64,
    /// Resident bytes after storing `msgs`, with the publisher disconnected.
    pub rss_after: u64,
    /// How long the pipelined fill took.
    pub fill: Duration,
    /// The restart, when measured.
    pub restart: Option<Restart>,
}

/// Timings of one stop and start on a full store.
#[derive(Debug, Clone, Copy)]
pub struct Restart {
    /// From SIGTERM to the process's exit.
    pub shutdown: Duration,
    /// From starting the process to its client port accepting TCP connections.
    pub accepting: Duration,
    /// From starting the process to STREAM.INFO reporting every message.
    pub ready: Duration,
    /// Resident bytes right after the restart.
    pub rss: u64,
}

impl StoreReport {
    /// Resident-memory growth per stored message, in bytes.
    pub fn growth_per_message(&self) -> f64 {
        (self.rss_after as f64 - self.rss_before as f64) / self.msgs.max(1) as f64
    }

    /// Lines for the verbose output of `compare`.
    pub fn describe(&self) -> String {
        let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
        let mut text = format!(
            "stored {} msgs in {:.2} s ({:.0} msgs/s); RSS {:.1} MiB before, {:.1} MiB after",
            self.msgs,
            self.fill.as_secs_f64(),
            self.msgs as f64 / self.fill.as_secs_f64().max(1e-9),
            mib(self.rss_before),
            mib(self.rss_after)
        );
        if let Some(restart) = &self.restart {
            text.push_str(&format!(
                "; SIGTERM→exit {:.3} s, start→accepting {:.3} s, start→STREAM.INFO complete {:.3} s, RSS after restart {:.1} MiB",
                restart.shutdown.as_secs_f64(),
                restart.accepting.as_secs_f64(),
                restart.ready.as_secs_f64(),
                mib(restart.rss)
            ));
        }
        text
    }
}

/// Starts a fresh server under `work_dir`, stores `msgs` × `size` B in a file stream, reads its memory,
/// and (if `restart`) stops and restarts it on the same store. The server's files are removed afterwards.
pub async fn measure(spec: &ServerSpec, work_dir: &Path, msgs: u64, size: usize, restart: bool) -> Result<StoreReport> {
    let mut server = spec.start(work_dir)?;
    let store_dir = server.store_dir().to_path_buf();
    let result = async {
        tokio::time::sleep(SETTLE_TIME).await;
        let rss_before = resident_bytes(server.pid())?;
        let target = Target::plain(server.url.clone(), CLIENT_TIMEOUT);
        let stream = BenchStream::create(&target, Durability::Default, "store").await?;
        let plan = PublishPlan { msgs, size, deadline: None };
        let filled = publish_pipelined(&stream, &plan, &ProgressBar::hidden()).await?;
        let stored = stream.stored_messages().await?;
        if filled.failed > 0 || stored != msgs {
            bail!(
                "{} stored {stored} of {msgs} messages ({} acks failed, first: {})",
                server.label,
                filled.failed,
                filled.first_failure.as_deref().unwrap_or("none")
            );
        }
        let name = stream.name.clone();
        // Close the connection, so its buffers are not counted as the store's.
        drop(stream);
        tokio::time::sleep(SETTLE_TIME).await;
        let rss_after = resident_bytes(server.pid())?;
        let mut report = StoreReport { msgs, rss_before, rss_after, fill: filled.elapsed, restart: None };
        if restart {
            let shutdown = server.terminate(SHUTDOWN_TIMEOUT)?;
            let started = Instant::now();
            server.start_again(RESTART_TIMEOUT)?;
            let accepting = started.elapsed();
            wait_for_stream(&server.url, &name, msgs, started + RESTART_TIMEOUT).await?;
            let ready = started.elapsed();
            let rss = resident_bytes(server.pid())?;
            report.restart = Some(Restart { shutdown, accepting, ready, rss });
        }
        Ok(report)
    }
    .await;
    drop(server);
    // Up to a few hundred MB per run; the work dir goes at the end anyway, so a failure here is harmless.
    let _ = std::fs::remove_dir_all(&store_dir);
    result
}

/// Connects and asks for the stream's info until it reports `msgs` messages, or fails at `deadline`.
async fn wait_for_stream(url: &str, name: &str, msgs: u64, deadline: Instant) -> Result<()> {
    let mut last_error = String::new();
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        let target = Target::plain(url.to_string(), left.min(CLIENT_TIMEOUT));
        match target.connect().await {
            Ok(client) => {
                let context = async_nats::jetstream::new(client);
                loop {
                    match context.get_stream(name).await {
                        Ok(stream) if stream.cached_info().state.messages == msgs => return Ok(()),
                        Ok(stream) => {
                            last_error = format!("{} of {msgs} messages", stream.cached_info().state.messages)
                        }
                        Err(error) => last_error = error.to_string(),
                    }
                    if Instant::now() >= deadline {
                        break;
                    }
                    tokio::time::sleep(RESTART_POLL).await;
                }
            }
            Err(error) => last_error = error.to_string(),
        }
        tokio::time::sleep(RESTART_POLL).await;
    }
    bail!("stream {name} not complete {}s after the restart: {last_error}", RESTART_TIMEOUT.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_divided_per_message() {
        let report = StoreReport {
            msgs: 1_000_000,
            rss_before: 10_000_000,
            rss_after: 210_000_000,
            fill: Duration::from_secs(2),
            restart: None,
        };
        assert_eq!(report.growth_per_message(), 200.0);
        assert!(report.describe().contains("500000 msgs/s"), "{}", report.describe());
    }
}
