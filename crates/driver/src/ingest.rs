//! Ingest: store events into the queue (upstream `pkg/scheduler/eventhandlers.go`).
//!
//! Each watch event becomes a queue operation or a [`ClusterEvent`] that may wake unschedulable entities. A resync
//! reconciles the whole queue with the store (at start, after a relist or when events lagged).

use std::{collections::HashSet, sync::Arc, time::Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use phalanx_scheduler::{ClusterEvent, GroupKey, GroupKind, PodInfo, PodKey, is_terminal};
use phalanx_store::StoreEvent;

use crate::{convert, runtime::Driver};

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
            StoreEvent::Other => {}
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
        let pod = if deleted { None } else { self.store.pod(&key) };
        match pod {
            Some(p) if !is_terminal(&p) && self.ours(&p) => {
                let info = self.queue_info(&key, &p);
                if self.known.insert(key, info.clone()).is_some() {
                    self.queue.update_pod(info, now);
                } else {
                    self.queue.add_pod(info, now);
                }
            }
            other => {
                let terminal = other.as_ref().is_some_and(|p| is_terminal(p));
                if let Some(old) = self.known.remove(&key) {
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

    /// The pod as the queue should see it: an assumed pod counts as assigned to its assumed node (upstream counts
    /// assumed pods as scheduled), so an older watch event of a pod being bound does not put it back in the queue
    /// or lower its group's quorum count.
    pub(crate) fn queue_info(&mut self, key: &PodKey, p: &Pod) -> Arc<PodInfo> {
        let info = self.cache.pod(p);
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
        let node = self
            .store
            .nodes()
            .get(&kube::runtime::reflector::ObjectRef::new(name));
        match node {
            Some(n) if self.filter.matches(n.metadata.labels.as_ref()) => {
                let old = self.cache.cached_node(name);
                match self.cache.node(&n) {
                    Ok(new) if old.as_deref() != Some(&*new) => {
                        let ev = if old.is_none() {
                            ClusterEvent::NodeAdded
                        } else {
                            ClusterEvent::NodeUpdated
                        };
                        self.queue.on_event(ev, now);
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(node = name, error = %e, "node skipped"),
                }
            }
            _ => self.cache.remove_node(name),
        }
    }

    pub(crate) fn on_group(&mut self, g: &GroupKey, now: Instant) {
        match g.kind {
            GroupKind::PodGroup => match self.store.pod_group(&g.namespace, &g.name) {
                Some(pg) => {
                    self.known_groups.insert(g.clone());
                    self.queue.add_group(Arc::new(convert::group_info(&pg)), now);
                }
                None => self.forget_group(g, now),
            },
            GroupKind::CompositePodGroup => match self.store.composite_pod_group(&g.namespace, &g.name) {
                Some(cpg) => {
                    self.known_groups.insert(g.clone());
                    self.queue
                        .add_composite_group(Arc::new(convert::composite_info(&cpg)), now);
                }
                None => self.forget_group(g, now),
            },
        }
    }

    pub(crate) fn forget_group(&mut self, g: &GroupKey, now: Instant) {
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
        let now = Instant::now();
        let groups = self.store.pod_groups().state();
        let mut seen_groups = HashSet::new();
        for g in &groups {
            let key = GroupKey::pod_group(&g.namespace().unwrap_or_default(), &g.name_any());
            seen_groups.insert(key.clone());
            self.known_groups.insert(key);
            self.queue.add_group(Arc::new(convert::group_info(g)), now);
        }
        for c in &self.store.composite_pod_groups().state() {
            let key = GroupKey::composite(&c.namespace().unwrap_or_default(), &c.name_any());
            seen_groups.insert(key.clone());
            self.known_groups.insert(key);
            self.queue
                .add_composite_group(Arc::new(convert::composite_info(c)), now);
        }
        let gone: Vec<_> = self.known_groups.difference(&seen_groups).cloned().collect();
        for g in gone {
            self.forget_group(&g, now);
        }
        let mut seen = HashSet::new();
        for p in self.store.pods().state() {
            if is_terminal(&p) || !self.ours(&p) {
                continue;
            }
            let Some(key) = PodKey::of(&p) else { continue };
            let info = self.queue_info(&key, &p);
            seen.insert(key.clone());
            if self.known.insert(key, info.clone()).is_some() {
                self.queue.update_pod(info, now);
            } else {
                self.queue.add_pod(info, now);
            }
        }
        let gone: Vec<PodKey> = self
            .known
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            if let Some(old) = self.known.remove(&k) {
                self.queue.delete_pod(&old, now);
            }
        }
        self.queue.on_event(ClusterEvent::NodeUpdated, now);
        self.catch_up_conditions();
    }
}
