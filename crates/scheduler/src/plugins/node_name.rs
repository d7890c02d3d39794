//! NodeName (upstream `plugins/nodename`): a pending pod with `spec.nodeName` fits only that node.

use crate::framework::Code;
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::Rejection;

/// Plugin name.
pub const NAME: &str = "NodeName";
/// Upstream `ErrReason`.
pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

/// Filter.
pub fn filter(pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
    match &pod.spec.node_name {
        Some(n) if n != node.name() => Err(Rejection::new(
            NAME,
            Code::UnschedulableAndUnresolvable,
            ERR_REASON,
        )),
        _ => Ok(()),
    }
}
