//! `phalanx run` as a library function: store + controllers + scheduler in one process, with leader election, the
//! probe/metrics server and one shutdown token.
//!
//! Order of events (follows kube-scheduler's `Run` in `cmd/kube-scheduler/app/server.go`):
//! 1. caches start on every replica (warm standby) and `/readyz` turns 200 once they have synced;
//! 2. leader election starts; components get a `watch::Receiver<bool>` and write only while it reads `true`;
//! 3. on SIGTERM (the token is cancelled) every component stops, then the Lease is released so a standby takes over
//!    at once; on Lease loss the process exits (fail-stop, see [`crate::leader`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::leader;
use crate::options::RunOptions;
use crate::server::{self, Health};
use crate::wiring;

/// How long components get to stop after the shutdown token is cancelled (the chart's
/// `terminationGracePeriodSeconds` is larger).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// Builds a client from an explicit kubeconfig (and context), or infers one (in-cluster, then `~/.kube/config`).
///
/// # Errors
/// The kubeconfig cannot be read or has no usable context.
pub async fn client(kubeconfig: Option<&PathBuf>, context: Option<&str>) -> anyhow::Result<Client> {
    Ok(Client::try_from(config(kubeconfig, context).await?)?)
}

/// The clients of `phalanx run` (see [`crate::fenced_client`]): the main one, fenced at each request and at each
/// connection by `fence`, with at most `in_flight` requests in flight ([`crate::fenced_client::in_flight_limit`]),
/// and the elector's, unfenced. Both fail a request whose connection is silent for `read_timeout` after its last
/// write (`--api-read-timeout`, [`crate::fenced_client::DEFAULT_READ_TIMEOUT`]); kube's defaults give the connect
/// (30 s) and write (295 s) timeouts.
///
/// # Errors
/// As [`client`].
pub async fn fenced_clients(
    kubeconfig: Option<&PathBuf>,
    context: Option<&str>,
    fence: &crate::write_fence::WriteFence,
    in_flight: usize,
    read_timeout: Duration,
) -> anyhow::Result<(Client, Client)> {
    let mut config = config(kubeconfig, context).await?;
    config.read_timeout = Some(read_timeout);
    crate::fenced_client::build(&config, fence, in_flight)
}

/// Reads a kubeconfig path, or a list of them as `KUBECONFIG` holds (`a:b`, merged first wins, as kubectl does).
fn read_kubeconfig(path: &std::path::Path) -> anyhow::Result<Kubeconfig> {
    let read = |p: &std::path::Path| {
        Kubeconfig::read_from(p).map_err(|e| anyhow::anyhow!("cannot read kubeconfig {}: {e}", p.display()))
    };
    if path.exists() {
        return read(path);
    }
    let mut parts = std::env::split_paths(path.as_os_str()).filter(|p| !p.as_os_str().is_empty());
    let Some(first) = parts.next() else {
        return read(path);
    };
    let mut kc = read(&first)?;
    for p in parts {
        kc = kc
            .merge(read(&p)?)
            .map_err(|e| anyhow::anyhow!("cannot merge kubeconfig {}: {e}", p.display()))?;
    }
    Ok(kc)
}

async fn config(kubeconfig: Option<&PathBuf>, context: Option<&str>) -> anyhow::Result<kube::Config> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = read_kubeconfig(path)?;
            let opts = KubeConfigOptions {
                context: context.map(str::to_owned),
                ..Default::default()
            };
            kube::Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|e| anyhow::anyhow!("kubeconfig {}: {e}", path.display()))?
        }
        None if context.is_some() => {
            let opts = KubeConfigOptions {
                context: context.map(str::to_owned),
                ..Default::default()
            };
            kube::Config::from_kubeconfig(&opts).await?
        }
        None => kube::Config::infer().await.map_err(|e| {
            anyhow::anyhow!(
                "no Kubernetes configuration found (in-cluster or ~/.kube/config); pass --kubeconfig: {e}"
            )
        })?,
    };
    Ok(config)
}

/// Runs the operator until `shutdown` is cancelled or a component fails.
///
/// # Errors
/// A component failed, the server could not bind, the Lease could not be used, or the Lease was lost.
pub async fn run(client: Client, mut opts: RunOptions, shutdown: CancellationToken) -> anyhow::Result<()> {
    wiring::validate(&opts)?;
    let mut registry = Registry::with_prefix("phalanx");
    registry.register(
        "build",
        "Phalanx build information",
        Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
    );
    let leader_gauge = Gauge::<i64>::default();
    registry.register(
        "leader",
        "1 while this replica holds the Lease and may write",
        leader_gauge.clone(),
    );

    // Bind first: a port conflict must fail before this process touches the Lease.
    let listener = server::bind(opts.metrics_addr).await?;
    log_server_features(&client, &mut registry).await;
    let store = wiring::start_store(&client);
    let leadership = leader::start(
        opts.lease_client.clone().unwrap_or_else(|| client.clone()),
        &opts.leader,
        &opts.scheduler_name,
        shutdown.clone(),
        opts.on_lease_lost,
        leader_gauge,
    )
    .await?;
    if let Some(fence) = &opts.write_fence {
        fence.set(leadership.leader.clone());
    }

    let progress = phalanx_driver::Progress::default();
    let scheduler = wiring::scheduler(
        &client,
        &store,
        &opts,
        leadership.leader.clone(),
        progress.clone(),
        shutdown.clone(),
        &mut registry,
    )?;
    let controllers = wiring::controllers(
        &client,
        &store,
        &opts,
        leadership.leader.clone(),
        shutdown.clone(),
        &mut registry,
    )?;

    let health = Arc::new(Health::default());
    health.watch_progress(progress);
    let app = server::router(health.clone(), Arc::new(registry));
    let mut tasks: JoinSet<(&'static str, anyhow::Result<()>)> = JoinSet::new();
    {
        let (token, bound) = (shutdown.clone(), opts.bound_addr.take());
        tasks.spawn(async move { ("http server", server::serve(listener, app, token, bound).await) });
    }
    {
        let (store, token, health) = (store.clone(), shutdown.clone(), health.clone());
        tasks.spawn(async move {
            tokio::select! {
                _ = wiring::store_ready(&store) => {
                    health.set_ready(true);
                    tracing::info!("caches synced; ready");
                }
                _ = token.cancelled() => {}
            }
            ("readiness", Ok(()))
        });
    }
    if !opts.api_discovery_interval.is_zero() {
        let (store, client, every) = (store.clone(), client.clone(), opts.api_discovery_interval);
        let token = shutdown.clone();
        tasks.spawn(async move {
            tokio::select! {
                res = served_apis_changed(&store, &client, every) => ("api discovery", res),
                _ = token.cancelled() => ("api discovery", Ok(())),
            }
        });
    }
    tasks.spawn(async move { ("scheduler", scheduler.await) });
    tasks.spawn(async move { ("controllers", controllers.await) });

    let mut failure: Option<anyhow::Error> = None;
    // Until shutdown: a component that ends early (other than readiness) is fatal for the process.
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            joined = tasks.join_next() => match joined {
                None => break,
                Some(Ok(("readiness", _))) => {}
                Some(Ok((name, Ok(())))) => {
                    if !shutdown.is_cancelled() {
                        failure = Some(anyhow::anyhow!("{name} stopped unexpectedly"));
                    }
                    break;
                }
                Some(Ok((name, Err(e)))) => { failure = Some(e.context(format!("{name} failed"))); break; }
                Some(Err(e)) => { failure = Some(anyhow::anyhow!("a task panicked: {e}")); break; }
            }
        }
    }
    shutdown.cancel();
    health.set_ready(false);
    let drain = async {
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((name, Err(e))) => {
                    tracing::warn!(component = name, error = %format!("{e:#}"), "stopped with an error")
                }
                Ok((name, Ok(()))) => tracing::debug!(component = name, "stopped"),
                Err(e) => tracing::warn!(error = %e, "task panicked during shutdown"),
            }
        }
    };
    if tokio::time::timeout(STOP_TIMEOUT, drain).await.is_err() {
        tracing::warn!("components did not stop within {STOP_TIMEOUT:?}; aborting them");
        tasks.abort_all();
    }
    let lost = leadership.lost();
    leadership.release(Duration::from_secs(5)).await;
    if lost {
        anyhow::bail!("lost the leader Lease (fail-stop)");
    }
    match failure {
        Some(e) => Err(e),
        None => {
            tracing::info!("stopped");
            Ok(())
        }
    }
}

/// Resolves, with the error that ends the process, once the API server serves other optional APIs than the store
/// decided on at start (`phalanx_store::served_apis`): the watches are chosen once, so the process restarts (its
/// Deployment starts it again; a standby replica takes over meanwhile) and watches what is served now. Upstream's
/// kube-scheduler needs a restart too when its gates or the served APIs change.
async fn served_apis_changed(
    store: &phalanx_store::Store,
    client: &Client,
    every: Duration,
) -> anyhow::Result<()> {
    wiring::store_ready(store).await;
    let decided = store.served_apis();
    let now = phalanx_store::served_apis::until_changed(client, decided, every).await;
    let changes = now.changes_from(&decided).join("; ");
    tracing::warn!(%changes, "the API server serves other optional APIs than at start; restarting to watch them");
    anyhow::bail!("the served APIs changed ({changes}): exiting so that a restart watches what is served now")
}

/// Returns a token cancelled on SIGTERM or SIGINT (Ctrl-C). A second signal exits at once.
pub fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        wait_signal().await;
        tracing::info!("signal received; shutting down (send again to exit at once)");
        t.cancel();
        wait_signal().await;
        std::process::exit(130);
    });
    token
}

async fn wait_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// How long the start-up probe of the server's features may take before it is given up (it is advisory).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Probes what the server serves ([`phalanx_store::server`]) and logs each gap once, at its severity, with the
/// degradation it implies; registers `phalanx_server_info{version}`. A probe that fails or times out is logged and
/// ignored: the watches meet the same failure, report it and retry.
async fn log_server_features(client: &Client, registry: &mut Registry) {
    use phalanx_store::server::{ServerFeatures, Severity};
    let features = match tokio::time::timeout(PROBE_TIMEOUT, ServerFeatures::probe(client)).await {
        Ok(Ok(f)) => f,
        Ok(Err(e)) => {
            return tracing::warn!(error = %e, "could not probe the server's version and APIs; continuing");
        }
        Err(_) => {
            return tracing::warn!("probing the server's version and APIs timed out after 10 s; continuing");
        }
    };
    let version = features
        .version
        .as_ref()
        .map_or_else(|| "unknown".to_owned(), |v| v.git_version.clone());
    tracing::info!(server_version = %version, dra = features.serves_dra(), "API server probed");
    registry.register(
        "server",
        "Version of the API server this replica talks to, as probed at start",
        Info::new(vec![("version", version)]),
    );
    for gap in features.gaps() {
        let (feature, message) = (gap.feature, gap.message.as_str());
        match gap.severity {
            Severity::Info => tracing::info!(feature, "{message}"),
            Severity::Warn => tracing::warn!(feature, "{message}"),
            Severity::Error => tracing::error!(feature, "{message}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client for an address where nothing listens: any API call would fail with a connection error.
    fn unreachable_client() -> Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("uri"));
        Client::try_from(config).expect("client")
    }

    #[tokio::test]
    async fn bad_node_selector_fails_before_touching_the_cluster() {
        let opts = RunOptions {
            node_selector: "a in (b".into(),
            ..RunOptions::default()
        };
        let err = run(unreachable_client(), opts, CancellationToken::new())
            .await
            .expect_err("bad selector");
        let msg = format!("{err:#}");
        assert!(msg.contains("--node-selector"), "{msg}");
    }

    #[tokio::test]
    async fn port_conflict_fails_before_touching_the_cluster() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let opts = RunOptions {
            metrics_addr: taken.local_addr().expect("addr"),
            ..RunOptions::default()
        };
        let err = run(unreachable_client(), opts, CancellationToken::new())
            .await
            .expect_err("port in use");
        assert!(format!("{err:#}").contains("cannot listen on"), "{err:#}");
    }
}
