//! LeaderWorkerSet (`leaderworkerset.x-k8s.io/v1`, controller v0.7.0): per replica group, a leader group and a
//! workers group.
//!
//! - Each replica group (the pods labelled with one `leaderworkerset.sigs.k8s.io/group-index`) is its own unit:
//!   nothing ties replica groups to each other, as in LWS's own Volcano provider, Kueue (one Workload per group
//!   index) and KEP-666's default.
//! - `startupPolicy: LeaderCreated` (the default): the leader group (1, `worker-index` 0) and the workers group
//!   (`size − 1`) are the children of one CompositePodGroup, so all `size` pods are placed together or not at all.
//! - `startupPolicy: LeaderReady`, or the `leaderworkerset.sigs.k8s.io/exclusive-topology` annotation: LWS creates
//!   the workers' StatefulSet only once the leader is Ready (or has a node) (`pkg/controllers/pod_controller.go`), so
//!   one gang across them would wait for pods that do not exist yet. The leader is scheduled alone (a group without
//!   a gang) and the workers form a gang of `size − 1`, as KAI's and LWS's Volcano grouping do.
//! - `size: 1`: the leader alone, a gang of one.
//!
//! A worker's owner chain is Pod → StatefulSet → leader Pod → StatefulSet → LeaderWorkerSet (`pod_controller.go`):
//! the store's owner walk must follow a Pod as an owner to reach the LWS.

use std::collections::BTreeMap;

use serde_json::Value;

use phalanx_api::owners::{LabelMatch, MemberSelector};

use super::plan::{KindError, Plan, PlannedGroup, Unit, count};

/// The API group.
pub const GROUP: &str = "leaderworkerset.x-k8s.io";
/// Pod label: the replica group's index.
pub const GROUP_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// Pod label: the pod's index in its replica group; `0` is the leader.
pub const WORKER_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/worker-index";
/// Annotation on the LWS: each replica group in its own topology domain, placed leader first.
pub const EXCLUSIVE_TOPOLOGY: &str = "leaderworkerset.sigs.k8s.io/exclusive-topology";

/// The plan for a LeaderWorkerSet read as JSON: one unit template, repeated per replica group
/// ([`Plan::replicated_by`] is [`GROUP_INDEX_LABEL`]). Errors name the field.
pub fn plan(lws: &Value) -> Result<Plan, KindError> {
    let size = count(
        lws,
        "/spec/leaderWorkerTemplate/size",
        || "spec.leaderWorkerTemplate.size".into(),
        1,
    )?;
    let replicas = count(lws, "/spec/replicas", || "spec.replicas".into(), 1)?;
    let plan = |units| Plan {
        units,
        warnings: Vec::new(),
        replicated_by: Some(GROUP_INDEX_LABEL.to_owned()),
    };
    if replicas == 0 || size == 0 {
        return Ok(plan(Vec::new()));
    }
    let leader_first = lws.pointer("/spec/startupPolicy").and_then(Value::as_str) == Some("LeaderReady")
        || lws
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(EXCLUSIVE_TOPOLOGY))
            .is_some();
    let role = |m: LabelMatch| MemberSelector(BTreeMap::from([(WORKER_INDEX_LABEL.to_owned(), m)]));
    let leader = PlannedGroup {
        part: "leader".into(),
        min_count: Some(1),
        members: role(LabelMatch::Equals("0".into())),
    };
    let workers = i32::try_from(size - 1)
        .ok()
        .filter(|n| *n > 0)
        .map(|n| PlannedGroup {
            part: "workers".into(),
            min_count: Some(n),
            members: role(LabelMatch::NotEquals("0".into())),
        });
    let units = match workers {
        None => vec![Unit {
            part: String::new(),
            composite: false,
            groups: vec![leader],
        }],
        Some(w) if leader_first => vec![
            Unit {
                part: String::new(),
                composite: false,
                groups: vec![PlannedGroup {
                    min_count: None,
                    ..leader
                }],
            },
            Unit {
                part: String::new(),
                composite: false,
                groups: vec![w],
            },
        ],
        Some(w) => vec![Unit {
            part: String::new(),
            composite: true,
            groups: vec![leader, w],
        }],
    };
    Ok(plan(units))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn lws(replicas: i64, size: i64, startup: Option<&str>) -> Value {
        let mut v = json!({ "metadata": { "name": "infer" },
                            "spec": { "replicas": replicas, "leaderWorkerTemplate": { "size": size } } });
        if let Some(s) = startup {
            v["spec"]["startupPolicy"] = json!(s);
        }
        v
    }

    fn pod(index: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(WORKER_INDEX_LABEL.to_owned(), index.to_owned())])
    }

    #[test]
    fn leader_created_is_one_composite_of_leader_and_workers_per_replica_group() {
        let p = plan(&lws(3, 4, None)).unwrap();
        assert_eq!(p.replicated_by.as_deref(), Some(GROUP_INDEX_LABEL));
        assert_eq!(p.units.len(), 1, "one template, repeated per group index found");
        let u = &p.units[0];
        assert!(u.composite);
        assert_eq!(
            u.groups
                .iter()
                .map(|g| (g.part.as_str(), g.min_count))
                .collect::<Vec<_>>(),
            vec![("leader", Some(1)), ("workers", Some(3))]
        );
        assert!(u.groups[0].members.matches(&pod("0")) && !u.groups[0].members.matches(&pod("2")));
        assert!(u.groups[1].members.matches(&pod("2")) && !u.groups[1].members.matches(&pod("0")));
    }

    #[test]
    fn leader_ready_or_exclusive_topology_schedules_the_leader_first() {
        for v in [lws(2, 4, Some("LeaderReady")), {
            let mut v = lws(2, 4, None);
            v["metadata"]["annotations"] = json!({ EXCLUSIVE_TOPOLOGY: "rack" });
            v
        }] {
            let p = plan(&v).unwrap();
            assert!(p.units.iter().all(|u| !u.composite));
            let groups: Vec<_> = p
                .units
                .iter()
                .flat_map(|u| &u.groups)
                .map(|g| (g.part.as_str(), g.min_count))
                .collect();
            assert_eq!(groups, vec![("leader", None), ("workers", Some(3))]);
        }
    }

    #[test]
    fn size_one_is_the_leader_alone_and_zero_replicas_nothing() {
        let p = plan(&lws(2, 1, None)).unwrap();
        assert_eq!(p.units.len(), 1);
        assert_eq!(p.units[0].groups.len(), 1);
        assert!(plan(&lws(0, 4, None)).unwrap().units.is_empty());
    }

    #[test]
    fn huge_counts_cost_nothing_and_bad_ones_name_the_field() {
        let p = plan(&lws(2_147_483_647, 2_147_483_647, None)).unwrap();
        assert_eq!(p.units[0].groups[1].min_count, Some(2_147_483_646));
        let e = plan(&lws(1, -3, None)).unwrap_err();
        assert!(
            e.to_string().contains("spec.leaderWorkerTemplate.size is -3"),
            "{e}"
        );
        let e = plan(&json!({ "spec": { "replicas": "two" } })).unwrap_err();
        assert!(e.to_string().contains("spec.replicas"), "{e}");
    }
}
