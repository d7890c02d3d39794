//! The independent observer: its own watches on pods, nodes and PodGroups (straight to the API server, never
//! through the fault proxy), and the invariants that are decided on every event (I1, I2, I5) or on request (I3, I4,
//! and I7 over the audit log with the pod history kept in [`crate::evictions`]).
//!
//! It shares no code with the scheduler: requests are summed by [`crate::quantity`], bindings are what the API
//! server reports. After a relist (a 410, an API server restart) the listed objects replace the old ones only once
//! the list is complete, so an object deleted while the watch was down never lingers as phantom usage and a
//! half-received list never produces a false overcommit.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource as _};

mod describe;

use crate::evictions::Ledger;
use crate::invariants::{Invariant, Violation};
use crate::quantity::{Requests, parse_milli, pod_requests};

/// A pod as the checker needs it.
#[derive(Debug, Clone)]
struct PodInfo {
    namespace: String,
    name: String,
    node: Option<String>,
    requests: Requests,
    terminal: bool,
    deleting: bool,
    group: Option<String>,
    ours: bool,
    /// `PodScheduled` condition: (status, reason, message).
    scheduled: Option<(String, String, String)>,
}

/// A PodGroup as the checker needs it.
#[derive(Debug, Clone)]
struct GroupInfo {
    namespace: String,
    name: String,
    min_count: Option<i64>,
    deleting: bool,
    /// `PodGroupInitiallyScheduled` was seen True (and has not been reported False since).
    was_true: bool,
}

/// One gang's binding state (for I3).
#[derive(Debug, Clone)]
pub struct Gang {
    /// PodGroup name.
    pub name: String,
    /// `spec.schedulingPolicy.gang.minCount`.
    pub min_count: i64,
    /// Pods of the group that exist.
    pub pods: usize,
    /// Of those, bound and not terminal.
    pub bound: usize,
    /// `pod@node` of the bound ones, for evidence.
    pub placement: Vec<String>,
    /// The unbound ones with their `PodScheduled` condition, for evidence.
    pub pending: Vec<String>,
}

impl Gang {
    /// Whole (at least minCount bound) or untouched (none bound).
    pub fn whole_or_empty(&self) -> bool {
        self.bound == 0 || self.bound as i64 >= self.min_count
    }
}

#[derive(Default)]
struct State {
    scheduler_name: String,
    /// I5 is judged only for PodGroups in namespaces with this prefix (the suite's own).
    group_ns_prefix: String,
    pods: HashMap<String, PodInfo>,
    pods_relist: Option<HashMap<String, PodInfo>>,
    /// uid -> (ns/name, node, first seen): every binding ever seen, for I1.
    bound: HashMap<String, (String, String, Timestamp)>,
    nodes: HashMap<String, Requests>,
    nodes_relist: Option<HashMap<String, Requests>>,
    over: HashSet<(String, String)>,
    groups: HashMap<String, GroupInfo>,
    groups_relist: Option<HashSet<String>>,
    violations: Vec<Violation>,
    synced: [bool; 3],
    /// Pod history for I7.
    evictions: Ledger,
}

fn pod_info(pod: &Pod, scheduler_name: &str) -> PodInfo {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let scheduled = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        });
    let requests = pod_requests(pod).unwrap_or_else(|e| {
        tracing::warn!(pod = ?pod.metadata.name, error = %e, "unparsable requests; counted as none");
        Requests::new()
    });
    PodInfo {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        node: spec.and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty()),
        requests,
        terminal: matches!(
            status.and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        ),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        group: pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(phalanx_api::labels::POD_GROUP))
            .cloned(),
        ours: spec.and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler_name),
        scheduled,
    }
}

fn allocatable(node: &Node) -> Requests {
    let mut out = Requests::new();
    for (k, q) in node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .into_iter()
        .flatten()
    {
        if let Ok(v) = parse_milli(&q.0) {
            out.insert(k.clone(), v);
        }
    }
    out
}

fn fmt_milli(resource: &str, v: i128) -> String {
    if resource == "cpu" {
        format!("{v}m")
    } else if v % 1000 == 0 {
        format!("{}", v / 1000)
    } else {
        format!("{v}m")
    }
}

impl State {
    fn violation(&mut self, invariant: Invariant, object: (String, String), detail: String) {
        tracing::info!(invariant = invariant.code(), %detail, "invariant violated");
        self.violations.push(Violation {
            invariant,
            at: Timestamp::now(),
            object: Some(object),
            detail,
        });
    }

    /// I1: a pod's nodeName never changes once set.
    fn check_binding(&mut self, uid: &str, p: &PodInfo) {
        let Some(node) = p.node.clone() else { return };
        match self.bound.get(uid) {
            Some((_, first, seen)) if *first != node => {
                let detail = format!(
                    "pod {}/{} (uid {uid}) bound to {first} (seen {seen}) and now to {node}",
                    p.namespace, p.name
                );
                self.violation(
                    Invariant::SingleBinding,
                    (p.namespace.clone(), p.name.clone()),
                    detail,
                );
            }
            Some(_) => {}
            None => {
                let key = format!("{}/{}", p.namespace, p.name);
                self.bound.insert(uid.to_owned(), (key, node, Timestamp::now()));
            }
        }
    }

    /// I2 for one node: sums the requests of the non-terminal pods bound to it (terminating pods still count, as
    /// in kube-scheduler) and records a violation when a resource goes above allocatable.
    fn check_node(&mut self, node: &str) {
        let Some(alloc) = self.nodes.get(node).cloned() else {
            return;
        };
        let mut used = Requests::new();
        let mut on_node: Vec<(&String, &PodInfo)> = Vec::new();
        for (uid, p) in &self.pods {
            if p.node.as_deref() == Some(node) && !p.terminal {
                on_node.push((uid, p));
                for (k, v) in &p.requests {
                    *used.entry(k.clone()).or_default() += v;
                }
            }
        }
        let mut new_over = Vec::new();
        for (res, u) in &used {
            let a = alloc.get(res).copied().unwrap_or(0);
            let key = (node.to_owned(), res.clone());
            if *u > a {
                if !self.over.contains(&key) {
                    let pods: Vec<String> = on_node
                        .iter()
                        .filter_map(|(uid, p)| {
                            let r = p.requests.get(res).copied().unwrap_or(0);
                            let seen = self.bound.get(*uid).map(|b| b.2.to_string()).unwrap_or_default();
                            (r > 0).then(|| {
                                format!(
                                    "{}/{} {} (bound seen {seen})",
                                    p.namespace,
                                    p.name,
                                    fmt_milli(res, r)
                                )
                            })
                        })
                        .collect();
                    new_over.push((
                        key,
                        format!(
                            "node {node}: {res} requests {} > allocatable {} over {} pods: {}",
                            fmt_milli(res, *u),
                            fmt_milli(res, a),
                            pods.len(),
                            pods.join(", ")
                        ),
                    ));
                }
            } else {
                self.over.remove(&key);
            }
        }
        // A resource whose last pod left is back under allocatable too.
        self.over.retain(|(n, r)| n != node || used.contains_key(r));
        for (key, detail) in new_over {
            self.violation(Invariant::NoOvercommit, (String::new(), key.0.clone()), detail);
            self.over.insert(key);
        }
    }

    fn apply_pod(&mut self, pod: &Pod, relist: bool) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let info = pod_info(pod, &self.scheduler_name);
        self.evictions.observe(pod);
        self.check_binding(&uid, &info);
        if relist {
            if let Some(buf) = self.pods_relist.as_mut() {
                buf.insert(uid, info);
            }
            return;
        }
        let old_node = self.pods.get(&uid).and_then(|p| p.node.clone());
        let new_node = info.node.clone();
        self.pods.insert(uid, info);
        for n in [old_node, new_node].into_iter().flatten().collect::<HashSet<_>>() {
            self.check_node(&n);
        }
    }

    fn delete_pod(&mut self, pod: &Pod) {
        self.evictions.gone(pod);
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return;
        };
        if let Some(p) = self.pods.remove(uid)
            && let Some(n) = p.node
        {
            self.check_node(&n);
        }
    }

    fn finish_pod_relist(&mut self) {
        self.evictions.end_relist();
        if let Some(buf) = self.pods_relist.take() {
            self.pods = buf;
            let nodes: Vec<String> = self.nodes.keys().cloned().collect();
            for n in nodes {
                self.check_node(&n);
            }
        }
        self.synced[0] = true;
    }

    fn apply_node(&mut self, node: &Node, relist: bool) {
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        let alloc = allocatable(node);
        if relist {
            if let Some(buf) = self.nodes_relist.as_mut() {
                buf.insert(name, alloc);
            }
            return;
        }
        self.nodes.insert(name.clone(), alloc);
        self.check_node(&name);
    }

    fn finish_node_relist(&mut self) {
        if let Some(buf) = self.nodes_relist.take() {
            self.nodes = buf;
            let nodes: Vec<String> = self.nodes.keys().cloned().collect();
            for n in nodes {
                self.check_node(&n);
            }
        }
        self.synced[1] = true;
    }

    /// I5 on every PodGroup event.
    fn apply_group(&mut self, obj: &DynamicObject, relist: bool) {
        let Some(uid) = obj.metadata.uid.clone() else {
            return;
        };
        if relist && let Some(seen) = self.groups_relist.as_mut() {
            seen.insert(uid.clone());
        }
        let cond = obj.data["status"]["conditions"].as_array().and_then(|cs| {
            cs.iter()
                .find(|c| c["type"] == phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED)
                .cloned()
        });
        let namespace = obj.metadata.namespace.clone().unwrap_or_default();
        let judged = namespace.starts_with(&self.group_ns_prefix);
        let status = cond
            .as_ref()
            .and_then(|c| c["status"].as_str())
            .filter(|_| judged)
            .unwrap_or("");
        let name = obj.metadata.name.clone().unwrap_or_default();
        let was_true = self.groups.get(&uid).is_some_and(|g| g.was_true);
        let mut now_true = was_true;
        if status == "True" {
            now_true = true;
        } else if status == "False" && was_true {
            let c = cond.unwrap_or_default();
            let detail = format!(
                "PodGroup {namespace}/{name}: {} went True -> False (reason {:?}, message {:?}, lastTransitionTime {})",
                phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED,
                c["reason"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or(""),
                c["lastTransitionTime"].as_str().unwrap_or("")
            );
            self.violation(
                Invariant::InitiallyScheduledSticks,
                (namespace.clone(), name.clone()),
                detail,
            );
            now_true = false; // report each regression once
        }
        let min_count = obj.data["spec"]["schedulingPolicy"]["gang"]["minCount"].as_i64();
        self.groups.insert(
            uid,
            GroupInfo {
                namespace,
                name,
                min_count,
                deleting: obj.metadata.deletion_timestamp.is_some(),
                was_true: now_true,
            },
        );
    }

    fn finish_group_relist(&mut self) {
        if let Some(seen) = self.groups_relist.take() {
            self.groups.retain(|uid, _| seen.contains(uid));
        }
        self.synced[2] = true;
    }
}

/// The running observer. Dropping it stops the watches.
pub struct Checker {
    state: Arc<Mutex<State>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Checker {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn spawn_watch<K, F>(
    api: Api<K>,
    config: watcher::Config,
    state: Arc<Mutex<State>>,
    mut on: F,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    F: FnMut(&mut State, Event<K>) + Send + 'static,
{
    tokio::spawn(async move {
        // kube's watcher relists after a 410 or a broken stream and retries with backoff while the API is down.
        let mut stream = watcher::watcher(api, config).default_backoff().boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(ev) => {
                    if let Ok(mut s) = state.lock() {
                        on(&mut s, ev);
                    }
                }
                Err(e) => tracing::debug!(error = %e, "checker watch error (retrying)"),
            }
        }
    })
}

impl Checker {
    /// Starts the three watches. `scheduler_name` tells "our" pods (I4) from others; nodes are those labelled
    /// `<node_label>=true`; I5 is judged for PodGroups in namespaces starting with `group_ns_prefix`.
    pub fn start(client: &Client, scheduler_name: &str, node_label: &str, group_ns_prefix: &str) -> Self {
        let state = Arc::new(Mutex::new(State {
            scheduler_name: scheduler_name.to_owned(),
            group_ns_prefix: group_ns_prefix.to_owned(),
            ..State::default()
        }));
        let pods = spawn_watch(
            Api::<Pod>::all(client.clone()),
            watcher::Config::default(),
            state.clone(),
            |s, ev| match ev {
                Event::Apply(p) => s.apply_pod(&p, false),
                Event::Delete(p) => s.delete_pod(&p),
                Event::Init => {
                    s.pods_relist = Some(HashMap::new());
                    s.evictions.begin_relist();
                }
                Event::InitApply(p) => s.apply_pod(&p, true),
                Event::InitDone => s.finish_pod_relist(),
            },
        );
        let nodes = spawn_watch(
            Api::<Node>::all(client.clone()),
            watcher::Config::default().labels(&format!("{node_label}=true")),
            state.clone(),
            |s, ev| match ev {
                Event::Apply(n) => s.apply_node(&n, false),
                Event::Delete(n) => {
                    if let Some(name) = n.metadata.name.as_deref() {
                        s.nodes.remove(name);
                    }
                }
                Event::Init => s.nodes_relist = Some(HashMap::new()),
                Event::InitApply(n) => s.apply_node(&n, true),
                Event::InitDone => s.finish_node_relist(),
            },
        );
        let ar = ApiResource::erase::<phalanx_api::v1beta1::PodGroup>(&());
        let groups = spawn_watch(
            Api::<DynamicObject>::all_with(client.clone(), &ar),
            watcher::Config::default(),
            state.clone(),
            |s, ev| match ev {
                Event::Apply(g) => s.apply_group(&g, false),
                Event::Delete(g) => {
                    if let Some(uid) = g.meta().uid.as_deref() {
                        s.groups.remove(uid);
                    }
                }
                Event::Init => s.groups_relist = Some(HashSet::new()),
                Event::InitApply(g) => s.apply_group(&g, true),
                Event::InitDone => s.finish_group_relist(),
            },
        );
        Self {
            state,
            tasks: vec![pods, nodes, groups],
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until every watch has delivered its first complete list.
    ///
    /// # Errors
    /// Not synced within `timeout`.
    pub async fn wait_synced(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.lock().synced.iter().all(|s| *s) {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the checker's watches did not sync in {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Number of violations recorded so far (an index for [`Checker::violations_from`]).
    pub fn violation_count(&self) -> usize {
        self.lock().violations.len()
    }

    /// Violations recorded since index `from`.
    pub fn violations_from(&self, from: usize) -> Vec<Violation> {
        self.lock()
            .violations
            .get(from..)
            .map(<[Violation]>::to_vec)
            .unwrap_or_default()
    }

    /// Reads the pod history of I7 ([`Ledger::check`], [`Ledger::evictions`]).
    pub fn with_evictions<T>(&self, f: impl FnOnce(&Ledger) -> T) -> T {
        f(&self.lock().evictions)
    }

    /// The gangs (PodGroups with a gang policy, not being deleted) of namespace `ns`.
    pub fn gangs(&self, ns: &str) -> Vec<Gang> {
        let s = self.lock();
        type Tally = (usize, usize, Vec<String>, Vec<String>);
        let mut by_group: BTreeMap<&str, Tally> = BTreeMap::new();
        for p in s.pods.values().filter(|p| p.namespace == ns) {
            if let Some(g) = p.group.as_deref() {
                let e = by_group.entry(g).or_default();
                e.0 += 1;
                if let (Some(n), false) = (&p.node, p.terminal) {
                    e.1 += 1;
                    e.2.push(format!("{}@{n}", p.name));
                } else if p.node.is_none() {
                    e.3.push(match &p.scheduled {
                        Some((st, reason, msg)) => format!("{} PodScheduled={st}/{reason}: {msg}", p.name),
                        None => format!("{} without PodScheduled", p.name),
                    });
                }
            }
        }
        let mut out: Vec<Gang> = s
            .groups
            .values()
            .filter(|g| g.namespace == ns && !g.deleting)
            .filter_map(|g| {
                let min_count = g.min_count?;
                let (pods, bound, placement, pending) =
                    by_group.get(g.name.as_str()).cloned().unwrap_or_default();
                Some(Gang {
                    name: g.name.clone(),
                    min_count,
                    pods,
                    bound,
                    placement,
                    pending,
                })
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Pods of `ns` that exist now.
    pub fn live_pods(&self, ns: &str) -> usize {
        self.lock().pods.values().filter(|p| p.namespace == ns).count()
    }

    /// I3: waits until every gang of `ns` is whole or empty. Returns how long that took, or, after `limit`, one
    /// violation per gang still partly bound.
    pub async fn await_gangs(&self, ns: &str, limit: Duration) -> (Option<Duration>, Vec<Violation>) {
        let start = tokio::time::Instant::now();
        loop {
            let broken: Vec<Gang> = self
                .gangs(ns)
                .into_iter()
                .filter(|g| !g.whole_or_empty())
                .collect();
            if broken.is_empty() {
                return (Some(start.elapsed()), Vec::new());
            }
            if start.elapsed() >= limit {
                let free = self.free_capacity();
                let v = broken
                    .into_iter()
                    .map(|g| Violation {
                        invariant: Invariant::GangsWholeOrEmpty,
                        at: Timestamp::now(),
                        object: Some((ns.to_owned(), g.name.clone())),
                        detail: format!(
                            "gang {ns}/{}: {} of {} pods bound, minCount {}, {limit:?} after the fault: {} | unbound: {} | free: {free}",
                            g.name,
                            g.bound,
                            g.pods,
                            g.min_count,
                            g.placement.join(" "),
                            g.pending.join("; ")
                        ),
                    })
                    .collect();
                return (None, v);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// I4: waits up to `settle` until every pending pod of ours in `ns` has a `PodScheduled` reason; then one
    /// violation per pod still without.
    pub async fn await_pending_reasons(&self, ns: &str, settle: Duration) -> Vec<Violation> {
        let start = tokio::time::Instant::now();
        loop {
            let missing = self.pending_without_reason(ns);
            if missing.is_empty() {
                return Vec::new();
            }
            if start.elapsed() >= settle {
                return missing
                    .into_iter()
                    .map(|(name, text)| Violation {
                        invariant: Invariant::PendingHasReason,
                        at: Timestamp::now(),
                        object: Some((ns.to_owned(), name)),
                        detail: format!("{text}, {settle:?} after the fault"),
                    })
                    .collect();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, node: Option<&str>, cpu: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "ns", "uid": uid,
                         "labels": {"scheduling.phalanx.dev/pod-group": "g"}},
            "spec": {"schedulerName": "phalanx-scheduler", "nodeName": node,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
        }))
        .unwrap()
    }

    fn node(name: &str, cpu: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": cpu, "pods": "110"}}
        }))
        .unwrap()
    }

    fn state() -> State {
        State {
            scheduler_name: "phalanx-scheduler".into(),
            group_ns_prefix: "ns".into(),
            ..State::default()
        }
    }

    #[test]
    fn overcommit_is_one_violation_per_episode() {
        let mut s = state();
        s.apply_node(&node("n", "2"), false);
        s.apply_pod(&pod("a", Some("n"), "1"), false);
        s.apply_pod(&pod("b", Some("n"), "1"), false);
        assert!(s.violations.is_empty());
        s.apply_pod(&pod("c", Some("n"), "1"), false);
        s.apply_pod(&pod("c", Some("n"), "1"), false);
        assert_eq!(s.violations.len(), 1, "{:?}", s.violations);
        assert!(
            s.violations[0]
                .detail
                .contains("cpu requests 3000m > allocatable 2000m")
        );
        s.delete_pod(&pod("c", Some("n"), "1"));
        s.apply_pod(&pod("d", Some("n"), "1"), false);
        assert_eq!(s.violations.len(), 2, "a second episode");
    }

    #[test]
    fn node_allocations_name_what_holds_each_node() {
        let mut s = state();
        s.apply_node(&node("n1", "8"), false);
        s.apply_node(&node("n2", "8"), false);
        s.apply_pod(&pod("b", Some("n1"), "4"), false);
        s.apply_pod(&pod("a", Some("n1"), "500m"), false);
        s.apply_pod(&pod("pending", None, "4"), false);
        let mut gone: Pod = pod("c", Some("n1"), "1");
        gone.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Timestamp::now(),
        ));
        s.apply_pod(&gone, false);
        let c = Checker {
            state: Arc::new(Mutex::new(s)),
            tasks: Vec::new(),
        };
        assert_eq!(
            c.node_allocations(),
            "n1 (cpu 8000m): ns/a cpu=500m, ns/b cpu=4000m, ns/c cpu=1000m Terminating; n2 (cpu 8000m): no pods"
        );
    }

    #[test]
    fn rebinding_is_a_violation() {
        let mut s = state();
        s.apply_pod(&pod("a", None, "1"), false);
        s.apply_pod(&pod("a", Some("n1"), "1"), false);
        s.apply_pod(&pod("a", Some("n2"), "1"), false);
        assert_eq!(s.violations.len(), 1);
        assert_eq!(s.violations[0].invariant, Invariant::SingleBinding);
    }

    #[test]
    fn relist_drops_pods_deleted_meanwhile_without_false_overcommit() {
        let mut s = state();
        s.apply_node(&node("n", "2"), false);
        s.apply_pod(&pod("a", Some("n"), "2"), false);
        // While the watch was down, a was deleted and b bound in its place.
        s.pods_relist = Some(HashMap::new());
        s.apply_pod(&pod("b", Some("n"), "2"), true);
        assert!(s.violations.is_empty(), "not checked before the list is complete");
        s.finish_pod_relist();
        assert!(s.violations.is_empty(), "{:?}", s.violations);
        assert_eq!(s.pods.len(), 1);
    }

    #[test]
    fn initially_scheduled_regression() {
        let mut s = state();
        let g = |status: &str| -> DynamicObject {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
                "metadata": {"name": "g", "namespace": "ns", "uid": "u"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
                "status": {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": status, "reason": "R"}]}
            }))
            .unwrap()
        };
        s.apply_group(&g("False"), false);
        s.apply_group(&g("True"), false);
        assert!(s.violations.is_empty());
        s.apply_group(&g("False"), false);
        s.apply_group(&g("False"), false);
        assert_eq!(s.violations.len(), 1);
        assert_eq!(s.violations[0].invariant, Invariant::InitiallyScheduledSticks);
        assert_eq!(s.groups["u"].min_count, Some(2));
    }
}
