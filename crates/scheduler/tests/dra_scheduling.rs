//! DynamicResources on the pure core: gangs whose pods claim devices get all of them or none, claims shared by
//! several pods are allocated once, the joint allocation undoes a greedy first member (k/k#138765), claims not
//! created yet hold the pod at PreEnqueue, and preemption counts a victim's devices as freed.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use common::{NS, Sim, node};
use phalanx_scheduler::dra::{
    Allocated, AllocationMode, AttributeValue, ClaimRequests, ClaimWrite, Consumer, Device, DeviceCatalog,
    DeviceId, DeviceRequest, DeviceSelector, ResourceClaimInfo,
};
use phalanx_scheduler::model::{PodClaimSource, PodKey, PodResourceClaim};
use phalanx_scheduler::volumes::ClaimKey;
use phalanx_scheduler::{GateReason, PodInfo};

const DRIVER: &str = "gpu.example.com";

fn gpu(node: &str, i: usize, model: &str) -> Device {
    Device::new(DeviceId::new(DRIVER, node, &format!("gpu-{i}")))
        .with_attribute("model", AttributeValue::String(model.into()))
}

fn model_is(model: &'static str) -> DeviceSelector {
    DeviceSelector::new(&format!("model == {model}"), move |d| {
        Ok(
            matches!(d.attributes.get(&*format!("{DRIVER}/model")), Some(AttributeValue::String(m)) if &**m == model),
        )
    })
}

fn claim(name: &str, count: u32, selectors: Vec<DeviceSelector>) -> ResourceClaimInfo {
    ResourceClaimInfo {
        key: ClaimKey::new(NS, name),
        uid: format!("uid-{name}").into(),
        resource_version: "1".into(),
        deleting: false,
        requests: Ok(ClaimRequests {
            name: format!("{NS}/{name}").into(),
            requests: vec![DeviceRequest {
                name: "gpu".into(),
                class: DRIVER.into(),
                selectors,
                mode: AllocationMode::ExactCount(count),
                admin_access: false,
            }],
            constraints: Vec::new(),
        }),
        allocation: None,
        reserved_for: Vec::new(),
    }
}

/// Nodes `a`, `b`, … with `per_node[i]` devices each (model "a100").
fn catalog(per_node: &[usize], claims: Vec<ResourceClaimInfo>) -> DeviceCatalog {
    let mut cat = DeviceCatalog {
        served: true,
        revision: 1,
        ..DeviceCatalog::default()
    };
    for (i, n) in per_node.iter().enumerate() {
        let name = node_name(i);
        Arc::make_mut(&mut cat.node_devices).insert(
            name.as_str().into(),
            (0..*n).map(|d| Arc::new(gpu(&name, d, "a100"))).collect(),
        );
    }
    for c in claims {
        cat.claims.insert(c.key.clone(), Arc::new(c));
    }
    cat
}

fn node_name(i: usize) -> String {
    ((b'a' + i as u8) as char).to_string()
}

fn sim(nodes: usize) -> Sim {
    Sim::new((0..nodes).map(|i| node(&node_name(i), 64, &[])).collect())
}

fn pod_with(name: &str, group: Option<&str>, claims: &[&str]) -> PodInfo {
    let mut p = Sim::make_pod(name, 100, group, 100);
    Arc::make_mut(&mut p.spec).resource_claims = claims
        .iter()
        .map(|c| PodResourceClaim {
            name: (*c).into(),
            source: PodClaimSource::Claim((*c).into()),
        })
        .collect();
    p
}

fn writes(sim: &Sim) -> Vec<(String, ClaimWrite)> {
    sim.decisions
        .iter()
        .flat_map(|d| &d.bindings)
        .flat_map(|b| b.devices.iter().map(|w| (b.pod.name.to_string(), w.clone())))
        .collect()
}

fn failure(sim: &Sim, pod: &str) -> String {
    sim.failures
        .get(pod)
        .map(|f| f.message.clone())
        .unwrap_or_default()
}

#[test]
fn a_gang_of_four_gets_two_devices_each_on_its_pods_nodes_and_no_device_twice() {
    let mut sim = sim(2);
    let claims = (0..4).map(|i| claim(&format!("c{i}"), 2, vec![])).collect();
    sim.snap.set_devices(Arc::new(catalog(&[4, 4], claims)));
    sim.add_group(Sim::gang("g", 4));
    for i in 0..4 {
        sim.add_pod(pod_with(&format!("p{i}"), Some("g"), &[&format!("c{i}")]));
    }
    sim.run();
    assert!(sim.bound(&["p0", "p1", "p2", "p3"]));
    let w = writes(&sim);
    assert_eq!(w.len(), 4, "{w:?}");
    let mut seen = HashSet::new();
    for (pod, write) in &w {
        let a = write.allocation.as_ref().expect("allocated in this cycle");
        assert_eq!(a.devices.len(), 2);
        let node = sim.node_of(pod).unwrap();
        assert_eq!(a.node.as_deref(), Some(node.as_str()), "node-local allocation");
        for (req, d, admin) in &a.devices {
            assert_eq!(&**req, "gpu");
            assert!(!admin);
            assert_eq!(&*d.pool, node.as_str(), "{pod} on {node} got {d}");
            assert!(seen.insert(d.clone()), "{d} given twice");
        }
    }
}

#[test]
fn a_gang_short_of_one_device_binds_nothing_and_allocates_nothing() {
    let mut sim = sim(2);
    let claims = (0..4).map(|i| claim(&format!("c{i}"), 2, vec![])).collect();
    sim.snap.set_devices(Arc::new(catalog(&[4, 3], claims)));
    sim.add_group(Sim::gang("g", 4));
    for i in 0..4 {
        sim.add_pod(pod_with(&format!("p{i}"), Some("g"), &[&format!("c{i}")]));
    }
    sim.run();
    assert!(sim.unbound(&["p0", "p1", "p2", "p3"]));
    assert!(writes(&sim).is_empty());
    assert!(
        sim.snap.device_overlay().is_empty(),
        "the failed placement reverted every allocation"
    );
    let (status, _, message) = sim.condition("g").expect("group condition");
    assert!(!status);
    assert!(message.contains("cannot allocate all claims"), "{message}");
}

#[test]
fn of_two_competing_gangs_one_is_whole_and_the_other_untouched() {
    let mut sim = sim(1);
    let claims = (0..4).map(|i| claim(&format!("c{i}"), 2, vec![])).collect();
    sim.snap.set_devices(Arc::new(catalog(&[4], claims)));
    sim.add_group(Sim::gang("g1", 2));
    sim.add_group(Sim::gang("g2", 2));
    sim.add_pod(pod_with("x0", Some("g1"), &["c0"]));
    sim.add_pod(pod_with("x1", Some("g1"), &["c1"]));
    sim.add_pod(pod_with("y0", Some("g2"), &["c2"]));
    sim.add_pod(pod_with("y1", Some("g2"), &["c3"]));
    sim.run();
    let (whole, other) = if sim.bound(&["x0", "x1"]) {
        (["x0", "x1"], ["y0", "y1"])
    } else {
        (["y0", "y1"], ["x0", "x1"])
    };
    assert!(sim.bound(&whole));
    assert!(sim.unbound(&other));
    assert_eq!(writes(&sim).len(), 2, "only the whole gang's claims are written");
    assert!(
        failure(&sim, other[0]).contains("cannot allocate all claims"),
        "{}",
        failure(&sim, other[0])
    );
}

#[test]
fn a_later_member_moves_an_earlier_one_to_another_device_instead_of_failing() {
    // k/k#138765: p0 accepts any device, p1 only the h100. First fit gives p0 the h100 (it comes first) and
    // strands p1; the joint allocation on the node moves p0 to the a100.
    let mut sim = sim(1);
    let mut cat = catalog(
        &[0],
        vec![claim("any", 1, vec![]), claim("h100", 1, vec![model_is("h100")])],
    );
    Arc::make_mut(&mut cat.node_devices).insert(
        "a".into(),
        vec![Arc::new(gpu("a", 0, "h100")), Arc::new(gpu("a", 1, "a100"))],
    );
    sim.snap.set_devices(Arc::new(cat));
    sim.add_group(Sim::gang("g", 2));
    sim.add_pod(pod_with("p0", Some("g"), &["any"]));
    sim.add_pod(pod_with("p1", Some("g"), &["h100"]));
    sim.run();
    assert!(sim.bound(&["p0", "p1"]), "{}", failure(&sim, "p0"));
    let w = writes(&sim);
    let device_of = |claim: &str| {
        w.iter()
            .find(|(_, x)| &*x.claim.name == claim)
            .and_then(|(_, x)| x.allocation.as_ref())
            .map(|a| a.devices[0].1.device.to_string())
    };
    assert_eq!(device_of("h100").as_deref(), Some("gpu-0"));
    assert_eq!(device_of("any").as_deref(), Some("gpu-1"));
}

#[test]
fn a_claim_shared_by_three_pods_is_allocated_once_and_reserved_for_each() {
    let mut sim = sim(2);
    sim.snap
        .set_devices(Arc::new(catalog(&[1, 1], vec![claim("shared", 1, vec![])])));
    sim.add_group(Sim::gang("g", 3));
    for i in 0..3 {
        sim.add_pod(pod_with(&format!("p{i}"), Some("g"), &["shared"]));
    }
    sim.run();
    assert!(sim.bound(&["p0", "p1", "p2"]));
    let nodes: HashSet<String> = (0..3).map(|i| sim.node_of(&format!("p{i}")).unwrap()).collect();
    assert_eq!(
        nodes.len(),
        1,
        "a node-local device keeps its users on its node: {nodes:?}"
    );
    let w = writes(&sim);
    assert_eq!(
        w.len(),
        3,
        "one write per pod (PreBind merges them into one per claim)"
    );
    let allocations: HashSet<_> = w
        .iter()
        .filter_map(|(_, x)| x.allocation.clone())
        .map(|a| a.devices)
        .collect();
    assert_eq!(allocations.len(), 1, "one allocation: {allocations:?}");
}

#[test]
fn an_allocated_claim_keeps_its_pod_on_the_node_it_was_allocated_for() {
    let mut sim = sim(3);
    let mut c = claim("done", 1, vec![]);
    c.allocation = Some(Allocated {
        devices: vec![("gpu".into(), DeviceId::new(DRIVER, "c", "gpu-0"), false)],
        node_selector: Some(vec![phalanx_scheduler::selectors::NodeSelectorTerm::node_name(
            "c",
        )]),
    });
    sim.snap.set_devices(Arc::new(catalog(&[1, 1, 1], vec![c])));
    sim.add_pod(pod_with("p", None, &["done"]));
    sim.run();
    assert_eq!(sim.node_of("p").as_deref(), Some("c"));
    let w = writes(&sim);
    assert_eq!(w.len(), 1, "the reservation is still to write");
    assert!(w[0].1.allocation.is_none(), "the allocation is not written again");
}

#[test]
fn a_missing_claim_or_dra_not_served_says_so() {
    let mut sim = sim(1);
    sim.snap.set_devices(Arc::new(catalog(&[1], vec![])));
    sim.add_pod(pod_with("p", None, &["nope"]));
    sim.run();
    assert!(sim.unbound(&["p"]));
    assert!(
        failure(&sim, "p").contains("resourceclaim.resource.k8s.io \"nope\" not found"),
        "{}",
        failure(&sim, "p")
    );

    let mut sim = sim_without_dra();
    sim.add_pod(pod_with("q", None, &["c"]));
    sim.run();
    assert!(
        failure(&sim, "q").contains("resource.k8s.io/v1 is not served"),
        "{}",
        failure(&sim, "q")
    );
}

fn sim_without_dra() -> Sim {
    let mut s = sim(1);
    s.snap.set_devices(Arc::new(DeviceCatalog::default()));
    s
}

#[test]
fn a_claim_not_created_yet_holds_the_pod_at_pre_enqueue() {
    let mut sim = sim(1);
    sim.snap.set_devices(Arc::new(catalog(&[1], vec![])));
    let mut p = Sim::make_pod("p", 100, Some("g"), 100);
    Arc::make_mut(&mut p.spec).resource_claims = vec![PodResourceClaim {
        name: "gpu".into(),
        source: PodClaimSource::NotCreated {
            template: Some("one".into()),
        },
    }];
    sim.add_group(Sim::gang("g", 1));
    sim.add_pod(p);
    sim.run();
    assert!(sim.unbound(&["p"]));
    let gate = sim.gate("g").expect("held");
    assert_eq!(gate.reason, GateReason::WaitingForResourceClaim);
    assert_eq!(gate.pod_message, "pod \"ns/p\": ResourceClaim not created yet");
}

fn preempt_for_devices(known_holder: bool) -> Vec<String> {
    // Node a has 2 devices, both allocated to the claim of a low-priority pod running there. A high-priority
    // pod whose claim needs both can only fit if preemption frees them.
    let mut sim = sim(1);
    sim.sched.enable_default_preemption();
    let mut held = claim("low-claim", 2, vec![]);
    held.allocation = Some(Allocated {
        devices: (0..2)
            .map(|i| {
                (
                    "gpu".into(),
                    DeviceId::new(DRIVER, "a", &format!("gpu-{i}")),
                    false,
                )
            })
            .collect(),
        node_selector: None,
    });
    held.reserved_for = vec![Consumer {
        api_group: "".into(),
        resource: "pods".into(),
        name: "low".into(),
        uid: "uid-low".into(),
    }];
    let mut cat = catalog(&[2], vec![held, claim("high-claim", 2, vec![])]);
    for i in 0..2 {
        cat.allocated.insert(
            DeviceId::new(DRIVER, "a", &format!("gpu-{i}")),
            ClaimKey::new(NS, "low-claim"),
        );
    }
    if known_holder {
        cat.holders.insert(
            ClaimKey::new(NS, "low-claim"),
            vec![(PodKey::new(NS, "low"), "a".into())],
        );
    }
    sim.snap.set_devices(Arc::new(cat));
    sim.add_assigned("low", 100, "a", 1);
    let mut high = pod_with("high", None, &["high-claim"]);
    high.priority = 1000;
    sim.add_pod(high);
    sim.run_ready();
    let victims: Vec<String> = sim
        .decisions
        .iter()
        .flat_map(|d| &d.victims)
        .map(|v| v.pod.name.to_string())
        .collect();
    victims
}

#[test]
fn preemption_counts_a_victims_devices_as_freed() {
    assert_eq!(preempt_for_devices(true), ["low"]);
}

#[test]
fn devices_held_for_a_consumer_the_runtime_does_not_know_are_not_counted_as_freed() {
    // A claim reserved for a pod that is gone (kube-controller-manager has not deallocated it yet) keeps its
    // devices: evicting the pods on the node would free nothing.
    assert!(preempt_for_devices(false).is_empty());
}

/// Nodes a, b in rack r1 and c, d in rack r2, with `per_node` devices each.
fn racks(per_node: &[usize; 4], claims: usize) -> Sim {
    let labels = [("rack", "r1"), ("rack", "r1"), ("rack", "r2"), ("rack", "r2")];
    let mut sim = Sim::new((0..4).map(|i| node(&node_name(i), 64, &[labels[i]])).collect());
    let claims = (0..claims).map(|i| claim(&format!("c{i}"), 2, vec![])).collect();
    sim.snap.set_devices(Arc::new(catalog(per_node, claims)));
    sim.add_group(Sim::gang_topo("g", 4, "rack"));
    for i in 0..4 {
        sim.add_pod(pod_with(&format!("p{i}"), Some("g"), &[&format!("c{i}")]));
    }
    sim
}

#[test]
fn a_rack_constrained_gang_counts_only_racks_where_its_devices_fit() {
    // r1 has 2 + 2 devices (room for two pods), r2 has 4 + 4: the gang goes to r2 whole.
    let mut sim = racks(&[2, 2, 4, 4], 4);
    sim.run();
    assert!(sim.bound(&["p0", "p1", "p2", "p3"]), "{}", failure(&sim, "p0"));
    for i in 0..4 {
        assert_eq!(sim.label_of(&format!("p{i}"), "rack").as_deref(), Some("r2"));
    }
}

#[test]
fn a_gang_that_fits_no_rack_names_the_device_class_it_is_short_of_in_the_closest_one() {
    // r1: 3 + 3 devices (three pods of two), r2: 2 + 0 (one pod). Closest is r1, with 6 of the 8 devices.
    let mut sim = racks(&[3, 3, 2, 0], 4);
    sim.run();
    assert!(sim.unbound(&["p0", "p1", "p2", "p3"]));
    let (_, _, message) = sim.condition("g").expect("condition");
    assert!(message.contains("rack=r1"), "{message}");
    assert!(
        message.contains("8 devices of class gpu.example.com wanted, 6 free"),
        "{message}"
    );
}

/// Upstream's `ResourceClaimReservedForMaxSize`: a shared claim reserved for 255 pods takes one more consumer,
/// and a gang of 2 more members cannot both reserve it in one cycle (neither binds).
#[test]
fn a_shared_claim_with_a_full_reserved_for_takes_no_new_pod() {
    let full = |n: usize| {
        let mut c = claim("shared", 1, vec![]);
        c.allocation = Some(Allocated {
            devices: vec![("gpu".into(), DeviceId::new(DRIVER, "a", "gpu-0"), false)],
            node_selector: Some(vec![phalanx_scheduler::selectors::NodeSelectorTerm::node_name(
                "a",
            )]),
        });
        c.reserved_for = (0..n)
            .map(|i| Consumer {
                api_group: "".into(),
                resource: "pods".into(),
                name: format!("old-{i}").into(),
                uid: format!("uid-old-{i}").into(),
            })
            .collect();
        c
    };
    let mut sim = sim(1);
    sim.snap.set_devices(Arc::new(catalog(&[1], vec![full(255)])));
    sim.add_pod(pod_with("p", None, &["shared"]));
    sim.run();
    assert!(
        sim.bound(&["p"]),
        "the 256th consumer fits: {}",
        failure(&sim, "p")
    );

    let mut sim = sim_gang_of_two(full(255));
    sim.run();
    assert!(sim.unbound(&["g0", "g1"]), "257 consumers: nothing binds");
    assert!(
        failure(&sim, "g1").contains("resourceclaim in use"),
        "{}",
        failure(&sim, "g1")
    );

    let mut sim = sim_gang_of_two(full(256));
    sim.run();
    assert!(sim.unbound(&["g0", "g1"]));
    assert!(
        failure(&sim, "g0").contains("resourceclaim in use"),
        "{}",
        failure(&sim, "g0")
    );
}

fn sim_gang_of_two(c: ResourceClaimInfo) -> Sim {
    let mut sim = sim(1);
    sim.snap.set_devices(Arc::new(catalog(&[1], vec![c])));
    sim.add_group(Sim::gang("g", 2));
    for i in 0..2 {
        sim.add_pod(pod_with(&format!("g{i}"), Some("g"), &["shared"]));
    }
    sim
}

/// A class whose selector is over `CELSelectorExpressionMaxCost` (a million iterations of nested `all()` over
/// literal lists) is refused when the catalog is built, and the claim's pod says which claim and request.
#[test]
fn a_selector_over_the_cost_limit_stops_the_pod_naming_the_claim_and_the_request() {
    use k8s_openapi::api::resource::v1 as api;
    let list = format!(
        "[{}]",
        (0..100).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
    );
    let costly = format!("{list}.all(a, {list}.all(b, {list}.all(c, a + b + c >= 0)))");
    let class: api::DeviceClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "costly.example.com"},
        "spec": {"selectors": [{"cel": {"expression": costly}}]},
    }))
    .expect("a DeviceClass");
    let claim: api::ResourceClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "c", "namespace": NS, "uid": "uid-c", "resourceVersion": "1"},
        "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "costly.example.com"}},
        ]}},
    }))
    .expect("a ResourceClaim");
    let (converted, problems) =
        phalanx_scheduler::convert::device_catalog([&class], [], [&claim], |_: &PodKey, _: &str| None);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("DeviceClass costly.example.com")
                && p.contains("CELSelectorExpressionMaxCost")),
        "{problems:?}"
    );
    let mut cat = catalog(&[1], vec![]);
    cat.claims = converted.claims;
    let mut sim = sim(1);
    sim.snap.set_devices(Arc::new(cat));
    sim.add_pod(pod_with("p", None, &["c"]));
    sim.run();
    assert!(sim.unbound(&["p"]));
    let message = failure(&sim, "p");
    assert!(
        message.contains(&format!("claim {NS}/c: request gpu"))
            && message.contains("exceeds the limit 1000000 (CELSelectorExpressionMaxCost)"),
        "{message}"
    );
}

/// A selector that takes 5 ms a device, on 200 devices, is a second of allocation; with a 1 ms DRA filter
/// timeout the cycle gives up after the first device instead, and the pod says it timed out.
#[test]
fn device_allocation_past_the_filter_timeout_is_unschedulable_naming_the_timeout() {
    let slow = DeviceSelector::new("slow", |_| {
        std::thread::sleep(std::time::Duration::from_millis(5));
        Ok(true)
    });
    let mut cat = catalog(&[200], vec![claim("c", 1, vec![slow])]);
    cat.filter_timeout = std::time::Duration::from_millis(1);
    let mut sim = sim(1);
    sim.snap.set_devices(Arc::new(cat));
    sim.add_pod(pod_with("p", None, &["c"]));
    let started = std::time::Instant::now();
    sim.run();
    let took = started.elapsed();
    assert!(sim.unbound(&["p"]));
    let message = failure(&sim, "p");
    assert!(
        message.contains("timed out trying to allocate devices") && message.contains("1ms"),
        "{message}"
    );
    assert!(
        took < std::time::Duration::from_millis(500),
        "the cycle took {took:?}"
    );
}

/// The runtime keeps a `DeviceSide` while no DeviceClass or ResourceSlice changes: two catalogs made from it share
/// their devices (the device summary's index is kept per devices map), a claim at the resourceVersion it had is
/// not converted again, one at a new version is (with its new allocation), and a claim gone is gone.
#[test]
fn a_kept_device_side_shares_its_devices_and_converts_only_the_claims_that_changed() {
    use k8s_openapi::api::resource::v1 as api;
    use phalanx_scheduler::convert::DeviceSide;
    use serde_json::json;
    let class: api::DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": "gpu.example.com", "resourceVersion": "1"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == \"gpu.example.com\""}}]},
    }))
    .expect("a DeviceClass");
    let slice: api::ResourceSlice = serde_json::from_value(json!({
        "metadata": {"name": "n0", "resourceVersion": "1"},
        "spec": {"driver": "gpu.example.com", "nodeName": "n0",
                 "pool": {"name": "n0", "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]},
    }))
    .expect("a ResourceSlice");
    let claim = |name: &str, rv: &str, allocated: bool| -> api::ResourceClaim {
        let mut v = json!({
            "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "resourceVersion": rv},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}},
            ]}},
        });
        if allocated {
            v["status"] = json!({"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": "gpu.example.com", "pool": "n0", "device": "gpu-0"},
            ]}}});
        }
        serde_json::from_value(v).expect("a ResourceClaim")
    };
    let (a, b) = (claim("a", "1", false), claim("b", "1", false));
    let none = |_: &PodKey, _: &str| None;
    let mut side = DeviceSide::build([&class], [&slice]);
    assert!(side.problems.is_empty(), "{:?}", side.problems);
    let one = side.catalog([&a, &b], none);
    let b2 = claim("b", "2", true);
    let two = side.catalog([&a, &b2], none);
    let (ka, kb) = (ClaimKey::new(NS, "a"), ClaimKey::new(NS, "b"));
    assert!(Arc::ptr_eq(&one.node_devices, &two.node_devices));
    assert_eq!(two.node_devices["n0"].len(), 2);
    assert!(
        Arc::ptr_eq(&one.claims[&ka], &two.claims[&ka]),
        "a was converted again"
    );
    assert!(
        !Arc::ptr_eq(&one.claims[&kb], &two.claims[&kb]),
        "b's new version was not read"
    );
    assert!(one.claims[&kb].allocation.is_none() && two.claims[&kb].allocation.is_some());
    assert_eq!(
        two.allocated
            .get(&DeviceId::new("gpu.example.com", "n0", "gpu-0")),
        Some(&kb)
    );
    let three = side.catalog([&b2], none);
    assert!(!three.claims.contains_key(&ka) && three.claims.contains_key(&kb));
    // The same objects through `device_catalog`, which keeps nothing, give the same claims and allocations.
    let (fresh, _) = phalanx_scheduler::convert::device_catalog([&class], [&slice], [&a, &b2], none);
    assert_eq!(fresh.allocated, two.allocated);
    assert_eq!(fresh.claims.len(), two.claims.len());
}

/// [`DeviceSide::catalog`] makes each catalog from the last one, entering only the claims that changed: after any
/// sequence of claims created, changed, deleted and recreated under their names (a new uid), and pods moving, its
/// catalog has the claims, allocated devices and holders that a catalog made from nothing has.
#[test]
fn a_catalog_made_from_the_last_is_the_one_made_afresh() {
    use k8s_openapi::api::resource::v1 as api;
    use phalanx_scheduler::convert::{DeviceSide, device_catalog};
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    use serde_json::json;
    use std::collections::BTreeMap;
    let class: api::DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": DRIVER, "resourceVersion": "1"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == \"gpu.example.com\""}}]},
    }))
    .expect("a DeviceClass");
    let slice: api::ResourceSlice = serde_json::from_value(json!({
        "metadata": {"name": "n0", "resourceVersion": "1"},
        "spec": {"driver": DRIVER, "nodeName": "n0", "pool": {"name": "n0", "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}, {"name": "gpu-2"}]},
    }))
    .expect("a ResourceSlice");
    // A claim's content follows from its uid generation and resourceVersion, as on a real API server (a change
    // bumps the version): device `(u + v) % 4` (3: not allocated), reserved for the pods of the bits of
    // `(3v + u) % 8`; version 0 is a claim without a resourceVersion.
    let claim = |i: usize, u: u8, v: u8| -> api::ResourceClaim {
        let mut m = json!({"name": format!("c{i}"), "namespace": NS, "uid": format!("uid-c{i}-{u}")});
        if v > 0 {
            m["resourceVersion"] = json!(v.to_string());
        }
        let mut c = json!({"metadata": m, "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}});
        let device = (u + v) % 4;
        if device < 3 {
            let reserved: Vec<_> = (0..3)
                .filter(|b| ((3 * v + u) % 8) & (1 << b) != 0)
                .map(|b| json!({"resource": "pods", "name": format!("p{b}"), "uid": format!("pod-uid-{b}")}))
                .collect();
            c["status"] = json!({"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": DRIVER, "pool": "n0", "device": format!("gpu-{device}")}]}},
                "reservedFor": reserved});
        }
        serde_json::from_value(c).expect("a ResourceClaim")
    };
    // Steps: per claim, present or not, its uid generation and version; per pod, its node or none.
    let step = (
        prop::collection::vec((any::<bool>(), 0u8..2, 0u8..4), 4),
        prop::collection::vec(prop::option::of(0u8..2), 3),
    );
    let mut runner = TestRunner::new(Config::with_cases(128));
    runner
        .run(&prop::collection::vec(step, 1..8), |steps| {
            let mut side = DeviceSide::build([&class], [&slice]);
            for (claims, pods) in steps {
                let objects: Vec<api::ResourceClaim> = claims
                    .iter()
                    .enumerate()
                    .filter(|(_, (present, _, _))| *present)
                    .map(|(i, &(_, u, v))| claim(i, u, v))
                    .collect();
                let pods: BTreeMap<String, Arc<str>> = pods
                    .iter()
                    .enumerate()
                    .filter_map(|(b, n)| n.map(|n| (format!("p{b}"), Arc::from(format!("n{n}").as_str()))))
                    .collect();
                let pod_node = |k: &PodKey, uid: &str| {
                    (uid == format!("pod-uid-{}", &k.name[1..]))
                        .then(|| pods.get(&*k.name).cloned())
                        .flatten()
                };
                let kept = side.catalog(&objects, pod_node);
                let (fresh, _) = device_catalog([&class], [&slice], &objects, pod_node);
                let view = |c: &phalanx_scheduler::dra::DeviceCatalog| {
                    let mut claims: Vec<_> = c
                        .claims
                        .values()
                        .map(|i| {
                            let devices = i.allocation.as_ref().map(|a| a.devices.len());
                            let reserved: Vec<_> = i.reserved_for.iter().map(|r| r.uid.to_string()).collect();
                            (
                                i.key.to_string(),
                                i.uid.to_string(),
                                i.resource_version.to_string(),
                                devices,
                                reserved,
                            )
                        })
                        .collect();
                    claims.sort();
                    claims
                };
                prop_assert_eq!(view(&kept), view(&fresh));
                // The same devices allocated; a device two claims name (the generator allows it, as a broken
                // cluster might) is entered for one of them, not necessarily the same one.
                let devices = |c: &phalanx_scheduler::dra::DeviceCatalog| {
                    let mut d: Vec<_> = c.allocated.keys().cloned().collect();
                    d.sort();
                    d
                };
                prop_assert_eq!(devices(&kept), devices(&fresh));
                for (d, k) in &kept.allocated {
                    let owner = kept.claims.get(k).and_then(|i| i.allocation.as_ref());
                    prop_assert!(
                        owner.is_some_and(|a| a.devices.iter().any(|(_, x, _)| x == d)),
                        "{d:?} -> {k}"
                    );
                    if fresh.allocated[d] != *k {
                        prop_assert!(objects.iter().filter(|o| o.status.is_some()).count() > 1);
                    }
                }
                prop_assert_eq!(&kept.holders, &fresh.holders);
                // And the holders are what the claims and pods say: every allocated claim whose reserved pods all
                // have a node.
                let mut expected = std::collections::HashMap::new();
                for o in &objects {
                    let Some(st) = &o.status else { continue };
                    let reserved = st.reserved_for.clone().unwrap_or_default();
                    let on: Option<Vec<(PodKey, Arc<str>)>> = reserved
                        .iter()
                        .map(|r| pods.get(&r.name).map(|n| (PodKey::new(NS, &r.name), n.clone())))
                        .collect();
                    if let Some(on) = on.filter(|v| !v.is_empty()) {
                        expected.insert(ClaimKey::new(NS, o.metadata.name.as_deref().unwrap_or("")), on);
                    }
                }
                prop_assert_eq!(&kept.holders, &expected);
            }
            Ok(())
        })
        .expect("the kept catalog is the fresh one");
}

mod batched {
    //! The batching cache with DynamicResources run per pod (`Plugin::filter_per_pod`): gangs whose pods each have
    //! their own claim bind exactly as without the cache.

    use super::*;
    use common::disable_batching;
    use phalanx_scheduler::queue::QueuedEntity;
    use phalanx_scheduler::{EntityKey, Scheduler, SchedulerConfig, Snapshot};
    use proptest::prelude::*;
    use std::time::Instant;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

        #[test]
        fn device_gangs_bind_the_same_with_and_without_the_batching_cache(
            nodes in prop::collection::vec((1i64..8, 0usize..5), 100..130),
            gangs in prop::collection::vec((1usize..7, 1u32..3, 200i64..3000), 1..8),
        ) {
            let statics: Vec<_> = nodes
                .iter()
                .enumerate()
                .map(|(i, (cpu, _))| Arc::new(node(&format!("n{i}"), *cpu, &[])))
                .collect();
            let mut claims = Vec::new();
            for (g, (size, count, _)) in gangs.iter().enumerate() {
                for i in 0..*size {
                    claims.push(claim(&format!("c{g}-{i}"), *count, vec![]));
                }
            }
            // Devices on node `n<i>`, named as the nodes are.
            let mut cat = catalog(&[], claims);
            for (i, (_, devices)) in nodes.iter().enumerate() {
                let name = format!("n{i}");
                Arc::make_mut(&mut cat.node_devices).insert(
                    name.as_str().into(),
                    (0..*devices).map(|d| Arc::new(gpu(&name, d, "a100"))).collect(),
                );
            }
            let cat = Arc::new(cat);
            let mut cached_snap = Snapshot::new(statics.clone());
            let mut plain_snap = Snapshot::new(statics);
            cached_snap.set_devices(cat.clone());
            plain_snap.set_devices(cat);
            disable_batching(&mut plain_snap);
            let mut cached = Scheduler::new(SchedulerConfig::default());
            let mut plain = Scheduler::new(SchedulerConfig::default());
            let mut served_from_cache = 0;
            for (g, (size, _, cpu)) in gangs.iter().enumerate() {
                let group = Sim::gang(&format!("g{g}"), *size as u32);
                let pods: Vec<Arc<PodInfo>> = (0..*size)
                    .map(|i| {
                        let mut p = pod_with(&format!("g{g}-{i}"), Some(&format!("g{g}")), &[&format!("c{g}-{i}")]);
                        let mut spec = (*p.spec).clone();
                        spec.requests.milli_cpu = *cpu;
                        spec.non_zero_milli_cpu = *cpu;
                        p.spec = Arc::new(spec);
                        Arc::new(p)
                    })
                    .collect();
                let entity = QueuedEntity {
                    tree: None,
                    key: EntityKey::Group(group.key.clone()),
                    group: Some(Arc::new(group)),
                    pods,
                    attempts: 0,
                    timestamp: Instant::now(),
                };
                let a = cached.schedule(&mut cached_snap, &entity);
                let b = plain.schedule(&mut plain_snap, &entity);
                prop_assert_eq!(&a.bindings, &b.bindings);
                prop_assert_eq!(&a.failures, &b.failures);
                prop_assert_eq!(b.stats.cached_node_evaluations, 0);
                served_from_cache += a.stats.cached_node_evaluations;
            }
            // The cache took part whenever a gang had two members to share it.
            if gangs.iter().any(|(size, _, _)| *size > 1) {
                prop_assert!(served_from_cache > 0);
            }
        }
    }
}
