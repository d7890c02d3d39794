//! The suite's control plane: `hack/cluster.sh` with the audit log on, its components killed and restarted on
//! demand, the fake nodes, the CRDs, and etcd's own API for compaction.
//!
//! The cluster is private to one suite run (its own state directory under the work directory) and is torn down by
//! `cluster.sh`'s watchdog when this process exits, however it exits.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Label of the suite's fake nodes; the replicas run with `--node-selector <NODE_LABEL>=true`.
pub const NODE_LABEL: &str = "phalanx.dev/chaos-node";
/// Node label used as the topology key of the gangs that ask to stay inside one rack.
pub const RACK_LABEL: &str = "topology.kubernetes.io/rack";

/// Extra kube-apiserver flags of the suite's cluster. The watch cache is off for pods and nodes so that an etcd
/// compaction really expires the resourceVersions a client holds: with the cache on, a watch resumed from an old
/// resourceVersion is served from the cache's history and never sees 410 Gone. (CustomResources ignore
/// `--watch-cache-sizes` and stay cached.)
pub const APISERVER_ARGS: &str = "--watch-cache-sizes=pods#0,nodes#0";

/// A control-plane component `hack/cluster.sh kill|restart` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    /// etcd (data on tmpfs survives the kill).
    Etcd,
    /// kube-apiserver.
    ApiServer,
    /// kube-controller-manager (not a fault target: restarted when it does not recover by itself).
    ControllerManager,
}

impl Component {
    fn name(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::ApiServer => "kube-apiserver",
            Component::ControllerManager => "kube-controller-manager",
        }
    }
}

/// A running control plane started by [`Cluster::up`].
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Repository root (holds `hack/`).
    pub repo: PathBuf,
    /// `hack/cluster.sh --state-dir`.
    pub state_dir: PathBuf,
    /// Component logs.
    pub log_dir: PathBuf,
    /// The API server's audit log (JSON lines).
    pub audit_log: PathBuf,
    /// Admin kubeconfig (`system:masters`), used by the harness and the checker only.
    pub admin_kubeconfig: PathBuf,
    /// The API server's address.
    pub api_addr: SocketAddr,
    /// etcd's client address (plain HTTP on loopback).
    pub etcd_addr: SocketAddr,
    keep: bool,
}

/// The repository root, from this crate's location.
pub fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

fn read_env_port(env: &str, key: &str) -> anyhow::Result<u16> {
    env.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .with_context(|| format!("cluster.env has no {key}"))?
        .trim()
        .parse()
        .with_context(|| format!("cluster.env: {key} is not a port"))
}

impl Cluster {
    /// Builds the control-plane binaries if missing (`hack/build-bins.sh`, a no-op when cached), then runs
    /// `hack/cluster.sh up` in `work_dir/cluster` with `AUDIT_LOG` and [`APISERVER_ARGS`]. Without `keep` the
    /// cluster is torn down when this process exits (`--watch-pid`).
    ///
    /// # Errors
    /// A script fails; the message names its log.
    pub async fn up(work_dir: &Path, keep: bool) -> anyhow::Result<Self> {
        let repo = repo_root();
        let state_dir = work_dir.join("cluster");
        let log_dir = state_dir.join("logs");
        std::fs::create_dir_all(&log_dir).with_context(|| format!("creating {}", log_dir.display()))?;
        let audit_log = log_dir.join("audit.log");
        let bins_log = log_dir.join("build-bins.log");
        let status = tokio::process::Command::new("bash")
            .arg(repo.join("hack/build-bins.sh"))
            .current_dir(&repo)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&bins_log)?)
            .stderr(std::fs::File::create(log_dir.join("build-bins.err"))?)
            .status()
            .await
            .context("running hack/build-bins.sh")?;
        anyhow::ensure!(
            status.success(),
            "hack/build-bins.sh failed; see {}",
            bins_log.display()
        );
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg(repo.join("hack/cluster.sh"))
            .args(["up", "--state-dir"])
            .arg(&state_dir)
            .arg("--log-dir")
            .arg(&log_dir)
            .env("AUDIT_LOG", &audit_log)
            .env("APISERVER_EXTRA_ARGS", APISERVER_ARGS)
            .current_dir(&repo)
            .stdin(Stdio::null());
        if !keep {
            cmd.arg("--watch-pid").arg(std::process::id().to_string());
        }
        let out = cmd.output().await.context("running hack/cluster.sh up")?;
        anyhow::ensure!(
            out.status.success(),
            "hack/cluster.sh up failed ({}); logs in {}\n{}",
            out.status,
            log_dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let env = std::fs::read_to_string(state_dir.join("cluster.env")).context("reading cluster.env")?;
        let api_port = read_env_port(&env, "API_PORT")?;
        let etcd_port = read_env_port(&env, "ETCD_PORT")?;
        Ok(Self {
            repo,
            admin_kubeconfig: state_dir.join("kubeconfig"),
            state_dir,
            log_dir,
            audit_log,
            api_addr: SocketAddr::from(([127, 0, 0, 1], api_port)),
            etcd_addr: SocketAddr::from(([127, 0, 0, 1], etcd_port)),
            keep,
        })
    }

    /// A client with the admin identity. kube's retry layer is left on: the harness's own calls may be replayed.
    ///
    /// # Errors
    /// The kubeconfig cannot be read.
    pub async fn admin_client(&self) -> anyhow::Result<Client> {
        let kc = Kubeconfig::read_from(&self.admin_kubeconfig)
            .with_context(|| format!("reading {}", self.admin_kubeconfig.display()))?;
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        Ok(Client::try_from(config)?)
    }

    async fn script(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = tokio::process::Command::new("bash")
            .arg(self.repo.join("hack/cluster.sh"))
            .args(args)
            .arg("--state-dir")
            .arg(&self.state_dir)
            .arg("--log-dir")
            .arg(&self.log_dir)
            .current_dir(&self.repo)
            .stdin(Stdio::null())
            .output()
            .await
            .with_context(|| format!("running hack/cluster.sh {}", args.join(" ")))?;
        anyhow::ensure!(
            out.status.success(),
            "hack/cluster.sh {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// SIGKILLs a component (`hack/cluster.sh kill`).
    ///
    /// # Errors
    /// The script fails.
    pub async fn kill(&self, c: Component) -> anyhow::Result<()> {
        self.script(&["kill", c.name()]).await
    }

    /// Starts a component again with its recorded command line and waits until it is healthy
    /// (`hack/cluster.sh restart`).
    ///
    /// # Errors
    /// The script fails or the component does not become healthy.
    pub async fn restart(&self, c: Component) -> anyhow::Result<()> {
        self.script(&["restart", c.name()]).await
    }

    /// Waits until the API server serves a pod list (which needs etcd: the pod watch cache is off). Returns the
    /// time it took.
    ///
    /// # Errors
    /// Not within `timeout`.
    pub async fn wait_usable(
        &self,
        client: &Client,
        timeout: std::time::Duration,
    ) -> anyhow::Result<std::time::Duration> {
        let start = tokio::time::Instant::now();
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(client.clone());
        loop {
            let probe = tokio::time::timeout(
                std::time::Duration::from_secs(2),
                pods.list_metadata(&kube::api::ListParams::default().limit(1)),
            )
            .await;
            if matches!(probe, Ok(Ok(_))) {
                return Ok(start.elapsed());
            }
            anyhow::ensure!(
                start.elapsed() < timeout,
                "the API server did not serve pods within {timeout:?}: {probe:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Makes sure kube-controller-manager works again after an outage: a new namespace must get its `default`
    /// ServiceAccount within 20 s (pods are refused without it). After a kube-apiserver restart the
    /// controller-manager's watches are first refused (403 while the new server's authorizer cache fills) and
    /// client-go then backs off for up to minutes; the suite tests Phalanx, not that, so it restarts the
    /// controller-manager instead of waiting. Returns a note when it did.
    ///
    /// # Errors
    /// The controller-manager does not work even after a restart.
    pub async fn ensure_controller_manager(&self, client: &Client) -> anyhow::Result<Option<String>> {
        use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
        let namespaces: kube::Api<Namespace> = kube::Api::all(client.clone());
        let works = |timeout: std::time::Duration| {
            let namespaces = namespaces.clone();
            async move {
                let name = format!("probe-kcm-{:08x}", rand::random::<u32>());
                let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
                namespaces.create(&kube::api::PostParams::default(), &ns).await?;
                let sas: kube::Api<ServiceAccount> = kube::Api::namespaced(client.clone(), &name);
                let ok =
                    phalanx_testenv::wait_for("the probe namespace's ServiceAccount", timeout, || async {
                        Ok(sas.get_opt("default").await?.map(|_| ()))
                    })
                    .await
                    .is_ok();
                let _ = namespaces
                    .delete(&name, &kube::api::DeleteParams::default())
                    .await;
                anyhow::Ok(ok)
            }
        };
        if works(std::time::Duration::from_secs(20)).await? {
            return Ok(None);
        }
        self.restart(Component::ControllerManager).await?;
        anyhow::ensure!(
            works(std::time::Duration::from_secs(60)).await?,
            "kube-controller-manager does not create ServiceAccounts even after a restart; see {}",
            self.log_dir.join("kube-controller-manager.log").display()
        );
        Ok(Some(
            "kube-controller-manager did not recover within 20 s and was restarted".into(),
        ))
    }

    /// Stops the cluster unless it was started with `keep` (then it stays for inspection).
    pub fn down(&self) {
        if self.keep {
            return;
        }
        let _ = std::process::Command::new("bash")
            .arg(self.repo.join("hack/cluster.sh"))
            .arg("down")
            .arg("--state-dir")
            .arg(&self.state_dir)
            .arg("--log-dir")
            .arg(&self.log_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// etcd's current revision (`POST /v3/kv/range` on its gRPC gateway).
    ///
    /// # Errors
    /// etcd is unreachable or answers something else.
    pub async fn etcd_revision(&self) -> anyhow::Result<u64> {
        // Any key will do: the response header carries the store's revision.
        let body = etcd_post(self.etcd_addr, "/v3/kv/range", r#"{"key":"Y2hhb3M="}"#).await?;
        let v: serde_json::Value = serde_json::from_str(&body).context("etcd range response")?;
        v["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .with_context(|| format!("no revision in etcd's answer: {body}"))
    }

    /// Compacts etcd's history up to `revision` (physically, so the call returns once it is applied): every
    /// resourceVersion below it is gone, and a watch or list asking for one gets 410 Gone.
    ///
    /// # Errors
    /// etcd refuses (e.g. the revision is already compacted).
    pub async fn etcd_compact(&self, revision: u64) -> anyhow::Result<()> {
        let body = format!(r#"{{"revision":"{revision}","physical":true}}"#);
        let answer = etcd_post(self.etcd_addr, "/v3/kv/compaction", &body).await?;
        anyhow::ensure!(answer.contains("header"), "etcd compaction failed: {answer}");
        Ok(())
    }
}

/// One HTTP/1.1 POST with `Connection: close`; returns the body of a 200 answer.
async fn etcd_post(addr: SocketAddr, path: &str, body: &str) -> anyhow::Result<String> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        anyhow::Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    let text = tokio::time::timeout(std::time::Duration::from_secs(10), exchange)
        .await
        .context("etcd did not answer within 10 s")??;
    let (head, rest) = text
        .split_once("\r\n\r\n")
        .context("no HTTP header end from etcd")?;
    anyhow::ensure!(head.starts_with("HTTP/1.1 200"), "etcd {path}: {head}: {rest}");
    // The gateway may answer chunked; the JSON object is the part between the first '{' and the last '}'.
    let start = rest.find('{').unwrap_or(0);
    let end = rest.rfind('}').map_or(rest.len(), |e| e + 1);
    Ok(rest[start..end].to_owned())
}

/// Creates `count` fake nodes `chaos-n<i>` (`cpu` CPUs, `memory`, 110 pods), labelled [`NODE_LABEL`]`=true`
/// and spread over two racks ([`RACK_LABEL`]), and waits until kwok reports them Ready.
///
/// # Errors
/// A node cannot be created or does not turn Ready.
pub async fn create_nodes(
    client: &Client,
    count: usize,
    cpu: &str,
    memory: &str,
) -> anyhow::Result<Vec<String>> {
    let names: Vec<String> = (0..count).map(|i| format!("chaos-n{i}")).collect();
    futures::stream::iter(names.iter().enumerate().map(|(i, name)| {
        let client = client.clone();
        let node = phalanx_testenv::FakeNode::new(name.clone())
            .cpu(cpu)
            .memory(memory)
            .pods(110)
            .label(NODE_LABEL, "true")
            .label(RACK_LABEL, if i % 2 == 0 { "rack-a" } else { "rack-b" });
        async move { node.create(&client).await.map(|_| ()) }
    }))
    .buffer_unordered(8)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(names)
}
