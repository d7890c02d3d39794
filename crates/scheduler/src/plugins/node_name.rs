//! NodeName (upstream `plugins/nodename`): a pending pod with `spec.nodeName` fits only that node.

use crate::framework::{Code, FilterPlugin, Plugin, PreFilterPlugin};
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::Rejection;
use crate::snapshot::Snapshot;

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

/// The plugin: Filter only, no state.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }
    fn node_local(&self, _: &PodInfo, _: &Snapshot) -> bool {
        true
    }
}

impl PreFilterPlugin for NodeName {
    type PreFilterState = ();
    fn pre_filter(&self, _: &PodInfo, _: &Snapshot) -> Option<()> {
        Some(())
    }
}

impl FilterPlugin for NodeName {
    fn filter(&self, _: &(), pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
        filter(pod, node)
    }
}
