//! The snapshot kept between cycles and the marks of what changed since (see `super::snapshot` for how a cycle
//! brings it up to date). Its own state only; the cache owns it.

use std::collections::HashSet;

use phalanx_scheduler::{PodKey, Snapshot};

/// The snapshot kept between cycles and what changed since it was last brought up to date.
#[derive(Default)]
pub(crate) struct SnapshotCache {
    /// The snapshot of the last cycle; `None` when the next one is built from scratch.
    snap: Option<Snapshot>,
    dirty_nodes: HashSet<String>,
    dirty_pods: HashSet<PodKey>,
}

impl SnapshotCache {
    /// The next cycle builds its snapshot from scratch.
    pub(crate) fn invalidate(&mut self) {
        self.snap = None;
        self.dirty_nodes.clear();
        self.dirty_pods.clear();
    }

    /// A pod's state (bound, assumed, gone) may have changed.
    pub(crate) fn pod_changed(&mut self, key: &PodKey) {
        if self.snap.is_some() {
            self.dirty_pods.insert(key.clone());
        }
    }

    /// A node may have changed, appeared or gone.
    pub(crate) fn node_changed(&mut self, name: &str) {
        if self.snap.is_some() {
            self.dirty_nodes.insert(name.to_owned());
        }
    }

    /// Keeps the snapshot a cycle ran on, for the next cycle.
    pub(crate) fn put(&mut self, snap: Snapshot) {
        self.snap = Some(snap);
    }

    /// Takes the kept snapshot out to bring it up to date (`None`: build one from scratch).
    pub(crate) fn take(&mut self) -> Option<Snapshot> {
        self.snap.take()
    }

    /// The nodes marked since the last update, unmarked.
    pub(crate) fn take_dirty_nodes(&mut self) -> HashSet<String> {
        std::mem::take(&mut self.dirty_nodes)
    }

    /// The pods marked since the last update, unmarked.
    pub(crate) fn take_dirty_pods(&mut self) -> HashSet<PodKey> {
        std::mem::take(&mut self.dirty_pods)
    }

    /// Marks a pod during an update (the snapshot is out: [`SnapshotCache::pod_changed`] would not record it).
    pub(crate) fn mark_pod(&mut self, key: PodKey) {
        self.dirty_pods.insert(key);
    }
}
