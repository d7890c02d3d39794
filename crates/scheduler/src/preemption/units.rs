//! Victim units (upstream `Victim` / `DomainVictim` in
//! `pkg/scheduler/framework/preemption/types.go`, `getCrossNodesVictims`,
//! `getHighestAllAncestor`, `moreImportantVictim`).
//!
//! A running pod whose group hierarchy has an ancestor with `disruptionMode: all` is evicted
//! with every scheduled pod under the highest such ancestor (a PodGroup or a
//! CompositePodGroup): that is one unit, possibly spanning many nodes. Any other pod is a unit
//! of its own. A unit's priority is its group's priority whatever the disruption mode
//! (k/k#139030: the group's priority is authoritative), else the pod's.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::hierarchy::MAX_TREE_DEPTH;
use crate::model::{DisruptionMode, GroupKey, PodInfo};
use crate::preemption::pdb::{self, Pdb};
use crate::snapshot::Snapshot;

/// Importance rank of a unit's kind (upstream `EntityKeyType`): among units of equal priority
/// a whole CompositePodGroup is more important than a whole PodGroup, which is more important
/// than a single pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum UnitKind {
    /// One pod (no group, or a member of a `single` group).
    Pod = 1,
    /// Every scheduled pod of a PodGroup with `disruptionMode: all`.
    PodGroup = 2,
    /// Every scheduled pod under a CompositePodGroup with `disruptionMode: all`.
    CompositePodGroup = 3,
}

/// One pod of a unit and the index of its node (`None` when its node is not in the snapshot).
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub(crate) pod: Arc<PodInfo>,
    pub(crate) node: Option<usize>,
    /// In a group or carrying affinity terms: eviction must update those indexes too.
    pub(crate) listed: bool,
    /// The snapshot's PDBs selecting the pod ([`pdb::matching`]; empty without PDBs).
    pub(crate) pdbs: Vec<u32>,
}

impl Member {
    fn new(pod: &Arc<PodInfo>, node: Option<usize>, pdbs: &[Pdb]) -> Member {
        Member {
            pod: pod.clone(),
            node,
            listed: pod.group_name.is_some() || !pod.spec.affinity.is_empty(),
            pdbs: if pdbs.is_empty() {
                Vec::new()
            } else {
                pdb::matching(pdbs, pod)
            },
        }
    }
}

/// An atomic set of pods that preemption evicts together.
#[derive(Debug, Clone)]
pub(crate) struct VictimUnit {
    /// The first member; most units have no other, and then need no allocation.
    first: Member,
    rest: Vec<Member>,
    pub(crate) priority: i32,
    pub(crate) kind: UnitKind,
    /// The group the unit stands for (see `decision::Victim::group`).
    pub(crate) group: Option<GroupKey>,
    pub(crate) mode: DisruptionMode,
    /// uid of the group of a whole-group unit (a pod unit uses its pod's).
    group_uid: Option<Arc<str>>,
    /// Earliest known start time of its pods (Unix milliseconds).
    pub(crate) earliest_start: Option<i64>,
    /// Whether any member carries inter-pod affinity terms (re-adding it can change Filter
    /// results on other nodes).
    pub(crate) has_affinity: bool,
}

impl VictimUnit {
    /// uid of the group (whole-group units) or of the pod: the final tie-break.
    pub(crate) fn uid(&self) -> &str {
        self.group_uid.as_deref().unwrap_or(&self.first.pod.uid)
    }

    /// Every member, the first one first.
    pub(crate) fn members(&self) -> impl Iterator<Item = &Member> + '_ {
        std::iter::once(&self.first).chain(self.rest.iter())
    }

    /// Number of pods.
    pub(crate) fn len(&self) -> usize {
        1 + self.rest.len()
    }

    /// Whether a member runs on node `idx`.
    pub(crate) fn on_node(&self, idx: usize) -> bool {
        self.members().any(|m| m.node == Some(idx))
    }

    /// Whether a member runs on a node flagged in `nodes` (indexed by node).
    pub(crate) fn touches(&self, nodes: &[bool]) -> bool {
        if self.rest.is_empty() {
            return self
                .first
                .node
                .is_some_and(|n| nodes.get(n).copied().unwrap_or(false));
        }
        self.members()
            .any(|m| m.node.is_some_and(|n| nodes.get(n).copied().unwrap_or(false)))
    }
}

/// Where a running pod sits in its group hierarchy, as far as the snapshot's group objects
/// tell.
#[derive(Debug, Clone)]
pub(crate) struct Lineage {
    /// The unit priority (topmost known group's priority, else the nearest set one below, else
    /// the pod's).
    pub(crate) priority: i32,
    /// Highest ancestor (the leaf included) with `disruptionMode: all`.
    pub(crate) highest_all: Option<(GroupKey, UnitKind, Arc<str>)>,
}

/// Walks from the pod's PodGroup up through its CompositePodGroup parents (at most
/// [`MAX_TREE_DEPTH`] levels; a missing object ends the walk, like upstream's traversal).
pub(crate) fn lineage(snapshot: &Snapshot, pod: &PodInfo) -> Lineage {
    let st = &snapshot.preemption;
    let mut out = Lineage {
        priority: pod.priority,
        highest_all: None,
    };
    let Some(leaf_key) = pod.group_key() else {
        return out;
    };
    let Some(leaf) = st.group(&leaf_key) else {
        return out;
    };
    if let Some(p) = leaf.priority {
        out.priority = p;
    }
    if leaf.disruption_mode == DisruptionMode::All {
        out.highest_all = Some((leaf.key.clone(), UnitKind::PodGroup, leaf.uid.clone()));
    }
    let mut parent = leaf.parent.clone();
    for _ in 1..MAX_TREE_DEPTH {
        let Some(pk) = parent else { break };
        let Some(c) = st.composite(&pk) else { break };
        if let Some(p) = c.priority {
            out.priority = p;
        }
        if c.disruption_mode == DisruptionMode::All {
            out.highest_all = Some((c.key.clone(), UnitKind::CompositePodGroup, c.uid.clone()));
        }
        parent = c.parent.clone();
    }
    out
}

/// Leaf PodGroups below each CompositePodGroup, from the snapshot's group objects (built only
/// when a CompositePodGroup unit is met).
fn leaves_by_ancestor(snapshot: &Snapshot) -> HashMap<GroupKey, Vec<GroupKey>> {
    let st = &snapshot.preemption;
    let mut out: HashMap<GroupKey, Vec<GroupKey>> = HashMap::new();
    for g in st.groups() {
        let mut parent = g.parent.clone();
        for _ in 1..MAX_TREE_DEPTH {
            let Some(pk) = parent else { break };
            out.entry(pk.clone()).or_default().push(g.key.clone());
            parent = st.composite(&pk).and_then(|c| c.parent.clone());
        }
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

fn member(snapshot: &Snapshot, pod: &Arc<PodInfo>) -> Member {
    Member::new(
        pod,
        snapshot.pod_node(&pod.key).and_then(|n| snapshot.node_index(n)),
        snapshot.preemption.pdbs(),
    )
}

/// Every unit of running pods whose priority is below `below` (upstream
/// `getWorkloadPreemptionVictims` + `isPreemptionAllowed`), in node order then pod order;
/// unsorted. Pods on nodes missing from the snapshot only join whole-group units.
pub(crate) fn collect(snapshot: &Snapshot, below: i32) -> Vec<VictimUnit> {
    let st = &snapshot.preemption;
    let mut units = Vec::with_capacity(snapshot.nodes().iter().map(|n| n.pods.len()).sum());
    let mut seen: HashSet<GroupKey> = HashSet::new();
    let mut leaves: Option<HashMap<GroupKey, Vec<GroupKey>>> = None;
    for (idx, node) in snapshot.nodes().iter().enumerate() {
        for pod in &node.pods {
            let lin = if st.has_groups() && pod.group_name.is_some() {
                lineage(snapshot, pod)
            } else {
                Lineage {
                    priority: pod.priority,
                    highest_all: None,
                }
            };
            if lin.priority >= below {
                continue;
            }
            match lin.highest_all {
                None => units.push(VictimUnit {
                    first: Member::new(pod, Some(idx), st.pdbs()),
                    rest: Vec::new(),
                    priority: lin.priority,
                    kind: UnitKind::Pod,
                    group: pod.group_key(),
                    mode: DisruptionMode::Single,
                    group_uid: None,
                    earliest_start: st.start_time(&pod.key),
                    has_affinity: !pod.spec.affinity.is_empty(),
                }),
                Some((key, kind, uid)) => {
                    if !seen.insert(key.clone()) {
                        continue;
                    }
                    let leaf_keys = match kind {
                        UnitKind::CompositePodGroup => leaves
                            .get_or_insert_with(|| leaves_by_ancestor(snapshot))
                            .get(&key)
                            .cloned()
                            .unwrap_or_default(),
                        _ => vec![key.clone()],
                    };
                    let mut members: Vec<Member> = leaf_keys
                        .iter()
                        .filter_map(|g| snapshot.group_state(g))
                        .flat_map(|gs| gs.scheduled.iter())
                        .filter_map(|(k, _)| snapshot.pod(k))
                        .map(|p| member(snapshot, p))
                        .collect();
                    if members.is_empty() {
                        // Cannot happen for a pod found on a node; keep the pod itself.
                        members.push(member(snapshot, pod));
                    }
                    let earliest_start = members.iter().filter_map(|m| st.start_time(&m.pod.key)).min();
                    let has_affinity = members.iter().any(|m| !m.pod.spec.affinity.is_empty());
                    let first = members.remove(0);
                    units.push(VictimUnit {
                        first,
                        rest: members,
                        priority: lin.priority,
                        kind,
                        group: Some(key),
                        mode: DisruptionMode::All,
                        group_uid: Some(uid),
                        earliest_start,
                        has_affinity,
                    });
                }
            }
        }
    }
    units
}

/// Upstream `metav1.Time.Before` on optional times: unknown times are never before anything.
fn older(a: Option<i64>, b: Option<i64>) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => Ordering::Equal,
    }
}

/// `Less` when `a` is more important than `b` (upstream `moreImportantVictim`): higher
/// priority; then CompositePodGroup > PodGroup > Pod; two pods: older start first; two groups:
/// more pods first, then older earliest start; finally uid, so the order is total.
pub(crate) fn importance(a: &VictimUnit, b: &VictimUnit) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then(b.kind.cmp(&a.kind))
        .then_with(|| {
            if a.kind == UnitKind::Pod {
                older(a.earliest_start, b.earliest_start)
            } else {
                b.len()
                    .cmp(&a.len())
                    .then(older(a.earliest_start, b.earliest_start))
            }
        })
        .then_with(|| a.uid().cmp(b.uid()))
}

/// Evicts every pod of `units` from the snapshot (one undo entry per run of pods on the same
/// node; units come in node order, so that is about one per node).
pub(crate) fn evict<'u>(snapshot: &mut Snapshot, units: impl IntoIterator<Item = &'u VictimUnit>) {
    let mut batch: Vec<(&Arc<PodInfo>, bool)> = Vec::new();
    let mut at: Option<usize> = None;
    for m in units.into_iter().flat_map(VictimUnit::members) {
        if m.node != at && !batch.is_empty() {
            snapshot.evict_batch(at, &batch);
            batch.clear();
        }
        at = m.node;
        batch.push((&m.pod, m.listed));
    }
    if !batch.is_empty() {
        snapshot.evict_batch(at, &batch);
    }
}

/// Sorts most important first (the full order [`sort_for_budgets`] keeps among protected
/// units; tests compare with it).
#[cfg(test)]
pub(crate) fn sort(units: &mut [VictimUnit]) {
    units.sort_by(importance);
}

/// Sorts by priority only, highest first, keeping node order among equals: enough for the
/// priority tiers, and much cheaper than a full [`importance`] sort on tens of thousands of units (a bucket per
/// priority: each unit moves twice). The reprieve then orders the few units it actually checks
/// (see `reprieve`). Node order among equals keeps `evict` batches large.
pub(crate) fn sort_by_priority(units: &mut [VictimUnit]) {
    units.sort_by_key(|u| std::cmp::Reverse(u.priority));
}

/// [`sort_by_priority`], then the units a PDB selects (a member with [`Member::pdbs`]) most
/// important first among themselves, in the positions they hold. PDB budgets are consumed in
/// importance order (upstream sorts every victim), but only those units consume them, so the
/// others need no order beyond priority (the reprieve orders the units it checks): this keeps
/// the full [`importance`] sort, whose uid tie-breaks dominate among tens of thousands of
/// equal-priority units, to the protected ones. Priority buckets keep their positions because
/// importance orders by priority first.
pub(crate) fn sort_for_budgets(units: &mut [VictimUnit]) {
    sort_by_priority(units);
    let positions: Vec<usize> = (0..units.len())
        .filter(|&i| units[i].members().any(|m| !m.pdbs.is_empty()))
        .collect();
    // src[k]: which of the positions the k-th most important of them comes from. A total
    // order (uid last), so unstable sorting gives the stable result, faster.
    let mut src: Vec<usize> = (0..positions.len()).collect();
    src.sort_unstable_by(|&a, &b| importance(&units[positions[a]], &units[positions[b]]));
    // Apply the permutation in place, cycle by cycle (no unit is cloned).
    let mut done = vec![false; src.len()];
    for start in 0..src.len() {
        let mut j = start;
        while !done[j] {
            done[j] = true;
            let next = src[j];
            if next == start {
                break;
            }
            units.swap(positions[j], positions[next]);
            j = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CompositeGroupInfo, CompositePolicy, GroupInfo, GroupPolicy, NodeStatic};

    fn snap() -> Snapshot {
        Snapshot::new(["n1", "n2"].map(|n| Arc::new(NodeStatic::simple(n, 8000, 1 << 30, &[]))))
    }

    fn run(s: &mut Snapshot, name: &str, node: &str, prio: i32, group: Option<&str>) {
        let mut p = PodInfo::simple("ns", name, 1000);
        p.node_name = Some(node.into());
        p.priority = prio;
        p.group_name = group.map(Arc::from);
        s.add_pod(Arc::new(p));
    }

    #[test]
    fn all_units_take_every_pod_of_the_highest_all_ancestor() {
        let mut s = snap();
        let mut root = CompositeGroupInfo::new("ns", "root", CompositePolicy::Basic);
        root.priority = Some(10);
        root.disruption_mode = DisruptionMode::All;
        s.upsert_composite_info(Arc::new(root));
        for g in ["a", "b"] {
            let mut pg = GroupInfo::new("ns", g, GroupPolicy::Basic);
            pg.parent = Some(GroupKey::composite("ns", "root"));
            pg.priority = Some(10);
            s.upsert_group_info(Arc::new(pg));
        }
        run(&mut s, "a1", "n1", 10, Some("a"));
        run(&mut s, "b1", "n2", 10, Some("b"));
        run(&mut s, "lone", "n2", 3, None);
        let mut units = collect(&s, 100);
        sort(&mut units);
        assert_eq!(units.len(), 2);
        assert_eq!(units[0].kind, UnitKind::CompositePodGroup);
        let names: Vec<&str> = units[0].members().map(|m| &*m.pod.key.name).collect();
        assert_eq!(names, ["a1", "b1"]);
        assert!(units[0].on_node(0) && units[0].on_node(1));
        assert!(units[0].touches(&[false, true]) && !units[1].touches(&[true, false]));
        assert_eq!(units[1].priority, 3);
        // Nothing at or above the preemptor's priority.
        assert_eq!(collect(&s, 10).len(), 1);
    }

    #[test]
    fn group_priority_is_authoritative_for_single_members() {
        let mut s = snap();
        let mut pg = GroupInfo::new("ns", "g", GroupPolicy::Basic);
        pg.priority = Some(50);
        s.upsert_group_info(Arc::new(pg));
        run(&mut s, "m", "n1", 5, Some("g"));
        assert!(collect(&s, 50).is_empty());
        let u = collect(&s, 51);
        assert_eq!(
            (u[0].priority, u[0].kind, u[0].mode),
            (50, UnitKind::Pod, DisruptionMode::Single)
        );
    }

    #[test]
    fn budget_order_sorts_only_the_protected_units_in_their_positions() {
        let mut s = snap();
        for (name, prio, app) in [
            ("a", 5, false),
            ("young", 5, true),
            ("b", 7, false),
            ("old", 5, true),
            ("high", 7, true),
            ("c", 5, false),
        ] {
            let mut p = PodInfo::simple("ns", name, 1000);
            p.node_name = Some("n1".into());
            p.priority = prio;
            if app {
                Arc::make_mut(&mut p.labels).insert("app".into(), "x".into());
            }
            s.add_pod(Arc::new(p));
        }
        s.set_pod_start_time(&crate::model::PodKey::new("ns", "young"), Some(2000));
        s.set_pod_start_time(&crate::model::PodKey::new("ns", "old"), Some(1000));
        s.set_pdbs(vec![Pdb {
            namespace: "ns".into(),
            name: "x".into(),
            selector: crate::selectors::LabelSelector {
                requirements: vec![],
                nothing: false,
            },
            disruptions_allowed: 0,
            disrupted_pods: Default::default(),
        }]);
        // The empty selector selects every pod of the namespace: all are protected, full order.
        let mut units = collect(&s, 100);
        sort_for_budgets(&mut units);
        let mut full = collect(&s, 100);
        sort(&mut full);
        let names = |u: &[VictimUnit]| {
            u.iter()
                .map(|u| u.first.pod.key.name.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&units), names(&full));
        // Only pods labelled app=x protected: they are ordered among themselves, the others keep
        // node order within their priority.
        let mut pdbs = s.preemption_state().pdbs().to_vec();
        pdbs[0].selector.requirements.push(crate::selectors::Requirement {
            key: "app".into(),
            op: crate::selectors::SelectorOp::In,
            values: vec!["x".into()],
        });
        s.set_pdbs(pdbs);
        let mut units = collect(&s, 100);
        sort_for_budgets(&mut units);
        assert_eq!(names(&units), ["b", "high", "a", "old", "young", "c"]);
    }

    #[test]
    fn importance_order() {
        let mut s = snap();
        run(&mut s, "young", "n1", 5, None);
        run(&mut s, "old", "n1", 5, None);
        run(&mut s, "high", "n2", 7, None);
        s.set_pod_start_time(&crate::model::PodKey::new("ns", "young"), Some(2000));
        s.set_pod_start_time(&crate::model::PodKey::new("ns", "old"), Some(1000));
        let mut units = collect(&s, 100);
        sort(&mut units);
        let names: Vec<&str> = units.iter().map(|u| &*u.first.pod.key.name).collect();
        assert_eq!(names, ["high", "old", "young"]);
    }
}
