//! Pod conversion: an API `Pod` into [`PodInfo`] (upstream `framework.NewPodInfo` and
//! `resourcehelper.PodRequests`, `k8s.io/component-helpers/resource/helpers.go`).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;

use super::ConvertError;
use crate::model::{
    AffinityTerm, HostPort, PodAffinitySpec, PodInfo, PodKey, PodSpecInfo, PreemptionPolicy,
    SpreadConstraint, WhenUnsatisfiable,
};
use crate::resources::{self, DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, Resources};
use crate::selectors::{LabelSelector, NodeSelectorTerm, Requirement, SelectorOp, Toleration};

/// True for a pod in phase Succeeded or Failed: it uses no resources and is never scheduled
/// (kube-scheduler's informer drops such pods, `pkg/scheduler/eventhandlers.go`).
pub fn is_terminal(pod: &core::Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// True for a pod in phase Succeeded: a gang member that finished its work. It counts toward its group's quorum
/// (k/k#142330), unlike a Failed one.
pub fn is_succeeded(pod: &core::Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
}

impl PodKey {
    /// Key of an API pod; `None` when it has no name (never true for objects read from the API).
    /// A pod without a namespace is keyed in `default`, as the API server defaults it.
    pub fn of(pod: &core::Pod) -> Option<PodKey> {
        Some(PodKey::new(
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref()?,
        ))
    }
}

impl PodInfo {
    /// Converts an API pod. `group` is the name of the PodGroup (in the pod's namespace) the pod
    /// belongs to, as the runtime resolves it (`phalanx_api::pod_group_name`: the label, then
    /// `spec.schedulingGroup.podGroupName`); the core does not know the label. Never fails:
    /// conversion problems land in `invalid`.
    pub fn from_pod(pod: &core::Pod, group: Option<&str>) -> PodInfo {
        let meta = &pod.metadata;
        let labels = meta.labels.clone().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let group_name = group.filter(|g| !g.is_empty()).map(Arc::from);
        let namespace = meta.namespace.clone().unwrap_or_else(|| "default".to_string());
        let mut invalid = None;
        let spec_info = match build_spec_info(&spec, meta.name.as_deref().unwrap_or(""), &namespace, &labels)
        {
            Ok(mut s) => {
                // From the status too: a template's claim is named in status.resourceClaimStatuses.
                s.resource_claims = super::dra::pod_claims(pod);
                s
            }
            Err(e) => {
                invalid = Some(e.to_string());
                PodSpecInfo::default()
            }
        };
        PodInfo {
            key: PodKey::new(&namespace, meta.name.as_deref().unwrap_or("")),
            uid: meta.uid.as_deref().unwrap_or("").into(),
            labels: Arc::new(labels),
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
            group_api: crate::model::GroupApi::Phalanx,
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
}

fn add_container(reqs: &mut Resources, nz: &mut (i64, i64), c: &core::Container) -> Result<(), ConvertError> {
    let r = container_requests(c)?;
    reqs.add(&r);
    let (cpu, mem) = non_zero(c, &r);
    nz.0 = nz.0.saturating_add(cpu);
    nz.1 = nz.1.saturating_add(mem);
    Ok(())
}

/// Requests of one container; a limit stands in for a missing request (API defaulting).
fn container_requests(c: &core::Container) -> Result<Resources, ConvertError> {
    let Some(res) = &c.resources else {
        return Ok(Resources::default());
    };
    let mut list = res.limits.clone().unwrap_or_default();
    list.extend(res.requests.clone().unwrap_or_default());
    Resources::from_list(&list).map_err(|e| ConvertError(format!("container {:?}: {e}", c.name)))
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
fn pod_requests(spec: &core::PodSpec) -> Result<(Resources, i64, i64), ConvertError> {
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
            nz.0 = nz.0.saturating_add(cpu);
            nz.1 = nz.1.saturating_add(mem);
            sidecars.add(&r);
            sidecars_nz.0 = sidecars_nz.0.saturating_add(cpu);
            sidecars_nz.1 = sidecars_nz.1.saturating_add(mem);
            (sidecars.clone(), sidecars_nz)
        } else {
            let mut t = r.clone();
            t.add(&sidecars);
            (
                t,
                (
                    cpu.saturating_add(sidecars_nz.0),
                    mem.saturating_add(sidecars_nz.1),
                ),
            )
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
        nz.0 = nz.0.saturating_add(o.milli_cpu);
        nz.1 = nz.1.saturating_add(o.memory);
    }
    Ok((reqs, nz.0, nz.1))
}

fn affinity_term(
    t: &core::PodAffinityTerm,
    pod_ns: &str,
    labels: &BTreeMap<String, String>,
) -> Result<AffinityTerm, ConvertError> {
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
    pod_name: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Result<PodSpecInfo, ConvertError> {
    let (requests, non_zero_milli_cpu, non_zero_memory) = pod_requests(spec)?;
    if let Some((name, value)) = requests.first_above_limit() {
        return Err(ConvertError(format!(
            "the pod requests {value} of {name}, more than the {} the scheduler can represent",
            resources::MAX_QUANTITY
        )));
    }
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
                    .collect::<Result<Vec<_>, String>>()?;
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
            other => return Err(format!("unknown whenUnsatisfiable {other:?}").into()),
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
        volumes: super::volumes::pod_volumes(spec, pod_name),
        resource_claims: Vec::new(),
    })
}
