//! `phalanx explain`: why a PodGroup, CompositePodGroup or pod is pending, from the live cluster, in one answer.
//!
//! The answer comes from one dry run of the scheduler's own cycles ([`phalanx_driver::dry_run`]) over a read of
//! the cluster, so the verdict and the filter reasons are the ones the scheduler reaches (kube-scheduler's wording,
//! `0/6 nodes are available: 6 Insufficient cpu.`, upstream `FitError.Error()` in
//! `pkg/scheduler/framework/types.go`). Around that verdict it gathers what a reader needs to act: the group's
//! condition and since when, the quorum and which members are present, the shortfall per resource and per
//! topology domain ([`facts`]), who holds the room and at what priority, what preemption would do, members that
//! break the gang, and the last events. [`render`] prints it as text; the JSON form is [`Explanation`] itself.

mod condition;
pub mod facts;
pub mod gather;
pub mod life;
mod owner;
pub mod render;
pub mod verdict;

use serde::Serialize;

pub use condition::ConditionFacts;
pub use gather::explain;

/// Where the target stands, in the words of its condition reasons (`phalanx_api::conditions::reasons`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Standing {
    /// Pods name a PodGroup (or a tree a CompositePodGroup) that does not exist.
    WaitingForPodGroup,
    /// Fewer member pods than `minCount` (or ready child groups than `minGroupCount`).
    WaitingForQuorum,
    /// Pods carry `spec.schedulingGates`.
    SchedulingGated,
    /// The gang waits for its Cluster Autoscaler ProvisioningRequest to be `Provisioned` (opt-in).
    WaitingForProvisioning,
    /// Tried, and it does not fit now.
    Unschedulable,
    /// It preempts lower-priority pods and waits for them to go.
    Preempting,
    /// Invalid input (a member of another scheduler, an invalid hierarchy) or an internal error.
    SchedulerError,
    /// It fits now: the scheduler places it at its next attempt.
    Schedulable,
    /// Placed (`…InitiallyScheduled=True`) and no member pending.
    Scheduled,
    /// The controllers' `Valid=False` (e.g. `ResourceClaimTemplateNotFound`, `PodsOfAnotherScheduler`): the spec
    /// must be fixed, whatever the scheduler last said.
    Invalid,
    /// Placed once, with members pending again (lost or replaced) and no restart under way.
    Running,
    /// Placed once, and its `recoveryPolicy` restarts it (within the grace period, or now).
    Restarting,
    /// `PodGroupFailed=True`: terminal, nothing restarts it.
    Failed,
}

/// Quorum of a gang.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Quorum {
    /// `minCount` (1 for basic).
    pub min_count: u32,
    /// MemberFacts pods of this scheduler that exist and are not terminal.
    pub present: usize,
    /// Their names.
    pub members: Vec<String>,
}

/// One member pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberFacts {
    /// Name.
    pub name: String,
    /// Node, when bound.
    pub node: Option<String>,
    /// `spec.schedulerName`.
    pub scheduler_name: String,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// Reason of its `PodScheduled` condition.
    pub reason: Option<String>,
}

/// What preemption did in the dry run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionFacts {
    /// Whether it would succeed.
    pub success: bool,
    /// A preemption for it is already in flight (its victims terminate): nothing new would be evicted.
    pub ongoing: bool,
    /// With `ongoing`: the pods it waits for, `namespace/name on node` (terminating on its nominated nodes).
    pub terminating: Vec<String>,
    /// The PostFilter message (why not, when it fails).
    pub message: String,
    /// Victims it would evict: `namespace/name on node (group g, priority p)`.
    pub victims: Vec<String>,
    /// While the group's `preemptionDelaySeconds` runs: when it ends (RFC 3339), as the scheduler wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delayed_until: Option<String>,
    /// With `delayed_until`: the whole seconds left from the time of the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_seconds_left: Option<i64>,
}

/// An event about the target or its members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventFacts {
    /// `kind/name` of the object.
    pub object: String,
    /// `Normal` / `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Reason.
    pub reason: String,
    /// Note (message).
    pub message: String,
    /// When it last happened (RFC 3339).
    pub time: Option<String>,
    /// How many times.
    pub count: i32,
}

/// A pod and the node it would be bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placed {
    /// Pod name (the namespace is the group's).
    pub pod: String,
    /// Node name.
    pub node: String,
}

/// The whole answer of `phalanx explain` (the JSON of `-o json`).
/// A group being deleted: since when, and what its protection finalizer still waits for (upstream's
/// podgroup-protection controller removes it once every member pod is terminal or gone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeletionFacts {
    /// `metadata.deletionTimestamp`, RFC 3339.
    pub since: String,
    /// The finalizers still on the object, e.g. `scheduling.phalanx.dev/podgroup-protection`.
    pub finalizers: Vec<String>,
    /// The non-terminal member pods (for a CompositePodGroup: its child groups) the deletion waits for.
    pub waiting_for: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `PodGroup`, `CompositePodGroup` or `Pod`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// For a pod: the PodGroup it names.
    pub pod_group: Option<String>,
    /// The workload object the group was made for and how it was grouped (`LeaderWorkerSet infer, replica group 1:
    /// leader infer-1 + 3 workers, all or nothing`); `None` for a group written by hand.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Where it stands.
    pub state: Standing,
    /// One sentence saying so.
    pub summary: String,
    /// What keeps it out other than capacity, most fundamental first ([`verdict::cause`]): `Valid=False`, cordoned
    /// or tainted nodes, a missing claim; `None` when only capacity is short.
    pub cause: Option<String>,
    /// The group's `…InitiallyScheduled` condition, else its `Valid=False` (e.g. `PodsOfAnotherScheduler`); for a pod
    /// without group: its `PodScheduled`.
    pub condition: Option<ConditionFacts>,
    /// The group's `Valid=False` condition (the controllers' verdict), when `condition` is the scheduler's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid: Option<ConditionFacts>,
    /// Quorum, for a PodGroup.
    pub quorum: Option<Quorum>,
    /// MemberFacts pods.
    pub members: Vec<MemberFacts>,
    /// Members that break the gang, each a sentence.
    pub gang_breakers: Vec<String>,
    /// The core's failure message (kube-scheduler's `0/N nodes are available: …` wording).
    pub reasons: Option<String>,
    /// Resources short in total.
    pub shortfall: Vec<facts::Shortfall>,
    /// The first claim no considered node can satisfy (`pod p: claim ns/c: <upstream reasons>`).
    pub volumes: Option<String>,
    /// The first device class the pending pods want more of than the considered nodes have free (`8 devices of
    /// class gpu.example.com wanted, 6 free`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub devices: Option<String>,
    /// Topology domains, closest first (groups with a topology constraint).
    pub domains: Vec<facts::DomainFit>,
    /// Pods holding the room the group needs, lowest priority first.
    pub holders: Vec<facts::Holder>,
    /// Preemption, when it ran.
    pub preemption: Option<PreemptionFacts>,
    /// Where each pending pod would go when it fits now.
    pub placement: Vec<Placed>,
    /// Last events, newest last.
    pub events: Vec<EventFacts>,
    /// Set when the group is being deleted.
    pub deletion: Option<DeletionFacts>,
    /// A PodGroup's life after its first schedule: live condition, recovery policy, next step.
    pub life: Option<life::LifeFacts>,
}
