//! Gangs without hand-written PodGroups (issue 16), on a real control plane (kube-apiserver + etcd +
//! kube-controller-manager v1.37.2 + kwok from phalanx-testenv): the real Job, StatefulSet and garbage-collector
//! controllers create and delete the pods, Phalanx's owner integration creates the Workload and PodGroup, and an
//! in-process scheduler (phalanx-driver) binds the pods.
//!
//! One controller instance runs for the whole binary on a background runtime (as the operator does; controllers
//! are namespace-agnostic). Each test starts its own scheduler named `phalanx-<namespace>` that considers only the
//! test's nodes, so tests run in parallel without sharing capacity.
//!
//! Run: `cargo test -p phalanx-controllers --test owner_integration`

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use phalanx_api::owners::{GANG, GANG_MIN_COUNT};
use phalanx_api::v1beta1::{PodGroup, Workload};
use phalanx_controllers::{ControllerOptions, run_controllers};
use phalanx_driver::SchedulerOptions;
use phalanx_store::{Store, StoreConfig};
use phalanx_testenv::{FakeNode, TEST_NS_LABEL, TestEnv, create_namespace, wait_for};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(90);

/// The controllers' metrics registry, once they run.
type Metrics = Arc<Mutex<Registry>>;

static CONTROLLERS: OnceLock<std::result::Result<Metrics, String>> = OnceLock::new();

/// Starts the controllers once per binary on their own runtime and waits for their store; returns their
/// metrics.
fn controllers() -> std::result::Result<Metrics, String> {
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
            let (tx, rx) = std::sync::mpsc::channel::<std::result::Result<Metrics, String>>();
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
                                instance: Some("owner-integration-test".into()),
                                // Each test's scheduler is `phalanx-<namespace>`.
                                scheduler_names: vec!["phalanx-*".into()],
                                // As in `phalanx run`: the schedulers below leave the condition to us.
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
                        anyhow::Ok(Arc::new(Mutex::new(registry)))
                    };
                    match setup.await {
                        Ok(registry) => {
                            let _ = tx.send(Ok(registry));
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

/// One test's namespace, client and scheduler.
struct Ctx {
    client: Client,
    ns: String,
    sched: String,
    shutdown: CancellationToken,
    /// The scheduler's metrics (`scheduler_schedule_attempts_total`, `scheduler_tracked_objects{kind}`).
    sched_metrics: Arc<Registry>,
    /// The controllers' metrics (`controller_reconciles_total{controller}`).
    controller_metrics: Metrics,
    /// Nodes added by [`Ctx::wake`] so far (their names count up).
    wakes: AtomicUsize,
}

impl Drop for Ctx {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn setup(prefix: &str, nodes: usize, cpu: &str) -> Result<Ctx> {
    let controller_metrics = tokio::task::spawn_blocking(controllers)
        .await?
        .map_err(|e| anyhow::anyhow!("controllers: {e}"))?;
    let client = TestEnv::shared().client().await?;
    let ns = create_namespace(&client, prefix).await?;
    for i in 0..nodes {
        FakeNode::new(format!("{ns}-n{i}"))
            .cpu(cpu)
            .memory("32Gi")
            .pods(110)
            .test_namespace(&ns)
            .create(&client)
            .await?;
    }
    let sched = format!("phalanx-{ns}");
    let shutdown = CancellationToken::new();
    let sched_metrics = start_scheduler(&client, &ns, &sched, &shutdown);
    Ok(Ctx {
        client,
        ns,
        sched,
        shutdown,
        sched_metrics,
        controller_metrics,
        wakes: AtomicUsize::new(0),
    })
}

/// Starts an in-process scheduler named `name` that considers the nodes of the test namespace `ns` only, until
/// `shutdown`; returns its metrics registry.
fn start_scheduler(client: &Client, ns: &str, name: &str, shutdown: &CancellationToken) -> Arc<Registry> {
    let store = Store::start(client.clone(), StoreConfig::default());
    let (tx, rx) = watch::channel(true);
    let mut registry = Registry::default();
    let fut = phalanx_driver::run(
        client.clone(),
        store,
        SchedulerOptions {
            scheduler_name: name.to_owned(),
            node_selector: Some(format!("{TEST_NS_LABEL}={ns}")),
            // As in `phalanx run`: the controllers above write it with their counters.
            initially_scheduled_by_controllers: true,
            ..SchedulerOptions::default()
        },
        rx,
        shutdown.clone(),
        &mut registry,
    );
    let registry = Arc::new(registry);
    let keep = registry.clone();
    tokio::spawn(async move {
        let _keep = (tx, keep);
        if let Err(e) = fut.await {
            tracing::error!(error = %e, "scheduler ended with an error");
        }
    });
    registry
}

/// Sum of the samples of `metric` whose labels contain `label` in a registry's text exposition (0 when absent).
fn sample(registry: &Registry, metric: &str, label: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap_or_default();
    let (braces, plain) = (format!("{metric}{{"), format!("{metric} "));
    text.lines()
        .filter(|l| (l.starts_with(&braces) || l.starts_with(&plain)) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn pod_template(sched: &str, cpu: &str, restart: &str) -> Value {
    json!({
        "metadata": { "labels": { "app": "gang" } },
        "spec": {
            "schedulerName": sched,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 0,
            "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": cpu } } }],
        }
    })
}

impl Ctx {
    /// Scheduling cycles the test's scheduler has run (`scheduler_schedule_attempts_total`, every result).
    fn attempts(&self) -> f64 {
        sample(&self.sched_metrics, "scheduler_schedule_attempts_total", "")
    }

    /// Adds a 100m node (too small for any pod of these tests) and waits until the test's scheduler has run a
    /// scheduling cycle after it, then until nothing it decided is still in flight (`scheduler_tracked_objects`
    /// `binds_waiting` and `tasks` at 0, refreshed on every pass of its loop): the positive sign that it has retried
    /// with the cluster as it is now, before a check that something was not bound. A node event wakes every
    /// unschedulable entity, as upstream's `NodeAdd` moves unschedulable pods back to the active queue (kubernetes
    /// `pkg/scheduler/backend/queue/scheduling_queue.go`).
    async fn wake(&self) -> Result<()> {
        let before = self.attempts();
        let i = self.wakes.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}-wake-{i}", self.ns);
        FakeNode::new(&name)
            .cpu("100m")
            .memory("1Gi")
            .pods(110)
            .test_namespace(&self.ns)
            .create(&self.client)
            .await?;
        wait_for(
            &format!("a scheduling cycle after node {name} was added (attempts were {before})"),
            WAIT,
            || {
                let now = self.attempts();
                async move { Ok((now > before).then_some(())) }
            },
        )
        .await?;
        let last = Mutex::new(String::new());
        let res = wait_for("nothing the scheduler decided still in flight", WAIT, || {
            let tracked = |kind: &str| {
                sample(
                    &self.sched_metrics,
                    "scheduler_tracked_objects",
                    &format!("kind=\"{kind}\""),
                )
            };
            let (waiting, tasks) = (tracked("binds_waiting"), tracked("tasks"));
            *last.lock().unwrap_or_else(PoisonError::into_inner) =
                format!("binds_waiting {waiting}, tasks {tasks}");
            async move { Ok((waiting == 0.0 && tasks == 0.0).then_some(())) }
        })
        .await;
        res.map_err(|e| e.context(last.lock().unwrap_or_else(PoisonError::into_inner).clone()))
    }

    /// `controller_reconciles_total{controller}` of the shared controllers now.
    fn reconciles(&self, controller: &str) -> f64 {
        let registry = self
            .controller_metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sample(
            &registry,
            "controller_reconciles_total",
            &format!("controller=\"{controller}\""),
        )
    }

    fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), &self.ns)
    }
    fn groups(&self) -> Api<PodGroup> {
        Api::namespaced(self.client.clone(), &self.ns)
    }
    fn workloads(&self) -> Api<Workload> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// A Job of `parallelism` pods of `cpu` each; `annotations` on the Job, none on its pod template.
    async fn job(
        &self,
        name: &str,
        parallelism: i32,
        cpu: &str,
        annotations: &[(&str, &str)],
        suspend: bool,
    ) -> Result<Job> {
        let ann: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        let job: Job = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": { "name": name, "annotations": ann },
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "completionMode": "Indexed",
                "suspend": suspend,
                "template": pod_template(&self.sched, cpu, "Never"),
            }
        }))?;
        self.jobs()
            .create(&PostParams::default(), &job)
            .await
            .with_context(|| format!("creating Job {name}"))
    }

    /// Pods of the owner named `owner` (by controller reference): `(total, bound)`.
    async fn pods_of(&self, owner: &str) -> Result<(usize, usize)> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let list = pods.list(&ListParams::default()).await?;
        let mine: Vec<&Pod> = list
            .items
            .iter()
            .filter(|p| {
                p.owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && o.name == owner)
            })
            .collect();
        let bound = mine
            .iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some_and(|n| !n.is_empty())
            })
            .count();
        for p in &mine {
            ensure!(
                !p.labels().contains_key(phalanx_api::labels::POD_GROUP),
                "pod {} got a group label; the link must come from the owner",
                p.name_any()
            );
        }
        Ok((mine.len(), bound))
    }

    async fn wait_bound(&self, owner: &str, n: usize) -> Result<()> {
        let waited = wait_for(&format!("{n} pods of {owner} bound"), WAIT, || async {
            let (total, bound) = self.pods_of(owner).await?;
            Ok((total == n && bound == n).then_some(()))
        })
        .await;
        // On a timeout, say what the pods were doing: which one is missing or unbound, and why.
        if let Err(e) = waited {
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
            let state: Vec<String> = pods
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .map(|p| {
                    let st = p.status.clone().unwrap_or_default();
                    let scheduled = st
                        .conditions
                        .iter()
                        .flatten()
                        .find(|c| c.type_ == "PodScheduled")
                        .map(|c| {
                            format!(
                                "{}/{}: {}",
                                c.status,
                                c.reason.clone().unwrap_or_default(),
                                c.message.clone().unwrap_or_default()
                            )
                        });
                    format!(
                        "{} phase={:?} node={:?} deleting={} PodScheduled={scheduled:?}",
                        p.name_any(),
                        st.phase,
                        p.spec.as_ref().and_then(|s| s.node_name.clone()),
                        p.metadata.deletion_timestamp.is_some()
                    )
                })
                .collect();
            return Err(e.context(format!("pods in {}: {state:#?}", self.ns)));
        }
        Ok(())
    }

    async fn min_count(&self, group: &str) -> Result<Option<i32>> {
        Ok(self
            .groups()
            .get_opt(group)
            .await?
            .and_then(|g| g.spec.scheduling_policy.gang.map(|x| x.min_count)))
    }

    async fn warnings(&self, reason: &str) -> Result<Vec<String>> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        Ok(events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.note)
            .collect())
    }
}

/// An 8-pod Indexed Job with `gang: "true"` and no PodGroup written by hand: Phalanx creates a Workload and a
/// PodGroup owned by the Job (minCount = parallelism = 8) and binds all 8 pods; the pods carry no group label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_job_is_one_gang_without_a_hand_written_pod_group() -> Result<()> {
    let c = setup("oi-job", 2, "4").await?;
    let job = c.job("train", 8, "1", &[(GANG, "true")], false).await?;
    c.wait_bound("train", 8).await?;
    let pg = c.groups().get("train-job").await?;
    ensure!(
        pg.spec.scheduling_policy.gang.as_ref().map(|g| g.min_count) == Some(8),
        "minCount: {:?}",
        pg.spec
    );
    let owner = pg
        .owner_references()
        .first()
        .cloned()
        .context("PodGroup has no owner")?;
    ensure!(
        owner.kind == "Job"
            && Some(owner.uid.as_str()) == job.uid().as_deref()
            && owner.controller == Some(true)
    );
    let wl = c.workloads().get("train-job").await?;
    ensure!(
        wl.owner_references().iter().any(|o| o.name == "train"),
        "Workload not owned by the Job"
    );
    ensure!(pg.spec.workload_ref.as_ref().map(|r| r.workload_name.as_str()) == Some("train-job"));
    // The read-only tools (`phalanx explain`, `simulate`) build their store from one LIST with no owner caches: the
    // Job's pods must still be the group's members there (a new-user trial found `explain` showing none).
    let fixed = phalanx_store::Store::from_state(phalanx_store::ClusterState::list(&c.client).await?);
    let members = fixed.group_members(&phalanx_store::GroupKey::pod_group(&c.ns, "train-job"));
    ensure!(members.len() == 8, "members in a fixed store: {}", members.len());
    Ok(())
}

/// Two annotated Jobs that cannot both fit (2 nodes x 4 cpu, each Job 6 pods x 1 cpu): one ends whole, the other
/// with no pod bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_jobs_that_cannot_both_fit_end_one_whole_one_empty() -> Result<()> {
    let c = setup("oi-two", 2, "4").await?;
    c.job("a", 6, "1", &[(GANG, "true")], false).await?;
    c.job("b", 6, "1", &[(GANG, "true")], false).await?;
    let (winner, loser) = wait_for("one Job fully bound", WAIT, || async {
        let (_, a) = c.pods_of("a").await?;
        let (_, b) = c.pods_of("b").await?;
        Ok(match (a, b) {
            (6, _) => Some(("a", "b")),
            (_, 6) => Some(("b", "a")),
            _ => None,
        })
    })
    .await?;
    // The loser must be told it is unschedulable and must stay with no pod bound.
    wait_for("loser's PodGroup Unschedulable", WAIT, || async {
        let g = c.groups().get(&format!("{loser}-job")).await?;
        let cond = g.status.as_ref().and_then(|s| {
            phalanx_api::conditions::find_condition(
                &s.conditions,
                phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED,
            )
            .cloned()
        });
        Ok(cond.filter(|c| c.status == "False").map(|_| ()))
    })
    .await?;
    c.wake().await?;
    let (total, bound) = c.pods_of(loser).await?;
    ensure!(total == 6 && bound == 0, "loser {loser}: {bound}/{total} bound");
    ensure!(c.pods_of(winner).await?.1 == 6);
    Ok(())
}

/// A StatefulSet (Parallel pod management) with `gang-min-count: "3"` forms one gang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_stateful_set_forms_one_gang() -> Result<()> {
    let c = setup("oi-sts", 1, "4").await?;
    let sts: StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": { "name": "db", "annotations": { GANG: "true" } },
        "spec": {
            "replicas": 3,
            "podManagementPolicy": "Parallel",
            "serviceName": "db",
            "selector": { "matchLabels": { "app": "gang" } },
            "template": pod_template(&c.sched, "1", "Always"),
        }
    }))?;
    Api::<StatefulSet>::namespaced(c.client.clone(), &c.ns)
        .create(&PostParams::default(), &sts)
        .await?;
    c.wait_bound("db", 3).await?;
    ensure!(c.min_count("db-statefulset").await? == Some(3));
    Ok(())
}

/// Deleting the Job (background propagation, as kubectl does) lets the garbage collector remove its pods, its
/// PodGroup and its Workload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_job_removes_its_pod_group_and_workload() -> Result<()> {
    let c = setup("oi-del", 1, "4").await?;
    c.job("gone", 2, "1", &[(GANG, "true")], false).await?;
    c.wait_bound("gone", 2).await?;
    c.jobs().delete("gone", &DeleteParams::background()).await?;
    wait_for("PodGroup and Workload garbage-collected", WAIT, || async {
        let pg = c.groups().get_opt("gone-job").await?;
        let wl = c.workloads().get_opt("gone-job").await?;
        Ok((pg.is_none() && wl.is_none()).then_some(()))
    })
    .await
}

/// minCount follows parallelism: scaling the Job from 2 to 3 raises the group's minCount, and the third pod binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_count_follows_parallelism() -> Result<()> {
    let c = setup("oi-par", 1, "4").await?;
    c.job("elastic", 2, "1", &[(GANG, "true")], false).await?;
    c.wait_bound("elastic", 2).await?;
    ensure!(c.min_count("elastic-job").await? == Some(2));
    c.jobs()
        .patch(
            "elastic",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "parallelism": 3, "completions": 3 } })),
        )
        .await
        .context(
            "scaling an Indexed Job (elastic Indexed Jobs change completions together with parallelism)",
        )?;
    wait_for("minCount 3", WAIT, || async {
        Ok((c.min_count("elastic-job").await? == Some(3)).then_some(()))
    })
    .await?;
    c.wait_bound("elastic", 3).await?;
    // Each value of minCount is announced, not only the first (one event per note, as client-go's recorder).
    let events: Api<Event> = Api::namespaced(c.client.clone(), &c.ns);
    wait_for("GangGroupApplied for minCount 2 and for 3", WAIT, || async {
        let l = events.list(&ListParams::default()).await?;
        let notes: Vec<String> = l
            .items
            .iter()
            .filter(|e| {
                e.reason.as_deref() == Some("GangGroupApplied")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("elastic")
            })
            .filter_map(|e| e.note.clone())
            .collect();
        let has = |n: &str| {
            notes
                .iter()
                .any(|x| x.contains(&format!("PodGroup elastic-job minCount {n} applied")))
        };
        Ok((has("2") && has("3")).then_some(()))
    })
    .await
}

/// A suspended Job creates no pods and no group; resuming it creates the group and the gang binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspended_job_waits_then_binds_when_resumed() -> Result<()> {
    let c = setup("oi-sus", 1, "4").await?;
    c.job("later", 3, "1", &[(GANG, "true")], true).await?;
    // Positive signs: the Job controller has synced the Job (`Suspended=True`, written where it would otherwise
    // have created pods), and the owner integration has started a reconcile after that write (the condition is a
    // Job event it watches; the counter is shared with the binary's other tests, so this is the weaker half).
    wait_for("Job later Suspended=True", WAIT, || async {
        let j = c.jobs().get("later").await?;
        let suspended = j
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|cond| cond.type_ == "Suspended" && cond.status == "True");
        Ok(suspended.then_some(()))
    })
    .await?;
    let before = c.reconciles("owner-integration");
    wait_for(
        "an owner-integration reconcile after the Job's condition",
        WAIT,
        || {
            let now = c.reconciles("owner-integration");
            async move { Ok((now > before).then_some(())) }
        },
    )
    .await?;
    ensure!(c.pods_of("later").await? == (0, 0), "a suspended Job has no pods");
    ensure!(
        c.groups().get_opt("later-job").await?.is_none(),
        "no group while suspended"
    );
    c.jobs()
        .patch(
            "later",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "suspend": false } })),
        )
        .await?;
    c.wait_bound("later", 3).await?;
    ensure!(c.min_count("later-job").await? == Some(3));
    Ok(())
}

/// Bad annotation values get a Warning event naming the annotation, no group, and pods that wait (never bound
/// one by one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_annotation_values_are_reported_and_pods_wait() -> Result<()> {
    let c = setup("oi-bad", 1, "8").await?;
    for (i, v) in ["abc", "-1", "99999999999"].iter().enumerate() {
        c.job(&format!("bad{i}"), 1, "1", &[(GANG_MIN_COUNT, v)], false)
            .await?;
    }
    let notes = wait_for("three InvalidGangAnnotation warnings", WAIT, || async {
        let n = c
            .warnings(phalanx_api::conditions::reasons::INVALID_GANG_ANNOTATION)
            .await?;
        Ok((n.len() >= 3).then_some(n))
    })
    .await?;
    for v in ["\"abc\"", "\"-1\"", "\"99999999999\""] {
        ensure!(
            notes.iter().any(|n| n.contains(GANG_MIN_COUNT) && n.contains(v)),
            "no warning for {v}: {notes:?}"
        );
    }
    for i in 0..3 {
        let (total, bound) = c.pods_of(&format!("bad{i}")).await?;
        ensure!(total == 1 && bound == 0, "bad{i}: {bound}/{total} bound");
        ensure!(c.groups().get_opt(&format!("bad{i}-job")).await?.is_none());
    }
    Ok(())
}

/// A custom resource at the top of the pods' owner chain (a CRD the store starts watching when it first meets it):
/// its annotated object gets a PodGroup labelled with its uid and its pods join it as one gang: `t1` (minCount 3,
/// 3 pods) binds whole, `t3` (minCount 4, 3 pods) binds nothing. `gang: "true"` on a kind without
/// `spec.replicas`/`spec.parallelism` (`t2`) is a Warning naming `gang-min-count`, and its pod waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_owner_gets_a_group_and_missing_replicas_is_reported() -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let c = setup("oi-cr", 1, "8").await?;
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": "trainings.example.phalanx.dev" },
        "spec": {
            "group": "example.phalanx.dev", "scope": "Namespaced",
            "names": { "plural": "trainings", "singular": "training", "kind": "Training" },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } } }],
        }
    }))?;
    phalanx_testenv::apply_crds(&c.client, &serde_json::to_string(&crd)?).await?;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.phalanx.dev", "v1", "Training"),
        "trainings",
    );
    let trainings: Api<DynamicObject> = Api::namespaced_with(c.client.clone(), &c.ns, &ar);
    let mut uids = BTreeMap::new();
    for (name, ann) in [
        ("t1", (GANG_MIN_COUNT, "3")),
        ("t2", (GANG, "true")),
        ("t3", (GANG_MIN_COUNT, "4")),
    ] {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.phalanx.dev/v1", "kind": "Training",
            "metadata": { "name": name, "annotations": { ann.0: ann.1 } }, "spec": {},
        }))?;
        let created = trainings.create(&PostParams::default(), &obj).await?;
        uids.insert(name, created.uid().context("no uid")?);
    }
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &c.ns);
    for (owner, n) in [("t1", 3), ("t2", 1), ("t3", 3)] {
        for i in 0..n {
            let mut p = pod_template(&c.sched, "1", "Never");
            p["metadata"]["name"] = json!(format!("{owner}-{i}"));
            p["metadata"]["ownerReferences"] = json!([{ "apiVersion": "example.phalanx.dev/v1", "kind": "Training",
                "name": owner, "uid": uids[owner], "controller": true }]);
            pods.create(&PostParams::default(), &serde_json::from_value(p)?)
                .await?;
        }
    }
    wait_for("PodGroup t1-training with minCount 3", WAIT, || async {
        Ok((c.min_count("t1-training").await? == Some(3)).then_some(()))
    })
    .await?;
    let pg = c.groups().get("t1-training").await?;
    ensure!(
        pg.labels().get(phalanx_api::owners::OWNER_UID_LABEL) == Some(&uids["t1"]),
        "owner-uid label"
    );
    c.wait_bound("t1", 3).await?;
    // The pods were counted as the group's members (the link came from the owner chain, not a label).
    wait_for("t1-training counts 3 pods", WAIT, || async {
        let g = c.groups().get("t1-training").await?;
        Ok((g.status.and_then(|s| s.pods) == Some(3)).then_some(()))
    })
    .await?;
    let notes = wait_for("InvalidGangAnnotation for t2", WAIT, || async {
        let n = c
            .warnings(phalanx_api::conditions::reasons::INVALID_GANG_ANNOTATION)
            .await?;
        Ok((!n.is_empty()).then_some(n))
    })
    .await?;
    ensure!(
        notes
            .iter()
            .any(|n| n.contains(GANG_MIN_COUNT) && n.contains("Training")),
        "{notes:?}"
    );
    ensure!(c.groups().get_opt("t2-training").await?.is_none());
    Ok(())
}

/// The names of the PodGroups and of the Workloads in the test's namespace.
async fn group_and_workload_names(c: &Ctx) -> Result<(Vec<String>, Vec<String>)> {
    let groups = c.groups().list(&ListParams::default()).await?;
    let workloads = c.workloads().list(&ListParams::default()).await?;
    Ok((
        groups.items.iter().map(ResourceExt::name_any).collect(),
        workloads.items.iter().map(ResourceExt::name_any).collect(),
    ))
}

/// An annotated Deployment is one gang: exactly one Workload and one PodGroup (`infer-deployment`), also across a
/// rollout that makes a second ReplicaSet, although the Deployment controller copies the gang annotation onto every
/// ReplicaSet (a user saw `infer-5f899f5bd-replicaset Gang 60 0 0` beside the Deployment's group). The pods of both
/// ReplicaSets are the Deployment group's members, in the live store and in a store built from one read (what
/// `phalanx explain` uses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_deployment_is_one_group_across_a_rollout() -> Result<()> {
    let c = setup("oi-deploy", 1, "8").await?;
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), &c.ns);
    let dep: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "infer", "annotations": { GANG: "true" } },
        "spec": {
            "replicas": 3,
            "selector": { "matchLabels": { "app": "gang" } },
            "template": pod_template(&c.sched, "1", "Always"),
        }
    }))?;
    deployments.create(&PostParams::default(), &dep).await?;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &c.ns);
    let bound = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
    };
    wait_for("3 pods of the Deployment bound", WAIT, || async {
        let list = pods.list(&ListParams::default()).await?;
        Ok((list.items.iter().filter(|p| bound(p)).count() == 3).then_some(()))
    })
    .await?;
    let replica_sets: Api<ReplicaSet> = Api::namespaced(c.client.clone(), &c.ns);
    let first = replica_sets.list(&ListParams::default()).await?;
    ensure!(
        first
            .items
            .iter()
            .all(|rs| rs.annotations().get(GANG).map(String::as_str) == Some("true")),
        "the Deployment controller copies the annotation onto its ReplicaSets (the case under test)"
    );
    let one = (
        vec!["infer-deployment".to_string()],
        vec!["infer-deployment".to_string()],
    );
    ensure!(
        group_and_workload_names(&c).await? == one,
        "before the rollout: {:?}",
        group_and_workload_names(&c).await?
    );
    // A new pod template: the Deployment controller makes a second ReplicaSet.
    deployments
        .patch(
            "infer",
            &PatchParams::default(),
            &Patch::Merge(
                json!({ "spec": { "template": { "metadata": { "annotations": { "rev": "2" } } } } }),
            ),
        )
        .await?;
    wait_for("a second ReplicaSet with pods", WAIT, || async {
        let sets = replica_sets.list(&ListParams::default()).await?.items;
        let has_rev = |rs: &ReplicaSet| {
            rs.spec
                .template
                .as_ref()
                .and_then(|t| t.metadata.as_ref())
                .and_then(|m| m.annotations.as_ref())
                .is_some_and(|a| a.contains_key("rev"))
        };
        let started = sets
            .iter()
            .any(|rs| has_rev(rs) && rs.status.as_ref().is_some_and(|s| s.replicas > 0));
        Ok((sets.len() == 2 && started).then_some(()))
    })
    .await?;
    // The integration reacts to a ReplicaSet within a second; watch for 5 s that no group of its own appears.
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < until {
        let names = group_and_workload_names(&c).await?;
        ensure!(names == one, "during the rollout: {names:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Every pod of the namespace (both ReplicaSets) joins the Deployment's group, in the live store and in a store
    // built from one read, and the group counts them.
    let key = phalanx_store::GroupKey::pod_group(&c.ns, "infer-deployment");
    let live = Store::start(c.client.clone(), StoreConfig::default());
    tokio::time::timeout(WAIT, live.wait_ready()).await?;
    let fixed = Store::from_state(phalanx_store::ClusterState::list(&c.client).await?);
    for store in [&live, &fixed] {
        let mine: Vec<_> = store
            .pods()
            .state()
            .into_iter()
            .filter(|p| p.namespace() == c.ns.as_str())
            .collect();
        ensure!(mine.len() >= 3, "pods: {}", mine.len());
        for p in &mine {
            ensure!(
                store.group_of_pod(p) == Some(key.clone()),
                "pod {} resolves to {:?}",
                p.name(),
                store.group_of_pod(p)
            );
        }
        ensure!(
            store.group_members(&key).len() == mine.len(),
            "members: {} of {}",
            store.group_members(&key).len(),
            mine.len()
        );
    }
    wait_for("the group counts the pods of both ReplicaSets", WAIT, || async {
        let now = pods.list(&ListParams::default()).await?.items;
        let n = now.iter().filter(|p| !phalanx_scheduler::is_terminal(p)).count();
        let g = c.groups().get("infer-deployment").await?;
        Ok((g.status.and_then(|s| s.pods) == Some(i32::try_from(n)?) && n >= 3).then_some(()))
    })
    .await?;
    // A group an earlier version made for a ReplicaSet (the same objects the integration builds) is deleted at the
    // ReplicaSet's next change; its pods never joined it.
    let rs = replica_sets
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .next()
        .context("a ReplicaSet")?;
    let facts = phalanx_controllers::integrations::build::OwnerFacts::from_json(&serde_json::to_value(&rs)?);
    let stale = format!("{}-replicaset", rs.name_any());
    let pp = PatchParams::apply(phalanx_api::field_managers::INTEGRATION).force();
    c.workloads()
        .patch(
            &stale,
            &pp,
            &Patch::Apply(phalanx_controllers::integrations::build::workload(&facts, 3)),
        )
        .await?;
    c.groups()
        .patch(
            &stale,
            &pp,
            &Patch::Apply(phalanx_controllers::integrations::build::pod_group(&facts, 3)),
        )
        .await?;
    replica_sets
        .patch(
            &rs.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { "touched": "1" } } })),
        )
        .await?;
    wait_for(
        "the ReplicaSet's stale Workload and PodGroup deleted",
        WAIT,
        || async { Ok((group_and_workload_names(&c).await? == one).then_some(())) },
    )
    .await?;
    Ok(())
}

/// An annotated Job whose pod template forgets `schedulerName`: its pods are `default-scheduler`'s, which no
/// Phalanx scheduler places. The group says so (`Valid=False/PodsOfAnotherScheduler`, naming the pods and their
/// scheduler) and a Warning event does too; before, STATUS was blank with no condition and no event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_whose_pods_name_another_scheduler_is_reported() -> Result<()> {
    let c = setup("oi-foreign", 1, "8").await?;
    let mut template = pod_template(&c.sched, "1", "Never");
    if let Some(spec) = template["spec"].as_object_mut() {
        spec.remove("schedulerName");
    }
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "infer", "annotations": { GANG: "true" } },
        "spec": { "parallelism": 3, "completions": 3, "completionMode": "Indexed", "template": template }
    }))?;
    c.jobs().create(&PostParams::default(), &job).await?;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &c.ns);
    let names = wait_for("3 pods of the Job", WAIT, || async {
        let list = pods.list(&ListParams::default()).await?;
        let mut names: Vec<String> = list.items.iter().map(ResourceExt::name_any).collect();
        names.sort();
        Ok((names.len() == 3).then_some(names))
    })
    .await?;
    let message = wait_for("infer-job Valid=False/PodsOfAnotherScheduler", WAIT, || async {
        let Some(g) = c.groups().get_opt("infer-job").await? else {
            return Ok(None);
        };
        let cond = g
            .status
            .as_ref()
            .and_then(|s| phalanx_api::conditions::find_condition(&s.conditions, "Valid").cloned());
        Ok(cond
            .filter(|c| {
                c.status == "False"
                    && c.reason == "PodsOfAnotherScheduler"
                    && c.message.contains("pods ")
                    && names.iter().all(|n| c.message.contains(n.as_str()))
            })
            .map(|c| c.message))
    })
    .await?;
    ensure!(
        message.contains(&format!(
            "{} use schedulerName \"default-scheduler\", not \"phalanx-*\"",
            names.join(", ")
        )),
        "{message}"
    );
    let notes = wait_for("a Warning event naming the pods", WAIT, || async {
        let n = c.warnings("PodsOfAnotherScheduler").await?;
        Ok(n.iter()
            .find(|n| names.iter().all(|p| n.contains(p.as_str())) && n.contains("default-scheduler"))
            .cloned())
    })
    .await?;
    ensure!(notes.contains("PodGroup is invalid"), "{notes}");
    ensure!(c.pods_of("infer").await? == (3, 0), "nothing bound them");
    Ok(())
}

/// A cluster-scoped custom resource owns the pods (a namespaced pod may have a cluster-scoped owner): the store
/// looks it up without a namespace, the integration reads it without one, and its group lives in the pods'
/// namespace. Before, the lookup always added the pod's namespace and the owner was never found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scoped_custom_owner_gets_a_group() -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let c = setup("oi-cluster", 1, "8").await?;
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": "fleets.example.phalanx.dev" },
        "spec": {
            "group": "example.phalanx.dev", "scope": "Cluster",
            "names": { "plural": "fleets", "singular": "fleet", "kind": "Fleet" },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } } }],
        }
    }))?;
    phalanx_testenv::apply_crds(&c.client, &serde_json::to_string(&crd)?).await?;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.phalanx.dev", "v1", "Fleet"),
        "fleets",
    );
    let fleets: Api<DynamicObject> = Api::all_with(c.client.clone(), &ar);
    // Cluster-scoped: one name for the whole cluster, so the test's namespace names it.
    let name = format!("{}-f", c.ns);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.phalanx.dev/v1", "kind": "Fleet",
        "metadata": { "name": name, "annotations": { GANG_MIN_COUNT: "2" } }, "spec": {},
    }))?;
    let created = fleets.create(&PostParams::default(), &obj).await?;
    let uid = created.uid().context("no uid")?;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &c.ns);
    for i in 0..2 {
        let mut p = pod_template(&c.sched, "1", "Never");
        p["metadata"]["name"] = json!(format!("fleet-{i}"));
        p["metadata"]["ownerReferences"] = json!([{ "apiVersion": "example.phalanx.dev/v1", "kind": "Fleet",
            "name": name, "uid": uid, "controller": true }]);
        pods.create(&PostParams::default(), &serde_json::from_value(p)?)
            .await?;
    }
    let group = format!("{name}-fleet");
    wait_for("the Fleet's PodGroup in the pods' namespace", WAIT, || async {
        Ok((c.min_count(&group).await? == Some(2)).then_some(()))
    })
    .await?;
    c.wait_bound(&name, 2).await?;
    wait_for("the group counts both pods", WAIT, || async {
        let g = c.groups().get(&group).await?;
        Ok((g.status.and_then(|s| s.pods) == Some(2)).then_some(()))
    })
    .await?;
    fleets.delete(&name, &DeleteParams::background()).await?;
    Ok(())
}

/// Marks pod `name` Succeeded, as its kubelet would, once kwok has made it Running. kwok's `pod-ready` stage
/// selects pods whose phase is Pending; a pod marked Succeeded while kwok's write for it was under way went back
/// to Running (seen once in 30 runs of the tail test: only one of the two pods stayed Succeeded).
async fn mark_succeeded(pods: &Api<Pod>, name: &str) -> Result<()> {
    wait_for(
        &format!("pod {name} Running (kwok's pod-ready stage)"),
        WAIT,
        || async {
            let p = pods.get(name).await?;
            Ok((p.status.and_then(|s| s.phase).as_deref() == Some("Running")).then_some(()))
        },
    )
    .await?;
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": { "phase": "Succeeded" } })),
    )
    .await
    .with_context(|| format!("marking {name} Succeeded"))?;
    Ok(())
}

/// k/k#142330: an annotated Job with `parallelism: 3, completions: 4` (minCount 3). Once two members are marked
/// Succeeded, the Job controller creates the last pod, and that pod binds: the finished members still count toward
/// the quorum, although only one member is running beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_gang_finishes_its_tail_because_succeeded_members_count() -> Result<()> {
    let c = setup("oi-tail", 1, "4").await?;
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "tail", "annotations": { GANG: "true" } },
        "spec": {
            "parallelism": 3,
            "completions": 4,
            "completionMode": "Indexed",
            "template": pod_template(&c.sched, "1", "Never"),
        }
    }))?;
    c.jobs().create(&PostParams::default(), &job).await?;
    c.wait_bound("tail", 3).await?;
    ensure!(c.min_count("tail-job").await? == Some(3));
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &c.ns);
    let mut names: Vec<String> = pods
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    names.sort();
    for n in names.iter().take(2) {
        mark_succeeded(&pods, n).await?;
    }
    // 2 Succeeded + 1 running + the new pod: the new pod binds although only 2 of the 3 are not finished.
    c.wait_bound("tail", 4).await?;
    let list = pods.list(&ListParams::default()).await?;
    let phases: Vec<(String, Option<String>)> = list
        .items
        .iter()
        .map(|p| (p.name_any(), p.status.as_ref().and_then(|s| s.phase.clone())))
        .collect();
    let succeeded = phases
        .iter()
        .filter(|(_, ph)| ph.as_deref() == Some("Succeeded"))
        .count();
    ensure!(succeeded == 2, "phases: {phases:?}");
    // The group's status counts them apart from the pods still to finish.
    wait_for("status.succeededPods 2, pods 2", WAIT, || async {
        let st = c.groups().get("tail-job").await?.status.unwrap_or_default();
        Ok((st.succeeded_pods == Some(2) && st.pods == Some(2) && st.failed_pods == Some(0)).then_some(()))
    })
    .await?;
    Ok(())
}

/// `PodGroupSatisfied`, the live condition beside the terminal `PodGroupInitiallyScheduled`: a placed Job gang is
/// Satisfied; a member Failed while the node is cordoned leaves it `MembersLost` (the Job's replacement cannot bind)
/// with a Warning event; uncordoned, the replacement binds and it is Satisfied again with a Normal event; a member
/// marked `DisruptionTarget` makes it `MembersDisrupted`; all members Succeeded make it `Completed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_group_satisfied_follows_losses_and_recoveries() -> Result<()> {
    let c = setup("oi-live", 1, "4").await?;
    c.gang_job("live", 3).await?;
    c.wait_satisfied("live-job", "True", "Satisfied").await?;

    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &c.ns);
    c.cordon(true).await?;
    let names = c.live_pod_names().await?;
    c.fail_pod(names.first().context("no pod")?).await?;
    let lost = c.wait_satisfied("live-job", "False", "MembersLost").await?;
    ensure!(
        lost.contains("2 of minCount 3") && lost.contains("(1 Failed pod(s) kept)"),
        "MembersLost message: {lost}"
    );
    c.wait_group_event("live-job", "MembersLost", "Warning").await?;

    c.cordon(false).await?;
    c.wait_satisfied("live-job", "True", "Satisfied").await?;
    c.wait_group_event("live-job", "Satisfied", "Normal").await?;

    // An eviction marks its pod first (the eviction API's DisruptionTarget); the gang is below its
    // quorum from then on. The transition time matters: KCM's disruption controller resets a
    // DisruptionTarget older than two minutes on a pod that is not being deleted.
    let names = c.live_pod_names().await?;
    let marked = names.first().context("no pod")?.clone();
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    pods.patch_status(
        &marked,
        &PatchParams::default(),
        &Patch::Strategic(json!({ "status": { "conditions": [{
            "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting", "lastTransitionTime": now }] } })),
    )
    .await
    .with_context(|| format!("marking {marked} DisruptionTarget"))?;
    let disrupted = c.wait_satisfied("live-job", "False", "MembersDisrupted").await?;
    ensure!(
        disrupted.contains("1 disrupted"),
        "MembersDisrupted message: {disrupted}"
    );

    for n in &names {
        mark_succeeded(&pods, n).await?;
    }
    let done = c.wait_satisfied("live-job", "False", "Completed").await?;
    ensure!(
        done.contains("3 succeeded, 1 failed"),
        "Completed message: {done}"
    );
    Ok(())
}

/// An elastic owner stays all-or-nothing: an annotated Deployment of 5 bound pods, scaled to 60 with room for 40,
/// binds none of its 55 new pods (the scheduler holds them until `minCount` follows the new size, then the gang of 60
/// does not fit) and the group says why; scaled back to 40, the 35 still pending bind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scaled_deployment_joins_its_new_quorum_all_or_nothing() -> Result<()> {
    let c = setup("oi-scale", 1, "40").await?;
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), &c.ns);
    let dep: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "web", "annotations": { GANG: "true" } },
        "spec": {
            "replicas": 5,
            "selector": { "matchLabels": { "app": "gang" } },
            "template": pod_template(&c.sched, "1", "Always"),
        }
    }))?;
    deployments.create(&PostParams::default(), &dep).await?;
    let group = "web-deployment";
    let bound = || async {
        let live = c.live_pods().await?;
        let n = live
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        anyhow::Ok((live.len(), n))
    };
    wait_for("5 pods bound", WAIT, || async {
        Ok((bound().await? == (5, 5)).then_some(()))
    })
    .await?;
    c.wait_satisfied(group, "True", "Satisfied").await?;
    let scale = |n: i32| {
        let deployments = deployments.clone();
        async move {
            deployments
                .patch(
                    "web",
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": { "replicas": n } })),
                )
                .await
                .with_context(|| format!("scaling to {n}"))
        }
    };
    scale(60).await?;
    wait_for("minCount 60 and 60 pods", WAIT, || async {
        Ok((c.min_count(group).await? == Some(60) && bound().await?.0 == 60).then_some(()))
    })
    .await?;
    // None of the new pods may bind, judged once the scheduler has retried them with the cluster as it is.
    // The controllers count the 55 new pods as they see them: wait for the message that counts them all (an
    // earlier one may still say "9 missing").
    let last = Mutex::new(String::new());
    wait_for(
        "MembersLost counting 55 pods waiting for a node",
        WAIT,
        || async {
            let g = c.groups().get(group).await?;
            let lost = g.status.unwrap_or_default().conditions.into_iter().find(|cond| {
                cond.type_ == phalanx_api::conditions::POD_GROUP_SATISFIED
                    && cond.status == "False"
                    && cond.reason == "MembersLost"
            });
            let msg = lost.map(|cond| cond.message).unwrap_or_default();
            let done = msg.contains("5 of minCount 60") && msg.contains("55 waiting for a node");
            *last.lock().unwrap_or_else(PoisonError::into_inner) = msg;
            Ok(done.then_some(()))
        },
    )
    .await
    .map_err(|e| {
        e.context(format!(
            "last: {}",
            last.lock().unwrap_or_else(PoisonError::into_inner)
        ))
    })?;
    c.wake().await?;
    let (total, n) = bound().await?;
    ensure!(
        n == 5,
        "{n} of {total} pods bound after the scale-up: the new members must bind all or nothing"
    );
    // A pending member says why.
    let pending = c
        .live_pods()
        .await?
        .into_iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
        .context("a pending pod")?;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &c.ns);
    let name = pending.name_any();
    let why = wait_for(&format!("{name} says why it waits"), WAIT, || async {
        let p = pods.get(&name).await?;
        Ok(p.status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .and_then(|c| c.message)
            .filter(|m| m.contains("minCount (60)")))
    })
    .await?;
    ensure!(why.contains("Insufficient cpu"), "pending message: {why}");

    scale(40).await?;
    wait_for("40 pods bound with minCount 40", WAIT, || async {
        Ok((c.min_count(group).await? == Some(40) && bound().await? == (40, 40)).then_some(()))
    })
    .await?;
    c.wait_satisfied(group, "True", "Satisfied").await?;
    Ok(())
}

/// `recoveryPolicy` `RestartGroup` with a 2 s grace period and `maxRestarts: 1`, on an annotated Deployment (its
/// ReplicaSet replaces pods at once; a Job would back off for tens of seconds after each failure): a member fails
/// while the node is cordoned (its replacement cannot bind); after the grace period the two survivors are marked
/// `DisruptionTarget` and deleted (`GroupRestarted`, `status.restarts` 1), so nothing of the gang stays bound;
/// uncordoned, the recreated gang binds whole and is Satisfied. A second loss exceeds `maxRestarts` and ends in
/// `PodGroupFailed` (`MaxRestartsReached`), with no further restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_group_restarts_a_broken_gang_whole_and_max_restarts_fails_it() -> Result<()> {
    let c = setup("oi-restart", 1, "4").await?;
    let deployments: Api<Deployment> = Api::namespaced(c.client.clone(), &c.ns);
    let dep: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "rs", "annotations": { GANG: "true" } },
        "spec": {
            "replicas": 3,
            "selector": { "matchLabels": { "app": "gang" } },
            "template": pod_template(&c.sched, "1", "Always"),
        }
    }))?;
    deployments.create(&PostParams::default(), &dep).await?;
    let group = "rs-deployment";
    c.wait_satisfied(group, "True", "Satisfied").await?;
    c.set_recovery(
        group,
        json!({ "action": "RestartGroup", "gracePeriodSeconds": 2, "maxRestarts": 1 }),
    )
    .await?;
    c.cordon(true).await?;
    let before = c.live_pod_names().await?;
    ensure!(before.len() == 3, "pods before: {before:?}");
    c.fail_pod(&before[0]).await?;
    c.wait_group_event(group, "GroupRestarted", "Warning").await?;
    wait_for("status.restarts 1", WAIT, || async {
        Ok((c.groups().get(group).await?.status.unwrap_or_default().restarts == Some(1)).then_some(()))
    })
    .await?;
    // The survivors are gone and nothing of the gang is bound: no partial gang holds the node.
    wait_for("the survivors deleted, no live member bound", WAIT, || async {
        let live = c.live_pods().await?;
        let bound = live
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        let names: Vec<String> = live.iter().map(ResourceExt::name_any).collect();
        Ok((bound == 0 && before[1..].iter().all(|n| !names.contains(n))).then_some(()))
    })
    .await?;
    c.cordon(false).await?;
    c.wait_satisfied(group, "True", "Satisfied").await?;
    let again = c.live_pod_names().await?;
    ensure!(again.len() == 3, "recreated gang: {again:?}");
    // The last allowed restart is not a failure: the recreated gang had its chance, and took it.
    let st = c.groups().get(group).await?.status.unwrap_or_default();
    ensure!(
        !st.conditions.iter().any(|c| c.type_ == "PodGroupFailed"),
        "PodGroupFailed after the last allowed restart although the gang recovered: {:?}",
        st.conditions
    );

    c.cordon(true).await?;
    c.fail_pod(&again[0]).await?;
    let failed = c
        .wait_condition(group, "PodGroupFailed", "True", "MaxRestartsReached")
        .await?;
    ensure!(
        failed.contains("maxRestarts 1"),
        "PodGroupFailed message: {failed}"
    );
    c.wait_group_event(group, "PodGroupFailed", "Warning").await?;
    // Failed is terminal: no second restart. The grace period of the loss had passed when the group failed; the
    // positive sign is a later reconcile: one more member fails and the controllers count it.
    let failed_before = c
        .groups()
        .get(group)
        .await?
        .status
        .unwrap_or_default()
        .failed_pods;
    c.fail_pod(&again[1]).await?;
    let want = failed_before.unwrap_or(0) + 1;
    wait_for(&format!("{group} counts {want} failed pods"), WAIT, || async {
        let st = c.groups().get(group).await?.status.unwrap_or_default();
        Ok((st.failed_pods == Some(want)).then_some(()))
    })
    .await?;
    let st = c.groups().get(group).await?.status.unwrap_or_default();
    ensure!(
        st.restarts == Some(1),
        "restarts after failing: {:?}",
        st.restarts
    );
    Ok(())
}

/// `recoveryPolicy` `Fail`: the first loss sets `PodGroupFailed` (reason `MembersLost`) once its grace period
/// has passed, with a Warning event, and deletes nothing; the default (no policy) on the same loss only reports it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_stops_at_once_and_no_policy_only_reports() -> Result<()> {
    let c = setup("oi-fail", 1, "8").await?;
    c.gang_job("fl", 3).await?;
    c.gang_job("np", 3).await?;
    c.wait_satisfied("fl-job", "True", "Satisfied").await?;
    c.wait_satisfied("np-job", "True", "Satisfied").await?;
    // Fail waits a grace period as RestartGroup does (issue 35); a short one keeps the test quick.
    c.set_recovery("fl-job", json!({ "action": "Fail", "gracePeriodSeconds": 2 }))
        .await?;
    c.cordon(true).await?;
    let fl = c.pod_names_of("fl").await?;
    let np = c.pod_names_of("np").await?;
    c.fail_pod(&fl[0]).await?;
    c.fail_pod(&np[0]).await?;
    let msg = c
        .wait_condition("fl-job", "PodGroupFailed", "True", "MembersLost")
        .await?;
    ensure!(
        msg.starts_with("recoveryPolicy Fail: 2 of minCount 3"),
        "PodGroupFailed message: {msg}"
    );
    c.wait_group_event("fl-job", "PodGroupFailed", "Warning").await?;
    c.wait_satisfied("np-job", "False", "MembersLost").await?;
    // The positive sign that the controllers have looked at both groups after the loss's grace period: a second
    // member of each fails, and both counters show it (a later reconcile, which would have deleted or restarted).
    c.fail_pod(&fl[1]).await?;
    c.fail_pod(&np[1]).await?;
    for g in ["fl-job", "np-job"] {
        wait_for(&format!("{g} counts 2 failed pods"), WAIT, || async {
            let st = c.groups().get(g).await?.status.unwrap_or_default();
            Ok((st.failed_pods == Some(2)).then_some(()))
        })
        .await?;
    }
    for (owner, names) in [("fl", &fl), ("np", &np)] {
        let now = c.pod_names_of(owner).await?;
        ensure!(
            names[2..].iter().all(|n| now.contains(n)),
            "{owner}: survivors {names:?}, now {now:?}"
        );
    }
    let np_status = c.groups().get("np-job").await?.status.unwrap_or_default();
    ensure!(
        !np_status.conditions.iter().any(|c| c.type_ == "PodGroupFailed") && np_status.restarts.is_none(),
        "no policy, yet {np_status:?}"
    );
    Ok(())
}

impl Ctx {
    /// An annotated gang Job of `n` one-CPU pods (`completions` = `parallelism`, room for retries), all bound.
    async fn gang_job(&self, name: &str, n: i32) -> Result<()> {
        let job: Job = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": { "name": name, "annotations": { GANG: "true" } },
            "spec": {
                "parallelism": n,
                "completions": n,
                "backoffLimit": 20,
                "completionMode": "Indexed",
                "template": pod_template(&self.sched, "1", "Never"),
            }
        }))?;
        self.jobs().create(&PostParams::default(), &job).await?;
        self.wait_bound(name, usize::try_from(n)?).await
    }

    /// Sets `spec.recoveryPolicy` of a group (as a user would, with a merge patch).
    async fn set_recovery(&self, group: &str, policy: Value) -> Result<()> {
        self.groups()
            .patch(
                group,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "recoveryPolicy": policy } })),
            )
            .await
            .with_context(|| format!("setting recoveryPolicy on {group}"))?;
        Ok(())
    }

    /// Cordons (or uncordons) the test's only node.
    async fn cordon(&self, on: bool) -> Result<()> {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        let node = format!("{}-n0", self.ns);
        nodes
            .patch(
                &node,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "unschedulable": on } })),
            )
            .await
            .with_context(|| format!("cordon {node} = {on}"))?;
        Ok(())
    }

    /// Marks a pod Failed, as a kubelet would when its container fails.
    async fn fail_pod(&self, name: &str) -> Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "phase": "Failed" } })),
        )
        .await
        .with_context(|| format!("marking {name} Failed"))?;
        Ok(())
    }

    /// Names of the non-terminal pods whose name starts with `owner-`, sorted.
    async fn pod_names_of(&self, owner: &str) -> Result<Vec<String>> {
        let prefix = format!("{owner}-");
        Ok(self
            .live_pod_names()
            .await?
            .into_iter()
            .filter(|n| n.starts_with(&prefix))
            .collect())
    }

    /// The namespace's pods that are not terminal.
    async fn live_pods(&self) -> Result<Vec<Pod>> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        Ok(pods
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|p| {
                !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
            })
            .collect())
    }

    /// Names of the namespace's pods that are not terminal, sorted.
    async fn live_pod_names(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .live_pods()
            .await?
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        names.sort();
        Ok(names)
    }

    /// Waits for the group's `PodGroupSatisfied` to show `status`/`reason`; returns its message.
    async fn wait_satisfied(&self, group: &str, status: &str, reason: &str) -> Result<String> {
        self.wait_condition(
            group,
            phalanx_api::conditions::POD_GROUP_SATISFIED,
            status,
            reason,
        )
        .await
    }

    /// Waits for the group's condition `type_` to show `status`/`reason`; returns its message.
    async fn wait_condition(&self, group: &str, type_: &str, status: &str, reason: &str) -> Result<String> {
        wait_for(&format!("{group} {type_}={status}/{reason}"), WAIT, || async {
            let g = self.groups().get(group).await?;
            Ok(g.status
                .unwrap_or_default()
                .conditions
                .into_iter()
                .find(|c| c.type_ == type_ && c.status == status && c.reason == reason)
                .map(|c| c.message))
        })
        .await
    }

    /// Waits for an event of `reason` and `type_` regarding the PodGroup `group`.
    async fn wait_group_event(&self, group: &str, reason: &str, type_: &str) -> Result<()> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        wait_for(&format!("a {type_} {reason} event on {group}"), WAIT, || async {
            let l = events.list(&ListParams::default()).await?;
            Ok(l.items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.type_.as_deref() == Some(type_)
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(group)
                })
                .then_some(()))
        })
        .await
    }
}

/// A gang preempted whole (`disruptionMode: all`) by a higher-priority pod: the scheduler marks the group
/// `DisruptionTarget` and deletes its members, and the controller reports `PodGroupSatisfied=False/MembersDisrupted`
/// with a Warning event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_gang_is_members_disrupted() -> Result<()> {
    let c = setup("oi-preempted", 1, "2").await?;
    let classes: Api<k8s_openapi::api::scheduling::v1::PriorityClass> = Api::all(c.client.clone());
    for (name, value) in [(format!("{}-low", c.ns), 10), (format!("{}-high", c.ns), 1000)] {
        let pc = serde_json::from_value(json!({ "metadata": { "name": name }, "value": value }))?;
        classes.create(&PostParams::default(), &pc).await?;
    }
    let pg: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
        "metadata": { "name": "low" },
        "spec": { "schedulingPolicy": { "gang": { "minCount": 2 } }, "disruptionMode": { "all": {} },
                  "priorityClassName": format!("{}-low", c.ns) }
    }))?;
    c.groups().create(&PostParams::default(), &pg).await?;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &c.ns);
    let pod = |name: &str, class: &str, group: Option<&str>| -> Result<Pod> {
        let labels = group.map_or(json!({}), |g| json!({ phalanx_api::labels::POD_GROUP: g }));
        Ok(serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "labels": labels },
            "spec": {
                "schedulerName": c.sched, "priorityClassName": format!("{}-{class}", c.ns),
                "terminationGracePeriodSeconds": 0,
                "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": "1" } } }],
            }
        }))?)
    };
    for n in ["low-0", "low-1"] {
        pods.create(&PostParams::default(), &pod(n, "low", Some("low"))?)
            .await?;
    }
    c.wait_satisfied("low", "True", "Satisfied").await?;
    pods.create(&PostParams::default(), &pod("urgent", "high", None)?)
        .await?;
    let msg = c.wait_satisfied("low", "False", "MembersDisrupted").await?;
    ensure!(
        msg.starts_with("0 of minCount 2"),
        "MembersDisrupted message: {msg}"
    );
    c.wait_group_event("low", "MembersDisrupted", "Warning").await?;
    wait_for("urgent bound", WAIT, || async {
        let p = pods.get("urgent").await?;
        Ok(p.spec.and_then(|s| s.node_name).map(|_| ()))
    })
    .await?;
    for (name, _) in [(format!("{}-low", c.ns), 0), (format!("{}-high", c.ns), 0)] {
        let _ = classes.delete(&name, &DeleteParams::default()).await;
    }
    Ok(())
}

/// One group write at scheduling (`crates/controllers/src/scheduled.rs`): with the scheduler and the controllers
/// in one process, as in `phalanx run`, a gang that waits before its scheduler starts (as every gang of a backlog
/// does) shows no status, and the first status it gets comes with the binds and carries `Valid`,
/// `PodGroupInitiallyScheduled=True` and the counters at once, written by the controllers alone. A gang that does not
/// fit shows the scheduler's reason and, after it, the controllers' counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_gets_one_status_write_at_scheduling() -> Result<()> {
    use futures::{StreamExt as _, TryStreamExt as _};
    use phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED;
    use std::sync::{Arc, Mutex};
    let c = setup("oi-once", 1, "4").await?;
    let groups = c.groups();
    // Every distinct status of `once`, in order, from before its creation.
    let statuses: Arc<Mutex<Vec<Value>>> = Arc::default();
    let wp = WatchParams::default().fields("metadata.name=once");
    let mut stream = groups.watch(&wp, "0").await?.boxed();
    let sink = statuses.clone();
    let watch = tokio::spawn(async move {
        while let Ok(Some(ev)) = stream.try_next().await {
            if let WatchEvent::Added(pg) | WatchEvent::Modified(pg) = ev {
                let st = serde_json::to_value(&pg.status).unwrap_or(Value::Null);
                let mut all = sink.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if all.last() != Some(&st) {
                    all.push(st);
                }
            }
        }
    });
    // `once` (4 x 1 CPU) names a scheduler that starts later; `stuck` (4 x 2 CPU on the 4-CPU node) the running one.
    let late = format!("{}-late", c.sched);
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &c.ns);
    for (group, scheduler, cpu) in [("once", late.as_str(), "1"), ("stuck", c.sched.as_str(), "2")] {
        let pg: PodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
            "metadata": { "name": group },
            "spec": { "schedulingPolicy": { "gang": { "minCount": 4 } } },
        }))?;
        groups.create(&PostParams::default(), &pg).await?;
        for i in 0..4 {
            let mut pod = pod_template(scheduler, cpu, "Never");
            pod["metadata"] = json!({ "name": format!("{group}-{i}"), "labels": { phalanx_api::labels::POD_GROUP: group } });
            pods.create(&PostParams::default(), &serde_json::from_value(pod)?)
                .await?;
        }
    }
    let condition = |pg: &PodGroup, status: &str| {
        pg.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == POD_GROUP_INITIALLY_SCHEDULED && c.status == status)
        })
    };
    // The stuck gang: the scheduler's reason, then the controllers' counters beside it.
    wait_for(
        "stuck: Unschedulable and the controllers' counters",
        WAIT,
        || async {
            let pg = groups.get("stuck").await?;
            let pods = pg.status.as_ref().and_then(|s| s.pods);
            Ok((condition(&pg, "False") && pods == Some(4)).then_some(()))
        },
    )
    .await?;
    // `stuck`'s counters are the positive sign: its pods were created after `once`'s, and one pod watch delivers
    // them in order, so the controllers had `once`'s four pods when they counted `stuck`'s. `once` still shows
    // nothing, and the watch's history (checked below) says it never showed anything before it was placed.
    let waiting = groups.get("once").await?;
    ensure!(
        waiting
            .status
            .as_ref()
            .is_none_or(|s| s.conditions.is_empty() && s.pods.is_none()),
        "a gang that only waits got a status: {:?}",
        waiting.status
    );
    start_scheduler(&c.client, &c.ns, &late, &c.shutdown);
    let placed = wait_for("once: PodGroupInitiallyScheduled=True", WAIT, || async {
        let pg = groups.get("once").await?;
        Ok(condition(&pg, "True").then_some(pg))
    })
    .await?;
    // The watch has delivered that update too (what was placed is in the history).
    wait_for("the watch delivered once's placed status", WAIT, || async {
        let want = serde_json::to_value(&placed.status)?;
        let all = statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(all.contains(&want).then_some(()))
    })
    .await?;
    watch.abort();
    let seen = statuses
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let first = seen
        .iter()
        .position(|st| !st.is_null() && st["conditions"].as_array().is_some_and(|c| !c.is_empty()))
        .with_context(|| format!("no status seen: {seen:?}"))?;
    ensure!(
        seen[..first]
            .iter()
            .all(|st| st.is_null() || (st["pods"].is_null() && st["scheduledPods"].is_null())),
        "the waiting gang got a status before it was placed: {seen:?}"
    );
    let st = &seen[first];
    let is = st["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == POD_GROUP_INITIALLY_SCHEDULED))
        .with_context(|| format!("the first status is without PodGroupInitiallyScheduled: {seen:?}"))?;
    let valid = st["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Valid"));
    ensure!(
        is["status"] == "True"
            && is["reason"] == "Scheduled"
            && valid.is_some_and(|v| v["status"] == "True")
            && st["scheduledPods"] == 4
            && st["pods"] == 4,
        "the first status of the gang is not the scheduled gang in one write: {seen:?}"
    );
    // The condition is the controllers' (the scheduler that placed the gang wrote none).
    let owns_status = |manager: &str| {
        placed.metadata.managed_fields.iter().flatten().any(|e| {
            e.manager.as_deref() == Some(manager)
                && e.subresource.as_deref() == Some("status")
                && e.fields_v1.as_ref().is_some_and(|f| {
                    f.0["f:status"]["f:conditions"]
                        [format!("k:{{\"type\":\"{POD_GROUP_INITIALLY_SCHEDULED}\"}}")]
                    .get("f:status")
                    .is_some()
                })
        })
    };
    ensure!(
        owns_status(phalanx_api::field_managers::CONTROLLER)
            && !owns_status(phalanx_api::field_managers::SCHEDULER),
        "PodGroupInitiallyScheduled's status is not the controllers' alone: {:?}",
        placed.metadata.managed_fields
    );
    Ok(())
}
