//! The event handlers (upstream `pkg/scheduler/eventhandlers.go`): store events into the cache and the queue.
//!
//! Each watch event updates the [`Cache`] and becomes a queue operation or a [`ClusterEvent`] that may wake
//! unschedulable entities; pods may also change the preemption tracker's state (a nomination, a victim
//! terminating) and the dispatcher's record of its own writes. A resync reconciles the whole queue with the store
//! (at start, after a relist or when events lagged). The handlers own no state: they borrow the components from
//! the loop for one event.

use std::{collections::HashSet, sync::Arc, time::Instant};

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use phalanx_api::{v1alpha3::CompositePodGroup, v1beta1::PodGroup};
use phalanx_scheduler::{ClusterEvent, EntityKey, GroupKey, GroupKind, PodKey, SchedulingQueue};
use phalanx_store::{PodRecord, Store, StoreEvent};

use crate::{
    cache::{Cache, GroupChange},
    dispatcher::ApiDispatcher,
    preemption_tracker::PreemptionTracker,
};

/// The components one store event changes, borrowed from the loop.
pub(crate) struct EventHandlers<'a> {
    pub(crate) store: &'a Store,
    pub(crate) cache: &'a mut Cache,
    pub(crate) queue: &'a mut SchedulingQueue,
    pub(crate) preemption: &'a mut PreemptionTracker,
    pub(crate) dispatcher: &'a mut ApiDispatcher,
}

impl EventHandlers<'_> {
    pub(crate) fn on_event(&mut self, ev: StoreEvent) {
        let now = Instant::now();
        match ev {
            StoreEvent::Pod {
                key,
                group,
                node,
                deleted,
            } => self.on_pod(key, group, node, deleted, now),
            StoreEvent::Node(name) => {
                if let Some(ev) = self.cache.observe_node(&name) {
                    self.queue.on_event(ev, now);
                }
            }
            StoreEvent::Group(g) => self.on_group(&g, now),
            // Owner changes reach the scheduler as the `Pod` events of the pods whose group they changed; a group
            // sized from the owner is re-read, to hold or release it (`resize`).
            StoreEvent::Owner(o) => {
                if let Some(g) = self.cache.sized_group_of(&o.uid) {
                    self.on_group(&g, now);
                }
            }
            StoreEvent::Other => {}
            StoreEvent::Volume => {
                self.cache.storage_changed();
                self.queue.on_event(ClusterEvent::StorageChanged, now);
            }
            StoreEvent::Devices => {
                self.cache.devices_changed();
                self.queue.on_event(ClusterEvent::DevicesChanged, now);
            }
            StoreEvent::Resync => self.resync(),
        }
    }

    fn on_pod(
        &mut self,
        key: PodKey,
        group: Option<GroupKey>,
        node: Option<String>,
        deleted: bool,
        now: Instant,
    ) {
        let pod = if deleted { None } else { self.store.pod(&key) };
        self.cache.pod_event(&key, pod.as_deref(), deleted);
        self.dispatcher.observe_pod(&key, pod.as_deref());
        match &pod {
            // Any pod may be a victim terminating by preemption; ours are handled with their queue model below.
            Some(p) if p.is_terminal() || !self.cache.ours(p) => self.preemption.on_pod(p, None),
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
            Some(p) if !p.is_terminal() && self.cache.ours(&p) => {
                let info = self.cache.queue_info(&key, &p);
                // A pending pod's nomination (written by an earlier preemption, ours or a previous leader's) keeps
                // its room reserved; a bound pod needs none.
                self.preemption.on_pod(&p, Some(&info));
                if self.cache.track(key, info.clone()) {
                    self.queue.update_pod(info, now);
                } else {
                    self.queue.add_pod(info, now);
                }
            }
            Some(ref p)
                if !p.is_terminal()
                    && !self.cache.is_known(&key)
                    && node.as_deref().is_some_and(|n| self.cache.node_considered(n)) =>
            {
                // Someone else's pod landed on one of our nodes: the first sighting may satisfy a waiting pod's
                // affinity or change spread counts (later updates of the same pod are not new arrivals).
                if self.cache.foreign_arrived(key.clone()) {
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
                    Some(gate) => self.dispatcher.announce_gate(&entity, &gate),
                    None => self.queue.on_event(ClusterEvent::AssignedPodUpdated, now),
                }
            }
            Some(ref p) if p.is_succeeded() && self.cache.ours(p) && group.is_some() => {
                // A member that finished: it frees its node but keeps counting toward its gang's quorum, so the
                // last pods of a Job with `completions > parallelism` can still bind (k/k#142330).
                self.cache.foreign_gone(&key);
                self.complete(key, p, now);
            }
            other => {
                let terminal = other.as_ref().is_some_and(|p| p.is_terminal());
                self.cache.foreign_gone(&key);
                if let Some(old) = self.cache.untrack(&key) {
                    self.queue.delete_pod(&old, now);
                } else if (other.is_none() || terminal)
                    && let Some(n) = node.as_deref()
                    && self.cache.node_considered(n)
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
                    self.cache.pod_deleted(&key);
                }
            }
        }
    }

    /// Records a Succeeded member of one of our groups with the queue, once.
    fn complete(&mut self, key: PodKey, p: &PodRecord, now: Instant) {
        if let Some(info) = self.cache.complete(key, p) {
            self.queue.complete_pod(&info, now);
        }
    }

    fn on_group(&mut self, g: &GroupKey, now: Instant) {
        match self.cache.observe_group(g) {
            GroupChange::PodGroup(info) => self.queue.add_group(info, now),
            GroupChange::Composite(info) => self.queue.add_composite_group(info, now),
            GroupChange::Gone(known) => self.group_gone(g, known, now),
        }
    }

    /// Group `g` was forgotten by the cache (`known`: the queue had it).
    fn group_gone(&mut self, g: &GroupKey, known: bool, now: Instant) {
        self.dispatcher.forget_group(g);
        if !known {
            return;
        }
        match g.kind {
            GroupKind::PodGroup => self.queue.delete_group(&g.clone(), now),
            GroupKind::CompositePodGroup => self.queue.delete_composite_group(&g.clone(), now),
        }
    }

    /// Reconciles the queue with the whole store (start, relist, lagged events).
    pub(crate) fn resync(&mut self) {
        self.cache.invalidate_snapshot();
        let now = Instant::now();
        let classes = self.store.priority_classes().state();
        // Both kinds in creation order (then namespace and name), as upstream orders siblings: the queue's
        // first-seen order is a tree's sibling order and decides who wins under contention, so it must not depend
        // on the hash order of the caches.
        enum Obj {
            Pg(GroupKey, Arc<PodGroup>),
            Cpg(GroupKey, Arc<CompositePodGroup>),
        }
        let mut objs: Vec<(Option<Timestamp>, String, String, Obj)> = Vec::new();
        for (key, g) in self.store.all_pod_groups() {
            let created = g.metadata.creation_timestamp.as_ref().map(|t| t.0);
            objs.push((
                created,
                g.namespace().unwrap_or_default(),
                g.name_any(),
                Obj::Pg(key, g),
            ));
        }
        for (key, c) in self.store.all_composite_pod_groups() {
            let created = c.metadata.creation_timestamp.as_ref().map(|t| t.0);
            objs.push((
                created,
                c.namespace().unwrap_or_default(),
                c.name_any(),
                Obj::Cpg(key, c),
            ));
        }
        objs.sort_by(|a, b| (a.0, &a.1, &a.2).cmp(&(b.0, &b.1, &b.2)));
        let mut seen_groups = HashSet::new();
        for (_, _, _, obj) in &objs {
            match obj {
                Obj::Pg(key, g) => {
                    let key = key.clone();
                    seen_groups.insert(key.clone());
                    let info = self.cache.record_pod_group(key, g, &classes);
                    self.queue.add_group(info, now);
                }
                Obj::Cpg(key, c) => {
                    let key = key.clone();
                    seen_groups.insert(key.clone());
                    let info = self.cache.record_composite(key, c, &classes);
                    self.queue.add_composite_group(info, now);
                }
            }
        }
        for g in self.cache.groups_except(&seen_groups) {
            let known = self.cache.forget_group(&g);
            self.group_gone(&g, known, now);
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
            if p.is_succeeded() && self.cache.ours(p) && self.store.group_of_pod(p).is_some() {
                let key = p.key().clone();
                seen.insert(key.clone());
                self.complete(key, p, now);
                continue;
            }
            if p.is_terminal() || !self.cache.ours(p) {
                continue;
            }
            let key = p.key().clone();
            let info = self.cache.queue_info(&key, p);
            seen.insert(key.clone());
            if self.cache.track(key, info.clone()) {
                self.queue.update_pod(info, now);
            } else {
                self.queue.add_pod(info, now);
            }
        }
        // Pods gone from the cluster leave the queue, pending and Succeeded ones alike.
        for old in self.cache.untrack_all_except(&seen) {
            self.queue.delete_pod(&old, now);
        }
        // Preemption state comes back from what the cluster shows (nominations, victims terminating by
        // preemption): after a restart or a failover this is all the new leader knows of plans it did not make.
        let cache = &*self.cache;
        self.preemption
            .on_resync(pods.iter().map(|p| (&**p, cache.known_ref(p.key()))));
        // Every other per-pod record is pruned to the pods that still exist.
        let existing: HashSet<PodKey> = pods.iter().map(|p| p.key().clone()).collect();
        self.cache.prune_pods(&existing);
        // Ingest's record of the considered nodes restarts from the store: nodes listed at the start (or in a
        // relist) raise no watch event of their own, and the wake-up below covers any change among them.
        self.cache.reset_nodes_seen();
        self.queue.on_event(ClusterEvent::NodeUpdated, now);
        self.dispatcher.catch_up_conditions();
    }
}
