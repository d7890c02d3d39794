//! Whether this replica may write now: the Lease holder's flag **and** a deadline (fencing).
//!
//! A flag alone is not enough: a leader paused (SIGSTOP, a long GC-like stall, a partition) keeps reading `true`
//! when it resumes, and could bind beside the replica that took over meanwhile. So leadership is valid only until a
//! deadline, moved forward each time the Lease is confirmed as renewed (`renewTime` + the renew deadline,
//! kube-scheduler's `renewDeadline`, `staging/src/k8s.io/client-go/tools/leaderelection`). Every writer asks
//! [`Leader::is_leader`] at the moment it sends, after waiting for any permit, so a resumed process refuses to write
//! before any task of it can run on stale leadership. Without a deadline (leader election off, tests) the flag
//! decides alone.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// Shared deadline: nanoseconds after `epoch` until which leadership holds; 0 = none granted, `u64::MAX` = none set.
#[derive(Debug)]
struct Deadline {
    epoch: Instant,
    until_nanos: AtomicU64,
}

/// Leadership as the writers see it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Leader {
    rx: watch::Receiver<bool>,
    deadline: Option<Arc<Deadline>>,
}

impl From<watch::Receiver<bool>> for Leader {
    fn from(rx: watch::Receiver<bool>) -> Self {
        Leader { rx, deadline: None }
    }
}

/// The side that moves the deadline (held by the leader elector).
#[derive(Clone, Debug)]
pub struct LeaderFence {
    deadline: Arc<Deadline>,
}

impl LeaderFence {
    /// Leadership holds until `until` (monotonic), or later if already so.
    pub fn extend_until(&self, until: Instant) {
        let nanos = until
            .saturating_duration_since(self.deadline.epoch)
            .as_nanos()
            .min(u128::from(u64::MAX - 1)) as u64;
        self.deadline.until_nanos.fetch_max(nanos, Ordering::SeqCst);
    }

    /// Leadership ends now, whatever was granted.
    pub fn revoke(&self) {
        self.deadline.until_nanos.store(0, Ordering::SeqCst);
    }
}

impl Leader {
    /// A flag with a deadline: the writers' side, and the fence the elector extends. Nothing is granted until the
    /// first [`LeaderFence::extend_until`].
    pub fn fenced(rx: watch::Receiver<bool>) -> (Leader, LeaderFence) {
        let deadline = Arc::new(Deadline {
            epoch: Instant::now(),
            until_nanos: AtomicU64::new(0),
        });
        (
            Leader {
                rx,
                deadline: Some(deadline.clone()),
            },
            LeaderFence { deadline },
        )
    }

    /// True while the flag is set and the deadline (if any) has not passed. Ask at the moment of each write.
    pub fn is_leader(&self) -> bool {
        *self.rx.borrow() && self.deadline.as_ref().is_none_or(|d| Self::within(d))
    }

    fn within(d: &Deadline) -> bool {
        let now = Instant::now().saturating_duration_since(d.epoch);
        now < Duration::from_nanos(d.until_nanos.load(Ordering::SeqCst))
    }

    /// The flag's receiver, to wait for changes (`changed`, `wait_for`).
    pub fn receiver(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn leadership_ends_at_the_deadline_even_with_the_flag_set() {
        let (tx, rx) = watch::channel(true);
        let (leader, fence) = Leader::fenced(rx);
        assert!(
            !leader.is_leader(),
            "nothing granted before the first renewal is confirmed"
        );
        fence.extend_until(Instant::now() + Duration::from_secs(10));
        assert!(leader.is_leader());
        // The process is paused past the deadline (SIGSTOP): on resume it is not the leader, flag or not.
        std::thread::sleep(Duration::from_millis(1));
        fence.extend_until(Instant::now());
        assert!(
            leader.is_leader(),
            "an earlier deadline does not shorten a later one"
        );
        fence.revoke();
        assert!(!leader.is_leader());
        fence.extend_until(Instant::now() + Duration::from_millis(50));
        assert!(leader.is_leader());
        std::thread::sleep(Duration::from_millis(60));
        assert!(!leader.is_leader(), "past the deadline");
        let _ = tx.send(false);
        let plain: Leader = watch::channel(true).1.into();
        assert!(plain.is_leader(), "without a deadline the flag decides");
    }
}
