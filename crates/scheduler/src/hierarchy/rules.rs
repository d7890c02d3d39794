//! The hierarchy rules, one definition for the scheduler, the store and the controllers.
//!
//! Upstream validates the runtime tree in the scheduler (`validatePodGroup` in `pkg/scheduler/schedule_one_podgroup.go`,
//! KEP-6012 "runtime validation"): a tree deeper than `WorkloadMaxTreeDepth` (4), groups of more than one Workload, a
//! gang CompositePodGroup over a basic PodGroup, an `all` parent over a `single` child, and cycles fail the whole
//! hierarchy. The messages are Kubernetes 1.38's (`validatePodGroupHierarchy` in `pkg/scheduler/schedule_one_podgroup.go`,
//! k/k#142719, #141930), groups named by their entity key (`podgroup/<namespace>/<name>`), and so is the reason a
//! scheduler writes for them on the groups (`PodGroupError`, `CompositePodGroupError`); a cycle and a parent that is
//! not a CompositePodGroup, which upstream's tree cannot express, keep Phalanx's own words. The functions take plain [`GroupNode`] values so that the scheduler's cycle
//! ([`super::GroupTree::validate`]), the store and the controllers all apply the same rules without a client.
//! Every walk is iterative and bounded by [`MAX_TREE_DEPTH`], so a chain of thousands of groups costs at most a few
//! steps and cannot overflow the stack.

use std::collections::BTreeSet;

use crate::model::{GroupKey, GroupKind};

/// Maximum depth of a group tree, counting the root as 1 (upstream `WorkloadMaxTreeDepth`).
pub const MAX_TREE_DEPTH: usize = 4;

/// The facts about one group that hierarchy validation needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupNode {
    /// The group.
    pub key: GroupKey,
    /// `spec.parentCompositePodGroupName` (a CompositePodGroup in the same namespace), if any.
    pub parent: Option<String>,
    /// `spec.workloadRef.workloadName`, if any.
    pub workload: Option<String>,
    /// True for `schedulingPolicy.gang`, false for `basic`.
    pub gang: bool,
    /// True for `disruptionMode: {all: {}}`, false for `single` (the default).
    pub disruption_all: bool,
}

/// Why a hierarchy is invalid. `Display` is the message written to group conditions (reason `SchedulerError`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HierarchyError {
    /// A parent chain returns to a group already on the chain.
    #[error("cycle in group hierarchy: {path}")]
    Cycle {
        /// The chain as `a -> b -> a`.
        path: String,
    },
    /// The tree is deeper than [`MAX_TREE_DEPTH`].
    #[error("hierarchy depth exceeds maximum allowed depth {MAX_TREE_DEPTH} at {group:?} ({depth} levels)")]
    TooDeep {
        /// Group at which the limit was exceeded.
        group: String,
        /// Depth reached.
        depth: usize,
    },
    /// A child and its parent reference different Workloads.
    #[error(
        "pod group workload does not match root workload, got: {child_workload:?} ({child:?}) and {parent_workload:?} ({parent:?})"
    )]
    WorkloadMismatch {
        /// The child group.
        child: String,
        /// Its workload name (empty when none).
        child_workload: String,
        /// The parent group.
        parent: String,
        /// The parent's workload name (empty when none).
        parent_workload: String,
    },
    /// A PodGroup names a parent but has no workloadRef (upstream: parent requires workloadRef).
    #[error("{child} has a parent but no workloadRef")]
    ParentWithoutWorkload {
        /// The child group.
        child: String,
    },
    /// A gang CompositePodGroup has a basic PodGroup child.
    #[error("gang parent {parent:?} cannot have basic child {child:?}")]
    GangOverBasic {
        /// The gang CompositePodGroup.
        parent: String,
        /// The basic PodGroup child.
        child: String,
    },
    /// A parent with `disruptionMode: all` has a child with `single`.
    #[error(
        "parent {parent:?} with All disruption mode cannot have child {child:?} with Single disruption mode"
    )]
    AllOverSingle {
        /// The `all` parent.
        parent: String,
        /// The `single` child.
        child: String,
    },
    /// A group of the tree has a priority other than the root's (upstream's message).
    #[error(
        "all pod groups in a hierarchy should have the same priority as the root pod group's priority, got {priority} ({group:?}) and {root_priority} ({root:?})"
    )]
    PriorityMismatch {
        /// The root, `namespace/name`.
        root: String,
        /// The root's priority.
        root_priority: i32,
        /// The group, `namespace/name`.
        group: String,
        /// The group's priority.
        priority: i32,
    },
    /// A group of the tree has a preemption policy other than the root's (upstream's message).
    #[error(
        "all pod groups in a hierarchy should have the same preemption policy, got {policy} ({group:?}) and {root_policy}"
    )]
    PreemptionPolicyMismatch {
        /// The root, `namespace/name`.
        root: String,
        /// The root's policy.
        root_policy: String,
        /// The group, `namespace/name`.
        group: String,
        /// The group's policy.
        policy: String,
    },
    /// Only a CompositePodGroup can be a parent.
    #[error("{child} names {parent} as parent, but only a CompositePodGroup can be a parent")]
    ParentNotComposite {
        /// The child group.
        child: String,
        /// The named parent.
        parent: String,
    },
}

/// Checks every rule between one parent and one direct child: the workload rules, then
/// [`check_shape`].
///
/// Errors: [`HierarchyError::ParentWithoutWorkload`], [`HierarchyError::WorkloadMismatch`], and those of
/// [`check_shape`].
pub fn check_edge(parent: &GroupNode, child: &GroupNode) -> Result<(), HierarchyError> {
    if parent.key.kind == GroupKind::CompositePodGroup {
        if child.workload.is_none() {
            return Err(HierarchyError::ParentWithoutWorkload {
                child: child.key.to_string(),
            });
        }
        if child.workload != parent.workload {
            return Err(HierarchyError::WorkloadMismatch {
                child: child.key.to_string(),
                child_workload: child.workload.clone().unwrap_or_default(),
                parent: parent.key.to_string(),
                parent_workload: parent.workload.clone().unwrap_or_default(),
            });
        }
    }
    check_shape(parent, child)
}

/// Checks the shape rules between one parent and one direct child: only a CompositePodGroup is a
/// parent, a gang CompositePodGroup has no basic PodGroup child, an `all` parent has no `single`
/// child (KEP-6012).
///
/// Errors: [`HierarchyError::ParentNotComposite`], [`HierarchyError::GangOverBasic`],
/// [`HierarchyError::AllOverSingle`].
pub fn check_shape(parent: &GroupNode, child: &GroupNode) -> Result<(), HierarchyError> {
    if parent.key.kind != GroupKind::CompositePodGroup {
        return Err(HierarchyError::ParentNotComposite {
            child: child.key.to_string(),
            parent: parent.key.to_string(),
        });
    }
    if parent.gang && !child.gang && child.key.kind == GroupKind::PodGroup {
        return Err(HierarchyError::GangOverBasic {
            parent: parent.key.to_string(),
            child: child.key.to_string(),
        });
    }
    if parent.disruption_all && !child.disruption_all {
        return Err(HierarchyError::AllOverSingle {
            parent: parent.key.to_string(),
            child: child.key.to_string(),
        });
    }
    Ok(())
}

/// Result of walking up from a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ancestry {
    /// The topmost group reached: the root when `complete`, else the last group whose parent is missing.
    pub top: GroupKey,
    /// Depth of the starting group, counting the top as 1.
    pub depth: usize,
    /// False when some named parent does not exist (yet); the chain is then valid so far but incomplete.
    pub complete: bool,
}

/// Validates the chain from `start` up to its root: cycles, depth and every edge on the way ([`check_edge`]).
///
/// `lookup(parent_name_in_same_namespace)` returns the parent CompositePodGroup or `None` if it does not exist yet.
pub fn validate_ancestry(
    start: &GroupNode,
    lookup: impl Fn(&GroupKey) -> Option<GroupNode>,
) -> Result<Ancestry, HierarchyError> {
    let mut chain = vec![start.key.clone()];
    let mut seen: BTreeSet<GroupKey> = chain.iter().cloned().collect();
    let mut cur = start.clone();
    loop {
        let Some(pname) = cur.parent.clone().filter(|p| !p.is_empty()) else {
            return finish(chain, true);
        };
        let pkey = GroupKey::composite(&cur.key.namespace, &pname);
        if !seen.insert(pkey.clone()) {
            chain.push(pkey);
            let path = chain.iter().map(|k| &*k.name).collect::<Vec<_>>().join(" -> ");
            return Err(HierarchyError::Cycle { path });
        }
        let Some(parent) = lookup(&pkey) else {
            return finish(chain, false);
        };
        check_edge(&parent, &cur)?;
        chain.push(pkey);
        if chain.len() > MAX_TREE_DEPTH {
            return Err(HierarchyError::TooDeep {
                group: start.key.to_string(),
                depth: chain.len(),
            });
        }
        cur = parent;
    }
}

fn finish(chain: Vec<GroupKey>, complete: bool) -> Result<Ancestry, HierarchyError> {
    let depth = chain.len();
    let top = chain.last().cloned().unwrap_or_else(unreachable_key);
    Ok(Ancestry { top, depth, complete })
}

fn unreachable_key() -> GroupKey {
    // `chain` always holds the start group; this keeps the function total without a panic.
    GroupKey::pod_group("", "")
}

/// Validates a whole tree from `root` downwards: every edge, depth and cycles.
///
/// `children(key)` lists the groups naming `key` as parent; `lookup(key)` returns a group's facts. A child listed but
/// not found by `lookup` is skipped (it was deleted meanwhile).
pub fn validate_tree(
    root: &GroupNode,
    children: impl Fn(&GroupKey) -> Vec<GroupKey>,
    lookup: impl Fn(&GroupKey) -> Option<GroupNode>,
) -> Result<(), HierarchyError> {
    let mut stack: Vec<(GroupNode, Vec<String>)> = vec![(root.clone(), vec![root.key.name.to_string()])];
    let mut seen: BTreeSet<GroupKey> = [root.key.clone()].into();
    while let Some((node, path)) = stack.pop() {
        if path.len() > MAX_TREE_DEPTH {
            return Err(HierarchyError::TooDeep {
                group: node.key.to_string(),
                depth: path.len(),
            });
        }
        for ck in children(&node.key) {
            let Some(child) = lookup(&ck) else { continue };
            if !seen.insert(ck.clone()) {
                let mut p = path.clone();
                p.push(ck.name.to_string());
                return Err(HierarchyError::Cycle { path: p.join(" -> ") });
            }
            check_edge(&node, &child)?;
            let mut p = path.clone();
            p.push(ck.name.to_string());
            stack.push((child, p));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cpg(name: &str, parent: Option<&str>, gang: bool, all: bool) -> GroupNode {
        GroupNode {
            key: GroupKey::composite("ns", name),
            parent: parent.map(Into::into),
            workload: Some("w".into()),
            gang,
            disruption_all: all,
        }
    }

    fn pg(name: &str, parent: Option<&str>, gang: bool, all: bool) -> GroupNode {
        GroupNode {
            key: GroupKey::pod_group("ns", name),
            ..cpg(name, parent, gang, all)
        }
    }

    fn lookup(nodes: &[GroupNode]) -> impl Fn(&GroupKey) -> Option<GroupNode> + '_ {
        move |k| nodes.iter().find(|n| &n.key == k).cloned()
    }

    #[test]
    fn cycle_is_reported() {
        let nodes = [
            cpg("a", Some("b"), false, false),
            cpg("b", Some("a"), false, false),
        ];
        let err = validate_ancestry(&nodes[0], lookup(&nodes)).unwrap_err();
        assert_eq!(
            err,
            HierarchyError::Cycle {
                path: "a -> b -> a".into()
            }
        );
    }

    #[test]
    fn depth_four_ok_five_rejected() {
        let ok = [
            cpg("r", None, false, false),
            cpg("c1", Some("r"), false, false),
            cpg("c2", Some("c1"), false, false),
        ];
        let leaf = pg("l", Some("c2"), false, false);
        let a = validate_ancestry(&leaf, lookup(&ok)).unwrap();
        assert_eq!((a.depth, a.complete, &*a.top.name), (4, true, "r"));
        let deep = [
            cpg("r", None, false, false),
            cpg("c1", Some("r"), false, false),
            cpg("c2", Some("c1"), false, false),
            cpg("c3", Some("c2"), false, false),
        ];
        let leaf = pg("l", Some("c3"), false, false);
        assert!(matches!(
            validate_ancestry(&leaf, lookup(&deep)),
            Err(HierarchyError::TooDeep { depth: 5, .. })
        ));
        let children: HashMap<&str, Vec<GroupKey>> = [
            ("r", vec![deep[1].key.clone()]),
            ("c1", vec![deep[2].key.clone()]),
            ("c2", vec![deep[3].key.clone()]),
            ("c3", vec![leaf.key.clone()]),
        ]
        .into();
        let mut all = deep.to_vec();
        all.push(leaf);
        let err = validate_tree(
            &deep[0],
            |k| children.get(&*k.name).cloned().unwrap_or_default(),
            lookup(&all),
        );
        assert!(
            matches!(err, Err(HierarchyError::TooDeep { depth: 5, .. })),
            "{err:?}"
        );
    }

    #[test]
    fn missing_parent_is_incomplete_not_invalid() {
        let leaf = pg("l", Some("nope"), true, false);
        let a = validate_ancestry(&leaf, |_| None).unwrap();
        assert!(!a.complete);
        assert_eq!(a.top, leaf.key);
    }

    #[test]
    fn edge_rules() {
        let mut other = pg("x", Some("p"), true, false);
        other.workload = Some("w2".into());
        assert!(matches!(
            check_edge(&cpg("p", None, false, false), &other),
            Err(HierarchyError::WorkloadMismatch { .. })
        ));
        assert!(matches!(
            check_edge(&cpg("p", None, true, false), &pg("x", Some("p"), false, false)),
            Err(HierarchyError::GangOverBasic { .. })
        ));
        // A gang CPG over a basic CPG is allowed (upstream cpg_test).
        assert!(check_edge(&cpg("p", None, true, false), &cpg("x", Some("p"), false, false)).is_ok());
        assert!(matches!(
            check_edge(&cpg("p", None, false, true), &pg("x", Some("p"), false, false)),
            Err(HierarchyError::AllOverSingle { .. })
        ));
        assert!(check_edge(&cpg("p", None, false, false), &pg("x", Some("p"), false, true)).is_ok());
        assert!(matches!(
            check_edge(&pg("p", None, false, false), &pg("x", Some("p"), false, false)),
            Err(HierarchyError::ParentNotComposite { .. })
        ));
        let msg = check_edge(&cpg("p", None, true, false), &pg("x", Some("p"), false, false))
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "gang parent \"compositepodgroup/ns/p\" cannot have basic child \"podgroup/ns/x\""
        );
    }
}
