//! The benchmark's control plane: started through `hack/cluster.sh` with the upstream workload API served, the
//! scheduler identity both schedulers share, the fake nodes, and upstream kube-scheduler as a child process.
//!
//! The cluster is private to the benchmark (its own state dir): nothing else schedules or creates load on it.

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

/// Upstream kube-scheduler v1.37.2 running as a child of the benchmark, killed when dropped or stopped.
pub struct KubeScheduler {
    child: tokio::process::Child,
    log: PathBuf,
}

impl KubeScheduler {
    /// Writes a `KubeSchedulerConfiguration` (kubeconfig of the `system:kube-scheduler` identity,
    /// `clientConnection.qps`/`burst` raised from the 50/100 defaults that cap binds at ~50/s, leader election off)
    /// and starts `kube-scheduler --config=... --secure-port=0 --feature-gates=<SCHEDULER_GATES> --v=<v>`, logging to
    /// `<work dir>/<log_name>`.
    ///
    /// # Errors
    /// When the config cannot be written or the process cannot be spawned, or it exits within the first second
    /// (bad flag or config; the log path is in the message).
    pub async fn start(
        cluster: &Cluster,
        qps: u32,
        burst: u32,
        v: u8,
        log_name: &str,
    ) -> anyhow::Result<Self> {
        let config = cluster.work_dir.join("kube-scheduler.yaml");
        std::fs::write(
            &config,
            scheduler_config(&cluster.scheduler_kubeconfig, qps, burst),
        )
        .with_context(|| format!("writing {}", config.display()))?;
        let log = cluster.work_dir.join(log_name);
        let file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = tokio::process::Command::new(cluster.bin_dir.join("kube-scheduler"))
            .arg(format!("--config={}", config.display()))
            .arg("--secure-port=0")
            .arg(format!("--feature-gates={SCHEDULER_GATES}"))
            .arg(format!("--v={v}"))
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .context("starting kube-scheduler")?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("kube-scheduler exited at once ({status}); see {}", log.display());
        }
        Ok(Self { child, log })
    }

    /// The log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Kills the process (SIGKILL; no state to save) and reaps it.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
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
}
