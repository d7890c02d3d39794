//! Per-kind grouping (issue 38): how the pods of one workload controller's object form PodGroups, and whether those
//! groups form one CompositePodGroup. Pure: each rule reads the owner as JSON (a `DynamicObject`) and returns a
//! [`Plan`]; the owner integration applies it.
//!
//! Rules, one module per kind, each documented with its upstream sources:
//! - [`jobset`]: `jobset.x-k8s.io` JobSet (one group per replicated job; a composite only when they start together);
//! - [`lws`]: `leaderworkerset.x-k8s.io` LeaderWorkerSet (a leader group and a workers group per replica group);
//! - [`ray`]: `ray.io` RayCluster and RayJob (the head and one group per worker group, at their minimum);
//! - [`mpi`]: `kubeflow.org` MPIJob (launcher and workers);
//! - [`trainjob`]: `trainer.kubeflow.org` TrainJob (the JobSet rule over the JobSet it creates, the trainer step
//!   only).
//!
//! Any other kind keeps the one-gang-per-owner rule of [`super::build`]. Groups are keyed by the owner's uid (the
//! integration labels them with it), never by name: a JobSet restart recreates its Jobs under the same names.

pub mod jobset;
pub mod lws;
pub mod mpi;
pub mod objects;
pub mod ray;
pub mod trainjob;

use phalanx_api::owners::MemberSelector;
use serde_json::Value;

/// One PodGroup a rule asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedGroup {
    /// The group's part of the name, appended to the unit's name (`driver`, `workers`); a DNS label.
    pub part: String,
    /// Gang quorum, `1..=i32::MAX`; `None` for a group of independent pods (upstream's Basic policy), such as a
    /// leader that must run before its workers exist.
    pub min_count: Option<i32>,
    /// The pod labels that select its members (all must match), among the owner's pods.
    pub members: MemberSelector,
}

/// The groups of one scheduling unit of an owner: the whole owner (a JobSet) or one replica group (an LWS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unit {
    /// The unit's part of the name: empty for the whole owner, `"<index>"` for a replica group.
    pub part: String,
    /// True: the groups are the children of one CompositePodGroup, placed all or nothing together. False: each
    /// group is scheduled on its own (stages that start one after another must not wait for each other).
    pub composite: bool,
    /// The groups, in the owner's order; never empty.
    pub groups: Vec<PlannedGroup>,
}

/// What a rule decided for an owner: its units, and notes for a Warning event on the owner (a setting that cannot
/// work with a gang, named with the advice).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The units; empty when the owner runs no pods now (every replicated job scaled to 0).
    pub units: Vec<Unit>,
    /// `Some(label)`: the units are templates repeated per replica group. Each value of this pod label among the
    /// owner's pods (an LWS's `group-index`) is its own copy of the units, its parts suffixed `-<value>` and its
    /// members also matching the label; nothing ties the copies together. Per value found, not per `spec.replicas`,
    /// so a huge replica count costs nothing until its pods exist.
    pub replicated_by: Option<String>,
    /// Warnings, each naming the field or annotation.
    pub warnings: Vec<String>,
}

/// Why a rule cannot plan an owner; the message is the Warning event's note and names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KindError {
    /// A count is out of range or the product of counts overflows a minCount.
    #[error("{field} is {value}: want 0 to {max}", max = i32::MAX)]
    OutOfRange {
        /// The field path, e.g. `spec.replicatedJobs[1].replicas`.
        field: String,
        /// The value (or the product that overflowed).
        value: i128,
    },
    /// A required field is missing or not of its type.
    #[error("{field} is missing or not a {want}")]
    Missing {
        /// The field path.
        field: String,
        /// The JSON type wanted.
        want: &'static str,
    },
}

/// The object a kind's rule reads besides the owner: a TrainJob's plan comes from the JobSet it creates (same name,
/// same namespace). `(apiVersion, kind)` of that child, or `None`.
pub fn child_of(api_version: &str, kind: &str) -> Option<(&'static str, &'static str)> {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    (group == trainjob::GROUP && kind == "TrainJob").then_some(("jobset.x-k8s.io/v1alpha2", "JobSet"))
}

/// The rules Phalanx knows, by `(api group, kind)`; `None` for the default rule. `child` is the object
/// [`child_of`] names, read by the caller (`None` when it has none or it does not exist).
pub fn plan_for(
    api_version: &str,
    kind: &str,
    owner: &Value,
    child: Option<&Value>,
) -> Option<Result<Plan, KindError>> {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    match (group, kind) {
        (jobset::GROUP, "JobSet") => Some(jobset::plan(owner)),
        (lws::GROUP, "LeaderWorkerSet") => Some(lws::plan(owner)),
        (ray::GROUP, "RayCluster") => Some(ray::plan_cluster(owner)),
        (ray::GROUP, "RayJob") => Some(ray::plan_job(owner)),
        (mpi::GROUP, "MPIJob") => Some(mpi::plan(owner)),
        (trainjob::GROUP, "TrainJob") => Some(trainjob::plan(child)),
        _ => None,
    }
}

/// An integer field, absent = `default`; refused when negative or above `i32::MAX`.
fn count(v: &Value, pointer: &str, field: impl Fn() -> String, default: i64) -> Result<i64, KindError> {
    let Some(x) = v.pointer(pointer) else {
        return Ok(default);
    };
    let n = x.as_i64().ok_or_else(|| KindError::Missing {
        field: field(),
        want: "integer",
    })?;
    if !(0..=i64::from(i32::MAX)).contains(&n) {
        return Err(KindError::OutOfRange {
            field: field(),
            value: n.into(),
        });
    }
    Ok(n)
}

/// `a × b` as a minCount, refused (naming `field`) past `i32::MAX`.
fn product(a: i64, b: i64, field: impl Fn() -> String) -> Result<i64, KindError> {
    let p = i128::from(a) * i128::from(b);
    if p > i128::from(i32::MAX) {
        return Err(KindError::OutOfRange {
            field: field(),
            value: p,
        });
    }
    Ok(i64::try_from(p).unwrap_or(i64::MAX))
}

/// Per unit of a plan: whether it is a composite, and its groups' parts and minCounts (tests of the rules).
#[cfg(test)]
pub(crate) type Shape = Vec<(bool, Vec<(String, Option<i32>)>)>;

/// The [`Shape`] of `p`.
#[cfg(test)]
pub(crate) fn shape(p: &Plan) -> Shape {
    p.units
        .iter()
        .map(|u| {
            (
                u.composite,
                u.groups.iter().map(|g| (g.part.clone(), g.min_count)).collect(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_kinds_keep_the_default_rule() {
        assert!(plan_for("batch/v1", "Job", &serde_json::json!({}), None).is_none());
        assert!(plan_for("example.com/v1", "JobSet", &serde_json::json!({}), None).is_none());
        assert!(child_of("trainer.kubeflow.org/v1alpha1", "TrainJob").is_some());
        assert!(child_of("jobset.x-k8s.io/v1alpha2", "JobSet").is_none());
    }
}
