//! Measures appends without sync, one group-commit sync, and reopen, for the file store and the
//! memory store. Run: `cargo run --release -p semaq-store --example append_speed [count] [payload_bytes]`.
//! Uses a temporary directory (set TMPDIR to measure another disk).

use std::time::Instant;

use semaq_store::{FileStore, FileStoreConfig, MemoryStore, StoreLimits, StreamStore};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let count: u64 = args.next().map_or(Ok(1_000_000), |arg| arg.parse())?;
    let payload_bytes: usize = args.next().map_or(Ok(128), |arg| arg.parse())?;
    let payload = vec![0x5a; payload_bytes];
    println!("{count} messages x {payload_bytes} B payload, subject \"bench.orders\"");

    let dir = tempfile::tempdir()?;
    let mut store = FileStore::open(FileStoreConfig::new(dir.path()))?;
    let started = Instant::now();
    for ts in 0..i64::try_from(count)? {
        store.append("bench.orders", None, &payload, ts)?;
    }
    report("file append (no sync)", count, payload_bytes, started);
    let started = Instant::now();
    store.sync()?;
    println!("{:<28} {:>10.1} ms", "file sync (once)", started.elapsed().as_secs_f64() * 1e3);
    let stored_bytes = store.stored_bytes();
    drop(store);

    let started = Instant::now();
    let store = FileStore::open(FileStoreConfig::new(dir.path()))?;
    let recovery = store.recovery_report();
    println!(
        "{:<28} {:>10.1} ms  ({} segments, {:.1} MiB on disk, {:.1} MiB of logs scanned, {:.1} MiB of index read)",
        "file reopen",
        started.elapsed().as_secs_f64() * 1e3,
        recovery.segments_count,
        stored_bytes as f64 / 1048576.0,
        recovery.log_bytes_scanned as f64 / 1048576.0,
        recovery.index_bytes_read as f64 / 1048576.0
    );
    let started = Instant::now();
    let mut from = 1;
    while let Some(message) = store.get_next(from, None)? {
        from = message.seq + 1;
    }
    report("file read all (get_next)", count, payload_bytes, started);
    skip_to_rare_subject(store)?;

    group_commit(&payload)?;

    let mut memory = MemoryStore::new(StoreLimits::default());
    let started = Instant::now();
    for ts in 0..i64::try_from(count)? {
        memory.append("bench.orders", None, &payload, ts)?;
    }
    report("memory append", count, payload_bytes, started);
    Ok(())
}

fn report(what: &str, count: u64, payload_bytes: usize, started: Instant) {
    let seconds = started.elapsed().as_secs_f64();
    let rate = count as f64 / seconds;
    let megabytes = rate * payload_bytes as f64 / 1048576.0;
    println!("{what:<28} {:>10.1} ms  {:>12.0} msg/s  {:>8.1} MiB/s payload", seconds * 1e3, rate, megabytes);
}

/// `get_next` with a filter over every stored message to the one that matches, and with a
/// wildcard filter: no payload is read on the way.
fn skip_to_rare_subject(mut store: FileStore) -> Result<(), Box<dyn std::error::Error>> {
    let (rare_seq, _) = store.append("bench.rare", None, b"x", 0)?;
    for filter in ["bench.rare", "*.rare"] {
        let started = Instant::now();
        let found = store.get_next(1, Some(filter))?.map(|message| message.seq);
        assert_eq!(found, Some(rare_seq));
        let label = format!("get_next skip ({filter})");
        println!("{label:<28} {:>10.1} ms  over {} messages", started.elapsed().as_secs_f64() * 1e3, rare_seq - 1);
    }
    Ok(())
}

/// Batches of 100 appends, each followed by one `sync`, as the server's stream task does.
fn group_commit(payload: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
    const BATCHES: usize = 200;
    const BATCH_MESSAGES: usize = 100;
    let dir = tempfile::tempdir()?;
    let mut store = FileStore::open(FileStoreConfig::new(dir.path()))?;
    let mut sync_times_us = Vec::with_capacity(BATCHES);
    let started = Instant::now();
    for batch in 0..BATCHES {
        for index in 0..BATCH_MESSAGES {
            store.append("bench.orders", None, payload, i64::try_from(batch * BATCH_MESSAGES + index)?)?;
        }
        let sync_started = Instant::now();
        store.sync()?;
        // Saturates: a sync would have to take over half a million years to reach it.
        sync_times_us.push(u64::try_from(sync_started.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    sync_times_us.sort_unstable();
    let count = (BATCHES * BATCH_MESSAGES) as u64;
    report("file group commit (100/sync)", count, payload.len(), started);
    let percentile = |p: usize| sync_times_us[(sync_times_us.len() - 1) * p / 100];
    println!(
        "{:<28} p50 {} us, p99 {} us, max {} us",
        "  sync latency",
        percentile(50),
        percentile(99),
        percentile(100)
    );
    Ok(())
}
