//! Optimistic concurrency for the Lease writes of kube-lease-manager.
//!
//! kube-lease-manager 0.13 renews, clears and takes a Lease with patches that carry no precondition. Two of its
//! writes can therefore land on a Lease that changed after it last read it: a holder resumed after a pause (or slowed
//! by an unreachable etcd) renews a Lease that a standby has just cleared, and a standby clears an expired Lease that
//! its holder renewed a moment before. client-go's leader election cannot do either: it writes the Lease with
//! `Update`, which carries the `resourceVersion` it read (`staging/src/k8s.io/client-go/tools/leaderelection/
//! resourcelock/leaselock.go`), and a stale write fails with 409 Conflict.
//!
//! The same guarantee is added here below the library, as a client wrapper: it remembers the `resourceVersion` of
//! the one Lease from every response that carries it, and puts it into the body of every patch of that Lease as
//! `metadata.resourceVersion`. The API server treats a `resourceVersion` in a patch (merge, strategic or apply) as a
//! precondition (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go`), so a write based on a stale read
//! gets 409, which kube-lease-manager treats as a lost race (`LockConflict`: back off, read again).
//!
//! It also keeps a holder from renewing a term that has run out. kube-lease-manager renews whenever it believes it
//! holds the Lease, even when the term it holds ended while the API server was unreachable: after an outage it
//! renews the expired term as soon as the server answers (the chaos suite's apiserver-kill saw the renewal land
//! 2.6 s after the term ended). client-go's leader stops instead once renewDeadline has passed since its last
//! renewal (`staging/src/k8s.io/client-go/tools/leaderelection/leaderelection.go`,
//! `renew`). So a renewal (a patch that sets `spec.renewTime` but names no holder) is
//! refused here, without a request, once less than `margin` is left of the last term this process wrote for
//! itself; the refusal is a 409 Conflict, which the library treats as a lost race. The leader guard
//! ([`crate::leader`]) then sees the expired Lease and stops the process. A process that has not yet written a
//! term of its own (a restart under the same identity) renews as before: that write is its acquisition.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::client::Body;
use serde_json::Value;

/// What the wrapper knows of the one Lease: its last `resourceVersion`, and the end of the last term this process
/// wrote for itself.
#[derive(Debug, Default)]
struct Known {
    rv: Option<String>,
    own_term_end: Option<Timestamp>,
}

#[derive(Debug, Default)]
struct Seen {
    known: Mutex<Known>,
}

impl Seen {
    fn with<R>(&self, f: impl FnOnce(&mut Known) -> R) -> R {
        f(&mut self.known.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A `kube::Client` for the Lease writes of holder `identity`: its patches of Lease `namespace/name` carry the last
/// `resourceVersion` it saw of it, and a renewal is refused (409) once less than `margin` is left of the last term
/// it wrote for itself.
///
/// Every other request passes through unchanged. A 404 forgets what was known (a Lease created again starts
/// afresh), and a patch sent before any read goes without a precondition, as it would without this wrapper.
pub fn client(
    inner: kube::Client,
    namespace: &str,
    name: &str,
    identity: &str,
    margin: Duration,
) -> kube::Client {
    let default_ns = inner.default_namespace().to_owned();
    let service = LeaseRvService {
        inner,
        path: format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"),
        identity: identity.to_owned(),
        margin: SignedDuration::try_from(margin).unwrap_or(SignedDuration::MAX),
        seen: Arc::new(Seen::default()),
    };
    kube::Client::new(service, default_ns)
}

#[derive(Clone)]
struct LeaseRvService {
    inner: kube::Client,
    path: String,
    identity: String,
    margin: SignedDuration,
    seen: Arc<Seen>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl tower::Service<Request<Body>> for LeaseRvService {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            if req.uri().path() != this.path {
                return this.inner.send(req).await;
            }
            let (parts, body) = req.into_parts();
            let mut bytes = body.collect_bytes().await?;
            let is_patch = parts.method == Method::PATCH;
            if is_patch {
                let (rv, term_end) = this.seen.with(|k| (k.rv.clone(), k.own_term_end));
                if is_renewal(&bytes)
                    && let Some(end) = term_end
                    && Timestamp::now()
                        .saturating_add(this.margin)
                        .is_ok_and(|t| t >= end)
                {
                    tracing::warn!(term_end = %end, "not renewing the Lease: the term this replica held ends within the renewal margin");
                    return Ok(conflict(&format!(
                        "the term held by {} ended at {end}; a renewal now would extend a term another replica may already be taking",
                        this.identity
                    )));
                }
                if let Some(rv) = rv
                    && let Some(with_rv) = with_resource_version(&bytes, &rv)
                {
                    bytes = with_rv.into();
                }
            }
            let res = this
                .inner
                .send(Request::from_parts(parts, Body::from(bytes)))
                .await?;
            let (parts, body) = res.into_parts();
            let bytes = body.collect_bytes().await?;
            if parts.status.is_success() {
                let lease = serde_json::from_slice::<Lease>(&bytes).ok();
                this.seen.with(|k| {
                    if let Some(rv) = lease.as_ref().and_then(|l| l.metadata.resource_version.clone()) {
                        k.rv = Some(rv);
                    }
                    match lease.as_ref().map(|l| term_of(l, &this.identity)) {
                        // Only this process's own writes start a term it may renew.
                        Some(Term::Own(end)) if is_patch => k.own_term_end = Some(end),
                        Some(Term::Other) => k.own_term_end = None,
                        _ => {}
                    }
                });
            } else if parts.status == StatusCode::NOT_FOUND {
                this.seen.with(|k| *k = Known::default());
            }
            Ok(Response::from_parts(parts, Body::from(bytes)))
        })
    }
}

/// Whose term a Lease shows.
#[derive(Debug, PartialEq)]
enum Term {
    /// Held by this identity until the given instant (renewTime + leaseDurationSeconds).
    Own(Timestamp),
    /// Held by another identity, or by none.
    Other,
    /// Ours but without renewTime or duration (no term to judge).
    Unknown,
}

fn term_of(lease: &Lease, identity: &str) -> Term {
    let Some(spec) = lease.spec.as_ref() else {
        return Term::Other;
    };
    if spec.holder_identity.as_deref() != Some(identity) {
        return Term::Other;
    }
    match (spec.renew_time.as_ref(), spec.lease_duration_seconds) {
        (Some(renewed), Some(secs)) => renewed
            .0
            .checked_add(SignedDuration::from_secs(i64::from(secs)))
            .map_or(Term::Unknown, Term::Own),
        _ => Term::Unknown,
    }
}

/// A renewal: a patch that sets `spec.renewTime` and keeps the holder (names none). An acquisition names the
/// holder; a release sets `renewTime` to null; the transitions counter has no `renewTime`.
fn is_renewal(body: &[u8]) -> bool {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    let spec = &v["spec"];
    spec.get("renewTime").is_some_and(|t| !t.is_null()) && spec.get("holderIdentity").is_none()
}

/// A 409 Conflict response with a `Status` body, as the API server sends for a stale write.
fn conflict(message: &str) -> Response<Body> {
    let status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": "Conflict",
        "code": 409,
    });
    let mut res = Response::new(Body::from(status.to_string().into_bytes()));
    *res.status_mut() = StatusCode::CONFLICT;
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    res
}

/// The patch body `body` (a JSON object) with `metadata.resourceVersion` set to `rv`; `None` when the body is not
/// a JSON object (it is then sent as it is).
fn with_resource_version(body: &[u8], rv: &str) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(body).ok()?;
    let obj = v.as_object_mut()?;
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    meta.as_object_mut()?
        .insert("resourceVersion".into(), Value::String(rv.to_owned()));
    serde_json::to_vec(&v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_body_gets_the_version_and_keeps_its_fields() {
        let body = br#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","spec":{"renewTime":"x"}}"#;
        let out = with_resource_version(body, "42").expect("json object");
        let v: Value = serde_json::from_slice(&out).expect("json");
        assert_eq!(v["metadata"]["resourceVersion"], "42");
        assert_eq!(v["spec"]["renewTime"], "x");
        let with_meta = br#"{"metadata":{"name":"l","resourceVersion":"1"}}"#;
        let v: Value =
            serde_json::from_slice(&with_resource_version(with_meta, "7").expect("object")).expect("json");
        assert_eq!(v["metadata"]["resourceVersion"], "7");
        assert_eq!(v["metadata"]["name"], "l");
        assert!(with_resource_version(b"[1]", "7").is_none(), "not an object");
        assert!(with_resource_version(b"not json", "7").is_none());
    }

    #[test]
    fn only_a_patch_that_keeps_the_holder_is_a_renewal() {
        assert!(is_renewal(
            br#"{"spec":{"renewTime":"2026-01-01T00:00:00.000000Z","leaseDurationSeconds":6}}"#
        ));
        assert!(!is_renewal(
            br#"{"spec":{"renewTime":"2026-01-01T00:00:00.000000Z","holderIdentity":"me"}}"#
        ));
        assert!(
            !is_renewal(br#"{"spec":{"renewTime":null,"holderIdentity":null}}"#),
            "a release"
        );
        assert!(!is_renewal(br#"{"spec":{"leaseTransitions":3}}"#));
        assert!(!is_renewal(b"not json"));
    }

    #[test]
    fn term_is_renew_time_plus_duration_for_the_own_identity_only() {
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "spec": {"holderIdentity": "me", "renewTime": "2026-01-01T00:00:00.000000Z", "leaseDurationSeconds": 6}
        }))
        .expect("lease");
        let end: Timestamp = "2026-01-01T00:00:06Z".parse().expect("timestamp");
        assert_eq!(term_of(&lease, "me"), Term::Own(end));
        assert_eq!(term_of(&lease, "you"), Term::Other);
        assert_eq!(term_of(&Lease::default(), "me"), Term::Other);
        let huge: Lease = serde_json::from_value(serde_json::json!({
            "spec": {"holderIdentity": "me", "renewTime": "9999-12-30T00:00:00.000000Z", "leaseDurationSeconds": i32::MAX}
        }))
        .expect("lease");
        assert_eq!(
            term_of(&huge, "me"),
            Term::Unknown,
            "no overflow past the last timestamp"
        );
    }

    #[test]
    fn conflict_is_a_status_the_client_reads_as_409() {
        let res = conflict("the term ended");
        assert_eq!(res.status(), StatusCode::CONFLICT);
    }
}
