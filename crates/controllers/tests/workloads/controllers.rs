//! How each workload controller is started against the test cluster: its CRDs applied and Established, its
//! certificates and webhooks when it has some, the process, and a check that it is ready (its `/readyz`, a dry-run
//! create through its webhooks, or its leader-election log line).

use std::future::Future;
use std::path::Path;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use phalanx_testenv::wait_for;
use serde_json::{Value, json};

use crate::harness::log_dir;
use crate::processes::{
    ControllerProcess, FIELD_MANAGER, SETUP_WAIT, apply_crd_dir, build_dir, free_port, wait_readyz,
};
use crate::webhooks::{Registration, make_certs, register, trainer_certs};

/// A controller configured by a controller-runtime `Configuration` file (JobSet, LeaderWorkerSet).
pub struct Spec {
    /// The binary's name and the prefix of its objects (`jobset`, `lws`).
    pub name: &'static str,
    /// Its version variable in `hack/versions.sh`.
    version_var: &'static str,
    /// `apiVersion` of its configuration file.
    config_api: &'static str,
    /// Flags beyond `--config`.
    extra_args: &'static [&'static str],
    /// The label every pod of its objects carries: its pod webhooks get an objectSelector `<label> Exists`.
    pod_label: &'static str,
    /// An object of its kind for the dry-run create that proves the webhooks answer.
    probe: fn() -> Value,
    /// `(group, version, kind, plural)` of [`Spec::probe`].
    gvk: (&'static str, &'static str, &'static str, &'static str),
}

/// JobSet v0.10.1 (`sigs.k8s.io/jobset`).
pub const JOBSET: Spec = Spec {
    name: "jobset",
    version_var: "JOBSET_VERSION",
    config_api: "config.jobset.x-k8s.io/v1alpha1",
    // Its `--leader-elect` defaults to false and the config file says false too.
    extra_args: &[],
    pod_label: "jobset.sigs.k8s.io/jobset-name",
    probe: || {
        json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": { "name": "webhook-probe", "namespace": "default" },
            "spec": { "replicatedJobs": [{ "name": "w", "replicas": 1, "template": { "spec": { "template": {
                "spec": { "restartPolicy": "Never", "containers": [{ "name": "c", "image": "busybox" }] } } } } }] }
        })
    },
    gvk: ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
};

/// LeaderWorkerSet v0.7.0 (`sigs.k8s.io/lws`).
pub const LWS: Spec = Spec {
    name: "lws",
    version_var: "LWS_VERSION",
    config_api: "config.lws.x-k8s.io/v1alpha1",
    // Its `--leader-elect` (default true) is only read when given, and then wins over the config file's `false`.
    extra_args: &["--leader-elect=false"],
    pod_label: "leaderworkerset.sigs.k8s.io/name",
    probe: || {
        json!({
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": { "name": "webhook-probe", "namespace": "default" },
            "spec": { "replicas": 1, "leaderWorkerTemplate": { "size": 2, "workerTemplate": {
                "spec": { "containers": [{ "name": "c", "image": "busybox" }] } } } }
        })
    },
    gvk: (
        "leaderworkerset.x-k8s.io",
        "v1",
        "LeaderWorkerSet",
        "leaderworkersets",
    ),
};

/// Waits until a dry-run create of `obj` (a `(group, version, kind, plural)` object in namespace `default`) is
/// accepted: the controller's webhooks answer.
async fn until_admitted(
    client: &Client,
    proc: &mut ControllerProcess,
    gvk: (&str, &str, &str, &str),
    obj: Value,
) -> Result<()> {
    let (group, version, kind, plural) = gvk;
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural),
    );
    let probe: DynamicObject = serde_json::from_value(obj)?;
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let (name, log) = (proc.name, proc.log.clone());
    wait_for(
        &format!("a dry-run create of a {kind} through {name}'s webhooks"),
        SETUP_WAIT,
        || {
            let alive = proc.check_alive();
            let (api, probe, dry) = (&api, &probe, &dry);
            async move {
                alive?;
                api.create(dry, probe).await?;
                Ok(Some(()))
            }
        },
    )
    .await
    .with_context(|| format!("{name}'s webhooks do not answer; its log: {}", log.display()))
}

/// Starts one controller of [`Spec`]: its CRDs, its serving certificate, the process with its configuration file,
/// `/readyz`, its webhooks registered, and a dry-run create of its kind accepted (so its webhooks answer).
pub async fn start(client: &Client, spec: &Spec) -> Result<ControllerProcess> {
    let bin = build_dir(spec.name, spec.version_var)?;
    apply_crd_dir(client, spec.name, &bin.join("crds")).await?;
    let dir = log_dir(spec.name)?;
    let ca = make_certs(&dir, spec.name)?;
    let (webhook_port, health_port) = (free_port()?, free_port()?);
    let config = format!(
        "apiVersion: {}\nkind: Configuration\nleaderElection:\n  leaderElect: false\n\
         internalCertManagement:\n  enable: false\nmetrics:\n  bindAddress: \"0\"\n\
         health:\n  healthProbeBindAddress: 127.0.0.1:{health_port}\n\
         webhook:\n  host: 127.0.0.1\n  port: {webhook_port}\n  certDir: {}\n",
        spec.config_api,
        dir.join("certs").display()
    );
    std::fs::write(dir.join("config.yaml"), config)?;
    let mut args = vec![format!("--config={}", dir.join("config.yaml").display())];
    args.extend(spec.extra_args.iter().map(|a| (*a).to_string()));
    let mut proc = ControllerProcess::spawn(spec.name, &bin.join(spec.name), &args, &dir)?;
    wait_readyz(&mut proc, health_port).await?;
    let manifest = std::fs::read_to_string(bin.join("webhook.yaml"))?;
    let name = |kind: &str| format!("phalanx-test-{}-{kind}", spec.name);
    let r = Registration {
        controller: spec.name,
        name: &name,
        pod_label: Some(spec.pod_label),
        port: webhook_port,
        ca: &ca,
    };
    register(client, &r, &manifest).await?;
    until_admitted(client, &mut proc, spec.gvk, (spec.probe)()).await?;
    Ok(proc)
}

/// KubeRay v1.5.0 (`github.com/ray-project/kuberay/ray-operator`): no webhooks; its three CRDs; `/readyz`.
pub async fn start_kuberay(client: &Client) -> Result<ControllerProcess> {
    let name = "kuberay";
    let bin = build_dir(name, "KUBERAY_VERSION")?;
    apply_crd_dir(client, name, &bin.join("crds")).await?;
    let dir = log_dir(name)?;
    let health_port = free_port()?;
    let args = [
        "--enable-leader-election=false".to_string(),
        "--metrics-addr=0".into(),
        format!("--health-probe-bind-address=127.0.0.1:{health_port}"),
    ];
    let mut proc = ControllerProcess::spawn(name, &bin.join(name), &args, &dir)?;
    wait_readyz(&mut proc, health_port).await?;
    Ok(proc)
}

/// The namespace Kubeflow Trainer looks for its Secret in (outside a pod: `kubeflow-system`).
const TRAINER_NAMESPACE: &str = "kubeflow-system";
/// Its Secret's name (`--webhook-secret-name`'s default).
const TRAINER_SECRET: &str = "kubeflow-trainer-webhook-cert";
/// Its serving certificate's DNS name: `<--webhook-service-name>.<namespace>.svc`.
const TRAINER_DNS_NAME: &str = "kubeflow-trainer-controller-manager.kubeflow-system.svc";
/// The fixed directory its webhook server reads `tls.crt`/`tls.key` from (`pkg/util/cert`).
const TRAINER_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";
/// The ValidatingWebhookConfiguration its cert rotator injects the CA into (a fixed name in its `main.go`).
const TRAINER_WEBHOOK_CONFIG: &str = "validator.trainer.kubeflow.org";

/// Creates namespace `name` unless it exists (server-side apply).
async fn ensure_namespace(client: &Client, name: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } }))?;
    Api::<Namespace>::all(client.clone())
        .patch(name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&ns))
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// Kubeflow Trainer v2.0.0 (`github.com/kubeflow/trainer/v2`), prepared while `jobset` (the start of [`JOBSET`])
/// runs, and started once JobSet is: it needs the JobSet CRDs and controller. Returns both. Its cert rotator takes the certificates from the Secret `kubeflow-system/
/// kubeflow-trainer-webhook-cert` when they are valid (else it makes its own and waits for them to be mounted in
/// [`TRAINER_CERT_DIR`]), and injects its CA into [`TRAINER_WEBHOOK_CONFIG`], which must exist: so the Secret is
/// made here, its `tls.*` copied to that directory, and the (validating only) webhooks registered under that name
/// before the process starts; then `/readyz` (gated on the certificates) and a dry-run TrainingRuntime.
pub async fn start_trainer(
    client: &Client,
    jobset: impl Future<Output = Result<ControllerProcess>>,
) -> Result<(ControllerProcess, ControllerProcess)> {
    let name = "trainer";
    let bin = build_dir(name, "TRAINER_VERSION")?;
    let dir = log_dir(name)?;
    let (jobset, (webhook_port, health_port)) =
        tokio::try_join!(jobset, prepare_trainer(client, &bin, &dir))?;
    let args = [
        "--leader-elect=false".to_string(),
        "--metrics-bind-address=0".into(),
        format!("--health-probe-bind-address=127.0.0.1:{health_port}"),
        format!("--webhook-server-port={webhook_port}"),
    ];
    let mut proc = ControllerProcess::spawn(name, &bin.join(name), &args, &dir)?;
    wait_readyz(&mut proc, health_port).await?;
    let probe = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": { "name": "webhook-probe", "namespace": "default" },
        "spec": { "template": { "spec": { "replicatedJobs": [{ "name": "node", "replicas": 1,
            "template": { "spec": { "template": { "spec": {
                "restartPolicy": "Never", "containers": [{ "name": "node", "image": "busybox" }] } } } } }] } } },
    });
    let gvk = (
        "trainer.kubeflow.org",
        "v1alpha1",
        "TrainingRuntime",
        "trainingruntimes",
    );
    until_admitted(client, &mut proc, gvk, probe).await?;
    Ok((jobset, proc))
}

/// Trainer's CRDs, certificates, Secret and webhook registration; returns its `(webhook port, health port)`.
async fn prepare_trainer(client: &Client, bin: &Path, dir: &Path) -> Result<(u16, u16)> {
    let name = "trainer";
    apply_crd_dir(client, name, &bin.join("crds")).await?;
    let [ca_crt, ca_key, tls_crt, tls_key] = trainer_certs(&dir.join("certs"), TRAINER_DNS_NAME)?;
    ensure_namespace(client, TRAINER_NAMESPACE).await?;
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": { "name": TRAINER_SECRET, "namespace": TRAINER_NAMESPACE },
        "stringData": { "ca.crt": ca_crt, "ca.key": ca_key, "tls.crt": tls_crt, "tls.key": tls_key },
    }))?;
    Api::<Secret>::namespaced(client.clone(), TRAINER_NAMESPACE)
        .patch(
            TRAINER_SECRET,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        .context("creating Kubeflow Trainer's webhook Secret")?;
    let certs = Path::new(TRAINER_CERT_DIR);
    std::fs::create_dir_all(certs).with_context(|| format!("creating {TRAINER_CERT_DIR}"))?;
    std::fs::write(certs.join("tls.crt"), &tls_crt)?;
    std::fs::write(certs.join("tls.key"), &tls_key)?;
    let (webhook_port, health_port) = (free_port()?, free_port()?);
    let manifest = std::fs::read_to_string(bin.join("webhook.yaml"))?;
    let config_name = |_: &str| TRAINER_WEBHOOK_CONFIG.to_string();
    let r = Registration {
        controller: name,
        name: &config_name,
        pod_label: None,
        port: webhook_port,
        ca: &ca_crt,
    };
    register(client, &r, &manifest).await?;
    Ok((webhook_port, health_port))
}

/// The namespace of MPI Operator's leader-election Lease (`--lock-namespace`).
const MPI_NAMESPACE: &str = "mpi-operator";

/// MPI Operator v0.6.0 (`github.com/kubeflow/mpi-operator`): no webhooks; leader election always on (Lease
/// `mpi-operator/mpi-operator`); its health endpoint on a fixed `:8080` answers before it leads, so it is ready when
/// it logs `Started workers` (after it has become the leader and its informers have synced).
pub async fn start_mpi_operator(client: &Client) -> Result<ControllerProcess> {
    let name = "mpi-operator";
    let bin = build_dir(name, "MPI_OPERATOR_VERSION")?;
    apply_crd_dir(client, name, &bin.join("crds")).await?;
    ensure_namespace(client, MPI_NAMESPACE).await?;
    let dir = log_dir(name)?;
    let args = [
        "--monitoring-port=0".to_string(),
        format!("--lock-namespace={MPI_NAMESPACE}"),
    ];
    let mut proc = ControllerProcess::spawn(name, &bin.join(name), &args, &dir)?;
    let log = proc.log.clone();
    wait_for(
        "mpi-operator leading (its log says \"Started workers\")",
        SETUP_WAIT,
        || {
            let alive = proc.check_alive();
            let log = log.clone();
            async move {
                alive?;
                let text = tokio::fs::read_to_string(&log).await.unwrap_or_default();
                Ok(text.contains("Started workers").then_some(()))
            }
        },
    )
    .await
    .with_context(|| format!("mpi-operator not ready; its log: {}", log.display()))?;
    Ok(proc)
}
