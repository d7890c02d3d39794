//! A loopback TCP proxy between the replicas and the API server, which can cut every connection at once.
//!
//! The replicas' kubeconfigs point here; TLS passes through untouched (the serving certificate is valid for
//! `127.0.0.1` on any port). Cutting the connections ends every watch of the replicas, as a network blip or a
//! load-balancer restart would, while the checker's own watches (straight to the API server) stay connected. That
//! is how the watch-expiry fault makes the replicas resume their watches from a compacted resourceVersion.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::Context as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

struct State {
    blocked: AtomicBool,
    severed: AtomicU64,
    epoch: watch::Sender<u64>,
}

/// The running proxy. Dropping it stops accepting; open connections end at the next [`Proxy::sever`] or when
/// either side closes.
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<State>,
    accept: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    ///
    /// # Errors
    /// No loopback port could be bound.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the fault proxy")?;
        let addr = listener.local_addr()?;
        let (epoch, _) = watch::channel(0u64);
        let state = Arc::new(State {
            blocked: AtomicBool::new(false),
            severed: AtomicU64::new(0),
            epoch,
        });
        let st = state.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                if st.blocked.load(Ordering::SeqCst) {
                    drop(client); // refused while blocked: the client sees a reset and retries
                    continue;
                }
                tokio::spawn(forward(client, upstream, st.clone()));
            }
        });
        Ok(Self { addr, state, accept })
    }

    /// `https://<addr>`: the server URL for kubeconfigs.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Closes every open connection and, with `block`, refuses new ones until [`Proxy::unblock`].
    pub fn sever(&self, block: bool) {
        if block {
            self.state.blocked.store(true, Ordering::SeqCst);
        }
        self.state.epoch.send_modify(|e| *e += 1);
    }

    /// Accepts connections again.
    pub fn unblock(&self) {
        self.state.blocked.store(false, Ordering::SeqCst);
    }

    /// Connections closed by [`Proxy::sever`] so far.
    pub fn severed(&self) -> u64 {
        self.state.severed.load(Ordering::SeqCst)
    }
}

async fn forward(mut client: TcpStream, upstream: SocketAddr, state: Arc<State>) {
    let mut epoch = state.epoch.subscribe();
    epoch.mark_unchanged();
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return; // API server down: the client sees the connection close, as it would without the proxy
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = epoch.changed() => { state.severed.fetch_add(1, Ordering::SeqCst); }
    }
}
