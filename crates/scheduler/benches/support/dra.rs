//! The `gang8-dra` case's devices: 8 devices per node (node-local slices, as a GPU driver publishes them) and one
//! claim per pod for 1 device of the class, with the class's CEL selector. Like the runtime, the benchmark gives
//! each cycle a catalog with the earlier cycles' allocations applied (the runtime applies the writes PreBind is
//! making), so the snapshot's device overlay holds one cycle's allocations only.

use std::sync::Arc;

use phalanx_scheduler::dra::{
    Allocated, AllocationMode, ClaimRequests, Device, DeviceCatalog, DeviceId, DeviceRequest, DeviceSelector,
    ResourceClaimInfo, cel,
};
use phalanx_scheduler::model::{PodClaimSource, PodResourceClaim};
use phalanx_scheduler::volumes::ClaimKey;
use phalanx_scheduler::{Decision, PodInfo};

/// Devices per node.
pub const PER_NODE: usize = 8;
const DRIVER: &str = "gpu.example.com";

/// The catalog of `nodes` nodes named `node-<i>`, without claims.
pub fn catalog(nodes: usize) -> DeviceCatalog {
    let mut cat = DeviceCatalog {
        served: true,
        ..DeviceCatalog::default()
    };
    for i in 0..nodes {
        let node = format!("node-{i}");
        let devices = (0..PER_NODE)
            .map(|d| Arc::new(Device::new(DeviceId::new(DRIVER, &node, &format!("gpu-{d}")))))
            .collect();
        Arc::make_mut(&mut cat.node_devices).insert(node.as_str().into(), devices);
    }
    cat
}

/// The class's selector, compiled once and shared by every claim (as the runtime's catalog build shares it).
pub fn class_selector() -> DeviceSelector {
    cel::compile(&format!("device.driver == \"{DRIVER}\""))
        .expect("selector compiles")
        .cached()
}

/// Adds a claim `<pod>-gpu` for one device of the class to the catalog and the pod.
pub fn claim_for(cat: &mut DeviceCatalog, pod: &mut PodInfo, selector: &DeviceSelector) {
    let name = format!("{}-gpu", pod.key.name);
    let selector = selector.clone();
    let info = ResourceClaimInfo {
        key: ClaimKey::new(&pod.key.namespace, &name),
        uid: format!("uid-{name}").into(),
        resource_version: "1".into(),
        deleting: false,
        requests: Ok(ClaimRequests {
            name: name.as_str().into(),
            requests: vec![DeviceRequest {
                name: "gpu".into(),
                class: DRIVER.into(),
                selectors: vec![selector],
                mode: AllocationMode::ExactCount(1),
                admin_access: false,
            }],
            constraints: Vec::new(),
        }),
        allocation: None,
        reserved_for: Vec::new(),
    };
    cat.claims.insert(info.key.clone(), Arc::new(info));
    Arc::make_mut(&mut pod.spec).resource_claims = vec![PodResourceClaim {
        name: "gpu".into(),
        source: PodClaimSource::Claim(name.as_str().into()),
    }];
}

/// Applies a decision's allocations to the catalog (what the runtime's in-flight table does), as the catalog's
/// next revision, whose changes the device summary reads instead of every allocation.
pub fn apply(cat: &mut DeviceCatalog, d: &Decision) {
    cat.next_revision();
    for b in &d.bindings {
        for w in &b.devices {
            let Some(a) = &w.allocation else { continue };
            for (_, dev, _) in &a.devices {
                cat.set_allocated(dev.clone(), Some(w.claim.clone()));
            }
            if let Some(c) = cat.claims.get_mut(&w.claim) {
                Arc::make_mut(c).allocation = Some(Allocated {
                    devices: a.devices.clone(),
                    node_selector: None,
                });
            }
        }
    }
}
