//! CompositePodGroup hierarchies (KEP-6012): upstream scenarios S41–S43 (kubernetes
//! `test/integration/scheduler/podgroup/cpg_test.go`, `TestCPGScheduling`) on snapshots through the queue and the scheduler, the tree quorum gate,
//! validation, placement inside the parent's placement, and the property that a composite
//! decision never binds a pod whose ancestor failed.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::{NS, Sim, node};
use phalanx_scheduler::decision::{ConditionReason, ConditionType};
use phalanx_scheduler::{FailureReason, GateReason, GroupKind, Outcome};
use proptest::prelude::*;

fn one_node(cpu: i64) -> Vec<phalanx_scheduler::model::NodeStatic> {
    vec![node("node", cpu, &[])]
}

fn pods(s: &mut Sim, group: &str, n: usize, milli: i64) -> Vec<String> {
    (1..=n)
        .map(|i| {
            let name = format!("{group}-p{i}");
            s.add_group_pod(&name, milli, group);
            name
        })
        .collect()
}

fn names(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn cond(s: &Sim, g: &str) -> (bool, ConditionReason) {
    let (st, reason, _) = s.condition(g).unwrap_or_else(|| panic!("no condition on {g}"));
    (st, reason)
}

/// S41: a three-level tree (root gang(2) over sub1 gang(2), sub2 basic and sub3 gang(2), seven
/// leaves) on one 20-CPU node, pg3 and pg7 too big: pg1, pg2, pg4 and pg5 bind; pg6 fits but stays
/// unbound because its parent sub3 fails, and its pods carry sub3's message; every group of the
/// tree gets a condition of its kind.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/cpg_test.go`, `TestCPGScheduling`,
/// case "TestCPGHierarchicalScheduling".
#[test]
fn s41_three_level_mixed_tree() {
    let mut s = Sim::new(one_node(20));
    s.add_composite(Sim::cpg("root", Some(2), None));
    s.add_composite(Sim::cpg("sub1", Some(2), Some("root")));
    s.add_composite(Sim::cpg("sub2", None, Some("root")));
    s.add_composite(Sim::cpg("sub3", Some(2), Some("root")));
    for pg in ["pg1", "pg2", "pg3"] {
        s.add_group(Sim::child(Sim::gang(pg, 3), "sub1"));
    }
    s.add_group(Sim::child(Sim::basic("pg4"), "sub2"));
    s.add_group(Sim::child(Sim::gang("pg5", 3), "sub2"));
    for pg in ["pg6", "pg7"] {
        s.add_group(Sim::child(Sim::gang(pg, 3), "sub3"));
    }
    let mut p: HashMap<&str, Vec<String>> = HashMap::new();
    for (pg, n, milli) in [
        ("pg1", 3, 1000),
        ("pg2", 3, 1000),
        ("pg3", 3, 100_000),
        ("pg4", 2, 1000),
        ("pg5", 3, 1000),
        ("pg6", 3, 1000),
        ("pg7", 3, 100_000),
    ] {
        p.insert(pg, pods(&mut s, pg, n, milli));
    }
    s.run();
    for pg in ["pg1", "pg2", "pg4", "pg5"] {
        assert!(s.bound(&names(&p[pg])), "{pg} bound");
        assert_eq!(cond(&s, pg), (true, ConditionReason::Scheduled), "{pg}");
    }
    for pg in ["pg3", "pg6", "pg7"] {
        assert!(s.unbound(&names(&p[pg])), "{pg} unbound");
        assert_eq!(cond(&s, pg), (false, ConditionReason::Unschedulable), "{pg}");
        for pod in &p[pg] {
            assert_eq!(s.failures[pod].reason, FailureReason::Unschedulable);
        }
    }
    for g in ["root", "sub1", "sub2"] {
        assert_eq!(cond(&s, g), (true, ConditionReason::Scheduled), "{g}");
    }
    assert_eq!(cond(&s, "sub3"), (false, ConditionReason::Unschedulable));
    // pg6 fits but its parent failed: its pods carry sub3's PlacementFeasible message.
    assert_eq!(
        s.failures["pg6-p1"].message,
        "minCount (2) cannot be satisfied: 1 scheduled, 0 remaining"
    );
    assert!(s.failures["pg3-p1"].message.contains("Insufficient cpu"));
    // Condition types follow the kind.
    let first = &s.decisions[0];
    assert_eq!(first.outcome, Outcome::Scheduled);
    assert_eq!(first.bindings.len(), 11);
    for c in &first.conditions {
        let want = match c.group.kind {
            GroupKind::CompositePodGroup => ConditionType::CompositePodGroupInitiallyScheduled,
            GroupKind::PodGroup => ConditionType::PodGroupInitiallyScheduled,
        };
        assert_eq!(c.type_, want, "{}", c.group);
    }
    assert_eq!(
        first.conditions.len(),
        11,
        "every group of the tree gets a condition"
    );
    // The leftovers' retry places nothing: it parks in the pool instead of looping.
    let last = s.decisions.last().unwrap();
    assert_eq!(s.decisions.len(), 2);
    assert_eq!(last.outcome, Outcome::Unschedulable);
    assert!(last.bindings.is_empty());
    assert_eq!(s.queue.counts().unschedulable, 1);
    s.assert_no_overcommit();
}

/// S42: root gang(minGroupCount 2) over three gang(3) leaves, one pg3 pod too big: pg1 and pg2
/// bind, all of pg3 stays unbound (False/Unschedulable with the shortfall), and the root is
/// True/Scheduled.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/cpg_test.go`, `TestCPGScheduling`,
/// case "TestCPGMinGroupCount".
#[test]
fn s42_min_group_count_below_children() {
    let mut s = Sim::new(one_node(20));
    s.add_composite(Sim::cpg("root", Some(2), None));
    for pg in ["pg1", "pg2", "pg3"] {
        s.add_group(Sim::child(Sim::gang(pg, 3), "root"));
    }
    let pg1 = pods(&mut s, "pg1", 3, 1000);
    let pg2 = pods(&mut s, "pg2", 3, 1000);
    let mut pg3 = pods(&mut s, "pg3", 2, 1000);
    s.add_group_pod("pg3-big", 100_000, "pg3");
    pg3.push("pg3-big".into());
    s.run();
    assert!(s.bound(&names(&pg1)) && s.bound(&names(&pg2)));
    assert!(s.unbound(&names(&pg3)), "all of pg3 stays unbound");
    assert_eq!(cond(&s, "root"), (true, ConditionReason::Scheduled));
    assert_eq!(cond(&s, "pg3"), (false, ConditionReason::Unschedulable));
    let (_, _, msg) = s.condition("pg3").unwrap();
    assert_eq!(
        msg,
        "minCount (3) cannot be satisfied: 2 scheduled, 0 remaining; 0/1 nodes are available: 1 Insufficient cpu."
    );
    s.assert_no_overcommit();
}

/// S43: under a basic root the gang children are scheduled independently: pg1 fits and binds, pg2
/// does not; the root is True/Scheduled.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/cpg_test.go`, `TestCPGScheduling`,
/// case "TestCPGBasicWithGangChildren".
#[test]
fn s43_basic_root_schedules_children_independently() {
    let mut s = Sim::new(one_node(20));
    s.add_composite(Sim::cpg("root", None, None));
    s.add_group(Sim::child(Sim::gang("pg1", 2), "root"));
    s.add_group(Sim::child(Sim::gang("pg2", 2), "root"));
    let pg1 = pods(&mut s, "pg1", 2, 1000);
    let pg2 = pods(&mut s, "pg2", 2, 100_000);
    s.run();
    assert!(s.bound(&names(&pg1)));
    assert!(s.unbound(&names(&pg2)));
    assert_eq!(cond(&s, "root"), (true, ConditionReason::Scheduled));
    assert_eq!(cond(&s, "pg1"), (true, ConditionReason::Scheduled));
    assert_eq!(cond(&s, "pg2"), (false, ConditionReason::Unschedulable));
}

#[test]
fn tree_quorum_gate_reports_reason_and_lifts() {
    let mut s = Sim::new(one_node(20));
    s.add_composite(Sim::cpg("root", Some(2), None));
    s.add_group(Sim::child(Sim::gang("pg1", 2), "root"));
    s.add_group(Sim::child(Sim::gang("pg2", 2), "root"));
    let pg1 = pods(&mut s, "pg1", 2, 1000);
    let mut pg2 = pods(&mut s, "pg2", 1, 1000);
    s.run();
    assert!(s.decisions.is_empty(), "no cycle before the tree quorum");
    let gate = s.composite_gate("root").expect("gated");
    assert_eq!(gate.reason, GateReason::WaitingForQuorum);
    assert_eq!(
        gate.message,
        "composite pod group \"root\" tree: 1 of 2 child groups ready (minGroupCount 2)"
    );
    assert_eq!(s.queue.counts().gated, 1);
    s.add_group_pod("pg2-p2", 1000, "pg2");
    pg2.push("pg2-p2".into());
    assert!(s.composite_gate("root").is_none());
    s.run();
    assert!(s.bound(&names(&pg1)) && s.bound(&names(&pg2)));
    assert_eq!(s.decisions.len(), 1, "one cycle for the whole tree");
}

#[test]
fn nested_quorum_counts_ready_subtrees_and_assigned_members() {
    let mut s = Sim::new(one_node(20));
    s.add_composite(Sim::cpg("root", Some(1), None));
    s.add_composite(Sim::cpg("sub", Some(2), Some("root")));
    s.add_group(Sim::child(Sim::gang("pg1", 2), "sub"));
    s.add_group(Sim::child(Sim::gang("pg2", 2), "sub"));
    pods(&mut s, "pg1", 2, 1000);
    s.add_group_pod("pg2-p1", 1000, "pg2");
    let gate = s
        .composite_gate("root")
        .expect("gated: sub has 1 of 2 ready children");
    assert_eq!(
        gate.message,
        "composite pod group \"root\" tree: 0 of 1 child groups ready (minGroupCount 1)"
    );
    assert_eq!(
        s.queue
            .group_member_count(&phalanx_scheduler::GroupKey::pod_group(NS, "pg2")),
        1
    );
    // An assigned member of pg2 (bound by someone else) completes pg2's quorum.
    let mut running = Sim::make_pod("pg2-running", 1000, Some("pg2"), 100);
    running.node_name = Some("node".into());
    let running = Arc::new(running);
    s.snap.add_pod(running.clone());
    s.queue.add_pod(running, s.now);
    assert!(s.composite_gate("root").is_none());
    s.run();
    assert!(s.bound(&["pg1-p1", "pg1-p2", "pg2-p1"]));
}

#[test]
fn objects_arriving_in_any_order_join_the_root_entity() {
    let mut s = Sim::new(one_node(20));
    // Pods first: held for their PodGroup.
    let pg1 = pods(&mut s, "pg1", 2, 1000);
    assert_eq!(s.gate("pg1").unwrap().reason, GateReason::WaitingForPodGroup);
    // The PodGroup names a parent that is not known yet: the tree waits for it.
    s.add_group(Sim::child(Sim::gang("pg1", 2), "sub"));
    assert!(s.gate("pg1").is_none());
    let gate = s.composite_gate("sub").expect("waiting for sub");
    assert_eq!(gate.reason, GateReason::WaitingForPodGroup);
    assert_eq!(
        gate.message,
        "waiting for composite pod group \"sub\" to appear in scheduling queue"
    );
    // sub appears, pointing at root (unknown): the entity moves up.
    s.add_composite(Sim::cpg("sub", Some(1), Some("root")));
    assert!(s.composite_gate("sub").is_none());
    assert!(s.composite_gate("root").is_some());
    s.run();
    assert!(s.decisions.is_empty());
    s.add_composite(Sim::cpg("root", Some(1), None));
    s.run();
    assert!(s.bound(&names(&pg1)));
    assert_eq!(cond(&s, "sub"), (true, ConditionReason::Scheduled));
    assert_eq!(s.decisions[0].entity.to_string(), "compositepodgroup/ns/root");
}

#[test]
fn invalid_hierarchy_is_a_group_error_on_every_group() {
    let mut s = Sim::new(one_node(20));
    s.add_composite(Sim::cpg("root", Some(1), None));
    s.add_composite(Sim::cpg("sub", Some(1), Some("root")));
    let mut pg = Sim::child(Sim::gang("pg1", 1), "sub");
    pg.priority = Some(5);
    s.add_group(pg);
    s.add_group_pod("pg1-p1", 1000, "pg1");
    s.run_ready();
    let d = &s.decisions[0];
    assert_eq!(d.outcome, Outcome::Error);
    assert!(d.bindings.is_empty());
    assert_eq!(d.conditions.len(), 3);
    let msg = "all pod groups in a hierarchy should have the same priority as the root pod group's priority, got 5 (\"podgroup/ns/pg1\") and 100 (\"compositepodgroup/ns/root\")";
    for c in &d.conditions {
        assert!(!c.status);
        // Kubernetes 1.38: PodGroupError / CompositePodGroupError on the groups, SchedulerError on the pods.
        assert_eq!(c.reason, ConditionReason::GroupError);
        assert_eq!(c.message, msg);
    }
    assert_eq!(d.failures[0].reason, FailureReason::SchedulerError);
    assert_eq!(s.queue.counts().backoff, 1);
}

#[test]
fn mixed_scheduler_names_in_a_tree_fail_the_tree() {
    let mut s = Sim::new(one_node(20));
    s.add_composite(Sim::cpg("root", Some(2), None));
    s.add_group(Sim::child(Sim::gang("pg1", 1), "root"));
    s.add_group(Sim::child(Sim::gang("pg2", 1), "root"));
    s.add_group_pod("a", 1000, "pg1");
    let mut other = Sim::make_pod("b", 1000, Some("pg2"), 100);
    other.scheduler_name = "other-scheduler".into();
    s.add_pod(other);
    s.run_ready();
    let d = &s.decisions[0];
    assert_eq!(d.outcome, Outcome::Error);
    assert!(
        d.conditions[0]
            .message
            .starts_with("all pods in a pod group hierarchy should have the same .spec.schedulerName set")
    );
}

#[test]
fn children_stay_inside_the_parent_placement() {
    // racks: r1 = 2 nodes of 2 cpu, r2 = 1 node of 2 cpu (+ a node without the label).
    let nodes = vec![
        node("a1", 2, &[("rack", "r1")]),
        node("a2", 2, &[("rack", "r1")]),
        node("b1", 2, &[("rack", "r2")]),
        node("free", 8, &[]),
    ];
    let mut s = Sim::new(nodes);
    let mut root = Sim::cpg("root", Some(2), None);
    root.topology_key = Some("rack".into());
    s.add_composite(root);
    s.add_group(Sim::child(Sim::gang("pg1", 2), "root"));
    s.add_group(Sim::child(Sim::gang("pg2", 2), "root"));
    let pg1 = pods(&mut s, "pg1", 2, 1000);
    let pg2 = pods(&mut s, "pg2", 2, 1000);
    s.run();
    assert!(s.bound(&names(&pg1)) && s.bound(&names(&pg2)));
    for p in pg1.iter().chain(&pg2) {
        assert_eq!(s.label_of(p, "rack").as_deref(), Some("r1"), "{p} in rack r1");
    }
    assert!(s.decisions[0].stats.placements >= 2);
    s.assert_no_overcommit();
}

#[test]
fn composite_topology_failure_reports_placements() {
    let nodes = vec![node("a1", 2, &[("rack", "r1")]), node("b1", 2, &[("rack", "r2")])];
    let mut s = Sim::new(nodes);
    let mut root = Sim::cpg("root", Some(2), None);
    root.topology_key = Some("rack".into());
    s.add_composite(root);
    s.add_group(Sim::child(Sim::gang("pg1", 2), "root"));
    s.add_group(Sim::child(Sim::gang("pg2", 2), "root"));
    pods(&mut s, "pg1", 2, 1000);
    pods(&mut s, "pg2", 2, 1000);
    s.run();
    assert!(s.decisions[0].bindings.is_empty());
    let (st, reason, msg) = s.condition("root").unwrap();
    assert!(!st);
    assert_eq!(reason, ConditionReason::Unschedulable);
    assert_eq!(
        msg,
        "0/2 placements are available: minCount (2) cannot be satisfied: 1 scheduled, 0 remaining"
    );
    // Without the constraint the same tree fits across racks.
    assert_eq!(s.snap.node(0).requested.milli_cpu, 0, "everything reverted");
}

#[test]
fn late_joiners_of_a_scheduled_tree_bind() {
    let mut s = Sim::new(one_node(20));
    s.add_composite(Sim::cpg("root", Some(2), None));
    s.add_group(Sim::child(Sim::gang("pg1", 2), "root"));
    s.add_group(Sim::child(Sim::gang("pg2", 2), "root"));
    pods(&mut s, "pg1", 2, 1000);
    pods(&mut s, "pg2", 2, 1000);
    s.run();
    assert_eq!(s.decisions.len(), 1);
    // Mirror what a driver sees: bound pods come back as assigned.
    for (name, p) in s.pods.clone() {
        if p.node_name.is_some() {
            s.queue.update_pod(p, s.now);
            let _ = name;
        }
    }
    s.add_group_pod("pg1-p3", 1000, "pg1");
    s.run();
    assert!(s.bound(&["pg1-p3"]));
    assert_eq!(s.decisions.len(), 2);
    assert_eq!(s.decisions[1].outcome, Outcome::Scheduled);
}

// ---------------------------------------------------------------------------------------------
// Property: a composite decision never binds a pod whose ancestor failed; every composite that
// reports Scheduled has at least minGroupCount scheduled children; gangs stay all-or-nothing;
// nothing is overcommitted.

#[derive(Debug, Clone)]
struct LeafSpec {
    min: u32,
    pods: Vec<i64>,
}

#[derive(Debug, Clone)]
struct SubSpec {
    min: Option<u32>,
    leaves: Vec<LeafSpec>,
}

fn leaf_spec() -> impl Strategy<Value = LeafSpec> {
    (
        1u32..=3,
        prop::collection::vec(prop_oneof![Just(1000i64), Just(2000), Just(9000)], 1..=4),
    )
        .prop_map(|(min, pods)| LeafSpec { min, pods })
}

fn sub_spec() -> impl Strategy<Value = SubSpec> {
    (
        prop::option::of(1u32..=3),
        prop::collection::vec(leaf_spec(), 1..=3),
    )
        .prop_map(|(min, leaves)| SubSpec { min, leaves })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn composite_never_binds_below_a_failed_ancestor(
        root_min in 1u32..=3,
        subs in prop::collection::vec(sub_spec(), 1..=3),
        cpus in prop::collection::vec(2i64..=8, 1..=3),
    ) {
        let nodes = cpus.iter().enumerate().map(|(i, c)| node(&format!("n{i}"), *c, &[])).collect();
        let mut s = Sim::new(nodes);
        s.add_composite(Sim::cpg("root", Some(root_min), None));
        let mut parent_of: HashMap<String, String> = HashMap::new();
        let mut min_of: HashMap<String, u32> = HashMap::new();
        min_of.insert("root".into(), root_min);
        for (i, sub) in subs.iter().enumerate() {
            let sname = format!("sub{i}");
            s.add_composite(Sim::cpg(&sname, sub.min, Some("root")));
            parent_of.insert(sname.clone(), "root".into());
            min_of.insert(sname.clone(), sub.min.unwrap_or(1));
            for (j, leaf) in sub.leaves.iter().enumerate() {
                let lname = format!("pg{i}x{j}");
                // A gang CPG may not have basic PodGroup children: all leaves are gangs.
                s.add_group(Sim::child(Sim::gang(&lname, leaf.min), &sname));
                parent_of.insert(lname.clone(), sname.clone());
                min_of.insert(lname.clone(), leaf.min);
                for (k, milli) in leaf.pods.iter().enumerate() {
                    s.add_group_pod(&format!("{lname}-p{k}"), *milli, &lname);
                }
            }
        }
        s.run();
        s.assert_no_overcommit();
        for d in &s.decisions {
            let status: HashMap<String, bool> =
                d.conditions.iter().map(|c| (c.group.name.to_string(), c.status)).collect();
            let mut bound_per_leaf: HashMap<String, u32> = HashMap::new();
            for b in &d.bindings {
                let pod = &s.pods[&*b.pod.name];
                let leaf = pod.group_name.as_deref().unwrap().to_string();
                *bound_per_leaf.entry(leaf.clone()).or_default() += 1;
                let mut g = leaf;
                loop {
                    prop_assert_eq!(status.get(&g).copied(), Some(true), "ancestor {} of bound pod {} failed", g, b.pod);
                    match parent_of.get(&g) {
                        Some(p) => g = p.clone(),
                        None => break,
                    }
                }
            }
            if d.bindings.is_empty() {
                continue;
            }
            // Gangs all-or-nothing on the first (only binding) cycle of each leaf.
            for (leaf, n) in &bound_per_leaf {
                prop_assert!(*n >= min_of[leaf], "leaf {} bound {} < minCount", leaf, n);
            }
            // Every Scheduled composite has >= minGroupCount Scheduled children.
            for (g, ok) in &status {
                if !*ok || !g.starts_with("sub") && g != "root" {
                    continue;
                }
                let kids = parent_of.iter().filter(|(_, p)| *p == g).filter(|(c, _)| status.get(*c).copied() == Some(true)).count();
                prop_assert!(kids as u32 >= min_of[g], "{} scheduled with {} children", g, kids);
            }
        }
    }
}

#[test]
fn a_new_member_pod_wakes_an_unschedulable_tree() {
    let mut s = Sim::new(one_node(20));
    s.add_composite(Sim::cpg("root", Some(2), None));
    for pg in ["pg1", "pg2", "pg3"] {
        s.add_group(Sim::child(Sim::gang(pg, 1), "root"));
    }
    // pg1 does not fit; pg2 fits; pg3 has no pods yet: the tree fails (1 of 3 children).
    pods(&mut s, "pg1", 1, 100_000);
    pods(&mut s, "pg2", 1, 1000);
    s.run();
    assert_eq!(s.decisions.len(), 1);
    assert_eq!(s.decisions[0].outcome, Outcome::Unschedulable);
    assert_eq!(s.queue.counts().unschedulable, 1);
    // pg3's pod arrives: the tree leaves the pool (after its backoff) and succeeds with pg2 and pg3.
    pods(&mut s, "pg3", 1, 1000);
    assert_eq!(s.queue.counts().unschedulable, 0);
    s.run();
    assert_eq!(s.decisions[1].outcome, Outcome::Scheduled);
    assert_eq!(s.decisions[1].bindings.len(), 2);
    assert!(s.bound(&["pg2-p1", "pg3-p1"]));
    assert!(s.unbound(&["pg1-p1"]));
}

#[test]
fn a_middle_composite_deleted_during_a_cycle_moves_its_leaves_after_done() {
    use phalanx_scheduler::resources::Resources;
    use phalanx_scheduler::{Decision, EntityKey, GroupKey, Requeue, RequeueMode};
    let mut s = Sim::new(one_node(20));
    s.add_composite(Sim::cpg("root", Some(1), None));
    s.add_composite(Sim::cpg("mid", Some(1), Some("root")));
    s.add_group(Sim::child(Sim::gang("pg1", 1), "mid"));
    s.add_group(Sim::child(Sim::gang("pg2", 1), "root"));
    pods(&mut s, "pg1", 1, 1000);
    pods(&mut s, "pg2", 1, 1000);
    let e = s.queue.pop(s.now).expect("tree ready");
    let tree = e.tree.clone().expect("tree entity");
    assert_eq!(tree.leaf_count(), 2);
    assert_eq!(e.pods.len(), 2);
    // mid disappears while the tree is in flight: nothing moves yet.
    s.queue
        .delete_composite_group(&GroupKey::composite(NS, "mid"), s.now);
    let mut d = Decision::empty(e.key.clone(), Outcome::Unschedulable);
    d.requeue = Some(Requeue {
        pods: e.pods.iter().map(|p| p.key.clone()).collect(),
        mode: RequeueMode::Unschedulable,
        short_of: Resources::default(),
    });
    s.queue.done(&d, s.now);
    // After done, pg1's pod waits for mid in its own entity; pg2 stays with the root.
    let gate = s
        .queue
        .gate(&EntityKey::Group(GroupKey::composite(NS, "mid")))
        .cloned();
    assert_eq!(gate.map(|g| g.reason), Some(GateReason::WaitingForPodGroup));
    assert_eq!(s.queue.group_member_count(&GroupKey::pod_group(NS, "pg1")), 1);
    assert_eq!(s.queue.group_member_count(&GroupKey::pod_group(NS, "pg2")), 1);
    assert!(s.queue.contains_pod(&s.pods["pg1-p1"]));
    // mid comes back: the tree is whole again and schedules both.
    s.add_composite(Sim::cpg("mid", Some(1), Some("root")));
    s.now += std::time::Duration::from_secs(30);
    s.run();
    assert!(s.bound(&["pg1-p1", "pg2-p1"]));
}
