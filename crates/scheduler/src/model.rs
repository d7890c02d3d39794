//! Scheduling model: pods, groups and nodes as the core sees them.
//!
//! Everything the plugins need is derived once, when the runtime converts an API object
//! (`PodInfo::from_pod`, `NodeInfo::from_node`), mirroring upstream `framework.PodInfo` /
//! `framework.NodeInfo` (`pkg/scheduler/framework/types.go`). The runtime converts PodGroup
//! objects into [`GroupInfo`] itself, so this crate does not depend on the CRD types.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;

use crate::resources::{self, DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, Resources};
use crate::selectors::{
    LabelSelector, NodeSelectorTerm, Requirement, SelectorOp, Taint, TaintEffect, Toleration,
};

/// Label that links a pod to its PodGroup (mirror of `phalanx_api::labels::POD_GROUP`).
pub const POD_GROUP_LABEL: &str = "scheduling.phalanx.dev/pod-group";

/// `namespace/name` of a pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

impl PodKey {
    /// Builds a key.
    pub fn new(namespace: &str, name: &str) -> PodKey {
        PodKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Kind of a scheduling group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupKind {
    /// A leaf `PodGroup`.
    PodGroup,
    /// A `CompositePodGroup`: an inner node of a hierarchy (KEP-6012); never owns pods.
    CompositePodGroup,
}

/// Identity of a group (upstream entity key `pg-type/namespace/name`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// Kind.
    pub kind: GroupKind,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

impl GroupKey {
    /// A PodGroup key.
    pub fn pod_group(namespace: &str, name: &str) -> GroupKey {
        GroupKey {
            kind: GroupKind::PodGroup,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A CompositePodGroup key.
    pub fn composite(namespace: &str, name: &str) -> GroupKey {
        GroupKey {
            kind: GroupKind::CompositePodGroup,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = match self.kind {
            GroupKind::PodGroup => "podgroup",
            GroupKind::CompositePodGroup => "compositepodgroup",
        };
        write!(f, "{k}/{}/{}", self.namespace, self.name)
    }
}

/// A queue entity: a standalone pod or a root group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntityKey {
    /// A pod with no group.
    Pod(PodKey),
    /// A root group: a standalone/root PodGroup, or a root CompositePodGroup with its whole
    /// subtree.
    Group(GroupKey),
}

impl fmt::Display for EntityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntityKey::Pod(p) => write!(f, "pod/{p}"),
            EntityKey::Group(g) => write!(f, "{g}"),
        }
    }
}

/// `preemptionPolicy` of a pod or group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PreemptionPolicy {
    /// Default.
    #[default]
    PreemptLowerPriority,
    /// Never preempts.
    Never,
}

impl fmt::Display for PreemptionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PreemptionPolicy::PreemptLowerPriority => "PreemptLowerPriority",
            PreemptionPolicy::Never => "Never",
        })
    }
}

/// A host port a pod asks for (upstream `HostPortInfo` entry).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// IP; `0.0.0.0` when unset.
    pub ip: String,
    /// Protocol; `TCP` when unset.
    pub protocol: String,
    /// Port (> 0).
    pub port: i32,
}

impl HostPort {
    /// Upstream conflict rule: same protocol and port, and same IP or either is `0.0.0.0`.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

/// `whenUnsatisfiable` of a topology spread constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WhenUnsatisfiable {
    /// Hard (Filter).
    DoNotSchedule,
    /// Soft (Score).
    ScheduleAnyway,
}

/// A parsed topology spread constraint (`matchLabelKeys` already merged into the selector).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpreadConstraint {
    /// maxSkew (>= 1).
    pub max_skew: i32,
    /// Topology key.
    pub topology_key: String,
    /// Hard or soft.
    pub when: WhenUnsatisfiable,
    /// Selects the pods counted.
    pub selector: LabelSelector,
    /// minDomains (hard constraints only); `None` = 1.
    pub min_domains: Option<i32>,
    /// nodeAffinityPolicy Honor (default) counts only nodes matching the pod's node affinity.
    pub honor_node_affinity: bool,
    /// nodeTaintsPolicy Honor counts only nodes whose taints the pod tolerates (default Ignore).
    pub honor_node_taints: bool,
}

/// A parsed pod (anti-)affinity term with resolved namespaces.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AffinityTerm {
    /// Namespaces the term applies to; empty with `all_namespaces` false means the pod's own.
    pub namespaces: Vec<String>,
    /// True when `namespaceSelector` is `{}` (every namespace).
    pub all_namespaces: bool,
    /// Pod label selector (`matchLabelKeys`/`mismatchLabelKeys` merged).
    pub selector: LabelSelector,
    /// Topology key.
    pub topology_key: String,
}

impl AffinityTerm {
    /// Whether `pod` is selected by this term.
    pub fn matches(&self, pod: &PodInfo) -> bool {
        (self.all_namespaces || self.namespaces.iter().any(|n| **n == *pod.key.namespace))
            && self.selector.matches(&pod.labels)
    }
}

/// Inter-pod affinity of one pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PodAffinitySpec {
    /// requiredDuringScheduling pod affinity.
    pub required_affinity: Vec<AffinityTerm>,
    /// requiredDuringScheduling pod anti-affinity.
    pub required_anti_affinity: Vec<AffinityTerm>,
    /// preferredDuringScheduling pod affinity (weight, term).
    pub preferred_affinity: Vec<(i32, AffinityTerm)>,
    /// preferredDuringScheduling pod anti-affinity (weight, term).
    pub preferred_anti_affinity: Vec<(i32, AffinityTerm)>,
}

impl PodAffinitySpec {
    /// Whether any term is present.
    pub fn is_empty(&self) -> bool {
        self.required_affinity.is_empty()
            && self.required_anti_affinity.is_empty()
            && self.preferred_affinity.is_empty()
            && self.preferred_anti_affinity.is_empty()
    }
}

/// The scheduling-relevant part of a pod spec, derived once. Two pods with equal `PodSpecInfo`
/// (and no inter-pod constraints in play) get identical Filter/Score results on a node, which
/// the scheduler uses to reuse evaluations across the members of a gang (upstream
/// OpportunisticBatching signature, KEP-5598).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PodSpecInfo {
    /// Effective requests (upstream `PodRequests`: containers, init max, sidecars, overhead).
    pub requests: Resources,
    /// cpu request with the 100m default for containers that set none (scoring only).
    pub non_zero_milli_cpu: i64,
    /// memory request with the 200Mi default for containers that set none (scoring only).
    pub non_zero_memory: i64,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// `spec.nodeSelector` as requirements.
    pub node_selector: Vec<Requirement>,
    /// requiredDuringScheduling node selector terms (ORed); `None` when unset.
    pub required_node_affinity: Option<Vec<NodeSelectorTerm>>,
    /// preferredDuringScheduling node terms (weight, term).
    pub preferred_node_affinity: Vec<(i32, NodeSelectorTerm)>,
    /// Host ports requested by containers.
    pub host_ports: Vec<HostPort>,
    /// Topology spread constraints.
    pub spread: Vec<SpreadConstraint>,
    /// Inter-pod affinity.
    pub affinity: PodAffinitySpec,
    /// `spec.nodeName` of a pod that is still pending (NodeName plugin).
    pub node_name: Option<String>,
}

impl PodSpecInfo {
    /// Whether the pod's own result on a node depends on other nodes or other pods
    /// (PodTopologySpread, InterPodAffinity); such pods are never batched.
    pub fn has_inter_pod_constraints(&self) -> bool {
        !self.spread.is_empty() || !self.affinity.is_empty()
    }

    /// Whether the node selector and required node affinity match (NodeAffinity Filter).
    pub fn node_affinity_matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.node_selector.iter().all(|r| r.matches(labels))
            && self
                .required_node_affinity
                .as_ref()
                .is_none_or(|terms| terms.iter().any(|t| t.matches(node_name, labels)))
    }
}

/// A pod as the scheduler sees it. Shared as `Arc<PodInfo>`; replace on update.
#[derive(Debug, Clone, PartialEq)]
pub struct PodInfo {
    /// namespace/name.
    pub key: PodKey,
    /// metadata.uid (empty when unset).
    pub uid: Arc<str>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// spec.schedulerName (`default-scheduler` when unset).
    pub scheduler_name: Arc<str>,
    /// spec.priority (0 when unset).
    pub priority: i32,
    /// spec.preemptionPolicy.
    pub preemption_policy: PreemptionPolicy,
    /// spec.nodeName: the node the pod is bound to, if any.
    pub node_name: Option<Arc<str>>,
    /// PodGroup name (label first, then `spec.schedulingGroup.podGroupName`), same namespace.
    pub group_name: Option<Arc<str>>,
    /// metadata.deletionTimestamp is set.
    pub deleting: bool,
    /// spec.schedulingGates names (PreEnqueue SchedulingGates).
    pub scheduling_gates: Vec<String>,
    /// Derived scheduling data.
    pub spec: Arc<PodSpecInfo>,
    /// A problem found while converting (bad quantity, bad selector): scheduling the pod
    /// yields a SchedulerError with this message instead of a panic.
    pub invalid: Option<String>,
}

impl PodInfo {
    /// Converts an API pod. Never fails: conversion problems land in `invalid`.
    pub fn from_pod(pod: &core::Pod) -> PodInfo {
        let meta = &pod.metadata;
        let labels = meta.labels.clone().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let group_name = labels
            .get(POD_GROUP_LABEL)
            .filter(|s| !s.is_empty())
            .cloned()
            .or_else(|| {
                spec.scheduling_group
                    .as_ref()
                    .and_then(|g| g.pod_group_name.clone())
            })
            .map(Arc::from);
        let namespace = meta.namespace.clone().unwrap_or_else(|| "default".to_string());
        let mut invalid = None;
        let spec_info = match build_spec_info(&spec, &namespace, &labels) {
            Ok(s) => s,
            Err(e) => {
                invalid = Some(e);
                PodSpecInfo::default()
            }
        };
        PodInfo {
            key: PodKey::new(&namespace, meta.name.as_deref().unwrap_or("")),
            uid: meta.uid.as_deref().unwrap_or("").into(),
            labels,
            scheduler_name: spec
                .scheduler_name
                .as_deref()
                .unwrap_or("default-scheduler")
                .into(),
            priority: spec.priority.unwrap_or(0),
            preemption_policy: match spec.preemption_policy.as_deref() {
                Some("Never") => PreemptionPolicy::Never,
                _ => PreemptionPolicy::PreemptLowerPriority,
            },
            node_name: spec.node_name.as_deref().filter(|s| !s.is_empty()).map(Arc::from),
            group_name,
            deleting: meta.deletion_timestamp.is_some(),
            scheduling_gates: spec
                .scheduling_gates
                .iter()
                .flatten()
                .map(|g| g.name.clone())
                .collect(),
            spec: Arc::new(spec_info),
            invalid,
        }
    }

    /// A minimal pod for tests and benchmarks: `cpu_milli` millicores, no memory request.
    pub fn simple(namespace: &str, name: &str, cpu_milli: i64) -> PodInfo {
        let spec = PodSpecInfo {
            requests: Resources {
                milli_cpu: cpu_milli,
                ..Default::default()
            },
            non_zero_milli_cpu: if cpu_milli == 0 {
                DEFAULT_MILLI_CPU_REQUEST
            } else {
                cpu_milli
            },
            non_zero_memory: DEFAULT_MEMORY_REQUEST,
            ..Default::default()
        };
        PodInfo {
            key: PodKey::new(namespace, name),
            uid: format!("uid-{namespace}-{name}").into(),
            labels: BTreeMap::new(),
            scheduler_name: "phalanx-scheduler".into(),
            priority: 0,
            preemption_policy: PreemptionPolicy::PreemptLowerPriority,
            node_name: None,
            group_name: None,
            deleting: false,
            scheduling_gates: vec![],
            spec: Arc::new(spec),
            invalid: None,
        }
    }

    /// The pod's group key, if it belongs to a PodGroup.
    pub fn group_key(&self) -> Option<GroupKey> {
        self.group_name.as_ref().map(|n| GroupKey {
            kind: GroupKind::PodGroup,
            namespace: self.key.namespace.clone(),
            name: n.clone(),
        })
    }
}

fn add_container(reqs: &mut Resources, nz: &mut (i64, i64), c: &core::Container) -> Result<(), String> {
    let r = container_requests(c)?;
    reqs.add(&r);
    let (cpu, mem) = non_zero(c, &r);
    nz.0 += cpu;
    nz.1 += mem;
    Ok(())
}

/// Requests of one container; a limit stands in for a missing request (API defaulting).
fn container_requests(c: &core::Container) -> Result<Resources, String> {
    let Some(res) = &c.resources else {
        return Ok(Resources::default());
    };
    let mut list = res.limits.clone().unwrap_or_default();
    list.extend(res.requests.clone().unwrap_or_default());
    Resources::from_list(&list).map_err(|e| format!("container {:?}: {e}", c.name))
}

/// Non-zero cpu/memory (upstream `GetNonzeroRequests`): defaults only where the request is
/// missing, not where it is an explicit zero.
fn non_zero(c: &core::Container, r: &Resources) -> (i64, i64) {
    let has = |n: &str| {
        c.resources.as_ref().is_some_and(|res| {
            res.requests.as_ref().is_some_and(|m| m.contains_key(n))
                || res.limits.as_ref().is_some_and(|m| m.contains_key(n))
        })
    };
    let cpu = if has(resources::CPU) {
        r.milli_cpu
    } else {
        DEFAULT_MILLI_CPU_REQUEST
    };
    let mem = if has(resources::MEMORY) {
        r.memory
    } else {
        DEFAULT_MEMORY_REQUEST
    };
    (cpu, mem)
}

/// Upstream `PodRequests`: sum of containers (plus sidecars), max against each init container
/// (which also sees the sidecars started before it), plus overhead; pod-level resources override
/// cpu/memory/hugepages when set.
fn pod_requests(spec: &core::PodSpec) -> Result<(Resources, i64, i64), String> {
    let mut reqs = Resources::default();
    let mut nz = (0i64, 0i64);
    for c in &spec.containers {
        add_container(&mut reqs, &mut nz, c)?;
    }
    let mut sidecars = Resources::default();
    let mut sidecars_nz = (0i64, 0i64);
    let mut init_max = Resources::default();
    let mut init_max_nz = (0i64, 0i64);
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c)?;
        let (cpu, mem) = non_zero(c, &r);
        let (eff, eff_nz) = if c.restart_policy.as_deref() == Some("Always") {
            reqs.add(&r);
            nz.0 += cpu;
            nz.1 += mem;
            sidecars.add(&r);
            sidecars_nz.0 += cpu;
            sidecars_nz.1 += mem;
            (sidecars.clone(), sidecars_nz)
        } else {
            let mut t = r.clone();
            t.add(&sidecars);
            (t, (cpu + sidecars_nz.0, mem + sidecars_nz.1))
        };
        init_max.max_with(&eff);
        init_max_nz = (init_max_nz.0.max(eff_nz.0), init_max_nz.1.max(eff_nz.1));
    }
    reqs.max_with(&init_max);
    nz = (nz.0.max(init_max_nz.0), nz.1.max(init_max_nz.1));
    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        let pl = Resources::from_list(pod_level).map_err(|e| format!("pod resources: {e}"))?;
        for name in pod_level.keys() {
            if name == resources::CPU || name == resources::MEMORY || name.starts_with("hugepages-") {
                reqs.set(name, pl.get(name));
                if name == resources::CPU {
                    nz.0 = pl.milli_cpu;
                } else if name == resources::MEMORY {
                    nz.1 = pl.memory;
                }
            }
        }
    }
    if let Some(oh) = &spec.overhead {
        let o = Resources::from_list(oh).map_err(|e| format!("overhead: {e}"))?;
        reqs.add(&o);
        nz.0 += o.milli_cpu;
        nz.1 += o.memory;
    }
    Ok((reqs, nz.0, nz.1))
}

fn affinity_term(
    t: &core::PodAffinityTerm,
    pod_ns: &str,
    labels: &BTreeMap<String, String>,
) -> Result<AffinityTerm, String> {
    let mut selector = LabelSelector::from_api(t.label_selector.as_ref())?;
    // matchLabelKeys / mismatchLabelKeys (upstream merges them into the selector).
    if !selector.nothing {
        for k in t.match_label_keys.iter().flatten() {
            if let Some(v) = labels.get(k) {
                selector.requirements.push(Requirement {
                    key: k.clone(),
                    op: SelectorOp::In,
                    values: vec![v.clone()],
                });
            }
        }
        for k in t.mismatch_label_keys.iter().flatten() {
            if let Some(v) = labels.get(k) {
                selector.requirements.push(Requirement {
                    key: k.clone(),
                    op: SelectorOp::NotIn,
                    values: vec![v.clone()],
                });
            }
        }
    }
    let all_namespaces = t.namespace_selector.as_ref().is_some_and(|s| {
        s.match_labels.as_ref().is_none_or(|m| m.is_empty())
            && s.match_expressions.as_ref().is_none_or(|m| m.is_empty())
    });
    let mut namespaces = t.namespaces.clone().unwrap_or_default();
    if namespaces.is_empty() && t.namespace_selector.is_none() {
        namespaces.push(pod_ns.to_string());
    }
    Ok(AffinityTerm {
        namespaces,
        all_namespaces,
        selector,
        topology_key: t.topology_key.clone(),
    })
}

fn build_spec_info(
    spec: &core::PodSpec,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Result<PodSpecInfo, String> {
    let (requests, non_zero_milli_cpu, non_zero_memory) = pod_requests(spec)?;
    let tolerations = spec
        .tolerations
        .iter()
        .flatten()
        .map(Toleration::from_api)
        .collect();
    let node_selector = spec
        .node_selector
        .iter()
        .flatten()
        .map(|(k, v)| Requirement {
            key: k.clone(),
            op: SelectorOp::In,
            values: vec![v.clone()],
        })
        .collect();
    let mut required_node_affinity = None;
    let mut preferred_node_affinity = Vec::new();
    let mut affinity = PodAffinitySpec::default();
    if let Some(aff) = &spec.affinity {
        if let Some(na) = &aff.node_affinity {
            if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
                let terms = req
                    .node_selector_terms
                    .iter()
                    .map(NodeSelectorTerm::from_api)
                    .collect::<Result<Vec<_>, _>>()?;
                required_node_affinity = Some(terms);
            }
            for p in na
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                let term = NodeSelectorTerm::from_api(&p.preference)?;
                if p.weight != 0 && !term.is_empty() {
                    preferred_node_affinity.push((p.weight, term));
                }
            }
        }
        if let Some(pa) = &aff.pod_affinity {
            for t in pa
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                affinity
                    .required_affinity
                    .push(affinity_term(t, namespace, labels)?);
            }
            for w in pa
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                affinity
                    .preferred_affinity
                    .push((w.weight, affinity_term(&w.pod_affinity_term, namespace, labels)?));
            }
        }
        if let Some(pa) = &aff.pod_anti_affinity {
            for t in pa
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                affinity
                    .required_anti_affinity
                    .push(affinity_term(t, namespace, labels)?);
            }
            for w in pa
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                affinity
                    .preferred_anti_affinity
                    .push((w.weight, affinity_term(&w.pod_affinity_term, namespace, labels)?));
            }
        }
    }
    let mut host_ports = Vec::new();
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        for p in c.ports.iter().flatten() {
            if let Some(hp) = p.host_port.filter(|p| *p > 0) {
                host_ports.push(HostPort {
                    ip: p
                        .host_ip
                        .clone()
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| "0.0.0.0".into()),
                    protocol: p
                        .protocol
                        .clone()
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| "TCP".into()),
                    port: hp,
                });
            }
        }
    }
    let mut spread = Vec::new();
    for c in spec.topology_spread_constraints.iter().flatten() {
        let mut selector = LabelSelector::from_api(c.label_selector.as_ref())?;
        if !selector.nothing {
            for k in c.match_label_keys.iter().flatten() {
                if let Some(v) = labels.get(k) {
                    selector.requirements.push(Requirement {
                        key: k.clone(),
                        op: SelectorOp::In,
                        values: vec![v.clone()],
                    });
                }
            }
        }
        let when = match c.when_unsatisfiable.as_str() {
            "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
            "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
            other => return Err(format!("unknown whenUnsatisfiable {other:?}")),
        };
        spread.push(SpreadConstraint {
            max_skew: c.max_skew.max(1),
            topology_key: c.topology_key.clone(),
            when,
            selector,
            min_domains: c.min_domains,
            honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
            honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
        });
    }
    Ok(PodSpecInfo {
        requests,
        non_zero_milli_cpu,
        non_zero_memory,
        tolerations,
        node_selector,
        required_node_affinity,
        preferred_node_affinity,
        host_ports,
        spread,
        affinity,
        node_name: None,
    })
}

/// `schedulingPolicy` of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupPolicy {
    /// `basic: {}`: minCount is treated as 1.
    Basic,
    /// `gang: {minCount}`.
    Gang {
        /// minCount (>= 1).
        min_count: u32,
    },
}

impl GroupPolicy {
    /// Effective minimum (1 for basic).
    pub fn min_count(&self) -> u32 {
        match self {
            GroupPolicy::Basic => 1,
            GroupPolicy::Gang { min_count } => (*min_count).max(1),
        }
    }
}

/// `disruptionMode` of a group (used by preemption, later).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DisruptionMode {
    /// `single` (default).
    #[default]
    Single,
    /// `all`.
    All,
}

/// A PodGroup (or, later, CompositePodGroup) as the scheduler sees it; built by the runtime
/// from the CRD object (upstream `fwk.PodGroupInfo`).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupInfo {
    /// Identity.
    pub key: GroupKey,
    /// metadata.uid.
    pub uid: Arc<str>,
    /// metadata.generation (copied into the condition's observedGeneration by the runtime).
    pub generation: i64,
    /// Basic or gang.
    pub policy: GroupPolicy,
    /// `schedulingConstraints.topology[0].key`, if any.
    pub topology_key: Option<String>,
    /// spec.priority; `None` when unset (the pods' priority is used, and pods are compared
    /// among themselves).
    pub priority: Option<i32>,
    /// spec.preemptionPolicy (`None` when unset: pods are compared among themselves).
    pub preemption_policy: Option<PreemptionPolicy>,
    /// Parent CompositePodGroup (`spec.parentCompositePodGroupName`, kind
    /// [`GroupKind::CompositePodGroup`]); `None` for a standalone/root PodGroup. Pods of a group
    /// with a parent are scheduled with the whole tree of its root (see [`CompositeGroupInfo`]).
    pub parent: Option<GroupKey>,
    /// spec.disruptionMode.
    pub disruption_mode: DisruptionMode,
}

impl GroupInfo {
    /// A standalone PodGroup with defaults (tests, benchmarks, simple conversions).
    pub fn new(namespace: &str, name: &str, policy: GroupPolicy) -> GroupInfo {
        GroupInfo {
            key: GroupKey::pod_group(namespace, name),
            uid: format!("uid-pg-{namespace}-{name}").into(),
            generation: 1,
            policy,
            topology_key: None,
            priority: None,
            preemption_policy: None,
            parent: None,
            disruption_mode: DisruptionMode::Single,
        }
    }
}

/// `schedulingPolicy` of a CompositePodGroup (upstream `CompositePodGroupSchedulingPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompositePolicy {
    /// `basic: {}`: minGroupCount is treated as 1.
    Basic,
    /// `gang: {minGroupCount}`: at least this many child groups must be scheduled together.
    Gang {
        /// minGroupCount (>= 1).
        min_group_count: u32,
    },
}

impl CompositePolicy {
    /// Effective minimum number of ready/scheduled children (1 for basic).
    pub fn min_group_count(&self) -> u32 {
        match self {
            CompositePolicy::Basic => 1,
            CompositePolicy::Gang { min_group_count } => (*min_group_count).max(1),
        }
    }
}

/// A CompositePodGroup as the scheduler sees it (KEP-6012, `scheduling.k8s.io/v1alpha3`);
/// built by the runtime from the CRD object. CompositePodGroups are the inner nodes of a
/// hierarchy; their children (PodGroups and CompositePodGroups) point to them through
/// `parent`.
#[derive(Debug, Clone, PartialEq)]
pub struct CompositeGroupInfo {
    /// Identity (kind [`GroupKind::CompositePodGroup`]).
    pub key: GroupKey,
    /// metadata.uid.
    pub uid: Arc<str>,
    /// metadata.generation (echoed as the condition's observedGeneration).
    pub generation: i64,
    /// Basic or gang (`minGroupCount`).
    pub policy: CompositePolicy,
    /// `schedulingConstraints.topology[0].key`, if any.
    pub topology_key: Option<String>,
    /// spec.priority (`None` when unset).
    pub priority: Option<i32>,
    /// spec.preemptionPolicy (`None` when unset).
    pub preemption_policy: Option<PreemptionPolicy>,
    /// `spec.parentCompositePodGroupName` (kind CompositePodGroup); `None` for a root.
    pub parent: Option<GroupKey>,
    /// spec.disruptionMode.
    pub disruption_mode: DisruptionMode,
}

impl CompositeGroupInfo {
    /// A root CompositePodGroup with defaults (tests, simple conversions).
    pub fn new(namespace: &str, name: &str, policy: CompositePolicy) -> CompositeGroupInfo {
        CompositeGroupInfo {
            key: GroupKey::composite(namespace, name),
            uid: format!("uid-cpg-{namespace}-{name}").into(),
            generation: 1,
            policy,
            topology_key: None,
            priority: None,
            preemption_policy: None,
            parent: None,
            disruption_mode: DisruptionMode::Single,
        }
    }

    /// The composite seen through the leaf-group shape (key and kind kept, `minGroupCount` as
    /// `minCount`), for plugins that only implement the PodGroup methods.
    pub fn as_group_info(&self) -> GroupInfo {
        GroupInfo {
            key: self.key.clone(),
            uid: self.uid.clone(),
            generation: self.generation,
            policy: match self.policy {
                CompositePolicy::Basic => GroupPolicy::Basic,
                CompositePolicy::Gang { min_group_count } => GroupPolicy::Gang {
                    min_count: min_group_count,
                },
            },
            topology_key: self.topology_key.clone(),
            priority: self.priority,
            preemption_policy: self.preemption_policy,
            parent: self.parent.clone(),
            disruption_mode: self.disruption_mode,
        }
    }
}

/// Immutable per-node data, shared between snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatic {
    /// metadata.name.
    pub name: Arc<str>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// spec.taints.
    pub taints: Vec<Taint>,
    /// spec.unschedulable.
    pub unschedulable: bool,
    /// status.allocatable (capacity when allocatable is absent), without `pods`.
    pub allocatable: Resources,
    /// Allocatable `pods` (110 when absent, the kubelet default).
    pub allowed_pods: i64,
}

impl NodeStatic {
    /// Converts an API node. Errors: a taint with an unknown effect or a bad quantity.
    pub fn from_node(node: &core::Node) -> Result<NodeStatic, String> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let spec = node.spec.clone().unwrap_or_default();
        let mut taints = Vec::new();
        for t in spec.taints.iter().flatten() {
            taints.push(Taint {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
                effect: TaintEffect::parse(&t.effect).map_err(|e| format!("node {name}: {e}"))?,
            });
        }
        let status = node.status.clone().unwrap_or_default();
        let list = status.allocatable.or(status.capacity).unwrap_or_default();
        let allocatable = Resources::from_list(&list).map_err(|e| format!("node {name}: {e}"))?;
        let allowed_pods = match list.get(resources::PODS) {
            Some(q) => resources::parse_value(&q.0).map_err(|e| format!("node {name}: {e}"))?,
            None => 110,
        };
        Ok(NodeStatic {
            name: name.into(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints,
            unschedulable: spec.unschedulable.unwrap_or(false),
            allocatable,
            allowed_pods,
        })
    }

    /// A plain node for tests and benchmarks.
    pub fn simple(name: &str, milli_cpu: i64, memory: i64, labels: &[(&str, &str)]) -> NodeStatic {
        NodeStatic {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            taints: vec![],
            unschedulable: false,
            allocatable: Resources {
                milli_cpu,
                memory,
                ..Default::default()
            },
            allowed_pods: 110,
        }
    }
}

/// A node with the pods on it (assigned and assumed), upstream `framework.NodeInfo`.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    /// Immutable part.
    pub node: Arc<NodeStatic>,
    /// Sum of pod requests.
    pub requested: Resources,
    /// Sum of non-zero cpu requests (scoring).
    pub non_zero_milli_cpu: i64,
    /// Sum of non-zero memory requests (scoring).
    pub non_zero_memory: i64,
    /// Host ports in use.
    pub used_ports: Vec<HostPort>,
    /// Pods on the node, in insertion order.
    pub pods: Vec<Arc<PodInfo>>,
    /// Number of pods on the node that carry inter-pod affinity terms.
    pub pods_with_affinity: u32,
}

impl NodeInfo {
    /// An empty node.
    pub fn new(node: Arc<NodeStatic>) -> NodeInfo {
        NodeInfo {
            node,
            requested: Resources::default(),
            non_zero_milli_cpu: 0,
            non_zero_memory: 0,
            used_ports: Vec::new(),
            pods: Vec::new(),
            pods_with_affinity: 0,
        }
    }

    /// Converts an API node into an empty `NodeInfo` (see [`NodeStatic::from_node`] for errors).
    pub fn from_node(node: &core::Node) -> Result<NodeInfo, String> {
        Ok(NodeInfo::new(Arc::new(NodeStatic::from_node(node)?)))
    }

    /// Node name.
    pub fn name(&self) -> &str {
        &self.node.name
    }

    /// Adds a pod's usage (upstream `NodeInfo.AddPod`).
    pub(crate) fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.spec.requests);
        self.non_zero_milli_cpu += pod.spec.non_zero_milli_cpu;
        self.non_zero_memory += pod.spec.non_zero_memory;
        self.used_ports.extend(pod.spec.host_ports.iter().cloned());
        if !pod.spec.affinity.is_empty() {
            self.pods_with_affinity += 1;
        }
        self.pods.push(pod);
    }

    /// Removes a pod's usage; exact inverse of `add_pod`. Returns false when not present.
    pub(crate) fn remove_pod(&mut self, key: &PodKey) -> bool {
        let Some(i) = self.pods.iter().rposition(|p| p.key == *key) else {
            return false;
        };
        let pod = self.pods.remove(i);
        self.requested.sub(&pod.spec.requests);
        self.non_zero_milli_cpu -= pod.spec.non_zero_milli_cpu;
        self.non_zero_memory -= pod.spec.non_zero_memory;
        for hp in &pod.spec.host_ports {
            if let Some(j) = self.used_ports.iter().rposition(|u| u == hp) {
                self.used_ports.remove(j);
            }
        }
        if !pod.spec.affinity.is_empty() {
            self.pods_with_affinity -= 1;
        }
        true
    }
}
