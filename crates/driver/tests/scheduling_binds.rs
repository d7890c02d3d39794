//! Binds of a placed gang on a real control plane (phalanx-testenv: kube-apiserver, etcd, KCM v1.37.2 and kwok):
//! the binds beyond `bind_concurrency` wait in the loop's queue, not as parked tasks, and all of them go through;
//! the per-pod `Scheduled` event can be turned off.

mod common;

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};

use common::cluster::{SETTLE, node_of, setup, tracked};

/// A gang of 24 with one bind permit: the cycle decides 24 binds at once; 23 of them must wait as queue entries
/// (`binds_waiting`) while the loop runs at most a handful of tasks (the one bind, condition writes). Before the
/// queue, each bind was spawned as a task waiting for the permit, so `tasks` reached 24.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binds_beyond_the_permits_wait_in_the_queue_not_as_tasks() -> anyhow::Result<()> {
    const GANG: usize = 24;
    let ctx = setup("binds").await?;
    ctx.node("n0", "16").await?;
    ctx.node("n1", "16").await?;
    ctx.pod_group_with("g", GANG as i32, None, serde_json::Value::Null)
        .await?;
    let names = ctx.pods_of("g", GANG, "1").await?;
    let sched = ctx.start_with(|o| o.bind_concurrency = 1);
    let (mut max_waiting, mut max_tasks) = (0.0f64, 0.0f64);
    let deadline = Instant::now() + SETTLE;
    loop {
        let m = sched.metrics();
        max_waiting = max_waiting.max(tracked(&m, "binds_waiting").unwrap_or(0.0));
        max_tasks = max_tasks.max(tracked(&m, "tasks").unwrap_or(0.0));
        let pods = ctx.pods().list(&Default::default()).await?;
        let bound = pods.items.iter().filter(|p| node_of(p).is_some()).count();
        if bound == GANG {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{bound} of {GANG} pods bound after {SETTLE:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    ctx.wait_bound(&names).await?;
    ensure!(
        max_waiting >= (GANG / 2) as f64,
        "binds_waiting peaked at {max_waiting}; with 1 permit and {GANG} binds decided at once most must wait"
    );
    ensure!(
        max_tasks <= 6.0,
        "tasks peaked at {max_tasks}: binds waiting for a permit must not be tasks"
    );
    // Nothing is left waiting once the gang is bound.
    phalanx_testenv::wait_for("bind queue empty", Duration::from_secs(10), || {
        let m = sched.metrics();
        async move { Ok((tracked(&m, "binds_waiting") == Some(0.0)).then_some(())) }
    })
    .await
    .context("binds_waiting did not return to 0")?;
    sched.stop().await
}

/// `scheduled_events: false` (the config file's `binder.scheduledEvents`) binds as usual but writes no `Scheduled`
/// event; the default writes one per pod (`s1_gang_all_fit` in `scheduling_cluster.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_events_can_be_turned_off() -> anyhow::Result<()> {
    let ctx = setup("noevents").await?;
    ctx.node("n0", "8").await?;
    ctx.pod_group_with("g", 3, None, serde_json::Value::Null).await?;
    let names = ctx.pods_of("g", 3, "1").await?;
    let sched = ctx.start_with(|o| o.scheduled_events = false);
    ctx.wait_bound(&names).await?;
    ctx.wait_pg("g", "True", "Scheduled").await?;
    // A `Scheduled` event is written by the bind's task after the bind: once no task is left, every event that
    // would have been written has been.
    ctx.wait_idle(&sched).await?;
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(ctx.client.clone(), &ctx.ns);
    let scheduled: Vec<String> = events
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Scheduled"))
        .filter_map(|e| e.regarding.as_ref()?.name.clone())
        .collect();
    ensure!(
        scheduled.is_empty(),
        "Scheduled events were written with scheduled_events off: {scheduled:?}"
    );
    sched.stop().await
}
