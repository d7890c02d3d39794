//! What the caches drop from each object before storing it: every kind loses `metadata.managedFields` (large, and
//! read by no one here). Nodes keep their metadata, spec (taints, `unschedulable`) and capacity and allocatable, and
//! lose their annotations and the rest of the status (conditions, addresses, images, node info), which kubelets
//! rewrite on every heartbeat and scheduling does not read: kube-scheduler too filters on taints, not conditions.
//! Pods are not slimmed but kept as compact records ([`crate::record`]); the `kubectl apply` copy of an object
//! ([`LAST_APPLIED`]) is dropped from them and from the storage kinds.

use k8s_openapi::api::core::v1::{Node, NodeStatus};
use kube::Resource;

/// The annotation `kubectl apply` writes with the last applied object, often as large as the object itself.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops `metadata.managedFields`.
pub fn managed_fields<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

/// For PodGroups and CompositePodGroups: `metadata.managedFields` less every entry but the controllers' own merge
/// patches (manager [`phalanx_api::field_managers::CONTROLLER`], operation `Update`, no subresource). That one small
/// entry says which of `spec.priority` and `spec.preemptionPolicy` the controller filled from the PriorityClass;
/// any other value of them was written by the group's author, and a value the class does not give is reported
/// (`Valid=False`, docs/controllers.md).
pub fn group_managed_fields<K: Resource>(o: &mut K) {
    if let Some(entries) = o.meta_mut().managed_fields.as_mut() {
        entries.retain(|e| {
            e.manager.as_deref() == Some(phalanx_api::field_managers::CONTROLLER)
                && e.operation.as_deref() == Some("Update")
                && e.subresource.as_deref().is_none_or(str::is_empty)
        });
    }
}

/// [`managed_fields`] and the `kubectl apply` copy: what a claim, volume or storage class keeps (their specs and
/// the binding annotations are what the volume plugins read), and every DRA kind ([`crate::dra`]: device classes,
/// slices, claims and templates are read whole by the DRA plugin).
pub fn storage_object<K: Resource>(o: &mut K) {
    managed_fields(o);
    if let Some(a) = o.meta_mut().annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// [`managed_fields`], and of each driver of a CSINode all but its name and attach limit (NodeVolumeLimits reads
/// only `spec.drivers[].allocatable.count`).
pub fn csi_node(n: &mut k8s_openapi::api::storage::v1::CSINode) {
    storage_object(n);
    for d in &mut n.spec.drivers {
        d.node_id = String::new();
        d.topology_keys = None;
    }
}

/// [`managed_fields`], annotations, and every part of a node's status but capacity and allocatable.
pub fn node(n: &mut Node) {
    managed_fields(n);
    n.metadata.annotations = None;
    if let Some(status) = n.status.take() {
        n.status = Some(NodeStatus {
            allocatable: status.allocatable,
            capacity: status.capacity,
            ..NodeStatus::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_slim_node_keeps_labels_taints_and_allocatable() {
        let mut n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n", "labels": {"rack": "r1"}, "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {"cpu": "8"}, "capacity": {"cpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
                "images": [{"names": ["a"], "sizeBytes": 1}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            },
        }))
        .unwrap();
        node(&mut n);
        assert_eq!(n.metadata.labels.as_ref().unwrap()["rack"], "r1");
        assert!(n.metadata.annotations.is_none());
        let spec = n.spec.as_ref().unwrap();
        assert_eq!(spec.unschedulable, Some(true));
        assert_eq!(spec.taints.as_ref().unwrap().len(), 1);
        let st = n.status.as_ref().unwrap();
        assert_eq!(st.allocatable.as_ref().unwrap()["cpu"].0, "8");
        assert!(
            st.capacity.is_some() && st.conditions.is_none() && st.images.is_none() && st.addresses.is_none()
        );
    }

    #[test]
    fn a_slim_group_keeps_only_the_controllers_patch_entry() {
        let mut g: phalanx_api::v1beta1::PodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "managedFields": [
                {"manager": "kubectl-create", "operation": "Update", "fieldsV1": {"f:spec": {"f:priority": {}}}},
                {"manager": "phalanx-controller", "operation": "Update",
                 "fieldsV1": {"f:spec": {"f:preemptionPolicy": {}}}},
                {"manager": "phalanx-controller", "operation": "Apply", "subresource": "status",
                 "fieldsV1": {"f:status": {}}},
            ]},
            "spec": {"schedulingPolicy": {"basic": {}}, "priority": 5, "preemptionPolicy": "Never"},
        }))
        .unwrap();
        group_managed_fields(&mut g);
        let kept = g.metadata.managed_fields.unwrap_or_default();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].manager.as_deref(), Some("phalanx-controller"));
        assert!(kept[0].subresource.is_none());
    }
}
