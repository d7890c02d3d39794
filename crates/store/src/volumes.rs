//! The storage caches VolumeBinding, VolumeZone, NodeVolumeLimits and VolumeRestrictions read (upstream: the
//! PersistentVolumeClaim, PersistentVolume, StorageClass, CSINode, CSIDriver and CSIStorageCapacity informers of
//! `pkg/scheduler/framework/plugins/volumebinding` and `nodevolumelimits`).
//!
//! Claims and volumes are kept whole (their specs are what the plugins read) without managed fields; the other
//! kinds are small. Every change is published as [`crate::StoreEvent::Volume`].

use k8s_openapi::api::{
    core::v1::{PersistentVolume, PersistentVolumeClaim},
    storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass},
};
use kube::runtime::reflector::Store as Reader;

/// Number of kinds in [`VolumeReaders`] (each counts once toward readiness).
pub(crate) const VOLUME_KINDS: usize = 6;

/// Readers of the storage caches.
#[derive(Clone)]
pub struct VolumeReaders {
    /// PersistentVolumeClaims of every namespace.
    pub claims: Reader<PersistentVolumeClaim>,
    /// PersistentVolumes.
    pub volumes: Reader<PersistentVolume>,
    /// StorageClasses.
    pub classes: Reader<StorageClass>,
    /// CSINodes (per node attach limits).
    pub csi_nodes: Reader<CSINode>,
    /// CSIDrivers (whether a driver asks for capacity tracking).
    pub csi_drivers: Reader<CSIDriver>,
    /// CSIStorageCapacities.
    pub capacities: Reader<CSIStorageCapacity>,
}

/// The storage objects of a [`crate::ClusterState`], one list per kind.
#[derive(Clone, Debug, Default)]
pub struct VolumeObjects {
    /// PersistentVolumeClaims.
    pub claims: Vec<PersistentVolumeClaim>,
    /// PersistentVolumes.
    pub volumes: Vec<PersistentVolume>,
    /// StorageClasses.
    pub classes: Vec<StorageClass>,
    /// CSINodes.
    pub csi_nodes: Vec<CSINode>,
    /// CSIDrivers.
    pub csi_drivers: Vec<CSIDriver>,
    /// CSIStorageCapacities.
    pub capacities: Vec<CSIStorageCapacity>,
}
