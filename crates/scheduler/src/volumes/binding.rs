//! Whether a pod's claims can be satisfied on a node, and how (upstream `volumebinding/binder.go`:
//! `GetPodVolumeClaims`, `FindPodVolumes`, `findMatchingVolumes`, `checkVolumeProvisions`, `hasEnoughCapacity`;
//! and `pkg/volume/util` `FindMatchingVolume`). The VolumeBinding plugin runs [`plan`] at PreFilter and
//! [`evaluate`] at Filter; the snapshot runs both when it assumes the pod, and keeps the actions (Reserve).

use std::collections::HashSet;
use std::sync::Arc;

use super::{
    CapacityInfo, ClaimInfo, ClaimKey, NO_PROVISIONER, VolumeAction, VolumeCatalog, VolumeInfo,
    VolumeOverlay, VolumePhase,
};
use crate::model::{NodeInfo, PodInfo, PodVolume};
use crate::selectors::NodeSelectorTerm;

/// Upstream `ErrReasonBindConflict`.
pub const REASON_BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// Upstream `ErrReasonNodeConflict`.
pub const REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
/// Upstream `ErrReasonNotEnoughSpace`.
pub const REASON_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
/// Upstream `ErrReasonPVNotExist`.
pub const REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// Upstream `ErrUnboundImmediatePVC`.
pub const REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

/// How dynamic provisioning of one claim is checked on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provision {
    /// The class's allowedTopologies (`None`: any node).
    pub allowed: Option<Vec<NodeSelectorTerm>>,
    /// The class's CSIStorageCapacity objects when its driver asks for capacity tracking; `None` otherwise.
    pub capacity: Option<Vec<CapacityInfo>>,
    /// The claim's request in bytes (what a capacity must hold).
    pub request: i64,
}

impl Provision {
    /// Upstream `checkVolumeProvisions` on one node: `None` when the claim can be provisioned there, else the
    /// reason (the class's allowedTopologies, then `hasEnoughCapacity`).
    fn refuses(
        &self,
        name: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> Option<&'static str> {
        if !self
            .allowed
            .as_ref()
            .is_none_or(|terms| terms.iter().any(|t| t.matches(name, labels)))
        {
            return Some(REASON_BIND_CONFLICT);
        }
        if let Some(caps) = &self.capacity
            && !caps
                .iter()
                .any(|c| c.node_topology.matches(labels) && c.limit >= self.request)
        {
            return Some(REASON_NOT_ENOUGH_SPACE);
        }
        None
    }
}

/// What one claim of the pod needs from a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimPlan {
    /// Bound (or chosen earlier in this cycle): the volume's node affinity decides.
    Bound {
        /// The claim.
        claim: ClaimKey,
        /// Its volume; `None` when the volume does not exist.
        volume: Option<Arc<VolumeInfo>>,
    },
    /// Waiting for its provisioner on one node (the selected-node annotation, or this cycle's choice).
    Pinned {
        /// The claim.
        claim: ClaimKey,
        /// The node.
        node: Arc<str>,
        /// How provisioning is checked on that node (upstream `checkVolumeProvisions` runs for pinned claims
        /// too); `None` when the class cannot provision, so no node fits.
        provision: Option<Provision>,
    },
    /// To bind: the first candidate the node admits (smallest first), else dynamic provisioning.
    Match {
        /// The claim.
        claim: Arc<ClaimInfo>,
        /// Available volumes that match class, modes, size, mode and selector, not taken in this cycle.
        candidates: Vec<Arc<VolumeInfo>>,
        /// Set when the class has a provisioner and the claim is not pre-bound to a volume.
        provision: Option<Provision>,
    },
}

/// Why the pod cannot be scheduled anywhere now (upstream: PreFilter's UnschedulableAndUnresolvable statuses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError(pub String);

/// Upstream `GetPodVolumeClaims` + the per-claim half of `FindPodVolumes`: sorts the pod's claims into bound,
/// pinned and to-match, with the candidates each may take. Errors: a missing claim, a claim being deleted, an
/// unbound claim of an `Immediate` class (the PV controller binds those, the pod waits), storage the runtime may
/// not read ([`VolumeCatalog::unreadable`]).
pub fn plan(
    catalog: &VolumeCatalog,
    overlay: &VolumeOverlay,
    pod: &PodInfo,
) -> Result<Vec<ClaimPlan>, PlanError> {
    if !catalog.unreadable.is_empty() && pod.spec.volumes.iter().any(|v| v.claim().is_some()) {
        return Err(PlanError(format!(
            "the scheduler may not read {} (grant its ServiceAccount get, list and watch)",
            catalog.unreadable.join(", ")
        )));
    }
    let mut out = Vec::new();
    let mut unbound_immediate = false;
    for v in &pod.spec.volumes {
        let PodVolume::Claim { name, ephemeral } = v else {
            continue;
        };
        let key = ClaimKey {
            namespace: pod.key.namespace.clone(),
            name: name.clone(),
        };
        let Some(claim) = catalog.claim(&key) else {
            return Err(PlanError(if *ephemeral {
                format!(
                    "waiting for ephemeral volume controller to create the persistentvolumeclaim {name:?}"
                )
            } else {
                format!("persistentvolumeclaim {name:?} not found")
            }));
        };
        if claim.deleting {
            return Err(PlanError(format!(
                "persistentvolumeclaim {name:?} is being deleted"
            )));
        }
        match overlay.choice(&key) {
            Some(VolumeAction::Bind { volume, .. }) => {
                out.push(ClaimPlan::Bound {
                    volume: catalog.volume(volume).cloned(),
                    claim: key,
                });
                continue;
            }
            Some(VolumeAction::Provision { node, .. }) => {
                // Checked when this cycle chose it.
                out.push(ClaimPlan::Pinned {
                    claim: key,
                    node: node.clone(),
                    provision: Some(Provision {
                        allowed: None,
                        capacity: None,
                        request: claim.request,
                    }),
                });
                continue;
            }
            None => {}
        }
        if claim.bound
            && let Some(pv) = &claim.volume_name
        {
            out.push(ClaimPlan::Bound {
                volume: catalog.volume(pv).cloned(),
                claim: key,
            });
            continue;
        }
        let class = catalog.classes.get(&claim.class);
        // Upstream `GetPodVolumeClaims`: only a claim of a WaitForFirstConsumer class with no `spec.volumeName`
        // is the scheduler's to bind; an immediate one and a pre-bound one (volumeName set, not yet fully bound)
        // wait for the PV controller.
        if claim.volume_name.is_some() || !class.is_some_and(|c| c.wait_for_first_consumer) {
            unbound_immediate = true;
            continue;
        }
        let provision = class
            .filter(|c| &*c.provisioner != NO_PROVISIONER && !c.provisioner.is_empty())
            .map(|c| Provision {
                allowed: c.allowed_topologies.clone(),
                capacity: catalog.capacity_drivers.contains(&*c.provisioner).then(|| {
                    catalog
                        .capacities
                        .iter()
                        .filter(|cap| cap.class == claim.class)
                        .cloned()
                        .collect()
                }),
                request: claim.request,
            });
        // Upstream `FindPodVolumes`: a pinned claim skips volume matching and is only provisioned on its node.
        if let Some(node) = &claim.selected_node {
            out.push(ClaimPlan::Pinned {
                claim: key,
                node: node.clone(),
                provision,
            });
            continue;
        }
        out.push(ClaimPlan::Match {
            candidates: candidates(catalog, overlay, claim),
            claim: claim.clone(),
            provision,
        });
    }
    if unbound_immediate {
        return Err(PlanError(REASON_UNBOUND_IMMEDIATE.into()));
    }
    Ok(out)
}

/// Upstream `FindMatchingVolume`'s filter: available volumes of the claim's class that have its access modes,
/// volume mode, size and selector, and are free or pre-bound to it (`claimRef`); pre-bound first, then smallest,
/// then by name. Only for claims without `spec.volumeName` ([`plan`] leaves pre-bound claims to the PV
/// controller).
fn candidates(catalog: &VolumeCatalog, overlay: &VolumeOverlay, claim: &ClaimInfo) -> Vec<Arc<VolumeInfo>> {
    let fits = |v: &VolumeInfo| {
        let for_claim = match &v.claim_ref {
            None => true,
            Some((k, uid)) => *k == claim.key && (uid.is_empty() || *uid == claim.uid),
        };
        for_claim
            && !v.deleting
            && v.phase == VolumePhase::Available
            && v.class == claim.class
            && v.access.contains(claim.access)
            && v.capacity >= claim.request
            && v.block == claim.block
            && claim.selector.as_ref().is_none_or(|s| s.matches(&v.labels))
            && !overlay.is_taken(&v.name)
    };
    let mut out: Vec<Arc<VolumeInfo>> = catalog.volumes.values().filter(|v| fits(v)).cloned().collect();
    out.sort_by(|a, b| {
        let pre = |v: &VolumeInfo| v.claim_ref.is_none();
        (pre(a), a.capacity, &a.name).cmp(&(pre(b), b.capacity, &b.name))
    });
    out
}

/// Upstream `FindPodVolumes` on one node: the actions that satisfy every claim there, or the reasons it cannot
/// (deduplicated, in upstream's order of checks).
pub fn evaluate(plans: &[ClaimPlan], node: &NodeInfo) -> Result<Vec<VolumeAction>, Vec<&'static str>> {
    let name = node.name();
    let labels = &node.node.labels;
    let mut reasons: Vec<&'static str> = Vec::new();
    let push = |r: &'static str, reasons: &mut Vec<&'static str>| {
        if !reasons.contains(&r) {
            reasons.push(r);
        }
    };
    let mut actions = Vec::new();
    let mut chosen: HashSet<&str> = HashSet::new();
    for p in plans {
        match p {
            ClaimPlan::Bound { volume: None, .. } => push(REASON_PV_NOT_EXIST, &mut reasons),
            ClaimPlan::Bound { volume: Some(v), .. } => {
                if !v.admits(name, labels) {
                    push(REASON_NODE_CONFLICT, &mut reasons);
                }
            }
            ClaimPlan::Pinned {
                claim,
                node,
                provision,
            } => {
                let refused = match provision {
                    _ if **node != *name => Some(REASON_BIND_CONFLICT),
                    None => Some(REASON_BIND_CONFLICT),
                    Some(pr) => pr.refuses(name, labels),
                };
                match refused {
                    Some(r) => push(r, &mut reasons),
                    None => actions.push(VolumeAction::Provision {
                        claim: claim.clone(),
                        node: node.clone(),
                    }),
                }
            }
            ClaimPlan::Match {
                claim,
                candidates,
                provision,
            } => {
                if let Some(v) = candidates
                    .iter()
                    .find(|v| !chosen.contains(&*v.name) && v.admits(name, labels))
                {
                    chosen.insert(&v.name);
                    actions.push(VolumeAction::Bind {
                        claim: claim.key.clone(),
                        claim_uid: claim.uid.clone(),
                        volume: v.name.clone(),
                        resource_version: v.resource_version.clone(),
                    });
                    continue;
                }
                let Some(pr) = provision else {
                    push(REASON_BIND_CONFLICT, &mut reasons);
                    continue;
                };
                if let Some(r) = pr.refuses(name, labels) {
                    push(r, &mut reasons);
                    continue;
                }
                actions.push(VolumeAction::Provision {
                    claim: claim.key.clone(),
                    node: node.node.name.clone(),
                });
            }
        }
    }
    if reasons.is_empty() {
        Ok(actions)
    } else {
        Err(reasons)
    }
}

/// Reserve: the actions for `pod` on `node` given the cycle's earlier choices; empty when the pod has nothing to
/// bind there (or cannot: Filter has already said so).
pub fn reserve(
    catalog: &VolumeCatalog,
    overlay: &VolumeOverlay,
    pod: &PodInfo,
    node: &NodeInfo,
) -> Vec<VolumeAction> {
    plan(catalog, overlay, pod)
        .ok()
        .and_then(|plans| evaluate(&plans, node).ok())
        .unwrap_or_default()
}

impl ClaimPlan {
    /// The claim this plan is for.
    pub fn claim(&self) -> &ClaimKey {
        match self {
            ClaimPlan::Bound { claim, .. } | ClaimPlan::Pinned { claim, .. } => claim,
            ClaimPlan::Match { claim, .. } => &claim.key,
        }
    }
}

/// Why `pods` (in order) cannot all have their claims satisfied on `nodes`: `pod p: claim ns/c: <upstream
/// reasons>` for the first claim no node can satisfy once the earlier pods took their volumes (resources are not
/// considered), or `pod p: <reason>` for a pod-level reason (a missing claim, an unbound immediate claim). `None`
/// when every pod's claims can be satisfied. For messages: the group condition's closest domain and `phalanx
/// explain`'s domains.
pub fn blocking_claim<'a>(
    catalog: &VolumeCatalog,
    pods: &[Arc<PodInfo>],
    nodes: impl IntoIterator<Item = &'a NodeInfo> + Clone,
) -> Option<String> {
    let mut overlay = VolumeOverlay::default();
    for (k, pod) in pods
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.spec.volumes.is_empty())
    {
        let name = &pod.key.name;
        let plans = match plan(catalog, &overlay, pod) {
            Ok(p) => p,
            Err(e) => return Some(format!("pod {name}: {}", e.0)),
        };
        if let Some(actions) = nodes.clone().into_iter().find_map(|n| evaluate(&plans, n).ok()) {
            overlay.record(k, pod.key.clone(), actions);
            continue;
        }
        // The first claim no node can satisfy by itself (given what the earlier pods took).
        for (i, p) in plans.iter().enumerate() {
            let mut reasons: Vec<&'static str> = Vec::new();
            let mut ok = false;
            for n in nodes.clone() {
                match evaluate(&plans[i..=i], n) {
                    Ok(_) => {
                        ok = true;
                        break;
                    }
                    Err(rs) => rs.into_iter().for_each(|r| {
                        if !reasons.contains(&r) {
                            reasons.push(r);
                        }
                    }),
                }
            }
            if !ok {
                let why = if reasons.is_empty() {
                    "no node to consider".to_owned()
                } else {
                    reasons.join(", ")
                };
                return Some(format!("pod {name}: claim {}: {why}", p.claim()));
            }
        }
        let claims: Vec<String> = plans.iter().map(|p| p.claim().to_string()).collect();
        return Some(format!(
            "pod {name}: claims {} cannot all be satisfied on one node",
            claims.join(", ")
        ));
    }
    None
}
