//! Edge cases of the per-pod plugins, on pods and nodes converted from API objects.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use phalanx_scheduler::framework::Code;
use phalanx_scheduler::framework::{FilterPlugin, PreFilterPlugin};
use phalanx_scheduler::model::{NodeInfo, NodeStatic};
use phalanx_scheduler::plugins::registry::Profile;
use phalanx_scheduler::plugins::{
    inter_pod_affinity, node_affinity, node_name, node_ports, node_resources, node_unschedulable,
    pod_topology_spread, taint_toleration,
};
use phalanx_scheduler::queue::QueuedEntity;
use phalanx_scheduler::{EntityKey, PodInfo, Scheduler, SchedulerConfig, Snapshot};
use proptest::prelude::*;
use serde_json::{Value, json};

fn pod(spec: Value) -> PodInfo {
    pod_with(json!({"name": "p", "namespace": "ns"}), spec)
}

fn pod_with(meta: Value, spec: Value) -> PodInfo {
    let p: Pod = serde_json::from_value(json!({"metadata": meta, "spec": spec})).unwrap();
    let info = PodInfo::from_pod(&p, None);
    assert!(info.invalid.is_none(), "{:?}", info.invalid);
    info
}

fn container(requests: Value) -> Value {
    json!({"name": "c", "resources": {"requests": requests}})
}

fn node_static(v: Value) -> NodeStatic {
    let n: Node = serde_json::from_value(v).unwrap();
    NodeStatic::from_node(&n).unwrap()
}

fn node(labels: Value, spec: Value, cpu: &str) -> NodeInfo {
    NodeInfo::new(Arc::new(node_static(json!({
        "metadata": {"name": "n1", "labels": labels},
        "spec": spec,
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110", "nvidia.com/gpu": "2"}}
    }))))
}

fn reason(r: Result<(), phalanx_scheduler::plugins::Rejection>) -> (Code, Vec<String>) {
    let r = r.unwrap_err();
    (r.code, r.reasons.iter().map(|s| s.to_string()).collect())
}

#[test]
fn pod_requests_follow_upstream_rules() {
    // containers sum 300m; init 500m alone; sidecar 100m runs with the later init container
    // and with the containers; overhead 50m.
    let p = pod(json!({
        "containers": [container(json!({"cpu": "100m"})), container(json!({"cpu": "200m", "memory": "1Gi"}))],
        "initContainers": [
            {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
            {"name": "init", "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}}}
        ],
        "overhead": {"cpu": "50m"}
    }));
    // max(300+100 = 400, init 500 + sidecar 100 = 600) + 50 = 650
    assert_eq!(p.spec.requests.milli_cpu, 650);
    // memory: max(1Gi, 2Gi) = 2Gi
    assert_eq!(p.spec.requests.memory, 2 << 30);
    // non-zero memory: the first container sets none -> 200Mi default counted for it
    assert!(p.spec.non_zero_memory >= 2 << 30);
}

#[test]
fn limits_stand_in_for_missing_requests_and_extended_resources_count() {
    let p = pod(
        json!({"containers": [{"name": "c", "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}),
    );
    assert_eq!(p.spec.requests.milli_cpu, 1000);
    assert_eq!(p.spec.requests.scalar("nvidia.com/gpu"), 1);
}

#[test]
fn bad_quantity_marks_pod_invalid_without_panic() {
    let p: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [container(json!({"cpu": "lots"}))]}}),
    )
    .unwrap();
    let info = PodInfo::from_pod(&p, None);
    assert!(info.invalid.as_deref().unwrap().contains("invalid quantity"));
}

#[test]
fn node_resources_fit_reports_every_insufficient_resource() {
    let n = node(json!({}), json!({}), "1");
    let p = pod(
        json!({"containers": [container(json!({"cpu": "2", "memory": "16Gi", "nvidia.com/gpu": "1", "example.com/foo": "1"}))]}),
    );
    let (code, reasons) = reason(node_resources::filter(&p, &n));
    assert_eq!(code, Code::UnschedulableAndUnresolvable); // exceeds allocatable outright
    assert_eq!(
        reasons,
        [
            "Insufficient cpu",
            "Insufficient memory",
            "Insufficient example.com/foo"
        ]
    );
    let fits = pod(json!({"containers": [container(json!({"cpu": "1", "nvidia.com/gpu": "2"}))]}));
    assert!(node_resources::filter(&fits, &n).is_ok());
}

#[test]
fn node_resources_too_many_pods() {
    let ns =
        node_static(json!({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "4", "pods": "1"}}}));
    let mut snap = Snapshot::new([Arc::new(ns)]);
    let mut existing = PodInfo::simple("ns", "e", 0);
    existing.node_name = Some("n".into());
    snap.add_pod(Arc::new(existing));
    let p = pod(json!({"containers": [{"name": "c"}]}));
    let (code, reasons) = reason(node_resources::filter(&p, snap.node(0)));
    assert_eq!(code, Code::Unschedulable);
    assert_eq!(reasons, ["Too many pods"]);
}

#[test]
fn least_and_most_allocated_scores() {
    assert_eq!(node_resources::least_requested(1000, 4000), 75);
    assert_eq!(node_resources::least_requested(5000, 4000), 0);
    assert_eq!(node_resources::most_requested(1000, 4000), 25);
    assert_eq!(node_resources::most_requested(5000, 4000), 100);
    assert_eq!(node_resources::most_requested(1, 0), 0);
}

#[test]
fn balanced_allocation_prefers_even_use_and_skips_best_effort() {
    let n = node(json!({}), json!({}), "8");
    // 4 cpu of 8 (0.5) and 4Gi of 8Gi (0.5): perfectly balanced.
    let even = pod(json!({"containers": [container(json!({"cpu": "4", "memory": "4Gi"}))]}));
    assert_eq!(node_resources::balanced_score(&even, &n), 100);
    let skewed = pod(json!({"containers": [container(json!({"cpu": "8"}))]}));
    assert_eq!(node_resources::balanced_score(&skewed, &n), 50);
    assert!(node_resources::balanced_skips(&pod(
        json!({"containers": [{"name": "c"}]})
    )));
}

#[test]
fn taints_filter_noschedule_and_noexecute_but_score_prefer() {
    let n = node(
        json!({}),
        json!({"taints": [{"key": "a", "value": "1", "effect": "PreferNoSchedule"}, {"key": "b", "value": "2", "effect": "NoExecute"}]}),
        "4",
    );
    let p = pod(json!({"containers": [{"name": "c"}]}));
    let (code, reasons) = reason(taint_toleration::filter(&p, &n));
    assert_eq!(code, Code::UnschedulableAndUnresolvable);
    assert_eq!(reasons, ["node(s) had untolerated taint {b: 2}"]);
    assert_eq!(taint_toleration::score(&p, &n), 1);
    let tolerant = pod(json!({"containers": [{"name": "c"}], "tolerations": [
        {"key": "b", "operator": "Exists", "effect": "NoExecute"},
        {"key": "a", "operator": "Equal", "value": "1"}
    ]}));
    assert!(taint_toleration::filter(&tolerant, &n).is_ok());
    assert_eq!(taint_toleration::score(&tolerant, &n), 0);
    // A toleration for NoSchedule only does not count for PreferNoSchedule scoring.
    let narrow = pod(json!({"containers": [{"name": "c"}], "tolerations": [
        {"operator": "Exists", "effect": "NoExecute"}, {"key": "a", "operator": "Exists", "effect": "NoSchedule"}
    ]}));
    assert_eq!(taint_toleration::score(&narrow, &n), 1);
}

#[test]
fn unschedulable_node_needs_the_toleration() {
    let n = node(json!({}), json!({"unschedulable": true}), "4");
    let p = pod(json!({"containers": [{"name": "c"}]}));
    assert_eq!(
        reason(node_unschedulable::filter(&p, &n)).1,
        ["node(s) were unschedulable"]
    );
    let t = pod(
        json!({"containers": [{"name": "c"}], "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}),
    );
    assert!(node_unschedulable::filter(&t, &n).is_ok());
}

#[test]
fn node_name_must_match() {
    let n = node(json!({}), json!({}), "4");
    let mut p = pod(json!({"containers": [{"name": "c"}]}));
    assert!(node_name::filter(&p, &n).is_ok());
    Arc::make_mut(&mut p.spec).node_name = Some("other".into());
    assert_eq!(
        reason(node_name::filter(&p, &n)).1,
        ["node(s) didn't match the requested node name"]
    );
}

#[test]
fn node_affinity_selector_terms_and_operators() {
    let n = node(json!({"zone": "a", "gen": "5"}), json!({}), "4");
    let sel = pod(json!({"containers": [{"name": "c"}], "nodeSelector": {"zone": "b"}}));
    assert_eq!(
        reason(node_affinity::filter(&sel, &n)).1,
        ["node(s) didn't match Pod's node affinity/selector"]
    );
    let req = |exprs: Value| {
        pod(
            json!({"containers": [{"name": "c"}], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": exprs}}}}),
        )
    };
    // Terms are ORed; expressions in a term ANDed.
    assert!(node_affinity::filter(&req(json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}, {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]}])), &n).is_ok());
    assert!(node_affinity::filter(&req(json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}, {"key": "gen", "operator": "Lt", "values": ["5"]}]}])), &n).is_err());
    assert!(node_affinity::filter(&req(json!([{"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}, {"key": "zone", "operator": "NotIn", "values": ["b"]}]}])), &n).is_ok());
    assert!(
        node_affinity::filter(
            &req(json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}])),
            &n
        )
        .is_ok()
    );
    // An empty term matches nothing.
    assert!(node_affinity::filter(&req(json!([{}])), &n).is_err());
    let pref = pod(
        json!({"containers": [{"name": "c"}], "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
            {"weight": 7, "preference": {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}},
            {"weight": 9, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]}}
        ]}}}),
    );
    assert_eq!(node_affinity::score(&pref, &n), 12);
}

#[test]
fn node_ports_conflict_rules() {
    let mut snap = Snapshot::new([Arc::new(NodeStatic::simple("n", 4000, 1 << 30, &[]))]);
    let mut e = pod_with(
        json!({"name": "e", "namespace": "ns"}),
        json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}),
    );
    e.node_name = Some("n".into());
    snap.add_pod(Arc::new(e));
    let same = pod(
        json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}]}]}),
    );
    assert_eq!(
        reason(node_ports::filter(&same, snap.node(0))).1,
        ["node(s) didn't have free ports for the requested pod ports"]
    );
    let udp = pod(
        json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}]}]}),
    );
    assert!(node_ports::filter(&udp, snap.node(0)).is_ok());
}

fn spread_snapshot() -> Snapshot {
    let nodes =
        ["a1", "a2", "b1"].map(|n| Arc::new(NodeStatic::simple(n, 10_000, 1 << 34, &[("zone", &n[..1])])));
    let mut snap = Snapshot::new(nodes);
    for (i, n) in ["a1", "a1", "a2"].iter().enumerate() {
        let mut p = pod_with(
            json!({"name": format!("e{i}"), "namespace": "ns", "labels": {"app": "x"}}),
            json!({"containers": [{"name": "c"}]}),
        );
        p.node_name = Some((*n).into());
        snap.add_pod(Arc::new(p));
    }
    snap
}

#[test]
fn topology_spread_hard_constraint_skew() {
    let snap = spread_snapshot();
    let p = pod_with(
        json!({"name": "p", "namespace": "ns", "labels": {"app": "x"}}),
        json!({"containers": [{"name": "c"}], "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "x"}}}
        ]}),
    );
    let st = pod_topology_spread::pre_filter(&p, &snap).unwrap();
    // zone a has 3, zone b 0: a -> skew 3+1-0 = 4 > 1; b -> 0+1-0 = 1.
    assert_eq!(
        reason(pod_topology_spread::filter(&st, snap.node(0))).1,
        ["node(s) didn't match pod topology spread constraints"]
    );
    assert!(pod_topology_spread::filter(&st, snap.node(2)).is_ok());
    let unlabeled = NodeInfo::new(Arc::new(NodeStatic::simple("x", 1000, 0, &[])));
    assert_eq!(
        reason(pod_topology_spread::filter(&st, &unlabeled)).1,
        ["node(s) didn't match pod topology spread constraints (missing required label)"]
    );
}

#[test]
fn topology_spread_min_domains_forces_zero_minimum() {
    let snap = spread_snapshot();
    let mut with_b = PodInfo::simple("ns", "eb", 0);
    std::sync::Arc::make_mut(&mut with_b.labels).insert("app".into(), "x".into());
    with_b.node_name = Some("b1".into());
    let mut snap = snap;
    snap.add_pod(Arc::new(with_b));
    // a: 3, b: 1. With minDomains 3 (> 2 domains) the global minimum is 0, so b gives 1+1-0 = 2.
    let p = pod_with(
        json!({"name": "p", "namespace": "ns", "labels": {"app": "x"}}),
        json!({"containers": [{"name": "c"}], "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "minDomains": 3, "labelSelector": {"matchLabels": {"app": "x"}}}
        ]}),
    );
    let st = pod_topology_spread::pre_filter(&p, &snap).unwrap();
    assert!(pod_topology_spread::filter(&st, snap.node(2)).is_err());
}

#[test]
fn topology_spread_soft_constraint_scores_emptier_domain_higher() {
    let snap = spread_snapshot();
    let p = pod_with(
        json!({"name": "p", "namespace": "ns", "labels": {"app": "x"}}),
        json!({"containers": [{"name": "c"}], "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "x"}}}
        ]}),
    );
    let st = pod_topology_spread::pre_score(&p, &snap, &[0, 1, 2]).unwrap();
    let mut raw: Vec<Option<i64>> = (0..3)
        .map(|i| pod_topology_spread::score(&st, snap.node(i)))
        .collect();
    let norm = pod_topology_spread::normalize(&mut raw);
    assert!(norm[2] > norm[0], "{norm:?}");
    assert_eq!(norm[0], norm[1]);
}

fn affinity_pod(name: &str, labels: Value, affinity: Value) -> PodInfo {
    pod_with(
        json!({"name": name, "namespace": "ns", "labels": labels}),
        json!({"containers": [{"name": "c"}], "affinity": affinity}),
    )
}

#[test]
fn inter_pod_affinity_required_terms() {
    let mut snap = spread_snapshot(); // pods app=x on a1, a1, a2
    let aff = affinity_pod(
        "p",
        json!({}),
        json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "zone"}]}}),
    );
    let st = inter_pod_affinity::pre_filter(&aff, &snap).unwrap();
    assert!(inter_pod_affinity::filter(&st, &aff, snap.node(1)).is_ok()); // zone a has app=x
    assert_eq!(
        reason(inter_pod_affinity::filter(&st, &aff, snap.node(2))),
        (
            Code::UnschedulableAndUnresolvable,
            vec!["node(s) didn't match pod affinity rules".to_string()]
        )
    );
    let anti = affinity_pod(
        "q",
        json!({}),
        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "zone"}]}}),
    );
    let st = inter_pod_affinity::pre_filter(&anti, &snap).unwrap();
    assert_eq!(
        reason(inter_pod_affinity::filter(&st, &anti, snap.node(0))).1,
        ["node(s) didn't match pod anti-affinity rules"]
    );
    assert!(inter_pod_affinity::filter(&st, &anti, snap.node(2)).is_ok());
    // Symmetry: an existing pod on b1 with anti-affinity against role=db repels such pods from zone b.
    let mut guard = affinity_pod(
        "guard",
        json!({}),
        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"role": "db"}}, "topologyKey": "zone"}]}}),
    );
    guard.node_name = Some("b1".into());
    snap.add_pod(Arc::new(guard));
    let db = affinity_pod("db", json!({"role": "db"}), json!({}));
    let st = inter_pod_affinity::pre_filter(&db, &snap).unwrap();
    assert_eq!(
        reason(inter_pod_affinity::filter(&st, &db, snap.node(2))).1,
        ["node(s) didn't satisfy existing pods anti-affinity rules"]
    );
    assert!(inter_pod_affinity::filter(&st, &db, snap.node(0)).is_ok());
}

#[test]
fn inter_pod_affinity_first_pod_may_match_itself() {
    let snap = Snapshot::new([Arc::new(NodeStatic::simple("n", 1000, 0, &[("zone", "a")]))]);
    let p = affinity_pod(
        "p",
        json!({"app": "y"}),
        json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "y"}}, "topologyKey": "zone"}]}}),
    );
    let st = inter_pod_affinity::pre_filter(&p, &snap).unwrap();
    assert!(inter_pod_affinity::filter(&st, &p, snap.node(0)).is_ok());
}

#[test]
fn gang_members_with_anti_affinity_spread_within_one_cycle() {
    // Pods assumed earlier in the cycle count: three anti-affine members need three zones.
    let nodes = ["a", "b"].map(|z| Arc::new(NodeStatic::simple(z, 10_000, 1 << 34, &[("zone", z)])));
    let mut snap = Snapshot::new(nodes);
    let mk = |n: &str| {
        let mut p = affinity_pod(
            n,
            json!({"app": "g"}),
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "g"}}, "topologyKey": "zone"}]}}),
        );
        p.group_name = Some("g".into());
        Arc::new(p)
    };
    let mut group =
        phalanx_scheduler::GroupInfo::new("ns", "g", phalanx_scheduler::GroupPolicy::Gang { min_count: 2 });
    group.priority = None;
    let entity = QueuedEntity {
        tree: None,
        key: EntityKey::Group(group.key.clone()),
        group: Some(Arc::new(group)),
        pods: vec![mk("m1"), mk("m2"), mk("m3")],
        attempts: 0,
        timestamp: std::time::Instant::now(),
    };
    let mut s = Scheduler::new(SchedulerConfig::default());
    let d = s.schedule(&mut snap, &entity);
    assert_eq!(d.bindings.len(), 2);
    assert_ne!(d.bindings[0].node, d.bindings[1].node);
    assert_eq!(d.failures.len(), 1);
    assert!(
        d.failures[0]
            .message
            .contains("node(s) didn't match pod anti-affinity rules"),
        "{}",
        d.failures[0].message
    );
}

#[test]
fn fit_error_message_histogram() {
    let nodes = vec![
        Arc::new(NodeStatic::simple("n1", 1000, 1 << 30, &[])),
        Arc::new(NodeStatic::simple("n2", 1000, 1 << 30, &[])),
        Arc::new(node_static(
            json!({"metadata": {"name": "n3"}, "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}, "status": {"allocatable": {"cpu": "8"}}}),
        )),
    ];
    let mut snap = Snapshot::new(nodes);
    let p = Arc::new(PodInfo::simple("ns", "big", 2000));
    let entity = QueuedEntity {
        tree: None,
        key: EntityKey::Pod(p.key.clone()),
        group: None,
        pods: vec![p],
        attempts: 0,
        timestamp: std::time::Instant::now(),
    };
    let d = Scheduler::new(SchedulerConfig::default()).schedule(&mut snap, &entity);
    assert_eq!(
        d.failures[0].message,
        "0/3 nodes are available: 1 node(s) had untolerated taint {k: v}, 2 Insufficient cpu."
    );
}

#[test]
fn unrelated_affinity_pods_do_not_disable_batching() {
    // An existing pod whose anti-affinity selects other pods only: the gang stays batched.
    let nodes: Vec<Arc<NodeStatic>> = (0..4)
        .map(|i| {
            Arc::new(NodeStatic::simple(
                &format!("n{i}"),
                4000,
                1 << 33,
                &[("zone", "a")],
            ))
        })
        .collect();
    let mut snap = Snapshot::new(nodes);
    let mut guard = affinity_pod(
        "guard",
        json!({}),
        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"role": "db"}}, "topologyKey": "zone"}]}}),
    );
    guard.node_name = Some("n0".into());
    snap.add_pod(Arc::new(guard));
    let mut group =
        phalanx_scheduler::GroupInfo::new("ns", "g", phalanx_scheduler::GroupPolicy::Gang { min_count: 4 });
    group.priority = None;
    let template = PodInfo::simple("ns", "t", 1000);
    let pods = (0..4)
        .map(|i| {
            let mut p = template.clone();
            p.key = phalanx_scheduler::PodKey::new("ns", &format!("m{i}"));
            p.group_name = Some("g".into());
            Arc::new(p)
        })
        .collect();
    let entity = QueuedEntity {
        tree: None,
        key: EntityKey::Group(group.key.clone()),
        group: Some(Arc::new(group)),
        pods,
        attempts: 0,
        timestamp: std::time::Instant::now(),
    };
    let d = Scheduler::new(SchedulerConfig::default()).schedule(&mut snap, &entity);
    assert_eq!(d.bindings.len(), 4);
    assert!(d.stats.cached_node_evaluations > 0, "{:?}", d.stats);
    // A db pod is repelled from the whole zone by the same guard.
    let mut db = affinity_pod("db", json!({"role": "db"}), json!({}));
    db.group_name = None;
    let db = Arc::new(db);
    let e = QueuedEntity {
        tree: None,
        key: EntityKey::Pod(db.key.clone()),
        group: None,
        pods: vec![db],
        attempts: 0,
        timestamp: std::time::Instant::now(),
    };
    let d = Scheduler::new(SchedulerConfig::default()).schedule(&mut snap, &e);
    assert_eq!(
        d.failures[0].message,
        "0/4 nodes are available: 4 node(s) didn't satisfy existing pods anti-affinity rules."
    );
}

#[test]
fn score_weight_zero_ignores_the_score_but_keeps_the_filter() {
    // "soft" has a PreferNoSchedule taint and more free cpu; "hard" has a NoSchedule taint.
    let taint = |effect: &str| json!({"taints": [{"key": "k", "value": "v", "effect": effect}]});
    let node = |name: &str, spec: Value, cpu: &str| {
        Arc::new(node_static(json!({
            "metadata": {"name": name},
            "spec": spec,
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}
        })))
    };
    let snap = Snapshot::new([
        node("clean", json!({}), "2"),
        node("soft", taint("PreferNoSchedule"), "16"),
        node("hard", taint("NoSchedule"), "64"),
    ]);
    let place = |config: SchedulerConfig| {
        let mut snap = snap.clone();
        let p = Arc::new(PodInfo::simple("ns", "p", 1000));
        let entity = QueuedEntity {
            tree: None,
            key: EntityKey::Pod(p.key.clone()),
            group: None,
            pods: vec![p],
            attempts: 0,
            timestamp: std::time::Instant::now(),
        };
        let d = Scheduler::new(config).schedule(&mut snap, &entity);
        d.bindings[0].node.to_string()
    };
    // TaintToleration (weight 3, 0 vs 100) outweighs the resource scores.
    assert_eq!(place(SchedulerConfig::default()), "clean");
    let mut config = SchedulerConfig::default();
    config.plugin_weights.taint_toleration = 0;
    assert!(
        !Profile::in_tree(&config)
            .score_plugins()
            .iter()
            .any(|(n, _)| *n == taint_toleration::NAME)
    );
    // Without it the emptier tolerable node wins; the NoSchedule one is still filtered out.
    assert_eq!(place(config), "soft");
}

// PreFilter extensions: AddPod/RemovePod on a PreFilter state must give the Filter outcomes
// that PreFilter recomputed on the changed snapshot gives.

const ZONES: [&str; 4] = ["a", "b", "c", ""];
const KEYS: [&str; 3] = ["zone", "rack", "kubernetes.io/hostname"];
const APPS: [&str; 2] = ["x", "y"];

/// A pod in the generated cluster: (namespace other?, app, anti-affinity (app, key)?,
/// affinity (app, key)?, deleting).
type PodGen = (bool, usize, Option<(usize, usize)>, Option<(usize, usize)>, bool);

fn pod_gen() -> impl Strategy<Value = PodGen> {
    (
        any::<bool>(),
        0..APPS.len(),
        prop::option::of((0..APPS.len(), 0..KEYS.len())),
        prop::option::weighted(0.3, (0..APPS.len(), 0..KEYS.len())),
        prop::bool::weighted(0.15),
    )
}

fn term(app: usize, key: usize) -> Value {
    json!({"labelSelector": {"matchLabels": {"app": APPS[app]}}, "topologyKey": KEYS[key]})
}

fn cluster_pod(name: &str, g: &PodGen, node: &str) -> PodInfo {
    let (other_ns, app, anti, aff, deleting) = *g;
    let mut affinity = json!({});
    if let Some((a, k)) = anti {
        affinity["podAntiAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution": [term(a, k)]});
    }
    if let Some((a, k)) = aff {
        affinity["podAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution": [term(a, k)]});
    }
    let mut p = pod_with(
        json!({"name": name, "namespace": if other_ns { "other" } else { "ns" }, "labels": {"app": APPS[app]}}),
        json!({"containers": [{"name": "c"}], "affinity": affinity}),
    );
    p.node_name = Some(node.into());
    p.deleting = deleting;
    p
}

/// The incoming pod: app, spread (key, maxSkew, app, minDomains, honor taints)?, required
/// affinity (app, key)?, required anti-affinity (app, key)?.
type IncomingGen = (
    usize,
    Option<(usize, i32, usize, Option<i32>, bool)>,
    Option<(usize, usize)>,
    Option<(usize, usize)>,
);

fn incoming_gen() -> impl Strategy<Value = IncomingGen> {
    (
        0..APPS.len(),
        prop::option::of((
            0..2usize,
            1i32..3,
            0..APPS.len(),
            prop::option::of(2i32..5),
            any::<bool>(),
        )),
        prop::option::of((0..APPS.len(), 0..KEYS.len())),
        prop::option::of((0..APPS.len(), 0..KEYS.len())),
    )
}

fn incoming(g: &IncomingGen) -> PodInfo {
    let (app, spread, aff, anti) = *g;
    let mut spec = json!({"containers": [{"name": "c"}], "affinity": {}});
    if let Some((key, skew, sel, min_domains, honor_taints)) = spread {
        let mut c = json!({"maxSkew": skew, "topologyKey": KEYS[key], "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": APPS[sel]}}});
        if let Some(m) = min_domains {
            c["minDomains"] = json!(m);
        }
        if honor_taints {
            c["nodeTaintsPolicy"] = json!("Honor");
        }
        spec["topologySpreadConstraints"] = json!([c]);
    }
    if let Some((a, k)) = aff {
        spec["affinity"]["podAffinity"] =
            json!({"requiredDuringSchedulingIgnoredDuringExecution": [term(a, k)]});
    }
    if let Some((a, k)) = anti {
        spec["affinity"]["podAntiAffinity"] =
            json!({"requiredDuringSchedulingIgnoredDuringExecution": [term(a, k)]});
    }
    pod_with(
        json!({"name": "incoming", "namespace": "ns", "labels": {"app": APPS[app]}}),
        spec,
    )
}

/// Nodes: (zone index into ZONES, "" = no zone label; rack; NoSchedule taint).
fn ext_nodes(spec: &[(usize, usize, bool)]) -> Vec<Arc<NodeStatic>> {
    spec.iter()
        .enumerate()
        .map(|(i, &(zone, rack, tainted))| {
            let name = format!("n{i}");
            let mut labels = json!({"rack": format!("r{rack}"), "kubernetes.io/hostname": name});
            if !ZONES[zone].is_empty() {
                labels["zone"] = json!(ZONES[zone]);
            }
            let spec = if tainted {
                json!({"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]})
            } else {
                json!({})
            };
            Arc::new(node_static(json!({
                "metadata": {"name": name, "labels": labels},
                "spec": spec,
                "status": {"allocatable": {"cpu": "64", "memory": "64Gi", "pods": "110"}}
            })))
        })
        .collect()
}

/// Filter outcome of one plugin: a skipped PreFilter passes every node.
fn outcome<P: FilterPlugin>(
    p: &P,
    st: &Option<P::PreFilterState>,
    pod: &PodInfo,
    node: &NodeInfo,
) -> Result<(), phalanx_scheduler::plugins::Rejection> {
    st.as_ref().map_or(Ok(()), |s| p.filter(s, pod, node))
}

/// An operation: add a new pod (spec, node index) or remove an existing one (index).
#[derive(Debug, Clone)]
enum Op {
    Add(PodGen, usize),
    Remove(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (pod_gen(), 0usize..8).prop_map(|(g, n)| Op::Add(g, n)),
        (0usize..16).prop_map(Op::Remove),
    ]
}

/// Applies `op` to `snap`; returns the pod and whether it was added, or None when the op does
/// not apply (no pod to remove).
fn apply(
    snap: &mut Snapshot,
    pods: &mut Vec<Arc<PodInfo>>,
    op: &Op,
    step: usize,
) -> Option<(Arc<PodInfo>, bool)> {
    match op {
        Op::Add(g, n) => {
            let node = format!("n{}", n % snap.len());
            let p = Arc::new(cluster_pod(&format!("added{step}"), g, &node));
            assert!(snap.add_pod(p.clone()));
            pods.push(p.clone());
            Some((p, true))
        }
        Op::Remove(i) => {
            if pods.is_empty() {
                return None;
            }
            let p = pods.remove(i % pods.len());
            assert!(snap.remove_pod(&p.key));
            Some((p, false))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn prefilter_extensions_match_recomputed_prefilter(
        nodes in prop::collection::vec((0..ZONES.len(), 0usize..2, prop::bool::weighted(0.2)), 1..7),
        existing in prop::collection::vec((pod_gen(), 0usize..8), 0..10),
        pod in incoming_gen(),
        ops in prop::collection::vec(op(), 1..5),
    ) {
        use phalanx_scheduler::plugins::inter_pod_affinity::InterPodAffinity;
        use phalanx_scheduler::plugins::pod_topology_spread::PodTopologySpread;
        let mut snap = Snapshot::new(ext_nodes(&nodes));
        let mut pods = Vec::new();
        for (i, (g, n)) in existing.iter().enumerate() {
            let p = Arc::new(cluster_pod(&format!("e{i}"), g, &format!("n{}", n % nodes.len())));
            snap.add_pod(p.clone());
            pods.push(p);
        }
        let pod = incoming(&pod);
        let profile = Profile::in_tree(&SchedulerConfig::default());
        let (spread, affinity) = (PodTopologySpread, InterPodAffinity);
        let mut spread_st = spread.pre_filter(&pod, &snap);
        let mut affinity_st = affinity.pre_filter(&pod, &snap);
        let mut cycle = profile.pre_filter(&pod, &snap);
        for (step, op) in ops.iter().enumerate() {
            let Some((other, added)) = apply(&mut snap, &mut pods, op, step) else { continue };
            let node = snap.node(snap.node_index(other.node_name.as_deref().unwrap()).unwrap());
            let (s_ext, a_ext) = (spread.pre_filter_extensions().unwrap(), affinity.pre_filter_extensions().unwrap());
            if added {
                s_ext.add_pod(&mut spread_st, &pod, &other, node).unwrap();
                a_ext.add_pod(&mut affinity_st, &pod, &other, node).unwrap();
                cycle.add_pod(&pod, &other, node).unwrap();
            } else {
                s_ext.remove_pod(&mut spread_st, &pod, &other, node).unwrap();
                a_ext.remove_pod(&mut affinity_st, &pod, &other, node).unwrap();
                cycle.remove_pod(&pod, &other, node).unwrap();
            }
            let spread_fresh = spread.pre_filter(&pod, &snap);
            let affinity_fresh = affinity.pre_filter(&pod, &snap);
            let cycle_fresh = profile.pre_filter(&pod, &snap);
            for n in snap.nodes() {
                prop_assert_eq!(
                    outcome(&spread, &spread_st, &pod, n), outcome(&spread, &spread_fresh, &pod, n),
                    "PodTopologySpread on {} after {:?}", n.name(), op
                );
                prop_assert_eq!(
                    outcome(&affinity, &affinity_st, &pod, n), outcome(&affinity, &affinity_fresh, &pod, n),
                    "InterPodAffinity on {} after {:?}", n.name(), op
                );
                prop_assert_eq!(cycle.filter(&pod, n), cycle_fresh.filter(&pod, n), "profile on {}", n.name());
            }
        }
    }
}

/// Tenant quantities as large as `9E` must neither panic nor wrap: two containers of 9E memory made a negative
/// request that fitted on any node before saturating arithmetic; now the pod is invalid and says why.
#[test]
fn huge_requests_are_rejected_not_wrapped() {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "huge", "namespace": "ns" },
        "spec": { "containers": [
            { "name": "a", "image": "x", "resources": { "requests": { "memory": "9E" } } },
            { "name": "b", "image": "x", "resources": { "requests": { "memory": "9E" } } },
        ]}
    }))
    .expect("valid pod");
    let info = PodInfo::from_pod(&pod, None);
    let msg = info.invalid.clone().expect("invalid");
    assert!(msg.contains("memory") && msg.contains("can represent"), "{msg}");
    let snap = Snapshot::new(vec![Arc::new(NodeStatic::simple("n", 4000, 1 << 30, &[]))]);
    let mut ps =
        phalanx_scheduler::schedule_one::PodScheduler::new(&phalanx_scheduler::SchedulerConfig::default());
    let r = ps.schedule_pod(&snap, &info, None, &mut Default::default());
    assert!(
        matches!(r, phalanx_scheduler::schedule_one::PodResult::Error(_)),
        "{r:?}"
    );
    // A node that declares absurd capacity counts as the bound, and filling it cannot wrap.
    let big: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "big" },
        "status": { "allocatable": { "cpu": "9E", "memory": "9Ei", "pods": "110" } }
    }))
    .expect("valid node");
    let ns = NodeStatic::from_node(&big).expect("converts");
    assert_eq!(ns.allocatable.memory, phalanx_scheduler::resources::MAX_QUANTITY);
}
