//! Plugins, one module per upstream plugin (`pkg/scheduler/framework/plugins/*`).
//!
//! Each per-pod module has the plugin's logic as free functions (Filter returns
//! `Err(Rejection)` with upstream's reason string; Score returns a raw score) and a plugin type
//! implementing [`crate::framework::FilterPlugin`] and/or [`crate::framework::ScorePlugin`].
//! [`registry`] registers them by upstream name and builds the weighted [`registry::Profile`]
//! that [`crate::schedule_one`] runs, with per-pod state in a [`registry::CycleState`]. Group
//! plugins implement the group traits of [`crate::framework`].

// Every plugin names it from here; it is defined with the Filter extension point that returns it.
pub use crate::framework::Rejection;

mod cycle_state;
pub mod dynamic_resources;
pub mod gang_scheduling;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod pod_group_pods_count;
pub mod pod_topology_spread;
pub mod registry;
pub mod taint_toleration;
pub mod topology_packing;
pub mod topology_placement;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

/// Highest normalised node score (upstream `framework.MaxNodeScore`).
pub const MAX_NODE_SCORE: i64 = 100;

/// Upstream `helper.DefaultNormalizeScore`: scales to 0..=max_priority by the maximum; with
/// `reverse`, subtracts from max_priority.
pub fn default_normalize(max_priority: i64, reverse: bool, scores: &mut [i64]) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = max_priority);
        }
        return;
    }
    for s in scores.iter_mut() {
        *s = max_priority * *s / max;
        if reverse {
            *s = max_priority - *s;
        }
    }
}
