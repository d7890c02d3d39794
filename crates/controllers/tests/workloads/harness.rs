//! The harness of `tests/workloads.rs`: the JobSet and LeaderWorkerSet controllers as child processes with their
//! CRDs and webhooks, and Phalanx's controllers and scheduler in process; once per test binary.
//!
//! Everything runs on a background runtime of its own (as `owner_integration`'s controllers do): the workload
//! controllers and Phalanx are namespace-agnostic, one of each serves every case, and the cases run in parallel,
//! each in its own namespace with its own nodes.

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use phalanx_controllers::{ControllerOptions, run_controllers};
use phalanx_driver::SchedulerOptions;
use phalanx_store::{Store, StoreConfig};
use phalanx_testenv::{TestEnv, wait_for};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Bound of every setup wait (a controller's `/readyz`, its webhooks answering, the store).
const SETUP_WAIT: Duration = Duration::from_secs(120);
/// Field manager of the webhook configurations.
const FIELD_MANAGER: &str = "phalanx-workloads-test";

/// One workload controller: where its build lives and how it is configured.
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

/// A workload controller started through a small `sh` guard whose stdin is a pipe from this process: when the
/// pipe closes (the value is dropped, or the test binary exits in any way, also by SIGKILL) the guard SIGKILLs the
/// controller. The guard exits when the controller does, so an early crash is seen.
pub struct ControllerProcess {
    name: &'static str,
    guard: Child,
    stdin: Option<ChildStdin>,
    log: PathBuf,
}

/// The guard: fd 3 keeps the pipe; the controller gets neither it nor stdin.
const GUARD: &str = r#"exec 3<&0 0</dev/null
"$@" 3<&- &
c=$!
{ cat <&3 >/dev/null; kill -9 "$c" 2>/dev/null; } &
exec 3<&-
wait "$c""#;

impl ControllerProcess {
    fn spawn(name: &'static str, bin: &Path, args: &[String], log: PathBuf) -> Result<Self> {
        let out = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut guard = Command::new("sh")
            .arg("-c")
            .arg(GUARD)
            .arg("sh")
            .arg(bin)
            .args(args)
            .env("KUBECONFIG", TestEnv::shared().kubeconfig_path())
            .stdin(Stdio::piped())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stdin = guard.stdin.take();
        Ok(Self {
            name,
            guard,
            stdin,
            log,
        })
    }

    /// An error naming the log when the controller has exited.
    fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.guard.try_wait()? {
            anyhow::bail!("{} exited ({status}); its log: {}", self.name, self.log.display());
        }
        Ok(())
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        // Closing the pipe makes the guard kill the controller and exit.
        drop(self.stdin.take());
        let _ = self.guard.wait();
    }
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Builds (or finds cached) the controllers with the project's script; returns `$WORKLOADS_BIN_DIR/<name>-<version>`
/// of `spec`.
fn build_dir(spec: &Spec) -> Result<PathBuf> {
    let root = TestEnv::repo_root();
    let dir = run(Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source hack/versions.sh && echo \"$WORKLOADS_BIN_DIR/{}-${}\"",
            spec.name, spec.version_var
        ))
        .current_dir(&root))?;
    Ok(PathBuf::from(dir))
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A CA and a serving certificate for IP 127.0.0.1 (`tls.crt`/`tls.key` in `dir/certs`); returns the CA's PEM.
fn make_certs(dir: &Path, name: &str) -> Result<String> {
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs)?;
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let c = |f: &str| certs.join(f).to_string_lossy().into_owned();
    run(Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"])
        .args(["-subj", &format!("/CN=phalanx-{name}-test-ca")])
        .args(["-keyout", &p("ca.key"), "-out", &p("ca.crt")]))?;
    run(Command::new("openssl")
        .args(["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1"])
        .args(["-keyout", &c("tls.key"), "-out", &p("tls.csr")]))?;
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n")?;
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "2", "-CAcreateserial"])
        .args(["-in", &p("tls.csr"), "-CA", &p("ca.crt"), "-CAkey", &p("ca.key")])
        .args(["-extfile", &p("ext.cnf"), "-out", &c("tls.crt")]))?;
    Ok(std::fs::read_to_string(dir.join("ca.crt"))?)
}

/// The controller's webhook configurations from its `webhook.yaml`, renamed `phalanx-test-<name>-<kind>` (both
/// modules call theirs `mutating-webhook-configuration` / `validating-webhook-configuration`; fixed names, so a
/// later run on a reused cluster replaces a stale registration instead of adding one), every webhook pointed at
/// `https://127.0.0.1:<port><service.path>` with `ca` as caBundle, and the pod webhooks narrowed to the pods of
/// the controller's own objects (an objectSelector on [`Spec::pod_label`]).
fn webhooks(
    spec: &Spec,
    manifest: &str,
    port: u16,
    ca: &str,
) -> Result<(MutatingWebhookConfiguration, ValidatingWebhookConfiguration)> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(manifest)
        .with_context(|| format!("parsing {}'s webhook manifests", spec.name))?;
    let mut mutating = None;
    let mut validating = None;
    for mut d in docs {
        let kind = d["kind"].as_str().unwrap_or_default().to_string();
        let short = if kind.starts_with("Mutating") {
            "mutating"
        } else {
            "validating"
        };
        let mut hooks = d["webhooks"].as_array().cloned().unwrap_or_default();
        for w in &mut hooks {
            let path = w["clientConfig"]["service"]["path"]
                .as_str()
                .with_context(|| format!("{} webhook {} has no service.path", spec.name, w["name"]))?
                .to_string();
            w["clientConfig"] = json!({ "url": format!("https://127.0.0.1:{port}{path}") });
            let on_pods = w["rules"].as_array().into_iter().flatten().any(|r| {
                r["resources"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|x| x == "pods"))
            });
            if on_pods {
                w["objectSelector"] =
                    json!({ "matchExpressions": [{ "key": spec.pod_label, "operator": "Exists" }] });
            }
        }
        d["webhooks"] = Value::Array(hooks);
        d["metadata"] = json!({ "name": format!("phalanx-test-{}-{short}", spec.name) });
        let bundle = || Some(ByteString(ca.as_bytes().to_vec()));
        match kind.as_str() {
            "MutatingWebhookConfiguration" => {
                let mut m: MutatingWebhookConfiguration = serde_json::from_value(d)?;
                for w in m.webhooks.iter_mut().flatten() {
                    w.client_config.ca_bundle = bundle();
                }
                mutating = Some(m);
            }
            "ValidatingWebhookConfiguration" => {
                let mut v: ValidatingWebhookConfiguration = serde_json::from_value(d)?;
                for w in v.webhooks.iter_mut().flatten() {
                    w.client_config.ca_bundle = bundle();
                }
                validating = Some(v);
            }
            _ => {}
        }
    }
    Ok((
        mutating.with_context(|| format!("{}: no MutatingWebhookConfiguration", spec.name))?,
        validating.with_context(|| format!("{}: no ValidatingWebhookConfiguration", spec.name))?,
    ))
}

/// Starts one workload controller against the test cluster: its CRDs applied and Established, its serving
/// certificate, the process, `/readyz`, its webhooks registered, and a dry-run create of its kind accepted (so its
/// webhooks answer).
async fn start(client: &Client, spec: &Spec) -> Result<ControllerProcess> {
    let bin = build_dir(spec)?;
    let mut crds = String::new();
    for e in std::fs::read_dir(bin.join("crds"))? {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            crds.push_str("\n---\n");
            crds.push_str(&std::fs::read_to_string(&path)?);
        }
    }
    phalanx_testenv::apply_crds(client, &crds)
        .await
        .with_context(|| format!("applying {}'s CRDs", spec.name))?;
    let dir = TestEnv::shared().log_dir().join("workloads").join(spec.name);
    std::fs::create_dir_all(&dir)?;
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
    let log = dir.join(format!("{}.log", spec.name));
    let mut proc = ControllerProcess::spawn(spec.name, &bin.join(spec.name), &args, log.clone())?;
    let ready = format!("http://127.0.0.1:{health_port}/readyz");
    wait_for(&format!("{} /readyz", spec.name), SETUP_WAIT, || {
        let alive = proc.check_alive();
        let ready = ready.clone();
        async move {
            alive?;
            let out = tokio::process::Command::new("curl")
                .args(["-sf", &ready])
                .output()
                .await?;
            Ok(out.status.success().then_some(()))
        }
    })
    .await
    .with_context(|| format!("{} not ready; its log: {}", spec.name, log.display()))?;
    let manifest = std::fs::read_to_string(bin.join("webhook.yaml"))?;
    let (m, v) = webhooks(spec, &manifest, webhook_port, &ca)?;
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(&m.name_any(), &pp, &Patch::Apply(&m))
        .await?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(&v.name_any(), &pp, &Patch::Apply(&v))
        .await?;
    let (group, version, kind, plural) = spec.gvk;
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural),
    );
    let probe: DynamicObject = serde_json::from_value((spec.probe)())?;
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for(
        &format!("a dry-run create of a {kind} through {}'s webhooks", spec.name),
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
    .with_context(|| {
        format!(
            "{}'s webhooks do not answer; its log: {}",
            spec.name,
            log.display()
        )
    })?;
    Ok(proc)
}

/// What the cases need to know of the shared harness.
#[derive(Clone, Debug)]
pub struct Harness {
    /// The workload controllers' logs, for failure messages.
    pub logs: Vec<PathBuf>,
}

static HARNESS: OnceLock<std::result::Result<Harness, String>> = OnceLock::new();

/// Starts, once per test binary and on a runtime of its own: `hack/build-workloads.sh jobset lws` (a no-op when
/// cached), the Phalanx CRDs, the JobSet and LWS controllers with their CRDs and webhooks, Phalanx's controllers
/// and one scheduler named `phalanx-scheduler` (every node; each case pins its pods to its own nodes by
/// `nodeSelector`). Blocking: call it through `spawn_blocking`.
pub fn harness() -> std::result::Result<Harness, String> {
    HARNESS
        .get_or_init(|| {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
                )
                .with_test_writer()
                .try_init();
            let (tx, rx) = std::sync::mpsc::channel::<std::result::Result<Harness, String>>();
            std::thread::spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(format!("runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    match setup().await {
                        Ok((harness, procs)) => {
                            let _ = tx.send(Ok(harness));
                            // The processes live as long as the binary; their guards kill them when it exits.
                            let _keep = procs;
                            std::future::pending::<()>().await;
                        }
                        Err(e) => {
                            let _ = tx.send(Err(format!("{e:#}")));
                        }
                    }
                });
            });
            rx.recv()
                .unwrap_or_else(|e| Err(format!("harness thread died: {e}")))
        })
        .clone()
}

async fn setup() -> Result<(Harness, Vec<ControllerProcess>)> {
    let env = TestEnv::shared();
    let root = TestEnv::repo_root();
    // Only the two controllers used here: the script builds every controller it knows when given no name.
    run(Command::new(root.join("hack/build-workloads.sh"))
        .args([JOBSET.name, LWS.name])
        .stdout(Stdio::piped()))
    .context("hack/build-workloads.sh jobset lws (Go and the module proxy are needed on a cold cache)")?;
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let (jobset, lws) = tokio::try_join!(start(&client, &JOBSET), start(&client, &LWS))?;
    let logs = vec![jobset.log.clone(), lws.log.clone()];

    // Phalanx, as `kueue.rs` runs it: the controllers (with the owner integration) and a scheduler.
    let shutdown = CancellationToken::new();
    let (leader_tx, leader_rx) = watch::channel(true);
    let mut registry = Registry::default();
    let store = Store::start(client.clone(), StoreConfig::default());
    let controllers = run_controllers(
        client.clone(),
        store.clone(),
        ControllerOptions::default(),
        leader_rx.clone(),
        shutdown.clone(),
        &mut registry,
    );
    let scheduler = phalanx_driver::run(
        client.clone(),
        store.clone(),
        SchedulerOptions::default(),
        leader_rx,
        shutdown,
        &mut registry,
    );
    tokio::spawn(async move {
        let _keep = leader_tx;
        if let Err(e) = controllers.await {
            tracing::error!(error = %e, "controllers ended with an error");
        }
    });
    tokio::spawn(async move {
        if let Err(e) = scheduler.await {
            tracing::error!(error = %e, "scheduler ended with an error");
        }
    });
    tokio::time::timeout(SETUP_WAIT, store.wait_ready())
        .await
        .context("Phalanx's store not ready")?;
    Ok((Harness { logs }, vec![jobset, lws]))
}
