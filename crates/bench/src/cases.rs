//! One benchmark run of one case, always with the same protocol:
//!
//! 1. a fresh namespace; the PodGroups, then all pods, are created while NO scheduler serves them (bounded
//!    concurrency, admin identity);
//! 2. the timing watch lists the namespace (0 pods bound);
//! 3. `start` = now; the scheduler (or the bind-rate binder) is started: kube-scheduler as a new process, Phalanx
//!    as a new in-process `Store` + `phalanx_driver::run`, both cold;
//! 4. wait until every pod is bound (or the timeout); then, for group cases, until every PodGroup reports
//!    `PodGroupInitiallyScheduled=True` (proof that the scheduler gang-scheduled them);
//! 5. clean up (pods deleted with grace 0, namespace deleted and gone) while the scheduler still runs, then stop
//!    the scheduler, then let the machine settle.
//!
//! So each scheduler runs alone, and the figure covers start-up (lists/informers) plus scheduling and binding
//! of a backlog, as in upstream scheduler_perf's throughput of a `createPods` step.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{Binding, Namespace, ObjectReference, Pod};
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::cluster::{Cluster, KubeScheduler};
use crate::measure::{BindTracker, Summary, summarize};
use crate::workload::{self, Case};

/// Settings shared by every run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Number of groups.
    pub gangs: usize,
    /// Pods per group (and the gang's minCount).
    pub gang_size: usize,
    /// Parallel create calls while setting up.
    pub create_concurrency: usize,
    /// Binds in flight: Phalanx's `bind_concurrency` and the bind-rate binder's.
    pub bind_concurrency: usize,
    /// kube-scheduler `clientConnection.qps` / `burst`.
    pub qps: u32,
    /// See `qps`.
    pub burst: u32,
    /// How long to wait for all pods to bind.
    pub timeout: Duration,
    /// Pause after each run's cleanup.
    pub settle: Duration,
    /// Also run Phalanx's reconcilers (as `phalanx run` does) in the phalanx case.
    pub with_controllers: bool,
    /// kube-scheduler `--v`.
    pub kube_scheduler_v: u8,
}

impl Settings {
    /// Pods per run.
    pub fn pods(&self) -> usize {
        self.gangs * self.gang_size
    }
}

/// The result of one run.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Every pod bound and (for group cases) every PodGroup reported scheduled.
    Done {
        /// Timing.
        summary: Summary,
        /// PodGroups with `PodGroupInitiallyScheduled=True` (= all of them; 0 for bind-rate).
        groups_scheduled: usize,
    },
    /// Not everything was bound or gang-scheduled; no rate is reported.
    Failed(String),
}

/// What is running for a case, to stop after cleanup.
enum Running {
    Binder(tokio::task::JoinHandle<BinderResult>),
    Upstream(KubeScheduler),
    Phalanx {
        shutdown: CancellationToken,
        tasks: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
        _leader: tokio::sync::watch::Sender<bool>,
        /// The scheduler's metrics, read at the end for the snapshot cost per cycle.
        registry: Registry,
    },
}

struct BinderResult {
    errors: usize,
    first_error: Option<String>,
}

/// The clients and objects every run uses.
pub struct Ctx {
    /// Admin client: setup, creation, timing watch, cleanup.
    pub admin: Client,
    /// `system:kube-scheduler` client: Phalanx and the bind-rate binder.
    pub sched: Client,
    /// The cluster's paths.
    pub cluster: Cluster,
    /// Benchmark node names.
    pub nodes: Vec<String>,
    /// Settings.
    pub settings: Settings,
}

/// Runs `case` once (protocol in the module doc). Errors are setup/cleanup failures of the harness itself; a
/// scheduler that does not bind everything yields `Ok(Outcome::Failed)`.
///
/// # Errors
/// When the namespace, groups or pods cannot be created, or the timing watch cannot start.
pub async fn run(ctx: &Ctx, case: Case) -> anyhow::Result<Outcome> {
    let ns = phalanx_testenv::create_namespace(&ctx.admin, &format!("bench-{case}")).await?;
    let result = run_in(ctx, case, &ns).await;
    if let Err(e) = cleanup(&ctx.admin, &ns).await {
        tracing::warn!(error = %format!("{e:#}"), %ns, "cleanup failed");
        eprintln!("bench-e2e: warning: cleanup of {ns} failed: {e:#}");
    }
    let outcome = match result {
        Ok((outcome, running)) => {
            if let Some(r) = running {
                stop(r).await;
            }
            Ok(outcome)
        }
        Err(e) => Err(e),
    };
    tokio::time::sleep(ctx.settings.settle).await;
    outcome
}

async fn run_in(ctx: &Ctx, case: Case, ns: &str) -> anyhow::Result<(Outcome, Option<Running>)> {
    let s = &ctx.settings;
    let min = i32::try_from(s.gang_size).context("gang size too large")?;
    create_groups(ctx, case, ns, min).await?;
    let pods = create_pods(ctx, case, ns).await?;
    let mut tracker = BindTracker::start(ctx.admin.clone(), ns).await?;
    anyhow::ensure!(
        tracker.bound() == 0,
        "{} pods were bound before the scheduler started",
        tracker.bound()
    );

    let writes_before = crate::measure::mutating_requests(&ctx.admin).await.ok();
    let start = Instant::now();
    let running = match case {
        Case::BindRate => Running::Binder(tokio::spawn(bind_all(
            ctx.sched.clone(),
            pods,
            ctx.nodes.clone(),
            s.bind_concurrency,
        ))),
        Case::Upstream => Running::Upstream(
            KubeScheduler::start(
                &ctx.cluster,
                s.qps,
                s.burst,
                s.kube_scheduler_v,
                &format!("kube-scheduler-{ns}.log"),
            )
            .await?,
        ),
        Case::Phalanx => start_phalanx(ctx),
    };
    let want = s.pods();
    let bound = tracker.wait_bound(want, s.timeout).await;
    let stamps = tracker.stamps();
    tracker.stop();
    if bound < want {
        let hint = match &running {
            Running::Upstream(k) => format!("; kube-scheduler log {}", k.log().display()),
            _ => String::new(),
        };
        let msg = format!("only {bound}/{want} pods bound after {:?}{hint}", s.timeout);
        return Ok((Outcome::Failed(msg), Some(running)));
    }
    let Some(summary) = summarize(start, &stamps) else {
        return Ok((Outcome::Failed("no bind observed".into()), Some(running)));
    };
    let running = match running {
        Running::Binder(h) => {
            let r = h.await.context("bind-rate binder task")?;
            if r.errors > 0 {
                let msg = format!(
                    "{} bind calls failed (first: {})",
                    r.errors,
                    r.first_error.unwrap_or_default()
                );
                return Ok((Outcome::Failed(msg), None));
            }
            None
        }
        other => Some(other),
    };
    let groups_scheduled = if case.has_groups() {
        let n = wait_groups_scheduled(&ctx.admin, case, ns, s.gangs).await;
        if n < s.gangs {
            let msg = format!(
                "all pods bound, but only {n}/{} PodGroups report PodGroupInitiallyScheduled=True within 60 s \
                 (not gang-scheduled?)",
                s.gangs
            );
            return Ok((Outcome::Failed(msg), running));
        }
        n
    } else {
        0
    };
    if let (Some(before), Ok(after)) = (writes_before, crate::measure::mutating_requests(&ctx.admin).await) {
        println!(
            "bench-e2e: {case} api_writes_per_pod={:.2} (mutating API requests of all clients from start to the \
             last group scheduled, per pod; minus bind-rate's figure and plus 1 = the scheduler's own)",
            (after - before) / s.pods() as f64
        );
    }
    Ok((
        Outcome::Done {
            summary,
            groups_scheduled,
        },
        running,
    ))
}

async fn create_groups(ctx: &Ctx, case: Case, ns: &str, min: i32) -> anyhow::Result<()> {
    let conc = ctx.settings.create_concurrency.max(1);
    let pp = PostParams::default();
    match case {
        Case::BindRate => Ok(()),
        Case::Upstream => {
            let api: Api<k8s_openapi::api::scheduling::v1beta1::PodGroup> =
                Api::namespaced(ctx.admin.clone(), ns);
            futures::stream::iter((0..ctx.settings.gangs).map(|g| {
                let (api, pp) = (&api, &pp);
                async move {
                    let pg = workload::upstream_pod_group(ns, &workload::group_name(g), min)?;
                    api.create(pp, &pg)
                        .await
                        .context("creating an upstream PodGroup")?;
                    anyhow::Ok(())
                }
            }))
            .buffer_unordered(conc)
            .try_collect::<Vec<()>>()
            .await
            .map(|_| ())
        }
        Case::Phalanx => {
            let api: Api<phalanx_api::v1beta1::PodGroup> = Api::namespaced(ctx.admin.clone(), ns);
            futures::stream::iter((0..ctx.settings.gangs).map(|g| {
                let (api, pp) = (&api, &pp);
                async move {
                    let pg = workload::phalanx_pod_group(ns, &workload::group_name(g), min)?;
                    api.create(pp, &pg).await.context("creating a Phalanx PodGroup")?;
                    anyhow::Ok(())
                }
            }))
            .buffer_unordered(conc)
            .try_collect::<Vec<()>>()
            .await
            .map(|_| ())
        }
    }
}

/// Creates every pod (group by group, `create_concurrency` in flight) and returns them as created (with UIDs).
async fn create_pods(ctx: &Ctx, case: Case, ns: &str) -> anyhow::Result<Vec<Pod>> {
    let s = &ctx.settings;
    let api: Api<Pod> = Api::namespaced(ctx.admin.clone(), ns);
    let pp = PostParams::default();
    let keys = (0..s.gangs).flat_map(|g| (0..s.gang_size).map(move |p| (g, p)));
    futures::stream::iter(keys.map(|(g, p)| {
        let (api, pp) = (&api, &pp);
        async move {
            let pod = workload::pod(case, ns, g, p)?;
            api.create(pp, &pod)
                .await
                .with_context(|| format!("creating pod {ns}/{}", workload::pod_name(g, p)))
        }
    }))
    .buffer_unordered(s.create_concurrency.max(1))
    .try_collect()
    .await
}

/// The bind-rate "scheduler": binds pod `i` to node `i mod N` through `pods/binding` (with the pod's UID, as
/// Phalanx's binder does), `concurrency` calls in flight.
async fn bind_all(client: Client, pods: Vec<Pod>, nodes: Vec<String>, concurrency: usize) -> BinderResult {
    let nodes = &nodes;
    let client = &client;
    let results: Vec<Result<(), String>> =
        futures::stream::iter(pods.into_iter().enumerate().map(|(i, pod)| async move {
            let (Some(ns), Some(name)) = (pod.metadata.namespace.clone(), pod.metadata.name.clone()) else {
                return Err("created pod has no name".to_owned());
            };
            let node = nodes.get(i % nodes.len().max(1)).cloned().unwrap_or_default();
            let binding = Binding {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(ns.clone()),
                    uid: pod.metadata.uid.clone(),
                    ..ObjectMeta::default()
                },
                target: ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Node".into()),
                    name: Some(node),
                    ..ObjectReference::default()
                },
            };
            Api::<Pod>::namespaced(client.clone(), &ns)
                .create_subresource::<_, serde_json::Value>(
                    "binding",
                    &name,
                    &PostParams::default(),
                    &binding,
                )
                .await
                .map(|_| ())
                .map_err(|e| format!("{ns}/{name}: {e}"))
        }))
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let errors: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    BinderResult {
        errors: errors.len(),
        first_error: errors.into_iter().next(),
    }
}

/// Starts Phalanx in-process, cold: a new `Store` (7 reflectors) and the scheduling driver, leader from the start,
/// under the `system:kube-scheduler` identity; optionally the reconcilers too.
fn start_phalanx(ctx: &Ctx) -> Running {
    let store = phalanx_store::Store::start(ctx.sched.clone(), phalanx_store::StoreConfig::default());
    let (leader_tx, leader) = tokio::sync::watch::channel(true);
    let shutdown = CancellationToken::new();
    let mut registry = Registry::default();
    let opts = phalanx_driver::SchedulerOptions {
        bind_concurrency: ctx.settings.bind_concurrency,
        ..Default::default()
    };
    let mut tasks = vec![tokio::spawn(phalanx_driver::run(
        ctx.sched.clone(),
        store.clone(),
        opts,
        leader.clone(),
        shutdown.clone(),
        &mut registry,
    ))];
    if ctx.settings.with_controllers {
        tasks.push(tokio::spawn(phalanx_controllers::run_controllers(
            ctx.sched.clone(),
            store,
            phalanx_controllers::ControllerOptions::default(),
            leader,
            shutdown.clone(),
            &mut registry,
        )));
    }
    Running::Phalanx {
        shutdown,
        tasks,
        _leader: leader_tx,
        registry,
    }
}

/// `bench-e2e: phalanx snapshot ...`: the mean time to bring a cycle's snapshot up to date, per mode (incremental:
/// only what changed since the last cycle; full: built from scratch), from `scheduler_snapshot_duration_seconds`.
fn snapshot_cost(registry: &Registry) -> String {
    let mut text = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut text, registry);
    let value = |name: &str, mode: &str| -> f64 {
        let prefix = format!("scheduler_snapshot_duration_seconds_{name}{{mode=\"{mode}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let mut out = String::from("bench-e2e: phalanx snapshot");
    for mode in ["incremental", "full"] {
        let (sum, count) = (value("sum", mode), value("count", mode));
        let mean_us = if count > 0.0 { sum / count * 1e6 } else { 0.0 };
        out.push_str(&format!(" {mode}_cycles={count} {mode}_mean_us={mean_us:.1}"));
    }
    out
}

async fn stop(r: Running) {
    match r {
        Running::Binder(h) => h.abort(),
        Running::Upstream(k) => k.stop().await,
        Running::Phalanx {
            shutdown,
            tasks,
            registry,
            ..
        } => {
            println!("{}", snapshot_cost(&registry));
            shutdown.cancel();
            for t in tasks {
                match tokio::time::timeout(Duration::from_secs(10), t).await {
                    Ok(Ok(Ok(()))) => {}
                    Ok(Ok(Err(e))) => eprintln!("bench-e2e: warning: phalanx task ended with error: {e:#}"),
                    Ok(Err(e)) => eprintln!("bench-e2e: warning: phalanx task panicked: {e}"),
                    Err(_) => eprintln!("bench-e2e: warning: phalanx task did not stop within 10 s"),
                }
            }
        }
    }
}

/// Polls (every 250 ms, up to 60 s) until all `gangs` PodGroups of `ns` report `PodGroupInitiallyScheduled=True`;
/// returns how many did at the end.
async fn wait_groups_scheduled(admin: &Client, case: Case, ns: &str, gangs: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = 0;
    while Instant::now() < deadline {
        match count_scheduled(admin, case, ns).await {
            Ok(n) => {
                last = n;
                if n >= gangs {
                    break;
                }
            }
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "listing PodGroups"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    last
}

async fn count_scheduled(admin: &Client, case: Case, ns: &str) -> anyhow::Result<usize> {
    let t = phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED;
    let values: Vec<serde_json::Value> = match case {
        Case::Upstream => {
            Api::<k8s_openapi::api::scheduling::v1beta1::PodGroup>::namespaced(admin.clone(), ns)
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<_, _>>()?
        }
        Case::Phalanx => Api::<phalanx_api::v1beta1::PodGroup>::namespaced(admin.clone(), ns)
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?,
        Case::BindRate => Vec::new(),
    };
    Ok(values.iter().filter(|v| workload::condition_true(v, t)).count())
}

/// Deletes the namespace's pods with grace period 0 (no kubelet to finish a graceful deletion), then the namespace,
/// and waits (up to 180 s) until it is gone, so the next run starts on a quiet cluster.
async fn cleanup(admin: &Client, ns: &str) -> anyhow::Result<()> {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    Api::<Pod>::namespaced(admin.clone(), ns)
        .delete_collection(&dp, &ListParams::default())
        .await
        .context("deleting the pods")?;
    let nss: Api<Namespace> = Api::all(admin.clone());
    nss.delete(ns, &DeleteParams::default())
        .await
        .context("deleting the namespace")?;
    phalanx_testenv::wait_for(&format!("namespace {ns} gone"), Duration::from_secs(180), || {
        let nss = nss.clone();
        async move { Ok(nss.get_opt(ns).await?.is_none().then_some(())) }
    })
    .await
}
