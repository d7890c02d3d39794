//! The driver loop (upstream `Scheduler.Run` / `ScheduleOne` loop, `pkg/scheduler/scheduler.go`): it only wires
//! the components. Take an event, feed the [`Cache`] and the [`SchedulingQueue`] ([`crate::ingest`]), pop an
//! entity and run a cycle ([`cycle`]), hand the decision to the [`ApiDispatcher`], and take its results back.
//!
//! One task owns the queue, the core `Scheduler`, the cache and the preemption tracker (all plain data). Binds and
//! status writes run as tasks the dispatcher owns, so dropping the loop's future (a crash or abort) stops them too,
//! and a graceful shutdown waits for binds in flight up to the bind timeout.

mod cycle;

use std::time::{Duration, Instant};

use phalanx_scheduler::{EntityKey, GroupKind, Scheduler, SchedulingQueue};
use phalanx_store::{Leader, Store, StoreEvent};
use tokio::sync::{broadcast::error::TryRecvError, watch};
use tokio_util::sync::CancellationToken;

use crate::{
    Metrics, NodeFilter, SchedulerOptions,
    cache::Cache,
    dispatcher::{ApiDispatcher, jobs::ApiResult},
    ingest::EventHandlers,
    preemption_delay::PreemptionDelays,
    preemption_tracker::PreemptionTracker,
};

/// Longest sleep of the loop between two iterations (see `crate::progress`).
pub(crate) const MAX_IDLE: Duration = Duration::from_secs(1);

/// Default of [`crate::SchedulerOptions::condition_catch_up`]: how often the leader re-checks that every placed
/// group shows `*InitiallyScheduled=True` ([`ApiDispatcher::catch_up_conditions`]). A condition write that failed
/// for good (the API server down through every retry) is otherwise repaired only by a relist or a change of leader.
/// Costs one pass over the cached groups and their members; a write only where a condition is missing.
pub(crate) const CONDITION_CATCH_UP: Duration = Duration::from_secs(30);

enum Wake {
    Shutdown,
    Event(Result<StoreEvent, tokio::sync::broadcast::error::RecvError>),
    Api(Option<ApiResult>),
    Leader,
    Timer,
}

/// Leadership as the loop sees it: asked at every write, and its flag's changes wake the loop.
struct Leadership {
    /// Leadership with its fencing deadline.
    leader: Leader,
    /// The flag's receiver, to wake the loop when it changes.
    rx: watch::Receiver<bool>,
    /// False once the flag's sender is gone (no more wake-ups from it).
    open: bool,
}

/// The scheduler's runtime: the components and the loop that wires them (see the module docs and
/// docs/driver.md for who owns which state).
pub(crate) struct Driver {
    /// For the fresh read of bound pods on gaining leadership.
    client: kube::Client,
    store: Store,
    opts: SchedulerOptions,
    leadership: Leadership,
    metrics: Metrics,
    queue: SchedulingQueue,
    scheduler: Scheduler,
    cache: Cache,
    /// Nominations, bind reservations, pods terminating by preemption and preemptions in flight.
    preemption: PreemptionTracker,
    /// Root groups in their `preemptionDelaySeconds` ([`crate::preemption_delay`]).
    delays: PreemptionDelays,
    dispatcher: ApiDispatcher,
}

impl Driver {
    pub(crate) fn new(
        client: kube::Client,
        store: Store,
        opts: SchedulerOptions,
        filter: NodeFilter,
        leader: Leader,
        metrics: Metrics,
    ) -> Self {
        let mut cache = Cache::new(
            store.clone(),
            filter,
            opts.scheduler_name.clone(),
            opts.verify_snapshot,
            metrics.clone(),
        );
        cache.hold_for_provisioning(opts.provisioning_requests);
        let dispatcher = ApiDispatcher::new(
            client.clone(),
            store.clone(),
            opts.clone(),
            leader.clone(),
            metrics.clone(),
            cache.binding_finisher(),
        );
        Self {
            queue: SchedulingQueue::new(&opts.config),
            scheduler: {
                let mut s = Scheduler::new(opts.config.clone());
                s.enable_default_preemption();
                s
            },
            leadership: Leadership {
                rx: leader.receiver(),
                leader,
                open: true,
            },
            preemption: PreemptionTracker::default(),
            delays: PreemptionDelays::default(),
            client,
            store,
            opts,
            metrics,
            cache,
            dispatcher,
        }
    }

    /// The event handlers over this driver's components ([`crate::ingest`]).
    fn handlers(&mut self) -> EventHandlers<'_> {
        EventHandlers {
            store: &self.store,
            cache: &mut self.cache,
            queue: &mut self.queue,
            preemption: &mut self.preemption,
            dispatcher: &mut self.dispatcher,
        }
    }

    /// Reconciles the queue with the whole store (start, relist, lagged events).
    pub(crate) fn resync(&mut self) {
        self.handlers().resync();
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
                    Ok(ev) => self.handlers().on_event(ev),
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
            while let Some(r) = self.dispatcher.try_bind_result() {
                self.on_bind_result(r);
            }
            while let Some(r) = self.dispatcher.try_evict_report() {
                self.on_evict_report(r);
            }
            while let Some(r) = self.dispatcher.try_prebind_result() {
                self.on_prebind_result(r);
            }
            self.dispatcher.start_binds();
            self.dispatcher.reap();
            let leader = self.leadership.leader.is_leader();
            if leader && !was_leader {
                // The caches may lag behind binds the previous leader made just before it lost the Lease (or that
                // this replica made before a pause): read what is bound now, before the first cycle.
                self.cache
                    .read_bound_pods_fresh(&self.client, self.opts.bind_timeout)
                    .await;
                // Announce gates decided while we could not write.
                for (k, g) in self.queue.gated() {
                    self.dispatcher.announce_gate(&k, &g);
                }
                let _ = self.queue.take_gate_changes();
                self.dispatcher.catch_up_conditions();
                last_catch_up = Instant::now();
            }
            was_leader = leader;
            if leader && last_catch_up.elapsed() >= self.opts.condition_catch_up {
                last_catch_up = Instant::now();
                self.dispatcher.catch_up_conditions();
                let store = &self.store;
                self.delays.retain(|g| match g.kind {
                    GroupKind::PodGroup => store.pod_group_at(g).is_some(),
                    GroupKind::CompositePodGroup => store.composite_pod_group_at(g).is_some(),
                });
            }
            // A group whose preemption delay ended is tried again now: no cluster event need come (an autoscaler
            // that added nothing), and the 5-minute flush would stretch the delay.
            let now = Instant::now();
            for g in self.delays.take_due(now) {
                self.queue.activate(&EntityKey::Group(g), now);
            }
            for (k, gate) in self.queue.take_gate_changes() {
                if let Some(g) = gate {
                    self.dispatcher.announce_gate(&k, &g);
                }
            }
            self.update_pending();
            if leader && let Some(entity) = self.queue.pop(Instant::now()) {
                self.cycle(entity);
                continue;
            }
            // At most a second even when the queue's next wake-up is minutes away (an unschedulable entity waits
            // for the 5-minute flush): the loop's heartbeat is the liveness probe, and a deadline-fenced leadership
            // re-extended without a flag change must be noticed.
            let tick = Instant::now() + MAX_IDLE;
            let wake_at = [self.queue.next_wakeup(), self.delays.next_wakeup()]
                .into_iter()
                .flatten()
                .fold(tick, Instant::min);
            let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(wake_at));
            let leader_open = self.leadership.open;
            let wake = tokio::select! {
                () = shutdown.cancelled() => Wake::Shutdown,
                ev = events.recv() => Wake::Event(ev),
                r = self.dispatcher.next_result() => Wake::Api(r),
                r = self.leadership.rx.changed(), if leader_open => {
                    if r.is_err() {
                        self.leadership.open = false;
                    }
                    Wake::Leader
                }
                () = sleep => Wake::Timer,
            };
            match wake {
                Wake::Shutdown => break,
                Wake::Event(Ok(StoreEvent::Resync)) | Wake::Event(Err(_)) => self.resync(),
                Wake::Event(Ok(ev)) => self.handlers().on_event(ev),
                Wake::Api(Some(ApiResult::Bind(r))) => {
                    self.on_bind_result(r);
                    self.dispatcher.start_binds();
                }
                Wake::Api(Some(ApiResult::Evict(r))) => self.on_evict_report(r),
                Wake::Api(Some(ApiResult::PreBind(r))) => self.on_prebind_result(r),
                Wake::Api(None) | Wake::Leader | Wake::Timer => {}
            }
        }
        // Graceful: let binds in flight and queued finish (bounded by the bind timeout) so no assumption is left
        // dangling.
        self.dispatcher.drain(self.opts.bind_timeout).await;
        Ok(())
    }

    fn update_pending(&self) {
        let c = self.queue.counts();
        self.metrics.pending("active", c.active);
        self.metrics.pending("backoff", c.backoff);
        self.metrics.pending("unschedulable", c.unschedulable);
        self.metrics.pending("gated", c.gated);
        let (pods, nodes, groups) = self.cache.counts();
        let (group_conditions, binds_waiting, tasks) = self.dispatcher.counts();
        let (nominated, in_flight) = self.preemption.counts();
        for (kind, n) in [
            ("pods", pods),
            ("nodes", nodes),
            ("groups", groups),
            ("group_conditions", group_conditions),
            ("nominated", nominated),
            ("preemptions_in_flight", in_flight),
            ("preemption_delays", self.delays.len()),
            ("binds_waiting", binds_waiting),
            ("tasks", tasks),
        ] {
            self.metrics.tracked(kind, n);
        }
    }
}
