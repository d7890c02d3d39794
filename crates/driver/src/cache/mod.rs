//! The scheduler's model of the cluster (upstream `Cache`, `pkg/scheduler/backend/cache`): everything a cycle
//! reads, and the only thing that builds a cycle's snapshot.
//!
//! It holds our pods as the queue was last told of them ([`Cache::track`]), the Succeeded members that still
//! count toward their group's quorum, the considered nodes as ingest last saw them, the foreign pods seen bound on
//! them, the PodGroups and CompositePodGroups with the owners that sized them, the pods' models, the snapshot kept
//! between cycles ([`snapshot`]) and the storage and DRA catalogs ([`volumes`], [`devices`]).
//!
//! The cluster objects themselves live in the watch-fed [`Store`]; this cache only derives from them. Pods are
//! assumed on a node and forgotten again only through [`Cache::assume`] and [`Cache::forget`] (upstream
//! `AssumePod` / `ForgetPod`), and their binding finished only through a [`BindingFinisher`] (upstream
//! `FinishBinding`, called from the binding task). Everything changes through methods that take store events
//! (from [`crate::ingest`]) and cycle results (from [`crate::runtime`]).

mod devices;
mod fresh;
mod kept;
mod kept_devices;
mod snapshot;
mod volumes;

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use phalanx_api::{v1alpha3::CompositePodGroup, v1beta1::PodGroup};
use phalanx_scheduler::{
    ClusterEvent, CompositeGroupInfo, GroupInfo, GroupKey, GroupKind, NodeStatic, PodInfo, PodKey, Snapshot,
};
use phalanx_store::{PodRecord, Store};

use crate::{Metrics, NodeFilter, convert::ModelCache};
use kept::SnapshotCache;

/// The scheduler's model of the cluster; see the module docs.
pub(crate) struct Cache {
    store: Store,
    filter: NodeFilter,
    /// `spec.schedulerName` of our pods.
    scheduler_name: String,
    /// Also build every snapshot from scratch and compare ([`crate::SchedulerOptions::verify_snapshot`]).
    verify_snapshot: bool,
    metrics: Metrics,
    /// The pods' models, converted once per record version.
    models: ModelCache,
    /// Our pods fed to the queue, as last converted (needed to delete them from the queue).
    known: HashMap<PodKey, Arc<PodInfo>>,
    /// Our group members that Succeeded, as last converted: they count toward their group's quorum until their
    /// object is deleted ([`phalanx_scheduler::SchedulingQueue::complete_pod`]).
    completed: HashMap<PodKey, Arc<PodInfo>>,
    /// Each considered node as ingest last saw it, to tell a real change from a repeat ([`Cache::observe_node`]).
    nodes_seen: HashMap<String, Arc<NodeStatic>>,
    /// Bound pods of other schedulers seen on considered nodes (to report each arrival once).
    foreign_bound: HashSet<PodKey>,
    /// PodGroups and CompositePodGroups fed to the queue.
    known_groups: HashSet<GroupKey>,
    /// Every PodGroup as the core sees it (victim units need the groups of running pods).
    group_infos: Arc<HashMap<GroupKey, Arc<GroupInfo>>>,
    /// Every CompositePodGroup as the core sees it.
    composite_infos: Arc<HashMap<GroupKey, Arc<CompositeGroupInfo>>>,
    /// Owner uid -> the PodGroup sized from it (annotation `owner-generation`, see [`crate::resize`]).
    sized_groups: HashMap<String, GroupKey>,
    /// The reverse of `sized_groups`: PodGroup -> the owner uid it was sized from.
    sized_owner_of: HashMap<GroupKey, String>,
    /// Hold gangs until their ProvisioningRequest is provisioned ([`crate::SchedulerOptions::provisioning_requests`]).
    provisioning_requests: bool,
    /// The snapshot kept between cycles.
    snapshots: SnapshotCache,
    /// The storage facts of the next cycles; `None` after a storage event or a change of the claims in flight
    /// (rebuilt on demand, [`Cache::volume_catalog`]).
    volume_catalog: Option<Arc<phalanx_scheduler::volumes::VolumeCatalog>>,
    /// The DRA facts of the next cycles; `None` after a DRA event, the deletion of a pod with claims, or a change
    /// of the claims in flight (rebuilt on demand, [`Cache::device_catalog`]).
    device_catalog: Option<Arc<phalanx_scheduler::dra::DeviceCatalog>>,
    /// The classes' selectors and the slices' devices of the last rebuild, kept while no class or slice changes
    /// ([`kept_devices::KeptDevices`]).
    kept_devices: Option<kept_devices::KeptDevices>,
    /// Bumped at each rebuild of the device catalog.
    device_revision: u64,
    /// The DRA objects the last rebuild could not use, each warned about once.
    device_problems: Vec<String>,
}

/// What [`Cache::observe_group`] found for a group key.
pub(crate) enum GroupChange {
    PodGroup(Arc<GroupInfo>),
    Composite(Arc<CompositeGroupInfo>),
    /// The object is gone; the group was forgotten. `true` when the queue had it.
    Gone(bool),
}

/// Finishes the binding of an assumed pod (upstream `Cache.FinishBinding`): held by the binding tasks, which run
/// apart from the loop.
#[derive(Clone)]
pub(crate) struct BindingFinisher(Store);

impl BindingFinisher {
    /// The bind call succeeded: the assumption of `key` now waits for the watch to confirm it.
    pub(crate) fn finish(&self, key: &PodKey) {
        self.0.finish_binding(key);
    }
}

impl Cache {
    /// An empty cache over `store`, considering the nodes `filter` matches and scheduling the pods whose
    /// `spec.schedulerName` is `scheduler_name`.
    pub(crate) fn new(
        store: Store,
        filter: NodeFilter,
        scheduler_name: String,
        verify_snapshot: bool,
        metrics: Metrics,
    ) -> Self {
        Self {
            store,
            filter,
            scheduler_name,
            verify_snapshot,
            metrics,
            models: ModelCache::default(),
            known: HashMap::new(),
            completed: HashMap::new(),
            nodes_seen: HashMap::new(),
            foreign_bound: HashSet::new(),
            known_groups: HashSet::new(),
            group_infos: Arc::default(),
            composite_infos: Arc::default(),
            sized_groups: HashMap::new(),
            sized_owner_of: HashMap::new(),
            provisioning_requests: false,
            snapshots: SnapshotCache::default(),
            volume_catalog: None,
            device_catalog: None,
            kept_devices: None,
            device_revision: 0,
            device_problems: Vec::new(),
        }
    }

    /// Holds the gangs that wait for their ProvisioningRequest ([`crate::SchedulerOptions::provisioning_requests`]);
    /// read at each PodGroup change.
    pub(crate) fn hold_for_provisioning(&mut self, on: bool) {
        self.provisioning_requests = on;
    }

    /// The handle the binding tasks finish bindings with.
    pub(crate) fn binding_finisher(&self) -> BindingFinisher {
        BindingFinisher(self.store.clone())
    }

    /// Whether the pod is this scheduler's.
    pub(crate) fn ours(&self, p: &PodRecord) -> bool {
        p.scheduler_name() == self.scheduler_name
    }

    /// Whether node `name` exists and this instance considers it.
    pub(crate) fn node_considered(&self, name: &str) -> bool {
        self.store
            .nodes()
            .get(&kube::runtime::reflector::ObjectRef::new(name))
            .is_some_and(|n| self.filter.matches(Some(n.labels())))
    }

    // ---- pods ----

    /// The core's model of a pod in `group`.
    pub(crate) fn pod_info(&mut self, p: &PodRecord, group: Option<GroupKey>) -> Arc<PodInfo> {
        self.models.pod(p, group)
    }

    /// A watch event of pod `key` (`pod` as the store has it now, `None` when deleted): the kept snapshot
    /// refreshes it, and the device catalog is rebuilt when the pod has claims, or when a pod is deleted while
    /// devices are allocated (the holders of allocated claims follow the pods, `DeviceCatalog::held`).
    pub(crate) fn pod_event(&mut self, key: &PodKey, pod: Option<&PodRecord>, deleted: bool) {
        self.snapshots.pod_changed(key);
        let has_claims = pod.is_some_and(|p| !p.info.spec.resource_claims.is_empty());
        if has_claims
            || (deleted
                && self
                    .device_catalog
                    .as_ref()
                    .is_some_and(|c| !c.allocated.is_empty()))
        {
            self.device_catalog = None;
        }
    }

    /// The pod as the queue should see it: an assumed pod counts as assigned to its assumed node (upstream counts
    /// assumed pods as scheduled), so an older watch event of a pod being bound does not put it back in the queue
    /// or lower its group's quorum count.
    pub(crate) fn queue_info(&mut self, key: &PodKey, p: &PodRecord) -> Arc<PodInfo> {
        let info = self.models.pod(p, self.store.group_of_pod(p));
        match self.store.assumed_node(key) {
            Some(node) if info.node_name.is_none() => {
                let mut i = (*info).clone();
                i.node_name = Some(node.as_str().into());
                Arc::new(i)
            }
            _ => info,
        }
    }

    /// Records `info` as what the queue holds for our pod `key`; `true` when the queue had the pod already (an
    /// update, not an add).
    pub(crate) fn track(&mut self, key: PodKey, info: Arc<PodInfo>) -> bool {
        self.known.insert(key, info).is_some()
    }

    /// Our pod `p`, whose bind or PreBind failed, converted afresh and tracked again for the queue.
    pub(crate) fn track_again(&mut self, p: &PodRecord) -> Arc<PodInfo> {
        let info = self.models.pod(p, self.store.group_of_pod(p));
        self.known.insert(p.key().clone(), info.clone());
        info
    }

    /// Whether the queue holds our pod `key`.
    pub(crate) fn is_known(&self, key: &PodKey) -> bool {
        self.known.contains_key(key)
    }

    /// What the queue holds for our pod `key`, borrowed.
    pub(crate) fn known_ref(&self, key: &PodKey) -> Option<&Arc<PodInfo>> {
        self.known.get(key)
    }

    /// What the queue holds for our pod `key`.
    pub(crate) fn known_pod(&self, key: &PodKey) -> Option<Arc<PodInfo>> {
        self.known.get(key).cloned()
    }

    /// Our pod `key` left the queue (gone, terminal, or no longer ours): what the queue held for it, pending or
    /// Succeeded.
    pub(crate) fn untrack(&mut self, key: &PodKey) -> Option<Arc<PodInfo>> {
        self.known.remove(key).or_else(|| self.completed.remove(key))
    }

    /// Records a Succeeded member of one of our groups, once: the model the queue must count as completed, or
    /// `None` when it was recorded already.
    pub(crate) fn complete(&mut self, key: PodKey, p: &PodRecord) -> Option<Arc<PodInfo>> {
        if self.completed.contains_key(&key) {
            return None;
        }
        let info = self
            .known
            .remove(&key)
            .unwrap_or_else(|| self.models.pod(p, self.store.group_of_pod(p)));
        self.completed.insert(key, info.clone());
        Some(info)
    }

    /// Drops every tracked pod, pending or Succeeded, not in `seen`; returns what the queue held for them.
    pub(crate) fn untrack_all_except(&mut self, seen: &HashSet<PodKey>) -> Vec<Arc<PodInfo>> {
        self.known
            .extract_if(|k, _| !seen.contains(k))
            .chain(self.completed.extract_if(|k, _| !seen.contains(k)))
            .map(|(_, old)| old)
            .collect()
    }

    /// A bound pod of another scheduler seen on a considered node; `true` the first time.
    pub(crate) fn foreign_arrived(&mut self, key: PodKey) -> bool {
        self.foreign_bound.insert(key)
    }

    /// Pod `key` is no longer a bound foreign pod (gone, finished, or ours).
    pub(crate) fn foreign_gone(&mut self, key: &PodKey) {
        self.foreign_bound.remove(key);
    }

    /// Pod `key` is deleted: its model goes.
    pub(crate) fn pod_deleted(&mut self, key: &PodKey) {
        self.models.remove_pod(key);
    }

    /// Prunes every per-pod record to the pods in `existing` (a resync).
    pub(crate) fn prune_pods(&mut self, existing: &HashSet<PodKey>) {
        self.foreign_bound.retain(|k| existing.contains(k));
        self.models.retain(|k| existing.contains(k));
    }

    /// Assumes `pod` on `node` (upstream `AssumePod`): cycles count it there until the watch shows it bound or
    /// the assumption is forgotten.
    pub(crate) fn assume(&mut self, pod: Arc<PodRecord>, node: &str) {
        self.store.assume(pod, node);
    }

    /// Forgets the assumption of `key` (upstream `ForgetPod`, after a failed bind or PreBind); the kept snapshot
    /// refreshes the pod.
    pub(crate) fn forget(&mut self, key: &PodKey) {
        self.store.forget(key);
        self.snapshots.pod_changed(key);
    }

    // ---- nodes ----

    /// A watch event of node `name`: the kept snapshot refreshes it, and the queueing event it raises, if any
    /// (`NodeAdded` the first time, `NodeUpdated` when anything the scheduler reads changed, `None` for a repeat
    /// such as a heartbeat or a node this instance does not consider).
    pub(crate) fn observe_node(&mut self, name: &str) -> Option<ClusterEvent> {
        self.snapshots.node_changed(name);
        let node = self
            .store
            .nodes()
            .get(&kube::runtime::reflector::ObjectRef::new(name));
        match node {
            Some(n) if self.filter.matches(Some(n.labels())) => {
                // Compared with what ingest itself saw last, not with the conversion cache: a snapshot built
                // between the watch event and this call refreshes that cache, and the change would look like no
                // change, so the waiting groups would sleep until the periodic flush.
                match n.model.clone() {
                    Ok(new) => node_event(&mut self.nodes_seen, name, new),
                    Err(e) => {
                        tracing::warn!(node = name, error = %e, "node skipped");
                        None
                    }
                }
            }
            _ => {
                self.nodes_seen.remove(name);
                None
            }
        }
    }

    /// Restarts the record of considered nodes from the store (a resync: nodes listed at the start, or in a
    /// relist, raise no watch event of their own).
    pub(crate) fn reset_nodes_seen(&mut self) {
        self.nodes_seen.clear();
        for n in self.store.nodes().state() {
            if self.filter.matches(Some(n.labels()))
                && let Ok(info) = n.model.clone()
            {
                self.nodes_seen.insert(n.name.to_string(), info);
            }
        }
    }

    // ---- groups ----

    /// The group the store has under `g` now, recorded; or, when it is gone, forgotten.
    pub(crate) fn observe_group(&mut self, g: &GroupKey) -> GroupChange {
        let classes = self.store.priority_classes().state();
        match g.kind {
            GroupKind::PodGroup => match self.store.pod_group_at(g) {
                Some(pg) => GroupChange::PodGroup(self.record_pod_group(g.clone(), &pg, &classes)),
                None => GroupChange::Gone(self.forget_group(g)),
            },
            GroupKind::CompositePodGroup => match self.store.composite_pod_group_at(g) {
                Some(cpg) => GroupChange::Composite(self.record_composite(g.clone(), &cpg, &classes)),
                None => GroupChange::Gone(self.forget_group(g)),
            },
        }
    }

    /// Records PodGroup `pg` under `key`: the core's view of it, with the runtime's resize hold
    /// ([`crate::resize`]), remembering which owner sized it so that the owner's next change re-reads the group.
    pub(crate) fn record_pod_group(
        &mut self,
        key: GroupKey,
        pg: &PodGroup,
        classes: &[Arc<k8s_openapi::api::scheduling::v1::PriorityClass>],
    ) -> Arc<GroupInfo> {
        let mut info = crate::convert::group_info_in(key.api, pg, classes);
        // The controller reference does not change, so the map changes only for a new or a deleted group (and
        // a PodGroup object replaced under its name); no scan on the hot path of status updates.
        if let Some((owner, _)) = crate::resize::sized_owner(pg) {
            if self.sized_owner_of.get(&key) != Some(&owner.uid) {
                self.forget_sized(&key);
                self.sized_owner_of.insert(key.clone(), owner.uid.clone());
                self.sized_groups.insert(owner.uid, key.clone());
            }
            info.resizing = crate::resize::resizing(&self.store, pg).map(Arc::from);
        } else {
            self.forget_sized(&key);
        }
        if self.provisioning_requests && phalanx_api::provisioning::waits_for_capacity(pg) {
            info.provisioning = Some(Arc::from(provisioning_hold(pg)));
        }
        let info = Arc::new(info);
        Arc::make_mut(&mut self.group_infos).insert(key.clone(), info.clone());
        self.known_groups.insert(key);
        info
    }

    /// Records CompositePodGroup `cpg` under `key`.
    pub(crate) fn record_composite(
        &mut self,
        key: GroupKey,
        cpg: &CompositePodGroup,
        classes: &[Arc<k8s_openapi::api::scheduling::v1::PriorityClass>],
    ) -> Arc<CompositeGroupInfo> {
        let info = Arc::new(crate::convert::composite_info_in(key.api, cpg, classes));
        Arc::make_mut(&mut self.composite_infos).insert(key.clone(), info.clone());
        self.known_groups.insert(key);
        info
    }

    /// Drops `key` from the owner -> sized group maps.
    fn forget_sized(&mut self, key: &GroupKey) {
        if let Some(uid) = self.sized_owner_of.remove(key)
            && self.sized_groups.get(&uid) == Some(key)
        {
            self.sized_groups.remove(&uid);
        }
    }

    /// Forgets group `g`; `true` when the queue had it (the caller deletes it there).
    pub(crate) fn forget_group(&mut self, g: &GroupKey) -> bool {
        self.forget_sized(g);
        if self.group_infos.contains_key(g) {
            Arc::make_mut(&mut self.group_infos).remove(g);
        }
        if self.composite_infos.contains_key(g) {
            Arc::make_mut(&mut self.composite_infos).remove(g);
        }
        self.known_groups.remove(g)
    }

    /// The known groups not in `seen` (a resync forgets them).
    pub(crate) fn groups_except(&self, seen: &HashSet<GroupKey>) -> Vec<GroupKey> {
        self.known_groups.difference(seen).cloned().collect()
    }

    /// The PodGroup sized from the owner with `uid`, if any.
    pub(crate) fn sized_group_of(&self, owner_uid: &str) -> Option<GroupKey> {
        self.sized_groups.get(owner_uid).cloned()
    }

    /// The uid of group `g` as last recorded.
    pub(crate) fn group_uid(&self, g: &GroupKey) -> Option<Arc<str>> {
        match g.kind {
            GroupKind::PodGroup => self.group_infos.get(g).map(|i| i.uid.clone()),
            GroupKind::CompositePodGroup => self.composite_infos.get(g).map(|i| i.uid.clone()),
        }
    }

    /// Puts every recorded group into `snap` (preemption's victim units need the groups of running pods). The maps
    /// are shared with the snapshot, not copied (`Snapshot::set_group_infos`): copying 12,500 groups before every
    /// cycle took most of each cycle at 100,000 pending pods. A snapshot kept between cycles lets go of them
    /// ([`Cache::keep_snapshot`]), so the cache's next change does not copy the maps either.
    pub(crate) fn add_group_infos(&self, snap: &mut Snapshot) {
        snap.set_group_infos(self.group_infos.clone(), self.composite_infos.clone());
    }

    // ---- catalogs ----

    /// A storage object changed: the next cycle rebuilds the volume catalog.
    pub(crate) fn storage_changed(&mut self) {
        self.volume_catalog = None;
    }

    /// A DRA object changed: the next cycle rebuilds the device catalog.
    pub(crate) fn devices_changed(&mut self) {
        self.device_catalog = None;
    }

    /// PreBind started or ended (the claims in flight changed): both catalogs are rebuilt with them.
    pub(crate) fn claims_in_flight_changed(&mut self) {
        self.volume_catalog = None;
        self.device_catalog = None;
    }

    /// Sizes for the `phalanx_scheduler_tracked` gauge: (our pods, considered nodes, groups).
    pub(crate) fn counts(&self) -> (usize, usize, usize) {
        (self.known.len(), self.nodes_seen.len(), self.known_groups.len())
    }
}

/// The queueing event for a node as ingest sees it now: `NodeAdded` the first time, `NodeUpdated` when anything the
/// scheduler reads changed (labels, taints, allocatable, unschedulable), `None` for a repeat such as a heartbeat.
/// `seen` is ingest's own record, never the conversion cache that snapshots refresh.
pub(crate) fn node_event(
    seen: &mut HashMap<String, Arc<NodeStatic>>,
    name: &str,
    new: Arc<NodeStatic>,
) -> Option<ClusterEvent> {
    let old = seen.insert(name.to_owned(), new.clone());
    match old {
        None => Some(ClusterEvent::NodeAdded),
        Some(o) if *o != *new => Some(ClusterEvent::NodeUpdated),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests;

/// The group message of a gang held for its ProvisioningRequest: the `CapacityProvisioned` condition's message
/// (written by the controllers: the request's name and Cluster Autoscaler's message), or, before there is one,
/// that the request is being made.
fn provisioning_hold(pg: &PodGroup) -> String {
    pg.status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == phalanx_api::conditions::CAPACITY_PROVISIONED)
        })
        .filter(|c| !c.message.is_empty())
        .map_or_else(
            || "waiting for the gang's ProvisioningRequest to be created and Provisioned".to_string(),
            |c| format!("waiting for capacity: {}", c.message),
        )
}
