//! Storage objects into [`crate::volumes`] types, and a pod's volumes into [`PodVolume`]s.
//!
//! Like pods and nodes, these never fail: the API server validates the objects, and what cannot be read (a bad
//! quantity or selector) is taken in the way that promises the least: a volume whose node affinity cannot be read
//! admits no node, a claim selector that cannot be read matches no volume, a size that cannot be read is 0 for a
//! volume and the maximum for a claim.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1 as storage;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::model::{DiskKind, InlineDisk, PodVolume};
use crate::resources::parse_value;
use crate::selectors::{LabelSelector, NodeSelectorTerm, Requirement, SelectorOp};
use crate::volumes::{AccessModes, CapacityInfo, ClaimInfo, ClaimKey, ClassInfo, VolumeInfo, VolumePhase};

/// The annotation a scheduler sets on a claim to ask its provisioner for a volume on that node (upstream
/// `volume.AnnSelectedNode`).
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// The annotation the PV controller sets on a claim once it has bound it to its volume (upstream
/// `volume.AnnBindCompleted`); with `spec.volumeName` it makes the claim fully bound (`isPVCFullyBound`).
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// The claim and disk volumes of a pod named `pod_name`, in spec order.
pub(crate) fn pod_volumes(spec: &core::PodSpec, pod_name: &str) -> Vec<PodVolume> {
    let mut out = Vec::new();
    for v in spec.volumes.iter().flatten() {
        if let Some(c) = &v.persistent_volume_claim {
            out.push(PodVolume::Claim {
                name: c.claim_name.as_str().into(),
                ephemeral: false,
            });
        } else if v.ephemeral.is_some() {
            out.push(PodVolume::Claim {
                name: format!("{pod_name}-{}", v.name).into(),
                ephemeral: true,
            });
        } else if let Some(d) = disk(v) {
            out.push(PodVolume::Disk(d));
        }
    }
    out
}

fn disk(v: &core::Volume) -> Option<InlineDisk> {
    let (kind, id, monitors, read_only) = if let Some(g) = &v.gce_persistent_disk {
        (
            DiskKind::GcePersistentDisk,
            g.pd_name.clone(),
            vec![],
            g.read_only,
        )
    } else if let Some(a) = &v.aws_elastic_block_store {
        (
            DiskKind::AwsElasticBlockStore,
            a.volume_id.clone(),
            vec![],
            a.read_only,
        )
    } else if let Some(i) = &v.iscsi {
        (DiskKind::Iscsi, i.iqn.clone(), vec![], i.read_only)
    } else if let Some(r) = &v.rbd {
        let id = format!("{}/{}", r.pool.as_deref().unwrap_or("rbd"), r.image);
        (DiskKind::Rbd, id, r.monitors.clone(), r.read_only)
    } else {
        return None;
    };
    Some(InlineDisk {
        kind,
        id,
        monitors,
        read_only: read_only.unwrap_or(false),
    })
}

fn storage_of(map: Option<&std::collections::BTreeMap<String, Quantity>>) -> Option<Result<i64, ()>> {
    map.and_then(|m| m.get("storage"))
        .map(|q| parse_value(&q.0).map_err(|_| ()))
}

impl ClaimInfo {
    /// Converts an API claim.
    pub fn from_api(c: &core::PersistentVolumeClaim) -> ClaimInfo {
        let meta = &c.metadata;
        let spec = c.spec.clone().unwrap_or_default();
        let request = match storage_of(spec.resources.as_ref().and_then(|r| r.requests.as_ref())) {
            Some(Ok(v)) => v.max(0),
            Some(Err(())) => i64::MAX,
            None => 0,
        };
        let selector = spec.selector.as_ref().map(|s| {
            LabelSelector::from_api(Some(s)).unwrap_or(LabelSelector {
                requirements: vec![],
                nothing: true,
            })
        });
        ClaimInfo {
            key: ClaimKey::new(
                meta.namespace.as_deref().unwrap_or("default"),
                meta.name.as_deref().unwrap_or(""),
            ),
            uid: meta.uid.as_deref().unwrap_or("").into(),
            deleting: meta.deletion_timestamp.is_some(),
            volume_name: spec
                .volume_name
                .as_deref()
                .filter(|v| !v.is_empty())
                .map(Arc::from),
            // Upstream `isPVCFullyBound` (`volumebinding/binder.go`): the volume name and the PV controller's
            // annotation, not `status.phase`. A claim with only `spec.volumeName` is pre-bound, not bound.
            bound: spec.volume_name.as_deref().is_some_and(|v| !v.is_empty())
                && meta
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(ANN_BIND_COMPLETED)),
            class: spec.storage_class_name.clone().unwrap_or_default(),
            access: AccessModes::parse(spec.access_modes.iter().flatten().map(String::as_str)),
            request,
            selector,
            block: spec.volume_mode.as_deref() == Some("Block"),
            selected_node: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANN_SELECTED_NODE))
                .filter(|n| !n.is_empty())
                .map(|n| Arc::from(n.as_str())),
        }
    }
}

impl VolumeInfo {
    /// Converts an API volume.
    pub fn from_api(v: &core::PersistentVolume) -> VolumeInfo {
        let meta = &v.metadata;
        let spec = v.spec.clone().unwrap_or_default();
        let node_affinity = spec
            .node_affinity
            .as_ref()
            .and_then(|a| a.required.as_ref())
            .map(|sel| {
                sel.node_selector_terms
                    .iter()
                    .map(NodeSelectorTerm::from_api)
                    .collect::<Result<Vec<_>, _>>()
                    // Unreadable affinity admits no node.
                    .unwrap_or_default()
            });
        let phase = match v.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Available") => VolumePhase::Available,
            Some("Bound") => VolumePhase::Bound,
            Some("Released") => VolumePhase::Released,
            Some("Failed") => VolumePhase::Failed,
            _ => VolumePhase::Pending,
        };
        VolumeInfo {
            name: meta.name.as_deref().unwrap_or("").into(),
            resource_version: meta.resource_version.as_deref().unwrap_or("").into(),
            class: spec.storage_class_name.clone().unwrap_or_default(),
            access: AccessModes::parse(spec.access_modes.iter().flatten().map(String::as_str)),
            capacity: match storage_of(spec.capacity.as_ref()) {
                Some(Ok(v)) => v.max(0),
                _ => 0,
            },
            labels: meta.labels.clone().unwrap_or_default(),
            node_affinity,
            claim_ref: spec.claim_ref.as_ref().and_then(|r| {
                let name = r.name.as_deref().filter(|n| !n.is_empty())?;
                Some((
                    ClaimKey::new(r.namespace.as_deref().unwrap_or("default"), name),
                    Arc::from(r.uid.as_deref().unwrap_or("")),
                ))
            }),
            phase,
            csi: spec
                .csi
                .as_ref()
                .map(|c| (Arc::from(c.driver.as_str()), Arc::from(c.volume_handle.as_str()))),
            block: spec.volume_mode.as_deref() == Some("Block"),
            deleting: meta.deletion_timestamp.is_some(),
        }
    }
}

impl ClassInfo {
    /// Converts an API storage class.
    pub fn from_api(c: &storage::StorageClass) -> ClassInfo {
        let allowed_topologies = c
            .allowed_topologies
            .as_ref()
            .filter(|t| !t.is_empty())
            .map(|terms| {
                terms
                    .iter()
                    .map(|t| NodeSelectorTerm {
                        labels: t
                            .match_label_expressions
                            .iter()
                            .flatten()
                            .map(|e| Requirement {
                                key: e.key.clone(),
                                op: SelectorOp::In,
                                values: e.values.clone(),
                            })
                            .collect(),
                        fields: vec![],
                    })
                    .collect()
            });
        ClassInfo {
            provisioner: c.provisioner.as_str().into(),
            wait_for_first_consumer: c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"),
            allowed_topologies,
        }
    }
}

impl CapacityInfo {
    /// Converts an API CSIStorageCapacity (a capacity that cannot be read counts as none).
    pub fn from_api(c: &storage::CSIStorageCapacity) -> CapacityInfo {
        let size = |q: Option<&Quantity>| q.and_then(|q| parse_value(&q.0).ok());
        CapacityInfo {
            class: c.storage_class_name.clone(),
            node_topology: LabelSelector::from_api(c.node_topology.as_ref()).unwrap_or(LabelSelector {
                requirements: vec![],
                nothing: true,
            }),
            limit: size(c.maximum_volume_size.as_ref())
                .or(size(c.capacity.as_ref()))
                .unwrap_or(0),
        }
    }
}

/// Per CSI driver, the attach limit a CSINode reports (`spec.drivers[].allocatable.count`; drivers without one
/// are unlimited and left out).
pub fn csi_node_limits(n: &storage::CSINode) -> HashMap<String, i64> {
    n.spec
        .drivers
        .iter()
        .filter_map(|d| {
            let count = d.allocatable.as_ref()?.count?;
            Some((d.name.clone(), i64::from(count.max(0))))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_claim(volume: Option<&str>, annotations: &[(&str, &str)], phase: Option<&str>) -> ClaimInfo {
        let c: core::PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "c", "namespace": "ns", "uid": "u",
                "annotations": annotations.iter().copied().collect::<HashMap<_, _>>(),
            },
            "spec": { "volumeName": volume, "storageClassName": "local" },
            "status": { "phase": phase },
        }))
        .expect("a valid claim");
        ClaimInfo::from_api(&c)
    }

    /// Upstream `isPVCFullyBound` (`volumebinding/binder.go`): `spec.volumeName` and the PV controller's
    /// `pv.kubernetes.io/bind-completed` annotation; neither alone, and not `status.phase`.
    #[test]
    fn a_claim_is_bound_with_its_volume_name_and_the_bind_completed_annotation() {
        let done = [(ANN_BIND_COMPLETED, "yes")];
        assert!(api_claim(Some("pv"), &done, Some("Bound")).bound);
        assert!(api_claim(Some("pv"), &done, None).bound, "the annotation decides");
        assert!(
            !api_claim(Some("pv"), &[], Some("Bound")).bound,
            "pre-bound, not yet completed by the PV controller"
        );
        assert!(!api_claim(None, &done, Some("Bound")).bound, "no volume");
        assert!(
            !api_claim(Some(""), &done, None).bound,
            "an empty volumeName is none"
        );
    }
}
