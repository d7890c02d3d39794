//! Capacity facts about one scheduling attempt, computed from the nodes of the cycle's snapshot (the core's
//! `NodeInfo`: allocatable and requested per node, as the NodeResourcesFit filter sees them, upstream
//! `pkg/scheduler/framework/plugins/noderesources/fit.go`). These explain the core's verdict in numbers; the
//! verdict itself (which nodes pass Filter, which placement wins) is the core's and is quoted, never recomputed.

use std::collections::BTreeMap;

use phalanx_scheduler::dra::DeviceCatalog;
use phalanx_scheduler::{NodeInfo, PodInfo, resources::Resources, volumes::VolumeCatalog};
use serde::Serialize;

/// One resource the pending pods need more of than the considered nodes have free: summed over all nodes, or for
/// the largest single pod against the most free on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Shortfall {
    /// Resource name (`cpu`, `memory`, an extended resource such as `nvidia.com/gpu`).
    pub resource: String,
    /// Sum of the pending pods' requests, in the resource's unit (millicores for cpu, bytes for memory).
    pub needed: i64,
    /// Sum over considered nodes of allocatable minus requested.
    pub free: i64,
    /// `needed - free`, 0 when the sum fits.
    pub missing: i64,
    /// The largest request of one pending pod.
    pub largest_pod: i64,
    /// The most free on one considered node.
    pub largest_free: i64,
}

/// How much of a group one topology domain can hold, by resources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainFit {
    /// The topology key (`spec.schedulingConstraints.topology[].key`).
    pub key: String,
    /// The domain: the key's value.
    pub value: String,
    /// Pending pods that fit on the domain's free resources (first fit in queue order).
    pub fit: usize,
    /// Pending pods of the group.
    pub pods: usize,
    /// Summed requests of the pods that do not fit, by resource (same units as [`Shortfall`]).
    pub more_needed: BTreeMap<String, i64>,
    /// The first claim of a pending pod that no node of the domain can satisfy (`pod p: claim ns/c: <upstream
    /// reasons>`), when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volumes: Option<String>,
    /// The first device class the pending pods want more of than the domain has free (`8 devices of class
    /// gpu.example.com wanted, 6 free`), when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub devices: Option<String>,
}

/// A pod that holds capacity on a node the group needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// Node.
    pub node: String,
    /// `namespace/name` of the pod.
    pub pod: String,
    /// Its PodGroup, if any.
    pub group: Option<String>,
    /// Its priority (`spec.priority`).
    pub priority: i32,
    /// Its requests of the resources the pending pods request (same units as [`Shortfall`]), zeros left out.
    pub requests: BTreeMap<String, i64>,
}

fn free_of(n: &NodeInfo) -> Resources {
    let mut free = n.node.allocatable.clone();
    free.sub(&n.requested);
    free
}

fn names(pods: &[std::sync::Arc<PodInfo>]) -> Vec<String> {
    let mut v: Vec<String> = vec!["cpu".into(), "memory".into()];
    for p in pods {
        for (s, _) in &p.spec.requests.scalar {
            if !v.iter().any(|x| x == &**s) {
                v.push(s.to_string());
            }
        }
    }
    v
}

/// Per resource, what the pending `pods` need beyond the free capacity of `nodes`: more than all nodes have free
/// together, or a pod larger than the most free on any one node. Empty when neither holds (then the group fails on
/// how the room is split between nodes or domains, or on something else than resources).
pub fn shortfall(nodes: &[NodeInfo], pods: &[std::sync::Arc<PodInfo>]) -> Vec<Shortfall> {
    let mut out = Vec::new();
    for r in names(pods) {
        let needed: i64 = pods.iter().map(|p| p.spec.requests.get(&r)).sum();
        let largest_pod = pods.iter().map(|p| p.spec.requests.get(&r)).max().unwrap_or(0);
        let frees: Vec<i64> = nodes
            .iter()
            .filter(|n| !n.node.unschedulable)
            .map(|n| free_of(n).get(&r).max(0))
            .collect();
        let free: i64 = frees.iter().sum();
        let largest_free = frees.iter().copied().max().unwrap_or(0);
        if needed > free || largest_pod > largest_free {
            out.push(Shortfall {
                resource: r,
                needed,
                free,
                missing: (needed - free).max(0),
                largest_pod,
                largest_free,
            });
        }
    }
    out
}

fn fits(free: &Resources, req: &Resources, names: &[String]) -> bool {
    names.iter().all(|r| req.get(r) <= free.get(r))
}

/// The first pending pod whose claims no node of `nodes` can satisfy once the pods before it took their volumes,
/// as `pod <name>: claim ns/c: <reasons>` ([`phalanx_scheduler::volumes::binding::blocking_claim`]).
pub fn volume_blocker<'a>(
    volumes: &VolumeCatalog,
    pods: &[std::sync::Arc<PodInfo>],
    nodes: impl IntoIterator<Item = &'a NodeInfo> + Clone,
) -> Option<String> {
    if pods.iter().all(|p| p.spec.volumes.is_empty()) {
        return None;
    }
    phalanx_scheduler::volumes::binding::blocking_claim(volumes, pods, nodes)
}

/// The pending pods' claims that wait for their provisioner on a node already chosen (the
/// `volume.kubernetes.io/selected-node` annotation, set by an earlier PreBind), e.g. `claims ns/a (on n1), ns/b (on
/// n2) wait for provisioner "example.com/x" to create their volumes; the pods bind once the claims are Bound`.
/// `None` when there are none.
pub fn provisioning_waits(volumes: &VolumeCatalog, pods: &[std::sync::Arc<PodInfo>]) -> Option<String> {
    let mut waiting: Vec<(String, String, String)> = Vec::new();
    for p in pods {
        for name in p.spec.volumes.iter().filter_map(|v| v.claim()) {
            let key = phalanx_scheduler::volumes::ClaimKey {
                namespace: p.key.namespace.clone(),
                name: name.clone(),
            };
            let Some(c) = volumes.claim(&key) else { continue };
            let Some(node) = c.selected_node.as_deref().filter(|_| !c.bound) else {
                continue;
            };
            let provisioner = volumes
                .classes
                .get(&c.class)
                .map_or_else(|| "?".to_owned(), |k| k.provisioner.to_string());
            let entry = (key.to_string(), node.to_owned(), provisioner);
            if !waiting.contains(&entry) {
                waiting.push(entry);
            }
        }
    }
    if waiting.is_empty() {
        return None;
    }
    let mut provisioners: Vec<&str> = waiting.iter().map(|w| w.2.as_str()).collect();
    provisioners.sort();
    provisioners.dedup();
    let list: Vec<String> = waiting.iter().map(|(c, n, _)| format!("{c} (on {n})")).collect();
    let provisioners: Vec<String> = provisioners.iter().map(|p| format!("{p:?}")).collect();
    let (claims, verb, what, they) = if waiting.len() == 1 {
        ("claim", "waits", "its volume", "it is")
    } else {
        ("claims", "wait", "their volumes", "they are")
    };
    let by = if provisioners.len() == 1 {
        "provisioner"
    } else {
        "provisioners"
    };
    Some(format!(
        "{claims} {} {verb} for {by} {} to create {what}; the pods bind once {they} Bound",
        list.join(", "),
        provisioners.join(", ")
    ))
}

/// For each value of `key` among `nodes`: how many of `pods` fit there by resources (first fit), closest domain
/// (most pods fitting, then name) first. Nodes without the label belong to no domain.
pub fn domain_fits(
    nodes: &[NodeInfo],
    pods: &[std::sync::Arc<PodInfo>],
    key: &str,
    volumes: &VolumeCatalog,
    devices: &DeviceCatalog,
) -> Vec<DomainFit> {
    let rnames = names(pods);
    let mut by: BTreeMap<String, (Vec<Resources>, Vec<&NodeInfo>)> = BTreeMap::new();
    for n in nodes {
        if n.node.unschedulable {
            continue;
        }
        if let Some(v) = n.node.labels.get(key) {
            let e = by.entry(v.clone()).or_default();
            e.0.push(free_of(n));
            e.1.push(n);
        }
    }
    let mut out: Vec<DomainFit> = by
        .into_iter()
        .map(|(value, (mut free, members))| {
            let mut fit = 0;
            let mut more_needed: BTreeMap<String, i64> = BTreeMap::new();
            for p in pods {
                let req = &p.spec.requests;
                match free.iter_mut().find(|f| fits(f, req, &rnames)) {
                    Some(f) => {
                        f.sub(req);
                        fit += 1;
                    }
                    None => {
                        for r in &rnames {
                            let v = req.get(r);
                            if v > 0 {
                                *more_needed.entry(r.clone()).or_default() += v;
                            }
                        }
                    }
                }
            }
            DomainFit {
                key: key.to_owned(),
                value,
                fit,
                pods: pods.len(),
                more_needed,
                volumes: volume_blocker(volumes, pods, members.iter().copied()),
                devices: phalanx_scheduler::dra::scheduling::domain_shortfall(
                    devices,
                    pods,
                    members.iter().copied(),
                ),
            }
        })
        .collect();
    out.sort_by(|a, b| b.fit.cmp(&a.fit).then(a.value.cmp(&b.value)));
    out
}

/// The pods on `nodes` (only those whose name is in `on`, or all when `on` is `None`), lowest priority first:
/// what preemption would look at first, each with its requests of what `pods` request: only pods that request one
/// of the `short` resources (what is missing is what they hold), so none when nothing is short (a cordon, a
/// taint or a missing claim keeps the group out, and no pod holds that). At most `limit`.
pub fn holders(
    nodes: &[NodeInfo],
    pods: &[std::sync::Arc<PodInfo>],
    on: Option<&[String]>,
    short: &[String],
    limit: usize,
) -> Vec<Holder> {
    if short.is_empty() {
        return vec![];
    }
    let rnames = names(pods);
    let mut out: Vec<Holder> = nodes
        .iter()
        .filter(|n| on.is_none_or(|on| on.iter().any(|x| x == n.name())))
        .flat_map(|n| {
            let rnames = &rnames;
            n.pods.iter().map(move |p| Holder {
                node: n.name().to_owned(),
                pod: p.key.to_string(),
                group: p.group_name.as_ref().map(|g| g.to_string()),
                priority: p.priority,
                requests: rnames
                    .iter()
                    .map(|r| (r.clone(), p.spec.requests.get(r)))
                    .filter(|(_, v)| *v != 0)
                    .collect(),
            })
        })
        .filter(|h: &Holder| short.iter().any(|r| h.requests.contains_key(r)))
        .collect();
    out.sort_by(|a, b| a.priority.cmp(&b.priority).then(a.pod.cmp(&b.pod)));
    out.truncate(limit);
    out
}

/// `amount` of `resource` without its name: cores for cpu (`3`, `500m`), binary units for memory (`2Gi`), a count
/// otherwise (what `kubectl describe node` prints in its Allocated resources table).
pub fn quantity(resource: &str, amount: i64) -> String {
    match resource {
        "cpu" if amount % 1000 == 0 => format!("{}", amount / 1000),
        "cpu" => format!("{amount}m"),
        "memory" | "ephemeral-storage" => {
            let units = [("Gi", 1i64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)];
            match units.iter().find(|(_, u)| amount >= *u && amount % u == 0) {
                Some((s, u)) => format!("{}{s}", amount / u),
                None => format!("{amount}"),
            }
        }
        _ => format!("{amount}"),
    }
}

/// `amount` of `resource` in the words `kubectl describe node` uses: cpu in cores (`3 CPU`, `500m CPU`), memory
/// in binary units (`2Gi memory`), others as a count (`1 nvidia.com/gpu`).
pub fn amount(resource: &str, amount: i64) -> String {
    match resource {
        "cpu" if amount % 1000 == 0 => format!("{} CPU", amount / 1000),
        "cpu" => format!("{amount}m CPU"),
        "memory" | "ephemeral-storage" => {
            let units = [("Gi", 1i64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)];
            match units.iter().find(|(_, u)| amount >= *u && amount % u == 0) {
                Some((s, u)) => format!("{}{s} {resource}", amount / u),
                None => format!("{amount} bytes {resource}"),
            }
        }
        _ => format!("{amount} {resource}"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use phalanx_scheduler::model::NodeStatic;

    use super::*;

    fn node(name: &str, cpu: i64, rack: &str, used: i64) -> NodeInfo {
        let mut n = NodeInfo::new(Arc::new(NodeStatic::simple(
            name,
            cpu,
            1 << 34,
            &[("rack", rack)],
        )));
        n.requested.milli_cpu = used;
        n
    }

    #[test]
    fn a_domain_names_the_claim_that_keeps_the_group_out() {
        use phalanx_scheduler::model::PodVolume;
        use phalanx_scheduler::selectors::{NodeSelectorTerm, Requirement, SelectorOp};
        use phalanx_scheduler::volumes::{AccessModes, ClaimInfo, ClaimKey, VolumeInfo, VolumePhase};
        let nodes = vec![node("a1", 4000, "r1", 0), node("b1", 4000, "r2", 0)];
        let key = ClaimKey::new("ns", "data");
        let claim = ClaimInfo {
            key: key.clone(),
            uid: "u".into(),
            deleting: false,
            volume_name: Some("pv".into()),
            bound: true,
            class: String::new(),
            access: AccessModes(AccessModes::RWO),
            request: 0,
            selector: None,
            block: false,
            selected_node: None,
        };
        let pv = VolumeInfo {
            name: "pv".into(),
            resource_version: "1".into(),
            class: String::new(),
            access: AccessModes(AccessModes::RWO),
            capacity: 1,
            labels: BTreeMap::new(),
            node_affinity: Some(vec![NodeSelectorTerm {
                labels: vec![Requirement {
                    key: "rack".into(),
                    op: SelectorOp::In,
                    values: vec!["r2".into()],
                }],
                fields: vec![],
            }]),
            claim_ref: Some((key.clone(), "u".into())),
            phase: VolumePhase::Bound,
            csi: None,
            block: false,
            deleting: false,
        };
        let mut cat = VolumeCatalog::default();
        cat.claims.insert(key, Arc::new(claim));
        cat.volumes.insert("pv".into(), Arc::new(pv));
        let mut p = PodInfo::simple("ns", "p0", 1000);
        Arc::make_mut(&mut p.spec).volumes = vec![PodVolume::Claim {
            name: "data".into(),
            ephemeral: false,
        }];
        let d = domain_fits(&nodes, &[Arc::new(p)], "rack", &cat, &DeviceCatalog::default());
        let r1 = d.iter().find(|d| d.value == "r1").unwrap();
        let r2 = d.iter().find(|d| d.value == "r2").unwrap();
        assert_eq!(
            r1.volumes.as_deref(),
            Some("pod p0: claim ns/data: node(s) had volume node affinity conflict")
        );
        assert_eq!(r2.volumes, None);
    }

    #[test]
    fn claims_waiting_for_their_provisioner_are_named() {
        use phalanx_scheduler::model::PodVolume;
        use phalanx_scheduler::volumes::{AccessModes, ClaimInfo, ClaimKey, ClassInfo};
        let mut cat = VolumeCatalog::default();
        cat.classes.insert(
            "slow".into(),
            ClassInfo {
                provisioner: "example.com/none".into(),
                wait_for_first_consumer: true,
                allowed_topologies: None,
            },
        );
        let key = ClaimKey::new("ns", "data");
        cat.claims.insert(
            key.clone(),
            Arc::new(ClaimInfo {
                key,
                uid: "u".into(),
                deleting: false,
                volume_name: None,
                bound: false,
                class: "slow".into(),
                access: AccessModes(AccessModes::RWO),
                request: 0,
                selector: None,
                block: false,
                selected_node: Some("n1".into()),
            }),
        );
        let mut p = PodInfo::simple("ns", "p0", 100);
        Arc::make_mut(&mut p.spec).volumes = vec![PodVolume::Claim {
            name: "data".into(),
            ephemeral: false,
        }];
        assert_eq!(
            provisioning_waits(&cat, &[Arc::new(p)]).as_deref(),
            Some(
                "claim ns/data (on n1) waits for provisioner \"example.com/none\" to create its volume; the pods bind \
                 once it is Bound"
            )
        );
        assert_eq!(
            provisioning_waits(&cat, &[Arc::new(PodInfo::simple("ns", "q", 100))]),
            None
        );
    }

    #[test]
    fn domains_closest_first_and_shortfall() {
        let nodes = vec![
            node("a1", 4000, "r1", 4000),
            node("b1", 4000, "r2", 1000),
            node("b2", 4000, "r2", 1000),
        ];
        let pods: Vec<Arc<PodInfo>> = (0..3)
            .map(|i| Arc::new(PodInfo::simple("ns", &format!("p{i}"), 3000)))
            .collect();
        let d = domain_fits(
            &nodes,
            &pods,
            "rack",
            &VolumeCatalog::default(),
            &DeviceCatalog::default(),
        );
        assert_eq!((d[0].value.as_str(), d[0].fit, d[0].pods), ("r2", 2, 3));
        assert_eq!(d[0].volumes, None, "no claims, nothing to say");
        assert_eq!(d[0].more_needed.get("cpu"), Some(&3000));
        assert_eq!((d[1].value.as_str(), d[1].fit), ("r1", 0));
        let s = shortfall(&nodes, &pods);
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].needed, s[0].free, s[0].missing), (9000, 6000, 3000));
        assert_eq!((s[0].largest_pod, s[0].largest_free), (3000, 3000));
        let big = vec![Arc::new(PodInfo::simple("ns", "big", 3500))];
        let s = shortfall(&nodes, &big);
        assert_eq!(
            (s[0].missing, s[0].largest_pod, s[0].largest_free),
            (0, 3500, 3000),
            "fits in sum, not on a node"
        );
        assert_eq!(amount("cpu", 3000), "3 CPU");
        assert_eq!(amount("cpu", 1500), "1500m CPU");
        assert_eq!(amount("memory", 2 << 30), "2Gi memory");
        assert_eq!(quantity("cpu", 9000), "9");
        assert_eq!(quantity("memory", 3 << 20), "3Mi");
        let h = holders(&nodes, &pods, None, &[], 10);
        assert!(h.is_empty(), "no pods on the nodes");
    }

    #[test]
    fn nobody_holds_room_when_nothing_is_short() {
        let mut n = node("a1", 4000, "r1", 0);
        let mut other = PodInfo::simple("ns", "other", 2000);
        other.node_name = Some("a1".into());
        n.pods.push(Arc::new(other));
        let pods = vec![Arc::new(PodInfo::simple("ns", "p0", 1000))];
        let nodes = vec![n];
        assert!(
            holders(&nodes, &pods, None, &[], 10).is_empty(),
            "a cordon or a missing claim is held by nobody"
        );
        let h = holders(&nodes, &pods, None, &["cpu".to_owned()], 10);
        assert_eq!(h.len(), 1, "cpu short: the pod using cpu holds it");
        assert_eq!(h[0].pod, "ns/other");
    }
}
