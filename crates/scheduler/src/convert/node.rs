//! Node conversion: an API `Node` into [`NodeStatic`] / [`NodeInfo`] (upstream
//! `framework.NodeInfo.SetNode`, `pkg/scheduler/framework/types.go`).

use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;

use super::ConvertError;
use crate::model::{NodeInfo, NodeStatic};
use crate::resources::{self, Resources};
use crate::selectors::{Taint, TaintEffect};

impl NodeStatic {
    /// Converts an API node. Errors: a taint with an unknown effect or a bad quantity.
    pub fn from_node(node: &core::Node) -> Result<NodeStatic, ConvertError> {
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
        let allocatable = Resources::from_list(&list)
            .map_err(|e| format!("node {name}: {e}"))?
            .capped();
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
}

impl NodeInfo {
    /// Converts an API node into an empty `NodeInfo` (see [`NodeStatic::from_node`] for errors).
    pub fn from_node(node: &core::Node) -> Result<NodeInfo, ConvertError> {
        Ok(NodeInfo::new(Arc::new(NodeStatic::from_node(node)?)))
    }
}
