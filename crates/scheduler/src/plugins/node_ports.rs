//! NodePorts (upstream `plugins/nodeports`): a requested host port must be free on the node.

use crate::framework::Code;
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::Rejection;

/// Plugin name.
pub const NAME: &str = "NodePorts";
/// Upstream `ErrReason`.
pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

/// Filter.
pub fn filter(pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
    for want in &pod.spec.host_ports {
        if node.used_ports.iter().any(|used| used.conflicts(want)) {
            return Err(Rejection::new(NAME, Code::Unschedulable, ERR_REASON));
        }
    }
    Ok(())
}
