//! NodePorts (upstream `plugins/nodeports`): a requested host port must be free on the node.

use crate::framework::{Code, FilterPlugin, Plugin, PreFilterPlugin};
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::Rejection;
use crate::snapshot::Snapshot;

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

/// The plugin: Filter only. Upstream's PreFilter merely collects the pod's host ports, which
/// [`crate::model::PodSpecInfo::host_ports`] already holds, so there is no state.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodePorts;

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }
    fn node_local(&self, _: &PodInfo, _: &Snapshot) -> bool {
        true
    }
}

impl PreFilterPlugin for NodePorts {
    type PreFilterState = ();
    fn pre_filter(&self, _: &PodInfo, _: &Snapshot) -> Option<()> {
        Some(())
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, _: &(), pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
        filter(pod, node)
    }
}
