//! JobSet (`jobset.x-k8s.io/v1alpha2`, controller v0.10.1): one PodGroup per replicated job.
//!
//! - `startupPolicy.startupPolicyOrder: AnyOrder` (the default its webhook sets) and no `dependsOn`: the groups are
//!   the children of one CompositePodGroup, so the driver and the workers start together or not at all.
//! - `InOrder`, or any `dependsOn`: each replicated job is its own gang and nothing ties them. The JobSet controller
//!   creates job *n+1* only once job *n* is Ready (or Complete): one gang across them would wait for pods that are
//!   never created (`pkg/controllers/startup_policy.go`, `jobset_types.go` `DependsOn`).
//! - `minCount` of a replicated job = `replicas × min(parallelism, completions)` (parallelism defaults to 1; no
//!   completions = parallelism), the pods its Jobs run at once, as Kueue's PodSets count them
//!   (`pkg/controller/jobs/jobset`). A replicated job with 0 replicas or parallelism runs no pods and gets no group.
//! - Members: the pods labelled `jobset.sigs.k8s.io/replicatedjob-name` with the job's name and
//!   `jobset.sigs.k8s.io/restart-attempt` with `status.restarts`: a restart recreates the Jobs under the same names,
//!   and the pods of an earlier attempt must not count (`jobset_controller.go`, `labelAndAnnotateObject`).
//! - `alpha.jobset.sigs.k8s.io/exclusive-topology` (on the JobSet or a job template) cannot work with a gang: the
//!   JobSet pod webhook refuses a follower pod until its leader has a node (`pod_admission_webhook.go`), so the
//!   members never all exist. It is reported as a warning naming Phalanx's own topology annotation, unless
//!   `alpha.jobset.sigs.k8s.io/node-selector` (which skips those webhooks) is set too.

use std::collections::BTreeMap;

use serde_json::Value;

use phalanx_api::owners::{LabelMatch, MemberSelector};

use super::plan::{KindError, Plan, PlannedGroup, Unit, count, product};

/// The API group.
pub const GROUP: &str = "jobset.x-k8s.io";
/// Pod label: the replicated job's name.
pub const REPLICATED_JOB_LABEL: &str = "jobset.sigs.k8s.io/replicatedjob-name";
/// Pod label: the JobSet's restart count when the pod's Job was created.
pub const RESTART_ATTEMPT_LABEL: &str = "jobset.sigs.k8s.io/restart-attempt";
/// Annotation (JobSet or job template): one Job per topology domain, placed leader first.
pub const EXCLUSIVE_TOPOLOGY: &str = "alpha.jobset.sigs.k8s.io/exclusive-topology";
/// Annotation: exclusive placement by pre-labelled nodes; the pod webhooks skip such JobSets.
pub const NODE_SELECTOR_STRATEGY: &str = "alpha.jobset.sigs.k8s.io/node-selector";

/// A JobSet's `spec.replicatedJobs`; an error naming the field when it is missing or not a list.
pub fn replicated_jobs(js: &Value) -> Result<&Vec<Value>, KindError> {
    js.pointer("/spec/replicatedJobs")
        .and_then(Value::as_array)
        .ok_or_else(|| KindError::Missing {
            field: "spec.replicatedJobs".into(),
            want: "list",
        })
}

/// The plan for a JobSet read as JSON. Errors name the field (`spec.replicatedJobs[i].replicas`, ...).
pub fn plan(js: &Value) -> Result<Plan, KindError> {
    let jobs = replicated_jobs(js)?;
    let in_order = js
        .pointer("/spec/startupPolicy/startupPolicyOrder")
        .and_then(Value::as_str)
        == Some("InOrder");
    let depends = jobs.iter().any(|j| {
        j.get("dependsOn")
            .and_then(Value::as_array)
            .is_some_and(|d| !d.is_empty())
    });
    let restarts = count(js, "/status/restarts", || "status.restarts".into(), 0)?;
    let mut groups = Vec::with_capacity(jobs.len());
    let mut warnings = Vec::new();
    let annotated = |v: &Value, key: &str| {
        v.pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .is_some()
    };
    let node_selector = annotated(js, NODE_SELECTOR_STRATEGY);
    if annotated(js, EXCLUSIVE_TOPOLOGY) && !node_selector {
        warnings.push(exclusive_warning("metadata.annotations"));
    }
    for (i, j) in jobs.iter().enumerate() {
        let field = |f: &str| format!("spec.replicatedJobs[{i}].{f}");
        let name = j
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| KindError::Missing {
                field: field("name"),
                want: "string",
            })?;
        if annotated(j.get("template").unwrap_or(&Value::Null), EXCLUSIVE_TOPOLOGY) && !node_selector {
            warnings.push(exclusive_warning(&field("template.metadata.annotations")));
        }
        let replicas = count(j, "/replicas", || field("replicas"), 1)?;
        let parallelism = count(
            j,
            "/template/spec/parallelism",
            || field("template.spec.parallelism"),
            1,
        )?;
        let completions = count(
            j,
            "/template/spec/completions",
            || field("template.spec.completions"),
            parallelism,
        )?;
        let pods = product(replicas, parallelism.min(completions), || {
            format!("{} × min(parallelism, completions)", field("replicas"))
        })?;
        let Some(min) = i32::try_from(pods).ok().filter(|n| *n > 0) else {
            continue;
        };
        groups.push(PlannedGroup {
            part: name.to_owned(),
            min_count: Some(min),
            members: MemberSelector(BTreeMap::from([
                (
                    REPLICATED_JOB_LABEL.to_owned(),
                    LabelMatch::Equals(name.to_owned()),
                ),
                (
                    RESTART_ATTEMPT_LABEL.to_owned(),
                    LabelMatch::Equals(restarts.to_string()),
                ),
            ])),
        });
    }
    let units = if groups.is_empty() {
        Vec::new()
    } else if in_order || depends {
        // One unit per stage: each gang is placed when its pods exist, never waiting for a later stage.
        groups
            .into_iter()
            .map(|g| Unit {
                part: String::new(),
                composite: false,
                groups: vec![g],
            })
            .collect()
    } else {
        vec![Unit {
            part: String::new(),
            composite: groups.len() > 1,
            groups,
        }]
    };
    Ok(Plan {
        units,
        warnings,
        replicated_by: None,
    })
}

fn exclusive_warning(at: &str) -> String {
    format!(
        "{at}: {EXCLUSIVE_TOPOLOGY} cannot work with a gang (JobSet's pod webhook refuses a follower pod until its \
         leader has a node, so the gang never gathers): annotate the JobSet with {} (the node label key) \
         instead",
        phalanx_api::owner_policy::TOPOLOGY_REQUIRED
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn js(order: Option<&str>, jobs: Value) -> Value {
        let mut v = json!({ "metadata": { "name": "train" }, "spec": { "replicatedJobs": jobs } });
        if let Some(o) = order {
            v["spec"]["startupPolicy"] = json!({ "startupPolicyOrder": o });
        }
        v
    }

    fn rj(name: &str, replicas: i64, parallelism: i64) -> Value {
        json!({ "name": name, "replicas": replicas,
                "template": { "spec": { "parallelism": parallelism, "completions": parallelism } } })
    }

    #[test]
    fn any_order_is_one_composite_of_one_group_per_replicated_job() {
        let p = plan(&js(None, json!([rj("driver", 1, 1), rj("workers", 2, 4)]))).unwrap();
        assert_eq!(
            super::super::plan::shape(&p),
            vec![(
                true,
                vec![("driver".into(), Some(1)), ("workers".into(), Some(8))]
            )]
        );
        assert!(p.warnings.is_empty());
    }

    #[test]
    fn in_order_or_depends_on_makes_independent_gangs() {
        let p = plan(&js(
            Some("InOrder"),
            json!([rj("driver", 1, 1), rj("workers", 2, 4)]),
        ))
        .unwrap();
        assert_eq!(
            super::super::plan::shape(&p),
            vec![
                (false, vec![("driver".into(), Some(1))]),
                (false, vec![("workers".into(), Some(8))])
            ]
        );
        let mut jobs = json!([rj("init", 1, 1), rj("node", 1, 4)]);
        jobs[1]["dependsOn"] = json!([{ "name": "init", "status": "Complete" }]);
        let p = plan(&js(None, jobs)).unwrap();
        assert!(p.units.iter().all(|u| !u.composite && u.groups.len() == 1));
    }

    #[test]
    fn min_count_is_replicas_times_the_pods_each_job_runs_at_once() {
        let mut j = rj("w", 3, 4);
        j["template"]["spec"]["completions"] = json!(2);
        let p = plan(&js(None, json!([j]))).unwrap();
        assert_eq!(
            super::super::plan::shape(&p),
            vec![(false, vec![("w".into(), Some(6))])],
            "min(4, 2) × 3"
        );
        let bare = json!({ "name": "w", "template": { "spec": {} } });
        assert_eq!(
            plan(&js(None, json!([bare]))).unwrap().units[0].groups[0].min_count,
            Some(1)
        );
        let p = plan(&js(None, json!([rj("idle", 0, 4)]))).unwrap();
        assert!(p.units.is_empty(), "no pods, no group");
    }

    #[test]
    fn huge_or_bad_counts_are_refused_naming_the_field() {
        let e = plan(&js(None, json!([rj("w", 2_147_483_647, 2)]))).unwrap_err();
        assert!(e.to_string().contains("spec.replicatedJobs[0].replicas"), "{e}");
        let e = plan(&js(None, json!([rj("w", -1, 2)]))).unwrap_err();
        assert!(
            e.to_string().contains("spec.replicatedJobs[0].replicas is -1"),
            "{e}"
        );
        let e = plan(&json!({ "spec": {} })).unwrap_err();
        assert!(e.to_string().contains("spec.replicatedJobs"), "{e}");
    }

    #[test]
    fn members_are_the_replicated_jobs_pods_of_the_current_attempt() {
        let mut v = js(None, json!([rj("workers", 1, 2)]));
        v["status"] = json!({ "restarts": 2 });
        let g = plan(&v).unwrap().units[0].groups[0].clone();
        let pod = |rjob: &str, attempt: &str| {
            BTreeMap::from([
                (REPLICATED_JOB_LABEL.to_owned(), rjob.to_owned()),
                (RESTART_ATTEMPT_LABEL.to_owned(), attempt.to_owned()),
            ])
        };
        assert!(g.members.matches(&pod("workers", "2")));
        assert!(
            !g.members.matches(&pod("workers", "1")),
            "an earlier attempt's pod"
        );
        assert!(!g.members.matches(&pod("driver", "2")));
    }

    #[test]
    fn exclusive_topology_is_reported_unless_node_selector_strategy() {
        let mut v = js(None, json!([rj("w", 1, 2)]));
        v["metadata"]["annotations"] = json!({ EXCLUSIVE_TOPOLOGY: "rack" });
        let p = plan(&v).unwrap();
        assert_eq!(p.warnings.len(), 1);
        assert!(p.warnings[0].contains(EXCLUSIVE_TOPOLOGY), "{}", p.warnings[0]);
        v["metadata"]["annotations"][NODE_SELECTOR_STRATEGY] = json!("true");
        assert!(plan(&v).unwrap().warnings.is_empty());
    }
}
