//! The `Workload` kind (upstream `scheduling.k8s.io/v1beta1` `Workload`, KEP-4671): a namespaced set of
//! PodGroup and CompositePodGroup templates. Upstream gives it no status; Phalanx adds a read-only one.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use kube::{CustomResource, KubeSchema};
use schemars::{Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::policy::TypedLocalObjectReference;
use super::templates::{CompositePodGroupTemplate, PodGroupTemplate};
use crate::schema::{MAX_TEMPLATES, composite_templates_list};

/// The desired state of a Workload (upstream `WorkloadSpec`). Exactly one of `pod_group_templates` and
/// `composite_pod_group_templates` is set; templates cannot be added or removed after creation, and
/// inside them only `gang.minCount` and `gang.minGroupCount` may change.
///
/// Not checked by the schema (the controllers check them, as upstream's hand-written validation does):
/// template names unique across the whole tree, and one priority configuration for every template.
// kube-derive repeats `type_ = ...` once per printcolumn(...), which clippy mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "scheduling.phalanx.dev",
    version = "v1beta1",
    kind = "Workload",
    plural = "workloads",
    singular = "workload",
    shortname = "pwl",
    category = "phalanx",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    doc = "Workload expresses the scheduling structure of a workload as PodGroup and CompositePodGroup \
           templates (mirror of scheduling.k8s.io/v1beta1 Workload, Kubernetes 1.37).",
    status = "WorkloadStatus",
    printcolumn(
        name = "Templates",
        type_ = "integer",
        json_path = ".status.templates",
        description = "Number of templates in the whole template tree (counted by the Phalanx controller)"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::schema::exactly_one_of("podGroupTemplates", "compositePodGroupTemplates"))]
#[x_kube(validation = crate::schema::immutable("controllerRef"))]
#[x_kube(validation = crate::schema::no_add_remove("podGroupTemplates"))]
#[x_kube(validation = crate::schema::no_add_remove("compositePodGroupTemplates"))]
pub struct WorkloadSpec {
    /// controllerRef is an optional reference to the controlling object, such as a Job. Informational,
    /// for tools. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_ref: Option<TypedLocalObjectReference>,
    /// podGroupTemplates is the list of templates that make up the Workload (at most 8, unique names).
    /// Templates cannot be added or removed after creation. Exactly one of podGroupTemplates and
    /// compositePodGroupTemplates must be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_TEMPLATES))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub pod_group_templates: Option<Vec<PodGroupTemplate>>,
    /// compositePodGroupTemplates is the list of CompositePodGroup templates that make up the Workload (at
    /// most 8 per level, tree depth at most 4). Exactly one of podGroupTemplates and
    /// compositePodGroupTemplates must be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "workload_composite_templates")]
    pub composite_pod_group_templates: Option<Vec<CompositePodGroupTemplate>>,
}

impl WorkloadSpec {
    /// The number of templates in the whole tree: every PodGroupTemplate and CompositePodGroupTemplate at
    /// every depth. This is the value of the Phalanx status field `templates`.
    pub fn template_count(&self) -> i32 {
        fn composite(templates: &[CompositePodGroupTemplate]) -> i32 {
            templates
                .iter()
                .map(|t| {
                    1 + t.pod_group_templates.as_ref().map_or(0, |p| len_i32(p.len()))
                        + t.composite_pod_group_templates.as_deref().map_or(0, composite)
                })
                .sum()
        }
        self.pod_group_templates.as_ref().map_or(0, |p| len_i32(p.len()))
            + self.composite_pod_group_templates.as_deref().map_or(0, composite)
    }
}

/// A list length as i32, saturating (lists from the API are bounded far below i32::MAX anyway).
fn len_i32(len: usize) -> i32 {
    i32::try_from(len).unwrap_or(i32::MAX)
}

/// The observed state of a Workload. Upstream's Workload has no status: this whole struct is a Phalanx
/// addition, read-only, written by the controller for `kubectl get`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// Phalanx addition: the number of templates in the whole template tree (see
    /// `WorkloadSpec::template_count` in phalanx-api). Feeds the `Templates` printer column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub templates: Option<i32>,
    /// Phalanx addition: conditions written by the Workload controller. Type `Valid` reports whether the
    /// template tree passes the checks the schema cannot express (names unique across the tree, depth,
    /// one priority, `all` children under an `all` parent). A list-map keyed by type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// Phalanx addition: for each template in the tree, how many PodGroups and CompositePodGroups
    /// reference it through `spec.workloadRef.templateName`. A list-map keyed by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub template_groups: Option<Vec<WorkloadTemplateGroups>>,
}

/// Phalanx addition: the number of groups that reference one Workload template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadTemplateGroups {
    /// name of the template (a PodGroupTemplate or CompositePodGroupTemplate anywhere in the tree).
    pub name: String,
    /// groups is the number of PodGroups plus CompositePodGroups whose `spec.workloadRef.templateName`
    /// names this template.
    #[schemars(range(min = 0))]
    pub groups: i32,
}

/// Schema of `Workload.spec.compositePodGroupTemplates`: the CompositePodGroupTemplate tree unrolled to
/// [`MAX_TREE_DEPTH`](crate::schema::MAX_TREE_DEPTH). Composite templates may appear at depths 1 to 3; at depth 3
/// the nested `compositePodGroupTemplates` list must be empty (message
/// [`MAX_DEPTH_MESSAGE`](crate::schema::MAX_DEPTH_MESSAGE)), so the schema itself enforces the depth limit.
/// PodGroupTemplates may appear at every depth up to 4. Here, with the field, rather than in [`crate::schema`]:
/// it names the template type, and the templates module builds on `schema`'s rules.
fn workload_composite_templates(generator: &mut SchemaGenerator) -> Schema {
    let template = generator.subschema_for::<CompositePodGroupTemplate>().to_value();
    let mut list = composite_templates_list(&template, 1);
    if let Some(obj) = list.as_object_mut() {
        obj.insert(
            "description".into(),
            json!(
                "compositePodGroupTemplates is the list of CompositePodGroup templates that make up the \
                 Workload. The maximum number of templates is 8. Templates cannot be added or removed \
                 after the workload is created. Exactly one of compositePodGroupTemplates and \
                 podGroupTemplates must be set."
            ),
        );
    }
    Schema::try_from(list).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1beta1::{CompositePodGroupSchedulingPolicy, PodGroupSchedulingPolicy, PolicyKind};

    fn leaf(name: &str) -> PodGroupTemplate {
        PodGroupTemplate {
            name: name.into(),
            scheduling_policy: PodGroupSchedulingPolicy::gang(2),
            ..Default::default()
        }
    }

    #[test]
    fn template_count_covers_the_whole_tree() {
        let flat = WorkloadSpec {
            pod_group_templates: Some(vec![leaf("a"), leaf("b")]),
            ..Default::default()
        };
        assert_eq!(flat.template_count(), 2);
        let inner = CompositePodGroupTemplate {
            name: "rack".into(),
            scheduling_policy: CompositePodGroupSchedulingPolicy::basic(),
            pod_group_templates: Some(vec![leaf("leader"), leaf("workers")]),
            ..Default::default()
        };
        let root = CompositePodGroupTemplate {
            name: "job".into(),
            scheduling_policy: CompositePodGroupSchedulingPolicy::gang(1),
            pod_group_templates: Some(vec![leaf("driver")]),
            composite_pod_group_templates: Some(vec![inner]),
            ..Default::default()
        };
        let tree = WorkloadSpec {
            composite_pod_group_templates: Some(vec![root]),
            ..Default::default()
        };
        // job, driver, rack, leader, workers
        assert_eq!(tree.template_count(), 5);
        assert_eq!(WorkloadSpec::default().template_count(), 0);
    }

    #[test]
    fn policy_helpers() {
        assert_eq!(PodGroupSchedulingPolicy::gang(3).min_count(), Some(3));
        assert_eq!(PodGroupSchedulingPolicy::gang(3).kind(), Some(PolicyKind::Gang));
        assert_eq!(PodGroupSchedulingPolicy::basic().min_count(), None);
        assert_eq!(
            PodGroupSchedulingPolicy::basic().kind().map(PolicyKind::as_str),
            Some("Basic")
        );
        assert_eq!(PodGroupSchedulingPolicy::default().kind(), None);
        assert_eq!(
            CompositePodGroupSchedulingPolicy::gang(2).min_group_count(),
            Some(2)
        );
    }

    #[test]
    fn json_uses_upstream_names() {
        let spec = WorkloadSpec {
            pod_group_templates: Some(vec![leaf("a")]),
            ..Default::default()
        };
        let json = serde_json::to_value(&spec).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({"podGroupTemplates": [{"name": "a", "schedulingPolicy": {"gang": {"minCount": 2}}}]})
        );
    }
}
