//! Test-only failure points, chosen by the `SEMAQ_FAILPOINT` environment variable as
//! `<name>:<argument>` and read once; an unknown or malformed one is none.
//!
//! - `batch-append:<n>`: exit (code 86) after appending the `n`th message of an atomic batch;
//! - `batch-store-error:<n>`: the store refuses an atomic batch's `n`th message;
//! - `sync-delay-ms:<n>`: each commit's fsyncs start `n` ms late, the store's lock free, as on
//!   a slow disk; so do an L3 producer snapshot's (under the store's lock when written in place);
//! - `disk-faults:<control file>`: the streams' stores run on the real disk with fsync and
//!   write faults switched by that file (`semaq_store::storage::faults`);
//! - `disk-faults-segment-bytes:<n>:<control file>`: the same, and the file stores roll their
//!   segments at `n` bytes, so that a test reaches many rolls with little data.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable naming the failure point.
pub const FAILPOINT_ENV: &str = "SEMAQ_FAILPOINT";

/// A failure point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failpoint {
    /// `batch-append:<n>`.
    ExitAfterAppend(usize),
    /// `batch-store-error:<n>`.
    StoreError(usize),
    /// `sync-delay-ms:<n>`.
    SyncDelay(Duration),
    /// `disk-faults:<control file>` (no segment size) or
    /// `disk-faults-segment-bytes:<n>:<control file>`.
    DiskFaults {
        /// The control file that switches the faults.
        control: PathBuf,
        /// The segment size the file stores roll at, instead of the default.
        segment_bytes: Option<u64>,
    },
}

/// The failure point this process runs with, if any.
pub fn get() -> Option<&'static Failpoint> {
    static POINT: OnceLock<Option<Failpoint>> = OnceLock::new();
    POINT.get_or_init(|| parse(&std::env::var(FAILPOINT_ENV).ok()?)).as_ref()
}

fn parse(text: &str) -> Option<Failpoint> {
    let (name, argument) = text.split_once(':')?;
    let argument = argument.trim();
    match name {
        "batch-append" => argument.parse().ok().map(Failpoint::ExitAfterAppend),
        "batch-store-error" => argument.parse().ok().map(Failpoint::StoreError),
        "sync-delay-ms" => argument.parse().ok().map(Duration::from_millis).map(Failpoint::SyncDelay),
        "disk-faults" => Some(Failpoint::DiskFaults { control: PathBuf::from(argument), segment_bytes: None }),
        "disk-faults-segment-bytes" => {
            let (bytes, control) = argument.split_once(':')?;
            let segment_bytes = bytes.trim().parse().ok()?;
            Some(Failpoint::DiskFaults { control: PathBuf::from(control.trim()), segment_bytes: Some(segment_bytes) })
        }
        _ => None,
    }
}

/// The segment size the file stores roll at under `disk-faults-segment-bytes`, if it is set.
pub fn segment_bytes() -> Option<u64> {
    match get() {
        Some(Failpoint::DiskFaults { segment_bytes, .. }) => *segment_bytes,
        _ => None,
    }
}

/// Sleeps for the `sync-delay-ms` failure point, if it is set.
pub fn sync_delay() {
    if let Some(Failpoint::SyncDelay(delay)) = get() {
        std::thread::sleep(*delay);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_point_parses_and_anything_else_is_none() {
        assert_eq!(parse("batch-append:3"), Some(Failpoint::ExitAfterAppend(3)));
        assert_eq!(parse("batch-store-error:2"), Some(Failpoint::StoreError(2)));
        assert_eq!(parse("sync-delay-ms:1500"), Some(Failpoint::SyncDelay(Duration::from_millis(1500))));
        let control = PathBuf::from("/tmp/x");
        let faults = Failpoint::DiskFaults { control: control.clone(), segment_bytes: None };
        assert_eq!(parse("disk-faults:/tmp/x"), Some(faults));
        let small = Failpoint::DiskFaults { control, segment_bytes: Some(65536) };
        assert_eq!(parse("disk-faults-segment-bytes:65536:/tmp/x"), Some(small));
        assert_eq!(parse("disk-faults-segment-bytes:/tmp/x"), None);
        assert_eq!(parse("sync-delay-ms:soon"), None);
        assert_eq!(parse("unknown:1"), None);
        assert_eq!(parse("batch-append"), None);
    }
}
