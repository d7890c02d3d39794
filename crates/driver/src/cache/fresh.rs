//! The fresh read of bound pods on gaining leadership: the caches may lag behind binds the previous leader made
//! just before it lost the Lease (or that this replica made before a pause).

use std::time::{Duration, Instant};

use phalanx_scheduler::PodKey;

use super::Cache;

impl Cache {
    /// A quorum read (LIST, no resourceVersion) of every bound pod; a pod the watch does not show bound yet is
    /// assumed on its node, so the first cycles count it. The watch confirms (and ends) those assumptions as usual.
    /// Bounded by `timeout` per page; on failure the caches are used as they are.
    ///
    /// A pod the LIST shows may be deleted before its page is handled (a namespace being deleted as a leader takes
    /// over): the watch has then shown its last event, and an assumption would keep its room for good. The store
    /// records the watch's deletions from before the LIST is sent and refuses those pods (issue 35).
    pub(crate) async fn read_bound_pods_fresh(&mut self, client: &kube::Client, timeout: Duration) {
        let listed = self.store.begin_listed_assumptions();
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(client.clone());
        let mut lp = kube::api::ListParams::default()
            .fields("spec.nodeName!=")
            .limit(500);
        let started = Instant::now();
        let (mut added, mut deleted) = (0usize, 0usize);
        loop {
            let page = match tokio::time::timeout(timeout, api.list(&lp)).await {
                Ok(Ok(page)) => page,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "fresh read of bound pods failed; using the caches");
                    return;
                }
                Err(_) => {
                    tracing::warn!("fresh read of bound pods timed out; using the caches");
                    return;
                }
            };
            for p in page.items {
                let (Some(key), Some(node)) =
                    (PodKey::of(&p), phalanx_store::pod_node(&p).map(str::to_owned))
                else {
                    continue;
                };
                let cached_bound = self.store.pod(&key).is_some_and(|c| c.node_name().is_some());
                if !cached_bound
                    && !phalanx_scheduler::is_terminal(&p)
                    && self.store.assumed_node(&key).is_none()
                {
                    if listed.assume(std::sync::Arc::new(phalanx_store::PodRecord::from_pod(&p)), &node) {
                        self.store.finish_binding(&key);
                        added += 1;
                    } else {
                        deleted += 1;
                    }
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => lp = lp.continue_token(&c),
                None => break,
            }
        }
        drop(listed);
        tracing::info!(assumed = added, deleted_since = deleted, took = ?started.elapsed(), "read bound pods fresh after gaining leadership");
        self.snapshots.invalidate();
    }
}
