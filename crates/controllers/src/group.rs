//! Steps shared by the PodGroup and CompositePodGroup controllers: the protection finalizer and the
//! PriorityClass resolution, sent as one merge patch guarded by `resourceVersion`.
//!
//! Where the resolved priority goes: upstream's Priority admission plugin writes `spec.priority` and
//! `spec.preemptionPolicy` at creation. Phalanx's CRDs allow exactly that transition (CEL: the fields are
//! immutable once set, unset -> set is allowed), so the controller fills them **once, when unset**, and the
//! scheduler and `kubectl` read one place. A value the user set explicitly is kept as is (the fields are set-once),
//! but where upstream admission would refuse it (a `priority` other than the class's, `PreemptLowerPriority` under a
//! class that says `Never`; [`phalanx_store::priority::check_written`]) the group is `Valid=False` naming the field,
//! because the scheduler uses the class's value, not the written one. Who wrote a field is read from
//! `metadata.managedFields` ([`written_by_author`]).
//!
//! Where the chart's MutatingAdmissionPolicies are installed (`charts/phalanx/files/admission-policies.yaml`,
//! Kubernetes 1.36 and later), the API server adds the finalizer and fills both fields at creation, exactly as this
//! patch would, so [`ensure_meta`] finds nothing missing and sends nothing; elsewhere its patch is the fallback.

use std::fmt::Debug;

use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use phalanx_api::v1beta1::PreemptionPolicy;

use crate::checks;
use crate::context::{Context, FIELD_MANAGER};
use crate::error::Result;
use crate::status;
use crate::status::Problem;
use phalanx_store::priority::{Resolved, Source};

/// The priority-related spec fields of a group.
#[derive(Clone, Debug)]
pub struct PrioritySpec<'a> {
    /// `spec.priorityClassName`.
    pub class_name: Option<&'a str>,
    /// `spec.priority`.
    pub priority: Option<i32>,
    /// `spec.preemptionPolicy`.
    pub preemption_policy: Option<PreemptionPolicy>,
}

impl PrioritySpec<'_> {
    /// True when `spec.preemptionPolicy` is set.
    pub fn preemption_policy_set(&self) -> bool {
        self.preemption_policy.is_some()
    }
}

/// Whether the group's author wrote `spec.<field>` (`priority`, `preemptionPolicy`): a `managedFields` entry other
/// than the controllers' own merge patches (manager [`FIELD_MANAGER`], operation `Update`) owns it. Nobody owns what
/// admission added at creation: the API server updates managedFields before mutating admission runs
/// (k8s.io/apiserver `pkg/endpoints/handlers/create.go`), so the values the admission policies filled count as filled,
/// like the controllers' own. That matters once the class changes: a group filled with 0 before a global default
/// PriorityClass appeared must not be reported, as upstream never re-checks an admitted pod. At creation they match
/// the class anyway. The store keeps just these entries ([`phalanx_store::slim::group_managed_fields`]).
pub fn written_by_author(meta: &ObjectMeta, field: &str) -> bool {
    meta.managed_fields.iter().flatten().any(|e| {
        let controllers_patch = e.manager.as_deref() == Some(FIELD_MANAGER)
            && e.operation.as_deref() == Some("Update")
            && e.subresource.as_deref().is_none_or(str::is_empty);
        !controllers_patch
            && e.fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:spec"))
                .and_then(|spec| spec.get(format!("f:{field}")))
                .is_some()
    })
}

/// Pure: the problems of the priority fields the group's author wrote (not those the controllers filled), against
/// `resolved`: [`phalanx_store::priority::check_written`] on `spec`.
pub fn written_priority_problems(
    spec: &PrioritySpec<'_>,
    meta: &ObjectMeta,
    resolved: &Resolved,
) -> Vec<Problem> {
    let priority = spec.priority.filter(|_| written_by_author(meta, "priority"));
    let preempt_lower = spec.preemption_policy == Some(PreemptionPolicy::PreemptLowerPriority)
        && written_by_author(meta, "preemptionPolicy");
    phalanx_store::priority::check_written("spec", priority, preempt_lower, resolved)
        .into_iter()
        .map(|m| Problem::new(m.reason(), m.to_string()))
        .collect()
}

/// Pure: the `spec` part of the patch that fills unset priority fields from `resolved`.
pub fn priority_patch(spec: &PrioritySpec<'_>, resolved: &Resolved) -> Option<Map<String, Value>> {
    let mut m = Map::new();
    if spec.priority.is_none() {
        m.insert("priority".into(), json!(resolved.priority));
    }
    if !spec.preemption_policy_set() {
        m.insert("preemptionPolicy".into(), json!(resolved.preemption_policy));
    }
    if m.is_empty() { None } else { Some(m) }
}

/// Human-readable origin of a resolved priority, for the event.
pub fn describe(resolved: &Resolved) -> String {
    let values = format!(
        "priority {} and preemptionPolicy {}",
        resolved.priority, resolved.preemption_policy
    );
    match &resolved.source {
        Source::None => format!("{values} ({})", resolved.source),
        source => format!("{values} from {source}"),
    }
}

/// Adds `finalizer` (unless deleting) and fills unset priority fields, in one guarded merge patch. Returns the
/// problems found: a named PriorityClass that does not exist while a field is still unset, and the priority fields
/// the author wrote that the class does not give ([`written_priority_problems`]). Emits a `PriorityResolved` event
/// when it filled the priority.
pub async fn ensure_meta<K>(
    ctx: &Context,
    controller: &str,
    obj: &K,
    finalizer: &str,
    prio: &PrioritySpec<'_>,
) -> Result<Vec<Problem>>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let deleting = obj.meta().deletion_timestamp.is_some();
    let mut problems = Vec::new();
    let mut patch = Map::new();
    if !deleting && !obj.finalizers().iter().any(|f| f == finalizer) {
        let mut list = obj.finalizers().to_vec();
        list.push(finalizer.to_string());
        patch.insert("metadata".into(), json!({ "finalizers": list }));
    }
    let mut filled: Option<Resolved> = None;
    // Resolution matters while a field is still unset, and to check what the author wrote. Once filled by the
    // controller, the value stays (as after upstream admission), so deleting the PriorityClass later does not make
    // the group invalid; a class that cannot be resolved then is no problem.
    let unresolved = prio.priority.is_none() || !prio.preemption_policy_set();
    if !deleting {
        match checks::resolve_priority(&ctx.store, prio.class_name) {
            Ok(resolved) => {
                problems.extend(written_priority_problems(prio, obj.meta(), &resolved));
                if let Some(spec) = priority_patch(prio, &resolved) {
                    patch.insert("spec".into(), Value::Object(spec));
                    filled = Some(resolved);
                }
            }
            Err(p) if unresolved => problems.push(p),
            Err(_) => {}
        }
    }
    if patch.is_empty() {
        return Ok(problems);
    }
    status::merge_patch(ctx, obj, Value::Object(patch)).await?;
    if let Some(resolved) = filled {
        let note = format!("Resolved {}", describe(&resolved));
        ctx.publish(
            controller,
            &obj.object_ref(&()),
            EventType::Normal,
            "PriorityResolved",
            "ResolvePriority",
            note,
        )
        .await;
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved() -> Resolved {
        Resolved {
            priority: 7,
            preemption_policy: "Never".into(),
            source: Source::Named("x".into()),
        }
    }

    #[test]
    fn fills_only_unset_fields() {
        let unset = PrioritySpec {
            class_name: Some("x"),
            priority: None,
            preemption_policy: None,
        };
        let p = priority_patch(&unset, &resolved()).unwrap();
        assert_eq!(
            Value::Object(p),
            json!({"priority": 7, "preemptionPolicy": "Never"})
        );
        let half = PrioritySpec {
            class_name: Some("x"),
            priority: Some(3),
            preemption_policy: None,
        };
        assert_eq!(
            Value::Object(priority_patch(&half, &resolved()).unwrap()),
            json!({"preemptionPolicy": "Never"})
        );
        let set = PrioritySpec {
            class_name: None,
            priority: Some(3),
            preemption_policy: Some(PreemptionPolicy::Never),
        };
        assert!(priority_patch(&set, &resolved()).is_none());
    }

    #[test]
    fn describes_the_source() {
        assert!(describe(&resolved()).contains("PriorityClass \"x\""));
        let d = Resolved {
            priority: 5,
            preemption_policy: "PreemptLowerPriority".into(),
            source: Source::GlobalDefault("d".into()),
        };
        assert!(describe(&d).contains("global default PriorityClass \"d\""));
    }

    /// What the author wrote is checked, what the controllers or the admission policy filled is not: a stale filled
    /// value (the global default changed since) is no hand-written priority.
    #[test]
    fn only_written_fields_are_checked() {
        let spec = PrioritySpec {
            class_name: Some("x"),
            priority: Some(1_000_000_000),
            preemption_policy: Some(PreemptionPolicy::PreemptLowerPriority),
        };
        let written: ObjectMeta = serde_json::from_value(json!({"managedFields": [{
            "manager": "kubectl-create", "operation": "Update",
            "fieldsV1": {"f:spec": {"f:priority": {}, "f:preemptionPolicy": {}, "f:priorityClassName": {}}},
        }]}))
        .unwrap();
        assert!(written_by_author(&written, "priority"));
        let p = written_priority_problems(&spec, &written, &resolved());
        let reasons: Vec<&str> = p.iter().map(|p| p.reason.as_str()).collect();
        assert_eq!(reasons, ["PriorityIgnored", "PreemptionPolicyIgnored"]);
        assert!(p[0].message.contains("spec.priority: 1000000000") && p[0].message.contains("computed 7"));
        // Filled by the controllers' merge patch.
        let filled: ObjectMeta = serde_json::from_value(json!({"managedFields": [{
            "manager": FIELD_MANAGER, "operation": "Update",
            "fieldsV1": {"f:metadata": {"f:finalizers": {}}, "f:spec": {"f:priority": {}, "f:preemptionPolicy": {}}},
        }]}))
        .unwrap();
        assert!(!written_by_author(&filled, "priority"));
        assert!(written_priority_problems(&spec, &filled, &resolved()).is_empty());
        // Filled by the admission policy at creation: owned by nobody (the creator owns only what it sent).
        let admitted: ObjectMeta = serde_json::from_value(json!({"managedFields": [{
            "manager": "kubectl-create", "operation": "Update",
            "fieldsV1": {"f:spec": {"f:priorityClassName": {}, "f:schedulingPolicy": {}}},
        }]}))
        .unwrap();
        assert!(written_priority_problems(&spec, &admitted, &resolved()).is_empty());
        // Never written under a class that may preempt restricts the group: no problem.
        let never = PrioritySpec {
            preemption_policy: Some(PreemptionPolicy::Never),
            priority: None,
            ..spec
        };
        let may = Resolved {
            preemption_policy: "PreemptLowerPriority".into(),
            ..resolved()
        };
        assert!(written_priority_problems(&never, &written, &may).is_empty());
    }
}
