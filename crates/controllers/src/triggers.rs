//! Turns store change notifications into reconcile requests for the three controllers.
//!
//! The store publishes a [`StoreEvent`] after its caches and indexes were updated, so mapping an event to the
//! objects it affects reads a cache that already shows the change (no second watch, no lag between trigger
//! and cache). A group change re-checks its whole tree, because a verdict belongs to the tree; a pod change
//! re-counts its PodGroup; a Workload change re-checks the Workload and every group that references it; a
//! PriorityClass change re-resolves every group and re-checks every Workload. A lagging subscriber or a re-list triggers everything.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use futures::channel::mpsc::UnboundedSender;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use phalanx_api::v1alpha3::CompositePodGroup;
use phalanx_api::v1beta1::{PodGroup, Workload};
use phalanx_store::{ClusterIndex, GroupKey, GroupKind, Store, StoreEvent};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

/// Senders into the three controllers' queues.
#[derive(Clone)]
pub struct Queues {
    /// PodGroup controller.
    pub pod_groups: UnboundedSender<ObjectRef<PodGroup>>,
    /// CompositePodGroup controller.
    pub composites: UnboundedSender<ObjectRef<CompositePodGroup>>,
    /// Workload controller.
    pub workloads: UnboundedSender<ObjectRef<Workload>>,
    /// ProvisioningRequest controller ([`crate::provisioning`]), when on: gets every PodGroup the PodGroup
    /// controller gets.
    pub provisioning: Option<UnboundedSender<ObjectRef<PodGroup>>>,
}

impl Queues {
    fn group(&self, key: &GroupKey) {
        // Upstream's `scheduling.k8s.io` groups keep their own controllers (kube-controller-manager's): Phalanx's
        // reconcile only Phalanx's objects, and a native group must never reach a reconciler that would look up a
        // Phalanx group of the same name.
        if key.is_upstream() {
            return;
        }
        // A closed queue means the controller is shutting down; nothing to do.
        if key.kind == GroupKind::PodGroup
            && let Some(p) = &self.provisioning
        {
            let _ = p.unbounded_send(ObjectRef::new(&key.name).within(&key.namespace));
        }
        let _ = match key.kind {
            GroupKind::PodGroup => self
                .pod_groups
                .unbounded_send(ObjectRef::new(&key.name).within(&key.namespace))
                .map_err(drop),
            GroupKind::CompositePodGroup => self
                .composites
                .unbounded_send(ObjectRef::new(&key.name).within(&key.namespace))
                .map_err(drop),
        };
    }

    fn workload(&self, namespace: &str, name: &str) {
        let _ = self
            .workloads
            .unbounded_send(ObjectRef::new(name).within(namespace));
    }
}

/// Last facts seen about a group, used when it is deleted (the cache no longer has it).
#[derive(Clone, Debug, Default)]
struct Seen {
    parent: Option<String>,
    workload: Option<String>,
}

/// Facts of a cached group: (parent, workload name).
fn facts(store: &Store, key: &GroupKey) -> Option<Seen> {
    match key.kind {
        GroupKind::PodGroup => store.pod_group(&key.namespace, &key.name).map(|g| Seen {
            parent: g.spec.parent_composite_pod_group_name.clone(),
            workload: g.spec.workload_ref.as_ref().map(|r| r.workload_name.clone()),
        }),
        GroupKind::CompositePodGroup => store
            .composite_pod_group(&key.namespace, &key.name)
            .map(|g| Seen {
                parent: g.spec.parent_composite_pod_group_name.clone(),
                workload: Some(g.spec.workload_ref.workload_name.clone()),
            }),
    }
}

/// Every group whose verdict may change when `key` changes: its ancestors (as far as they exist), the whole
/// subtree below the highest of them, the subtree of a missing parent name (siblings waiting for the same
/// parent) and, for a CompositePodGroup, the groups naming it as parent even if it is gone.
pub fn affected(ix: &ClusterIndex, key: &GroupKey, known_parent: Option<&str>) -> BTreeSet<GroupKey> {
    let mut out = BTreeSet::new();
    out.insert(key.clone());
    let mut tops: Vec<GroupKey> = Vec::new();
    let mut cur = key.clone();
    let mut parent = ix.parent_of(key).or_else(|| {
        known_parent
            .filter(|p| !p.is_empty())
            .map(|p| GroupKey::composite(&key.namespace, p))
    });
    let mut steps = 0;
    while let Some(p) = parent {
        steps += 1;
        if steps > 64 || out.contains(&p) {
            break;
        }
        if !ix.group_exists(&p) {
            tops.push(p);
            break;
        }
        out.insert(p.clone());
        cur = p;
        parent = ix.parent_of(&cur);
    }
    tops.push(cur);
    if key.kind == GroupKind::CompositePodGroup {
        tops.push(key.clone());
    }
    for top in tops {
        out.extend(
            ix.subtree(&top)
                .into_iter()
                .filter(|k| ix.group_exists(k) || k == key),
        );
    }
    out
}

struct Mapper {
    store: Store,
    queues: Queues,
    seen: HashMap<GroupKey, Seen>,
    workload_versions: HashMap<(String, String), String>,
    priority_class_versions: HashMap<String, String>,
}

impl Mapper {
    fn everything(&mut self) {
        for g in self.store.pod_groups().state() {
            self.queues.group(&GroupKey::pod_group(
                &g.namespace().unwrap_or_default(),
                &g.name_any(),
            ));
        }
        for g in self.store.composite_pod_groups().state() {
            self.queues.group(&GroupKey::composite(
                &g.namespace().unwrap_or_default(),
                &g.name_any(),
            ));
        }
        for w in self.store.workloads().state() {
            self.queues
                .workload(&w.namespace().unwrap_or_default(), &w.name_any());
        }
        self.snapshot_versions();
    }

    fn snapshot_versions(&mut self) {
        self.workload_versions = self
            .store
            .workloads()
            .state()
            .iter()
            .map(|w| {
                (
                    (w.namespace().unwrap_or_default(), w.name_any()),
                    w.resource_version().unwrap_or_default(),
                )
            })
            .collect();
        self.priority_class_versions = self
            .store
            .priority_classes()
            .state()
            .iter()
            .map(|pc| (pc.name_any(), pc.resource_version().unwrap_or_default()))
            .collect();
    }

    fn group_changed(&mut self, key: &GroupKey) {
        if key.is_upstream() {
            return;
        }
        let now = facts(&self.store, key);
        let before = match &now {
            Some(f) => self.seen.insert(key.clone(), f.clone()),
            None => self.seen.remove(key),
        };
        let known_parent = now.as_ref().or(before.as_ref()).and_then(|s| s.parent.clone());
        let groups = affected(&self.store.hierarchy(), key, known_parent.as_deref());
        for g in &groups {
            self.queues.group(g);
        }
        // A parent that the group left (parent fields are immutable, but a delete+recreate can change it).
        if let Some(old_parent) = before.as_ref().and_then(|b| b.parent.clone())
            && Some(&old_parent) != known_parent.as_ref()
        {
            let pk = GroupKey::composite(&key.namespace, &old_parent);
            for g in affected(&self.store.hierarchy(), &pk, None) {
                self.queues.group(&g);
            }
        }
        let mut workloads: BTreeSet<String> = BTreeSet::new();
        workloads.extend(now.and_then(|f| f.workload));
        workloads.extend(before.and_then(|f| f.workload));
        for w in workloads {
            self.queues.workload(&key.namespace, &w);
        }
    }

    /// A DRA object changed: the PodGroups that still wait for a claim generated from one of their templates
    /// (fewer `status.resourceClaimStatuses` than template-based `spec.resourceClaims`) record it now. A scan of
    /// the PodGroups with claims; a claim deleted later is noticed at the next resync.
    fn devices_changed(&self) {
        for g in self.store.pod_groups().state() {
            let templates = g
                .spec
                .resource_claims
                .iter()
                .flatten()
                .filter(|c| c.resource_claim_template_name.is_some())
                .count();
            let recorded = g
                .status
                .as_ref()
                .and_then(|s| s.resource_claim_statuses.as_ref())
                .map_or(0, Vec::len);
            if templates > recorded {
                self.queues.group(&GroupKey::pod_group(
                    &g.namespace().unwrap_or_default(),
                    &g.name_any(),
                ));
            }
        }
    }

    /// A Workload, PriorityClass or PDB changed; find out which by comparing resource versions.
    fn other_changed(&mut self) {
        let mut changed_workloads: Vec<(String, String)> = Vec::new();
        let current: HashMap<(String, String), String> = self
            .store
            .workloads()
            .state()
            .iter()
            .map(|w| {
                (
                    (w.namespace().unwrap_or_default(), w.name_any()),
                    w.resource_version().unwrap_or_default(),
                )
            })
            .collect();
        for (k, rv) in &current {
            if self.workload_versions.get(k) != Some(rv) {
                changed_workloads.push(k.clone());
            }
        }
        for k in self.workload_versions.keys() {
            if !current.contains_key(k) {
                changed_workloads.push(k.clone());
            }
        }
        self.workload_versions = current;

        let pcs: HashMap<String, String> = self
            .store
            .priority_classes()
            .state()
            .iter()
            .map(|pc| (pc.name_any(), pc.resource_version().unwrap_or_default()))
            .collect();
        let pcs_changed = pcs != self.priority_class_versions;
        self.priority_class_versions = pcs;

        if pcs_changed {
            // Templates' written priorities are checked against their class too.
            for w in self.store.workloads().state() {
                self.queues
                    .workload(&w.namespace().unwrap_or_default(), &w.name_any());
            }
            for g in self.store.pod_groups().state() {
                self.queues.group(&GroupKey::pod_group(
                    &g.namespace().unwrap_or_default(),
                    &g.name_any(),
                ));
            }
            for g in self.store.composite_pod_groups().state() {
                self.queues.group(&GroupKey::composite(
                    &g.namespace().unwrap_or_default(),
                    &g.name_any(),
                ));
            }
        }
        if changed_workloads.is_empty() {
            return;
        }
        let wanted: BTreeSet<(String, String)> = changed_workloads.into_iter().collect();
        for (ns, name) in &wanted {
            self.queues.workload(ns, name);
        }
        if pcs_changed {
            return;
        }
        for g in self.store.pod_groups().state() {
            let ns = g.namespace().unwrap_or_default();
            if let Some(r) = &g.spec.workload_ref
                && wanted.contains(&(ns.clone(), r.workload_name.clone()))
            {
                self.queues.group(&GroupKey::pod_group(&ns, &g.name_any()));
            }
        }
        for g in self.store.composite_pod_groups().state() {
            let ns = g.namespace().unwrap_or_default();
            if wanted.contains(&(ns.clone(), g.spec.workload_ref.workload_name.clone())) {
                self.queues.group(&GroupKey::composite(&ns, &g.name_any()));
            }
        }
    }
}

/// Runs until `shutdown`; dropping the queue senders on return ends the controllers' input streams.
pub async fn run(store: Store, queues: Queues, shutdown: CancellationToken) {
    let mut rx = store.subscribe();
    let mut mapper = Mapper {
        store: store.clone(),
        queues,
        seen: HashMap::new(),
        workload_versions: HashMap::new(),
        priority_class_versions: HashMap::new(),
    };
    // Initial sync: everything once (the subscription was taken first, so nothing is missed in between).
    mapper.everything();
    for g in store.pod_groups().state() {
        let key = GroupKey::pod_group(&g.namespace().unwrap_or_default(), &g.name_any());
        mapper.seen.insert(key, seen_of_pg(&g));
    }
    for g in store.composite_pod_groups().state() {
        let key = GroupKey::composite(&g.namespace().unwrap_or_default(), &g.name_any());
        mapper.seen.insert(key, seen_of_cpg(&g));
    }
    loop {
        let ev = tokio::select! {
            () = shutdown.cancelled() => return,
            ev = rx.recv() => ev,
        };
        match ev {
            Ok(StoreEvent::Pod { group: Some(g), .. }) => mapper.queues.group(&g),
            Ok(
                StoreEvent::Pod { group: None, .. }
                | StoreEvent::Node(_)
                | StoreEvent::Owner(_)
                | StoreEvent::Volume,
            ) => {}
            Ok(StoreEvent::Devices) => mapper.devices_changed(),
            Ok(StoreEvent::Group(key)) => mapper.group_changed(&key),
            Ok(StoreEvent::Other) => mapper.other_changed(),
            Ok(StoreEvent::Resync) => mapper.everything(),
            Err(RecvError::Lagged(n)) => {
                tracing::debug!(
                    missed = n,
                    "controller trigger lagged behind the store; resyncing everything"
                );
                mapper.everything();
            }
            Err(RecvError::Closed) => return,
        }
    }
}

fn seen_of_pg(g: &Arc<PodGroup>) -> Seen {
    Seen {
        parent: g.spec.parent_composite_pod_group_name.clone(),
        workload: g.spec.workload_ref.as_ref().map(|r| r.workload_name.clone()),
    }
}

fn seen_of_cpg(g: &Arc<CompositePodGroup>) -> Seen {
    Seen {
        parent: g.spec.parent_composite_pod_group_name.clone(),
        workload: Some(g.spec.workload_ref.workload_name.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ix() -> ClusterIndex {
        let mut ix = ClusterIndex::default();
        ix.apply_group(GroupKey::composite("ns", "root"), None);
        ix.apply_group(GroupKey::composite("ns", "mid"), Some("root"));
        ix.apply_group(GroupKey::pod_group("ns", "a"), Some("mid"));
        ix.apply_group(GroupKey::pod_group("ns", "b"), Some("root"));
        ix.apply_group(GroupKey::pod_group("ns", "orphan1"), Some("missing"));
        ix.apply_group(GroupKey::pod_group("ns", "orphan2"), Some("missing"));
        ix.apply_group(GroupKey::pod_group("ns", "solo"), None);
        ix
    }

    #[test]
    fn leaf_change_covers_whole_tree() {
        let got = affected(&ix(), &GroupKey::pod_group("ns", "a"), None);
        let names: Vec<&str> = got.iter().map(|k| &*k.name).collect();
        assert_eq!(names, vec!["a", "b", "mid", "root"]);
    }

    #[test]
    fn orphans_wait_for_the_same_parent() {
        let got = affected(&ix(), &GroupKey::pod_group("ns", "orphan1"), None);
        assert!(got.contains(&GroupKey::pod_group("ns", "orphan2")));
        // The parent appearing (a Group event for it) reaches both orphans.
        let mut ix = ix();
        ix.apply_group(GroupKey::composite("ns", "missing"), None);
        let got = affected(&ix, &GroupKey::composite("ns", "missing"), None);
        assert!(
            got.contains(&GroupKey::pod_group("ns", "orphan1"))
                && got.contains(&GroupKey::pod_group("ns", "orphan2"))
        );
    }

    #[test]
    fn deleted_leaf_reaches_its_old_parent() {
        let mut ix = ix();
        ix.remove_group(&GroupKey::pod_group("ns", "a"));
        let got = affected(&ix, &GroupKey::pod_group("ns", "a"), Some("mid"));
        assert!(
            got.contains(&GroupKey::composite("ns", "mid"))
                && got.contains(&GroupKey::composite("ns", "root"))
        );
        let solo = affected(&ix, &GroupKey::pod_group("ns", "solo"), None);
        assert_eq!(solo.len(), 1);
    }

    #[test]
    fn cycle_terminates() {
        let mut ix = ClusterIndex::default();
        ix.apply_group(GroupKey::composite("ns", "x"), Some("y"));
        ix.apply_group(GroupKey::composite("ns", "y"), Some("x"));
        ix.apply_group(GroupKey::pod_group("ns", "leaf"), Some("x"));
        let got = affected(&ix, &GroupKey::composite("ns", "x"), None);
        assert_eq!(got.len(), 3, "{got:?}");
    }
}
