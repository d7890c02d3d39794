//! Heap of a full snapshot from the allocator's counters (dhat's heap statistics): `BENCH_NODES` nodes (default
//! 15,000, upstream scheduler_perf's largest cluster) with `BENCH_PODS` running pods (default 100,000, about 7 per
//! node), built the way the driver builds it (`Snapshot::new`, then `add_pod` per pod). The pods' models are built
//! first and counted apart: in the runtime they are the store's records (crates/store/src/record.rs), shared with
//! the snapshot, so the snapshot's own share is what a cycle adds on top.
//!
//! Prints `bench: snapshot-heap nodes=<n> pods=<n> nodes_bytes=<b> pods_bytes=<b> snapshot_bytes=<b>
//! snapshot_per_pod=<b>`. Run: `cargo bench -p phalanx-scheduler --bench snapshot_heap`.

#[path = "support/cluster.rs"]
mod cluster;

use std::sync::Arc;

use phalanx_scheduler::{PodInfo, Snapshot};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn heap() -> usize {
    dhat::HeapStats::get().curr_bytes
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let count = |var: &str, default: usize| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| *n > 0)
            .unwrap_or(default)
    };
    let (n_nodes, n_pods) = (count("BENCH_NODES", 15_000), count("BENCH_PODS", 100_000));
    let h0 = heap();
    let nodes = cluster::nodes_n(n_nodes);
    let h1 = heap();
    let pods: Vec<Arc<PodInfo>> = cluster::running_pods(n_pods, n_nodes).collect();
    let h2 = heap();
    let mut snap = Snapshot::new(nodes);
    for p in &pods {
        snap.add_pod(p.clone());
    }
    let h3 = heap();
    assert_eq!(snap.len(), n_nodes, "every node is in the snapshot");
    println!(
        "bench: snapshot-heap nodes={n_nodes} pods={n_pods} nodes_bytes={} pods_bytes={} snapshot_bytes={} \
         snapshot_per_pod={}",
        h1 - h0,
        h2 - h1,
        h3 - h2,
        (h3 - h2) / n_pods.max(1)
    );
    drop((snap, pods));
}
