//! Polling until something holds, for tests that watch another process (or task) get
//! there: every helper looks again every [`EVERY`] and gives up at its deadline.

use std::time::{Duration, Instant};

/// How long the helpers here sleep between looks.
pub const EVERY: Duration = Duration::from_millis(50);

/// Calls `f` until it gives a value; `None` when `within` passes first (after one last
/// call at the deadline, so a slow first call still counts).
#[must_use = "None means the deadline passed first"]
pub fn poll<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(EVERY);
    }
}

/// Polls `f` until it is true; whether it became so within `within`.
#[must_use = "false means the deadline passed first"]
pub fn poll_until(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    poll(within, || f().then_some(())).is_some()
}

/// [`poll`] that must succeed: panics naming `what` when `within` passes.
pub fn eventually<T>(what: &str, within: Duration, f: impl FnMut() -> Option<T>) -> T {
    poll(within, f).unwrap_or_else(|| panic!("timed out after {within:?}: {what}"))
}

/// [`poll_until`] for an async `check`, sleeping between looks without blocking the
/// executor; whether it became true within `within` (after one last look at the
/// deadline).
#[must_use = "false means the deadline passed first"]
pub async fn poll_until_async(within: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        async_std::task::sleep(EVERY).await;
    }
}

/// [`poll_until_async`] that must succeed: panics naming `what` when `within` passes.
pub async fn wait_until(what: &str, within: Duration, check: impl AsyncFnMut() -> bool) {
    assert!(
        poll_until_async(within, check).await,
        "timed out after {within:?}: {what}"
    );
}
