//! Condition types, reasons and statuses of PodGroup and CompositePodGroup, and [`set_condition`].
//!
//! Upstream: the condition constants in `staging/src/k8s.io/api/scheduling/v1beta1/types.go` and
//! `v1alpha3/types.go` (Kubernetes 1.37); `set_condition` follows
//! `k8s.io/apimachinery/pkg/api/meta/conditions.go` `SetStatusCondition`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// PodGroup condition: whether the group's scheduling requirement has been satisfied. Terminal once True:
/// it never goes back to False, even if pods are later evicted.
pub const POD_GROUP_INITIALLY_SCHEDULED: &str = "PodGroupInitiallyScheduled";

/// CompositePodGroup condition: whether the subtree's scheduling requirement has been satisfied. Terminal
/// once True.
pub const COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED: &str = "CompositePodGroupInitiallyScheduled";

/// PodGroup condition, live (KEP-6413's name; Phalanx's own until upstream defines it): True while at least
/// `minCount` members (1 for a basic group) are bound and not going away, or have Succeeded; False with
/// reason `MembersLost`, `MembersDisrupted` or `Completed` otherwise. Written only once
/// `PodGroupInitiallyScheduled` is True, so a gang that is still gathering is never taken for a loss.
pub const POD_GROUP_SATISFIED: &str = "PodGroupSatisfied";

/// PodGroup condition, terminal once True (Phalanx's own): the group's `spec.recoveryPolicy` gave up on it:
/// action `Fail` on a loss, or a loss after `maxRestarts` restarts. Reason: the loss (`MembersLost`,
/// `MembersDisrupted`) or `MaxRestartsReached`.
pub const POD_GROUP_FAILED: &str = "PodGroupFailed";

/// PodGroup condition (Phalanx's own): the group is being deleted and its protection finalizer waits for member
/// pods (reason `WaitingForPods`, the message names them), so that `kubectl get ppg -o yaml` shows why a deleted
/// group stays.
pub const TERMINATING: &str = "Terminating";

/// PodGroup and CompositePodGroup condition: the group is about to be terminated due to a disruption such
/// as preemption.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// PodGroup condition (Phalanx's own): the state of the Cluster Autoscaler ProvisioningRequest of a gang that opted
/// in (`scheduling.phalanx.dev/provisioning-request: "true"`, with `autoscaling.provisioningRequests: true`). True
/// (reason `Provisioned`) once the request is `Provisioned=True`: only then does the scheduler place the gang. False
/// otherwise, with a reason of [`capacity`]; the message names the request and repeats Cluster Autoscaler's own
/// message. Written by the field manager `phalanx-provisioning`
/// ([`crate::field_managers::PROVISIONING`]); the request's conditions are those of Cluster Autoscaler's
/// `cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go`.
pub const CAPACITY_PROVISIONED: &str = "CapacityProvisioned";

/// Reasons of [`CAPACITY_PROVISIONED`].
pub mod capacity {
    /// False: the request exists (first attempt) and Cluster Autoscaler has not answered `Provisioned` or `Failed`
    /// yet; the message carries its latest condition message (`Accepted`, …) when it has one.
    pub const PENDING: &str = "Pending";
    /// True: the request is `Provisioned=True`; the gang may be placed.
    pub const PROVISIONED: &str = "Provisioned";
    /// False: the request is `Failed=True`; a new one is made after a backoff (the message says when).
    pub const FAILED: &str = "Failed";
    /// False: the request was provisioned, but its booking expired (`BookingExpired=True`) before the gang was
    /// placed; a new one is made after a backoff.
    pub const BOOKING_EXPIRED: &str = "BookingExpired";
    /// False: a later attempt's request exists (the previous one failed or expired, the message says why) and
    /// waits for Cluster Autoscaler.
    pub const RETRYING: &str = "Retrying";
    /// False: the `provisioningrequests.autoscaling.x-k8s.io` CRD is not installed, so no request can be made;
    /// the gang is not held (it is scheduled as if it had not opted in).
    pub const CRD_MISSING: &str = "ProvisioningRequestCRDMissing";
    /// False: the group cannot get a request: it is not a gang, or it is part of a CompositePodGroup tree (not
    /// supported yet); the gang is not held.
    pub const NOT_SUPPORTED: &str = "NotSupported";
}

/// Condition reasons.
pub mod reasons {
    /// `*InitiallyScheduled` True: the group was placed.
    pub const SCHEDULED: &str = "Scheduled";
    /// `*InitiallyScheduled` False: resources, affinity, topology or capacity do not admit the group.
    pub const UNSCHEDULABLE: &str = "Unschedulable";
    /// `*InitiallyScheduled` False: an internal error happened while scheduling.
    pub const SCHEDULER_ERROR: &str = "SchedulerError";
    /// `PodGroupInitiallyScheduled` False (Kubernetes 1.38, `PodGroupReasonPodGroupError`): the group's runtime
    /// validation failed (members of another scheduler, a priority or preemption policy other than the root's, an
    /// invalid hierarchy).
    pub const POD_GROUP_ERROR: &str = "PodGroupError";
    /// `CompositePodGroupInitiallyScheduled` False (Kubernetes 1.38, `CompositePodGroupReasonCompositePodGroupError`):
    /// the same for a CompositePodGroup.
    pub const COMPOSITE_POD_GROUP_ERROR: &str = "CompositePodGroupError";
    /// `DisruptionTarget` True: the scheduler preempted the group for higher-priority work.
    pub const PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";
    /// Pod `PodScheduled=False`: the pod names a PodGroup (or its tree a CompositePodGroup) that does not exist
    /// yet. Phalanx's own reason: upstream hides such pods in the queue without a condition (k/k#141900).
    pub const WAITING_FOR_POD_GROUP: &str = "WaitingForPodGroup";
    /// Pod `PodScheduled=False` and group `*InitiallyScheduled=False` reason: the group has fewer pods than its
    /// `minCount` (or its tree fewer ready groups than `minGroupCount`). Phalanx's own reason (upstream's
    /// GangScheduling holds such a group without a condition, k/k#141900).
    pub const WAITING_FOR_QUORUM: &str = "WaitingForQuorum";
    /// Pod `PodScheduled=False`: the pod (or its group) preempted lower-priority pods and waits for them to terminate
    /// (upstream's `waitingOnPreemption`); `status.nominatedNodeName` names the node kept for it. Phalanx's own
    /// reason: upstream writes `Unschedulable` with the preemption message.
    pub const WAITING_FOR_PREEMPTION: &str = "WaitingForPreemption";
    /// Pod `PodScheduled=False` and group `*InitiallyScheduled=False`: the pods are placed and PreBind is binding
    /// their PersistentVolumeClaims (kube-controller-manager's PV controller, or a provisioner for a
    /// `WaitForFirstConsumer` class) before any pod is bound. Phalanx's own reason: upstream's binding cycle
    /// writes nothing while it waits.
    pub const WAITING_FOR_VOLUME_BINDING: &str = "WaitingForVolumeBinding";
    /// Pod `PodScheduled=False`: the pod has `spec.schedulingGates` (core `PodReasonSchedulingGated`, written by the
    /// API server itself).
    pub const SCHEDULING_GATED: &str = "SchedulingGated";
    /// Pod `PodScheduled=False`: the pod waits for a ResourceClaim that does not exist yet (upstream's
    /// DynamicResources PreEnqueue, which answers `Unschedulable`). Phalanx's own reason, so that a cluster
    /// autoscaler, which acts on `Unschedulable` pods only, buys no node for a pod no node can help.
    pub const WAITING_FOR_RESOURCE_CLAIM: &str = "WaitingForResourceClaim";
    /// Pod `PodScheduled=False` and group `PodGroupInitiallyScheduled=False`: the gang opted in to a Cluster
    /// Autoscaler ProvisioningRequest and waits for it to be `Provisioned=True`. Phalanx's own reason: the pods
    /// consume the request (`autoscaling.x-k8s.io/consume-provisioning-request`) and must not be scaled up for
    /// twice.
    pub const WAITING_FOR_PROVISIONING: &str = "WaitingForProvisioning";
    /// Warning event on an owner (Job, StatefulSet, custom resource): its `scheduling.phalanx.dev/gang*` annotation
    /// is invalid or incomplete, so no PodGroup was created and its pods wait. Phalanx's own reason.
    pub const INVALID_GANG_ANNOTATION: &str = "InvalidGangAnnotation";
    /// Normal event on an owner: Phalanx created or updated its Workload and PodGroup. Phalanx's own reason.
    pub const GANG_GROUP_APPLIED: &str = "GangGroupApplied";
    /// Warning event on an owner of a kind Phalanx groups per part (a JobSet, a LeaderWorkerSet): its spec cannot be
    /// planned (a count out of range, a field missing; the note names the field), so its pods wait; or one of its
    /// settings cannot work with a gang (the note names it and what to use instead). Phalanx's own reason.
    pub const UNSUPPORTED_OWNER_SPEC: &str = "UnsupportedOwnerSpec";
    /// `PodGroupSatisfied` True: enough members are bound or have Succeeded.
    pub const SATISFIED: &str = "Satisfied";
    /// `PodGroupSatisfied` False: fewer than `minCount` members are bound or Succeeded because members failed,
    /// were deleted or have not been replaced yet.
    pub const MEMBERS_LOST: &str = "MembersLost";
    /// `PodGroupSatisfied` False: as `MembersLost`, and at least one member (or the group) carries
    /// `DisruptionTarget=True` (preemption, eviction, a taint).
    pub const MEMBERS_DISRUPTED: &str = "MembersDisrupted";
    /// `PodGroupSatisfied` False: no member is left running and at least `minCount` have Succeeded.
    pub const COMPLETED: &str = "Completed";
    /// `Terminating` True, and the Normal event on a group being deleted: its finalizer waits for member pods.
    pub const WAITING_FOR_PODS: &str = "WaitingForPods";
    /// `PodGroupFailed` True: a loss after `recoveryPolicy.maxRestarts` restarts.
    pub const MAX_RESTARTS_REACHED: &str = "MaxRestartsReached";
    /// Pod `DisruptionTarget` True: `recoveryPolicy` `RestartGroup` deletes the pod with the rest of its gang's
    /// bound members (Phalanx's own reason, beside core's `PreemptionByScheduler` and `EvictionByEvictionAPI`).
    pub const RESTARTED_BY_RECOVERY_POLICY: &str = "RestartedByRecoveryPolicy";
    /// Warning event on a PodGroup: `recoveryPolicy` `RestartGroup` deleted the gang's bound members so that
    /// their owner recreates them and the gang is placed again whole.
    pub const GROUP_RESTARTED: &str = "GroupRestarted";
}

/// Condition status values.
pub mod status {
    /// The condition holds.
    pub const TRUE: &str = "True";
    /// The condition does not hold.
    pub const FALSE: &str = "False";
    /// Unknown.
    pub const UNKNOWN: &str = "Unknown";
}

/// Builds a condition whose `lastTransitionTime` is `now`.
pub fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation,
        last_transition_time: Time(now),
    }
}

/// The condition of type `type_`, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// True when the condition of type `type_` is present with status `True`.
pub fn is_condition_true(conditions: &[Condition], type_: &str) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == status::TRUE)
}

/// Sets `new` in `conditions` with upstream `meta.SetStatusCondition` semantics, and returns whether
/// anything changed (false means "no write needed").
///
/// - Absent: `new` is appended as given (its `lastTransitionTime` is the caller's "now").
/// - Present with a different status: status and `lastTransitionTime` are taken from `new`.
/// - Present with the same status: `lastTransitionTime` is kept.
/// - `reason`, `message` and `observedGeneration` are updated whenever they differ.
pub fn set_condition(conditions: &mut Vec<Condition>, new: Condition) -> bool {
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == new.type_) else {
        conditions.push(new);
        return true;
    };
    let mut changed = false;
    if existing.status != new.status {
        existing.status = new.status;
        existing.last_transition_time = new.last_transition_time;
        changed = true;
    }
    if existing.reason != new.reason {
        existing.reason = new.reason;
        changed = true;
    }
    if existing.message != new.message {
        existing.message = new.message;
        changed = true;
    }
    if existing.observed_generation != new.observed_generation {
        existing.observed_generation = new.observed_generation;
        changed = true;
    }
    changed
}

/// Removes the condition of type `type_`; returns whether one was removed.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn cond(status: &str, reason: &str, message: &str, generation: i64, time: i64) -> Condition {
        new_condition(
            POD_GROUP_INITIALLY_SCHEDULED,
            status,
            reason,
            message,
            Some(generation),
            at(time),
        )
    }

    #[test]
    fn absent_condition_is_appended() {
        let mut conditions = Vec::new();
        assert!(set_condition(
            &mut conditions,
            cond("False", reasons::UNSCHEDULABLE, "no fit", 1, 10)
        ));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, Time(at(10)));
        assert_eq!(conditions[0].observed_generation, Some(1));
    }

    #[test]
    fn identical_condition_is_no_change_and_keeps_time() {
        let mut conditions = vec![cond("False", reasons::UNSCHEDULABLE, "no fit", 1, 10)];
        assert!(!set_condition(
            &mut conditions,
            cond("False", reasons::UNSCHEDULABLE, "no fit", 1, 99)
        ));
        assert_eq!(conditions[0].last_transition_time, Time(at(10)));
    }

    #[test]
    fn message_change_keeps_transition_time() {
        let mut conditions = vec![cond("False", reasons::UNSCHEDULABLE, "no fit", 1, 10)];
        assert!(set_condition(
            &mut conditions,
            cond("False", reasons::UNSCHEDULABLE, "0/8 nodes", 1, 20)
        ));
        assert_eq!(conditions[0].message, "0/8 nodes");
        assert_eq!(conditions[0].last_transition_time, Time(at(10)));
    }

    #[test]
    fn status_flip_moves_transition_time() {
        let mut conditions = vec![cond("False", reasons::UNSCHEDULABLE, "no fit", 1, 10)];
        assert!(set_condition(
            &mut conditions,
            cond("True", reasons::SCHEDULED, "", 1, 30)
        ));
        assert_eq!(conditions[0].status, status::TRUE);
        assert_eq!(conditions[0].reason, reasons::SCHEDULED);
        assert_eq!(conditions[0].last_transition_time, Time(at(30)));
        assert!(is_condition_true(&conditions, POD_GROUP_INITIALLY_SCHEDULED));
    }

    #[test]
    fn observed_generation_alone_is_a_change() {
        let mut conditions = vec![cond("True", reasons::SCHEDULED, "", 1, 10)];
        assert!(set_condition(
            &mut conditions,
            cond("True", reasons::SCHEDULED, "", 2, 40)
        ));
        assert_eq!(conditions[0].observed_generation, Some(2));
        assert_eq!(conditions[0].last_transition_time, Time(at(10)));
    }

    #[test]
    fn other_types_are_untouched() {
        let mut conditions = vec![cond("True", reasons::SCHEDULED, "", 1, 10)];
        let disruption = new_condition(
            DISRUPTION_TARGET,
            status::TRUE,
            reasons::PREEMPTION_BY_SCHEDULER,
            "x",
            None,
            at(50),
        );
        assert!(set_condition(&mut conditions, disruption));
        assert_eq!(conditions.len(), 2);
        assert_eq!(
            find_condition(&conditions, POD_GROUP_INITIALLY_SCHEDULED).map(|c| c.status.as_str()),
            Some("True")
        );
        assert!(remove_condition(&mut conditions, DISRUPTION_TARGET));
        assert!(!remove_condition(&mut conditions, DISRUPTION_TARGET));
        assert_eq!(conditions.len(), 1);
    }
}
