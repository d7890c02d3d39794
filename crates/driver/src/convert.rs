//! Conversion of cached API objects into the core's model, with per-object caches keyed by `resourceVersion` so a
//! cycle does not re-parse unchanged nodes and pods (upstream keeps `NodeInfo`s in its cache for the same reason,
//! `pkg/scheduler/backend/cache/snapshot.go`).

use std::{collections::HashMap, sync::Arc};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use phalanx_api::{v1alpha3::CompositePodGroup, v1beta1::PodGroup};
use phalanx_scheduler::model::{DisruptionMode, GroupPolicy, PreemptionPolicy};
use phalanx_scheduler::{
    CompositeGroupInfo, CompositePolicy, ConvertError, GroupInfo, NodeStatic, PodInfo, PodKey,
};

/// A PodGroup as the core sees it. `parent` is set from `spec.parentCompositePodGroupName`.
pub fn group_info(g: &PodGroup) -> GroupInfo {
    let ns = g.namespace().unwrap_or_default();
    let name = g.name_any();
    let policy = match &g.spec.scheduling_policy.gang {
        Some(gang) => GroupPolicy::Gang {
            min_count: u32::try_from(gang.min_count).unwrap_or(1).max(1),
        },
        None => GroupPolicy::Basic,
    };
    GroupInfo {
        key: phalanx_scheduler::GroupKey::pod_group(&ns, &name),
        uid: g.metadata.uid.as_deref().unwrap_or_default().into(),
        generation: g.metadata.generation.unwrap_or(0),
        policy,
        topology_key: g
            .spec
            .scheduling_constraints
            .as_ref()
            .and_then(|c| c.topology.first())
            .map(|t| t.key.clone()),
        priority: g.spec.priority,
        preemption_policy: g.spec.preemption_policy.map(|p| match p {
            phalanx_api::v1beta1::PreemptionPolicy::Never => PreemptionPolicy::Never,
            phalanx_api::v1beta1::PreemptionPolicy::PreemptLowerPriority => {
                PreemptionPolicy::PreemptLowerPriority
            }
        }),
        parent: g
            .spec
            .parent_composite_pod_group_name
            .as_deref()
            .filter(|p| !p.is_empty())
            .map(|p| phalanx_scheduler::GroupKey {
                kind: phalanx_scheduler::GroupKind::CompositePodGroup,
                namespace: ns.as_str().into(),
                name: p.into(),
            }),
        disruption_mode: if g.spec.disruption_mode.as_ref().is_some_and(|d| d.all.is_some()) {
            DisruptionMode::All
        } else {
            DisruptionMode::Single
        },
    }
}

fn preemption_policy(p: phalanx_api::v1beta1::PreemptionPolicy) -> PreemptionPolicy {
    match p {
        phalanx_api::v1beta1::PreemptionPolicy::Never => PreemptionPolicy::Never,
        phalanx_api::v1beta1::PreemptionPolicy::PreemptLowerPriority => {
            PreemptionPolicy::PreemptLowerPriority
        }
    }
}

/// A CompositePodGroup as the core sees it (KEP-6012): `parent` from `spec.parentCompositePodGroupName`,
/// `minGroupCount` from the gang policy (values below 1 are read as 1; the CRD schema already rejects them).
pub fn composite_info(g: &CompositePodGroup) -> CompositeGroupInfo {
    let ns = g.namespace().unwrap_or_default();
    let name = g.name_any();
    let policy = match &g.spec.scheduling_policy.gang {
        Some(gang) => CompositePolicy::Gang {
            min_group_count: u32::try_from(gang.min_group_count).unwrap_or(1).max(1),
        },
        None => CompositePolicy::Basic,
    };
    CompositeGroupInfo {
        key: phalanx_scheduler::GroupKey::composite(&ns, &name),
        uid: g.metadata.uid.as_deref().unwrap_or_default().into(),
        generation: g.metadata.generation.unwrap_or(0),
        policy,
        topology_key: g
            .spec
            .scheduling_constraints
            .as_ref()
            .and_then(|c| c.topology.first())
            .map(|t| t.key.clone()),
        priority: g.spec.priority,
        preemption_policy: g.spec.preemption_policy.map(preemption_policy),
        parent: g
            .spec
            .parent_composite_pod_group_name
            .as_deref()
            .filter(|p| !p.is_empty())
            .map(|p| phalanx_scheduler::GroupKey::composite(&ns, p)),
        disruption_mode: if g.spec.disruption_mode.as_ref().is_some_and(|d| d.all.is_some()) {
            DisruptionMode::All
        } else {
            DisruptionMode::Single
        },
    }
}

/// Conditions and generation of a cached group object.
pub fn pod_group_conditions(g: &PodGroup) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
    g.status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default()
}

/// Conditions of a cached CompositePodGroup.
pub fn composite_conditions(
    g: &CompositePodGroup,
) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
    g.status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default()
}

/// Caches of converted nodes and pods keyed by name and resourceVersion.
#[derive(Default)]
pub struct ModelCache {
    nodes: HashMap<String, (String, Arc<NodeStatic>)>,
    pods: HashMap<PodKey, (String, Arc<PodInfo>)>,
}

impl ModelCache {
    /// The node converted (cached by resourceVersion). Errors name the node and the bad field.
    pub fn node(&mut self, n: &Node) -> Result<Arc<NodeStatic>, ConvertError> {
        let name = n.name_any();
        let rv = n.resource_version().unwrap_or_default();
        if let Some((crv, c)) = self.nodes.get(&name)
            && *crv == rv
        {
            return Ok(c.clone());
        }
        let c = Arc::new(NodeStatic::from_node(n)?);
        self.nodes.insert(name, (rv, c.clone()));
        Ok(c)
    }

    /// Drops a node from the cache.
    pub fn remove_node(&mut self, name: &str) {
        self.nodes.remove(name);
    }

    /// The pod converted (cached by resourceVersion).
    pub fn pod(&mut self, p: &Pod) -> Arc<PodInfo> {
        let Some(key) = PodKey::of(p) else {
            return Arc::new(PodInfo::from_pod(p, phalanx_api::pod_group_name(p)));
        };
        let rv = p.resource_version().unwrap_or_default();
        if let Some((crv, c)) = self.pods.get(&key)
            && *crv == rv
        {
            return c.clone();
        }
        let c = Arc::new(PodInfo::from_pod(p, phalanx_api::pod_group_name(p)));
        self.pods.insert(key, (rv, c.clone()));
        c
    }

    /// Drops a pod from the cache.
    pub fn remove_pod(&mut self, key: &PodKey) {
        self.pods.remove(key);
    }
}
