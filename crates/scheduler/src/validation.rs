//! Upstream `validatePodGroup` (`pkg/scheduler/schedule_one_podgroup.go`): the checks a group
//! or tree must pass before its cycle runs. A failure fails the whole entity with
//! SchedulerError; the message is the error's `Display`, upstream's text where upstream has one.

use std::sync::Arc;

use crate::hierarchy::{GroupTree, HierarchyError, key_ref};
use crate::model::{GroupInfo, GroupKind, PodInfo};
use crate::snapshot::Snapshot;

/// Why a group or tree may not be scheduled. Each field is a printable reference
/// (`namespace/name`, a priority, a policy name) used in the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// The tree breaks a hierarchy rule (see [`GroupTree::validate`]).
    #[error(transparent)]
    Hierarchy(#[from] HierarchyError),
    /// A pending pod of the entity is not in a leaf of the tree.
    #[error("pod {pod} does not belong to a pod group of composite pod group hierarchy {root:?}")]
    PodOutsideTree {
        /// The pod.
        pod: String,
        /// The root, `namespace/name`.
        root: String,
    },
    /// A CompositePodGroup reached the PodGroup cycle.
    #[error("{group} is a composite pod group: it is scheduled with its tree, not as a pod group")]
    CompositeAsPodGroup {
        /// The group.
        group: String,
    },
    /// A PodGroup with a parent reached the PodGroup cycle alone.
    #[error(
        "pod group {group} belongs to composite pod group {parent}: it is scheduled as part of its root's tree, not alone"
    )]
    ScheduledWithTree {
        /// The PodGroup, `namespace/name`.
        group: String,
        /// Its parent, `namespace/name`.
        parent: String,
    },
    /// Members name different schedulers (Kubernetes 1.38's message: the other member first).
    #[error(
        "all pods in a pod group hierarchy should have the same .spec.schedulerName set, got: {name:?} ({pod:?}) and {first_name:?} ({first_pod:?})"
    )]
    SchedulerNameMismatch {
        /// The first member's scheduler.
        first_name: String,
        /// The first member.
        first_pod: String,
        /// The other scheduler.
        name: String,
        /// The other member.
        pod: String,
    },
    /// A member's priority differs from the group's (Kubernetes 1.38's message: the pod first).
    #[error(
        "all pods in a pod group hierarchy should have the same priority as the root pod group's priority, got {priority} ({pod:?}) and {group_priority} ({group:?})"
    )]
    PriorityMismatch {
        /// The group's priority.
        group_priority: i32,
        /// The group, `namespace/name`.
        group: String,
        /// The member's priority.
        priority: i32,
        /// The member.
        pod: String,
    },
    /// Members differ in priority and the group sets none (upstream's message).
    #[error(
        "all pods in a pod group hierarchy should have the same priority, got {first_priority} ({first_pod:?}) and {priority} ({pod:?})"
    )]
    PodPriorityMismatch {
        /// The first member's priority.
        first_priority: i32,
        /// The first member.
        first_pod: String,
        /// The other priority.
        priority: i32,
        /// The other member.
        pod: String,
    },
    /// A member's preemption policy differs from the group's (Kubernetes 1.38's message; `group` is kept for the
    /// reader of the value, upstream does not name it).
    #[error(
        "all pods in a pod group hierarchy should have the same preemption policy, got {policy} ({pod:?}) and {group_policy}"
    )]
    PreemptionPolicyMismatch {
        /// The group's policy.
        group_policy: String,
        /// The group, `namespace/name`.
        group: String,
        /// The member's policy.
        policy: String,
        /// The member.
        pod: String,
    },
    /// Members differ in preemption policy and the group sets none (upstream's message).
    #[error(
        "all pods in a pod group hierarchy should have the same preemption policy, got {first_policy} ({first_pod:?}) and {policy} ({pod:?})"
    )]
    PodPreemptionPolicyMismatch {
        /// The first member's policy.
        first_policy: String,
        /// The first member.
        first_pod: String,
        /// The other policy.
        policy: String,
        /// The other member.
        pod: String,
    },
}

/// Hierarchy shape and member checks for a tree: every pending pod belongs to a leaf of the
/// tree; [`GroupTree::validate`]; then the member checks over pending and already scheduled pods
/// of every leaf against the root's priority and preemption policy.
pub fn validate_tree(
    tree: &GroupTree,
    pods: &[Arc<PodInfo>],
    snapshot: &Snapshot,
) -> Result<(), ValidationError> {
    let root_ref = tree.root().key.to_string();
    for p in pods {
        let in_tree = p.group_key().is_some_and(|g| tree.leaf(&g).is_some());
        if !in_tree {
            return Err(ValidationError::PodOutsideTree {
                pod: p.key.name.to_string(),
                root: root_ref,
            });
        }
    }
    tree.validate()?;
    let leaves = tree.leaves_under(&tree.root().key);
    let scheduled = scheduled_members(snapshot, &leaves);
    let all: Vec<&Arc<PodInfo>> = pods.iter().chain(scheduled.iter()).collect();
    validate_members(
        &all,
        tree.root().priority,
        tree.root().preemption_policy,
        &root_ref,
    )
}

/// Upstream `validatePodGroup` for a leaf group (queued and already scheduled members).
pub fn validate_group(
    group: &GroupInfo,
    pods: &[Arc<PodInfo>],
    snapshot: &Snapshot,
) -> Result<(), ValidationError> {
    if group.key.kind == GroupKind::CompositePodGroup {
        return Err(ValidationError::CompositeAsPodGroup {
            group: group.key.to_string(),
        });
    }
    if let Some(parent) = &group.parent {
        return Err(ValidationError::ScheduledWithTree {
            group: key_ref(&group.key),
            parent: key_ref(parent),
        });
    }
    let scheduled = scheduled_members(snapshot, std::slice::from_ref(&group.key));
    let all: Vec<&Arc<PodInfo>> = pods.iter().chain(scheduled.iter()).collect();
    let group_ref = group.key.to_string();
    validate_members(&all, group.priority, group.preemption_policy, &group_ref)
}

/// Scheduled (assigned + assumed) members of `groups` known to the snapshot.
pub(crate) fn scheduled_members(snapshot: &Snapshot, groups: &[crate::model::GroupKey]) -> Vec<Arc<PodInfo>> {
    groups
        .iter()
        .filter_map(|g| snapshot.group_state(g))
        .flat_map(|st| st.scheduled.iter().filter_map(|(k, _)| snapshot.pod(k).cloned()))
        .collect()
}

/// Upstream `validatePodGroup`'s member checks: one schedulerName, the root's priority and
/// preemption policy (or, when unset, the same among the pods). `all` is non-empty.
fn validate_members(
    all: &[&Arc<PodInfo>],
    priority: Option<i32>,
    preemption_policy: Option<crate::model::PreemptionPolicy>,
    group_ref: &str,
) -> Result<(), ValidationError> {
    let first = all[0];
    for p in all {
        if p.scheduler_name != first.scheduler_name {
            return Err(ValidationError::SchedulerNameMismatch {
                first_name: first.scheduler_name.to_string(),
                first_pod: first.key.name.to_string(),
                name: p.scheduler_name.to_string(),
                pod: p.key.name.to_string(),
            });
        }
    }
    for p in all {
        match priority {
            Some(gp) if p.priority != gp => {
                return Err(ValidationError::PriorityMismatch {
                    group_priority: gp,
                    group: group_ref.to_string(),
                    priority: p.priority,
                    pod: p.key.name.to_string(),
                });
            }
            None if p.priority != first.priority => {
                return Err(ValidationError::PodPriorityMismatch {
                    first_priority: first.priority,
                    first_pod: first.key.name.to_string(),
                    priority: p.priority,
                    pod: p.key.name.to_string(),
                });
            }
            _ => {}
        }
    }
    for p in all {
        match preemption_policy {
            // A group that restricts itself (`Never`) over pods whose class may preempt: the group preempts as a
            // whole and its own policy decides, so the pods' policy cannot widen it. Upstream's check would refuse
            // it, but pod admission never gives such pods `Never` under a preempting class, so the tenant could not
            // restrict a gang at all.
            Some(crate::model::PreemptionPolicy::Never) => {}
            Some(gp) if p.preemption_policy != gp => {
                return Err(ValidationError::PreemptionPolicyMismatch {
                    group_policy: gp.to_string(),
                    group: group_ref.to_string(),
                    policy: p.preemption_policy.to_string(),
                    pod: p.key.name.to_string(),
                });
            }
            None if p.preemption_policy != first.preemption_policy => {
                return Err(ValidationError::PodPreemptionPolicyMismatch {
                    first_policy: first.preemption_policy.to_string(),
                    first_pod: first.key.name.to_string(),
                    policy: p.preemption_policy.to_string(),
                    pod: p.key.name.to_string(),
                });
            }
            _ => {}
        }
    }
    Ok(())
}
