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

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use kube::client::Body;
use serde_json::Value;

/// The last `resourceVersion` seen of one Lease, shared by the wrapper's requests.
#[derive(Debug, Default)]
struct Seen {
    rv: Mutex<Option<String>>,
}

impl Seen {
    fn get(&self) -> Option<String> {
        self.rv.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, rv: Option<String>) {
        *self.rv.lock().unwrap_or_else(|p| p.into_inner()) = rv;
    }
}

/// A `kube::Client` whose patches of Lease `namespace/name` carry the last `resourceVersion` it saw of it.
///
/// Every other request passes through unchanged. A 404 forgets the version (a Lease created again starts afresh),
/// and a patch sent before any read goes without a precondition, as it would without this wrapper.
pub fn client(inner: kube::Client, namespace: &str, name: &str) -> kube::Client {
    let default_ns = inner.default_namespace().to_owned();
    let service = LeaseRvService {
        inner,
        path: format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"),
        seen: Arc::new(Seen::default()),
    };
    kube::Client::new(service, default_ns)
}

#[derive(Clone)]
struct LeaseRvService {
    inner: kube::Client,
    path: String,
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
            if parts.method == Method::PATCH
                && let Some(rv) = this.seen.get()
                && let Some(with_rv) = with_resource_version(&bytes, &rv)
            {
                bytes = with_rv.into();
            }
            let res = this
                .inner
                .send(Request::from_parts(parts, Body::from(bytes)))
                .await?;
            let (parts, body) = res.into_parts();
            let bytes = body.collect_bytes().await?;
            if parts.status.is_success() {
                if let Some(rv) = resource_version(&bytes) {
                    this.seen.set(Some(rv));
                }
            } else if parts.status == http::StatusCode::NOT_FOUND {
                this.seen.set(None);
            }
            Ok(Response::from_parts(parts, Body::from(bytes)))
        })
    }
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

/// `metadata.resourceVersion` of a JSON object, if any.
fn resource_version(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.get("metadata")?
        .get("resourceVersion")?
        .as_str()
        .map(str::to_owned)
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
    fn version_is_read_from_an_object() {
        assert_eq!(
            resource_version(br#"{"metadata":{"resourceVersion":"99"}}"#).as_deref(),
            Some("99")
        );
        assert_eq!(resource_version(br#"{"metadata":{}}"#), None);
        assert_eq!(resource_version(b"garbage"), None);
    }
}
