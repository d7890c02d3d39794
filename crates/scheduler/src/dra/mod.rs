//! Dynamic Resource Allocation as the core sees it: devices published in ResourceSlices, the requests of
//! ResourceClaims, and the allocation of a set of claims on one node with structured parameters (upstream
//! `staging/src/k8s.io/dynamic-resource-allocation/structured`, used by
//! `pkg/scheduler/framework/plugins/dynamicresources`).
//!
//! Shapes follow `resource.k8s.io/v1`: a [`Device`] is one entry of a slice's `spec.devices`, named by driver,
//! pool and device ([`DeviceId`]); a [`ClaimRequests`] is a claim's `spec.devices` reduced to what allocation
//! reads (each request with its class's selectors and its own, [`DeviceRequest`], and its `matchAttribute`
//! constraints, [`MatchAttribute`]). [`allocator::allocate`] allocates several claims together (the claims of
//! every pod a cycle puts on one node), with backtracking within a step budget, so that a first choice for one
//! claim does not strand a later one (k/k#138765).
//!
//! Selectors are opaque to the allocator ([`DeviceSelector`]): [`cel::compile`] turns a CEL expression into one,
//! once per class or request, and the allocator only calls it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};

use crate::fx::Fx;

pub mod allocator;
pub mod catalog;
pub mod cel;
pub mod overlay;
pub mod scheduling;
pub mod summary;
mod verdict_memo;

pub use allocator::{AllocationOutcome, ClaimAllocation, Shortfall, allocate, allocate_until};
pub use catalog::{
    Allocated, Consumer, DeviceCatalog, FILTER_TIMEOUT, HeldChanges, NodeDevices, ResourceClaimInfo,
    SliceScope,
};
pub use overlay::{DeviceOverlay, NodeAllocations};
pub use scheduling::{ClaimWrite, DeviceAllocation};

/// One device: `<driver>/<pool>/<device>`, unique in the cluster (upstream `DeviceID`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    /// The driver's name (`spec.driver` of the slice), a DNS subdomain such as `gpu.example.com`.
    pub driver: Arc<str>,
    /// `spec.pool.name` of the slice.
    pub pool: Arc<str>,
    /// `spec.devices[].name`.
    pub device: Arc<str>,
}

impl DeviceId {
    /// The id of `driver/pool/device`.
    pub fn new(driver: &str, pool: &str, device: &str) -> DeviceId {
        DeviceId {
            driver: driver.into(),
            pool: pool.into(),
            device: device.into(),
        }
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// A device attribute's value (`resource.k8s.io/v1` `DeviceAttribute`: exactly one of int, bool, string,
/// version). Versions are kept as written (semantic version 2.0.0 strings); equality, which is all
/// `matchAttribute` needs, compares them as strings, as upstream does for its constraint check.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AttributeValue {
    /// `int`.
    Int(i64),
    /// `bool`.
    Bool(bool),
    /// `string`.
    String(Arc<str>),
    /// `version`.
    Version(Arc<str>),
}

/// One published device with its attributes and capacities, by fully qualified name (`<domain>/<name>`;
/// an unqualified name in the slice is qualified with the driver's name, as upstream's CEL environment does).
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    /// The device.
    pub id: DeviceId,
    /// Attributes by qualified name.
    pub attributes: BTreeMap<Arc<str>, AttributeValue>,
    /// Capacities by qualified name, in the quantity's base unit (bytes, or whole units), rounded up and
    /// saturated as [`crate::resources::parse_value`] does.
    pub capacity: BTreeMap<Arc<str>, i64>,
}

impl Device {
    /// A device without attributes or capacity.
    pub fn new(id: DeviceId) -> Device {
        Device {
            id,
            attributes: BTreeMap::new(),
            capacity: BTreeMap::new(),
        }
    }

    /// Sets attribute `name`, qualified with the driver's domain when it has none.
    pub fn with_attribute(mut self, name: &str, value: AttributeValue) -> Device {
        let key = self.qualify(name);
        self.attributes.insert(key, value);
        self
    }

    /// The fully qualified form of an attribute or capacity name.
    pub fn qualify(&self, name: &str) -> Arc<str> {
        if name.contains('/') {
            name.into()
        } else {
            format!("{}/{name}", self.id.driver).into()
        }
    }
}

/// Why a selector could not be evaluated for a device (upstream treats a CEL runtime error as a failed
/// allocation of the claim, with the error in the message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorError(pub String);

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A selector's results by device, keyed by the address of the device name's allocation: hashing an address
/// instead of three strings is what makes the cache pay. The entry keeps the whole id, and a hit counts only when
/// it equals the device's (pointer-equal `Arc`s compare without reading the strings), so a name shared by two
/// devices (an interner, say) costs a re-evaluation, never a wrong answer; the kept `Arc` also stops the address
/// from being reused while the entry lives.
type SelectorCache = Mutex<HashMap<usize, (DeviceId, Result<bool, SelectorError>), Fx>>;

type Matcher = dyn Fn(&Device) -> Result<bool, SelectorError> + Send + Sync;

/// A compiled device selector (a class's or a request's `selectors[].cel.expression`), with its source for
/// messages. The allocator calls it once per request and device.
#[derive(Clone)]
pub struct DeviceSelector {
    /// The expression as written.
    pub source: Arc<str>,
    matcher: Arc<Matcher>,
    /// Results by device, shared by the clones ([`DeviceSelector::cached`]).
    cache: Option<Arc<SelectorCache>>,
    /// The matcher keeps its results itself, shared by devices alike in what it reads ([`cel`]'s footprint),
    /// and a lookup there is cheaper than one in a table of every device.
    shares_results: bool,
}

impl DeviceSelector {
    /// A selector named `source` that `matcher` evaluates.
    pub fn new(
        source: &str,
        matcher: impl Fn(&Device) -> Result<bool, SelectorError> + Send + Sync + 'static,
    ) -> DeviceSelector {
        DeviceSelector {
            source: source.into(),
            matcher: Arc::new(matcher),
            cache: None,
            shares_results: false,
        }
    }

    /// The same selector, saying that its matcher keeps its own results: [`DeviceSelector::cached`] then adds no
    /// table by device.
    pub(crate) fn sharing_results(mut self) -> DeviceSelector {
        self.shares_results = true;
        self
    }

    /// The same selector, remembering its result per device id (shared by its clones). Only for a set of devices
    /// that does not change while the selector lives: the runtime compiles new selectors with each device side
    /// ([`crate::convert::DeviceSide`], rebuilt when a DeviceClass or ResourceSlice changes), whose devices are
    /// fixed. Evaluating CEL builds an environment per call (tens of
    /// microseconds), and a gang's Filter asks the same question for every pod and node. A CEL selector that
    /// shares its results between devices alike in what it reads ([`cel::compile`]) needs no such table and is
    /// returned as it is.
    pub fn cached(mut self) -> DeviceSelector {
        if !self.shares_results {
            self.cache = Some(Arc::default());
        }
        self
    }

    /// The address of the compiled matcher, shared by the clones of one compiled selector: two selectors with
    /// the same identity give the same answer for every device ([`summary`] groups requests by it). Valid as a
    /// key only while a clone is kept, which stops the address from being reused.
    pub(crate) fn identity(&self) -> usize {
        Arc::as_ptr(&self.matcher).cast::<u8>() as usize
    }

    /// Whether `device` satisfies the selector.
    ///
    /// # Errors
    /// The expression failed at run time (a missing attribute used without `has`, a type mismatch).
    pub fn matches(&self, device: &Device) -> Result<bool, SelectorError> {
        let Some(cache) = &self.cache else {
            return (self.matcher)(device);
        };
        let key = Arc::as_ptr(&device.id.device).cast::<u8>() as usize;
        let mut cache = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((id, r)) = cache.get(&key)
            && *id == device.id
        {
            return r.clone();
        }
        let r = (self.matcher)(device);
        cache.insert(key, (device.id.clone(), r.clone()));
        r
    }
}

impl fmt::Debug for DeviceSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceSelector({:?})", self.source)
    }
}

/// How many devices a request wants (`allocationMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocationMode {
    /// `ExactCount` with `count` (at least 1; the API server defaults it to 1).
    ExactCount(u32),
    /// `All`: every matching device reachable from the node; at least one must exist, and none of them may be
    /// allocated to another claim unless the request asks for admin access.
    All,
}

/// One request of a claim (`spec.devices.requests[].exactly`), with its class resolved.
#[derive(Debug, Clone)]
pub struct DeviceRequest {
    /// `name`, unique in the claim.
    pub name: Arc<str>,
    /// `deviceClassName`, for messages.
    pub class: Arc<str>,
    /// The class's selectors, then the request's own; a device must satisfy all of them.
    pub selectors: Vec<DeviceSelector>,
    /// How many devices.
    pub mode: AllocationMode,
    /// `adminAccess`: the request may take devices other claims hold, and what it takes stays free for others
    /// (upstream: admin access ignores ordinary allocations of the device).
    pub admin_access: bool,
}

/// A `matchAttribute` constraint: every device allocated for `requests` (all of the claim's requests when
/// empty) has the same value of `attribute`; a device without the attribute does not satisfy it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchAttribute {
    /// The requests it covers; empty for all.
    pub requests: Vec<Arc<str>>,
    /// The fully qualified attribute name.
    pub attribute: Arc<str>,
}

impl MatchAttribute {
    /// Whether the constraint covers request `name`.
    pub fn covers(&self, name: &str) -> bool {
        self.requests.is_empty() || self.requests.iter().any(|r| &**r == name)
    }
}

/// What allocation reads of a claim: its requests and constraints.
#[derive(Debug, Clone, Default)]
pub struct ClaimRequests {
    /// The claim's name, for messages (`<namespace>/<name>`).
    pub name: Arc<str>,
    /// `spec.devices.requests`.
    pub requests: Vec<DeviceRequest>,
    /// `spec.devices.constraints` (`matchAttribute` only).
    pub constraints: Vec<MatchAttribute>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two devices whose names share one allocation (as an interner would make them) keep their own answers.
    #[test]
    fn a_cached_selector_answers_per_device_even_when_names_share_an_allocation() {
        let name: Arc<str> = "gpu-0".into();
        let device = |driver: &str| {
            Device::new(DeviceId {
                driver: driver.into(),
                pool: "node-a".into(),
                device: name.clone(),
            })
        };
        let (a, b) = (device("a.example.com"), device("b.example.com"));
        let sel = DeviceSelector::new("driver is a", |d| Ok(&*d.id.driver == "a.example.com")).cached();
        for _ in 0..2 {
            assert_eq!(sel.matches(&a), Ok(true));
            assert_eq!(sel.matches(&b), Ok(false));
        }
    }
}
