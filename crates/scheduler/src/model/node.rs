//! Nodes as the core sees them (upstream `framework.NodeInfo`, `pkg/scheduler/framework/types.go`).
//!
//! Built from API objects by [`crate::convert`]; this module holds only the types.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{HostPort, PodInfo, PodKey};
use crate::resources::Resources;
use crate::selectors::Taint;

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

    /// Node name.
    pub fn name(&self) -> &str {
        &self.node.name
    }

    /// Adds a pod's usage (upstream `NodeInfo.AddPod`).
    pub(crate) fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.spec.requests);
        self.non_zero_milli_cpu = self
            .non_zero_milli_cpu
            .saturating_add(pod.spec.non_zero_milli_cpu);
        self.non_zero_memory = self.non_zero_memory.saturating_add(pod.spec.non_zero_memory);
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
        self.non_zero_milli_cpu = self
            .non_zero_milli_cpu
            .saturating_sub(pod.spec.non_zero_milli_cpu);
        self.non_zero_memory = self.non_zero_memory.saturating_sub(pod.spec.non_zero_memory);
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
