//! Steps shared by the PodGroup and CompositePodGroup controllers: the protection finalizer and the
//! PriorityClass resolution, sent as one merge patch guarded by `resourceVersion`.
//!
//! Where the resolved priority goes: upstream's Priority admission plugin writes `spec.priority` and
//! `spec.preemptionPolicy` at creation. Phalanx's CRDs allow exactly that transition (CEL: the fields are
//! immutable once set, unset -> set is allowed), so the controller fills them **once, when unset**, and the
//! scheduler and `kubectl` read one place. A value the user set explicitly is kept as is.

use std::fmt::Debug;

use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::checks;
use crate::context::Context;
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
    /// True when `spec.preemptionPolicy` is set.
    pub preemption_policy_set: bool,
}

/// Pure: the `spec` part of the patch that fills unset priority fields from `resolved`.
pub fn priority_patch(spec: &PrioritySpec<'_>, resolved: &Resolved) -> Option<Map<String, Value>> {
    let mut m = Map::new();
    if spec.priority.is_none() {
        m.insert("priority".into(), json!(resolved.priority));
    }
    if !spec.preemption_policy_set {
        m.insert("preemptionPolicy".into(), json!(resolved.preemption_policy));
    }
    if m.is_empty() { None } else { Some(m) }
}

/// Human-readable origin of a resolved priority, for the event.
pub fn describe(resolved: &Resolved) -> String {
    match &resolved.source {
        Source::Named(n) => format!(
            "priority {} and preemptionPolicy {} from PriorityClass {n:?}",
            resolved.priority, resolved.preemption_policy
        ),
        Source::GlobalDefault(n) => format!(
            "priority {} and preemptionPolicy {} from the global default PriorityClass {n:?}",
            resolved.priority, resolved.preemption_policy
        ),
        Source::None => format!(
            "priority {} and preemptionPolicy {} (no priorityClassName and no global default PriorityClass)",
            resolved.priority, resolved.preemption_policy
        ),
    }
}

/// Adds `finalizer` (unless deleting) and fills unset priority fields, in one guarded merge patch. Returns the
/// problems found (a named PriorityClass that does not exist while a field is still unset). Emits a
/// `PriorityResolved` event when it filled the priority.
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
    // Resolution matters only while a field is still unset: once filled, the value stays (as after upstream
    // admission), so deleting the PriorityClass later does not make the group invalid.
    let unresolved = prio.priority.is_none() || !prio.preemption_policy_set;
    if unresolved && !deleting {
        match checks::resolve_priority(&ctx.store, prio.class_name) {
            Ok(resolved) => {
                if let Some(spec) = priority_patch(prio, &resolved) {
                    patch.insert("spec".into(), Value::Object(spec));
                    filled = Some(resolved);
                }
            }
            Err(p) => problems.push(p),
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
            preemption_policy_set: false,
        };
        let p = priority_patch(&unset, &resolved()).unwrap();
        assert_eq!(
            Value::Object(p),
            json!({"priority": 7, "preemptionPolicy": "Never"})
        );
        let half = PrioritySpec {
            class_name: Some("x"),
            priority: Some(3),
            preemption_policy_set: false,
        };
        assert_eq!(
            Value::Object(priority_patch(&half, &resolved()).unwrap()),
            json!({"preemptionPolicy": "Never"})
        );
        let set = PrioritySpec {
            class_name: None,
            priority: Some(3),
            preemption_policy_set: true,
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
}
