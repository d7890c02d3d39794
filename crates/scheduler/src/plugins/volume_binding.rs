//! VolumeBinding (upstream `plugins/volumebinding`): a pod's claims must be bound to volumes the node can use, or
//! be bindable there (a matching available volume, or dynamic provisioning the class allows on the node).
//!
//! PreFilter sorts the claims ([`crate::volumes::binding::plan`]); Filter checks one node
//! ([`crate::volumes::binding::evaluate`]). Reserve is the snapshot's assume (the choices go to the cycle's
//! [`crate::volumes::VolumeOverlay`], and revert undoes them); PreBind is the runtime's (it writes
//! [`crate::Binding::volumes`] for every pod of a gang before binding any).

use std::sync::Arc;

use crate::framework::{Code, FilterPlugin, Plugin, PreFilterPlugin};
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::Rejection;
use crate::snapshot::Snapshot;
use crate::volumes::binding::{self, ClaimPlan};

/// Plugin name.
pub const NAME: &str = "VolumeBinding";

/// PreFilter's result: the claims' plans, or the reason no node can do (a missing or deleting claim, an unbound
/// immediate claim), which Filter reports on every node.
pub type State = Arc<Result<Vec<ClaimPlan>, String>>;

/// The plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct VolumeBinding;

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }
    /// A pod with claims depends on the volume catalog, which changes without a node changing.
    fn node_local(&self, pod: &PodInfo, _: &Snapshot) -> bool {
        pod.spec.volumes.is_empty()
    }
}

impl PreFilterPlugin for VolumeBinding {
    type PreFilterState = State;
    fn pre_filter(&self, pod: &PodInfo, snapshot: &Snapshot) -> Option<State> {
        if pod.spec.volumes.iter().all(|v| v.claim().is_none()) {
            return None;
        }
        let plans = binding::plan(snapshot.volumes(), snapshot.volume_overlay(), pod).map_err(|e| e.0);
        if plans.as_ref().is_ok_and(Vec::is_empty) {
            return None;
        }
        Some(Arc::new(plans))
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, state: &State, _: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
        let plans = match &**state {
            Ok(p) => p,
            Err(reason) => {
                return Err(Rejection::new(
                    NAME,
                    Code::UnschedulableAndUnresolvable,
                    reason.clone(),
                ));
            }
        };
        match binding::evaluate(plans, node) {
            Ok(_) => Ok(()),
            Err(reasons) => Err(Rejection {
                plugin: NAME,
                code: Code::UnschedulableAndUnresolvable,
                reasons: reasons.into_iter().map(Into::into).collect(),
            }),
        }
    }
}
