//! `phalanx-bench`: end-to-end scheduling throughput of Phalanx against upstream kube-scheduler v1.37.2 and the
//! raw API-server bind rate, on one real control plane on this machine, one after the other.
//!
//! ```text
//! cargo run --release -p phalanx-bench -- [bind-rate] [upstream] [phalanx] [--nodes 500] [--gangs 500] ...
//! ```
//! Prints one line per run, `bench-e2e: <case> nodes=<n> pods=<p> pods_per_sec=<x> wall_s=<y> ...`, and a final
//! `bench-e2e: ratio phalanx/upstream=<r> phalanx/bind-rate=<s>` (medians over rounds), plus per scheduler process
//! (kube-scheduler and `phalanx run`, both children of this one) its peak RSS, CPU seconds per 1,000 pods, API
//! calls per pod and gang latency, and `bench-e2e: ratio-resources phalanx/upstream ...`. Method and results:
//! docs/benchmarks.md. The project standard this follows: "Report ratios against a baseline run on the same machine
//! at the same time: upstream kube-scheduler, or the raw bind rate of the API server".

mod cases;
mod cluster;
mod control_plane;
mod devices;
mod measure;
mod pack;
mod pack_figures;
mod pack_jobs;
mod pack_sim;
mod pack_svg;
mod pack_track;
mod procfs;
mod report;
mod workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;

use crate::cases::{Ctx, Outcome, Settings};
use crate::cluster::Cluster;
use crate::workload::Case;

/// End-to-end benchmark: Phalanx vs upstream kube-scheduler vs the raw bind rate on a local control plane.
/// The packing benchmark has its own arguments: `phalanx-bench pack --help`.
#[derive(Debug, Parser)]
#[command(name = "phalanx-bench", version)]
struct Args {
    /// Cases to run, in this order (rotated each round). Default: bind-rate upstream phalanx.
    #[arg(value_enum)]
    cases: Vec<Case>,
    /// Fake kwok nodes (32 CPU, 256Gi, 110 pods each).
    #[arg(long, default_value_t = 500)]
    nodes: usize,
    /// Gangs (PodGroups) per run (500 x 8 pods takes 7-70 s per case on a 2-core machine).
    #[arg(long, default_value_t = 500)]
    gangs: usize,
    /// Pods per gang, also the gang's minCount.
    #[arg(long, default_value_t = 8)]
    gang_size: usize,
    /// Repeat the case list this many times; results are reported per run and as medians.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Parallel create calls while setting up a run (nodes, groups, pods).
    #[arg(long, default_value_t = 32)]
    create_concurrency: usize,
    /// Binds in flight for Phalanx and the bind-rate binder (default: Phalanx's own default).
    #[arg(long)]
    bind_concurrency: Option<usize>,
    /// kube-scheduler clientConnection.qps (its default, 50, caps binds at ~50/s).
    #[arg(long, default_value_t = 5000)]
    qps: u32,
    /// kube-scheduler clientConnection.burst.
    #[arg(long, default_value_t = 5000)]
    burst: u32,
    /// kube-scheduler log verbosity (`--v`); its log is `<state dir>/bench/kube-scheduler-<namespace>.log`.
    #[arg(long, default_value_t = 1)]
    kube_scheduler_v: u8,
    /// Seconds to wait for all pods of a run to be bound before reporting a failure.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// DRA devices per node (0: none). With N > 0 every node publishes a ResourceSlice of N devices of one class
    /// and every pod claims one device through a ResourceClaimTemplate (kube-controller-manager creates the claims
    /// before the scheduler starts); nodes x N must cover the pods of a run.
    #[arg(long, default_value_t = 0)]
    devices_per_node: usize,
    /// Seconds to pause after each run's cleanup.
    #[arg(long, default_value_t = 5)]
    settle: u64,
    /// hack/cluster.sh state dir (default: <cargo target dir>/bench-e2e/state). A running cluster there is reused.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Leave the cluster running on exit (stop it with `hack/cluster.sh down --state-dir <dir>`).
    #[arg(long)]
    keep_cluster: bool,
    /// The `phalanx` binary the phalanx case runs as `phalanx run` (default: `phalanx` next to this executable,
    /// i.e. `cargo build --release -p phalanx --bin phalanx`, which `make bench-e2e` does first).
    #[arg(long)]
    phalanx_bin: Option<PathBuf>,
    /// The `phalanx` binary of the `phalanx-base` case (required with it), e.g. the last commit's build: that case runs
    /// it without the chart's admission policies, so one invocation shows the figures before and after a change.
    #[arg(long)]
    base_phalanx_bin: Option<PathBuf>,
}

/// `--phalanx-bin`, else `phalanx` in the directory of the running executable (`<target>/release/`).
fn phalanx_bin(arg: Option<&Path>) -> anyhow::Result<PathBuf> {
    let bin = match arg {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .context("locating this executable")?
            .with_file_name("phalanx"),
    };
    anyhow::ensure!(
        bin.is_file(),
        "no phalanx binary at {} (build it: cargo build --release -p phalanx --bin phalanx, or pass --phalanx-bin)",
        bin.display()
    );
    Ok(bin)
}

fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// `<target>/bench-e2e/state`, with `<target>` two levels above the running binary (`<target>/release/…`).
fn default_state_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| repo_root().join("target"))
        .join("bench-e2e/state")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    // `phalanx-bench pack ...`: the packing benchmark (pack.rs), its own arguments.
    let pack_args = pack::args_if_pack();
    // A SIGTERM or SIGINT drops the run, and with it the processes it started (`ChildProcess` kills its process
    // group when dropped). The default action of SIGTERM ends this process at once and left `phalanx run` behind,
    // still binding against a cluster that was gone.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        res = async {
            match pack_args {
                Some(a) => pack::run(a).await,
                None => run(Args::parse()).await,
            }
        } => res,
        _ = term.recv() => anyhow::bail!("stopped by SIGTERM; the processes this run started were killed"),
        _ = tokio::signal::ctrl_c() => anyhow::bail!("stopped by SIGINT; the processes this run started were killed"),
    }
}

/// The benchmark proper: the control plane, the nodes, then every case and round, and the ratios.
async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.nodes > 0 && args.gangs > 0 && args.gang_size > 0,
        "--nodes, --gangs and --gang-size must be > 0"
    );
    let cases = if args.cases.is_empty() {
        vec![Case::BindRate, Case::Upstream, Case::Phalanx]
    } else {
        args.cases.clone()
    };
    let settings = Settings {
        gangs: args.gangs,
        gang_size: args.gang_size,
        create_concurrency: args.create_concurrency,
        bind_concurrency: args
            .bind_concurrency
            .unwrap_or_else(|| phalanx_driver::SchedulerOptions::default().bind_concurrency),
        qps: args.qps,
        burst: args.burst,
        timeout: Duration::from_secs(args.timeout),
        settle: Duration::from_secs(args.settle),
        kube_scheduler_v: args.kube_scheduler_v,
        devices_per_node: args.devices_per_node,
    };
    anyhow::ensure!(
        args.devices_per_node == 0 || args.nodes.saturating_mul(args.devices_per_node) >= settings.pods(),
        "--devices-per-node {}: {} nodes hold {} devices, fewer than the {} pods of a run (one device each)",
        args.devices_per_node,
        args.nodes,
        args.nodes.saturating_mul(args.devices_per_node),
        settings.pods()
    );

    let phalanx_bin = if cases.contains(&Case::Phalanx) {
        phalanx_bin(args.phalanx_bin.as_deref())?
    } else {
        PathBuf::new()
    };
    let base_phalanx_bin = if cases.contains(&Case::PhalanxBase) {
        let bin = args
            .base_phalanx_bin
            .clone()
            .context("the phalanx-base case needs --base-phalanx-bin <PATH>")?;
        anyhow::ensure!(bin.is_file(), "--base-phalanx-bin: no file at {}", bin.display());
        bin
    } else {
        PathBuf::new()
    };
    let state_dir = args.state_dir.clone().unwrap_or_else(default_state_dir);
    eprintln!(
        "bench-e2e: starting the control plane (hack/cluster.sh up, state {})",
        state_dir.display()
    );
    let cluster = Cluster::up(&repo_root(), &state_dir, args.keep_cluster).await?;
    let admin = Cluster::client(&cluster.admin_kubeconfig).await?;
    let sched = Cluster::client(&cluster.scheduler_kubeconfig).await?;
    phalanx_testenv::apply_crds(&admin, &phalanx_api::crds::to_yaml())
        .await
        .context("applying the Phalanx CRDs")?;
    // What a chart install adds where the API server serves MutatingAdmissionPolicy: the finalizer and the priority
    // filled at creation, so the controllers send no patch per group.
    let policies_served = phalanx_testenv::apply_admission_policies(&admin)
        .await
        .context("applying the chart's admission policies")?;
    println!(
        "bench-e2e: admission policies {}",
        if !policies_served {
            "not served by this API server (the controllers patch each group)"
        } else if cases.contains(&Case::PhalanxBase) {
            "installed for the phalanx case and removed for phalanx-base (finalizer and priority filled at creation)"
        } else {
            "installed (finalizer and priority filled at creation, no controller patch per group)"
        }
    );
    kube::Api::<k8s_openapi::api::scheduling::v1beta1::PodGroup>::all(admin.clone())
        .list(&kube::api::ListParams::default().limit(1))
        .await
        .context(
            "the upstream scheduling.k8s.io/v1beta1 API is not served (UPSTREAM_WORKLOAD_API=1 missing?)",
        )?;
    cluster::grant_scheduler_identity(&admin).await?;
    eprintln!("bench-e2e: creating {} kwok nodes", args.nodes);
    let nodes = cluster::ensure_nodes(&admin, args.nodes, args.create_concurrency).await?;
    if args.devices_per_node > 0 {
        eprintln!(
            "bench-e2e: publishing {} devices on each node (a ResourceSlice per node, DeviceClass {})",
            args.devices_per_node,
            devices::CLASS
        );
        devices::ensure_slices(&admin, &nodes, args.devices_per_node, args.create_concurrency).await?;
    }

    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    println!(
        "bench-e2e: setup nodes={} devices_per_node={} pods_per_run={} gangs={} gang_size={} bind_concurrency={} kube_scheduler_qps={}/{} cpus={cpus} load={}",
        args.nodes,
        args.devices_per_node,
        settings.pods(),
        settings.gangs,
        settings.gang_size,
        settings.bind_concurrency,
        settings.qps,
        settings.burst,
        measure::load_average()
    );
    if cases.contains(&Case::Phalanx) {
        println!("bench-e2e: phalanx binary {}", phalanx_bin.display());
    }
    if cases.contains(&Case::PhalanxBase) {
        println!("bench-e2e: phalanx-base binary {}", base_phalanx_bin.display());
    }
    let ctx = Ctx {
        admin,
        sched,
        phalanx_bin,
        base_phalanx_bin,
        policies_served,
        cluster,
        nodes,
        settings,
    };

    let mut rates: BTreeMap<Case, Vec<(f64, f64, f64)>> = BTreeMap::new();
    let mut figures: BTreeMap<Case, Vec<measure::Figures>> = BTreeMap::new();
    let mut failed = false;
    for round in 0..args.rounds.max(1) {
        let mut order = cases.clone();
        let shift = round % order.len().max(1);
        order.rotate_left(shift);
        for case in order {
            let load = measure::load_average();
            let outcome = cases::run(&ctx, case).await;
            let line = match outcome {
                Ok(Outcome::Done {
                    summary,
                    groups_scheduled,
                    figures: f,
                }) => {
                    figures.entry(case).or_default().push(f);
                    rates.entry(case).or_default().push((
                        summary.pods_per_sec,
                        summary.wall_s,
                        summary.steady_pods_per_sec,
                    ));
                    report::run_line(
                        case,
                        args.nodes,
                        &summary,
                        groups_scheduled,
                        ctx.settings.gangs,
                        round,
                        &load,
                    )
                }
                Ok(Outcome::Failed(msg)) => {
                    failed = true;
                    report::failure_line(case, args.nodes, ctx.settings.pods(), round, &msg)
                }
                Err(e) => {
                    failed = true;
                    report::failure_line(
                        case,
                        args.nodes,
                        ctx.settings.pods(),
                        round,
                        &format!("harness error: {e:#}"),
                    )
                }
            };
            println!("{line}");
        }
    }
    let medians: BTreeMap<Case, f64> = rates
        .iter()
        .filter_map(|(case, v)| {
            let pps: Vec<f64> = v.iter().map(|x| x.0).collect();
            let wall: Vec<f64> = v.iter().map(|x| x.1).collect();
            let m = measure::median(&pps)?;
            if args.rounds > 1 {
                println!(
                    "bench-e2e: {case} nodes={} pods={} pods_per_sec={m:.1} wall_s={:.2} runs={} (median)",
                    args.nodes,
                    ctx.settings.pods(),
                    measure::median(&wall).unwrap_or(0.0),
                    v.len()
                );
            }
            Some((*case, m))
        })
        .collect();
    let steady: BTreeMap<Case, f64> = rates
        .iter()
        .filter_map(|(case, v)| {
            Some((
                *case,
                measure::median(&v.iter().map(|x| x.2).collect::<Vec<_>>())?,
            ))
        })
        .collect();
    println!("{}", report::ratio_line(&medians, &steady));
    println!("{}", report::resource_ratio_line(&figures));
    if args.keep_cluster {
        eprintln!(
            "bench-e2e: cluster left running: export KUBECONFIG={}; stop: hack/cluster.sh down --state-dir {}",
            ctx.cluster.admin_kubeconfig.display(),
            ctx.cluster.state_dir.display()
        );
    }
    anyhow::ensure!(!failed, "at least one run failed (see the FAILED lines)");
    Ok(())
}
