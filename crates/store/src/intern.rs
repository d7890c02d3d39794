//! Sharing of equal values among cached records: one copy of each label map and of each namespace, scheduler and
//! group name, however many pods carry it.
//!
//! The pods of one gang usually carry the same labels (their template's) and always the same namespace, scheduler
//! name and group: a label map alone is a B-tree node of about 0.5 KB plus its strings, so a gang of 8 kept eight
//! copies of about 0.7 KB that one `Arc` can replace (`cargo bench -p phalanx-store --bench cache_bytes`,
//! docs/benchmarks.md). Pods with a label of their own (a Job's completion index, a StatefulSet's pod name) share
//! nothing of their map, and cost one hash of it.

use std::collections::{BTreeMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;

/// Below this many entries a set is never pruned.
const MIN_PRUNE: usize = 1024;

/// A set of shared values that forgets the ones no record holds any more: when it has doubled since the last
/// prune, entries whose only holder is the set are dropped (amortised O(1) per insert).
#[derive(Debug)]
struct Shared<T: ?Sized + Eq + Hash> {
    set: HashSet<Arc<T>>,
    live_after_prune: usize,
}

impl<T: ?Sized + Eq + Hash> Default for Shared<T> {
    fn default() -> Self {
        Shared {
            set: HashSet::new(),
            live_after_prune: 0,
        }
    }
}

impl<T: ?Sized + Eq + Hash> Shared<T> {
    /// The shared copy equal to `value`, which becomes the shared copy when there is none.
    fn get(&mut self, value: &Arc<T>) -> Arc<T> {
        if let Some(v) = self.set.get(&**value) {
            return v.clone();
        }
        if self.set.len() >= MIN_PRUNE.max(2 * self.live_after_prune) {
            self.set.retain(|v| Arc::strong_count(v) > 1);
            self.live_after_prune = self.set.len();
        }
        self.set.insert(value.clone());
        value.clone()
    }

    fn len(&self) -> usize {
        self.set.len()
    }
}

/// Shared label maps and strings for the records of one cache ([`crate::record`]).
#[derive(Debug, Default)]
pub struct Interner {
    labels: Shared<BTreeMap<String, String>>,
    strings: Shared<str>,
}

impl Interner {
    /// The shared label map equal to `labels`.
    pub fn labels(&mut self, labels: &Arc<BTreeMap<String, String>>) -> Arc<BTreeMap<String, String>> {
        self.labels.get(labels)
    }

    /// The shared string equal to `s`.
    pub fn string(&mut self, s: &Arc<str>) -> Arc<str> {
        self.strings.get(s)
    }

    /// How many label maps and strings are held (for tests and metrics).
    pub fn len(&self) -> (usize, usize) {
        (self.labels.len(), self.strings.len())
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == (0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal values come back as one copy; a value no one holds any more is forgotten once the set has grown.
    #[test]
    fn equal_values_share_one_copy_and_dead_ones_are_pruned() {
        let mut i = Interner::default();
        let a: Arc<BTreeMap<String, String>> = Arc::new([("app".to_string(), "x".to_string())].into());
        let b = Arc::new((*a).clone());
        let first = i.labels(&a);
        let second = i.labels(&b);
        assert!(Arc::ptr_eq(&first, &second) && Arc::ptr_eq(&first, &a));
        let s1 = i.string(&Arc::from("ns"));
        assert!(Arc::ptr_eq(&s1, &i.string(&Arc::from("ns"))));
        drop((first, second, a, b, s1));
        for n in 0..3 * MIN_PRUNE {
            let _ = i.string(&Arc::from(format!("gone-{n}").as_str()));
        }
        let kept = i.string(&Arc::from("kept"));
        assert!(
            i.len().1 < 2 * MIN_PRUNE + 1,
            "dead strings pruned: {:?}",
            i.len()
        );
        assert!(Arc::ptr_eq(&kept, &i.string(&Arc::from("kept"))));
    }
}
