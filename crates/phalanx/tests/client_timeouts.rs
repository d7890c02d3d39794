//! The main API client against a black-holed connection (real control plane): a loopback proxy between the client
//! and the API server stops forwarding on every open connection without closing it, and for a while also swallows
//! new ones, as an API server or load-balancer failover that drops packets does. A watcher over the fenced client
//! must notice, re-watch on a new connection once the proxy forwards again, and catch up: a ConfigMap created
//! during the stall appears in its cache. Before the client had read timeouts (and a connect timeout that covers
//! the TLS handshake), the re-watch waited for ever on a silent connection.
//!
//! The bounds are scaled down so the test runs in well under a minute: read timeout 4 s (production 295 s), the
//! watches' server-side `timeoutSeconds` 2 s (production 290 s, kube's watcher default), connect timeout 3 s.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt as _, reflector, watcher};
use phalanx::write_fence::WriteFence;
use phalanx_testenv::TestEnv;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// Connections numbered below `frozen_below` forward nothing more, ever, and stay open; while `black_hole` is set,
/// new connections are accepted and then held silent too.
#[derive(Default)]
struct Stall {
    next_id: AtomicU64,
    frozen_below: AtomicU64,
    black_hole: AtomicBool,
}

async fn start_proxy(upstream: SocketAddr, stall: Arc<Stall>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
    let addr = listener.local_addr().expect("proxy address");
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                continue;
            };
            let id = stall.next_id.fetch_add(1, Ordering::SeqCst);
            let stall = stall.clone();
            tokio::spawn(async move {
                if stall.black_hole.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await; // holds `client` open and silent
                }
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::join!(pump(cr, sw, id, &stall), pump(sr, cw, id, &stall));
            });
        }
    });
    addr
}

/// Copies `from` to `to` until either side closes, or stops for good (keeping both open) once `id` is frozen.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    id: u64,
    s: &Stall,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if id < s.frozen_below.load(Ordering::SeqCst) {
            let _keep = (from, to);
            std::future::pending::<()>().await;
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "data": {"k": "v"}}))
        .expect("ConfigMap")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_over_a_black_holed_connection_recovers_within_the_read_timeout() {
    let env = TestEnv::shared();
    let direct = env.client().await.expect("client of the test control plane");
    let ns = phalanx_testenv::create_namespace(&direct, "client-timeouts")
        .await
        .expect("namespace");
    let mut config = env.config().await.expect("config of the test control plane");
    let upstream: SocketAddr = config
        .cluster_url
        .authority()
        .expect("API server URL has an authority")
        .as_str()
        .parse()
        .expect("API server at ip:port");
    let stall = Arc::new(Stall::default());
    let proxy = start_proxy(upstream, stall.clone()).await;
    // The serving certificate is valid for 127.0.0.1 on any port, so TLS passes through the proxy untouched.
    config.cluster_url = format!("https://{proxy}").parse().expect("proxy URL");
    config.read_timeout = Some(Duration::from_secs(4));
    config.connect_timeout = Some(Duration::from_secs(3));
    let (client, _) =
        phalanx::fenced_client::build(&config, &WriteFence::default(), 8).expect("fenced client");

    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let (reader, writer) = reflector::store();
    let wc = watcher::Config::default().timeout(2);
    let watch = tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(api, wc).default_backoff().reflect(writer));
        while events.next().await.is_some() {}
    });
    let cms: Api<ConfigMap> = Api::namespaced(direct, &ns);
    let has = |name: &'static str| {
        let reader = reader.clone();
        move || {
            let found = reader
                .state()
                .iter()
                .any(|c| c.metadata.name.as_deref() == Some(name));
            async move { Ok(found.then_some(())) }
        }
    };
    cms.create(&PostParams::default(), &config_map("before"))
        .await
        .expect("create ConfigMap before");
    phalanx_testenv::wait_for(
        "ConfigMap before in the cache",
        Duration::from_secs(60),
        has("before"),
    )
    .await
    .expect("the watcher works through the proxy");

    // The failover: every open connection goes silent for good, and new ones too for 12 s.
    stall.black_hole.store(true, Ordering::SeqCst);
    stall
        .frozen_below
        .store(stall.next_id.load(Ordering::SeqCst), Ordering::SeqCst);
    let stalled_at = Instant::now();
    let s = stall.clone();
    tokio::spawn(async move {
        // The fault itself, not a wait for a condition: the stall lasts 12 s (three read timeouts), and the proxy
        // accepts new connections after it. The connections frozen now stay silent for good, so a client without
        // a read timeout never recovers however long the check below waits.
        tokio::time::sleep(Duration::from_secs(12)).await;
        s.frozen_below
            .store(s.next_id.load(Ordering::SeqCst), Ordering::SeqCst);
        s.black_hole.store(false, Ordering::SeqCst);
    });
    cms.create(&PostParams::default(), &config_map("after"))
        .await
        .expect("create ConfigMap after");
    let seen = phalanx_testenv::wait_for(
        "ConfigMap after (created during the stall) in the watcher's cache",
        // Generous for a loaded machine: recovery takes the 12 s stall plus a read timeout and a relist, and a
        // client without a read timeout fails whatever the bound.
        Duration::from_secs(120),
        has("after"),
    )
    .await;
    let names: Vec<_> = reader
        .state()
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    watch.abort();
    seen.unwrap_or_else(|e| {
        panic!(
            "{e:#}; {:?} after the stall the cache held {names:?} ({} connections opened through the proxy)",
            stalled_at.elapsed(),
            stall.next_id.load(Ordering::SeqCst)
        )
    });
}
