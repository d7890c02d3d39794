//! Secondary indexes over the cached pods and groups: pods per node, pods per PodGroup, and the group tree.
//!
//! The index is fed by watch events (apply, delete, and a full reset after every relist, because a `Delete` can be
//! missed across a relist; see `kube::runtime::watcher::Event::Init`). It holds keys only; objects stay in the reflector stores.
//! Children point at their parent by name (KEP-6012: "there is no child list"), so the parent -> children map is
//! derived here from each child's `parentCompositePodGroupName`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use phalanx_api::owners::MemberSelector;
use phalanx_scheduler::model::{GroupApi, GroupKey, GroupKind, PodKey};

use crate::record::PodRecord;

/// Label that links a pod to its PodGroup in the pod's namespace (re-exported from `phalanx_api::labels`).
pub const POD_GROUP_LABEL: &str = phalanx_api::labels::POD_GROUP;

/// The PodGroup name a pod belongs to: the label first, else `spec.schedulingGroup.podGroupName`
/// (delegates to `phalanx_api::pod_group_name`).
pub fn pod_group_name(pod: &Pod) -> Option<&str> {
    phalanx_api::pod_group_name(pod)
}

/// The PodGroup key of a pod (group lookups are always in the pod's own namespace).
pub fn pod_group_key(pod: &Pod) -> Option<GroupKey> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    pod_group_name(pod).map(|n| GroupKey::pod_group(ns, n))
}

/// The node a pod is bound to, if any.
pub fn pod_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

#[derive(Clone, Debug, Default)]
struct PodEntry {
    node: Option<String>,
    group: Option<GroupKey>,
    /// Owner uids visited when the group came from the owner chain (see [`crate::owners`]).
    chain: Vec<String>,
}

/// Keys of pods per node and per group, and the group tree.
#[derive(Debug, Default)]
pub struct ClusterIndex {
    pods: HashMap<PodKey, PodEntry>,
    by_node: HashMap<String, BTreeSet<PodKey>>,
    by_group: HashMap<GroupKey, BTreeSet<PodKey>>,
    parent: HashMap<GroupKey, Option<GroupKey>>,
    children: HashMap<GroupKey, BTreeSet<GroupKey>>,
    /// Pods per owner uid in their resolved owner chain.
    by_owner: HashMap<String, BTreeSet<PodKey>>,
    /// PodGroup names per `(namespace, owner uid)` (`scheduling.phalanx.dev/owner-uid` label): a label links only
    /// pods of its own namespace, so no namespace can claim another's pods.
    owned_groups: HashMap<Arc<str>, HashMap<String, BTreeSet<Arc<str>>>>,
    /// The owner uid each labelled PodGroup carries (the way back, to unlink it on a change or a delete).
    group_owner: HashMap<GroupKey, String>,
    /// The members of owned groups that take only some of the owner's pods
    /// ([`phalanx_api::owners::MEMBERS`]); `None`: the annotation did not parse, so the group takes no pod.
    members: HashMap<GroupKey, Option<MemberSelector>>,
}

impl ClusterIndex {
    /// Adds or updates a pod whose group is its own (label or `spec.schedulingGroup`) only.
    pub fn apply_pod(&mut self, pod: &PodRecord) {
        self.apply_pod_resolved(pod, pod.group_key(), Vec::new());
    }

    /// Adds or updates a pod with the group resolved by the store (its own, else its owner's) and the owner uids
    /// that resolution visited.
    pub fn apply_pod_resolved(&mut self, pod: &PodRecord, group: Option<GroupKey>, chain: Vec<String>) {
        let key = pod.key().clone();
        let entry = PodEntry {
            node: pod.node_name().map(str::to_owned),
            group,
            chain,
        };
        self.remove_pod(&key);
        if let Some(n) = &entry.node {
            self.by_node.entry(n.clone()).or_default().insert(key.clone());
        }
        if let Some(g) = &entry.group {
            self.by_group.entry(g.clone()).or_default().insert(key.clone());
        }
        for uid in &entry.chain {
            self.by_owner.entry(uid.clone()).or_default().insert(key.clone());
        }
        self.pods.insert(key, entry);
    }

    /// Pods whose owner chain went through the owner `uid`.
    pub fn pods_of_owner(&self, uid: &str) -> Vec<PodKey> {
        self.by_owner
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Records (or with `owner: None` forgets) the owner uid a PodGroup is labelled with
    /// (`scheduling.phalanx.dev/owner-uid`, [`phalanx_api::owners::OWNER_UID_LABEL`]). The link holds in the
    /// group's namespace only: a group labelled with the uid of an owner in another namespace links no pod (owner
    /// references, and so the owners a pod's walk reaches, are namespace-local, as in upstream's garbage collector,
    /// `pkg/controller/garbagecollector/graph_builder.go`). An empty uid is no label.
    ///
    /// `members`: the group's [`phalanx_api::owners::MEMBERS`] annotation, if any (a group without one takes every
    /// pod of the owner).
    pub fn set_group_owner(&mut self, key: &GroupKey, owner: Option<&str>, members: Option<&str>) {
        self.members.remove(key);
        if let Some(old) = self.group_owner.remove(key)
            && let Some(in_ns) = self.owned_groups.get_mut(&key.namespace)
        {
            remove_from(in_ns, &old, &key.name);
            if in_ns.is_empty() {
                self.owned_groups.remove(&key.namespace);
            }
        }
        if let Some(uid) = owner.filter(|u| !u.is_empty()) {
            self.owned_groups
                .entry(key.namespace.clone())
                .or_default()
                .entry(uid.to_owned())
                .or_default()
                .insert(key.name.clone());
            self.group_owner.insert(key.clone(), uid.to_owned());
            if let Some(m) = members {
                self.members.insert(key.clone(), MemberSelector::parse(m).ok());
            }
        }
    }

    /// Replaces every owner label of PodGroups (after a relist). Items are `(group, owner uid, members annotation)`.
    pub fn reset_group_owners(
        &mut self,
        owned: impl IntoIterator<Item = (GroupKey, String, Option<String>)>,
    ) {
        self.owned_groups.clear();
        self.group_owner.clear();
        self.members.clear();
        for (k, uid, members) in owned {
            self.set_group_owner(&k, Some(&uid), members.as_deref());
        }
    }

    /// The name of the PodGroup in `namespace` labelled with the owner `uid` that takes a pod with `labels`: the
    /// first by name (so the answer does not depend on the order the watch delivered them in) whose members
    /// annotation the labels match, or that has none. `labels: None` asks for any group of the owner.
    pub fn group_of_owner(
        &self,
        namespace: &str,
        uid: &str,
        labels: Option<&std::collections::BTreeMap<String, String>>,
    ) -> Option<String> {
        let names = self.owned_groups.get(namespace)?.get(uid)?;
        names
            .iter()
            .find(|n| {
                let key = GroupKey::pod_group(namespace, n);
                match (self.members.get(&key), labels) {
                    (None, _) | (Some(_), None) => true,
                    (Some(Some(m)), Some(l)) => m.matches(l),
                    (Some(None), Some(_)) => false,
                }
            })
            .map(|n| n.to_string())
    }

    /// Keys of every indexed pod.
    pub fn pod_keys(&self) -> impl Iterator<Item = &PodKey> {
        self.pods.keys()
    }

    /// Removes a pod from every index.
    pub fn remove_pod(&mut self, key: &PodKey) {
        let Some(old) = self.pods.remove(key) else { return };
        if let Some(n) = old.node {
            remove_from(&mut self.by_node, &n, key);
        }
        if let Some(g) = old.group {
            remove_from(&mut self.by_group, &g, key);
        }
        for uid in &old.chain {
            remove_from(&mut self.by_owner, uid, key);
        }
    }

    /// Replaces every pod entry (after a relist).
    pub fn reset_pods<'a>(&mut self, pods: impl IntoIterator<Item = &'a PodRecord>) {
        self.reset_pods_resolved(pods.into_iter().map(|p| (p, p.group_key(), Vec::new())));
    }

    /// Replaces every pod entry (after a relist) with groups resolved by the store.
    pub fn reset_pods_resolved<'a>(
        &mut self,
        pods: impl IntoIterator<Item = (&'a PodRecord, Option<GroupKey>, Vec<String>)>,
    ) {
        self.pods.clear();
        self.by_node.clear();
        self.by_group.clear();
        self.by_owner.clear();
        for (p, g, chain) in pods {
            self.apply_pod_resolved(p, g, chain);
        }
    }

    /// Adds or updates a group and its parent CompositePodGroup name (same namespace).
    pub fn apply_group(&mut self, key: GroupKey, parent: Option<&str>) {
        let parent = parent.filter(|p| !p.is_empty()).map(|p| GroupKey {
            api: key.api,
            ..GroupKey::composite(&key.namespace, p)
        });
        self.remove_group(&key);
        if let Some(p) = &parent {
            self.children.entry(p.clone()).or_default().insert(key.clone());
        }
        self.parent.insert(key, parent);
    }

    /// Removes a group (its children keep pointing at it by name and become orphans until it returns).
    pub fn remove_group(&mut self, key: &GroupKey) {
        if let Some(Some(p)) = self.parent.remove(key) {
            remove_from(&mut self.children, &p, key);
        }
    }

    /// Replaces every group of `kind` in the API group `api` (after a relist). Items are `(key, parent name)`.
    pub fn reset_groups(
        &mut self,
        (kind, api): (GroupKind, GroupApi),
        groups: impl IntoIterator<Item = (GroupKey, Option<String>)>,
    ) {
        let old: Vec<GroupKey> = self
            .parent
            .keys()
            .filter(|k| k.kind == kind && k.api == api)
            .cloned()
            .collect();
        for k in old {
            self.remove_group(&k);
        }
        for (k, p) in groups {
            self.apply_group(k, p.as_deref());
        }
    }

    /// Pods bound to `node`.
    pub fn pods_on_node(&self, node: &str) -> Vec<PodKey> {
        self.by_node
            .get(node)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Pods that name `group` (bound or not).
    pub fn members(&self, group: &GroupKey) -> Vec<PodKey> {
        self.by_group
            .get(group)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The PodGroup a pod names, if any.
    pub fn group_of(&self, pod: &PodKey) -> Option<GroupKey> {
        self.pods.get(pod).and_then(|e| e.group.clone())
    }

    /// Whether the group object has been seen.
    pub fn group_exists(&self, group: &GroupKey) -> bool {
        self.parent.contains_key(group)
    }

    /// The parent CompositePodGroup a group names (whether or not it exists yet).
    pub fn parent_of(&self, group: &GroupKey) -> Option<GroupKey> {
        self.parent.get(group).cloned().flatten()
    }

    /// Groups that name `parent` as their parent.
    pub fn children(&self, parent: &GroupKey) -> Vec<GroupKey> {
        self.children
            .get(parent)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Walks parents from `group` up to the topmost known ancestor. Stops at a missing parent, at a cycle, or after
    /// `limit` steps; returns the last group reached (the root if the chain is complete and acyclic).
    pub fn root_of(&self, group: &GroupKey, limit: usize) -> GroupKey {
        let mut cur = group.clone();
        let mut seen = BTreeSet::new();
        for _ in 0..limit {
            seen.insert(cur.clone());
            match self.parent_of(&cur) {
                Some(p) if self.group_exists(&p) && !seen.contains(&p) => cur = p,
                _ => break,
            }
        }
        cur
    }

    /// Every group in the subtree under `root` (including `root`), children before... in breadth-first order,
    /// visiting each group once even if the tree has a cycle.
    pub fn subtree(&self, root: &GroupKey) -> Vec<GroupKey> {
        let mut out = vec![root.clone()];
        let mut seen: BTreeSet<GroupKey> = out.iter().cloned().collect();
        let mut i = 0;
        while i < out.len() {
            for c in self.children(&out[i]) {
                if seen.insert(c.clone()) {
                    out.push(c);
                }
            }
            i += 1;
        }
        out
    }
}

fn remove_from<K: std::hash::Hash + Eq, V: Ord>(map: &mut HashMap<K, BTreeSet<V>>, k: &K, v: &V) {
    if let Some(set) = map.get_mut(k) {
        set.remove(v);
        if set.is_empty() {
            map.remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSchedulingGroup, PodSpec};
    use kube::api::ObjectMeta;

    fn pod(name: &str, node: Option<&str>, label: Option<&str>, field: Option<&str>) -> PodRecord {
        PodRecord::from_pod(&Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: label.map(|l| [(POD_GROUP_LABEL.to_string(), l.to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                scheduling_group: field.map(|f| PodSchedulingGroup {
                    pod_group_name: Some(f.into()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn pods_move_between_nodes_and_groups() {
        let mut ix = ClusterIndex::default();
        ix.apply_pod(&pod("a", None, Some("g1"), Some("ignored")));
        ix.apply_pod(&pod("b", Some("n1"), None, Some("g2")));
        let g1 = GroupKey::pod_group("ns", "g1");
        let g2 = GroupKey::pod_group("ns", "g2");
        assert_eq!(
            ix.members(&g1),
            vec![PodKey::new("ns", "a")],
            "label wins over the field"
        );
        assert_eq!(ix.members(&g2), vec![PodKey::new("ns", "b")]);
        assert_eq!(ix.pods_on_node("n1"), vec![PodKey::new("ns", "b")]);
        ix.apply_pod(&pod("a", Some("n1"), Some("g1"), None));
        assert_eq!(ix.pods_on_node("n1").len(), 2);
        ix.remove_pod(&PodKey::new("ns", "b"));
        assert_eq!(ix.pods_on_node("n1"), vec![PodKey::new("ns", "a")]);
        assert!(ix.members(&g2).is_empty());
        ix.reset_pods([&pod("c", Some("n2"), None, None)]);
        assert!(ix.pods_on_node("n1").is_empty());
        assert_eq!(ix.group_of(&PodKey::new("ns", "c")), None);
    }

    /// Owner-resolved pods are indexed under every owner uid their resolution visited, and a PodGroup's owner label
    /// is found by uid until the group is forgotten or relabelled.
    #[test]
    fn owner_chains_and_group_owners() {
        let mut ix = ClusterIndex::default();
        let g = GroupKey::pod_group("ns", "train-job");
        ix.apply_pod_resolved(&pod("a", None, None, None), Some(g.clone()), vec!["j1".into()]);
        ix.apply_pod_resolved(&pod("b", None, None, None), None, vec!["r1".into(), "d1".into()]);
        assert_eq!(ix.members(&g), vec![PodKey::new("ns", "a")]);
        assert_eq!(ix.pods_of_owner("d1"), vec![PodKey::new("ns", "b")]);
        ix.apply_pod_resolved(&pod("b", None, None, None), None, vec![]);
        assert!(
            ix.pods_of_owner("d1").is_empty(),
            "a re-resolved pod leaves its old chain"
        );
        ix.set_group_owner(&g, Some("j1"), None);
        assert_eq!(ix.group_of_owner("ns", "j1", None).as_deref(), Some("train-job"));
        ix.set_group_owner(&g, Some("j2"), None);
        assert_eq!(ix.group_of_owner("ns", "j1", None), None);
        ix.reset_group_owners([]);
        assert_eq!(ix.group_of_owner("ns", "j2", None), None);
        ix.reset_pods([&pod("c", None, None, None)]);
        assert!(ix.pods_of_owner("j1").is_empty());
    }

    /// Issue 35 (defect 8): an owner label links pods of its own namespace only. A PodGroup in namespace `a`
    /// labelled with the uid of an owner in `b` does not take `b`'s pods, and deleting a same-named group labelled
    /// with that uid in a third namespace does not unlink `b`'s group.
    #[test]
    fn owner_labels_are_namespaced() {
        let mut ix = ClusterIndex::default();
        let own = GroupKey::pod_group("b", "own");
        ix.set_group_owner(&own, Some("uB"), None);
        ix.set_group_owner(&GroupKey::pod_group("a", "evil"), Some("uB"), None);
        assert_eq!(ix.group_of_owner("b", "uB", None).as_deref(), Some("own"));
        assert_eq!(
            ix.group_of_owner("a", "uB", None).as_deref(),
            Some("evil"),
            "only pods of a reach a's group"
        );
        let same_name = GroupKey::pod_group("c", "own");
        ix.set_group_owner(&same_name, Some("uB"), None);
        ix.set_group_owner(&same_name, None, None);
        assert_eq!(ix.group_of_owner("b", "uB", None).as_deref(), Some("own"));
        assert_eq!(ix.group_of_owner("c", "uB", None), None);
        // Two groups of one namespace with one owner: the first by name, whatever the order, until it goes.
        let other = GroupKey::pod_group("b", "alt");
        ix.set_group_owner(&other, Some("uB"), None);
        assert_eq!(ix.group_of_owner("b", "uB", None).as_deref(), Some("alt"));
        ix.set_group_owner(&other, None, None);
        assert_eq!(ix.group_of_owner("b", "uB", None).as_deref(), Some("own"));
        ix.set_group_owner(&own, Some(""), None);
        assert_eq!(
            ix.group_of_owner("b", "uB", None),
            None,
            "an empty label is no label"
        );
        ix.reset_group_owners([(GroupKey::pod_group("a", "evil"), "uB".to_string(), None)]);
        assert_eq!(ix.group_of_owner("b", "uB", None), None);
        assert!(
            !ix.owned_groups.contains_key("b"),
            "an emptied namespace leaves no entry"
        );
    }

    /// Issue 38: an owner with several groups (a JobSet's replicated jobs) gives each pod the first group whose
    /// members annotation its labels match; a group whose annotation does not parse takes no pod.
    #[test]
    fn owned_groups_take_their_members_only() {
        let mut ix = ClusterIndex::default();
        let (driver, workers) = (
            GroupKey::pod_group("ns", "a-driver"),
            GroupKey::pod_group("ns", "b-workers"),
        );
        ix.set_group_owner(&driver, Some("js"), Some("rj=driver,attempt=0"));
        ix.set_group_owner(&workers, Some("js"), Some("rj=workers,attempt=0"));
        let labels = |rj: &str, attempt: &str| {
            std::collections::BTreeMap::from([
                ("rj".to_string(), rj.to_string()),
                ("attempt".to_string(), attempt.to_string()),
            ])
        };
        assert_eq!(
            ix.group_of_owner("ns", "js", Some(&labels("workers", "0")))
                .as_deref(),
            Some("b-workers")
        );
        assert_eq!(
            ix.group_of_owner("ns", "js", Some(&labels("driver", "0")))
                .as_deref(),
            Some("a-driver")
        );
        assert_eq!(
            ix.group_of_owner("ns", "js", Some(&labels("workers", "1"))),
            None,
            "another attempt"
        );
        assert_eq!(
            ix.group_of_owner("ns", "js", None).as_deref(),
            Some("a-driver"),
            "any group"
        );
        ix.set_group_owner(&driver, Some("js"), Some("no requirement here"));
        assert_eq!(ix.group_of_owner("ns", "js", Some(&labels("driver", "0"))), None);
        ix.set_group_owner(&driver, Some("js"), None);
        assert_eq!(
            ix.group_of_owner("ns", "js", Some(&labels("workers", "9")))
                .as_deref(),
            Some("a-driver"),
            "no annotation: every pod"
        );
    }

    #[test]
    fn tree_roots_and_cycles() {
        let mut ix = ClusterIndex::default();
        let root = GroupKey::composite("ns", "root");
        let mid = GroupKey::composite("ns", "mid");
        let leaf = GroupKey::pod_group("ns", "leaf");
        ix.apply_group(root.clone(), None);
        ix.apply_group(mid.clone(), Some("root"));
        ix.apply_group(leaf.clone(), Some("mid"));
        assert_eq!(ix.root_of(&leaf, 10), root);
        assert_eq!(ix.subtree(&root), vec![root.clone(), mid.clone(), leaf.clone()]);
        // A cycle root -> mid -> root terminates.
        ix.apply_group(root.clone(), Some("mid"));
        let r = ix.root_of(&leaf, 10);
        assert!(r == root || r == mid);
        assert_eq!(ix.subtree(&mid).len(), 3);
        ix.reset_groups((GroupKind::CompositePodGroup, GroupApi::Phalanx), []);
        assert_eq!(ix.root_of(&leaf, 10), leaf, "missing parent stops the walk");
    }
}
