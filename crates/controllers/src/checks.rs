//! The cross-object checks of a PodGroup or CompositePodGroup, gathered into one list of problems that
//! becomes the group's `Valid` condition.
//!
//! - Hierarchy (upstream runtime checks, KEP-6012; the pure rules of `phalanx_scheduler::hierarchy`): the chain up to the root
//!   (`validate_ancestry`: cycle, depth, every edge) and then the whole tree from the root (`validate_tree`),
//!   so that every group of a tree gets the same verdict. A missing parent is reported as `ParentNotFound`.
//! - Workload reference: the Workload exists, the template exists, is of the group's kind, and its
//!   scheduling-policy variant equals the group's.
//! - PriorityClass: a named class must exist (upstream Priority admission rejects the object otherwise).

use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::runtime::reflector::ObjectRef;
use phalanx_api::v1beta1::{PolicyKind, Workload, WorkloadReference};
use phalanx_store::{GroupKey, GroupKind, HierarchyError, Store, validate_ancestry, validate_tree};

use crate::status::Problem;
use crate::template_tree::{self, template_nodes};
use phalanx_store::priority::{self, Resolved};

/// Reason for a hierarchy error.
pub fn hierarchy_reason(e: &HierarchyError) -> &'static str {
    match e {
        HierarchyError::Cycle { .. } => "HierarchyCycle",
        HierarchyError::TooDeep { .. } => "HierarchyTooDeep",
        HierarchyError::WorkloadMismatch { .. } => "WorkloadMismatch",
        HierarchyError::ParentWithoutWorkload { .. } => "ParentWithoutWorkload",
        HierarchyError::GangOverBasic { .. } => "GangParentBasicChild",
        HierarchyError::AllOverSingle { .. } => "DisruptionModeMismatch",
        HierarchyError::ParentNotComposite { .. } => "ParentNotComposite",
        HierarchyError::PriorityMismatch { .. } => "PriorityMismatch",
        HierarchyError::PreemptionPolicyMismatch { .. } => "PreemptionPolicyMismatch",
    }
}

/// Checks the tree `key` belongs to. `None` = valid.
pub fn hierarchy(store: &Store, key: &GroupKey) -> Option<Problem> {
    let start = store.group_node(key)?;
    let lookup = |k: &GroupKey| store.group_node(k);
    let ancestry = match validate_ancestry(&start, lookup) {
        Ok(a) => a,
        Err(e) => return Some(Problem::new(hierarchy_reason(&e), e.to_string())),
    };
    let top = store.group_node(&ancestry.top)?;
    if !ancestry.complete {
        let parent = top.parent.clone().unwrap_or_default();
        return Some(Problem::new(
            "ParentNotFound",
            format!(
                "parent CompositePodGroup {parent:?} of {} {:?} not found in namespace {:?}",
                top.key.kind.as_str(),
                top.key.name,
                top.key.namespace
            ),
        ));
    }
    let children = |k: &GroupKey| store.hierarchy().children(k);
    match validate_tree(&top, children, lookup) {
        Ok(()) => None,
        Err(e) => Some(Problem::new(hierarchy_reason(&e), e.to_string())),
    }
}

/// Checks `workloadRef` of a group of `kind` whose policy is `policy`.
pub fn workload_ref(
    store: &Store,
    namespace: &str,
    kind: GroupKind,
    policy: Option<PolicyKind>,
    r: &WorkloadReference,
) -> Option<Problem> {
    let Some(workload) = store
        .workloads()
        .get(&ObjectRef::<Workload>::new(&r.workload_name).within(namespace))
    else {
        return Some(Problem::new(
            "WorkloadNotFound",
            format!(
                "Workload {:?} referenced by spec.workloadRef not found",
                r.workload_name
            ),
        ));
    };
    let nodes = template_nodes(&workload.spec);
    let Some(template) = template_tree::find(&nodes, &r.template_name) else {
        return Some(Problem::new(
            "TemplateNotFound",
            format!(
                "Workload {:?} has no template named {:?}",
                r.workload_name, r.template_name
            ),
        ));
    };
    if template.kind != kind {
        let want = match kind {
            GroupKind::PodGroup => "PodGroup",
            GroupKind::CompositePodGroup => "CompositePodGroup",
        };
        return Some(Problem::new(
            "TemplateKindMismatch",
            format!(
                "template {:?} of Workload {:?} is a {} template, not a {want} template",
                r.template_name,
                r.workload_name,
                template.kind.as_str()
            ),
        ));
    }
    match policy {
        Some(p) if p != template.policy => Some(Problem::new(
            "PolicyMismatch",
            format!(
                "schedulingPolicy is {} but template {:?} of Workload {:?} uses {}",
                p.as_str().to_lowercase(),
                r.template_name,
                r.workload_name,
                template.policy.as_str().to_lowercase()
            ),
        )),
        _ => None,
    }
}

/// Resolves the priority of a group; a missing named class is a problem.
pub fn resolve_priority(store: &Store, class_name: Option<&str>) -> Result<Resolved, Problem> {
    let classes: Vec<std::sync::Arc<PriorityClass>> = store.priority_classes().state();
    priority::resolve(class_name, classes.iter().map(AsRef::as_ref))
        .map_err(|e| Problem::new(e.reason(), e.to_string()))
}

/// Joins problems into one (reason of the first, all messages).
pub fn combine(problems: &[Problem]) -> Option<Problem> {
    let first = problems.first()?;
    let message = problems
        .iter()
        .map(|p| p.message.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    Some(Problem {
        reason: first.reason.clone(),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combine_keeps_first_reason() {
        assert!(combine(&[]).is_none());
        let c = combine(&[Problem::new("A", "one"), Problem::new("B", "two")]).unwrap();
        assert_eq!((c.reason.as_str(), c.message.as_str()), ("A", "one; two"));
    }

    #[test]
    fn every_hierarchy_error_has_a_reason() {
        let e = HierarchyError::Cycle {
            path: "a -> b -> a".into(),
        };
        assert_eq!(hierarchy_reason(&e), "HierarchyCycle");
        assert_eq!(
            hierarchy_reason(&HierarchyError::TooDeep {
                group: "g".into(),
                depth: 5
            }),
            "HierarchyTooDeep"
        );
    }
}
