//! The last check before a write leaves the process: every POST, PUT, PATCH and DELETE except the Lease's own is
//! refused unless this replica is the leader at the moment the client stack hands it to the connection.
//!
//! Every writer already asks [`phalanx_store::Leader::is_leader`] before it sends. That check and the socket are
//! apart by the client's queue (kube's `Buffer`, the connection pool): a replica stopped (SIGSTOP, a VM pause) right
//! after the check resumes with requests queued there, and they go out although another replica leads by then (the
//! chaos suite's leader-pause fault saw nine such PodGroup status patches). So do kube's retries of a request the
//! API server answered 429, 503 or 504: they wait out a backoff and go again. This layer sits inside kube's
//! `Buffer` and inside the retry layer (`crate::operator::fenced_client` moves kube's retry policy outside it), so it
//! judges a queued request when it leaves the queue, and every retry again. What it cannot see is a request already
//! inside the connection; kube-scheduler has the same window (`cmd/kube-scheduler/app/server.go` only stops on
//! `OnStoppedLeading`), and the deadline fencing of [`phalanx_store::Leader`] keeps it short.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use http::{Method, Request};
use phalanx_store::Leader;
use tower::{BoxError, Layer, Service};

/// Where the leadership is set once leader election has started; until then writes pass (nothing but the Lease is
/// written before the components start). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct WriteFence {
    leader: Arc<OnceLock<Leader>>,
}

impl WriteFence {
    /// Sets the leadership every later write is judged by (the first call wins).
    pub fn set(&self, leader: Leader) {
        let _ = self.leader.set(leader);
    }

    /// The connection-level fence that shares this leadership (see [`crate::fenced_client`]).
    pub fn socket(&self) -> crate::fenced_client::SocketFence {
        crate::fenced_client::SocketFence::new(self.leader.clone())
    }

    fn allows(&self, method: &Method, path: &str) -> bool {
        let write = matches!(
            *method,
            Method::POST | Method::PUT | Method::PATCH | Method::DELETE
        );
        if !write || is_lease(path) {
            return true;
        }
        self.leader.get().is_none_or(Leader::is_leader)
    }
}

/// Whether `path` is a `coordination.k8s.io` Lease (the elector's own writes, which a follower must make).
fn is_lease(path: &str) -> bool {
    path.starts_with("/apis/coordination.k8s.io/") && path.contains("/leases")
}

/// The refusal of a write by a replica that is not the leader.
#[derive(Debug, thiserror::Error)]
#[error("{method} {path} not sent: this replica is not the leader (write fence)")]
pub struct Fenced {
    method: Method,
    path: String,
}

impl<S> Layer<S> for WriteFence {
    type Service = FencedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FencedService {
            inner,
            fence: self.clone(),
        }
    }
}

/// The service of [`WriteFence`].
#[derive(Clone, Debug)]
pub struct FencedService<S> {
    inner: S,
    fence: WriteFence,
}

impl<S, B> Service<Request<B>> for FencedService<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if !self.fence.allows(req.method(), req.uri().path()) {
            let err = Fenced {
                method: req.method().clone(),
                path: req.uri().path().to_owned(),
            };
            return Box::pin(async move { Err(Box::new(err) as BoxError) });
        }
        let fut = self.inner.call(req);
        Box::pin(async move { fut.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::watch;

    #[test]
    fn writes_pass_only_while_leading_and_lease_writes_always() {
        let fence = WriteFence::default();
        let pod_status = "/api/v1/namespaces/a/pods/p/status";
        assert!(fence.allows(&Method::PATCH, pod_status), "before election starts");
        let (tx, rx) = watch::channel(true);
        fence.set(Leader::from(rx));
        assert!(fence.allows(&Method::PATCH, pod_status));
        tx.send(false).expect("receiver alive");
        assert!(!fence.allows(&Method::PATCH, pod_status));
        assert!(!fence.allows(&Method::POST, "/api/v1/namespaces/a/pods/p/binding"));
        assert!(!fence.allows(&Method::DELETE, "/api/v1/namespaces/a/pods/p"));
        assert!(fence.allows(&Method::GET, pod_status), "reads pass");
        assert!(fence.allows(
            &Method::PATCH,
            "/apis/coordination.k8s.io/v1/namespaces/a/leases/phalanx"
        ));
    }
}
