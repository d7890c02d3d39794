//! The driver loop (upstream `Scheduler.Run` / `ScheduleOne` loop, `pkg/scheduler/scheduler.go`).
//!
//! One task owns the queue and the core `Scheduler` (both are plain data). Binds and status writes run as tasks in a
//! `JoinSet` owned by the loop, so dropping the loop's future (a crash or abort) stops them too, and a graceful
//! shutdown waits for binds in flight up to the bind timeout. Bind results come back on a channel.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::events::Reporter;
use phalanx_scheduler::{GroupKey, PodInfo, PodKey, Scheduler, SchedulingQueue};
use phalanx_store::{Store, StoreEvent};
use tokio::{
    sync::{Semaphore, broadcast::error::TryRecvError, mpsc, watch},
    task::JoinSet,
};
use tokio_util::sync::CancellationToken;

use crate::{
    Binder, Metrics, NodeFilter, SchedulerOptions, StatusWriter,
    conditions::{WantedCondition, WriteKey},
    convert::ModelCache,
    cycle::BindResult,
    writes::Serializer,
};

enum Wake {
    Shutdown,
    Event(Result<StoreEvent, tokio::sync::broadcast::error::RecvError>),
    Bind(Option<BindResult>),
    Leader,
    Timer,
}

pub(crate) struct Driver {
    pub(crate) store: Store,
    pub(crate) opts: SchedulerOptions,
    pub(crate) filter: NodeFilter,
    pub(crate) leader: watch::Receiver<bool>,
    pub(crate) leader_open: bool,
    pub(crate) metrics: Metrics,
    pub(crate) queue: SchedulingQueue,
    pub(crate) scheduler: Scheduler,
    pub(crate) cache: ModelCache,
    /// Our pods fed to the queue, as last converted (needed to delete them from the queue).
    pub(crate) known: HashMap<PodKey, Arc<PodInfo>>,
    /// Each considered node as ingest last saw it, to tell a real change from a repeat (see `on_node`).
    pub(crate) nodes_seen: HashMap<String, Arc<phalanx_scheduler::NodeStatic>>,
    /// Bound pods of other schedulers seen on considered nodes (to report each arrival once).
    pub(crate) foreign_bound: HashSet<PodKey>,
    /// PodGroups and CompositePodGroups fed to the queue.
    pub(crate) known_groups: HashSet<GroupKey>,
    pub(crate) binder: Binder,
    pub(crate) writer: StatusWriter,
    pub(crate) write_permits: Arc<Semaphore>,
    pub(crate) writes: Serializer<WriteKey>,
    /// The condition each group should have, as last decided (see `spawn_group_condition`).
    pub(crate) group_wanted: Arc<std::sync::Mutex<HashMap<GroupKey, WantedCondition>>>,
    pub(crate) tasks: JoinSet<()>,
    pub(crate) bind_tx: mpsc::UnboundedSender<BindResult>,
    pub(crate) bind_rx: mpsc::UnboundedReceiver<BindResult>,
}

impl Driver {
    pub(crate) fn new(
        client: kube::Client,
        store: Store,
        opts: SchedulerOptions,
        filter: NodeFilter,
        leader: watch::Receiver<bool>,
        metrics: Metrics,
    ) -> Self {
        let reporter = Reporter {
            controller: opts.scheduler_name.clone(),
            instance: Some(
                opts.instance
                    .clone()
                    .unwrap_or_else(|| opts.scheduler_name.clone()),
            ),
        };
        let (bind_tx, bind_rx) = mpsc::unbounded_channel();
        Self {
            queue: SchedulingQueue::new(&opts.config),
            scheduler: Scheduler::new(opts.config.clone()),
            binder: Binder::new(client.clone(), opts.bind_concurrency, opts.bind_timeout),
            writer: StatusWriter::new(client, reporter, leader.clone()),
            write_permits: Arc::new(Semaphore::new(opts.status_concurrency.max(1))),
            writes: Serializer::new(),
            group_wanted: Arc::default(),
            store,
            filter,
            leader,
            leader_open: true,
            metrics,
            cache: ModelCache::default(),
            known: HashMap::new(),
            nodes_seen: HashMap::new(),
            foreign_bound: HashSet::new(),
            known_groups: HashSet::new(),
            tasks: JoinSet::new(),
            bind_tx,
            bind_rx,
            opts,
        }
    }

    pub(crate) fn is_leader(&self) -> bool {
        *self.leader.borrow()
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
        loop {
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
                r = self.leader.changed(), if leader_open => {
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

    pub(crate) fn ours(&self, p: &Pod) -> bool {
        p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some(self.opts.scheduler_name.as_str())
    }

    pub(crate) fn node_considered(&self, name: &str) -> bool {
        self.store
            .nodes()
            .get(&kube::runtime::reflector::ObjectRef::new(name))
            .is_some_and(|n| self.filter.matches(n.metadata.labels.as_ref()))
    }

    pub(crate) fn update_pending(&self) {
        let c = self.queue.counts();
        self.metrics.pending("active", c.active);
        self.metrics.pending("backoff", c.backoff);
        self.metrics.pending("unschedulable", c.unschedulable);
        self.metrics.pending("gated", c.gated);
    }
}
