//! The replay window: a signed request is accepted once, and only near the time it was
//! signed.
//!
//! The signature covers the signing time ([`super::TIMESTAMP`]) and a nonce, so a copy
//! of a captured request carries the same time and the same signature. A request is
//! admitted when its time is within the window of now (either side: clocks drift) and
//! its signature was not seen before. Signatures are remembered by the second they were
//! signed in, so a replay finds its twin in one bucket, and a bucket is dropped once its
//! second is out of the window (its requests are refused by their time from then on).

use super::AclRefusal;
use crate::sync::MutexExt;
use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::time::Duration;

/// Most signatures remembered at once (about 16 bytes each): with a 60 s window, a
/// sustained 70k signed requests a second. Beyond it requests are refused until the
/// oldest second leaves the window, rather than remembering without bound.
pub const MAX_REMEMBERED: usize = 4 << 20;

/// Signatures seen in the window, by signing second.
#[derive(Debug)]
pub(crate) struct ReplayWindow {
    window_ms: u64,
    /// Keyed per process, so nobody can aim signatures at one hash.
    hasher: RandomState,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    by_second: BTreeMap<u64, HashSet<u64>>,
    count: usize,
}

impl ReplayWindow {
    /// A window of `window` either side of now.
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window_ms: window.as_millis().max(1) as u64,
            hasher: RandomState::new(),
            seen: Mutex::new(Seen::default()),
        }
    }

    /// Admits a request signed at `timestamp` (the field as sent) with `signature`, at
    /// `now_ms`; `Err` says why it is refused.
    pub(crate) fn admit(
        &self,
        timestamp: Option<&str>,
        signature: &str,
        now_ms: u64,
    ) -> Result<(), AclRefusal> {
        let Some(ts) = timestamp else {
            return Err(AclRefusal::NoSignedTime);
        };
        let Ok(signed_ms) = ts.parse::<u64>() else {
            return Err(AclRefusal::BadSignedTime(ts.to_owned()));
        };
        if signed_ms.abs_diff(now_ms) > self.window_ms {
            return Err(AclRefusal::OutsideReplayWindow {
                signed_ms,
                window_ms: self.window_ms,
                now_ms,
            });
        }
        let key = self.hasher.hash_one(signature);
        let mut seen = self.seen.guard();
        // Seconds wholly before the window can hold nothing admissible any more.
        let oldest = now_ms.saturating_sub(self.window_ms) / 1000;
        while let Some(entry) = seen.by_second.first_entry() {
            if *entry.key() >= oldest {
                break;
            }
            let dropped = entry.remove().len();
            seen.count -= dropped;
        }
        if seen.count >= MAX_REMEMBERED {
            return Err(AclRefusal::ReplayWindowFull);
        }
        if !seen
            .by_second
            .entry(signed_ms / 1000)
            .or_default()
            .insert(key)
        {
            return Err(AclRefusal::Replayed);
        }
        seen.count += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_is_admitted_once_and_only_inside_the_window() {
        let w = ReplayWindow::new(Duration::from_secs(60));
        let now = 1_800_000_000_000;
        let ts = now.to_string();
        assert_eq!(w.admit(Some(&ts), "sig-a", now), Ok(()));
        let again = w
            .admit(Some(&ts), "sig-a", now + 5)
            .unwrap_err()
            .to_string();
        assert!(again.contains("Replayed"), "{again}");
        assert_eq!(w.admit(Some(&ts), "sig-b", now), Ok(()));
        // Either side of now, within 60 s: admitted; outside: refused by its time.
        assert_eq!(w.admit(Some(&(now - 59_000).to_string()), "c", now), Ok(()));
        assert_eq!(w.admit(Some(&(now + 59_000).to_string()), "d", now), Ok(()));
        let old = w
            .admit(Some(&(now - 61_000).to_string()), "e", now)
            .unwrap_err()
            .to_string();
        assert!(old.contains("outside the replay window"), "{old}");
        assert!(
            w.admit(None, "f", now)
                .unwrap_err()
                .to_string()
                .contains("No AclTimestamp")
        );
        assert!(
            w.admit(Some("soon"), "g", now)
                .unwrap_err()
                .to_string()
                .contains("Bad")
        );
    }

    #[test]
    fn seconds_that_leave_the_window_are_forgotten() {
        let w = ReplayWindow::new(Duration::from_secs(2));
        let t0 = 1_800_000_000_000u64;
        for i in 0..100u64 {
            w.admit(Some(&t0.to_string()), &format!("s{i}"), t0)
                .unwrap();
        }
        assert_eq!(w.seen.lock().unwrap().count, 100);
        // 3 s later t0's second is out of the window: its signatures are dropped.
        let t1 = t0 + 3_000;
        w.admit(Some(&t1.to_string()), "later", t1).unwrap();
        let seen = w.seen.lock().unwrap();
        assert_eq!(seen.count, 1);
        assert_eq!(seen.by_second.len(), 1);
    }
}
