//! The driver loop (upstream `Scheduler.Run` / `ScheduleOne` loop, `pkg/scheduler/scheduler.go`).
//!
//! One task owns the queue and the core `Scheduler` (both are plain data). Binds and status writes run as tasks in a
//! `JoinSet` owned by the loop, so dropping the loop's future (a crash or abort) stops them too, and a graceful
//! shutdown waits for binds in flight up to the bind timeout. Bind results come back on a channel.

use std::time::{Duration, Instant};

use phalanx_store::StoreEvent;
use tokio::sync::broadcast::error::TryRecvError;
use tokio_util::sync::CancellationToken;

use crate::state::{BindResult, Driver};

enum Wake {
    Shutdown,
    Event(Result<StoreEvent, tokio::sync::broadcast::error::RecvError>),
    Bind(Option<BindResult>),
    Leader,
    Timer,
}

impl Driver {
    pub(crate) async fn run(mut self, shutdown: CancellationToken) -> anyhow::Result<()> {
        // Subscribe before waiting so no change between the initial lists and the first resync is lost.
        let mut events = self.store.subscribe();
        tokio::select! {
            () = self.store.wait_ready() => {}
            () = shutdown.cancelled() => return Ok(()),
        }
        tracing::info!(scheduler = %self.opts.scheduler_name, "store ready, scheduling");
        self.resync();
        let mut was_leader = false;
        loop {
            self.opts.progress.beat();
            // Drain everything that is already there, coalescing resyncs.
            let mut resync = false;
            loop {
                match events.try_recv() {
                    Ok(StoreEvent::Resync) => resync = true,
                    Ok(ev) => self.on_event(ev),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Lagged(n)) => {
                        tracing::warn!(missed = n, "store events lagged, resyncing");
                        resync = true;
                    }
                    Err(TryRecvError::Closed) => anyhow::bail!("store event channel closed"),
                }
            }
            if resync {
                self.resync();
            }
            while let Ok(r) = self.bind_rx.try_recv() {
                self.on_bind_result(r);
            }
            while self.tasks.try_join_next().is_some() {}
            let leader = self.is_leader();
            if leader && !was_leader {
                // Announce gates decided while we could not write.
                for (k, g) in self.queue.gated() {
                    self.announce_gate(&k, &g);
                }
                let _ = self.queue.take_gate_changes();
                self.catch_up_conditions();
            }
            was_leader = leader;
            self.flush_gates();
            self.update_pending();
            if leader && let Some(entity) = self.queue.pop(Instant::now()) {
                self.cycle(entity);
                continue;
            }
            let wake_at = self
                .queue
                .next_wakeup()
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(1));
            let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(wake_at));
            let leader_open = self.leader_open;
            let wake = tokio::select! {
                () = shutdown.cancelled() => Wake::Shutdown,
                ev = events.recv() => Wake::Event(ev),
                r = self.bind_rx.recv() => Wake::Bind(r),
                r = self.leader_rx.changed(), if leader_open => {
                    if r.is_err() {
                        self.leader_open = false;
                    }
                    Wake::Leader
                }
                () = sleep => Wake::Timer,
            };
            match wake {
                Wake::Shutdown => break,
                Wake::Event(Ok(StoreEvent::Resync)) | Wake::Event(Err(_)) => self.resync(),
                Wake::Event(Ok(ev)) => self.on_event(ev),
                Wake::Bind(Some(r)) => self.on_bind_result(r),
                Wake::Bind(None) | Wake::Leader | Wake::Timer => {}
            }
        }
        // Graceful: let binds in flight finish (bounded by the bind timeout) so no assumption is left dangling.
        let drain = async { while self.tasks.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(self.opts.bind_timeout, drain).await;
        Ok(())
    }

    pub(crate) fn update_pending(&self) {
        let c = self.queue.counts();
        self.metrics.pending("active", c.active);
        self.metrics.pending("backoff", c.backoff);
        self.metrics.pending("unschedulable", c.unschedulable);
        self.metrics.pending("gated", c.gated);
    }
}
