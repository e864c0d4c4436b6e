//! Bounded waits for a condition: poll it until it holds, fail the test at the deadline.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often [`wait_until`] and [`wait_until_async`] check their condition.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Checks `condition` every [`POLL_INTERVAL`] until it holds; panics naming `what` if it still
/// does not after `within`.
#[track_caller]
pub fn wait_until(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// [`wait_until`] for an async condition, sleeping on the tokio timer between checks.
pub async fn wait_until_async<F, Fut>(what: &str, within: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !condition().await {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn returns_as_soon_as_the_condition_holds() {
        let checks = Cell::new(0);
        let started = Instant::now();
        wait_until("third check", Duration::from_secs(5), || {
            checks.set(checks.get() + 1);
            checks.get() == 3
        });
        assert_eq!(checks.get(), 3);
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    }

    #[test]
    #[should_panic(expected = "the sky falls: not within 100ms")]
    fn fails_naming_the_condition_at_the_deadline() {
        wait_until("the sky falls", Duration::from_millis(100), || false);
    }

    #[tokio::test]
    async fn the_async_wait_returns_as_soon_as_the_condition_holds() {
        let checks = Cell::new(0);
        wait_until_async("second check", Duration::from_secs(5), || {
            checks.set(checks.get() + 1);
            let done = checks.get() == 2;
            async move { done }
        })
        .await;
        assert_eq!(checks.get(), 2);
    }

    #[tokio::test]
    #[should_panic(expected = "never: not within 100ms")]
    async fn the_async_wait_fails_at_the_deadline() {
        wait_until_async("never", Duration::from_millis(100), || async { false }).await;
    }
}
