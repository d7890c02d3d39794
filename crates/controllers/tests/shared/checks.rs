//! Small checks the real-controller suites share (`tests/workloads.rs`, `tests/autoscaling.rs`, each including this
//! file with `#[path]`): whether a pod is bound, a condition in one line, and a wait whose timeout shows the case.

use std::future::Future;
use std::time::Duration;

use anyhow::{Result, anyhow};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use phalanx_testenv::wait_for;

/// Whether the pod has a node.
pub fn bound(p: &Pod) -> bool {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

/// `status/reason: message`, or `-` without a condition.
pub fn show(c: Option<&Condition>) -> String {
    c.map_or("-".into(), |c| {
        format!("{}/{}: {}", c.status, c.reason, c.message)
    })
}

/// [`wait_for`]; a timeout's error also holds what `describe` returns then (the state of the case).
pub async fn wait_or_describe<T, F, Fut, D, DFut>(
    what: &str,
    timeout: Duration,
    probe: F,
    describe: D,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
    D: FnOnce() -> DFut,
    DFut: Future<Output = String>,
{
    match wait_for(what, timeout, probe).await {
        Ok(v) => Ok(v),
        Err(e) => Err(anyhow!("{e:#}\n{}", describe().await)),
    }
}
