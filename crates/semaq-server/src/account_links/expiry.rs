//! Imports whose activation token expires while the server runs. nats-server arms a timer per
//! activation and, when it fires, marks the import invalid: a stream import stops delivering, a
//! service import stops forwarding requests. Here one task sleeps until the next expiry and
//! ends every import due then, so the server holds one timer however many imports expire.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Whether an import is still in force; its forwarding sink reads it on every message.
#[derive(Debug, Default)]
pub struct Validity {
    ended: AtomicBool,
}

impl Validity {
    /// Whether its activation has expired.
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Relaxed)
    }

    fn end(&self) {
        self.ended.store(true, Ordering::Relaxed);
    }
}

/// One import to end: when (seconds since the epoch), what (for the log), and its validity.
#[derive(Debug)]
struct Due {
    at: i64,
    import: String,
    validity: Arc<Validity>,
}

/// The imports to end, each when its activation expires.
#[derive(Debug, Default)]
pub struct Expiries {
    /// Latest first, so the next due is last.
    due: Vec<Due>,
}

impl Expiries {
    /// The validity of an import, described as `import`, that ends at `at` (seconds since the
    /// epoch).
    pub fn add(&mut self, at: i64, import: String) -> Arc<Validity> {
        let validity = Arc::new(Validity::default());
        let place = self.due.partition_point(|due| due.at > at);
        self.due.insert(place, Due { at, import, validity: validity.clone() });
        validity
    }

    /// Ends each import at its time from one task on the current runtime; `false` when there
    /// is no runtime to run it on.
    pub fn start(mut self) -> bool {
        if self.due.is_empty() {
            return true;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return false };
        runtime.spawn(async move {
            while let Some(next) = self.end_due(now()) {
                until(next).await;
            }
        });
        true
    }

    /// Ends the imports due at `now` (seconds since the epoch); returns when the next is due.
    pub(super) fn end_due(&mut self, now: i64) -> Option<i64> {
        while let Some(next) = self.due.last() {
            if next.at > now {
                return Some(next.at);
            }
            let due = self.due.pop()?;
            due.validity.end();
            tracing::info!(import = %due.import, "Import activation expired, import ended");
        }
        None
    }
}

fn now() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
}

/// Returns once the wall clock reads `at` (seconds since the epoch) or later. The timer runs on
/// the monotonic clock, so the wall clock is read again on waking in case it was set back.
async fn until(at: i64) {
    let due = UNIX_EPOCH + Duration::from_secs(u64::try_from(at).unwrap_or(0));
    while let Ok(left) = due.duration_since(SystemTime::now()) {
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_end_at_their_expiry_earliest_first_and_not_before() {
        let mut expiries = Expiries::default();
        let later = expiries.add(3_000, "later".into());
        let first = expiries.add(1_000, "first".into());
        let second = expiries.add(2_000, "second".into());
        assert_eq!(expiries.end_due(999), Some(1_000));
        assert!(!first.ended(), "not before its expiry");
        assert_eq!(expiries.end_due(2_000), Some(3_000), "due at its expiry");
        assert!(first.ended() && second.ended() && !later.ended());
        assert_eq!(expiries.end_due(5_000), None);
        assert!(later.ended());
    }

    #[tokio::test]
    async fn the_task_ends_an_import_when_its_second_comes() {
        let mut expiries = Expiries::default();
        let soon = expiries.add(now() + 1, "soon".into());
        let later = expiries.add(now() + 3_600, "later".into());
        assert!(expiries.start());
        tokio::time::timeout(Duration::from_secs(5), async {
            while !soon.ended() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the import due in a second ends within five");
        assert!(!later.ended(), "an import due in an hour is still in force");
    }

    #[test]
    fn without_a_runtime_nothing_is_started() {
        let mut expiries = Expiries::default();
        let validity = expiries.add(now() - 1, "passed".into());
        assert!(!expiries.start());
        assert!(!validity.ended());
    }
}
