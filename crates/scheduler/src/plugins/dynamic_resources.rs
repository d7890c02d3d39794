//! DynamicResources (upstream `plugins/dynamicresources`): a pod's resource claims must be allocated, or be
//! allocatable, with devices the node reaches.
//!
//! PreFilter resolves the claims ([`crate::dra::scheduling::plan`]); Filter allocates them on one node together
//! with the claims this cycle already allocated there ([`crate::dra::scheduling::fit`]), so that the members of
//! a gang are allocated jointly, unless counting free matching devices answers first
//! ([`crate::dra::scheduling::check`], [`crate::dra::summary`]). Reserve is the snapshot's assume (the
//! allocation goes to the cycle's [`crate::dra::DeviceOverlay`], and revert undoes it); PreBind is the runtime's
//! (it writes [`crate::Binding::devices`] for every pod of a gang before binding any).

use std::sync::Arc;

use crate::dra::scheduling::{self, CANNOT_ALLOCATE, ClaimPlan, Misfit, NOT_AVAILABLE, TIMED_OUT};
use crate::framework::{Code, FilterPlugin, Plugin, PreFilterPlugin};
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::Rejection;
use crate::snapshot::Snapshot;

/// Plugin name.
pub const NAME: &str = "DynamicResources";

/// PreFilter's result: the claims' plan, or the reason no node can do, which Filter reports on every node.
pub type State = Arc<Result<ClaimPlan, String>>;

/// The plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct DynamicResources;

impl Plugin for DynamicResources {
    fn name(&self) -> &'static str {
        NAME
    }
    /// A pod with claims depends on the device catalog and on the cycle's allocations on other nodes.
    fn node_local(&self, pod: &PodInfo, _: &Snapshot) -> bool {
        pod.spec.resource_claims.is_empty()
    }
    /// Its Filter allocates afresh on each node, from the catalog and the cycle's overlay: the members of a gang,
    /// equal but for their claims, share the other plugins' cached results and run this one each.
    fn filter_per_pod(&self, _pod: &PodInfo) -> bool {
        true
    }
}

impl PreFilterPlugin for DynamicResources {
    type PreFilterState = State;
    fn pre_filter(&self, pod: &PodInfo, snapshot: &Snapshot) -> Option<State> {
        match scheduling::plan(
            snapshot.devices(),
            snapshot.device_overlay(),
            pod,
            snapshot.nodes(),
        ) {
            Ok(None) => None,
            Ok(Some(p)) => Some(Arc::new(Ok(p))),
            Err(e) => Some(Arc::new(Err(e.0))),
        }
    }
}

impl FilterPlugin for DynamicResources {
    fn filter(&self, state: &State, _: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
        let plan = match &**state {
            Ok(p) => p,
            Err(reason) => {
                return Err(Rejection::new(
                    NAME,
                    Code::UnschedulableAndUnresolvable,
                    reason.clone(),
                ));
            }
        };
        match scheduling::check(plan, node) {
            Ok(()) => Ok(()),
            Err(Misfit::NotAvailable(_)) => Err(Rejection::new(
                NAME,
                Code::UnschedulableAndUnresolvable,
                NOT_AVAILABLE,
            )),
            Err(Misfit::CannotAllocate(_)) => Err(Rejection::new(NAME, Code::Unschedulable, CANNOT_ALLOCATE)),
            Err(Misfit::TimedOut(t)) => Err(Rejection::new(
                NAME,
                Code::Unschedulable,
                format!("{TIMED_OUT} (filter timeout {t:?})"),
            )),
        }
    }
}
