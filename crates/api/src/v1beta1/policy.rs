//! Scheduling policies, constraints, disruption modes and references shared by Workload templates,
//! PodGroup and CompositePodGroup.
//!
//! Mirrors `staging/src/k8s.io/api/scheduling/v1beta1/types.go` (Kubernetes 1.37) field for field; the JSON
//! names are upstream's. Unions are structs of optional members with a CEL exactly-one rule.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::{
    DNS1123_LABEL_MAX_LENGTH, DNS1123_LABEL_PATTERN, DNS1123_SUBDOMAIN_MAX_LENGTH, DNS1123_SUBDOMAIN_PATTERN,
    LABEL_KEY_PATTERN, QUALIFIED_NAME_MAX_LENGTH,
};

/// Basic scheduling: the group's pods are scheduled one by one with standard Kubernetes behaviour.
/// An empty object (`basic: {}`); upstream `BasicSchedulingPolicy`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BasicSchedulingPolicy {}

/// Gang scheduling: all-or-nothing admission of at least `min_count` pods; upstream `GangSchedulingPolicy`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GangSchedulingPolicy {
    /// minCount is the minimum number of pods that must be schedulable or scheduled at the same time for
    /// the scheduler to admit the entire group. It must be a positive integer. This field is mutable to
    /// support workload scaling; it is enforced only during scheduling (lowering it never evicts pods).
    #[schemars(range(min = 1))]
    pub min_count: i32,
}

/// The scheduling policy of a PodGroup or PodGroupTemplate: exactly one of `basic` and `gang`
/// (upstream `PodGroupSchedulingPolicy`). The chosen member is frozen at creation; `gang.minCount` stays
/// mutable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::schema::exactly_one_of("basic", "gang"))]
#[x_kube(validation = crate::schema::variant_frozen("basic", "gang", "scheduling policy"))]
pub struct PodGroupSchedulingPolicy {
    /// basic specifies that the pods in this group should be scheduled using standard Kubernetes
    /// scheduling behavior. It cannot be set or unset after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<BasicSchedulingPolicy>,
    /// gang specifies that the pods in this group should be scheduled using all-or-nothing semantics.
    /// It cannot be set or unset after creation; `gang.minCount` remains mutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<GangSchedulingPolicy>,
}

impl PodGroupSchedulingPolicy {
    /// A gang policy with the given `minCount`.
    pub fn gang(min_count: i32) -> Self {
        Self {
            basic: None,
            gang: Some(GangSchedulingPolicy { min_count }),
        }
    }

    /// A basic policy.
    pub fn basic() -> Self {
        Self {
            basic: Some(BasicSchedulingPolicy {}),
            gang: None,
        }
    }

    /// `gang.minCount` when the policy is gang, `None` for basic (or an invalid, empty policy).
    pub fn min_count(&self) -> Option<i32> {
        self.gang.as_ref().map(|g| g.min_count)
    }

    /// The policy kind for display (`"Gang"`, `"Basic"`, or `None` when neither member is set).
    pub fn kind(&self) -> Option<PolicyKind> {
        match (&self.basic, &self.gang) {
            (_, Some(_)) => Some(PolicyKind::Gang),
            (Some(_), None) => Some(PolicyKind::Basic),
            (None, None) => None,
        }
    }
}

/// The kind of a scheduling policy. Its string form (`Basic`, `Gang`) is what the controllers write to the
/// Phalanx status field `policy`, which feeds the `Policy` printer column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// `basic: {}`
    Basic,
    /// `gang: {...}`
    Gang,
}

impl PolicyKind {
    /// `"Basic"` or `"Gang"`.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Basic => "Basic",
            PolicyKind::Gang => "Gang",
        }
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Basic composite scheduling: child groups are scheduled independently. An empty object; upstream
/// `CompositeBasicSchedulingPolicy`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CompositeBasicSchedulingPolicy {}

/// Composite gang scheduling: all-or-nothing admission of at least `min_group_count` child groups;
/// upstream `CompositeGangSchedulingPolicy`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositeGangSchedulingPolicy {
    /// minGroupCount is the minimum number of child groups that must be schedulable or scheduled at the
    /// same time for the scheduler to admit the entire group. It must be a positive integer. Mutable.
    #[schemars(range(min = 1))]
    pub min_group_count: i32,
}

/// The scheduling policy of a CompositePodGroup or its template: exactly one of `basic` and `gang`
/// (upstream `CompositePodGroupSchedulingPolicy`). The chosen member is frozen; `gang.minGroupCount` is
/// mutable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::schema::exactly_one_of("basic", "gang"))]
#[x_kube(validation = crate::schema::variant_frozen("basic", "gang", "scheduling policy"))]
pub struct CompositePodGroupSchedulingPolicy {
    /// basic specifies that the groups of this composite group should be scheduled independently.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<CompositeBasicSchedulingPolicy>,
    /// gang specifies that the groups of this composite group should be scheduled using all-or-nothing
    /// semantics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<CompositeGangSchedulingPolicy>,
}

impl CompositePodGroupSchedulingPolicy {
    /// A gang policy with the given `minGroupCount`.
    pub fn gang(min_group_count: i32) -> Self {
        Self {
            basic: None,
            gang: Some(CompositeGangSchedulingPolicy { min_group_count }),
        }
    }

    /// A basic policy.
    pub fn basic() -> Self {
        Self {
            basic: Some(CompositeBasicSchedulingPolicy {}),
            gang: None,
        }
    }

    /// `gang.minGroupCount` when the policy is gang.
    pub fn min_group_count(&self) -> Option<i32> {
        self.gang.as_ref().map(|g| g.min_group_count)
    }

    /// The policy kind for display.
    pub fn kind(&self) -> Option<PolicyKind> {
        match (&self.basic, &self.gang) {
            (_, Some(_)) => Some(PolicyKind::Gang),
            (Some(_), None) => Some(PolicyKind::Basic),
            (None, None) => None,
        }
    }
}

/// One topology constraint: all pods of the group must land in one domain of the node label `key`
/// (upstream `TopologyConstraint`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyConstraint {
    /// key specifies the key of the node label representing the topology domain. All pods within the group
    /// must be colocated within the same domain instance. Example: "topology.kubernetes.io/rack".
    #[schemars(length(min = 1, max = QUALIFIED_NAME_MAX_LENGTH), pattern(LABEL_KEY_PATTERN))]
    pub key: String,
}

/// One preferred topology level (a Phalanx addition): the group lands in one domain of the node label `key` when
/// one can hold it; otherwise the next level, or no level, is tried. It never makes a group unschedulable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyPreference {
    /// key is the node label of this level's domains, for example "topology.kubernetes.io/rack". The group is kept
    /// inside one domain of it when one can hold the group.
    #[schemars(length(min = 1, max = QUALIFIED_NAME_MAX_LENGTH), pattern(LABEL_KEY_PATTERN))]
    pub key: String,
}

/// Scheduling constraints of a PodGroup (upstream `PodGroupSchedulingConstraints`). Immutable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSchedulingConstraints {
    /// topology defines the topology constraints for the pod group. Currently only a single topology
    /// constraint can be specified. An empty list is written as an absent field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::schema::MAX_TOPOLOGY_CONSTRAINTS))]
    #[x_kube(merge_strategy = ListMerge::Atomic)]
    pub topology: Vec<TopologyConstraint>,
    /// preferredTopology is a Phalanx addition (upstream has no such field; KEP-5732 lists preferred
    /// constraints as future work): soft topology levels, narrowest first, for example
    /// `[{key: block}, {key: rack}, {key: zone}]`. The group lands in one domain of the first level that can
    /// hold it, else of the next, else anywhere (within the required `topology` domain, when one is set). At
    /// most 8 levels with unique keys. An empty list is written as an absent field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::schema::MAX_PREFERRED_TOPOLOGY_LEVELS))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["key".into()]))]
    pub preferred_topology: Vec<TopologyPreference>,
}

/// Scheduling constraints of a CompositePodGroup (upstream `CompositePodGroupSchedulingConstraints`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositePodGroupSchedulingConstraints {
    /// topology defines the topology constraints for the composite pod group. Currently only a single
    /// topology constraint can be specified. An empty list is written as an absent field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::schema::MAX_TOPOLOGY_CONSTRAINTS))]
    #[x_kube(merge_strategy = ListMerge::Atomic)]
    pub topology: Vec<TopologyConstraint>,
    /// preferredTopology is a Phalanx addition, as on a PodGroup: soft levels, narrowest first; the whole
    /// subtree lands in one domain of the first level that can hold it, else of the next, else anywhere
    /// (within the required `topology` domain). At most 8 levels with unique keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = crate::schema::MAX_PREFERRED_TOPOLOGY_LEVELS))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["key".into()]))]
    pub preferred_topology: Vec<TopologyPreference>,
}

/// `single: {}`: children can be disrupted independently (upstream `SingleDisruptionMode`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SingleDisruptionMode {}

/// `all: {}`: children can only be disrupted together (upstream `AllDisruptionMode`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AllDisruptionMode {}

/// How the pods of a group can be disrupted: exactly one of `single` and `all` (upstream `DisruptionMode`).
/// A PodGroup defaults to `{single: {}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::schema::exactly_one_of("single", "all"))]
pub struct DisruptionMode {
    /// single specifies that children can be disrupted independently from each other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub single: Option<SingleDisruptionMode>,
    /// all specifies that all children can only be disrupted together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<AllDisruptionMode>,
}

impl DisruptionMode {
    /// `{single: {}}`, upstream's default.
    pub fn single() -> Self {
        Self {
            single: Some(SingleDisruptionMode {}),
            all: None,
        }
    }

    /// `{all: {}}`.
    pub fn all() -> Self {
        Self {
            single: None,
            all: Some(AllDisruptionMode {}),
        }
    }

    /// True for `all` (the group is disrupted as a whole).
    pub fn is_all(&self) -> bool {
        self.all.is_some()
    }
}

/// `single: {}` for composite groups (upstream `SingleCompositeDisruptionMode`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SingleCompositeDisruptionMode {}

/// `all: {}` for composite groups (upstream `AllCompositeDisruptionMode`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AllCompositeDisruptionMode {}

/// How the children of a CompositePodGroup can be disrupted: exactly one of `single` and `all` (upstream
/// `CompositeDisruptionMode`). Defaults to `{single: {}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::schema::exactly_one_of("single", "all"))]
pub struct CompositeDisruptionMode {
    /// single specifies that children groups can be disrupted independently from each other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub single: Option<SingleCompositeDisruptionMode>,
    /// all specifies that all children groups can only be disrupted together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<AllCompositeDisruptionMode>,
}

impl CompositeDisruptionMode {
    /// `{single: {}}`, upstream's default.
    pub fn single() -> Self {
        Self {
            single: Some(SingleCompositeDisruptionMode {}),
            all: None,
        }
    }

    /// `{all: {}}`.
    pub fn all() -> Self {
        Self {
            single: None,
            all: Some(AllCompositeDisruptionMode {}),
        }
    }

    /// True for `all`.
    pub fn is_all(&self) -> bool {
        self.all.is_some()
    }
}

/// preemptionPolicy: `PreemptLowerPriority` (the default) lets the group preempt lower-priority pods and groups;
/// `Never` disables preemption for it (upstream `core/v1 PreemptionPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PreemptionPolicy {
    /// The group may preempt lower-priority pods and groups (upstream default).
    #[default]
    PreemptLowerPriority,
    /// The group never preempts.
    Never,
}

/// The Workload template a group was created from (upstream `WorkloadReference`). Immutable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadReference {
    /// workloadName is the name of the Workload object (in the same namespace) that contains the
    /// template. It must be a DNS subdomain.
    #[schemars(length(min = 1, max = DNS1123_SUBDOMAIN_MAX_LENGTH), pattern(DNS1123_SUBDOMAIN_PATTERN))]
    pub workload_name: String,
    /// templateName is the name of a template within the Workload object that was used to create the
    /// group. It must be a DNS label.
    #[schemars(length(min = 1, max = DNS1123_LABEL_MAX_LENGTH), pattern(DNS1123_LABEL_PATTERN))]
    pub template_name: String,
}

/// A reference to a typed object in the same namespace (upstream scheduling `TypedLocalObjectReference`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TypedLocalObjectReference {
    /// apiGroup is the group of the referenced resource; empty means the core API group. It must be a
    /// DNS subdomain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = DNS1123_SUBDOMAIN_MAX_LENGTH), pattern(DNS1123_SUBDOMAIN_PATTERN))]
    pub api_group: Option<String>,
    /// kind is the type of resource being referenced. It must be a path segment name.
    #[schemars(length(min = 1, max = DNS1123_SUBDOMAIN_MAX_LENGTH))]
    #[x_kube(validation = crate::schema::path_segment_rule("kind"))]
    pub kind: String,
    /// name is the name of resource being referenced. It must be a path segment name.
    #[schemars(length(min = 1, max = DNS1123_SUBDOMAIN_MAX_LENGTH))]
    #[x_kube(validation = crate::schema::path_segment_rule("name"))]
    pub name: String,
}

/// A ResourceClaim shared by the whole group (upstream `PodGroupResourceClaim`, KEP-5729): exactly one of
/// `resource_claim_name` and `resource_claim_template_name`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::schema::exactly_one_of("resourceClaimName", "resourceClaimTemplateName"))]
pub struct PodGroupResourceClaim {
    /// name uniquely identifies this resource claim inside the PodGroup. It must be a DNS label.
    #[schemars(length(min = 1, max = DNS1123_LABEL_MAX_LENGTH), pattern(DNS1123_LABEL_PATTERN))]
    pub name: String,
    /// resourceClaimName is the name of a ResourceClaim in the same namespace, reserved for the PodGroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = DNS1123_SUBDOMAIN_MAX_LENGTH), pattern(DNS1123_SUBDOMAIN_PATTERN))]
    pub resource_claim_name: Option<String>,
    /// resourceClaimTemplateName is the name of a ResourceClaimTemplate in the same namespace; one claim is
    /// generated per PodGroup and recorded in `status.resourceClaimStatuses`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = DNS1123_SUBDOMAIN_MAX_LENGTH), pattern(DNS1123_SUBDOMAIN_PATTERN))]
    pub resource_claim_template_name: Option<String>,
}

/// The generated claim for one `spec.resourceClaims` entry (upstream `PodGroupResourceClaimStatus`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupResourceClaimStatus {
    /// name matches the name of an entry in `spec.resourceClaims`.
    #[schemars(length(min = 1, max = DNS1123_LABEL_MAX_LENGTH), pattern(DNS1123_LABEL_PATTERN))]
    pub name: String,
    /// resourceClaimName is the name of the generated ResourceClaim; unset when none was needed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = DNS1123_SUBDOMAIN_MAX_LENGTH))]
    pub resource_claim_name: Option<String>,
}
