//! The assume/forget overlay: pods the scheduler decided to bind but the watch has not yet shown bound.
//!
//! Follows kube-scheduler's cache (`pkg/scheduler/backend/cache/cache.go`: `AssumePod`, `FinishBinding`,
//! `ForgetPod`): an assumed pod counts on its node from the moment the decision is made until the watch shows the
//! pod with a `nodeName`, shows it deleted or recreated (another UID), or a relist no longer lists it. It never
//! expires by time: a watch that lags after a successful bind would otherwise hand the same capacity out twice.
//! Upstream made the same change (k/k#106361: `durationToExpireAssumedPod` 0, "never expire"). A failed bind
//! forgets the pod at once.
//!
//! Because nothing expires, an assumption the watch can never end must not be made. A pod read bound by a LIST
//! ([`AssumeCache::assume_listed`], the new leader's fresh read) may have been deleted after the LIST was served
//! and before its page is handled: the watch has then delivered its last event already, and an assumption made now
//! would hold its room for good (issue 35: four such pods, deleted with their namespace, kept half of four nodes
//! and parked four preemptors whose victims they became; nothing was evicted, so no deletion ever woke them). So
//! while such a read is under way the cache records what the watch deletes, and refuses those pods.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use tokio::time::Instant;

use phalanx_scheduler::model::PodKey;

use crate::record::PodRecord;

/// One assumed pod: the pod object as the scheduler saw it and the node it was assumed on.
#[derive(Clone, Debug)]
pub struct AssumedPod {
    /// The pod as it was when assumed (without `nodeName`).
    pub pod: Arc<PodRecord>,
    /// Node the pod is being bound to.
    pub node: String,
    /// UID of the pod; a recreated pod with the same name does not confirm this assumption.
    pub uid: String,
    /// When the bind call returned successfully (`None` while it is in flight); for metrics and logs only.
    pub bound_at: Option<Instant>,
}

/// Map of assumed pods. Not synchronised; the [`crate::Store`] wraps it in a mutex.
#[derive(Debug, Default)]
pub struct AssumeCache {
    pods: HashMap<PodKey, AssumedPod>,
    /// Reads of bound pods under way ([`AssumeCache::begin_listed`]); deletions are recorded while it is non-zero.
    listing: usize,
    /// UIDs of the pods the watch deleted since the oldest read under way began.
    deleted_uids: HashSet<String>,
    /// Pods a relist no longer showed in that time (the watch tells their keys only).
    relisted_away: HashSet<PodKey>,
}

impl AssumeCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `pod` will be bound to `node`. Replaces an earlier assumption of the same pod.
    pub fn assume(&mut self, key: PodKey, pod: Arc<PodRecord>, node: String) {
        let uid = pod.uid().to_owned();
        self.pods.insert(
            key,
            AssumedPod {
                pod,
                node,
                uid,
                bound_at: None,
            },
        );
    }

    /// The bind call for `key` returned successfully at `now`. The assumption stays until the watch confirms it.
    pub fn finish_binding(&mut self, key: &PodKey, now: Instant) {
        if let Some(a) = self.pods.get_mut(key) {
            a.bound_at = Some(now);
        }
    }

    /// Drops the assumption for `key` (bind failed, or the decision was abandoned). Returns whether one existed.
    pub fn forget(&mut self, key: &PodKey) -> bool {
        self.pods.remove(key).is_some()
    }

    /// Applies a watched pod: a pod with a `nodeName`, or a different UID than assumed, ends the assumption.
    pub fn observe(&mut self, key: &PodKey, pod: &PodRecord) {
        let bound = pod.node_name().is_some();
        let same_uid = self.pods.get(key).is_some_and(|a| a.uid == pod.uid());
        if bound || !same_uid {
            self.pods.remove(key);
        }
    }

    /// The watched pod was deleted (`uid` as the watch showed it; empty when unknown): its assumption (if any)
    /// ends, and a read of bound pods under way will not assume it again.
    pub fn observe_delete(&mut self, key: &PodKey, uid: &str) {
        self.pods.remove(key);
        if self.listing > 0 {
            if uid.is_empty() {
                self.relisted_away.insert(key.clone());
            } else {
                self.deleted_uids.insert(uid.to_owned());
            }
        }
    }

    /// A relist no longer shows these pods: they were deleted while the watch was down, and a read of bound pods
    /// under way will not assume them (the relist names no UID, so a pod recreated under the name meanwhile waits
    /// for its own watch event to count).
    pub fn observe_relisted_away(&mut self, keys: impl IntoIterator<Item = PodKey>) {
        if self.listing > 0 {
            self.relisted_away.extend(keys);
        }
    }

    /// Whether a read of bound pods is under way (deletions are being recorded).
    pub fn is_listing(&self) -> bool {
        self.listing > 0
    }

    /// A read of bound pods from the API server starts: from now on the pods the watch deletes are recorded, so that
    /// [`AssumeCache::assume_listed`] does not assume a pod the LIST showed but the watch has deleted since. Call
    /// before the LIST is sent, and [`AssumeCache::end_listed`] once its last page is handled.
    pub fn begin_listed(&mut self) {
        self.listing += 1;
    }

    /// A read begun with [`AssumeCache::begin_listed`] ended; the record goes with the last one.
    pub fn end_listed(&mut self) {
        self.listing = self.listing.saturating_sub(1);
        if self.listing == 0 {
            self.deleted_uids.clear();
            self.relisted_away.clear();
        }
    }

    /// Assumes `pod`, read bound to `node` by a LIST, unless the watch deleted it since the read began (see the
    /// module documentation). Returns whether it was assumed.
    pub fn assume_listed(&mut self, key: PodKey, pod: Arc<PodRecord>, node: String) -> bool {
        if self.deleted_uids.contains(pod.uid()) || self.relisted_away.contains(&key) {
            return false;
        }
        self.assume(key, pod, node);
        true
    }

    /// The assumption for `key`, if any.
    pub fn get(&self, key: &PodKey) -> Option<&AssumedPod> {
        self.pods.get(key)
    }

    /// All current assumptions.
    pub fn all(&self) -> Vec<(PodKey, AssumedPod)> {
        self.pods.iter().map(|(k, a)| (k.clone(), a.clone())).collect()
    }

    /// Number of current assumptions.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// True when nothing is assumed.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, PodSpec};
    use kube::api::ObjectMeta;

    fn pod(uid: &str, node: Option<&str>) -> PodRecord {
        PodRecord::from_pod(&Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// A watch that lags after a successful bind must not give the capacity back (k/k#106361): before this
    /// change the assumption expired 30 s after `finish_binding`.
    #[tokio::test(start_paused = true)]
    async fn assumption_outlives_a_lagging_watch() {
        let key = PodKey::new("ns", "p");
        let mut c = AssumeCache::new();
        c.assume(key.clone(), Arc::new(pod("u1", None)), "n1".into());
        c.finish_binding(&key, Instant::now());
        tokio::time::advance(std::time::Duration::from_secs(3600)).await;
        assert_eq!(c.get(&key).map(|a| a.node.as_str()), Some("n1"));
        assert_eq!(c.all().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn confirm_and_forget() {
        let key = PodKey::new("ns", "p");
        let mut c = AssumeCache::new();
        c.assume(key.clone(), Arc::new(pod("u1", None)), "n1".into());
        // An update without nodeName keeps the assumption.
        c.observe(&key, &pod("u1", None));
        assert_eq!(c.get(&key).map(|a| a.node.as_str()), Some("n1"));
        c.finish_binding(&key, Instant::now());
        assert!(c.get(&key).is_some_and(|a| a.bound_at.is_some()));

        c.assume(key.clone(), Arc::new(pod("u1", None)), "n1".into());
        c.observe(&key, &pod("u1", Some("n1")));
        assert!(c.is_empty(), "bound pod confirms the assumption");

        c.assume(key.clone(), Arc::new(pod("u1", None)), "n1".into());
        c.observe(&key, &pod("u2", None));
        assert!(c.is_empty(), "recreated pod drops the stale assumption");

        c.assume(key.clone(), Arc::new(pod("u1", None)), "n1".into());
        assert!(c.forget(&key));
        assert!(!c.forget(&key));
    }
}
