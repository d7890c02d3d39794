//! What the read-only tools (`phalanx explain`, `simulate`, `snapshot`) share: the cluster state they read, the
//! client, and running the scheduler's cycles on that state without writing ([`phalanx_driver::dry_run`]).

pub mod objects;

use std::path::{Path, PathBuf};

use anyhow::Context;
use phalanx_driver::{DryRun, SchedulerOptions};
use phalanx_store::{ClusterState, Store};

/// Where the tools read the cluster from.
#[derive(Debug, Clone)]
pub enum ClusterSource {
    /// The live cluster (kubeconfig file and context; `None` = kube's `Config::infer`).
    Live {
        /// Kubeconfig file.
        kubeconfig: Option<PathBuf>,
        /// Context.
        context: Option<String>,
    },
    /// A file written by `phalanx snapshot`.
    File(PathBuf),
}

/// A client that never reaches a server: every call fails with an I/O error. For a dry run over a snapshot file,
/// whose driver holds a client but, not being leader, never calls it.
pub fn offline_client() -> kube::Client {
    let svc = tower::service_fn(|_req: http::Request<kube::client::Body>| async {
        Err::<http::Response<kube::client::Body>, std::io::Error>(std::io::Error::other(
            "offline: a snapshot file has no API server",
        ))
    });
    kube::Client::new(svc, "default")
}

/// The client and the state of `source`. For a live cluster: one LIST per kind (read-only; needs `list` on nodes,
/// pods, podgroups, compositepodgroups, workloads, priorityclasses, poddisruptionbudgets, and the storage kinds the
/// volume plugins read: persistentvolumeclaims, persistentvolumes, storageclasses, csinodes, csidrivers and
/// csistoragecapacities; and, when the server serves `resource.k8s.io/v1`, deviceclasses, resourceslices,
/// resourceclaims and resourceclaimtemplates). Errors name the file
/// or the failed LIST.
pub async fn read_cluster(source: &ClusterSource) -> anyhow::Result<(kube::Client, ClusterState)> {
    match source {
        ClusterSource::Live { kubeconfig, context } => {
            let client = crate::operator::client(kubeconfig.as_ref(), context.as_deref()).await?;
            let state = ClusterState::list(&client).await?;
            Ok((client, state))
        }
        ClusterSource::File(path) => Ok((offline_client(), read_state_file(path)?)),
    }
}

/// Reads a state file (`-` = stdin), as `phalanx snapshot` writes it or any YAML/JSON of the kinds the store reads.
pub fn read_state_file(path: &Path) -> anyhow::Result<ClusterState> {
    let mut state = ClusterState::default();
    let (text, name) = read_text(path)?;
    objects::read_objects(&text, &name, &mut state)?;
    Ok(state)
}

/// The text of `path` (`-` = stdin) and the name to use for it in errors.
pub fn read_text(path: &Path) -> anyhow::Result<(String, String)> {
    if path == Path::new("-") {
        let text = std::io::read_to_string(std::io::stdin()).context("reading stdin")?;
        return Ok((text, "<stdin>".into()));
    }
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {name}"))?;
    Ok((text, name))
}

/// The scheduler instance a tool takes the view of: its `schedulerName`, its node selector (empty = all nodes) and
/// its core configuration (the `scheduler` section of its `--config` file, or the defaults).
#[derive(Debug, Clone)]
pub struct View {
    /// `spec.schedulerName` of the pods it places.
    pub scheduler_name: String,
    /// Its `--node-selector`.
    pub node_selector: String,
    /// Its plugin weights, placement limits and search budget.
    pub config: phalanx_scheduler::config::SchedulerConfig,
}

/// Runs the scheduler's cycles over `store` with a progress line on stderr when it takes more than a second.
/// Errors: a node selector that does not parse.
pub fn run_dry(client: kube::Client, store: Store, view: &View) -> anyhow::Result<DryRun> {
    let opts = SchedulerOptions {
        scheduler_name: view.scheduler_name.clone(),
        node_selector: Some(view.node_selector.clone()).filter(|s| !s.is_empty()),
        config: view.config.clone(),
        ..SchedulerOptions::default()
    };
    let started = std::time::Instant::now();
    let mut shown = false;
    let dry = phalanx_driver::dry_run(client, store, opts, |done, total| {
        if started.elapsed() > std::time::Duration::from_secs(1) && (done % 100 == 0 || done == total) {
            shown = true;
            eprint!("\rphalanx: scheduled {done} of {total} entities");
        }
    })?;
    if shown {
        eprintln!();
    }
    Ok(dry)
}

/// Whether `pod` is ours (its `spec.schedulerName` is `scheduler_name`).
pub fn is_ours(pod: &phalanx_store::PodRecord, scheduler_name: &str) -> bool {
    pod.scheduler_name() == scheduler_name
}
