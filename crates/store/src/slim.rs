//! What the caches drop from each object before storing it: every kind loses `metadata.managedFields` (large, and
//! read by no one here). Pods also lose what no scheduler, controller or explain path reads: container commands,
//! arguments, environment, probes and lifecycle hooks, the volumes the volume plugins do not read (config maps,
//! secrets, projected, emptyDir and the like; claims, ephemeral claims and single-attach in-tree disks stay, an
//! ephemeral volume without its claim template), the
//! `kubectl apply` copy of the whole object in the `kubectl.kubernetes.io/last-applied-configuration` annotation,
//! and per-container statuses. Scheduling reads resources, ports, affinity, tolerations, topology spread, node
//! selection, scheduling gates, claims, labels, owners, phase and conditions, all of which stay. Nodes keep their
//! metadata, spec (taints, `unschedulable`) and capacity and allocatable, and lose their annotations and the rest
//! of the status (conditions, addresses, images, node info), which kubelets rewrite on every heartbeat and
//! scheduling does not read: kube-scheduler too filters on taints, not conditions. kube-scheduler keeps whole pods in its informer cache; at
//! 50,000 pods the difference is most of the process's memory (docs/benchmarks.md).

use k8s_openapi::api::core::v1::{Container, Node, NodeStatus, Pod};
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

/// [`managed_fields`], and the parts of a pod that Phalanx never reads (see the module doc).
pub fn pod(p: &mut Pod) {
    managed_fields(p);
    if let Some(a) = p.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
    if let Some(spec) = p.spec.as_mut() {
        if let Some(vs) = spec.volumes.as_mut() {
            vs.retain(|v| {
                v.persistent_volume_claim.is_some()
                    || v.ephemeral.is_some()
                    || v.gce_persistent_disk.is_some()
                    || v.aws_elastic_block_store.is_some()
                    || v.iscsi.is_some()
                    || v.rbd.is_some()
            });
            for v in vs.iter_mut() {
                if let Some(e) = v.ephemeral.as_mut() {
                    // Only its presence matters: the claim `<pod>-<volume>` is read from the claim cache.
                    e.volume_claim_template = None;
                }
            }
            if vs.is_empty() {
                spec.volumes = None;
            }
        }
        spec.containers.iter_mut().for_each(container);
        spec.init_containers.iter_mut().flatten().for_each(container);
    }
    if let Some(status) = p.status.as_mut() {
        status.container_statuses = None;
        status.init_container_statuses = None;
        status.ephemeral_container_statuses = None;
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

fn container(c: &mut Container) {
    c.command = None;
    c.args = None;
    c.env = None;
    c.env_from = None;
    c.liveness_probe = None;
    c.readiness_probe = None;
    c.startup_probe = None;
    c.lifecycle = None;
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
    fn a_slim_pod_keeps_what_scheduling_reads() {
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": "p", "namespace": "ns", "labels": {"scheduling.phalanx.dev/pod-group": "g"},
                "annotations": {LAST_APPLIED: "{...}", "keep": "me"},
                "managedFields": [{"manager": "kubectl"}],
            },
            "spec": {
                "schedulerName": "phalanx-scheduler",
                "nodeSelector": {"rack": "r1"},
                "initContainers": [{"name": "i", "command": ["sh"], "resources": {"requests": {"cpu": "1"}}}],
                "containers": [{
                    "name": "c", "image": "x", "command": ["run"], "args": ["--big"],
                    "env": [{"name": "A", "value": "1"}],
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "1"}},
                    "readinessProbe": {"exec": {"command": ["true"]}},
                }],
            },
            "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}],
                       "containerStatuses": [{"name": "c", "image": "x", "imageID": "", "ready": true, "restartCount": 0}]},
        }))
        .unwrap();
        pod(&mut p);
        assert!(p.metadata.managed_fields.is_none());
        let a = p.metadata.annotations.as_ref().unwrap();
        assert!(!a.contains_key(LAST_APPLIED) && a.contains_key("keep"));
        let spec = p.spec.as_ref().unwrap();
        let c = &spec.containers[0];
        assert!(c.command.is_none() && c.args.is_none() && c.env.is_none() && c.readiness_probe.is_none());
        assert_eq!(c.ports.as_ref().unwrap()[0].host_port, Some(8080));
        assert!(
            c.resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()
                .contains_key("nvidia.com/gpu")
        );
        assert!(spec.init_containers.as_ref().unwrap()[0].command.is_none());
        assert_eq!(spec.node_selector.as_ref().unwrap()["rack"], "r1");
        let st = p.status.as_ref().unwrap();
        assert_eq!(st.phase.as_deref(), Some("Running"));
        assert_eq!(st.conditions.as_ref().unwrap().len(), 1);
        assert!(st.container_statuses.is_none());
        assert_eq!(p.metadata.labels.as_ref().unwrap().len(), 1);
    }

    /// A group keeps only the controllers' own merge-patch entry: what says which priority fields they filled.
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
