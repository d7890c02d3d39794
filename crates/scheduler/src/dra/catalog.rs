//! The cluster's devices and resource claims as DynamicResources reads them (upstream: the ResourceSlice,
//! DeviceClass and ResourceClaim listers behind `pkg/scheduler/framework/plugins/dynamicresources`, with the
//! allocated-devices tracker of `structured.AllocatedDeviceState`).
//!
//! The runtime builds one [`DeviceCatalog`] from its caches ([`crate::convert::device_catalog`]), with the
//! allocations PreBind is still writing already applied (as upstream's assume cache holds them), and gives it to
//! the snapshot ([`crate::Snapshot::set_devices`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::{ClaimRequests, Device, DeviceId};
use crate::model::{NodeInfo, PodKey};
use crate::selectors::NodeSelectorTerm;
use crate::volumes::ClaimKey;

/// Which nodes reach the devices of a slice (`spec.nodeName` | `spec.nodeSelector` | `spec.allNodes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SliceScope {
    /// Devices local to one node.
    Node(Arc<str>),
    /// Devices reachable from the nodes the terms select (ORed).
    Selector(Vec<NodeSelectorTerm>),
    /// Devices reachable from every node.
    AllNodes,
}

impl SliceScope {
    /// Whether the node named `node` with `labels` reaches the slice's devices.
    pub fn reaches(&self, node: &str, labels: &BTreeMap<String, String>) -> bool {
        match self {
            SliceScope::Node(n) => &**n == node,
            SliceScope::Selector(terms) => terms.iter().any(|t| t.matches(node, labels)),
            SliceScope::AllNodes => true,
        }
    }
}

/// Devices of node-local slices by node name ([`DeviceCatalog::node_devices`]).
pub type NodeDevices = HashMap<Arc<str>, Vec<Arc<Device>>>;

/// One entry of a claim's `status.reservedFor`: who may use the allocated devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    /// `apiGroup` (`""` for pods).
    pub api_group: Arc<str>,
    /// `resource` (`pods`).
    pub resource: Arc<str>,
    /// `name` (in the claim's namespace).
    pub name: Arc<str>,
    /// `uid`.
    pub uid: Arc<str>,
}

impl Consumer {
    /// Whether the consumer is a pod.
    pub fn is_pod(&self) -> bool {
        self.api_group.is_empty() && &*self.resource == "pods"
    }
}

/// A claim's `status.allocation`, the parts scheduling reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocated {
    /// `devices.results` as `(request, device, adminAccess)`.
    pub devices: Vec<(Arc<str>, DeviceId, bool)>,
    /// `nodeSelector`: the nodes that may use the allocation (ORed terms); `None` for any node.
    pub node_selector: Option<Vec<NodeSelectorTerm>>,
}

impl Allocated {
    /// Whether a node with this name and these labels may use the allocation.
    pub fn admits(&self, node: &str, labels: &BTreeMap<String, String>) -> bool {
        self.node_selector
            .as_ref()
            .is_none_or(|terms| terms.iter().any(|t| t.matches(node, labels)))
    }
}

/// A ResourceClaim (`resource.k8s.io/v1`), the parts scheduling reads.
#[derive(Debug, Clone)]
pub struct ResourceClaimInfo {
    /// namespace/name.
    pub key: ClaimKey,
    /// metadata.uid.
    pub uid: Arc<str>,
    /// metadata.resourceVersion (PreBind's precondition).
    pub resource_version: Arc<str>,
    /// metadata.deletionTimestamp is set.
    pub deleting: bool,
    /// The requests with their classes resolved, or why they cannot be allocated (a missing class, an
    /// unsupported field, a selector that does not compile), naming the field.
    pub requests: Result<ClaimRequests, String>,
    /// status.allocation, when allocated.
    pub allocation: Option<Allocated>,
    /// status.reservedFor.
    pub reserved_for: Vec<Consumer>,
}

impl ResourceClaimInfo {
    /// Whether the claim is reserved for the pod with this uid.
    pub fn reserved_for_pod(&self, uid: &str) -> bool {
        self.reserved_for.iter().any(|c| c.is_pod() && &*c.uid == uid)
    }
}

/// How long the device allocation of one cycle may take before the pods still allocating count as unschedulable
/// (upstream `DynamicResourcesArgs.filterTimeout`, `DRASchedulerFilterTimeout`, 10 s by default, per Filter call
/// there; here per cycle, so that one gang's search cannot hold the loop).
pub const FILTER_TIMEOUT: Duration = Duration::from_secs(10);

/// Every device, class and claim the plugin reads, built once by the runtime and shared by the cycles that run
/// while it holds.
#[derive(Debug, Clone)]
pub struct DeviceCatalog {
    /// Whether the API server serves `resource.k8s.io/v1`; without it, pods with claims cannot be scheduled.
    pub served: bool,
    /// Changes whenever the runtime rebuilds the catalog; [`PartialEq`] compares it (the selectors inside claims
    /// cannot be compared).
    pub revision: u64,
    /// Devices of node-local slices, by node name, in slice and device order. Behind an `Arc` of its own so that
    /// the per-node device summary ([`super::summary`]) outlives the catalog rebuilds and in-place updates that
    /// leave the devices alone (the allocations change every cycle, the devices seldom); change it with
    /// [`Arc::make_mut`].
    pub node_devices: Arc<NodeDevices>,
    /// Devices of slices with a node selector or `allNodes`, with their scope.
    pub shared_devices: Vec<(Arc<SliceScope>, Arc<Device>)>,
    /// Claims by key.
    pub claims: HashMap<ClaimKey, Arc<ResourceClaimInfo>>,
    /// Devices allocated to a claim without admin access, and the claim.
    pub allocated: HashMap<DeviceId, ClaimKey>,
    /// For each allocated claim reserved only for pods, the pods (namespace/name) with the node they run on, as
    /// the runtime knows them; a claim reserved for a pod the runtime does not know keeps its devices.
    pub holders: HashMap<ClaimKey, Vec<(PodKey, Arc<str>)>>,
    /// The DRA kinds whose list the server refused (plural names), as the store reports them.
    pub unreadable: Vec<String>,
    /// The wall-clock bound on one cycle's device allocation, from the cycle's first allocation; zero for none
    /// (as upstream's `filterTimeout: 0`). [`FILTER_TIMEOUT`] by default.
    pub filter_timeout: Duration,
    /// For a catalog changed in place from the one of an earlier revision ([`DeviceCatalog::next_revision`]):
    /// that revision and the devices whose holding may differ from it, so that the device summary
    /// ([`super::summary`]) updates its table of held devices instead of reading every allocation again.
    /// `None` (the default, and every catalog the runtime builds): no such earlier catalog.
    pub held_changes: Option<HeldChanges>,
}

/// What changed in a catalog since an earlier revision of it, as far as held devices go
/// ([`DeviceCatalog::held_changes`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldChanges {
    /// The revision ([`DeviceCatalog::revision`]) these changes are relative to.
    pub since: u64,
    /// Every device whose entry in [`DeviceCatalog::allocated`] was added, removed or changed since, or whose
    /// claim's [`DeviceCatalog::holders`] changed; repeats allowed.
    pub devices: Vec<DeviceId>,
}

impl Default for DeviceCatalog {
    fn default() -> Self {
        DeviceCatalog {
            served: false,
            revision: 0,
            node_devices: Arc::default(),
            shared_devices: Vec::new(),
            claims: HashMap::new(),
            allocated: HashMap::new(),
            holders: HashMap::new(),
            unreadable: Vec::new(),
            filter_timeout: FILTER_TIMEOUT,
            held_changes: None,
        }
    }
}

impl PartialEq for DeviceCatalog {
    fn eq(&self, other: &Self) -> bool {
        self.revision == other.revision && self.served == other.served
    }
}

impl DeviceCatalog {
    /// Starts the next revision of a catalog that is changed in place (the core benchmark's way; the runtime
    /// builds a new catalog instead): `revision` goes up by one and [`DeviceCatalog::held_changes`] starts empty,
    /// relative to the revision before. Change `allocated` with [`DeviceCatalog::set_allocated`] from then on,
    /// and list in `held_changes` the devices of a claim whose `holders` change.
    pub fn next_revision(&mut self) {
        self.held_changes = Some(HeldChanges {
            since: self.revision,
            devices: Vec::new(),
        });
        self.revision += 1;
    }

    /// Allocates `device` to `claim` (`None`: frees it) in [`DeviceCatalog::allocated`], and lists the device in
    /// [`DeviceCatalog::held_changes`] when that is kept.
    pub fn set_allocated(&mut self, device: DeviceId, claim: Option<ClaimKey>) {
        if let Some(c) = &mut self.held_changes {
            c.devices.push(device.clone());
        }
        match claim {
            Some(c) => self.allocated.insert(device, c),
            None => self.allocated.remove(&device),
        };
    }

    /// The devices `node` reaches: its own slices', then the shared slices' that select it.
    pub fn devices_for<'a>(&'a self, node: &NodeInfo) -> Vec<&'a Device> {
        let name = &node.node.name;
        let mut out: Vec<&Device> = self
            .node_devices
            .get(name)
            .into_iter()
            .flatten()
            .map(|d| &**d)
            .collect();
        out.extend(
            self.shared_devices
                .iter()
                .filter(|(s, _)| s.reaches(name, &node.node.labels))
                .map(|(_, d)| &**d),
        );
        out
    }

    /// Whether `device` is held by an allocated claim, seen from `node` in this cycle. A claim whose every
    /// consumer is a pod that ran on `node` and is no longer among its pods (preemption took it off in a
    /// simulation) frees its devices, so that preemption counts a victim's devices as freed. A victim that is
    /// really gone keeps them until kube-controller-manager deallocates its claim: the runtime lists only
    /// known pods as holders.
    pub fn held(&self, device: &DeviceId, node: &NodeInfo) -> bool {
        let Some(claim) = self.allocated.get(device) else {
            return false;
        };
        let Some(holders) = self.holders.get(claim) else {
            return true;
        };
        holders.is_empty()
            || holders
                .iter()
                .any(|(pod, on)| *on != node.node.name || node.pods.iter().any(|p| p.key == *pod))
    }
}
