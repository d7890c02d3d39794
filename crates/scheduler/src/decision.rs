//! What a scheduling cycle decides, as plain data for the runtime to act on
//! (upstream `submitPodGroupAlgorithmResult`, `updatePodGroupCondition`, `FailureHandler`,
//! `AddAttemptedPodGroupIfNeeded`).

use std::sync::Arc;
use std::time::Duration;

use crate::model::{DisruptionMode, EntityKey, GroupKey, PodKey};
use crate::resources::Resources;

/// Type of a group condition the core decides. The runtime writes it under the API name
/// (`phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED` /
/// `COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED`, upstream `scheduling/v1beta1/types.go`); the core
/// keeps no copy of the strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionType {
    /// `PodGroupInitiallyScheduled`.
    PodGroupInitiallyScheduled,
    /// `CompositePodGroupInitiallyScheduled`.
    CompositePodGroupInitiallyScheduled,
}

/// Reason of a decided condition; the runtime writes the API name
/// (`phalanx_api::conditions::reasons`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionReason {
    /// `Scheduled`: the group was placed.
    Scheduled,
    /// `Unschedulable`: the group (or pod) did not fit.
    Unschedulable,
    /// `SchedulerError`: an internal error (an invalid node affinity, a plugin error).
    SchedulerError,
    /// `PodGroupError` on a PodGroup, `CompositePodGroupError` on a CompositePodGroup (Kubernetes 1.38,
    /// `pkg/apis/scheduling/types.go`): runtime validation of the group or its hierarchy failed (members of another
    /// scheduler, a priority or preemption policy that differs from the root's, a hierarchy rule). The pods carry
    /// `SchedulerError`, as upstream's `FailureHandler` gives them.
    GroupError,
}

/// Overall result of one cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// At least the required pods were placed (bindings are non-empty, or for a pod, one).
    Scheduled,
    /// Nothing binds; the entity waits for a cluster event (or the flush).
    Unschedulable,
    /// Nothing binds; the entity is retried after backoff.
    Error,
    /// Nothing to do (every pod was already assumed or is being deleted).
    Skipped,
}

/// Bind `pod` to `node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The pod.
    pub pod: PodKey,
    /// metadata.uid, for the Binding's precondition.
    pub uid: Arc<str>,
    /// Target node.
    pub node: Arc<str>,
    /// What PreBind writes for the pod's claims before any pod of the decision is bound (VolumeBinding;
    /// empty for a pod with nothing to bind).
    pub volumes: Vec<crate::volumes::VolumeAction>,
    /// What PreBind writes to the pod's resource claims before any pod of the decision is bound
    /// (DynamicResources: the allocation this cycle made, and the pod's `reservedFor` entry); empty for a pod
    /// without claims to write.
    pub devices: Vec<crate::dra::ClaimWrite>,
}

/// Why a pod was not bound: the reason for its `PodScheduled=False` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    /// `Unschedulable`.
    Unschedulable,
    /// `SchedulerError`.
    SchedulerError,
}

/// A pod that is not bound in this cycle, with the message for `PodScheduled=False`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFailure {
    /// The pod.
    pub pod: PodKey,
    /// metadata.uid.
    pub uid: Arc<str>,
    /// Reason.
    pub reason: FailureReason,
    /// Message, e.g. `0/3 nodes are available: 3 Insufficient cpu.`
    pub message: String,
}

/// A condition to write on a group's status (`metav1.Condition`). The runtime keeps a True
/// `…InitiallyScheduled` condition True (no regression) and sets `observedGeneration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCondition {
    /// The group.
    pub group: GroupKey,
    /// Condition type (follows the group's kind).
    pub type_: ConditionType,
    /// True or False.
    pub status: bool,
    /// Reason.
    pub reason: ConditionReason,
    /// Human-readable message (empty on success, as upstream).
    pub message: String,
    /// metadata.generation of the group object the cycle saw.
    pub observed_generation: i64,
}

/// How the pods that did not bind go back to the queue (handled by `SchedulingQueue::done`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequeueMode {
    /// Unschedulable: park in the unschedulable pool until a matching cluster event or the
    /// periodic flush; then backoff applies.
    Unschedulable,
    /// Error: back off, then retry.
    Backoff,
    /// Leftovers of a successful group: straight back to the active queue, keeping the old
    /// timestamp, no backoff (KEP-4671).
    Immediate,
}

/// Requeue instruction for the entity's remaining pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requeue {
    /// Pods that stay queued (the entity keeps only these plus pods that arrived meanwhile).
    pub pods: Vec<PodKey>,
    /// How.
    pub mode: RequeueMode,
    /// With [`RequeueMode::Unschedulable`]: the summed requests of the pods rejected as `Unschedulable` (resolvable,
    /// as preemption reads it: removing pods could make room), not `UnschedulableAndUnresolvable`: the room the
    /// entity lacked. For a group, the queue retries it without waiting out its backoff once the requests of the
    /// pods deleted since this failure cover it (`SchedulingQueue::done`). Zero everywhere else.
    pub short_of: Resources,
}

/// A pod to evict, chosen by preemption (upstream `extenderv1.Victims` entries). The runtime
/// sets `DisruptionTarget=True` (reason `PreemptionByScheduler`) on it, deletes it and emits a
/// `Preempted` event naming the preemptor; for a victim of an `all` unit it may also mark the
/// group (`group`) as disrupted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Victim {
    /// Pod to evict.
    pub pod: PodKey,
    /// Its uid (delete precondition).
    pub uid: Arc<str>,
    /// Node it runs on.
    pub node: Arc<str>,
    /// The group its victim unit stands for: with mode [`DisruptionMode::All`], the highest
    /// `all` ancestor (PodGroup or CompositePodGroup) whose scheduled pods are all evicted
    /// together; with [`DisruptionMode::Single`], the pod's own PodGroup (the pod alone is
    /// evicted); `None` for a pod without a group.
    pub group: Option<GroupKey>,
    /// Disruption mode of the unit.
    pub mode: DisruptionMode,
    /// Priority of the unit (its group's priority, k/k#139030; else the pod's).
    pub priority: i32,
    /// The entity that preempts it.
    pub preemptor: EntityKey,
}

/// A nomination (`status.nominatedNodeName`) produced by preemption: the preemptor pod waits
/// for this node (upstream `NominatingInfo{ModeOverride, NominatedNodeName}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nomination {
    /// Preemptor pod.
    pub pod: PodKey,
    /// Node it waits for.
    pub node: Arc<str>,
}

/// What the PostFilter chain (preemption) did in a cycle; present only when it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreemptionReport {
    /// Plugin that succeeded; `None` when every plugin failed.
    pub plugin: Option<&'static str>,
    /// Whether preemption succeeded: the entity now waits on preemption (upstream
    /// `waitingOnPreemption`; metric result `PodGroupWaitingOnPreemption`). The decision's
    /// outcome stays [`Outcome::Unschedulable`], nothing binds, `victims` are to be evicted
    /// and `nominations` set.
    pub success: bool,
    /// A preemption for the entity was already in flight (k/k#140641): `nominations` are the
    /// current ones, `victims` is empty.
    pub ongoing: bool,
    /// The plugin's message (also appended to the group conditions and pod failures).
    pub message: String,
    /// Wall time spent in the PostFilter chain (`scheduler_podgroup_preemption_attempt_duration_seconds`).
    pub duration: Duration,
}

/// Counters about one cycle, for metrics and logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleStats {
    /// Pods that went through Filter/Score (including simulations per placement).
    pub pods_evaluated: u64,
    /// Node evaluations served from the batching cache.
    pub cached_node_evaluations: u64,
    /// Node evaluations computed.
    pub node_evaluations: u64,
    /// Placements generated.
    pub placements: u32,
    /// Placements that succeeded.
    pub feasible_placements: u32,
    /// Alternative orders tried by the reorder retry.
    pub reorder_attempts: u32,
    /// Whether the reorder retry turned a failure into a success.
    pub reorder_succeeded: bool,
    /// Child evaluations made by the sibling search of a CompositePodGroup.
    pub sibling_search_steps: u32,
    /// Whether the sibling search turned a failed greedy pass into a success.
    pub sibling_search_succeeded: bool,
    /// Wall time of the cycle.
    pub duration: Duration,
}

/// Everything the runtime must do after a cycle.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The entity scheduled.
    pub entity: EntityKey,
    /// Overall result.
    pub outcome: Outcome,
    /// Pods to bind (already assumed in the snapshot).
    pub bindings: Vec<Binding>,
    /// Pods not bound, with reason and message for `PodScheduled=False`.
    pub failures: Vec<PodFailure>,
    /// Group conditions to write (empty for single pods).
    pub conditions: Vec<GroupCondition>,
    /// Requeue instruction; `None` when nothing remains.
    pub requeue: Option<Requeue>,
    /// Nominations from preemption. The runtime sets them; it clears the nomination of every
    /// other pod in `failures` (upstream `clearNominatedNode`).
    pub nominations: Vec<Nomination>,
    /// Victims to evict (preemption).
    pub victims: Vec<Victim>,
    /// Pending pods whose `status.nominatedNodeName` the runtime clears, filled when preemption
    /// chose new victims (not while it waits): the pods nominated to a victim's node with a
    /// priority below the preemptor's (its own pods excepted), in victim-node order. The room
    /// they waited for goes to the preemptor, so they should look for another node (upstream
    /// `getLowerPriorityNominatedPods`, `pkg/scheduler/framework/preemption/preemption.go`
    /// `prepareCandidate`).
    pub cleared_nominations: Vec<PodKey>,
    /// Set when the PostFilter chain (preemption) ran.
    pub preemption: Option<PreemptionReport>,
    /// Counters.
    pub stats: CycleStats,
}

impl Decision {
    /// A decision with no actions.
    pub fn empty(entity: EntityKey, outcome: Outcome) -> Decision {
        Decision {
            entity,
            outcome,
            bindings: vec![],
            failures: vec![],
            conditions: vec![],
            requeue: None,
            nominations: vec![],
            victims: vec![],
            cleared_nominations: vec![],
            preemption: None,
            stats: CycleStats::default(),
        }
    }

    /// Node a pod is bound to by this decision.
    pub fn node_of(&self, pod: &PodKey) -> Option<&str> {
        self.bindings.iter().find(|b| b.pod == *pod).map(|b| &*b.node)
    }
}
