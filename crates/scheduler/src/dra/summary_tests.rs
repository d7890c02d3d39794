//! The counts agree with the allocator: on random catalogs, allocations held before the cycle (by pods still on
//! the node, gone from it, or elsewhere), claims allocated earlier in the cycle (movable or shared) and new
//! claims (several selector sets, `All`, admin access, constraints, a selector that fails), [`check`] accepts a
//! node exactly when [`fit`] allocates there, and a verdict of [`Verdict::Short`] or [`Verdict::Fits`] is the
//! allocator's.

use std::sync::Arc;

use proptest::prelude::*;

use super::{FastPlan, Verdict};
use crate::dra::scheduling::{check, fit, plan};
use crate::dra::{
    AllocationMode, AttributeValue, ClaimRequests, Device, DeviceCatalog, DeviceId, DeviceOverlay,
    DeviceRequest, DeviceSelector, MatchAttribute, ResourceClaimInfo, SelectorError,
};
use crate::model::{NodeInfo, NodeStatic, PodClaimSource, PodInfo, PodKey, PodResourceClaim};
use crate::volumes::ClaimKey;

const DRIVER: &str = "gpu.example.com";

/// `(count, selectors by index into [`selectors`], All, admin access)`.
type RequestSpec = (u32, Vec<usize>, bool, bool);

#[derive(Debug, Clone)]
struct ClaimSpec {
    requests: Vec<RequestSpec>,
    constrained: bool,
}

/// Model 0 or 1, memory 0..3 (3 makes selector 2 fail).
type DeviceSpec = (i64, i64);

#[derive(Debug, Clone)]
struct Case {
    nodes: Vec<Vec<DeviceSpec>>,
    /// `(node, device, holder)`: holder 0 none known, 1 a pod still on the node, 2 a pod gone from it, 3 a pod
    /// on another node.
    allocated: Vec<(usize, usize, u8)>,
    /// Claims earlier pods allocated in this cycle, on a node, and whether a second pod uses the claim too.
    earlier: Vec<(ClaimSpec, usize, bool)>,
    new: Vec<ClaimSpec>,
}

fn selectors() -> Vec<DeviceSelector> {
    let int = |d: &Device, name: &str| match d.attributes.get(&*format!("{DRIVER}/{name}")) {
        Some(AttributeValue::Int(i)) => *i,
        _ => -1,
    };
    vec![
        DeviceSelector::new("model == 0", move |d| Ok(int(d, "model") == 0)),
        DeviceSelector::new("model == 1", move |d| Ok(int(d, "model") == 1)),
        DeviceSelector::new("mem >= 1, fails at 3", move |d| match int(d, "mem") {
            3 => Err(SelectorError("no mem".into())),
            m => Ok(m >= 1),
        }),
        DeviceSelector::new("true", |_| Ok(true)),
    ]
}

fn claim_spec() -> impl Strategy<Value = ClaimSpec> {
    let request = (
        1u32..4,
        prop::collection::vec(0usize..4, 0..3),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
    );
    (prop::collection::vec(request, 0..3), prop::bool::weighted(0.15)).prop_map(|(requests, constrained)| {
        ClaimSpec {
            requests,
            constrained,
        }
    })
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(prop::collection::vec((0i64..2, 0i64..4), 0..7), 1..4),
        prop::collection::vec((0usize..4, 0usize..7, 0u8..4), 0..6),
        prop::collection::vec((claim_spec(), 0usize..4, prop::bool::weighted(0.3)), 0..4),
        prop::collection::vec(claim_spec(), 1..3),
    )
        .prop_map(|(nodes, allocated, earlier, new)| Case {
            nodes,
            allocated,
            earlier,
            new,
        })
}

fn claim(name: &str, spec: &ClaimSpec, sel: &[DeviceSelector]) -> ResourceClaimInfo {
    let requests = spec
        .requests
        .iter()
        .enumerate()
        .map(|(i, (count, s, all, admin))| DeviceRequest {
            name: format!("r{i}").into(),
            class: "gpu".into(),
            selectors: s.iter().map(|&k| sel[k].clone()).collect(),
            mode: if *all {
                AllocationMode::All
            } else {
                AllocationMode::ExactCount(*count)
            },
            admin_access: *admin,
        })
        .collect();
    ResourceClaimInfo {
        key: ClaimKey::new("ns", name),
        uid: format!("uid-{name}").into(),
        resource_version: "1".into(),
        deleting: false,
        requests: Ok(ClaimRequests {
            name: name.into(),
            requests,
            constraints: if spec.constrained {
                vec![MatchAttribute {
                    requests: Vec::new(),
                    attribute: format!("{DRIVER}/model").into(),
                }]
            } else {
                Vec::new()
            },
        }),
        allocation: None,
        reserved_for: Vec::new(),
    }
}

fn pod(name: &str, claims: &[String]) -> PodInfo {
    let mut p = PodInfo::simple("ns", name, 100);
    Arc::make_mut(&mut p.spec).resource_claims = claims
        .iter()
        .map(|c| PodResourceClaim {
            name: c.as_str().into(),
            source: PodClaimSource::Claim(c.as_str().into()),
        })
        .collect();
    p
}

/// The catalog, the nodes (with the holders still there) and the cycle's overlay of `case`.
fn world(case: &Case) -> (Arc<DeviceCatalog>, Vec<NodeInfo>, DeviceOverlay, Vec<String>) {
    let sel = selectors();
    let mut cat = DeviceCatalog {
        served: true,
        ..DeviceCatalog::default()
    };
    let mut nodes = Vec::new();
    for (i, devices) in case.nodes.iter().enumerate() {
        let name = format!("n{i}");
        let list = devices
            .iter()
            .enumerate()
            .map(|(d, (model, mem))| {
                Arc::new(
                    Device::new(DeviceId::new(DRIVER, &name, &format!("d{d}")))
                        .with_attribute("model", AttributeValue::Int(*model))
                        .with_attribute("mem", AttributeValue::Int(*mem)),
                )
            })
            .collect();
        Arc::make_mut(&mut cat.node_devices).insert(name.as_str().into(), list);
        nodes.push(NodeInfo::new(Arc::new(NodeStatic::simple(
            &name,
            64_000,
            1 << 40,
            &[],
        ))));
    }
    // The allocations come as a revision changed in place of a catalog whose held table was read, and that
    // holds other devices the revision frees: the summary updates that table instead of building it.
    let stale: Vec<DeviceId> = case
        .allocated
        .iter()
        .filter_map(|&(n, d, _)| {
            let list = &cat.node_devices[format!("n{}", n % nodes.len()).as_str()];
            list.get(d + 1).map(|x| x.id.clone())
        })
        .collect();
    for id in &stale {
        cat.allocated.insert(id.clone(), ClaimKey::new("ns", "stale"));
    }
    let before = Arc::new(cat);
    let _ = super::held(&before, &nodes);
    let mut cat = (*before).clone();
    cat.next_revision();
    for id in stale {
        cat.set_allocated(id, None);
    }
    for (k, &(n, d, holder)) in case.allocated.iter().enumerate() {
        let (n, name) = (n % nodes.len(), format!("n{}", n % nodes.len()));
        let Some(dev) = cat.node_devices[name.as_str()].get(d) else {
            continue;
        };
        let key = ClaimKey::new("ns", &format!("old-{k}"));
        cat.set_allocated(dev.id.clone(), Some(key.clone()));
        let holder_pod = PodKey::new("ns", &format!("holder-{k}"));
        match holder {
            1 => {
                let mut p = PodInfo::simple("ns", &holder_pod.name, 1);
                p.node_name = Some(name.as_str().into());
                nodes[n].pods.push(Arc::new(p));
                cat.holders.insert(key, vec![(holder_pod, name.as_str().into())]);
            }
            2 => {
                cat.holders.insert(key, vec![(holder_pod, name.as_str().into())]);
            }
            3 => {
                cat.holders.insert(key, vec![(holder_pod, "elsewhere".into())]);
            }
            _ => {}
        }
    }
    for (k, (spec, _, _)) in case.earlier.iter().enumerate() {
        let c = claim(&format!("early-{k}"), spec, &sel);
        cat.claims.insert(c.key.clone(), Arc::new(c));
    }
    let mut new = Vec::new();
    for (k, spec) in case.new.iter().enumerate() {
        let c = claim(&format!("new-{k}"), spec, &sel);
        new.push(c.key.name.to_string());
        cat.claims.insert(c.key.clone(), Arc::new(c));
    }
    let cat = Arc::new(cat);
    let mut overlay = DeviceOverlay::default();
    // Earlier pods of the cycle, each reserved on its node when its claim fits there (what Reserve records).
    for (k, (_, on, shared)) in case.earlier.iter().enumerate() {
        let claims = vec![format!("early-{k}")];
        let users = if *shared { 2 } else { 1 };
        for u in 0..users {
            let p = pod(&format!("early-{k}-{u}"), &claims);
            let node = &nodes[on % nodes.len()];
            let Ok(Some(plan)) = plan(&cat, &overlay, &p, &nodes) else {
                continue;
            };
            let Ok(now) = fit(&plan, node) else { continue };
            let mark = k * 2 + u;
            overlay.record(
                mark,
                p.key.clone(),
                plan.claims,
                now.map(|a| (node.node.name.clone(), a)),
            );
        }
    }
    (cat, nodes, overlay, new)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn counting_agrees_with_the_allocator(case in case()) {
        let (cat, nodes, overlay, new) = world(&case);
        if let Some(h) = super::held(&cat, &nodes) {
            prop_assert_eq!(&h.rows, &super::Held::build(&cat, h.index.clone()).rows, "updated held table");
        }
        let p = pod("new", &new);
        let Ok(Some(plan)) = plan(&cat, &overlay, &p, &nodes) else {
            return Ok(());
        };
        let fast = FastPlan::new(&cat, &overlay, &plan_new(&cat, &new, &overlay), &nodes);
        for node in &nodes {
            let full = fit(&plan, node);
            prop_assert_eq!(check(&plan, node).is_ok(), full.is_ok(), "node {}: {:?}", node.node.name, full);
            if let Some(f) = &fast {
                let verdict = f.verdict(&cat, node, None);
                match verdict {
                    Verdict::Fits => prop_assert!(full.is_ok(), "counted as fitting: {:?}", full),
                    Verdict::Short => prop_assert!(full.is_err(), "counted as short: {:?}", full),
                    Verdict::Search => {}
                }
                // A node the plan did not learn (a changed node: a new `NodeStatic`) is found by its name.
                let mut changed = node.clone();
                changed.node = Arc::new((*node.node).clone());
                prop_assert_eq!(f.verdict(&cat, &changed, None), verdict, "unlearnt node");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Verdicts kept from one revision ([`super::super::verdict_memo`]) are those counting gives on the next,
    /// after devices were allocated or freed: compared with a table built afresh, which keeps none.
    #[test]
    fn kept_verdicts_are_those_counted_afresh(
        case in case(),
        changes in prop::collection::vec((0usize..4, 0usize..5, any::<bool>()), 0..6),
    ) {
        let (cat, nodes, overlay, new) = world(&case);
        let new_claims = plan_new(&cat, &new, &overlay);
        // Every node asked twice at this revision (the second answer is the kept one).
        if let Some(f) = FastPlan::new(&cat, &overlay, &new_claims, &nodes) {
            for node in &nodes {
                prop_assert_eq!(f.verdict(&cat, node, None), f.verdict(&cat, node, None));
            }
        }
        let mut next = (*cat).clone();
        next.next_revision();
        for (k, &(n, d, allocate)) in changes.iter().enumerate() {
            let name = format!("n{}", n % nodes.len());
            let Some(dev) = next.node_devices[name.as_str()].get(d) else {
                continue;
            };
            let claim = allocate.then(|| ClaimKey::new("ns", &format!("later-{k}")));
            next.set_allocated(dev.id.clone(), claim);
        }
        let next = Arc::new(next);
        let mut fresh = (*next).clone();
        fresh.held_changes = None;
        let fresh = Arc::new(fresh);
        let kept = FastPlan::new(&next, &overlay, &new_claims, &nodes);
        let counted = FastPlan::new(&fresh, &overlay, &new_claims, &nodes);
        let (Some(kept), Some(counted)) = (kept, counted) else {
            return Ok(());
        };
        for node in &nodes {
            prop_assert_eq!(
                kept.verdict(&next, node, None),
                counted.verdict(&fresh, node, None),
                "node {} after {:?}",
                node.node.name,
                changes
            );
        }
    }
}

/// The new claims of the pod as [`plan`] takes them (not allocated before, nor in this cycle).
fn plan_new(cat: &DeviceCatalog, new: &[String], overlay: &DeviceOverlay) -> Vec<Arc<ResourceClaimInfo>> {
    new.iter()
        .map(|n| ClaimKey::new("ns", n))
        .filter(|k| overlay.allocation(k).is_none())
        .filter_map(|k| cat.claims.get(&k).cloned())
        .collect()
}

/// The cases counting decides are the common ones: one device per pod of a gang, on nodes of eight.
#[test]
fn a_gang_of_one_device_claims_is_decided_by_counting() {
    let case = Case {
        nodes: vec![vec![(0, 1); 8], vec![(0, 1); 3]],
        allocated: vec![(1, 0, 0)],
        earlier: vec![(
            ClaimSpec {
                requests: vec![(1, vec![0], false, false)],
                constrained: false,
            },
            1,
            false,
        )],
        new: vec![ClaimSpec {
            requests: vec![(1, vec![0], false, false)],
            constrained: false,
        }],
    };
    let (cat, nodes, overlay, new) = world(&case);
    let fast = FastPlan::new(&cat, &overlay, &plan_new(&cat, &new, &overlay), &nodes).expect("covered");
    assert_eq!(fast.verdict(&cat, &nodes[0], None), Verdict::Fits);
    // Node n1: one device held, one taken by the earlier pod's claim, which moves: with the third, both fit.
    assert_eq!(fast.verdict(&cat, &nodes[1], None), Verdict::Fits);
}
