//! Workload-aware preemption through the scheduling driver on a real control plane (phalanx-testenv: kube-apiserver,
//! etcd, KCM v1.37.2 and kwok).
//!
//! Every test creates its own namespace, its own kwok nodes labelled `phalanx.dev/test-ns=<ns>`, its own
//! PriorityClasses (cluster-scoped, so named `<ns>-low`, `<ns>-high`, ...; deleted when the test ends, also when it
//! fails) and its own in-process scheduler (`phalanx_driver::run`) with a unique scheduler name and a `node_selector`
//! over those nodes, so tests share the control plane without seeing each other. A pod watch per namespace records
//! every version of every pod, so a test can tell what a victim carried when it was deleted and which nodes a pod was
//! ever nominated to or bound on.
//!
//! The running low-priority pods are created with `spec.nodeName` set (kwok turns them Running); the preemptors are
//! scheduled by the driver. Pods use `terminationGracePeriodSeconds: 0`, so a victim is gone as soon as it is deleted;
//! tests that must watch a victim while it terminates give it the finalizer [`HOLD`] and remove it themselves.
//!
//! Scenario numbers are those of kubernetes `test/integration/scheduler/preemption/podgroup/podgrouppreemption_test.go`
//! (`TestPodGroupPreemption`); docs/testing.md ("Scenario index") lists them, and the setups mirror the core tests
//! `s49_*`…`s58_*` of `crates/scheduler/tests/preemption.rs`. Each test names its case.

mod common;

use common::cluster::{milli, node_of, pod_condition, pod_cpu, pod_scheduled};

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fmt::Write as _,
    future::Future,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use anyhow::{Context as _, ensure};
use futures::StreamExt;
use k8s_openapi::api::{
    core::v1::{Node, Pod},
    events::v1::Event,
    policy::v1::PodDisruptionBudget,
    scheduling::v1::PriorityClass,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use phalanx_api::v1beta1::PodGroup;
use phalanx_driver::{self as scheduling, SchedulerOptions};
use phalanx_store::{Store, StoreConfig};
use phalanx_testenv::{FakeNode, TEST_NS_LABEL, TestEnv, create_namespace, wait_for};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::{
    sync::{oneshot, watch},
    task::JoinHandle,
};
use tokio_util::sync::CancellationToken;

/// Bound of every wait: generous, since a wait ends as soon as its condition holds and only a stuck scheduler (or
/// a loaded 2-core machine running every test binary at once) comes near it.
const SETTLE: Duration = Duration::from_secs(120);

/// `scheduler_schedule_attempts_total`: one per scheduling cycle, whatever its result.
const ATTEMPTS: &str = "phalanx_scheduler_schedule_attempts_total";
/// `scheduler_tracked_objects{kind}`: what the loop has in flight (refreshed on every pass of the loop, at least
/// once a second).
const TRACKED: &str = "phalanx_scheduler_tracked_objects";

/// Finalizer that keeps a victim Terminating until the test removes it.
const HOLD: &str = "phalanx.dev/test-hold";

const DISRUPTION_TARGET: &str = "DisruptionTarget";
const PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";
const WAITING_FOR_PREEMPTION: &str = "WaitingForPreemption";

// --- Harness -----------------------------------------------------------------------------------------------------

/// What the namespace's pod watch has seen.
#[derive(Default)]
struct Seen {
    /// The latest version of every pod; for a deleted pod, the object of its Delete event (its last stored state).
    last: BTreeMap<String, Pod>,
    /// Pods whose Delete event was seen.
    deleted: BTreeSet<String>,
    /// The first version of each pod that carried a `deletionTimestamp`.
    first_terminating: BTreeMap<String, Pod>,
    /// Every `status.nominatedNodeName` each pod ever had.
    nominated: BTreeMap<String, BTreeSet<String>>,
    /// Every node each pod was ever bound to.
    nodes: BTreeMap<String, BTreeSet<String>>,
}

impl Seen {
    fn applied(&mut self, p: Pod) {
        let name = p.name_any();
        if let Some(n) = p
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.clone())
            .filter(|n| !n.is_empty())
        {
            self.nominated.entry(name.clone()).or_default().insert(n);
        }
        if let Some(n) = node_of(&p) {
            self.nodes.entry(name.clone()).or_default().insert(n.to_owned());
        }
        if p.metadata.deletion_timestamp.is_some() {
            self.first_terminating
                .entry(name.clone())
                .or_insert_with(|| p.clone());
        }
        self.last.insert(name, p);
    }

    fn deleted(&mut self, p: Pod) {
        let name = p.name_any();
        self.deleted.insert(name.clone());
        self.last.insert(name, p);
    }
}

/// Records every pod event of `api` into `seen`; `ready` fires once the initial list is done.
async fn record(api: Api<Pod>, seen: Arc<Mutex<Seen>>, ready: oneshot::Sender<()>) {
    let mut ready = Some(ready);
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    while let Some(ev) = events.next().await {
        let Ok(ev) = ev else { continue };
        let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
        match ev {
            watcher::Event::Init => {}
            watcher::Event::InitDone => {
                if let Some(tx) = ready.take() {
                    let _ = tx.send(());
                }
            }
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => s.applied(p),
            watcher::Event::Delete(p) => s.deleted(p),
        }
    }
}

/// One test's client, namespace, scheduler name, and what it created.
struct Ctx {
    client: Client,
    ns: String,
    sched: String,
    /// Pods this test created, with the node they were created on (`spec.nodeName`), if any.
    created: Mutex<BTreeMap<String, Option<String>>>,
    /// PriorityClasses this test created (deleted on drop).
    classes: Mutex<Vec<String>>,
    seen: Arc<Mutex<Seen>>,
    watch: JoinHandle<()>,
    /// Nodes added by [`Ctx::wake`] so far (their names count up).
    wakes: std::sync::atomic::AtomicUsize,
}

/// A running in-process scheduler.
struct Sched {
    shutdown: CancellationToken,
    handle: JoinHandle<anyhow::Result<()>>,
    registry: Registry,
    /// Its leader flag (a replica that starts as a follower reads false until the test sets it).
    leader: watch::Sender<bool>,
}

impl Sched {
    async fn stop(self) -> anyhow::Result<()> {
        common::report_snapshot_mismatches(&self.registry);
        self.shutdown.cancel();
        self.handle.await.context("scheduler task")?
    }

    /// Ends the replica at once, as SIGKILL would: its loop, binds, writes and memory are gone.
    async fn kill(self) {
        self.handle.abort();
        let _ = self.handle.await;
    }

    /// The value of the counter or gauge `name` with `label` in the registry's text exposition, summed over the
    /// series that match (0 when absent; `label` "" matches every series).
    fn counter(&self, name: &str, label: &str) -> f64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with(name) && l.contains(label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Sched {
    /// Scheduling cycles run so far.
    fn attempts(&self) -> f64 {
        self.counter(ATTEMPTS, "")
    }

    /// `scheduler_tracked_objects{kind="<kind>"}` now.
    fn tracked(&self, kind: &str) -> f64 {
        self.counter(TRACKED, &format!("kind=\"{kind}\""))
    }

    /// Nothing decided is still on its way to the API server: no bind waiting for a permit, no background bind,
    /// write or eviction running. Returns what it saw, for a failure message.
    fn nothing_in_flight(&self) -> (bool, String) {
        let (waiting, tasks) = (self.tracked("binds_waiting"), self.tracked("tasks"));
        (
            waiting == 0.0 && tasks == 0.0,
            format!("binds_waiting {waiting}, tasks {tasks}"),
        )
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn setup(prefix: &str) -> anyhow::Result<Ctx> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let ns = create_namespace(&client, prefix).await?;
    let sched = format!("phalanx-{ns}");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (tx, rx) = oneshot::channel();
    let watch = tokio::spawn(record(Api::namespaced(client.clone(), &ns), seen.clone(), tx));
    tokio::time::timeout(SETTLE, rx)
        .await
        .context("pod watch: initial list timed out")?
        .context("pod watch ended")?;
    Ok(Ctx {
        client,
        ns,
        sched,
        created: Mutex::new(BTreeMap::new()),
        classes: Mutex::new(Vec::new()),
        seen,
        watch,
        wakes: std::sync::atomic::AtomicUsize::new(0),
    })
}

impl Drop for Ctx {
    /// Deletes the test's PriorityClasses and releases [`HOLD`] finalizers, also when the test failed. The client
    /// belongs to the test's runtime, so this runs on a thread of its own with a fresh runtime and client.
    fn drop(&mut self) {
        self.watch.abort();
        let classes = std::mem::take(&mut *lock(&self.classes));
        let ns = self.ns.clone();
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let client = TestEnv::shared().client().await?;
                let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
                for p in pods.list(&ListParams::default()).await?.items {
                    if p.finalizers().iter().any(|f| f == HOLD) {
                        let _ = release_finalizer(&pods, &p.name_any()).await;
                    }
                }
                let pcs: Api<PriorityClass> = Api::all(client);
                for c in classes {
                    let _ = pcs.delete(&c, &DeleteParams::default()).await;
                }
                anyhow::Ok(())
            })
        });
        let _ = cleanup.join();
    }
}

async fn release_finalizer(api: &Api<Pod>, name: &str) -> anyhow::Result<()> {
    let patch = Patch::Merge(json!({ "metadata": { "finalizers": null } }));
    api.patch(name, &PatchParams::default(), &patch)
        .await
        .with_context(|| format!("removing the finalizer of {name}"))?;
    Ok(())
}

/// A pod to create; see [`Ctx::pod`].
struct PodB<'a> {
    cx: &'a Ctx,
    name: String,
    cpu: String,
    group: Option<String>,
    class: Option<String>,
    node: Option<String>,
    prefer: Option<String>,
    labels: BTreeMap<String, String>,
    hold: bool,
    grace: i64,
}

impl PodB<'_> {
    /// `terminationGracePeriodSeconds` (default 0).
    fn grace(mut self, seconds: i64) -> Self {
        self.grace = seconds;
        self
    }

    fn cpu(mut self, q: &str) -> Self {
        q.clone_into(&mut self.cpu);
        self
    }

    /// Member of PodGroup `g` (the pod-group label).
    fn group(mut self, g: &str) -> Self {
        self.group = Some(g.into());
        self
    }

    /// `priorityClassName: <ns>-<short>`.
    fn class(mut self, short: &str) -> Self {
        self.class = Some(self.cx.class(short));
        self
    }

    /// Created bound to `node` (`spec.nodeName`): a running pod.
    fn on(mut self, node: &str) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Preferred node affinity (weight 100) for `node` by `kubernetes.io/hostname`.
    fn prefer(mut self, node: &str) -> Self {
        self.prefer = Some(node.into());
        self
    }

    fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }

    /// With the finalizer [`HOLD`]: once deleted it stays Terminating until [`Ctx::release`].
    fn hold(mut self) -> Self {
        self.hold = true;
        self
    }

    async fn create(self) -> anyhow::Result<()> {
        let mut labels = self.labels;
        if let Some(g) = &self.group {
            labels.insert(phalanx_api::labels::POD_GROUP.to_string(), g.clone());
        }
        let mut spec = json!({
            "schedulerName": self.cx.sched,
            "terminationGracePeriodSeconds": self.grace,
            "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": self.cpu } } }],
        });
        if let Some(n) = &self.node {
            spec["nodeName"] = json!(n);
        }
        if let Some(c) = &self.class {
            spec["priorityClassName"] = json!(c);
        }
        if let Some(n) = &self.prefer {
            spec["affinity"] = json!({ "nodeAffinity": { "preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100,
                "preference": { "matchExpressions": [{
                    "key": "kubernetes.io/hostname", "operator": "In", "values": [n]
                }]}
            }]}});
        }
        let finalizers: Vec<&str> = if self.hold { vec![HOLD] } else { vec![] };
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": self.name, "labels": labels, "finalizers": finalizers },
            "spec": spec,
        }))?;
        phalanx_testenv::create_pod(&self.cx.client, &self.cx.ns, &pod).await?;
        lock(&self.cx.created).insert(self.name, self.node);
        Ok(())
    }
}

/// A PodGroup to create; see [`Ctx::group`].
struct GroupB<'a> {
    cx: &'a Ctx,
    name: String,
    gang: Option<i32>,
    class: Option<String>,
    all: bool,
    delay: Option<i32>,
}

impl GroupB<'_> {
    /// `spec.preemptionDelaySeconds`.
    fn delay(mut self, seconds: i32) -> Self {
        self.delay = Some(seconds);
        self
    }

    fn gang(mut self, min_count: i32) -> Self {
        self.gang = Some(min_count);
        self
    }

    fn class(mut self, short: &str) -> Self {
        self.class = Some(self.cx.class(short));
        self
    }

    /// `disruptionMode: {all: {}}`.
    fn all(mut self) -> Self {
        self.all = true;
        self
    }

    async fn create(self) -> anyhow::Result<()> {
        let policy = match self.gang {
            Some(n) => json!({ "gang": { "minCount": n } }),
            None => json!({ "basic": {} }),
        };
        let mut spec = json!({ "schedulingPolicy": policy });
        if let Some(c) = &self.class {
            spec["priorityClassName"] = json!(c);
        }
        if self.all {
            spec["disruptionMode"] = json!({ "all": {} });
        }
        if let Some(d) = self.delay {
            spec["preemptionDelaySeconds"] = json!(d);
        }
        let pg: PodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.phalanx.dev/v1beta1",
            "kind": "PodGroup",
            "metadata": { "name": self.name },
            "spec": spec,
        }))?;
        self.cx
            .groups()
            .create(&PostParams::default(), &pg)
            .await
            .with_context(|| format!("creating PodGroup {}", self.name))?;
        Ok(())
    }
}

impl Ctx {
    fn start(&self) -> Sched {
        self.start_replica(true)
    }

    /// A scheduler replica of this test's scheduler name; `leader` = whether it leads from the start.
    fn start_replica(&self, leader: bool) -> Sched {
        let opts = SchedulerOptions {
            scheduler_name: self.sched.clone(),
            node_selector: Some(format!("{TEST_NS_LABEL}={}", self.ns)),
            ..SchedulerOptions::default()
        };
        let store = Store::start(self.client.clone(), StoreConfig::default());
        let (tx, rx) = watch::channel(leader);
        let shutdown = CancellationToken::new();
        let mut registry = Registry::with_prefix("phalanx");
        let fut = scheduling::run(
            self.client.clone(),
            store,
            opts,
            rx,
            shutdown.clone(),
            &mut registry,
        );
        Sched {
            shutdown,
            handle: tokio::spawn(fut),
            registry,
            leader: tx,
        }
    }

    /// The full name of this test's PriorityClass `short`.
    fn class(&self, short: &str) -> String {
        format!("{}-{short}", self.ns)
    }

    /// Creates PriorityClasses `<ns>-<short>` with the given values (`PreemptLowerPriority`).
    async fn classes(&self, classes: &[(&str, i32)]) -> anyhow::Result<()> {
        for (short, value) in classes {
            self.priority_class(short, *value, false).await?;
        }
        Ok(())
    }

    async fn priority_class(&self, short: &str, value: i32, never: bool) -> anyhow::Result<()> {
        let name = self.class(short);
        let pc: PriorityClass = serde_json::from_value(json!({
            "metadata": { "name": name },
            "value": value,
            "preemptionPolicy": if never { "Never" } else { "PreemptLowerPriority" },
            "description": format!("phalanx preemption test {}", self.ns),
        }))?;
        Api::<PriorityClass>::all(self.client.clone())
            .create(&PostParams::default(), &pc)
            .await
            .with_context(|| format!("creating PriorityClass {name}"))?;
        lock(&self.classes).push(name);
        Ok(())
    }

    async fn node(&self, name: &str, cpu: &str) -> anyhow::Result<String> {
        let full = format!("{}-{name}", self.ns);
        FakeNode::new(&full)
            .cpu(cpu)
            .memory("32Gi")
            .pods(110)
            .test_namespace(&self.ns)
            .create(&self.client)
            .await?;
        Ok(full)
    }

    fn pod(&self, name: &str) -> PodB<'_> {
        PodB {
            cx: self,
            name: name.into(),
            cpu: "1".into(),
            group: None,
            class: None,
            node: None,
            prefer: None,
            labels: BTreeMap::new(),
            hold: false,
            grace: 0,
        }
    }

    fn group(&self, name: &str) -> GroupB<'_> {
        GroupB {
            cx: self,
            name: name.into(),
            gang: None,
            class: None,
            all: false,
            delay: None,
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn groups(&self) -> Api<PodGroup> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn events(&self) -> Api<Event> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Removes [`HOLD`] from `name`, so its deletion completes.
    async fn release(&self, name: &str) -> anyhow::Result<()> {
        release_finalizer(&self.pods(), name).await
    }

    /// Node of every pod in the namespace that is bound (terminating pods included).
    async fn bindings(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let list = self.pods().list(&ListParams::default()).await?;
        Ok(list
            .items
            .iter()
            .filter_map(|p| Some((p.name_any(), node_of(p)?.to_owned())))
            .collect())
    }

    /// Pods this test created that are gone or terminating. The tests delete no pod themselves, so these are the
    /// preemption victims.
    async fn evicted(&self) -> anyhow::Result<BTreeSet<String>> {
        let live: HashMap<String, Pod> = self
            .pods()
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|p| (p.name_any(), p))
            .collect();
        let created: Vec<String> = lock(&self.created).keys().cloned().collect();
        Ok(created
            .into_iter()
            .filter(|n| {
                live.get(n)
                    .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
            })
            .collect())
    }

    /// The namespace as a test failure should show it: every pod (node, nomination, priority, conditions), every
    /// PodGroup condition, the events, and what the pod watch saw deleted.
    async fn report(&self) -> String {
        let mut out = format!("--- namespace {} (scheduler {}) ---\n", self.ns, self.sched);
        match self.pods().list(&ListParams::default()).await {
            Ok(l) => {
                for p in &l.items {
                    let st = p.status.as_ref();
                    let _ = writeln!(
                        out,
                        "pod {}: node={:?} nominated={:?} priority={:?} phase={:?} terminating={} finalizers={:?}",
                        p.name_any(),
                        node_of(p),
                        st.and_then(|s| s.nominated_node_name.as_deref()),
                        p.spec.as_ref().and_then(|s| s.priority),
                        st.and_then(|s| s.phase.as_deref()),
                        p.metadata.deletion_timestamp.is_some(),
                        p.finalizers(),
                    );
                    for c in st.and_then(|s| s.conditions.as_ref()).into_iter().flatten() {
                        if c.type_ == "PodScheduled" || c.type_ == DISRUPTION_TARGET {
                            let _ = writeln!(
                                out,
                                "    {}={}/{}: {}",
                                c.type_,
                                c.status,
                                c.reason.as_deref().unwrap_or_default(),
                                c.message.as_deref().unwrap_or_default()
                            );
                        }
                    }
                }
            }
            Err(e) => {
                let _ = writeln!(out, "listing pods: {e}");
            }
        }
        match self.groups().list(&ListParams::default()).await {
            Ok(l) => {
                for g in &l.items {
                    let _ = writeln!(out, "PodGroup {}:", g.name_any());
                    for c in g.status.iter().flat_map(|s| s.conditions.iter()) {
                        let _ = writeln!(out, "    {}={}/{}: {}", c.type_, c.status, c.reason, c.message);
                    }
                }
            }
            Err(e) => {
                let _ = writeln!(out, "listing PodGroups: {e}");
            }
        }
        match self.events().list(&ListParams::default()).await {
            Ok(l) => {
                for e in &l.items {
                    let _ = writeln!(
                        out,
                        "event {} {:?} on {:?}: {}",
                        e.type_.as_deref().unwrap_or_default(),
                        e.reason.as_deref().unwrap_or_default(),
                        e.regarding.as_ref().and_then(|r| r.name.as_deref()),
                        e.note.as_deref().unwrap_or_default()
                    );
                }
            }
            Err(e) => {
                let _ = writeln!(out, "listing events: {e}");
            }
        }
        let (deleted, nominated) = {
            let s = lock(&self.seen);
            (s.deleted.clone(), s.nominated.clone())
        };
        let _ = writeln!(out, "watch: deleted {deleted:?}; nominations seen {nominated:?}");
        out
    }

    /// `e` with the namespace's state attached.
    async fn fail<T>(&self, e: anyhow::Error) -> anyhow::Result<T> {
        Err(e.context(self.report().await))
    }

    /// [`wait_for`] with [`SETTLE`], attaching the namespace's state on timeout.
    async fn wait<T, F, Fut>(&self, what: &str, probe: F) -> anyhow::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<Option<T>>>,
    {
        match wait_for(what, SETTLE, probe).await {
            Ok(v) => Ok(v),
            Err(e) => self.fail(e).await,
        }
    }

    /// `ensure!` with the namespace's state attached.
    async fn check(&self, ok: bool, msg: impl FnOnce() -> String) -> anyhow::Result<()> {
        if ok {
            return Ok(());
        }
        self.fail(anyhow::anyhow!(msg())).await
    }

    async fn wait_running(&self, names: &[&str]) -> anyhow::Result<()> {
        self.wait(&format!("pods {names:?} Running"), || async {
            let l = self.pods().list(&ListParams::default()).await?;
            Ok(names
                .iter()
                .all(|n| {
                    l.items.iter().any(|p| {
                        p.name_any() == *n
                            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                })
                .then_some(()))
        })
        .await
    }

    /// Waits until every `(pod, node)` pair is bound as given; returns all bindings.
    async fn wait_bound_on(&self, want: &[(&str, &str)]) -> anyhow::Result<BTreeMap<String, String>> {
        self.wait(&format!("pods bound as {want:?}"), || async {
            let b = self.bindings().await?;
            Ok(want
                .iter()
                .all(|(p, n)| b.get(*p).map(String::as_str) == Some(*n))
                .then_some(b))
        })
        .await
    }

    /// Waits until exactly `count` of `names` are bound; returns all bindings.
    async fn wait_bound_count(
        &self,
        names: &[&str],
        count: usize,
    ) -> anyhow::Result<BTreeMap<String, String>> {
        self.wait(&format!("{count} of {names:?} bound"), || async {
            let b = self.bindings().await?;
            Ok((names.iter().filter(|n| b.contains_key(**n)).count() == count).then_some(b))
        })
        .await
    }

    /// Adds a 100m node (too small for any pod of these tests) and waits until `s` has run a scheduling cycle after
    /// it: the positive sign that the scheduler has seen the cluster as it is now. A node event wakes every
    /// unschedulable entity (`crates/scheduler/src/queue`), as upstream's `NodeAdd` moves unschedulable pods back to
    /// the active queue (kubernetes `pkg/scheduler/backend/queue/scheduling_queue.go`). Then waits until nothing that
    /// cycle decided is still on its way to the API server. Returns the attempts seen, for messages.
    async fn wake(&self, s: &Sched) -> anyhow::Result<f64> {
        let before = s.attempts();
        let i = self.wakes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.node(&format!("wake-{i}"), "100m").await?;
        self.wait(
            &format!("a scheduling cycle after node wake-{i} was added (attempts were {before})"),
            || async { Ok((s.attempts() > before).then_some(())) },
        )
        .await?;
        let last = Mutex::new(String::new());
        let after = self
            .wait("nothing decided still in flight", || async {
                let (idle, what) = s.nothing_in_flight();
                *lock(&last) = what;
                Ok(idle.then(|| s.attempts()))
            })
            .await
            .map_err(|e| e.context(lock(&last).clone()))?;
        Ok(after)
    }

    /// Negative check: none of `names` is bound, now or ever (the watch's history), after [`Ctx::wake`] has seen `s`
    /// retry with the cluster as it is, so that neither a slow machine nor a fast one decides the outcome.
    async fn stays_unbound(&self, s: &Sched, names: &[&str]) -> anyhow::Result<()> {
        let attempts = self.wake(s).await?;
        let b = self.bindings().await?;
        let ever = lock(&self.seen).nodes.clone();
        for n in names {
            if let Some(node) = b.get(*n).or_else(|| ever.get(*n).and_then(|s| s.iter().next())) {
                return self
                    .fail(anyhow::anyhow!(
                        "pod {n} was bound to {node} (after {attempts} scheduling attempts), expected it to stay \
                         pending"
                    ))
                    .await;
            }
        }
        Ok(())
    }

    /// Waits for `PodScheduled=False` with `reason` on `name` whose message contains `contains`; returns the message.
    async fn wait_pod_reason(&self, name: &str, reason: &str, contains: &str) -> anyhow::Result<String> {
        let what = format!("pod {name} PodScheduled=False/{reason} with a message containing {contains:?}");
        self.wait(&what, || async {
            let p = self.pods().get(name).await?;
            Ok(pod_scheduled(&p)
                .filter(|(s, r, m)| s == "False" && r == reason && m.contains(contains))
                .map(|(_, _, m)| m))
        })
        .await
    }

    /// Waits for the group condition `type_` with `status`/`reason` and a message containing `contains`.
    async fn wait_group_condition(
        &self,
        name: &str,
        type_: &str,
        status: &str,
        reason: &str,
        contains: &str,
    ) -> anyhow::Result<String> {
        let what =
            format!("PodGroup {name} {type_}={status}/{reason} with a message containing {contains:?}");
        self.wait(&what, || async {
            let g = self.groups().get(name).await?;
            Ok(g.status
                .iter()
                .flat_map(|s| s.conditions.iter())
                .find(|c| {
                    c.type_ == type_
                        && c.status == status
                        && c.reason == reason
                        && c.message.contains(contains)
                })
                .map(|c| c.message.clone()))
        })
        .await
    }

    async fn wait_group(
        &self,
        name: &str,
        status: &str,
        reason: &str,
        contains: &str,
    ) -> anyhow::Result<String> {
        let t = phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED;
        self.wait_group_condition(name, t, status, reason, contains).await
    }

    /// The `DisruptionTarget` condition of PodGroup `name`, if any.
    async fn group_disruption(&self, name: &str) -> anyhow::Result<Option<(String, String)>> {
        let g = self.groups().get(name).await?;
        Ok(g.status
            .iter()
            .flat_map(|s| s.conditions.iter())
            .find(|c| c.type_ == DISRUPTION_TARGET)
            .map(|c| (c.status.clone(), c.reason.clone())))
    }

    /// Waits until the API shows `name` Terminating (deletionTimestamp set); returns the pod.
    async fn wait_terminating(&self, name: &str) -> anyhow::Result<Pod> {
        self.wait(&format!("pod {name} Terminating"), || async {
            let p = self.pods().get(name).await?;
            Ok(p.metadata.deletion_timestamp.is_some().then_some(p))
        })
        .await
    }

    /// Waits until the API shows `status.nominatedNodeName == node` on each of `names`.
    async fn wait_nominated_now(&self, names: &[&str], node: &str) -> anyhow::Result<()> {
        self.wait(&format!("pods {names:?} nominated to {node}"), || async {
            let l = self.pods().list(&ListParams::default()).await?;
            Ok(names
                .iter()
                .all(|n| {
                    l.items.iter().any(|p| {
                        p.name_any() == *n
                            && p.status.as_ref().and_then(|s| s.nominated_node_name.as_deref()) == Some(node)
                    })
                })
                .then_some(()))
        })
        .await
    }

    /// Waits until the watch has seen a nomination on each of `names`; each must have been nominated to exactly
    /// one node. Returns pod → nominated node.
    async fn nominations(&self, names: &[&str]) -> anyhow::Result<BTreeMap<String, String>> {
        let seen = self
            .wait(&format!("nominations of {names:?}"), || async {
                let s = lock(&self.seen);
                Ok(names
                    .iter()
                    .all(|n| s.nominated.contains_key(*n))
                    .then(|| s.nominated.clone()))
            })
            .await?;
        let mut out = BTreeMap::new();
        for n in names {
            let nodes = &seen[*n];
            self.check(nodes.len() == 1, || {
                format!("pod {n} was nominated to {nodes:?}, expected exactly one node")
            })
            .await?;
            out.insert((*n).to_owned(), nodes.iter().next().cloned().unwrap_or_default());
        }
        Ok(out)
    }

    /// Asserts that exactly `victims` were evicted, each as upstream's preemption does it: `DisruptionTarget=True`
    /// reason `PreemptionByScheduler` with `<schedulerName>: preempting to accommodate a higher priority pod` on the
    /// object before (or when) it is deleted, and a Normal `Preempted` event
    /// `Preempted by <preemptor> on node <node>` whose preemptor names `preemptor`.
    ///
    /// "Exactly" is judged once `s` has settled (see [`Ctx::settled`]), not after a pause.
    async fn assert_victims(&self, s: &Sched, victims: &[&str], preemptor: &str) -> anyhow::Result<()> {
        let want: BTreeSet<String> = victims.iter().map(|v| (*v).to_owned()).collect();
        self.wait(&format!("victims {victims:?} evicted"), || async {
            Ok(self.evicted().await?.is_superset(&want).then_some(()))
        })
        .await?;
        // Nothing else goes afterwards either: judged once the scheduler has nothing left to do.
        self.settled(s).await?;
        let got = self.evicted().await?;
        self.check(got == want, || {
            format!("evicted {got:?}, expected exactly {want:?}")
        })
        .await?;
        let message = format!("{}: preempting to accommodate a higher priority pod", self.sched);
        for v in victims {
            let (last, first_terminating) = self
                .wait(
                    &format!("the watch to see {v} deleted or terminating"),
                    || async {
                        let s = lock(&self.seen);
                        let gone = s.deleted.contains(*v) || s.first_terminating.contains_key(*v);
                        Ok(gone.then(|| (s.last.get(*v).cloned(), s.first_terminating.get(*v).cloned())))
                    },
                )
                .await?;
            for (what, p) in [
                ("last state", last),
                ("first Terminating version", first_terminating),
            ] {
                let Some(p) = p else { continue };
                let c = disruption_target(&p);
                self.check(
                    c.as_ref().is_some_and(|(s, r, m)| {
                        s == "True" && r == PREEMPTION_BY_SCHEDULER && *m == message
                    }),
                    || {
                        format!(
                            "victim {v} ({what}) carries DisruptionTarget {c:?}, expected \
                             True/{PREEMPTION_BY_SCHEDULER}/{message:?}"
                        )
                    },
                )
                .await?;
            }
            let node = lock(&self.created).get(*v).cloned().flatten();
            self.check_preempted_event(v, node.as_deref(), preemptor).await?;
        }
        Ok(())
    }

    async fn check_preempted_event(
        &self,
        victim: &str,
        node: Option<&str>,
        preemptor: &str,
    ) -> anyhow::Result<()> {
        let e = self
            .wait(&format!("a Preempted event on {victim}"), || async {
                let l = self.events().list(&ListParams::default()).await?;
                Ok(l.items.into_iter().find(|e| {
                    e.reason.as_deref() == Some("Preempted")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(victim)
                }))
            })
            .await?;
        let note = e.note.clone().unwrap_or_default();
        let on_node = node.is_none_or(|n| note.ends_with(&format!(" on node {n}")));
        // Upstream names the preemptor by UID ("Preempted by pod <uid> on node <node>"): the pod named `preemptor`,
        // the PodGroup named `preemptor`, or one of its member pods.
        let mut uids: Vec<String> = Vec::new();
        if let Ok(p) = self.pods().get(preemptor).await {
            uids.extend(p.metadata.uid);
        }
        if let Ok(g) = self.groups().get(preemptor).await {
            uids.extend(g.metadata.uid);
        }
        let members =
            ListParams::default().labels(&format!("{}={preemptor}", phalanx_api::labels::POD_GROUP));
        for p in self.pods().list(&members).await?.items {
            uids.extend(p.metadata.uid);
        }
        self.check(
            e.type_.as_deref() == Some("Normal")
                && (note.starts_with("Preempted by pod ") || note.starts_with("Preempted by pod group "))
                && uids.iter().any(|u| note.contains(u.as_str()))
                && !note.contains('/')
                && on_node,
            || {
                format!(
                    "Preempted event on {victim}: type {:?}, note {note:?}; expected Normal, \
                     \"Preempted by pod <uid of {preemptor} or a member: {uids:?}> on node {node:?}\"",
                    e.type_
                )
            },
        )
        .await
    }

    /// Waits until `s` has nothing left to do or on its way: no entity active or backing off, no preemption in
    /// flight, nothing decided still in flight ([`Sched::nothing_in_flight`]). The positive sign before a check that
    /// something did not happen (a further eviction, a condition dropped).
    async fn settled(&self, s: &Sched) -> anyhow::Result<()> {
        let last = Mutex::new(String::new());
        let res = self
            .wait(
                "the scheduler settled (nothing queued, in flight or preempting)",
                || async {
                    let active = s.counter("phalanx_scheduler_pending_entities", "queue=\"active\"");
                    let backoff = s.counter("phalanx_scheduler_pending_entities", "queue=\"backoff\"");
                    let preempting = s.tracked("preemptions_in_flight");
                    let (idle, what) = s.nothing_in_flight();
                    *lock(&last) = format!(
                        "active {active}, backoff {backoff}, preemptions_in_flight {preempting}, {what}"
                    );
                    Ok((idle && active == 0.0 && backoff == 0.0 && preempting == 0.0).then_some(()))
                },
            )
            .await;
        res.map_err(|e| e.context(lock(&last).clone()))
    }

    /// Asserts that no preemption happened: nothing evicted, no pod marked, no `Preempted` event, no nomination.
    async fn assert_no_preemption(&self) -> anyhow::Result<()> {
        let got = self.evicted().await?;
        self.check(got.is_empty(), || format!("evicted {got:?}, expected nothing"))
            .await?;
        let (marked, nominated) = {
            let s = lock(&self.seen);
            let marked: Vec<String> = s
                .last
                .values()
                .filter(|p| disruption_target(p).is_some())
                .map(ResourceExt::name_any)
                .collect();
            (marked, s.nominated.clone())
        };
        self.check(marked.is_empty(), || {
            format!("pods marked DisruptionTarget: {marked:?}")
        })
        .await?;
        self.check(nominated.is_empty(), || {
            format!("nominations written: {nominated:?}")
        })
        .await?;
        let preempted: Vec<String> = self
            .events()
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("Preempted"))
            .filter_map(|e| e.regarding.as_ref()?.name.clone())
            .collect();
        self.check(preempted.is_empty(), || {
            format!("Preempted events on {preempted:?}")
        })
        .await
    }

    /// Fails if any node of this test has more CPU requested by bound pods than it has.
    async fn no_overcommit(&self) -> anyhow::Result<()> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let lp = ListParams::default().labels(&format!("{TEST_NS_LABEL}={}", self.ns));
        let mut cap = HashMap::new();
        for n in nodes.list(&lp).await?.items {
            let q = n
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| a.get("cpu"))
                .cloned();
            cap.insert(n.name_any(), milli(&q.map(|q| q.0).unwrap_or_default()));
        }
        let mut used: HashMap<String, i64> = HashMap::new();
        for p in self.pods().list(&ListParams::default()).await?.items {
            if let Some(n) = node_of(&p).filter(|n| cap.contains_key(*n)) {
                *used.entry(n.to_owned()).or_default() += pod_cpu(&p);
            }
        }
        for (n, u) in &used {
            self.check(u <= &cap[n], || {
                format!("node {n} overcommitted: {u}m requested of {}m", cap[n])
            })
            .await?;
        }
        Ok(())
    }
}

fn disruption_target(p: &Pod) -> Option<(String, String, String)> {
    pod_condition(p, DISRUPTION_TARGET)
}

/// How many of `pods` are mapped to each node in `m`.
fn per_node(m: &BTreeMap<String, String>, pods: &[&str]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for p in pods {
        if let Some(n) = m.get(*p) {
            *out.entry(n.clone()).or_insert(0) += 1;
        }
    }
    out
}

/// Whether `m` contains the number `n` as a token of its own ("waiting for 2 preempted pods").
fn mentions_number(m: &str, n: usize) -> bool {
    m.split(|c: char| !c.is_ascii_digit()).any(|t| t == n.to_string())
}

// --- S49–S58 -----------------------------------------------------------------------------------------------------

/// Three 1-CPU p10 pods fill a 3-CPU node; a group of three 1-CPU p100 pods (gang(3) or basic) evicts all three, is
/// nominated to the node and binds there.
async fn s49(prefix: &str, gang: bool) -> anyhow::Result<()> {
    let cx = setup(prefix).await?;
    cx.classes(&[("low", 10), ("high", 100)]).await?;
    let n1 = cx.node("node1", "3").await?;
    let lows = ["low-1", "low-2", "low-3"];
    for p in lows {
        cx.pod(p).class("low").on(&n1).create().await?;
    }
    cx.wait_running(&lows).await?;
    let s = cx.start();
    let highs = ["high-1", "high-2", "high-3"];
    for p in highs {
        cx.pod(p).class("high").group("pg1").create().await?;
    }
    let g = cx.group("pg1").class("high");
    if gang { g.gang(3) } else { g }.create().await?;
    cx.wait_bound_on(&highs.map(|p| (p, n1.as_str()))).await?;
    cx.assert_victims(&s, &lows, "pg1").await?;
    let noms = cx.nominations(&highs).await?;
    cx.check(noms.values().all(|n| *n == n1), || {
        format!("nominations {noms:?}, expected all on {n1}")
    })
    .await?;
    cx.wait_group("pg1", "True", "Scheduled", "").await?;
    cx.no_overcommit().await?;
    s.stop().await
}

/// S49, gang: three low-priority pods are preempted for a gang(3); the preemptors are nominated, then bind.
///
/// Upstream: kubernetes `test/integration/scheduler/preemption/podgroup/podgrouppreemption_test.go`,
/// `TestPodGroupPreemption`, case "Full PodGroup Preemption".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s49_full_preemption_gang() -> anyhow::Result<()> {
    s49("s49g", true).await
}

/// `spec.preemptionDelaySeconds` (issue 39): the gang of S49 could preempt at once, but first waits its delay, so
/// that a cluster autoscaler can add nodes instead: meanwhile every member carries `PodScheduled=False/Unschedulable`
/// (what Karpenter and Cluster Autoscaler act on) with the deadline in its message, and nothing is evicted. Once the
/// delay is over, with no node added, the scheduler wakes the gang itself and it preempts as S49 does. (S49 above is
/// the same gang with no delay: victims go at once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemption_delay_holds_the_victims_until_it_ends() -> anyhow::Result<()> {
    const DELAY: u64 = 8;
    let cx = setup("pdelay").await?;
    cx.classes(&[("low", 10), ("high", 100)]).await?;
    let n1 = cx.node("node1", "3").await?;
    let lows = ["low-1", "low-2", "low-3"];
    for p in lows {
        cx.pod(p).class("low").on(&n1).create().await?;
    }
    cx.wait_running(&lows).await?;
    let s = cx.start();
    let highs = ["high-1", "high-2", "high-3"];
    for p in highs {
        cx.pod(p).class("high").group("pg1").create().await?;
    }
    let created = std::time::Instant::now();
    cx.group("pg1")
        .gang(3)
        .class("high")
        .delay(DELAY as i32)
        .create()
        .await?;
    let held = format!("(preemptionDelaySeconds {DELAY}), for a cluster autoscaler to add nodes first");
    for p in highs {
        let m = cx.wait_pod_reason(p, "Unschedulable", &held).await?;
        cx.check(m.contains("preempting 3 victims would make room"), || {
            format!("pod {p}: message {m:?} should say what preemption would do")
        })
        .await?;
    }
    cx.wait_group("pg1", "False", "Unschedulable", &held).await?;
    let early = cx.evicted().await?;
    let before_deadline = created.elapsed() < std::time::Duration::from_secs(DELAY);
    cx.check(early.is_empty() || !before_deadline, || {
        format!("evicted {early:?} within the delay")
    })
    .await?;
    cx.wait_bound_on(&highs.map(|p| (p, n1.as_str()))).await?;
    let took = created.elapsed();
    cx.check(took >= std::time::Duration::from_secs(DELAY), || {
        format!("the gang bound {took:?} after its creation, before its {DELAY} s delay ended")
    })
    .await?;
    cx.assert_victims(&s, &lows, "pg1").await?;
    cx.wait_group("pg1", "True", "Scheduled", "").await?;
    cx.no_overcommit().await?;
    s.stop().await
}

/// S49, basic: the same for a basic group.
///
/// Upstream: `TestPodGroupPreemption`, case "Full PodGroup Preemption for basic policy".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s49_full_preemption_basic() -> anyhow::Result<()> {
    s49("s49b", false).await
}

/// S50: a 2-CPU p10 pod fills node1, a 1-CPU p10 pod half-fills node2; a gang(3) of 1-CPU p100 pods prefers node1
/// (preferred node affinity stands in for upstream's score plugin, as in the core test). Only the pod on node1 is
/// preempted: two preemptors are nominated to node1, one to node2 next to low-2, which stays.
///
/// Reproducible on the real cluster: evicting low-2 alone could not make room for three pods, and with both gone the
/// preference puts two pods on node1, so low-2 is reprieved.
///
/// Upstream: `TestPodGroupPreemption`, case "Partial Preemption".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s50_partial_preemption() -> anyhow::Result<()> {
    let cx = setup("s50").await?;
    cx.classes(&[("low", 10), ("high", 100)]).await?;
    let n1 = cx.node("node1", "2").await?;
    let n2 = cx.node("node2", "2").await?;
    cx.pod("low-1").cpu("2").class("low").on(&n1).create().await?;
    cx.pod("low-2").class("low").on(&n2).create().await?;
    cx.wait_running(&["low-1", "low-2"]).await?;
    let s = cx.start();
    let highs = ["high-1", "high-2", "high-3"];
    for p in highs {
        cx.pod(p).class("high").group("pg1").prefer(&n1).create().await?;
    }
    cx.group("pg1").gang(3).class("high").create().await?;
    let b = cx.wait_bound_count(&highs, 3).await?;
    cx.assert_victims(&s, &["low-1"], "pg1").await?;
    let want = BTreeMap::from([(n1.clone(), 2), (n2.clone(), 1)]);
    let noms = cx.nominations(&highs).await?;
    let got = per_node(&noms, &highs);
    cx.check(got == want, || {
        format!("nominations per node {got:?}, expected {want:?}")
    })
    .await?;
    let got = per_node(&b, &highs);
    cx.check(got == want, || {
        format!("bindings per node {got:?}, expected {want:?}")
    })
    .await?;
    // low-2 was reprieved: it stays on node2, next to the preemptor nominated there.
    cx.wait_bound_on(&[("low-2", n2.as_str())]).await?;
    cx.wait_group("pg1", "True", "Scheduled", "").await?;
    cx.no_overcommit().await?;
    s.stop().await
}

/// S51: a p10 pod on node1 and a p5 pod on node2 (1 CPU each, 2-CPU nodes); a basic group of three 1-CPU p100 pods
/// preferring node1. Two bind where there is room (one per node); the leftover preempts the p5 pod on node2 although
/// the preference points at node1 (victim-aware choice), and binds there. low-1 stays.
///
/// Upstream: `TestPodGroupPreemption`, case "Partial Preemption with basic policy".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s51_victim_aware_placement() -> anyhow::Result<()> {
    let cx = setup("s51").await?;
    cx.classes(&[("very-low", 5), ("low", 10), ("high", 100)]).await?;
    let n1 = cx.node("node1", "2").await?;
    let n2 = cx.node("node2", "2").await?;
    cx.pod("low-1").class("low").on(&n1).create().await?;
    cx.pod("very-low-1").class("very-low").on(&n2).create().await?;
    cx.wait_running(&["low-1", "very-low-1"]).await?;
    let s = cx.start();
    let highs = ["high-1", "high-2", "high-3"];
    for p in highs {
        cx.pod(p).class("high").group("pg1").prefer(&n1).create().await?;
    }
    cx.group("pg1").class("high").create().await?;
    let b = cx.wait_bound_count(&highs, 3).await?;
    cx.assert_victims(&s, &["very-low-1"], "pg1").await?;
    let want = BTreeMap::from([(n1.clone(), 1), (n2.clone(), 2)]);
    let got = per_node(&b, &highs);
    cx.check(got == want, || {
        format!("bindings per node {got:?}, expected {want:?}")
    })
    .await?;
    cx.wait_bound_on(&[("low-1", n1.as_str())]).await?;
    cx.no_overcommit().await?;
    s.stop().await
}

/// S52: on a 3-CPU node, low-1 and low-2 (label app=foo) are covered by a real policy/v1 PodDisruptionBudget with
/// minAvailable 2 (disruptionsAllowed 0, computed by KCM's disruption controller before the preemptor exists); low-3
/// is not. A gang(2) of 500m p100 pods preempts only low-3.
///
/// Upstream: `TestPodGroupPreemption`, case "PDB Violation Handling (Reprieve)".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s52_pdb_reprieve() -> anyhow::Result<()> {
    let cx = setup("s52").await?;
    cx.classes(&[("low", 10), ("high", 100)]).await?;
    let n1 = cx.node("node1", "3").await?;
    for p in ["low-1", "low-2"] {
        cx.pod(p)
            .class("low")
            .label("app", "foo")
            .on(&n1)
            .create()
            .await?;
    }
    cx.pod("low-3").class("low").on(&n1).create().await?;
    cx.wait_running(&["low-1", "low-2", "low-3"]).await?;
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": { "name": "foo-pdb" },
        "spec": { "minAvailable": 2, "selector": { "matchLabels": { "app": "foo" } } },
    }))?;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cx.client.clone(), &cx.ns);
    pdbs.create(&PostParams::default(), &pdb).await?;
    cx.wait("foo-pdb status computed by the disruption controller", || async {
        let p = pdbs.get("foo-pdb").await?;
        let done = p.status.as_ref().is_some_and(|s| {
            s.observed_generation.is_some()
                && s.observed_generation == p.metadata.generation
                && s.expected_pods == Some(2)
                && s.current_healthy == Some(2)
                && s.desired_healthy == Some(2)
                && s.disruptions_allowed == Some(0)
        });
        Ok(done.then_some(()))
    })
    .await?;
    let s = cx.start();
    for p in ["high-1", "high-2"] {
        cx.pod(p).cpu("500m").class("high").group("pg1").create().await?;
    }
    cx.group("pg1").gang(2).class("high").create().await?;
    cx.wait_bound_on(&[("high-1", n1.as_str()), ("high-2", n1.as_str())])
        .await?;
    cx.assert_victims(&s, &["low-3"], "pg1").await?;
    cx.wait_bound_on(&[("low-1", n1.as_str()), ("low-2", n1.as_str())])
        .await?;
    cx.no_overcommit().await?;
    s.stop().await
}

/// S53: two 1-CPU p10 pods on each of two 2-CPU nodes; a gang(4) of 1-CPU p100 pods evicts all four, two preemptors
/// are nominated to each node and two bind on each.
///
/// Upstream: `TestPodGroupPreemption`, case "Multi-node Preemption".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s53_multi_node() -> anyhow::Result<()> {
    let cx = setup("s53").await?;
    cx.classes(&[("low", 10), ("high", 100)]).await?;
    let n1 = cx.node("node1", "2").await?;
    let n2 = cx.node("node2", "2").await?;
    for (p, n) in [("low-1", &n1), ("low-2", &n1), ("low-3", &n2), ("low-4", &n2)] {
        cx.pod(p).class("low").on(n).create().await?;
    }
    let lows = ["low-1", "low-2", "low-3", "low-4"];
    cx.wait_running(&lows).await?;
    let s = cx.start();
    let highs = ["high-1", "high-2", "high-3", "high-4"];
    for p in highs {
        cx.pod(p).class("high").group("pg1").create().await?;
    }
    cx.group("pg1").gang(4).class("high").create().await?;
    let b = cx.wait_bound_count(&highs, 4).await?;
    cx.assert_victims(&s, &lows, "pg1").await?;
    let want = BTreeMap::from([(n1.clone(), 2), (n2.clone(), 2)]);
    let noms = cx.nominations(&highs).await?;
    let got = per_node(&noms, &highs);
    cx.check(got == want, || {
        format!("nominations per node {got:?}, expected {want:?}")
    })
    .await?;
    let got = per_node(&b, &highs);
    cx.check(got == want, || {
        format!("bindings per node {got:?}, expected {want:?}")
    })
    .await?;
    cx.no_overcommit().await?;
    s.stop().await
}

/// S54: a p500 pod keeps one CPU of a 3-CPU node, two p10 pods the others; a gang(3) of 1-CPU p100 pods would not fit
/// even without the p10 pods: nothing is evicted or nominated, the gang stays Unschedulable and its condition says
/// why (`pod group preemption: ...`).
///
/// Upstream: `TestPodGroupPreemption`, case "Insufficient Resources (No Preemption)".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s54_cannot_help() -> anyhow::Result<()> {
    let cx = setup("s54").await?;
    cx.classes(&[("low", 10), ("mid", 500), ("high", 100)]).await?;
    let n1 = cx.node("node1", "3").await?;
    cx.pod("mid-1").class("mid").on(&n1).create().await?;
    cx.pod("low-1").class("low").on(&n1).create().await?;
    cx.pod("low-2").class("low").on(&n1).create().await?;
    cx.wait_running(&["mid-1", "low-1", "low-2"]).await?;
    let s = cx.start();
    let highs = ["high-1", "high-2", "high-3"];
    for p in highs {
        cx.pod(p).class("high").group("pg1").create().await?;
    }
    cx.group("pg1").gang(3).class("high").create().await?;
    cx.wait_group("pg1", "False", "Unschedulable", "pod group preemption: ")
        .await?;
    for p in highs {
        cx.wait_pod_reason(p, "Unschedulable", "").await?;
    }
    cx.stays_unbound(&s, &highs).await?;
    cx.assert_no_preemption().await?;
    s.stop().await
}

/// S55: a p50 pod and two p10 pods fill a 3-CPU node; a gang(2) of 1-CPU p100 pods evicts the two p10 pods and the
/// p50 pod stays.
///
/// Upstream: `TestPodGroupPreemption`, case "Priority-based Victim Selection".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s55_priority_order() -> anyhow::Result<()> {
    let cx = setup("s55").await?;
    cx.classes(&[("low", 10), ("mid", 50), ("high", 100)]).await?;
    let n1 = cx.node("node1", "3").await?;
    cx.pod("mid-1").class("mid").on(&n1).create().await?;
    cx.pod("low-1").class("low").on(&n1).create().await?;
    cx.pod("low-2").class("low").on(&n1).create().await?;
    cx.wait_running(&["mid-1", "low-1", "low-2"]).await?;
    let s = cx.start();
    for p in ["high-1", "high-2"] {
        cx.pod(p).class("high").group("pg1").create().await?;
    }
    cx.group("pg1").gang(2).class("high").create().await?;
    cx.wait_bound_on(&[("high-1", n1.as_str()), ("high-2", n1.as_str())])
        .await?;
    cx.assert_victims(&s, &["low-1", "low-2"], "pg1").await?;
    cx.wait_bound_on(&[("mid-1", n1.as_str())]).await?;
    cx.no_overcommit().await?;
    s.stop().await
}

/// A p10 victim PodGroup pg2 (gang(3) or basic) with `disruptionMode: all` runs three 1-CPU pods on a 3-CPU node; a
/// gang(1) with one 1-CPU p100 pod evicts all three although one would do, and pg2 gets `DisruptionTarget=True`.
async fn s56(prefix: &str, gang: bool) -> anyhow::Result<()> {
    let cx = setup(prefix).await?;
    cx.classes(&[("low", 10), ("high", 100)]).await?;
    let n1 = cx.node("node1", "3").await?;
    let g = cx.group("pg2").class("low").all();
    if gang { g.gang(3) } else { g }.create().await?;
    let victims = ["pg2-1", "pg2-2", "pg2-3"];
    for p in victims {
        cx.pod(p).class("low").group("pg2").on(&n1).create().await?;
    }
    cx.wait_running(&victims).await?;
    let s = cx.start();
    cx.pod("high-1").class("high").group("pg1").create().await?;
    cx.group("pg1").gang(1).class("high").create().await?;
    cx.wait_bound_on(&[("high-1", n1.as_str())]).await?;
    cx.assert_victims(&s, &victims, "pg1").await?;
    cx.wait_group_condition("pg2", DISRUPTION_TARGET, "True", PREEMPTION_BY_SCHEDULER, "")
        .await?;
    // Both conditions at once: one server-side apply per group carries every condition the scheduler owns, so the
    // DisruptionTarget write does not drop PodGroupInitiallyScheduled (it did: an apply drops what its body omits).
    cx.wait_group_condition("pg2", "PodGroupInitiallyScheduled", "True", "Scheduled", "")
        .await?;
    // Judged once the scheduler has nothing left to write, not after a pause.
    cx.settled(&s).await?;
    let pg2 = cx.groups().get("pg2").await?;
    let types: Vec<String> = pg2
        .status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .map(|c| format!("{}={}", c.type_, c.status))
        .collect();
    ensure!(
        types.contains(&"PodGroupInitiallyScheduled=True".to_string())
            && types.contains(&format!("{DISRUPTION_TARGET}=True")),
        "pg2 keeps both conditions: {types:?}"
    );
    cx.no_overcommit().await?;
    s.stop().await
}

/// S56, gang victim.
///
/// Upstream: `TestPodGroupPreemption`, case "Preempt the whole PodGroup even if preempting a single Pod would
/// suffice".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s56_all_victim_evicted_whole_gang() -> anyhow::Result<()> {
    s56("s56g", true).await
}

/// S56, basic victim.
///
/// Upstream: `TestPodGroupPreemption`, case "Preempt the whole basic PodGroup with a PodGroup disruption mode".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s56_all_victim_evicted_whole_basic() -> anyhow::Result<()> {
    s56("s56b", false).await
}

/// A p10 victim gang(`min`) with `disruptionMode: single` (the default) runs three 1-CPU pods on a 3-CPU node; a
/// gang(1) or basic preemptor with one 1-CPU p100 pod evicts exactly one of them, even below minCount, and the victim
/// group is not marked `DisruptionTarget`. Which of the three goes depends on start times and uids (equals).
async fn s57(prefix: &str, min: i32, basic_preemptor: bool) -> anyhow::Result<()> {
    let cx = setup(prefix).await?;
    cx.classes(&[("low", 10), ("high", 100)]).await?;
    let n1 = cx.node("node1", "3").await?;
    cx.group("victim-pg").gang(min).class("low").create().await?;
    let victims = ["victim-1", "victim-2", "victim-3"];
    for p in victims {
        cx.pod(p).class("low").group("victim-pg").on(&n1).create().await?;
    }
    cx.wait_running(&victims).await?;
    let s = cx.start();
    cx.pod("high-1").class("high").group("pg1").create().await?;
    let g = cx.group("pg1").class("high");
    if basic_preemptor { g } else { g.gang(1) }.create().await?;
    cx.wait_bound_on(&[("high-1", n1.as_str())]).await?;
    // How many went is judged once the scheduler has nothing left to do, not after a pause.
    cx.settled(&s).await?;
    let gone = cx.evicted().await?;
    cx.check(gone.len() == 1, || {
        format!("evicted {gone:?}, expected exactly one of {victims:?}")
    })
    .await?;
    let v = gone.iter().next().cloned().unwrap_or_default();
    cx.check(victims.contains(&v.as_str()), || {
        format!("evicted {v}, expected one of {victims:?}")
    })
    .await?;
    cx.assert_victims(&s, &[v.as_str()], "pg1").await?;
    let kept: Vec<(&str, &str)> = victims
        .iter()
        .filter(|p| **p != v)
        .map(|p| (*p, n1.as_str()))
        .collect();
    cx.wait_bound_on(&kept).await?;
    let d = cx.group_disruption("victim-pg").await?;
    cx.check(d.is_none(), || {
        format!("victim-pg (single) carries DisruptionTarget {d:?}; only `all` groups are marked")
    })
    .await?;
    cx.no_overcommit().await?;
    s.stop().await
}

/// S57, victim gang(2), gang(1) preemptor.
///
/// Upstream: `TestPodGroupPreemption`, case "Pods from a single gang PodGroup with DisruptionModeSingle can be
/// preempted individually by the higher priority gang PodGroup".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s57_single_victim_one_pod() -> anyhow::Result<()> {
    s57("s57a", 2, false).await
}

/// S57, victim gang(3): one pod goes although that leaves the victim gang below its minCount.
///
/// Upstream: `TestPodGroupPreemption`, the "... even below mincount" variant of the case above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s57_single_victim_one_pod_below_min_count() -> anyhow::Result<()> {
    s57("s57b", 3, false).await
}

/// S57, victim gang(3), basic preemptor.
///
/// Upstream: `TestPodGroupPreemption`, the "... by a basic PodGroup" variant of the case above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s57_single_victim_one_pod_basic_preemptor() -> anyhow::Result<()> {
    s57("s57c", 3, true).await
}

/// S58: four 1-CPU nodes hold two p10 pods (node1, node2) and two p200 pods (node3, node4); a gang(1) of three 1-CPU
/// p100 pods evicts only the p10 pods: two preemptors bind on node1 and node2, the third stays unschedulable, and the
/// p200 pods are untouched.
///
/// Upstream: `TestPodGroupPreemption`, case "Gang scheduling: schedule as many pods as possible without preempting
/// higher priority pods, but still more than minCount".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s58_partial_gang_fit() -> anyhow::Result<()> {
    let cx = setup("s58").await?;
    cx.classes(&[("low", 10), ("high", 100), ("top", 200)]).await?;
    let mut nodes = Vec::new();
    for i in 1..=4 {
        nodes.push(cx.node(&format!("node{i}"), "1").await?);
    }
    for (i, (p, class)) in [("p1", "low"), ("p2", "low"), ("p3", "top"), ("p4", "top")]
        .into_iter()
        .enumerate()
    {
        cx.pod(p).class(class).on(&nodes[i]).create().await?;
    }
    cx.wait_running(&["p1", "p2", "p3", "p4"]).await?;
    let s = cx.start();
    let preemptors = ["p-a", "p-b", "p-c"];
    for p in preemptors {
        cx.pod(p).class("high").group("preemptor-pg").create().await?;
    }
    // The group after its pods, so all three are in the group's first cycle (as in the core test).
    cx.group("preemptor-pg").gang(1).class("high").create().await?;
    let b = cx.wait_bound_count(&preemptors, 2).await?;
    let left = preemptors
        .iter()
        .find(|p| !b.contains_key(**p))
        .copied()
        .unwrap_or_default();
    let used: BTreeSet<&str> = preemptors
        .iter()
        .filter_map(|p| b.get(*p).map(String::as_str))
        .collect();
    let want: BTreeSet<&str> = BTreeSet::from([nodes[0].as_str(), nodes[1].as_str()]);
    cx.check(used == want, || {
        format!("preemptors bound on {used:?}, expected {want:?}")
    })
    .await?;
    cx.assert_victims(&s, &["p1", "p2"], "preemptor-pg").await?;
    // The leftover finds nothing below it (the core test's last report).
    cx.wait_pod_reason(
        left,
        "Unschedulable",
        "pod group preemption: No preemption victims found for incoming preemptor",
    )
    .await?;
    cx.stays_unbound(&s, &[left]).await?;
    cx.wait_bound_on(&[("p3", nodes[2].as_str()), ("p4", nodes[3].as_str())])
        .await?;
    let got = cx.evicted().await?;
    let want = BTreeSet::from(["p1".to_owned(), "p2".to_owned()]);
    cx.check(got == want, || {
        format!("evicted {got:?}, expected exactly {want:?}")
    })
    .await?;
    cx.no_overcommit().await?;
    s.stop().await
}

// --- Beyond the S-table ------------------------------------------------------------------------------------------

/// A PriorityClass with `preemptionPolicy: Never` (p100) on a gang(1) and on a standalone pod: a p10 pod fills the
/// only node, and neither preemptor evicts it. Both stay pending and say why.
///
/// Core counterpart: `preemption_policy_never_never_evicts` in `crates/scheduler/tests/preemption.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_policy_never_never_evicts() -> anyhow::Result<()> {
    let cx = setup("never").await?;
    cx.classes(&[("low", 10)]).await?;
    cx.priority_class("high-never", 100, true).await?;
    let n1 = cx.node("node1", "1").await?;
    cx.pod("low-1").class("low").on(&n1).create().await?;
    cx.wait_running(&["low-1"]).await?;
    let s = cx.start();
    cx.pod("high-1").class("high-never").group("pg1").create().await?;
    cx.group("pg1").gang(1).class("high-never").create().await?;
    cx.pod("lone").class("high-never").create().await?;
    let p = cx.pods().get("lone").await?;
    let policy = p.spec.as_ref().and_then(|s| s.preemption_policy.clone());
    ensure!(
        policy.as_deref() == Some("Never"),
        "the Priority admission plugin copied the class's policy onto the pod: {policy:?}"
    );
    cx.wait_group("pg1", "False", "Unschedulable", "preemptionPolicy=Never")
        .await?;
    cx.wait_pod_reason("high-1", "Unschedulable", "").await?;
    cx.wait_pod_reason("lone", "Unschedulable", "preemptionPolicy=Never")
        .await?;
    cx.stays_unbound(&s, &["high-1", "lone"]).await?;
    cx.assert_no_preemption().await?;
    cx.wait_bound_on(&[("low-1", n1.as_str())]).await?;
    s.stop().await
}

/// The victim (kept Terminating by a finalizer) carries `DisruptionTarget=True/PreemptionByScheduler` on the very
/// version that sets its deletionTimestamp (the watch sees no Terminating version without it), a `Preempted` event
/// names the preemptor and the node, and the preemptor does not bind while the victim still holds its CPU. Once the
/// finalizer is removed the preemptor binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn victims_carry_disruption_target_before_deletion() -> anyhow::Result<()> {
    let cx = setup("mark").await?;
    cx.classes(&[("low", 10), ("high", 100)]).await?;
    let n1 = cx.node("node1", "1").await?;
    cx.pod("low-1").class("low").on(&n1).hold().create().await?;
    cx.wait_running(&["low-1"]).await?;
    let s = cx.start();
    cx.pod("high-1").class("high").group("pg1").create().await?;
    cx.group("pg1").gang(1).class("high").create().await?;
    let p = cx.wait_terminating("low-1").await?;
    let message = format!("{}: preempting to accommodate a higher priority pod", cx.sched);
    let c = disruption_target(&p);
    cx.check(
        c.as_ref()
            .is_some_and(|(s, r, m)| s == "True" && r == PREEMPTION_BY_SCHEDULER && *m == message),
        || {
            format!(
                "Terminating victim carries DisruptionTarget {c:?}, expected True/{PREEMPTION_BY_SCHEDULER}"
            )
        },
    )
    .await?;
    let first = cx
        .wait("the watch to see low-1 Terminating", || async {
            Ok(lock(&cx.seen).first_terminating.get("low-1").cloned())
        })
        .await?;
    let c = disruption_target(&first);
    cx.check(
        c.as_ref()
            .is_some_and(|(s, r, m)| s == "True" && r == PREEMPTION_BY_SCHEDULER && *m == message),
        || format!("the first Terminating version of low-1 carries DisruptionTarget {c:?}"),
    )
    .await?;
    cx.check_preempted_event("low-1", Some(&n1), "pg1").await?;
    cx.stays_unbound(&s, &["high-1"]).await?;
    cx.release("low-1").await?;
    cx.wait_bound_on(&[("high-1", n1.as_str())]).await?;
    cx.assert_victims(&s, &["low-1"], "pg1").await?;
    cx.no_overcommit().await?;
    s.stop().await
}

/// While its two victims terminate (held by a finalizer), each preemptor of a gang(2) shows
/// `status.nominatedNodeName` = the victims' node and `PodScheduled=False/WaitingForPreemption` with the number of
/// victims in the message; the other node (a p200 pod) is not a candidate. Released, the preemptors bind there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemptor_gets_nominated_node_name() -> anyhow::Result<()> {
    let cx = setup("nominate").await?;
    cx.classes(&[("low", 10), ("high", 100), ("top", 200)]).await?;
    let n1 = cx.node("node1", "2").await?;
    let n2 = cx.node("node2", "2").await?;
    for p in ["low-1", "low-2"] {
        cx.pod(p).class("low").on(&n1).hold().create().await?;
    }
    cx.pod("top-1").cpu("2").class("top").on(&n2).create().await?;
    cx.wait_running(&["low-1", "low-2", "top-1"]).await?;
    let s = cx.start();
    let highs = ["high-1", "high-2"];
    for p in highs {
        cx.pod(p).class("high").group("pg1").create().await?;
    }
    cx.group("pg1").gang(2).class("high").create().await?;
    cx.wait_nominated_now(&highs, &n1).await?;
    for p in highs {
        let m = cx.wait_pod_reason(p, WAITING_FOR_PREEMPTION, "").await?;
        cx.check(mentions_number(&m, 2), || {
            format!("{p}: WaitingForPreemption message {m:?} does not say how many victims (2)")
        })
        .await?;
    }
    cx.wait_terminating("low-1").await?;
    cx.wait_terminating("low-2").await?;
    cx.stays_unbound(&s, &highs).await?;
    cx.release("low-1").await?;
    cx.release("low-2").await?;
    cx.wait_bound_on(&highs.map(|p| (p, n1.as_str()))).await?;
    cx.assert_victims(&s, &["low-1", "low-2"], "pg1").await?;
    let noms = cx.nominations(&highs).await?;
    cx.check(noms.values().all(|n| *n == n1), || {
        format!("nominations {noms:?}, expected all on {n1} (never on {n2})")
    })
    .await?;
    cx.wait_bound_on(&[("top-1", n2.as_str())]).await?;
    cx.no_overcommit().await?;
    s.stop().await
}

/// While a gang(2) of p100 pods waits for its victim (held Terminating), a new p10 pod of the victim's size is
/// created. When the victim is gone the node's room is reserved for the nominated preemptors: the gang binds, and the
/// late pod was never bound (so it was not preempted either) and stays pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lower_priority_pod_created_during_preemption_does_not_take_the_freed_node() -> anyhow::Result<()> {
    let cx = setup("steal").await?;
    cx.classes(&[("low", 10), ("high", 100)]).await?;
    let n1 = cx.node("node1", "2").await?;
    cx.pod("low-1")
        .cpu("2")
        .class("low")
        .on(&n1)
        .hold()
        .create()
        .await?;
    cx.wait_running(&["low-1"]).await?;
    let s = cx.start();
    let highs = ["high-1", "high-2"];
    for p in highs {
        cx.pod(p).class("high").group("pg1").create().await?;
    }
    cx.group("pg1").gang(2).class("high").create().await?;
    cx.wait_terminating("low-1").await?;
    cx.wait_nominated_now(&highs, &n1).await?;
    cx.pod("late-low").cpu("2").class("low").create().await?;
    cx.wait_pod_reason("late-low", "Unschedulable", "").await?;
    // Retried while the victim still holds the node (a cycle after a node event, not a pause), late-low stays out.
    cx.stays_unbound(&s, &["late-low"]).await?;
    cx.release("low-1").await?;
    cx.wait_bound_on(&highs.map(|p| (p, n1.as_str()))).await?;
    cx.stays_unbound(&s, &["late-low"]).await?;
    let ever = lock(&cx.seen).nodes.get("late-low").cloned();
    cx.check(ever.is_none(), || {
        format!(
            "late-low was bound to {ever:?} at some point; the freed node was reserved for the preemptors"
        )
    })
    .await?;
    cx.assert_victims(&s, &["low-1"], "pg1").await?;
    cx.wait_pod_reason("late-low", "Unschedulable", "").await?;
    cx.no_overcommit().await?;
    s.stop().await
}

// --- Preemption state across restarts, failovers and failed evictions ------------------------------------------

/// With [`two_held_low_pods`] running, a p100 2-CPU gang(1) preemptor:
/// creates the preemptor and returns the victim the first plan chose and the node the preemptor was nominated to.
async fn one_victim_of_two(cx: &Ctx) -> anyhow::Result<(String, String)> {
    cx.pod("high-1")
        .cpu("2")
        .class("high")
        .group("pg1")
        .create()
        .await?;
    cx.group("pg1").gang(1).class("high").create().await?;
    let victim = cx
        .wait("one low pod Terminating", || async {
            let l = cx.pods().list(&ListParams::default()).await?;
            Ok(l.items
                .into_iter()
                .find(|p| p.name_any().starts_with("low-") && p.metadata.deletion_timestamp.is_some())
                .map(|p| p.name_any()))
        })
        .await?;
    let node = cx
        .wait("high-1 nominated", || async {
            let p = cx.pods().get("high-1").await?;
            Ok(p.status
                .and_then(|s| s.nominated_node_name)
                .filter(|n| !n.is_empty()))
        })
        .await?;
    Ok((victim, node))
}

/// Two 2-CPU nodes, each with one p10 2-CPU pod held Terminating once deleted.
async fn two_held_low_pods(cx: &Ctx, grace: i64) -> anyhow::Result<()> {
    cx.classes(&[("low", 10), ("high", 100)]).await?;
    for (pod, node) in [("low-1", "node1"), ("low-2", "node2")] {
        let n = cx.node(node, "2").await?;
        cx.pod(pod)
            .cpu("2")
            .class("low")
            .on(&n)
            .hold()
            .grace(grace)
            .create()
            .await?;
    }
    cx.wait_running(&["low-1", "low-2"]).await
}

impl Ctx {
    /// Four times: a node is added (each wakes every unschedulable entity, so the preemptor is retried) and once `s`
    /// has run a cycle after it ([`Ctx::wake`]), `high-1` is still nominated to `node` and nothing but `victim` is
    /// evicted.
    async fn keeps_waiting(&self, s: &Sched, victim: &str, node: &str) -> anyhow::Result<()> {
        for _ in 0..4 {
            let attempts = self.wake(s).await?;
            let p = self.pods().get("high-1").await?;
            let now = p.status.as_ref().and_then(|s| s.nominated_node_name.clone());
            self.check(now.as_deref() == Some(node), || {
                format!(
                    "high-1 is nominated to {now:?} while its victim terminates (after {attempts} attempts), \
                     expected {node}"
                )
            })
            .await?;
            let got = self.evicted().await?;
            self.check(got == BTreeSet::from([victim.to_owned()]), || {
                format!("evicted {got:?} while the first victim terminates, expected only {victim}")
            })
            .await?;
        }
        Ok(())
    }
}

/// Defect: a restarted scheduler did not load nominations or victims terminating by preemption, so it planned from
/// scratch and evicted a second pod. Here the first replica is killed while its victim is held Terminating; a fresh
/// one evicts nothing more, keeps the preemptor's nomination, and binds it on that node once the victim is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_while_victims_terminate_evicts_nothing_more() -> anyhow::Result<()> {
    let cx = setup("restart").await?;
    two_held_low_pods(&cx, 0).await?;
    let s = cx.start();
    let (victim, node) = one_victim_of_two(&cx).await?;
    s.kill().await;
    let s = cx.start();
    cx.wait_pod_reason("high-1", WAITING_FOR_PREEMPTION, "").await?;
    cx.keeps_waiting(&s, &victim, &node).await?;
    cx.release(&victim).await?;
    cx.wait_bound_on(&[("high-1", node.as_str())]).await?;
    cx.assert_victims(&s, &[&victim], "pg1").await?;
    cx.no_overcommit().await?;
    s.stop().await
}

/// The same across a failover: the standby replica, warm but not leading while the first plan is made, takes over
/// when the leader dies and evicts nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_while_victims_terminate_evicts_nothing_more() -> anyhow::Result<()> {
    let cx = setup("failover").await?;
    two_held_low_pods(&cx, 0).await?;
    let a = cx.start_replica(true);
    let b = cx.start_replica(false);
    let (victim, node) = one_victim_of_two(&cx).await?;
    a.kill().await;
    b.leader.send_replace(true);
    cx.keeps_waiting(&b, &victim, &node).await?;
    cx.release(&victim).await?;
    cx.wait_bound_on(&[("high-1", node.as_str())]).await?;
    cx.assert_victims(&b, &[&victim], "pg1").await?;
    b.stop().await
}

/// Defect: a preemption counted as in flight for 120 s at most; past that the nomination was cleared and the next
/// attempt preempted afresh. A victim with a 300 s grace period (held Terminating: kwok deletes pods at once, the
/// finalizer stands in for the kubelet's graceful termination) keeps the preemptor nominated past 120 s, nothing
/// else is evicted, and the preemptor binds there once the victim is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_grace_period_victims_keep_the_nomination_until_gone() -> anyhow::Result<()> {
    let cx = setup("grace").await?;
    two_held_low_pods(&cx, 300).await?;
    let s = cx.start();
    let (victim, node) = one_victim_of_two(&cx).await?;
    let until = Instant::now() + Duration::from_secs(125);
    while Instant::now() < until {
        let p = cx.pods().get("high-1").await?;
        let now = p.status.as_ref().and_then(|s| s.nominated_node_name.clone());
        cx.check(now.as_deref() == Some(node.as_str()), || {
            format!("high-1 is nominated to {now:?} while its victim terminates, expected {node}")
        })
        .await?;
        let got = cx.evicted().await?;
        cx.check(got == BTreeSet::from([victim.clone()]), || {
            format!("evicted {got:?} while the first victim terminates, expected only {victim}")
        })
        .await?;
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    cx.release(&victim).await?;
    cx.wait_bound_on(&[("high-1", node.as_str())]).await?;
    s.stop().await
}

/// How soon a preemptor whose eviction failed must be retried: far below the 120 s the defect waited, far above the
/// few seconds of backoff it takes, so that a loaded machine does not decide the outcome.
const RETRY_WITHIN: Duration = Duration::from_secs(40);

/// Defect: a failed eviction was only logged, and the preemptor waited up to 120 s for a deletion that never came.
/// A ValidatingAdmissionPolicy denies the deletion of the only possible victim: the preemptor gets a Warning
/// `FailedPreemption`, the failure is counted, and the preemptor is retried within [`RETRY_WITHIN`]. Once the policy
/// goes, the retry evicts and binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_eviction_retries_the_preemptor_with_a_warning() -> anyhow::Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let cx = setup("deny").await?;
    cx.classes(&[("low", 10), ("high", 100)]).await?;
    let n1 = cx.node("node1", "2").await?;
    let name = format!("{}-deny-delete", cx.ns);
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": { "resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["pods"]
            }]},
            "validations": [{ "expression": "false", "message": "deletion denied by the test" }],
        },
    }))?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": cx.ns } },
                "objectSelector": { "matchLabels": { "phalanx.dev/deny-delete": "true" } },
            },
        },
    }))?;
    let vaps: Api<ValidatingAdmissionPolicy> = Api::all(cx.client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(cx.client.clone());
    vaps.create(&PostParams::default(), &policy).await?;
    bindings.create(&PostParams::default(), &binding).await?;
    cx.pod("low-1")
        .cpu("2")
        .class("low")
        .on(&n1)
        .label("phalanx.dev/deny-delete", "true")
        .create()
        .await?;
    cx.wait_running(&["low-1"]).await?;
    // The policy takes effect once the API server has loaded it: a dry-run deletion of the victim (admission runs,
    // nothing is deleted) must be refused first.
    let dry = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    cx.wait("the deletion policy in force", || async {
        Ok(match cx.pods().delete("low-1", &dry).await {
            Err(kube::Error::Api(e)) if e.message.contains("deletion denied by the test") => Some(()),
            _ => None,
        })
    })
    .await?;
    let s = cx.start();
    cx.pod("high-1").cpu("2").class("high").create().await?;
    let failed = "phalanx_scheduler_preemption_attempts_total";
    let label = "result=\"eviction_failed\"";
    cx.wait("a failed eviction counted", || async {
        Ok((s.counter(failed, label) >= 1.0).then_some(()))
    })
    .await?;
    let first = Instant::now();
    let warning = cx
        .wait("a Warning FailedPreemption on high-1", || async {
            let l = cx.events().list(&ListParams::default()).await?;
            Ok(l.items.into_iter().find(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("FailedPreemption")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("high-1")
            }))
        })
        .await?;
    let note = warning.note.unwrap_or_default();
    cx.check(note.contains("low-1") && note.contains("denied"), || {
        format!("FailedPreemption note {note:?} does not name the victim and the reason")
    })
    .await?;
    // The defect waited 120 s; a retry well inside that (a backoff of a few seconds) passes even on a loaded machine.
    match wait_for("the preemptor retried", RETRY_WITHIN, || async {
        Ok((s.counter(failed, label) >= 2.0).then_some(()))
    })
    .await
    {
        Ok(()) => {}
        Err(e) => {
            return cx
                .fail(e.context(format!(
                    "no retry within {RETRY_WITHIN:?} of {:?}",
                    first.elapsed()
                )))
                .await;
        }
    }
    let p = cx.pods().get("low-1").await?;
    cx.check(p.metadata.deletion_timestamp.is_none(), || {
        "low-1 is terminating although its deletion is denied".into()
    })
    .await?;
    let _ = bindings.delete(&name, &DeleteParams::default()).await;
    let _ = vaps.delete(&name, &DeleteParams::default()).await;
    cx.wait_bound_on(&[("high-1", n1.as_str())]).await?;
    cx.assert_victims(&s, &["low-1"], "high-1").await?;
    s.stop().await
}

/// A standalone pod (no group) preempts: the lower-priority pod goes with `DisruptionTarget`, the `Preempted` event
/// names the preemptor by UID, and the preemptor binds on the freed node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_pod_preempts() -> anyhow::Result<()> {
    let cx = setup("lonepre").await?;
    cx.classes(&[("low", 10), ("high", 100)]).await?;
    let n1 = cx.node("node1", "2").await?;
    cx.pod("low-1").cpu("2").class("low").on(&n1).create().await?;
    cx.wait_running(&["low-1"]).await?;
    let s = cx.start();
    cx.pod("high-1").cpu("2").class("high").create().await?;
    cx.wait_bound_on(&[("high-1", n1.as_str())]).await?;
    cx.assert_victims(&s, &["low-1"], "high-1").await?;
    cx.no_overcommit().await?;
    s.stop().await
}

/// A CompositePodGroup tree preempts as one root: its two leaves (gang 1 each, one 2-CPU pod each) need both nodes,
/// so both lower-priority pods go, and both members bind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_pod_group_preempts() -> anyhow::Result<()> {
    use phalanx_api::v1alpha3::CompositePodGroup;
    let cx = setup("cpgpre").await?;
    cx.classes(&[("low", 10), ("high", 100)]).await?;
    let n1 = cx.node("node1", "2").await?;
    let n2 = cx.node("node2", "2").await?;
    cx.pod("low-1").cpu("2").class("low").on(&n1).create().await?;
    cx.pod("low-2").cpu("2").class("low").on(&n2).create().await?;
    cx.wait_running(&["low-1", "low-2"]).await?;
    let s = cx.start();
    let class = cx.class("high");
    let root: CompositePodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": { "name": "root" },
        "spec": {
            "workloadRef": { "workloadName": "w", "templateName": "root" },
            "schedulingPolicy": { "gang": { "minGroupCount": 2 } },
            "priorityClassName": class,
        },
    }))?;
    Api::<CompositePodGroup>::namespaced(cx.client.clone(), &cx.ns)
        .create(&PostParams::default(), &root)
        .await?;
    for leaf in ["leaf-a", "leaf-b"] {
        let pg: PodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.phalanx.dev/v1beta1",
            "kind": "PodGroup",
            "metadata": { "name": leaf },
            "spec": {
                "parentCompositePodGroupName": "root",
                "workloadRef": { "workloadName": "w", "templateName": leaf },
                "schedulingPolicy": { "gang": { "minCount": 1 } },
                "priorityClassName": class,
            },
        }))?;
        cx.groups().create(&PostParams::default(), &pg).await?;
        cx.pod(&format!("{leaf}-0"))
            .cpu("2")
            .class("high")
            .group(leaf)
            .create()
            .await?;
    }
    let b = cx.wait_bound_count(&["leaf-a-0", "leaf-b-0"], 2).await?;
    let nodes: BTreeSet<&String> = ["leaf-a-0", "leaf-b-0"]
        .iter()
        .filter_map(|p| b.get(*p))
        .collect();
    cx.check(nodes.len() == 2, || {
        format!("leaves bound {b:?}, expected one per node")
    })
    .await?;
    let got = cx.evicted().await?;
    cx.check(
        got == BTreeSet::from(["low-1".to_owned(), "low-2".to_owned()]),
        || format!("evicted {got:?}, expected low-1 and low-2"),
    )
    .await?;
    cx.check_preempted_event("low-1", None, "leaf-a")
        .await
        .or(cx.check_preempted_event("low-1", None, "leaf-b").await)?;
    cx.no_overcommit().await?;
    s.stop().await
}

/// `mentions_number` matches whole numbers only.
#[test]
fn mentions_number_matches_tokens() {
    assert!(mentions_number("waiting for 2 preempted pod(s)", 2));
    assert!(!mentions_number("waiting for 12 preempted pod(s)", 2));
    assert!(!mentions_number("nothing", 2));
}
