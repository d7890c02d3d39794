//! PodGroups and CompositePodGroups as the core sees them (upstream `fwk.PodGroupInfo`).
//!
//! The runtime builds these from the CRD objects, so the core does not depend on the CRD types.

use std::fmt;
use std::sync::Arc;

use super::GroupKey;

/// `preemptionPolicy` of a pod or group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PreemptionPolicy {
    /// Default.
    #[default]
    PreemptLowerPriority,
    /// Never preempts.
    Never,
}

impl fmt::Display for PreemptionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PreemptionPolicy::PreemptLowerPriority => "PreemptLowerPriority",
            PreemptionPolicy::Never => "Never",
        })
    }
}

/// `schedulingPolicy` of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupPolicy {
    /// `basic: {}`: minCount is treated as 1.
    Basic,
    /// `gang: {minCount}`.
    Gang {
        /// minCount (>= 1).
        min_count: u32,
    },
}

impl GroupPolicy {
    /// Effective minimum (1 for basic).
    pub fn min_count(&self) -> u32 {
        match self {
            GroupPolicy::Basic => 1,
            GroupPolicy::Gang { min_count } => (*min_count).max(1),
        }
    }
}

/// `disruptionMode` of a group (used by preemption, later).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DisruptionMode {
    /// `single` (default).
    #[default]
    Single,
    /// `all`.
    All,
}

/// A PodGroup (or, later, CompositePodGroup) as the scheduler sees it; built by the runtime
/// from the CRD object (upstream `fwk.PodGroupInfo`).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupInfo {
    /// Identity.
    pub key: GroupKey,
    /// metadata.uid.
    pub uid: Arc<str>,
    /// metadata.generation (copied into the condition's observedGeneration by the runtime).
    pub generation: i64,
    /// Basic or gang.
    pub policy: GroupPolicy,
    /// `schedulingConstraints.topology[0].key`, if any.
    pub topology_key: Option<String>,
    /// `schedulingConstraints.preferredTopology[*].key` (Phalanx), narrowest first; empty when unset.
    pub preferred_topology: Vec<String>,
    /// spec.priority; `None` when unset (the pods' priority is used, and pods are compared
    /// among themselves).
    pub priority: Option<i32>,
    /// spec.preemptionPolicy (`None` when unset: pods are compared among themselves).
    pub preemption_policy: Option<PreemptionPolicy>,
    /// Parent CompositePodGroup (`spec.parentCompositePodGroupName`, kind
    /// [`GroupKind::CompositePodGroup`](super::GroupKind::CompositePodGroup)); `None` for a
    /// standalone/root PodGroup. Pods of a group with a parent are scheduled with the whole tree
    /// of its root (see [`CompositeGroupInfo`]).
    pub parent: Option<GroupKey>,
    /// spec.disruptionMode.
    pub disruption_mode: DisruptionMode,
    /// `spec.workloadRef.workloadName`, if any: every group of a tree must name the root's Workload.
    pub workload: Option<Arc<str>>,
    /// Set by the runtime while the group's size is being changed by its owner (Phalanx addition: an
    /// annotated Deployment or Job was scaled and the integration has not yet rewritten `minCount`):
    /// the message, e.g. `waiting for minCount to follow Deployment web (generation 3; the group
    /// was sized at generation 2)`. PreEnqueue holds the group's pending pods (`WaitingForQuorum`)
    /// until it is cleared, so that the new members join the new quorum, all or nothing, instead
    /// of binding one by one as late members of the old one.
    pub resizing: Option<Arc<str>>,
    /// `spec.preemptionDelaySeconds` (Phalanx), if set: how long a root's preemption waits after its first
    /// unschedulable attempt, for a cluster autoscaler to add nodes. The runtime applies it (it has the clock) through
    /// [`crate::Snapshot::delay_preemption`]; `None` takes the scheduler configuration's default.
    pub preemption_delay_seconds: Option<u32>,
    /// Set by the runtime while the gang waits for its Cluster Autoscaler ProvisioningRequest (Phalanx addition,
    /// opt-in): the message, e.g. `waiting for ProvisioningRequest ns/train-1 to be Provisioned`. PreEnqueue
    /// holds the group's pending pods (`WaitingForProvisioning`, never `Unschedulable`, so that no autoscaler scales
    /// up for them a second time) until it is cleared; then the gang is placed as usual, all or nothing.
    pub provisioning: Option<Arc<str>>,
}

impl GroupInfo {
    /// A standalone PodGroup with defaults (tests, benchmarks, simple conversions).
    pub fn new(namespace: &str, name: &str, policy: GroupPolicy) -> GroupInfo {
        GroupInfo {
            key: GroupKey::pod_group(namespace, name),
            uid: format!("uid-pg-{namespace}-{name}").into(),
            generation: 1,
            policy,
            topology_key: None,
            preferred_topology: Vec::new(),
            priority: None,
            preemption_policy: None,
            parent: None,
            disruption_mode: DisruptionMode::Single,
            workload: None,
            resizing: None,
            preemption_delay_seconds: None,
            provisioning: None,
        }
    }
}

/// `schedulingPolicy` of a CompositePodGroup (upstream `CompositePodGroupSchedulingPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompositePolicy {
    /// `basic: {}`: minGroupCount is treated as 1.
    Basic,
    /// `gang: {minGroupCount}`: at least this many child groups must be scheduled together.
    Gang {
        /// minGroupCount (>= 1).
        min_group_count: u32,
    },
}

impl CompositePolicy {
    /// Effective minimum number of ready/scheduled children (1 for basic).
    pub fn min_group_count(&self) -> u32 {
        match self {
            CompositePolicy::Basic => 1,
            CompositePolicy::Gang { min_group_count } => (*min_group_count).max(1),
        }
    }
}

/// A CompositePodGroup as the scheduler sees it (KEP-6012, `scheduling.k8s.io/v1alpha3`);
/// built by the runtime from the CRD object. CompositePodGroups are the inner nodes of a
/// hierarchy; their children (PodGroups and CompositePodGroups) point to them through
/// `parent`.
#[derive(Debug, Clone, PartialEq)]
pub struct CompositeGroupInfo {
    /// Identity (kind [`GroupKind::CompositePodGroup`](super::GroupKind::CompositePodGroup)).
    pub key: GroupKey,
    /// metadata.uid.
    pub uid: Arc<str>,
    /// metadata.generation (echoed as the condition's observedGeneration).
    pub generation: i64,
    /// Basic or gang (`minGroupCount`).
    pub policy: CompositePolicy,
    /// `schedulingConstraints.topology[0].key`, if any.
    pub topology_key: Option<String>,
    /// `schedulingConstraints.preferredTopology[*].key` (Phalanx), narrowest first; empty when unset.
    pub preferred_topology: Vec<String>,
    /// spec.priority (`None` when unset).
    pub priority: Option<i32>,
    /// spec.preemptionPolicy (`None` when unset).
    pub preemption_policy: Option<PreemptionPolicy>,
    /// `spec.parentCompositePodGroupName` (kind CompositePodGroup); `None` for a root.
    pub parent: Option<GroupKey>,
    /// spec.disruptionMode.
    pub disruption_mode: DisruptionMode,
    /// `spec.workloadRef.workloadName`, if any.
    pub workload: Option<Arc<str>>,
    /// `spec.preemptionDelaySeconds` (Phalanx), if set: how long a root's preemption waits after its first
    /// unschedulable attempt, for a cluster autoscaler to add nodes. The runtime applies it (it has the clock) through
    /// [`crate::Snapshot::delay_preemption`]; `None` takes the scheduler configuration's default.
    pub preemption_delay_seconds: Option<u32>,
}

impl CompositeGroupInfo {
    /// A root CompositePodGroup with defaults (tests, simple conversions).
    pub fn new(namespace: &str, name: &str, policy: CompositePolicy) -> CompositeGroupInfo {
        CompositeGroupInfo {
            key: GroupKey::composite(namespace, name),
            uid: format!("uid-cpg-{namespace}-{name}").into(),
            generation: 1,
            policy,
            topology_key: None,
            preferred_topology: Vec::new(),
            priority: None,
            preemption_policy: None,
            parent: None,
            disruption_mode: DisruptionMode::Single,
            workload: None,
            preemption_delay_seconds: None,
        }
    }

    /// The composite seen through the leaf-group shape (key and kind kept, `minGroupCount` as
    /// `minCount`), for plugins that only implement the PodGroup methods.
    pub fn as_group_info(&self) -> GroupInfo {
        GroupInfo {
            key: self.key.clone(),
            uid: self.uid.clone(),
            generation: self.generation,
            policy: match self.policy {
                CompositePolicy::Basic => GroupPolicy::Basic,
                CompositePolicy::Gang { min_group_count } => GroupPolicy::Gang {
                    min_count: min_group_count,
                },
            },
            topology_key: self.topology_key.clone(),
            preferred_topology: self.preferred_topology.clone(),
            priority: self.priority,
            preemption_policy: self.preemption_policy,
            parent: self.parent.clone(),
            disruption_mode: self.disruption_mode,
            workload: self.workload.clone(),
            resizing: None,
            preemption_delay_seconds: self.preemption_delay_seconds,
            provisioning: None,
        }
    }
}
