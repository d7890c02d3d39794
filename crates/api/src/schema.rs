//! Building blocks for the generated OpenAPI schemas: upstream's name formats, CEL rule constructors for
//! unions and immutability, and the unrolled (depth-limited) CompositePodGroupTemplate tree.
//!
//! Upstream expresses these as declarative validation tags (`+k8s:format`, `+k8s:unionMember`,
//! `+k8s:immutable`, `+k8s:maxItems`) in `staging/src/k8s.io/api/scheduling/v1beta1/types.go` and hand-written
//! checks in `pkg/apis/scheduling/validation/validation.go`. A CRD can only carry OpenAPI keywords and CEL
//! (`x-kubernetes-validations`), so each rule here is the CRD spelling of one of those checks. Every
//! message names the field, and rules on a sub-field set `fieldPath` so the apiserver reports the full path
//! (for example `spec.workloadRef: Invalid value: "object": workloadRef is immutable`).

use kube::core::{Message, Reason, Rule};
use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

/// `k8s-short-name`: a DNS-1123 label (at most 63 characters; upstream `IsDNS1123Label`).
pub const DNS1123_LABEL_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// Maximum length of a DNS-1123 label.
pub const DNS1123_LABEL_MAX_LENGTH: u32 = 63;
/// `k8s-long-name`: a DNS-1123 subdomain (at most 253 characters; upstream `IsDNS1123Subdomain`).
pub const DNS1123_SUBDOMAIN_PATTERN: &str =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// Maximum length of a DNS-1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: u32 = 253;
/// Maximum length of a qualified name (`prefix/name`): a 253-character prefix, `/`, a 63-character name.
pub const QUALIFIED_NAME_MAX_LENGTH: u32 = 317;

/// Upstream `WorkloadMaxPodGroupTemplates` (and the same limit for composite templates): 8.
pub const MAX_TEMPLATES: u32 = 8;
/// Upstream `WorkloadMaxTreeDepth`: a template tree has at most 4 levels (3 composite levels plus a leaf
/// PodGroupTemplate level). A top-level CompositePodGroupTemplate is at depth 1.
pub const MAX_TREE_DEPTH: u32 = 4;
/// Upstream `HighestUserDefinablePriority`: 1e9.
pub const MAX_PRIORITY: i32 = 1_000_000_000;
/// Upper bound of `spec.preemptionDelaySeconds` (Phalanx addition): one day, as the scheduler configuration's
/// `autoscaling.preemptionDelaySeconds`.
pub const MAX_PREEMPTION_DELAY_SECONDS: i32 = 86_400;
/// Maximum number of `resourceClaims` on a PodGroup or PodGroupTemplate (upstream maxItems 4).
pub const MAX_RESOURCE_CLAIMS: u32 = 4;
/// Maximum number of topology constraints (upstream maxItems 1).
pub const MAX_TOPOLOGY_CONSTRAINTS: u32 = 1;
/// Maximum number of `preferredTopology` levels (a Phalanx addition; block, rack, zone and a few more).
pub const MAX_PREFERRED_TOPOLOGY_LEVELS: u32 = 8;

/// `k8s-label-key` (upstream `IsQualifiedName`): an optional DNS-1123 subdomain prefix and `/`, then a name
/// of at most 63 characters of alphanumerics, `-`, `_` or `.` that starts and ends with an alphanumeric.
///
/// A pattern rather than CEL's `format.qualifiedName()`: the key also appears at depth 4 of the unrolled
/// template tree (up to 4096 instances), where a CEL rule exceeds the apiserver's cost budget. The total
/// length is capped at [`QUALIFIED_NAME_MAX_LENGTH`]; the 253-character bound on the prefix alone is not
/// expressible in RE2 and is left to the scheduler, which ignores keys no node label can carry.
pub const LABEL_KEY_PATTERN: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

/// CEL for upstream's `k8s-path-segment-name`: any name except `.` and `..` that contains no `/` or `%`.
pub(crate) fn path_segment_rule(field: &str) -> Rule {
    Rule::new("self != '.' && self != '..' && !self.contains('/') && !self.contains('%')").message(
        Message::Message(format!(
            "{field} may not be '.' or '..' and may not contain '/' or '%'"
        )),
    )
}

/// Exactly one of the optional members `a` and `b` of a union is set (upstream `+k8s:unionMember`,
/// message "must specify exactly one of: `a`, `b`").
pub(crate) fn exactly_one_of(a: &str, b: &str) -> Rule {
    Rule::new(format!("has(self.{a}) != has(self.{b})")).message(Message::Message(format!(
        "must specify exactly one of: `{a}`, `{b}`"
    )))
}

/// Transition rule: the optional field `field` may not be added, removed or changed after creation.
pub(crate) fn immutable(field: &str) -> Rule {
    Rule::new(format!(
        "has(self.{field}) == has(oldSelf.{field}) && (!has(self.{field}) || self.{field} == oldSelf.{field})"
    ))
    .message(Message::Message(format!("{field} is immutable")))
    .field_path(format!(".{field}"))
    .reason(Reason::FieldValueForbidden)
}

/// Transition rule: the optional field `field` may be set once (when it was absent) and is immutable
/// afterwards. Used for `priority` and `preemptionPolicy`: upstream's Priority admission fills them on
/// create, and Phalanx has no admission webhook, so its controller must be able to fill them later.
pub(crate) fn set_once(field: &str) -> Rule {
    Rule::new(format!(
        "!has(oldSelf.{field}) || (has(self.{field}) && self.{field} == oldSelf.{field})"
    ))
    .message(Message::Message(format!("{field} is immutable once set")))
    .field_path(format!(".{field}"))
    .reason(Reason::FieldValueForbidden)
}

/// Transition rule for a union struct whose chosen member is frozen (upstream `NoSet`/`NoUnset` on each
/// member), while fields inside the chosen member may stay mutable.
pub(crate) fn variant_frozen(a: &str, b: &str, what: &str) -> Rule {
    Rule::new(format!(
        "has(self.{a}) == has(oldSelf.{a}) && has(self.{b}) == has(oldSelf.{b})"
    ))
    .message(Message::Message(format!(
        "the {what} kind (`{a}` or `{b}`) is immutable"
    )))
    .reason(Reason::FieldValueForbidden)
}

/// Transition rule for a list-map of templates keyed by `name`: items may not be added or removed
/// (upstream `NoAddItem`/`NoRemoveItem`). Existing items keep their own per-field rules.
pub(crate) fn no_add_remove(field: &str) -> Rule {
    Rule::new(format!(
        "has(self.{field}) == has(oldSelf.{field}) && (!has(self.{field}) || \
         (self.{field}.size() == oldSelf.{field}.size() && \
         self.{field}.all(t, oldSelf.{field}.exists(o, o.name == t.name))))"
    ))
    .message(Message::Message(format!(
        "{field} may not be added or removed after creation"
    )))
    .field_path(format!(".{field}"))
    .reason(Reason::FieldValueForbidden)
}

/// Inserts `x-kubernetes-list-type: map` keyed by `key` into a list schema.
fn list_map(schema: &mut Value, key: &str) {
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("x-kubernetes-list-type".into(), json!("map"));
        obj.insert("x-kubernetes-list-map-keys".into(), json!([key]));
    }
}

/// The message of the depth check, as upstream's `ValidateWorkloadSpec` words it.
pub const MAX_DEPTH_MESSAGE: &str = "maximum template hierarchy depth is 4";

/// Placeholder for the recursive `compositePodGroupTemplates` field of a CompositePodGroupTemplate.
///
/// A structural CRD schema cannot recurse, and schemars would emit a `$ref` for the cycle. The placeholder
/// is replaced by [`composite_templates_list`] when the tree is unrolled from the Workload spec
/// ([`crate::v1beta1::WorkloadSpec`]'s schema).
pub(crate) fn composite_templates_placeholder(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "array", "items": {"type": "object"}})
}

/// A list of composite templates whose items sit at `depth` (1-based).
pub(crate) fn composite_templates_list(template: &Value, depth: u32) -> Value {
    let mut item = template.clone();
    if let Some(props) = item.get_mut("properties").and_then(Value::as_object_mut) {
        let nested = if depth + 1 < MAX_TREE_DEPTH {
            composite_templates_list(template, depth + 1)
        } else {
            // Children of this template would be composite templates at depth MAX_TREE_DEPTH: invalid.
            // The items keep a typed `name` so that the parent's rules (which compare names) compile.
            let mut forbidden = json!({
                "type": "array",
                "maxItems": MAX_TEMPLATES,
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string", "maxLength": DNS1123_LABEL_MAX_LENGTH}},
                    "x-kubernetes-preserve-unknown-fields": true,
                },
                "x-kubernetes-validations": [{"rule": "size(self) == 0", "message": MAX_DEPTH_MESSAGE}],
            });
            list_map(&mut forbidden, "name");
            forbidden
        };
        let description = props
            .get("compositePodGroupTemplates")
            .and_then(|p| p.get("description"))
            .cloned();
        let mut nested = nested;
        if let (Some(obj), Some(description)) = (nested.as_object_mut(), description) {
            obj.insert("description".into(), description);
        }
        props.insert("compositePodGroupTemplates".into(), nested);
    }
    let mut list = json!({
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_TEMPLATES,
        "items": item,
    });
    list_map(&mut list, "name");
    list
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use serde_json::Value;

    use super::*;
    use crate::v1beta1::Workload;

    fn workload_spec_schema() -> Value {
        let crd = serde_json::to_value(Workload::crd()).unwrap_or_default();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
    }

    /// The composite template tree is unrolled to exactly three composite levels; the fourth level's list
    /// carries the depth rule, and PodGroupTemplates are allowed at every level.
    #[test]
    fn composite_tree_is_unrolled_to_the_depth_limit() {
        let mut list = workload_spec_schema()["properties"]["compositePodGroupTemplates"].clone();
        for depth in 1..MAX_TREE_DEPTH {
            assert_eq!(list["type"], "array", "depth {depth}");
            assert_eq!(list["maxItems"], MAX_TEMPLATES, "depth {depth}");
            assert_eq!(
                list["x-kubernetes-list-type"], "map",
                "depth {depth}: transition rules need a map list"
            );
            let item = &list["items"];
            assert_eq!(item["properties"]["name"]["type"], "string", "depth {depth}");
            assert_eq!(
                item["properties"]["podGroupTemplates"]["type"], "array",
                "depth {depth}"
            );
            list = item["properties"]["compositePodGroupTemplates"].clone();
        }
        let rules = list["x-kubernetes-validations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0]["rule"], "size(self) == 0");
        assert_eq!(rules[0]["message"], MAX_DEPTH_MESSAGE);
        assert!(
            list["items"]["properties"]
                .get("compositePodGroupTemplates")
                .is_none()
        );
    }

    /// A structural schema has no references or combinators left.
    #[test]
    fn generated_crds_have_no_refs_or_combinators() {
        let text = serde_json::to_string(&crate::crds::all()).unwrap_or_default();
        for forbidden in ["\"$ref\"", "\"anyOf\"", "\"oneOf\"", "\"allOf\"", "\"$defs\""] {
            assert!(!text.contains(forbidden), "generated CRDs contain {forbidden}");
        }
    }

    #[test]
    fn rule_constructors_name_the_field() {
        let rule = immutable("workloadRef");
        assert_eq!(rule.field_path.as_deref(), Some(".workloadRef"));
        assert!(
            serde_json::to_string(&rule)
                .unwrap_or_default()
                .contains("workloadRef is immutable")
        );
        let rule = set_once("priority");
        assert_eq!(rule.field_path.as_deref(), Some(".priority"));
        assert_eq!(
            exactly_one_of("basic", "gang").rule,
            "has(self.basic) != has(self.gang)"
        );
    }
}
