//! NodeAffinity (upstream `plugins/nodeaffinity`): `nodeSelector` and required terms filter
//! (every operator, `matchFields` on `metadata.name`); preferred terms score by weight.

use crate::framework::Code;
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::Rejection;

/// Plugin name.
pub const NAME: &str = "NodeAffinity";
/// Upstream `ErrReasonPod`.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";

/// Filter.
pub fn filter(pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
    if pod.spec.node_affinity_matches(node.name(), &node.node.labels) {
        Ok(())
    } else {
        Err(Rejection::new(
            NAME,
            Code::UnschedulableAndUnresolvable,
            ERR_REASON_POD,
        ))
    }
}

/// Raw score: sum of the weights of matching preferred terms (normalised by the maximum).
pub fn score(pod: &PodInfo, node: &NodeInfo) -> i64 {
    pod.spec
        .preferred_node_affinity
        .iter()
        .filter(|(_, t)| t.matches(node.name(), &node.node.labels))
        .map(|(w, _)| *w as i64)
        .sum()
}
