//! Phalanx beside the real workload controllers (issue 38): JobSet v0.10.1, LeaderWorkerSet v0.7.0, KubeRay v1.5.0,
//! Kubeflow Trainer v2.0.0 and MPI Operator v0.6.0 create the pods, Phalanx groups them per kind and gang-schedules
//! the groups.
//!
//! On the real control plane of phalanx-testenv (kube-controller-manager creates the Jobs' and StatefulSets' pods,
//! kwok turns bound pods Running and Ready, and never completes them), this test runs the five controllers built
//! from their Go modules by `hack/build-workloads.sh` (run here; a no-op when cached), each as a child process with
//! its CRDs from its module and its webhooks, when it has some, registered by URL on loopback (serving certificate
//! from a CA made here with openssl; the pod webhooks narrowed to their own pods by an objectSelector), plus
//! Phalanx's controllers and one in-process scheduler. The harness (`workloads/harness.rs`, `controllers.rs`,
//! `webhooks.rs`) starts all of it once per binary; each case has its own namespace and nodes, and pins its pods to
//! them with a `nodeSelector`, so the cases run in parallel.
//!
//! Expected groups (the grouping contract, `crates/controllers/src/integrations/kinds/`), every one labelled
//! `scheduling.phalanx.dev/owner-uid: <owner uid>`:
//! - JobSet `train` (AnyOrder, several replicated jobs): CompositePodGroup `train-jobset`, PodGroups
//!   `train-jobset-<replicated job>` as its children, each a gang of `replicas × min(parallelism, completions)`;
//! - JobSet with `startupPolicyOrder: InOrder`: PodGroups `train-jobset-<replicated job>`, no CompositePodGroup;
//! - LeaderWorkerSet `infer`, replica group `i`: CompositePodGroup `infer-leaderworkerset-<i>` with PodGroups
//!   `infer-leaderworkerset-<i>-leader` (1) and `infer-leaderworkerset-<i>-workers` (`size − 1`);
//! - TrainJob `train` (its runtime: a `dataset-initializer` step, then the trainer step `node`): PodGroup
//!   `train-trainjob-dataset-initializer` without a gang (Basic), PodGroup `train-trainjob-node` a gang of
//!   `numNodes`, no CompositePodGroup;
//! - RayCluster `rc` with `enableInTreeAutoscaling`: CompositePodGroup `rc-raycluster` with PodGroups
//!   `rc-raycluster-head` (1) and `rc-raycluster-<worker group>` (`minReplicas × numOfHosts`);
//! - MPIJob `mj` (`AtStartup`): CompositePodGroup `mj-mpijob` with PodGroups `mj-mpijob-launcher` (1) and
//!   `mj-mpijob-workers` (`Worker.replicas`).
//!
//! Opt-in: `make test-workloads` (a cold build of the controllers takes minutes, so it is not in `make test`).
//! Run: `cargo test -p phalanx-controllers --features workloads-test --test workloads`

#[path = "shared/checks.rs"]
mod checks;
#[path = "workloads/cluster.rs"]
mod cluster;
#[path = "workloads/controllers.rs"]
mod controllers;
#[path = "workloads/harness.rs"]
mod harness;
#[path = "shared/processes.rs"]
mod processes;
#[path = "workloads/webhooks.rs"]
mod webhooks;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use phalanx_api::owners::GANG;
use serde_json::{Value, json};

use cluster::{CLUSTER_TRAINING_RUNTIME, Case, JOBSET, LWS, MPIJOB, RAYCLUSTER, TRAINJOB, Unit, case};

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
            (format!("{name}-jobset-driver"), Some(1)),
            (format!("{name}-jobset-workers"), Some(8)),
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
        groups: vec![(format!("train-jobset-{rj}"), Some(min))],
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
            (format!("infer-leaderworkerset-{i}-leader"), Some(1)),
            (format!("infer-leaderworkerset-{i}-workers"), Some(3)),
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

/// Pod label of a JobSet's pod naming its replicated job's step in a training runtime.
const TRAINJOB_STEP: &str = "trainer.kubeflow.org/trainjob-ancestor-step";

/// A pod template of [`Case::pod_template`] (1 cpu) whose one container is named `container`.
fn named_template(c: &Case, container: &str, restart: &str) -> Value {
    let mut t = c.pod_template("1", restart);
    t["spec"]["containers"][0]["name"] = json!(container);
    t
}

/// A ClusterTrainingRuntime `name` for this case's nodes (TrainJob has no schedulerName of its own): a JobSet of a
/// `dataset-initializer` step (1 pod) and the trainer step `node` (`numNodes` pods, created once the initializer's
/// Job is Complete), every pod for `phalanx-scheduler` on this case's nodes. The shape of Trainer's shipped
/// runtimes (`manifests/base/runtimes`), without their images and commands.
fn training_runtime(c: &Case, name: &str) -> Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": { "name": name },
        "spec": { "mlPolicy": { "numNodes": 1 }, "template": { "spec": { "replicatedJobs": [
            { "name": "dataset-initializer", "replicas": 1, "template": {
                "metadata": { "labels": { TRAINJOB_STEP: "dataset-initializer" } },
                "spec": { "parallelism": 1, "completions": 1, "backoffLimit": 0,
                          "template": named_template(c, "dataset-initializer", "Never") } } },
            { "name": "node", "replicas": 1,
              "dependsOn": [{ "name": "dataset-initializer", "status": "Complete" }],
              "template": {
                "metadata": { "labels": { TRAINJOB_STEP: "trainer" } },
                "spec": { "backoffLimit": 0, "template": named_template(c, "node", "Never") } } },
        ] } } },
    })
}

/// A TrainJob of 4 nodes (1 cpu each) on its own runtime, with room for exactly 4 pods (2 nodes of 2 cpu): the
/// dataset initializer's pod binds first and alone (its group has no gang; the trainer step's Job does not exist
/// until the initializer's is Complete); once it is marked Succeeded, the 4 trainer pods bind whole (a gang of 4,
/// in the room the initializer left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trainjob_initializer_first_then_the_trainer_gang() -> Result<()> {
    let c = case("trainjob-init", 2, "2").await?;
    // Cluster-scoped: named after the case's namespace.
    let runtime = c.ns.clone();
    c.create(&CLUSTER_TRAINING_RUNTIME, training_runtime(&c, &runtime))
        .await?;
    let tj = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": { "name": "train", "annotations": { GANG: "true" } },
        "spec": { "runtimeRef": { "name": runtime }, "trainer": { "numNodes": 4 } },
    });
    // Its webhook looks the runtime up in its cache, which may not have it yet: retried, the last refusal kept.
    let refusal = std::sync::Mutex::new(String::new());
    let tj = c
        .until(
            "the TrainJob admitted (its webhook knows the runtime)",
            || async {
                match c.create(&TRAINJOB, tj.clone()).await {
                    Ok(o) => Ok(Some(o)),
                    Err(e) => {
                        *refusal.lock().unwrap_or_else(|p| p.into_inner()) = format!("{e:#}");
                        Ok(None)
                    }
                }
            },
        )
        .await
        .with_context(|| {
            let last = refusal.lock().unwrap_or_else(|p| p.into_inner());
            format!("last refusal: {last}")
        })?;
    let owner = uid(&tj)?;
    let init = format!("{JOBSET_NAME}=train,{REPLICATED_JOB}=dataset-initializer");
    let node = format!("{JOBSET_NAME}=train,{REPLICATED_JOB}=node");
    c.until_created(&init, 1).await?;
    c.expect_unit(
        &Unit {
            composite: None,
            groups: vec![("train-trainjob-dataset-initializer".into(), None)],
        },
        &owner,
    )
    .await?;
    c.until_pods(&init, 1, 1).await?;
    ensure!(
        c.counts(&node).await? == (0, 0),
        "trainer pods exist before the initializer completed\n{}",
        c.describe().await
    );
    let pod = c.pods(&init).await?[0].name_any();
    c.mark_succeeded(&pod).await?;
    c.until_created(&node, 4).await?;
    c.expect_unit(
        &Unit {
            composite: None,
            groups: vec![("train-trainjob-node".into(), Some(4))],
        },
        &owner,
    )
    .await?;
    c.until_pods(&node, 4, 4).await?;
    ensure!(
        !c.composite_exists("train-trainjob").await?,
        "a TrainJob with one trainer replicated job got the CompositePodGroup train-trainjob\n{}",
        c.describe().await
    );
    Ok(())
}

/// A worker group of a RayCluster (1 cpu per pod).
fn ray_group(c: &Case, name: &str, min: i32, max: i32) -> Value {
    json!({ "groupName": name, "replicas": min, "minReplicas": min, "maxReplicas": max,
            "rayStartParams": {}, "template": named_template(c, "ray-worker", "Always") })
}

/// A RayCluster with the in-tree autoscaler enabled (none runs: KubeRay adds its sidecar to the head pod, kwok runs
/// no container; the sidecar requests nothing here, so every pod needs 1 cpu): head + group `a` (min 2, max 3) +
/// group `b` (min 1, max 2). With room for 3 pods none binds (the minimum is 4, all or nothing); with room for 6
/// all 4 bind; `a` scaled to 3 (as the autoscaler would) adds a worker that binds alone, the quorum being met.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raycluster_minimum_together_then_an_extra_worker_alone() -> Result<()> {
    let c = case("raycluster-min", 1, "3").await?;
    let rc = c
        .create(
            &RAYCLUSTER,
            json!({
                "apiVersion": "ray.io/v1", "kind": "RayCluster",
                "metadata": { "name": "rc", "annotations": { GANG: "true" } },
                "spec": {
                    "enableInTreeAutoscaling": true,
                    "autoscalerOptions": { "resources": {
                        "requests": { "cpu": "0", "memory": "0" },
                        "limits": { "cpu": "100m", "memory": "64Mi" } } },
                    "headGroupSpec": { "rayStartParams": {},
                                       "template": named_template(&c, "ray-head", "Always") },
                    "workerGroupSpecs": [ray_group(&c, "a", 2, 3), ray_group(&c, "b", 1, 2)],
                },
            }),
        )
        .await?;
    let owner = uid(&rc)?;
    let sel = "ray.io/cluster=rc";
    let unit = Unit {
        composite: Some("rc-raycluster".into()),
        groups: vec![
            ("rc-raycluster-head".into(), Some(1)),
            ("rc-raycluster-a".into(), Some(2)),
            ("rc-raycluster-b".into(), Some(1)),
        ],
    };
    c.until_created(sel, 4).await?;
    c.expect_unit(&unit, &owner).await?;
    c.until(
        "RayCluster rc refused by the scheduler (Unschedulable)",
        || async { Ok(c.refused(&unit).await?.then_some(())) },
    )
    .await?;
    let (pods, bound) = c.counts(sel).await?;
    ensure!(
        (pods, bound) == (4, 0),
        "RayCluster rc: {bound} of {pods} pods bound with room for 3\n{}",
        c.describe().await
    );

    c.add_nodes(1, "3").await?;
    c.until_pods(sel, 4, 4).await?;

    let mut groups = c.api(&RAYCLUSTER).get("rc").await?.data["spec"]["workerGroupSpecs"].clone();
    groups[0]["replicas"] = json!(3);
    c.patch(
        &RAYCLUSTER,
        "rc",
        json!({ "spec": { "workerGroupSpecs": groups } }),
    )
    .await?;
    c.until_pods(&format!("{sel},ray.io/group=a"), 3, 3).await?;
    c.until_pods(sel, 5, 5).await?;
    // The quorum stays at the minimum: the extra worker joined group a, whose gang is still 2.
    c.expect_unit(&unit, &owner).await
}

/// An MPIJob (launcher + 4 workers, 1 cpu each, `AtStartup`): with room for 4 pods none binds; once a node makes
/// room for the 5th, all 5 bind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpijob_launcher_and_workers_whole_or_nothing() -> Result<()> {
    let c = case("mpijob-whole", 1, "4").await?;
    // The operator sets the pods' restartPolicy from the replica spec (and warns when the template has one).
    let template = |container: &str| {
        let mut t = named_template(&c, container, "Never");
        if let Some(spec) = t["spec"].as_object_mut() {
            spec.remove("restartPolicy");
        }
        t
    };
    let mj = c
        .create(
            &MPIJOB,
            json!({
                "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                "metadata": { "name": "mj", "annotations": { GANG: "true" } },
                "spec": { "slotsPerWorker": 1, "mpiReplicaSpecs": {
                    "Launcher": { "replicas": 1, "restartPolicy": "Never", "template": template("launcher") },
                    "Worker": { "replicas": 4, "restartPolicy": "Never", "template": template("worker") },
                } },
            }),
        )
        .await?;
    let owner = uid(&mj)?;
    let sel = "training.kubeflow.org/job-name=mj";
    let unit = Unit {
        composite: Some("mj-mpijob".into()),
        groups: vec![
            ("mj-mpijob-launcher".into(), Some(1)),
            ("mj-mpijob-workers".into(), Some(4)),
        ],
    };
    c.until_created(sel, 5).await?;
    c.expect_unit(&unit, &owner).await?;
    c.until("MPIJob mj refused by the scheduler (Unschedulable)", || async {
        Ok(c.refused(&unit).await?.then_some(()))
    })
    .await?;
    let (pods, bound) = c.counts(sel).await?;
    ensure!(
        (pods, bound) == (5, 0),
        "MPIJob mj: {bound} of {pods} pods bound with room for 4\n{}",
        c.describe().await
    );
    c.add_nodes(1, "1").await?;
    c.until_pods(sel, 5, 5).await
}
