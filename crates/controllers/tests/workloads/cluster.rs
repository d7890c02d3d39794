//! One case's namespace, nodes and the checks on its pods and groups.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use phalanx_api::conditions::{
    COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED, POD_GROUP_INITIALLY_SCHEDULED, reasons,
};
use phalanx_api::owners::OWNER_UID_LABEL;
use phalanx_api::v1alpha3::CompositePodGroup;
use phalanx_api::v1beta1::{PodGroup, PodGroupSchedulingPolicy};
use phalanx_testenv::{FakeNode, TEST_NS_LABEL, TestEnv, create_namespace};
use serde_json::{Value, json};

use crate::checks::{bound, show, wait_or_describe};
use crate::harness::{Harness, harness};

/// Bound of every wait of a case; only a stuck component reaches it.
pub const WAIT: Duration = Duration::from_secs(120);

/// A kind of the workload controllers.
pub struct Kind {
    gvk: (&'static str, &'static str, &'static str),
    plural: &'static str,
    /// False for a cluster-scoped kind.
    namespaced: bool,
}

/// `jobset.x-k8s.io/v1alpha2` JobSet.
pub const JOBSET: Kind = Kind {
    gvk: ("jobset.x-k8s.io", "v1alpha2", "JobSet"),
    plural: "jobsets",
    namespaced: true,
};
/// `leaderworkerset.x-k8s.io/v1` LeaderWorkerSet.
pub const LWS: Kind = Kind {
    gvk: ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"),
    plural: "leaderworkersets",
    namespaced: true,
};
/// `ray.io/v1` RayCluster.
pub const RAYCLUSTER: Kind = Kind {
    gvk: ("ray.io", "v1", "RayCluster"),
    plural: "rayclusters",
    namespaced: true,
};
/// `trainer.kubeflow.org/v1alpha1` TrainJob.
pub const TRAINJOB: Kind = Kind {
    gvk: ("trainer.kubeflow.org", "v1alpha1", "TrainJob"),
    plural: "trainjobs",
    namespaced: true,
};
/// `trainer.kubeflow.org/v1alpha1` ClusterTrainingRuntime (cluster-scoped).
pub const CLUSTER_TRAINING_RUNTIME: Kind = Kind {
    gvk: ("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime"),
    plural: "clustertrainingruntimes",
    namespaced: false,
};
/// `kubeflow.org/v2beta1` MPIJob.
pub const MPIJOB: Kind = Kind {
    gvk: ("kubeflow.org", "v2beta1", "MPIJob"),
    plural: "mpijobs",
    namespaced: true,
};

/// The groups Phalanx should make for one scheduling unit of an owner.
pub struct Unit {
    /// The CompositePodGroup tying the groups together, if any.
    pub composite: Option<String>,
    /// `(PodGroup name, gang minCount)`; `None`: a group of independent pods (the Basic policy, no gang).
    pub groups: Vec<(String, Option<i32>)>,
}

/// One case: its client and namespace, with nodes labelled for it.
pub struct Case {
    pub client: Client,
    pub ns: String,
    harness: Harness,
    /// Nodes made so far (the next one's index).
    nodes: AtomicUsize,
}

/// Starts the shared harness (once per binary), makes a namespace `<prefix>-<hex>` and `nodes` fake nodes of
/// `cpu` each labelled for it (110 pods, 32Gi).
pub async fn case(prefix: &str, nodes: usize, cpu: &str) -> Result<Case> {
    let harness = tokio::task::spawn_blocking(harness)
        .await?
        .map_err(|e| anyhow!("harness: {e}"))?;
    let client = TestEnv::shared().client().await?;
    let ns = create_namespace(&client, prefix).await?;
    let c = Case {
        client,
        ns,
        harness,
        nodes: AtomicUsize::new(0),
    };
    c.add_nodes(nodes, cpu).await?;
    Ok(c)
}

fn condition<'a>(conds: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conds.iter().find(|c| c.type_ == type_)
}

fn show_policy(p: &PodGroupSchedulingPolicy) -> String {
    match (&p.basic, &p.gang) {
        (Some(_), None) => "basic".into(),
        (None, Some(g)) => format!("gang minCount {}", g.min_count),
        _ => format!("{p:?}"),
    }
}

fn unschedulable(c: Option<&Condition>) -> bool {
    c.is_some_and(|c| c.status == "False" && c.reason == reasons::UNSCHEDULABLE)
}

impl Case {
    /// Adds `n` fake nodes of `cpu` each (110 pods, 32Gi) labelled for this case: `<ns>-n<i>`.
    pub async fn add_nodes(&self, n: usize, cpu: &str) -> Result<()> {
        for _ in 0..n {
            let i = self.nodes.fetch_add(1, Ordering::Relaxed);
            FakeNode::new(format!("{}-n{i}", self.ns))
                .cpu(cpu)
                .memory("32Gi")
                .pods(110)
                .test_namespace(&self.ns)
                .create(&self.client)
                .await?;
        }
        Ok(())
    }

    /// A pod template for Phalanx: `schedulerName: phalanx-scheduler`, one container requesting `cpu`, pinned to
    /// this case's nodes (the shared scheduler sees every case's pods).
    pub fn pod_template(&self, cpu: &str, restart: &str) -> Value {
        json!({
            "spec": {
                "schedulerName": phalanx_api::DEFAULT_SCHEDULER_NAME,
                "nodeSelector": { TEST_NS_LABEL: self.ns },
                "restartPolicy": restart,
                "terminationGracePeriodSeconds": 0,
                "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": cpu } } }],
            }
        })
    }

    pub fn api(&self, kind: &Kind) -> Api<DynamicObject> {
        let (g, v, k) = kind.gvk;
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), kind.plural);
        if kind.namespaced {
            Api::namespaced_with(self.client.clone(), &self.ns, &ar)
        } else {
            Api::all_with(self.client.clone(), &ar)
        }
    }

    /// Creates an object of `kind`; returns it with its uid.
    pub async fn create(&self, kind: &Kind, v: Value) -> Result<DynamicObject> {
        let name = v["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let obj: DynamicObject = serde_json::from_value(v)?;
        self.api(kind)
            .create(&PostParams::default(), &obj)
            .await
            .with_context(|| format!("creating {} {name}", kind.gvk.2))
    }

    /// Merge-patches the object `name` of `kind` with `patch`.
    pub async fn patch(&self, kind: &Kind, name: &str, patch: Value) -> Result<()> {
        self.api(kind)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("patching {} {name}", kind.gvk.2))?;
        Ok(())
    }

    /// Marks pod `name` Succeeded as its kubelet would (phase, conditions, every container terminated with exit
    /// code 0), once kwok has made it Running: kwok's `pod-ready` stage selects Pending pods, and a pod marked
    /// Succeeded while kwok's write for it was under way could go back to Running.
    pub async fn mark_succeeded(&self, name: &str) -> Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let pod = self
            .until(&format!("pod {name} Running (kwok)"), || async {
                let p = pods.get(name).await?;
                let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                Ok(running.then_some(p))
            })
            .await?;
        let now = k8s_openapi::jiff::Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)?
            .to_string();
        let containers: Vec<Value> = pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .map(|c| {
                json!({ "name": c.name, "image": c.image, "imageID": "", "ready": false, "restartCount": 0,
                        "started": false,
                        "state": { "terminated": { "exitCode": 0, "reason": "Completed",
                                                   "startedAt": now, "finishedAt": now } } })
            })
            .collect();
        let cond = |t: &str, status: &str| {
            let mut c = json!({ "type": t, "status": status, "lastTransitionTime": now });
            if status == "False" {
                c["reason"] = json!("PodCompleted");
            }
            c
        };
        let status = json!({ "status": {
            "phase": "Succeeded",
            "conditions": [cond("PodScheduled", "True"), cond("Initialized", "True"),
                           cond("Ready", "False"), cond("ContainersReady", "False")],
            "containerStatuses": containers,
        } });
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .with_context(|| format!("marking pod {name} Succeeded"))?;
        Ok(())
    }

    pub async fn delete(&self, kind: &Kind, name: &str) -> Result<()> {
        self.api(kind)
            .delete(name, &DeleteParams::background())
            .await
            .with_context(|| format!("deleting {} {name}", kind.gvk.2))?;
        Ok(())
    }

    /// Deletes the Jobs matching the label `selector` (background propagation: the garbage collector deletes their
    /// pods).
    pub async fn delete_jobs(&self, selector: &str) -> Result<()> {
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &self.ns);
        jobs.delete_collection(
            &DeleteParams::background(),
            &ListParams::default().labels(selector),
        )
        .await
        .with_context(|| format!("deleting the Jobs {selector}"))?;
        Ok(())
    }

    /// The pods of this namespace matching the label `selector`, not being deleted.
    pub async fn pods(&self, selector: &str) -> Result<Vec<Pod>> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let list = api.list(&ListParams::default().labels(selector)).await?;
        Ok(list
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect())
    }

    /// `(pods, bound)` of [`Case::pods`].
    pub async fn counts(&self, selector: &str) -> Result<(usize, usize)> {
        let pods = self.pods(selector).await?;
        let b = pods.iter().filter(|p| bound(p)).count();
        Ok((pods.len(), b))
    }

    /// [`wait_or_describe`] with [`WAIT`]: a timeout also shows the namespace ([`Case::describe`]).
    pub async fn until<T, F, Fut>(&self, what: &str, probe: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<T>>>,
    {
        wait_or_describe(what, WAIT, probe, || self.describe()).await
    }

    /// Waits until `n` pods match `selector` (created by the workload controller through its webhooks), then checks
    /// that each names `phalanx-scheduler`.
    pub async fn until_created(&self, selector: &str, n: usize) -> Result<()> {
        self.until(&format!("{n} pods ({selector}) created"), || async {
            Ok((self.pods(selector).await?.len() == n).then_some(()))
        })
        .await?;
        for p in self.pods(selector).await? {
            let name = p.spec.as_ref().and_then(|s| s.scheduler_name.clone());
            ensure!(
                name.as_deref() == Some(phalanx_api::DEFAULT_SCHEDULER_NAME),
                "pod {} has schedulerName {name:?}",
                p.name_any()
            );
        }
        Ok(())
    }

    /// Waits until the pods matching `selector` number `n` and `bound` of them are bound.
    pub async fn until_pods(&self, selector: &str, n: usize, bound: usize) -> Result<()> {
        self.until(
            &format!("{n} pods ({selector}), {bound} of them bound"),
            || async { Ok((self.counts(selector).await? == (n, bound)).then_some(())) },
        )
        .await
    }

    /// Every pod, PodGroup and CompositePodGroup of the namespace with its state, the Warning events, and where
    /// the workload controllers log: the context of a failed wait.
    pub async fn describe(&self) -> String {
        let mut out = format!("--- namespace {} ---\n", self.ns);
        match self.pods("").await {
            Ok(mut pods) => {
                pods.sort_by_key(|p| p.name_any());
                for p in &pods {
                    let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
                    let sched = p
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
                        .map(|c| {
                            format!(
                                "{} {}: {}",
                                c.status,
                                c.reason.clone().unwrap_or_default(),
                                c.message.clone().unwrap_or_default()
                            )
                        });
                    let _ = writeln!(
                        out,
                        "pod {} scheduler={} node={} PodScheduled={}",
                        p.name_any(),
                        p.spec
                            .as_ref()
                            .and_then(|s| s.scheduler_name.clone())
                            .unwrap_or_default(),
                        node.unwrap_or_else(|| "-".into()),
                        sched.unwrap_or_else(|| "-".into())
                    );
                }
            }
            Err(e) => {
                let _ = writeln!(out, "(pods: {e:#})");
            }
        }
        let pgs: Api<PodGroup> = Api::namespaced(self.client.clone(), &self.ns);
        match pgs.list(&ListParams::default()).await {
            Ok(l) if l.items.is_empty() => out.push_str("no PodGroup\n"),
            Ok(l) => {
                for g in l.items {
                    let conds = g.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
                    let _ = writeln!(
                        out,
                        "PodGroup {} {} parent={:?} owner-uid={:?} {}={}",
                        g.name_any(),
                        show_policy(&g.spec.scheduling_policy),
                        g.spec.parent_composite_pod_group_name,
                        g.labels().get(OWNER_UID_LABEL),
                        POD_GROUP_INITIALLY_SCHEDULED,
                        show(condition(conds, POD_GROUP_INITIALLY_SCHEDULED))
                    );
                }
            }
            Err(e) => {
                let _ = writeln!(out, "(PodGroups: {e:#})");
            }
        }
        let cpgs: Api<CompositePodGroup> = Api::namespaced(self.client.clone(), &self.ns);
        match cpgs.list(&ListParams::default()).await {
            Ok(l) if l.items.is_empty() => out.push_str("no CompositePodGroup\n"),
            Ok(l) => {
                for g in l.items {
                    let conds = g.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
                    let _ = writeln!(
                        out,
                        "CompositePodGroup {} {}={}",
                        g.name_any(),
                        COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED,
                        show(condition(conds, COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED))
                    );
                }
            }
            Err(e) => {
                let _ = writeln!(out, "(CompositePodGroups: {e:#})");
            }
        }
        // The last 20 of the Warnings and the events on owners (GangGroupApplied, UnsupportedOwnerSpec, the
        // controllers' own).
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        if let Ok(mut l) = events.list(&ListParams::default()).await {
            l.items.retain(|e| {
                e.type_.as_deref() == Some("Warning")
                    || !matches!(e.involved_object.kind.as_deref(), Some("Pod" | "Job"))
            });
            l.items.sort_by_key(|e| e.metadata.creation_timestamp.clone());
            let skip = l.items.len().saturating_sub(20);
            for e in &l.items[skip..] {
                let _ = writeln!(
                    out,
                    "{} {} {}/{}: {}",
                    e.type_.clone().unwrap_or_default(),
                    e.reason.clone().unwrap_or_default(),
                    e.involved_object.kind.clone().unwrap_or_default(),
                    e.involved_object.name.clone().unwrap_or_default(),
                    e.message.clone().unwrap_or_default()
                );
            }
        }
        for log in &self.harness.logs {
            let _ = writeln!(out, "log: {}", log.display());
        }
        out
    }

    /// Waits until every group of `unit` exists, then checks the contract: each labelled
    /// `scheduling.phalanx.dev/owner-uid: <owner_uid>`, each PodGroup a gang of its minCount, the PodGroups the
    /// children of the unit's CompositePodGroup when it has one and roots otherwise.
    pub async fn expect_unit(&self, unit: &Unit, owner_uid: &str) -> Result<()> {
        let pgs: Api<PodGroup> = Api::namespaced(self.client.clone(), &self.ns);
        let cpgs: Api<CompositePodGroup> = Api::namespaced(self.client.clone(), &self.ns);
        let names: Vec<&str> = unit
            .composite
            .iter()
            .map(String::as_str)
            .chain(unit.groups.iter().map(|(n, _)| n.as_str()))
            .collect();
        let what = format!("the groups {names:?} (CompositePodGroup first when there is one)");
        let (composite, groups) = self
            .until(&what, || async {
                let composite = match &unit.composite {
                    Some(c) => match cpgs.get_opt(c).await? {
                        Some(x) => Some(x),
                        None => return Ok(None),
                    },
                    None => None,
                };
                let mut groups = Vec::new();
                for (name, _) in &unit.groups {
                    match pgs.get_opt(name).await? {
                        Some(g) => groups.push(g),
                        None => return Ok(None),
                    }
                }
                Ok(Some((composite, groups)))
            })
            .await?;
        let uid_of =
            |labels: &std::collections::BTreeMap<String, String>| labels.get(OWNER_UID_LABEL).cloned();
        if let Some(c) = &composite {
            ensure!(
                uid_of(c.labels()).as_deref() == Some(owner_uid),
                "CompositePodGroup {} is labelled {OWNER_UID_LABEL}={:?}, want {owner_uid}",
                c.name_any(),
                uid_of(c.labels())
            );
        }
        for (g, (name, min)) in groups.iter().zip(&unit.groups) {
            ensure!(
                uid_of(g.labels()).as_deref() == Some(owner_uid),
                "PodGroup {name} is labelled {OWNER_UID_LABEL}={:?}, want {owner_uid}",
                uid_of(g.labels())
            );
            let policy = &g.spec.scheduling_policy;
            let got = policy.gang.as_ref().map(|x| x.min_count);
            ensure!(
                got == *min && policy.basic.is_some() == min.is_none(),
                "PodGroup {name}: policy {}, want {}",
                show_policy(policy),
                min.map_or("basic".into(), |m| format!("gang minCount {m}"))
            );
            ensure!(
                g.spec.parent_composite_pod_group_name == unit.composite,
                "PodGroup {name}: parentCompositePodGroupName {:?}, want {:?}",
                g.spec.parent_composite_pod_group_name,
                unit.composite
            );
        }
        Ok(())
    }

    /// Whether the scheduler has refused `unit` as it is: its CompositePodGroup or one of its PodGroups says
    /// `*InitiallyScheduled=False/Unschedulable` (written after a cycle over all its pods, never while gathering).
    pub async fn refused(&self, unit: &Unit) -> Result<bool> {
        if let Some(c) = &unit.composite {
            let cpgs: Api<CompositePodGroup> = Api::namespaced(self.client.clone(), &self.ns);
            if let Some(c) = cpgs.get_opt(c).await? {
                let conds = c.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
                if unschedulable(condition(conds, COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED)) {
                    return Ok(true);
                }
            }
        }
        let pgs: Api<PodGroup> = Api::namespaced(self.client.clone(), &self.ns);
        for (name, _) in &unit.groups {
            if let Some(g) = pgs.get_opt(name).await? {
                let conds = g.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
                if unschedulable(condition(conds, POD_GROUP_INITIALLY_SCHEDULED)) {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Whether the CompositePodGroup `name` exists.
    pub async fn composite_exists(&self, name: &str) -> Result<bool> {
        let cpgs: Api<CompositePodGroup> = Api::namespaced(self.client.clone(), &self.ns);
        Ok(cpgs.get_opt(name).await?.is_some())
    }
}
