//! VolumeZone (upstream `plugins/volumezone`): a pod whose bound volumes carry zone or region labels may only go to
//! a node in one of those zones (regions). Nodes with none of the topology labels pass, as upstream.

use std::sync::Arc;

use crate::framework::{Code, FilterPlugin, Plugin, PreFilterPlugin};
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::Rejection;
use crate::snapshot::Snapshot;
use crate::volumes::{ClaimKey, VolumeAction};

/// Plugin name.
pub const NAME: &str = "VolumeZone";
/// Upstream `ErrReasonConflict`.
pub const ERR_REASON: &str = "node(s) had no available volume zone";

/// The topology labels upstream reads (GA and the deprecated beta keys).
pub const TOPOLOGY_LABELS: [&str; 4] = [
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
];

/// Per topology label of a bound volume, the values it allows (a `__`-separated list, upstream
/// `volumehelpers.LabelZonesToSet`).
pub type State = Arc<Vec<(&'static str, Vec<String>)>>;

/// The plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct VolumeZone;

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        NAME
    }
    fn node_local(&self, pod: &PodInfo, _: &Snapshot) -> bool {
        pod.spec.volumes.is_empty()
    }
}

impl PreFilterPlugin for VolumeZone {
    type PreFilterState = State;
    fn pre_filter(&self, pod: &PodInfo, snapshot: &Snapshot) -> Option<State> {
        let catalog = snapshot.volumes();
        let mut out: Vec<(&'static str, Vec<String>)> = Vec::new();
        for name in pod.spec.volumes.iter().filter_map(|v| v.claim()) {
            let key = ClaimKey {
                namespace: pod.key.namespace.clone(),
                name: name.clone(),
            };
            // Only bound claims (and those this cycle bound to a volume): unbound ones are VolumeBinding's.
            let pv = match snapshot.volume_overlay().choice(&key) {
                Some(VolumeAction::Bind { volume, .. }) => Some(volume.clone()),
                Some(VolumeAction::Provision { .. }) => None,
                None => catalog
                    .claim(&key)
                    .filter(|c| c.bound)
                    .and_then(|c| c.volume_name.clone()),
            };
            let Some(pv) = pv.and_then(|n| catalog.volume(&n)) else {
                continue;
            };
            for key in TOPOLOGY_LABELS {
                if let Some(v) = pv.labels.get(key) {
                    out.push((key, v.split("__").map(str::to_owned).collect()));
                }
            }
        }
        (!out.is_empty()).then(|| Arc::new(out))
    }
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, state: &State, _: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
        let labels = &node.node.labels;
        if !TOPOLOGY_LABELS.iter().any(|k| labels.contains_key(*k)) {
            return Ok(());
        }
        for (key, values) in state.iter() {
            let here = labels.get(*key).map(String::as_str).unwrap_or("");
            if !values.iter().any(|v| v == here) {
                return Err(Rejection::new(
                    NAME,
                    Code::UnschedulableAndUnresolvable,
                    ERR_REASON,
                ));
            }
        }
        Ok(())
    }
}
