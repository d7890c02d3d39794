//! Timing: a pod watch that stamps the moment each pod is first seen bound, and the arithmetic on those stamps.
//!
//! Every case is timed by the same observer (this process's watch on the case namespace), so the watch delay is the
//! same for all of them. A pod counts once `spec.nodeName` is set, as in upstream scheduler_perf, where nodes have no
//! kubelet and "scheduled" means bound (as upstream `test/integration/scheduler_perf` counts scheduled pods).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::TryStreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::{oneshot, watch};

/// First-bound instants per pod name, plus a counter the waiting side can await.
#[derive(Clone)]
pub struct BindTracker {
    bound: Arc<Mutex<HashMap<String, Instant>>>,
    count: watch::Receiver<usize>,
    task: Arc<tokio::task::AbortHandle>,
}

impl BindTracker {
    /// Starts watching the pods of namespace `ns` and returns once the initial list is in (so a pod bound after
    /// this call is stamped when its watch event arrives).
    ///
    /// # Errors
    /// When the watch ends before its initial list completes (API error).
    pub async fn start(client: Client, ns: &str) -> anyhow::Result<Self> {
        let bound: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let (count_tx, count) = watch::channel(0usize);
        let (ready_tx, ready_rx) = oneshot::channel::<()>();
        let api: Api<Pod> = Api::namespaced(client, ns);
        let map = bound.clone();
        let task = tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let stream = watcher::watcher(api, watcher::Config::default());
            futures::pin_mut!(stream);
            loop {
                match stream.try_next().await {
                    Ok(Some(Event::Apply(p) | Event::InitApply(p))) => {
                        let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
                        if let (Some(_), Some(name)) = (node, p.metadata.name.as_deref()) {
                            let mut m = map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                            if !m.contains_key(name) {
                                m.insert(name.to_owned(), Instant::now());
                                let n = m.len();
                                drop(m);
                                count_tx.send_replace(n);
                            }
                        }
                    }
                    Ok(Some(Event::InitDone)) => {
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(Some(Event::Init | Event::Delete(_))) => {}
                    Ok(None) => break,
                    // The watcher re-lists by itself after an error; keep going.
                    Err(e) => tracing::warn!(error = %e, "bench pod watch error"),
                }
            }
        });
        let tracker = Self {
            bound,
            count,
            task: Arc::new(task.abort_handle()),
        };
        tokio::time::timeout(Duration::from_secs(60), ready_rx)
            .await
            .map_err(|_| anyhow::anyhow!("pod watch on {ns}: no initial list within 60 s"))?
            .map_err(|_| anyhow::anyhow!("pod watch on {ns} ended before its initial list"))?;
        Ok(tracker)
    }

    /// Number of distinct pods seen bound so far.
    pub fn bound(&self) -> usize {
        *self.count.borrow()
    }

    /// Waits until `want` pods are bound or `timeout` passes; returns the count reached.
    pub async fn wait_bound(&mut self, want: usize, timeout: Duration) -> usize {
        let _ = tokio::time::timeout(timeout, self.count.wait_for(|n| *n >= want)).await;
        self.bound()
    }

    /// The bind instants seen so far (unordered).
    pub fn stamps(&self) -> Vec<Instant> {
        self.bound
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .copied()
            .collect()
    }

    /// Stops the watch.
    pub fn stop(&self) {
        self.task.abort();
    }
}

/// The API server's count of mutating requests so far (`apiserver_request_total` summed over the verbs POST, PUT,
/// PATCH, APPLY and DELETE, all clients), read from its `/metrics`. The difference over a run's window is the
/// writes of the scheduler under test plus those of kwok and kube-controller-manager, which are the same for every
/// case: subtracting the bind-rate case's figure (one bind per pod and nothing else) leaves the scheduler's own.
///
/// # Errors
/// `/metrics` cannot be read.
pub async fn mutating_requests(admin: &Client) -> anyhow::Result<f64> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = admin.request_text(req).await?;
    Ok(sum_mutating(&text))
}

fn sum_mutating(text: &str) -> f64 {
    const VERBS: [&str; 5] = [
        "verb=\"POST\"",
        "verb=\"PUT\"",
        "verb=\"PATCH\"",
        "verb=\"APPLY\"",
        "verb=\"DELETE\"",
    ];
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && VERBS.iter().any(|v| l.contains(v)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// What one run measured. Times are seconds from `start` (the moment the scheduler or binder was started).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Pods bound.
    pub pods: usize,
    /// Start to last pod bound (includes the scheduler's start-up: process start, informer/reflector lists).
    pub wall_s: f64,
    /// `pods / wall_s`.
    pub pods_per_sec: f64,
    /// Start to first pod bound (start-up latency).
    pub first_bind_s: f64,
    /// `(pods - 1) / (last - first)`: the rate once binding is under way (start-up excluded); 0 for < 2 pods.
    pub steady_pods_per_sec: f64,
}

/// Summarises bind instants against `start`. `None` when `stamps` is empty.
pub fn summarize(start: Instant, stamps: &[Instant]) -> Option<Summary> {
    let first = *stamps.iter().min()?;
    let last = *stamps.iter().max()?;
    let secs = |t: Instant| t.saturating_duration_since(start).as_secs_f64();
    let wall_s = secs(last);
    let pods = stamps.len();
    let window = last.saturating_duration_since(first).as_secs_f64();
    Some(Summary {
        pods,
        wall_s,
        pods_per_sec: if wall_s > 0.0 { pods as f64 / wall_s } else { 0.0 },
        first_bind_s: secs(first),
        steady_pods_per_sec: if pods > 1 && window > 0.0 {
            (pods - 1) as f64 / window
        } else {
            0.0
        },
    })
}

/// The median of `xs` (mean of the middle two for an even count); `None` when empty. NaNs sort last.
pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The 1-, 5- and 15-minute load averages from `/proc/loadavg`, as printed there (`"4.87 6.69 7.21"`), or `"?"`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "?".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_separates_startup_from_steady_rate() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // First bind after 2 s, then 11 pods over the next 1 s.
        let stamps: Vec<Instant> = (0..11).map(|i| at(2000 + i * 100)).collect();
        let s = summarize(t0, &stamps).unwrap();
        assert_eq!(s.pods, 11);
        assert!((s.wall_s - 3.0).abs() < 1e-9, "{s:?}");
        assert!((s.first_bind_s - 2.0).abs() < 1e-9);
        assert!((s.pods_per_sec - 11.0 / 3.0).abs() < 1e-9);
        assert!((s.steady_pods_per_sec - 10.0).abs() < 1e-9);
        assert!(summarize(t0, &[]).is_none());
    }

    #[test]
    fn mutating_requests_are_summed_by_verb() {
        let text = "# HELP apiserver_request_total x\n\
            apiserver_request_total{code=\"201\",resource=\"pods\",subresource=\"binding\",verb=\"POST\"} 40\n\
            apiserver_request_total{code=\"200\",resource=\"pods\",subresource=\"status\",verb=\"PATCH\"} 2.5\n\
            apiserver_request_total{code=\"200\",resource=\"pods\",verb=\"LIST\"} 99\n\
            apiserver_request_total{code=\"200\",resource=\"podgroups\",verb=\"APPLY\"} 7\n";
        assert_eq!(sum_mutating(text), 49.5);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
