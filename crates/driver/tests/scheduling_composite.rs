//! CompositePodGroup hierarchies through the scheduling driver on a real control plane (phalanx-testenv:
//! kube-apiserver, etcd, KCM v1.37.2 and kwok). Scenario numbers are those of docs/testing.md ("Scenario index"),
//! from kubernetes `test/integration/scheduler/podgroup/cpg_test.go`, `TestCPGScheduling`. The harness
//! (`common/cluster.rs`) gives each test its own namespace, nodes and scheduler.

mod common;

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use serde_json::json;

use common::cluster::setup;

/// S42: root gang(minGroupCount 2) over pg1, pg2, pg3 (gang 3 each); one pg3 pod needs 100 CPU. pg1 and pg2 bind,
/// all of pg3 stays pending, root True/Scheduled, pg3 False/Unschedulable.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/cpg_test.go`, `TestCPGScheduling`, case
/// "TestCPGMinGroupCount".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s42_min_group_count_below_children() -> anyhow::Result<()> {
    let ctx = setup("cpg-s42").await?;
    ctx.node("node", "20").await?;
    let sched = ctx.start();
    ctx.cpg("root", Some(2), None).await?;
    for pg in ["pg1", "pg2", "pg3"] {
        ctx.pod_group(pg, 3, "root").await?;
    }
    let mut pg1 = ctx.pods_of("pg1", 3, "1").await?;
    let pg2 = ctx.pods_of("pg2", 3, "1").await?;
    let mut pg3 = ctx.pods_of("pg3", 2, "1").await?;
    // The big pg3 member: same label, 100 CPU.
    let big: Pod = serde_json::from_value(json!({
        "metadata": { "name": "pg3-big", "labels": { phalanx_api::labels::POD_GROUP: "pg3" } },
        "spec": {
            "schedulerName": ctx.sched,
            "terminationGracePeriodSeconds": 0,
            "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": "100" } } }],
        }
    }))?;
    ctx.pods().create(&PostParams::default(), &big).await?;
    pg3.push("pg3-big".into());

    pg1.extend(pg2);
    ctx.wait_bound(&pg1).await?;
    ctx.wait_cpg("root", "True", "Scheduled").await?;
    ctx.wait_pg("pg1", "True", "Scheduled").await?;
    ctx.wait_pg("pg2", "True", "Scheduled").await?;
    let c = ctx.wait_pg("pg3", "False", "Unschedulable").await?;
    ensure!(
        c.message.contains("minCount (3) cannot be satisfied"),
        "pg3 message: {}",
        c.message
    );
    ensure!(c.observed_generation == Some(1), "observedGeneration set: {c:?}");
    let m = ctx.wait_pod_unschedulable("pg3-big").await?;
    ensure!(m.contains("Insufficient cpu"), "pg3-big message: {m}");
    ctx.stays_unbound(&pg3, Duration::from_secs(2)).await?;
    sched.stop().await
}

/// S41-lite: a two-level tree where one subtree fails. root gang(2) → sub1 gang(2) → {a1, a2}; sub2 gang(2) →
/// {b1, b2 (does not fit)}; plus pg c directly under root. sub2 fails, so b1 stays pending although it fits; the
/// root still succeeds with sub1 and c.
///
/// A two-level form of upstream kubernetes `test/integration/scheduler/podgroup/cpg_test.go`, `TestCPGScheduling`,
/// case "TestCPGHierarchicalScheduling" (S41, whose pg6 stays pending for the same reason).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s41_lite_failing_subtree_binds_nothing() -> anyhow::Result<()> {
    let ctx = setup("cpg-s41").await?;
    ctx.node("node", "20").await?;
    let sched = ctx.start();
    ctx.cpg("root", Some(2), None).await?;
    ctx.cpg("sub1", Some(2), Some("root")).await?;
    ctx.cpg("sub2", Some(2), Some("root")).await?;
    for (pg, parent) in [
        ("a1", "sub1"),
        ("a2", "sub1"),
        ("b1", "sub2"),
        ("b2", "sub2"),
        ("c", "root"),
    ] {
        ctx.pod_group(pg, 2, parent).await?;
    }
    // sub2's pods first, so that every cycle sees sub2 complete (the tree may run as soon as two children are ready).
    let b1 = ctx.pods_of("b1", 2, "1").await?;
    let b2 = ctx.pods_of("b2", 2, "100").await?;
    let mut fit = Vec::new();
    for pg in ["a1", "a2", "c"] {
        fit.extend(ctx.pods_of(pg, 2, "1").await?);
    }

    ctx.wait_bound(&fit).await?;
    for g in ["root", "sub1"] {
        ctx.wait_cpg(g, "True", "Scheduled").await?;
    }
    let sub2 = ctx.wait_cpg("sub2", "False", "Unschedulable").await?;
    // sub2's own failure; upstream appends the PostFilter (preemption) outcome when the root as a whole failed
    // ("; pod group preemption: No preemption victims found for incoming preemptor", nothing of lower priority
    // runs). Whether the last cycle saw the root fail depends on when `c`'s pods arrived: a tree may run as soon
    // as two children are ready, so both forms are right.
    const FAILURE: &str = "minCount (2) cannot be satisfied: 1 scheduled, 0 remaining";
    const NO_VICTIMS: &str = "; pod group preemption: No preemption victims found for incoming preemptor";
    let is_failure = |m: &str| m == FAILURE || m == format!("{FAILURE}{NO_VICTIMS}");
    ensure!(is_failure(&sub2.message), "sub2 message: {}", sub2.message);
    for g in ["a1", "a2", "c"] {
        ctx.wait_pg(g, "True", "Scheduled").await?;
    }
    // b1 fits on its own but its parent failed: it and its pods carry sub2's failure.
    let b1c = ctx.wait_pg("b1", "False", "Unschedulable").await?;
    ensure!(
        is_failure(&b1c.message),
        "b1 carries sub2's failure: {}",
        b1c.message
    );
    ctx.wait_pg("b2", "False", "Unschedulable").await?;
    let m = ctx.wait_pod_unschedulable(&b1[0]).await?;
    ensure!(is_failure(&m), "b1 pod message: {m}");
    let mut pending = b1.clone();
    pending.extend(b2);
    ctx.stays_unbound(&pending, Duration::from_secs(2)).await?;
    sched.stop().await
}

/// The crash window between binds and condition writes, for a CompositePodGroup tree: a tree whose pods were all
/// bound by a scheduler that died before writing conditions gets `CompositePodGroupInitiallyScheduled=True` on the
/// root and `PodGroupInitiallyScheduled=True` on its leaves from the next scheduler, though no cycle runs for it.
/// Before the fix only standalone PodGroups were caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_tree_without_conditions_is_caught_up_after_restart() -> anyhow::Result<()> {
    let cx = setup("treecatchup").await?;
    let node = cx.node("n", "8").await?;
    cx.cpg("root", Some(2), None).await?;
    cx.pod_group("a", 2, "root").await?;
    cx.pod_group("b", 1, "root").await?;
    let mut pods = cx.pods_of("a", 2, "1").await?;
    pods.extend(cx.pods_of("b", 1, "1").await?);
    for p in &pods {
        phalanx_testenv::bind_pod(&cx.client, &cx.ns, p, &node).await?;
    }
    let s = cx.start();
    cx.wait_cpg("root", "True", "Scheduled").await?;
    cx.wait_pg("a", "True", "Scheduled").await?;
    cx.wait_pg("b", "True", "Scheduled").await?;
    s.stop().await
}
