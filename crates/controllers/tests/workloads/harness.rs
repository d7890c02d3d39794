//! The harness of `tests/workloads.rs`: the workload controllers (JobSet, LeaderWorkerSet, KubeRay, Kubeflow
//! Trainer, MPI Operator) as child processes with their CRDs and webhooks (`controllers.rs`, `webhooks.rs`), and
//! Phalanx's controllers and scheduler in process; once per test binary (`shared/processes.rs`).
//!
//! Everything runs on a background runtime of its own (as `owner_integration`'s controllers do): the workload
//! controllers and Phalanx are namespace-agnostic, one of each serves every case, and the cases run in parallel,
//! each in its own namespace with its own nodes.

use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::Result;
use phalanx_testenv::TestEnv;

use crate::controllers::{JOBSET, LWS, start, start_kuberay, start_mpi_operator, start_trainer};
use crate::processes::{ControllerProcess, build_controllers, start_once, start_phalanx};

/// The controllers `hack/build-workloads.sh` builds for this test (it builds these five when given no name).
const CONTROLLERS: [&str; 5] = ["jobset", "lws", "kuberay", "trainer", "mpi-operator"];

/// The directory of the controller's log, configuration and certificates: `<test env logs>/workloads/<name>`.
pub fn log_dir(name: &str) -> Result<PathBuf> {
    crate::processes::log_dir("workloads", name)
}

/// What the cases need to know of the shared harness.
#[derive(Clone, Debug)]
pub struct Harness {
    /// The workload controllers' logs, for failure messages.
    pub logs: Vec<PathBuf>,
}

static HARNESS: OnceLock<std::result::Result<Harness, String>> = OnceLock::new();

/// Starts, once per test binary and on a runtime of its own: `hack/build-workloads.sh` for [`CONTROLLERS`] (a no-op
/// when cached), the Phalanx CRDs, the five controllers with their CRDs and webhooks, Phalanx's controllers and one
/// scheduler named `phalanx-scheduler` (every node; each case pins its pods to its own nodes by
/// `nodeSelector`). Blocking: call it through `spawn_blocking`.
pub fn harness() -> std::result::Result<Harness, String> {
    start_once(&HARNESS, "workloads-harness", setup)
}

async fn setup() -> Result<(Harness, Vec<ControllerProcess>)> {
    let env = TestEnv::shared();
    build_controllers(&CONTROLLERS)?;
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    // Kubeflow Trainer needs the JobSet CRDs and controller: it starts once JobSet is up.
    let ((jobset, trainer), lws, kuberay, mpi) = tokio::try_join!(
        start_trainer(&client, start(&client, &JOBSET)),
        start(&client, &LWS),
        start_kuberay(&client),
        start_mpi_operator(&client),
    )?;
    let procs = vec![jobset, lws, kuberay, trainer, mpi];
    let logs = procs.iter().map(|p| p.log.clone()).collect();
    start_phalanx(&client).await?;
    Ok((Harness { logs }, procs))
}
