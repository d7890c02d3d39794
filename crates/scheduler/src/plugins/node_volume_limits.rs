//! NodeVolumeLimits (upstream `plugins/nodevolumelimits/csi.go`): the CSI volumes of the pods on a node, per
//! driver, may not exceed the attach limit the node's CSINode reports (`spec.drivers[].allocatable.count`).
//!
//! Volumes are counted by unique handle, so a volume two pods share counts once; an unbound claim counts under
//! its class's provisioner with the claim as a placeholder handle, as upstream does.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::framework::{Code, FilterPlugin, Plugin, PreFilterPlugin};
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::Rejection;
use crate::snapshot::Snapshot;
use crate::volumes::{ClaimKey, VolumeCatalog};

/// Plugin name.
pub const NAME: &str = "NodeVolumeLimits";
/// Upstream `ErrReasonMaxVolumeCountExceeded`.
pub const ERR_REASON: &str = "node(s) exceed max volume count";

/// PreFilter's result.
#[derive(Debug, Clone)]
pub struct State {
    catalog: Arc<VolumeCatalog>,
    /// Volumes chosen for claims earlier in this cycle.
    chosen: Arc<HashMap<ClaimKey, Arc<str>>>,
    /// The pod's CSI volumes as (driver, handle).
    wanted: Arc<Vec<(Arc<str>, Arc<str>)>>,
}

fn pod_csi_volumes(
    pod: &PodInfo,
    catalog: &VolumeCatalog,
    chosen: &HashMap<ClaimKey, Arc<str>>,
) -> impl Iterator<Item = (Arc<str>, Arc<str>)> {
    pod.spec.volumes.iter().filter_map(move |v| {
        let key = ClaimKey {
            namespace: pod.key.namespace.clone(),
            name: v.claim()?.clone(),
        };
        catalog.csi_volume(&key, chosen.get(&key).map(|s| &**s))
    })
}

/// The plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeVolumeLimits;

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        NAME
    }
    fn node_local(&self, pod: &PodInfo, _: &Snapshot) -> bool {
        pod.spec.volumes.is_empty()
    }
}

impl PreFilterPlugin for NodeVolumeLimits {
    type PreFilterState = State;
    fn pre_filter(&self, pod: &PodInfo, snapshot: &Snapshot) -> Option<State> {
        let catalog = snapshot.volumes();
        if catalog.csi_limits.is_empty() || pod.spec.volumes.iter().all(|v| v.claim().is_none()) {
            return None;
        }
        let chosen: HashMap<ClaimKey, Arc<str>> = snapshot
            .volume_overlay()
            .chosen_volumes()
            .map(|(c, v)| (c.clone(), v.clone()))
            .collect();
        let wanted: Vec<_> = pod_csi_volumes(pod, catalog, &chosen).collect();
        if wanted.is_empty() {
            return None;
        }
        Some(State {
            catalog: catalog.clone(),
            chosen: Arc::new(chosen),
            wanted: Arc::new(wanted),
        })
    }
}

impl FilterPlugin for NodeVolumeLimits {
    fn filter(&self, state: &State, _: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
        let Some(limits) = state.catalog.csi_limits.get(node.name()) else {
            return Ok(());
        };
        if !state.wanted.iter().any(|(d, _)| limits.contains_key(&**d)) {
            return Ok(());
        }
        let attached: HashSet<(Arc<str>, Arc<str>)> = node
            .pods
            .iter()
            .flat_map(|p| pod_csi_volumes(p, &state.catalog, &state.chosen))
            .collect();
        let mut new: HashMap<&str, HashSet<&str>> = HashMap::new();
        for (d, h) in state.wanted.iter() {
            if limits.contains_key(&**d) && !attached.contains(&(d.clone(), h.clone())) {
                new.entry(d).or_default().insert(h);
            }
        }
        for (driver, handles) in new {
            let limit = limits.get(driver).copied().unwrap_or(i64::MAX);
            let used = attached.iter().filter(|(d, _)| &**d == driver).count() as i64;
            if used.saturating_add(handles.len() as i64) > limit {
                return Err(Rejection::new(NAME, Code::Unschedulable, ERR_REASON));
            }
        }
        Ok(())
    }
}
