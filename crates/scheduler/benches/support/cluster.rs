//! The benchmarks' simulated cluster: nodes in racks and blocks, and pods already running on them.

use std::sync::Arc;

use phalanx_scheduler::PodInfo;
use phalanx_scheduler::model::NodeStatic;

/// The default cluster size.
#[allow(dead_code)] // snapshot_heap sizes its cluster itself.
pub const NODES: usize = 5000;
const RACKS: usize = 50;

/// `n` nodes of 32 cores and 128 GiB in 50 racks; 5 racks make a block (10 blocks).
pub fn nodes_n(n: usize) -> Vec<Arc<NodeStatic>> {
    (0..n)
        .map(|i| {
            let rack = format!("rack-{}", i % RACKS);
            let block = format!("block-{}", (i % RACKS) / 5);
            let host = format!("node-{i}");
            Arc::new(NodeStatic::simple(
                &host,
                32_000,
                128 << 30,
                &[
                    ("rack", &rack),
                    ("block", &block),
                    ("kubernetes.io/hostname", &host),
                    ("topology.kubernetes.io/zone", "zone-a"),
                ],
            ))
        })
        .collect()
}

/// `n` running pods of one core each, spread round-robin over `nodes` nodes (`node-<i>`), in namespace `running`.
pub fn running_pods(n: usize, nodes: usize) -> impl Iterator<Item = Arc<PodInfo>> {
    // Each pod converted on its own, as the store converts each pod (no spec shared between them).
    (0..n).map(move |i| {
        let mut p = PodInfo::simple("running", &format!("r-{i}"), 1000);
        p.node_name = Some(format!("node-{}", i % nodes.max(1)).into());
        Arc::new(p)
    })
}
