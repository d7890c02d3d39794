//! The clients of `phalanx run`: the main one, whose connections refuse to send a byte once this replica has lost
//! the leadership it held, and the elector's own, which has no fence.
//!
//! Why the fence reaches down to the socket: every writer checks its fenced leadership before sending, and
//! [`crate::write_fence`] checks again when a request leaves kube's queue, but a request handed to its connection a
//! moment before the process was stopped (SIGSTOP, a VM freeze) still sits in the connection's buffers, and goes
//! out when the process resumes, after another replica took over. The chaos suite's leader-pause fault, which
//! pauses the leader while a gang is half bound, found exactly such binds and status patches. The connector here
//! wraps each connection's TCP stream, under TLS: once the replica has led and leads no more, a write to the socket
//! fails, so nothing queued in user space (hyper's buffer, rustls's records) reaches the API server. Bytes already
//! in the kernel's send buffer were sent before the pause. What no client can close is a pause that lands between
//! the fence's check and the `write` system call right after it: those bytes leave on resume. The chaos suite saw
//! that once in ten smoke runs on a machine loaded with two other suites (a status patch, answered 504 as the
//! replica exited), when the fence sat above TLS and the gap included the encryption; only a check by the API
//! server could close it, and Kubernetes has no fencing token for writes. kube-scheduler has no fence at all
//! (`cmd/kube-scheduler/app/server.go` stops on `OnStoppedLeading`).
//!
//! The stack mirrors kube's default (`kube_client::client::builder`): base URI, authentication, extra headers,
//! connect, read and write timeouts (hyper-timeout's `TimeoutConnector`, the config's values), retries of
//! 429/503/504 with its `server_retry` policy (outside the fence, so each retry is judged), rustls. Not included:
//! response decompression (not enabled in this build) and kube's tracing spans.
//!
//! Timeouts, because this client carries every watch and write: an API server or load-balancer failover that
//! drops a connection without a reset leaves a request on it waiting for ever, holding its in-flight place, and a
//! watch on it silent (kube's watcher notices a silent watch stream after its server-side `timeoutSeconds`, 290 s,
//! plus 5 s, but not a watch or list request that never gets its response). So: the connect timeout covers the TLS
//! handshake too; the read timeout ([`DEFAULT_READ_TIMEOUT`], `phalanx run --api-read-timeout`) fails any request
//! whose connection stays silent that long after its last write (`reset_reader_on_write`, so time a connection sat
//! idle in the pool does not count), and is longer than a healthy watch's 290 s so no healthy watch is cut; TCP
//! keepalive ([`TCP_KEEPALIVE`], as client-go's dialer in `k8s.io/client-go/transport/cache.go`) lets the kernel
//! find a dead peer of an idle connection.
//!
//! Added: a bound on the requests in flight ([`in_flight_limit`]). kube's connector speaks HTTP/1.1 only, so each
//! request in flight holds a TCP and TLS connection of its own, and the pool keeps them for 90 s after. When the
//! scheduler started on 1,000 waiting gangs, the reconcilers' first writes, the binds, the condition writes and
//! the events opened 143 connections within a second, and their buffers stayed. client-go sends all of
//! kube-scheduler's requests over one HTTP/2 connection; the bound gets near that without a second protocol.
//! A request waits in kube's queue for a free place; a watch holds its place only until the response headers.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use kube::client::ConfigExt as _;

use crate::write_fence::WriteFence;

/// The main client's default read timeout: 295 s, kube's write timeout (`kube_client::config`) and its watcher's
/// bound on a silent watch (server-side `timeoutSeconds` 290 s plus 5 s, `kube_runtime::watcher`), so a healthy
/// watch, which the API server ends after 290 s, is never cut by it.
pub const DEFAULT_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(295);

/// Idle time before the first TCP keepalive probe, and the time between probes: 30 s, as client-go's dialer
/// (`k8s.io/client-go/transport/cache.go`, `net.Dialer{KeepAlive: 30 * time.Second}`).
pub const TCP_KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(30);

/// The main client (request and socket fences, see the module docs) and the elector's client (no fence: a
/// follower, or a leader whose renewal is late, must still read and renew its Lease), built from one config.
/// Both use the config's `connect_timeout`, `read_timeout` and `write_timeout` (`None`: no bound); the main
/// client counts the read timeout from each request's last write.
///
/// # Errors
/// The config's TLS or authentication settings cannot be used.
pub fn build(
    config: &kube::Config,
    fence: &WriteFence,
    in_flight: usize,
) -> anyhow::Result<(kube::Client, kube::Client)> {
    let lease = kube::Client::try_from(config.clone())?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_keepalive(Some(TCP_KEEPALIVE));
    http.set_keepalive_interval(Some(TCP_KEEPALIVE));
    // The fence wraps the TCP stream, under TLS: its check is the last step before each `write` system call, so a
    // pause between the two is as short as it can be (see the module docs).
    let fenced = FencedConnector {
        inner: http,
        fence: fence.socket(),
    };
    let https = config.rustls_https_connector_with_connector(fenced)?;
    // Around TLS, so that the connect timeout bounds the handshake too (a black hole accepts TCP and then
    // says nothing); kube's default stack wraps its connector the same way.
    let mut timed = hyper_timeout::TimeoutConnector::new(https);
    timed.set_connect_timeout(config.connect_timeout);
    timed.set_read_timeout(config.read_timeout);
    timed.set_write_timeout(config.write_timeout);
    timed.set_reset_reader_on_write(true);
    let hyper =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(timed);
    let service = tower::ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(
            kube::client::retry::RetryPolicy::server_retry(),
        ))
        .layer(tower::buffer::BufferLayer::new(1024))
        .layer(fence.clone())
        .layer(tower::limit::ConcurrencyLimitLayer::new(in_flight.max(1)))
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

/// The main client's bound on requests in flight: the binds and the status writes the scheduler may run at once
/// (`bind_concurrency`, `binder.statusConcurrency`), and 32 more for the reconcilers, events and reads.
pub fn in_flight_limit(bind_concurrency: usize, status_concurrency: usize) -> usize {
    bind_concurrency
        .saturating_add(status_concurrency)
        .saturating_add(32)
}

/// What a connection asks before each write: may bytes still leave? It judges by the [`crate::write_fence::Standing`]
/// the request fence uses (see the rule in [`crate::write_fence`]).
#[derive(Clone, Debug, Default)]
pub struct SocketFence {
    fence: WriteFence,
}

impl WriteFence {
    /// The connection-level fence that shares this standing. Defined here, next to [`SocketFence`], so that the
    /// request fence ([`crate::write_fence`]) does not import the connection layer built on it.
    pub fn socket(&self) -> SocketFence {
        SocketFence { fence: self.clone() }
    }
}

impl SocketFence {
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

    /// At most `in_flight` requests reach the API server at once; the rest wait their turn and all complete. The
    /// server here answers every request after 150 ms on a connection of its own (HTTP/1.1, `Connection: close`)
    /// and records how many it was serving at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_in_flight_are_bounded() {
        use std::io::{Read as _, Write as _};
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};

        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("address");
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (n, m) = (now.clone(), most.clone());
        std::thread::spawn(move || {
            for sock in listener.incoming() {
                let Ok(mut sock) = sock else { return };
                let (n, m) = (n.clone(), m.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let _ = sock.read(&mut buf);
                    let serving = n.fetch_add(1, Ordering::SeqCst) + 1;
                    m.fetch_max(serving, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(150));
                    n.fetch_sub(1, Ordering::SeqCst);
                    let body = r#"{"kind":"Status","apiVersion":"v1","status":"Success"}"#;
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = sock.write_all(reply.as_bytes());
                });
            }
        });
        let config = kube::Config::new(format!("http://{addr}").parse().expect("uri"));
        let (client, _) = build(&config, &WriteFence::default(), 3).expect("client");
        let calls = (0..12).map(|i| {
            let client = client.clone();
            async move {
                let req = http::Request::get(format!("/api/v1/namespaces/ns{i}"))
                    .body(Vec::new())
                    .expect("request");
                client.request_text(req).await
            }
        });
        let results = futures::future::join_all(calls).await;
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        let most = most.load(Ordering::SeqCst);
        assert!(
            (1..=3).contains(&most),
            "{most} requests were served at once, the bound is 3"
        );
    }

    /// A black-holed connection (the server, or a load balancer failing over without a reset, takes the request
    /// and never answers) fails the request within the read timeout, so it neither hangs its caller nor holds an
    /// in-flight place for ever. Without a read timeout this request never returned.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_black_holed_request_fails_within_the_read_timeout() {
        use std::io::Read as _;

        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("address");
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for sock in listener.incoming() {
                let Ok(mut sock) = sock else { return };
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf);
                held.push(sock); // open, silent: no answer, no FIN, no RST
            }
        });
        let mut config = kube::Config::new(format!("http://{addr}").parse().expect("uri"));
        config.read_timeout = Some(std::time::Duration::from_secs(1));
        let (client, _) = build(&config, &WriteFence::default(), 1).expect("client");
        let started = std::time::Instant::now();
        let req = http::Request::get("/api/v1/namespaces/default")
            .body(Vec::new())
            .expect("request");
        let outcome =
            tokio::time::timeout(std::time::Duration::from_secs(20), client.request_text(req)).await;
        let elapsed = started.elapsed();
        match outcome {
            Err(_) => panic!("the request to a silent server was still pending after {elapsed:?}"),
            Ok(Ok(body)) => panic!("a silent server answered {body:?}"),
            Ok(Err(e)) => assert!(
                elapsed < std::time::Duration::from_secs(10),
                "failed only after {elapsed:?}: {e}"
            ),
        }
        // The one in-flight place is free again: a second request gets its own turn and fails the same way.
        let req = http::Request::get("/api/v1/namespaces/default")
            .body(Vec::new())
            .expect("request");
        let second = tokio::time::timeout(std::time::Duration::from_secs(20), client.request_text(req)).await;
        assert!(matches!(second, Ok(Err(_))), "second request: {second:?}");
    }
}
