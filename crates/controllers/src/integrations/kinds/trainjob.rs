//! TrainJob (`trainer.kubeflow.org/v1alpha1`, Kubeflow Trainer v2.0.0): the JobSet rule over the JobSet the TrainJob
//! creates (same name, controlled by the TrainJob, `pkg/runtime/framework/plugins/jobset`), for the trainer step
//! only.
//!
//! A training runtime's replicated jobs are steps, each labelled `trainer.kubeflow.org/trainjob-ancestor-step` in
//! its template: `dataset-initializer` and `model-initializer` run first and the trainer step (`node`, and the
//! `launcher` of an MPI runtime) waits for them through `dependsOn`. A gang across all of them would wait for trainer
//! pods that are created only after the initializers complete, so the initializers are scheduled as independent
//! pods (a group of their own each, without a gang) and the trainer step's replicated jobs are planned by the JobSet
//! rule ([`super::jobset`]) as if the initializers were not there (their `dependsOn` on an initializer dropped): one
//! composite when they start together. Trainer v2.0.0's own coscheduling plugin sums every step into one gang;
//! KEP-3015 (kubeflow/trainer#3015) gangs `numNodes` only, as here.

use serde_json::Value;

use super::jobset;
use super::plan::{KindError, Plan, Unit};

/// The API group.
pub const GROUP: &str = "trainer.kubeflow.org";
/// Replicated-job template label naming the step.
pub const STEP_LABEL: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
/// The steps that run before the trainer.
pub const INITIALIZER_STEPS: [&str; 2] = ["dataset-initializer", "model-initializer"];

fn is_initializer(rj: &Value) -> bool {
    let step = rj
        .pointer("/template/metadata/labels")
        .and_then(|l| l.get(STEP_LABEL))
        .and_then(Value::as_str)
        .or_else(|| rj.get("name").and_then(Value::as_str));
    step.is_some_and(|s| INITIALIZER_STEPS.contains(&s))
}

/// The plan for a TrainJob from the JobSet it created (`None`: not created yet, no pods, no groups). Errors name
/// the JobSet's field.
pub fn plan(jobset: Option<&Value>) -> Result<Plan, KindError> {
    let Some(js) = jobset else {
        return Ok(Plan::default());
    };
    let jobs = jobset::replicated_jobs(js)?;
    let (init, trainer): (Vec<&Value>, Vec<&Value>) = jobs.iter().partition(|j| is_initializer(j));
    let init_names: Vec<&str> = init
        .iter()
        .filter_map(|j| j.get("name").and_then(Value::as_str))
        .collect();
    let only = |jobs: Vec<Value>| {
        let mut v = js.clone();
        v["spec"]["replicatedJobs"] = Value::Array(jobs);
        v
    };
    let trainer_jobs: Vec<Value> = trainer
        .into_iter()
        .map(|j| {
            let mut j = j.clone();
            if let Some(d) = j.get_mut("dependsOn").and_then(Value::as_array_mut) {
                d.retain(|dep| {
                    !dep.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| init_names.contains(&n))
                });
            }
            j
        })
        .collect();
    let mut p = jobset::plan(&only(trainer_jobs))?;
    // Each initializer alone, its pods one by one.
    let before = jobset::plan(&only(init.into_iter().cloned().collect()))?;
    for mut g in before.units.into_iter().flat_map(|u| u.groups) {
        g.min_count = None;
        p.units.push(Unit {
            part: String::new(),
            composite: false,
            groups: vec![g],
        });
    }
    p.warnings.extend(before.warnings);
    Ok(p)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rj(name: &str, step: &str, parallelism: i64, depends: &[&str]) -> Value {
        json!({ "name": name, "replicas": 1,
                "dependsOn": depends.iter().map(|d| json!({ "name": d, "status": "Complete" })).collect::<Vec<_>>(),
                "template": { "metadata": { "labels": { STEP_LABEL: step } },
                              "spec": { "parallelism": parallelism, "completions": parallelism } } })
    }

    #[test]
    fn initializers_run_alone_and_the_trainer_step_is_the_gang() {
        let js = json!({ "spec": { "replicatedJobs": [
            rj("dataset-initializer", "dataset-initializer", 1, &[]),
            rj("model-initializer", "model-initializer", 1, &["dataset-initializer"]),
            rj("node", "trainer", 4, &["model-initializer"]),
        ] } });
        let p = plan(Some(&js)).unwrap();
        let shape = crate::integrations::kinds::plan::shape(&p);
        assert_eq!(
            shape,
            vec![
                (false, vec![("node".into(), Some(4))]),
                (false, vec![("dataset-initializer".into(), None)]),
                (false, vec![("model-initializer".into(), None)]),
            ]
        );
        assert!(plan(None).unwrap().units.is_empty());
    }

    #[test]
    fn an_mpi_runtimes_launcher_and_nodes_start_together() {
        let js = json!({ "spec": { "replicatedJobs": [
            rj("launcher", "trainer", 1, &[]),
            rj("node", "trainer", 2, &[]),
        ] } });
        let p = plan(Some(&js)).unwrap();
        assert_eq!(p.units.len(), 1);
        assert!(p.units[0].composite);
    }
}
