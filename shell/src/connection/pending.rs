//! Requests waiting for their answers, and the one timer per connection that fails those
//! that wait too long.
//!
//! Why not a timeout around each wait: every timer registered with async-io's reactor
//! is an insert and a remove on its timer queue, and an insert interrupts the reactor
//! when a thread sleeps in it; dropping timers faster than the reactor drains its queue
//! makes the dropper take the reactor's timer lock. At tens of thousands of requests a
//! second that was a futex wait and a thread switch now and then per request, on the
//! client's busiest path. Here a request's deadline is a number in the table; one task
//! per connection sleeps until the earliest deadline and fails what passed it. Requests
//! of the same timeout come in deadline order, so that task wakes about once per timeout
//! period, not once per request.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_channel::oneshot::Sender;

use super::{Connection, Inner, RemotingError};
use crate::frame::RemotingCommand;
use crate::runtime;
use crate::sync::MutexExt;

/// The waiting requests of one connection, by opaque.
#[derive(Debug, Default)]
pub(super) struct Pending {
    waiters: HashMap<i32, Waiter>,
    /// When the expiry task wakes next; `None` while it waits for a request to time.
    armed: Option<Instant>,
    /// Whether the expiry task was started (on the first request: a server's
    /// connections seldom send any).
    expiring: bool,
}

/// Where a request's outcome goes: its answer, or why none will come (sent by whoever
/// removes the waiter, so the request reports what happened first, however late it
/// runs: a close before the deadline is the close, not a timeout).
pub(super) type Outcome = Sender<Result<RemotingCommand, RemotingError>>;

#[derive(Debug)]
struct Waiter {
    answer: Outcome,
    deadline: Instant,
}

/// What [`Pending::insert`] asks of the caller.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Arm {
    /// The expiry task's next wake comes at or before this deadline: nothing to do.
    Armed,
    /// Wake the expiry task: the deadline is earlier than its next wake.
    Wake,
    /// Start the expiry task: this is the connection's first request.
    Start,
}

impl Pending {
    /// Adds a waiter for `opaque`'s answer until `deadline`.
    pub(super) fn insert(&mut self, opaque: i32, answer: Outcome, deadline: Instant) -> Arm {
        self.waiters.insert(opaque, Waiter { answer, deadline });
        if !self.expiring {
            self.expiring = true;
            self.armed = Some(deadline);
            return Arm::Start;
        }
        match self.armed {
            Some(at) if at <= deadline => Arm::Armed,
            _ => {
                self.armed = Some(deadline);
                Arm::Wake
            }
        }
    }

    /// Takes the waiter of `opaque` (its answer came, or its request gave up).
    pub(super) fn take(&mut self, opaque: i32) -> Option<Outcome> {
        self.waiters.remove(&opaque).map(|w| w.answer)
    }

    /// Fails every waiter with `why` (the connection closed).
    pub(super) fn fail_all(&mut self, why: &RemotingError) {
        for (_, w) in self.waiters.drain() {
            let _ = w.answer.send(Err(why.clone()));
        }
    }

    /// Fails the waiters whose deadline is not after `now` with a timeout; returns the
    /// earliest deadline left, which the expiry task sleeps until.
    fn expire(&mut self, now: Instant) -> Option<Instant> {
        let expired: Vec<i32> = self
            .waiters
            .iter()
            .filter(|(_, w)| w.deadline <= now)
            .map(|(opaque, _)| *opaque)
            .collect();
        for opaque in expired {
            if let Some(w) = self.waiters.remove(&opaque) {
                let _ = w.answer.send(Err(RemotingError::Timeout));
            }
        }
        self.armed = self.waiters.values().map(|w| w.deadline).min();
        self.armed
    }
}

impl Connection {
    /// Registers a waiter for `opaque`'s answer for up to `timeout`; returns its
    /// deadline, and whether it is the only request waiting. It is told `Timeout` when
    /// the deadline passes, or the close's error when the connection closes first.
    pub(super) fn wait_for_answer(
        &self,
        opaque: i32,
        answer: Outcome,
        timeout: Duration,
    ) -> (Instant, bool) {
        // A timeout too large to add is a wait without end; a year is as good.
        let now = Instant::now();
        let deadline = now
            .checked_add(timeout)
            .unwrap_or(now + Duration::from_secs(365 * 24 * 3600));
        let (arm, alone) = {
            let mut pending = self.inner.pending.guard();
            let arm = pending.insert(opaque, answer, deadline);
            (arm, pending.waiters.len() == 1)
        };
        match arm {
            Arm::Armed => {}
            Arm::Wake => self.inner.expiry.wake(),
            Arm::Start => {
                let inner = Arc::downgrade(&self.inner);
                runtime::spawn(Self::expire_loop(inner));
            }
        }
        (deadline, alone)
    }

    /// Takes the waiter of `opaque`: the read loop, to hand it its answer; a request,
    /// when it gives up.
    pub(crate) fn take_waiter(&self, opaque: i32) -> Option<Outcome> {
        self.inner.pending.guard().take(opaque)
    }

    /// Fails every waiter with the close's error (the connection closed).
    pub(super) fn fail_waiters(&self) {
        let why = self.closed_error();
        self.inner.pending.guard().fail_all(&why);
    }

    /// Fails waiters as their deadlines pass, until the connection is done or gone. It
    /// holds the connection only while it looks: a connection whose read loop ended
    /// without `done` (a panic) is not kept alive by it.
    async fn expire_loop(inner: Weak<Inner>) {
        loop {
            let Some(conn) = inner.upgrade() else { return };
            // Taken before looking, so a wake for an earlier deadline that comes while
            // we look is not lost.
            let woken = conn.expiry.next();
            let next = conn.pending.guard().expire(Instant::now());
            let done = conn.done.clone();
            drop(conn);
            let wait = async {
                match next {
                    Some(at) => {
                        let left = at.saturating_duration_since(Instant::now());
                        let _ = runtime::timeout(left, woken.wait()).await;
                    }
                    None => woken.wait().await,
                }
            };
            if done.until(wait).await {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_channel::oneshot;

    #[test]
    fn the_expiry_task_is_woken_only_for_an_earlier_deadline() {
        let t0 = Instant::now();
        let s = |n| t0 + Duration::from_secs(n);
        let mut p = Pending::default();
        let tx = || oneshot::channel().0;
        assert_eq!(p.insert(1, tx(), s(3)), Arm::Start);
        assert_eq!(p.insert(2, tx(), s(4)), Arm::Armed);
        assert_eq!(p.insert(3, tx(), s(2)), Arm::Wake);
        // At 2 s the third expires; the first is next.
        assert_eq!(p.expire(s(2)), Some(s(3)));
        assert!(p.take(3).is_none());
        assert!(p.take(1).is_some());
        assert_eq!(p.expire(s(3)), Some(s(4)));
        assert_eq!(p.expire(s(5)), None);
        // Nothing armed: the next request wakes the task.
        assert_eq!(p.insert(4, tx(), s(9)), Arm::Wake);
    }
}
