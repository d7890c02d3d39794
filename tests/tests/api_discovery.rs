//! `phalanx run` on an API server that starts serving upstream's Workload API (`scheduling.k8s.io/v1beta1`
//! PodGroups) after Phalanx started: the watches are chosen by discovery at start, so a later discovery round sees
//! the change and ends the process with an error that names it (its Deployment starts it again); the new process
//! watches upstream's PodGroups and binds a native gang. The API server is the real one of a dedicated control
//! plane, restarted with the gates and `--runtime-config` an administrator would add
//! (`hack/cluster.sh restart kube-apiserver --upstream-workload-api`).

use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1beta1::PodGroup as NativePodGroup;
use kube::api::PostParams;
use kube::{Api, Client};
use phalanx::RunOptions;
use phalanx_e2e::http_get;
use phalanx_testenv::{FakeNode, TestEnv, create_namespace, wait_for};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long a step may take on a loaded machine: the API server's restart, a discovery round, a bind.
const PATIENCE: Duration = Duration::from_secs(180);

/// `phalanx run` in this process, discovering every second; returns once it answers `/readyz` with 200 (its store
/// synced, discovery decided).
async fn start(
    client: &Client,
    ns: &str,
) -> anyhow::Result<(CancellationToken, JoinHandle<anyhow::Result<()>>)> {
    let shutdown = CancellationToken::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let opts = RunOptions {
        scheduler_name: format!("discovery-{ns}"),
        node_selector: format!("{}={ns}", phalanx_testenv::TEST_NS_LABEL),
        api_discovery_interval: Duration::from_secs(1),
        bound_addr: Some(tx),
        ..RunOptions::default()
    };
    let task = tokio::spawn(phalanx::run(client.clone(), opts, shutdown.clone()));
    let addr = tokio::time::timeout(PATIENCE, rx)
        .await
        .context("server start")??;
    wait_for("phalanx run ready", PATIENCE, || async move {
        Ok((http_get(addr, "/readyz").await?.0 == 200).then_some(()))
    })
    .await?;
    Ok((shutdown, task))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_api_turned_on_later_restarts_the_process_and_then_binds_native_gangs() -> anyhow::Result<()>
{
    let minor = tokio::task::spawn_blocking(TestEnv::binaries_minor).await??;
    if minor < 37 {
        eprintln!(
            "1.{minor}: upstream's Workload API before 1.37 is not scheduled by Phalanx; nothing to check"
        );
        return Ok(());
    }
    let env = tokio::task::spawn_blocking(|| TestEnv::dedicated("api-discovery", &[])).await??;
    let result = scenario(&env).await;
    tokio::task::spawn_blocking(move || drop(env)).await?;
    result
}

async fn scenario(env: &TestEnv) -> anyhow::Result<()> {
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let ns = create_namespace(&client, "discovery").await?;

    // 1. Started without upstream's API: the process runs, and keeps running while nothing changes.
    let (shutdown, task) = start(&client, &ns).await?;
    ensure!(
        !task.is_finished(),
        "phalanx run ended before anything changed: {:?}",
        task.await
    );

    // 2. The administrator turns the API on: the next discovery round ends the process, naming the change.
    tokio::task::block_in_place(|| env.restart_apiserver_with_upstream_api())?;
    let ended = tokio::time::timeout(PATIENCE, task)
        .await
        .context("phalanx run did not end after the API server began serving scheduling.k8s.io/v1beta1")??;
    let err = ended.expect_err("the process ends with an error, so that it is restarted");
    let msg = format!("{err:#}");
    ensure!(
        msg.contains("scheduling.k8s.io/v1beta1 PodGroups: now served"),
        "the error does not name the change: {msg}"
    );
    shutdown.cancel();

    // 3. Started again (as its Deployment would), it schedules a native gang.
    let client = env.client().await?;
    FakeNode::new(format!("{ns}-n0"))
        .cpu("4")
        .memory("16Gi")
        .pods(110)
        .test_namespace(&ns)
        .create(&client)
        .await?;
    let (shutdown, task) = start(&client, &ns).await?;
    let group: NativePodGroup = serde_json::from_value(json!({
        "metadata": { "name": "gang" },
        "spec": { "schedulingPolicy": { "gang": { "minCount": 2 } } },
    }))?;
    Api::<NativePodGroup>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &group)
        .await
        .context("creating a scheduling.k8s.io PodGroup (served after the restart)")?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for i in 0..2 {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": format!("m{i}") },
            "spec": {
                "schedulerName": format!("discovery-{ns}"),
                "schedulingGroup": { "podGroupName": "gang" },
                "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": "1" } } }],
            },
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    wait_for("both members of the native gang bound", PATIENCE, || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&Default::default()).await?;
            let bound = list
                .items
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .count();
            Ok((bound == 2).then_some(()))
        }
    })
    .await?;
    ensure!(
        !task.is_finished(),
        "the restarted process ended: {:?}",
        task.await
    );
    shutdown.cancel();
    task.await??;
    Ok(())
}
