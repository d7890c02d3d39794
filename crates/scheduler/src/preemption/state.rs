//! What the runtime tells the core about preemption, kept on the [`Snapshot`]: the group
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
use crate::snapshot::Snapshot;

/// A pod waiting for the node it was nominated to (`status.nominatedNodeName`).
#[derive(Debug, Clone, PartialEq)]
pub struct NominatedPod {
    /// The pending pod (its priority and requests count).
    pub pod: Arc<PodInfo>,
    /// Name of the nominated node.
    pub node: Arc<str>,
}

/// Preemption inputs; see the module documentation. Reached through the `Snapshot` methods
/// below; the fields are private so that the per-node index stays consistent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PreemptionState {
    groups: HashMap<GroupKey, Arc<GroupInfo>>,
    composites: HashMap<GroupKey, Arc<CompositeGroupInfo>>,
    nominated: HashMap<PodKey, NominatedPod>,
    /// Node name → nominated pods on it (in nomination order).
    by_node: HashMap<Arc<str>, Vec<PodKey>>,
    terminating: HashSet<PodKey>,
    in_flight: HashSet<EntityKey>,
    pdbs: Vec<Pdb>,
    start_times: HashMap<PodKey, i64>,
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
    /// ([`Snapshot::set_terminating_by_preemption`]).
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

/// Preemption inputs (see [`PreemptionState`]). Every setter is idempotent; unknown keys are
/// ignored by the removers.
impl Snapshot {
    /// Records (or replaces) a PodGroup object, so that its running pods get the group's
    /// priority and `disruptionMode` as victims (upstream reads the PodGroup lister).
    pub fn upsert_group_info(&mut self, group: Arc<GroupInfo>) {
        self.preemption.groups.insert(group.key.clone(), group);
    }

    /// Forgets a PodGroup object (deleted).
    pub fn remove_group_info(&mut self, key: &GroupKey) {
        self.preemption.groups.remove(key);
    }

    /// Records (or replaces) a CompositePodGroup object (its `disruptionMode: all` makes the
    /// whole subtree one victim unit).
    pub fn upsert_composite_info(&mut self, group: Arc<CompositeGroupInfo>) {
        self.preemption.composites.insert(group.key.clone(), group);
    }

    /// Forgets a CompositePodGroup object.
    pub fn remove_composite_info(&mut self, key: &GroupKey) {
        self.preemption.composites.remove(key);
    }

    /// Declares that pending `pod` is nominated to `node` (`status.nominatedNodeName`, set by a
    /// previous preemption). Its requests are then reserved on that node against pods of equal
    /// or lower priority (upstream `RunFilterPluginsWithNominatedPods`). Replaces an earlier
    /// nomination of the same pod. Call [`Snapshot::clear_nominated`] once the pod is bound,
    /// deleted or its nomination is cleared.
    pub fn set_nominated(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.clear_nominated(&pod.key);
        let node: Arc<str> = node.into();
        let key = pod.key.clone();
        self.preemption
            .by_node
            .entry(node.clone())
            .or_default()
            .push(key.clone());
        self.preemption.nominated.insert(key, NominatedPod { pod, node });
    }

    /// Removes a pod's nomination, if any.
    pub fn clear_nominated(&mut self, pod: &PodKey) {
        let st = &mut self.preemption;
        if let Some(old) = st.nominated.remove(pod)
            && let Some(list) = st.by_node.get_mut(&old.node)
        {
            list.retain(|k| k != pod);
            if list.is_empty() {
                st.by_node.remove(&old.node);
            }
        }
    }

    /// The node a pending pod is nominated to, if any.
    pub fn nominated_node(&self, pod: &PodKey) -> Option<&Arc<str>> {
        self.preemption.nominated.get(pod).map(|n| &n.node)
    }

    /// Marks (or unmarks) a running pod as terminating because the scheduler preempted it
    /// (`deletionTimestamp` set and condition `DisruptionTarget=True` with reason
    /// `PreemptionByScheduler`; upstream `PodTerminatingByPreemption`). Preemptors nominated to
    /// its node are not eligible to preempt again while it terminates.
    pub fn set_terminating_by_preemption(&mut self, pod: &PodKey, terminating: bool) {
        if terminating {
            self.preemption.terminating.insert(pod.clone());
        } else {
            self.preemption.terminating.remove(pod);
        }
    }

    /// Marks (or unmarks) a preemption for this entity (a root group, or a standalone pod) as
    /// in flight: its victims are still being evicted. While marked, preemption returns Success
    /// with the entity's current nominations and evicts nothing new (k/k#140641; upstream keys
    /// this by the root's UID in the async preemption executor).
    pub fn set_preemption_in_flight(&mut self, entity: &EntityKey, in_flight: bool) {
        if in_flight {
            self.preemption.in_flight.insert(entity.clone());
        } else {
            self.preemption.in_flight.remove(entity);
        }
    }

    /// Replaces the PodDisruptionBudgets (see [`Pdb`]).
    pub fn set_pdbs(&mut self, pdbs: Vec<Pdb>) {
        self.preemption.pdbs = pdbs;
    }

    /// Records a running pod's `status.startTime` in Unix milliseconds (`None` forgets it).
    /// Among victims of equal priority, older pods are more important (upstream
    /// `GetPodStartTime`); pods without a start time compare equal.
    pub fn set_pod_start_time(&mut self, pod: &PodKey, start_unix_millis: Option<i64>) {
        match start_unix_millis {
            Some(t) => {
                self.preemption.start_times.insert(pod.clone(), t);
            }
            None => {
                self.preemption.start_times.remove(pod);
            }
        }
    }

    /// The preemption inputs (read-only).
    pub fn preemption_state(&self) -> &PreemptionState {
        &self.preemption
    }
}
