//! The `CompositePodGroup` kind (upstream `scheduling.k8s.io/v1alpha3` `CompositePodGroup`, KEP-6012): an
//! inner node of a group hierarchy. Children (PodGroups or CompositePodGroups) point to it by name through
//! `spec.parentCompositePodGroupName`; there is no child list.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::schema::{
    DNS1123_SUBDOMAIN_MAX_LENGTH, DNS1123_SUBDOMAIN_PATTERN, MAX_PREEMPTION_DELAY_SECONDS, MAX_PRIORITY,
};
use crate::v1beta1::{
    CompositeDisruptionMode, CompositePodGroupSchedulingConstraints, CompositePodGroupSchedulingPolicy,
    PreemptionPolicy, WorkloadReference,
};

/// The desired state of a CompositePodGroup (upstream `CompositePodGroupSpec`). `workloadRef` is
/// required (there are no standalone CompositePodGroups). Every field is immutable except
/// `schedulingPolicy.gang.minGroupCount`; `priority` and `preemptionPolicy` may be filled once when absent.
// kube-derive repeats `type_ = ...` once per printcolumn(...), which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "scheduling.phalanx.dev",
    version = "v1alpha3",
    kind = "CompositePodGroup",
    plural = "compositepodgroups",
    singular = "compositepodgroup",
    shortname = "pcpg",
    category = "phalanx",
    namespaced,
    status = "CompositePodGroupStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "CompositePodGroup is an inner node of a hierarchy of PodGroups scheduled together (mirror of \
           scheduling.k8s.io/v1alpha3 CompositePodGroup, Kubernetes 1.37).",
    printcolumn(
        name = "Policy",
        type_ = "string",
        json_path = ".status.policy",
        description = "Basic or Gang (mirrored into status by the Phalanx controller)"
    ),
    printcolumn(
        name = "Min",
        type_ = "integer",
        json_path = ".spec.schedulingPolicy.gang.minGroupCount",
        description = "gang.minGroupCount"
    ),
    printcolumn(
        name = "Children",
        type_ = "integer",
        json_path = ".status.childGroups",
        description = "Child groups (PodGroups and CompositePodGroups)"
    ),
    printcolumn(
        name = "Scheduled",
        type_ = "integer",
        json_path = ".status.scheduledChildGroups",
        description = "Child groups whose InitiallyScheduled condition is True"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"CompositePodGroupInitiallyScheduled\")].reason",
        description = "Reason of the CompositePodGroupInitiallyScheduled condition: WaitingForQuorum while gathering its child groups, Unschedulable after a failed attempt, Scheduled"
    ),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].reason",
        description = "Reason of the controllers' Valid condition: Valid, or why the group is invalid (e.g. ParentNotFound, HierarchyCycle); an invalid group is not placed whatever STATUS says"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"CompositePodGroupInitiallyScheduled\")].message",
        description = "Message of the CompositePodGroupInitiallyScheduled condition (why the group waits or does not fit)",
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
#[x_kube(validation = crate::schema::immutable("parentCompositePodGroupName"))]
#[x_kube(validation = Rule::new("self.workloadRef == oldSelf.workloadRef")
    .message("workloadRef is immutable")
    .field_path(".workloadRef")
    .reason(Reason::FieldValueForbidden))]
#[x_kube(validation = crate::schema::immutable("schedulingConstraints"))]
#[x_kube(validation = crate::schema::immutable("disruptionMode"))]
#[x_kube(validation = crate::schema::immutable("priorityClassName"))]
#[x_kube(validation = crate::schema::set_once("priority"))]
#[x_kube(validation = crate::schema::set_once("preemptionPolicy"))]
pub struct CompositePodGroupSpec {
    /// parentCompositePodGroupName is the name of the parent CompositePodGroup in the same namespace; nil
    /// means this is the root of the hierarchy. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = DNS1123_SUBDOMAIN_MAX_LENGTH), pattern(DNS1123_SUBDOMAIN_PATTERN))]
    pub parent_composite_pod_group_name: Option<String>,
    /// workloadRef references the Workload template this CompositePodGroup was created from. Required.
    /// Immutable.
    pub workload_ref: WorkloadReference,
    /// schedulingPolicy defines the scheduling policy (exactly one of basic and gang). The kind is frozen;
    /// gang.minGroupCount is mutable.
    pub scheduling_policy: CompositePodGroupSchedulingPolicy,
    /// schedulingConstraints defines optional scheduling constraints (e.g. topology). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_constraints: Option<CompositePodGroupSchedulingConstraints>,
    /// disruptionMode defines how the children can be disrupted (`single` or `all`). Defaults to
    /// `{single: {}}`. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"single": {}}))]
    pub disruption_mode: Option<CompositeDisruptionMode>,
    /// priorityClassName names the PriorityClass of the group. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = DNS1123_SUBDOMAIN_MAX_LENGTH), pattern(DNS1123_SUBDOMAIN_PATTERN))]
    pub priority_class_name: Option<String>,
    /// priority is the priority value of the group (at most 1e9). Immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_PRIORITY))]
    pub priority: Option<i32>,
    /// preemptionPolicy is the policy for preempting lower-priority pods and groups. Immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_policy: Option<PreemptionPolicy>,
    /// Phalanx addition (not in upstream): preemptionDelaySeconds is how long the group, once it could preempt,
    /// waits after its first unschedulable attempt before it evicts anything (0-86400), so that a cluster autoscaler
    /// can add nodes instead (KAI-Scheduler's `preemption-delay`). Meanwhile its pending members carry
    /// `PodScheduled=False/Unschedulable`. Unset: the scheduler configuration's `autoscaling.preemptionDelaySeconds`
    /// (default 0, preempt at once). Only a root's value counts: preemption runs for the whole tree. Mutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_PREEMPTION_DELAY_SECONDS))]
    pub preemption_delay_seconds: Option<i32>,
}

/// The observed state of a CompositePodGroup (upstream `CompositePodGroupStatus` plus Phalanx's
/// read-only counters).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositePodGroupStatus {
    /// conditions: `CompositePodGroupInitiallyScheduled` (terminal once True; reasons Scheduled,
    /// Unschedulable, SchedulerError, Invalid) and `DisruptionTarget` (reason PreemptionByScheduler).
    /// A list-map keyed by type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// Phalanx addition (not in upstream): the policy kind, `Basic` or `Gang`, for the `Policy` printer
    /// column. Read-only; written by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Phalanx addition (not in upstream): number of child groups (PodGroups and CompositePodGroups whose
    /// parentCompositePodGroupName names this group). Read-only; written by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub child_groups: Option<i32>,
    /// Phalanx addition (not in upstream): number of child groups whose `PodGroupInitiallyScheduled` or
    /// `CompositePodGroupInitiallyScheduled` condition is True.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub scheduled_child_groups: Option<i32>,
}

impl CompositePodGroupSpec {
    /// The disruption mode, with upstream's default (`single`) when unset.
    pub fn disruption_mode_or_default(&self) -> CompositeDisruptionMode {
        self.disruption_mode
            .clone()
            .unwrap_or_else(CompositeDisruptionMode::single)
    }

    /// The preemption policy, with upstream's default (`PreemptLowerPriority`) when unset.
    pub fn preemption_policy_or_default(&self) -> PreemptionPolicy {
        self.preemption_policy.unwrap_or_default()
    }
}
