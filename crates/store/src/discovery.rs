//! One discovery request per optional API group-version when the store starts (DRA's `resource.k8s.io/v1`,
//! upstream's `scheduling.k8s.io/v1beta1` and CompositePodGroup's version): whether the server serves the kinds
//! the store would watch. Upstream's informers assume the kinds exist; an add-on cannot, since the gates and
//! `--runtime-config` decide per cluster. They change only when the API servers restart with other flags:
//! [`until_changed`] repeats the requests and tells when the answer is no longer the one the store started with
//! (the process then restarts, `phalanx` `operator.rs`, and watches what is served now).

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

/// The optional APIs the store watches: as one round of discovery finds them ([`probe`]), or as the store decided
/// when it started (`Store::served_apis`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServedApis {
    /// `resource.k8s.io/v1` with the four DRA kinds (`crate::dra`).
    pub dra: bool,
    /// Upstream's PodGroups, `scheduling.k8s.io/v1beta1` (`crate::upstream`).
    pub pod_groups: bool,
    /// The group-version upstream's CompositePodGroups are read at, where the PodGroups are served: `v1beta1` where
    /// it serves them (1.38), else `v1alpha3` where that does (1.37); `None` when neither does.
    pub composites: Option<&'static str>,
}

impl ServedApis {
    /// What differs from `before`, one phrase per API, e.g. `scheduling.k8s.io/v1beta1 PodGroups: now served`.
    pub fn changes_from(&self, before: &ServedApis) -> Vec<String> {
        let word = |on: bool| if on { "now served" } else { "no longer served" };
        let mut out = Vec::new();
        if self.dra != before.dra {
            out.push(format!(
                "{} DRA kinds: {}",
                crate::server::DRA_GROUP_VERSION,
                word(self.dra)
            ));
        }
        if self.pod_groups != before.pod_groups {
            out.push(format!(
                "{} PodGroups: {}",
                crate::upstream::UPSTREAM_GROUP_VERSION,
                word(self.pod_groups)
            ));
        }
        if self.composites != before.composites {
            let at = |v: Option<&str>| v.unwrap_or("not served").to_owned();
            out.push(format!(
                "scheduling.k8s.io CompositePodGroups: {} (was {})",
                at(self.composites),
                at(before.composites)
            ));
        }
        out
    }
}

/// One round of discovery: what the server serves now, decided as the store decides at start. Errors: the first
/// failed request (other than a 404).
pub async fn probe(client: &Client) -> Result<ServedApis, kube::Error> {
    use crate::upstream::{UPSTREAM_COMPOSITE_ALPHA_GROUP_VERSION, UPSTREAM_GROUP_VERSION};
    let dra = crate::dra::discover(client).await?;
    let pod_groups = discover(client, UPSTREAM_GROUP_VERSION, &["podgroups"]).await?;
    let composites = if !pod_groups {
        None
    } else if discover(client, UPSTREAM_GROUP_VERSION, &["compositepodgroups"]).await? {
        Some(UPSTREAM_GROUP_VERSION)
    } else if discover(
        client,
        UPSTREAM_COMPOSITE_ALPHA_GROUP_VERSION,
        &["compositepodgroups"],
    )
    .await?
    {
        Some(UPSTREAM_COMPOSITE_ALPHA_GROUP_VERSION)
    } else {
        None
    };
    Ok(ServedApis {
        dra,
        pod_groups,
        composites,
    })
}

/// Repeats [`probe`] every `every` until it finds other APIs than `decided`, and returns what it found. A round
/// that fails is skipped (logged at debug): an API server that does not answer has not changed what it serves.
pub async fn until_changed(client: &Client, decided: ServedApis, every: Duration) -> ServedApis {
    loop {
        tokio::time::sleep(every).await;
        match probe(client).await {
            Ok(now) if now != decided => return now,
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "discovery round failed; the next one is in {every:?}"),
        }
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
