//! Unit tests of the cache, against the cache alone (a fixed store, no cluster).

use super::*;
use k8s_openapi::api::core::v1::{Node, NodeSpec};
use kube::api::ObjectMeta;
use phalanx_store::NodeRecord;

fn node(rv: &str, unschedulable: bool) -> NodeRecord {
    NodeRecord::from_node(&Node {
        metadata: ObjectMeta {
            name: Some("n1".into()),
            resource_version: Some(rv.into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            unschedulable: Some(unschedulable),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// Before the fix, ingest compared against the conversion cache, which a snapshot had already refreshed, and
/// the change was lost. The store's record now holds the model, shared by the snapshot and ingest.
#[test]
fn node_change_wakes_even_after_a_snapshot_refreshed_the_cache() {
    let mut seen = HashMap::new();
    let v1 = node("1", true).model.clone().unwrap();
    assert_eq!(node_event(&mut seen, "n1", v1), Some(ClusterEvent::NodeAdded));
    // A snapshot reads the new version first...
    let record = node("2", false);
    let v2 = record.model.clone().unwrap();
    // ...and ingest still sees a change.
    let again = record.model.clone().unwrap();
    assert!(Arc::ptr_eq(&v2, &again));
    assert_eq!(
        node_event(&mut seen, "n1", again),
        Some(ClusterEvent::NodeUpdated)
    );
    // A heartbeat (new resourceVersion, same content) is no change.
    let v3 = node("3", false).sharing_model_of(&record).model.clone().unwrap();
    assert_eq!(node_event(&mut seen, "n1", v3), None);
}

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use phalanx_scheduler::volumes::ClaimKey;
use phalanx_store::ClusterState;
use prometheus_client::registry::Registry;
use serde_json::json;

const SCHED: &str = "phalanx-scheduler";

fn api_node(name: &str, zone: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": name, "labels": { "zone": zone } },
        "status": { "allocatable": { "cpu": "4", "memory": "8Gi", "pods": "110" } },
    }))
    .unwrap()
}

fn api_pod(name: &str, node: Option<&str>, group: Option<&str>) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "namespace": "ns", "name": name, "uid": format!("uid-{name}"),
            "labels": group.map(|g| json!({ phalanx_api::labels::POD_GROUP: g })).unwrap_or(json!({})),
        },
        "spec": {
            "schedulerName": SCHED, "nodeName": node,
            "containers": [{ "name": "c", "image": "i", "resources": { "requests": { "cpu": "1" } } }],
        },
    }))
    .unwrap()
}

fn api_group(name: &str, min: i32) -> PodGroup {
    serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
        "metadata": { "namespace": "ns", "name": name, "uid": format!("uid-{name}") },
        "spec": {
            "workloadRef": { "workloadName": "w", "templateName": name },
            "schedulingPolicy": { "gang": { "minCount": min } },
        },
    }))
    .unwrap()
}

/// A cache over a fixed store, considering the nodes of zone `a` only.
fn cache_of(state: ClusterState) -> Cache {
    let metrics = Metrics::register(&mut Registry::default());
    Cache::new(
        Store::from_state(state),
        NodeFilter::parse("zone=a").unwrap(),
        SCHED.to_owned(),
        true,
        metrics,
    )
}

fn key(name: &str) -> PodKey {
    PodKey::new("ns", name)
}

#[test]
fn a_pod_is_tracked_once_and_a_succeeded_member_moves_to_completed_once() {
    let mut cache = cache_of(ClusterState {
        pods: vec![api_pod("p1", None, Some("g"))],
        ..Default::default()
    });
    let p = cache.store.pod(&key("p1")).unwrap();
    let info = cache.queue_info(&key("p1"), &p);
    assert!(
        !cache.track(key("p1"), info.clone()),
        "the first sighting is an add"
    );
    assert!(cache.track(key("p1"), info), "the second is an update");
    assert!(cache.is_known(&key("p1")));
    assert_eq!(cache.counts().0, 1);

    let done = cache.complete(key("p1"), &p).expect("recorded the first time");
    assert_eq!(done.key, key("p1"));
    assert!(cache.complete(key("p1"), &p).is_none(), "and only once");
    assert!(
        !cache.is_known(&key("p1")),
        "a completed member is no longer pending"
    );
    assert!(cache.untrack(&key("p1")).is_some(), "its deletion still finds it");
    assert!(cache.untrack(&key("p1")).is_none());
}

#[test]
fn an_assumed_pod_counts_as_assigned_until_forgotten() {
    let mut cache = cache_of(ClusterState {
        nodes: vec![api_node("n1", "a")],
        pods: vec![api_pod("p1", None, None)],
        ..Default::default()
    });
    let p = cache.store.pod(&key("p1")).unwrap();
    cache.assume(p.clone(), "n1");
    assert_eq!(cache.queue_info(&key("p1"), &p).node_name.as_deref(), Some("n1"));
    let snap = cache.base_snapshot();
    let i = snap.node_index("n1").expect("n1 is considered");
    assert!(
        snap.node(i).pods.iter().any(|q| q.key == key("p1")),
        "the snapshot holds the assumed pod"
    );
    cache.keep_snapshot(snap, &[], std::iter::empty());

    cache.forget(&key("p1"));
    assert_eq!(cache.queue_info(&key("p1"), &p).node_name, None);
    // The kept snapshot was told: the next one no longer holds the pod (and matches a fresh build, which the
    // cache checks itself with `verify_snapshot`).
    let snap = cache.base_snapshot();
    let i = snap.node_index("n1").unwrap();
    assert!(snap.node(i).pods.is_empty());
}

#[test]
fn a_cycles_extras_leave_the_kept_snapshot() {
    let mut cache = cache_of(ClusterState {
        nodes: vec![api_node("n1", "a"), api_node("n2", "b")],
        pods: vec![api_pod("far", Some("n2"), Some("g"))],
        ..Default::default()
    });
    let mut snap = cache.base_snapshot();
    assert!(!snap.contains_pod(&key("far")), "n2 is not considered");
    let far = cache.store.pod(&key("far")).unwrap();
    let info = cache.pod_info(&far, None);
    let mut extra = (*info).clone();
    extra.node_name = Some("n1".into());
    snap.add_pod(Arc::new(extra));
    cache.keep_snapshot(snap, &[key("far")], std::iter::empty());
    assert!(!cache.base_snapshot().contains_pod(&key("far")));
}

#[test]
fn only_considered_nodes_raise_events_and_a_repeat_raises_none() {
    let mut cache = cache_of(ClusterState {
        nodes: vec![api_node("n1", "a"), api_node("n2", "b")],
        ..Default::default()
    });
    assert_eq!(cache.observe_node("n1"), Some(ClusterEvent::NodeAdded));
    assert_eq!(cache.observe_node("n1"), None);
    assert_eq!(cache.observe_node("n2"), None, "another partition's node");
    assert_eq!(cache.observe_node("gone"), None);
    assert_eq!(cache.counts().1, 1);
    assert!(cache.node_considered("n1") && !cache.node_considered("n2"));
    cache.reset_nodes_seen();
    assert_eq!(cache.counts().1, 1);
}

#[test]
fn a_group_is_recorded_while_it_exists_and_forgotten_once() {
    let mut cache = cache_of(ClusterState {
        pod_groups: vec![api_group("g", 2)],
        ..Default::default()
    });
    let g = GroupKey::pod_group("ns", "g");
    let GroupChange::PodGroup(info) = cache.observe_group(&g) else {
        panic!("g exists")
    };
    assert_eq!(info.uid.as_ref(), "uid-g");
    assert_eq!(cache.group_uid(&g).as_deref(), Some("uid-g"));
    assert_eq!(cache.counts().2, 1);
    assert!(cache.groups_except(&HashSet::from([g.clone()])).is_empty());
    assert_eq!(cache.groups_except(&HashSet::new()), vec![g.clone()]);
    assert!(cache.forget_group(&g), "the queue had it");
    assert!(!cache.forget_group(&g));
    assert_eq!(cache.group_uid(&g), None);
    let missing = GroupKey::pod_group("ns", "missing");
    assert!(matches!(cache.observe_group(&missing), GroupChange::Gone(false)));
}

/// A cycle's snapshot shares the cache's group maps instead of copying every group into it, and a snapshot kept
/// for the next cycle lets go of them, so the next group change does not copy the map either.
#[test]
fn a_cycle_shares_the_group_maps_and_the_kept_snapshot_lets_go() {
    let mut cache = cache_of(ClusterState {
        nodes: vec![api_node("n1", "a")],
        pod_groups: vec![api_group("g", 2), api_group("h", 2)],
        ..Default::default()
    });
    for name in ["g", "h"] {
        assert!(matches!(
            cache.observe_group(&GroupKey::pod_group("ns", name)),
            GroupChange::PodGroup(_)
        ));
    }
    let mut snap = cache.base_snapshot();
    cache.add_group_infos(&mut snap);
    assert_eq!(Arc::strong_count(&cache.group_infos), 2, "shared, not copied");
    assert_eq!(Arc::strong_count(&cache.composite_infos), 2);
    cache.keep_snapshot(snap, &[], std::iter::empty());
    assert_eq!(
        Arc::strong_count(&cache.group_infos),
        1,
        "the kept snapshot holds no group map"
    );
    assert_eq!(Arc::strong_count(&cache.composite_infos), 1);
    // The next cycle sees a group forgotten in between.
    assert!(cache.forget_group(&GroupKey::pod_group("ns", "h")));
    let mut snap = cache.base_snapshot();
    cache.add_group_infos(&mut snap);
    assert_eq!(cache.group_infos.len(), 1);
    assert_eq!(
        Arc::strong_count(&cache.group_infos),
        2,
        "the snapshot holds the map as it is now"
    );
}

#[test]
fn the_volume_catalog_applies_the_bindings_in_flight_until_they_end() {
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": { "namespace": "ns", "name": "data", "uid": "uid-data" },
        "spec": { "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": "1Gi" } } },
    }))
    .unwrap();
    let volume: PersistentVolume = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": { "name": "pv1", "resourceVersion": "7" },
        "spec": { "accessModes": ["ReadWriteOnce"], "capacity": { "storage": "1Gi" }, "hostPath": { "path": "/x" } },
    }))
    .unwrap();
    let mut state = ClusterState::default();
    state.volumes.claims.push(claim);
    state.volumes.volumes.push(volume);
    let mut cache = cache_of(state);
    let ck = ClaimKey::new("ns", "data");
    let bind = phalanx_scheduler::volumes::VolumeAction::Bind {
        claim: ck.clone(),
        claim_uid: "uid-data".into(),
        volume: "pv1".into(),
        resource_version: "7".into(),
    };
    let cat = cache.volume_catalog(std::iter::empty());
    assert!(!cat.claims[&ck].bound);
    // Kept until something changes: the bindings passed now are not read.
    let same = cache.volume_catalog(std::iter::once(&bind));
    assert!(Arc::ptr_eq(&cat, &same));
    cache.claims_in_flight_changed();
    let cat = cache.volume_catalog(std::iter::once(&bind));
    assert!(cat.claims[&ck].bound);
    assert_eq!(cat.claims[&ck].volume_name.as_deref(), Some("pv1"));
    assert!(cat.volumes["pv1"].claim_ref.is_some());
    cache.claims_in_flight_changed();
    assert!(!cache.volume_catalog(std::iter::empty()).claims[&ck].bound);
}
