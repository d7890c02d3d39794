//! The real `phalanx` binary as a child process, run out of the cluster the way the chart's Deployment runs it: the
//! Deployment's own arguments, its ConfigMap's configuration file, and a kubeconfig holding a token of the chart's
//! ServiceAccount, so that what it may do is exactly what the chart's RBAC grants.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

use crate::http_get;

/// `<target>/<profile>` of this test binary (`<target>/<profile>/deps/<exe>`).
fn profile_dir() -> anyhow::Result<(PathBuf, String)> {
    let exe = std::env::current_exe().context("test executable path")?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("test executable outside <target>/<profile>/deps")?;
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug")
        .to_owned();
    Ok((profile_dir.to_owned(), profile))
}

/// Builds the `phalanx` binary into this test's target directory and returns its path (a no-op when
/// `cargo test --workspace` built it already; cargo releases its build lock before running tests).
///
/// # Errors
/// cargo failed.
pub fn phalanx_binary() -> anyhow::Result<PathBuf> {
    let (dir, profile) = profile_dir()?;
    let target = dir.parent().context("target dir")?;
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "phalanx", "--bin", "phalanx"])
        .env("CARGO_TARGET_DIR", target);
    if profile == "release" {
        cmd.arg("--release");
    }
    let status = cmd.status().context("running cargo build -p phalanx")?;
    ensure!(status.success(), "cargo build -p phalanx failed: {status}");
    let bin = dir.join("phalanx");
    ensure!(bin.is_file(), "no phalanx binary at {}", bin.display());
    Ok(bin)
}

/// The `phalanx` binary the container image holds, unpacked from the image's layer by `hack/image-binary.sh` (which
/// runs `make image`'s hack/image.sh first: a cold release build for the musl target the first time, a repackaging
/// of seconds after that). The chart's end-to-end test runs this file, so what it proves holds for the image.
///
/// # Errors
/// The image could not be built or holds no binary (the script's output is in the error).
pub fn image_binary() -> anyhow::Result<PathBuf> {
    let (dir, _) = profile_dir()?;
    let target = dir.parent().context("target dir")?;
    let out = Command::new("bash")
        .arg("hack/image-binary.sh")
        .current_dir(phalanx_testenv::TestEnv::repo_root())
        .env("CARGO_TARGET_DIR", target)
        .stderr(Stdio::piped())
        .output()
        .context("running hack/image-binary.sh")?;
    let tail = |b: &[u8]| {
        let text = String::from_utf8_lossy(b);
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    };
    ensure!(
        out.status.success(),
        "hack/image-binary.sh failed ({}):\n{}",
        out.status,
        tail(&out.stderr)
    );
    let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    ensure!(
        bin.is_file(),
        "hack/image-binary.sh named no file: {}",
        bin.display()
    );
    Ok(bin)
}

/// A running `phalanx run`; SIGKILLed on drop if still running.
pub struct Phalanx {
    child: Child,
    /// /healthz, /readyz and /metrics.
    pub addr: SocketAddr,
    /// stdout and stderr of the process.
    pub log: PathBuf,
}

impl Phalanx {
    /// Starts `bin` with the arguments of the first container of Deployment `ns/name` (as the API server stores
    /// it), except that `--config` points at a copy of the Deployment's ConfigMap and `--metrics-addr` at a free
    /// loopback port, authenticating with `kubeconfig`. `identity` becomes `$POD_NAME`, the Lease holder identity.
    /// Files go to `work`.
    ///
    /// # Errors
    /// The Deployment or its ConfigMap cannot be read, or the process cannot be started.
    pub async fn start_as_deployment(
        bin: &Path,
        admin: &Client,
        ns: &str,
        name: &str,
        kubeconfig: &Path,
        identity: &str,
        work: &Path,
    ) -> anyhow::Result<Self> {
        let dep = Api::<Deployment>::namespaced(admin.clone(), ns).get(name).await?;
        let pod = dep.spec.template.spec.context("Deployment without a pod spec")?;
        let args = pod
            .containers
            .first()
            .and_then(|c| c.args.clone())
            .unwrap_or_default();
        let cm_name = pod
            .volumes
            .unwrap_or_default()
            .into_iter()
            .find_map(|v| v.config_map.map(|c| c.name))
            .context("Deployment mounts no ConfigMap")?;
        let cm = Api::<ConfigMap>::namespaced(admin.clone(), ns)
            .get(&cm_name)
            .await?;
        let config = cm
            .data
            .and_then(|d| d.get("phalanx.yaml").cloned())
            .context("ConfigMap without phalanx.yaml")?;
        std::fs::create_dir_all(work)?;
        let config_path = work.join(format!("{identity}.phalanx.yaml"));
        std::fs::write(&config_path, config)?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let args: Vec<String> = args
            .into_iter()
            .map(|a| {
                if a.starts_with("--config=") {
                    format!("--config={}", config_path.display())
                } else if a.starts_with("--metrics-addr=") {
                    format!("--metrics-addr={addr}")
                } else {
                    a
                }
            })
            .collect();
        ensure!(
            args.first().map(String::as_str) == Some("run"),
            "not `phalanx run`: {args:?}"
        );
        let log = work.join(format!("{identity}.log"));
        let out = std::fs::File::create(&log)?;
        let child = Command::new(bin)
            .args(&args)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .env("POD_NAME", identity)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Self { child, addr, log })
    }

    /// (ready, leader) from /readyz and the `phalanx_leader` metric; an error while the server is not up yet.
    ///
    /// # Errors
    /// The server does not answer, or the process has exited (its log's tail is in the error).
    pub async fn state(&mut self) -> anyhow::Result<(bool, bool)> {
        if let Some(status) = self.child.try_wait()? {
            anyhow::bail!("phalanx exited ({status}); log tail:\n{}", self.log_tail(20));
        }
        let (ready, _) = http_get(self.addr, "/readyz").await?;
        let (_, metrics) = http_get(self.addr, "/metrics").await?;
        Ok((ready == 200, metrics.lines().any(|l| l == "phalanx_leader 1")))
    }

    /// The last `n` lines of the process's log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// SIGTERM, then waits up to 30 s for the exit (the binary releases its Lease on the way out).
    ///
    /// # Errors
    /// The process did not exit in time (it is then killed).
    pub async fn stop(mut self) -> anyhow::Result<std::process::ExitStatus> {
        let pid = rustix::process::Pid::from_raw(i32::try_from(self.child.id())?).context("pid 0")?;
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)?;
        for _ in 0..300 {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!(
            "phalanx did not exit within 30 s of SIGTERM; log tail:\n{}",
            self.log_tail(20)
        )
    }
}

impl Drop for Phalanx {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
