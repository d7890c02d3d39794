//! What the test binaries that run real controllers beside Phalanx share (`tests/workloads.rs`,
//! `tests/autoscaling.rs`, each including this file with `#[path]`): the controllers built by
//! `hack/build-workloads.sh` and run as guarded child processes against the test cluster, their CRDs, readiness
//! probes, and Phalanx's controllers and scheduler in process, all on a background runtime started once per binary.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};
use phalanx_controllers::{ControllerOptions, run_controllers};
use phalanx_driver::SchedulerOptions;
use phalanx_store::{Store, StoreConfig};
use phalanx_testenv::{TestEnv, wait_for};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Bound of every setup wait (a controller's `/readyz`, its webhooks answering, the store).
pub const SETUP_WAIT: Duration = Duration::from_secs(120);
/// Field manager of the objects the harnesses apply (CRDs, webhook configurations, namespaces, Secret).
pub const FIELD_MANAGER: &str = "phalanx-workloads-test";

/// A controller (a workload controller, Karpenter) started through a small `sh` guard whose stdin is a pipe from this process: when the
/// pipe closes (the value is dropped, or the test binary exits in any way, also by SIGKILL) the guard SIGKILLs the
/// controller. The guard exits when the controller does, so an early crash is seen.
pub struct ControllerProcess {
    pub name: &'static str,
    guard: Child,
    stdin: Option<ChildStdin>,
    pub log: PathBuf,
}

/// The guard: fd 3 keeps the pipe; the controller gets neither it nor stdin.
const GUARD: &str = r#"exec 3<&0 0</dev/null
"$@" 3<&- &
c=$!
{ cat <&3 >/dev/null; kill -9 "$c" 2>/dev/null; } &
exec 3<&-
wait "$c""#;

impl ControllerProcess {
    /// Starts `bin` with `args` and `KUBECONFIG` of the test cluster; its output goes to `dir/<name>.log`.
    pub fn spawn(name: &'static str, bin: &Path, args: &[String], dir: &Path) -> Result<Self> {
        let log = dir.join(format!("{name}.log"));
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
    pub fn check_alive(&mut self) -> Result<()> {
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

/// Runs `cmd`; its trimmed stdout, or an error with its output.
pub fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `$WORKLOADS_BIN_DIR/<name>-<version>` of the controller `name` whose version is `$<version_var>`, as
/// `hack/versions.sh` says (built by [`build_controllers`]).
pub fn build_dir(name: &str, version_var: &str) -> Result<PathBuf> {
    let dir = run(Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source hack/versions.sh && echo \"$WORKLOADS_BIN_DIR/{name}-${version_var}\""
        ))
        .current_dir(TestEnv::repo_root()))?;
    Ok(PathBuf::from(dir))
}

/// The directory of the controller's log, configuration and certificates: `<test env logs>/<suite>/<name>`.
pub fn log_dir(suite: &str, name: &str) -> Result<PathBuf> {
    let dir = TestEnv::shared().log_dir().join(suite).join(name);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Creates every CRD in `dir` (`*.yaml`), or server-side applies it when it exists (a reused cluster), and waits
/// until they are Established. A create rather than `phalanx_testenv::apply_crds`'s apply: these CRDs are large
/// (KubeRay's three 3 MB, Trainer's 2 MB), and on 2 cores the API server's apply of them (managed fields over the
/// whole schema) took twice as long as a create.
pub async fn apply_crd_dir(client: &Client, controller: &str, dir: &Path) -> Result<()> {
    let mut crds = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            let text = std::fs::read_to_string(&path)?;
            let docs: Vec<CustomResourceDefinition> =
                serde_saphyr::from_multiple(&text).with_context(|| format!("parsing {}", path.display()))?;
            crds.extend(docs);
        }
    }
    ensure!(!crds.is_empty(), "{controller}: no CRD in {}", dir.display());
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for crd in &crds {
        let name = crd.name_any();
        match api.create(&PostParams::default(), crd).await {
            Err(kube::Error::Api(e)) if e.code == 409 => {
                api.patch(&name, &pp, &Patch::Apply(crd)).await.map(drop)
            }
            r => r.map(drop),
        }
        .with_context(|| format!("applying {controller}'s CRD {name}"))?;
    }
    for crd in &crds {
        let name = crd.name_any();
        tokio::time::timeout(
            SETUP_WAIT,
            await_condition(api.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .with_context(|| format!("{controller}'s CRD {name} not Established after {SETUP_WAIT:?}"))?
        .with_context(|| format!("watching {controller}'s CRD {name}"))?;
    }
    Ok(())
}

/// Waits until the controller answers `http://127.0.0.1:<port>/readyz`.
pub async fn wait_readyz(proc: &mut ControllerProcess, port: u16) -> Result<()> {
    let ready = format!("http://127.0.0.1:{port}/readyz");
    let (name, log) = (proc.name, proc.log.clone());
    wait_for(&format!("{name} /readyz"), SETUP_WAIT, || {
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
    .with_context(|| format!("{name} not ready; its log: {}", log.display()))
}

/// Runs `hack/build-workloads.sh <names>` (a no-op for what is cached).
pub fn build_controllers(names: &[&str]) -> Result<()> {
    run(Command::new(TestEnv::repo_root().join("hack/build-workloads.sh"))
        .args(names)
        .stdout(Stdio::piped()))
    .with_context(|| {
        format!(
            "hack/build-workloads.sh {} (Go and the module proxy are needed on a cold cache)",
            names.join(" ")
        )
    })?;
    Ok(())
}

/// Starts Phalanx in process on the current runtime, as `kueue.rs` runs it: the controllers (with the owner
/// integration) and one scheduler named `phalanx-scheduler` (every node); waits for its store.
pub async fn start_phalanx(client: &Client) -> Result<()> {
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
    Ok(())
}

/// Runs `setup` once per test binary (the result kept in `cell`) on a runtime of its own, in a thread named
/// `thread`, and keeps what it returns beside the harness (the controller processes) alive as long as the binary:
/// the controllers and Phalanx are namespace-agnostic, one of each serves every case, and the cases run on their
/// own runtimes. Blocking: call it through `spawn_blocking`.
pub fn start_once<H, K, F, Fut>(
    cell: &'static OnceLock<std::result::Result<H, String>>,
    thread: &str,
    setup: F,
) -> std::result::Result<H, String>
where
    H: Clone + Send + 'static,
    K: 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(H, K)>> + 'static,
{
    cell.get_or_init(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_test_writer()
            .try_init();
        let (tx, rx) = std::sync::mpsc::channel::<std::result::Result<H, String>>();
        // The setup future is boxed: polled in place, the workloads' (five starts joined) overflowed this thread's
        // default 2 MiB stack in a debug build. The 16 MiB are a margin.
        let spawned = std::thread::Builder::new()
            .name(thread.into())
            .stack_size(16 << 20)
            .spawn(move || {
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
                    match Box::pin(setup()).await {
                        Ok((harness, keep)) => {
                            let _ = tx.send(Ok(harness));
                            // The processes live as long as the binary; their guards kill them when it exits.
                            let _keep = keep;
                            std::future::pending::<()>().await;
                        }
                        Err(e) => {
                            let _ = tx.send(Err(format!("{e:#}")));
                        }
                    }
                });
            });
        if let Err(e) = spawned {
            return Err(format!("harness thread: {e}"));
        }
        rx.recv()
            .unwrap_or_else(|e| Err(format!("harness thread died: {e}")))
    })
    .clone()
}
