//! The names the owner integration's logs, metrics and events carry (one place, for [`super`] and
//! [`super::per_kind`]).

/// Controller name in logs, metrics and events.
pub const CONTROLLER: &str = "owner-integration";

/// Normal event on an owner: the Workload and PodGroup made for it earlier were deleted, because its pods join the
/// group of an owner above it (a ReplicaSet of an annotated Deployment).
pub const GANG_GROUP_DELETED: &str = "GangGroupDeleted";
