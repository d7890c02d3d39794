//! What DynamicResources does per pod, in pure functions: PreFilter resolves the pod's claims ([`plan`]), Filter
//! allocates them on one node ([`fit`]), Reserve records the result ([`reserve`]), and the decision carries the
//! writes PreBind makes ([`writes`]). Upstream: `pkg/scheduler/framework/plugins/dynamicresources`
//! (`PreFilter`, `Filter`, `Reserve`, `PreBind` → `bindClaim`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::overlay::{DeviceOverlay, NodeAllocations};
use super::summary::{FastPlan, Verdict};
use super::{
    Allocated, AllocationOutcome, ClaimAllocation, ClaimRequests, Device, DeviceCatalog, DeviceId,
    ResourceClaimInfo, Shortfall, allocate_until,
};
use crate::model::{NodeInfo, PodClaimSource, PodInfo};
use crate::volumes::ClaimKey;

/// Most entries of a claim's `status.reservedFor` (upstream `ResourceClaimReservedForMaxSize`): a claim shared by
/// more pods cannot be reserved for the rest.
pub const RESERVED_FOR_MAX: usize = 256;

/// Upstream's Filter reason when the claims do not fit a node.
pub const CANNOT_ALLOCATE: &str = "cannot allocate all claims";
/// Upstream's Filter reason when an allocated claim cannot be used on a node.
pub const NOT_AVAILABLE: &str = "resourceclaim not available on the node";
/// Upstream's Filter reason when allocation passed the filter timeout ([`super::FILTER_TIMEOUT`]).
pub const TIMED_OUT: &str = "timed out trying to allocate devices";

/// PreFilter's result for a pod with claims.
#[derive(Debug, Clone)]
pub struct ClaimPlan {
    catalog: Arc<DeviceCatalog>,
    /// Every claim the pod uses, in the pod's order.
    pub claims: Vec<ClaimKey>,
    /// Claims allocated before this cycle.
    allocated: Vec<(ClaimKey, Allocated)>,
    /// Claims other pods allocated earlier in this cycle, with their devices.
    in_cycle: Vec<(ClaimKey, Vec<DeviceId>)>,
    /// Claims this pod allocates.
    new: Vec<Arc<ResourceClaimInfo>>,
    /// Per node, the claims this cycle allocated there for one pod only: they are allocated again with the
    /// pod's (joint allocation).
    movable: HashMap<Arc<str>, Vec<Arc<ResourceClaimInfo>>>,
    /// Devices taken in this cycle and the claim that took them.
    taken: HashMap<DeviceId, ClaimKey>,
    /// When this cycle's allocation must stop, and the timeout it came from (for the message).
    deadline: Option<Instant>,
    timeout: Duration,
    /// The counts that let Filter answer without allocating on most nodes ([`check`]).
    fast: Option<FastPlan>,
}

/// Why a pod's claims stop it on every node (PreFilter), with the message upstream gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolvable(pub String);

/// The first `resourceClaimTemplateName` entry of `pod` whose claim does not exist yet and whose template is missing
/// by `template_exists` (given a template name in the pod's namespace): `(entry, template)`. kube-controller-manager
/// never creates such a claim (its resourceclaim controller, `pkg/controller/resourceclaim/controller.go`, fails on
/// the template lookup and retries), so the pod waits until the template appears.
pub fn missing_template(pod: &PodInfo, template_exists: impl Fn(&str) -> bool) -> Option<(&str, &str)> {
    pod.spec.resource_claims.iter().find_map(|c| match &c.source {
        PodClaimSource::NotCreated { template: Some(t) } if !template_exists(t) => Some((&*c.name, &**t)),
        _ => None,
    })
}

/// The message of a pod held at PreEnqueue because the claim of a `resourceClaimTemplateName` entry does not exist
/// yet: upstream's `pod "ns/name": ResourceClaim not created yet` (`resourceclaim.Name`,
/// `staging/src/k8s.io/dynamic-resource-allocation/resourceclaim/resourceclaim.go`, returned as is by DynamicResources
/// PreEnqueue, `pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go`), followed, when an entry's
/// ResourceClaimTemplate is missing ([`missing_template`]), by that entry and template:
/// `pod "ns/p": ResourceClaim not created yet: resourceClaims "gpu": ResourceClaimTemplate "one" not found`.
/// `None` when no entry waits for its claim.
pub fn claim_not_created(pod: &PodInfo, template_exists: impl Fn(&str) -> bool) -> Option<String> {
    pod.spec
        .resource_claims
        .iter()
        .any(|c| matches!(c.source, PodClaimSource::NotCreated { .. }))
        .then(|| {
            let head = format!("pod \"{}\": ResourceClaim not created yet", pod.key);
            match missing_template(pod, template_exists) {
                Some((entry, t)) => {
                    format!("{head}: resourceClaims {entry:?}: ResourceClaimTemplate {t:?} not found")
                }
                None => head,
            }
        })
}

/// PreFilter: the pod's claims, or `Ok(None)` when it has none. `nodes` are the snapshot's (Filter's counting
/// finds their rows by position, [`super::summary::FastPlan::new`]); empty when no Filter follows.
///
/// # Errors
/// DRA is not served; a claim that does not exist (`resourceclaim "x" not found`), is being deleted, or cannot
/// be allocated at all (a missing class, an unsupported field: the claim's own error).
pub fn plan(
    catalog: &Arc<DeviceCatalog>,
    overlay: &DeviceOverlay,
    pod: &PodInfo,
    nodes: &[NodeInfo],
) -> Result<Option<ClaimPlan>, Unresolvable> {
    if pod.spec.resource_claims.is_empty() {
        return Ok(None);
    }
    if !catalog.served {
        return Err(Unresolvable(
            "resource.k8s.io/v1 is not served by the API server: Dynamic Resource Allocation is off".into(),
        ));
    }
    if !catalog.unreadable.is_empty() {
        return Err(Unresolvable(format!(
            "the scheduler may not list {} (resource.k8s.io)",
            catalog.unreadable.join(", ")
        )));
    }
    let mut p = ClaimPlan {
        catalog: catalog.clone(),
        claims: Vec::new(),
        allocated: Vec::new(),
        in_cycle: Vec::new(),
        new: Vec::new(),
        movable: HashMap::new(),
        taken: HashMap::new(),
        deadline: None,
        timeout: catalog.filter_timeout,
        fast: None,
    };
    for c in &pod.spec.resource_claims {
        let name = match &c.source {
            PodClaimSource::Claim(n) => n,
            PodClaimSource::NotNeeded => continue,
            PodClaimSource::NotCreated { .. } => {
                return Err(Unresolvable(claim_not_created(pod, |_| true).unwrap_or_default()));
            }
        };
        let key = ClaimKey::new(&pod.key.namespace, name);
        let Some(info) = catalog.claims.get(&key) else {
            return Err(Unresolvable(format!(
                "resourceclaim.resource.k8s.io \"{name}\" not found"
            )));
        };
        if info.deleting {
            return Err(Unresolvable(format!("resourceclaim \"{name}\" is being deleted")));
        }
        if p.claims.contains(&key) {
            continue;
        }
        // Upstream PreFilter (`resourceclaim.CanBeReserved`): a claim whose `reservedFor` is full takes no new
        // consumer, counting the pods this cycle already reserved it for.
        if !info.reserved_for_pod(&pod.uid)
            && info.reserved_for.len() + overlay.users(&key) >= RESERVED_FOR_MAX
        {
            return Err(Unresolvable(format!(
                "resourceclaim in use: \"{name}\" has {RESERVED_FOR_MAX} consumers in reservedFor, the most it takes"
            )));
        }
        p.claims.push(key.clone());
        if let Some(a) = &info.allocation {
            p.allocated.push((key, a.clone()));
        } else if let Some((_, a)) = overlay.allocation(&key) {
            p.in_cycle
                .push((key, a.devices.iter().map(|(_, d, _)| d.clone()).collect()));
        } else {
            if let Err(e) = &info.requests {
                return Err(Unresolvable(e.clone()));
            }
            p.new.push(info.clone());
        }
    }
    if !p.new.is_empty() {
        p.taken = overlay.taken().map(|(d, c)| (d.clone(), c.clone())).collect();
        p.movable = overlay_movable(overlay, catalog);
        p.deadline = overlay.allocation_deadline(catalog.filter_timeout);
        // Reserve plans without nodes: it allocates on its node, and needs no counts.
        if !nodes.is_empty() {
            p.fast = FastPlan::new(catalog, overlay, &p.new, nodes);
        }
    }
    Ok(Some(p))
}

fn overlay_movable(
    overlay: &DeviceOverlay,
    catalog: &DeviceCatalog,
) -> HashMap<Arc<str>, Vec<Arc<ResourceClaimInfo>>> {
    let mut out: HashMap<Arc<str>, Vec<Arc<ResourceClaimInfo>>> = HashMap::new();
    for (node, allocations) in overlay.nodes() {
        // In the order they were allocated in, so that the search is the same on every call.
        for (key, _) in &allocations.claims {
            if overlay.users(key) == 1
                && let Some(info) = catalog.claims.get(key)
            {
                out.entry(node.clone()).or_default().push(info.clone());
            }
        }
    }
    out
}

/// Why a pod's claims do not fit a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misfit {
    /// An allocated claim's devices cannot be used there ([`NOT_AVAILABLE`]); preemption cannot help.
    NotAvailable(ClaimKey),
    /// The claims cannot be allocated there ([`CANNOT_ALLOCATE`]): the request that is short and by how much, or
    /// `None` when the search ran out of its budget.
    CannotAllocate(Option<ShortRequest>),
    /// The cycle's device allocation passed its filter timeout ([`TIMED_OUT`]), which this is.
    TimedOut(Duration),
}

/// The request a node could not satisfy, for messages ("request gpu of claim ns/c: 2 devices of class
/// gpu.example.com wanted, 1 free").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShortRequest {
    /// The claim.
    pub claim: ClaimKey,
    /// The request, its class, devices wanted and matching devices free, and a selector error.
    pub shortfall: Shortfall,
}

impl std::fmt::Display for ShortRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.shortfall;
        match &s.error {
            Some(e) => write!(f, "request {} of claim {}: {e}", s.request, self.claim),
            None => write!(
                f,
                "request {} of claim {}: {} devices of class {} wanted, {} free",
                s.request,
                self.claim,
                s.wanted,
                s.class,
                s.free.min(s.wanted)
            ),
        }
    }
}

/// Filter: whether the pod's claims fit `node`; `Ok(Some(..))` is the node's new joint allocation when the pod
/// allocates claims there.
///
/// # Errors
/// [`Misfit`].
pub fn fit(plan: &ClaimPlan, node: &NodeInfo) -> Result<Option<NodeAllocations>, Misfit> {
    available(plan, node)?;
    if plan.new.is_empty() {
        return Ok(None);
    }
    allocate_on(plan, node)
}

/// Filter's answer: [`fit`]'s, without the allocation. Where the counts of free matching devices decide
/// ([`super::summary`]) it is given without an allocation attempt, a shortfall then as
/// `CannotAllocate(None)` (Filter's reason is the same [`CANNOT_ALLOCATE`]; [`fit`] names the request).
///
/// # Errors
/// [`Misfit`].
pub fn check(plan: &ClaimPlan, node: &NodeInfo) -> Result<(), Misfit> {
    available(plan, node)?;
    if plan.new.is_empty() {
        return Ok(());
    }
    match plan
        .fast
        .as_ref()
        .map(|f| f.verdict(&plan.catalog, node, plan.deadline))
    {
        Some(Verdict::Fits) => Ok(()),
        Some(Verdict::Short) => Err(Misfit::CannotAllocate(None)),
        Some(Verdict::Search) | None => allocate_on(plan, node).map(|_| ()),
    }
}

/// The claims the pod uses that are allocated already (before or in this cycle) must be usable on `node`.
fn available(plan: &ClaimPlan, node: &NodeInfo) -> Result<(), Misfit> {
    let name = &node.node.name;
    for (key, a) in &plan.allocated {
        if !a.admits(name, &node.node.labels) {
            return Err(Misfit::NotAvailable(key.clone()));
        }
    }
    if plan.in_cycle.iter().any(|(_, d)| !d.is_empty()) {
        let reach: HashSet<&DeviceId> = plan
            .catalog
            .devices_for(node)
            .into_iter()
            .map(|d| &d.id)
            .collect();
        for (key, devices) in &plan.in_cycle {
            if devices.iter().any(|d| !reach.contains(d)) {
                return Err(Misfit::NotAvailable(key.clone()));
            }
        }
    }
    Ok(())
}

/// The joint allocation of the pod's new claims with the ones this cycle allocated on `node` for one pod.
fn allocate_on(plan: &ClaimPlan, node: &NodeInfo) -> Result<Option<NodeAllocations>, Misfit> {
    let movable = plan.movable.get(&node.node.name).map_or(&[][..], Vec::as_slice);
    let joint: Vec<&Arc<ResourceClaimInfo>> = movable.iter().chain(&plan.new).collect();
    let requests: Vec<&ClaimRequests> = joint.iter().filter_map(|c| c.requests.as_ref().ok()).collect();
    if requests.len() != joint.len() {
        // A movable claim's requests were valid when it was allocated; the catalog cannot change in a cycle.
        return Err(Misfit::CannotAllocate(None));
    }
    let devices = plan.catalog.devices_for(node);
    // `joint` holds a gang's claims on one node: a few entries, searched linearly.
    let in_use = |d: &DeviceId| {
        plan.catalog.held(d, node)
            || (!plan.taken.is_empty()
                && plan
                    .taken
                    .get(d)
                    .is_some_and(|c| !joint.iter().any(|j| j.key == *c)))
    };
    match allocate_until(
        &requests,
        &devices,
        in_use,
        super::allocator::ALLOCATION_BUDGET,
        plan.deadline,
    ) {
        AllocationOutcome::Allocated(result) => Ok(Some(NodeAllocations {
            claims: joint.iter().map(|c| c.key.clone()).zip(result).collect(),
        })),
        AllocationOutcome::Unsatisfiable(s) => Err(Misfit::CannotAllocate(Some(ShortRequest {
            claim: joint[s.claim].key.clone(),
            shortfall: s,
        }))),
        AllocationOutcome::BudgetExhausted { .. } => Err(Misfit::CannotAllocate(None)),
        AllocationOutcome::TimedOut => Err(Misfit::TimedOut(plan.timeout)),
    }
}

/// Reserve: the claims `pod` uses and, when it allocates on `node`, the node's new allocations; `None` when the
/// pod has no claims or they do not fit (Filter said they do; a cycle never assumes a misfit).
pub(crate) fn reserve(
    catalog: &Arc<DeviceCatalog>,
    overlay: &DeviceOverlay,
    pod: &PodInfo,
    node: &NodeInfo,
) -> Option<(Vec<ClaimKey>, Option<NodeAllocations>)> {
    let plan = plan(catalog, overlay, pod, &[]).ok()??;
    let now = fit(&plan, node).ok()?;
    Some((plan.claims, now))
}

/// A claim's allocation as PreBind writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAllocation {
    /// `status.allocation.devices.results` as `(request, device, adminAccess)`.
    pub devices: Vec<(Arc<str>, DeviceId, bool)>,
    /// The node the allocation is bound to (`status.allocation.nodeSelector` on `metadata.name`) when a device is
    /// local to it; `None` when every device is reachable from other nodes too.
    pub node: Option<Arc<str>>,
}

/// What PreBind writes to one claim for one pod: the allocation when this cycle made it, and the pod's entry
/// in `status.reservedFor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimWrite {
    /// The claim.
    pub claim: ClaimKey,
    /// Its metadata.uid.
    pub uid: Arc<str>,
    /// Its metadata.resourceVersion, the write's precondition.
    pub resource_version: Arc<str>,
    /// The allocation to write; `None` when the claim is allocated already.
    pub allocation: Option<DeviceAllocation>,
}

/// The writes for an assumed pod: one per claim it uses and is not reserved for yet.
pub fn writes(catalog: &DeviceCatalog, overlay: &DeviceOverlay, pod: &PodInfo) -> Vec<ClaimWrite> {
    let mut out = Vec::new();
    for key in overlay.claims_of(&pod.key) {
        let Some(info) = catalog.claims.get(key) else {
            continue;
        };
        if info.allocation.is_some() && info.reserved_for_pod(&pod.uid) {
            continue;
        }
        let allocation = overlay
            .allocation(key)
            .map(|(on, a)| allocation_of(catalog, on, a));
        out.push(ClaimWrite {
            claim: key.clone(),
            uid: info.uid.clone(),
            resource_version: info.resource_version.clone(),
            allocation: if info.allocation.is_some() {
                None
            } else {
                allocation
            },
        });
    }
    out
}

fn allocation_of(catalog: &DeviceCatalog, node: &Arc<str>, a: &ClaimAllocation) -> DeviceAllocation {
    let local = catalog.node_devices.get(node);
    let on_node = a
        .devices
        .iter()
        .any(|(_, d, _)| local.is_some_and(|l| l.iter().any(|x| x.id == *d)));
    DeviceAllocation {
        devices: a.devices.clone(),
        node: on_node.then(|| node.clone()),
    }
}

/// For a topology domain (its `nodes`), the first device class the pending `pods` want more of than the domain
/// has free, as `<wanted> devices of class <class> wanted, <free> free` (for explain and the group's closest-domain
/// note; `None` when every class fits or the pods claim nothing to allocate). Counts each `ExactCount` request of
/// the pods' unallocated claims (a shared claim once) against the devices of the domain that match the
/// request's selectors and no other claim holds.
pub fn domain_shortfall<'a>(
    catalog: &DeviceCatalog,
    pods: &[Arc<PodInfo>],
    nodes: impl IntoIterator<Item = &'a NodeInfo>,
) -> Option<String> {
    let mut claims: Vec<&ResourceClaimInfo> = Vec::new();
    for p in pods {
        for c in &p.spec.resource_claims {
            let PodClaimSource::Claim(name) = &c.source else {
                continue;
            };
            let key = ClaimKey::new(&p.key.namespace, name);
            if let Some(info) = catalog.claims.get(&key)
                && info.allocation.is_none()
                && !claims.iter().any(|x| x.key == key)
            {
                claims.push(info);
            }
        }
    }
    if claims.is_empty() {
        return None;
    }
    let nodes: Vec<&NodeInfo> = nodes.into_iter().collect();
    let mut free: Vec<(&Device, &NodeInfo)> = Vec::new();
    let mut seen = HashSet::new();
    for n in &nodes {
        for d in catalog.devices_for(n) {
            if !catalog.held(&d.id, n) && seen.insert(&d.id) {
                free.push((d, n));
            }
        }
    }
    // class → (wanted, matching free devices)
    let mut by_class: Vec<(Arc<str>, u64, HashSet<&DeviceId>)> = Vec::new();
    for c in claims {
        let Ok(r) = &c.requests else { continue };
        for req in &r.requests {
            let super::AllocationMode::ExactCount(n) = req.mode else {
                continue;
            };
            let i = match by_class.iter().position(|(k, _, _)| *k == req.class) {
                Some(i) => i,
                None => {
                    by_class.push((req.class.clone(), 0, HashSet::new()));
                    by_class.len() - 1
                }
            };
            by_class[i].1 += u64::from(n);
            for (d, _) in &free {
                if req.selectors.iter().all(|s| s.matches(d).unwrap_or(false)) {
                    by_class[i].2.insert(&d.id);
                }
            }
        }
    }
    by_class
        .into_iter()
        .find(|(_, wanted, f)| (f.len() as u64) < *wanted)
        .map(|(class, wanted, f)| format!("{wanted} devices of class {class} wanted, {} free", f.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PodResourceClaim;

    fn pod(entries: &[(&str, PodClaimSource)]) -> PodInfo {
        let mut p = PodInfo::simple("ns", "p", 100);
        Arc::make_mut(&mut p.spec).resource_claims = entries
            .iter()
            .map(|(name, source)| PodResourceClaim {
                name: (*name).into(),
                source: source.clone(),
            })
            .collect();
        p
    }

    fn from(template: &str) -> PodClaimSource {
        PodClaimSource::NotCreated {
            template: Some(template.into()),
        }
    }

    #[test]
    fn a_claim_not_created_names_its_entry_and_template_when_the_template_is_missing() {
        let p = pod(&[
            ("ready", PodClaimSource::Claim("c".into())),
            ("nic", from("exists")),
            ("gpu", from("one")),
        ]);
        assert_eq!(
            claim_not_created(&p, |t| t == "exists").as_deref(),
            Some(
                "pod \"ns/p\": ResourceClaim not created yet: resourceClaims \"gpu\": ResourceClaimTemplate \"one\" \
                 not found"
            )
        );
        // Every template exists: kube-controller-manager is about to create the claim; upstream's words alone.
        assert_eq!(
            claim_not_created(&p, |_| true).as_deref(),
            Some("pod \"ns/p\": ResourceClaim not created yet")
        );
        // An entry without a template (neither field set) has nothing to name.
        let bare = pod(&[("x", PodClaimSource::NotCreated { template: None })]);
        assert_eq!(
            claim_not_created(&bare, |_| false).as_deref(),
            Some("pod \"ns/p\": ResourceClaim not created yet")
        );
        let resolved = pod(&[
            ("a", PodClaimSource::Claim("c".into())),
            ("b", PodClaimSource::NotNeeded),
        ]);
        assert_eq!(claim_not_created(&resolved, |_| false), None);
        assert_eq!(missing_template(&p, |t| t == "exists"), Some(("gpu", "one")));
        assert_eq!(missing_template(&p, |_| true), None);
    }
}
