//! The `PodGroup` kind (upstream `scheduling.k8s.io/v1beta1` `PodGroup`, KEP-4671/KEP-5832): the runtime
//! object for a set of pods scheduled together. Pods join it with the label
//! [`crate::labels::POD_GROUP`] or `spec.schedulingGroup.podGroupName`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::policy::{
    DisruptionMode, PodGroupResourceClaim, PodGroupResourceClaimStatus, PodGroupSchedulingConstraints,
    PodGroupSchedulingPolicy, PreemptionPolicy, WorkloadReference,
};
use super::recovery::RecoveryPolicy;
use crate::schema::{
    DNS1123_SUBDOMAIN_MAX_LENGTH, DNS1123_SUBDOMAIN_PATTERN, MAX_PREEMPTION_DELAY_SECONDS, MAX_PRIORITY,
    MAX_RESOURCE_CLAIMS,
};

/// The desired state of a PodGroup (upstream `PodGroupSpec`). Every field is immutable except
/// `schedulingPolicy.gang.minCount`; `priority` and `preemptionPolicy` may be filled once when absent
/// (Phalanx has no Priority admission, so the controller resolves them from `priorityClassName`).
// kube-derive repeats `type_ = ...` once per printcolumn(...), which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "scheduling.phalanx.dev",
    version = "v1beta1",
    kind = "PodGroup",
    plural = "podgroups",
    singular = "podgroup",
    shortname = "ppg",
    category = "phalanx",
    namespaced,
    status = "PodGroupStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "PodGroup is a set of pods scheduled together, all-or-nothing for a gang policy (mirror of \
           scheduling.k8s.io/v1beta1 PodGroup, Kubernetes 1.37).",
    printcolumn(
        name = "Policy",
        type_ = "string",
        json_path = ".status.policy",
        description = "Basic or Gang (mirrored into status by the Phalanx controller)"
    ),
    printcolumn(
        name = "Min",
        type_ = "integer",
        json_path = ".spec.schedulingPolicy.gang.minCount",
        description = "gang.minCount"
    ),
    printcolumn(
        name = "Pods",
        type_ = "integer",
        json_path = ".status.pods",
        description = "Pods in the group"
    ),
    printcolumn(
        name = "Scheduled",
        type_ = "integer",
        json_path = ".status.scheduledPods",
        description = "Pods bound to a node"
    ),
    printcolumn(
        name = "Running",
        type_ = "integer",
        json_path = ".status.runningPods",
        description = "Pods in phase Running",
        priority = 1
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyPods",
        description = "Pods whose Ready condition is True",
        priority = 1
    ),
    printcolumn(
        name = "Succeeded",
        type_ = "integer",
        json_path = ".status.succeededPods",
        description = "Pods in phase Succeeded (they count toward minCount)",
        priority = 1
    ),
    printcolumn(
        name = "Failed",
        type_ = "integer",
        json_path = ".status.failedPods",
        description = "Pods in phase Failed",
        priority = 1
    ),
    printcolumn(
        name = "Restarts",
        type_ = "integer",
        json_path = ".status.restarts",
        description = "Restarts made by recoveryPolicy RestartGroup",
        priority = 1
    ),
    printcolumn(
        name = "Gave-Up",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"PodGroupFailed\")].reason",
        description = "Reason of the terminal PodGroupFailed condition (recoveryPolicy Fail, or MaxRestartsReached)",
        priority = 1
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"PodGroupInitiallyScheduled\")].reason",
        description = "Reason of the PodGroupInitiallyScheduled condition: WaitingForQuorum while gathering pods, Unschedulable after a failed attempt, Scheduled"
    ),
    printcolumn(
        name = "Satisfied",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"PodGroupSatisfied\")].reason",
        description = "Reason of the live PodGroupSatisfied condition once the group was scheduled: Satisfied, MembersLost, MembersDisrupted, Completed"
    ),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].reason",
        description = "Reason of the controllers' Valid condition: Valid, or why the group is invalid (e.g. ResourceClaimTemplateNotFound, PodsOfAnotherScheduler); an invalid group is not placed whatever STATUS says"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"PodGroupInitiallyScheduled\")].message",
        description = "Message of the PodGroupInitiallyScheduled condition (why the group waits or does not fit)",
        priority = 1
    ),
    printcolumn(
        name = "Parent",
        type_ = "string",
        json_path = ".spec.parentCompositePodGroupName",
        description = "Parent CompositePodGroup",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.parentCompositePodGroupName) || has(self.workloadRef)")
    .message("must be set when parentCompositePodGroupName is set")
    .field_path(".workloadRef")
    .reason(Reason::FieldValueRequired))]
#[x_kube(validation = crate::schema::immutable("parentCompositePodGroupName"))]
#[x_kube(validation = crate::schema::immutable("workloadRef"))]
#[x_kube(validation = crate::schema::immutable("schedulingConstraints"))]
#[x_kube(validation = crate::schema::immutable("resourceClaims"))]
#[x_kube(validation = crate::schema::immutable("disruptionMode"))]
#[x_kube(validation = crate::schema::immutable("priorityClassName"))]
#[x_kube(validation = crate::schema::set_once("priority"))]
#[x_kube(validation = crate::schema::set_once("preemptionPolicy"))]
pub struct PodGroupSpec {
    /// parentCompositePodGroupName is the name of the parent CompositePodGroup in the same namespace; nil
    /// means this PodGroup is a root. Requires workloadRef. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = DNS1123_SUBDOMAIN_MAX_LENGTH), pattern(DNS1123_SUBDOMAIN_PATTERN))]
    pub parent_composite_pod_group_name: Option<String>,
    /// workloadRef references the Workload template this PodGroup was created from; nil means a
    /// standalone PodGroup. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_ref: Option<WorkloadReference>,
    /// schedulingPolicy defines the scheduling policy (exactly one of basic and gang). The kind is frozen;
    /// gang.minCount is mutable.
    pub scheduling_policy: PodGroupSchedulingPolicy,
    /// schedulingConstraints defines optional scheduling constraints (e.g. topology). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_constraints: Option<PodGroupSchedulingConstraints>,
    /// resourceClaims defines which ResourceClaims may be shared among the pods of the group (at most 4,
    /// unique names). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_RESOURCE_CLAIMS))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub resource_claims: Option<Vec<PodGroupResourceClaim>>,
    /// disruptionMode defines how the PodGroup can be disrupted (`single` or `all`). Defaults to
    /// `{single: {}}`. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"single": {}}))]
    pub disruption_mode: Option<DisruptionMode>,
    /// priorityClassName names the PriorityClass of the group. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = DNS1123_SUBDOMAIN_MAX_LENGTH), pattern(DNS1123_SUBDOMAIN_PATTERN))]
    pub priority_class_name: Option<String>,
    /// priority is the priority value of the group (at most 1e9); resolved from priorityClassName when
    /// unset. Immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_PRIORITY))]
    pub priority: Option<i32>,
    /// preemptionPolicy is the policy for preempting lower-priority pods and groups (default
    /// PreemptLowerPriority). Immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_policy: Option<PreemptionPolicy>,
    /// Phalanx addition (not in upstream): recoveryPolicy says what to do when the group, once
    /// scheduled, falls below `minCount` (`PodGroupSatisfied=False`): report only (omitted or
    /// `None`), restart the whole gang, or fail it. Mutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_policy: Option<RecoveryPolicy>,
    /// Phalanx addition (not in upstream): preemptionDelaySeconds is how long the group, once it could preempt,
    /// waits after its first unschedulable attempt before it evicts anything (0-86400), so that a cluster autoscaler
    /// can add nodes instead (KAI-Scheduler's `preemption-delay`). Meanwhile its pending members carry
    /// `PodScheduled=False/Unschedulable`. Unset: the scheduler configuration's `autoscaling.preemptionDelaySeconds`
    /// (default 0, preempt at once). Only a root's value counts: preemption runs for the whole tree. Mutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_PREEMPTION_DELAY_SECONDS))]
    pub preemption_delay_seconds: Option<i32>,
}

/// The observed state of a PodGroup (upstream `PodGroupStatus` plus Phalanx's read-only counters).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// conditions: `PodGroupInitiallyScheduled` (terminal once True; reasons Scheduled, Unschedulable,
    /// SchedulerError), `DisruptionTarget` (reason PreemptionByScheduler), Phalanx's `Valid` and the live
    /// `PodGroupSatisfied` (reasons Satisfied, MembersLost, MembersDisrupted, Completed). A list-map keyed by type, so
    /// the controller and the scheduler can each own their own entries with server-side apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// resourceClaimStatuses records the ResourceClaim generated for each template-based entry of
    /// `spec.resourceClaims`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_RESOURCE_CLAIMS))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub resource_claim_statuses: Option<Vec<PodGroupResourceClaimStatus>>,
    /// Phalanx addition (not in upstream): the policy kind, `Basic` or `Gang`, mirrored from
    /// spec.schedulingPolicy for the `Policy` printer column. Read-only; written by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Phalanx addition (not in upstream): number of non-terminal pods that reference this PodGroup.
    /// Read-only; written by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pods: Option<i32>,
    /// Phalanx addition (not in upstream): number of those pods that are bound to a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub scheduled_pods: Option<i32>,
    /// Phalanx addition (not in upstream): number of those pods in phase Running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub running_pods: Option<i32>,
    /// Phalanx addition (not in upstream): number of non-terminal member pods whose `Ready` condition is True.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ready_pods: Option<i32>,
    /// Phalanx addition (not in upstream): number of member pods in phase Succeeded. They still count toward the
    /// gang's `minCount` (k/k#142330) and are not in `pods`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub succeeded_pods: Option<i32>,
    /// Phalanx addition (not in upstream): number of member pods in phase Failed (not counted anywhere else).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub failed_pods: Option<i32>,
    /// Phalanx addition (not in upstream): how many times `recoveryPolicy` `RestartGroup` restarted the gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub restarts: Option<i32>,
    /// Phalanx addition (not in upstream): when the last restart happened; the grace period of the next one
    /// counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_restart_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

impl PodGroupSpec {
    /// The disruption mode, with upstream's default (`single`) when unset.
    pub fn disruption_mode_or_default(&self) -> DisruptionMode {
        self.disruption_mode
            .clone()
            .unwrap_or_else(DisruptionMode::single)
    }

    /// The preemption policy, with upstream's default (`PreemptLowerPriority`) when unset.
    pub fn preemption_policy_or_default(&self) -> PreemptionPolicy {
        self.preemption_policy.unwrap_or_default()
    }
}

/// The name of the ResourceClaim generated for entry `entry` of PodGroup `group`'s `spec.resourceClaims` (one that
/// names a ResourceClaimTemplate): `<group>-<entry>`, fixed so that member pods can name it by
/// `resourceClaimName` before it exists (upstream's resourceclaim controller generates a name instead,
/// `pkg/controller/resourceclaim/controller.go`). A name over 253 characters keeps its first 244 and adds `-` and 8
/// hex digits of an FNV-1a hash of the whole, so that two long names that share a prefix stay apart.
pub fn generated_claim_name(group: &str, entry: &str) -> String {
    let max = DNS1123_SUBDOMAIN_MAX_LENGTH as usize;
    let full = format!("{group}-{entry}");
    if full.len() <= max {
        return full;
    }
    let hash = full.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    // Names are ASCII (DNS-1123), so any byte index is a char boundary; a trailing '-' or '.' would be invalid.
    let head = full[..max - 9].trim_end_matches(['-', '.']);
    format!("{head}-{hash:08x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_names_are_group_and_entry_and_stay_valid_when_long() {
        assert_eq!(generated_claim_name("train", "gpu"), "train-gpu");
        let long = "g".repeat(250);
        let a = generated_claim_name(&long, "nvlink");
        let b = generated_claim_name(&long, "nvswitch");
        assert_eq!(a.len(), crate::schema::DNS1123_SUBDOMAIN_MAX_LENGTH as usize);
        assert_ne!(a, b, "two entries of one long group get two names");
        assert!(a.starts_with(&"g".repeat(244)));
        let dashes = format!("{}-{}", "g".repeat(243), "x".repeat(20));
        let c = generated_claim_name(&dashes, "e");
        assert!(!c.contains("--"), "no '-' run before the hash: {c}");
    }
}
