//! The clients of `phalanx run`: the main one, whose connections refuse to send a byte once this replica has lost
//! the leadership it held, and the elector's own, which has no fence.
//!
//! Why the fence reaches down to the socket: every writer checks its fenced leadership before sending, and
//! [`crate::write_fence`] checks again when a request leaves kube's queue, but a request handed to its connection a
//! moment before the process was stopped (SIGSTOP, a VM freeze) still sits in the connection's buffers, and goes
//! out when the process resumes, after another replica took over. The chaos suite's leader-pause fault, which
//! pauses the leader while a gang is half bound, found exactly such binds and status patches. The connector here
//! wraps each connection's stream: once the replica has led and leads no more, a write to the stream fails, so
//! nothing queued in user space reaches the API server. Bytes already in the kernel's send buffer were sent before
//! the pause. kube-scheduler has no such fence (`cmd/kube-scheduler/app/server.go` stops on `OnStoppedLeading`).
//!
//! The stack mirrors kube's default (`kube_client::client::builder`): base URI, authentication, extra headers,
//! connect timeout, retries of 429/503/504 with its `server_retry` policy (outside the fence, so each retry is
//! judged), rustls. Not included: response decompression (not enabled in this build) and kube's tracing spans.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use kube::client::ConfigExt as _;

use crate::write_fence::WriteFence;

/// The main client (request and socket fences, see the module docs) and the elector's client (no fence: a
/// follower, or a leader whose renewal is late, must still read and renew its Lease), built from one config.
///
/// # Errors
/// The config's TLS or authentication settings cannot be used.
pub fn build(config: &kube::Config, fence: &WriteFence) -> anyhow::Result<(kube::Client, kube::Client)> {
    let lease = kube::Client::try_from(config.clone())?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    let https = config.rustls_https_connector_with_connector(http)?;
    let connector = FencedConnector {
        inner: https,
        fence: fence.socket(),
    };
    let hyper =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
    let service = tower::ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(
            kube::client::retry::RetryPolicy::server_retry(),
        ))
        .layer(tower::buffer::BufferLayer::new(1024))
        .layer(fence.clone())
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(hyper);
    Ok((
        kube::Client::new(service, config.default_namespace.clone()),
        lease,
    ))
}

/// What a connection asks before each write: may bytes still leave? It judges by the [`crate::write_fence::Standing`]
/// the request fence uses (see the rule in [`crate::write_fence`]).
#[derive(Clone, Debug, Default)]
pub struct SocketFence {
    fence: WriteFence,
}

impl SocketFence {
    pub(crate) fn new(fence: WriteFence) -> Self {
        Self { fence }
    }

    /// This replica's standing now.
    pub fn standing(&self) -> crate::write_fence::Standing {
        self.fence.standing()
    }

    /// False once this replica led and leads no more; a standby's connections (watches, reads) are never cut, and
    /// its writes never get here (the request fence refuses them).
    pub(crate) fn open(&self) -> bool {
        self.standing() != crate::write_fence::Standing::Lost
    }
}

#[derive(Clone)]
struct FencedConnector<C> {
    inner: C,
    fence: SocketFence,
}

impl<C> tower::Service<http::Uri> for FencedConnector<C>
where
    C: tower::Service<http::Uri>,
    C::Future: Send + 'static,
{
    type Response = FencedStream<C::Response>;
    type Error = C::Error;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Self::Response, C::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let fut = self.inner.call(uri);
        let fence = self.fence.clone();
        Box::pin(async move {
            let inner = fut.await?;
            Ok(FencedStream { inner, fence })
        })
    }
}

/// A connection's stream whose writes fail once the fence is closed.
struct FencedStream<S> {
    inner: S,
    fence: SocketFence,
}

fn fenced() -> io::Error {
    io::Error::other("write fence: this replica is no longer the leader; nothing more is sent")
}

impl<S: Read + Unpin> Read for FencedStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: Write + Unpin> Write for FencedStream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if !self.fence.open() {
            return Poll::Ready(Err(fenced()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if !self.fence.open() {
            return Poll::Ready(Err(fenced()));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.fence.open() {
            return Poll::Ready(Err(fenced()));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: Connection> Connection for FencedStream<S> {
    fn connected(&self) -> Connected {
        self.inner.connected()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use phalanx_store::Leader;
    use tokio::sync::watch;

    #[test]
    fn a_follower_is_never_cut_and_a_lost_leader_is() {
        let writes = WriteFence::default();
        let fence = writes.socket();
        assert!(fence.open(), "before election starts");
        let (tx, rx) = watch::channel(false);
        writes.set(Leader::from(rx));
        assert!(fence.open(), "a follower reads and watches");
        tx.send(true).expect("receiver alive");
        assert!(fence.open(), "the leader writes");
        tx.send(false).expect("receiver alive");
        assert!(!fence.open(), "after losing the lead nothing leaves");
    }
}
