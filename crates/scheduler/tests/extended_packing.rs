//! Phalanx's packing score for extended resources (`node_resources::extended_packing_score`): a pod requesting
//! `nvidia.com/gpu` prefers the node with the fewest GPUs left after it, unless the configuration scores the
//! resource itself.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use phalanx_scheduler::framework::ScorePlugin;
use phalanx_scheduler::model::NodeStatic;
use phalanx_scheduler::plugins::node_resources::{
    self, NodeResourcesFit, ResourceWeight, ScoredResource, ScoringStrategy,
};
use phalanx_scheduler::{PodInfo, Snapshot};
use serde_json::json;

fn gpu_pod(name: &str, gpus: u32, node: Option<&str>) -> PodInfo {
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {
                "requests": {"cpu": "100m", "memory": "64Mi"},
                "limits": {"nvidia.com/gpu": gpus.to_string()}
            }}]
        }
    }))
    .unwrap();
    PodInfo::from_pod(&p, None)
}

fn gpu_node(name: &str) -> Arc<NodeStatic> {
    let n: Node = serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}}
    }))
    .unwrap();
    Arc::new(NodeStatic::from_node(&n).unwrap())
}

/// Node `a` empty, node `b` with 6 of 8 GPUs in use.
fn snapshot() -> Snapshot {
    let mut snap = Snapshot::new([gpu_node("a"), gpu_node("b")]);
    snap.add_pod(Arc::new(gpu_pod("busy", 6, Some("b"))));
    snap
}

#[test]
fn gpu_pods_go_where_the_fewest_gpus_are_left() {
    let snap = snapshot();
    let fit = NodeResourcesFit::new(
        ScoringStrategy::LeastAllocated,
        &[
            ResourceWeight {
                name: "cpu".into(),
                weight: 1,
            },
            ResourceWeight {
                name: "memory".into(),
                weight: 1,
            },
        ],
    );
    let two = gpu_pod("p", 2, None);
    let (empty, busy) = (
        fit.score(&(), &two, snap.node(0)),
        fit.score(&(), &two, snap.node(1)),
    );
    // 2 of 8 GPUs on the empty node, 8 of 8 on the busy one.
    assert_eq!((empty, busy), (25, 100));
    // A pod without extended resources keeps the configured LeastAllocated.
    let plain = PodInfo::simple("ns", "q", 1000);
    for i in 0..2 {
        let configured = node_resources::score(
            &plain,
            snap.node(i),
            ScoringStrategy::LeastAllocated,
            &fit.resources,
        );
        assert_eq!(fit.score(&(), &plain, snap.node(i)), configured);
    }
    assert_eq!(
        node_resources::extended_packing_score(&plain, snap.node(0), &fit.resources),
        None
    );
}

#[test]
fn a_configured_extended_resource_keeps_the_configured_strategy() {
    let snap = snapshot();
    let resources = [(ScoredResource::from_name("nvidia.com/gpu"), 1)];
    let two = gpu_pod("p", 2, None);
    assert_eq!(
        node_resources::extended_packing_score(&two, snap.node(1), &resources),
        None
    );
    let spread = NodeResourcesFit {
        strategy: ScoringStrategy::LeastAllocated,
        resources: resources.to_vec(),
    };
    // LeastAllocated over the GPUs, as configured: 6 of 8 left on the empty node, none on the busy one.
    assert_eq!(spread.score(&(), &two, snap.node(0)), 75);
    assert_eq!(spread.score(&(), &two, snap.node(1)), 0);
}
