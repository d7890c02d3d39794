//! The operator's HTTP server (axum): `/healthz` (liveness), `/readyz` (readiness) and `/metrics`
//! (Prometheus, OpenMetrics text).
//!
//! Readiness follows kube-scheduler's and controller-runtime's meaning: a replica is ready once every cache it
//! schedules from has synced. A standby replica (not holding the Lease) is ready too: it is a warm spare, and the
//! Deployment's PodDisruptionBudget counts it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

/// Content type of `/metrics` (OpenMetrics 1.0 text, what `prometheus_client::encoding::text` writes).
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long the scheduling loop may go without a beat before `/healthz` fails. The loop beats at least once a
/// second when idle; a single cycle of a 1,000-pod gang on 5,000 nodes takes milliseconds.
pub const STUCK_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// Shared health flags, set by the operator and read by the probes.
#[derive(Debug, Default)]
pub struct Health {
    ready: AtomicBool,
    /// The scheduling loop's heartbeat, once the loop runs.
    progress: std::sync::OnceLock<phalanx_driver::Progress>,
    /// Overrides [`STUCK_AFTER`] (tests).
    stuck_after: Option<std::time::Duration>,
}

impl Health {
    /// Marks the process ready (all stores synced).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Ties `/healthz` to the scheduling loop's heartbeat.
    pub fn watch_progress(&self, progress: phalanx_driver::Progress) {
        let _ = self.progress.set(progress);
    }

    /// `Err(why)` when the scheduling loop has not beaten for [`STUCK_AFTER`] (only once it has started: the caches
    /// sync first).
    pub fn is_live(&self) -> Result<(), String> {
        match self.progress.get() {
            Some(p) if self.is_ready() && p.age() > self.stuck_after.unwrap_or(STUCK_AFTER) => {
                Err(format!("scheduling loop stuck: no progress for {:?}", p.age()))
            }
            _ => Ok(()),
        }
    }
}

#[derive(Clone)]
struct AppState {
    health: Arc<Health>,
    registry: Arc<Registry>,
}

/// Builds the router. `registry` must be complete (every component registered) before it is frozen in the `Arc`.
pub fn router(health: Arc<Health>, registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/healthz", get(livez))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(AppState { health, registry })
}

async fn livez(State(state): State<AppState>) -> Response {
    match state.health.is_live() {
        Ok(()) => (StatusCode::OK, "ok").into_response(),
        Err(why) => (StatusCode::INTERNAL_SERVER_ERROR, why).into_response(),
    }
}

async fn readyz(State(state): State<AppState>) -> Response {
    if state.health.is_ready() {
        (StatusCode::OK, "ok").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced").into_response()
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    let mut body = String::new();
    match encode(&mut body, &state.registry) {
        Ok(()) => ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], body).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics failed: {e}"),
        )
            .into_response(),
    }
}

/// Binds `addr` for the HTTP server. Done before anything touches the cluster, so a port conflict fails fast.
///
/// # Errors
/// The bind error (address in use, permission), naming the address.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} for /healthz, /readyz and /metrics: {e}"))
}

/// Serves `app` on `listener` until `shutdown` is cancelled. Sends the bound address through `bound` first, so a
/// caller that asked for port 0 learns the real port.
///
/// # Errors
/// A server I/O error.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: CancellationToken,
    bound: Option<tokio::sync::oneshot::Sender<SocketAddr>>,
) -> anyhow::Result<()> {
    let local = listener.local_addr()?;
    tracing::info!(addr = %local, "serving /healthz, /readyz and /metrics");
    if let Some(tx) = bound {
        let _ = tx.send(local);
    }
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::{Body, to_bytes};
    use http::Request;
    use prometheus_client::metrics::counter::Counter;
    use tower::ServiceExt;

    async fn get_path(app: Router, path: &str) -> (StatusCode, String, Option<String>) {
        let resp = app
            .oneshot(Request::builder().uri(path).body(Body::empty()).expect("request"))
            .await
            .expect("router answers");
        let status = resp.status();
        let ct = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = to_bytes(resp.into_body(), 1 << 20).await.expect("body");
        (status, String::from_utf8_lossy(&body).into_owned(), ct)
    }

    #[tokio::test]
    async fn healthz_fails_when_the_loop_stops_beating() {
        let health = Arc::new(Health {
            stuck_after: Some(std::time::Duration::from_millis(50)),
            ..Health::default()
        });
        let progress = phalanx_driver::Progress::default();
        health.watch_progress(progress.clone());
        health.set_ready(true);
        let app = router(health.clone(), Arc::new(Registry::default()));
        progress.beat();
        assert_eq!(get_path(app.clone(), "/healthz").await.0, StatusCode::OK);
        tokio::time::sleep(std::time::Duration::from_millis(80)).await;
        let (code, body, _) = get_path(app.clone(), "/healthz").await;
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert!(body.contains("scheduling loop stuck"), "{body}");
        progress.beat();
        assert_eq!(get_path(app, "/healthz").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn readyz_follows_health_flag() {
        let health = Arc::new(Health::default());
        let app = router(health.clone(), Arc::new(Registry::default()));
        assert_eq!(
            get_path(app.clone(), "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(get_path(app.clone(), "/healthz").await.0, StatusCode::OK);
        health.set_ready(true);
        assert_eq!(get_path(app, "/readyz").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn metrics_are_openmetrics_text() {
        let mut registry = Registry::with_prefix("phalanx");
        let c = Counter::<u64>::default();
        registry.register("test_events", "A test counter", c.clone());
        c.inc_by(3);
        let app = router(Arc::new(Health::default()), Arc::new(registry));
        let (status, body, ct) = get_path(app, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(ct.as_deref(), Some(OPENMETRICS_CONTENT_TYPE));
        assert!(body.contains("phalanx_test_events_total 3"), "{body}");
        assert!(body.ends_with("# EOF\n"), "{body}");
    }
}
