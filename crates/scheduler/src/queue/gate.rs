//! PreEnqueue gates (upstream `PreEnqueue` of SchedulingGates and GangScheduling,
//! `pkg/scheduler/framework/plugins/gangscheduling`): why an entity is held before the queue,
//! returned as data so the runtime can tell the user.

use std::collections::HashMap;
use std::time::Instant;

use super::{Entry, Loc, SchedulingQueue};
use crate::model::{EntityKey, GroupKey, GroupKind, GroupPolicy};
use crate::workload_forest::MAX_CHAIN;

/// Why an entity is held before the queue (PreEnqueue rejection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GateReason {
    /// The pod's PodGroup object has not been seen.
    WaitingForPodGroup,
    /// Fewer than `minCount` member pods are known.
    WaitingForQuorum,
    /// A pod still has `spec.schedulingGates`.
    SchedulingGated,
    /// A pod's resource claim from a template has not been created yet (upstream DynamicResources `PreEnqueue`);
    /// kube-controller-manager's resourceclaim controller creates it and names it in the pod's status.
    WaitingForResourceClaim,
    /// The gang opted in to a Cluster Autoscaler ProvisioningRequest and waits for it to be provisioned
    /// ([`crate::GroupInfo::provisioning`]); checked after the quorum.
    WaitingForProvisioning,
    /// The group's parent chain is a cycle or too long: the hierarchy is invalid, a SchedulerError (upstream's
    /// `validatePodGroup`), not a wait.
    InvalidHierarchy,
}

/// A PreEnqueue gate with a user-facing message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Gate {
    /// Reason.
    pub reason: GateReason,
    /// The group's message, e.g. `2 of 3 pods present (minCount 3)`: it carries the counts, and is written to the
    /// one group object.
    pub message: String,
    /// The member pods' message. It stays the same while the counts change (upstream's Permit message, `waiting
    /// for minCount pods from a gang to appear in scheduling queue`), so a gang of N arriving pod by pod costs N
    /// pod writes, not N²/2.
    pub pod_message: String,
}

impl Gate {
    /// A gate whose pods say the same as its group.
    fn same(reason: GateReason, message: String) -> Self {
        Gate {
            reason,
            pod_message: message.clone(),
            message,
        }
    }
}

impl SchedulingQueue {
    /// PreEnqueue for an entity (upstream SchedulingGates + GangScheduling).
    pub(super) fn gate_of(&self, e: &Entry, key: &EntityKey) -> Option<Gate> {
        for (p, _) in e.pods.values() {
            if !p.scheduling_gates.is_empty() {
                return Some(Gate::same(
                    GateReason::SchedulingGated,
                    format!("waiting for scheduling gates: [{}]", p.scheduling_gates.join(" ")),
                ));
            }
        }
        for (p, _) in e.pods.values() {
            // The queue does not know the templates: the runtime names a missing one (`claim_not_created`).
            if let Some(message) = crate::dra::scheduling::claim_not_created(p, |_| true) {
                return Some(Gate::same(GateReason::WaitingForResourceClaim, message));
            }
        }
        let EntityKey::Group(g) = key else { return None };
        if g.kind == GroupKind::CompositePodGroup {
            return self.tree_gate(e, g);
        }
        let Some(group) = &e.group else {
            return Some(Gate::same(
                GateReason::WaitingForPodGroup,
                format!(
                    "waiting for pod group {:?} to appear in scheduling queue",
                    &*g.name
                ),
            ));
        };
        if group.parent.is_some() && self.forest.root_of(g) == *key {
            return Some(Gate::same(
                GateReason::InvalidHierarchy,
                format!(
                    "composite pod group hierarchy of pod group {:?} is invalid: its parent chain is a cycle or deeper than {MAX_CHAIN}",
                    &*g.name
                ),
            ));
        }
        if let Some(m) = &group.resizing {
            return Some(Gate {
                reason: GateReason::WaitingForQuorum,
                message: m.to_string(),
                pod_message: "waiting for the gang's minCount to follow its owner's new size".to_string(),
            });
        }
        let present = e.pods.len() + e.assigned.len();
        if let GroupPolicy::Gang { min_count } = group.policy
            && present < min_count as usize
        {
            return Some(Gate {
                reason: GateReason::WaitingForQuorum,
                message: format!("{present} of {min_count} pods present (minCount {min_count})"),
                pod_message: "waiting for minCount pods from a gang to appear in scheduling queue"
                    .to_string(),
            });
        }
        if let Some(m) = &group.provisioning {
            return Some(Gate {
                reason: GateReason::WaitingForProvisioning,
                message: m.to_string(),
                pod_message: "waiting for the gang's ProvisioningRequest to be Provisioned".to_string(),
            });
        }
        None
    }

    /// GangScheduling PreEnqueue for a root CompositePodGroup entity: the root object must be
    /// known, and the tree must meet its quorum (upstream `isCPGTreeReady`: children that are
    /// ready, recursively, >= minGroupCount (1 if basic); a PodGroup child is ready with >=
    /// minCount pending + assigned pods, 1 for basic).
    pub(super) fn tree_gate(&self, e: &Entry, root: &GroupKey) -> Option<Gate> {
        let Some((cpg, _)) = self.forest.composites.get(root) else {
            return Some(Gate::same(
                GateReason::WaitingForPodGroup,
                format!(
                    "waiting for composite pod group {:?} to appear in scheduling queue",
                    &*root.name
                ),
            ));
        };
        let mut present: HashMap<GroupKey, usize> = HashMap::new();
        for (p, _) in e.pods.values() {
            if let Some(g) = p.group_key() {
                *present.entry(g).or_default() += 1;
            }
        }
        for g in e.assigned.values().flatten() {
            *present.entry(g.clone()).or_default() += 1;
        }
        let kids: Vec<&GroupKey> = self
            .forest
            .children
            .get(root)
            .map(|m| m.values().collect())
            .unwrap_or_default();
        let ready = kids
            .iter()
            .filter(|k| self.forest.child_ready(k, &present, 0))
            .count();
        let min = cpg.policy.min_group_count() as usize;
        if ready < min {
            return Some(Gate {
                reason: GateReason::WaitingForQuorum,
                message: format!(
                    "composite pod group {:?} tree: {ready} of {} child groups ready (minGroupCount {min})",
                    &*root.name,
                    kids.len()
                ),
                pod_message: format!(
                    "waiting for composite pod group {:?} tree to meet quorum",
                    &*root.name
                ),
            });
        }
        None
    }

    /// Re-runs PreEnqueue and moves the entity between gated and queued.
    pub(super) fn reevaluate(&mut self, key: &EntityKey, now: Instant) {
        let Some(e) = self.entries.get(key) else { return };
        if matches!(e.loc, Loc::InFlight { .. }) {
            return;
        }
        let gate = self.gate_of(e, key);
        let was_gated = match &e.loc {
            Loc::Gated(g) => Some(g.clone()),
            _ => None,
        };
        match gate {
            Some(g) => {
                if e.pods.is_empty() && e.is_group {
                    // Nothing pending: not an entity to show (assigned-only bookkeeping).
                    if was_gated.is_some() {
                        self.detach(key);
                        self.gate_changes.push((key.clone(), None));
                    }
                    return;
                }
                if was_gated.as_ref() != Some(&g) {
                    self.detach(key);
                    let e = self.entries.get_mut(key).expect("present");
                    e.loc = Loc::Gated(g.clone());
                    self.gated += 1;
                    self.gate_changes.push((key.clone(), Some(g)));
                }
            }
            None => {
                if was_gated.is_some() {
                    self.detach(key);
                    self.gate_changes.push((key.clone(), None));
                    self.place(key, now);
                } else if e.loc == Loc::Idle {
                    if e.pods.is_empty() {
                        return;
                    }
                    self.place(key, now);
                } else if matches!(e.loc, Loc::Active(_)) {
                    // Priority may have changed (group update): re-key.
                    self.detach(key);
                    self.place(key, now);
                }
            }
        }
    }

    /// If an entity in the pool is now gated, move it to gated.
    pub(super) fn regate(&mut self, key: &EntityKey, now: Instant) {
        let Some(e) = self.entries.get(key) else { return };
        if let Some(g) = self.gate_of(e, key) {
            self.detach(key);
            let e = self.entries.get_mut(key).expect("present");
            e.loc = Loc::Gated(g.clone());
            self.gated += 1;
            self.gate_changes.push((key.clone(), Some(g)));
        }
        let _ = now;
    }
}
