//! Property tests: no overcommit, gang all-or-nothing, exact revert, and the count-based
//! placement shortcut choosing what full simulation chooses.

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::{Sim, disable_batching, node};
use phalanx_scheduler::framework::{PlacementScorePlugin, PodGroupAssignments, Status};
use phalanx_scheduler::model::NodeStatic;
use phalanx_scheduler::queue::QueuedEntity;
use phalanx_scheduler::{
    EntityKey, GroupInfo, GroupPolicy, Outcome, PodInfo, Scheduler, SchedulerConfig, Snapshot,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct GangSpec {
    size: usize,
    min: u32,
    cpu: i64,
    topology: bool,
}

fn gang_spec() -> impl Strategy<Value = GangSpec> {
    (1usize..6, 1u32..6, 100i64..3000, any::<bool>()).prop_map(|(size, min, cpu, topology)| GangSpec {
        size,
        min: min.min(size as u32),
        cpu,
        topology,
    })
}

fn cluster() -> impl Strategy<Value = Vec<(i64, u8)>> {
    prop::collection::vec((1i64..6, 0u8..3), 1..8)
}

fn build_nodes(spec: &[(i64, u8)]) -> Vec<NodeStatic> {
    spec.iter()
        .enumerate()
        .map(|(i, (cpu, rack))| node(&format!("n{i}"), *cpu, &[("rack", &format!("r{rack}"))]))
        .collect()
}

/// Binds each `(node, cpu)` blocker that fits on node `node % nodes`.
fn add_blockers(s: &mut Sim, nodes: usize, blockers: &[(usize, i64)]) {
    for (i, (n, cpu)) in blockers.iter().enumerate() {
        let name = format!("n{}", n % nodes);
        let idx = s.snap.node_index(&name).unwrap();
        let ni = s.snap.node(idx);
        if *cpu <= ni.node.allocatable.milli_cpu - ni.requested.milli_cpu {
            s.add_assigned(&format!("b{i}"), *cpu, &name, 0);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn never_overcommits_and_gangs_are_all_or_nothing(
        nodes in cluster(),
        gangs in prop::collection::vec(gang_spec(), 1..6),
        singles in prop::collection::vec(100i64..4000, 0..4),
        blockers in prop::collection::vec((0usize..8, 100i64..2000), 0..4),
    ) {
        let mut s = Sim::new(build_nodes(&nodes));
        add_blockers(&mut s, nodes.len(), &blockers);
        for (g, spec) in gangs.iter().enumerate() {
            let name = format!("g{g}");
            let mut group = Sim::gang(&name, spec.min);
            if spec.topology { group.topology_key = Some("rack".into()); }
            s.add_group(group);
            for p in 0..spec.size {
                s.add_group_pod(&format!("{name}-{p}"), spec.cpu, &name);
            }
        }
        for (i, cpu) in singles.iter().enumerate() {
            s.add_pod(Sim::make_pod(&format!("s{i}"), *cpu, None, 100));
        }
        s.run();
        s.assert_no_overcommit();
        for (g, spec) in gangs.iter().enumerate() {
            let bound: Vec<String> = (0..spec.size).map(|p| format!("g{g}-{p}")).filter(|p| s.node_of(p).is_some()).collect();
            prop_assert!(bound.is_empty() || bound.len() >= spec.min as usize, "gang g{} bound {} < min {}", g, bound.len(), spec.min);
            if spec.topology && !bound.is_empty() {
                let racks: std::collections::BTreeSet<_> = bound.iter().map(|p| s.label_of(p, "rack")).collect();
                prop_assert_eq!(racks.len(), 1, "gang g{} spans racks", g);
            }
        }
        // Every single decision respects minCount as well.
        for d in &s.decisions {
            if let EntityKey::Group(_) = &d.entity {
                prop_assert_eq!(d.outcome == Outcome::Scheduled, !d.bindings.is_empty());
            }
        }
    }

    /// `preferredTopology` is soft: a gang binds with a preferred rack exactly when it binds without one, and
    /// when some rack alone holds it, it lands in one rack.
    #[test]
    fn a_preference_never_makes_a_gang_unschedulable(
        nodes in cluster(),
        spec in gang_spec(),
        blockers in prop::collection::vec((0usize..8, 100i64..2000), 0..4),
    ) {
        let run = |preferred: bool| {
            let mut s = Sim::new(build_nodes(&nodes));
            add_blockers(&mut s, nodes.len(), &blockers);
            let mut group = Sim::gang("g", spec.size as u32);
            if preferred { group.preferred_topology = vec!["rack".into()]; }
            s.add_group(group);
            for p in 0..spec.size {
                s.add_group_pod(&format!("g-{p}"), spec.cpu, "g");
            }
            s.run();
            s.assert_no_overcommit();
            let bound: Vec<String> = (0..spec.size).map(|p| format!("g-{p}")).filter(|p| s.node_of(p).is_some()).collect();
            let racks: std::collections::BTreeSet<_> = bound.iter().map(|p| s.label_of(p, "rack")).collect();
            (bound.len(), racks.len())
        };
        let (without, _) = run(false);
        let (with, racks) = run(true);
        prop_assert_eq!(with, without, "bound pods with and without the preference");
        // Whether one rack could hold the gang alone: the same gang with a required rack.
        let mut required = Sim::new(build_nodes(&nodes));
        add_blockers(&mut required, nodes.len(), &blockers);
        required.add_group(Sim::gang_topo("g", spec.size as u32, "rack"));
        for p in 0..spec.size {
            required.add_group_pod(&format!("g-{p}"), spec.cpu, "g");
        }
        required.run();
        if required.node_of("g-0").is_some() {
            prop_assert_eq!(racks, 1, "a rack holds the gang, yet it spans racks");
        }
    }

    #[test]
    fn unschedulable_cycle_leaves_snapshot_unchanged(
        nodes in cluster(),
        spec in gang_spec(),
        load in prop::collection::vec(0i64..3000, 0..8),
    ) {
        let mut snap = Snapshot::new(build_nodes(&nodes).into_iter().map(Arc::new));
        for (i, cpu) in load.iter().enumerate() {
            let idx = i % snap.len();
            let ni = snap.node(idx);
            if ni.node.allocatable.milli_cpu - ni.requested.milli_cpu >= *cpu {
                let mut p = PodInfo::simple("ns", &format!("l{i}"), *cpu);
                p.node_name = Some(ni.node.name.clone());
                snap.add_pod(Arc::new(p));
            }
        }
        let before = snap.clone();
        let mut group = GroupInfo::new("ns", "g", GroupPolicy::Gang { min_count: spec.min });
        if spec.topology { group.topology_key = Some("rack".into()); }
        let pods: Vec<Arc<PodInfo>> = (0..spec.size).map(|i| {
            let mut p = PodInfo::simple("ns", &format!("p{i}"), spec.cpu);
            p.group_name = Some("g".into());
            Arc::new(p)
        }).collect();
        let entity = QueuedEntity { tree: None, key: EntityKey::Group(group.key.clone()), group: Some(Arc::new(group)), pods, attempts: 0, timestamp: Instant::now() };
        let d = Scheduler::new(SchedulerConfig::default()).schedule(&mut snap, &entity);
        if d.outcome == Outcome::Scheduled {
            prop_assert!(d.bindings.len() >= spec.min as usize);
            for b in &d.bindings { prop_assert!(snap.contains_pod(&b.pod)); }
        } else {
            prop_assert!(d.bindings.is_empty());
            prop_assert_eq!(&snap, &before);
        }
    }

    #[test]
    fn revert_restores_snapshot_exactly(
        nodes in cluster(),
        ops in prop::collection::vec((0usize..8, 0i64..2000, any::<bool>(), any::<bool>()), 1..30),
    ) {
        let mut snap = Snapshot::new(build_nodes(&nodes).into_iter().map(Arc::new));
        let mut marks = vec![(snap.mark(), snap.clone(), snap.nodes().len())];
        for (i, (n, cpu, grouped, take_mark)) in ops.iter().enumerate() {
            let mut p = PodInfo::simple("ns", &format!("p{i}"), *cpu);
            if *grouped { p.group_name = Some("g".into()); }
            snap.assume(Arc::new(p), n % snap.len());
            if *take_mark { marks.push((snap.mark(), snap.clone(), 0)); }
        }
        let gens_at_start: Vec<u64> = (0..marks[0].1.len()).map(|i| marks[0].1.generation(i)).collect();
        while let Some((m, state, _)) = marks.pop() {
            snap.revert_to(m);
            prop_assert_eq!(&snap, &state);
        }
        let gens: Vec<u64> = (0..snap.len()).map(|i| snap.generation(i)).collect();
        prop_assert_eq!(gens, gens_at_start);
    }

    #[test]
    fn count_based_placement_matches_full_simulation(
        racks in prop::collection::vec((1usize..4, 1i64..5), 1..5),
        load in prop::collection::vec((0usize..16, 0i64..3000), 0..8),
        spec in gang_spec(),
    ) {
        let mut nodes = Vec::new();
        for (r, (count, cpu)) in racks.iter().enumerate() {
            for k in 0..*count {
                nodes.push(Arc::new(NodeStatic::simple(&format!("r{r}-{k}"), cpu * 1000, 1 << 34, &[("rack", &format!("r{r}"))])));
            }
        }
        let mut snap = Snapshot::new(nodes);
        for (i, (n, cpu)) in load.iter().enumerate() {
            let idx = n % snap.len();
            let ni = snap.node(idx);
            if ni.node.allocatable.milli_cpu - ni.requested.milli_cpu >= *cpu {
                let mut p = PodInfo::simple("ns", &format!("l{i}"), *cpu);
                p.node_name = Some(ni.node.name.clone());
                snap.add_pod(Arc::new(p));
            }
        }
        let mut group = GroupInfo::new("ns", "g", GroupPolicy::Gang { min_count: spec.min });
        group.topology_key = Some("rack".into());
        let template = PodInfo::simple("ns", "t", spec.cpu);
        let pods: Vec<Arc<PodInfo>> = (0..spec.size).map(|i| {
            let mut p = template.clone();
            p.key = phalanx_scheduler::PodKey::new("ns", &format!("p{i}"));
            p.group_name = Some("g".into());
            Arc::new(p)
        }).collect();
        let entity = QueuedEntity { tree: None, key: EntityKey::Group(group.key.clone()), group: Some(Arc::new(group)), pods, attempts: 0, timestamp: Instant::now() };
        let mut fast_snap = snap.clone();
        let fast = Scheduler::new(SchedulerConfig::default()).schedule(&mut fast_snap, &entity);
        let mut full = Scheduler::new(SchedulerConfig::default());
        full.add_placement_scorer(Box::new(NeedsNodes), 1);
        let mut full_snap = snap.clone();
        let slow = full.schedule(&mut full_snap, &entity);
        prop_assert_eq!(fast.outcome, slow.outcome);
        prop_assert_eq!(&fast.bindings, &slow.bindings);
        prop_assert_eq!(&fast.conditions, &slow.conditions);
    }
}

/// A scorer that claims to read proposed nodes (forcing full simulation) and scores 0.
struct NeedsNodes;

impl PlacementScorePlugin for NeedsNodes {
    fn name(&self) -> &'static str {
        "NeedsNodes"
    }
    fn score(&self, _: &Snapshot, _: &GroupInfo, a: &PodGroupAssignments) -> Result<i64, Status> {
        assert!(
            a.proposed
                .iter()
                .all(|p| p.node != phalanx_scheduler::framework::UNSPECIFIED_NODE)
        );
        Ok(0)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// The batching cache never changes a decision: the same gangs on the same cluster (large
    /// enough for percentageOfNodesToScore sampling) bind identically with and without it.
    #[test]
    fn batching_cache_is_exact(
        node_cpu in prop::collection::vec(1i64..8, 150..220),
        gangs in prop::collection::vec((1usize..9, 200i64..3000), 1..12),
        most_allocated in any::<bool>(),
    ) {
        let nodes: Vec<Arc<NodeStatic>> = node_cpu.iter().enumerate()
            .map(|(i, c)| Arc::new(NodeStatic::simple(&format!("n{i}"), c * 1000, 1 << 34, &[])))
            .collect();
        let mut config = SchedulerConfig::default();
        if most_allocated { config.scoring_strategy = phalanx_scheduler::config::ScoringStrategy::MostAllocated; }
        let mut cached_snap = Snapshot::new(nodes.clone());
        let mut plain_snap = Snapshot::new(nodes);
        disable_batching(&mut plain_snap);
        let mut cached = Scheduler::new(config.clone());
        let mut plain = Scheduler::new(config);
        for (g, (size, cpu)) in gangs.iter().enumerate() {
            let group = GroupInfo::new("ns", &format!("g{g}"), GroupPolicy::Gang { min_count: *size as u32 });
            let template = PodInfo::simple("ns", "t", *cpu);
            let pods: Vec<Arc<PodInfo>> = (0..*size).map(|i| {
                let mut p = template.clone();
                p.key = phalanx_scheduler::PodKey::new("ns", &format!("g{g}-{i}"));
                p.group_name = Some(format!("g{g}").into());
                Arc::new(p)
            }).collect();
            let entity = QueuedEntity { tree: None, key: EntityKey::Group(group.key.clone()), group: Some(Arc::new(group)), pods, attempts: 0, timestamp: Instant::now() };
            let a = cached.schedule(&mut cached_snap, &entity);
            let b = plain.schedule(&mut plain_snap, &entity);
            prop_assert_eq!(&a.bindings, &b.bindings);
            prop_assert_eq!(&a.failures, &b.failures);
            prop_assert_eq!(b.stats.cached_node_evaluations, 0);
        }
    }
}
