//! The `WaitingForMembers` Warning (issue 35, defect 13) on a real control plane (kube-apiserver + etcd +
//! kube-controller-manager + kwok from phalanx-testenv), with the controllers' threshold at 2 s: a gang short of
//! members gets one Warning per wait, naming the counts; a new member starts a new wait; a gang whose members are
//! all there gets none.
//!
//! Run: `cargo test -p phalanx-controllers --test members_wait_cluster`

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use phalanx_api::v1beta1::PodGroup;
use phalanx_controllers::members_wait::WAITING_FOR_MEMBERS;
use phalanx_controllers::{ControllerOptions, run_controllers};
use phalanx_store::{Store, StoreConfig};
use phalanx_testenv::{FakeNode, TestEnv, bind_pod, create_namespace, wait_for};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The controllers' threshold in this binary.
const THRESHOLD: Duration = Duration::from_secs(2);

/// A generous deadline for anything the controllers do (the threshold included) on a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(60);

static CONTROLLERS: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Starts the controllers once per binary on their own runtime and waits for their store.
fn controllers() -> std::result::Result<(), String> {
    CONTROLLERS
        .get_or_init(|| {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
                )
                .with_test_writer()
                .try_init();
            let env = TestEnv::shared();
            let (tx, rx) = std::sync::mpsc::channel::<std::result::Result<(), String>>();
            std::thread::spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(format!("runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    let setup = async {
                        let client = env.client().await?;
                        phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
                        let store = Store::start(client.clone(), StoreConfig::default());
                        let mut registry = Registry::default();
                        let (leader_tx, leader_rx) = watch::channel(true);
                        let fut = run_controllers(
                            client,
                            store.clone(),
                            ControllerOptions {
                                instance: Some("members-wait-test".into()),
                                members_wait_warning: THRESHOLD,
                                // As in `phalanx run`: a group that only waits gets no status write of its own,
                                // so the warning must not depend on one.
                                initially_scheduled: true,
                                ..Default::default()
                            },
                            leader_rx,
                            CancellationToken::new(),
                            &mut registry,
                        );
                        tokio::spawn(async move {
                            let _keep = leader_tx;
                            if let Err(e) = fut.await {
                                tracing::error!(error = %e, "controllers ended with an error");
                            }
                        });
                        tokio::time::timeout(Duration::from_secs(120), store.wait_ready())
                            .await
                            .context("store not ready after 120 s")?;
                        anyhow::Ok(())
                    };
                    match setup.await {
                        Ok(()) => {
                            let _ = tx.send(Ok(()));
                            std::future::pending::<()>().await;
                        }
                        Err(e) => {
                            let _ = tx.send(Err(format!("{e:#}")));
                        }
                    }
                });
            });
            rx.recv()
                .unwrap_or_else(|e| Err(format!("controller thread died: {e}")))
        })
        .clone()
}

async fn gang(client: &Client, ns: &str, name: &str, min_count: i32) -> Result<()> {
    let pg: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
        "metadata": { "name": name },
        "spec": { "schedulingPolicy": { "gang": { "minCount": min_count } } }
    }))?;
    Api::<PodGroup>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pg)
        .await
        .with_context(|| format!("creating PodGroup {name}"))?;
    Ok(())
}

async fn member(client: &Client, ns: &str, name: &str, group: &str) -> Result<()> {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "labels": { "scheduling.phalanx.dev/pod-group": group } },
        "spec": {
            "schedulerName": "phalanx-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": "1m" } } }]
        }
    }))?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("creating pod {name}"))?;
    Ok(())
}

/// The `WaitingForMembers` events regarding `group`: (type, note, series count), oldest first.
async fn warnings(client: &Client, ns: &str, group: &str) -> Result<Vec<(String, String, i32)>> {
    let mut events: Vec<Event> = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(WAITING_FOR_MEMBERS)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(group)
        })
        .collect();
    events.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    Ok(events
        .into_iter()
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.note.unwrap_or_default(),
                e.series.map_or(1, |s| s.count),
            )
        })
        .collect())
}

/// Waits until `group` has `n` `WaitingForMembers` events; returns them.
async fn wait_warnings(
    client: &Client,
    ns: &str,
    group: &str,
    n: usize,
) -> Result<Vec<(String, String, i32)>> {
    let seen = Mutex::new(Vec::new());
    let res = wait_for(
        &format!("{n} {WAITING_FOR_MEMBERS} event(s) on PodGroup {ns}/{group}"),
        WAIT,
        || {
            let seen = &seen;
            async move {
                let got = warnings(client, ns, group).await?;
                seen.lock().unwrap_or_else(|e| e.into_inner()).clone_from(&got);
                Ok((got.len() >= n).then_some(got))
            }
        },
    )
    .await;
    res.with_context(|| {
        format!(
            "events seen: {:?}",
            seen.lock().unwrap_or_else(|e| e.into_inner())
        )
    })
}

/// Waits until the controller has written `scheduledPods: n` on `group`: a reconcile of it after that bind.
async fn wait_scheduled(client: &Client, ns: &str, group: &str, n: i64) -> Result<()> {
    let api = Api::<PodGroup>::namespaced(client.clone(), ns);
    let last = Mutex::new(None);
    let res = wait_for(
        &format!("PodGroup {ns}/{group} status.scheduledPods = {n}"),
        WAIT,
        || {
            let (api, last) = (api.clone(), &last);
            async move {
                let pg = serde_json::to_value(api.get(group).await?)?;
                let got = pg["status"]["scheduledPods"].as_i64();
                *last.lock().unwrap_or_else(|e| e.into_inner()) = got;
                Ok((got == Some(n)).then_some(()))
            }
        },
    )
    .await;
    res.with_context(|| {
        format!(
            "last scheduledPods: {:?}",
            last.lock().unwrap_or_else(|e| e.into_inner())
        )
    })
}

fn check_note(note: &str, present: i32, min: i32) -> Result<()> {
    let head = format!("{present} of {min} pods present (minCount {min}); no new member for ");
    let rest = note
        .strip_prefix(&head)
        .with_context(|| format!("note: {note}"))?;
    let secs: u64 = rest
        .strip_suffix('s')
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("note's duration: {note}"))?;
    ensure!(
        secs >= THRESHOLD.as_secs(),
        "waited less than the threshold: {note}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_short_of_members_gets_one_warning_per_wait_and_a_full_one_none() -> Result<()> {
    tokio::task::spawn_blocking(controllers)
        .await?
        .map_err(|e| anyhow::anyhow!("controllers: {e}"))?;
    let client = TestEnv::shared().client().await?;
    let ns = create_namespace(&client, "members-wait").await?;
    let node = format!("{ns}-n0");
    FakeNode::new(node.clone())
        .cpu("8")
        .memory("32Gi")
        .pods(110)
        .test_namespace(&ns)
        .create(&client)
        .await?;
    // "short": 2 of minCount 4 pods; "full": 2 of minCount 2 (it waits for a node, not for members).
    gang(&client, &ns, "short", 4).await?;
    gang(&client, &ns, "full", 2).await?;
    for (pod, group) in [
        ("short-0", "short"),
        ("short-1", "short"),
        ("full-0", "full"),
        ("full-1", "full"),
    ] {
        member(&client, &ns, pod, group).await?;
    }
    let full_complete = Instant::now();

    let first = wait_warnings(&client, &ns, "short", 1).await?;
    let (type_, note, _) = &first[0];
    ensure!(type_ == "Warning", "event type {type_}: {first:?}");
    check_note(note, 2, 4)?;

    // Once per wait: a reconcile after the warning (a bind, which the counters show) sends no second one.
    bind_pod(&client, &ns, "short-0", &node).await?;
    wait_scheduled(&client, &ns, "short", 1).await?;
    let again = warnings(&client, &ns, "short").await?;
    ensure!(
        again.len() == 1 && again[0].2 == 1,
        "one warning per wait, not repeated: {again:?}"
    );

    // A gang with all its members: reconciled after the threshold passed (the bind below, shown by its counters),
    // and no warning.
    // The short gang's warning and counters came first, so the threshold has passed for the full one too.
    ensure!(
        full_complete.elapsed() >= THRESHOLD,
        "the full gang's threshold has not passed yet: {:?}",
        full_complete.elapsed()
    );
    bind_pod(&client, &ns, "full-0", &node).await?;
    wait_scheduled(&client, &ns, "full", 1).await?;
    let full = warnings(&client, &ns, "full").await?;
    ensure!(
        full.is_empty(),
        "a gang with minCount members got a warning: {full:?}"
    );

    // A new member starts a new wait, with its own warning and counts.
    member(&client, &ns, "short-2", "short").await?;
    let second = wait_warnings(&client, &ns, "short", 2).await?;
    let (type_, note, _) = &second[1];
    ensure!(type_ == "Warning", "event type {type_}: {second:?}");
    check_note(note, 3, 4)?;
    Ok(())
}
