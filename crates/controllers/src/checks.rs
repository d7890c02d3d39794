//! The cross-object checks of a PodGroup or CompositePodGroup, gathered into one list of problems that
//! becomes the group's `Valid` condition.
//!
//! - Hierarchy (upstream runtime checks, KEP-6012; the pure rules of `phalanx_scheduler::hierarchy`): the chain up to the root
//!   (`validate_ancestry`: cycle, depth, every edge) and then the whole tree from the root (`validate_tree`),
//!   so that every group of a tree gets the same verdict. A missing parent is reported as `ParentNotFound`.
//! - Workload reference: the Workload exists, the template exists, is of the group's kind, and its
//!   scheduling-policy variant equals the group's.
//! - PriorityClass: a named class must exist (upstream Priority admission rejects the object otherwise); priority
//!   fields written in a Workload's templates must be those of their class ([`template_priorities`]).
//! - Members: a pending member pod must name one of the schedulers of this deployment ([`foreign_members`]).

use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::runtime::reflector::ObjectRef;
use phalanx_api::v1beta1::{PolicyKind, PreemptionPolicy, Workload, WorkloadReference, WorkloadSpec};
use phalanx_store::PodRecord;
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

/// The priority fields written in a Workload's templates that their PriorityClass does not give
/// ([`phalanx_store::priority::check_written`], each field named by the template's path, e.g.
/// `spec.podGroupTemplates[0].priority`). Nothing fills a template's fields, so every value there is its author's.
/// A template whose class does not exist is skipped: there is no value to compare with, and the groups that name the
/// class are reported `PriorityClassNotFound`.
pub fn template_priorities(store: &Store, spec: &WorkloadSpec) -> Vec<Problem> {
    let classes: Vec<std::sync::Arc<PriorityClass>> = store.priority_classes().state();
    let nodes = template_nodes(spec);
    let mut out = Vec::new();
    for (node, path) in template_tree::with_paths(&nodes) {
        if node.priority.is_none() && node.preemption_policy.is_none() {
            continue;
        }
        let Ok(resolved) = priority::resolve(
            node.priority_class_name.as_deref(),
            classes.iter().map(AsRef::as_ref),
        ) else {
            continue;
        };
        let preempt_lower = node.preemption_policy == Some(PreemptionPolicy::PreemptLowerPriority);
        out.extend(
            priority::check_written(&path, node.priority, preempt_lower, &resolved)
                .into_iter()
                .map(|m| Problem::new(m.reason(), m.to_string())),
        );
    }
    out
}

/// Reason of the `Valid=False` a PodGroup gets while pending members name another scheduler.
pub const REASON_PODS_OF_ANOTHER_SCHEDULER: &str = "PodsOfAnotherScheduler";

/// Whether `scheduler` (a pod's `spec.schedulerName`) is one of `names`; an entry ending in `*` matches by prefix.
pub fn scheduler_matches(scheduler: &str, names: &[String]) -> bool {
    names.iter().any(|n| match n.strip_suffix('*') {
        Some(prefix) => scheduler.starts_with(prefix),
        None => scheduler == n,
    })
}

/// Most pod names listed per scheduler in [`foreign_scheduler_message`].
const NAMES_SHOWN: usize = 5;

/// The sentence naming pending members of a group and the scheduler they name instead of one of `names`:
/// `pods infer-0, infer-1 use schedulerName "default-scheduler", not "phalanx-scheduler": ...`. `members` are
/// `(pod name, spec.schedulerName)` of the pending members that are not ours, in any order (listed by scheduler,
/// then name, at most five names per scheduler). `None` when `members` is empty. One definition for the group's
/// condition and `phalanx explain`.
pub fn foreign_scheduler_message(members: &[(String, String)], names: &[String]) -> Option<String> {
    if members.is_empty() {
        return None;
    }
    let mut by: std::collections::BTreeMap<&str, Vec<&str>> = std::collections::BTreeMap::new();
    for (pod, scheduler) in members {
        by.entry(scheduler.as_str()).or_default().push(pod.as_str());
    }
    let parts: Vec<String> = by
        .into_iter()
        .map(|(scheduler, mut pods)| {
            pods.sort_unstable();
            let more = pods.len().saturating_sub(NAMES_SHOWN);
            let mut list = pods[..pods.len().min(NAMES_SHOWN)].join(", ");
            if more > 0 {
                list.push_str(&format!(" and {more} more"));
            }
            if pods.len() == 1 {
                format!("pod {list} uses schedulerName {scheduler:?}")
            } else {
                format!("pods {list} use schedulerName {scheduler:?}")
            }
        })
        .collect();
    let ours: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    Some(format!(
        "{}, not {}: no Phalanx scheduler places them, so the gang never starts (set spec.schedulerName in the \
         pod template)",
        parts.join(" and "),
        ours.join(" or ")
    ))
}

/// A group's pending members (non-terminal, not bound) whose scheduler is none of `names`
/// ([`foreign_scheduler_message`], reason [`REASON_PODS_OF_ANOTHER_SCHEDULER`]). Upstream's scheduler fails a
/// PodGroup whose members name another scheduler (`validatePodGroup`, `schedule_one_podgroup.go`); here no Phalanx
/// scheduler even sees such pods, so nothing would say why the group never starts. `names` empty: no check.
pub fn foreign_members<'a>(
    pods: impl IntoIterator<Item = &'a PodRecord>,
    names: &[String],
) -> Option<Problem> {
    if names.is_empty() {
        return None;
    }
    let foreign: Vec<(String, String)> = pods
        .into_iter()
        .filter(|p| !p.is_terminal() && p.node_name().is_none())
        .filter_map(|p| {
            let scheduler = p.scheduler_name();
            (!scheduler_matches(scheduler, names)).then(|| (p.name().to_owned(), scheduler.to_owned()))
        })
        .collect();
    foreign_scheduler_message(&foreign, names).map(|m| Problem::new(REASON_PODS_OF_ANOTHER_SCHEDULER, m))
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

    fn pod(name: &str, scheduler: Option<&str>, node: Option<&str>) -> PodRecord {
        PodRecord::from_pod(
            &serde_json::from_value(serde_json::json!({
                "metadata": { "name": name },
                "spec": { "schedulerName": scheduler, "nodeName": node, "containers": [] },
                "status": { "phase": "Pending" },
            }))
            .unwrap(),
        )
    }

    /// Pending pods of another scheduler are named with their scheduler; bound ones and ours are not.
    #[test]
    fn foreign_members_are_named_with_their_scheduler() {
        let names = vec!["phalanx-scheduler".to_string()];
        let pods = [
            pod("infer-1", Some("default-scheduler"), None),
            pod("infer-0", Some("default-scheduler"), None),
            pod("bound", Some("default-scheduler"), Some("n1")),
            pod("ours", Some("phalanx-scheduler"), None),
            pod("odd", Some("volcano"), None),
        ];
        let p = foreign_members(pods.iter(), &names).unwrap();
        assert_eq!(p.reason, REASON_PODS_OF_ANOTHER_SCHEDULER);
        assert!(
            p.message.starts_with(
                "pods infer-0, infer-1 use schedulerName \"default-scheduler\" and pod odd uses schedulerName \
                 \"volcano\", not \"phalanx-scheduler\":"
            ),
            "{}",
            p.message
        );
        assert!(foreign_members(pods[2..4].iter(), &names).is_none());
        assert!(foreign_members(pods.iter(), &[]).is_none(), "no names, no check");
        assert!(scheduler_matches("phalanx-ns1", &["phalanx-*".to_string()]));
        let many: Vec<(String, String)> = (0..7).map(|i| (format!("p{i}"), "x".to_string())).collect();
        let m = foreign_scheduler_message(&many, &names).unwrap();
        assert!(m.starts_with("pods p0, p1, p2, p3, p4 and 2 more use"), "{m}");
    }
}
