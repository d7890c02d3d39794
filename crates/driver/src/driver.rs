//! The driver loop: queue feeding, cycles, and applying decisions.
//!
//! One task owns the queue and the core `Scheduler` (both are plain data). Binds and status writes run as tasks in a
//! `JoinSet` owned by the loop, so dropping the loop's future (a crash or abort) stops them too, and a graceful
//! shutdown waits for binds in flight up to the bind timeout. Bind results come back on a channel; a failed bind was
//! already forgotten in the store and its pod is requeued after a short pause (upstream `handleBindingCycleError`:
//! `ForgetPod` then requeue with backoff).

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::Pod;
use kube::{ResourceExt, runtime::events::Reporter};
use phalanx_api::{v1alpha3::CompositePodGroup, v1beta1::PodGroup};
use phalanx_scheduler::{
    ClusterEvent, Decision, EntityKey, GateReason, Outcome, PodInfo, QueuedEntity, Scheduler,
    SchedulingQueue, Snapshot,
};
use phalanx_store::{GroupKind, PodKey, Store, StoreEvent, pod_node};
use tokio::{
    sync::{Semaphore, broadcast::error::TryRecvError, mpsc, watch},
    task::JoinSet,
};
use tokio_util::sync::CancellationToken;

use super::{
    BindOutcome, Binder, Metrics, NodeFilter, SchedulerOptions, StatusWriter,
    convert::{self, ModelCache, is_terminal},
    reasons,
    writes::Serializer,
};

/// A group condition the driver wants written, for the group object with `uid`.
#[derive(Clone, Debug)]
struct WantedCondition {
    uid: String,
    type_: &'static str,
    status: bool,
    reason: &'static str,
    message: String,
}

/// What a serialised status write is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum WriteKey {
    Pod(PodKey),
    Group(phalanx_store::GroupKey),
}

/// Pause before a pod whose bind failed goes back to the queue.
const BIND_RETRY_DELAY: Duration = Duration::from_secs(1);

/// Result of one background bind, sent back to the loop.
struct BindResult {
    key: PodKey,
    outcome: BindOutcome,
}

enum Wake {
    Shutdown,
    Event(Result<StoreEvent, tokio::sync::broadcast::error::RecvError>),
    Bind(Option<BindResult>),
    Leader,
    Timer,
}

pub(super) struct Driver {
    store: Store,
    opts: SchedulerOptions,
    filter: NodeFilter,
    leader: watch::Receiver<bool>,
    leader_open: bool,
    metrics: Metrics,
    queue: SchedulingQueue,
    scheduler: Scheduler,
    cache: ModelCache,
    /// Our pods fed to the queue, as last converted (needed to delete them from the queue).
    known: HashMap<PodKey, Arc<PodInfo>>,
    /// PodGroups and CompositePodGroups fed to the queue.
    known_groups: HashSet<phalanx_store::GroupKey>,
    binder: Binder,
    writer: StatusWriter,
    write_permits: Arc<Semaphore>,
    writes: Serializer<WriteKey>,
    /// The condition each group should have, as last decided (see `spawn_group_condition`).
    group_wanted: Arc<std::sync::Mutex<HashMap<phalanx_store::GroupKey, WantedCondition>>>,
    tasks: JoinSet<()>,
    bind_tx: mpsc::UnboundedSender<BindResult>,
    bind_rx: mpsc::UnboundedReceiver<BindResult>,
}

impl Driver {
    pub(super) fn new(
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
            known_groups: HashSet::new(),
            tasks: JoinSet::new(),
            bind_tx,
            bind_rx,
            opts,
        }
    }

    fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    pub(super) async fn run(mut self, shutdown: CancellationToken) -> anyhow::Result<()> {
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

    fn ours(&self, p: &Pod) -> bool {
        p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some(self.opts.scheduler_name.as_str())
    }

    fn node_considered(&self, name: &str) -> bool {
        self.store
            .nodes()
            .get(&kube::runtime::reflector::ObjectRef::new(name))
            .is_some_and(|n| self.filter.matches(n.metadata.labels.as_ref()))
    }

    fn on_event(&mut self, ev: StoreEvent) {
        let now = Instant::now();
        match ev {
            StoreEvent::Pod {
                key,
                group,
                node,
                deleted,
            } => self.on_pod(key, group, node, deleted, now),
            StoreEvent::Node(name) => self.on_node(&name, now),
            StoreEvent::Group(g) => self.on_group(&g, now),
            StoreEvent::Other => {}
            StoreEvent::Resync => self.resync(),
        }
    }

    fn on_pod(
        &mut self,
        key: PodKey,
        group: Option<phalanx_store::GroupKey>,
        node: Option<String>,
        deleted: bool,
        now: Instant,
    ) {
        let pod = if deleted { None } else { self.store.pod(&key) };
        match pod {
            Some(p) if !is_terminal(&p) && self.ours(&p) => {
                let info = self.queue_info(&key, &p);
                if self.known.insert(key, info.clone()).is_some() {
                    self.queue.update_pod(info, now);
                } else {
                    self.queue.add_pod(info, now);
                }
            }
            other => {
                let terminal = other.as_ref().is_some_and(|p| is_terminal(p));
                if let Some(old) = self.known.remove(&key) {
                    self.queue.delete_pod(&old, now);
                } else if (other.is_none() || terminal)
                    && let Some(n) = node.as_deref()
                    && self.node_considered(n)
                {
                    // Capacity freed on one of our nodes by someone else's pod.
                    self.queue.on_event(
                        ClusterEvent::AssignedPodDeleted {
                            pod: convert::pod_key(&key),
                            group: group.as_ref().map(convert::group_key),
                        },
                        now,
                    );
                }
                if other.is_none() {
                    self.cache.remove_pod(&key);
                }
            }
        }
    }

    /// The pod as the queue should see it: an assumed pod counts as assigned to its assumed node (upstream counts
    /// assumed pods as scheduled), so an older watch event of a pod being bound does not put it back in the queue
    /// or lower its group's quorum count.
    fn queue_info(&mut self, key: &PodKey, p: &Pod) -> Arc<PodInfo> {
        let info = self.cache.pod(p);
        match self.store.assumed_node(key) {
            Some(node) if info.node_name.is_none() => {
                let mut i = (*info).clone();
                i.node_name = Some(node.as_str().into());
                Arc::new(i)
            }
            _ => info,
        }
    }

    fn on_node(&mut self, name: &str, now: Instant) {
        let node = self
            .store
            .nodes()
            .get(&kube::runtime::reflector::ObjectRef::new(name));
        match node {
            Some(n) if self.filter.matches(n.metadata.labels.as_ref()) => {
                let old = self.cache.cached_node(name);
                match self.cache.node(&n) {
                    Ok(new) if old.as_deref() != Some(&*new) => {
                        let ev = if old.is_none() {
                            ClusterEvent::NodeAdded
                        } else {
                            ClusterEvent::NodeUpdated
                        };
                        self.queue.on_event(ev, now);
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(node = name, error = %e, "node skipped"),
                }
            }
            _ => self.cache.remove_node(name),
        }
    }

    fn on_group(&mut self, g: &phalanx_store::GroupKey, now: Instant) {
        match g.kind {
            GroupKind::PodGroup => match self.store.pod_group(&g.namespace, &g.name) {
                Some(pg) => {
                    self.known_groups.insert(g.clone());
                    self.queue.add_group(Arc::new(convert::group_info(&pg)), now);
                }
                None => self.forget_group(g, now),
            },
            GroupKind::CompositePodGroup => match self.store.composite_pod_group(&g.namespace, &g.name) {
                Some(cpg) => {
                    self.known_groups.insert(g.clone());
                    self.queue
                        .add_composite_group(Arc::new(convert::composite_info(&cpg)), now);
                }
                None => self.forget_group(g, now),
            },
        }
    }

    fn forget_group(&mut self, g: &phalanx_store::GroupKey, now: Instant) {
        if !self.known_groups.remove(g) {
            return;
        }
        match g.kind {
            GroupKind::PodGroup => self.queue.delete_group(&convert::group_key(g), now),
            GroupKind::CompositePodGroup => self.queue.delete_composite_group(&convert::group_key(g), now),
        }
    }

    /// Reconciles the queue with the whole store (start, relist, lagged events).
    fn resync(&mut self) {
        let now = Instant::now();
        let groups = self.store.pod_groups().state();
        let mut seen_groups = HashSet::new();
        for g in &groups {
            let key = phalanx_store::GroupKey::pod_group(g.namespace().unwrap_or_default(), g.name_any());
            seen_groups.insert(key.clone());
            self.known_groups.insert(key);
            self.queue.add_group(Arc::new(convert::group_info(g)), now);
        }
        for c in &self.store.composite_pod_groups().state() {
            let key = phalanx_store::GroupKey::composite(c.namespace().unwrap_or_default(), c.name_any());
            seen_groups.insert(key.clone());
            self.known_groups.insert(key);
            self.queue
                .add_composite_group(Arc::new(convert::composite_info(c)), now);
        }
        let gone: Vec<_> = self.known_groups.difference(&seen_groups).cloned().collect();
        for g in gone {
            self.forget_group(&g, now);
        }
        let mut seen = HashSet::new();
        for p in self.store.pods().state() {
            if is_terminal(&p) || !self.ours(&p) {
                continue;
            }
            let Some(key) = PodKey::of(&p) else { continue };
            let info = self.queue_info(&key, &p);
            seen.insert(key.clone());
            if self.known.insert(key, info.clone()).is_some() {
                self.queue.update_pod(info, now);
            } else {
                self.queue.add_pod(info, now);
            }
        }
        let gone: Vec<PodKey> = self
            .known
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            if let Some(old) = self.known.remove(&k) {
                self.queue.delete_pod(&old, now);
            }
        }
        self.queue.on_event(ClusterEvent::NodeUpdated, now);
        self.catch_up_conditions();
    }

    /// Writes `PodGroupInitiallyScheduled=True` for standalone PodGroups of ours whose bound members already
    /// reach the quorum (`minCount`, 1 for basic) but whose condition is not True.
    ///
    /// Why: binds and the condition write are separate API calls. A scheduler killed between them (or a write
    /// lost while leadership changed hands) leaves a placed group whose pods are all bound, so no cycle ever
    /// runs for it again and nothing else would set the condition. Runs at every resync and when this replica
    /// becomes leader. Groups under a CompositePodGroup are left to their tree's cycle.
    fn catch_up_conditions(&mut self) {
        use phalanx_api::conditions::{POD_GROUP_INITIALLY_SCHEDULED, is_condition_true};
        for pg in self.store.pod_groups().state() {
            if pg.spec.parent_composite_pod_group_name.is_some()
                || is_condition_true(convert::pod_group_conditions(&pg), POD_GROUP_INITIALLY_SCHEDULED)
            {
                continue;
            }
            let key = phalanx_store::GroupKey::pod_group(pg.namespace().unwrap_or_default(), pg.name_any());
            let members = self.store.group_members(&key);
            if !members.iter().any(|p| self.ours(p)) {
                continue;
            }
            let bound = members
                .iter()
                .filter(|p| pod_node(p).is_some() && !is_terminal(p))
                .count();
            let quorum = match convert::group_info(&pg).policy {
                phalanx_scheduler::GroupPolicy::Gang { min_count } => min_count as usize,
                phalanx_scheduler::GroupPolicy::Basic => 1,
            };
            if bound >= quorum.max(1) {
                self.spawn_group_condition(
                    key,
                    POD_GROUP_INITIALLY_SCHEDULED,
                    true,
                    reasons::SCHEDULED,
                    String::new(),
                );
            }
        }
    }

    /// Builds the cycle's snapshot: considered nodes, the pods bound to them, and assumed pods.
    fn snapshot(&mut self, entity: &QueuedEntity) -> Snapshot {
        let nodes: Vec<_> = self
            .store
            .nodes()
            .state()
            .into_iter()
            .filter(|n| self.filter.matches(n.metadata.labels.as_ref()))
            .collect();
        let mut statics = Vec::with_capacity(nodes.len());
        for n in &nodes {
            match self.cache.node(n) {
                Ok(s) => statics.push(s),
                Err(e) => tracing::warn!(node = %n.name_any(), error = %e, "node skipped"),
            }
        }
        let mut snap = Snapshot::new(statics);
        for n in &nodes {
            for p in self.store.pods_on_node(&n.name_any()) {
                if !is_terminal(&p) {
                    snap.add_pod(self.cache.pod(&p));
                }
            }
        }
        for (key, a) in self.store.assumed() {
            if self.store.pod(&key).as_deref().and_then(pod_node).is_some() {
                continue;
            }
            let mut info = (*self.cache.pod(&a.pod)).clone();
            info.node_name = Some(a.node.as_str().into());
            snap.add_pod(Arc::new(info));
        }
        // Members bound to nodes outside this instance's partition still count for their group's quorum (for a
        // CompositePodGroup tree: the members of every leaf).
        let mut groups: Vec<phalanx_store::GroupKey> = Vec::new();
        if let Some(g) = &entity.group {
            groups.push(convert::store_group_key(&g.key));
        }
        if let Some(t) = &entity.tree {
            groups.extend(t.leaves_under(&t.root().key).iter().map(convert::store_group_key));
        }
        for g in &groups {
            for p in self.store.group_members(g) {
                let Some(key) = PodKey::of(&p) else { continue };
                if pod_node(&p).is_some() && !is_terminal(&p) && !snap.contains_pod(&convert::pod_key(&key)) {
                    snap.add_pod(self.cache.pod(&p));
                }
            }
        }
        snap
    }

    fn cycle(&mut self, entity: QueuedEntity) {
        let started = Instant::now();
        let mut snap = self.snapshot(&entity);
        let decision = self.scheduler.schedule(&mut snap, &entity);
        self.queue.done(&decision, Instant::now());
        let kind = if entity.tree.is_some() {
            "compositepodgroup"
        } else if entity.group.is_some() {
            "podgroup"
        } else {
            "pod"
        };
        let result = match decision.outcome {
            Outcome::Scheduled => "scheduled",
            Outcome::Unschedulable => "unschedulable",
            Outcome::Error => "error",
            Outcome::Skipped => "skipped",
        };
        tracing::debug!(entity = %decision.entity, result, bindings = decision.bindings.len(), "cycle");
        self.apply(decision);
        self.metrics
            .attempt(kind, result, started.elapsed().as_secs_f64());
    }

    fn apply(&mut self, d: Decision) {
        for b in &d.bindings {
            let key = convert::store_pod_key(&b.pod);
            let Some(pod) = self.store.pod(&key) else { continue };
            if pod.metadata.uid.as_deref() != Some(&*b.uid) {
                continue;
            }
            let node = b.node.to_string();
            self.store.assume(pod.clone(), &node);
            let (binder, writer, store, metrics, tx) = (
                self.binder.clone(),
                self.writer.clone(),
                self.store.clone(),
                self.metrics.clone(),
                self.bind_tx.clone(),
            );
            self.tasks.spawn(async move {
                let outcome = if writer.is_leader() {
                    let t = Instant::now();
                    let o = binder.bind(&pod, &node).await;
                    let label = match &o {
                        BindOutcome::Bound => "bound",
                        BindOutcome::AlreadyBound => "already_bound",
                        BindOutcome::Conflict(_) => "conflict",
                        BindOutcome::NotFound => "not_found",
                        BindOutcome::Failed(_) => "error",
                    };
                    metrics.bind(label, t.elapsed().as_secs_f64());
                    o
                } else {
                    BindOutcome::Failed("lost leadership before binding".into())
                };
                if outcome.is_success() {
                    store.finish_binding(&key);
                    writer.event_scheduled(&pod, &node).await;
                } else {
                    store.forget(&key);
                    tracing::info!(pod = %key, node, ?outcome, "bind failed");
                    if let BindOutcome::Failed(m) = &outcome {
                        let msg = format!("Binding rejected: {m}");
                        let _ = writer
                            .pod_unschedulable(&pod, reasons::SCHEDULER_ERROR, &msg)
                            .await;
                        writer.event_failed(&pod, reasons::SCHEDULER_ERROR, &msg).await;
                        tokio::time::sleep(BIND_RETRY_DELAY).await;
                    }
                }
                let _ = tx.send(BindResult { key, outcome });
            });
        }
        for f in d.failures {
            let key = convert::store_pod_key(&f.pod);
            self.submit_pod_condition(key, Some(f.uid.to_string()), f.reason.as_str(), f.message, true);
        }
        for c in d.conditions {
            let g = convert::store_group_key(&c.group);
            self.spawn_group_condition(g, c.type_, c.status, c.reason, c.message);
        }
    }

    /// Queues `PodScheduled=False` for a pod, checked when it runs: skipped if the pod is gone, recreated, bound
    /// or assumed, or already says exactly this. `always_event` emits `FailedScheduling` on every attempt (as
    /// kube-scheduler does); otherwise only when the condition changed.
    fn submit_pod_condition(
        &mut self,
        key: PodKey,
        uid: Option<String>,
        reason: &'static str,
        message: String,
        always_event: bool,
    ) {
        let (store, writer, permits) = (
            self.store.clone(),
            self.writer.clone(),
            self.write_permits.clone(),
        );
        let k = key.clone();
        let job = async move {
            let Ok(_p) = permits.acquire().await else { return };
            let Some(pod) = store.pod(&k) else { return };
            if uid.is_some() && pod.metadata.uid != uid {
                return;
            }
            if pod_node(&pod).is_some() || store.assumed_node(&k).is_some() {
                return;
            }
            // A wait is announced once per reason: its message changes with every pod that arrives ("4 of 9
            // pods present", "5 of 9 ..."), and the condition already carries the latest count.
            let reason_changed = pod_scheduled_reason(&pod).as_deref() != Some(reason);
            let changed = match writer.pod_unschedulable(&pod, reason, &message).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(pod = %k, error = %e, "pod condition not written");
                    false
                }
            };
            if always_event || (changed && reason_changed) {
                writer.event_failed(&pod, reason, &message).await;
            }
        };
        self.writes.submit(&mut self.tasks, WriteKey::Pod(key), job);
    }

    /// Queues a group condition write. The wanted condition is recorded per group first, and a True condition is
    /// never replaced by a False one for the same object (upstream: no regression from True), even before the
    /// watch shows it; the write job then sends whatever is wanted when it runs.
    fn spawn_group_condition(
        &mut self,
        g: phalanx_store::GroupKey,
        type_: &'static str,
        status: bool,
        reason: &'static str,
        message: String,
    ) {
        let uid = match g.kind {
            GroupKind::PodGroup => self
                .store
                .pod_group(&g.namespace, &g.name)
                .and_then(|o| o.metadata.uid.clone()),
            GroupKind::CompositePodGroup => self
                .store
                .composite_pod_group(&g.namespace, &g.name)
                .and_then(|o| o.metadata.uid.clone()),
        };
        let Some(uid) = uid else { return };
        {
            let mut wanted = self
                .group_wanted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(w) = wanted.get(&g)
                && w.uid == uid
                && w.status
                && !status
            {
                return;
            }
            wanted.insert(
                g.clone(),
                WantedCondition {
                    uid,
                    type_,
                    status,
                    reason,
                    message,
                },
            );
        }
        let (store, writer, permits, wanted) = (
            self.store.clone(),
            self.writer.clone(),
            self.write_permits.clone(),
            self.group_wanted.clone(),
        );
        let key = g.clone();
        let job = async move {
            let Ok(_p) = permits.acquire().await else { return };
            let Some(w) = wanted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&g)
                .cloned()
            else {
                return;
            };
            let res = match g.kind {
                GroupKind::PodGroup => {
                    let Some(obj) = store.pod_group(&g.namespace, &g.name) else {
                        return;
                    };
                    if obj.metadata.uid.as_deref() != Some(w.uid.as_str()) {
                        return;
                    }
                    let cur = convert::pod_group_conditions(&obj);
                    writer
                        .group_condition::<PodGroup>(&obj, cur, w.type_, w.status, w.reason, &w.message)
                        .await
                }
                GroupKind::CompositePodGroup => {
                    let Some(obj) = store.composite_pod_group(&g.namespace, &g.name) else {
                        return;
                    };
                    if obj.metadata.uid.as_deref() != Some(w.uid.as_str()) {
                        return;
                    }
                    let cur = convert::composite_conditions(&obj);
                    writer
                        .group_condition::<CompositePodGroup>(
                            &obj, cur, w.type_, w.status, w.reason, &w.message,
                        )
                        .await
                }
            };
            if let Err(e) = res {
                tracing::debug!(group = %g, error = %e, "group condition not written");
            }
        };
        self.writes.submit(&mut self.tasks, WriteKey::Group(key), job);
    }

    fn on_bind_result(&mut self, r: BindResult) {
        if r.outcome.is_success() {
            return;
        }
        // The queue counted the pod as assigned when the decision was done; put it back unless it is gone or bound.
        let Some(p) = self.store.pod(&r.key) else { return };
        if pod_node(&p).is_some() || is_terminal(&p) || !self.ours(&p) {
            return;
        }
        let info = self.cache.pod(&p);
        self.known.insert(r.key, info.clone());
        self.queue.add_pod(info, Instant::now());
    }

    fn flush_gates(&mut self) {
        for (k, gate) in self.queue.take_gate_changes() {
            if let Some(g) = gate {
                self.announce_gate(&k, &g);
            }
        }
    }

    /// Writes a PreEnqueue gate as `PodScheduled=False` on the entity's pending pods and on its PodGroup.
    fn announce_gate(&mut self, k: &EntityKey, gate: &phalanx_scheduler::Gate) {
        if gate.reason == GateReason::SchedulingGated || !self.is_leader() {
            // The API server already reports `SchedulingGated` for pods with scheduling gates.
            return;
        }
        let pods: Vec<Arc<Pod>> = match k {
            EntityKey::Pod(p) => self.store.pod(&convert::store_pod_key(p)).into_iter().collect(),
            EntityKey::Group(g) if g.kind == phalanx_scheduler::GroupKind::CompositePodGroup => {
                // A root CompositePodGroup's entity holds the pods of every leaf below it.
                let leaves: Vec<phalanx_store::GroupKey> = self
                    .store
                    .hierarchy()
                    .subtree(&convert::store_group_key(g))
                    .into_iter()
                    .filter(|k| k.kind == GroupKind::PodGroup)
                    .collect();
                leaves.iter().flat_map(|l| self.store.group_members(l)).collect()
            }
            EntityKey::Group(g) => self.store.group_members(&convert::store_group_key(g)),
        };
        for pod in pods {
            if !self.ours(&pod) || pod_node(&pod).is_some() || is_terminal(&pod) {
                continue;
            }
            let Some(key) = PodKey::of(&pod) else { continue };
            self.submit_pod_condition(
                key,
                pod.metadata.uid.clone(),
                gate.reason.as_str(),
                gate.message.clone(),
                false,
            );
        }
        if let EntityKey::Group(g) = k {
            let sg = convert::store_group_key(g);
            let type_ = match g.kind {
                phalanx_scheduler::GroupKind::PodGroup => {
                    phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED
                }
                phalanx_scheduler::GroupKind::CompositePodGroup => {
                    phalanx_api::conditions::COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED
                }
            };
            self.spawn_group_condition(
                sg,
                type_,
                false,
                phalanx_api::conditions::reasons::UNSCHEDULABLE,
                gate.message.clone(),
            );
        }
    }

    fn update_pending(&self) {
        let c = self.queue.counts();
        self.metrics.pending("active", c.active);
        self.metrics.pending("backoff", c.backoff);
        self.metrics.pending("unschedulable", c.unschedulable);
        self.metrics.pending("gated", c.gated);
    }
}

/// The reason of the pod's `PodScheduled` condition, if any.
fn pod_scheduled_reason(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")?
        .reason
        .clone()
}
