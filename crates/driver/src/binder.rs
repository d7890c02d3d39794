//! Binding pods to nodes through `pods/binding`, with bounded concurrency and a per-call timeout.
//!
//! Mirrors kube-scheduler's DefaultBinder (`pkg/scheduler/framework/plugins/defaultbinder`) and its API dispatcher
//! (`pkg/scheduler/backend/api_calls/pod_binding.go`): the Binding carries `metadata.uid` so a pod recreated under the
//! same name is never bound by mistake. kube-rs has no client-side rate limiter, so a semaphore bounds the number of
//! binds in flight, and every call has a timeout because kube's default retry policy can replay a POST for minutes
//! (`kube::client::retry`, off through `scheduler_client`). A 409 that names the node we chose means an earlier
//! attempt (or a replay) already bound the pod there and counts as success.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};
use phalanx_store::{Leader, PodRecord};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What happened to one bind call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindOutcome {
    /// The API server accepted the Binding.
    Bound,
    /// 409: the pod is already bound to the node we chose (an earlier or replayed call succeeded). Success.
    AlreadyBound,
    /// 409: the pod is bound to another node, or its UID changed. Not our placement.
    Conflict(String),
    /// 404: the pod is gone.
    NotFound,
    /// Any other error, including a timeout. The message is for events and logs.
    Failed(String),
}

impl BindOutcome {
    /// True for [`BindOutcome::Bound`] and [`BindOutcome::AlreadyBound`].
    pub fn is_success(&self) -> bool {
        matches!(self, BindOutcome::Bound | BindOutcome::AlreadyBound)
    }
}

/// One of the binder's `concurrency` slots; dropping it frees the slot.
#[derive(Debug)]
pub struct BindPermit {
    _slot: OwnedSemaphorePermit,
}

/// Issues `pods/binding` calls with at most `concurrency` in flight.
#[derive(Clone)]
pub struct Binder {
    client: Client,
    permits: Arc<Semaphore>,
    timeout: Duration,
    leader: Leader,
}

impl Binder {
    /// A binder over `client` with `concurrency` parallel calls (minimum 1) and a per-call `timeout`; it sends only
    /// while `leader` holds.
    pub fn new(client: Client, concurrency: usize, timeout: Duration, leader: Leader) -> Self {
        Self {
            client,
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            timeout,
            leader,
        }
    }

    /// A permit for one bind call, if fewer than `concurrency` are in flight. The driver starts a bind task only
    /// with a permit in hand, so binds waiting for one are queue entries of a few bytes, not parked tasks.
    pub fn try_permit(&self) -> Option<BindPermit> {
        self.permits
            .clone()
            .try_acquire_owned()
            .ok()
            .map(|p| BindPermit { _slot: p })
    }

    /// Binds `pod` to `node` under `permit` (from [`Binder::try_permit`]), released when the call returns. The
    /// timeout covers the API call.
    pub async fn bind_with(&self, permit: BindPermit, pod: &PodRecord, node: &str) -> BindOutcome {
        let _permit = permit;
        let (ns, name) = (pod.namespace(), pod.name());
        let uid = Some(pod.uid()).filter(|u| !u.is_empty());
        // Leadership is checked here, after the wait for a permit, at the moment the call is sent: a replica that
        // was paused or lost the Lease while queued must not bind beside the new leader.
        if !self.leader.is_leader() {
            return BindOutcome::Failed("not the leader: the Lease is not confirmed".into());
        }
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(ns.to_owned()),
                uid: uid.map(str::to_owned),
                ..Default::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.to_owned()),
                ..Default::default()
            },
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let pp = PostParams::default();
        let call = api.create_subresource::<_, serde_json::Value>("binding", name, &pp, &binding);
        match tokio::time::timeout(self.timeout, call).await {
            // The call may have reached the API server: read the pod before calling it a failure.
            Err(_) => self.after_timeout(&api, name, uid, node).await,
            Ok(Ok(_)) => BindOutcome::Bound,
            Ok(Err(kube::Error::Api(s))) if s.is_conflict() => classify_conflict(&s.message, node),
            Ok(Err(kube::Error::Api(s))) if s.is_not_found() => BindOutcome::NotFound,
            Ok(Err(e)) => BindOutcome::Failed(e.to_string()),
        }
    }
}

impl Binder {
    /// What a timed-out bind did: the pod bound to `node` is a success, bound elsewhere (or recreated) a conflict,
    /// still unbound (or unreadable) a failure.
    async fn after_timeout(&self, api: &Api<Pod>, name: &str, uid: Option<&str>, node: &str) -> BindOutcome {
        let timed_out = || BindOutcome::Failed(format!("binding timed out after {:?}", self.timeout));
        match tokio::time::timeout(self.timeout, api.get_opt(name)).await {
            Ok(Ok(None)) => BindOutcome::NotFound,
            Ok(Ok(Some(p))) if p.metadata.uid.as_deref() != uid => {
                BindOutcome::Conflict(format!("pod {name} was recreated while binding"))
            }
            Ok(Ok(Some(p))) => match p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                Some(n) if n == node => BindOutcome::AlreadyBound,
                Some(n) if !n.is_empty() => {
                    BindOutcome::Conflict(format!("pod {name} is bound to node {n:?}"))
                }
                _ => timed_out(),
            },
            _ => timed_out(),
        }
    }
}

/// Classifies a 409 message. The apiserver says `pod p is already assigned to node "n"` when the pod is bound
/// (`pkg/registry/core/pod/storage/storage.go` `assignPod`); only that text with our node counts as success.
pub fn classify_conflict(message: &str, node: &str) -> BindOutcome {
    match assigned_node(message) {
        Some(n) if n == node => BindOutcome::AlreadyBound,
        _ => BindOutcome::Conflict(message.to_owned()),
    }
}

fn assigned_node(message: &str) -> Option<&str> {
    let rest = message.split("already assigned to node \"").nth(1)?;
    rest.split('"').next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflict_same_node_is_success() {
        let m =
            r#"Operation cannot be fulfilled on pods/binding "p1": pod p1 is already assigned to node "n1""#;
        assert_eq!(classify_conflict(m, "n1"), BindOutcome::AlreadyBound);
        assert!(matches!(classify_conflict(m, "n2"), BindOutcome::Conflict(_)));
        let uid = "Precondition failed: UID in precondition: a, UID in object meta: b";
        assert!(matches!(classify_conflict(uid, "n1"), BindOutcome::Conflict(_)));
    }
}
