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

/// For PodGroups and CompositePodGroups: of `metadata.managedFields`, only what says who wrote `spec.priority` and
/// `spec.preemptionPolicy`: the entries that own one of them, cut down to those two fields, less the controllers'
/// own merge patches (manager [`phalanx_api::field_managers::CONTROLLER`], operation `Update`, no subresource). A
/// value some remaining entry owns was written by the group's author, and one the class does not give is reported
/// (`Valid=False`, docs/controllers.md); a value no entry owns was filled by the controllers' patch or by the
/// admission policy, which the API server records under no manager (it updates managedFields before mutating
/// admission: k8s.io/apiserver pkg/endpoints/handlers/create.go). Most groups keep no entry at all.
pub fn group_managed_fields<K: Resource>(o: &mut K) {
    let Some(entries) = o.meta_mut().managed_fields.as_mut() else {
        return;
    };
    entries.retain_mut(|e| {
        let controllers_patch = e.manager.as_deref() == Some(phalanx_api::field_managers::CONTROLLER)
            && e.operation.as_deref() == Some("Update")
            && e.subresource.as_deref().is_none_or(str::is_empty);
        let Some(root) = e.fields_v1.as_mut().and_then(|f| f.0.as_object_mut()) else {
            return false;
        };
        root.retain(|k, _| k == "f:spec");
        let Some(spec) = root.get_mut("f:spec").and_then(|s| s.as_object_mut()) else {
            return false;
        };
        spec.retain(|k, _| k == "f:priority" || k == "f:preemptionPolicy");
        if controllers_patch || spec.is_empty() {
            return false;
        }
        e.time = None;
        e.api_version = None;
        true
    });
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
    fn a_slim_group_keeps_only_who_wrote_its_priority_fields() {
        let mut g: phalanx_api::v1beta1::PodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "managedFields": [
                {"manager": "kubectl-create", "operation": "Update", "time": "2026-01-01T00:00:00Z",
                 "fieldsV1": {"f:metadata": {"f:labels": {}},
                              "f:spec": {"f:priority": {}, "f:schedulingPolicy": {"f:basic": {}}}}},
                {"manager": "kubectl-label", "operation": "Update",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:x": {}}}}},
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
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept[0].manager.as_deref(), Some("kubectl-create"));
        assert_eq!(
            kept[0].fields_v1.as_ref().unwrap().0,
            json!({"f:spec": {"f:priority": {}}})
        );
        assert!(kept[0].time.is_none());
    }
}
