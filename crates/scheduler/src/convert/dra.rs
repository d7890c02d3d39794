//! `resource.k8s.io/v1` objects into the DRA model of [`crate::dra`]: ResourceSlices into devices with the
//! nodes that reach them, DeviceClasses into compiled selectors, and ResourceClaims into [`ClaimRequests`]
//! (upstream reads the same fields in `structured/internal/experimental/allocator_experimental.go`), and a pod's
//! `spec.resourceClaims` into claim names.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1 as api;

use crate::dra::{
    Allocated, AllocationMode, AttributeValue, ClaimRequests, Consumer, Device, DeviceCatalog, DeviceId,
    DeviceRequest, DeviceSelector, MatchAttribute, NodeDevices, ResourceClaimInfo, SelectorError, SliceScope,
    cel,
};
use crate::model::{PodClaimSource, PodKey, PodResourceClaim};
use crate::selectors::NodeSelectorTerm;
use crate::volumes::ClaimKey;

/// The devices of a slice and the nodes that reach them.
///
/// # Errors
/// A slice with none of nodeName, nodeSelector and allNodes (or per-device node selection, not supported yet), or a
/// node selector that does not parse: the message names the slice.
pub(crate) fn slice(s: &api::ResourceSlice) -> Result<(SliceScope, Vec<Device>), String> {
    let name = s.metadata.name.as_deref().unwrap_or("");
    let spec = &s.spec;
    let scope = if let Some(n) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        SliceScope::Node(n.into())
    } else if let Some(sel) = &spec.node_selector {
        let terms = sel
            .node_selector_terms
            .iter()
            .map(NodeSelectorTerm::from_api)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("ResourceSlice {name}: spec.nodeSelector: {e}"))?;
        SliceScope::Selector(terms)
    } else if spec.all_nodes == Some(true) {
        SliceScope::AllNodes
    } else {
        return Err(format!(
            "ResourceSlice {name}: none of spec.nodeName, spec.nodeSelector and spec.allNodes is set \
             (spec.perDeviceNodeSelection is not supported yet)"
        ));
    };
    let devices = spec
        .devices
        .iter()
        .flatten()
        .map(|d| device(&spec.driver, &spec.pool.name, d))
        .collect();
    Ok((scope, devices))
}

fn device(driver: &str, pool: &str, d: &api::Device) -> Device {
    let mut out = Device::new(DeviceId::new(driver, pool, &d.name));
    for (name, a) in d.attributes.iter().flatten() {
        let value = if let Some(i) = a.int {
            AttributeValue::Int(i)
        } else if let Some(b) = a.bool {
            AttributeValue::Bool(b)
        } else if let Some(s) = &a.string {
            AttributeValue::String(s.as_str().into())
        } else if let Some(v) = &a.version {
            AttributeValue::Version(v.as_str().into())
        } else {
            // A list-valued attribute (newer API): not comparable by matchAttribute, not offered to CEL yet.
            continue;
        };
        let key = out.qualify(name);
        out.attributes.insert(key, value);
    }
    for (name, c) in d.capacity.iter().flatten() {
        // An unparsable quantity cannot be published (the API server validates it); count it as none.
        let v = crate::resources::parse_value(&c.value.0).unwrap_or(0);
        let key = out.qualify(name);
        out.capacity.insert(key, v);
    }
    out
}

/// The compiled selectors of a DeviceClass (`spec.selectors[].cel`).
///
/// # Errors
/// An expression that does not compile: `"DeviceClass <name>: spec.selectors[i]: compilation failed: …"`.
pub(crate) fn class_selectors(
    c: &api::DeviceClass,
    compiled: &Compiled,
) -> Result<Vec<DeviceSelector>, SelectorError> {
    let name = c.metadata.name.as_deref().unwrap_or("");
    selectors(
        c.spec.as_ref().and_then(|s| s.selectors.as_deref()),
        &format!("DeviceClass {name}: spec.selectors"),
        compiled,
    )
}

/// Selectors compiled during one catalog build, by expression: claims made from one template share theirs, and
/// with it the cache of results per device ([`DeviceSelector::cached`]).
pub(crate) type Compiled = std::cell::RefCell<HashMap<String, DeviceSelector>>;

fn compile_once(expression: &str, compiled: &Compiled) -> Result<DeviceSelector, SelectorError> {
    if let Some(s) = compiled.borrow().get(expression) {
        return Ok(s.clone());
    }
    let s = cel::compile(expression)?.cached();
    compiled.borrow_mut().insert(expression.to_owned(), s.clone());
    Ok(s)
}

fn selectors(
    list: Option<&[api::DeviceSelector]>,
    field: &str,
    compiled: &Compiled,
) -> Result<Vec<DeviceSelector>, SelectorError> {
    list.into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, s)| s.cel.as_ref().map(|c| (i, c)))
        .map(|(i, c)| {
            compile_once(&c.expression, compiled).map_err(|e| SelectorError(format!("{field}[{i}]: {}", e.0)))
        })
        .collect()
}

/// The requests and constraints of a claim, each request with its class's selectors first (`class(name)` gives
/// them, `Err` when they do not compile or are over the CEL limits, `None` for a class that does not exist).
///
/// # Errors
/// What allocation cannot handle, each naming the field: a missing class ("device class gpu.example.com does not
/// exist", as upstream says), `firstAvailable` and `distinctAttribute` (not supported yet), an unknown
/// `allocationMode` (upstream: clients must refuse unknown modes), a count below 1, and selectors (the class's
/// or the request's) that do not compile or are over the CEL limits: `"claim <ns>/<name>: request <request>,
/// spec.devices.requests[i]…: …"`.
pub(crate) fn claim(
    c: &api::ResourceClaim,
    compiled: &Compiled,
    mut class: impl FnMut(&str) -> Option<Result<Vec<DeviceSelector>, String>>,
) -> Result<ClaimRequests, String> {
    let name = format!(
        "{}/{}",
        c.metadata.namespace.as_deref().unwrap_or(""),
        c.metadata.name.as_deref().unwrap_or("")
    );
    let devices = c.spec.as_ref().and_then(|s| s.devices.as_ref());
    let mut requests = Vec::new();
    for (i, r) in devices
        .and_then(|d| d.requests.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let field = format!("spec.devices.requests[{i}]");
        let Some(exact) = &r.exactly else {
            return Err(format!(
                "claim {name}: {field}.firstAvailable is not supported yet"
            ));
        };
        let mode = match exact.allocation_mode.as_deref() {
            None | Some("ExactCount") => {
                let n = exact.count.unwrap_or(1);
                let n = u32::try_from(n).ok().filter(|n| *n >= 1).ok_or_else(|| {
                    format!("claim {name}: {field}.exactly.count must be at least 1, not {n}")
                })?;
                AllocationMode::ExactCount(n)
            }
            Some("All") => AllocationMode::All,
            Some(m) => {
                return Err(format!(
                    "claim {name}: {field}.exactly.allocationMode {m:?} is not supported"
                ));
            }
        };
        let request = format!("claim {name}: request {}, {field}", r.name);
        let mut sel = class(&exact.device_class_name)
            .ok_or_else(|| format!("device class {} does not exist", exact.device_class_name))?
            .map_err(|e| format!("{request}.exactly.deviceClassName: {e}"))?;
        sel.extend(
            selectors(
                exact.selectors.as_deref(),
                &format!("{request}.exactly.selectors"),
                compiled,
            )
            .map_err(|e| e.0)?,
        );
        requests.push(DeviceRequest {
            name: r.name.as_str().into(),
            class: exact.device_class_name.as_str().into(),
            selectors: sel,
            mode,
            admin_access: exact.admin_access == Some(true),
        });
    }
    let mut constraints = Vec::new();
    for (i, k) in devices
        .and_then(|d| d.constraints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        if k.distinct_attribute.is_some() {
            return Err(format!(
                "claim {name}: spec.devices.constraints[{i}].distinctAttribute is not supported yet"
            ));
        }
        if let Some(attribute) = &k.match_attribute {
            constraints.push(MatchAttribute {
                requests: k
                    .requests
                    .iter()
                    .flatten()
                    .map(|r| Arc::from(r.as_str()))
                    .collect(),
                attribute: attribute.as_str().into(),
            });
        }
    }
    Ok(ClaimRequests {
        name: name.into(),
        requests,
        constraints,
    })
}

/// A pod's `spec.resourceClaims`, each resolved to its claim (upstream `resourceclaim.Name`): `resourceClaimName`
/// as written; `resourceClaimTemplateName` through the pod's `status.resourceClaimStatuses` entry of the same
/// name, which kube-controller-manager's resourceclaim controller writes when it has created the claim.
pub(crate) fn pod_claims(pod: &k8s_openapi::api::core::v1::Pod) -> Vec<PodResourceClaim> {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref());
    let spec = pod.spec.as_ref();
    spec.and_then(|s| s.resource_claims.as_ref())
        .into_iter()
        .flatten()
        .map(|c| {
            let source = if let Some(n) = &c.resource_claim_name {
                PodClaimSource::Claim(n.as_str().into())
            } else {
                match statuses.into_iter().flatten().find(|s| s.name == c.name) {
                    Some(s) => match &s.resource_claim_name {
                        Some(n) => PodClaimSource::Claim(n.as_str().into()),
                        None => PodClaimSource::NotNeeded,
                    },
                    None => PodClaimSource::NotCreated {
                        template: c.resource_claim_template_name.as_deref().map(Arc::from),
                    },
                }
            };
            PodResourceClaim {
                name: c.name.as_str().into(),
                source,
            }
        })
        .collect()
}

/// The DRA objects of the cluster as one [`DeviceCatalog`] (revision 0; the runtime sets it), and the problems
/// found on the way (a slice without a scope, a class whose selectors do not compile), each naming the object.
///
/// Only the newest generation of each pool counts (upstream `GatherPools`). `pod_node(pod, uid)` gives the node
/// of a known pod with that uid (`None` when the runtime does not know it or it is not on a node); it decides
/// which claims preemption may count as freed ([`DeviceCatalog::held`]). The same as [`DeviceSide::build`] then
/// [`DeviceSide::catalog`], for a caller that keeps nothing between two catalogs.
pub fn device_catalog<'a>(
    classes: impl IntoIterator<Item = &'a api::DeviceClass>,
    slices: impl IntoIterator<Item = &'a api::ResourceSlice>,
    claims: impl IntoIterator<Item = &'a api::ResourceClaim>,
    pod_node: impl Fn(&PodKey, &str) -> Option<Arc<str>>,
) -> (DeviceCatalog, Vec<String>) {
    let mut side = DeviceSide::build(classes, slices);
    let cat = side.catalog(claims, pod_node);
    (cat, side.problems)
}

/// The device side of a [`DeviceCatalog`]: the classes' compiled selectors and the slices' devices, and the claims
/// converted against them, by resourceVersion.
///
/// The runtime keeps one while no DeviceClass or ResourceSlice changes, so that a change of claims alone (each
/// PreBind writes two per claim, so most DRA events are these) converts and enters only the claims that changed,
/// in a copy of the last catalog ([`DeviceSide::catalog`]): the devices keep their identity, and with it the
/// device summary's index of matching devices per node ([`crate::dra::summary`]), and the selectors keep their
/// results per device ([`DeviceSelector::cached`]).
/// Before, every DRA event rebuilt all of it: on 500 nodes of 8 devices, `perf` put the rebuilds (the conversion,
/// its allocations and drops, the selectors evaluated again) first in `phalanx run` while it bound 2,000 pods with
/// claims.
#[derive(Debug, Default)]
pub struct DeviceSide {
    compiled: Compiled,
    class_sel: HashMap<String, Result<Vec<DeviceSelector>, SelectorError>>,
    node_devices: Arc<NodeDevices>,
    shared_devices: Vec<(Arc<SliceScope>, Arc<Device>)>,
    /// Claims converted by earlier calls of [`DeviceSide::catalog`], by uid: the resourceVersion each was
    /// converted at, and the last call that saw it.
    claims: HashMap<String, KeptClaim>,
    /// The last catalog made, which the next is made from: the claims that changed taken out and put in again,
    /// the others left as they are.
    built: Option<DeviceCatalog>,
    /// Claims of the last catalog without a uid or a resourceVersion: converted on every call.
    unkept: Vec<Arc<ResourceClaimInfo>>,
    /// Calls of [`DeviceSide::catalog`] so far.
    calls: u64,
    /// The claims of the last catalog that allocate each device (without admin access), in the order entered:
    /// one normally, several only in a cluster where two claims name the same device, where taking one out
    /// must leave the device allocated to another.
    device_claims: HashMap<DeviceId, Vec<ClaimKey>>,
    /// What was wrong with the classes and slices (a slice without a scope, a class whose selectors do not
    /// compile), each naming the object.
    pub problems: Vec<String>,
}

impl DeviceSide {
    /// The classes' selectors and the devices of the newest generation of each pool (upstream `GatherPools`).
    pub fn build<'a>(
        classes: impl IntoIterator<Item = &'a api::DeviceClass>,
        slices: impl IntoIterator<Item = &'a api::ResourceSlice>,
    ) -> DeviceSide {
        let mut side = DeviceSide::default();
        for c in classes {
            let sel = class_selectors(c, &side.compiled);
            if let Err(e) = &sel {
                side.problems.push(e.0.clone());
            }
            side.class_sel
                .insert(c.metadata.name.clone().unwrap_or_default(), sel);
        }
        let slices: Vec<&api::ResourceSlice> = slices.into_iter().collect();
        let mut newest: HashMap<(&str, &str), i64> = HashMap::new();
        for s in &slices {
            let g = newest
                .entry((&s.spec.driver, &s.spec.pool.name))
                .or_insert(i64::MIN);
            *g = (*g).max(s.spec.pool.generation);
        }
        for s in &slices {
            if newest.get(&(&*s.spec.driver, &*s.spec.pool.name)) != Some(&s.spec.pool.generation) {
                continue;
            }
            match slice(s) {
                Ok((SliceScope::Node(n), devices)) => Arc::make_mut(&mut side.node_devices)
                    .entry(n)
                    .or_default()
                    .extend(devices.into_iter().map(Arc::new)),
                Ok((scope, devices)) => {
                    let scope = Arc::new(scope);
                    side.shared_devices
                        .extend(devices.into_iter().map(|d| (scope.clone(), Arc::new(d))));
                }
                Err(e) => side.problems.push(e),
            }
        }
        side
    }

    /// A catalog of these devices and `claims` (revision 0; the runtime sets it), made from the last one: a claim
    /// with the uid and resourceVersion it had then is neither converted nor entered again, so a call costs a
    /// lookup per claim and the work of the claims that changed, not a new catalog (the runtime makes one before
    /// nearly every cycle while PreBind writes claims). Claims without a uid or a resourceVersion are converted on
    /// every call. The holders of allocated claims ([`DeviceCatalog::holders`]) are read again on every call:
    /// they follow the pods. `pod_node` as in [`device_catalog`].
    pub fn catalog<'a>(
        &mut self,
        claims: impl IntoIterator<Item = &'a api::ResourceClaim>,
        pod_node: impl Fn(&PodKey, &str) -> Option<Arc<str>>,
    ) -> DeviceCatalog {
        self.calls += 1;
        let call = self.calls;
        let mut cat = self.built.take().unwrap_or_else(|| DeviceCatalog {
            served: true,
            node_devices: self.node_devices.clone(),
            shared_devices: self.shared_devices.clone(),
            ..DeviceCatalog::default()
        });
        // Taken out before anything is entered, so that a claim recreated under its name (a new uid) or changed
        // in place never loses the entries of its new version to its old one.
        let mut gone = std::mem::take(&mut self.unkept);
        let mut new = Vec::new();
        for c in claims {
            let uid = c.metadata.uid.as_deref().filter(|v| !v.is_empty());
            let rv = c.metadata.resource_version.as_deref().filter(|v| !v.is_empty());
            let (Some(uid), Some(rv)) = (uid, rv) else {
                let info = Arc::new(self.convert(c));
                self.unkept.push(info.clone());
                new.push(info);
                continue;
            };
            match self.claims.get_mut(uid) {
                Some(k) if k.rv == rv => k.seen = call,
                Some(k) => {
                    let info = Arc::new(claim_info(c, &self.compiled, |n| class_of(&self.class_sel, n)));
                    gone.push(std::mem::replace(&mut k.info, info.clone()));
                    k.rv = rv.to_owned();
                    k.seen = call;
                    new.push(info);
                }
                None => {
                    let info = Arc::new(self.convert(c));
                    let kept = KeptClaim {
                        rv: rv.to_owned(),
                        info: info.clone(),
                        seen: call,
                    };
                    self.claims.insert(uid.to_owned(), kept);
                    new.push(info);
                }
            }
        }
        self.claims.retain(|_, k| {
            let seen = k.seen == call;
            if !seen {
                gone.push(k.info.clone());
            }
            seen
        });
        for info in &gone {
            remove_claim(&mut cat, &mut self.device_claims, info);
        }
        for info in new {
            add_allocated(&mut cat, &mut self.device_claims, &info);
            cat.claims.insert(info.key.clone(), info);
        }
        refresh_holders(&mut cat, &pod_node);
        cat.held_changes = None;
        self.built = Some(cat.clone());
        cat
    }

    fn convert(&self, c: &api::ResourceClaim) -> ResourceClaimInfo {
        claim_info(c, &self.compiled, |n| class_of(&self.class_sel, n))
    }
}

/// A claim converted by [`DeviceSide::catalog`].
#[derive(Debug)]
struct KeptClaim {
    rv: String,
    info: Arc<ResourceClaimInfo>,
    seen: u64,
}

/// A class's selectors for [`claim_info`]: `Err` when they do not compile, `None` for a class that does not exist.
fn class_of(
    class_sel: &HashMap<String, Result<Vec<DeviceSelector>, SelectorError>>,
    name: &str,
) -> Option<Result<Vec<DeviceSelector>, String>> {
    match class_sel.get(name) {
        Some(Ok(sel)) => Some(Ok(sel.clone())),
        Some(Err(e)) => Some(Err(e.0.clone())),
        None => None,
    }
}

/// Takes a claim's version `info` out of the catalog: its entry and holders, and its devices, each left to another
/// claim that allocates it too (see [`DeviceSide`]'s `device_claims`) or freed.
fn remove_claim(
    cat: &mut DeviceCatalog,
    device_claims: &mut HashMap<DeviceId, Vec<ClaimKey>>,
    info: &Arc<ResourceClaimInfo>,
) {
    if cat.claims.get(&info.key).is_some_and(|c| Arc::ptr_eq(c, info)) {
        cat.claims.remove(&info.key);
        cat.holders.remove(&info.key);
    }
    let Some(a) = &info.allocation else { return };
    for (_, d, admin) in &a.devices {
        if *admin {
            continue;
        }
        let Some(keys) = device_claims.get_mut(d) else {
            continue;
        };
        if let Some(at) = keys.iter().position(|k| *k == info.key) {
            keys.remove(at);
        }
        match keys.last() {
            Some(other) => {
                cat.allocated.insert(d.clone(), other.clone());
            }
            None => {
                device_claims.remove(d);
                cat.allocated.remove(d);
            }
        }
    }
}

/// Enters an allocated claim's devices (those without admin access) in [`DeviceCatalog::allocated`].
fn add_allocated(
    cat: &mut DeviceCatalog,
    device_claims: &mut HashMap<DeviceId, Vec<ClaimKey>>,
    info: &ResourceClaimInfo,
) {
    let Some(a) = &info.allocation else { return };
    for (_, d, admin) in &a.devices {
        if !admin {
            device_claims.entry(d.clone()).or_default().push(info.key.clone());
            cat.allocated.insert(d.clone(), info.key.clone());
        }
    }
}

/// Sets [`DeviceCatalog::holders`] for every allocated claim reserved only for pods whose node `pod_node` knows
/// (the pods and their nodes), and removes it for the others; an entry that is already right is left alone, so
/// the common call allocates nothing.
fn refresh_holders(cat: &mut DeviceCatalog, pod_node: &impl Fn(&PodKey, &str) -> Option<Arc<str>>) {
    let DeviceCatalog { claims, holders, .. } = cat;
    for (key, info) in claims.iter() {
        if info.allocation.is_none() || info.reserved_for.is_empty() {
            holders.remove(key);
            continue;
        }
        let mut pods = info.reserved_for.iter().map(|r| holder(info, r, pod_node));
        if let Some(now) = holders.get(key)
            && now.len() == info.reserved_for.len()
            && pods.by_ref().zip(now).all(|(p, n)| p.as_ref() == Some(n))
        {
            continue;
        }
        let pods: Option<Vec<(PodKey, Arc<str>)>> = info
            .reserved_for
            .iter()
            .map(|r| holder(info, r, pod_node))
            .collect();
        match pods {
            Some(p) => {
                holders.insert(key.clone(), p);
            }
            None => {
                holders.remove(key);
            }
        }
    }
}

/// The pod a `reservedFor` entry of `info` names, with its node; `None` for a consumer that is not a pod or a pod
/// `pod_node` does not know on a node. The key shares the claim's strings: nothing is allocated.
fn holder(
    info: &ResourceClaimInfo,
    r: &Consumer,
    pod_node: &impl Fn(&PodKey, &str) -> Option<Arc<str>>,
) -> Option<(PodKey, Arc<str>)> {
    if !r.is_pod() {
        return None;
    }
    let pod = PodKey {
        namespace: info.key.namespace.clone(),
        name: r.name.clone(),
    };
    pod_node(&pod, &r.uid).map(|n| (pod, n))
}

/// A claim as [`ResourceClaimInfo`]; `class(name)` gives a class's selectors (`Err` when they do not compile,
/// `None` when the class does not exist).
fn claim_info(
    c: &api::ResourceClaim,
    compiled: &Compiled,
    class: impl Fn(&str) -> Option<Result<Vec<DeviceSelector>, String>>,
) -> ResourceClaimInfo {
    let meta = &c.metadata;
    let key = ClaimKey::new(
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or(""),
    );
    let requests = claim(c, compiled, class);
    let status = c.status.as_ref();
    let allocation = status.and_then(|s| s.allocation.as_ref()).map(|a| Allocated {
        devices: a
            .devices
            .iter()
            .flat_map(|d| d.results.iter().flatten())
            .map(|r| {
                (
                    Arc::from(r.request.as_str()),
                    DeviceId::new(&r.driver, &r.pool, &r.device),
                    r.admin_access == Some(true),
                )
            })
            .collect(),
        node_selector: a.node_selector.as_ref().map(|s| {
            s.node_selector_terms
                .iter()
                .filter_map(|t| NodeSelectorTerm::from_api(t).ok())
                .collect()
        }),
    });
    let reserved_for = status
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .map(|r| Consumer {
            api_group: r.api_group.as_deref().unwrap_or("").into(),
            resource: r.resource.as_str().into(),
            name: r.name.as_str().into(),
            uid: r.uid.as_str().into(),
        })
        .collect();
    ResourceClaimInfo {
        key,
        uid: meta.uid.as_deref().unwrap_or("").into(),
        resource_version: meta.resource_version.as_deref().unwrap_or("").into(),
        deleting: meta.deletion_timestamp.is_some(),
        requests,
        allocation,
        reserved_for,
    }
}
