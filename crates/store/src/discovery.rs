//! One discovery request per optional API group-version when the store starts (DRA's `resource.k8s.io/v1`,
//! upstream's `scheduling.k8s.io/v1beta1` and CompositePodGroup's version): whether the server serves the kinds
//! the store would watch. Upstream's informers assume the kinds exist; an add-on cannot, since the gates and
//! `--runtime-config` decide per cluster. They change only when the API servers restart with other flags:
//! `crate::served_apis` repeats the requests and tells when the answer is no longer the one the store started with.

use std::time::Duration;

use kube::Client;

/// How long discovery retries a failing request before it gives up and counts the group-version as not served.
pub const DISCOVERY_PATIENCE: Duration = Duration::from_secs(30);
const RETRY_BASE: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(8);

/// Whether the server serves `group_version` (e.g. `resource.k8s.io/v1`) with every kind of `plurals`:
/// `GET /apis/<group_version>`, a 404 meaning no. Errors: any other failure of that request (network, 5xx, 403).
pub(crate) async fn discover(
    client: &Client,
    group_version: &str,
    plurals: &[&str],
) -> Result<bool, kube::Error> {
    match client.list_api_group_resources(group_version).await {
        Ok(list) => Ok(plurals
            .iter()
            .all(|p| list.resources.iter().any(|r| r.name == *p))),
        // By code: the server answers a group-version it does not serve with a plain-text `404 page not found`,
        // which kube turns into a Status without reason, and `Status::is_not_found` (kube-core 5.0) then says no.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// [`discover`], retried for up to [`DISCOVERY_PATIENCE`]; logs once, with `off` (what the answer no means for
/// the user), when the answer is no or no answer came.
pub(crate) async fn served(client: &Client, group_version: &str, plurals: &[&str], off: &str) -> bool {
    let started = tokio::time::Instant::now();
    let mut failures = 0;
    loop {
        match discover(client, group_version, plurals).await {
            Ok(true) => return true,
            Ok(false) => {
                let version = client.apiserver_version().await.map(|v| v.git_version);
                tracing::info!(
                    server_version = version.as_deref().unwrap_or("unknown"),
                    "{group_version} is not served by this API server: {off}"
                );
                return false;
            }
            Err(e) => {
                failures += 1;
                let wait = crate::retry::backoff(RETRY_BASE, failures, RETRY_MAX);
                if started.elapsed() + wait > DISCOVERY_PATIENCE {
                    tracing::warn!(
                        error = %e,
                        "could not discover {group_version} within {}s: {off} (restart the scheduler to try again)",
                        DISCOVERY_PATIENCE.as_secs()
                    );
                    return false;
                }
                tracing::debug!(error = %e, retry_in = ?wait, "discovery of {group_version} failed");
                tokio::time::sleep(wait).await;
            }
        }
    }
}
