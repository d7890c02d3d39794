//! The volume plugins on the pure core: VolumeBinding (bound volumes' node affinity, matching available volumes,
//! dynamic provisioning, all-or-nothing per gang), VolumeZone, NodeVolumeLimits and VolumeRestrictions.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use common::{GI, NS, Sim, node};
use phalanx_scheduler::model::PodVolume;
use phalanx_scheduler::selectors::{NodeSelectorTerm, Requirement, SelectorOp};
use phalanx_scheduler::volumes::{
    AccessModes, ClaimInfo, ClaimKey, ClassInfo, VolumeAction, VolumeCatalog, VolumeInfo, VolumePhase,
};

const LOCAL: &str = "local";
const FAST: &str = "fast";

fn hostname_affinity(node: &str) -> Option<Vec<NodeSelectorTerm>> {
    Some(vec![NodeSelectorTerm {
        labels: vec![Requirement {
            key: "kubernetes.io/hostname".into(),
            op: SelectorOp::In,
            values: vec![node.into()],
        }],
        fields: vec![],
    }])
}

fn host(name: &str) -> phalanx_scheduler::NodeStatic {
    node(name, 16, &[("kubernetes.io/hostname", name)])
}

fn claim(name: &str, class: &str) -> ClaimInfo {
    ClaimInfo {
        key: ClaimKey::new(NS, name),
        uid: format!("uid-{name}").into(),
        deleting: false,
        volume_name: None,
        bound: false,
        class: class.into(),
        access: AccessModes(AccessModes::RWO),
        request: GI,
        selector: None,
        block: false,
        selected_node: None,
    }
}

fn volume(name: &str, class: &str, on: Option<&str>) -> VolumeInfo {
    VolumeInfo {
        name: name.into(),
        resource_version: "1".into(),
        class: class.into(),
        access: AccessModes(AccessModes::RWO),
        capacity: GI,
        labels: BTreeMap::new(),
        node_affinity: on.and_then(hostname_affinity),
        claim_ref: None,
        phase: VolumePhase::Available,
        csi: None,
        block: false,
        deleting: false,
    }
}

fn bound(mut c: ClaimInfo, mut v: VolumeInfo) -> (ClaimInfo, VolumeInfo) {
    c.volume_name = Some(v.name.clone());
    c.bound = true;
    v.claim_ref = Some((c.key.clone(), c.uid.clone()));
    v.phase = VolumePhase::Bound;
    (c, v)
}

fn catalog(claims: Vec<ClaimInfo>, volumes: Vec<VolumeInfo>) -> VolumeCatalog {
    let mut classes = HashMap::new();
    classes.insert(
        LOCAL.to_string(),
        ClassInfo {
            provisioner: "kubernetes.io/no-provisioner".into(),
            wait_for_first_consumer: true,
            allowed_topologies: None,
        },
    );
    classes.insert(
        FAST.to_string(),
        ClassInfo {
            provisioner: "csi.example.com".into(),
            wait_for_first_consumer: true,
            allowed_topologies: None,
        },
    );
    classes.insert(
        "immediate".to_string(),
        ClassInfo {
            provisioner: "csi.example.com".into(),
            wait_for_first_consumer: false,
            allowed_topologies: None,
        },
    );
    VolumeCatalog {
        claims: claims.into_iter().map(|c| (c.key.clone(), Arc::new(c))).collect(),
        volumes: volumes
            .into_iter()
            .map(|v| (v.name.clone(), Arc::new(v)))
            .collect(),
        classes,
        ..Default::default()
    }
}

fn with_claims(sim: &mut Sim, name: &str, group: Option<&str>, claims: &[&str]) {
    let mut p = Sim::make_pod(name, 1000, group, 100);
    Arc::make_mut(&mut p.spec).volumes = claims
        .iter()
        .map(|c| PodVolume::Claim {
            name: (*c).into(),
            ephemeral: false,
        })
        .collect();
    sim.add_pod(p);
}

fn actions(sim: &Sim) -> Vec<(String, VolumeAction)> {
    sim.decisions
        .iter()
        .flat_map(|d| &d.bindings)
        .flat_map(|b| b.volumes.iter().map(|a| (b.pod.name.to_string(), a.clone())))
        .collect()
}

fn failure(sim: &Sim, pod: &str) -> String {
    sim.failures
        .get(pod)
        .map(|f| f.message.clone())
        .unwrap_or_default()
}

#[test]
fn a_bound_volume_pins_its_pod_to_the_node_it_admits() {
    let mut sim = Sim::new(vec![host("a"), host("b"), host("c")]);
    let (c, v) = bound(claim("data", LOCAL), volume("pv-b", LOCAL, Some("b")));
    sim.snap.set_volumes(Arc::new(catalog(vec![c], vec![v])));
    with_claims(&mut sim, "p", None, &["data"]);
    sim.run();
    assert_eq!(sim.node_of("p").as_deref(), Some("b"));
    assert!(actions(&sim).is_empty(), "a bound claim has nothing to write");
}

#[test]
fn a_gang_takes_one_local_volume_each_and_all_of_them() {
    let mut sim = Sim::new(vec![host("a"), host("b")]);
    let claims = (0..4).map(|i| claim(&format!("c{i}"), LOCAL)).collect();
    let vols = (0..4)
        .map(|i| volume(&format!("pv{i}"), LOCAL, Some(if i < 2 { "a" } else { "b" })))
        .collect();
    sim.snap.set_volumes(Arc::new(catalog(claims, vols)));
    sim.add_group(Sim::gang("g", 4));
    for i in 0..4 {
        with_claims(&mut sim, &format!("p{i}"), Some("g"), &[&format!("c{i}")]);
    }
    sim.run();
    assert!(sim.bound(&["p0", "p1", "p2", "p3"]));
    let acts = actions(&sim);
    assert_eq!(acts.len(), 4, "{acts:?}");
    let mut taken: Vec<String> = Vec::new();
    for (pod, a) in &acts {
        let VolumeAction::Bind { volume, .. } = a else {
            panic!("{a:?}")
        };
        let want = if ["pv0", "pv1"].contains(&&**volume) {
            "a"
        } else {
            "b"
        };
        assert_eq!(sim.node_of(pod).as_deref(), Some(want), "{pod} got {volume}");
        taken.push(volume.to_string());
    }
    taken.sort();
    assert_eq!(taken, ["pv0", "pv1", "pv2", "pv3"], "each pod its own volume");
}

#[test]
fn the_second_gang_gets_nothing_when_only_one_gangs_volumes_exist() {
    let mut sim = Sim::new(vec![host("a"), host("b")]);
    let claims = (0..4).map(|i| claim(&format!("c{i}"), LOCAL)).collect();
    let vols = (0..2)
        .map(|i| volume(&format!("pv{i}"), LOCAL, Some("a")))
        .collect();
    sim.snap.set_volumes(Arc::new(catalog(claims, vols)));
    sim.add_group(Sim::gang("g1", 2));
    sim.add_group(Sim::gang("g2", 2));
    with_claims(&mut sim, "x0", Some("g1"), &["c0"]);
    with_claims(&mut sim, "x1", Some("g1"), &["c1"]);
    with_claims(&mut sim, "y0", Some("g2"), &["c2"]);
    with_claims(&mut sim, "y1", Some("g2"), &["c3"]);
    sim.run();
    let (whole, empty) = if sim.bound(&["x0", "x1"]) {
        (["x0", "x1"], ["y0", "y1"])
    } else {
        (["y0", "y1"], ["x0", "x1"])
    };
    assert!(sim.bound(&whole), "one gang is whole");
    assert!(sim.unbound(&empty), "the other has no pod bound");
    assert_eq!(actions(&sim).len(), 2, "only the whole gang took volumes");
    assert!(
        failure(&sim, empty[0]).contains("node(s) didn't find available persistent volumes to bind"),
        "{}",
        failure(&sim, empty[0])
    );
}

#[test]
fn a_failed_gang_leaves_no_volume_choice_behind() {
    // Three members, volumes for two: the cycle assumes two and reverts them.
    let mut sim = Sim::new(vec![host("a")]);
    let claims = (0..3).map(|i| claim(&format!("c{i}"), LOCAL)).collect();
    let vols = (0..2)
        .map(|i| volume(&format!("pv{i}"), LOCAL, Some("a")))
        .collect();
    sim.snap.set_volumes(Arc::new(catalog(claims, vols)));
    sim.add_group(Sim::gang("g", 3));
    for i in 0..3 {
        with_claims(&mut sim, &format!("p{i}"), Some("g"), &[&format!("c{i}")]);
    }
    sim.run();
    assert!(sim.unbound(&["p0", "p1", "p2"]));
    assert!(
        sim.snap.volume_overlay().is_empty(),
        "{:?}",
        sim.snap.volume_overlay()
    );
}

#[test]
fn dynamic_provisioning_selects_the_chosen_node_and_respects_allowed_topologies() {
    let mut sim = Sim::new(vec![
        node("a", 16, &[("zone", "z1")]),
        node("b", 16, &[("zone", "z2")]),
    ]);
    let mut cat = catalog(vec![claim("c", FAST)], vec![]);
    cat.classes.get_mut(FAST).unwrap().allowed_topologies = Some(vec![NodeSelectorTerm {
        labels: vec![Requirement {
            key: "zone".into(),
            op: SelectorOp::In,
            values: vec!["z2".into()],
        }],
        fields: vec![],
    }]);
    sim.snap.set_volumes(Arc::new(cat));
    with_claims(&mut sim, "p", None, &["c"]);
    sim.run();
    assert_eq!(sim.node_of("p").as_deref(), Some("b"));
    let acts = actions(&sim);
    assert!(
        matches!(&acts[..], [(_, VolumeAction::Provision { node, .. })] if &**node == "b"),
        "{acts:?}"
    );
}

#[test]
fn capacity_tracking_keeps_a_claim_off_nodes_without_room() {
    use phalanx_scheduler::selectors::LabelSelector;
    let mut sim = Sim::new(vec![
        node("a", 16, &[("zone", "z1")]),
        node("b", 16, &[("zone", "z2")]),
    ]);
    let mut cat = catalog(vec![claim("c", FAST)], vec![]);
    cat.capacity_drivers.insert("csi.example.com".into());
    let seg = |zone: &str, limit: i64| phalanx_scheduler::volumes::CapacityInfo {
        class: FAST.into(),
        node_topology: LabelSelector {
            requirements: vec![Requirement {
                key: "zone".into(),
                op: SelectorOp::In,
                values: vec![zone.into()],
            }],
            nothing: false,
        },
        limit,
    };
    cat.capacities = vec![seg("z1", GI / 2), seg("z2", 2 * GI)];
    sim.snap.set_volumes(Arc::new(cat));
    with_claims(&mut sim, "p", None, &["c"]);
    sim.run();
    assert_eq!(sim.node_of("p").as_deref(), Some("b"));
}

#[test]
fn an_unbound_immediate_claim_waits_with_upstreams_reason() {
    let mut sim = Sim::new(vec![host("a")]);
    sim.snap
        .set_volumes(Arc::new(catalog(vec![claim("c", "immediate")], vec![])));
    with_claims(&mut sim, "p", None, &["c"]);
    sim.run();
    assert!(sim.unbound(&["p"]));
    assert!(
        failure(&sim, "p").contains("pod has unbound immediate PersistentVolumeClaims"),
        "{}",
        failure(&sim, "p")
    );
}

/// Upstream `GetPodVolumeClaims` (`volumebinding/binder.go`): a claim with `spec.volumeName` that is not fully
/// bound is an unbound immediate claim, whatever its class's binding mode; the PV controller finishes it, the
/// scheduler writes nothing. Before, a WaitForFirstConsumer claim pre-bound to an available volume got a
/// `claimRef` written by the scheduler.
#[test]
fn a_pre_bound_claim_waits_for_the_pv_controller_like_an_immediate_one() {
    let mut sim = Sim::new(vec![host("a")]);
    let mut c = claim("c", LOCAL);
    c.volume_name = Some("pv-a".into());
    sim.snap
        .set_volumes(Arc::new(catalog(vec![c], vec![volume("pv-a", LOCAL, Some("a"))])));
    with_claims(&mut sim, "p", None, &["c"]);
    sim.run();
    assert!(sim.unbound(&["p"]), "placed on {:?}", sim.node_of("p"));
    assert!(actions(&sim).is_empty(), "{:?}", actions(&sim));
    assert!(
        failure(&sim, "p").contains("pod has unbound immediate PersistentVolumeClaims"),
        "{}",
        failure(&sim, "p")
    );
}

/// Upstream `FindPodVolumes`: a claim pinned by `volume.kubernetes.io/selected-node` goes through
/// `checkVolumeProvisions` on its node too, so a class that cannot provision keeps the pod off every node.
#[test]
fn a_pinned_claim_of_a_class_without_provisioner_fits_no_node() {
    let mut sim = Sim::new(vec![host("a")]);
    let mut c = claim("c", LOCAL);
    c.selected_node = Some("a".into());
    sim.snap.set_volumes(Arc::new(catalog(vec![c], vec![])));
    with_claims(&mut sim, "p", None, &["c"]);
    sim.run();
    assert!(sim.unbound(&["p"]), "placed on {:?}", sim.node_of("p"));
    assert!(
        failure(&sim, "p").contains("didn't find available persistent volumes to bind"),
        "{}",
        failure(&sim, "p")
    );
}

#[test]
fn a_missing_claim_is_named() {
    let mut sim = Sim::new(vec![host("a")]);
    sim.snap.set_volumes(Arc::new(catalog(vec![], vec![])));
    with_claims(&mut sim, "p", None, &["nope"]);
    sim.run();
    assert!(
        failure(&sim, "p").contains("persistentvolumeclaim \"nope\" not found"),
        "{}",
        failure(&sim, "p")
    );
}

#[test]
fn a_read_write_once_pod_claim_in_use_keeps_the_second_pod_pending() {
    let mut sim = Sim::new(vec![host("a"), host("b")]);
    let (mut c, mut v) = bound(claim("solo", LOCAL), volume("pv", LOCAL, None));
    c.access = AccessModes(AccessModes::RWOP);
    v.access = AccessModes(AccessModes::RWOP);
    sim.snap.set_volumes(Arc::new(catalog(vec![c], vec![v])));
    with_claims(&mut sim, "first", None, &["solo"]);
    sim.run();
    assert!(sim.bound(&["first"]));
    with_claims(&mut sim, "second", None, &["solo"]);
    sim.run();
    assert!(sim.unbound(&["second"]));
    assert!(
        failure(&sim, "second").contains(
            "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
        ),
        "{}",
        failure(&sim, "second")
    );
}

#[test]
fn a_csi_attach_limit_keeps_a_third_volume_off_the_node() {
    let mut sim = Sim::new(vec![host("a"), host("b")]);
    let mut claims = Vec::new();
    let mut vols = Vec::new();
    for i in 0..3 {
        let mut v = volume(&format!("pv{i}"), FAST, None);
        v.csi = Some(("csi.example.com".into(), format!("h{i}").into()));
        let (c, v) = bound(claim(&format!("c{i}"), FAST), v);
        claims.push(c);
        vols.push(v);
    }
    let mut cat = catalog(claims, vols);
    cat.csi_limits
        .insert("a".into(), HashMap::from([("csi.example.com".to_string(), 2)]));
    cat.csi_limits
        .insert("b".into(), HashMap::from([("csi.example.com".to_string(), 0)]));
    sim.snap.set_volumes(Arc::new(cat));
    with_claims(&mut sim, "p0", None, &["c0"]);
    with_claims(&mut sim, "p1", None, &["c1"]);
    sim.run();
    assert_eq!(sim.node_of("p0").as_deref(), Some("a"));
    assert_eq!(sim.node_of("p1").as_deref(), Some("a"));
    with_claims(&mut sim, "p2", None, &["c2"]);
    sim.run();
    assert!(sim.unbound(&["p2"]));
    assert!(
        failure(&sim, "p2").contains("node(s) exceed max volume count"),
        "{}",
        failure(&sim, "p2")
    );
}

#[test]
fn a_zonal_volume_keeps_its_pod_in_its_zone() {
    let zone = "topology.kubernetes.io/zone";
    let mut sim = Sim::new(vec![
        node("a", 16, &[(zone, "z1")]),
        node("b", 16, &[(zone, "z2")]),
    ]);
    let mut v = volume("pv", FAST, None);
    v.labels.insert(zone.into(), "z2".into());
    let (c, v) = bound(claim("c", FAST), v);
    sim.snap.set_volumes(Arc::new(catalog(vec![c], vec![v])));
    with_claims(&mut sim, "p", None, &["c"]);
    sim.run();
    assert_eq!(sim.node_of("p").as_deref(), Some("b"));
}

#[test]
fn a_rack_constrained_gang_goes_to_the_rack_with_its_volumes() {
    let rack = |n: &str, r: &str| node(n, 16, &[("kubernetes.io/hostname", n), ("rack", r)]);
    let mut sim = Sim::new(vec![
        rack("a1", "r1"),
        rack("a2", "r1"),
        rack("b1", "r2"),
        rack("b2", "r2"),
    ]);
    let claims = (0..2).map(|i| claim(&format!("c{i}"), LOCAL)).collect();
    let vols = vec![volume("pv0", LOCAL, Some("b1")), volume("pv1", LOCAL, Some("b2"))];
    sim.snap.set_volumes(Arc::new(catalog(claims, vols)));
    sim.add_group(Sim::gang_topo("g", 2, "rack"));
    with_claims(&mut sim, "p0", Some("g"), &["c0"]);
    with_claims(&mut sim, "p1", Some("g"), &["c1"]);
    sim.run();
    assert!(sim.bound(&["p0", "p1"]));
    assert_eq!(sim.label_of("p0", "rack").as_deref(), Some("r2"));
    assert_eq!(sim.label_of("p1", "rack").as_deref(), Some("r2"));
}

#[test]
fn the_group_message_names_the_claim_that_keeps_it_out_of_the_closest_domain() {
    let rack = |n: &str, r: &str| node(n, 16, &[("kubernetes.io/hostname", n), ("rack", r)]);
    let mut sim = Sim::new(vec![rack("a1", "r1"), rack("b1", "r2")]);
    let claims = (0..2).map(|i| claim(&format!("c{i}"), LOCAL)).collect();
    let vols = vec![volume("pv0", LOCAL, Some("b1"))];
    sim.snap.set_volumes(Arc::new(catalog(claims, vols)));
    sim.add_group(Sim::gang_topo("g", 2, "rack"));
    with_claims(&mut sim, "p0", Some("g"), &["c0"]);
    with_claims(&mut sim, "p1", Some("g"), &["c1"]);
    sim.run();
    assert!(sim.unbound(&["p0", "p1"]));
    let (status, _, msg) = sim.condition("g").expect("a condition");
    assert!(!status);
    assert!(
        msg.contains("closest domain rack=r2 (1 of 2 pods fit); in it, pod p1: claim ns/c1: node(s) didn't find available persistent volumes to bind"),
        "{msg}"
    );
}
