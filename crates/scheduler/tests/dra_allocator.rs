//! The structured allocator on its own: counts, selectors, `matchAttribute`, devices held by other claims, admin
//! access, `All` requests, and the backtracking that a greedy first choice needs (k/k#138765).

use std::collections::HashSet;

use phalanx_scheduler::dra::{
    AllocationMode, AllocationOutcome, AttributeValue, ClaimRequests, Device, DeviceId, DeviceRequest,
    DeviceSelector, MatchAttribute, SelectorError, allocate,
};

const DRIVER: &str = "gpu.example.com";

fn gpu(name: &str, model: &str, root: &str) -> Device {
    Device::new(DeviceId::new(DRIVER, "node-a", name))
        .with_attribute("model", AttributeValue::String(model.into()))
        .with_attribute("pcieRoot", AttributeValue::String(root.into()))
}

/// `device.attributes["gpu.example.com"].model == "<model>"`, as a compiled selector would evaluate it.
fn model_is(model: &'static str) -> DeviceSelector {
    DeviceSelector::new(
        &format!("device.attributes[\"{DRIVER}\"].model == \"{model}\""),
        move |d| match d.attributes.get(&*format!("{DRIVER}/model")) {
            Some(AttributeValue::String(m)) => Ok(&**m == model),
            Some(_) => Err(SelectorError("no such overload".into())),
            None => Err(SelectorError("no such key: model".into())),
        },
    )
}

fn driver_is_gpu() -> DeviceSelector {
    DeviceSelector::new(&format!("device.driver == \"{DRIVER}\""), |d| {
        Ok(&*d.id.driver == DRIVER)
    })
}

fn request(name: &str, count: u32, extra: Vec<DeviceSelector>) -> DeviceRequest {
    let mut selectors = vec![driver_is_gpu()];
    selectors.extend(extra);
    DeviceRequest {
        name: name.into(),
        class: "gpu.example.com".into(),
        selectors,
        mode: AllocationMode::ExactCount(count),
        admin_access: false,
    }
}

fn claim(name: &str, requests: Vec<DeviceRequest>) -> ClaimRequests {
    ClaimRequests {
        name: name.into(),
        requests,
        constraints: Vec::new(),
    }
}

fn refs<T>(v: &[T]) -> Vec<&T> {
    v.iter().collect()
}

fn names(outcome: &AllocationOutcome) -> Vec<Vec<String>> {
    let AllocationOutcome::Allocated(claims) = outcome else {
        panic!("not allocated: {outcome:?}");
    };
    claims
        .iter()
        .map(|c| c.devices.iter().map(|(_, d, _)| d.device.to_string()).collect())
        .collect()
}

#[test]
fn two_claims_of_two_devices_fill_a_node_of_four_and_a_third_does_not_fit() {
    let devices: Vec<Device> = (0..4).map(|i| gpu(&format!("gpu-{i}"), "a100", "r0")).collect();
    let claims: Vec<ClaimRequests> = (0..3)
        .map(|i| claim(&format!("ns/c{i}"), vec![request("gpus", 2, vec![])]))
        .collect();
    let two = allocate(&refs(&claims[..2]), &refs(&devices), |_| false, 10_000);
    assert_eq!(
        names(&two),
        vec![vec!["gpu-0", "gpu-1"], vec!["gpu-2", "gpu-3"]],
        "no device is given twice"
    );
    match allocate(&refs(&claims), &refs(&devices), |_| false, 10_000) {
        AllocationOutcome::Unsatisfiable(s) => {
            assert_eq!((s.claim, &*s.request, s.wanted), (2, "gpus", 2));
        }
        other => panic!("three claims of two on four devices: {other:?}"),
    }
}

#[test]
fn a_greedy_first_choice_is_undone_so_the_later_claim_fits() {
    // The first claim takes any GPU, the second only an h100; first-fit gives the h100 to the first claim.
    let devices = vec![gpu("gpu-0", "h100", "r0"), gpu("gpu-1", "a100", "r0")];
    let claims = vec![
        claim("ns/any", vec![request("gpu", 1, vec![])]),
        claim("ns/h100", vec![request("gpu", 1, vec![model_is("h100")])]),
    ];
    let out = allocate(&refs(&claims), &refs(&devices), |_| false, 100);
    assert_eq!(names(&out), vec![vec!["gpu-1"], vec!["gpu-0"]]);
    // Without room to backtrack the search gives up rather than answer wrongly.
    assert!(matches!(
        allocate(&refs(&claims), &refs(&devices), |_| false, 2),
        AllocationOutcome::BudgetExhausted { steps: 3 }
    ));
}

#[test]
fn match_attribute_keeps_both_devices_on_one_pcie_root() {
    let devices = vec![
        gpu("gpu-0", "a100", "root-a"),
        gpu("gpu-1", "a100", "root-b"),
        gpu("gpu-2", "a100", "root-b"),
    ];
    let mut c = claim("ns/pair", vec![request("gpus", 2, vec![])]);
    c.constraints.push(MatchAttribute {
        requests: Vec::new(),
        attribute: format!("{DRIVER}/pcieRoot").into(),
    });
    let out = allocate(&[&c], &refs(&devices), |_| false, 100);
    assert_eq!(names(&out), vec![vec!["gpu-1", "gpu-2"]]);
    // With gpu-2 held elsewhere no pair shares a root.
    let held = DeviceId::new(DRIVER, "node-a", "gpu-2");
    assert!(matches!(
        allocate(&[&c], &refs(&devices), |d| *d == held, 100),
        AllocationOutcome::Unsatisfiable(_)
    ));
}

#[test]
fn a_constraint_across_two_requests_and_a_device_without_the_attribute() {
    let mut bare = Device::new(DeviceId::new(DRIVER, "node-a", "nic-0"));
    bare.attributes.insert(
        format!("{DRIVER}/model").into(),
        AttributeValue::String("nic".into()),
    );
    let devices = vec![bare, gpu("gpu-0", "a100", "r1"), gpu("nic-1", "nic", "r1")];
    let mut c = claim(
        "ns/gpu-and-nic",
        vec![
            request("gpu", 1, vec![model_is("a100")]),
            request("nic", 1, vec![model_is("nic")]),
        ],
    );
    c.constraints.push(MatchAttribute {
        requests: vec!["gpu".into(), "nic".into()],
        attribute: format!("{DRIVER}/pcieRoot").into(),
    });
    let out = allocate(&[&c], &refs(&devices), |_| false, 100);
    assert_eq!(
        names(&out),
        vec![vec!["gpu-0", "nic-1"]],
        "nic-0 has no pcieRoot, so it cannot satisfy the constraint"
    );
}

#[test]
fn devices_of_other_claims_are_not_free_unless_the_request_has_admin_access() {
    let devices = vec![gpu("gpu-0", "a100", "r0")];
    let held: HashSet<DeviceId> = [devices[0].id.clone()].into();
    let plain = claim("ns/plain", vec![request("gpu", 1, vec![])]);
    match allocate(&[&plain], &refs(&devices), |d| held.contains(d), 100) {
        AllocationOutcome::Unsatisfiable(s) => assert_eq!((s.wanted, s.free), (1, 0)),
        other => panic!("held device given out: {other:?}"),
    }
    let mut admin = claim("ns/monitor", vec![request("gpu", 1, vec![])]);
    admin.requests[0].admin_access = true;
    let AllocationOutcome::Allocated(out) = allocate(&[&admin, &plain], &refs(&devices), |_| false, 100)
    else {
        panic!("admin access shares the device");
    };
    assert!(out[0].devices[0].2, "allocated with admin access");
    assert_eq!(
        out[1].devices[0].1, devices[0].id,
        "and the ordinary claim still gets it"
    );
}

#[test]
fn an_all_request_takes_every_matching_device_and_fails_when_one_is_held_or_none_match() {
    let devices = vec![
        gpu("gpu-0", "a100", "r0"),
        gpu("gpu-1", "h100", "r0"),
        gpu("gpu-2", "a100", "r0"),
    ];
    let mut all = claim("ns/all", vec![request("gpus", 1, vec![model_is("a100")])]);
    all.requests[0].mode = AllocationMode::All;
    assert_eq!(
        names(&allocate(&[&all], &refs(&devices), |_| false, 100)),
        vec![vec!["gpu-0", "gpu-2"]]
    );
    let held = devices[2].id.clone();
    match allocate(&[&all], &refs(&devices), |d| *d == held, 100) {
        AllocationOutcome::Unsatisfiable(s) => assert_eq!((s.wanted, s.free), (2, 1)),
        other => panic!("All with a held device: {other:?}"),
    }
    let mut none = claim("ns/none", vec![request("gpus", 1, vec![model_is("v100")])]);
    none.requests[0].mode = AllocationMode::All;
    assert!(matches!(
        allocate(&[&none], &refs(&devices), |_| false, 100),
        AllocationOutcome::Unsatisfiable(_)
    ));
}

#[test]
fn a_selector_that_fails_to_evaluate_fails_the_allocation_and_names_the_expression() {
    let devices = vec![Device::new(DeviceId::new(DRIVER, "node-a", "bare"))];
    let c = claim("ns/c", vec![request("gpu", 1, vec![model_is("a100")])]);
    match allocate(&[&c], &refs(&devices), |_| false, 100) {
        AllocationOutcome::Unsatisfiable(s) => {
            let e = s.error.expect("the error is reported");
            assert!(e.contains("model == \\\"a100\\\"") && e.contains("bare"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_empty_claim_and_no_claims_allocate_nothing() {
    let devices = vec![gpu("gpu-0", "a100", "r0")];
    let empty = claim("ns/empty", Vec::new());
    assert_eq!(
        names(&allocate(&[&empty], &refs(&devices), |_| false, 1)),
        vec![Vec::<String>::new()]
    );
    assert_eq!(
        names(&allocate(&[], &refs(&devices), |_| false, 1)),
        Vec::<Vec<String>>::new()
    );
}

fn index_is(want: usize) -> DeviceSelector {
    DeviceSelector::new(&format!("name == gpu-{want}"), move |d| {
        Ok(*d.id.device == *format!("gpu-{want}"))
    })
}

/// The trap of k/k#138765 in a gang of 8 on a node of 8: seven members take any device, the last only gpu-0,
/// which first fit gives the first member. Filling the most constrained request first solves it in a few dozen
/// steps (chronological backtracking alone ran out of 10,000).
#[test]
fn a_request_only_one_device_satisfies_is_filled_first() {
    let devices: Vec<Device> = (0..8).map(|i| gpu(&format!("gpu-{i}"), "a100", "r0")).collect();
    let mut claims: Vec<ClaimRequests> = (0..7)
        .map(|i| claim(&format!("ns/any-{i}"), vec![request("gpu", 1, vec![])]))
        .collect();
    claims.push(claim("ns/only-0", vec![request("gpu", 1, vec![index_is(0)])]));
    let out = allocate(&refs(&claims), &refs(&devices), |_| false, 64);
    let got = names(&out);
    assert_eq!(got[7], vec!["gpu-0"], "{got:?}");
    let all: HashSet<&String> = got.iter().flatten().collect();
    assert_eq!(all.len(), 8, "no device twice: {got:?}");
    assert_eq!(got[0], vec!["gpu-1"], "the others keep the order of the devices");
}

/// Nine claims of one device on eight: each fits alone, all cannot. The count over the candidates says so before
/// any search (the search itself ran to its budget): the last claim wants 1 and the others leave it 0.
#[test]
fn more_claims_than_devices_are_unsatisfiable_without_a_search() {
    let devices: Vec<Device> = (0..8).map(|i| gpu(&format!("gpu-{i}"), "a100", "r0")).collect();
    let claims: Vec<ClaimRequests> = (0..9)
        .map(|i| claim(&format!("ns/c{i}"), vec![request("gpu", 1, vec![])]))
        .collect();
    match allocate(&refs(&claims), &refs(&devices), |_| false, 1) {
        AllocationOutcome::Unsatisfiable(s) => assert_eq!((s.claim, s.wanted, s.free), (8, 1, 0)),
        other => panic!("nine on eight: {other:?}"),
    }
}

/// A claim of two requests filled in another order than written still reports its devices in request order.
#[test]
fn devices_come_back_in_request_order_whatever_order_the_search_took() {
    let devices: Vec<Device> = (0..3).map(|i| gpu(&format!("gpu-{i}"), "a100", "r0")).collect();
    let c = claim(
        "ns/two",
        vec![
            request("wide", 2, vec![]),
            request("narrow", 1, vec![index_is(2)]),
        ],
    );
    let AllocationOutcome::Allocated(got) = allocate(&[&c], &refs(&devices), |_| false, 100) else {
        panic!("not allocated");
    };
    let order: Vec<(&str, String)> = got[0]
        .devices
        .iter()
        .map(|(r, d, _)| (&**r, d.device.to_string()))
        .collect();
    assert_eq!(
        order,
        vec![
            ("wide", "gpu-0".to_string()),
            ("wide", "gpu-1".to_string()),
            ("narrow", "gpu-2".to_string())
        ]
    );
}
