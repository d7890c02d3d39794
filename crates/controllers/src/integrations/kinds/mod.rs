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
pub mod plan;
pub mod ray;
pub mod trainjob;

pub use plan::{KindError, Plan, PlannedGroup, Unit};
use serde_json::Value;

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
