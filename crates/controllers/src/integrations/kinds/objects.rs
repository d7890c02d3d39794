//! The objects a [`Plan`] asks for (issue 38), built as server-side apply bodies: one Workload per owner with a
//! template per planned group (and one per composite unit), a CompositePodGroup per composite unit, and a PodGroup
//! per planned group, each labelled with the owner's uid and, for a PodGroup, the pod labels that select its
//! members ([`phalanx_api::owners::MEMBERS`]), which is how the store links the owner's pods to it.
//!
//! Names ([`phalanx_api::owners::unit_group_name`]): `<owner>-<kind>` for the Workload and a JobSet's composite,
//! `<owner>-<kind>-<group>` for a JobSet's replicated job, `<owner>-<kind>-<index>` and
//! `<owner>-<kind>-<index>-<role>` for an LWS replica group. Pure: no client.

use std::collections::BTreeSet;

use phalanx_api::owner_policy::OwnerPolicy;
use phalanx_api::owners::{self, LabelMatch, MemberSelector, unit_group_name};
use serde_json::{Value, json};

use super::plan::{Plan, PlannedGroup, Unit};
use crate::integrations::build::OwnerFacts;

/// What to apply for one owner.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Desired {
    /// The Workload (named after the owner).
    pub workload: Value,
    /// CompositePodGroups `(name, body)`, parents before children.
    pub composites: Vec<(String, Value)>,
    /// PodGroups `(name, body)`.
    pub groups: Vec<(String, Value)>,
    /// One line per unit for events and explain, e.g. `train-jobset: driver 1 + workers 8, all or nothing`.
    pub summary: Vec<String>,
}

/// `schedulingConstraints` and `disruptionMode` from the owner's policy, merged into `spec` (of a template or an
/// object): the unit's composite takes them when there is one, else each of its groups.
fn constrain(spec: &mut Value, policy: &OwnerPolicy) {
    let mut c = serde_json::Map::new();
    if let Some(k) = &policy.required {
        c.insert("topology".into(), json!([{ "key": k }]));
    }
    if !policy.preferred.is_empty() {
        let levels: Vec<Value> = policy.preferred.iter().map(|k| json!({ "key": k })).collect();
        c.insert("preferredTopology".into(), Value::Array(levels));
    }
    if !c.is_empty() {
        spec["schedulingConstraints"] = Value::Object(c);
    }
    if let Some(all) = policy.disrupt_all {
        spec["disruptionMode"] = if all {
            json!({ "all": {} })
        } else {
            json!({ "single": {} })
        };
    }
}

/// The owner's recovery policy on a gang group (a group of independent pods has no quorum to fall below).
fn recover(spec: &mut Value, g: &PlannedGroup, policy: &OwnerPolicy) {
    if let (Some(r), Some(_)) = (&policy.recovery, g.min_count) {
        spec["recoveryPolicy"] = serde_json::to_value(r).unwrap_or_default();
    }
}

/// The template name of composite unit `k` of a plan.
fn unit_template(k: usize) -> String {
    format!("unit-{k}")
}

/// The policy of a planned group: a gang of `min_count`, or basic (independent pods).
fn group_policy(g: &PlannedGroup) -> Value {
    match g.min_count {
        Some(n) => json!({ "gang": { "minCount": n } }),
        None => json!({ "basic": {} }),
    }
}

fn owner_reference(f: &OwnerFacts) -> Value {
    json!({ "apiVersion": f.api_version, "kind": f.kind, "name": f.name, "uid": f.uid, "controller": true })
}

fn api_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The copies of the plan's units: once, or per value of [`Plan::replicated_by`] among `pod_labels` (the labels of
/// the owner's live pods), each copy's parts prefixed by the value and its members also matching it. Values are
/// ordered numerically when they are numbers.
pub fn instances(
    plan: &Plan,
    pod_labels: &[&std::collections::BTreeMap<String, String>],
) -> Vec<(Option<String>, usize, Unit)> {
    let Some(label) = &plan.replicated_by else {
        return plan
            .units
            .iter()
            .cloned()
            .enumerate()
            .map(|(k, u)| (None, k, u))
            .collect();
    };
    let mut values: Vec<String> = pod_labels
        .iter()
        .filter_map(|l| l.get(label).cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    values.sort_by_key(|v| (v.parse::<u64>().unwrap_or(u64::MAX), v.clone()));
    let mut out = Vec::new();
    for v in values {
        for (k, u) in plan.units.iter().enumerate() {
            let mut u = u.clone();
            for g in &mut u.groups {
                g.members.0.insert(label.clone(), LabelMatch::Equals(v.clone()));
            }
            out.push((Some(v.clone()), k, u));
        }
    }
    out
}

/// Builds the objects for `plan` over the owner `f` whose live pods carry `pod_labels`, with the owner's `policy`.
pub fn desired(
    f: &OwnerFacts,
    plan: &Plan,
    policy: &OwnerPolicy,
    pod_labels: &[&std::collections::BTreeMap<String, String>],
) -> Desired {
    let base = owners::owner_group_name(&f.kind, &f.name);
    let meta = |name: &str| {
        let mut m = json!({
            "name": name,
            "namespace": f.namespace,
            "labels": { owners::OWNER_UID_LABEL: f.uid },
            "ownerReferences": [owner_reference(f)],
        });
        if let Some(g) = f.generation {
            m["annotations"] = json!({ owners::OWNER_GENERATION: g.to_string() });
        }
        m
    };
    // Templates: one per planned group (parts are unique within a plan), under their unit's when it is composite.
    let mut top_groups = Vec::new();
    let mut composite_templates = Vec::new();
    for (k, u) in plan.units.iter().enumerate() {
        let templates: Vec<Value> = u
            .groups
            .iter()
            .map(|g| {
                let mut t = json!({ "name": g.part, "schedulingPolicy": group_policy(g) });
                recover(&mut t, g, policy);
                if !u.composite {
                    constrain(&mut t, policy);
                }
                t
            })
            .collect();
        if u.composite {
            let mut t = json!({
                "name": unit_template(k),
                "schedulingPolicy": { "gang": { "minGroupCount": u.groups.len() } },
                "podGroupTemplates": templates,
            });
            constrain(&mut t, policy);
            composite_templates.push(t);
        } else {
            top_groups.extend(templates);
        }
    }
    let mut spec = json!({
        "controllerRef": { "apiGroup": api_group(&f.api_version), "kind": f.kind, "name": f.name },
    });
    if !top_groups.is_empty() {
        spec["podGroupTemplates"] = Value::Array(top_groups);
    }
    if !composite_templates.is_empty() {
        spec["compositePodGroupTemplates"] = Value::Array(composite_templates);
    }
    let mut out = Desired {
        workload: json!({
            "apiVersion": format!("{}/v1beta1", phalanx_api::GROUP),
            "kind": "Workload",
            "metadata": meta(&base),
            "spec": spec,
        }),
        ..Desired::default()
    };
    for (value, k, u) in instances(plan, pod_labels) {
        let prefix: Vec<&str> = value
            .iter()
            .map(String::as_str)
            .chain([u.part.as_str()])
            .collect();
        let parent = u.composite.then(|| unit_group_name(&f.kind, &f.name, &prefix));
        if let Some(p) = &parent {
            let mut spec = json!({
                "workloadRef": { "workloadName": base, "templateName": unit_template(k) },
                "schedulingPolicy": { "gang": { "minGroupCount": u.groups.len() } },
            });
            constrain(&mut spec, policy);
            out.composites.push((
                p.clone(),
                json!({
                    "apiVersion": format!("{}/v1alpha3", phalanx_api::GROUP),
                    "kind": "CompositePodGroup",
                    "metadata": meta(p),
                    "spec": spec,
                }),
            ));
        }
        let mut parts = Vec::new();
        for g in &u.groups {
            let mut names = prefix.clone();
            names.push(&g.part);
            let name = unit_group_name(&f.kind, &f.name, &names);
            let mut m = meta(&name);
            m["annotations"][owners::MEMBERS] = json!(g.members.to_string());
            let mut spec = json!({
                "workloadRef": { "workloadName": base, "templateName": g.part },
                "schedulingPolicy": group_policy(g),
            });
            recover(&mut spec, g, policy);
            match &parent {
                Some(p) => spec["parentCompositePodGroupName"] = json!(p),
                None => constrain(&mut spec, policy),
            }
            out.groups.push((
                name.clone(),
                json!({
                    "apiVersion": format!("{}/v1beta1", phalanx_api::GROUP),
                    "kind": "PodGroup",
                    "metadata": m,
                    "spec": spec,
                }),
            ));
            parts.push(match g.min_count {
                Some(n) => format!("{name} (gang of {n})"),
                None => format!("{name} (pods one by one)"),
            });
        }
        out.summary.push(match &parent {
            Some(p) => format!("{p}: {}, all or nothing", parts.join(" + ")),
            None => parts.join("; "),
        });
    }
    out
}

/// The selector of a group in `d` (for tests and explain).
pub fn members_of(d: &Desired, name: &str) -> Option<MemberSelector> {
    let (_, body) = d.groups.iter().find(|(n, _)| n == name)?;
    MemberSelector::parse(
        body.pointer("/metadata/annotations")?
            .get(owners::MEMBERS)?
            .as_str()?,
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::integrations::kinds::{jobset, lws};

    fn desired_default(f: &OwnerFacts, plan: &Plan, labels: &[&BTreeMap<String, String>]) -> Desired {
        desired(f, plan, &OwnerPolicy::default(), labels)
    }

    #[test]
    fn the_owners_topology_goes_on_the_composite_of_a_replica_group_else_on_each_group() {
        let v = json!({ "metadata": { "name": "infer" },
                        "spec": { "replicas": 1, "leaderWorkerTemplate": { "size": 4 } } });
        let labels = [BTreeMap::from([(
            lws::GROUP_INDEX_LABEL.to_string(),
            "0".to_string(),
        )])];
        let policy = OwnerPolicy {
            required: Some("example.com/rack".into()),
            preferred: vec!["example.com/block".into()],
            disrupt_all: Some(true),
            recovery: Some(phalanx_api::v1beta1::RecoveryPolicy {
                action: Some(phalanx_api::v1beta1::RecoveryAction::RestartGroup),
                ..Default::default()
            }),
        };
        let f = facts("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "infer");
        let d = desired(&f, &lws::plan(&v).unwrap(), &policy, &[&labels[0]]);
        let cpg = &d.composites[0].1["spec"];
        assert_eq!(
            cpg["schedulingConstraints"]["topology"],
            json!([{ "key": "example.com/rack" }])
        );
        assert_eq!(
            cpg["schedulingConstraints"]["preferredTopology"],
            json!([{ "key": "example.com/block" }])
        );
        assert_eq!(cpg["disruptionMode"], json!({ "all": {} }));
        assert!(
            d.groups
                .iter()
                .all(|(_, g)| g["spec"].get("schedulingConstraints").is_none())
        );
        assert!(
            d.groups
                .iter()
                .all(|(_, g)| g["spec"]["recoveryPolicy"]["action"] == "RestartGroup"),
            "recovery is per gang group"
        );
        assert_eq!(
            d.workload["spec"]["compositePodGroupTemplates"][0]["schedulingConstraints"]["topology"][0]["key"],
            "example.com/rack"
        );
        let js = json!({ "spec": { "startupPolicy": { "startupPolicyOrder": "InOrder" }, "replicatedJobs": [
            { "name": "a", "replicas": 1, "template": { "spec": { "parallelism": 2 } } } ] } });
        let d = desired(
            &facts("JobSet", "jobset.x-k8s.io/v1alpha2", "t"),
            &jobset::plan(&js).unwrap(),
            &policy,
            &[],
        );
        assert!(d.composites.is_empty());
        assert_eq!(
            d.groups[0].1["spec"]["schedulingConstraints"]["topology"][0]["key"],
            "example.com/rack"
        );
    }

    fn facts(kind: &str, api_version: &str, name: &str) -> OwnerFacts {
        OwnerFacts::from_json(&json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": { "name": name, "namespace": "ns", "uid": "u1", "generation": 3 },
        }))
    }

    #[test]
    fn a_jobset_any_order_is_one_composite_of_its_replicated_jobs() {
        let js = json!({ "metadata": { "name": "train" }, "spec": { "replicatedJobs": [
            { "name": "driver", "replicas": 1, "template": { "spec": { "parallelism": 1 } } },
            { "name": "workers", "replicas": 2, "template": { "spec": { "parallelism": 4, "completions": 4 } } },
        ] } });
        let plan = jobset::plan(&js).unwrap();
        let d = desired_default(&facts("JobSet", "jobset.x-k8s.io/v1alpha2", "train"), &plan, &[]);
        let names: Vec<&str> = d.groups.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["train-jobset-driver", "train-jobset-workers"]);
        assert_eq!(d.composites.len(), 1);
        assert_eq!(d.composites[0].0, "train-jobset");
        let workers = &d.groups[1].1;
        assert_eq!(workers["spec"]["parentCompositePodGroupName"], "train-jobset");
        assert_eq!(workers["spec"]["schedulingPolicy"]["gang"]["minCount"], 8);
        assert_eq!(workers["spec"]["workloadRef"]["templateName"], "workers");
        assert_eq!(workers["metadata"]["labels"][owners::OWNER_UID_LABEL], "u1");
        assert_eq!(workers["metadata"]["annotations"][owners::OWNER_GENERATION], "3");
        let pod = BTreeMap::from([
            (jobset::REPLICATED_JOB_LABEL.to_string(), "workers".to_string()),
            (jobset::RESTART_ATTEMPT_LABEL.to_string(), "0".to_string()),
        ]);
        assert!(members_of(&d, "train-jobset-workers").unwrap().matches(&pod));
        assert!(!members_of(&d, "train-jobset-driver").unwrap().matches(&pod));
        let w = &d.workload["spec"];
        assert_eq!(
            w["compositePodGroupTemplates"][0]["podGroupTemplates"][1]["name"],
            "workers"
        );
        assert!(w.get("podGroupTemplates").is_none());
        assert_eq!(
            d.summary,
            [
                "train-jobset: train-jobset-driver (gang of 1) + train-jobset-workers (gang of 8), all or nothing"
            ]
        );
    }

    #[test]
    fn an_lws_has_a_composite_per_replica_group_found_among_its_pods() {
        let v = json!({ "metadata": { "name": "infer" },
                        "spec": { "replicas": 3, "leaderWorkerTemplate": { "size": 4 } } });
        let plan = lws::plan(&v).unwrap();
        let labels: Vec<BTreeMap<String, String>> = ["10", "2", "0", "2"]
            .iter()
            .map(|i| BTreeMap::from([(lws::GROUP_INDEX_LABEL.to_string(), (*i).to_string())]))
            .collect();
        let refs: Vec<&BTreeMap<String, String>> = labels.iter().collect();
        let d = desired_default(
            &facts("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "infer"),
            &plan,
            &refs,
        );
        let cpgs: Vec<&str> = d.composites.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            cpgs,
            [
                "infer-leaderworkerset-0",
                "infer-leaderworkerset-2",
                "infer-leaderworkerset-10"
            ]
        );
        assert_eq!(d.groups.len(), 6);
        assert_eq!(d.groups[3].0, "infer-leaderworkerset-2-workers");
        assert_eq!(
            d.groups[3].1["spec"]["parentCompositePodGroupName"],
            "infer-leaderworkerset-2"
        );
        let worker = |g: &str, w: &str| {
            BTreeMap::from([
                (lws::GROUP_INDEX_LABEL.to_string(), g.to_string()),
                (lws::WORKER_INDEX_LABEL.to_string(), w.to_string()),
            ])
        };
        let sel = members_of(&d, "infer-leaderworkerset-2-workers").unwrap();
        assert!(sel.matches(&worker("2", "3")));
        assert!(!sel.matches(&worker("0", "3")), "another replica group");
        assert!(!sel.matches(&worker("2", "0")), "the leader");
        assert!(
            desired_default(
                &facts("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "infer"),
                &plan,
                &[]
            )
            .groups
            .is_empty()
        );
    }

    #[test]
    fn an_lws_started_leader_first_has_no_composite() {
        let v = json!({ "metadata": { "name": "infer" },
                        "spec": { "replicas": 1, "startupPolicy": "LeaderReady", "leaderWorkerTemplate": { "size": 3 } } });
        let plan = lws::plan(&v).unwrap();
        let labels = [BTreeMap::from([(
            lws::GROUP_INDEX_LABEL.to_string(),
            "0".to_string(),
        )])];
        let d = desired_default(
            &facts("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "infer"),
            &plan,
            &[&labels[0]],
        );
        assert!(d.composites.is_empty());
        assert_eq!(d.groups[0].1["spec"]["schedulingPolicy"], json!({ "basic": {} }));
        assert_eq!(d.groups[1].1["spec"]["schedulingPolicy"]["gang"]["minCount"], 2);
        let w = &d.workload["spec"]["podGroupTemplates"];
        assert_eq!(w.as_array().map(Vec::len), Some(2));
    }
}
