//! NodeUnschedulable (upstream `plugins/nodeunschedulable`): rejects `spec.unschedulable`
//! nodes unless the pod tolerates `node.kubernetes.io/unschedulable:NoSchedule`.

use crate::framework::Code;
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::Rejection;
use crate::selectors::{Taint, TaintEffect, tolerated};

/// Plugin name.
pub const NAME: &str = "NodeUnschedulable";
/// Upstream `ErrReasonUnschedulable`.
pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
/// Taint key tolerated to land on an unschedulable node.
pub const TAINT_NODE_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// Filter.
pub fn filter(pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
    if !node.node.unschedulable {
        return Ok(());
    }
    let taint = Taint {
        key: TAINT_NODE_UNSCHEDULABLE.into(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
    };
    if tolerated(&pod.spec.tolerations, &taint) {
        return Ok(());
    }
    Err(Rejection::new(
        NAME,
        Code::UnschedulableAndUnresolvable,
        ERR_REASON_UNSCHEDULABLE,
    ))
}
