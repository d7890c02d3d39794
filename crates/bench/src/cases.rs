//! One benchmark run of one case, always with the same protocol:
//!
//! 1. a fresh namespace; the PodGroups, then all pods, are created while NO scheduler serves them (bounded
//!    concurrency, admin identity);
//! 2. the timing watch lists the namespace (0 pods bound);
//! 3. `start` = now; the scheduler (or the bind-rate binder) is started: kube-scheduler and `phalanx run` each as a
//!    new child process, both cold;
//! 4. wait until every pod is bound (or the timeout); then, for group cases, until every PodGroup reports
//!    `PodGroupInitiallyScheduled=True` (proof that the scheduler gang-scheduled them); then read the child's
//!    peak RSS and CPU time from `/proc`, the API server's request counters, and (Phalanx) the scheduler's
//!    `/metrics`;
//! 5. clean up (pods deleted with grace 0, namespace deleted and gone) while the scheduler still runs, then stop
//!    the scheduler, then let the machine settle.
//!
//! So each scheduler runs alone, and the figure covers start-up (lists/informers) plus scheduling and binding
//! of a backlog, as in upstream scheduler_perf's throughput of a `createPods` step.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::cluster::{ChildProcess, Cluster, KubeScheduler, Phalanx};
use crate::control_plane;
use crate::measure::{self, BindTracker, Figures, Summary, summarize};
use crate::procfs;
use crate::workload::{self, Case};
use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{Binding, Namespace, ObjectReference, Pod};
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};

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
    /// kube-scheduler `--v`.
    pub kube_scheduler_v: u8,
    /// Devices per node (0: none); with devices every pod claims one through a template ([`crate::devices`]).
    pub devices_per_node: usize,
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
        /// Resources, latencies and API calls.
        figures: Figures,
    },
    /// Not everything was bound or gang-scheduled; no rate is reported.
    Failed(String),
}

/// What is running for a case, to stop after cleanup.
enum Running {
    Binder(tokio::task::JoinHandle<BinderResult>),
    Upstream(ChildProcess),
    Phalanx(Phalanx),
}

impl Running {
    fn process(&mut self) -> Option<&mut ChildProcess> {
        match self {
            Running::Binder(_) => None,
            Running::Upstream(p) => Some(p),
            Running::Phalanx(p) => Some(&mut p.process),
        }
    }
}

struct BinderResult {
    errors: usize,
    first_error: Option<String>,
}

/// The clients and objects every run uses.
pub struct Ctx {
    /// Admin client: setup, creation, timing watch, cleanup.
    pub admin: Client,
    /// `system:kube-scheduler` client: the bind-rate binder.
    pub sched: Client,
    /// The `phalanx` binary run as `phalanx run`.
    pub phalanx_bin: std::path::PathBuf,
    /// The `phalanx` binary of the `phalanx-base` case (empty when that case is not run).
    pub base_phalanx_bin: std::path::PathBuf,
    /// Whether the API server serves the chart's admission policies (installed for `phalanx`, removed for
    /// `phalanx-base`).
    pub policies_served: bool,
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
    if ctx.policies_served {
        // As each binary is installed: the chart's admission policies come with this commit's chart only.
        match case {
            Case::Phalanx => {
                phalanx_testenv::apply_admission_policies(&ctx.admin).await?;
            }
            Case::PhalanxBase => {
                phalanx_testenv::remove_admission_policies(&ctx.admin).await?;
            }
            Case::BindRate | Case::Upstream => {}
        }
    }
    let devices = s.devices_per_node > 0;
    if devices {
        crate::devices::create_template(&ctx.admin, ns).await?;
    }
    let created = create_groups(ctx, case, ns, min).await?;
    let pods = create_pods(ctx, case, ns).await?;
    if devices {
        let took = crate::devices::wait_claims(&ctx.admin, ns, s.pods(), s.timeout).await?;
        eprintln!(
            "bench-e2e: {case} kube-controller-manager created the {} pods' claims in {:.1} s (before the start)",
            s.pods(),
            took.as_secs_f64()
        );
    }
    let mut tracker = BindTracker::start(ctx.admin.clone(), ns).await?;
    anyhow::ensure!(
        tracker.bound() == 0,
        "{} pods were bound before the scheduler started",
        tracker.bound()
    );

    let counters_before = measure::api_counters(&ctx.admin).await.ok();
    let cpu_before = control_plane::read(&ctx.cluster.state_dir);
    let start = Instant::now();
    let mut running = match case {
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
        Case::Phalanx | Case::PhalanxBase => Running::Phalanx(
            Phalanx::start(
                &ctx.cluster,
                if case == Case::PhalanxBase {
                    &ctx.base_phalanx_bin
                } else {
                    &ctx.phalanx_bin
                },
                s.bind_concurrency,
                &format!("phalanx-{ns}.log"),
            )
            .await?,
        ),
    };
    let want = s.pods();
    let mut figures = Figures::default();
    if tracker.wait_bound(1, s.timeout).await >= 1 {
        figures.at_first_bind = running.process().and_then(ChildProcess::sample);
    }
    let bound = tracker
        .wait_bound(want, s.timeout.saturating_sub(start.elapsed()))
        .await;
    let cpu_bound = control_plane::read(&ctx.cluster.state_dir);
    let scheduler_cpu_bound = running.process().and_then(ChildProcess::sample).map(|p| p.cpu_s);
    let bound_at = tracker.bound_at();
    tracker.stop();
    if bound < want {
        let hint = match &running {
            Running::Upstream(k) => format!("; kube-scheduler log {}", k.log().display()),
            Running::Phalanx(p) => format!("; phalanx log {}", p.process.log().display()),
            Running::Binder(_) => String::new(),
        };
        let msg = format!("only {bound}/{want} pods bound after {:?}{hint}", s.timeout);
        return Ok((Outcome::Failed(msg), Some(running)));
    }
    let stamps: Vec<Instant> = bound_at.values().copied().collect();
    let Some(summary) = summarize(start, &stamps) else {
        return Ok((Outcome::Failed("no bind observed".into()), Some(running)));
    };
    // Printed now, not only in the run's summary line after the cleanup: with 100,000 pods the API server can drop
    // the benchmark's connections while it deletes them, and the summary line was lost that way twice.
    println!(
        "bench-e2e: {case} timing first_bind_s={:.2} pods_per_sec={:.1} steady_pods_per_sec={:.1} wall_s={:.2}",
        summary.first_bind_s, summary.pods_per_sec, summary.steady_pods_per_sec, summary.wall_s
    );
    println!(
        "{}",
        control_plane::line(
            &case.to_string(),
            "binds",
            &cpu_before,
            &cpu_bound,
            scheduler_cpu_bound
        )
    );
    let mut running = match running {
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
        // At least 60 s, or what is left of --timeout: a large backlog's last status writes trail its binds.
        let wait = s
            .timeout
            .saturating_sub(start.elapsed())
            .max(Duration::from_secs(60));
        let n = wait_groups_scheduled(&ctx.admin, case, ns, s.gangs, wait).await;
        if n < s.gangs {
            let msg = format!(
                "all pods bound, but only {n}/{} PodGroups report PodGroupInitiallyScheduled=True within {} s \
                 (not gang-scheduled?)",
                s.gangs,
                wait.as_secs()
            );
            return Ok((Outcome::Failed(msg), running));
        }
        n
    } else {
        0
    };
    // The end of the run's window: the process, the API server, the scheduler's own metrics, in that order.
    figures.at_end = running
        .as_mut()
        .and_then(Running::process)
        .and_then(ChildProcess::sample);
    let counters_after = measure::api_counters(&ctx.admin).await.ok();
    if let Some(Running::Phalanx(p)) = &running {
        match p.metrics().await {
            Ok(text) => println!("{}", snapshot_cost(&text)),
            Err(e) => eprintln!("bench-e2e: warning: reading phalanx /metrics failed: {e:#}"),
        }
    }
    let pods_f = s.pods() as f64;
    if let (Some(before), Some(after)) = (counters_before, counters_after) {
        figures.api_writes_per_pod = Some((after.mutating - before.mutating) / pods_f);
        figures.api_calls_per_pod = Some((after.scheduler_requests - before.scheduler_requests) / pods_f);
        let by: Vec<String> = after
            .writes_per_pod_since(&before, pods_f)
            .iter()
            .map(|(k, n)| format!("{k}={n:.2}"))
            .collect();
        println!(
            "bench-e2e: {case} api_writes_per_pod_by_kind {} (all clients, per pod, same window)",
            by.join(" ")
        );
        if case.has_groups() {
            println!(
                "bench-e2e: {case} group_writes_per_gang={:.3} (podgroups and podgroups/status writes of all clients, \
                 every verb, per group, same window)",
                after.group_writes_per_group_since(&before, s.gangs as f64)
            );
        }
    }
    figures.cpu_s_per_1000_pods = figures.at_end.map(|p| p.cpu_s / pods_f * 1000.0);
    if case.has_groups() {
        let last = measure::last_bind_per_group(&bound_at);
        let from_start = measure::gang_latencies(&last, |_| Some(start));
        let from_created = measure::gang_latencies(&last, |g| created.get(g).copied());
        figures.gang_p50_s = measure::percentile(&from_start, 50.0);
        figures.gang_p99_s = measure::percentile(&from_start, 99.0);
        figures.gang_from_created_p50_s = measure::percentile(&from_created, 50.0);
        figures.gang_from_created_p99_s = measure::percentile(&from_created, 99.0);
    }
    for line in crate::report::figure_lines(case, &figures, procfs::clock_ticks()) {
        println!("{line}");
    }
    Ok((
        Outcome::Done {
            summary,
            groups_scheduled,
            figures,
        },
        running,
    ))
}

/// Creates the case's PodGroups; returns, per group name, the instant its create call returned.
async fn create_groups(
    ctx: &Ctx,
    case: Case,
    ns: &str,
    min: i32,
) -> anyhow::Result<HashMap<String, Instant>> {
    let conc = ctx.settings.create_concurrency.max(1);
    let pp = PostParams::default();
    match case {
        Case::BindRate => Ok(HashMap::new()),
        Case::Upstream => {
            let api: Api<k8s_openapi::api::scheduling::v1beta1::PodGroup> =
                Api::namespaced(ctx.admin.clone(), ns);
            futures::stream::iter((0..ctx.settings.gangs).map(|g| {
                let (api, pp) = (&api, &pp);
                async move {
                    let name = workload::group_name(g);
                    let pg = workload::upstream_pod_group(ns, &name, min)?;
                    api.create(pp, &pg)
                        .await
                        .context("creating an upstream PodGroup")?;
                    anyhow::Ok((name, Instant::now()))
                }
            }))
            .buffer_unordered(conc)
            .try_collect()
            .await
        }
        Case::Phalanx | Case::PhalanxBase => {
            let api: Api<phalanx_api::v1beta1::PodGroup> = Api::namespaced(ctx.admin.clone(), ns);
            futures::stream::iter((0..ctx.settings.gangs).map(|g| {
                let (api, pp) = (&api, &pp);
                async move {
                    let name = workload::group_name(g);
                    let pg = workload::phalanx_pod_group(ns, &name, min)?;
                    api.create(pp, &pg).await.context("creating a Phalanx PodGroup")?;
                    anyhow::Ok((name, Instant::now()))
                }
            }))
            .buffer_unordered(conc)
            .try_collect()
            .await
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
            let pod = workload::pod(case, ns, g, p, s.devices_per_node > 0)?;
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

/// `bench-e2e: phalanx snapshot ...`: the mean time to bring a cycle's snapshot up to date, per mode (incremental:
/// only what changed since the last cycle; full: built from scratch), from the histogram
/// `scheduler_snapshot_duration_seconds` in the text of Phalanx's `/metrics` (where `phalanx run` prefixes it with
/// `phalanx_`).
fn snapshot_cost(text: &str) -> String {
    let value = |name: &str, mode: &str| -> f64 {
        let prefix = format!("scheduler_snapshot_duration_seconds_{name}{{mode=\"{mode}\"}} ");
        text.lines()
            .find_map(|l| {
                l.strip_prefix("phalanx_")
                    .unwrap_or(l)
                    .strip_prefix(&prefix)?
                    .trim()
                    .parse()
                    .ok()
            })
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
        Running::Phalanx(p) => p.process.stop().await,
    }
}

/// Polls (every second, up to `wait`) until all `gangs` PodGroups of `ns` report `PodGroupInitiallyScheduled=True`;
/// returns how many did at the end.
async fn wait_groups_scheduled(admin: &Client, case: Case, ns: &str, gangs: usize, wait: Duration) -> usize {
    let deadline = Instant::now() + wait;
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
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    last
}

async fn count_scheduled(admin: &Client, case: Case, ns: &str) -> anyhow::Result<usize> {
    let t = phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED;
    let values = match case {
        Case::Upstream => {
            groups_as_json::<k8s_openapi::api::scheduling::v1beta1::PodGroup>(admin, ns).await?
        }
        Case::Phalanx | Case::PhalanxBase => {
            groups_as_json::<phalanx_api::v1beta1::PodGroup>(admin, ns).await?
        }
        Case::BindRate => Vec::new(),
    };
    Ok(values.iter().filter(|v| workload::condition_true(v, t)).count())
}

/// The namespace's groups of either API group as JSON, for [`workload::condition_true`].
async fn groups_as_json<K>(admin: &Client, ns: &str) -> anyhow::Result<Vec<serde_json::Value>>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize,
    K::DynamicType: Default,
{
    let list = Api::<K>::namespaced(admin.clone(), ns)
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?)
}

/// Deletes the namespace's pods with grace period 0 (no kubelet to finish a graceful deletion), then the namespace,
/// and waits (up to 600 s) until it is gone, so the next run starts on a quiet cluster. A delete-collection of many
/// thousand pods can outlast the API server's 60 s request timeout (504, or the connection closed) while the
/// deletion goes on server-side: it is tried twice, and pods still there are left to the namespace deletion (the
/// namespace controller deletes them); the namespace deletion is retried up to 5 times, 3 s apart.
async fn cleanup(admin: &Client, ns: &str) -> anyhow::Result<()> {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let all = ListParams::default();
    if let Err(e) = retry("deleting the pods", 2, || pods.delete_collection(&dp, &all)).await {
        eprintln!("bench-e2e: warning: {e:#}; leaving the pods to the namespace deletion");
    }
    let nss: Api<Namespace> = Api::all(admin.clone());
    retry("deleting the namespace", 5, || async {
        match nss.delete(ns, &DeleteParams::default()).await {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            other => other.map(|_| ()),
        }
    })
    .await?;
    phalanx_testenv::wait_for(&format!("namespace {ns} gone"), Duration::from_secs(600), || {
        let nss = nss.clone();
        async move { Ok(nss.get_opt(ns).await?.is_none().then_some(())) }
    })
    .await
}

/// Runs `f` up to `attempts` times, 3 s apart, until it succeeds; the last error (with `what`) otherwise.
async fn retry<T, E, F, Fut>(what: &str, attempts: usize, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let mut attempt = 1;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt < attempts => {
                eprintln!("bench-e2e: warning: {what} failed (attempt {attempt}/{attempts}): {e}; retrying");
                attempt += 1;
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
            Err(e) => anyhow::bail!("{what} failed after {attempt} attempts: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_cost_reads_the_prefixed_histogram() {
        let text = "# HELP phalanx_scheduler_snapshot_duration_seconds x\n\
            phalanx_scheduler_snapshot_duration_seconds_sum{mode=\"incremental\"} 0.05\n\
            phalanx_scheduler_snapshot_duration_seconds_count{mode=\"incremental\"} 1000\n\
            phalanx_scheduler_snapshot_duration_seconds_bucket{mode=\"full\",le=\"0.1\"} 1\n\
            phalanx_scheduler_snapshot_duration_seconds_sum{mode=\"full\"} 0.02\n\
            phalanx_scheduler_snapshot_duration_seconds_count{mode=\"full\"} 1\n";
        assert_eq!(
            snapshot_cost(text),
            "bench-e2e: phalanx snapshot incremental_cycles=1000 incremental_mean_us=50.0 \
             full_cycles=1 full_mean_us=20000.0"
        );
        assert!(snapshot_cost("").contains("incremental_cycles=0 incremental_mean_us=0.0"));
    }
}
