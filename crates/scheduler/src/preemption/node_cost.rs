//! Per-node victim cost that steers a group's node choice while preemption simulates (beyond
//! upstream: `podgrouppreemption.go` re-runs the group algorithm with every candidate evicted,
//! so the nodes look empty and victims never influence which node a pod takes).
//!
//! Before each simulated run the evaluator records, for every node, the [`Cost`] of the
//! candidate units it evicted that have a pod there (a whole `disruptionMode: all` unit counts
//! with all its pods, wherever they run: taking the node evicts all of them). While that is set,
//! the per-pod pass (`schedule_one.rs`) prefers, among the feasible nodes, the one with the
//! lowest cost, and only then the plugin score; the reprieve afterwards gives back whatever the
//! chosen nodes do not need. The cost is an upper bound per node (every candidate there is
//! counted, not only those the pod needs gone), which is what keeps it cheap: one pass over the
//! candidates per run.

use crate::preemption::pdb::Budgets;
use crate::preemption::reprieve::Cost;
use crate::preemption::units::VictimUnit;
use crate::snapshot::Snapshot;

/// The cost per node (indexed like the snapshot) of the units `removed` (indices into `units`)
/// that have a pod on it. With PDBs, each node's units consume the budgets on their own, in the
/// order of `removed` (the units a PDB selects come most important first:
/// `units::sort_for_budgets`), as the reprieve of a preemptor using only that node would.
pub(crate) fn per_node(snapshot: &Snapshot, units: &[VictimUnit], removed: &[usize]) -> Vec<Cost> {
    let n = snapshot.len();
    let mut costs = vec![Cost::NONE; n];
    let pdbs = snapshot.preemption.pdbs();
    if pdbs.is_empty() {
        // The last unit added per node: a unit with several pods on one node counts once.
        let mut last = vec![usize::MAX; n];
        for &ui in removed {
            let u = &units[ui];
            for node in u.members().filter_map(|m| m.node) {
                if node < n && last[node] != ui {
                    last[node] = ui;
                    costs[node].add(u, 0);
                }
            }
        }
        return costs;
    }
    // The units per node, in `removed` order, as one flat list (`start[node]..start[node + 1]`).
    let mut stamp = vec![usize::MAX; n];
    let mut start = vec![0usize; n + 1];
    for &ui in removed {
        for node in units[ui].members().filter_map(|m| m.node) {
            if node < n && stamp[node] != ui {
                stamp[node] = ui;
                start[node + 1] += 1;
            }
        }
    }
    for i in 0..n {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut flat = vec![0usize; start[n]];
    stamp.fill(usize::MAX);
    for &ui in removed {
        for node in units[ui].members().filter_map(|m| m.node) {
            if node < n && stamp[node] != ui {
                stamp[node] = ui;
                flat[fill[node]] = ui;
                fill[node] += 1;
            }
        }
    }
    let mut budgets = Budgets::new(pdbs);
    for (node, cost) in costs.iter_mut().enumerate() {
        for &ui in &flat[start[node]..start[node + 1]] {
            let unit = &units[ui];
            let violating = unit.members().filter(|m| budgets.violates(&m.pdbs)).count();
            cost.add(unit, violating);
        }
        budgets.restore();
    }
    costs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DisruptionMode, GroupInfo, GroupPolicy, NodeStatic, PodInfo};
    use crate::preemption::{Pdb, units};
    use crate::selectors::{LabelSelector, Requirement, SelectorOp};
    use std::sync::Arc;

    #[test]
    fn an_all_unit_counts_with_every_pod_on_each_of_its_nodes() {
        let mut s =
            Snapshot::new(["n1", "n2", "n3"].map(|n| Arc::new(NodeStatic::simple(n, 8000, 1 << 30, &[]))));
        let mut g = GroupInfo::new("ns", "whole", GroupPolicy::Basic);
        g.priority = Some(5);
        g.disruption_mode = DisruptionMode::All;
        s.upsert_group_info(Arc::new(g));
        for (name, node) in [("w1", "n1"), ("w2", "n1"), ("w3", "n2")] {
            let mut p = PodInfo::simple("ns", name, 1000);
            p.node_name = Some(node.into());
            p.group_name = Some("whole".into());
            s.add_pod(Arc::new(p));
        }
        for name in ["a", "b"] {
            let mut p = PodInfo::simple("ns", name, 1000);
            p.node_name = Some("n3".into());
            p.priority = 5;
            s.add_pod(Arc::new(p));
        }
        let u = units::collect(&s, 100);
        let all: Vec<usize> = (0..u.len()).collect();
        let c = per_node(&s, &u, &all);
        // The gang's three pods on both of its nodes (counted once on n1), two pods on n3.
        assert_eq!((c[0].pods, c[1].pods, c[2].pods), (3, 3, 2));
        assert!(c[2] < c[0], "two pods cost less than a three-pod gang");
        assert_eq!(c[0], c[1]);
        // Only the units considered count.
        let lone: Vec<usize> = (0..u.len()).filter(|&i| u[i].len() == 1).collect();
        let c = per_node(&s, &u, &lone);
        assert_eq!((c[0], c[2].pods), (Cost::NONE, 2));
    }

    #[test]
    fn each_node_spends_the_budgets_on_its_own() {
        let mut s = Snapshot::new(["n1", "n2"].map(|n| Arc::new(NodeStatic::simple(n, 8000, 1 << 30, &[]))));
        for (name, node) in [("a", "n1"), ("b", "n1"), ("c", "n2")] {
            let mut p = PodInfo::simple("ns", name, 1000);
            p.node_name = Some(node.into());
            Arc::make_mut(&mut p.labels).insert("app".into(), "foo".into());
            s.add_pod(Arc::new(p));
        }
        s.set_pdbs(vec![Pdb {
            namespace: "ns".into(),
            name: "one".into(),
            selector: LabelSelector {
                requirements: vec![Requirement {
                    key: "app".into(),
                    op: SelectorOp::In,
                    values: vec!["foo".into()],
                }],
                nothing: false,
            },
            disruptions_allowed: 1,
            disrupted_pods: Default::default(),
        }]);
        let mut u = units::collect(&s, 100);
        units::sort_for_budgets(&mut u);
        let all: Vec<usize> = (0..u.len()).collect();
        let c = per_node(&s, &u, &all);
        // n1's two protected pods exceed the budget by one; n2's one pod fits in it.
        assert_eq!((c[0].pdb_violations, c[0].pods), (1, 2));
        assert_eq!((c[1].pdb_violations, c[1].pods), (0, 1));
    }
}
