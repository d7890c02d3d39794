//! The cluster-wide API permissions `phalanx run` needs: one table, [`CLUSTER_PERMISSIONS`], that the Helm chart's
//! ClusterRole (`charts/phalanx/templates/clusterrole.yaml`) must grant exactly, verb for verb; the chart test
//! (`crates/phalanx/tests/chart.rs`) renders the chart with `helm template` and compares. A change that makes the
//! code call a new verb adds a row here, in the same commit, and the test then fails until the chart grants it
//! (the owner integration's deletes of stale Workloads and PodGroups got a 403 on every try before the table).
//!
//! The Lease of leader election is not here: it is a namespaced Role on one named Lease
//! (`charts/phalanx/templates/role-lease.yaml`, tested on its own), as kube-scheduler's
//! `system::leader-locking-kube-scheduler` Role is (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`).

/// One rule of the ClusterRole: every verb in `verbs` on every resource in `resources` of `api_group`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permission {
    /// The API group; `""` is the core group (`v1`), as in a Kubernetes RBAC `PolicyRule`.
    pub api_group: &'static str,
    /// Resources (plural, lower case) and subresources (`pods/binding`), as an RBAC rule names them.
    pub resources: &'static [&'static str],
    /// RBAC verbs (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`).
    pub verbs: &'static [&'static str],
    /// The code that calls them (crate and module), and why.
    pub used_by: &'static str,
}

/// The verbs granted on each custom owner resource listed in the chart's `integrations.ownerResources`: the
/// store's on-demand metadata cache of the kind (list, watch) and the owner integration's read of one owner (get).
pub const OWNER_RESOURCE_VERBS: &[&str] = &["get", "list", "watch"];

const READ: &[&str] = &["get", "list", "watch"];

/// Every cluster-wide permission of `phalanx run`, one row per rule of the chart's ClusterRole.
pub const CLUSTER_PERMISSIONS: &[Permission] = &[
    Permission {
        api_group: "",
        resources: &["pods"],
        verbs: &["get", "list", "watch", "patch", "delete"],
        used_by: "store (pod cache); driver::evict (preemption victims); controllers::recovery \
                  (RestartGroup deletes a gang's bound members); controllers::provisioning (Cluster \
                  Autoscaler's consume-provisioning-request annotations on a gang's members)",
    },
    Permission {
        api_group: "",
        resources: &["pods/binding"],
        verbs: &["create"],
        used_by: "driver::binder (POST pods/{name}/binding)",
    },
    Permission {
        api_group: "",
        resources: &["pods/status"],
        verbs: &["patch"],
        used_by: "driver::status, driver::evict (PodScheduled, DisruptionTarget, nominatedNodeName)",
    },
    Permission {
        api_group: "",
        resources: &["events"],
        verbs: &["create"],
        used_by: "events on pods and groups (core/v1)",
    },
    Permission {
        api_group: "events.k8s.io",
        resources: &["events"],
        verbs: &["create", "patch"],
        used_by: "events on pods and groups (events.k8s.io/v1, series updates)",
    },
    Permission {
        api_group: "",
        resources: &["nodes"],
        verbs: READ,
        used_by: "store (node cache)",
    },
    Permission {
        api_group: "policy",
        resources: &["poddisruptionbudgets"],
        verbs: READ,
        used_by: "store (PDB cache, preemption)",
    },
    Permission {
        api_group: "scheduling.k8s.io",
        resources: &["priorityclasses"],
        verbs: READ,
        used_by: "store (PriorityClass cache)",
    },
    Permission {
        api_group: "scheduling.k8s.io",
        resources: &["podgroups", "compositepodgroups"],
        verbs: READ,
        used_by: "store::upstream (upstream's PodGroups and CompositePodGroups, watched where served)",
    },
    Permission {
        api_group: "scheduling.k8s.io",
        resources: &["podgroups/status", "compositepodgroups/status"],
        verbs: &["patch"],
        used_by: "driver::dispatcher::conditions (…InitiallyScheduled on upstream's groups)",
    },
    Permission {
        api_group: "",
        resources: &["persistentvolumeclaims", "persistentvolumes"],
        verbs: &["get", "list", "watch", "patch"],
        used_by: "store; driver::volumes (PreBind: a PV's claimRef, a claim's \
                  volume.kubernetes.io/selected-node)",
    },
    Permission {
        api_group: "storage.k8s.io",
        resources: &["storageclasses", "csinodes", "csidrivers", "csistoragecapacities"],
        verbs: READ,
        used_by: "store (volume plugins' caches)",
    },
    Permission {
        api_group: "resource.k8s.io",
        resources: &["deviceclasses", "resourceslices", "resourceclaimtemplates"],
        verbs: READ,
        used_by: "store (DRA caches, watched only when resource.k8s.io/v1 is served)",
    },
    Permission {
        api_group: "resource.k8s.io",
        resources: &["resourceclaims"],
        verbs: &["get", "list", "watch", "create", "update", "patch"],
        used_by: "store; driver::devices (a claim's finalizer); controllers::group_claims (a group's claims \
                  from its ResourceClaimTemplates, KEP-5729)",
    },
    Permission {
        api_group: "resource.k8s.io",
        resources: &["resourceclaims/status"],
        verbs: &["update", "patch"],
        used_by: "driver::devices (a claim's allocation and reservedFor)",
    },
    Permission {
        api_group: "resource.k8s.io",
        resources: &["resourceclaims/binding"],
        verbs: &["update", "patch"],
        used_by: "driver::devices: kube-apiserver 1.37 checks it before a write of status.allocation or \
                  status.reservedFor",
    },
    Permission {
        api_group: "scheduling.phalanx.dev",
        resources: &["compositepodgroups"],
        verbs: &["get", "list", "watch", "create", "patch", "update", "delete"],
        used_by: "store; controllers (finalizers); controllers::integrations (server-side apply of the composite \
                  of a JobSet, an LWS replica group, a RayCluster or an MPIJob, and its deletion once the owner's \
                  plan drops it)",
    },
    Permission {
        api_group: "scheduling.phalanx.dev",
        resources: &["workloads", "podgroups"],
        verbs: &["get", "list", "watch", "create", "patch", "update", "delete"],
        used_by: "store; controllers (finalizers); controllers::integrations (server-side apply of an annotated \
                  owner's Workload and PodGroup, and delete_stale: deletes them once the pods join an owner \
                  above)",
    },
    Permission {
        api_group: "",
        resources: &["podtemplates"],
        verbs: &["get", "list", "watch", "create", "delete"],
        used_by: "controllers::provisioning (the PodTemplates of a gang's ProvisioningRequest; those of a \
                  replaced attempt are deleted)",
    },
    Permission {
        api_group: "autoscaling.x-k8s.io",
        resources: &["provisioningrequests"],
        verbs: &["get", "list", "watch", "create", "delete"],
        used_by: "controllers::provisioning (with autoscaling.provisioningRequests: a gang's Cluster Autoscaler \
                  ProvisioningRequest, watched by label, replaced after Failed or BookingExpired)",
    },
    Permission {
        api_group: "batch",
        resources: &["jobs"],
        verbs: READ,
        used_by: "store (owner metadata cache); controllers::integrations (get of an owner's spec)",
    },
    Permission {
        api_group: "apps",
        resources: &["replicasets", "deployments", "statefulsets"],
        verbs: READ,
        used_by: "store (owner metadata caches); controllers::integrations (get of an owner's spec)",
    },
    Permission {
        api_group: "scheduling.phalanx.dev",
        resources: &[
            "workloads/status",
            "podgroups/status",
            "compositepodgroups/status",
        ],
        verbs: &["get", "patch", "update"],
        used_by: "controllers (status counters), driver (scheduling conditions)",
    },
    Permission {
        api_group: "scheduling.phalanx.dev",
        resources: &[
            "workloads/finalizers",
            "podgroups/finalizers",
            "compositepodgroups/finalizers",
        ],
        verbs: &["update"],
        used_by: "controllers::group_claims (a group's ResourceClaims name it as owner with blockOwnerDeletion, \
                  which the OwnerReferencesPermissionEnforcement admission plugin allows only with this verb)",
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// No resource appears in two rows (the chart test flattens rules per resource and would see two entries),
    /// and every verb is one RBAC knows.
    #[test]
    fn each_resource_has_one_row_of_known_verbs() {
        let known = ["get", "list", "watch", "create", "update", "patch", "delete"];
        let mut seen = BTreeSet::new();
        for p in CLUSTER_PERMISSIONS {
            assert!(!p.verbs.is_empty(), "{p:?}");
            for v in p.verbs {
                assert!(known.contains(v), "unknown verb {v} in {p:?}");
            }
            for r in p.resources {
                assert!(
                    seen.insert((p.api_group, *r)),
                    "{}/{r} is in two rows",
                    p.api_group
                );
            }
        }
    }
}
