//! The snapshot's DRA inputs and the cycle's device allocations (upstream DynamicResources keeps its
//! allocations in the `CycleState` and the assume cache; here they live beside the pods they were made for, in
//! the snapshot's undo log, so that a failed placement reverts them with the pods).

use std::sync::Arc;

use super::Snapshot;
use crate::dra::{DeviceCatalog, DeviceOverlay, scheduling};
use crate::model::PodInfo;

impl Snapshot {
    /// Sets the devices, classes and claims DynamicResources reads, and drops the allocations of earlier cycles
    /// (the runtime's catalog carries the ones PreBind is still writing).
    pub fn set_devices(&mut self, catalog: Arc<DeviceCatalog>) {
        self.devices = catalog;
        self.device_overlay = DeviceOverlay::default();
    }

    /// The DRA facts of this snapshot.
    pub fn devices(&self) -> &Arc<DeviceCatalog> {
        &self.devices
    }

    /// The device allocations of this cycle.
    pub fn device_overlay(&self) -> &DeviceOverlay {
        &self.device_overlay
    }

    /// Reserve (upstream DynamicResources `Reserve`): records the claims `pod` uses and what it allocates on
    /// node `node` (an index), at the current undo mark.
    pub(super) fn reserve_devices(&mut self, pod: &Arc<PodInfo>, node: usize) {
        let Some((claims, allocations)) =
            scheduling::reserve(&self.devices, &self.device_overlay, pod, &self.nodes[node])
        else {
            return;
        };
        let name = self.nodes[node].node.name.clone();
        self.device_overlay.record(
            self.undo.len(),
            pod.key.clone(),
            claims,
            allocations.map(|a| (name, a)),
        );
    }
}
