//! Tests of owner resolution through the store's own caches (issue 38): a Pod as an owner, answered from the pod
//! cache, and an owner whose groups each take only some of its pods (`scheduling.phalanx.dev/members`).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use phalanx_api::owners::{GANG, MEMBERS, OWNER_UID_LABEL};
use phalanx_api::v1beta1::PodGroup;
use serde_json::json;

use crate::owners::{OwnerKind, OwnerObject};
use crate::{ClusterState, GroupKey, PodKey, Store};

const LWS_API: &str = "leaderworkerset.x-k8s.io/v1";

fn owner_ref(api_version: &str, kind: &str, name: &str, uid: &str) -> serde_json::Value {
    json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": true})
}

fn pod(name: &str, owner: serde_json::Value, group_index: &str, worker_index: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "ownerReferences": [owner],
                     "labels": {"leaderworkerset.sigs.k8s.io/group-index": group_index,
                                "leaderworkerset.sigs.k8s.io/worker-index": worker_index}},
        "spec": {"containers": [{"name": "c"}]},
    }))
    .unwrap()
}

fn owner(
    api_version: &str,
    kind: &str,
    name: &str,
    uid: &str,
    controller: Option<serde_json::Value>,
) -> OwnerObject {
    let mut m: ObjectMeta =
        serde_json::from_value(json!({"name": name, "namespace": "ns", "uid": uid})).unwrap();
    m.owner_references = controller.map(|c| vec![serde_json::from_value(c).unwrap()]);
    if kind == "LeaderWorkerSet" {
        m.annotations = Some([(GANG.to_string(), "true".to_string())].into());
    }
    OwnerObject {
        api_version: api_version.into(),
        kind: kind.into(),
        metadata: m,
    }
}

fn group(name: &str, members: &str) -> PodGroup {
    serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns", "labels": {OWNER_UID_LABEL: "uid-lws"},
                     "annotations": {MEMBERS: members}},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}},
    }))
    .unwrap()
}

/// An LWS replica group: leader pod `infer-0` (StatefulSet `infer` of the LWS) and worker `infer-0-1` (StatefulSet
/// `infer-0`, owned by the leader pod). Both reach the LWS; each joins the group whose members it is; a pod of a
/// replica group without groups yet waits for the group named after the LWS.
#[test]
fn a_workers_chain_through_its_leader_pod_reaches_the_leaderworkerset() {
    let lws = owner_ref(LWS_API, "LeaderWorkerSet", "infer", "uid-lws");
    let sts_leader = owner_ref("apps/v1", "StatefulSet", "infer", "uid-sts");
    let leader_pod = owner_ref("v1", "Pod", "infer-0", "uid-infer-0");
    let sts_workers = owner_ref("apps/v1", "StatefulSet", "infer-0", "uid-sts-0");
    let state = ClusterState {
        pods: vec![
            pod("infer-0", sts_leader.clone(), "0", "0"),
            pod("infer-0-1", sts_workers, "0", "1"),
            pod("infer-1", sts_leader, "1", "0"),
        ],
        owners: vec![
            owner(LWS_API, "LeaderWorkerSet", "infer", "uid-lws", None),
            owner("apps/v1", "StatefulSet", "infer", "uid-sts", Some(lws)),
            owner("apps/v1", "StatefulSet", "infer-0", "uid-sts-0", Some(leader_pod)),
        ],
        owner_kinds: vec![OwnerKind {
            api_version: LWS_API.into(),
            kind: "LeaderWorkerSet".into(),
            plural: "leaderworkersets".into(),
            namespaced: true,
        }],
        pod_groups: vec![
            group(
                "infer-leaderworkerset-0-leader",
                "leaderworkerset.sigs.k8s.io/group-index=0,leaderworkerset.sigs.k8s.io/worker-index=0",
            ),
            group(
                "infer-leaderworkerset-0-workers",
                "leaderworkerset.sigs.k8s.io/group-index=0,leaderworkerset.sigs.k8s.io/worker-index!=0",
            ),
        ],
        ..Default::default()
    };
    let store = Store::from_state(state);
    let group_of = |name: &str| {
        let p = store.pod(&PodKey::new("ns", name)).unwrap();
        store.group_of_pod(&p)
    };
    assert_eq!(
        group_of("infer-0-1"),
        Some(GroupKey::pod_group("ns", "infer-leaderworkerset-0-workers"))
    );
    assert_eq!(
        group_of("infer-0"),
        Some(GroupKey::pod_group("ns", "infer-leaderworkerset-0-leader"))
    );
    assert_eq!(
        group_of("infer-1"),
        Some(GroupKey::pod_group("ns", "infer-leaderworkerset")),
        "no group of replica group 1 yet: it waits"
    );
    let top = store
        .resolve_owners(&store.pod(&PodKey::new("ns", "infer-0-1")).unwrap())
        .top
        .unwrap();
    assert_eq!(
        (top.kind.as_str(), top.uid.as_str()),
        ("LeaderWorkerSet", "uid-lws")
    );
}
