//! Phalanx beside the real workload controllers (issue 38): JobSet v0.10.1 and LeaderWorkerSet v0.7.0 create the
//! pods, Phalanx groups them per kind and gang-schedules the groups.
//!
//! On the real control plane of phalanx-testenv (kube-controller-manager creates the Jobs' and StatefulSets' pods,
//! kwok turns bound pods Running and Ready), this test runs both controllers built from their Go modules by
//! `hack/build-workloads.sh` (run here; a no-op when cached), each as a child process with its CRDs from its module
//! and its webhooks registered by URL on loopback (serving certificate from a CA made here with openssl; the pod
//! webhooks narrowed to their own pods by an objectSelector), plus Phalanx's controllers and one in-process
//! scheduler. The harness (`workloads/harness.rs`) starts all of it once per binary; each case has its own
//! namespace and nodes, and pins its pods to them with a `nodeSelector`, so the cases run in parallel.
//!
//! Expected groups (the grouping contract, `crates/controllers/src/integrations/kinds/`), every one labelled
//! `scheduling.phalanx.dev/owner-uid: <owner uid>`:
//! - JobSet `train` (AnyOrder, several replicated jobs): CompositePodGroup `train-jobset`, PodGroups
//!   `train-jobset-<replicated job>` as its children, each a gang of `replicas × min(parallelism, completions)`;
//! - JobSet with `startupPolicyOrder: InOrder`: PodGroups `train-jobset-<replicated job>`, no CompositePodGroup;
//! - LeaderWorkerSet `infer`, replica group `i`: CompositePodGroup `infer-leaderworkerset-<i>` with PodGroups
//!   `infer-leaderworkerset-<i>-leader` (1) and `infer-leaderworkerset-<i>-workers` (`size − 1`).
//!
//! Opt-in: `make test-workloads` (a cold build of the two controllers takes minutes, so it is not in `make test`).
//! Run: `cargo test -p phalanx-controllers --features workloads-test --test workloads`

#[path = "workloads/cluster.rs"]
mod cluster;
#[path = "workloads/harness.rs"]
mod harness;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use phalanx_api::owners::GANG;
use serde_json::{Value, json};

use cluster::{Case, JOBSET, LWS, Unit, case};

/// Pod label of every pod of a JobSet.
const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
/// Pod label: the replicated job of a JobSet's pod.
const REPLICATED_JOB: &str = "jobset.sigs.k8s.io/replicatedjob-name";
/// Pod label of every pod of a LeaderWorkerSet.
const LWS_NAME: &str = "leaderworkerset.sigs.k8s.io/name";
/// Pod label: the replica group of a LeaderWorkerSet's pod.
const GROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/group-index";

/// A gang JobSet `name` whose replicated jobs are `(name, replicas, parallelism = completions)`, 1 cpu per pod.
fn jobset(c: &Case, name: &str, in_order: bool, jobs: &[(&str, i32, i32)]) -> Value {
    let replicated: Vec<Value> = jobs
        .iter()
        .map(|(rj, replicas, pods)| {
            json!({ "name": rj, "replicas": replicas, "template": { "spec": {
                "parallelism": pods, "completions": pods, "backoffLimit": 0,
                "template": c.pod_template("1", "Never"),
            } } })
        })
        .collect();
    let mut js = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": { "name": name, "annotations": { GANG: "true" } },
        "spec": { "replicatedJobs": replicated },
    });
    if in_order {
        js["spec"]["startupPolicy"] = json!({ "startupPolicyOrder": "InOrder" });
    }
    js
}

fn uid(o: &impl ResourceExt) -> Result<String> {
    o.uid().context("created object without uid")
}

/// The unit of an AnyOrder JobSet with a driver (1 pod) and workers (2 × 4 pods).
fn driver_workers(name: &str) -> Unit {
    Unit {
        composite: Some(format!("{name}-jobset")),
        groups: vec![
            (format!("{name}-jobset-driver"), 1),
            (format!("{name}-jobset-workers"), 8),
        ],
    }
}

/// A JobSet of 9 pods (driver 1 × 1, workers 2 × 4, 1 cpu each) on 3 nodes of 3 cpu binds whole; an identical
/// second one binds none of its pods while the first holds the room (observed once the scheduler has refused
/// it, `*InitiallyScheduled=False/Unschedulable`); once the first is deleted, the second binds whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobset_binds_whole_and_a_second_waits() -> Result<()> {
    let c = case("jobset-whole", 3, "3").await?;
    let jobs = [("driver", 1, 1), ("workers", 2, 4)];
    let first = c.create(&JOBSET, jobset(&c, "train", false, &jobs)).await?;
    let sel = format!("{JOBSET_NAME}=train");
    c.until_created(&sel, 9).await?;
    c.expect_unit(&driver_workers("train"), &uid(&first)?).await?;
    c.until_pods(&sel, 9, 9).await?;

    let second = c.create(&JOBSET, jobset(&c, "train-b", false, &jobs)).await?;
    let sel_b = format!("{JOBSET_NAME}=train-b");
    let unit_b = driver_workers("train-b");
    c.until_created(&sel_b, 9).await?;
    c.expect_unit(&unit_b, &uid(&second)?).await?;
    c.until(
        "JobSet train-b refused by the scheduler (Unschedulable)",
        || async { Ok(c.refused(&unit_b).await?.then_some(())) },
    )
    .await?;
    let (pods, bound) = c.counts(&sel_b).await?;
    ensure!(
        (pods, bound) == (9, 0),
        "JobSet train-b: {bound} of {pods} pods bound while train holds the room\n{}",
        c.describe().await
    );
    ensure!(
        c.counts(&sel).await? == (9, 9),
        "JobSet train lost pods\n{}",
        c.describe().await
    );

    // Its Jobs too: the garbage collector learns of a CRD only at its next discovery resync (every 30 s), so the
    // JobSet's dependents would wait for that, with its CRD installed just before this test. Jobs it knows.
    c.delete(&JOBSET, "train").await?;
    c.delete_jobs(&sel).await?;
    c.until_pods(&sel, 0, 0).await?;
    c.until_pods(&sel_b, 9, 9).await
}

/// `startupPolicyOrder: InOrder`: the JobSet controller creates the workers' Job only once the driver's is Ready
/// (kwok marks a bound pod Ready). Each replicated job is a gang of its own (no CompositePodGroup, which would wait
/// for pods not created yet), and both bind whole; 3 pods on a node of 3 cpu.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobset_in_order_runs_both_jobs() -> Result<()> {
    let c = case("jobset-inorder", 1, "3").await?;
    let js = c
        .create(
            &JOBSET,
            jobset(&c, "train", true, &[("driver", 1, 1), ("workers", 1, 2)]),
        )
        .await?;
    let owner = uid(&js)?;
    let driver = format!("{JOBSET_NAME}=train,{REPLICATED_JOB}=driver");
    let workers = format!("{JOBSET_NAME}=train,{REPLICATED_JOB}=workers");
    c.until_created(&driver, 1).await?;
    let alone = |rj: &str, min| Unit {
        composite: None,
        groups: vec![(format!("train-jobset-{rj}"), min)],
    };
    c.expect_unit(&alone("driver", 1), &owner).await?;
    c.until_pods(&driver, 1, 1).await?;
    // The JobSet controller waits for this before it creates the next Job; kwok's pod-ready stage writes it.
    c.until("the driver pod Ready (kwok)", || async {
        let ready = c.pods(&driver).await?.iter().all(pod_ready);
        Ok(ready.then_some(()))
    })
    .await?;
    c.until_created(&workers, 2).await?;
    c.expect_unit(&alone("workers", 2), &owner).await?;
    c.until_pods(&workers, 2, 2).await?;
    ensure!(
        !c.composite_exists("train-jobset").await?,
        "an InOrder JobSet got the CompositePodGroup train-jobset\n{}",
        c.describe().await
    );
    Ok(())
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A LeaderWorkerSet of 3 replica groups of 4 pods (1 cpu each) on 2 nodes of 4 cpu: exactly 2 groups bind whole,
/// the third binds none (observed once the scheduler has refused it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lws_three_groups_room_for_two() -> Result<()> {
    let c = case("lws-room-for-two", 2, "4").await?;
    let lws = c
        .create(
            &LWS,
            json!({
                "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                "metadata": { "name": "infer", "annotations": { GANG: "true" } },
                "spec": { "replicas": 3, "leaderWorkerTemplate": {
                    "size": 4, "workerTemplate": c.pod_template("1", "Always") } },
            }),
        )
        .await?;
    let owner = uid(&lws)?;
    let sel = format!("{LWS_NAME}=infer");
    c.until_created(&sel, 12).await?;
    let unit = |i: usize| Unit {
        composite: Some(format!("infer-leaderworkerset-{i}")),
        groups: vec![
            (format!("infer-leaderworkerset-{i}-leader"), 1),
            (format!("infer-leaderworkerset-{i}-workers"), 3),
        ],
    };
    for i in 0..3 {
        c.expect_unit(&unit(i), &owner).await?;
    }
    let refused = c
        .until(
            "2 replica groups bound whole, the third refused (Unschedulable) with none bound",
            || async {
                let mut whole = 0;
                let mut empty = Vec::new();
                for i in 0..3 {
                    match c.counts(&format!("{sel},{GROUP_INDEX}={i}")).await? {
                        (4, 4) => whole += 1,
                        (4, 0) => empty.push(i),
                        _ => return Ok(None),
                    }
                }
                match empty[..] {
                    [i] if whole == 2 && c.refused(&unit(i)).await? => Ok(Some(i)),
                    _ => Ok(None),
                }
            },
        )
        .await?;
    let (pods, bound) = c.counts(&sel).await?;
    ensure!(
        (pods, bound) == (12, 8),
        "after group {refused} was refused: {bound} of {pods} pods bound, want 8 of 12\n{}",
        c.describe().await
    );
    Ok(())
}
