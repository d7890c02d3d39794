//! CompositePodGroup hierarchies (KEP-6012): the tree a root CompositePodGroup entity carries
//! through a cycle, and its shape and consistency checks (upstream `validatePodGroup` for
//! hierarchies, `pkg/scheduler/schedule_one_podgroup.go`), built on the shared [`rules`].
//!
//! CompositePodGroups are inner nodes, PodGroups are leaves, and children point to their parent
//! by name; the tree is discovered from those parent references (there is no child list).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::model::{CompositeGroupInfo, CompositePolicy, DisruptionMode, GroupInfo, GroupKey, GroupPolicy};

pub mod rules;

pub use rules::{
    Ancestry, GroupNode, HierarchyError, MAX_TREE_DEPTH, check_edge, check_shape, validate_ancestry,
    validate_tree,
};

/// A member of a hierarchy below its root.
#[derive(Debug, Clone, PartialEq)]
pub enum TreeNode {
    /// An inner CompositePodGroup.
    Composite(Arc<CompositeGroupInfo>),
    /// A leaf PodGroup.
    Leaf(Arc<GroupInfo>),
}

impl TreeNode {
    fn key(&self) -> &GroupKey {
        match self {
            TreeNode::Composite(c) => &c.key,
            TreeNode::Leaf(l) => &l.key,
        }
    }

    fn parent(&self) -> Option<&GroupKey> {
        match self {
            TreeNode::Composite(c) => c.parent.as_ref(),
            TreeNode::Leaf(l) => l.parent.as_ref(),
        }
    }
}

/// A root CompositePodGroup with its whole subtree, as handed to the scheduler in
/// [`crate::QueuedEntity::tree`].
///
/// Children keep the order in which they were given to [`GroupTree::new`] (the queue gives
/// them in the order it first saw their objects, i.e. creation order for watch events; upstream
/// alpha sorts siblings by creation timestamp). Members whose parent is not reachable from the
/// root are ignored.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupTree {
    root: Arc<CompositeGroupInfo>,
    composites: HashMap<GroupKey, Arc<CompositeGroupInfo>>,
    leaves: HashMap<GroupKey, Arc<GroupInfo>>,
    children: HashMap<GroupKey, Vec<GroupKey>>,
}

impl GroupTree {
    /// Builds the tree of `root` from its members (any order across levels; sibling order =
    /// order in `members`). A member listed twice keeps its first occurrence; a cycle cannot
    /// form because only members reachable from the root are kept.
    pub fn new(root: Arc<CompositeGroupInfo>, members: impl IntoIterator<Item = TreeNode>) -> GroupTree {
        let members: Vec<TreeNode> = members.into_iter().collect();
        let mut by_parent: HashMap<&GroupKey, Vec<&TreeNode>> = HashMap::new();
        for m in &members {
            if let Some(p) = m.parent() {
                by_parent.entry(p).or_default().push(m);
            }
        }
        let mut tree = GroupTree {
            root: root.clone(),
            composites: HashMap::new(),
            leaves: HashMap::new(),
            children: HashMap::new(),
        };
        let mut seen: HashSet<GroupKey> = HashSet::new();
        seen.insert(root.key.clone());
        tree.composites.insert(root.key.clone(), root.clone());
        let mut stack = vec![root.key.clone()];
        while let Some(k) = stack.pop() {
            let mut kids = Vec::new();
            for m in by_parent.get(&k).map(Vec::as_slice).unwrap_or_default() {
                if !seen.insert(m.key().clone()) {
                    continue;
                }
                kids.push(m.key().clone());
                match m {
                    TreeNode::Composite(c) => {
                        tree.composites.insert(c.key.clone(), c.clone());
                        stack.push(c.key.clone());
                    }
                    TreeNode::Leaf(l) => {
                        tree.leaves.insert(l.key.clone(), l.clone());
                    }
                }
            }
            tree.children.insert(k, kids);
        }
        tree
    }

    /// The root CompositePodGroup.
    pub fn root(&self) -> &Arc<CompositeGroupInfo> {
        &self.root
    }

    /// A CompositePodGroup of the tree (the root included).
    pub fn composite(&self, key: &GroupKey) -> Option<&Arc<CompositeGroupInfo>> {
        self.composites.get(key)
    }

    /// A leaf PodGroup of the tree.
    pub fn leaf(&self, key: &GroupKey) -> Option<&Arc<GroupInfo>> {
        self.leaves.get(key)
    }

    /// Children of a CompositePodGroup in sibling order (empty for leaves and unknown keys).
    pub fn children(&self, key: &GroupKey) -> &[GroupKey] {
        self.children.get(key).map(Vec::as_slice).unwrap_or_default()
    }

    /// Every group of the tree in pre-order (root first, siblings in order).
    pub fn groups(&self) -> Vec<GroupKey> {
        let mut out = Vec::new();
        let mut stack = vec![self.root.key.clone()];
        while let Some(k) = stack.pop() {
            stack.extend(self.children(&k).iter().rev().cloned());
            out.push(k);
        }
        out
    }

    /// Leaf PodGroups below `key` (itself if it is a leaf), in pre-order.
    pub fn leaves_under(&self, key: &GroupKey) -> Vec<GroupKey> {
        let mut out = Vec::new();
        let mut stack = vec![key.clone()];
        while let Some(k) = stack.pop() {
            if self.leaves.contains_key(&k) {
                out.push(k);
            } else {
                stack.extend(self.children(&k).iter().rev().cloned());
            }
        }
        out
    }

    /// Number of leaf PodGroups.
    pub fn leaf_count(&self) -> usize {
        self.leaves.len()
    }

    /// Depth of the tree counting levels (a root with leaf children has depth 2). Iterative, so
    /// a tree of any shape costs no stack.
    pub fn depth(&self) -> usize {
        let mut max = 0;
        let mut stack = vec![(&self.root.key, 1usize)];
        while let Some((k, d)) = stack.pop() {
            max = max.max(d);
            stack.extend(self.children(k).iter().map(|c| (c, d + 1)));
        }
        max
    }

    /// Runtime checks of the tree (upstream `validatePodGroup` for hierarchies, KEP-6012):
    /// depth at most [`MAX_TREE_DEPTH`] and the shape rules of [`rules::check_shape`] on every
    /// edge (the same rules the controllers report in the `Valid` condition), and every group
    /// sharing the root's priority and preemption policy when both are set.
    ///
    /// Errors: [`HierarchyError::TooDeep`], [`HierarchyError::GangOverBasic`],
    /// [`HierarchyError::AllOverSingle`], [`HierarchyError::WorkloadMismatch`] (a group naming another Workload than
    /// the root's), [`HierarchyError::PriorityMismatch`],
    /// [`HierarchyError::PreemptionPolicyMismatch`]; the cycle reports them as SchedulerError.
    pub fn validate(&self) -> Result<(), HierarchyError> {
        let depth = self.depth();
        if depth > MAX_TREE_DEPTH {
            return Err(HierarchyError::TooDeep {
                group: self.root.key.to_string(),
                depth,
            });
        }
        for (k, kids) in &self.children {
            let Some(parent) = self.composites.get(k) else {
                continue;
            };
            let parent = composite_node(parent);
            for c in kids {
                let child = match (self.composites.get(c), self.leaves.get(c)) {
                    (Some(cc), _) => composite_node(cc),
                    (None, Some(l)) => leaf_node(l),
                    (None, None) => continue,
                };
                rules::check_shape(&parent, &child)?;
            }
        }
        for k in self.groups() {
            let (prio, policy, workload) = match (self.composites.get(&k), self.leaves.get(&k)) {
                (Some(c), _) => (c.priority, c.preemption_policy, &c.workload),
                (None, Some(l)) => (l.priority, l.preemption_policy, &l.workload),
                (None, None) => continue,
            };
            if let (Some(rw), Some(w)) = (&self.root.workload, workload)
                && rw != w
            {
                return Err(HierarchyError::WorkloadMismatch {
                    child: k.to_string(),
                    child_workload: w.to_string(),
                    parent: self.root.key.to_string(),
                    parent_workload: rw.to_string(),
                });
            }
            if let (Some(rp), Some(p)) = (self.root.priority, prio)
                && rp != p
            {
                return Err(HierarchyError::PriorityMismatch {
                    root: self.root.key.to_string(),
                    root_priority: rp,
                    group: k.to_string(),
                    priority: p,
                });
            }
            if let (Some(rp), Some(p)) = (self.root.preemption_policy, policy)
                && rp != p
            {
                return Err(HierarchyError::PreemptionPolicyMismatch {
                    root: self.root.key.to_string(),
                    root_policy: rp.to_string(),
                    group: k.to_string(),
                    policy: p.to_string(),
                });
            }
        }
        Ok(())
    }
}

/// The facts [`rules`] needs about a CompositePodGroup of a tree. The workload is not part of
/// the core's model; workload rules are checked by the controllers ([`rules::check_edge`]).
fn composite_node(c: &CompositeGroupInfo) -> GroupNode {
    GroupNode {
        key: c.key.clone(),
        parent: c.parent.as_ref().map(|p| p.name.to_string()),
        workload: None,
        gang: matches!(c.policy, CompositePolicy::Gang { .. }),
        disruption_all: c.disruption_mode == DisruptionMode::All,
    }
}

/// The facts [`rules`] needs about a leaf PodGroup of a tree.
fn leaf_node(l: &GroupInfo) -> GroupNode {
    GroupNode {
        key: l.key.clone(),
        parent: l.parent.as_ref().map(|p| p.name.to_string()),
        workload: None,
        gang: matches!(l.policy, GroupPolicy::Gang { .. }),
        disruption_all: l.disruption_mode == DisruptionMode::All,
    }
}

/// `namespace/name` of a group, as upstream prints group references in messages.
pub fn key_ref(k: &GroupKey) -> String {
    format!("{}/{}", k.namespace, k.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(name: &str, parent: &str, policy: GroupPolicy) -> TreeNode {
        let mut g = GroupInfo::new("ns", name, policy);
        g.parent = Some(GroupKey::composite("ns", parent));
        TreeNode::Leaf(Arc::new(g))
    }

    fn sub(name: &str, parent: &str, policy: CompositePolicy) -> TreeNode {
        let mut c = CompositeGroupInfo::new("ns", name, policy);
        c.parent = Some(GroupKey::composite("ns", parent));
        TreeNode::Composite(Arc::new(c))
    }

    #[test]
    fn builds_children_in_given_order_and_ignores_strangers() {
        let root = Arc::new(CompositeGroupInfo::new("ns", "root", CompositePolicy::Basic));
        let t = GroupTree::new(
            root,
            [
                leaf("pg2", "sub", GroupPolicy::Basic),
                sub("sub", "root", CompositePolicy::Basic),
                leaf("pg1", "sub", GroupPolicy::Basic),
                leaf("pgx", "other", GroupPolicy::Basic),
                leaf("pg0", "root", GroupPolicy::Basic),
            ],
        );
        let names = |v: Vec<GroupKey>| v.iter().map(|k| k.name.to_string()).collect::<Vec<_>>();
        assert_eq!(names(t.groups()), ["root", "sub", "pg2", "pg1", "pg0"]);
        assert_eq!(names(t.leaves_under(&t.root().key)), ["pg2", "pg1", "pg0"]);
        assert_eq!(t.depth(), 3);
        assert_eq!(t.leaf_count(), 3);
        assert!(t.validate().is_ok());
    }

    /// Upstream fails every group of a tree whose groups name different Workloads; before this check such a tree
    /// was scheduled.
    #[test]
    fn workload_mismatch_is_an_error() {
        let mut root = CompositeGroupInfo::new("ns", "root", CompositePolicy::Basic);
        root.workload = Some("w1".into());
        let mut g = GroupInfo::new("ns", "pg", GroupPolicy::Gang { min_count: 1 });
        g.parent = Some(root.key.clone());
        g.workload = Some("w2".into());
        let t = GroupTree::new(Arc::new(root.clone()), [TreeNode::Leaf(Arc::new(g.clone()))]);
        assert!(matches!(
            t.validate().unwrap_err(),
            HierarchyError::WorkloadMismatch { ref child_workload, .. } if child_workload == "w2"
        ));
        g.workload = Some("w1".into());
        let t = GroupTree::new(Arc::new(root), [TreeNode::Leaf(Arc::new(g))]);
        assert!(t.validate().is_ok());
    }

    #[test]
    fn shape_rules() {
        let gang = Arc::new(CompositeGroupInfo::new(
            "ns",
            "root",
            CompositePolicy::Gang { min_group_count: 1 },
        ));
        let t = GroupTree::new(gang.clone(), [leaf("pg", "root", GroupPolicy::Basic)]);
        assert_eq!(
            t.validate().unwrap_err().to_string(),
            "gang parent \"compositepodgroup/ns/root\" cannot have basic child \"podgroup/ns/pg\""
        );
        let mut deep: Vec<TreeNode> = [("a", "root"), ("b", "a"), ("c", "b")]
            .iter()
            .map(|(n, p)| sub(n, p, CompositePolicy::Basic))
            .collect();
        deep.push(leaf("pg", "c", GroupPolicy::Basic));
        let basic = Arc::new(CompositeGroupInfo::new("ns", "root", CompositePolicy::Basic));
        let t = GroupTree::new(basic, deep);
        assert_eq!(t.depth(), 5);
        assert!(matches!(
            t.validate().unwrap_err(),
            HierarchyError::TooDeep { depth: 5, .. }
        ));
        let mut all = (*gang).clone();
        all.disruption_mode = DisruptionMode::All;
        let t = GroupTree::new(
            Arc::new(all),
            [leaf("pg", "root", GroupPolicy::Gang { min_count: 1 })],
        );
        assert!(matches!(
            t.validate().unwrap_err(),
            HierarchyError::AllOverSingle { .. }
        ));
        let mut prio = (*gang).clone();
        prio.priority = Some(10);
        let mut g = GroupInfo::new("ns", "pg", GroupPolicy::Gang { min_count: 1 });
        g.parent = Some(prio.key.clone());
        g.priority = Some(5);
        let t = GroupTree::new(Arc::new(prio), [TreeNode::Leaf(Arc::new(g))]);
        assert_eq!(
            t.validate().unwrap_err().to_string(),
            "all pod groups in a hierarchy should have the same priority as the root pod group's priority, got 5 (\"podgroup/ns/pg\") and 10 (\"compositepodgroup/ns/root\")"
        );
    }
}
