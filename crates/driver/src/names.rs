//! Where the core's enums meet the API's names: the core decides conditions and gates as data
//! ([`ConditionType`], [`ConditionReason`], [`FailureReason`], [`GateReason`]); the strings written to the API
//! are defined once, in `phalanx_api::conditions`.

use phalanx_api::conditions::{self, reasons};
use phalanx_scheduler::{ConditionReason, ConditionType, FailureReason, GateReason, GroupKind};

/// API condition type of a decided group condition.
pub fn condition_type(t: ConditionType) -> &'static str {
    match t {
        ConditionType::PodGroupInitiallyScheduled => conditions::POD_GROUP_INITIALLY_SCHEDULED,
        ConditionType::CompositePodGroupInitiallyScheduled => {
            conditions::COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED
        }
    }
}

/// API reason of a decided group condition on a group of `kind`.
pub fn condition_reason(r: ConditionReason, kind: GroupKind) -> &'static str {
    match r {
        ConditionReason::Scheduled => reasons::SCHEDULED,
        ConditionReason::Unschedulable => reasons::UNSCHEDULABLE,
        ConditionReason::SchedulerError => reasons::SCHEDULER_ERROR,
        ConditionReason::GroupError => group_error(kind),
    }
}

/// The reason of a failed runtime validation on a group of `kind` (Kubernetes 1.38).
fn group_error(kind: GroupKind) -> &'static str {
    match kind {
        GroupKind::PodGroup => reasons::POD_GROUP_ERROR,
        GroupKind::CompositePodGroup => reasons::COMPOSITE_POD_GROUP_ERROR,
    }
}

/// `PodScheduled=False` reason of a pod that was not bound.
pub fn failure_reason(r: FailureReason) -> &'static str {
    match r {
        FailureReason::Unschedulable => reasons::UNSCHEDULABLE,
        FailureReason::SchedulerError => reasons::SCHEDULER_ERROR,
    }
}

/// `PodScheduled=False` reason of a pod held by a PreEnqueue gate.
pub fn gate_reason(r: GateReason) -> &'static str {
    match r {
        GateReason::WaitingForPodGroup => reasons::WAITING_FOR_POD_GROUP,
        GateReason::WaitingForQuorum => reasons::WAITING_FOR_QUORUM,
        GateReason::SchedulingGated => reasons::SCHEDULING_GATED,
        // Upstream's DynamicResources PreEnqueue answers Unschedulable with the message; a cluster autoscaler would
        // then add nodes for a pod that no node helps (autoscaler#9828), so Phalanx names the wait itself.
        GateReason::WaitingForResourceClaim => reasons::WAITING_FOR_RESOURCE_CLAIM,
        GateReason::InvalidHierarchy => reasons::SCHEDULER_ERROR,
        // Phalanx's own: not `Unschedulable`, which would make an autoscaler scale up a second time.
        GateReason::WaitingForProvisioning => reasons::WAITING_FOR_PROVISIONING,
    }
}

/// Group condition reason of a group held by a PreEnqueue gate: the wait itself (`WaitingForQuorum`; also
/// `WaitingForPodGroup` and `SchedulingGated`, the gates' pod reasons), so `kubectl get ppg` tells a group still gathering its pods from one that
/// was tried and did not fit (`Unschedulable`); an invalid hierarchy is `PodGroupError` / `CompositePodGroupError`
/// (Kubernetes 1.38). The condition type and
/// status stay upstream's (`PodGroupInitiallyScheduled=False`, `scheduling/v1beta1/types.go`); upstream's
/// GangScheduling leaves such a group without a condition (k/k#141900).
pub fn gate_group_reason(r: GateReason, kind: GroupKind) -> &'static str {
    match r {
        GateReason::InvalidHierarchy => group_error(kind),
        GateReason::WaitingForPodGroup
        | GateReason::WaitingForQuorum
        | GateReason::SchedulingGated
        | GateReason::WaitingForResourceClaim
        | GateReason::WaitingForProvisioning => gate_reason(r),
    }
}
