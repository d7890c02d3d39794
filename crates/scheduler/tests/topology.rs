//! Topology beyond upstream on the pure core: preferred levels (`preferredTopology`), alone and
//! with a required key; TopologyPacking against upstream's scoring; the sibling search of a
//! CompositePodGroup; and `percentageOfPlacementsToScore` (k/k#139064).

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{Sim, node};
use phalanx_scheduler::SchedulerConfig;
use phalanx_scheduler::model::NodeStatic;

/// A node's `(name, cpu, labels)`.
type NodeSpec<'a> = (&'a str, i64, &'a [(&'a str, &'a str)]);

/// `(name, cpu, labels)` nodes.
fn nodes(spec: &[NodeSpec<'_>]) -> Vec<NodeStatic> {
    spec.iter().map(|(n, cpu, l)| node(n, *cpu, l)).collect()
}

fn gang_pods(s: &mut Sim, group: &str, n: usize, milli: i64) -> Vec<String> {
    (1..=n)
        .map(|i| {
            let name = format!("{group}-{i}");
            s.add_group_pod(&name, milli, group);
            name
        })
        .collect()
}

fn labels(s: &Sim, pods: &[String], key: &str) -> BTreeSet<String> {
    pods.iter()
        .map(|p| s.label_of(p, key).unwrap_or_else(|| panic!("{p} is not bound")))
        .collect()
}

/// Two blocks of two racks of two 4-CPU nodes each.
fn blocks() -> Vec<NodeStatic> {
    let mut v = Vec::new();
    for (b, racks) in [("b1", ["r1", "r2"]), ("b2", ["r3", "r4"])] {
        for r in racks {
            for i in 0..2 {
                v.push(node(&format!("{r}-n{i}"), 4, &[("block", b), ("rack", r)]));
            }
        }
    }
    v
}

fn preferred_gang(name: &str, min: u32, levels: &[&str]) -> phalanx_scheduler::GroupInfo {
    let mut g = Sim::gang(name, min);
    g.preferred_topology = levels.iter().map(|l| l.to_string()).collect();
    g
}

#[test]
fn preferred_rack_is_honoured_when_the_gang_fits_in_one() {
    // 4 pods x 2 CPU = 8 CPU: one rack (2 x 4 CPU) holds it.
    let mut s = Sim::new(blocks());
    s.add_group(preferred_gang("pg", 4, &["rack", "block"]));
    let p = gang_pods(&mut s, "pg", 4, 2000);
    s.run();
    assert_eq!(labels(&s, &p, "rack").len(), 1, "one rack");

    // Without the preference the per-pod spreading score puts them in more than one rack, so the
    // assertion above is the preference's doing.
    let mut s = Sim::new(blocks());
    s.add_group(Sim::gang("pg", 4));
    let p = gang_pods(&mut s, "pg", 4, 2000);
    s.run();
    assert!(labels(&s, &p, "rack").len() > 1, "spread without a preference");
}

#[test]
fn preferred_levels_relax_to_the_block_then_to_anywhere() {
    // 6 x 2 CPU = 12 CPU: no rack (8) holds it, a block (16) does.
    let mut s = Sim::new(blocks());
    s.add_group(preferred_gang("pg", 6, &["rack", "block"]));
    let p = gang_pods(&mut s, "pg", 6, 2000);
    s.run();
    assert_eq!(labels(&s, &p, "block").len(), 1, "one block");
    assert_eq!(labels(&s, &p, "rack").len(), 2, "two racks of it");

    // 10 x 2 CPU = 20 CPU: no block holds it; a preference never makes the gang unschedulable.
    let mut s = Sim::new(blocks());
    s.add_group(preferred_gang("pg", 10, &["rack", "block"]));
    let p = gang_pods(&mut s, "pg", 10, 2000);
    s.run();
    assert!(s.bound(&p.iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(labels(&s, &p, "block").len(), 2);
}

#[test]
fn required_zone_with_preferred_rack() {
    // Zone z1: racks r1 and r2 of one 4-CPU node each; zone z2: rack r3 of two 4-CPU nodes.
    let n = nodes(&[
        ("a", 4, &[("zone", "z1"), ("rack", "r1")]),
        ("b", 4, &[("zone", "z1"), ("rack", "r2")]),
        ("c", 4, &[("zone", "z2"), ("rack", "r3")]),
        ("d", 4, &[("zone", "z2"), ("rack", "r3")]),
    ]);
    let mut s = Sim::new(n);
    let mut first = Sim::gang_topo("first", 4, "zone");
    first.preferred_topology = vec!["rack".into()];
    s.add_group(first);
    let p1 = gang_pods(&mut s, "first", 4, 2000);
    s.run();
    // Only r3 holds 8 CPU in one rack.
    assert_eq!(labels(&s, &p1, "rack"), BTreeSet::from(["r3".to_string()]));

    let mut second = Sim::gang_topo("second", 4, "zone");
    second.preferred_topology = vec!["rack".into()];
    s.add_group(second);
    let p2 = gang_pods(&mut s, "second", 4, 2000);
    s.run();
    // No rack is left whole: the preference relaxes, the required zone holds.
    assert_eq!(labels(&s, &p2, "zone"), BTreeSet::from(["z1".to_string()]));
    assert_eq!(labels(&s, &p2, "rack").len(), 2);
    s.assert_no_overcommit();
}

/// Rack "big": 20 nodes of 4 CPU, 16 of them full (4 free); rack "small": 3 free nodes. A gang
/// of 2 x 4 CPU scores 90 in "big" and 66 in "small" under upstream's MostAllocated, so upstream
/// leaves 2 + 3 free nodes and a following 4-node gang finds no rack. TopologyPacking puts the
/// first gang in "small" (1 node left, against 2) and the second fits in "big".
fn fragmenting_cluster(config: SchedulerConfig) -> (Sim, Vec<String>, Vec<String>) {
    let mut n = Vec::new();
    for i in 0..20 {
        n.push(node(&format!("big-{i}"), 4, &[("rack", "big")]));
    }
    for i in 0..3 {
        n.push(node(&format!("small-{i}"), 4, &[("rack", "small")]));
    }
    let mut s = Sim::with_config(n, config);
    for i in 0..16 {
        s.add_assigned(&format!("load-{i}"), 4000, &format!("big-{i}"), 0);
    }
    s.add_group(Sim::gang_topo("first", 2, "rack"));
    let first = gang_pods(&mut s, "first", 2, 4000);
    s.run();
    s.add_group(Sim::gang_topo("second", 4, "rack"));
    let second = gang_pods(&mut s, "second", 4, 4000);
    s.run();
    (s, first, second)
}

#[test]
fn packing_keeps_a_whole_rack_where_upstream_scoring_fragments() {
    let mut upstream = SchedulerConfig::default();
    upstream.placement_score_weights.topology_packing = 0;
    let (s, first, second) = fragmenting_cluster(upstream);
    assert_eq!(labels(&s, &first, "rack"), BTreeSet::from(["big".to_string()]));
    assert!(s.unbound(&second.iter().map(String::as_str).collect::<Vec<_>>()));

    let (s, first, second) = fragmenting_cluster(SchedulerConfig::default());
    assert_eq!(labels(&s, &first, "rack"), BTreeSet::from(["small".to_string()]));
    assert_eq!(labels(&s, &second, "rack"), BTreeSet::from(["big".to_string()]));
    s.assert_no_overcommit();
}

/// Rack r1: two 4-CPU nodes; rack r2: four 2-CPU nodes. Child "a" (2 x 2 CPU) fits both and
/// scores r1 best; child "b" (2 x 4 CPU) fits only r1. Greedy order strands "b".
fn stranding_tree(config: SchedulerConfig) -> (Sim, Vec<String>, Vec<String>) {
    let mut n = Vec::new();
    for i in 0..2 {
        n.push(node(&format!("r1-{i}"), 4, &[("rack", "r1")]));
    }
    for i in 0..4 {
        n.push(node(&format!("r2-{i}"), 2, &[("rack", "r2")]));
    }
    let mut s = Sim::with_config(n, config);
    s.add_composite(Sim::cpg("root", Some(2), None));
    s.add_group(Sim::child(Sim::gang_topo("a", 2, "rack"), "root"));
    s.add_group(Sim::child(Sim::gang_topo("b", 2, "rack"), "root"));
    let a = gang_pods(&mut s, "a", 2, 2000);
    let b = gang_pods(&mut s, "b", 2, 4000);
    s.run();
    (s, a, b)
}

#[test]
fn sibling_search_places_a_tree_that_greedy_order_strands() {
    let greedy = SchedulerConfig {
        sibling_search_budget_ms: 0,
        ..SchedulerConfig::default()
    };
    let (s, a, b) = stranding_tree(greedy);
    assert!(s.unbound(&a.iter().chain(&b).map(String::as_str).collect::<Vec<_>>()));

    let (s, a, b) = stranding_tree(SchedulerConfig::default());
    assert_eq!(labels(&s, &a, "rack"), BTreeSet::from(["r2".to_string()]));
    assert_eq!(labels(&s, &b, "rack"), BTreeSet::from(["r1".to_string()]));
    s.assert_no_overcommit();
    let searched = s.decisions.iter().any(|d| d.stats.sibling_search_succeeded);
    assert!(searched, "the search, not the greedy pass, placed the tree");
}

#[test]
fn sibling_search_is_deterministic() {
    let run = || {
        let (s, a, b) = stranding_tree(SchedulerConfig::default());
        a.iter()
            .chain(&b)
            .map(|p| (p.clone(), s.node_of(p)))
            .collect::<BTreeMap<_, _>>()
    };
    let first = run();
    for _ in 0..5 {
        assert_eq!(run(), first);
    }
}

#[test]
fn preferred_rack_for_a_whole_composite_tree() {
    // Two children of 2 x 2 CPU: together 8 CPU, one rack of `blocks()` holds both.
    let mut s = Sim::new(blocks());
    let mut root = Sim::cpg("root", Some(2), None);
    root.preferred_topology = vec!["rack".into()];
    s.add_composite(root);
    s.add_group(Sim::child(Sim::gang("a", 2), "root"));
    s.add_group(Sim::child(Sim::gang("b", 2), "root"));
    let mut all = gang_pods(&mut s, "a", 2, 2000);
    all.extend(gang_pods(&mut s, "b", 2, 2000));
    s.run();
    assert_eq!(labels(&s, &all, "rack").len(), 1);
}

/// 50 one-node racks; a 1-pod gang with a rack constraint fits everywhere.
fn feasible_placements(percentage: u32) -> u32 {
    let n: Vec<NodeStatic> = (0..50)
        .map(|i| node(&format!("n{i}"), 4, &[("rack", &format!("r{i:02}"))]))
        .collect();
    let config = SchedulerConfig {
        percentage_of_placements_to_score: percentage,
        ..SchedulerConfig::default()
    };
    let mut s = Sim::with_config(n, config);
    s.add_group(Sim::gang_topo("pg", 1, "rack"));
    let p = gang_pods(&mut s, "pg", 1, 1000);
    s.run();
    assert!(s.bound(&[p[0].as_str()]));
    s.decisions.iter().map(|d| d.stats.feasible_placements).sum()
}

#[test]
fn percentage_of_placements_to_score_stops_the_evaluation() {
    assert_eq!(feasible_placements(10), 5);
    assert_eq!(feasible_placements(100), 50);
    // Adaptive on 50 nodes: 100 - 50 x 9/500 = 99.1% of 50, rounded up.
    assert_eq!(feasible_placements(0), 50);
}
