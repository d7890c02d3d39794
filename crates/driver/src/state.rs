//! The driver's state: what the loop owns (queue, core, caches, writers, tasks) and the small types its parts share.
//! The parts (`runtime`, `ingest`, `cycle`, `conditions`, `members`) each add methods to [`Driver`] and import only
//! this module, so no two of them import each other.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use kube::runtime::events::Reporter;
use phalanx_scheduler::{GroupKey, PodInfo, PodKey, Scheduler, SchedulingQueue};
use phalanx_store::{Leader, Store};
use tokio::{
    sync::{Semaphore, mpsc, watch},
    task::JoinSet,
};

use crate::{
    BindOutcome, Binder, Metrics, NodeFilter, SchedulerOptions, StatusWriter, convert::ModelCache,
    writes::Serializer,
};

/// A group condition the driver wants written, for the group object with `uid`.
#[derive(Clone, Debug)]
pub(crate) struct WantedCondition {
    pub(crate) uid: String,
    pub(crate) type_: &'static str,
    pub(crate) status: bool,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    /// When the driver decided it (a True left to the PodGroup controller is written by the driver after all once
    /// it is older than a catch-up interval and still not shown; see `catch_up_delegated`).
    pub(crate) at: std::time::Instant,
    /// A True left to the PodGroup controller (`SchedulerOptions::initially_scheduled_by_controllers`): a write
    /// queued for the group before it was decided does not send it while it is younger than a catch-up interval.
    pub(crate) delegated: bool,
}

/// What a serialised status write is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum WriteKey {
    Pod(PodKey),
    /// `status.nominatedNodeName` of a pod: ordered apart from its conditions, so a condition write never replaces
    /// a queued nomination.
    Nomination(PodKey),
    Group(GroupKey),
}

/// A bind decided by a cycle, waiting for a binder permit: the pod is assumed on `node` in the store already.
pub(crate) struct BindJob {
    pub(crate) key: PodKey,
    pub(crate) pod: Arc<phalanx_store::PodRecord>,
    pub(crate) node: String,
    /// When the cycle decided it (the bind latency metric counts the wait for a permit).
    pub(crate) queued: std::time::Instant,
    /// The resource claims PreBind reserved for the pod, to unreserve when the bind fails.
    pub(crate) claims: Vec<phalanx_scheduler::volumes::ClaimKey>,
}

/// Result of one background bind, sent back to the loop.
pub(crate) struct BindResult {
    pub(crate) key: PodKey,
    /// The node the bind was for.
    pub(crate) node: String,
    pub(crate) outcome: BindOutcome,
}

pub(crate) struct Driver {
    /// For the fresh read of bound pods on gaining leadership.
    pub(crate) client: kube::Client,
    pub(crate) store: Store,
    pub(crate) opts: SchedulerOptions,
    pub(crate) filter: NodeFilter,
    /// Leadership with its fencing deadline: asked at the moment of every write.
    pub(crate) leader: Leader,
    /// The flag's receiver, to wake the loop when it changes.
    pub(crate) leader_rx: watch::Receiver<bool>,
    pub(crate) leader_open: bool,
    pub(crate) metrics: Metrics,
    pub(crate) queue: SchedulingQueue,
    pub(crate) scheduler: Scheduler,
    pub(crate) cache: ModelCache,
    /// Our pods fed to the queue, as last converted (needed to delete them from the queue).
    pub(crate) known: HashMap<PodKey, Arc<PodInfo>>,
    /// Our group members that Succeeded, as last converted: they count toward their group's quorum until their
    /// object is deleted ([`phalanx_scheduler::SchedulingQueue::complete_pod`]).
    pub(crate) completed: HashMap<PodKey, Arc<PodInfo>>,
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
    /// The conditions each group should have, by condition type, as last decided (see `spawn_group_condition`).
    pub(crate) group_wanted: Arc<std::sync::Mutex<HashMap<GroupKey, HashMap<&'static str, WantedCondition>>>>,
    pub(crate) tasks: JoinSet<()>,
    /// Evicts preemption victims and writes nominations.
    pub(crate) evictor: crate::Evictor,
    /// Every PodGroup and CompositePodGroup as the core sees it (victim units need the groups of running pods).
    pub(crate) group_infos: HashMap<GroupKey, Arc<phalanx_scheduler::GroupInfo>>,
    /// Owner uid -> the PodGroup sized from it (annotation `owner-generation`, see [`crate::resize`]).
    pub(crate) sized_groups: HashMap<String, GroupKey>,
    /// The reverse of `sized_groups`: PodGroup -> the owner uid it was sized from.
    pub(crate) sized_owner_of: HashMap<GroupKey, String>,
    pub(crate) composite_infos: HashMap<GroupKey, Arc<phalanx_scheduler::CompositeGroupInfo>>,
    /// Nominations, bind reservations, pods terminating by preemption and preemptions in flight: one owner.
    pub(crate) preemption: crate::preemption_tracker::PreemptionTracker,
    /// Eviction results, sent back to the loop.
    pub(crate) evict_tx: mpsc::UnboundedSender<crate::preempt::EvictReport>,
    pub(crate) evict_rx: mpsc::UnboundedReceiver<crate::preempt::EvictReport>,
    /// Binds decided but not started: a bind task starts only with a binder permit (see `Driver::start_binds`).
    pub(crate) pending_binds: std::collections::VecDeque<BindJob>,
    pub(crate) bind_tx: mpsc::UnboundedSender<BindResult>,
    pub(crate) bind_rx: mpsc::UnboundedReceiver<BindResult>,
    /// The snapshot kept between cycles (see [`crate::snapshot_cache`]).
    pub(crate) snapshots: crate::snapshot_cache::SnapshotCache,
    /// The storage facts of the next cycles; `None` after a storage event or a change of `volumes_in_flight`
    /// (rebuilt on demand, [`Driver::volume_catalog`]).
    pub(crate) volume_catalog: Option<Arc<phalanx_scheduler::volumes::VolumeCatalog>>,
    /// Claims whose binding PreBind is writing or waiting for ([`crate::prebind`]).
    pub(crate) volumes_in_flight:
        HashMap<phalanx_scheduler::volumes::ClaimKey, phalanx_scheduler::volumes::VolumeAction>,
    /// The DRA facts of the next cycles; `None` after a DRA event, the deletion of a pod with claims, or a change
    /// of `devices_in_flight` (rebuilt on demand, [`Driver::device_catalog`]).
    pub(crate) device_catalog: Option<Arc<phalanx_scheduler::dra::DeviceCatalog>>,
    /// Bumped at each rebuild of the device catalog.
    pub(crate) device_revision: u64,
    /// The DRA objects the last rebuild could not use, each warned about once.
    pub(crate) device_problems: Vec<String>,
    /// Claims PreBind is writing ([`crate::devices`]).
    pub(crate) devices_in_flight: HashMap<phalanx_scheduler::volumes::ClaimKey, crate::devices::ClaimJob>,
    /// PreBind results, sent back to the loop.
    pub(crate) prebind_tx: mpsc::UnboundedSender<crate::prebind::PreBindResult>,
    pub(crate) prebind_rx: mpsc::UnboundedReceiver<crate::prebind::PreBindResult>,
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
        let fresh_client = client.clone();
        Self {
            queue: SchedulingQueue::new(&opts.config),
            scheduler: {
                let mut s = Scheduler::new(opts.config.clone());
                s.enable_default_preemption();
                s
            },
            binder: Binder::new(
                client.clone(),
                opts.bind_concurrency,
                opts.bind_timeout,
                leader.clone(),
            ),
            evictor: crate::Evictor::new(client, writer.clone(), opts.bind_timeout),
            client: fresh_client,
            writer,
            group_infos: HashMap::new(),
            sized_groups: HashMap::new(),
            sized_owner_of: HashMap::new(),
            composite_infos: HashMap::new(),
            preemption: Default::default(),
            evict_tx,
            evict_rx,
            write_permits: Arc::new(Semaphore::new(opts.status_concurrency.max(1))),
            writes: Serializer::new(),
            group_wanted: Arc::default(),
            store,
            filter,
            leader_rx: leader.receiver(),
            leader,
            leader_open: true,
            metrics,
            cache: ModelCache::default(),
            known: HashMap::new(),
            completed: HashMap::new(),
            nodes_seen: HashMap::new(),
            foreign_bound: HashSet::new(),
            known_groups: HashSet::new(),
            tasks: JoinSet::new(),
            pending_binds: std::collections::VecDeque::new(),
            bind_tx,
            bind_rx,
            snapshots: Default::default(),
            volume_catalog: None,
            volumes_in_flight: HashMap::new(),
            device_catalog: None,
            device_revision: 0,
            device_problems: Vec::new(),
            devices_in_flight: HashMap::new(),
            prebind_tx,
            prebind_rx,
            opts,
        }
    }

    pub(crate) fn is_leader(&self) -> bool {
        self.leader.is_leader()
    }

    pub(crate) fn ours(&self, p: &phalanx_store::PodRecord) -> bool {
        p.scheduler_name() == self.opts.scheduler_name
    }

    pub(crate) fn node_considered(&self, name: &str) -> bool {
        self.store
            .nodes()
            .get(&kube::runtime::reflector::ObjectRef::new(name))
            .is_some_and(|n| self.filter.matches(Some(n.labels())))
    }
}
