//! The optional APIs the store watches (DRA's `resource.k8s.io/v1`, upstream's `scheduling.k8s.io` PodGroups and
//! CompositePodGroups), as one round of discovery finds them ([`probe`]) and as the store decided when it started
//! (`Store::served_apis`). The watches are chosen once; [`until_changed`] repeats the round and tells when the
//! server's answer is no longer the store's, which happens only when the API servers restart with other flags
//! (the process then exits, `phalanx` `operator.rs`, so that its restart watches what is served now).

use std::time::Duration;

use kube::Client;

use crate::discovery::discover;

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
