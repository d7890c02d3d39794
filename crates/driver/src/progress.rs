//! A heartbeat of the scheduling loop, for the liveness probe.
//!
//! The loop beats once per iteration, and an idle loop still iterates at least once a second (its sleep is bounded),
//! so a beat older than a few seconds means the loop is stuck (a deadlock, a cycle that never ends), not idle.
//! `/healthz` then fails and the kubelet restarts the process, as kube-scheduler's `/livez` does when its
//! components stop (`staging/src/k8s.io/apiserver/pkg/server/healthz`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The loop's last beat. Cheap to clone; all clones share one beat.
#[derive(Clone, Debug)]
pub struct Progress {
    epoch: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            epoch: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Progress {
    /// Records a beat now.
    pub fn beat(&self) {
        let ms = self.epoch.elapsed().as_millis().min(u128::from(u64::MAX)) as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Time since the last beat (since creation when there was none).
    pub fn age(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn age_resets_on_beat() {
        let p = Progress::default();
        std::thread::sleep(Duration::from_millis(20));
        assert!(p.age() >= Duration::from_millis(20));
        p.clone().beat();
        assert!(p.age() < Duration::from_millis(20));
    }
}
