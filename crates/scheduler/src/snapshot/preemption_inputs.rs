//! The preemption inputs the runtime sets on a snapshot (see
//! [`PreemptionState`](crate::preemption::PreemptionState)): group objects, nominated pods, pods
//! terminating by preemption, preemptions in flight, PodDisruptionBudgets and pod start times.
//! The state and its setters live in `crate::preemption::state`; these methods are the snapshot's
//! public face for them, here so that the preemption code does not import the snapshot it keeps
//! them on.

use std::collections::HashMap;
use std::sync::Arc;

use super::Snapshot;
use crate::model::{CompositeGroupInfo, EntityKey, GroupInfo, GroupKey, PodInfo, PodKey};
use crate::preemption::{Pdb, PreemptionState};

/// Preemption inputs (see [`PreemptionState`]). Every setter is idempotent; unknown keys are
/// ignored by the removers.
impl Snapshot {
    /// Records (or replaces) a PodGroup object, so that its running pods get the group's
    /// priority and `disruptionMode` as victims (upstream reads the PodGroup lister).
    pub fn upsert_group_info(&mut self, group: Arc<GroupInfo>) {
        self.preemption.upsert_group(group);
    }

    /// Forgets a PodGroup object (deleted).
    pub fn remove_group_info(&mut self, key: &GroupKey) {
        self.preemption.remove_group(key);
    }

    /// Records (or replaces) a CompositePodGroup object (its `disruptionMode: all` makes the
    /// whole subtree one victim unit).
    pub fn upsert_composite_info(&mut self, group: Arc<CompositeGroupInfo>) {
        self.preemption.upsert_composite(group);
    }

    /// Forgets a CompositePodGroup object.
    pub fn remove_composite_info(&mut self, key: &GroupKey) {
        self.preemption.remove_composite(key);
    }

    /// Replaces every PodGroup and CompositePodGroup object at once (what [`Snapshot::upsert_group_info`] and
    /// [`Snapshot::upsert_composite_info`] do one by one), keyed by group. The maps are shared, not copied: the
    /// caller keeps its `Arc`s and may go on changing its own copy (`Arc::make_mut` copies only while the snapshot
    /// still holds them), and a later upsert or remove on the snapshot copies the map first. So a runtime that
    /// records every group (upstream's PodGroup lister) hands them to each cycle for two reference counts, whatever
    /// the number of groups.
    pub fn set_group_infos(
        &mut self,
        groups: Arc<HashMap<GroupKey, Arc<GroupInfo>>>,
        composites: Arc<HashMap<GroupKey, Arc<CompositeGroupInfo>>>,
    ) {
        self.preemption.set_groups(groups, composites);
    }

    /// Declares that pending `pod` is nominated to `node` (`status.nominatedNodeName`, set by a
    /// previous preemption). Its requests are then reserved on that node against pods of equal
    /// or lower priority (upstream `RunFilterPluginsWithNominatedPods`). Replaces an earlier
    /// nomination of the same pod. Call [`Snapshot::clear_nominated`] once the pod is bound,
    /// deleted or its nomination is cleared.
    pub fn set_nominated(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.preemption.set_nominated(pod, node);
    }

    /// Removes a pod's nomination, if any.
    pub fn clear_nominated(&mut self, pod: &PodKey) {
        self.preemption.clear_nominated(pod);
    }

    /// The node a pending pod is nominated to, if any.
    pub fn nominated_node(&self, pod: &PodKey) -> Option<&Arc<str>> {
        self.preemption.nomination(pod).map(|n| &n.node)
    }

    /// Marks (or unmarks) a running pod as terminating because the scheduler preempted it
    /// (`deletionTimestamp` set and condition `DisruptionTarget=True` with reason
    /// `PreemptionByScheduler`; upstream `PodTerminatingByPreemption`). Preemptors nominated to
    /// its node are not eligible to preempt again while it terminates.
    pub fn set_terminating_by_preemption(&mut self, pod: &PodKey, terminating: bool) {
        self.preemption.set_terminating(pod, terminating);
    }

    /// Marks (or unmarks) a preemption for this entity (a root group, or a standalone pod) as
    /// in flight: its victims are still being evicted. While marked, preemption returns Success
    /// with the entity's current nominations and evicts nothing new (k/k#140641; upstream keys
    /// this by the root's UID in the async preemption executor).
    pub fn set_preemption_in_flight(&mut self, entity: &EntityKey, in_flight: bool) {
        self.preemption.set_in_flight(entity, in_flight);
    }

    /// Holds back the preemption of root group `root` for this cycle (`spec.preemptionDelaySeconds`, Phalanx): a
    /// preemption that would succeed evicts nothing, and its failure message says why with `why` (e.g.
    /// `preemption is delayed until 2026-12-07T00:01:00Z (preemptionDelaySeconds 60), so that a cluster
    /// autoscaler can add nodes first`). The runtime decides, with its clock, which groups are still in their delay;
    /// forgotten by [`Snapshot::clear_preemption_inputs`].
    pub fn delay_preemption(&mut self, root: GroupKey, why: impl Into<Arc<str>>) {
        self.preemption.delay(root, why.into());
    }

    /// Replaces the PodDisruptionBudgets (see [`Pdb`]).
    pub fn set_pdbs(&mut self, pdbs: Vec<Pdb>) {
        self.preemption.set_pdbs(pdbs);
    }

    /// Records a running pod's `status.startTime` in Unix milliseconds (`None` forgets it).
    /// Among victims of equal priority, older pods are more important (upstream
    /// `GetPodStartTime`); pods without a start time compare equal.
    pub fn set_pod_start_time(&mut self, pod: &PodKey, start_unix_millis: Option<i64>) {
        self.preemption.set_start_time(pod, start_unix_millis);
    }

    /// The preemption inputs (read-only).
    pub fn preemption_state(&self) -> &PreemptionState {
        &self.preemption
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GroupPolicy;

    fn group(name: &str) -> Arc<GroupInfo> {
        Arc::new(GroupInfo::new("ns", name, GroupPolicy::Gang { min_count: 2 }))
    }

    /// The runtime's map is shared with the snapshot, not copied; a change on either side leaves the other as it
    /// was (copy on write).
    #[test]
    fn group_infos_are_shared_and_copied_only_on_change() {
        let (a, b) = (group("a"), group("b"));
        let mut theirs = Arc::new(HashMap::from([(a.key.clone(), a.clone())]));
        let composites = Arc::new(HashMap::new());
        let mut snap = Snapshot::new(Vec::new());
        snap.set_group_infos(theirs.clone(), composites.clone());
        assert_eq!(Arc::strong_count(&theirs), 2, "the snapshot holds the same map");
        assert_eq!(snap.preemption.group(&a.key), Some(&a));
        // A change on the snapshot's side copies its map first: the caller's stays as it was.
        snap.upsert_group_info(b.clone());
        assert_eq!(Arc::strong_count(&theirs), 1);
        assert!(theirs.get(&b.key).is_none());
        assert_eq!(snap.preemption.group(&b.key), Some(&b));
        // A change on the caller's side after handing it over is not seen by a snapshot holding the old map.
        snap.set_group_infos(theirs.clone(), composites);
        Arc::make_mut(&mut theirs).remove(&a.key);
        assert_eq!(snap.preemption.group(&a.key), Some(&a));
        assert!(snap.preemption.group(&b.key).is_none());
        // Removing an unknown group neither copies nor fails.
        snap.remove_group_info(&b.key);
        assert_eq!(snap.preemption.group(&a.key), Some(&a));
    }
}
