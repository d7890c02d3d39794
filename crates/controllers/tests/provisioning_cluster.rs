//! Cluster Autoscaler's atomic path (issue 39, opt-in `autoscaling.provisioningRequests`) on a real control plane
//! (kube-apiserver + etcd + kube-controller-manager + kwok from phalanx-testenv), with the controllers and a
//! scheduler of this binary running with the feature on.
//!
//! Cluster Autoscaler itself cannot run here (it needs a cloud provider), so the test plays its part on the real
//! ProvisioningRequest objects, as the volume tests play the external provisioner: it sets the request's
//! `Failed=True`, then adds kwok nodes and sets `Provisioned=True`, the two answers Cluster Autoscaler gives
//! (`cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go`). The CRD is Cluster
//! Autoscaler's own, from its Go module (`hack/build-workloads.sh --crds cluster-autoscaler`: a module download,
//! seconds).
//!
//! Run: `cargo test -p phalanx-controllers --test provisioning_cluster`

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::{Pod, PodTemplate};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use phalanx_api::conditions::{CAPACITY_PROVISIONED, capacity, reasons};
use phalanx_api::labels::{CONSUME_PROVISIONING_REQUEST, PROVISIONING_CLASS_NAME};
use phalanx_api::v1beta1::PodGroup;
use phalanx_controllers::provisioning::ProvisioningOptions;
use phalanx_controllers::provisioning::types::ProvisioningRequest;
use phalanx_controllers::{ControllerOptions, run_controllers};
use phalanx_store::{Store, StoreConfig};
use phalanx_testenv::{FakeNode, TestEnv, create_namespace, wait_for};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A generous deadline for anything Phalanx does (a 5 s retry backoff included) on a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(90);
/// The class the test configures (Cluster Autoscaler's atomic scale-up).
const CLASS: &str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";

/// Cluster Autoscaler's ProvisioningRequest CRD, read from its Go module.
fn provisioning_request_crd() -> Result<String> {
    // This crate's own checkout (not `TestEnv::repo_root`, which is the testenv crate's, compiled elsewhere when
    // checkouts share a target directory).
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::process::Command::new(root.join("hack/build-workloads.sh"))
        .args(["--crds", "cluster-autoscaler"])
        .output()
        .context(
            "running hack/build-workloads.sh --crds cluster-autoscaler (Go and the module proxy are needed)",
        )?;
    ensure!(
        out.status.success(),
        "hack/build-workloads.sh --crds cluster-autoscaler failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut yaml = String::new();
    for path in String::from_utf8_lossy(&out.stdout).lines() {
        yaml.push_str("\n---\n");
        yaml.push_str(&std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?);
    }
    Ok(yaml)
}

/// Starts the controllers (ProvisioningRequests on) and a scheduler named `sched` over the nodes of `ns`
/// (ProvisioningRequest hold on), as `phalanx run` wires them, until `shutdown`.
fn start_phalanx(client: &Client, ns: &str, sched: &str, shutdown: &CancellationToken) {
    let (leader_tx, leader_rx) = watch::channel(true);
    let mut registry = Registry::default();
    let controllers = run_controllers(
        client.clone(),
        Store::start(client.clone(), StoreConfig::default()),
        ControllerOptions {
            instance: Some("provisioning-test".into()),
            scheduler_names: vec![sched.to_string()],
            initially_scheduled: true,
            provisioning: Some(ProvisioningOptions {
                class_name: CLASS.into(),
            }),
            ..Default::default()
        },
        leader_rx.clone(),
        shutdown.clone(),
        &mut registry,
    );
    let scheduler = phalanx_driver::run(
        client.clone(),
        Store::start(client.clone(), StoreConfig::default()),
        phalanx_driver::SchedulerOptions {
            scheduler_name: sched.to_string(),
            node_selector: Some(format!("{}={ns}", phalanx_testenv::TEST_NS_LABEL)),
            initially_scheduled_by_controllers: true,
            provisioning_requests: true,
            ..Default::default()
        },
        leader_rx,
        shutdown.clone(),
        &mut registry,
    );
    tokio::spawn(async move {
        let _keep = (leader_tx, registry);
        let (c, s) = futures::join!(controllers, scheduler);
        for r in [c, s] {
            if let Err(e) = r {
                tracing::error!(error = %e, "a Phalanx component ended with an error");
            }
        }
    });
}

/// The requests in `ns`, by name.
async fn requests(api: &Api<ProvisioningRequest>) -> Result<Vec<ProvisioningRequest>> {
    let mut list = api.list(&ListParams::default()).await?.items;
    list.sort_by_key(ResourceExt::name_any);
    Ok(list)
}

/// Plays Cluster Autoscaler: sets condition `type_=True` on request `name`.
async fn answer(api: &Api<ProvisioningRequest>, name: &str, type_: &str, message: &str) -> Result<()> {
    let patch = json!({ "status": { "conditions": [{
        "type": type_, "status": "True", "reason": type_, "message": message,
        "lastTransitionTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
    }]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("setting {type_}=True on ProvisioningRequest {name}"))?;
    Ok(())
}

/// The PodGroup's `CapacityProvisioned` condition: (status, reason, message).
async fn capacity_condition(api: &Api<PodGroup>, name: &str) -> Result<Option<(String, String, String)>> {
    let pg = api.get(name).await?;
    Ok(pg
        .status
        .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == CAPACITY_PROVISIONED))
        .map(|c| (c.status, c.reason, c.message)))
}

/// A gang of 4 with no room, opted in: exactly one request (right podSets, count, class, controller reference),
/// members annotated, nothing bound and `PodScheduled=False/WaitingForProvisioning`; after `Failed=True` a second
/// request replaces the first (condition `Failed`, then `Retrying`); after nodes and `Provisioned=True` the gang
/// binds whole; deleting the group lets the garbage collector delete the request and its template.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_waits_for_its_provisioning_request_retries_a_failure_and_binds_once_provisioned() -> Result<()>
{
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
    let started = Instant::now();
    let env = TestEnv::shared();
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    phalanx_testenv::apply_crds(&client, &provisioning_request_crd()?).await?;
    let ns = create_namespace(&client, "provreq").await?;
    let sched = format!("phalanx-{ns}");
    let shutdown = CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    start_phalanx(&client, &ns, &sched, &shutdown);

    let groups: Api<PodGroup> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let prs: Api<ProvisioningRequest> = Api::namespaced(client.clone(), &ns);
    let templates: Api<PodTemplate> = Api::namespaced(client.clone(), &ns);
    let pg: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
        "metadata": { "name": "train", "annotations": { "scheduling.phalanx.dev/provisioning-request": "true" } },
        "spec": { "schedulingPolicy": { "gang": { "minCount": 4 } } }
    }))?;
    let uid = groups
        .create(&PostParams::default(), &pg)
        .await?
        .uid()
        .context("uid")?;
    for i in 0..4 {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": format!("w-{i}"),
                          "labels": { "scheduling.phalanx.dev/pod-group": "train", "app": "train", "index": i.to_string() } },
            "spec": {
                "schedulerName": sched,
                "terminationGracePeriodSeconds": 0,
                "containers": [{ "name": "c", "image": "busybox", "command": ["run", i.to_string()],
                                 "resources": { "requests": { "cpu": "1" } } }]
            }
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }

    // One request, made from the members.
    let first = wait_for("the first ProvisioningRequest", WAIT, || async {
        Ok(requests(&prs).await?.into_iter().next())
    })
    .await?;
    ensure!(first.name_any() == "train-1", "request {}", first.name_any());
    ensure!(first.spec.provisioning_class_name == CLASS, "{:?}", first.spec);
    ensure!(
        first.spec.pod_sets.len() == 1 && first.spec.pod_sets[0].count == 4,
        "one template of 4 pods: {:?}",
        first.spec.pod_sets
    );
    let owner = first.owner_references().first().cloned().context("no owner")?;
    ensure!(
        owner.kind == "PodGroup" && owner.uid == uid && owner.controller == Some(true),
        "{owner:?}"
    );
    let template = templates
        .get(&first.spec.pod_sets[0].pod_template_ref.name)
        .await?;
    ensure!(
        template.owner_references().iter().any(|o| o.uid == uid),
        "template owner"
    );
    let tspec = template.template.and_then(|t| t.spec).context("template spec")?;
    ensure!(
        tspec.containers[0].command.is_none() && tspec.containers[0].resources.is_some(),
        "{tspec:?}"
    );

    // Members annotated; held with Phalanx's own reason, never Unschedulable; nothing bound.
    let annotated = |request: &'static str| {
        let pods = pods.clone();
        move || {
            let pods = pods.clone();
            async move {
                let list = pods.list(&ListParams::default()).await?.items;
                Ok((list.len() == 4
                    && list.iter().all(|p| {
                        let a = p.annotations();
                        a.get(CONSUME_PROVISIONING_REQUEST).map(String::as_str) == Some(request)
                            && a.get(PROVISIONING_CLASS_NAME).map(String::as_str) == Some(CLASS)
                    }))
                .then_some(list))
            }
        }
    };
    wait_for("members annotated with train-1", WAIT, annotated("train-1")).await?;
    let held = wait_for(
        "PodScheduled=False/WaitingForProvisioning on every member",
        WAIT,
        || async {
            let list = pods.list(&ListParams::default()).await?.items;
            let reasons: Vec<Option<String>> = list
                .iter()
                .map(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
                        .and_then(|c| c.reason.clone())
                })
                .collect();
            Ok(reasons
                .iter()
                .all(|r| r.as_deref() == Some(reasons::WAITING_FOR_PROVISIONING))
                .then_some(list))
        },
    )
    .await?;
    ensure!(
        held.iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()),
        "bound early"
    );
    let (status, reason, message) = capacity_condition(&groups, "train")
        .await?
        .context("no condition")?;
    ensure!(
        status == "False" && reason == capacity::PENDING && message.contains("train-1"),
        "{reason}: {message}"
    );
    ensure!(requests(&prs).await?.len() == 1, "exactly one request");

    // Cluster Autoscaler gives up: Phalanx shows it and, after the backoff, makes attempt 2.
    answer(&prs, "train-1", "Failed", "out of quota in zone a").await?;
    let failed = wait_for("CapacityProvisioned=False/Failed", WAIT, || async {
        Ok(capacity_condition(&groups, "train")
            .await?
            .filter(|(_, r, _)| r == capacity::FAILED || r == capacity::RETRYING))
    })
    .await?;
    ensure!(
        failed.1 == capacity::RETRYING || failed.2.contains("out of quota"),
        "{failed:?}"
    );
    wait_for("train-2 replaces train-1", WAIT, || async {
        let names: Vec<String> = requests(&prs).await?.iter().map(ResourceExt::name_any).collect();
        Ok((names == ["train-2"]).then_some(()))
    })
    .await?;
    wait_for("CapacityProvisioned=False/Retrying", WAIT, || async {
        Ok(capacity_condition(&groups, "train")
            .await?
            .filter(|(s, r, m)| s == "False" && r == capacity::RETRYING && m.contains("train-2")))
    })
    .await?;
    wait_for("members annotated with train-2", WAIT, annotated("train-2")).await?;
    wait_for("train-1's template deleted", WAIT, || async {
        let names: Vec<String> = templates
            .list(&ListParams::default())
            .await?
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        Ok(names.iter().all(|n| n.starts_with("train-2-")).then_some(()))
    })
    .await?;

    // Cluster Autoscaler adds the nodes and says Provisioned: the gang binds, whole.
    for n in 0..2 {
        FakeNode::new(format!("{ns}-n{n}"))
            .cpu("2")
            .memory("8Gi")
            .pods(110)
            .test_namespace(&ns)
            .create(&client)
            .await?;
    }
    let still = pods.list(&ListParams::default()).await?.items;
    ensure!(
        still
            .iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()),
        "bound before Provisioned"
    );
    answer(&prs, "train-2", "Provisioned", "2 nodes added").await?;
    wait_for("all 4 members bound", WAIT, || async {
        let list = pods.list(&ListParams::default()).await?.items;
        Ok(list
            .iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .then_some(()))
    })
    .await?;
    let (status, reason, _) = capacity_condition(&groups, "train")
        .await?
        .context("no condition")?;
    ensure!(
        status == "True" && reason == capacity::PROVISIONED,
        "{status} {reason}"
    );

    // Deleting the group deletes its request and template (garbage collector).
    pods.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    groups.delete("train", &DeleteParams::default()).await?;
    wait_for(
        "the request and its template collected with the group",
        WAIT,
        || async {
            let left =
                requests(&prs).await?.len() + templates.list(&ListParams::default()).await?.items.len();
            Ok((left == 0).then_some(()))
        },
    )
    .await?;
    eprintln!("provisioning test: {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
