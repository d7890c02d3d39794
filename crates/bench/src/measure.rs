//! Timing: a pod watch that stamps the moment each pod is first seen bound, the arithmetic on those stamps, and
//! [`Figures`], what else one run measured.
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

use crate::procfs::ProcSample;

/// What one successful run measured besides the bind times (cases fill it in, report prints it; it lives here, with
/// the timing it complements, so that neither of them imports the other's types).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Figures {
    /// Mutating requests of all clients in the run's window, per pod.
    pub api_writes_per_pod: Option<f64>,
    /// Requests of every verb by `system:kube-scheduler` in the run's window, per pod.
    pub api_calls_per_pod: Option<f64>,
    /// The scheduler process when the first pod was seen bound (start-up done); `None` for bind-rate.
    pub at_first_bind: Option<ProcSample>,
    /// The scheduler process at the end (after the last group was scheduled); `None` for bind-rate.
    pub at_end: Option<ProcSample>,
    /// `at_end` CPU seconds per 1,000 bound pods.
    pub cpu_s_per_1000_pods: Option<f64>,
    /// Gang latency from the scheduler's start to the group's last member bound, p50 and p99 (s).
    pub gang_p50_s: Option<f64>,
    /// See `gang_p50_s`.
    pub gang_p99_s: Option<f64>,
    /// Gang latency from the group's creation (its create call returned) to its last member bound, p50 (s).
    pub gang_from_created_p50_s: Option<f64>,
    /// See `gang_from_created_p50_s`.
    pub gang_from_created_p99_s: Option<f64>,
}

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

    /// The first-bound instant of every pod seen bound so far, by pod name.
    pub fn bound_at(&self) -> HashMap<String, Instant> {
        self.bound
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Stops the watch.
    pub fn stop(&self) {
        self.task.abort();
    }
}

/// The API server's request counters so far, read from its `/metrics` (one scrape).
#[derive(Clone, Debug, PartialEq)]
pub struct ApiCounters {
    /// Mutating requests of ALL clients: `apiserver_request_total` summed over the verbs POST, PUT, PATCH, APPLY
    /// and DELETE. That metric has no user label. The difference over a run's window is the writes of the
    /// scheduler under test plus those of kwok and kube-controller-manager, which are the same for every case:
    /// subtracting the bind-rate case's figure (one bind per pod and nothing else) leaves the scheduler's own.
    pub mutating: f64,
    /// Every request (all verbs: GET, LIST, WATCH, POST, ...) of the user `system:kube-scheduler` (the identity
    /// kube-scheduler, `phalanx run` and the bind-rate binder share): `apiserver_flowcontrol_dispatched_requests_total`
    /// of the FlowSchema `kube-scheduler`, the APF schema that matches exactly that user. Nothing else in the cluster
    /// uses that identity (leader election is off for both schedulers, so the `system-leader-election` schema, which
    /// would catch their Lease calls, sees none).
    pub scheduler_requests: f64,
    /// [`ApiCounters::mutating`] by `resource[/subresource] VERB` (for example `pods/binding POST`), to say which
    /// writes a run made.
    pub mutating_by: std::collections::BTreeMap<String, f64>,
}

impl ApiCounters {
    /// The writes per pod of each `resource[/subresource] VERB` between `before` and `self`, largest first, over
    /// `pods` pods; kinds with less than 0.005 per pod are left out.
    pub fn writes_per_pod_since(&self, before: &ApiCounters, pods: f64) -> Vec<(String, f64)> {
        let mut v: Vec<(String, f64)> = self
            .mutating_by
            .iter()
            .map(|(k, n)| {
                (
                    k.clone(),
                    (n - before.mutating_by.get(k).copied().unwrap_or(0.0)) / pods,
                )
            })
            .filter(|(_, per)| *per >= 0.005)
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    }

    /// The writes to the PodGroup objects of either API group (`podgroups` and `podgroups/status`, every verb) between
    /// `before` and `self`, divided by `groups`: issue 26's "group writes per gang".
    pub fn group_writes_per_group_since(&self, before: &ApiCounters, groups: f64) -> f64 {
        let total: f64 = self
            .mutating_by
            .iter()
            .filter(|(k, _)| k.starts_with("podgroups ") || k.starts_with("podgroups/"))
            .map(|(k, n)| n - before.mutating_by.get(k).copied().unwrap_or(0.0))
            .sum();
        total / groups.max(1.0)
    }
}

/// Reads [`ApiCounters`] from the API server's `/metrics`.
///
/// # Errors
/// `/metrics` cannot be read.
pub async fn api_counters(admin: &Client) -> anyhow::Result<ApiCounters> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = admin.request_text(req).await?;
    Ok(ApiCounters {
        mutating: sum_mutating(&text),
        scheduler_requests: sum_scheduler_requests(&text),
        mutating_by: mutating_by_kind(&text),
    })
}

/// `label="value"` of one sample line, if present.
fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(&format!("{name}=\""))? + name.len() + 2;
    let rest = &line[start..];
    rest.find('"').map(|end| &rest[..end])
}

fn mutating_by_kind(text: &str) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for l in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let Some(verb) = label(l, "verb").filter(|v| MUTATING_VERBS.contains(v)) else {
            continue;
        };
        let resource = label(l, "resource").unwrap_or("-");
        let kind = match label(l, "subresource").filter(|s| !s.is_empty()) {
            Some(sub) => format!("{resource}/{sub} {verb}"),
            None => format!("{resource} {verb}"),
        };
        *out.entry(kind).or_insert(0.0) += sample_value(l).unwrap_or(0.0);
    }
    out
}

const MUTATING_VERBS: [&str; 5] = ["POST", "PUT", "PATCH", "APPLY", "DELETE"];

fn sample_value(line: &str) -> Option<f64> {
    line.rsplit(' ').next()?.parse::<f64>().ok()
}

fn sum_mutating(text: &str) -> f64 {
    mutating_by_kind(text).values().sum()
}

fn sum_scheduler_requests(text: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_flowcontrol_dispatched_requests_total{")
                && l.contains("flow_schema=\"kube-scheduler\"")
        })
        .filter_map(sample_value)
        .sum()
}

/// The group of a benchmark pod: its name without the last `-<index>` ([`crate::workload::pod_name`]).
pub fn group_of(pod: &str) -> &str {
    pod.rsplit_once('-').map_or(pod, |(g, _)| g)
}

/// Per group, the instant its last member was first seen bound.
pub fn last_bind_per_group(bound: &HashMap<String, Instant>) -> HashMap<&str, Instant> {
    let mut out: HashMap<&str, Instant> = HashMap::new();
    for (pod, t) in bound {
        let e = out.entry(group_of(pod)).or_insert(*t);
        if *t > *e {
            *e = *t;
        }
    }
    out
}

/// Gang latencies (seconds), one per group, from `origin(group)` to the group's last member bound; groups with no
/// origin are left out.
pub fn gang_latencies(last: &HashMap<&str, Instant>, origin: impl Fn(&str) -> Option<Instant>) -> Vec<f64> {
    last.iter()
        .filter_map(|(g, t)| Some(t.saturating_duration_since(origin(g)?).as_secs_f64()))
        .collect()
}

/// The `p`-th percentile (0 < p <= 100) of `xs` by the nearest-rank method (the smallest value with at least p% of
/// the values at or below it); `None` when empty. NaNs sort last.
pub fn percentile(xs: &[f64], p: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = (p / 100.0 * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
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
        let by = mutating_by_kind(text);
        assert_eq!(by.get("pods/binding POST"), Some(&40.0));
        assert_eq!(by.get("podgroups APPLY"), Some(&7.0));
        assert_eq!(by.get("pods LIST"), None, "reads are not writes");
        let mut after = ApiCounters {
            mutating: 0.0,
            scheduler_requests: 0.0,
            mutating_by: by.clone(),
        };
        *after.mutating_by.get_mut("pods/binding POST").expect("binds") += 80.0;
        let before = ApiCounters {
            mutating_by: by,
            ..after.clone()
        };
        assert_eq!(
            after.writes_per_pod_since(&before, 40.0),
            vec![("pods/binding POST".to_owned(), 2.0)]
        );
        // Group writes: both kinds of podgroups writes count, binds do not.
        after.mutating_by.insert("podgroups/status APPLY".into(), 10.0);
        *after.mutating_by.get_mut("podgroups APPLY").expect("groups") += 2.0;
        assert_eq!(after.group_writes_per_group_since(&before, 4.0), 3.0);
    }

    #[test]
    fn scheduler_requests_are_those_of_its_flow_schema() {
        let text = "apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"kube-scheduler\",priority_level=\"workload-high\"} 120\n\
            apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"exempt\",priority_level=\"exempt\"} 5000\n\
            apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"kube-controller-manager\",priority_level=\"workload-high\"} 77\n\
            apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"kube-scheduler\",priority_level=\"other\"} 3\n\
            apiserver_flowcontrol_current_inqueue_requests{flow_schema=\"kube-scheduler\",priority_level=\"workload-high\"} 9\n";
        assert_eq!(sum_scheduler_requests(text), 123.0);
        assert_eq!(sum_scheduler_requests(""), 0.0);
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let xs: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&xs, 50.0), Some(50.0));
        assert_eq!(percentile(&xs, 99.0), Some(99.0));
        assert_eq!(percentile(&xs, 100.0), Some(100.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 99.0), Some(4.0));
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 1.0), Some(1.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn gang_latency_is_to_the_last_member() {
        assert_eq!(group_of("gang-00003-7"), "gang-00003");
        assert_eq!(group_of("gang-00012-123"), "gang-00012");
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let bound = HashMap::from([
            ("gang-00000-0".to_owned(), at(1000)),
            ("gang-00000-1".to_owned(), at(3000)),
            ("gang-00001-0".to_owned(), at(2000)),
            ("gang-00001-1".to_owned(), at(1500)),
        ]);
        let last = last_bind_per_group(&bound);
        assert_eq!(last.len(), 2);
        assert_eq!(last["gang-00000"], at(3000));
        assert_eq!(last["gang-00001"], at(2000));
        let mut from_start = gang_latencies(&last, |_| Some(t0));
        from_start.sort_by(f64::total_cmp);
        assert_eq!(from_start, vec![2.0, 3.0]);
        let created = HashMap::from([("gang-00000", at(500))]);
        assert_eq!(gang_latencies(&last, |g| created.get(g).copied()), vec![2.5]);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
