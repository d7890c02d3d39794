//! Upstream's basic gang scenarios (S1–S9, kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`,
//! `TestPodGroupScheduling`) and topology-aware gang scenarios (S13–S24,
//! `test/integration/scheduler/podgroup/topology_aware_scheduling/tas_test.go`,
//! `TestTopologyAwareSchedulingWithGangPolicy`), expressed on snapshots through the queue and the scheduler, as a
//! driver would run them. docs/testing.md ("Scenario index") lists the S-numbers; each test names its upstream case.

mod common;

use common::{Sim, node};
use phalanx_scheduler::GateReason;
use phalanx_scheduler::decision::ConditionReason;

fn zone_node() -> Vec<phalanx_scheduler::model::NodeStatic> {
    vec![node("node", 4, &[("topology.kubernetes.io/zone", "zone1")])]
}

fn racks(spec: &[(&str, usize)]) -> Vec<phalanx_scheduler::model::NodeStatic> {
    // Nodes node1.. numbered across racks in order; cpu=2; zone defaults to zone-1.
    let mut v = Vec::new();
    let mut i = 1;
    for (rack, n) in spec {
        for _ in 0..*n {
            v.push(node(
                &format!("node{i}"),
                2,
                &[("rack", rack), ("zone", "zone-1")],
            ));
            i += 1;
        }
    }
    v
}

/// S1: gang(3) with three 1-CPU pods on one 4-CPU node: all three bind and the PodGroup is
/// True/Scheduled.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`,
/// `TestPodGroupScheduling`, case "gang schedules when pod group and resources are available".
#[test]
fn s1_gang_all_fit() {
    let mut s = Sim::new(zone_node());
    s.add_group(Sim::gang("pg1", 3));
    for p in ["p1", "p2", "p3"] {
        s.add_group_pod(p, 1000, "pg1");
    }
    s.run();
    assert!(s.bound(&["p1", "p2", "p3"]));
    assert_eq!(
        s.condition("pg1").map(|c| (c.0, c.1)),
        Some((true, ConditionReason::Scheduled))
    );
    s.assert_no_overcommit();
}

/// S2: with 2 of 3 pods the gang is held before the queue (WaitingForQuorum,
/// `2 of 3 pods present (minCount 3)`) and no cycle runs; the third pod lifts the gate and all
/// three bind.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`,
/// `TestPodGroupScheduling`, case "gang waits for quorum to start, then schedules".
#[test]
fn s2_quorum_wait_then_all_bind() {
    let mut s = Sim::new(zone_node());
    s.add_group(Sim::gang("pg1", 3));
    s.add_group_pod("p1", 1000, "pg1");
    s.add_group_pod("p2", 1000, "pg1");
    s.run();
    assert!(s.unbound(&["p1", "p2"]));
    assert!(s.decisions.is_empty(), "no cycle may run before quorum");
    let gate = s.gate("pg1").expect("gated");
    assert_eq!(gate.reason, GateReason::WaitingForQuorum);
    assert_eq!(gate.message, "2 of 3 pods present (minCount 3)");
    // The members' words stay the same while the count moves.
    assert_eq!(
        gate.pod_message,
        "waiting for minCount pods from a gang to appear in scheduling queue"
    );
    s.add_group_pod("p3", 1000, "pg1");
    assert!(s.gate("pg1").is_none());
    s.run();
    assert!(s.bound(&["p1", "p2", "p3"]));
}

/// S3: pods created before their PodGroup wait (WaitingForPodGroup); once it exists the gang does
/// not fit beside a 2-CPU blocker: nothing binds, the condition is False/Unschedulable with the
/// shortfall, and every member carries a message; deleting the blocker binds all three
/// (True/Scheduled).
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`,
/// `TestPodGroupScheduling`, case "gang waits for pod group, then for resources, then schedules".
#[test]
fn s3_group_missing_then_capacity() {
    let mut s = Sim::new(zone_node());
    s.add_assigned("blocker", 2000, "node", 100);
    for p in ["p1", "p2", "p3"] {
        s.add_group_pod(p, 1000, "pg1");
    }
    s.run();
    let gate = s.gate("pg1").expect("gated");
    assert_eq!(gate.reason, GateReason::WaitingForPodGroup);
    assert_eq!(
        gate.message,
        "waiting for pod group \"pg1\" to appear in scheduling queue"
    );
    s.add_group(Sim::gang("pg1", 3));
    s.run();
    assert!(s.unbound(&["p1", "p2", "p3"]));
    let (status, reason, msg) = s.condition("pg1").unwrap();
    assert!(!status);
    assert_eq!(reason, ConditionReason::Unschedulable);
    assert!(
        msg.starts_with("minCount (3) cannot be satisfied: 2 scheduled, 0 remaining"),
        "{msg}"
    );
    assert!(
        msg.contains("0/1 nodes are available: 1 Insufficient cpu."),
        "{msg}"
    );
    assert_eq!(
        s.failures["p3"].message,
        "0/1 nodes are available: 1 Insufficient cpu."
    );
    // The members that fit but were reverted carry the group's whole message, shortfall included.
    for p in ["p1", "p2"] {
        assert_eq!(s.failures[p].message, msg, "{p}");
    }
    s.delete_pod("blocker");
    s.run();
    assert!(s.bound(&["p1", "p2", "p3"]));
    assert_eq!(
        s.condition("pg1").map(|c| (c.0, c.1)),
        Some((true, ConditionReason::Scheduled))
    );
}

/// S4: gang(3) with 4 pods and room for 3: exactly 3 bind and the group is Scheduled; the leftover
/// binds as a late joiner once the small blocker is deleted.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`,
/// `TestPodGroupScheduling`, case "minCount is scheduled, but one pod from a gang remain
/// unschedulable until the blocked resources are released".
#[test]
fn s4_min_count_below_pod_count_leftover_binds_later() {
    let mut s = Sim::new(zone_node());
    s.add_assigned("small-blocker", 1000, "node", 100);
    for p in ["p1", "p2", "p3", "p4"] {
        s.add_group_pod(p, 1000, "pg1");
    }
    s.add_group(Sim::gang("pg1", 3));
    s.run();
    let bound = ["p1", "p2", "p3", "p4"]
        .iter()
        .filter(|p| s.node_of(p).is_some())
        .count();
    assert_eq!(bound, 3);
    assert!(s.unbound(&["p4"]));
    assert_eq!(s.condition("pg1").map(|c| c.0), Some(true));
    s.delete_pod("small-blocker");
    s.run();
    assert!(s.bound(&["p1", "p2", "p3", "p4"]));
    s.assert_no_overcommit();
}

fn two_gangs(order: &[&str]) -> Sim {
    let mut s = Sim::new(zone_node());
    s.add_group(Sim::gang("pg1", 3));
    s.add_group(Sim::gang("pg2", 3));
    for p in order {
        let g = if p.starts_with("other") { "pg2" } else { "pg1" };
        s.add_group_pod(p, 1000, g);
    }
    s.run();
    s
}

/// S5: two gang(3)s on one 4-CPU node, pods created interleaved: pg1 binds whole and pg2 is
/// Unschedulable whole, never 2+2.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`,
/// `TestPodGroupScheduling`, case "two gangs competing for the same resources shouldn't deadlock".
#[test]
fn s5_two_gangs_compete_no_deadlock() {
    let s = two_gangs(&["p1", "other-p1", "p2", "other-p2", "p3", "other-p3"]);
    assert!(s.bound(&["p1", "p2", "p3"]));
    assert!(s.unbound(&["other-p1", "other-p2", "other-p3"]));
    assert_eq!(
        s.condition("pg2").map(|c| (c.0, c.1)),
        Some((false, ConditionReason::Unschedulable))
    );
}

/// S6: the same with reversed creation order: pg2, whose first pod came first, binds whole and pg1
/// binds nothing.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`,
/// `TestPodGroupScheduling`, case "two gangs competing for the same resources shouldn't deadlock,
/// reversed order".
#[test]
fn s6_two_gangs_reversed_order() {
    let s = two_gangs(&["other-p3", "p3", "other-p2", "p2", "other-p1", "p1"]);
    assert!(s.bound(&["other-p1", "other-p2", "other-p3"]));
    assert!(s.unbound(&["p1", "p2", "p3"]));
}

/// S8: a basic group has no quorum: the first pod binds alone, later arrivals bind in their own
/// cycles.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`,
/// `TestPodGroupScheduling`, case "basic group schedules when pod group and resources are
/// available, without gang enforcement".
#[test]
fn s8_basic_group_each_arrival_binds() {
    let mut s = Sim::new(zone_node());
    s.add_group(Sim::basic("pg1"));
    s.add_group_pod("p1", 1000, "pg1");
    s.run();
    assert!(s.bound(&["p1"]));
    s.add_group_pod("p2", 1000, "pg1");
    s.add_group_pod("p3", 1000, "pg1");
    s.run();
    assert!(s.bound(&["p2", "p3"]));
}

/// S9: pods of a basic group wait for their PodGroup (WaitingForPodGroup); with room for 2 of 3,
/// two bind and one stays unbound, and it binds once the blocker is deleted.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`,
/// `TestPodGroupScheduling`, case "basic group waits for pod group, part of it waits for resources,
/// then schedules".
#[test]
fn s9_basic_group_partial_capacity() {
    let mut s = Sim::new(zone_node());
    s.add_assigned("blocker", 2000, "node", 100);
    for p in ["p1", "p2", "p3"] {
        s.add_group_pod(p, 1000, "pg1");
    }
    s.run();
    assert_eq!(
        s.gate("pg1").map(|g| g.reason),
        Some(GateReason::WaitingForPodGroup)
    );
    s.add_group(Sim::basic("pg1"));
    s.run();
    assert!(s.bound(&["p1", "p2"]));
    assert!(s.unbound(&["p3"]));
    s.delete_pod("blocker");
    s.run();
    assert!(s.bound(&["p3"]));
}

fn tas_gang(s: &mut Sim, group: &str, min: u32, key: &str, pods: &[(&str, i64)]) {
    s.add_group(Sim::gang_topo(group, min, key));
    for (p, cpu) in pods {
        s.add_group_pod(p, *cpu, group);
    }
    s.run();
}

/// S13: racks of 3, 2 and 1 two-CPU nodes, one rack-2 node full: the gang(3) with a rack constraint
/// lands in rack-1, the only rack that fits it.
///
/// Upstream: kubernetes
/// `test/integration/scheduler/podgroup/topology_aware_scheduling/tas_test.go`,
/// `TestTopologyAwareSchedulingWithGangPolicy`, case "gang schedules on a single rack, when only
/// one feasible rack is available".
#[test]
fn s13_only_one_feasible_rack() {
    let mut s = Sim::new(racks(&[("rack-1", 3), ("rack-2", 2), ("rack-3", 1)]));
    s.add_assigned("filler", 2000, "node4", 100);
    tas_gang(
        &mut s,
        "pg1",
        3,
        "rack",
        &[("p1", 1000), ("p2", 1000), ("p3", 1000)],
    );
    for p in ["p1", "p2", "p3"] {
        assert_eq!(s.label_of(p, "rack").as_deref(), Some("rack-1"), "{p}");
    }
}

/// S14: three 2-CPU pods and no rack with three free nodes: nothing binds, the condition is
/// False/Unschedulable with `0/3 placements are available: …`.
///
/// Upstream: kubernetes
/// `test/integration/scheduler/podgroup/topology_aware_scheduling/tas_test.go`,
/// `TestTopologyAwareSchedulingWithGangPolicy`, case "gang remains pending when no feasible
/// resources are found".
#[test]
fn s14_no_rack_big_enough() {
    let mut s = Sim::new(racks(&[("rack-1", 2), ("rack-2", 1), ("rack-3", 1)]));
    tas_gang(
        &mut s,
        "pg1",
        3,
        "rack",
        &[("p1", 2000), ("p2", 2000), ("p3", 2000)],
    );
    assert!(s.unbound(&["p1", "p2", "p3"]));
    let (status, reason, msg) = s.condition("pg1").unwrap();
    assert_eq!((status, reason), (false, ConditionReason::Unschedulable));
    assert!(msg.starts_with("0/3 placements are available: "), "{msg}");
    // Phalanx adds the key and the domain that came closest (rack-1 holds two of the three).
    assert!(
        msg.contains("; topology key \"rack\": closest domain rack=rack-1 (2 of 3 pods fit)"),
        "{msg}"
    );
}

/// S15: the only rack has two of its three nodes full: the gang is unschedulable; deleting one
/// filler binds all three.
///
/// Upstream: kubernetes
/// `test/integration/scheduler/podgroup/topology_aware_scheduling/tas_test.go`,
/// `TestTopologyAwareSchedulingWithGangPolicy`, case "gang remains pending when resources are
/// consumed by existing pods".
#[test]
fn s15_wait_for_capacity() {
    let mut s = Sim::new(racks(&[("rack-1", 3)]));
    s.add_assigned("full1", 2000, "node1", 100);
    s.add_assigned("full3", 2000, "node3", 100);
    tas_gang(
        &mut s,
        "pg1",
        3,
        "rack",
        &[("p1", 1000), ("p2", 1000), ("p3", 1000)],
    );
    assert!(s.unbound(&["p1", "p2", "p3"]));
    s.delete_pod("full1");
    s.run();
    assert!(s.bound(&["p1", "p2", "p3"]));
}

/// S16: rack-1 (2 nodes) and rack-2 (3 nodes) both fit the gang; PodGroupPodsCount ties and
/// NodeResourcesFit MostAllocated prefers the fuller rack-1 (3/4 over 3/6).
///
/// Upstream: kubernetes
/// `test/integration/scheduler/podgroup/topology_aware_scheduling/tas_test.go`,
/// `TestTopologyAwareSchedulingWithGangPolicy`, case "gang schedules on a single rack, choosing
/// placement with the highest score in default placement scoring algorithm".
#[test]
fn s16_placement_scoring_bin_packing() {
    let mut s = Sim::new(racks(&[("rack-1", 2), ("rack-2", 3), ("rack-3", 1)]));
    tas_gang(
        &mut s,
        "pg1",
        3,
        "rack",
        &[("p1", 1000), ("p2", 1000), ("p3", 1000)],
    );
    for p in ["p1", "p2", "p3"] {
        assert_eq!(s.label_of(p, "rack").as_deref(), Some("rack-1"));
    }
}

/// S17: with existing load the placement score picks rack-2 ((2+3)/6) over rack-1 (3/4) and rack-3
/// ((1+3)/6); rack-4 cannot fit the gang.
///
/// Upstream: kubernetes
/// `test/integration/scheduler/podgroup/topology_aware_scheduling/tas_test.go`,
/// `TestTopologyAwareSchedulingWithGangPolicy`, case "gang schedules on a single rack, choosing
/// placement with highest allocation percentage (default placement scoring algorithm) with
/// pre-existing pods in cluster".
#[test]
fn s17_scoring_with_existing_load() {
    let mut s = Sim::new(racks(&[
        ("rack-1", 2),
        ("rack-2", 3),
        ("rack-3", 3),
        ("rack-4", 1),
    ]));
    s.add_assigned("r2-load", 2000, "node3", 100); // rack-2: 2 CPU used
    s.add_assigned("r3-load", 1000, "node6", 100); // rack-3: 1 CPU used
    tas_gang(
        &mut s,
        "pg1",
        3,
        "rack",
        &[("p1", 1000), ("p2", 1000), ("p3", 1000)],
    );
    for p in ["p1", "p2", "p3"] {
        assert_eq!(s.label_of(p, "rack").as_deref(), Some("rack-2"));
    }
}

/// S18: a gang of three 2-CPU pods fills rack-1, the only rack that fits it; the next gang(2) lands
/// in rack-2.
///
/// Upstream: kubernetes
/// `test/integration/scheduler/podgroup/topology_aware_scheduling/tas_test.go`,
/// `TestTopologyAwareSchedulingWithGangPolicy`, case "two gangs schedule consecutively, each on a
/// separate rack".
#[test]
fn s18_two_gangs_different_racks() {
    let mut s = Sim::new(racks(&[("rack-1", 3), ("rack-2", 2)]));
    tas_gang(
        &mut s,
        "pg1",
        3,
        "rack",
        &[("l1", 2000), ("l2", 2000), ("l3", 2000)],
    );
    tas_gang(&mut s, "pg2", 2, "rack", &[("s1", 1000), ("s2", 1000)]);
    for p in ["l1", "l2", "l3"] {
        assert_eq!(s.label_of(p, "rack").as_deref(), Some("rack-1"));
    }
    for p in ["s1", "s2"] {
        assert_eq!(s.label_of(p, "rack").as_deref(), Some("rack-2"));
    }
}

/// S19: two gangs scheduled one after the other both fit in rack-1 and both land there.
///
/// Upstream: kubernetes
/// `test/integration/scheduler/podgroup/topology_aware_scheduling/tas_test.go`,
/// `TestTopologyAwareSchedulingWithGangPolicy`, case "two gangs schedule consecutively, both on the
/// same rack".
#[test]
fn s19_two_gangs_same_rack() {
    let mut s = Sim::new(racks(&[("rack-1", 3), ("rack-2", 1)]));
    tas_gang(&mut s, "pg1", 2, "rack", &[("large", 2000), ("small", 1000)]);
    tas_gang(
        &mut s,
        "pg2",
        3,
        "rack",
        &[("q1", 1000), ("q2", 1000), ("q3", 1000)],
    );
    for p in ["large", "small", "q1", "q2", "q3"] {
        assert_eq!(s.label_of(p, "rack").as_deref(), Some("rack-1"), "{p}");
    }
}

/// S20: a rack-constrained gang lands in rack-3 (the only rack with three nodes); a
/// zone-constrained gang then takes the three nodes of zone-1.
///
/// Upstream: kubernetes
/// `test/integration/scheduler/podgroup/topology_aware_scheduling/tas_test.go`,
/// `TestTopologyAwareSchedulingWithGangPolicy`, case "two gangs schedule consecutively, different
/// topology keys".
#[test]
fn s20_different_topology_keys() {
    let nodes = vec![
        node("node1", 2, &[("rack", "rack-1"), ("zone", "zone-1")]),
        node("node2", 2, &[("rack", "rack-1"), ("zone", "zone-1")]),
        node("node3", 2, &[("rack", "rack-2"), ("zone", "zone-1")]),
        node("node4", 2, &[("rack", "rack-3"), ("zone", "zone-2")]),
        node("node5", 2, &[("rack", "rack-3"), ("zone", "zone-2")]),
        node("node6", 2, &[("rack", "rack-3"), ("zone", "zone-2")]),
    ];
    let mut s = Sim::new(nodes);
    tas_gang(
        &mut s,
        "pg1",
        3,
        "rack",
        &[("a1", 2000), ("a2", 2000), ("a3", 2000)],
    );
    tas_gang(
        &mut s,
        "pg2",
        3,
        "zone",
        &[("b1", 2000), ("b2", 2000), ("b3", 2000)],
    );
    for p in ["a1", "a2", "a3"] {
        assert_eq!(s.label_of(p, "rack").as_deref(), Some("rack-3"));
    }
    let mut nodes: Vec<String> = ["b1", "b2", "b3"].iter().map(|p| s.node_of(p).unwrap()).collect();
    nodes.sort();
    assert_eq!(nodes, ["node1", "node2", "node3"]);
}

/// S21: one rack of two nodes: the first gang(3) binds, the second gang(2) cannot fit and binds
/// nothing (False/Unschedulable).
///
/// Upstream: kubernetes
/// `test/integration/scheduler/podgroup/topology_aware_scheduling/tas_test.go`,
/// `TestTopologyAwareSchedulingWithGangPolicy`, case "two gangs schedule consecutively, only one
/// fits in the cluster".
#[test]
fn s21_second_gang_does_not_fit() {
    let mut s = Sim::new(racks(&[("rack-1", 2)]));
    tas_gang(
        &mut s,
        "pg1",
        3,
        "rack",
        &[("p1", 1000), ("p2", 1000), ("p3", 1000)],
    );
    tas_gang(&mut s, "pg2", 2, "rack", &[("q1", 1000), ("q2", 1000)]);
    assert!(s.bound(&["p1", "p2", "p3"]));
    assert!(s.unbound(&["q1", "q2"]));
    assert_eq!(s.condition("pg2").map(|c| c.0), Some(false));
}

/// S22: gang(2) with three pods and a rack constraint: all three bind, inside one rack.
///
/// Upstream: kubernetes
/// `test/integration/scheduler/podgroup/topology_aware_scheduling/tas_test.go`,
/// `TestTopologyAwareSchedulingWithGangPolicy`, case "gang with minCount < pod count schedules on a
/// single rack".
#[test]
fn s22_min_count_below_count_with_topology() {
    let mut s = Sim::new(racks(&[("rack-1", 2), ("rack-2", 2)]));
    tas_gang(
        &mut s,
        "pg1",
        2,
        "rack",
        &[("p1", 1000), ("p2", 1000), ("p3", 1000)],
    );
    assert!(s.bound(&["p1", "p2", "p3"]));
    let r = s.label_of("p1", "rack");
    assert_eq!(s.label_of("p2", "rack"), r);
    assert_eq!(s.label_of("p3", "rack"), r);
}

/// S23: the gang lands in rack-2 (MostAllocated); a late joiner p4 binds there too, and p5 stays
/// unbound because pods may not leave the domain already chosen (only rack-2's two nodes are
/// considered).
///
/// Upstream: kubernetes
/// `test/integration/scheduler/podgroup/topology_aware_scheduling/tas_test.go`,
/// `TestTopologyAwareSchedulingWithGangPolicy`, case "gang with minCount < pod count schedules on a
/// single rack, choosing smaller rack".
#[test]
fn s23_late_joiners_locked_to_domain() {
    let mut s = Sim::new(racks(&[("rack-1", 3), ("rack-2", 2), ("rack-3", 1)]));
    tas_gang(
        &mut s,
        "pg1",
        3,
        "rack",
        &[("p1", 1000), ("p2", 1000), ("p3", 1000)],
    );
    for p in ["p1", "p2", "p3"] {
        assert_eq!(s.label_of(p, "rack").as_deref(), Some("rack-2"));
    }
    s.add_group_pod("p4", 1000, "pg1");
    s.run();
    assert_eq!(s.label_of("p4", "rack").as_deref(), Some("rack-2"));
    s.add_group_pod("p5", 1000, "pg1");
    s.run();
    assert!(s.unbound(&["p5"]), "p5 may not leave rack-2");
    // Only rack-2's two nodes are considered (upstream's message); Phalanx adds why, naming the domain.
    assert_eq!(
        s.failures["p5"].message,
        "0/2 nodes are available: 2 Insufficient cpu. topology key \"rack\": the group's scheduled members hold it \
         to domain rack=rack-2, which is full (0 of 1 pods fit)"
    );
}

/// S24: the only rack has one node full of an equal-priority pod: the gang stays unschedulable and
/// no victim is chosen.
///
/// Upstream: kubernetes
/// `test/integration/scheduler/podgroup/topology_aware_scheduling/tas_test.go`,
/// `TestTopologyAwareSchedulingWithGangPolicy`, case "gang does not schedule on a single rack when
/// preemption could free up enough resources".
#[test]
fn s24_equal_priority_no_preemption() {
    let mut s = Sim::new(racks(&[("rack-1", 2)]));
    s.add_assigned("full", 2000, "node2", 100);
    tas_gang(
        &mut s,
        "pg1",
        3,
        "rack",
        &[("p1", 1000), ("p2", 1000), ("p3", 1000)],
    );
    assert!(s.unbound(&["p1", "p2", "p3"]));
    assert!(s.pods.contains_key("full"));
    assert!(s.decisions.iter().all(|d| d.victims.is_empty()));
}

/// Beyond upstream: a heterogeneous gang that upstream's fixed order cannot place.
/// Nodes: n1 = 2 CPU, n2 = 3 CPU. Gang(2): `a` (1 CPU, first seen) then `b` (3 CPU).
/// Upstream order puts `a` on the emptier n2 (LeastAllocated), and `b` then fits nowhere.
/// Largest-first places `b` on n2 and `a` on n1.
fn heterogeneous(config: phalanx_scheduler::SchedulerConfig) -> Sim {
    let mut s = Sim::with_config(vec![node("n1", 2, &[]), node("n2", 3, &[])], config);
    s.add_group(Sim::gang("pg1", 2));
    s.add_group_pod("a", 1000, "pg1");
    s.add_group_pod("b", 3000, "pg1");
    s.run();
    s
}

#[test]
fn reorder_retry_fixes_heterogeneous_gang() {
    let upstream = phalanx_scheduler::SchedulerConfig {
        reorder_budget_ms: 0,
        ..Default::default()
    };
    let s = heterogeneous(upstream);
    assert!(s.unbound(&["a", "b"]), "upstream's order must fail here");
    assert!(s.decisions.iter().all(|d| d.stats.reorder_attempts == 0));

    let s = heterogeneous(phalanx_scheduler::SchedulerConfig::default());
    assert_eq!(s.node_of("b").as_deref(), Some("n2"));
    assert_eq!(s.node_of("a").as_deref(), Some("n1"));
    let d = s.decisions.iter().find(|d| !d.bindings.is_empty()).unwrap();
    assert!(d.stats.reorder_succeeded);
    assert_eq!(d.stats.reorder_attempts, 1);
    s.assert_no_overcommit();
}

#[test]
fn reorder_retry_is_not_used_for_homogeneous_gangs() {
    let mut s = Sim::new(vec![node("n1", 2, &[])]);
    s.add_group(Sim::gang("pg1", 3));
    for p in ["p1", "p2", "p3"] {
        s.add_group_pod(p, 1000, "pg1");
    }
    s.run();
    assert!(s.unbound(&["p1", "p2", "p3"]));
    assert!(s.decisions.iter().all(|d| d.stats.reorder_attempts == 0));
}

#[test]
fn mixed_scheduler_names_fail_the_whole_group() {
    let mut s = Sim::new(zone_node());
    s.add_group(Sim::gang("pg1", 2));
    s.add_group_pod("p1", 1000, "pg1");
    let mut other = Sim::make_pod("p2", 1000, Some("pg1"), 100);
    other.scheduler_name = "default-scheduler".into();
    s.add_pod(other);
    s.run_ready();
    assert!(s.unbound(&["p1", "p2"]));
    let (status, reason, msg) = s.condition("pg1").unwrap();
    assert_eq!((status, reason), (false, ConditionReason::GroupError));
    assert_eq!(
        msg,
        "all pods in a pod group hierarchy should have the same .spec.schedulerName set, got: \"default-scheduler\" (\"p2\") and \"phalanx-scheduler\" (\"p1\")"
    );
    assert_eq!(
        s.failures["p1"].reason,
        phalanx_scheduler::FailureReason::SchedulerError
    );
}

#[test]
fn pod_priority_must_match_group_priority() {
    let mut s = Sim::new(zone_node());
    s.add_group(Sim::gang("pg1", 1));
    s.add_pod(Sim::make_pod("p1", 1000, Some("pg1"), 5));
    s.run_ready();
    assert_eq!(s.queue.counts().backoff, 1, "errors back off");
    let (_, reason, msg) = s.condition("pg1").unwrap();
    assert_eq!(reason, ConditionReason::GroupError);
    assert_eq!(
        msg,
        "all pods in a pod group hierarchy should have the same priority as the root pod group's priority, got 5 (\"p1\") and 100 (\"podgroup/ns/pg1\")"
    );
}

#[test]
fn higher_priority_group_goes_first() {
    let mut s = Sim::new(zone_node());
    let mut low = Sim::gang("low", 3);
    low.priority = Some(1);
    s.add_group(low);
    for p in ["l1", "l2", "l3"] {
        s.add_pod(Sim::make_pod(p, 1000, Some("low"), 1));
    }
    let mut high = Sim::gang("high", 3);
    high.priority = Some(1000);
    s.add_group(high);
    for p in ["h1", "h2", "h3"] {
        s.add_pod(Sim::make_pod(p, 1000, Some("high"), 1000));
    }
    s.run();
    assert!(s.bound(&["h1", "h2", "h3"]));
    assert!(s.unbound(&["l1", "l2", "l3"]));
}

#[test]
fn lowering_min_count_wakes_the_group() {
    let mut s = Sim::new(zone_node());
    s.add_assigned("blocker", 2000, "node", 100);
    s.add_group(Sim::gang("pg1", 3));
    for p in ["p1", "p2", "p3"] {
        s.add_group_pod(p, 1000, "pg1");
    }
    s.run();
    assert!(s.unbound(&["p1", "p2", "p3"]));
    s.add_group(Sim::gang("pg1", 2));
    s.run();
    let bound = ["p1", "p2", "p3"]
        .iter()
        .filter(|p| s.node_of(p).is_some())
        .count();
    assert_eq!(bound, 2);
}

/// The second alternative order: most constrained first. n1 (3 CPU, gpu=yes), n2 (2 CPU).
/// `a` (2 CPU, any node, seen first) lands on the emptier n1 in upstream's order and in
/// largest-first order alike, and `b` (1.5 CPU, gpu only) then fits nowhere; placing the
/// selective `b` first leaves n2 for `a`.
#[test]
fn reorder_retry_most_constrained_first() {
    use phalanx_scheduler::selectors::{Requirement, SelectorOp};
    let mut s = Sim::new(vec![node("n1", 3, &[("gpu", "yes")]), node("n2", 2, &[])]);
    s.add_group(Sim::gang("pg1", 2));
    s.add_group_pod("a", 2000, "pg1");
    let mut b = Sim::make_pod("b", 1500, Some("pg1"), 100);
    std::sync::Arc::make_mut(&mut b.spec).node_selector = vec![Requirement {
        key: "gpu".into(),
        op: SelectorOp::In,
        values: vec!["yes".into()],
    }];
    s.add_pod(b);
    s.run();
    assert_eq!(s.node_of("b").as_deref(), Some("n1"));
    assert_eq!(s.node_of("a").as_deref(), Some("n2"));
    let d = s.decisions.iter().find(|d| !d.bindings.is_empty()).unwrap();
    assert_eq!(
        d.stats.reorder_attempts, 1,
        "largest-first equals upstream's order here and is skipped"
    );
    assert!(d.stats.reorder_succeeded);
}
