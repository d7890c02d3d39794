//! **No write without the lease.** This is the one place that states the rule; the layers below implement it, each
//! closing a window the one before leaves open. A replica sends a POST, PUT, PATCH or DELETE (other than to its own
//! Lease) only while it holds the Lease and its fencing deadline has not passed.
//!
//! | Layer | Where | Window it closes |
//! |---|---|---|
//! | Lease election, fail-stop | [`crate::leader`], [`crate::lease_precondition`] | two holders at once: Lease writes carry the `resourceVersion` precondition, and a holder that loses the Lease exits |
//! | Deadline | [`phalanx_store::Leader`] | a holder paused past its term still reads `true`: leadership ends at `renewTime` + the renew deadline unless renewed |
//! | Guard | every writer (`Binder`, `Evictor`, `StatusWriter`, the controllers' status writes) | asks [`Leader::is_leader`] at the moment it sends, after any permit wait |
//! | Request fence | this module | a request queued in the client (kube's `Buffer`, its retries) after the guard passed |
//! | Socket fence | [`crate::fenced_client`] | bytes already handed to a connection when the process was paused |
//!
//! Both fences judge by one [`Standing`], computed here: before election starts (`Unset`) and while `Leading`
//! everything passes; a `Following` replica (never led, or not yet) sends no write, and its reads and watches pass;
//! a replica that `Lost` the lead sends nothing at all: it is exiting (fail-stop), and at the socket a write cannot
//! be told from a read. The request fence refuses by method; the socket fence can only refuse whole connections, so
//! it refuses in `Lost` alone, which is enough because a `Following` replica's writes never reach a socket.
//!
//! Why the request fence: every writer already asks [`Leader::is_leader`] before it sends. That check and the socket
//! are apart by the client's queue (kube's `Buffer`, the connection pool): a replica stopped (SIGSTOP, a VM pause)
//! right after the check resumes with requests queued there, and they go out although another replica leads by then
//! (the chaos suite's leader-pause fault saw nine such PodGroup status patches). So do kube's retries of a request
//! the API server answered 429, 503 or 504: they wait out a backoff and go again. This layer sits inside kube's
//! `Buffer` and inside the retry layer (`crate::operator::fenced_client` moves kube's retry policy outside it), so it
//! judges a queued request when it leaves the queue, and every retry again. What it cannot see is a request already
//! inside the connection, which the socket fence covers; kube-scheduler has neither fence
//! (`cmd/kube-scheduler/app/server.go` only stops on `OnStoppedLeading`).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use http::{Method, Request};
use phalanx_store::Leader;
use tower::{BoxError, Layer, Service};

/// Where this replica stands, as both fences judge it (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Leader election has not started: nothing but the Lease is written before the components start.
    Unset,
    /// Holds the Lease within its deadline.
    Leading,
    /// Does not lead and never has (a warm standby).
    Following,
    /// Led and leads no more: the process is exiting.
    Lost,
}

/// Where the leadership is set once leader election has started, and whether this replica has led. Cheap to clone;
/// the clones share their state.
#[derive(Clone, Debug, Default)]
pub struct WriteFence {
    leader: Arc<OnceLock<Leader>>,
    led: Arc<AtomicBool>,
}

impl WriteFence {
    /// Sets the leadership every later write is judged by (the first call wins).
    pub fn set(&self, leader: Leader) {
        let _ = self.leader.set(leader);
    }

    /// This replica's standing now.
    pub fn standing(&self) -> Standing {
        let Some(l) = self.leader.get() else {
            return Standing::Unset;
        };
        if l.is_leader() {
            self.led.store(true, Ordering::Relaxed);
            return Standing::Leading;
        }
        if self.led.load(Ordering::Relaxed) {
            Standing::Lost
        } else {
            Standing::Following
        }
    }

    fn allows(&self, method: &Method, path: &str) -> bool {
        if is_lease(path) {
            return true;
        }
        let write = matches!(
            *method,
            Method::POST | Method::PUT | Method::PATCH | Method::DELETE
        );
        match self.standing() {
            Standing::Unset | Standing::Leading => true,
            Standing::Following => !write,
            Standing::Lost => false,
        }
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
        assert!(
            !fence.allows(&Method::GET, pod_status),
            "a lost leader reads nothing either"
        );
        assert!(fence.allows(
            &Method::PATCH,
            "/apis/coordination.k8s.io/v1/namespaces/a/leases/phalanx"
        ));
    }

    /// The request fence and the socket fence judge by the same standing: a standby reads but never writes, and a
    /// replica that lost the lead sends nothing either of them could stop.
    #[test]
    fn both_fences_share_one_standing() {
        let fence = WriteFence::default();
        let socket = fence.socket();
        let (tx, rx) = watch::channel(false);
        fence.set(Leader::from(rx));
        let pods = "/api/v1/namespaces/a/pods";
        assert_eq!(fence.standing(), Standing::Following);
        assert!(!fence.allows(&Method::POST, pods) && fence.allows(&Method::GET, pods));
        assert!(socket.open(), "a standby's watches stay open");
        tx.send(true).expect("receiver alive");
        assert_eq!(socket.standing(), Standing::Leading);
        tx.send(false).expect("receiver alive");
        // Observed first by either fence, the loss is the same for both.
        assert!(!socket.open());
        assert_eq!(fence.standing(), Standing::Lost);
        assert!(!fence.allows(&Method::GET, pods) && !fence.allows(&Method::POST, pods));
    }
}
