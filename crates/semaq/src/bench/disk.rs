//! A probe of the disk under the servers' store: how long `fdatasync` takes after an append.
//!
//! SemaQ's default durable publish waits for one fsync per batch, so its figures follow this
//! latency, which on a shared machine moves with everything else writing to the same file system
//! (an ext4 fsync commits the journal, other processes' metadata included). `compare` prints it
//! before and after the rounds so a durable figure can be read against the disk it met.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};

use super::stats::{format_latency_ns, latency_histogram, record_latency};

/// Appends per probe.
const PROBE_APPENDS: usize = 200;
/// Bytes per append: about what one batch of a pipelined publish writes (500 records of ~200 B).
const PROBE_APPEND_BYTES: usize = 100 * 1024;

/// `fdatasync` latency after appends to a new file.
#[derive(Debug, Clone, Copy)]
pub struct DiskProbe {
    /// Median, nanoseconds.
    pub p50_ns: u64,
    /// 90th percentile, nanoseconds.
    pub p90_ns: u64,
    /// Mean, nanoseconds.
    pub mean_ns: u64,
}

impl DiskProbe {
    /// One line for reports.
    pub fn describe(&self) -> String {
        format!(
            "fdatasync after a {} KiB append: p50 {}, p90 {}, mean {} ({PROBE_APPENDS} appends)",
            PROBE_APPEND_BYTES / 1024,
            format_latency_ns(self.p50_ns),
            format_latency_ns(self.p90_ns),
            format_latency_ns(self.mean_ns)
        )
    }
}

/// Appends to a scratch file in `dir`, syncing after each append; the file is removed afterwards.
pub fn probe(dir: &Path) -> Result<DiskProbe> {
    let path = dir.join("disk-probe.tmp");
    let result = probe_file(&path);
    // A leftover scratch file goes with the work dir.
    let _ = std::fs::remove_file(&path);
    result
}

fn probe_file(path: &Path) -> Result<DiskProbe> {
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let chunk = vec![b'x'; PROBE_APPEND_BYTES];
    let mut latency = latency_histogram();
    for _ in 0..PROBE_APPENDS {
        file.write_all(&chunk).with_context(|| format!("cannot write {}", path.display()))?;
        let started = Instant::now();
        file.sync_data().with_context(|| format!("cannot fsync {}", path.display()))?;
        record_latency(&mut latency, started.elapsed());
    }
    Ok(DiskProbe {
        p50_ns: latency.value_at_quantile(0.50),
        p90_ns: latency.value_at_quantile(0.90),
        mean_ns: latency.mean().round() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_measures_and_cleans_up() {
        let dir = tempfile::tempdir().expect("temp dir");
        let probe = probe(dir.path()).expect("probe");
        assert!(probe.p50_ns > 0 && probe.p90_ns >= probe.p50_ns, "{probe:?}");
        assert!(probe.describe().contains("fdatasync after a 100 KiB append"));
        assert_eq!(std::fs::read_dir(dir.path()).expect("read dir").count(), 0);
    }
}
