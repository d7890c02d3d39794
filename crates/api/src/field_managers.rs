//! Server-side-apply field managers. Distinct managers let the controller and the scheduler each own their
//! own entries of `status.conditions` (a list-map keyed by `type`).

/// Field manager of the controllers (finalizers, counters, `policy`, non-scheduling conditions).
pub const CONTROLLER: &str = "phalanx-controller";

/// Field manager of the scheduler (`*InitiallyScheduled` and `DisruptionTarget` conditions, bindings).
pub const SCHEDULER: &str = "phalanx-scheduler";

/// Field manager of the owner integration (the `spec` and owner metadata of the Workloads and PodGroups it creates
/// for annotated Jobs, StatefulSets and other owners). Distinct from [`CONTROLLER`] so that applying a group's
/// spec never drops the finalizers and status the PodGroup controller applied.
pub const INTEGRATION: &str = "phalanx-integration";

/// Field manager of the ProvisioningRequest controller: the PodGroup condition `CapacityProvisioned`
/// ([`crate::conditions::CAPACITY_PROVISIONED`]), the ProvisioningRequests and PodTemplates it creates, and the
/// Cluster Autoscaler annotations it sets on member pods.
pub const PROVISIONING: &str = "phalanx-provisioning";
