//! Comparing the cluster state of two snapshots, whatever the order they were built in: a snapshot kept between
//! cycles and updated from what changed must hold what a snapshot built from scratch holds (upstream checks its
//! cache the same way, `pkg/scheduler/backend/cache/debugger/comparer.go`).

use std::collections::{BTreeMap, BTreeSet};

use super::Snapshot;
use crate::model::NodeInfo;

impl Snapshot {
    /// Forgets the per-cycle preemption inputs (group objects, nominations, pods terminating by preemption,
    /// preemptions in flight, PDBs) and keeps the pods' start times, which change with the pods themselves. A
    /// snapshot kept between cycles calls this before the runtime sets the inputs of the next cycle.
    pub fn clear_preemption_inputs(&mut self) {
        self.preemption.keep_start_times();
    }

    /// The first difference in cluster state between `self` and `other`, in words, or `None` when they hold the
    /// same nodes, the same pods on them (usage included), the same scheduled members per group and the same
    /// inter-pod affinity index. Order does not matter: nodes are compared by name and pods as sets. Preemption
    /// inputs, ids, generations and the undo log are not compared.
    pub fn cluster_state_diff(&self, other: &Snapshot) -> Option<String> {
        let mine = by_name(&self.nodes);
        let theirs = by_name(&other.nodes);
        let names: BTreeSet<&str> = mine.keys().chain(theirs.keys()).copied().collect();
        for n in names {
            match (mine.get(n), theirs.get(n)) {
                (Some(a), Some(b)) => {
                    if let Some(d) = node_diff(a, b) {
                        return Some(format!("node {n}: {d}"));
                    }
                }
                (a, _) => {
                    let side = if a.is_some() {
                        "only in the first"
                    } else {
                        "only in the second"
                    };
                    return Some(format!("node {n} {side}"));
                }
            }
        }
        if self.pods != other.pods {
            let a: BTreeSet<_> = self.pods.keys().collect();
            let b: BTreeSet<_> = other.pods.keys().collect();
            let only_a: Vec<_> = a.difference(&b).take(3).collect();
            let only_b: Vec<_> = b.difference(&a).take(3).collect();
            let changed: Vec<_> = a
                .intersection(&b)
                .filter(|k| self.pods.get(**k) != other.pods.get(**k))
                .take(3)
                .collect();
            return Some(format!(
                "pods differ: only in the first {only_a:?}, only in the second {only_b:?}, changed {changed:?}"
            ));
        }
        let groups = |s: &Snapshot| -> BTreeMap<String, BTreeSet<String>> {
            s.groups
                .iter()
                .map(|(g, st)| {
                    (
                        format!("{g:?}"),
                        st.scheduled.iter().map(|(k, n)| format!("{k:?}@{n}")).collect(),
                    )
                })
                .collect()
        };
        let (ga, gb) = (groups(self), groups(other));
        if ga != gb {
            return Some(format!("group members differ: {ga:?} vs {gb:?}"));
        }
        if self.affinity_pods != other.affinity_pods {
            return Some("inter-pod affinity index differs".into());
        }
        None
    }
}

fn by_name(nodes: &[NodeInfo]) -> BTreeMap<&str, &NodeInfo> {
    nodes.iter().map(|n| (&*n.node.name, n)).collect()
}

fn node_diff(a: &NodeInfo, b: &NodeInfo) -> Option<String> {
    if a.node != b.node {
        return Some("node object differs".into());
    }
    let pods = |n: &NodeInfo| -> BTreeSet<String> { n.pods.iter().map(|p| format!("{:?}", p.key)).collect() };
    let (pa, pb) = (pods(a), pods(b));
    if pa != pb {
        return Some(format!("pods {pa:?} vs {pb:?}"));
    }
    if a.requested != b.requested
        || a.non_zero_milli_cpu != b.non_zero_milli_cpu
        || a.non_zero_memory != b.non_zero_memory
    {
        return Some(format!("requested {:?} vs {:?}", a.requested, b.requested));
    }
    let ports = |n: &NodeInfo| {
        let mut v: Vec<String> = n.used_ports.iter().map(|p| format!("{p:?}")).collect();
        v.sort();
        v
    };
    if ports(a) != ports(b) || a.pods_with_affinity != b.pods_with_affinity {
        return Some("host ports or affinity counts differ".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::{NodeStatic, PodInfo};

    fn pod(name: &str, node: &str) -> Arc<PodInfo> {
        let mut p = PodInfo::simple("ns", name, 500);
        p.node_name = Some(node.into());
        Arc::new(p)
    }

    #[test]
    fn same_state_in_another_order_is_equal_and_a_missing_pod_is_named() {
        let n = |name: &str| Arc::new(NodeStatic::simple(name, 4000, 1 << 30, &[]));
        let mut a = Snapshot::new([n("n1"), n("n2")]);
        a.add_pod(pod("p1", "n1"));
        a.add_pod(pod("p2", "n1"));
        let mut b = Snapshot::new([n("n2"), n("n1")]);
        b.add_pod(pod("p2", "n1"));
        b.add_pod(pod("p1", "n1"));
        assert_eq!(a.cluster_state_diff(&b), None);
        b.remove_pod(&pod("p2", "n1").key);
        let d = a.cluster_state_diff(&b).expect("p2 is missing");
        assert!(d.contains("n1") && d.contains("p2"), "{d}");
        b.add_pod(pod("p2", "n1"));
        assert_eq!(a.cluster_state_diff(&b), None);
        b.remove_node("n2");
        assert!(a.cluster_state_diff(&b).expect("node").contains("n2"));
    }

    #[test]
    fn clearing_preemption_inputs_keeps_start_times() {
        let mut s = Snapshot::default();
        let p = pod("p", "n1");
        s.set_nominated(p.clone(), "n1");
        s.set_pod_start_time(&p.key, Some(7));
        s.clear_preemption_inputs();
        assert!(s.nominated_node(&p.key).is_none());
        assert_eq!(s.preemption_state().start_time(&p.key), Some(7));
    }
}
