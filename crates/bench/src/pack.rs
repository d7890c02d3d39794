//! `phalanx-bench pack`: how well each scheduler packs a burst of GPU gang jobs, in the spirit of NVIDIA's
//! knavigator. On the bench's own control plane (as `phalanx-bench`'s other cases): `--nodes` kwok nodes of
//! `--gpus-per-node` `nvidia.com/gpu`, a seeded burst of gang jobs ([`crate::pack_jobs`]) created while no
//! scheduler runs, then one scheduler started; each job's pods are deleted its run time after its whole gang is
//! bound ([`crate::pack_track`]), so later jobs get the room. The same burst runs for every scheduler, one after the
//! other:
//!
//! - `upstream`: kube-scheduler v1.37.2, native gang (`scheduling.k8s.io/v1beta1` PodGroup), default profile
//!   (NodeResourcesFit LeastAllocated over cpu and memory);
//! - `upstream-most-allocated`: the same with NodeResourcesFit `scoringStrategy.type: MostAllocated` over cpu,
//!   memory and `nvidia.com/gpu` (weights 1; upstream `pkg/scheduler/framework/plugins/noderesources/
//!   most_allocated.go`), the bin-packing profile of the upstream docs ("Resource Bin Packing");
//! - `phalanx`: `phalanx run` with its defaults; `phalanx-base`: another `phalanx` binary (`--base-phalanx-bin`).
//!
//! Prints `bench-pack: <scheduler> mean_occupancy=... last_start_s=... makespan_s=... largest_free_min=...
//! largest_free_mean=...` per run and writes the occupancy chart to `--svg`. Method and results:
//! docs/benchmarks.md, "Packing".

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};

use crate::cluster::{self, ChildProcess, Cluster, KubeScheduler, Phalanx};
use crate::pack_figures::{Figures, figures};
use crate::pack_jobs::{self, BurstSpec, GPU, Job};
use crate::pack_sim;
use crate::pack_svg::{self, Series};
use crate::pack_track::{JOB_LABEL, Timeline, Tracker};
use crate::workload::{self, BENCH_NODE_LABEL, Case};

/// The schedulers the packing benchmark compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PackCase {
    /// kube-scheduler, native gang, default profile.
    Upstream,
    /// kube-scheduler, native gang, NodeResourcesFit MostAllocated over cpu, memory and nvidia.com/gpu.
    UpstreamMostAllocated,
    /// `phalanx run` with its defaults.
    Phalanx,
    /// `--base-phalanx-bin` with its defaults.
    PhalanxBase,
}

impl PackCase {
    fn name(self) -> &'static str {
        match self {
            PackCase::Upstream => "upstream",
            PackCase::UpstreamMostAllocated => "upstream-most-allocated",
            PackCase::Phalanx => "phalanx",
            PackCase::PhalanxBase => "phalanx-base",
        }
    }

    /// The end-to-end case whose objects (group API, scheduler name) this one uses.
    fn objects(self) -> Case {
        match self {
            PackCase::Upstream | PackCase::UpstreamMostAllocated => Case::Upstream,
            PackCase::Phalanx | PackCase::PhalanxBase => Case::Phalanx,
        }
    }
}

/// `phalanx-bench pack [SCHEDULERS...] [--seed 41] [--jobs 50] ... [--svg FILE]`.
#[derive(Debug, Parser)]
#[command(name = "phalanx-bench pack")]
pub struct Args {
    /// Schedulers to run, in this order. Default: upstream upstream-most-allocated phalanx.
    #[arg(value_enum)]
    schedulers: Vec<PackCase>,
    /// Seed of the burst (the same seed gives the same jobs).
    #[arg(long, default_value_t = 41)]
    seed: u64,
    /// Jobs in the burst.
    #[arg(long, default_value_t = 50)]
    jobs: usize,
    /// kwok nodes.
    #[arg(long, default_value_t = 32)]
    nodes: u32,
    /// `nvidia.com/gpu` per node.
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// Most pods of one job (drawn from 1).
    #[arg(long, default_value_t = 32)]
    max_pods: u32,
    /// Most GPUs of one pod (drawn from 1).
    #[arg(long, default_value_t = 8)]
    max_gpus_per_pod: u32,
    /// Shortest run time of a job (s), counted from its whole gang bound.
    #[arg(long, default_value_t = 3)]
    min_run_s: u32,
    /// Longest run time of a job (s).
    #[arg(long, default_value_t = 12)]
    max_run_s: u32,
    /// Sampling interval of occupancy and free blocks (ms).
    #[arg(long, default_value_t = 250)]
    sample_ms: u64,
    /// Seconds to wait for every job to complete before reporting a failure.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Seconds to pause after each run's cleanup.
    #[arg(long, default_value_t = 5)]
    settle: u64,
    /// Write the GPU occupancy chart (SVG) here.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// No cluster: run the burst through Phalanx's scheduling core in virtual time, once per profile (the defaults,
    /// and MostAllocated over cpu, memory and nvidia.com/gpu), and report the same figures. Deterministic: the
    /// placement and queue policies alone, in a second.
    #[arg(long)]
    sim: bool,
    /// Write every job's start and end per scheduler here, as CSV (`scheduler,job,pods,gpus_per_pod,run_s,
    /// started_s,done_s`; times in seconds from the scheduler's start, empty when it never came): which jobs waited.
    #[arg(long)]
    timeline: Option<PathBuf>,
    /// kube-scheduler clientConnection.qps and burst.
    #[arg(long, default_value_t = 5000)]
    qps: u32,
    /// kube-scheduler `--v`.
    #[arg(long, default_value_t = 1)]
    kube_scheduler_v: u8,
    /// hack/cluster.sh state dir (default: <cargo target dir>/bench-pack/state). A running cluster there is reused.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Leave the cluster running on exit.
    #[arg(long)]
    keep_cluster: bool,
    /// The `phalanx` binary (default: `phalanx` next to this executable).
    #[arg(long)]
    phalanx_bin: Option<PathBuf>,
    /// The `phalanx` binary of the `phalanx-base` case (required with it).
    #[arg(long)]
    base_phalanx_bin: Option<PathBuf>,
}

/// The parsed arguments when the first argument is `pack` (the rest parsed as [`Args`]), else `None`.
pub fn args_if_pack() -> Option<Args> {
    let mut argv = std::env::args_os().skip(1).peekable();
    (argv.peek().is_some_and(|a| a == "pack")).then(|| Args::parse_from(argv))
}

/// The `KubeSchedulerConfiguration` of `case` (upstream cases only): the e2e bench's, plus for
/// `upstream-most-allocated` a `default-scheduler` profile whose NodeResourcesFit scores MostAllocated over cpu,
/// memory and `nvidia.com/gpu`.
pub fn kube_scheduler_config(case: PackCase, kubeconfig: &std::path::Path, qps: u32) -> String {
    let mut y = cluster::scheduler_config(kubeconfig, qps, qps);
    if case == PackCase::UpstreamMostAllocated {
        y.push_str(&format!(
            "profiles:\n- schedulerName: {}\n  pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      \
             scoringStrategy:\n        type: MostAllocated\n        resources:\n        - name: cpu\n          \
             weight: 1\n        - name: memory\n          weight: 1\n        - name: {GPU}\n          weight: 1\n",
            workload::DEFAULT_SCHEDULER
        ));
    }
    y
}

/// Pod `p` of `job` for `case`: the e2e bench's pod (100m CPU, 64Mi, the group named as each scheduler reads it)
/// plus `nvidia.com/gpu` requests and limits and the [`JOB_LABEL`].
fn job_pod(case: PackCase, ns: &str, job: &Job, p: usize) -> anyhow::Result<Pod> {
    let mut pod = workload::pod(case.objects(), ns, job.index, p, false)?;
    pod.metadata
        .labels
        .get_or_insert_default()
        .insert(JOB_LABEL.to_owned(), job.index.to_string());
    let gpus = k8s_openapi::apimachinery::pkg::api::resource::Quantity(job.gpus_per_pod.to_string());
    let c = pod
        .spec
        .as_mut()
        .and_then(|s| s.containers.first_mut())
        .context("the e2e pod has no container")?;
    let r = c.resources.get_or_insert_default();
    r.requests
        .get_or_insert_default()
        .insert(GPU.to_owned(), gpus.clone());
    r.limits.get_or_insert_default().insert(GPU.to_owned(), gpus);
    Ok(pod)
}

/// The benchmark proper: cluster, nodes, the burst, one run per scheduler, the report and the chart.
///
/// # Errors
/// Setup failures, a run that does not complete every job within `--timeout`, or an unwritable `--svg`.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let spec = BurstSpec {
        seed: args.seed,
        jobs: args.jobs,
        nodes: args.nodes,
        gpus_per_node: args.gpus_per_node,
        max_pods: args.max_pods,
        max_gpus_per_pod: args.max_gpus_per_pod,
        min_run_s: args.min_run_s,
        max_run_s: args.max_run_s,
    };
    let jobs = pack_jobs::burst(&spec)?;
    let cases = if args.schedulers.is_empty() {
        vec![
            PackCase::Upstream,
            PackCase::UpstreamMostAllocated,
            PackCase::Phalanx,
        ]
    } else {
        args.schedulers.clone()
    };
    if args.sim {
        // No cluster and no binaries: the core runs in this process.
        print_burst(&args, &jobs);
        return simulate(&args, &jobs);
    }
    let phalanx_bin = if cases.contains(&PackCase::Phalanx) {
        crate::phalanx_bin(args.phalanx_bin.as_deref())?
    } else {
        PathBuf::new()
    };
    let base_bin = match (cases.contains(&PackCase::PhalanxBase), &args.base_phalanx_bin) {
        (false, _) => PathBuf::new(),
        (true, Some(b)) if b.is_file() => b.clone(),
        (true, _) => anyhow::bail!("the phalanx-base case needs --base-phalanx-bin <FILE>"),
    };
    print_burst(&args, &jobs);
    let state_dir = args.state_dir.clone().unwrap_or_else(|| {
        crate::default_state_dir()
            .parent()
            .and_then(std::path::Path::parent)
            .map_or_else(
                || PathBuf::from("bench-pack/state"),
                |t| t.join("bench-pack/state"),
            )
    });
    eprintln!(
        "bench-pack: starting the control plane (state {})",
        state_dir.display()
    );
    let cluster = Cluster::up(&crate::repo_root(), &state_dir, args.keep_cluster).await?;
    let admin = Cluster::client(&cluster.admin_kubeconfig).await?;
    phalanx_testenv::apply_crds(&admin, &phalanx_api::crds::to_yaml())
        .await
        .context("applying the Phalanx CRDs")?;
    phalanx_testenv::apply_admission_policies(&admin)
        .await
        .context("applying the chart's admission policies")?;
    cluster::grant_scheduler_identity(&admin).await?;
    let nodes = gpu_nodes(&admin, args.nodes, args.gpus_per_node).await?;

    let mut series = Vec::new();
    let mut csv = String::from("scheduler,job,pods,gpus_per_pod,run_s,started_s,done_s\n");
    let mut failed = false;
    for case in cases {
        let load = crate::measure::load_average();
        let bin = if case == PackCase::PhalanxBase {
            &base_bin
        } else {
            &phalanx_bin
        };
        let result = run_one(&args, &cluster, &admin, case, bin, &jobs, &nodes).await;
        if let Ok(tl) = &result {
            timeline_rows(&mut csv, case.name(), &jobs, tl);
        }
        match result {
            Ok(tl) => match figures(&tl) {
                Some(f) => {
                    println!("bench-pack: {} {} load={load}", case.name(), f.line());
                    if let Some(e) = &tl.error {
                        println!("bench-pack: {} warning: {e}", case.name());
                    }
                    series.push(occupancy_series(case.name(), &tl, &f));
                }
                None => {
                    failed = true;
                    let started = tl.started.iter().flatten().count();
                    let done = tl.done.iter().flatten().count();
                    println!(
                        "bench-pack: {} FAILED started={started}/{n} done={done}/{n} within {} s load={load}",
                        case.name(),
                        args.timeout,
                        n = jobs.len()
                    );
                }
            },
            Err(e) => {
                failed = true;
                println!("bench-pack: {} FAILED harness error: {e:#}", case.name());
            }
        }
        tokio::time::sleep(Duration::from_secs(args.settle)).await;
    }
    write_outputs(&args, jobs.len(), &csv, &series, "")?;
    anyhow::ensure!(!failed, "at least one run failed (see the FAILED lines)");
    Ok(())
}

/// The burst line: its seed, size, work and the makespan no scheduler can beat (the GPU-seconds over the GPUs).
fn print_burst(args: &Args, jobs: &[Job]) {
    let gpu_s: u64 = jobs
        .iter()
        .map(|j| u64::from(j.gpus()) * u64::from(j.run_s))
        .sum();
    let total_gpus = u64::from(args.nodes) * u64::from(args.gpus_per_node);
    println!(
        "bench-pack: burst seed={} jobs={} pods={} gpus={} gpu_seconds={gpu_s} lower_bound_makespan_s={:.1} \
         nodes={} gpus_per_node={} run_s={}..={}",
        args.seed,
        jobs.len(),
        jobs.iter().map(|j| j.pods).sum::<u32>(),
        jobs.iter().map(Job::gpus).sum::<u32>(),
        gpu_s as f64 / total_gpus as f64,
        args.nodes,
        args.gpus_per_node,
        args.min_run_s,
        args.max_run_s
    );
}

/// `--sim`: the burst through the core in virtual time, per profile of [`pack_sim::profiles`].
fn simulate(args: &Args, jobs: &[Job]) -> anyhow::Result<()> {
    let mut csv = String::from("scheduler,job,pods,gpus_per_pod,run_s,started_s,done_s\n");
    let mut series = Vec::new();
    for (name, config) in pack_sim::profiles() {
        let tl = pack_sim::simulate(
            jobs,
            args.nodes,
            args.gpus_per_node,
            &config,
            Duration::from_millis(args.sample_ms),
            Duration::from_secs(args.timeout),
        );
        timeline_rows(&mut csv, name, jobs, &tl);
        let f = figures(&tl)
            .with_context(|| format!("{name}: not every job was done within {} s", args.timeout))?;
        println!("bench-pack-sim: {name} {}", f.line());
        series.push(occupancy_series(name, &tl, &f));
    }
    write_outputs(
        args,
        jobs.len(),
        &csv,
        &series,
        ", Phalanx's core in virtual time",
    )
}

/// The chart's line of one run: its occupancy samples up to the makespan.
fn occupancy_series(label: &str, tl: &Timeline, f: &Figures) -> Series {
    Series {
        label: label.to_owned(),
        points: tl
            .samples
            .iter()
            .filter(|s| s.t <= f.makespan_s)
            .map(|s| (s.t, s.occupancy))
            .collect(),
    }
}

/// Writes `--timeline` and `--svg` when asked (`what` ends the chart's title).
fn write_outputs(args: &Args, jobs: usize, csv: &str, series: &[Series], what: &str) -> anyhow::Result<()> {
    if let Some(path) = &args.timeline {
        std::fs::write(path, csv).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("bench-pack: job timeline written to {}", path.display());
    }
    if let Some(path) = &args.svg {
        let title = format!(
            "GPU occupancy, {jobs} jobs (seed {}) on {} nodes x {} GPUs{what}",
            args.seed, args.nodes, args.gpus_per_node
        );
        std::fs::write(path, pack_svg::chart(&title, series))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("bench-pack: chart written to {}", path.display());
    }
    Ok(())
}

/// Appends one CSV row per job of a run to `csv` (see `--timeline`).
fn timeline_rows(csv: &mut String, scheduler: &str, jobs: &[Job], tl: &Timeline) {
    let secs = |t: Option<&Option<f64>>| {
        t.copied()
            .flatten()
            .map(|s| format!("{s:.2}"))
            .unwrap_or_default()
    };
    for j in jobs {
        csv.push_str(&format!(
            "{scheduler},{},{},{},{},{},{}\n",
            j.index,
            j.pods,
            j.gpus_per_pod,
            j.run_s,
            secs(tl.started.get(j.index)),
            secs(tl.done.get(j.index))
        ));
    }
}

/// Makes sure nodes `bench-n00000..` exist with `gpus` `nvidia.com/gpu` each (and 32 CPU, 256Gi, 110 pods),
/// refusing a reused cluster whose benchmark nodes differ.
async fn gpu_nodes(admin: &Client, n: u32, gpus: u32) -> anyhow::Result<Vec<String>> {
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(admin.clone());
    let existing = api
        .list(&ListParams::default().labels(BENCH_NODE_LABEL))
        .await
        .context("listing benchmark nodes")?;
    let names: Vec<String> = (0..n as usize).map(workload::node_name).collect();
    let want = gpus.to_string();
    for node in &existing.items {
        let name = node.metadata.name.clone().unwrap_or_default();
        let has = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref()?.get(GPU))
            .map(|q| q.0.clone());
        anyhow::ensure!(
            names.contains(&name) && has.as_deref() == Some(want.as_str()),
            "the reused cluster's node {name} is not one of {n} nodes with {gpus} {GPU}; stop it with \
             `hack/cluster.sh down --state-dir <state dir>`"
        );
    }
    let have: Vec<String> = existing
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    futures::stream::iter(names.iter().filter(|n| !have.contains(n)).cloned().map(|name| {
        let client = admin.clone();
        let want = want.clone();
        async move {
            phalanx_testenv::FakeNode::new(name)
                .cpu("32")
                .memory("256Gi")
                .pods(110)
                .resource(GPU, want)
                .label(BENCH_NODE_LABEL, "true")
                .create(&client)
                .await
                .map(|_| ())
        }
    }))
    .buffer_unordered(16)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(names)
}

/// One scheduler on the burst: a fresh namespace with every group and pod, the tracker, the scheduler, until every
/// job completed (or `--timeout`); then cleanup, then the scheduler stopped.
async fn run_one(
    args: &Args,
    cluster: &Cluster,
    admin: &Client,
    case: PackCase,
    bin: &std::path::Path,
    jobs: &[Job],
    nodes: &[String],
) -> anyhow::Result<Timeline> {
    let ns = phalanx_testenv::create_namespace(admin, &format!("pack-{}", case.name())).await?;
    let res = run_in(args, cluster, admin, case, bin, jobs, nodes, &ns).await;
    if let Err(e) = cleanup(admin, &ns).await {
        eprintln!("bench-pack: warning: cleanup of {ns} failed: {e:#}");
    }
    let (tl, process) = res?;
    process.stop().await;
    Ok(tl)
}

#[allow(clippy::too_many_arguments)]
async fn run_in(
    args: &Args,
    cluster: &Cluster,
    admin: &Client,
    case: PackCase,
    bin: &std::path::Path,
    jobs: &[Job],
    nodes: &[String],
    ns: &str,
) -> anyhow::Result<(Timeline, ChildProcess)> {
    let pp = PostParams::default();
    for j in jobs {
        let name = workload::group_name(j.index);
        let min = i32::try_from(j.pods)?;
        match case.objects() {
            Case::Upstream => {
                Api::<k8s_openapi::api::scheduling::v1beta1::PodGroup>::namespaced(admin.clone(), ns)
                    .create(&pp, &workload::upstream_pod_group(ns, &name, min)?)
                    .await
                    .context("creating an upstream PodGroup")?;
            }
            _ => {
                Api::<phalanx_api::v1beta1::PodGroup>::namespaced(admin.clone(), ns)
                    .create(&pp, &workload::phalanx_pod_group(ns, &name, min)?)
                    .await
                    .context("creating a Phalanx PodGroup")?;
            }
        }
    }
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let all: Vec<Pod> = jobs
        .iter()
        .flat_map(|j| (0..j.pods as usize).map(move |p| job_pod(case, ns, j, p)))
        .collect::<anyhow::Result<_>>()?;
    futures::stream::iter(all.iter().map(|p| {
        let (pods, pp) = (&pods, &pp);
        async move { pods.create(pp, p).await.context("creating a pack pod") }
    }))
    .buffer_unordered(32)
    .try_collect::<Vec<Pod>>()
    .await?;

    let (client, ns_owned, objects) = (admin.clone(), ns.to_owned(), case.objects());
    let on_done = move |j: Job| {
        let (client, ns) = (client.clone(), ns_owned.clone());
        async move { delete_group(&client, &ns, objects, &workload::group_name(j.index)).await }
    };
    let start = Instant::now();
    let mut tracker = Tracker::start(
        admin.clone(),
        ns,
        jobs.to_vec(),
        nodes.to_vec(),
        args.gpus_per_node,
        Duration::from_millis(args.sample_ms.max(10)),
        start,
        on_done,
    )
    .await?;
    anyhow::ensure!(
        tracker.used_gpus() == 0,
        "pods were bound before the scheduler started"
    );
    let log = format!("{}-{ns}.log", case.name());
    let process = match case {
        PackCase::Upstream | PackCase::UpstreamMostAllocated => {
            let config = kube_scheduler_config(case, &cluster.scheduler_kubeconfig, args.qps);
            KubeScheduler::start_with_config(cluster, &config, args.kube_scheduler_v, &log).await?
        }
        PackCase::Phalanx | PackCase::PhalanxBase => {
            let bc = phalanx_driver::SchedulerOptions::default().bind_concurrency;
            Phalanx::start(cluster, bin, bc, &log).await?.process
        }
    };
    let done = tracker
        .wait_done(jobs.len(), Duration::from_secs(args.timeout))
        .await;
    if done < jobs.len() {
        eprintln!(
            "bench-pack: {}: {done}/{} jobs done after {} s; log {}",
            case.name(),
            jobs.len(),
            args.timeout,
            process.log().display()
        );
    }
    Ok((tracker.finish(), process))
}

/// Deletes group `name` of the `objects` case's API (404 is fine).
async fn delete_group(client: &Client, ns: &str, objects: Case, name: &str) -> anyhow::Result<()> {
    let dp = DeleteParams::default();
    let res = match objects {
        Case::Upstream => {
            Api::<k8s_openapi::api::scheduling::v1beta1::PodGroup>::namespaced(client.clone(), ns)
                .delete(name, &dp)
                .await
                .map(|_| ())
        }
        _ => Api::<phalanx_api::v1beta1::PodGroup>::namespaced(client.clone(), ns)
            .delete(name, &dp)
            .await
            .map(|_| ()),
    };
    match res {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other.with_context(|| format!("deleting group {ns}/{name}")),
    }
}

/// Pods deleted with grace 0, then the namespace, and waits (up to 300 s) until it is gone.
async fn cleanup(admin: &Client, ns: &str) -> anyhow::Result<()> {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let _ = Api::<Pod>::namespaced(admin.clone(), ns)
        .delete_collection(&dp, &ListParams::default())
        .await;
    let nss: Api<Namespace> = Api::all(admin.clone());
    match nss.delete(ns, &DeleteParams::default()).await {
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        other => {
            other.context("deleting the namespace")?;
        }
    }
    phalanx_testenv::wait_for(&format!("namespace {ns} gone"), Duration::from_secs(300), || {
        let nss = nss.clone();
        async move { Ok(nss.get_opt(ns).await?.is_none().then_some(())) }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_allocated_profile_scores_gpus_and_pods_ask_for_them() {
        let kc = std::path::Path::new("/k");
        let plain = kube_scheduler_config(PackCase::Upstream, kc, 5000);
        assert!(!plain.contains("profiles:"), "{plain}");
        let most = kube_scheduler_config(PackCase::UpstreamMostAllocated, kc, 5000);
        assert!(most.starts_with(&plain), "{most}");
        assert!(
            most.contains("type: MostAllocated")
                && most.contains("- name: nvidia.com/gpu\n          weight: 1")
        );
        let job = Job {
            index: 4,
            pods: 2,
            gpus_per_pod: 3,
            run_s: 5,
        };
        let pod = job_pod(PackCase::Phalanx, "ns", &job, 1).unwrap();
        assert_eq!(phalanx_api::pod_group_name(&pod), Some("gang-00004"));
        assert_eq!(pod.metadata.labels.as_ref().unwrap()[JOB_LABEL], "4");
        let r = pod.spec.unwrap().containers[0].resources.clone().unwrap();
        assert_eq!(r.limits.unwrap()[GPU].0, "3");
        assert_eq!(r.requests.unwrap()[GPU].0, "3");
        let up = job_pod(PackCase::UpstreamMostAllocated, "ns", &job, 0).unwrap();
        assert_eq!(
            up.spec.unwrap().scheduler_name.as_deref(),
            Some(workload::DEFAULT_SCHEDULER)
        );
    }
}
