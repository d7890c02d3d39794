//! MPIJob (`kubeflow.org/v2beta1`, MPI Operator v0.6.0): the launcher and the workers.
//!
//! - `launcherCreationPolicy: AtStartup` (the default): the launcher group (1 pod, `training.kubeflow.org/job-role:
//!   launcher`, a Job's pod) and the workers group (`spec.mpiReplicaSpecs.Worker.replicas` pods, `job-role:
//!   worker`, owned by the MPIJob directly) are the children of one CompositePodGroup: `workers + 1` together, as
//!   the operator's own PodGroup counts them (`pkg/controller/podgroup.go`).
//! - `WaitForWorkersReady`: the operator creates the launcher only once every worker is Ready
//!   (`mpi_job_controller.go`), so the workers alone form the gang and the launcher is a pod of its own.
//! - No workers (`Worker.replicas: 0` or absent): the launcher alone.
//!
//! KAI's pod-grouper leaves the launcher out the same way under `WaitForWorkersReady`
//! (`plugins/kubeflow/mpi/mpi-grouper.go`).

use phalanx_api::owners::{LabelMatch, MemberSelector};
use serde_json::Value;

use super::plan::{KindError, Plan, PlannedGroup, Unit, count};

/// The API group.
pub const GROUP: &str = "kubeflow.org";
/// Pod label: `launcher` or `worker`.
pub const ROLE_LABEL: &str = "training.kubeflow.org/job-role";

fn role(r: &str) -> MemberSelector {
    MemberSelector([(ROLE_LABEL.to_owned(), LabelMatch::Equals(r.to_owned()))].into())
}

/// The plan for an MPIJob read as JSON. Errors name the field.
pub fn plan(job: &Value) -> Result<Plan, KindError> {
    let workers = count(
        job,
        "/spec/mpiReplicaSpecs/Worker/replicas",
        || "spec.mpiReplicaSpecs.Worker.replicas".into(),
        0,
    )?;
    let wait = job
        .pointer("/spec/launcherCreationPolicy")
        .and_then(Value::as_str)
        == Some("WaitForWorkersReady");
    let launcher = PlannedGroup {
        part: "launcher".into(),
        min_count: Some(1),
        members: role("launcher"),
    };
    let unit = |composite, groups| Unit {
        part: String::new(),
        composite,
        groups,
    };
    let units = match i32::try_from(workers).ok().filter(|n| *n > 0) {
        None => vec![unit(false, vec![launcher])],
        Some(n) => {
            let w = PlannedGroup {
                part: "workers".into(),
                min_count: Some(n),
                members: role("worker"),
            };
            if wait {
                vec![
                    unit(false, vec![w]),
                    unit(
                        false,
                        vec![PlannedGroup {
                            min_count: None,
                            ..launcher
                        }],
                    ),
                ]
            } else {
                vec![unit(true, vec![launcher, w])]
            }
        }
    };
    Ok(Plan {
        units,
        ..Plan::default()
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::integrations::kinds::plan::shape;

    fn job(workers: i64, policy: Option<&str>) -> Value {
        let mut v = json!({ "spec": { "mpiReplicaSpecs": { "Launcher": { "replicas": 1 }, "Worker": { "replicas": workers } } } });
        if let Some(p) = policy {
            v["spec"]["launcherCreationPolicy"] = json!(p);
        }
        v
    }

    #[test]
    fn launcher_and_workers_together_unless_the_launcher_waits_for_them() {
        assert_eq!(
            shape(&plan(&job(4, None)).unwrap()),
            vec![(
                true,
                vec![("launcher".into(), Some(1)), ("workers".into(), Some(4))]
            )]
        );
        assert_eq!(
            shape(&plan(&job(4, Some("WaitForWorkersReady"))).unwrap()),
            vec![
                (false, vec![("workers".into(), Some(4))]),
                (false, vec![("launcher".into(), None)])
            ]
        );
        assert_eq!(
            shape(&plan(&job(0, None)).unwrap()),
            vec![(false, vec![("launcher".into(), Some(1))])]
        );
        let e = plan(&job(-1, None)).unwrap_err();
        assert!(
            e.to_string().contains("spec.mpiReplicaSpecs.Worker.replicas"),
            "{e}"
        );
    }
}
