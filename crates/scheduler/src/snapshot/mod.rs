//! The cluster snapshot a cycle runs on (upstream `internal/cache.Snapshot` plus
//! `PodGroupStates`), with cheap, exact assume/revert through an undo log.
//!
//! A driver may rebuild a snapshot per cycle ([`Snapshot::new`] + [`Snapshot::add_pod`]) or keep
//! one and apply watch events incrementally (`add_pod`, `remove_pod`, `upsert_node`,
//! `remove_node`); both give the same results. After `Scheduler::schedule` returns, the
//! decision's bindings are left assumed in the snapshot (the undo log is committed).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::dra::{DeviceCatalog, DeviceOverlay};
use crate::model::{GroupKey, NodeInfo, NodeStatic, PodInfo, PodKey};
use crate::preemption::PreemptionState;
use crate::preemption::cost::Cost;
use crate::volumes::{VolumeCatalog, VolumeOverlay, binding};

mod devices;
mod diff;
mod preemption_inputs;
mod quorum;

static SNAPSHOT_IDS: AtomicU64 = AtomicU64::new(1);

/// Node indices partitioned by the value of one label key, sorted by value.
pub type Domains = Arc<Vec<(String, Vec<usize>)>>;

/// Lazily built partitions of all nodes by label key; cleared when nodes change.
#[derive(Debug, Default)]
struct DomainCache(std::sync::Mutex<HashMap<String, Domains>>);

impl Clone for DomainCache {
    fn clone(&self) -> Self {
        DomainCache::default()
    }
}

impl DomainCache {
    fn clear(&mut self) {
        if let Ok(m) = self.0.get_mut() {
            m.clear();
        }
    }
}

/// Where a pod known to the snapshot sits.
#[derive(Debug, Clone, PartialEq)]
struct PodLocation {
    /// Node name (the node may be missing from the snapshot).
    node: Arc<str>,
    group: Option<GroupKey>,
    pod: Arc<PodInfo>,
}

/// Scheduled (assigned or assumed) members of one group, in the order they were added.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupState {
    /// (pod, node name) for every scheduled member.
    pub scheduled: Vec<(PodKey, Arc<str>)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Undo {
    Assume {
        node: usize,
        pod: PodKey,
        group: Option<GroupKey>,
        prev_generation: u64,
        /// The pod's index entry before (a pod evicted for a simulation and put back).
        prev: Option<Box<PodLocation>>,
    },
    /// Pods taken off a node by [`Snapshot::evict`] / `evict_batch`.
    Evict(Box<Evicted>),
}

/// What an eviction changed, to be put back exactly.
#[derive(Debug, Clone, PartialEq)]
struct Evicted {
    /// (node index, the node as it was, its generation) when the pods' node is in the snapshot.
    node: Option<(usize, NodeInfo, u64)>,
    /// Group memberships removed, in removal order: (group, position, member).
    groups: Vec<(GroupKey, usize, (PodKey, Arc<str>))>,
    /// Inter-pod affinity index entries removed.
    affinity: Vec<(PodKey, Arc<str>)>,
}

/// Nodes, the pods on them and per-group scheduled members.
///
/// `Clone` gives the copy a new [`Snapshot::id`]: node generations of two diverging copies
/// could coincide, so caches keyed by (id, generation) must not mix them.
#[derive(Debug)]
pub struct Snapshot {
    id: u64,
    nodes: Vec<NodeInfo>,
    index: HashMap<Arc<str>, usize>,
    generations: Vec<u64>,
    next_generation: u64,
    pods: HashMap<PodKey, PodLocation>,
    groups: HashMap<GroupKey, GroupState>,
    /// Pods (on known nodes) that carry inter-pod affinity terms, with their node.
    affinity_pods: std::collections::BTreeMap<PodKey, Arc<str>>,
    undo: Vec<Undo>,
    domains: DomainCache,
    /// [`Snapshot::name_ranks`], built on first use, dropped when a node comes or goes. Not cluster state.
    name_ranks: std::sync::OnceLock<Arc<[u32]>>,
    /// Inputs of preemption (group objects, nominated pods, PDBs, ...), see
    /// [`crate::preemption::PreemptionState`]; never touched by assume/revert.
    pub(crate) preemption: PreemptionState,
    /// Per node (by index), the estimated cost of the preemption victims there, set only while
    /// group preemption simulates a run (`preemption::node_cost`): the per-pod pass then
    /// prefers cheaper nodes. Not cluster state: ignored by `PartialEq`.
    pub(crate) victim_costs: Option<Vec<Cost>>,
    /// Per group, the members that have Succeeded: they count toward the quorum (a finished member of a Job with
    /// `completions > parallelism` is not a lost one, k/k#142330) but hold no capacity, so they are on no node.
    /// A per-cycle input set by the runtime ([`Snapshot::set_completed`]), never touched by assume/revert.
    completed: HashMap<GroupKey, usize>,
    /// Claims, volumes, classes and CSI facts (set by the runtime, [`Snapshot::set_volumes`]).
    volumes: Arc<VolumeCatalog>,
    /// The cycle's volume choices, undone with the assumptions that made them.
    volume_overlay: VolumeOverlay,
    /// Devices, classes and resource claims (set by the runtime, [`Snapshot::set_devices`]).
    devices: Arc<DeviceCatalog>,
    /// The cycle's device allocations, undone with the assumptions that made them.
    device_overlay: DeviceOverlay,
}

impl PartialEq for Snapshot {
    /// Compares cluster state only (ids and generations are bookkeeping).
    fn eq(&self, other: &Snapshot) -> bool {
        self.nodes == other.nodes
            && self.pods == other.pods
            && self.groups == other.groups
            && self.affinity_pods == other.affinity_pods
            && self.preemption == other.preemption
            && self.completed == other.completed
            && self.volumes == other.volumes
            && self.volume_overlay == other.volume_overlay
            && self.devices == other.devices
            && self.device_overlay == other.device_overlay
    }
}

impl Clone for Snapshot {
    fn clone(&self) -> Snapshot {
        Snapshot {
            id: SNAPSHOT_IDS.fetch_add(1, Ordering::Relaxed),
            nodes: self.nodes.clone(),
            index: self.index.clone(),
            generations: self.generations.clone(),
            next_generation: self.next_generation,
            pods: self.pods.clone(),
            groups: self.groups.clone(),
            affinity_pods: self.affinity_pods.clone(),
            undo: self.undo.clone(),
            domains: self.domains.clone(),
            name_ranks: self.name_ranks.clone(),
            preemption: self.preemption.clone(),
            victim_costs: self.victim_costs.clone(),
            completed: self.completed.clone(),
            volumes: self.volumes.clone(),
            volume_overlay: self.volume_overlay.clone(),
            devices: self.devices.clone(),
            device_overlay: self.device_overlay.clone(),
        }
    }
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot::new(Vec::new())
    }
}

impl Snapshot {
    /// A snapshot of these nodes with no pods. Duplicate names: the last one wins.
    pub fn new(nodes: impl IntoIterator<Item = Arc<NodeStatic>>) -> Snapshot {
        let mut s = Snapshot {
            id: SNAPSHOT_IDS.fetch_add(1, Ordering::Relaxed),
            nodes: Vec::new(),
            index: HashMap::new(),
            generations: Vec::new(),
            next_generation: 1,
            pods: HashMap::new(),
            groups: HashMap::new(),
            affinity_pods: std::collections::BTreeMap::new(),
            undo: Vec::new(),
            domains: DomainCache::default(),
            name_ranks: std::sync::OnceLock::new(),
            preemption: PreemptionState::default(),
            victim_costs: None,
            completed: HashMap::new(),
            volumes: Arc::default(),
            volume_overlay: VolumeOverlay::default(),
            devices: Arc::default(),
            device_overlay: DeviceOverlay::default(),
        };
        for n in nodes {
            s.upsert_node(n);
        }
        s
    }

    /// Sets the storage facts the volume plugins read, and drops the volume choices of earlier cycles (the runtime's
    /// catalog carries the ones it is still writing).
    pub fn set_volumes(&mut self, catalog: Arc<VolumeCatalog>) {
        self.volumes = catalog;
        self.volume_overlay = VolumeOverlay::default();
    }

    /// The storage facts of this snapshot.
    pub fn volumes(&self) -> &Arc<VolumeCatalog> {
        &self.volumes
    }

    /// The volume choices of this cycle.
    pub fn volume_overlay(&self) -> &VolumeOverlay {
        &self.volume_overlay
    }

    /// Unique id; changes whenever node indices change (evaluation caches key on it).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// All nodes, indexable by the indices used throughout the crate.
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    /// Node by index. Panics on an out-of-range index (indices come from this snapshot).
    pub fn node(&self, i: usize) -> &NodeInfo {
        &self.nodes[i]
    }

    /// Index of a node by name.
    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// Generation of a node: a fresh value on every mutation of that node; a revert restores the
    /// previous value. Equal generations imply equal node state within one snapshot id.
    pub fn generation(&self, i: usize) -> u64 {
        self.generations[i]
    }

    /// All nodes that carry label `key`, partitioned by its value (sorted by value, node
    /// indices ascending). Cached until a node is added, changed or removed.
    pub fn domains(&self, key: &str) -> Domains {
        let mut cache = match self.domains.0.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(d) = cache.get(key) {
            return d.clone();
        }
        let mut map: std::collections::BTreeMap<&str, Vec<usize>> = std::collections::BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(v) = n.node.labels.get(key) {
                map.entry(v.as_str()).or_default().push(i);
            }
        }
        let d: Domains = Arc::new(map.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        cache.insert(key.to_string(), d.clone());
        d
    }

    /// Per node (by index), its rank among the snapshot's nodes sorted by name: comparing two ranks is comparing
    /// the names (unique, never changed), without touching them. Built once per node set.
    pub(crate) fn name_ranks(&self) -> &[u32] {
        self.name_ranks.get_or_init(|| {
            let mut order: Vec<usize> = (0..self.nodes.len()).collect();
            order.sort_unstable_by(|&a, &b| self.nodes[a].name().cmp(self.nodes[b].name()));
            let mut ranks = vec![0u32; order.len()];
            for (rank, &i) in order.iter().enumerate() {
                ranks[i] = rank as u32;
            }
            ranks.into()
        })
    }

    /// Number of pods in the snapshot that carry inter-pod affinity terms.
    pub fn pods_with_affinity(&self) -> u32 {
        self.affinity_pods.len() as u32
    }

    /// Pods with inter-pod affinity terms and the node each runs on (upstream
    /// `HavePodsWithAffinityList`), so plugins need not scan every pod.
    pub fn affinity_pods(&self) -> impl Iterator<Item = (&Arc<PodInfo>, &NodeInfo)> {
        self.affinity_pods.iter().filter_map(|(k, node)| {
            let pod = &self.pods.get(k)?.pod;
            let i = *self.index.get(node)?;
            Some((pod, &self.nodes[i]))
        })
    }

    fn bump(&mut self, i: usize) {
        self.generations[i] = self.next_generation;
        self.next_generation += 1;
    }

    /// Adds or replaces a node, keeping its pods. Changes [`Snapshot::id`] when a node is added.
    pub fn upsert_node(&mut self, node: Arc<NodeStatic>) {
        self.domains.clear();
        if let Some(&i) = self.index.get(&node.name) {
            self.nodes[i].node = node;
            self.bump(i);
            return;
        }
        let i = self.nodes.len();
        self.name_ranks = std::sync::OnceLock::new();
        self.index.insert(node.name.clone(), i);
        let mut info = NodeInfo::new(node.clone());
        // Pods that arrived before their node (sorted so the result does not depend on hashing).
        let mut waiting: Vec<Arc<PodInfo>> = self
            .pods
            .values()
            .filter(|l| l.node == node.name)
            .map(|l| l.pod.clone())
            .collect();
        waiting.sort_by(|a, b| a.key.cmp(&b.key));
        for p in waiting {
            if !p.spec.affinity.is_empty() {
                self.affinity_pods.insert(p.key.clone(), node.name.clone());
            }
            info.add_pod(p);
        }
        self.nodes.push(info);
        self.generations.push(0);
        self.bump(i);
        self.id = SNAPSHOT_IDS.fetch_add(1, Ordering::Relaxed);
    }

    /// Removes a node and forgets the usage of its pods (they stay counted in their groups).
    /// Changes [`Snapshot::id`]. Returns false when unknown.
    pub fn remove_node(&mut self, name: &str) -> bool {
        let Some(i) = self.index.remove(name) else {
            return false;
        };
        self.domains.clear();
        self.name_ranks = std::sync::OnceLock::new();
        let removed = self.nodes.swap_remove(i);
        self.generations.swap_remove(i);
        for p in &removed.pods {
            self.affinity_pods.remove(&p.key);
        }
        if i < self.nodes.len() {
            let moved = self.nodes[i].node.name.clone();
            self.index.insert(moved, i);
            self.bump(i);
        }
        self.id = SNAPSHOT_IDS.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Adds an assigned (or being-bound) pod on `pod.node_name`. A pod whose node is not in the
    /// snapshot still counts for its group (returns false). Re-adding a known pod replaces it.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>) -> bool {
        let Some(node) = pod.node_name.clone() else {
            return false;
        };
        self.remove_pod(&pod.key);
        let group = pod.group_key();
        if let Some(g) = &group {
            self.groups
                .entry(g.clone())
                .or_default()
                .scheduled
                .push((pod.key.clone(), node.clone()));
        }
        self.pods.insert(
            pod.key.clone(),
            PodLocation {
                node: node.clone(),
                group,
                pod: pod.clone(),
            },
        );
        match self.index.get(&node).copied() {
            Some(i) => {
                if !pod.spec.affinity.is_empty() {
                    self.affinity_pods.insert(pod.key.clone(), node.clone());
                }
                self.nodes[i].add_pod(pod);
                self.bump(i);
                true
            }
            None => false,
        }
    }

    /// Removes a pod by key (deleted, or bind failed). Returns false when unknown.
    pub fn remove_pod(&mut self, key: &PodKey) -> bool {
        let Some(loc) = self.pods.remove(key) else {
            return false;
        };
        if let Some(g) = &loc.group
            && let Some(st) = self.groups.get_mut(g)
        {
            st.scheduled.retain(|(k, _)| k != key);
            if st.scheduled.is_empty() {
                self.groups.remove(g);
            }
        }
        self.affinity_pods.remove(key);
        if let Some(&i) = self.index.get(&loc.node)
            && self.nodes[i].remove_pod(key)
        {
            self.bump(i);
        }
        true
    }

    /// Whether the pod is known (assigned or assumed).
    pub fn contains_pod(&self, key: &PodKey) -> bool {
        self.pods.contains_key(key)
    }

    /// A known (assigned or assumed) pod.
    pub fn pod(&self, key: &PodKey) -> Option<&Arc<PodInfo>> {
        self.pods.get(key).map(|l| &l.pod)
    }

    /// Node name of a known pod.
    pub fn pod_node(&self, key: &PodKey) -> Option<&Arc<str>> {
        self.pods.get(key).map(|l| &l.node)
    }

    /// Scheduled (assigned + assumed) members of a group.
    pub fn group_state(&self, g: &GroupKey) -> Option<&GroupState> {
        self.groups.get(g)
    }

    /// Replaces the per-group counts of Succeeded members (pods in phase Succeeded, which the snapshot's nodes do
    /// not hold). The runtime sets them for the groups of each cycle's entity; groups left out count 0.
    pub fn set_completed(&mut self, completed: HashMap<GroupKey, usize>) {
        self.completed = completed;
    }

    /// Position in the undo log, for [`Snapshot::revert_to`].
    pub fn mark(&self) -> usize {
        self.undo.len()
    }

    /// Assumes `pod` on node `node` (upstream `AssumeAndReserveInSnapshot`); recorded in the
    /// undo log. O(1) apart from the pod's scalar resources.
    pub fn assume(&mut self, pod: Arc<PodInfo>, node: usize) {
        if !pod.spec.volumes.is_empty() {
            // Reserve (upstream VolumeBinding `Reserve` → `AssumePodVolumes`): the claims the pod still has to bind
            // take their volume or node here, so the next pod of the gang cannot take the same volume.
            let actions = binding::reserve(&self.volumes, &self.volume_overlay, &pod, &self.nodes[node]);
            if !actions.is_empty() {
                self.volume_overlay
                    .record(self.undo.len(), pod.key.clone(), actions);
            }
        }
        if !pod.spec.resource_claims.is_empty() {
            self.reserve_devices(&pod, node);
        }
        let group = pod.group_key();
        let name = self.nodes[node].node.name.clone();
        if let Some(g) = &group {
            self.groups
                .entry(g.clone())
                .or_default()
                .scheduled
                .push((pod.key.clone(), name.clone()));
        }
        let prev = self
            .pods
            .insert(
                pod.key.clone(),
                PodLocation {
                    node: name,
                    group: group.clone(),
                    pod: pod.clone(),
                },
            )
            .map(Box::new);
        if !pod.spec.affinity.is_empty() {
            self.affinity_pods
                .insert(pod.key.clone(), self.nodes[node].node.name.clone());
        }
        self.undo.push(Undo::Assume {
            node,
            pod: pod.key.clone(),
            group,
            prev_generation: self.generations[node],
            prev,
        });
        self.nodes[node].add_pod(pod);
        self.bump(node);
    }

    /// Takes a known pod off its node for a simulation (preemption: victims are taken out, then
    /// reprieved): its node usage and its group's scheduled count drop, while the pod index
    /// keeps it (`contains_pod`, `pod` and `pod_node` still answer), so that evicting tens of
    /// thousands of candidates stays cheap. Recorded in the undo log:
    /// [`Snapshot::revert_to`] puts it back exactly (same position on its node and in its
    /// group, same node generation). Evicting a pod twice without a revert in between is a
    /// no-op. Returns false when the pod is unknown or already evicted.
    pub fn evict(&mut self, key: &PodKey) -> bool {
        let Some(loc) = self.pods.get(key) else {
            return false;
        };
        let pod = loc.pod.clone();
        let node = self.index.get(&loc.node).copied();
        let listed = !pod.spec.affinity.is_empty() || pod.group_name.is_some();
        self.evict_batch(node, &[(&pod, listed)]) == 1
    }

    /// Evicts `pods` (each with "may be listed in a group or the affinity index"; false skips
    /// that bookkeeping) from node `node` (`None`: their node is not in the snapshot, only the
    /// group memberships change) as one undo entry. The node is rebuilt from the pods it keeps,
    /// so evicting every pod of a node never touches the evicted pods' data. Returns how many
    /// were evicted; pods not on the node are ignored.
    pub(crate) fn evict_batch(&mut self, node: Option<usize>, pods: &[(&Arc<PodInfo>, bool)]) -> usize {
        let mut undo = Evicted {
            node: None,
            groups: Vec::new(),
            affinity: Vec::new(),
        };
        let mut count = 0;
        let mut listed: Vec<&Arc<PodInfo>> = Vec::new();
        match node.filter(|&i| i < self.nodes.len()) {
            Some(i) => {
                let info = &self.nodes[i];
                // The snapshot hands out the same `Arc` it keeps on the node, so identity is enough.
                let find = |p: &Arc<PodInfo>| pods.iter().find(|(v, _)| Arc::ptr_eq(v, p));
                if !info.pods.iter().any(|p| find(p).is_some()) {
                    return 0;
                }
                let mut kept = NodeInfo::new(info.node.clone());
                for p in &info.pods {
                    match find(p) {
                        Some((v, l)) => {
                            count += 1;
                            if *l {
                                listed.push(v);
                            }
                        }
                        None => kept.add_pod(p.clone()),
                    }
                }
                let old = std::mem::replace(&mut self.nodes[i], kept);
                undo.node = Some((i, old, self.generations[i]));
                self.bump(i);
            }
            None => {
                // Only group members count for a pod whose node is missing.
                for (v, l) in pods {
                    if *l && self.pods.contains_key(&v.key) {
                        listed.push(v);
                    }
                }
            }
        }
        for pod in listed {
            if let Some(g) = pod.group_key()
                && let Some(st) = self.groups.get_mut(&g)
                && let Some(j) = st.scheduled.iter().rposition(|(k, _)| *k == pod.key)
            {
                let member = st.scheduled.remove(j);
                if st.scheduled.is_empty() {
                    self.groups.remove(&g);
                }
                if node.is_none() {
                    count += 1;
                }
                undo.groups.push((g, j, member));
            }
            if !pod.spec.affinity.is_empty()
                && let Some(n) = self.affinity_pods.remove(&pod.key)
            {
                undo.affinity.push((pod.key.clone(), n));
            }
        }
        if count > 0 {
            self.undo.push(Undo::Evict(Box::new(undo)));
        }
        count
    }

    /// Reverts every assumption and eviction made after `mark`, newest first; the state, node
    /// generations included, is then exactly what it was at `mark`.
    pub fn revert_to(&mut self, mark: usize) {
        self.volume_overlay.revert_to(mark);
        self.device_overlay.revert_to(mark);
        while self.undo.len() > mark {
            let Some(entry) = self.undo.pop() else { break };
            match entry {
                Undo::Assume {
                    node,
                    pod,
                    group,
                    prev_generation,
                    prev,
                } => {
                    self.nodes[node].remove_pod(&pod);
                    self.affinity_pods.remove(&pod);
                    match prev {
                        Some(loc) => {
                            self.pods.insert(pod.clone(), *loc);
                        }
                        None => {
                            self.pods.remove(&pod);
                        }
                    }
                    if let Some(g) = group
                        && let Some(st) = self.groups.get_mut(&g)
                    {
                        if let Some(j) = st.scheduled.iter().rposition(|(k, _)| *k == pod) {
                            st.scheduled.remove(j);
                        }
                        if st.scheduled.is_empty() {
                            self.groups.remove(&g);
                        }
                    }
                    // The node is exactly as it was: its old generation (and cached evaluations)
                    // hold again.
                    self.generations[node] = prev_generation;
                }
                Undo::Evict(e) => self.restore(*e),
            }
        }
    }

    fn restore(&mut self, e: Evicted) {
        for (g, j, member) in e.groups.into_iter().rev() {
            let st = &mut self.groups.entry(g).or_default().scheduled;
            st.insert(j.min(st.len()), member);
        }
        for (k, n) in e.affinity {
            self.affinity_pods.insert(k, n);
        }
        if let Some((i, info, generation)) = e.node {
            self.nodes[i] = info;
            self.generations[i] = generation;
        }
    }

    /// Keeps every assumption made so far (clears the undo log).
    pub fn commit(&mut self) {
        self.undo.clear();
        self.volume_overlay.commit();
        self.device_overlay.commit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PodInfo;

    #[test]
    fn assume_and_revert_restore_state() {
        let mut s = Snapshot::new([Arc::new(NodeStatic::simple("n1", 4000, 1 << 30, &[]))]);
        let mut existing = PodInfo::simple("ns", "e", 1000);
        existing.node_name = Some("n1".into());
        s.add_pod(Arc::new(existing));
        let before = s.clone();
        let m = s.mark();
        let mut p = PodInfo::simple("ns", "p", 500);
        p.group_name = Some("g".into());
        s.assume(Arc::new(p), 0);
        assert_eq!(s.node(0).requested.milli_cpu, 1500);
        assert_eq!(s.scheduled_count(&GroupKey::pod_group("ns", "g")), 1);
        s.revert_to(m);
        assert_eq!(s, before);
    }

    #[test]
    fn evict_and_revert_restore_state_exactly() {
        let mut s = Snapshot::new([Arc::new(NodeStatic::simple("n1", 4000, 1 << 30, &[]))]);
        for name in ["a", "b", "c"] {
            let mut p = PodInfo::simple("ns", name, 500);
            p.node_name = Some("n1".into());
            p.group_name = Some("g".into());
            s.add_pod(Arc::new(p));
        }
        let before = s.clone();
        let gen_before = s.generation(0);
        let m = s.mark();
        assert!(s.evict(&PodKey::new("ns", "b")));
        assert!(!s.evict(&PodKey::new("ns", "b")), "already evicted");
        assert!(!s.evict(&PodKey::new("ns", "missing")));
        assert!(s.contains_pod(&PodKey::new("ns", "b")), "the pod index keeps it");
        assert_eq!(s.node(0).requested.milli_cpu, 1000);
        assert_eq!(s.scheduled_count(&GroupKey::pod_group("ns", "g")), 2);
        // A simulation re-adds it through assume, then everything is undone.
        let b = before.pod(&PodKey::new("ns", "b")).unwrap().clone();
        s.assume(b, 0);
        s.revert_to(m);
        assert_eq!(s, before);
        assert_eq!(s.generation(0), gen_before);
        let order: Vec<&str> = s.node(0).pods.iter().map(|p| &*p.key.name).collect();
        assert_eq!(order, ["a", "b", "c"]);
    }

    #[test]
    fn pods_that_arrive_before_their_node_are_attached() {
        let mut s = Snapshot::new([Arc::new(NodeStatic::simple("a", 1000, 0, &[]))]);
        let mut p = PodInfo::simple("ns", "early", 300);
        p.node_name = Some("late".into());
        p.group_name = Some("g".into());
        assert!(!s.add_pod(Arc::new(p)));
        assert_eq!(s.scheduled_count(&GroupKey::pod_group("ns", "g")), 1);
        s.upsert_node(Arc::new(NodeStatic::simple("late", 1000, 0, &[])));
        let i = s.node_index("late").unwrap();
        assert_eq!(s.node(i).requested.milli_cpu, 300);
        // Replacing a node keeps its pods; removing a pod frees its usage.
        s.upsert_node(Arc::new(NodeStatic::simple("late", 2000, 0, &[("k", "v")])));
        assert_eq!(s.node(i).requested.milli_cpu, 300);
        assert!(s.remove_pod(&PodKey::new("ns", "early")));
        assert_eq!(s.node(i).requested.milli_cpu, 0);
        assert_eq!(s.scheduled_count(&GroupKey::pod_group("ns", "g")), 0);
    }

    #[test]
    fn domains_are_cached_and_invalidated() {
        let mut s = Snapshot::new(["a", "b", "c"].map(|n| {
            Arc::new(NodeStatic::simple(
                n,
                1000,
                0,
                &[("rack", if n == "b" { "r2" } else { "r1" })],
            ))
        }));
        let d = s.domains("rack");
        assert_eq!(
            *d,
            vec![("r1".to_string(), vec![0, 2]), ("r2".to_string(), vec![1])]
        );
        s.upsert_node(Arc::new(NodeStatic::simple("d", 1000, 0, &[("rack", "r3")])));
        assert_eq!(s.domains("rack").len(), 3);
    }

    #[test]
    fn name_ranks_follow_names_as_nodes_come_and_go() {
        let mut s = Snapshot::new(["b", "c", "a"].map(|n| Arc::new(NodeStatic::simple(n, 1000, 0, &[]))));
        assert_eq!(s.name_ranks(), [1, 2, 0]);
        let copy = s.clone();
        s.upsert_node(Arc::new(NodeStatic::simple("aa", 1000, 0, &[])));
        assert_eq!(s.name_ranks(), [2, 3, 0, 1]);
        assert_eq!(copy.name_ranks(), [1, 2, 0]);
        assert!(s.remove_node("b"));
        // "aa" moved into b's index.
        assert_eq!(s.name_ranks(), [1, 2, 0]);
        for i in 0..s.len() {
            for j in 0..s.len() {
                assert_eq!(
                    s.name_ranks()[i] < s.name_ranks()[j],
                    s.node(i).name() < s.node(j).name()
                );
            }
        }
    }

    #[test]
    fn remove_node_keeps_indices_consistent() {
        let mut s = Snapshot::new(["a", "b", "c"].map(|n| Arc::new(NodeStatic::simple(n, 1000, 0, &[]))));
        assert!(s.remove_node("a"));
        assert_eq!(s.len(), 2);
        for (i, n) in s.nodes().iter().enumerate() {
            assert_eq!(s.node_index(n.name()), Some(i));
        }
    }
}

#[cfg(test)]
mod clone_tests {
    use super::*;

    #[test]
    fn clones_get_a_new_id() {
        let s = Snapshot::new([Arc::new(NodeStatic::simple("n", 1000, 0, &[]))]);
        let c = s.clone();
        assert_ne!(s.id(), c.id());
        assert_eq!(s, c);
    }
}
