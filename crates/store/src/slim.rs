//! What the caches drop from each object before storing it: every kind loses `metadata.managedFields` (large, and
//! read by no one here), and the storage kinds the `kubectl apply` copy of the object ([`LAST_APPLIED`]). Pods and
//! nodes are not slimmed but kept as compact records ([`crate::record`]).

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
