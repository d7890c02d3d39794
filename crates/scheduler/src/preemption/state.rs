//! What the runtime tells the core about preemption, kept on the
//! [`Snapshot`](crate::snapshot::Snapshot): the group
//! objects of running pods (their priority and `disruptionMode` decide victim units), nominated
//! pods (their requests are reserved on the nominated node), pods terminating because the
//! scheduler preempted them, roots whose preemption is still in flight, PodDisruptionBudgets and
//! pod start times.
//!
//! Upstream keeps these in the scheduler cache, the nominator (`pkg/scheduler/backend/queue`
//! `nominator.go`), the PDB lister and the async-preemption executor
//! (`pkg/scheduler/framework/preemption/executor.go`). Here they are plain data the driver keeps
//! up to date from watch events, like the nodes and pods of the snapshot. None of it changes
//! during a cycle, and assume/revert never touches it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::model::{CompositeGroupInfo, EntityKey, GroupInfo, GroupKey, PodInfo, PodKey};
use crate::preemption::pdb::Pdb;

/// A pod waiting for the node it was nominated to (`status.nominatedNodeName`).
#[derive(Debug, Clone, PartialEq)]
pub struct NominatedPod {
    /// The pending pod (its priority and requests count).
    pub pod: Arc<PodInfo>,
    /// Name of the nominated node.
    pub node: Arc<str>,
}

/// Preemption inputs; see the module documentation. Set through the `Snapshot` methods of
/// `crate::snapshot::preemption_inputs`; the fields are private so that the per-node index stays
/// consistent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PreemptionState {
    /// Shared with the runtime's record of the groups and copied only when changed here: a cycle sets the whole
    /// map ([`PreemptionState::set_groups`]) at the cost of a reference count, where copying 12,500 groups into
    /// the snapshot before every cycle took most of a cycle at 100,000 pending pods (docs/benchmarks.md).
    groups: Arc<HashMap<GroupKey, Arc<GroupInfo>>>,
    /// See `groups`.
    composites: Arc<HashMap<GroupKey, Arc<CompositeGroupInfo>>>,
    nominated: HashMap<PodKey, NominatedPod>,
    /// Node name → nominated pods on it (in nomination order).
    by_node: HashMap<Arc<str>, Vec<PodKey>>,
    terminating: HashSet<PodKey>,
    in_flight: HashSet<EntityKey>,
    pdbs: Vec<Pdb>,
    start_times: HashMap<PodKey, i64>,
    /// Root groups whose preemption waits (`preemptionDelaySeconds`, Phalanx), with the reader's words for the wait.
    delayed: HashMap<GroupKey, Arc<str>>,
}

impl PreemptionState {
    /// The same start times, every other input forgotten (see `Snapshot::clear_preemption_inputs`).
    pub(crate) fn keep_start_times(&mut self) {
        let start_times = std::mem::take(&mut self.start_times);
        *self = PreemptionState {
            start_times,
            ..Default::default()
        };
    }

    pub(crate) fn group(&self, key: &GroupKey) -> Option<&Arc<GroupInfo>> {
        self.groups.get(key)
    }

    pub(crate) fn composite(&self, key: &GroupKey) -> Option<&Arc<CompositeGroupInfo>> {
        self.composites.get(key)
    }

    pub(crate) fn groups(&self) -> impl Iterator<Item = &Arc<GroupInfo>> {
        self.groups.values()
    }

    pub(crate) fn has_groups(&self) -> bool {
        !self.groups.is_empty()
    }

    pub(crate) fn has_nominated(&self) -> bool {
        !self.nominated.is_empty()
    }

    pub(crate) fn nominated_on(&self, node: &str) -> impl Iterator<Item = &NominatedPod> {
        self.by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|k| self.nominated.get(k))
    }

    pub(crate) fn nomination(&self, pod: &PodKey) -> Option<&NominatedPod> {
        self.nominated.get(pod)
    }

    /// Whether `pod` was declared terminating by preemption
    /// ([`Snapshot::set_terminating_by_preemption`](crate::snapshot::Snapshot::set_terminating_by_preemption)).
    pub fn is_terminating(&self, pod: &PodKey) -> bool {
        self.terminating.contains(pod)
    }

    pub(crate) fn is_in_flight(&self, entity: &EntityKey) -> bool {
        self.in_flight.contains(entity)
    }

    pub(crate) fn pdbs(&self) -> &[Pdb] {
        &self.pdbs
    }

    pub(crate) fn start_time(&self, pod: &PodKey) -> Option<i64> {
        self.start_times.get(pod).copied()
    }
}

/// The setters behind the `Snapshot` methods of the same inputs
/// (`crate::snapshot::preemption_inputs`, documented there). Every setter is idempotent; unknown keys
/// are ignored by the removers. Here, with the private fields, so that the per-node index of
/// nominations stays consistent; the snapshot calls them without this module importing it.
impl PreemptionState {
    pub(crate) fn upsert_group(&mut self, group: Arc<GroupInfo>) {
        Arc::make_mut(&mut self.groups).insert(group.key.clone(), group);
    }

    pub(crate) fn remove_group(&mut self, key: &GroupKey) {
        if self.groups.contains_key(key) {
            Arc::make_mut(&mut self.groups).remove(key);
        }
    }

    pub(crate) fn upsert_composite(&mut self, group: Arc<CompositeGroupInfo>) {
        Arc::make_mut(&mut self.composites).insert(group.key.clone(), group);
    }

    pub(crate) fn remove_composite(&mut self, key: &GroupKey) {
        if self.composites.contains_key(key) {
            Arc::make_mut(&mut self.composites).remove(key);
        }
    }

    /// Replaces every group object at once, sharing the maps (see `groups`).
    pub(crate) fn set_groups(
        &mut self,
        groups: Arc<HashMap<GroupKey, Arc<GroupInfo>>>,
        composites: Arc<HashMap<GroupKey, Arc<CompositeGroupInfo>>>,
    ) {
        self.groups = groups;
        self.composites = composites;
    }

    pub(crate) fn set_nominated(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.clear_nominated(&pod.key);
        let node: Arc<str> = node.into();
        let key = pod.key.clone();
        self.by_node.entry(node.clone()).or_default().push(key.clone());
        self.nominated.insert(key, NominatedPod { pod, node });
    }

    pub(crate) fn clear_nominated(&mut self, pod: &PodKey) {
        if let Some(old) = self.nominated.remove(pod)
            && let Some(list) = self.by_node.get_mut(&old.node)
        {
            list.retain(|k| k != pod);
            if list.is_empty() {
                self.by_node.remove(&old.node);
            }
        }
    }

    pub(crate) fn set_terminating(&mut self, pod: &PodKey, terminating: bool) {
        if terminating {
            self.terminating.insert(pod.clone());
        } else {
            self.terminating.remove(pod);
        }
    }

    pub(crate) fn set_in_flight(&mut self, entity: &EntityKey, in_flight: bool) {
        if in_flight {
            self.in_flight.insert(entity.clone());
        } else {
            self.in_flight.remove(entity);
        }
    }

    pub(crate) fn set_pdbs(&mut self, pdbs: Vec<Pdb>) {
        self.pdbs = pdbs;
    }

    pub(crate) fn delay(&mut self, root: GroupKey, why: Arc<str>) {
        self.delayed.insert(root, why);
    }

    pub(crate) fn delayed(&self, root: &GroupKey) -> Option<&Arc<str>> {
        self.delayed.get(root)
    }

    pub(crate) fn set_start_time(&mut self, pod: &PodKey, start_unix_millis: Option<i64>) {
        match start_unix_millis {
            Some(t) => {
                self.start_times.insert(pod.clone(), t);
            }
            None => {
                self.start_times.remove(pod);
            }
        }
    }
}
