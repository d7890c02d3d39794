//! A whole suite: set up the cluster, the observer and the replicas, run the negative controls, then every fault
//! its number of times, each run checked against I1-I8.
//!
//! One run: a fresh namespace, gangs arriving and finishing (not for `preempt-kill`, which brings its own pods),
//! the fault once the load is flowing, the load stopped when the fault is over, then I3 (gangs whole or empty
//! within the recovery limit), I4 (pending pods have a reason within the settle time), I6 and I7 (the audit log
//! since the previous run) and the violations of I1, I2, I5 the checker recorded meanwhile. The namespace is
//! emptied before the next run.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

use crate::audit::{AuditLog, check_writes};
use crate::checker::Checker;
use crate::context::{Ctx, Profile};
use crate::fault_kind::Fault;
use crate::faults;
use crate::harness::{self, Cluster, NODE_LABEL};
use crate::injection::{Outcome, SETUP_WAIT};
use crate::invariants::Violation;
use crate::lease::{self, SharedLeases};
use crate::processes::{ReplicaSpec, Supervisor};
use crate::proxy::Proxy;
use crate::report::{RunResult, SuiteReport};
use crate::workload::{FeedStats, Feeder, composite_resource, pod_group_resource, release_holds};

/// How to run a suite.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    /// The `phalanx` binary under test.
    pub phalanx_bin: PathBuf,
    /// Where the cluster state, logs, audit log and replica logs go.
    pub work_dir: PathBuf,
    /// Leave the cluster running afterwards (for inspection).
    pub keep: bool,
    /// Seed of the load's randomness.
    pub seed: u64,
}

/// Lease of the suite's replicas.
pub const LEASE_NAME: &str = "phalanx-chaos";
/// `spec.schedulerName` of the suite's pods (Phalanx's default).
pub const SCHEDULER_NAME: &str = phalanx_api::DEFAULT_SCHEDULER_NAME;

/// Runs `<phalanx> crds` and installs its output: the CRDs of the binary under test.
async fn install_crds(client: &kube::Client, bin: &std::path::Path) -> anyhow::Result<()> {
    let out = tokio::process::Command::new(bin)
        .arg("crds")
        .output()
        .await
        .with_context(|| format!("running {} crds", bin.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "{} crds failed: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    phalanx_testenv::apply_crds(client, &String::from_utf8(out.stdout)?).await
}

/// Runs a whole suite and returns its report. Replicas and (unless `keep`) the cluster are stopped at the end,
/// also when a run fails.
///
/// # Errors
/// The setup, a control, or a fault's injection failed (a harness failure; scheduler failures are violations in
/// the report).
pub async fn run(profile: Profile, opts: SuiteOptions) -> anyhow::Result<SuiteReport> {
    let started = Instant::now();
    std::fs::create_dir_all(&opts.work_dir)
        .with_context(|| format!("creating {}", opts.work_dir.display()))?;
    anyhow::ensure!(
        opts.phalanx_bin.is_file(),
        "no phalanx binary at {}",
        opts.phalanx_bin.display()
    );
    let cluster = Cluster::up(&opts.work_dir, opts.keep).await?;
    let result = run_on(&cluster, profile, &opts, started).await;
    cluster.down();
    result
}

async fn run_on(
    cluster: &Cluster,
    profile: Profile,
    opts: &SuiteOptions,
    started: Instant,
) -> anyhow::Result<SuiteReport> {
    let client = cluster.admin_client().await?;
    install_crds(&client, &opts.phalanx_bin).await?;
    harness::create_nodes(&client, profile.nodes, profile.node_cpu, profile.node_memory).await?;
    let lease_namespace = phalanx_testenv::create_namespace(&client, "lease").await?;
    let leases: SharedLeases = Arc::default();
    let lease_watch = lease::spawn_watch(client.clone(), &lease_namespace, LEASE_NAME, leases.clone());
    let audit = AuditLog::new(cluster.audit_log.clone(), LEASE_NAME, leases.clone());
    let tailer = audit.spawn_tailer();
    let controls = crate::controls::run(cluster, &client)
        .await
        .context("negative controls")?;
    let checker = Arc::new(Checker::start(&client, SCHEDULER_NAME, NODE_LABEL, "chaos-"));
    checker.wait_synced(Duration::from_secs(60)).await?;
    let proxy = Proxy::start(cluster.api_addr).await?;
    let replicas = Supervisor::start(ReplicaSpec {
        binary: opts.phalanx_bin.clone(),
        state_dir: cluster.state_dir.clone(),
        dir: opts.work_dir.join("replicas"),
        server: proxy.url(),
        scheduler_name: SCHEDULER_NAME.into(),
        node_selector: format!("{NODE_LABEL}=true"),
        lease_name: LEASE_NAME.into(),
        lease_namespace: lease_namespace.clone(),
        lease_duration_secs: profile.lease_duration_secs,
        renew_grace_secs: profile.renew_grace_secs,
    })?;
    let ctx = Ctx {
        cluster: cluster.clone(),
        client,
        checker,
        audit,
        leases,
        replicas,
        proxy,
        rng: Mutex::new(StdRng::seed_from_u64(opts.seed)),
        profile,
        lease_namespace,
        lease_name: LEASE_NAME.into(),
        scheduler_name: SCHEDULER_NAME.into(),
    };
    let setup = started.elapsed();
    ctx.wait_leader(true, Duration::from_secs(120))
        .await
        .context("first election")?;
    let mut results = Vec::new();
    let mut i6_from = Timestamp::now().checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(3600))?;
    for (fault, n) in ctx.profile.runs.clone() {
        for index in 1..=n {
            let r = run_once(&ctx, fault, index, &mut i6_from).await;
            eprintln!("{}", crate::report::run_line(&r));
            results.push(r);
        }
    }
    ctx.replicas.kill_all();
    tailer.abort();
    lease_watch.abort();
    Ok(SuiteReport {
        profile: ctx.profile.name,
        seed: opts.seed,
        results,
        controls,
        setup,
        duration: started.elapsed(),
        audit_bad_lines: ctx.audit.bad_lines(),
        work_dir: opts.work_dir.clone(),
    })
}

async fn wait_bound(ctx: &Ctx, ns: &str, timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if ctx.checker.bound_count(ns) > 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// One run; never fails: a harness error is recorded in the result (and the suite goes on with the next run).
async fn run_once(ctx: &Ctx, fault: Fault, index: usize, i6_from: &mut Timestamp) -> RunResult {
    let started = Instant::now();
    let from = ctx.checker.violation_count();
    let exits_from = ctx.replicas.exit_count();
    let mut r = RunResult {
        fault,
        index,
        namespace: String::new(),
        feed: FeedStats::default(),
        bound: 0,
        outcome: Outcome::default(),
        recovery: None,
        violations: Vec::new(),
        exits: Vec::new(),
        duration: Duration::ZERO,
        error: None,
    };
    let mut violations = Vec::new();
    if let Err(e) = run_body(ctx, &mut r, &mut violations).await {
        r.error = Some(format!("{e:#}"));
    }
    // I6 over everything the replicas wrote since the previous run, also after a harness error.
    let _ = ctx.audit.poll();
    let now = Timestamp::now();
    let events = ctx.audit.events(*i6_from, now);
    violations.extend(check_writes(
        &events,
        &ctx.leases,
        &ctx.lease_name,
        Supervisor::is_replica,
    ));
    violations.extend(
        ctx.checker
            .with_evictions(|l| l.check(&events, Supervisor::is_replica)),
    );
    *i6_from = now;
    let mut all = ctx.checker.violations_from(from);
    all.extend(violations);
    all.sort_by_key(|v| v.at);
    for v in &mut all {
        crate::evidence::enrich(&ctx.audit, v);
    }
    r.violations = all;
    if !r.namespace.is_empty() {
        r.bound = ctx.checker.bound_count(&r.namespace);
        if let Err(e) = cleanup(ctx, &r.namespace).await {
            r.error.get_or_insert(format!("cleanup: {e:#}"));
        }
    }
    r.exits = ctx.replicas.exits_from(exits_from);
    r.duration = started.elapsed();
    r
}

/// The run proper: namespace, load, fault, then I3 and I4 (collected into `violations`).
async fn run_body(ctx: &Ctx, r: &mut RunResult, violations: &mut Vec<Violation>) -> anyhow::Result<()> {
    let ns = phalanx_testenv::create_namespace(&ctx.client, &format!("chaos-{}", r.fault.name())).await?;
    r.namespace = ns.clone();
    let seed = ctx
        .rng
        .lock()
        .map_err(|_| anyhow::anyhow!("rng poisoned"))?
        .random();
    let feeder = r.fault.uses_load().then(|| {
        Feeder::start(
            ctx.client.clone(),
            ns.clone(),
            ctx.profile.load.clone(),
            StdRng::seed_from_u64(seed),
            ctx.scheduler_name.clone(),
            ctx.checker.clone(),
        )
    });
    if feeder.is_some() {
        if !wait_bound(ctx, &ns, Duration::from_secs(60)).await {
            r.outcome
                .notes
                .push("nothing was bound within 60 s before the fault".into());
        }
        tokio::time::sleep(ctx.profile.warmup).await;
    }
    let injected = faults::inject(ctx, r.fault, &ns).await;
    if let Some(f) = feeder {
        r.feed = f.stop().await;
    }
    let injected = injected?;
    r.outcome.failover = injected.failover;
    r.outcome.notes.extend(injected.notes);
    violations.extend(injected.violations);
    let (recovery, gangs) = ctx.checker.await_gangs(&ns, ctx.profile.recovery_limit).await;
    r.recovery = recovery;
    violations.extend(gangs);
    violations.extend(ctx.checker.await_pending_reasons(&ns, ctx.profile.settle).await);
    Ok(())
}

/// Deletes the run's pods at once (releasing any the hold finalizer keeps), then its groups and the namespace;
/// waits until the checker has seen the pods go, so the next run starts on empty nodes.
async fn cleanup(ctx: &Ctx, ns: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    pods.delete_collection(&DeleteParams::default().grace_period(0), &ListParams::default())
        .await?;
    release_holds(&ctx.client, ns, false).await?;
    for ar in [pod_group_resource(), composite_resource()] {
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ar);
        api.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
    }
    Api::<Namespace>::all(ctx.client.clone())
        .delete(ns, &DeleteParams::default())
        .await?;
    let deadline = tokio::time::Instant::now() + SETUP_WAIT;
    while ctx.checker.live_pods(ns) > 0 {
        // A release that lost a race (409) is retried.
        release_holds(&ctx.client, ns, false).await?;
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "pods of {ns} still exist {:?} after deletion: {}",
            SETUP_WAIT,
            ctx.checker.node_allocations()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}
