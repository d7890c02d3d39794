//! Unit tests of the API dispatcher, against the dispatcher alone (a fixed store, a client of a server that is never called).

use std::time::Instant;

use phalanx_api::v1beta1::PodGroup;
use phalanx_scheduler::{EntityKey, Gate, GateReason};
use phalanx_store::ClusterState;
use prometheus_client::registry::Registry;
use serde_json::json;

use super::*;
use crate::cache::Cache;
use crate::dispatcher::jobs::{PreBindJob, PreBindResult};

fn api_group(name: &str) -> PodGroup {
    serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
        "metadata": { "namespace": "ns", "name": name, "uid": format!("uid-{name}") },
        "spec": {
            "workloadRef": { "workloadName": "w", "templateName": name },
            "schedulingPolicy": { "gang": { "minCount": 2 } },
        },
    }))
    .unwrap()
}

fn api_pod(name: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "namespace": "ns", "name": name, "uid": format!("uid-{name}") },
        "spec": { "schedulerName": "phalanx-scheduler", "containers": [{ "name": "c", "image": "i" }] },
    }))
    .unwrap()
}

/// A dispatcher over a fixed store whose client points at a port nothing listens on, never leader: whatever it
/// would write is refused before any call.
fn dispatcher(state: ClusterState) -> ApiDispatcher {
    let store = Store::from_state(state);
    let metrics = Metrics::register(&mut Registry::default());
    let cache = Cache::new(
        store.clone(),
        crate::NodeFilter::parse("").unwrap(),
        "phalanx-scheduler".into(),
        true,
        metrics.clone(),
    );
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let (_never, rx) = tokio::sync::watch::channel(false);
    ApiDispatcher::new(
        client,
        store,
        SchedulerOptions::default(),
        Leader::from(rx),
        metrics,
        cache.binding_finisher(),
    )
}

fn wanted(d: &ApiDispatcher, g: &GroupKey, type_: &str) -> Option<WantedCondition> {
    d.group_wanted.lock().unwrap().get(g)?.get(type_).cloned()
}

const INITIALLY: &str = phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED;

#[tokio::test]
async fn a_wanted_true_condition_is_never_replaced_by_false_and_goes_with_its_group() {
    let mut d = dispatcher(ClusterState {
        pod_groups: vec![api_group("g")],
        ..Default::default()
    });
    let g = GroupKey::pod_group("ns", "g");
    d.spawn_group_condition(
        g.clone(),
        INITIALLY,
        false,
        reasons::WAITING_FOR_QUORUM,
        "1 of 2".into(),
    );
    assert!(!wanted(&d, &g, INITIALLY).unwrap().status);
    d.spawn_group_condition(g.clone(), INITIALLY, true, reasons::SCHEDULED, String::new());
    d.spawn_group_condition(
        g.clone(),
        INITIALLY,
        false,
        reasons::WAITING_FOR_QUORUM,
        "1 of 2".into(),
    );
    let w = wanted(&d, &g, INITIALLY).unwrap();
    assert!(w.status, "no regression from True");
    assert_eq!(w.uid, "uid-g");
    assert_eq!(d.counts().0, 1);
    d.forget_group(&g);
    assert_eq!(d.counts().0, 0);
    // A group the store does not have gets nothing recorded.
    let missing = GroupKey::pod_group("ns", "missing");
    d.spawn_group_condition(
        missing.clone(),
        INITIALLY,
        true,
        reasons::SCHEDULED,
        String::new(),
    );
    assert!(wanted(&d, &missing, INITIALLY).is_none());
}

#[tokio::test]
async fn a_bind_without_leadership_comes_back_failed_and_nothing_is_called() {
    let mut d = dispatcher(ClusterState {
        pods: vec![api_pod("p1")],
        ..Default::default()
    });
    let key = PodKey::new("ns", "p1");
    d.queue_bind(BindJob {
        key: key.clone(),
        pod: d.store.pod(&key).unwrap(),
        node: "n1".into(),
        queued: Instant::now(),
        claims: Vec::new(),
    });
    assert_eq!(d.counts().1, 1, "waiting for a permit");
    d.start_binds();
    assert_eq!(d.counts().1, 0);
    let Some(ApiResult::Bind(r)) = d.next_result().await else {
        panic!("a bind result")
    };
    assert_eq!(r.key, key);
    assert_eq!(r.node, "n1");
    assert!(
        matches!(&r.outcome, BindOutcome::Failed(m) if m.contains("lost leadership")),
        "{:?}",
        r.outcome
    );
    d.drain(Duration::from_secs(5)).await;
    assert_eq!(d.counts().2, 0, "every task ended");
}

#[tokio::test]
async fn prebind_claims_are_in_flight_until_it_ends_and_a_failure_binds_nothing() {
    let mut d = dispatcher(ClusterState {
        pods: vec![api_pod("p1")],
        ..Default::default()
    });
    let key = PodKey::new("ns", "p1");
    let claim = ClaimKey::new("ns", "data");
    let job = PreBindJob {
        binds: vec![BindJob {
            key: key.clone(),
            pod: d.store.pod(&key).unwrap(),
            node: "n1".into(),
            queued: Instant::now(),
            claims: Vec::new(),
        }],
        actions: vec![VolumeAction::Provision {
            claim: claim.clone(),
            node: "n1".into(),
        }],
        devices: Vec::new(),
        conditions: Vec::new(),
    };
    d.start_prebind(job);
    assert_eq!(d.volumes_in_flight().count(), 1);
    // Not leader: the task writes nothing and reports the failure.
    let Some(ApiResult::PreBind(r)) = d.next_result().await else {
        panic!("a PreBind result")
    };
    assert!(r.result.as_ref().is_err_and(|m| m.contains("lost leadership")));
    let failed = d.finish_prebind(r).expect("a failure");
    assert_eq!(failed.binds.len(), 1);
    assert_eq!(d.volumes_in_flight().count(), 0);
    assert_eq!(d.counts().1, 0, "no bind queued");

    // A PreBind that succeeded queues its binds.
    let ok = PreBindResult {
        job: PreBindJob {
            binds: failed.binds,
            actions: Vec::new(),
            devices: Vec::new(),
            conditions: Vec::new(),
        },
        result: Ok(()),
    };
    assert!(d.finish_prebind(ok).is_none());
    let Some(ApiResult::Bind(b)) = d.next_result().await else {
        panic!("the bind started")
    };
    assert_eq!(b.key, key);
}

#[tokio::test]
async fn a_gate_is_not_announced_without_leadership() {
    let mut d = dispatcher(ClusterState {
        pods: vec![api_pod("p1")],
        pod_groups: vec![api_group("g")],
        ..Default::default()
    });
    let g = GroupKey::pod_group("ns", "g");
    let gate = Gate {
        reason: GateReason::WaitingForQuorum,
        message: "1 of 2 pods present (minCount 2)".into(),
        pod_message: "waiting for minCount pods from a gang to appear in scheduling queue".into(),
    };
    d.announce_gate(&EntityKey::Group(g.clone()), &gate);
    assert!(wanted(&d, &g, INITIALLY).is_none());
    assert_eq!(d.counts().2, 0, "no write queued");
}
