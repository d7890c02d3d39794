//! NodeUnschedulable (upstream `plugins/nodeunschedulable`): rejects `spec.unschedulable`
//! nodes unless the pod tolerates `node.kubernetes.io/unschedulable:NoSchedule`.

use crate::framework::{Code, FilterPlugin, Plugin, PreFilterPlugin};
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::Rejection;
use crate::selectors::{Taint, TaintEffect, tolerated};
use crate::snapshot::Snapshot;

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

/// The plugin: Filter only, no state (upstream has no PreFilter either).
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }
    fn node_local(&self, _: &PodInfo, _: &Snapshot) -> bool {
        true
    }
}

impl PreFilterPlugin for NodeUnschedulable {
    type PreFilterState = ();
    fn pre_filter(&self, _: &PodInfo, _: &Snapshot) -> Option<()> {
        Some(())
    }
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _: &(), pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
        filter(pod, node)
    }
}
