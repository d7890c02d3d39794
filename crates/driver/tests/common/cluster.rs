//! The real-cluster harness of the CompositePodGroup and topology tests: a namespace, kwok nodes labelled
//! `phalanx.dev/test-ns=<ns>`, an in-process scheduler with a unique name restricted to those nodes
//! (`node_selector`), and helpers that create groups and pods and wait for outcomes. No controllers run, so the
//! `workloadRef`s the CRDs require point at a Workload that need not exist.

use std::{
    collections::BTreeMap,
    collections::HashMap,
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use anyhow::{Context as _, ensure};
use k8s_openapi::{api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::Condition};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, PostParams},
};
use phalanx_api::{v1alpha3::CompositePodGroup, v1beta1::PodGroup};
use phalanx_driver::{self as scheduling, SchedulerOptions};
use phalanx_store::{Store, StoreConfig};
use phalanx_testenv::{FakeNode, TEST_NS_LABEL, TestEnv, create_namespace, wait_for};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::{sync::watch, task::JoinHandle};
use tokio_util::sync::CancellationToken;

/// Bound of every wait: generous, since a wait ends as soon as its condition holds and only a stuck scheduler (or
/// a loaded 2-core machine running every test binary at once) comes near it.
pub const SETTLE: Duration = Duration::from_secs(120);

/// `scheduler_schedule_attempts_total{result}`: one per scheduling cycle, whatever its result.
const ATTEMPTS: &str = "phalanx_scheduler_schedule_attempts_total";

pub struct Ctx {
    pub client: Client,
    pub ns: String,
    pub sched: String,
    /// Nodes added by [`Ctx::wake`] so far (their names count up).
    wakes: AtomicUsize,
}

/// A running in-process scheduler.
pub struct Sched {
    shutdown: CancellationToken,
    handle: JoinHandle<anyhow::Result<()>>,
    /// Its leader flag: true from the start unless `SchedulerOptions::instance` is `"follower"`.
    pub leader: watch::Sender<bool>,
    registry: Registry,
}

impl Sched {
    /// The registry's text exposition.
    pub fn metrics(&self) -> String {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &self.registry).unwrap_or_default();
        s
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        super::report_snapshot_mismatches(&self.registry);
        self.shutdown.cancel();
        self.handle.await.context("scheduler task")?
    }

    /// Abrupt stop: the task and its binds are aborted mid-flight (a crash).
    pub async fn kill(self) {
        self.handle.abort();
        let _ = self.handle.await;
    }

    /// Sum of the samples of the counter or gauge `metric` whose labels contain `label` ("" matches every series;
    /// 0 when absent).
    pub fn counter(&self, metric: &str, label: &str) -> f64 {
        let prefix_braces = format!("{metric}{{");
        let prefix_plain = format!("{metric} ");
        self.metrics()
            .lines()
            .filter(|l| (l.starts_with(&prefix_braces) || l.starts_with(&prefix_plain)) && l.contains(label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Scheduling cycles run so far (`scheduler_schedule_attempts_total`, every result).
    pub fn attempts(&self) -> f64 {
        self.counter(ATTEMPTS, "")
    }

    /// Nothing the scheduler decided is still on its way to the API server: no bind waiting for a permit, no
    /// background bind, write or event running (`scheduler_tracked_objects{kind="binds_waiting"}` and
    /// `{kind="tasks"}` at 0; the gauges are refreshed on every pass of the loop, at least once a second). Returns
    /// what it saw, for a failure message.
    pub fn nothing_in_flight(&self) -> (bool, String) {
        let m = self.metrics();
        let waiting = tracked(&m, "binds_waiting").unwrap_or(0.0);
        let tasks = tracked(&m, "tasks").unwrap_or(0.0);
        (
            waiting == 0.0 && tasks == 0.0,
            format!("binds_waiting {waiting}, tasks {tasks}"),
        )
    }
}

pub async fn setup(prefix: &str) -> anyhow::Result<Ctx> {
    setup_on(TestEnv::shared().client().await?, prefix).await
}

/// [`setup`] on the control plane of `client` (a dedicated one).
pub async fn setup_on(client: Client, prefix: &str) -> anyhow::Result<Ctx> {
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let ns = create_namespace(&client, prefix).await?;
    let sched = format!("phalanx-{ns}");
    Ok(Ctx {
        client,
        ns,
        sched,
        wakes: AtomicUsize::new(0),
    })
}

/// `phalanx_scheduler_tracked_objects{kind="<kind>"}` in a text exposition ([`Sched::metrics`]).
pub fn tracked(metrics: &str, kind: &str) -> Option<f64> {
    let prefix = format!("phalanx_scheduler_tracked_objects{{kind=\"{kind}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

/// The node a pod is bound to (`spec.nodeName`, empty counts as unbound).
pub fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref().filter(|n| !n.is_empty())
}

/// A pod condition's `(status, reason, message)`, reason and message empty when absent.
pub fn pod_condition(p: &Pod, type_: &str) -> Option<(String, String, String)> {
    let c = p
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((
        c.status.clone(),
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

/// The pod's `PodScheduled` condition as [`pod_condition`] gives it.
pub fn pod_scheduled(p: &Pod) -> Option<(String, String, String)> {
    pod_condition(p, "PodScheduled")
}

/// A CPU quantity in millicores (`"500m"`, `"2"`, `"0.5"`); 0 when it does not parse (test quantities are simple).
pub fn milli(q: &str) -> i64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().unwrap_or(0),
        None => q.parse::<f64>().map(|v| (v * 1000.0) as i64).unwrap_or(0),
    }
}

/// The CPU a pod's containers request, in millicores.
pub fn pod_cpu(p: &Pod) -> i64 {
    p.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| {
            c.resources
                .as_ref()?
                .requests
                .as_ref()?
                .get("cpu")
                .map(|q| milli(&q.0))
        })
        .sum()
}

pub fn condition(conds: Option<&Vec<Condition>>, type_: &str) -> Option<Condition> {
    conds?.iter().find(|c| c.type_ == type_).cloned()
}

impl Ctx {
    pub fn start(&self) -> Sched {
        self.start_with(|_| {})
    }

    /// [`Ctx::start`] with options changed by `tweak` (for example the core's configuration).
    pub fn start_with(&self, tweak: impl FnOnce(&mut SchedulerOptions)) -> Sched {
        let mut opts = SchedulerOptions {
            scheduler_name: self.sched.clone(),
            node_selector: Some(format!("{TEST_NS_LABEL}={}", self.ns)),
            ..SchedulerOptions::default()
        };
        tweak(&mut opts);
        let store = Store::start(self.client.clone(), StoreConfig::default());
        let (tx, rx) = watch::channel(opts.instance.as_deref() != Some("follower"));
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
            leader: tx,
            registry,
        }
    }

    pub async fn node(&self, name: &str, cpu: &str) -> anyhow::Result<String> {
        self.node_labelled(name, cpu, &[]).await
    }

    /// [`Ctx::node`] with node labels (topology domains).
    pub async fn node_labelled(
        &self,
        name: &str,
        cpu: &str,
        labels: &[(&str, &str)],
    ) -> anyhow::Result<String> {
        let full = format!("{}-{name}", self.ns);
        let mut node = FakeNode::new(&full);
        for (k, v) in labels {
            node = node.label(*k, *v);
        }
        node.cpu(cpu)
            .memory("64Gi")
            .pods(110)
            .test_namespace(&self.ns)
            .create(&self.client)
            .await?;
        Ok(full)
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn pod_groups(&self) -> Api<PodGroup> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    pub fn cpgs(&self) -> Api<CompositePodGroup> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// A CompositePodGroup; `min` = None for basic.
    pub async fn cpg(&self, name: &str, min: Option<i32>, parent: Option<&str>) -> anyhow::Result<()> {
        self.cpg_with(name, min, parent, serde_json::Value::Null).await
    }

    /// [`Ctx::cpg`] with `spec.schedulingConstraints` (`null` = none).
    pub async fn cpg_with(
        &self,
        name: &str,
        min: Option<i32>,
        parent: Option<&str>,
        constraints: serde_json::Value,
    ) -> anyhow::Result<()> {
        let policy = match min {
            Some(n) => json!({ "gang": { "minGroupCount": n } }),
            None => json!({ "basic": {} }),
        };
        let obj: CompositePodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.phalanx.dev/v1alpha3",
            "kind": "CompositePodGroup",
            "metadata": { "name": name },
            "spec": {
                "parentCompositePodGroupName": parent,
                "workloadRef": { "workloadName": "w", "templateName": name },
                "schedulingPolicy": policy,
                "schedulingConstraints": constraints,
            },
        }))?;
        self.cpgs()
            .create(&PostParams::default(), &obj)
            .await
            .with_context(|| format!("creating CompositePodGroup {name}"))?;
        Ok(())
    }

    /// A gang PodGroup (`minCount`) under `parent`.
    pub async fn pod_group(&self, name: &str, min: i32, parent: &str) -> anyhow::Result<()> {
        self.pod_group_with(name, min, Some(parent), serde_json::Value::Null)
            .await
    }

    /// A gang PodGroup (`minCount`), under `parent` when given, with `spec.schedulingConstraints` (`null` = none).
    pub async fn pod_group_with(
        &self,
        name: &str,
        min: i32,
        parent: Option<&str>,
        constraints: serde_json::Value,
    ) -> anyhow::Result<()> {
        let obj: PodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.phalanx.dev/v1beta1",
            "kind": "PodGroup",
            "metadata": { "name": name },
            "spec": {
                "parentCompositePodGroupName": parent,
                "workloadRef": { "workloadName": "w", "templateName": name },
                "schedulingPolicy": { "gang": { "minCount": min } },
                "schedulingConstraints": constraints,
            },
        }))?;
        self.pod_groups()
            .create(&PostParams::default(), &obj)
            .await
            .with_context(|| format!("creating PodGroup {name}"))?;
        Ok(())
    }

    /// `n` pods `<group>-<i>` requesting `cpu` each.
    pub async fn pods_of(&self, group: &str, n: usize, cpu: &str) -> anyhow::Result<Vec<String>> {
        let mut names = Vec::new();
        for i in 1..=n {
            let name = format!("{group}-{i}");
            let mut labels = BTreeMap::new();
            labels.insert(phalanx_api::labels::POD_GROUP.to_string(), group.to_string());
            let pod: Pod = serde_json::from_value(json!({
                "metadata": { "name": name, "labels": labels },
                "spec": {
                    "schedulerName": self.sched,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": cpu } } }],
                }
            }))?;
            self.pods()
                .create(&PostParams::default(), &pod)
                .await
                .with_context(|| format!("creating pod {name}"))?;
            names.push(name);
        }
        Ok(names)
    }

    /// Node of every pod in the namespace that is bound.
    pub async fn bindings(&self) -> anyhow::Result<HashMap<String, String>> {
        let list = self.pods().list(&ListParams::default()).await?;
        Ok(list
            .items
            .iter()
            .filter_map(|p| Some((p.name_any(), node_of(p)?.to_owned())))
            .collect())
    }

    /// Waits until every pod of `names` is bound; returns the node of every bound pod of the namespace.
    pub async fn wait_bound<S: AsRef<str>>(&self, names: &[S]) -> anyhow::Result<HashMap<String, String>> {
        let list: Vec<&str> = names.iter().map(AsRef::as_ref).collect();
        wait_for(&format!("pods {list:?} bound"), SETTLE, || async {
            let b = self.bindings().await?;
            Ok(list.iter().all(|n| b.contains_key(*n)).then_some(b))
        })
        .await
    }

    /// Waits for `PodScheduled=False/Unschedulable` on a pod; returns the message.
    pub async fn wait_pod_unschedulable(&self, name: &str) -> anyhow::Result<String> {
        self.wait_pod_waiting(name, "Unschedulable").await
    }

    /// Waits for pod `name` to carry `PodScheduled=False` with `reason`; returns the message.
    pub async fn wait_pod_waiting(&self, name: &str, reason: &str) -> anyhow::Result<String> {
        let api = self.pods();
        wait_for(&format!("pod {name} PodScheduled=False/{reason}"), SETTLE, || {
            let api = api.clone();
            async move {
                let p = api.get(name).await?;
                let c = p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
                    .cloned();
                Ok(
                    c.filter(|c| c.status == "False" && c.reason.as_deref() == Some(reason))
                        .map(|c| c.message.unwrap_or_default()),
                )
            }
        })
        .await
    }

    pub async fn wait_pg(&self, name: &str, status: &str, reason: &str) -> anyhow::Result<Condition> {
        let api = self.pod_groups();
        wait_for(&format!("PodGroup {name} {status}/{reason}"), SETTLE, || {
            let api = api.clone();
            async move {
                let g = api.get(name).await?;
                let c = condition(
                    g.status.as_ref().map(|s| &s.conditions),
                    phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED,
                );
                Ok(c.filter(|c| c.status == status && c.reason == reason))
            }
        })
        .await
    }

    pub async fn wait_cpg(&self, name: &str, status: &str, reason: &str) -> anyhow::Result<Condition> {
        let api = self.cpgs();
        wait_for(
            &format!("CompositePodGroup {name} {status}/{reason}"),
            SETTLE,
            || {
                let api = api.clone();
                async move {
                    let g = api.get(name).await?;
                    let c = condition(
                        g.status.as_ref().map(|s| &s.conditions),
                        phalanx_api::conditions::COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED,
                    );
                    Ok(c.filter(|c| c.status == status && c.reason == reason))
                }
            },
        )
        .await
    }

    /// Waits until `s` has nothing of its decisions in flight ([`Sched::nothing_in_flight`]); returns the attempts
    /// counted by then. The error names the gauges last seen.
    pub async fn wait_idle(&self, s: &Sched) -> anyhow::Result<f64> {
        let last = std::sync::Mutex::new(String::new());
        let res = wait_for("nothing the scheduler decided still in flight", SETTLE, || {
            let (idle, what) = s.nothing_in_flight();
            *last.lock().unwrap_or_else(|e| e.into_inner()) = what;
            let attempts = s.attempts();
            async move { Ok(idle.then_some(attempts)) }
        })
        .await;
        res.map_err(|e| e.context(last.lock().unwrap_or_else(|e| e.into_inner()).clone()))
    }

    /// Adds a 100m node (too small for any pod of these tests) and waits until `s` has run a scheduling cycle after
    /// it, then until nothing that cycle decided is still in flight: the positive sign that the scheduler has seen
    /// the cluster as it is now. A node event wakes every unschedulable entity (`crates/scheduler/src/queue`), as
    /// upstream's `NodeAdd` moves unschedulable pods back to the active queue (kubernetes
    /// `pkg/scheduler/backend/queue/scheduling_queue.go`). Returns the attempts seen, for messages. Needs a leader:
    /// a follower runs no cycle.
    pub async fn wake(&self, s: &Sched) -> anyhow::Result<f64> {
        let before = s.attempts();
        let i = self.wakes.fetch_add(1, Ordering::Relaxed);
        self.node(&format!("wake-{i}"), "100m").await?;
        wait_for(
            &format!("a scheduling cycle after node wake-{i} was added (attempts were {before})"),
            SETTLE,
            || {
                let now = s.attempts();
                async move { Ok((now > before).then_some(())) }
            },
        )
        .await?;
        self.wait_idle(s).await
    }

    /// Negative check: none of `names` is bound once [`Ctx::wake`] has seen `s` retry with the cluster as it is and
    /// finish what it decided, so that neither a slow machine nor a fast one decides the outcome. A bind is never
    /// undone, so the pods' state then is their history (the pods are not deleted meanwhile).
    pub async fn stays_unbound_after_cycle<S: AsRef<str>>(
        &self,
        s: &Sched,
        names: &[S],
    ) -> anyhow::Result<()> {
        let attempts = self.wake(s).await?;
        let b = self.bindings().await?;
        for n in names.iter().map(AsRef::as_ref) {
            ensure!(
                !b.contains_key(n),
                "pod {n} was bound to {:?} (after {attempts} scheduling attempts), expected it to stay pending",
                b.get(n)
            );
        }
        Ok(())
    }

    /// Asserts none of `names` gets bound during `d`: a final look for callers that have already waited for their
    /// positive sign (a condition or reason the scheduler wrote, its gauges settled) or whose scheduler runs no
    /// cycle (a follower), and for a test whose meaning is a span of time (a pod that waits while its group is
    /// missing). It can only fail on a bind, never on a slow machine; where a leader is running and the check is
    /// the point of the test, prefer [`Ctx::stays_unbound_after_cycle`].
    pub async fn stays_unbound<S: AsRef<str>>(&self, names: &[S], d: Duration) -> anyhow::Result<()> {
        let end = std::time::Instant::now() + d;
        loop {
            let b = self.bindings().await?;
            for n in names.iter().map(AsRef::as_ref) {
                ensure!(
                    !b.contains_key(n),
                    "pod {n} was bound to {:?}, expected it to stay pending",
                    b.get(n)
                );
            }
            if std::time::Instant::now() >= end {
                return Ok(());
            }
            // Poll interval of the look, not a wait for a condition.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
