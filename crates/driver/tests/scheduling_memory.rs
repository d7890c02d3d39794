//! Per-group state of the scheduling loop is pruned when groups go away, on a real control plane (phalanx-testenv:
//! kube-apiserver, etcd, KCM v1.37.2 and kwok). Alone in its binary because the loop tracks every PodGroup of the
//! cluster, so another test's groups would move the figures it checks.

mod common;

use std::time::Duration;

use anyhow::ensure;
use kube::api::DeleteParams;
use phalanx_testenv::wait_for;

use common::cluster::{setup, tracked};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_state_is_pruned_when_groups_are_deleted() -> anyhow::Result<()> {
    let ctx = setup("memory").await?;
    for i in 0..2 {
        ctx.node(&format!("n{i}"), "16").await?;
    }
    let sched = ctx.start();
    let mut pods = Vec::new();
    for g in 0..10 {
        let name = format!("g{g}");
        ctx.pod_group_with(&name, 2, None, serde_json::Value::Null)
            .await?;
        pods.extend(ctx.pods_of(&name, 2, "1").await?);
    }
    ctx.wait_bound(&pods).await?;
    for g in 0..10 {
        ctx.wait_pg(&format!("g{g}"), "True", "Scheduled").await?;
    }
    let m = sched.metrics();
    // The 2 nodes existed before the scheduler started: they are counted from its first resync, not only once a
    // watch event about them arrives.
    for (kind, at_least) in [
        ("groups", 10.0),
        ("group_conditions", 10.0),
        ("pods", 20.0),
        ("nodes", 2.0),
    ] {
        let n = tracked(&m, kind).unwrap_or(0.0);
        ensure!(
            n >= at_least,
            "{kind}: {n} tracked while 10 groups run, expected at least {at_least}"
        );
    }
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    for p in &pods {
        ctx.pods().delete(p, &dp).await?;
    }
    for g in 0..10 {
        ctx.pod_groups().delete(&format!("g{g}"), &dp).await?;
    }
    wait_for("group state pruned", Duration::from_secs(60), || {
        let m = sched.metrics();
        async move {
            let left: Vec<(&str, f64)> = ["groups", "group_conditions", "pods", "nominated"]
                .into_iter()
                .map(|k| (k, tracked(&m, k).unwrap_or(f64::NAN)))
                .collect();
            Ok(left.iter().all(|(_, n)| *n == 0.0).then_some(()))
        }
    })
    .await?;
    sched.stop().await
}
