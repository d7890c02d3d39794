//! The driver loop (upstream `Scheduler.Run` / `ScheduleOne` loop, `pkg/scheduler/scheduler.go`).
//!
//! One task owns the queue and the core `Scheduler` (both are plain data). Binds and status writes run as tasks in a
//! `JoinSet` owned by the loop, so dropping the loop's future (a crash or abort) stops them too, and a graceful
//! shutdown waits for binds in flight up to the bind timeout. Bind results come back on a channel.

use std::time::{Duration, Instant};

use phalanx_scheduler::PodKey;
use phalanx_store::StoreEvent;
use tokio::sync::broadcast::error::TryRecvError;
use tokio_util::sync::CancellationToken;

use crate::state::{BindResult, Driver};

/// Longest sleep of the loop between two iterations (see `crate::progress`).
pub(crate) const MAX_IDLE: Duration = Duration::from_secs(1);

/// Default of [`crate::SchedulerOptions::condition_catch_up`]: how often the leader re-checks that every placed
/// group shows `*InitiallyScheduled=True` ([`Driver::catch_up_conditions`]). A condition write that failed for good
/// (the API server down through every retry) is otherwise repaired only by a relist or a change of leader. Costs one pass over the cached groups and
/// their members; a write only where a condition is missing.
pub(crate) const CONDITION_CATCH_UP: Duration = Duration::from_secs(30);

enum Wake {
    Shutdown,
    Event(Result<StoreEvent, tokio::sync::broadcast::error::RecvError>),
    Bind(Option<BindResult>),
    Evict(Option<crate::preempt::EvictReport>),
    PreBind(Option<crate::prebind::PreBindResult>),
    Leader,
    Timer,
}

impl Driver {
    /// A quorum read (LIST, no resourceVersion) of every bound pod; a pod the watch does not show bound yet is
    /// assumed on its node, so the first cycles count it. The watch confirms (and ends) those assumptions as usual.
    /// Bounded by the bind timeout; on failure the caches are used as they are.
    ///
    /// A pod the LIST shows may be deleted before its page is handled (a namespace being deleted as a leader takes
    /// over): the watch has then shown its last event, and an assumption would keep its room for good. The store
    /// records the watch's deletions from before the LIST is sent and refuses those pods (issue 35).
    async fn read_bound_pods_fresh(&mut self) {
        let listed = self.store.begin_listed_assumptions();
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(self.client.clone());
        let mut lp = kube::api::ListParams::default()
            .fields("spec.nodeName!=")
            .limit(500);
        let started = Instant::now();
        let (mut added, mut deleted) = (0usize, 0usize);
        loop {
            let page = match tokio::time::timeout(self.opts.bind_timeout, api.list(&lp)).await {
                Ok(Ok(page)) => page,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "fresh read of bound pods failed; using the caches");
                    return;
                }
                Err(_) => {
                    tracing::warn!("fresh read of bound pods timed out; using the caches");
                    return;
                }
            };
            for p in page.items {
                let (Some(key), Some(node)) =
                    (PodKey::of(&p), phalanx_store::pod_node(&p).map(str::to_owned))
                else {
                    continue;
                };
                let cached_bound = self.store.pod(&key).is_some_and(|c| c.node_name().is_some());
                if !cached_bound
                    && !phalanx_scheduler::is_terminal(&p)
                    && self.store.assumed_node(&key).is_none()
                {
                    if listed.assume(std::sync::Arc::new(phalanx_store::PodRecord::from_pod(&p)), &node) {
                        self.store.finish_binding(&key);
                        added += 1;
                    } else {
                        deleted += 1;
                    }
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => lp = lp.continue_token(&c),
                None => break,
            }
        }
        drop(listed);
        tracing::info!(assumed = added, deleted_since = deleted, took = ?started.elapsed(), "read bound pods fresh after gaining leadership");
        self.snapshots.invalidate();
    }

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
        let mut last_catch_up = Instant::now();
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
            while let Ok(r) = self.evict_rx.try_recv() {
                self.on_evict_report(r);
            }
            while let Ok(r) = self.prebind_rx.try_recv() {
                self.on_prebind_result(r);
            }
            self.start_binds();
            while self.tasks.try_join_next().is_some() {}
            let leader = self.is_leader();
            if leader && !was_leader {
                // The caches may lag behind binds the previous leader made just before it lost the Lease (or that
                // this replica made before a pause): read what is bound now, before the first cycle.
                self.read_bound_pods_fresh().await;
                // Announce gates decided while we could not write.
                for (k, g) in self.queue.gated() {
                    self.announce_gate(&k, &g);
                }
                let _ = self.queue.take_gate_changes();
                self.catch_up_conditions();
                last_catch_up = Instant::now();
            }
            was_leader = leader;
            if leader && last_catch_up.elapsed() >= self.opts.condition_catch_up {
                last_catch_up = Instant::now();
                self.catch_up_conditions();
            }
            self.flush_gates();
            self.update_pending();
            if leader && let Some(entity) = self.queue.pop(Instant::now()) {
                self.cycle(entity);
                continue;
            }
            // At most a second even when the queue's next wake-up is minutes away (an unschedulable entity waits
            // for the 5-minute flush): the loop's heartbeat is the liveness probe, and a deadline-fenced leadership
            // re-extended without a flag change must be noticed.
            let tick = Instant::now() + MAX_IDLE;
            let wake_at = self.queue.next_wakeup().map_or(tick, |t| t.min(tick));
            let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(wake_at));
            let leader_open = self.leader_open;
            let wake = tokio::select! {
                () = shutdown.cancelled() => Wake::Shutdown,
                ev = events.recv() => Wake::Event(ev),
                r = self.bind_rx.recv() => Wake::Bind(r),
                r = self.evict_rx.recv() => Wake::Evict(r),
                r = self.prebind_rx.recv() => Wake::PreBind(r),
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
                Wake::Bind(Some(r)) => {
                    self.on_bind_result(r);
                    self.start_binds();
                }
                Wake::Evict(Some(r)) => self.on_evict_report(r),
                Wake::PreBind(Some(r)) => self.on_prebind_result(r),
                Wake::Bind(None) | Wake::Evict(None) | Wake::PreBind(None) | Wake::Leader | Wake::Timer => {}
            }
        }
        // Graceful: let binds in flight and queued finish (bounded by the bind timeout) so no assumption is left
        // dangling.
        let timeout = self.opts.bind_timeout;
        let drain = async {
            loop {
                self.start_binds();
                if self.tasks.join_next().await.is_none() {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(timeout, drain).await;
        Ok(())
    }

    pub(crate) fn update_pending(&self) {
        let c = self.queue.counts();
        self.metrics.pending("active", c.active);
        self.metrics.pending("backoff", c.backoff);
        self.metrics.pending("unschedulable", c.unschedulable);
        self.metrics.pending("gated", c.gated);
        let group_conditions = self
            .group_wanted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        let (nominated, in_flight) = self.preemption.counts();
        for (kind, n) in [
            ("pods", self.known.len()),
            ("nodes", self.nodes_seen.len()),
            ("groups", self.known_groups.len()),
            ("group_conditions", group_conditions),
            ("nominated", nominated),
            ("preemptions_in_flight", in_flight),
            ("binds_waiting", self.pending_binds.len()),
            ("tasks", self.tasks.len()),
        ] {
            self.metrics.tracked(kind, n);
        }
    }
}
