//! Groups and hierarchies in the queue: adding, changing and removing PodGroups and
//! CompositePodGroups, and moving a leaf's pods to the entity of its tree's root (KEP-6012).
//! The links themselves live in [`crate::workload_forest`].

use std::sync::Arc;
use std::time::Instant;

use super::SchedulingQueue;
use crate::model::{
    CompositeGroupInfo, CompositePolicy, EntityKey, GroupInfo, GroupKey, GroupPolicy, PodKey,
};

impl SchedulingQueue {
    /// Moves a leaf's pending and assigned pods to the entity of its current root (deferred
    /// while either entity is in flight).
    pub(super) fn rehome(&mut self, leaf: &GroupKey, now: Instant) {
        let want = self.forest.root_of(leaf);
        let cur = self.forest.home_of(leaf);
        if want == cur {
            return;
        }
        if self.in_flight.contains(&cur) || self.in_flight.contains(&want) {
            if !self.deferred.contains(leaf) {
                self.deferred.push(leaf.clone());
            }
            return;
        }
        let (mut pods, mut assigned) = (Vec::new(), Vec::new());
        if let Some(e) = self.entries.get_mut(&cur) {
            let keys: Vec<PodKey> = e
                .pods
                .iter()
                .filter(|(_, (p, _))| p.group_key().as_ref() == Some(leaf))
                .map(|(k, _)| k.clone())
                .collect();
            for k in keys {
                if let Some(v) = e.pods.remove(&k) {
                    pods.push((k, v));
                }
            }
            let keys: Vec<PodKey> = e
                .assigned
                .iter()
                .filter(|(_, g)| g.as_ref() == Some(leaf))
                .map(|(k, _)| k.clone())
                .collect();
            for k in keys {
                e.assigned.remove(&k);
                assigned.push(k);
            }
        }
        if want == EntityKey::Group(leaf.clone()) {
            self.forest.homes.remove(leaf);
        } else {
            self.forest.homes.insert(leaf.clone(), want.clone());
        }
        let dest = self.entry_mut(&want, now);
        if dest.pods.is_empty() && !pods.is_empty() {
            dest.timestamp = now;
        }
        dest.pods.extend(pods);
        dest.assigned
            .extend(assigned.into_iter().map(|k| (k, Some(leaf.clone()))));
        self.reevaluate(&cur, now);
        self.cleanup(&cur);
        self.wake(&want, now);
        self.reevaluate(&want, now);
        self.cleanup(&want);
    }

    /// Re-homes every hierarchy leaf (after a CompositePodGroup appeared, changed or vanished).
    pub(super) fn rehome_all(&mut self, now: Instant) {
        let mut leaves: Vec<GroupKey> = self.forest.leaves.keys().cloned().collect();
        leaves.extend(self.forest.homes.keys().cloned());
        leaves.sort();
        leaves.dedup();
        for l in leaves {
            self.rehome(&l, now);
        }
    }

    /// Adds or replaces a CompositePodGroup (KEP-6012). Pods of leaves below it join the entity
    /// of its root; a new CPG or a lowered `minGroupCount` (or gang → basic) wakes that entity.
    pub fn add_composite_group(&mut self, group: Arc<CompositeGroupInfo>, now: Instant) {
        let key = group.key.clone();
        let (old, seq) = match self.forest.composites.get(&key) {
            Some((old, seq)) => (Some(old.clone()), *seq),
            None => (None, self.next_seq()),
        };
        let wake = match (&old, group.policy) {
            (None, _) => true,
            // A changed `preemptionDelaySeconds` (Phalanx) is applied at once: the runtime decides again whether the
            // root's preemption still waits (it might be over now).
            (Some(o), _) if o.preemption_delay_seconds != group.preemption_delay_seconds => true,
            (Some(o), CompositePolicy::Gang { min_group_count }) => match o.policy {
                CompositePolicy::Gang { min_group_count: m } => min_group_count < m,
                CompositePolicy::Basic => true,
            },
            (Some(o), CompositePolicy::Basic) => o.policy != CompositePolicy::Basic,
        };
        let old_parent = old.as_ref().and_then(|o| o.parent.clone());
        self.forest
            .link_child(&key, old_parent.as_ref(), group.parent.as_ref(), seq);
        self.forest.composites.insert(key.clone(), (group, seq));
        self.rehome_all(now);
        let root = self.forest.root_entity_of_composite(&key);
        if wake {
            self.wake(&root, now);
        }
        self.reevaluate(&root, now);
    }

    /// Same as [`SchedulingQueue::add_composite_group`].
    pub fn update_composite_group(&mut self, group: Arc<CompositeGroupInfo>, now: Instant) {
        self.add_composite_group(group, now);
    }

    /// Forgets a CompositePodGroup; pending pods below it wait (gated `WaitingForPodGroup`)
    /// in the entity named after it until it reappears.
    pub fn delete_composite_group(&mut self, key: &GroupKey, now: Instant) {
        let root = self.forest.root_entity_of_composite(key);
        let Some((old, _)) = self.forest.composites.remove(key) else {
            return;
        };
        self.forest.link_child(key, old.parent.as_ref(), None, 0);
        self.rehome_all(now);
        let own = EntityKey::Group(key.clone());
        for k in [root, own] {
            self.reevaluate(&k, now);
            self.cleanup(&k);
        }
    }

    /// Adds or replaces a group object. A lowered `minCount` (or any change from gang to a
    /// different policy) wakes the group from the unschedulable pool, and so does a changed
    /// `preemptionDelaySeconds` (the runtime decides again whether its preemption still waits).
    pub fn add_group(&mut self, group: Arc<GroupInfo>, now: Instant) {
        let key = EntityKey::Group(group.key.clone());
        if group.parent.is_some() || self.forest.leaves.contains_key(&group.key) {
            return self.add_tree_leaf(group, now);
        }
        let entry = self.entry_mut(&key, now);
        let wake = match (&entry.group, group.policy) {
            (None, _) => true,
            (Some(old), _) if old.preemption_delay_seconds != group.preemption_delay_seconds => true,
            (Some(old), GroupPolicy::Gang { min_count }) => match old.policy {
                GroupPolicy::Gang { min_count: old_min } => min_count < old_min,
                GroupPolicy::Basic => true,
            },
            (Some(old), GroupPolicy::Basic) => old.policy != GroupPolicy::Basic,
        };
        entry.group = Some(group);
        if wake {
            self.wake(&key, now);
        }
        self.reevaluate(&key, now);
    }

    /// A PodGroup with a parent (or that had one): kept in the hierarchy index; its pods live
    /// in its root's entity, which it wakes when new or when `minCount` was lowered.
    pub(super) fn add_tree_leaf(&mut self, group: Arc<GroupInfo>, now: Instant) {
        let gk = group.key.clone();
        let own = EntityKey::Group(gk.clone());
        let (old, seq) = match self.forest.leaves.get(&gk) {
            Some((old, seq)) => (Some(old.clone()), *seq),
            None => (None, self.next_seq()),
        };
        let wake = match (&old, group.policy) {
            (None, _) => true,
            (Some(o), GroupPolicy::Gang { min_count }) => match o.policy {
                GroupPolicy::Gang { min_count: m } => min_count < m,
                GroupPolicy::Basic => true,
            },
            (Some(o), GroupPolicy::Basic) => o.policy != GroupPolicy::Basic,
        };
        let old_parent = old.as_ref().and_then(|o| o.parent.clone());
        self.forest
            .link_child(&gk, old_parent.as_ref(), group.parent.as_ref(), seq);
        if group.parent.is_some() {
            self.forest.leaves.insert(gk.clone(), (group.clone(), seq));
        } else {
            self.forest.leaves.remove(&gk);
        }
        self.entry_mut(&own, now).group = Some(group);
        self.rehome(&gk, now);
        let home = self.forest.home_of(&gk);
        if wake {
            self.wake(&home, now);
        }
        self.reevaluate(&home, now);
        if home != own {
            self.reevaluate(&own, now);
            self.cleanup(&own);
        }
    }

    /// Same as [`SchedulingQueue::add_group`].
    pub fn update_group(&mut self, group: Arc<GroupInfo>, now: Instant) {
        self.add_group(group, now);
    }

    /// Forgets a group object; its pending pods wait with `WaitingForPodGroup`.
    pub fn delete_group(&mut self, key: &GroupKey, now: Instant) {
        let ek = EntityKey::Group(key.clone());
        if let Some(e) = self.entries.get_mut(&ek) {
            e.group = None;
        }
        if let Some((old, _)) = self.forest.leaves.remove(key) {
            self.forest.link_child(key, old.parent.as_ref(), None, 0);
            let home = self.forest.home_of(key);
            self.rehome(key, now);
            self.reevaluate(&home, now);
            self.cleanup(&home);
        }
        self.reevaluate(&ek, now);
        self.cleanup(&ek);
    }
}
