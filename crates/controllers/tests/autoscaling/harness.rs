//! The harness of `tests/autoscaling.rs`: Karpenter's KWOK cloud provider as a child process (built by
//! `hack/build-workloads.sh karpenter`) with its CRDs and one KWOKNodeClass, and Phalanx's controllers and scheduler
//! in process; once per test binary (`shared/processes.rs`).
//!
//! Karpenter v1.8.0 (`kwok/main.go`) is one operator (`pkg/operator/operator.go`) configured by flags or their
//! environment variables (`pkg/operator/options/options.go`, `kwok/options/options.go`): it has no webhooks, needs no
//! namespace of its own (no `SYSTEM_NAMESPACE` among its options; with leader election off it writes no Lease),
//! binds its metrics and health servers on `:<port>`, and takes the instance types embedded in
//! `kwok/cloudprovider/instance_types.json` unless `--instance-types-file-path` names others. Its cloud provider's
//! `Create` (`kwok/cloudprovider/cloudprovider.go`) makes the Node itself, annotated `kwok.x-k8s.io/node: fake` and
//! tainted `karpenter.sh/unregistered:NoExecute`: the test control plane's kwok manages exactly the nodes with that
//! annotation (`hack/cluster.sh`: `--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake`) and marks them
//! Ready; Karpenter then registers them (the taint removed, the NodeClaim's labels and taints added).

use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::{Context as _, Result};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use phalanx_testenv::TestEnv;
use serde_json::json;

use crate::processes::{
    ControllerProcess, FIELD_MANAGER, apply_crd_dir, build_controllers, build_dir, free_port, log_dir,
    start_once, start_phalanx, wait_readyz,
};

/// The KWOKNodeClass every case's NodePool refers to.
pub const NODE_CLASS: &str = "phalanx-test";
/// Karpenter's batch window (`--batch-idle-duration`, `--batch-max-duration`; defaults 1 s and 10 s): a provisioning
/// round starts once no new pending pod arrived for the idle duration, at the latest after the max duration. Short
/// here so that a case does not wait 10 s for a round; the cases that check that Karpenter did nothing watch for
/// several windows.
pub const BATCH_IDLE: &str = "1s";
pub const BATCH_MAX: &str = "3s";

/// What the cases need to know of the shared harness.
#[derive(Clone, Debug)]
pub struct Harness {
    /// Karpenter's log, for failure messages.
    pub karpenter_log: PathBuf,
}

static HARNESS: OnceLock<std::result::Result<Harness, String>> = OnceLock::new();

/// Starts, once per test binary and on a runtime of its own: `hack/build-workloads.sh karpenter` (a no-op when
/// cached), the Phalanx CRDs, Karpenter's CRDs, the KWOKNodeClass [`NODE_CLASS`] (Ready), Karpenter, Phalanx's
/// controllers and one scheduler named `phalanx-scheduler`. Blocking: call it through `spawn_blocking`.
pub fn harness() -> std::result::Result<Harness, String> {
    start_once(&HARNESS, "autoscaling-harness", setup)
}

/// Creates the KWOKNodeClass [`NODE_CLASS`]. A NodePool is Ready (so provisioned for, `pkg/controllers/
/// provisioning/provisioner.go`) only while its NodeClass is (`pkg/controllers/nodepool/readiness/controller.go`);
/// the KWOK provider has no node class controller, and a KWOKNodeClass is Ready from its creation by its CRD's
/// default status (`kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml`: `conditions` defaults to one `Ready`
/// True). [`crate::cluster::Case::node_pool`] waits for its NodePool's Ready.
async fn node_class(client: &Client) -> Result<()> {
    let nc: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
        "metadata": { "name": NODE_CLASS },
    }))?;
    let gvk = GroupVersionKind::gvk("karpenter.kwok.sh", "v1alpha1", "KWOKNodeClass");
    Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "kwoknodeclasses"),
    )
    .patch(
        NODE_CLASS,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&nc),
    )
    .await
    .context("creating the KWOKNodeClass")?;
    Ok(())
}

/// Starts Karpenter: its CRDs, the node class, the process, `/readyz` (its caches synced and its CRDs served).
async fn start_karpenter(client: &Client) -> Result<ControllerProcess> {
    let name = "karpenter";
    let bin = build_dir(name, "KARPENTER_VERSION")?;
    apply_crd_dir(client, name, &bin.join("crds")).await?;
    node_class(client).await?;
    let dir = log_dir("autoscaling", name)?;
    let health_port = free_port()?;
    let args = [
        "--disable-leader-election=true".to_string(),
        format!("--metrics-port={}", free_port()?),
        format!("--health-probe-port={health_port}"),
        format!("--batch-idle-duration={BATCH_IDLE}"),
        format!("--batch-max-duration={BATCH_MAX}"),
        // Debug names each provisioning round's pods and NodeClaims: the context of a failed case.
        "--log-level=debug".into(),
    ];
    let mut proc = ControllerProcess::spawn(name, &bin.join(name), &args, &dir)?;
    wait_readyz(&mut proc, health_port).await?;
    Ok(proc)
}

async fn setup() -> Result<(Harness, ControllerProcess)> {
    build_controllers(&["karpenter"])?;
    let client = TestEnv::shared().client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let karpenter = start_karpenter(&client).await?;
    start_phalanx(&client).await?;
    let harness = Harness {
        karpenter_log: karpenter.log.clone(),
    };
    Ok((harness, karpenter))
}
