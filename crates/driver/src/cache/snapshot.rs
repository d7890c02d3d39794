//! The cycle's snapshot, kept between cycles and brought up to date from what changed (upstream's cache does the
//! same with node generations, `pkg/scheduler/backend/cache/cache.go` `UpdateSnapshot`): a cycle pays for the nodes
//! and pods that changed since the last one, not for the whole cluster.
//!
//! What changes a snapshot, and how it is told:
//! - a watched pod or node changed: ingest marks it (`pod_changed`, `node_changed`);
//! - a pod was assumed by a decision, or forgotten after a failed bind: the cycle and `on_bind_result` mark it;
//! - a node became considered or stopped being so: the pods bound to it are marked with it;
//! - anything else (a resync, a fresh read after gaining leadership): the snapshot is dropped and built again.
//!
//! A marked pod is looked up again in the store, in the order [`crate::snapshot`] explains (the assume overlay
//! before the bound pods), and put into the snapshot as it is now, or taken out. The cycle's own extras (members
//! of the entity's groups bound outside this instance's nodes) and its preemption inputs are added for the cycle
//! and removed after it.

use std::sync::Arc;
use std::time::Instant;

use phalanx_scheduler::{PodKey, Snapshot};

use super::Cache;
use crate::snapshot;

impl Cache {
    /// The next cycle builds its snapshot from scratch (a resync, a fresh read of the bound pods).
    pub(crate) fn invalidate_snapshot(&mut self) {
        self.snapshots.invalidate();
    }

    /// Keeps the snapshot a cycle ran on for the next one: `extras` (the cycle's own additions) leave it, and the
    /// pods in `changed` (the decision's bindings) are refreshed from the store next time.
    pub(crate) fn keep_snapshot<'a>(
        &mut self,
        mut snap: Snapshot,
        extras: &[PodKey],
        changed: impl Iterator<Item = &'a PodKey>,
    ) {
        snap.commit();
        // The next cycle sets its own preemption inputs; dropping them now also lets go of the group maps shared
        // with the cache, which would otherwise be copied by the cache's first group change before that cycle.
        snap.clear_preemption_inputs();
        for k in extras {
            snap.remove_pod(k);
            self.snapshots.pod_changed(k);
        }
        self.snapshots.put(snap);
        for k in changed {
            self.snapshots.pod_changed(k);
        }
    }

    /// The snapshot of the considered nodes, the pods bound to them and the assumed pods, without any cycle's
    /// extras or preemption inputs: the one kept from the last cycle brought up to date, or a new one. With
    /// `verify_snapshot` a fresh build is compared with it, and wins on a difference.
    pub(crate) fn base_snapshot(&mut self) -> Snapshot {
        let started = Instant::now();
        let Some(mut snap) = self.snapshots.take() else {
            self.snapshots.invalidate();
            let snap = self.full_snapshot();
            self.metrics.snapshot("full", started.elapsed().as_secs_f64());
            return snap;
        };
        self.update_snapshot(&mut snap);
        self.metrics
            .snapshot("incremental", started.elapsed().as_secs_f64());
        if self.verify_snapshot {
            let fresh = self.full_snapshot();
            if let Some(diff) = snap.cluster_state_diff(&fresh) {
                // A watch event the loop has not handled yet shows in the fresh build only; a real bug shows again
                // and again. Either way the fresh build is right now.
                tracing::warn!(%diff, "the snapshot kept between cycles differs from a fresh one; using the fresh one");
                self.metrics.snapshot_mismatch();
                return fresh;
            }
        }
        snap
    }

    /// A snapshot built from scratch from the store, with the start times of all its pods.
    pub(crate) fn full_snapshot(&mut self) -> Snapshot {
        let nodes: Vec<_> = self
            .store
            .nodes()
            .state()
            .into_iter()
            .filter(|n| self.filter.matches(Some(n.labels())))
            .collect();
        let mut statics = Vec::with_capacity(nodes.len());
        let mut names = Vec::with_capacity(nodes.len());
        for n in &nodes {
            match n.model.clone() {
                Ok(s) => {
                    statics.push(s);
                    names.push(n.name.to_string());
                }
                Err(e) => tracing::warn!(node = %n.name, error = %e, "node skipped"),
            }
        }
        let mut snap = Snapshot::new(statics);
        for sp in snapshot::pods_for_snapshot(&self.store, &names) {
            let info = self.models.pod(&sp.pod, self.store.group_of_pod(&sp.pod));
            snap.set_pod_start_time(sp.pod.key(), sp.pod.start_millis());
            match sp.assumed_on {
                None => {
                    snap.add_pod(info);
                }
                Some(node) => {
                    let mut info = (*info).clone();
                    info.node_name = Some(node.as_str().into());
                    snap.add_pod(Arc::new(info));
                }
            }
        }
        snap
    }

    /// Applies the marked nodes, then the marked pods.
    fn update_snapshot(&mut self, snap: &mut Snapshot) {
        for name in self.snapshots.take_dirty_nodes() {
            let node = self
                .store
                .nodes()
                .get(&kube::runtime::reflector::ObjectRef::new(&name))
                .filter(|n| self.filter.matches(Some(n.labels())));
            let wanted = node.and_then(|n| n.model.clone().ok());
            match wanted {
                Some(st) => {
                    let added = snap.node_index(&name).is_none();
                    snap.upsert_node(st);
                    if added {
                        for p in self.store.pods_on_node(&name) {
                            self.snapshots.mark_pod(p.key().clone());
                        }
                    }
                }
                None => {
                    if let Some(i) = snap.node_index(&name) {
                        for p in &snap.node(i).pods {
                            self.snapshots.mark_pod(p.key.clone());
                        }
                        snap.remove_node(&name);
                    }
                }
            }
        }
        for key in self.snapshots.take_dirty_pods() {
            self.refresh_pod(snap, &key);
        }
    }

    /// Puts one pod into `snap` as the store has it now (bound to a considered node, else assumed), or takes it
    /// out. The overlay is read before the bound pod (see [`crate::snapshot`]); a pod in both counts as bound.
    fn refresh_pod(&mut self, snap: &mut Snapshot, key: &PodKey) {
        let assumed = self.store.assumed_pod(key);
        let bound = self
            .store
            .pod(key)
            .filter(|p| !p.is_terminal() && p.node_name().is_some_and(|n| snap.node_index(n).is_some()));
        let (info, start) = match (bound, assumed) {
            (Some(p), _) => (self.models.pod(&p, self.store.group_of_pod(&p)), p.start_millis()),
            (None, Some(a)) => {
                let mut info = (*self.models.pod(&a.pod, self.store.group_of_pod(&a.pod))).clone();
                info.node_name = Some(a.node.as_str().into());
                (Arc::new(info), a.pod.start_millis())
            }
            (None, None) => {
                snap.remove_pod(key);
                snap.set_pod_start_time(key, None);
                return;
            }
        };
        snap.add_pod(info);
        snap.set_pod_start_time(key, start);
    }
}
