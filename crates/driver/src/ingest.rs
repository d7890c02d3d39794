//! Ingest: store events into the queue (upstream `pkg/scheduler/eventhandlers.go`).
//!
//! Each watch event becomes a queue operation or a [`ClusterEvent`] that may wake unschedulable entities. A resync
//! reconciles the whole queue with the store (at start, after a relist or when events lagged).

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Instant,
};

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use phalanx_api::{v1alpha3::CompositePodGroup, v1beta1::PodGroup};
use phalanx_scheduler::{ClusterEvent, EntityKey, GroupKey, GroupKind, NodeStatic, PodInfo, PodKey};
use phalanx_store::{PodRecord, StoreEvent};

use crate::{convert, state::Driver};

impl Driver {
    pub(crate) fn on_event(&mut self, ev: StoreEvent) {
        let now = Instant::now();
        match ev {
            StoreEvent::Pod {
                key,
                group,
                node,
                deleted,
            } => self.on_pod(key, group, node, deleted, now),
            StoreEvent::Node(name) => self.on_node(&name, now),
            StoreEvent::Group(g) => self.on_group(&g, now),
            // Owner changes reach the scheduler as the `Pod` events of the pods whose group they changed; a group
            // sized from the owner is re-read, to hold or release it (`resize`).
            StoreEvent::Owner(o) => {
                if let Some(g) = self.sized_groups.get(&o.uid).cloned() {
                    self.on_group(&g, now);
                }
            }
            StoreEvent::Other => {}
            StoreEvent::Volume => {
                self.volume_catalog = None;
                self.queue.on_event(ClusterEvent::StorageChanged, now);
            }
            StoreEvent::Devices => {
                self.device_catalog = None;
                self.queue.on_event(ClusterEvent::DevicesChanged, now);
            }
            StoreEvent::Resync => self.resync(),
        }
    }

    pub(crate) fn on_pod(
        &mut self,
        key: PodKey,
        group: Option<GroupKey>,
        node: Option<String>,
        deleted: bool,
        now: Instant,
    ) {
        self.snapshots.pod_changed(&key);
        let pod = if deleted { None } else { self.store.pod(&key) };
        self.writer.observe_pod(&key, pod.as_deref());
        // The holders of allocated claims follow the pods (DeviceCatalog::held): a pod with claims that got a
        // node, or any pod deleted while devices are allocated, rebuilds the device catalog.
        let has_claims = pod
            .as_ref()
            .is_some_and(|p| !p.info.spec.resource_claims.is_empty());
        if has_claims
            || (deleted
                && self
                    .device_catalog
                    .as_ref()
                    .is_some_and(|c| !c.allocated.is_empty()))
        {
            self.device_catalog = None;
        }
        match &pod {
            // Any pod may be a victim terminating by preemption; ours are handled with their queue model below.
            Some(p) if p.is_terminal() || !self.ours(p) => self.preemption.on_pod(p, None),
            Some(_) => {}
            None => {
                if self.preemption.on_pod_deleted(&key) {
                    // A pending pod with room kept for it (a nomination or a bind reservation): what waited behind
                    // that room may fit now. Upstream's queue gets the deletion of an unscheduled pod as the
                    // `UnscheduledPodDelete` cluster event (`pkg/scheduler/eventhandlers.go`).
                    self.queue.on_event(
                        ClusterEvent::AssignedPodDeleted {
                            pod: key.clone(),
                            group: None,
                        },
                        now,
                    );
                }
            }
        }
        match pod {
            Some(p) if !p.is_terminal() && self.ours(&p) => {
                let info = self.queue_info(&key, &p);
                // A pending pod's nomination (written by an earlier preemption, ours or a previous leader's) keeps
                // its room reserved; a bound pod needs none.
                self.preemption.on_pod(&p, Some(&info));
                if self.known.insert(key, info.clone()).is_some() {
                    self.queue.update_pod(info, now);
                } else {
                    self.queue.add_pod(info, now);
                }
            }
            Some(ref p)
                if !p.is_terminal()
                    && !self.known.contains_key(&key)
                    && node.as_deref().is_some_and(|n| self.node_considered(n)) =>
            {
                // Someone else's pod landed on one of our nodes: the first sighting may satisfy a waiting pod's
                // affinity or change spread counts (later updates of the same pod are not new arrivals).
                if self.foreign_bound.insert(key.clone()) {
                    self.queue
                        .on_event(ClusterEvent::AssignedPodAdded { pod: key, group }, now);
                }
            }
            Some(ref p) if !p.is_terminal() && p.node_name().is_none() && group.is_some() => {
                // A pending pod of another scheduler names one of our groups: it breaks the gang. Tell the group
                // now (its gate message names the pod), or let its next cycle fail it with SchedulerError.
                let Some(g) = group.clone() else { return };
                let entity = EntityKey::Group(g);
                match self.queue.gate(&entity).cloned() {
                    Some(gate) => self.announce_gate(&entity, &gate),
                    None => self.queue.on_event(ClusterEvent::AssignedPodUpdated, now),
                }
            }
            Some(ref p) if p.is_succeeded() && self.ours(p) && group.is_some() => {
                // A member that finished: it frees its node but keeps counting toward its gang's quorum, so the
                // last pods of a Job with `completions > parallelism` can still bind (k/k#142330).
                self.foreign_bound.remove(&key);
                self.complete(key, p, now);
            }
            other => {
                let terminal = other.as_ref().is_some_and(|p| p.is_terminal());
                self.foreign_bound.remove(&key);
                if let Some(old) = self.known.remove(&key).or_else(|| self.completed.remove(&key)) {
                    self.queue.delete_pod(&old, now);
                } else if (other.is_none() || terminal)
                    && let Some(n) = node.as_deref()
                    && self.node_considered(n)
                {
                    // Capacity freed on one of our nodes by someone else's pod.
                    self.queue.on_event(
                        ClusterEvent::AssignedPodDeleted {
                            pod: key.clone(),
                            group: group.clone(),
                        },
                        now,
                    );
                }
                if other.is_none() {
                    self.cache.remove_pod(&key);
                }
            }
        }
    }

    /// Records a Succeeded member of one of our groups with the queue, once ([`Driver::completed`]).
    pub(crate) fn complete(&mut self, key: PodKey, p: &PodRecord, now: Instant) {
        if self.completed.contains_key(&key) {
            return;
        }
        let info = self
            .known
            .remove(&key)
            .unwrap_or_else(|| self.cache.pod(p, self.store.group_of_pod(p)));
        self.queue.complete_pod(&info, now);
        self.completed.insert(key, info);
    }

    /// The pod as the queue should see it: an assumed pod counts as assigned to its assumed node (upstream counts
    /// assumed pods as scheduled), so an older watch event of a pod being bound does not put it back in the queue
    /// or lower its group's quorum count.
    pub(crate) fn queue_info(&mut self, key: &PodKey, p: &PodRecord) -> Arc<PodInfo> {
        let info = self.cache.pod(p, self.store.group_of_pod(p));
        match self.store.assumed_node(key) {
            Some(node) if info.node_name.is_none() => {
                let mut i = (*info).clone();
                i.node_name = Some(node.as_str().into());
                Arc::new(i)
            }
            _ => info,
        }
    }

    pub(crate) fn on_node(&mut self, name: &str, now: Instant) {
        self.snapshots.node_changed(name);
        let node = self
            .store
            .nodes()
            .get(&kube::runtime::reflector::ObjectRef::new(name));
        match node {
            Some(n) if self.filter.matches(Some(n.labels())) => {
                // Compared with what ingest itself saw last, not with the conversion cache: a snapshot built
                // between the watch event and this call refreshes that cache, and the change would look like no
                // change, so the waiting groups would sleep until the periodic flush.
                match n.model.clone() {
                    Ok(new) => {
                        if let Some(ev) = node_event(&mut self.nodes_seen, name, new) {
                            self.queue.on_event(ev, now);
                        }
                    }
                    Err(e) => tracing::warn!(node = name, error = %e, "node skipped"),
                }
            }
            _ => {
                self.nodes_seen.remove(name);
            }
        }
    }

    /// The core's view of a PodGroup, with the runtime's resize hold ([`crate::resize`]); remembers which owner
    /// sized it, so that the owner's next change re-reads the group.
    fn pod_group_info(
        &mut self,
        key: &GroupKey,
        pg: &PodGroup,
        classes: &[Arc<k8s_openapi::api::scheduling::v1::PriorityClass>],
    ) -> phalanx_scheduler::GroupInfo {
        let mut info = convert::group_info(pg, classes);
        // The controller reference does not change, so the map changes only for a new or a deleted group (and
        // a PodGroup object replaced under its name); no scan on the hot path of status updates.
        if let Some((owner, _)) = crate::resize::sized_owner(pg) {
            if self.sized_owner_of.get(key) != Some(&owner.uid) {
                self.forget_sized(key);
                self.sized_owner_of.insert(key.clone(), owner.uid.clone());
                self.sized_groups.insert(owner.uid, key.clone());
            }
            info.resizing = crate::resize::resizing(&self.store, pg).map(Arc::from);
        } else {
            self.forget_sized(key);
        }
        info
    }

    pub(crate) fn on_group(&mut self, g: &GroupKey, now: Instant) {
        match g.kind {
            GroupKind::PodGroup => match self.store.pod_group(&g.namespace, &g.name) {
                Some(pg) => {
                    self.known_groups.insert(g.clone());
                    let info = Arc::new(self.pod_group_info(g, &pg, &self.store.priority_classes().state()));
                    self.group_infos.insert(g.clone(), info.clone());
                    self.queue.add_group(info, now);
                }
                None => self.forget_group(g, now),
            },
            GroupKind::CompositePodGroup => match self.store.composite_pod_group(&g.namespace, &g.name) {
                Some(cpg) => {
                    self.known_groups.insert(g.clone());
                    let info = Arc::new(convert::composite_info(
                        &cpg,
                        &self.store.priority_classes().state(),
                    ));
                    self.composite_infos.insert(g.clone(), info.clone());
                    self.queue.add_composite_group(info, now);
                }
                None => self.forget_group(g, now),
            },
        }
    }

    /// Drops `key` from the owner -> sized group maps.
    fn forget_sized(&mut self, key: &GroupKey) {
        if let Some(uid) = self.sized_owner_of.remove(key)
            && self.sized_groups.get(&uid) == Some(key)
        {
            self.sized_groups.remove(&uid);
        }
    }

    pub(crate) fn forget_group(&mut self, g: &GroupKey, now: Instant) {
        self.forget_sized(g);
        self.group_infos.remove(g);
        self.composite_infos.remove(g);
        // The conditions last wanted on it: a write still queued finds none and writes nothing, and a group
        // recreated under the name starts afresh (its uid differs anyway).
        self.group_wanted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(g);
        if !self.known_groups.remove(g) {
            return;
        }
        match g.kind {
            GroupKind::PodGroup => self.queue.delete_group(&g.clone(), now),
            GroupKind::CompositePodGroup => self.queue.delete_composite_group(&g.clone(), now),
        }
    }

    /// Reconciles the queue with the whole store (start, relist, lagged events).
    pub(crate) fn resync(&mut self) {
        self.snapshots.invalidate();
        let now = Instant::now();
        let classes = self.store.priority_classes().state();
        // Both kinds in creation order (then namespace and name), as upstream orders siblings: the queue's
        // first-seen order is a tree's sibling order and decides who wins under contention, so it must not depend
        // on the hash order of the caches.
        enum Obj {
            Pg(Arc<PodGroup>),
            Cpg(Arc<CompositePodGroup>),
        }
        let mut objs: Vec<(Option<Timestamp>, String, String, Obj)> = Vec::new();
        for g in self.store.pod_groups().state() {
            let created = g.metadata.creation_timestamp.as_ref().map(|t| t.0);
            objs.push((
                created,
                g.namespace().unwrap_or_default(),
                g.name_any(),
                Obj::Pg(g),
            ));
        }
        for c in self.store.composite_pod_groups().state() {
            let created = c.metadata.creation_timestamp.as_ref().map(|t| t.0);
            objs.push((
                created,
                c.namespace().unwrap_or_default(),
                c.name_any(),
                Obj::Cpg(c),
            ));
        }
        objs.sort_by(|a, b| (a.0, &a.1, &a.2).cmp(&(b.0, &b.1, &b.2)));
        let mut seen_groups = HashSet::new();
        for (_, ns, name, obj) in &objs {
            match obj {
                Obj::Pg(g) => {
                    let key = GroupKey::pod_group(ns, name);
                    seen_groups.insert(key.clone());
                    let info = Arc::new(self.pod_group_info(&key, g, &classes));
                    self.group_infos.insert(key.clone(), info.clone());
                    self.known_groups.insert(key);
                    self.queue.add_group(info, now);
                }
                Obj::Cpg(c) => {
                    let key = GroupKey::composite(ns, name);
                    seen_groups.insert(key.clone());
                    let info = Arc::new(convert::composite_info(c, &classes));
                    self.composite_infos.insert(key.clone(), info.clone());
                    self.known_groups.insert(key);
                    self.queue.add_composite_group(info, now);
                }
            }
        }
        let gone: Vec<_> = self.known_groups.difference(&seen_groups).cloned().collect();
        for g in gone {
            self.forget_group(&g, now);
        }
        let mut seen = HashSet::new();
        let mut pods = self.store.pods().state();
        pods.sort_by_cached_key(|p| {
            (
                p.creation_timestamp.as_ref().map(|t| t.0),
                p.namespace().to_owned(),
                p.name().to_owned(),
            )
        });
        for p in &pods {
            if p.is_succeeded() && self.ours(p) && self.store.group_of_pod(p).is_some() {
                let key = p.key().clone();
                seen.insert(key.clone());
                self.complete(key, p, now);
                continue;
            }
            if p.is_terminal() || !self.ours(p) {
                continue;
            }
            let key = p.key().clone();
            let info = self.queue_info(&key, p);
            seen.insert(key.clone());
            if self.known.insert(key, info.clone()).is_some() {
                self.queue.update_pod(info, now);
            } else {
                self.queue.add_pod(info, now);
            }
        }
        // Pods gone from the cluster leave the queue, pending and Succeeded ones alike.
        let gone: Vec<Arc<PodInfo>> = self
            .known
            .extract_if(|k, _| !seen.contains(k))
            .chain(self.completed.extract_if(|k, _| !seen.contains(k)))
            .map(|(_, old)| old)
            .collect();
        for old in gone {
            self.queue.delete_pod(&old, now);
        }
        // Preemption state comes back from what the cluster shows (nominations, victims terminating by
        // preemption): after a restart or a failover this is all the new leader knows of plans it did not make.
        let known = &self.known;
        self.preemption.on_resync(pods.iter().map(|p| {
            let ours = known.get(p.key());
            (&**p, ours)
        }));
        // Every other per-pod record is pruned to the pods that still exist.
        let existing: HashSet<PodKey> = pods.iter().map(|p| p.key().clone()).collect();
        self.foreign_bound.retain(|k| existing.contains(k));
        self.cache.retain(|k| existing.contains(k));
        // Ingest's record of the considered nodes restarts from the store: nodes listed at the start (or in a
        // relist) raise no watch event of their own, and the wake-up below covers any change among them.
        self.nodes_seen.clear();
        for n in self.store.nodes().state() {
            if self.filter.matches(Some(n.labels()))
                && let Ok(info) = n.model.clone()
            {
                self.nodes_seen.insert(n.name.to_string(), info);
            }
        }
        self.queue.on_event(ClusterEvent::NodeUpdated, now);
        self.catch_up_conditions();
    }
}

/// The queueing event for a node as ingest sees it now: `NodeAdded` the first time, `NodeUpdated` when anything the
/// scheduler reads changed (labels, taints, allocatable, unschedulable), `None` for a repeat such as a heartbeat.
/// `seen` is ingest's own record, never the conversion cache that snapshots refresh.
pub(crate) fn node_event(
    seen: &mut HashMap<String, Arc<NodeStatic>>,
    name: &str,
    new: Arc<NodeStatic>,
) -> Option<ClusterEvent> {
    let old = seen.insert(name.to_owned(), new.clone());
    match old {
        None => Some(ClusterEvent::NodeAdded),
        Some(o) if *o != *new => Some(ClusterEvent::NodeUpdated),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, NodeSpec};
    use kube::api::ObjectMeta;
    use phalanx_store::NodeRecord;

    fn node(rv: &str, unschedulable: bool) -> NodeRecord {
        NodeRecord::from_node(&Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                unschedulable: Some(unschedulable),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// Before the fix, ingest compared against the conversion cache, which a snapshot had already refreshed, and
    /// the change was lost. The store's record now holds the model, shared by the snapshot and ingest.
    #[test]
    fn node_change_wakes_even_after_a_snapshot_refreshed_the_cache() {
        let mut seen = HashMap::new();
        let v1 = node("1", true).model.clone().unwrap();
        assert_eq!(node_event(&mut seen, "n1", v1), Some(ClusterEvent::NodeAdded));
        // A snapshot reads the new version first...
        let record = node("2", false);
        let v2 = record.model.clone().unwrap();
        // ...and ingest still sees a change.
        let again = record.model.clone().unwrap();
        assert!(Arc::ptr_eq(&v2, &again));
        assert_eq!(
            node_event(&mut seen, "n1", again),
            Some(ClusterEvent::NodeUpdated)
        );
        // A heartbeat (new resourceVersion, same content) is no change.
        let v3 = node("3", false).sharing_model_of(&record).model.clone().unwrap();
        assert_eq!(node_event(&mut seen, "n1", v3), None);
    }
}
