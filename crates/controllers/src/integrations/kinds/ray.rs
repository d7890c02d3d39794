//! RayCluster and RayJob (`ray.io/v1`, KubeRay v1.5.0): the head and one group per worker group, placed together.
//!
//! - **RayCluster**: the head group (1 pod, `ray.io/node-type: head`) and one PodGroup per worker group (pods
//!   `ray.io/node-type: worker` with `ray.io/group: <groupName>`) are the children of one CompositePodGroup, so the
//!   cluster starts with its minimum or not at all. A worker group's `minCount` is `minReplicas × numOfHosts` when
//!   `spec.enableInTreeAutoscaling` is true (the autoscaler may add replicas up to `maxReplicas`, and those join
//!   the same group one by one once its quorum runs), else `replicas × numOfHosts` (`apis/ray/v1/raycluster_types.go`;
//!   `replicas` and `minReplicas` default to 0, `numOfHosts` to 1). A worker group with a minimum of 0, or
//!   `suspend: true`, gets a group of independent pods (its pods, when the autoscaler adds some, never wait for a
//!   gang), outside the composite. `spec.suspend: true`: no pods, no groups.
//! - **RayJob**: the same rule over `spec.rayClusterSpec` (the RayCluster the RayJob creates, whose pods reach the
//!   RayJob through it), plus a group of independent pods for the submitter (a Job's pod, created once the cluster
//!   is ready, `rayjob_controller.go`): it must never be in the cluster's gang. A RayJob that runs on an existing
//!   cluster (`spec.clusterSelector`) has only its submitter.
//!
//! KAI's pod-grouper makes one PodGroup with subgroups (`plugins/ray/ray_grouper.go`), Kueue one PodSet per group
//! counted at `replicas`; KubeRay's own Workload plugin (kuberay PR #4962) gangs each worker group alone.

use std::collections::BTreeMap;

use phalanx_api::owners::{LabelMatch, MemberSelector};
use serde_json::Value;

use super::plan::{KindError, Plan, PlannedGroup, Unit, count, product};

/// The API group.
pub const GROUP: &str = "ray.io";
/// Pod label: `head` or `worker`.
pub const NODE_TYPE_LABEL: &str = "ray.io/node-type";
/// Pod label: the worker group's name.
pub const GROUP_LABEL: &str = "ray.io/group";

fn select(pairs: &[(&str, LabelMatch)]) -> MemberSelector {
    MemberSelector(
        pairs
            .iter()
            .map(|(k, m)| ((*k).to_owned(), m.clone()))
            .collect::<BTreeMap<_, _>>(),
    )
}

/// The plan for a RayCluster read as JSON. Errors name the field.
pub fn plan_cluster(rc: &Value) -> Result<Plan, KindError> {
    cluster_units(rc.get("spec").unwrap_or(&Value::Null), "spec").map(|units| Plan {
        units,
        ..Plan::default()
    })
}

/// The plan for a RayJob read as JSON: its cluster's units and the submitter's group. Errors name the field.
pub fn plan_job(rj: &Value) -> Result<Plan, KindError> {
    let mut units = match rj.pointer("/spec/rayClusterSpec") {
        Some(spec) => cluster_units(spec, "spec.rayClusterSpec")?,
        None => Vec::new(),
    };
    units.push(Unit {
        part: String::new(),
        composite: false,
        groups: vec![PlannedGroup {
            part: "submitter".into(),
            min_count: None,
            members: select(&[(NODE_TYPE_LABEL, LabelMatch::Absent)]),
        }],
    });
    Ok(Plan {
        units,
        ..Plan::default()
    })
}

/// The units of one RayCluster spec found at `at` (for field names).
fn cluster_units(spec: &Value, at: &str) -> Result<Vec<Unit>, KindError> {
    if spec.get("suspend").and_then(Value::as_bool) == Some(true) {
        return Ok(Vec::new());
    }
    let autoscaling = spec.get("enableInTreeAutoscaling").and_then(Value::as_bool) == Some(true);
    let mut gang = vec![PlannedGroup {
        part: "head".into(),
        min_count: Some(1),
        members: select(&[(NODE_TYPE_LABEL, LabelMatch::Equals("head".into()))]),
    }];
    let mut loose = Vec::new();
    let groups = spec
        .get("workerGroupSpecs")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, g) in groups.iter().enumerate() {
        let field = |f: &str| format!("{at}.workerGroupSpecs[{i}].{f}");
        let name = g
            .get("groupName")
            .and_then(Value::as_str)
            .ok_or_else(|| KindError::Missing {
                field: field("groupName"),
                want: "string",
            })?;
        let replicas = count(
            g,
            if autoscaling { "/minReplicas" } else { "/replicas" },
            || field(if autoscaling { "minReplicas" } else { "replicas" }),
            0,
        )?;
        let hosts = count(g, "/numOfHosts", || field("numOfHosts"), 1)?;
        let pods = product(replicas, hosts, || field("replicas × numOfHosts"))?;
        let suspended = g.get("suspend").and_then(Value::as_bool) == Some(true);
        let members = select(&[
            (NODE_TYPE_LABEL, LabelMatch::Equals("worker".into())),
            (GROUP_LABEL, LabelMatch::Equals(name.to_owned())),
        ]);
        match i32::try_from(pods).ok().filter(|n| *n > 0 && !suspended) {
            Some(n) => gang.push(PlannedGroup {
                part: name.to_owned(),
                min_count: Some(n),
                members,
            }),
            None => loose.push(PlannedGroup {
                part: name.to_owned(),
                min_count: None,
                members,
            }),
        }
    }
    let mut units = vec![Unit {
        part: String::new(),
        composite: gang.len() > 1,
        groups: gang,
    }];
    units.extend(loose.into_iter().map(|g| Unit {
        part: String::new(),
        composite: false,
        groups: vec![g],
    }));
    Ok(units)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::integrations::kinds::plan::shape;

    fn cluster(autoscaling: bool) -> Value {
        json!({ "spec": {
            "enableInTreeAutoscaling": autoscaling,
            "headGroupSpec": {},
            "workerGroupSpecs": [
                { "groupName": "gpu", "replicas": 3, "minReplicas": 2, "maxReplicas": 5 },
                { "groupName": "cpu", "replicas": 1, "minReplicas": 1, "numOfHosts": 2 },
                { "groupName": "spare", "replicas": 0, "minReplicas": 0 },
            ],
        } })
    }

    #[test]
    fn head_and_worker_groups_start_together_at_their_minimum() {
        let p = plan_cluster(&cluster(true)).unwrap();
        assert_eq!(
            shape(&p),
            vec![
                (
                    true,
                    vec![
                        ("head".into(), Some(1)),
                        ("gpu".into(), Some(2)),
                        ("cpu".into(), Some(2))
                    ]
                ),
                (false, vec![("spare".into(), None)]),
            ]
        );
        let without = plan_cluster(&cluster(false)).unwrap();
        assert_eq!(
            without.units[0].groups[1].min_count,
            Some(3),
            "replicas without the autoscaler"
        );
        let worker = |g: &str| {
            BTreeMap::from([
                (NODE_TYPE_LABEL.to_owned(), "worker".to_owned()),
                (GROUP_LABEL.to_owned(), g.to_owned()),
            ])
        };
        assert!(p.units[0].groups[1].members.matches(&worker("gpu")));
        assert!(!p.units[0].groups[1].members.matches(&worker("cpu")));
        assert!(!p.units[0].groups[0].members.matches(&worker("gpu")));
    }

    #[test]
    fn a_suspended_cluster_has_no_groups_and_bad_counts_name_the_field() {
        assert!(
            plan_cluster(&json!({ "spec": { "suspend": true } }))
                .unwrap()
                .units
                .is_empty()
        );
        let e = plan_cluster(&json!({ "spec": { "workerGroupSpecs": [
            { "groupName": "g", "replicas": 70000, "numOfHosts": 70000 } ] } }))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("spec.workerGroupSpecs[0].replicas × numOfHosts"),
            "{e}"
        );
        let e = plan_cluster(&json!({ "spec": { "workerGroupSpecs": [{ "replicas": 1 }] } })).unwrap_err();
        assert!(
            e.to_string().contains("spec.workerGroupSpecs[0].groupName"),
            "{e}"
        );
    }

    #[test]
    fn a_rayjob_gangs_its_cluster_and_never_its_submitter() {
        let p = plan_job(&json!({ "spec": { "rayClusterSpec": cluster(false)["spec"].clone() } })).unwrap();
        let last = p.units.last().unwrap();
        assert_eq!(last.groups[0].part, "submitter");
        assert_eq!(last.groups[0].min_count, None);
        let submitter = BTreeMap::from([("batch.kubernetes.io/job-name".to_owned(), "j".to_owned())]);
        assert!(last.groups[0].members.matches(&submitter));
        assert!(!p.units[0].groups.iter().any(|g| g.members.matches(&submitter)));
        let head = BTreeMap::from([(NODE_TYPE_LABEL.to_owned(), "head".to_owned())]);
        assert!(!last.groups[0].members.matches(&head));
        assert_eq!(
            plan_job(&json!({ "spec": { "clusterSelector": {} } }))
                .unwrap()
                .units
                .len(),
            1
        );
    }
}
