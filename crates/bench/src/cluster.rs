//! The benchmark's control plane: started through `hack/cluster.sh` with the upstream workload API served, the
//! scheduler identity both schedulers share, the fake nodes, and upstream kube-scheduler as a child process.
//!
//! The cluster is private to the benchmark (its own state dir): nothing else schedules or creates load on it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::json;

use crate::procfs::{self, ProcSample};
use crate::workload::{BENCH_NODE_LABEL, node_name};

/// Feature gates kube-scheduler gets: the same set `hack/cluster.sh` gives the API server and KCM with
/// `UPSTREAM_WORKLOAD_API=1` (GenericWorkload is beta but off by default in 1.37; KEP-4671).
pub const SCHEDULER_GATES: &str =
    "GenericWorkload=true,CompositePodGroup=true,TopologyAwareWorkloadScheduling=true";

/// Paths of a running benchmark cluster.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Admin kubeconfig (group `system:masters`, exempt from API Priority and Fairness): used for setup,
    /// pod creation and the timing watch only.
    pub admin_kubeconfig: PathBuf,
    /// Kubeconfig with the client certificate `CN=system:kube-scheduler` that `hack/cluster.sh` issues: used by
    /// upstream kube-scheduler, by Phalanx and by the bind-rate binder alike, so all three land in the same APF
    /// FlowSchema (`kube-scheduler` -> priority level `workload-high`).
    pub scheduler_kubeconfig: PathBuf,
    /// `hack/cluster.sh --state-dir`.
    pub state_dir: PathBuf,
    /// Control-plane binaries (`$PHALANX_BIN_DIR`).
    pub bin_dir: PathBuf,
    /// Where this run writes kube-scheduler's config and log.
    pub work_dir: PathBuf,
}

impl Cluster {
    /// Runs `hack/cluster.sh up --state-dir <state_dir>` with `UPSTREAM_WORKLOAD_API=1` and no kube-scheduler
    /// (the benchmark starts it per case). Without `keep`, `--watch-pid <this process>` tears the cluster down
    /// when the benchmark exits. `up` is idempotent: a running cluster in the same state dir is reused.
    ///
    /// # Errors
    /// When the script fails (its stderr, with the log dir, is in the message) or wrote no kubeconfig.
    pub async fn up(repo: &Path, state_dir: &Path, keep: bool) -> anyhow::Result<Self> {
        std::fs::create_dir_all(state_dir).with_context(|| format!("creating {}", state_dir.display()))?;
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg(repo.join("hack/cluster.sh"))
            .arg("up")
            .arg("--state-dir")
            .arg(state_dir)
            .env("UPSTREAM_WORKLOAD_API", "1")
            .env("WITH_KUBE_SCHEDULER", "0")
            .current_dir(repo)
            .stdin(Stdio::null());
        if !keep {
            cmd.arg("--watch-pid").arg(std::process::id().to_string());
        }
        let out = cmd.output().await.context("running hack/cluster.sh up")?;
        anyhow::ensure!(
            out.status.success(),
            "hack/cluster.sh up failed ({}); logs in {}/logs\n{}",
            out.status,
            state_dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let bin = tokio::process::Command::new("bash")
            .arg("-c")
            .arg("source hack/versions.sh && printf %s \"$PHALANX_BIN_DIR\"")
            .current_dir(repo)
            .output()
            .await
            .context("sourcing hack/versions.sh")?;
        anyhow::ensure!(bin.status.success(), "sourcing hack/versions.sh failed");
        let cluster = Self {
            admin_kubeconfig: state_dir.join("kubeconfig"),
            scheduler_kubeconfig: state_dir.join("scheduler.kubeconfig"),
            state_dir: state_dir.to_path_buf(),
            bin_dir: PathBuf::from(String::from_utf8_lossy(&bin.stdout).into_owned()),
            work_dir: state_dir.join("bench"),
        };
        for f in [&cluster.admin_kubeconfig, &cluster.scheduler_kubeconfig] {
            anyhow::ensure!(f.is_file(), "hack/cluster.sh up wrote no {}", f.display());
        }
        std::fs::create_dir_all(&cluster.work_dir)
            .with_context(|| format!("creating {}", cluster.work_dir.display()))?;
        Ok(cluster)
    }

    /// A client for `kubeconfig`. kube's default retry policy is off (as in Phalanx's
    /// `phalanx_driver::scheduler_client`): it would replay POSTs on 429 for minutes and hide throttling.
    ///
    /// # Errors
    /// When the kubeconfig cannot be read or the client built.
    pub async fn client(kubeconfig: &Path) -> anyhow::Result<Client> {
        let kc =
            Kubeconfig::read_from(kubeconfig).with_context(|| format!("reading {}", kubeconfig.display()))?;
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .with_context(|| format!("loading {}", kubeconfig.display()))?;
        phalanx_driver::scheduler_client(config).context("building a client")
    }
}

/// Lets user `system:kube-scheduler` act as `cluster-admin`, so Phalanx (which reads and writes
/// `scheduling.phalanx.dev` objects the built-in `system:kube-scheduler` role does not cover) can run under the same
/// identity, hence the same APF FlowSchema, as upstream kube-scheduler. Authorization grants do not change APF
/// classification; this is a private benchmark cluster.
///
/// # Errors
/// When the API refuses the server-side apply.
pub async fn grant_scheduler_identity(admin: &Client) -> anyhow::Result<()> {
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "phalanx-bench-scheduler"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:kube-scheduler"}]
    }))?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .patch(
            "phalanx-bench-scheduler",
            &PatchParams::apply("phalanx-bench").force(),
            &Patch::Apply(&crb),
        )
        .await
        .context("granting system:kube-scheduler cluster-admin")?;
    Ok(())
}

/// Makes sure exactly `n` benchmark nodes exist (names [`node_name`]`(0..n)`, 32 CPU, 256Gi, 110 pods, labelled
/// [`BENCH_NODE_LABEL`]) and are Ready, creating the missing ones with `concurrency` calls in flight. Returns
/// their names.
///
/// # Errors
/// When more benchmark nodes exist than asked (a reused cluster from a bigger run: `hack/cluster.sh down` it), or
/// a node cannot be created or does not turn Ready (is kwok running?).
pub async fn ensure_nodes(admin: &Client, n: usize, concurrency: usize) -> anyhow::Result<Vec<String>> {
    let api: Api<Node> = Api::all(admin.clone());
    let existing = api
        .list_metadata(&ListParams::default().labels(BENCH_NODE_LABEL))
        .await
        .context("listing benchmark nodes")?;
    let have: std::collections::BTreeSet<String> = existing
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect();
    let names: Vec<String> = (0..n).map(node_name).collect();
    let extra = have.iter().filter(|h| !names.contains(h)).count();
    anyhow::ensure!(
        extra == 0,
        "the reused cluster has {extra} benchmark nodes beyond the {n} asked for; stop it with \
         `hack/cluster.sh down --state-dir <state dir>` or ask for more nodes"
    );
    let missing: Vec<String> = names.iter().filter(|n| !have.contains(*n)).cloned().collect();
    futures::stream::iter(missing.into_iter().map(|name| {
        let client = admin.clone();
        async move {
            phalanx_testenv::FakeNode::new(name)
                .cpu("32")
                .memory("256Gi")
                .pods(110)
                .label(BENCH_NODE_LABEL, "true")
                .create(&client)
                .await
                .map(|_| ())
        }
    }))
    .buffer_unordered(concurrency.max(1))
    .try_collect::<Vec<()>>()
    .await?;
    Ok(names)
}

/// A scheduler running as a child process of the benchmark (kube-scheduler or `phalanx run`), its output in a log
/// file, killed with its whole process group when dropped or stopped: a `--phalanx-bin` wrapper script (a profiler
/// in front of `phalanx run`) leaves no grandchild behind.
pub struct ChildProcess {
    child: tokio::process::Child,
    pid: u32,
    log: PathBuf,
}

impl ChildProcess {
    /// Spawns `cmd` with stdin closed and stdout/stderr to `log`, and checks that it is still running 300 ms
    /// later (a bad flag or config ends it at once).
    async fn spawn(mut cmd: tokio::process::Command, what: &str, log: PathBuf) -> anyhow::Result<Self> {
        let file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        let pid = child.id().with_context(|| format!("{what} has no process id"))?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("{what} exited at once ({status}); see {}", log.display());
        }
        Ok(Self { child, pid, log })
    }

    /// The log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Its peak RSS, RSS and CPU time now (`None` if it has exited).
    pub fn sample(&mut self) -> Option<ProcSample> {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return None;
        }
        procfs::sample(self.pid)
    }

    /// Kills the process group (SIGKILL; no state to save) and reaps the child.
    pub async fn stop(mut self) {
        self.kill_group();
        let _ = self.child.wait().await;
    }

    fn kill_group(&mut self) {
        // The child leads its own group (`process_group(0)`), so the group id is its pid.
        if let Some(pgid) = i32::try_from(self.pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            // ESRCH when the group is already gone (after `stop`): nothing to do.
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
        let _ = self.child.start_kill();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// Upstream kube-scheduler v1.37.2 as a child process.
pub struct KubeScheduler;

impl KubeScheduler {
    /// Writes a `KubeSchedulerConfiguration` (kubeconfig of the `system:kube-scheduler` identity,
    /// `clientConnection.qps`/`burst` raised from the 50/100 defaults that cap binds at ~50/s, leader election off)
    /// and starts `kube-scheduler --config=... --secure-port=0 --feature-gates=<SCHEDULER_GATES> --v=<v>`, logging to
    /// `<work dir>/<log_name>`.
    ///
    /// # Errors
    /// When the config cannot be written or the process cannot be spawned, or it exits within the first 300 ms
    /// (bad flag or config; the log path is in the message).
    pub async fn start(
        cluster: &Cluster,
        qps: u32,
        burst: u32,
        v: u8,
        log_name: &str,
    ) -> anyhow::Result<ChildProcess> {
        let config = scheduler_config(&cluster.scheduler_kubeconfig, qps, burst);
        Self::start_with_config(cluster, &config, v, log_name).await
    }

    /// [`KubeScheduler::start`] with the whole `KubeSchedulerConfiguration` given as YAML (e.g.
    /// [`scheduler_config`] plus a `profiles:` list), written to `<work dir>/kube-scheduler.yaml`.
    ///
    /// # Errors
    /// As [`KubeScheduler::start`].
    pub async fn start_with_config(
        cluster: &Cluster,
        config_yaml: &str,
        v: u8,
        log_name: &str,
    ) -> anyhow::Result<ChildProcess> {
        let config = cluster.work_dir.join("kube-scheduler.yaml");
        std::fs::write(&config, config_yaml).with_context(|| format!("writing {}", config.display()))?;
        let mut cmd = tokio::process::Command::new(cluster.bin_dir.join("kube-scheduler"));
        cmd.arg(format!("--config={}", config.display()))
            .arg("--secure-port=0")
            .arg(format!("--feature-gates={SCHEDULER_GATES}"))
            .arg(format!("--v={v}"));
        ChildProcess::spawn(cmd, "kube-scheduler", cluster.work_dir.join(log_name)).await
    }
}

/// `phalanx run` (the release binary) as a child process.
pub struct Phalanx {
    /// The process.
    pub process: ChildProcess,
    /// Where its `/metrics` listens.
    pub metrics_addr: SocketAddr,
}

impl Phalanx {
    /// Starts `<bin> run --kubeconfig <scheduler kubeconfig> --metrics-addr 127.0.0.1:<free port>
    /// --bind-concurrency <n> --log-format text` (leader election is off by default: it schedules at once; the
    /// store, the reconcilers and the scheduler all run, as in production), `RUST_LOG=info`, logging to
    /// `<work dir>/<log_name>`.
    ///
    /// # Errors
    /// No free port, the process cannot be spawned, or it exits within the first 300 ms.
    pub async fn start(
        cluster: &Cluster,
        bin: &Path,
        bind_concurrency: usize,
        log_name: &str,
    ) -> anyhow::Result<Self> {
        let metrics_addr = free_local_addr()?;
        let mut cmd = tokio::process::Command::new(bin);
        cmd.arg("run")
            .arg("--kubeconfig")
            .arg(&cluster.scheduler_kubeconfig)
            .arg("--metrics-addr")
            .arg(metrics_addr.to_string())
            .arg("--bind-concurrency")
            .arg(bind_concurrency.to_string())
            .arg("--log-format")
            .arg("text")
            .env("RUST_LOG", "info")
            .env_remove("KUBECONFIG")
            .env_remove("PHALANX_CONFIG")
            .env_remove("PHALANX_LEADER_ELECT");
        let process = ChildProcess::spawn(cmd, "phalanx run", cluster.work_dir.join(log_name)).await?;
        Ok(Self {
            process,
            metrics_addr,
        })
    }

    /// The text of its `/metrics` (Prometheus exposition format), by a plain HTTP/1.1 GET.
    ///
    /// # Errors
    /// Connection or read failure, or a status other than 200.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        let addr = self.metrics_addr;
        tokio::task::spawn_blocking(move || http_get(addr, "/metrics"))
            .await
            .context("metrics scrape task")?
    }
}

/// A local address with a port free right now (bound and released; the child binds it a moment later).
fn free_local_addr() -> anyhow::Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?)
}

/// `GET path` on `addr` with `Connection: close`; the body (de-chunked if need be) when the status is 200.
fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    use std::io::{Read as _, Write as _};
    let timeout = Duration::from_secs(10);
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .with_context(|| format!("reading {addr}{path}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("{addr}{path}: no HTTP header"))?;
    let status = head.lines().next().unwrap_or_default();
    anyhow::ensure!(
        status.split_whitespace().nth(1) == Some("200"),
        "{addr}{path}: {status}"
    );
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.to_ascii_lowercase().contains("chunked")
    });
    Ok(if chunked { dechunk(body) } else { body.to_owned() })
}

/// Decodes an HTTP/1.1 chunked body (sizes in hex, each chunk followed by CRLF, a 0-size chunk at the end).
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

/// The `KubeSchedulerConfiguration` YAML for [`KubeScheduler::start`] (kubescheduler.config.k8s.io/v1).
pub fn scheduler_config(kubeconfig: &Path, qps: u32, burst: u32) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\n\
         kind: KubeSchedulerConfiguration\n\
         clientConnection:\n  kubeconfig: {kc}\n  qps: {qps}\n  burst: {burst}\n\
         leaderElection:\n  leaderElect: false\n",
        kc = serde_json::Value::String(kubeconfig.display().to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduler_config_raises_the_client_limits() {
        let y = scheduler_config(Path::new("/s/scheduler.kubeconfig"), 5000, 4000);
        assert!(y.contains("kind: KubeSchedulerConfiguration"), "{y}");
        assert!(y.contains("  kubeconfig: \"/s/scheduler.kubeconfig\"\n"), "{y}");
        assert!(y.contains("  qps: 5000\n  burst: 4000\n"), "{y}");
        assert!(y.contains("leaderElect: false"), "{y}");
    }

    #[test]
    fn chunked_bodies_are_decoded() {
        assert_eq!(dechunk("5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n"), "hello, world");
        assert_eq!(dechunk("0\r\n\r\n"), "");
    }
}
