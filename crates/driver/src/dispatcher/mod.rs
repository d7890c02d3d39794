//! Every API call a decision causes (upstream `APIDispatcher`, `pkg/scheduler/backend/api_dispatcher`, 1.34+):
//! binds, PreBind's claim and volume writes and their undo, evictions, nominations, pod and group conditions and
//! events. Calls run as background tasks that the dispatcher owns, bounded by permits (binds by the binder's,
//! status writes by `status_concurrency`) and ordered per object ([`crate::writes::Serializer`]: a newer write
//! for the same object replaces a queued one). Their results come back to the loop on channels
//! ([`ApiDispatcher::next_result`]).
//!
//! State owned here and nowhere else: the binds waiting for a permit, the claims PreBind is writing (which the
//! cache's catalogs apply while they are in flight), the conditions each group should have, the tasks.
//!
//! - [`jobs`]: the calls and their results as data (what the loop hands over and gets back);
//! - [`conditions`]: pod and group conditions, gates, the catch-up of placed groups;
//! - [`prebind`]: PreBind of the volume plugins and DynamicResources for a whole decision;
//! - [`devices`]: DynamicResources' claim writes and Unreserve;
//! - [`preempt`]: nominations and evictions.

pub(crate) mod conditions;
pub(crate) mod devices;
pub(crate) mod jobs;
pub(crate) mod prebind;
pub(crate) mod preempt;

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
    time::Duration,
};

use kube::runtime::events::Reporter;
use phalanx_api::conditions::reasons;
use phalanx_scheduler::{GroupKey, PodKey, volumes::ClaimKey, volumes::VolumeAction};
use phalanx_store::{Leader, PodRecord, Store};
use tokio::{
    sync::{Semaphore, mpsc},
    task::JoinSet,
};

use crate::{
    BindOutcome, Binder, Evictor, Metrics, SchedulerOptions, StatusWriter, cache::BindingFinisher,
    status::WantedCondition, writes::Serializer,
};
use devices::ClaimJob;
use jobs::{ApiResult, BindJob, BindResult, EvictReport, PreBindResult, WriteKey};

/// The results' channels: the tasks hold the senders, the loop reads the receivers.
struct Channels {
    bind_tx: mpsc::UnboundedSender<BindResult>,
    bind_rx: mpsc::UnboundedReceiver<BindResult>,
    evict_tx: mpsc::UnboundedSender<EvictReport>,
    evict_rx: mpsc::UnboundedReceiver<EvictReport>,
    prebind_tx: mpsc::UnboundedSender<PreBindResult>,
    prebind_rx: mpsc::UnboundedReceiver<PreBindResult>,
}

/// The group conditions the dispatcher wants written, by group and condition type, shared with the write tasks
/// (a write sends what is wanted when it runs).
pub(crate) type WantedConditions =
    Arc<std::sync::Mutex<HashMap<GroupKey, HashMap<&'static str, WantedCondition>>>>;

/// The owner of every API call a decision causes; see the module docs.
pub(crate) struct ApiDispatcher {
    client: kube::Client,
    store: Store,
    opts: SchedulerOptions,
    metrics: Metrics,
    writer: StatusWriter,
    binder: Binder,
    evictor: Evictor,
    finisher: BindingFinisher,
    /// Status patches and events in flight (`status_concurrency`).
    write_permits: Arc<Semaphore>,
    /// Decisions whose PreBind is writing device claims (`bind_concurrency`), taken in the order they were
    /// decided ([`devices::bind_devices`]).
    prebind_permits: Arc<Semaphore>,
    writes: Serializer<WriteKey>,
    /// The conditions each group should have, by condition type, as last decided
    /// ([`ApiDispatcher::spawn_group_condition`]).
    group_wanted: WantedConditions,
    tasks: JoinSet<()>,
    /// Binds decided but not started: a bind task starts only with a binder permit
    /// ([`ApiDispatcher::start_binds`]).
    pending_binds: VecDeque<BindJob>,
    /// Volume claims whose binding PreBind is writing or waiting for ([`prebind`]).
    volumes_in_flight: HashMap<ClaimKey, VolumeAction>,
    /// Resource claims PreBind is writing ([`devices`]).
    devices_in_flight: HashMap<ClaimKey, ClaimJob>,
    channels: Channels,
}

impl ApiDispatcher {
    /// A dispatcher writing through `client` while `leader` holds, with the limits of `opts`; `finisher` ends the
    /// assumption of a pod whose bind succeeded.
    pub(crate) fn new(
        client: kube::Client,
        store: Store,
        opts: SchedulerOptions,
        leader: Leader,
        metrics: Metrics,
        finisher: BindingFinisher,
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
        let (evict_tx, evict_rx) = mpsc::unbounded_channel();
        let (prebind_tx, prebind_rx) = mpsc::unbounded_channel();
        let writer = StatusWriter::new(client.clone(), reporter, leader.clone());
        Self {
            binder: Binder::new(client.clone(), opts.bind_concurrency, opts.bind_timeout, leader),
            evictor: Evictor::new(client.clone(), writer.clone(), opts.bind_timeout),
            write_permits: Arc::new(Semaphore::new(opts.status_concurrency.max(1))),
            prebind_permits: Arc::new(Semaphore::new(opts.bind_concurrency.max(1))),
            writes: Serializer::new(),
            group_wanted: Arc::default(),
            tasks: JoinSet::new(),
            pending_binds: VecDeque::new(),
            volumes_in_flight: HashMap::new(),
            devices_in_flight: HashMap::new(),
            channels: Channels {
                bind_tx,
                bind_rx,
                evict_tx,
                evict_rx,
                prebind_tx,
                prebind_rx,
            },
            client,
            store,
            opts,
            metrics,
            writer,
            finisher,
        }
    }

    /// True while this replica may write (see [`StatusWriter::is_leader`]).
    pub(crate) fn is_leader(&self) -> bool {
        self.writer.is_leader()
    }

    /// Whether the pod is this scheduler's.
    fn ours(&self, p: &PodRecord) -> bool {
        p.scheduler_name() == self.opts.scheduler_name
    }

    /// A watch event of pod `key`: the writer's record of its own writes in transit catches up with it.
    pub(crate) fn observe_pod(&self, key: &PodKey, pod: Option<&PodRecord>) {
        self.writer.observe_pod(key, pod);
    }

    /// Group `g` is gone: the conditions last wanted on it go too, so a write still queued finds none and writes
    /// nothing, and a group recreated under the name starts afresh (its uid differs anyway).
    pub(crate) fn forget_group(&self, g: &GroupKey) {
        self.group_wanted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(g);
    }

    /// The volume bindings PreBind is writing, one per claim (the cache's volume catalog applies them).
    pub(crate) fn volumes_in_flight(&self) -> impl Iterator<Item = &VolumeAction> {
        self.volumes_in_flight.values()
    }

    /// The resource claims PreBind is writing (the cache's device catalog applies them).
    pub(crate) fn devices_in_flight(&self) -> impl Iterator<Item = &ClaimJob> {
        self.devices_in_flight.values()
    }

    /// Queues a bind; it starts when a binder permit is free ([`ApiDispatcher::start_binds`]).
    pub(crate) fn queue_bind(&mut self, job: BindJob) {
        self.pending_binds.push_back(job);
    }

    /// Starts the queued binds that a free binder permit allows, oldest first (the order the cycles decided them).
    /// A bind waiting for a permit stays a queue entry (an `Arc` of the pod and the node name) rather than a
    /// parked task: at 8,000 pods decided at once, parked tasks held 34 MB (see `docs/benchmarks.md`).
    pub(crate) fn start_binds(&mut self) {
        while !self.pending_binds.is_empty() {
            let Some(permit) = self.binder.try_permit() else {
                return;
            };
            let Some(BindJob {
                key,
                pod,
                node,
                queued,
                claims,
            }) = self.pending_binds.pop_front()
            else {
                return;
            };
            let (client, binder, writer, finisher, metrics, tx) = (
                self.client.clone(),
                self.binder.clone(),
                self.writer.clone(),
                self.finisher.clone(),
                self.metrics.clone(),
                self.channels.bind_tx.clone(),
            );
            let scheduled_event = self.opts.scheduled_events;
            self.tasks.spawn(async move {
                let outcome = if writer.is_leader() {
                    let o = binder.bind_with(permit, &pod, &node).await;
                    let label = match &o {
                        BindOutcome::Bound => "bound",
                        BindOutcome::AlreadyBound => "already_bound",
                        BindOutcome::Conflict(_) => "conflict",
                        BindOutcome::NotFound => "not_found",
                        BindOutcome::Failed(_) => "error",
                    };
                    metrics.bind(label, queued.elapsed().as_secs_f64());
                    o
                } else {
                    drop(permit);
                    BindOutcome::Failed("lost leadership before binding".into())
                };
                if outcome.is_success() {
                    finisher.finish(&key);
                    // The result goes back before the event is written: the loop starts the next queued bind on
                    // it, and the permit is already free.
                    let _ = tx.send(BindResult {
                        key,
                        node: node.clone(),
                        outcome,
                    });
                    if scheduled_event {
                        writer.event_scheduled(&pod, &node).await;
                    }
                    return;
                }
                // The assumed pod is forgotten by the loop (`on_bind_result`), not here: a cycle running between a
                // forget here and the loop's handling of the result would see the room free and give it to other
                // work, leaving this pod's gang half bound.
                tracing::info!(pod = %key, node, ?outcome, "bind failed");
                if let BindOutcome::Failed(m) = &outcome {
                    let msg = format!("Binding rejected: {m}");
                    let _ = writer
                        .pod_unschedulable(&pod, reasons::SCHEDULER_ERROR, &msg, None)
                        .await;
                    writer.event_failed(&pod, reasons::SCHEDULER_ERROR, &msg).await;
                }
                // Unreserve (upstream runs it for every plugin when binding fails): the claims PreBind wrote
                // would keep the pod pinned to this node, and kube-controller-manager never frees them while the
                // pod exists. Done before the result goes back, so the requeued pod sees them free.
                if !claims.is_empty() && writer.is_leader() {
                    let uid: [Arc<str>; 1] = [pod.uid().into()];
                    for c in &claims {
                        devices::unreserve(&client, c, &uid).await;
                    }
                }
                let _ = tx.send(BindResult { key, node, outcome });
            });
        }
    }

    /// A bind result already back, if any.
    pub(crate) fn try_bind_result(&mut self) -> Option<BindResult> {
        self.channels.bind_rx.try_recv().ok()
    }

    /// An eviction report already back, if any.
    pub(crate) fn try_evict_report(&mut self) -> Option<EvictReport> {
        self.channels.evict_rx.try_recv().ok()
    }

    /// A PreBind result already back, if any.
    pub(crate) fn try_prebind_result(&mut self) -> Option<PreBindResult> {
        self.channels.prebind_rx.try_recv().ok()
    }

    /// Waits for the next result of any kind. Cancel-safe (the loop selects on it with its other wake-ups).
    pub(crate) async fn next_result(&mut self) -> Option<ApiResult> {
        let c = &mut self.channels;
        tokio::select! {
            r = c.bind_rx.recv() => r.map(ApiResult::Bind),
            r = c.evict_rx.recv() => r.map(ApiResult::Evict),
            r = c.prebind_rx.recv() => r.map(ApiResult::PreBind),
        }
    }

    /// Reaps the tasks that ended.
    pub(crate) fn reap(&mut self) {
        while self.tasks.try_join_next().is_some() {}
    }

    /// Graceful shutdown: lets the binds in flight and queued finish, up to `timeout` in all, so no assumption is
    /// left dangling.
    pub(crate) async fn drain(&mut self, timeout: Duration) {
        let drain = async {
            loop {
                self.start_binds();
                if self.tasks.join_next().await.is_none() {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(timeout, drain).await;
    }

    /// Sizes for the `phalanx_scheduler_tracked` gauge: (groups with wanted conditions, binds waiting for a
    /// permit, tasks).
    pub(crate) fn counts(&self) -> (usize, usize, usize) {
        let group_conditions = self
            .group_wanted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        (group_conditions, self.pending_binds.len(), self.tasks.len())
    }
}

#[cfg(test)]
mod tests;
