//! The per-test-binary control plane: start (or reuse) it, hand out clients, name its files.

use std::fs::{self, File};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Environment variable naming the kubeconfig of an already running cluster to reuse instead of starting one.
pub const REUSE_KUBECONFIG_ENV: &str = "PHALANX_TEST_KUBECONFIG";
/// With [`REUSE_KUBECONFIG_ENV`]: where that cluster's logs are (default: `logs/` next to the kubeconfig).
pub const REUSE_LOG_DIR_ENV: &str = "PHALANX_TEST_LOG_DIR";
/// Binaries `hack/cluster.sh` needs; when one is missing the harness runs `hack/build-bins.sh`.
const REQUIRED_BINS: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kwok",
    "kwok-stages/node-initialize.yaml",
    "kwok-stages/pod-ready.yaml",
    "kwok-stages/pod-delete.yaml",
];
/// Per-run directories kept under `target/testenv/` for post-mortems; older ones are removed.
const KEEP_RUN_DIRS: usize = 8;

/// A running control plane (kube-apiserver, etcd, kube-controller-manager, kwok) and the paths that belong to it.
///
/// Obtain it with [`TestEnv::shared`]. Started by this process, it lives in `target/testenv/<pid>/` (`state/` holds
/// the PKI and kubeconfigs, `logs/` the component logs) and is torn down by `hack/cluster.sh`'s watchdog once the
/// test binary exits.
#[derive(Debug)]
pub struct TestEnv {
    kubeconfig: PathBuf,
    bin_dir: PathBuf,
    log_dir: PathBuf,
    state_dir: Option<PathBuf>,
    /// Started by [`TestEnv::dedicated`]: stopped (`hack/cluster.sh down`) when dropped.
    dedicated: bool,
}

static SHARED: OnceLock<Result<TestEnv, String>> = OnceLock::new();

impl TestEnv {
    /// The control plane of this test binary, started on first use (blocking, typically 10-30 s warm; when the
    /// binaries are missing it first runs `hack/build-bins.sh`, 20-40 min cold) or reused from
    /// `$PHALANX_TEST_KUBECONFIG`.
    ///
    /// Safe to call from any thread or tokio runtime; concurrent callers wait for the one start.
    ///
    /// # Panics
    /// When the control plane cannot be started or reused. The message names the start log and the component logs.
    /// Every later call panics with the same message (no silent skip, no second start attempt).
    pub fn shared() -> &'static TestEnv {
        match SHARED.get_or_init(|| Self::init().map_err(|e| format!("{e:#}"))) {
            Ok(env) => env,
            Err(msg) => panic!("{msg}"),
        }
    }

    fn init() -> anyhow::Result<TestEnv> {
        let bin_dir = bin_dir()?;
        if let Some(kc) = std::env::var_os(REUSE_KUBECONFIG_ENV).filter(|v| !v.is_empty()) {
            let kubeconfig = PathBuf::from(kc);
            anyhow::ensure!(
                kubeconfig.is_file(),
                "phalanx-testenv: {REUSE_KUBECONFIG_ENV}={} does not name a file",
                kubeconfig.display()
            );
            let log_dir = match std::env::var_os(REUSE_LOG_DIR_ENV).filter(|v| !v.is_empty()) {
                Some(d) => PathBuf::from(d),
                None => {
                    let parent = kubeconfig.parent().unwrap_or(Path::new(".")).to_path_buf();
                    if parent.join("logs").is_dir() {
                        parent.join("logs")
                    } else {
                        parent
                    }
                }
            };
            announce(&format!("reusing the cluster of {}", kubeconfig.display()));
            return Ok(TestEnv {
                kubeconfig,
                bin_dir,
                log_dir,
                state_dir: None,
                dedicated: false,
            });
        }
        ensure_binaries(&bin_dir)?;
        let run = target_dir().join("testenv").join(std::process::id().to_string());
        start(bin_dir, run, &[], &[])
    }

    /// A control plane of its own for one test, whose kube-apiserver gets `apiserver_args` appended to its flags
    /// (`APISERVER_EXTRA_ARGS` of `hack/cluster.sh`), e.g. `--runtime-config=resource.k8s.io/v1=false`. It lives in
    /// `target/testenv/<pid>/<name>/` (`state/`, `logs/`) and is stopped when the value is dropped (and, like the
    /// shared one, when the test binary exits). Blocking, like [`TestEnv::shared`] (10-30 s warm); it always starts
    /// a new control plane, also when `$PHALANX_TEST_KUBECONFIG` is set, and builds the binaries first if missing.
    /// `name` must be a single path component, unique within the test binary.
    ///
    /// # Errors
    /// When the binaries cannot be built or the control plane does not start; the message names the logs.
    pub fn dedicated(name: &str, apiserver_args: &[&str]) -> anyhow::Result<TestEnv> {
        dedicated_with(name, apiserver_args, &[])
    }

    /// A dedicated control plane ([`TestEnv::dedicated`]) that serves upstream's Workload API:
    /// `hack/cluster.sh up --upstream-workload-api` (`scheduling.k8s.io/v1beta1`, and `v1alpha3` before 1.38, with the
    /// `GenericWorkload`, `CompositePodGroup` and `TopologyAwareWorkloadScheduling` gates on the API server and
    /// kube-controller-manager, and `WorkloadWithJob` from 1.37), for the tests of Phalanx scheduling upstream's own
    /// PodGroups; `with_kube_scheduler` also runs upstream kube-scheduler (`--with-kube-scheduler`) beside it.
    ///
    /// # Errors
    /// As [`TestEnv::dedicated`].
    pub fn dedicated_upstream_api(name: &str, with_kube_scheduler: bool) -> anyhow::Result<TestEnv> {
        let flags: &[&str] = if with_kube_scheduler {
            &["--upstream-workload-api", "--with-kube-scheduler"]
        } else {
            &["--upstream-workload-api"]
        };
        dedicated_with(name, &[], flags)
    }

    /// A kube client configured from the admin kubeconfig (user `phalanx-admin`, group `system:masters`).
    ///
    /// Call it in every test: a `kube::Client` spawns its connection machinery on the tokio runtime it is created in
    /// and must not be used after that runtime ends.
    ///
    /// # Errors
    /// When the kubeconfig cannot be read or the client cannot be built.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let config = self.config().await?;
        Client::try_from(config).context("phalanx-testenv: building a kube client")
    }

    /// The [`kube::Config`] behind [`TestEnv::client`], for tests that tune timeouts or headers first.
    ///
    /// # Errors
    /// When the kubeconfig cannot be read or parsed.
    pub async fn config(&self) -> anyhow::Result<Config> {
        let kc = Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("phalanx-testenv: reading {}", self.kubeconfig.display()))?;
        Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .with_context(|| format!("phalanx-testenv: loading {}", self.kubeconfig.display()))
    }

    /// Path of the admin kubeconfig (certificates embedded), e.g. for `kubectl --kubeconfig` or a child process.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Directory of the cached control-plane binaries (`$PHALANX_BIN_DIR`, see `hack/versions.sh`): `etcd`,
    /// `kube-apiserver`, `kube-controller-manager`, `kube-scheduler`, `kubectl`, `kwok`, `helm`.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// Directory of the component logs: `etcd.log`, `kube-apiserver.log`, `kube-controller-manager.log`,
    /// `kwok.log`, `cluster-up.log`, `watchdog.log`.
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// The state directory (`hack/cluster.sh --state-dir`) when this process started the control plane;
    /// `None` when it reuses one through `$PHALANX_TEST_KUBECONFIG`.
    pub fn state_dir(&self) -> Option<&Path> {
        self.state_dir.as_deref()
    }

    /// The minor version of the cached control-plane binaries (`kube-apiserver --version`, e.g. 37 for v1.37.2),
    /// built first if missing; for tests of features a version lacks, which then say so and check what that
    /// version does instead.
    ///
    /// # Errors
    /// When the binaries cannot be built or the version cannot be read.
    pub fn binaries_minor() -> anyhow::Result<u32> {
        let bin_dir = bin_dir()?;
        ensure_binaries(&bin_dir)?;
        let out = Command::new(bin_dir.join("kube-apiserver"))
            .arg("--version")
            .output()
            .context("phalanx-testenv: running kube-apiserver --version")?;
        let built = String::from_utf8_lossy(&out.stdout);
        built
            .trim()
            .trim_start_matches("Kubernetes v1.")
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("phalanx-testenv: no minor version in {built:?}"))
    }

    /// The repository root (the directory holding `hack/` and `Cargo.toml`).
    pub fn repo_root() -> PathBuf {
        repo_root()
    }
}

/// Writes a line straight to the process's stderr. libtest captures `eprintln!` per test; these lines (start,
/// build) concern the whole binary and should show even when the tests pass.
fn announce(msg: &str) {
    let _ = writeln!(std::io::stderr(), "phalanx-testenv: {msg}");
}

fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The Cargo target directory of the running test binary: `<target>/<profile>/deps/<test-exe>`, so two levels
/// above `deps`. Falls back to `$CARGO_TARGET_DIR`, then `<repo>/target`.
fn target_dir() -> PathBuf {
    if let Ok(exe) = std::env::current_exe()
        && let Some(deps) = exe
            .ancestors()
            .find(|p| p.file_name().is_some_and(|n| n == "deps"))
        && let Some(target) = deps.parent().and_then(Path::parent)
    {
        return target.to_path_buf();
    }
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// `$PHALANX_BIN_DIR` as `hack/versions.sh` computes it (it honours the same environment overrides).
fn bin_dir() -> anyhow::Result<PathBuf> {
    let root = repo_root();
    let out = Command::new("bash")
        .arg("-c")
        .arg("source hack/versions.sh && printf %s \"$PHALANX_BIN_DIR\"")
        .current_dir(&root)
        .output()
        .with_context(|| {
            format!(
                "phalanx-testenv: running bash to source {}/hack/versions.sh",
                root.display()
            )
        })?;
    anyhow::ensure!(
        out.status.success() && !out.stdout.is_empty(),
        "phalanx-testenv: sourcing hack/versions.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// Runs `hack/build-bins.sh` when a required binary is missing (never skips: the tests need them). The build
/// takes a lock, so concurrent test binaries wait for one build.
fn ensure_binaries(bin_dir: &Path) -> anyhow::Result<()> {
    let missing: Vec<&str> = REQUIRED_BINS
        .iter()
        .copied()
        .filter(|b| !bin_dir.join(b).is_file())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let base = target_dir().join("testenv");
    fs::create_dir_all(&base).with_context(|| format!("phalanx-testenv: creating {}", base.display()))?;
    let log = base.join("build-bins.log");
    announce(&format!(
        "missing in {}: {}; running hack/build-bins.sh (20-40 min cold), log {}",
        bin_dir.display(),
        missing.join(", "),
        log.display()
    ));
    let file = File::create(&log).with_context(|| format!("phalanx-testenv: creating {}", log.display()))?;
    let status = Command::new("bash")
        .arg(repo_root().join("hack/build-bins.sh"))
        .current_dir(repo_root())
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .status()
        .context("phalanx-testenv: running hack/build-bins.sh")?;
    anyhow::ensure!(
        status.success(),
        "phalanx-testenv: hack/build-bins.sh failed ({status}); see {}\n--- last lines ---\n{}",
        log.display(),
        tail(&log, 30)
    );
    let still: Vec<&str> = REQUIRED_BINS
        .iter()
        .copied()
        .filter(|b| !bin_dir.join(b).is_file())
        .collect();
    anyhow::ensure!(
        still.is_empty(),
        "phalanx-testenv: hack/build-bins.sh succeeded but {} still lacks {}; see {}",
        bin_dir.display(),
        still.join(", "),
        log.display()
    );
    announce("binaries built");
    Ok(())
}

impl TestEnv {
    /// Restarts the API server of a [`TestEnv::dedicated`] control plane so that it serves upstream's Workload API
    /// from now on (`hack/cluster.sh restart kube-apiserver --upstream-workload-api`: the gates and
    /// `--runtime-config` of [`TestEnv::dedicated_upstream_api`] added to its command line), as an administrator
    /// turning the API on does. Blocking; returns once `/readyz` answers again.
    ///
    /// # Errors
    /// On a control plane this process did not start, or when the restart fails (the message names the log).
    pub fn restart_apiserver_with_upstream_api(&self) -> anyhow::Result<()> {
        let (true, Some(state)) = (self.dedicated, self.state_dir.as_ref()) else {
            anyhow::bail!("phalanx-testenv: only a dedicated control plane can be restarted");
        };
        let out = Command::new("bash")
            .arg(repo_root().join("hack/cluster.sh"))
            .args([
                "restart",
                "kube-apiserver",
                "--upstream-workload-api",
                "--state-dir",
            ])
            .arg(state)
            .arg("--log-dir")
            .arg(&self.log_dir)
            .current_dir(repo_root())
            .stdin(Stdio::null())
            .output()
            .context("phalanx-testenv: running hack/cluster.sh restart")?;
        anyhow::ensure!(
            out.status.success(),
            "phalanx-testenv: restarting kube-apiserver failed ({}): {}; log {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            self.log_dir.join("kube-apiserver.log").display()
        );
        Ok(())
    }
}

impl Drop for TestEnv {
    /// Stops a [`TestEnv::dedicated`] control plane (`hack/cluster.sh down`; logs are kept). Others are left alone.
    fn drop(&mut self) {
        let (true, Some(state)) = (self.dedicated, self.state_dir.as_ref()) else {
            return;
        };
        let status = Command::new("bash")
            .arg(repo_root().join("hack/cluster.sh"))
            .arg("down")
            .arg("--state-dir")
            .arg(state)
            .arg("--log-dir")
            .arg(&self.log_dir)
            .current_dir(repo_root())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            announce(&format!(
                "stopping the control plane of {} failed ({status:?}); its watchdog stops it when this process exits",
                state.display()
            ));
        }
    }
}

/// [`TestEnv::dedicated`] with `cluster_flags` for `hack/cluster.sh up`.
fn dedicated_with(name: &str, apiserver_args: &[&str], cluster_flags: &[&str]) -> anyhow::Result<TestEnv> {
    anyhow::ensure!(
        !name.is_empty() && !name.contains(['/', '\\']) && name != "." && name != "..",
        "phalanx-testenv: dedicated control plane name {name:?} is not a single path component"
    );
    let bin_dir = bin_dir()?;
    ensure_binaries(&bin_dir)?;
    let run = target_dir()
        .join("testenv")
        .join(std::process::id().to_string())
        .join(name);
    let mut env = start(bin_dir, run, apiserver_args, cluster_flags)?;
    env.dedicated = true;
    Ok(env)
}

/// Starts a control plane in `run` (`target/testenv/<pid>/`, or a subdirectory of it for a dedicated one) through
/// `hack/cluster.sh up --watch-pid <pid>` with `cluster_flags`, the API server with `apiserver_args` appended.
fn start(
    bin_dir: PathBuf,
    run: PathBuf,
    apiserver_args: &[&str],
    cluster_flags: &[&str],
) -> anyhow::Result<TestEnv> {
    let root = repo_root();
    let base = target_dir().join("testenv");
    let pid = std::process::id();
    prune_old_runs(&base, pid);
    let state_dir = run.join("state");
    let log_dir = run.join("logs");
    fs::create_dir_all(&log_dir)
        .with_context(|| format!("phalanx-testenv: creating {}", log_dir.display()))?;
    let up_log = log_dir.join("cluster-up.log");
    let file =
        File::create(&up_log).with_context(|| format!("phalanx-testenv: creating {}", up_log.display()))?;
    announce(&format!("starting the control plane in {}", run.display()));
    let started = std::time::Instant::now();
    let mut cmd = Command::new("bash");
    if !apiserver_args.is_empty() {
        // After whatever the caller's environment already appends (e.g. `APISERVER_EXTRA_ARGS=--v=4`).
        let mut extra = std::env::var("APISERVER_EXTRA_ARGS").unwrap_or_default();
        for a in apiserver_args {
            extra.push(' ');
            extra.push_str(a);
        }
        cmd.env("APISERVER_EXTRA_ARGS", extra.trim_start());
    }
    let status = cmd
        .arg(root.join("hack/cluster.sh"))
        .arg("up")
        .args(cluster_flags)
        .arg("--state-dir")
        .arg(&state_dir)
        .arg("--log-dir")
        .arg(&log_dir)
        .arg("--watch-pid")
        .arg(pid.to_string())
        .env("PHALANX_BIN_DIR", &bin_dir)
        .current_dir(&root)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .status()
        .context("phalanx-testenv: running hack/cluster.sh up")?;
    if !status.success() {
        anyhow::bail!(
            "phalanx-testenv: the control plane did not start (hack/cluster.sh up: {status}).\n  start log: {}\n  \
             component logs: {dir}/etcd.log, {dir}/kube-apiserver.log, {dir}/kube-controller-manager.log, \
             {dir}/kwok.log\n--- last lines of the start log ---\n{}",
            up_log.display(),
            tail(&up_log, 30),
            dir = log_dir.display(),
        );
    }
    let kubeconfig = state_dir.join("kubeconfig");
    anyhow::ensure!(
        kubeconfig.is_file(),
        "phalanx-testenv: hack/cluster.sh up succeeded but wrote no {}; see {}",
        kubeconfig.display(),
        up_log.display()
    );
    announce(&format!(
        "control plane ready in {:.1} s (logs {})",
        started.elapsed().as_secs_f64(),
        log_dir.display()
    ));
    Ok(TestEnv {
        kubeconfig,
        bin_dir,
        log_dir,
        state_dir: Some(state_dir),
        dedicated: false,
    })
}

/// Removes run directories of earlier test binaries beyond the newest [`KEEP_RUN_DIRS`], never one whose cluster
/// may still run (its `state/cluster.env`, or a dedicated one's `<name>/state/cluster.env`, exists until
/// `cluster.sh down`).
fn prune_old_runs(base: &Path, own_pid: u32) {
    let Ok(entries) = fs::read_dir(base) else { return };
    let mut runs: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok_and(|p| p != own_pid))
        })
        .filter(|e| !may_run(&e.path()))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    runs.sort_by_key(|r| std::cmp::Reverse(r.0));
    for (_, dir) in runs.into_iter().skip(KEEP_RUN_DIRS) {
        let _ = fs::remove_dir_all(dir);
    }
}

/// Whether a control plane of run directory `run` may still be running: its own, or a dedicated one's in a
/// subdirectory.
fn may_run(run: &Path) -> bool {
    run.join("state/cluster.env").exists()
        || fs::read_dir(run).is_ok_and(|d| {
            d.filter_map(Result::ok)
                .any(|e| e.path().join("state/cluster.env").exists())
        })
}

/// The last `lines` lines of a log file (at most the last 64 KiB are read), or a note when it cannot be read.
fn tail(path: &Path, lines: usize) -> String {
    let read = || -> std::io::Result<String> {
        let mut f = File::open(path)?;
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    match read() {
        Ok(s) => {
            let all: Vec<&str> = s.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_root_holds_the_hack_scripts() {
        let root = repo_root();
        assert!(root.join("hack/cluster.sh").is_file(), "{}", root.display());
        assert!(root.join("hack/versions.sh").is_file(), "{}", root.display());
    }

    #[test]
    fn target_dir_is_above_deps() {
        // Unit tests run from <target>/<profile>/deps/<exe>.
        let t = target_dir();
        let exe = std::env::current_exe().unwrap();
        assert!(exe.starts_with(&t), "{} not under {}", exe.display(), t.display());
        assert!(t.join("debug").is_dir() || t.join("release").is_dir() || t.read_dir().is_ok());
    }

    #[test]
    fn bin_dir_is_keyed_by_version() {
        let d = bin_dir().unwrap();
        let s = d.to_string_lossy();
        match std::env::var_os("PHALANX_BIN_DIR") {
            Some(over) => assert_eq!(d, PathBuf::from(over)),
            None => assert!(s.contains("k8s-v1.37.2-etcd-"), "{s}"),
        }
    }

    #[test]
    fn tail_returns_last_lines() {
        let dir = std::env::temp_dir().join(format!("phalanx-testenv-tail-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let f = dir.join("log");
        fs::write(&f, (1..=50).map(|i| format!("line {i}\n")).collect::<String>()).unwrap();
        assert_eq!(tail(&f, 2), "line 49\nline 50");
        assert!(tail(&dir.join("nope"), 2).contains("cannot read"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
