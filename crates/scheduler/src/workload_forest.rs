//! The workload forest: which CompositePodGroups and hierarchy leaves the queue knows, how they
//! link, and which queue entity holds each leaf's pods (upstream keeps this apart from the
//! heaps too, `pkg/scheduler/backend/workloadmanager`).
//!
//! A leaf PodGroup under a CompositePodGroup is scheduled with the whole tree of its root
//! (KEP-6012), so its pods live in the root's entity. Parent links arrive in any order and may
//! form cycles or chains that are too long; every walk here is bounded by `MAX_CHAIN` (16),
//! and such a leaf stays its own entity (its cycle reports the invalid hierarchy).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::hierarchy::{GroupTree, TreeNode};
use crate::model::{CompositeGroupInfo, EntityKey, GroupInfo, GroupKey};

/// Longest parent chain followed when looking for a root (deeper chains and cycles are
/// reported as an invalid hierarchy).
pub(crate) const MAX_CHAIN: usize = 16;

/// The hierarchy bookkeeping of [`crate::SchedulingQueue`]. Sequence numbers are the queue's
/// first-seen order, which is the sibling order of a tree.
#[derive(Debug, Default)]
pub(crate) struct WorkloadForest {
    /// Known CompositePodGroups with the sequence number they were first seen at.
    pub(crate) composites: HashMap<GroupKey, (Arc<CompositeGroupInfo>, u64)>,
    /// Known PodGroups that have a parent (hierarchy leaves), first-seen sequence.
    pub(crate) leaves: HashMap<GroupKey, (Arc<GroupInfo>, u64)>,
    /// Parent CPG -> children (first-seen order), for every known child object.
    pub(crate) children: HashMap<GroupKey, BTreeMap<u64, GroupKey>>,
    /// Leaves whose pods currently live in another entity (their root's); absent = own entity.
    pub(crate) homes: HashMap<GroupKey, EntityKey>,
}

impl WorkloadForest {
    pub(crate) fn home_of(&self, leaf: &GroupKey) -> EntityKey {
        if self.homes.is_empty() {
            return EntityKey::Group(leaf.clone());
        }
        self.homes
            .get(leaf)
            .cloned()
            .unwrap_or_else(|| EntityKey::Group(leaf.clone()))
    }

    /// Where a leaf's pods should live: the topmost CompositePodGroup reachable through known
    /// parents (an unknown CPG ends the chain: the tree waits for it). A leaf with no parent,
    /// or whose chain is a cycle or too long, is its own entity.
    pub(crate) fn root_of(&self, leaf: &GroupKey) -> EntityKey {
        let own = EntityKey::Group(leaf.clone());
        let Some(mut cur) = self.leaves.get(leaf).and_then(|(g, _)| g.parent.clone()) else {
            return own;
        };
        for _ in 0..MAX_CHAIN {
            match self.composites.get(&cur).map(|(c, _)| c.parent.clone()) {
                Some(Some(p)) => cur = p,
                _ => return EntityKey::Group(cur),
            }
        }
        own
    }

    pub(crate) fn link_child(
        &mut self,
        child: &GroupKey,
        old_parent: Option<&GroupKey>,
        parent: Option<&GroupKey>,
        seq: u64,
    ) {
        if old_parent == parent {
            return;
        }
        if let Some(op) = old_parent
            && let Some(m) = self.children.get_mut(op)
        {
            m.retain(|_, k| k != child);
            if m.is_empty() {
                self.children.remove(op);
            }
        }
        if let Some(p) = parent {
            self.children
                .entry(p.clone())
                .or_default()
                .insert(seq, child.clone());
        }
    }

    /// Entity holding the tree of a CompositePodGroup (its root's).
    pub(crate) fn root_entity_of_composite(&self, key: &GroupKey) -> EntityKey {
        let mut cur = key.clone();
        for _ in 0..MAX_CHAIN {
            match self.composites.get(&cur).map(|(c, _)| c.parent.clone()) {
                Some(Some(p)) => cur = p,
                _ => break,
            }
        }
        EntityKey::Group(cur)
    }

    pub(crate) fn child_ready(
        &self,
        key: &GroupKey,
        present: &HashMap<GroupKey, usize>,
        depth: usize,
    ) -> bool {
        if depth > MAX_CHAIN {
            return false;
        }
        if let Some((leaf, _)) = self.leaves.get(key) {
            return present.get(key).copied().unwrap_or(0) >= leaf.policy.min_count() as usize;
        }
        let Some((cpg, _)) = self.composites.get(key) else {
            return false;
        };
        let ready = self.children.get(key).map_or(0, |m| {
            m.values()
                .filter(|k| self.child_ready(k, present, depth + 1))
                .count()
        });
        ready >= cpg.policy.min_group_count() as usize
    }

    /// The tree of a known root CompositePodGroup, siblings in first-seen order.
    pub(crate) fn build_tree(&self, root: &GroupKey) -> Option<GroupTree> {
        let (cpg, _) = self.composites.get(root)?;
        let mut members = Vec::new();
        let mut stack = vec![root.clone()];
        let mut seen = HashSet::new();
        while let Some(k) = stack.pop() {
            if !seen.insert(k.clone()) || seen.len() > 10_000 {
                continue;
            }
            for child in self.children.get(&k).into_iter().flat_map(|m| m.values()) {
                if let Some((c, _)) = self.composites.get(child) {
                    members.push(TreeNode::Composite(c.clone()));
                    stack.push(child.clone());
                } else if let Some((l, _)) = self.leaves.get(child) {
                    members.push(TreeNode::Leaf(l.clone()));
                }
            }
        }
        Some(GroupTree::new(cpg.clone(), members))
    }
}
