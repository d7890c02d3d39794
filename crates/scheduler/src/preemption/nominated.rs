//! Capacity reserved by nominated pods (upstream `RunFilterPluginsWithNominatedPods` and
//! `addGENominatedPods` in `pkg/scheduler/framework/runtime/framework.go`): when Filter runs
//! for a pod on a node, pods nominated to that node with equal or higher priority are added to
//! a copy of the node first, so that a lower-priority pod cannot take the room a preemption
//! freed for them.

use crate::model::{NodeInfo, PodInfo};
use crate::snapshot::Snapshot;

/// Node `idx` with the nominated pods that count against `pod` added, or `None` when none
/// does. A nominated pod counts unless it is `pod` itself, has a lower priority, or is already
/// assigned or assumed in the snapshot (then its usage is already on some node).
pub(crate) fn with_nominated(snapshot: &Snapshot, pod: &PodInfo, idx: usize) -> Option<NodeInfo> {
    let st = snapshot.preemption_state();
    if !st.has_nominated() {
        return None;
    }
    let node = snapshot.nodes().get(idx)?;
    let mut out: Option<NodeInfo> = None;
    for n in st.nominated_on(node.name()) {
        if n.pod.key == pod.key || n.pod.priority < pod.priority || snapshot.contains_pod(&n.pod.key) {
            continue;
        }
        out.get_or_insert_with(|| node.clone()).add_pod(n.pod.clone());
    }
    out
}
