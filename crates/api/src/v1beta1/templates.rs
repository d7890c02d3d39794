//! Templates inside a Workload: `PodGroupTemplate` and the recursive `CompositePodGroupTemplate`
//! (upstream `v1beta1` types, KEP-4671 and KEP-6012).

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::policy::{
    CompositeDisruptionMode, CompositePodGroupSchedulingConstraints, CompositePodGroupSchedulingPolicy,
    DisruptionMode, PodGroupResourceClaim, PodGroupSchedulingConstraints, PodGroupSchedulingPolicy,
    PreemptionPolicy,
};
use super::recovery::RecoveryPolicy;
use crate::schema::{
    DNS1123_LABEL_MAX_LENGTH, DNS1123_LABEL_PATTERN, DNS1123_SUBDOMAIN_MAX_LENGTH, DNS1123_SUBDOMAIN_PATTERN,
    MAX_PRIORITY, MAX_RESOURCE_CLAIMS, MAX_TEMPLATES,
};

/// A template for a set of pods with a scheduling policy (upstream `PodGroupTemplate`). Controllers copy
/// it into PodGroups. Every field is immutable except `schedulingPolicy.gang.minCount`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::schema::immutable("schedulingConstraints"))]
#[x_kube(validation = crate::schema::immutable("resourceClaims"))]
#[x_kube(validation = crate::schema::immutable("disruptionMode"))]
#[x_kube(validation = crate::schema::immutable("priorityClassName"))]
#[x_kube(validation = crate::schema::set_once("priority"))]
#[x_kube(validation = crate::schema::set_once("preemptionPolicy"))]
pub struct PodGroupTemplate {
    /// name is a unique identifier for the PodGroupTemplate within the Workload. It must be a DNS label.
    #[schemars(length(min = 1, max = DNS1123_LABEL_MAX_LENGTH), pattern(DNS1123_LABEL_PATTERN))]
    pub name: String,
    /// schedulingPolicy defines the scheduling policy for this PodGroupTemplate.
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
    /// disruptionMode defines how a PodGroup created from this template can be disrupted (`single` or
    /// `all`). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption_mode: Option<DisruptionMode>,
    /// priorityClassName indicates the priority of pod groups created from this template. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = DNS1123_SUBDOMAIN_MAX_LENGTH), pattern(DNS1123_SUBDOMAIN_PATTERN))]
    pub priority_class_name: Option<String>,
    /// priority is the priority value of pod groups created from this template (at most 1e9).
    /// Immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_PRIORITY))]
    pub priority: Option<i32>,
    /// preemptionPolicy is the policy for preempting lower-priority pods and groups. One of
    /// PreemptLowerPriority, Never. Immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_policy: Option<PreemptionPolicy>,
    /// Phalanx addition (not in upstream): recoveryPolicy of PodGroups created from this template (see
    /// PodGroup `spec.recoveryPolicy`). Mutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_policy: Option<RecoveryPolicy>,
}

/// A template for a CompositePodGroup (upstream `CompositePodGroupTemplate`, KEP-6012). Children are
/// PodGroupTemplates and/or further CompositePodGroupTemplates; at least one list must be set. The tree
/// depth is limited to 4: the generated schema unrolls the tree to that depth.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.podGroupTemplates) || has(self.compositePodGroupTemplates)")
    .message("must have at least one child PodGroupTemplate or CompositePodGroupTemplate"))]
#[x_kube(validation = Rule::new(
    "!has(self.podGroupTemplates) || !has(self.compositePodGroupTemplates) || \
     !self.podGroupTemplates.exists(p, self.compositePodGroupTemplates.exists(c, c.name == p.name))")
    .message("template names must be unique: a name is used by both podGroupTemplates and compositePodGroupTemplates"))]
#[x_kube(validation = crate::schema::no_add_remove("podGroupTemplates"))]
#[x_kube(validation = crate::schema::no_add_remove("compositePodGroupTemplates"))]
#[x_kube(validation = crate::schema::immutable("schedulingConstraints"))]
#[x_kube(validation = crate::schema::immutable("disruptionMode"))]
#[x_kube(validation = crate::schema::immutable("priorityClassName"))]
#[x_kube(validation = crate::schema::set_once("priority"))]
#[x_kube(validation = crate::schema::set_once("preemptionPolicy"))]
pub struct CompositePodGroupTemplate {
    /// name is a unique identifier for the template within the Workload. It must be a DNS label.
    #[schemars(length(min = 1, max = DNS1123_LABEL_MAX_LENGTH), pattern(DNS1123_LABEL_PATTERN))]
    pub name: String,
    /// schedulingPolicy defines the scheduling policy for this template.
    pub scheduling_policy: CompositePodGroupSchedulingPolicy,
    /// schedulingConstraints defines optional scheduling constraints (e.g. topology). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_constraints: Option<CompositePodGroupSchedulingConstraints>,
    /// disruptionMode defines how a CompositePodGroup created from this template can be disrupted.
    /// Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption_mode: Option<CompositeDisruptionMode>,
    /// priorityClassName indicates the priority of composite pod groups created from this template.
    /// Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = DNS1123_SUBDOMAIN_MAX_LENGTH), pattern(DNS1123_SUBDOMAIN_PATTERN))]
    pub priority_class_name: Option<String>,
    /// priority is the priority value of composite pod groups created from this template (at most 1e9).
    /// Immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = MAX_PRIORITY))]
    pub priority: Option<i32>,
    /// preemptionPolicy is the policy for preempting lower-priority pods and groups. Immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_policy: Option<PreemptionPolicy>,
    /// podGroupTemplates is the list of templates for child PodGroups (at most 8, unique names). Templates
    /// cannot be added or removed after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_TEMPLATES))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub pod_group_templates: Option<Vec<PodGroupTemplate>>,
    /// compositePodGroupTemplates is the list of templates for child CompositePodGroups (at most 8, unique
    /// names, tree depth at most 4). Templates cannot be added or removed after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::composite_templates_placeholder")]
    pub composite_pod_group_templates: Option<Vec<CompositePodGroupTemplate>>,
}
