//! Per-node victim cost that steers a group's node choice while preemption simulates (beyond
//! upstream: `podgrouppreemption.go` re-runs the group algorithm with every candidate evicted,
//! so the nodes look empty and victims never influence which node a pod takes).
//!
//! Before each simulated run the evaluator records, for every node, a [`Cost`] of the candidate
//! units it evicted there; while that is set, the per-pod pass (`schedule_one.rs`) prefers,
//! among the feasible nodes, the one with the lowest cost, and only then the plugin score. The
//! reprieve afterwards decides the real victims, and the priority tiers, the PDB tier and the
//! candidate placements compare those.
//!
//! A node's cost counts its candidates of the lowest priority among them (a whole
//! `disruptionMode: all` unit with all its pods, wherever they run): the reprieve gives back the
//! most important candidates first, so those are the ones a pod taking part of the node usually
//! needs gone. Counting every candidate of the node instead would make a node holding
//! priority-5 and priority-10 pods look dearer than one holding fewer priority-10 pods, where
//! the pod would cost a priority-10 victim; counting only what one pod needs (replaying the
//! reprieve) would ignore that later pods of the group take the same node. It is a cheap
//! estimate, one pass over the candidates per run: when the lowest level does not make enough
//! room, the victims come from higher levels and the priority tiers correct the choice.

use crate::preemption::cost::Cost;
use crate::preemption::pdb::Budgets;
use crate::preemption::units::VictimUnit;
use crate::snapshot::Snapshot;

/// The cost per node (indexed like the snapshot) of its lowest-priority candidates among the
/// units `removed` (indices into `units`). With PDBs, each node's counted units consume the
/// budgets on their own, in the order of `removed` (the units a PDB selects come most important
/// first: `units::sort_for_budgets`), as the reprieve of a preemptor using only that node would.
pub(crate) fn per_node(snapshot: &Snapshot, units: &[VictimUnit], removed: &[usize]) -> Vec<Cost> {
    let n = snapshot.len();
    let mut costs = vec![Cost::NONE; n];
    // Per node: the lowest candidate priority seen so far, and the last unit counted there (a
    // unit with several pods on one node counts once).
    let mut lowest = vec![i32::MAX; n];
    let mut last = vec![usize::MAX; n];
    let pdbs = snapshot.preemption.pdbs();
    if pdbs.is_empty() {
        for &ui in removed {
            let u = &units[ui];
            for node in u.members().filter_map(|m| m.node) {
                if node >= n || last[node] == ui || u.priority > lowest[node] {
                    continue;
                }
                if u.priority < lowest[node] {
                    lowest[node] = u.priority;
                    costs[node] = Cost::NONE;
                }
                last[node] = ui;
                costs[node].add(u, 0);
            }
        }
        return costs;
    }
    for &ui in removed {
        for node in units[ui].members().filter_map(|m| m.node) {
            if node < n {
                lowest[node] = lowest[node].min(units[ui].priority);
            }
        }
    }
    // The counted units per node, in `removed` order, as one flat list
    // (`start[node]..start[node + 1]`).
    let counted = |ui: usize, node: usize, last: &[usize]| {
        node < n && last[node] != ui && units[ui].priority == lowest[node]
    };
    let mut start = vec![0usize; n + 1];
    for &ui in removed {
        for node in units[ui].members().filter_map(|m| m.node) {
            if counted(ui, node, &last) {
                last[node] = ui;
                start[node + 1] += 1;
            }
        }
    }
    for i in 0..n {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut flat = vec![0usize; start[n]];
    last.fill(usize::MAX);
    for &ui in removed {
        for node in units[ui].members().filter_map(|m| m.node) {
            if counted(ui, node, &last) {
                last[node] = ui;
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
    fn a_node_costs_its_lowest_priority_candidates() {
        // n1: four priority-5 and four priority-10 pods; n2: four priority-10 pods. A pod taking
        // part of n1 needs only priority-5 pods gone there, any pod on n2 a priority-10 one.
        let mut s =
            Snapshot::new(["n1", "n2"].map(|n| Arc::new(NodeStatic::simple(n, 32_000, 1 << 30, &[]))));
        for i in 0..8 {
            let mut p = PodInfo::simple("ns", &format!("a{i}"), 4000);
            p.node_name = Some("n1".into());
            p.priority = if i % 2 == 0 { 5 } else { 10 };
            s.add_pod(Arc::new(p));
        }
        for i in 0..4 {
            let mut p = PodInfo::simple("ns", &format!("b{i}"), 4000);
            p.node_name = Some("n2".into());
            p.priority = 10;
            s.add_pod(Arc::new(p));
        }
        let mut u = units::collect(&s, 100);
        units::sort_by_priority(&mut u);
        let all: Vec<usize> = (0..u.len()).collect();
        let c = per_node(&s, &u, &all);
        assert_eq!((c[0].highest, c[0].pods), (5, 4));
        assert_eq!((c[1].highest, c[1].pods), (10, 4));
        assert!(c[0] < c[1]);
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
