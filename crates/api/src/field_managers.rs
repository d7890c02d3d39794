//! Server-side-apply field managers. Distinct managers let the controller and the scheduler each own their
//! own entries of `status.conditions` (a list-map keyed by `type`).

/// Field manager of the controllers (finalizers, counters, `policy`, non-scheduling conditions).
pub const CONTROLLER: &str = "phalanx-controller";

/// Field manager of the scheduler (`*InitiallyScheduled` and `DisruptionTarget` conditions, bindings).
pub const SCHEDULER: &str = "phalanx-scheduler";
