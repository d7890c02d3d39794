//! One case: its namespace, its own NodePool (the only nodes its pods may use), its gangs, and what Karpenter made
//! for it.

use std::fmt::Write as _;
use std::future::Future;
use std::ops::Range;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED;
use phalanx_api::v1beta1::PodGroup;
use phalanx_testenv::{TestEnv, create_namespace};
use serde_json::json;

use crate::checks::{bound, show, wait_or_describe};
use crate::harness::{Harness, NODE_CLASS, harness};
use crate::processes::FIELD_MANAGER;

/// Bound of every wait of a case (Karpenter's round, kwok's node start, Phalanx's cycle, on a loaded 2-core
/// machine); only a stuck component reaches it.
pub const WAIT: Duration = Duration::from_secs(180);
/// Label Karpenter puts on its NodeClaims and their Nodes: the NodePool (`pkg/apis/v1/labels.go`).
pub const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
/// Taint of a case's NodePool (value: the case's namespace), tolerated by its pods only.
pub const CASE_TAINT: &str = "phalanx.dev/autoscaling-case";
/// The one instance type the cases' NodePools allow (`kwok/cloudprovider/instance_types.json`: 8 cpu, of which
/// 7.9 allocatable after the 100m kube-reserved of `kwok/cloudprovider/helpers.go`), so that the nodes a gang needs
/// is a number: two members of [`MEMBER_CPU`] per node.
pub const INSTANCE_TYPE: &str = "c-8x-amd64-linux";
/// A member's cpu request: two fit on an [`INSTANCE_TYPE`] node, three do not.
pub const MEMBER_CPU: &str = "3500m";
/// Members of [`MEMBER_CPU`] per [`INSTANCE_TYPE`] node.
pub const MEMBERS_PER_NODE: usize = 2;

/// The NodeClaim resource (`karpenter.sh/v1`, cluster-scoped).
fn node_claim_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim"),
        "nodeclaims",
    )
}

fn node_pool_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"),
        "nodepools",
    )
}

/// One case: its client, namespace and NodePool (named as the namespace).
pub struct Case {
    pub client: Client,
    pub ns: String,
    harness: Harness,
}

/// Starts the shared harness (once per binary) and makes a namespace `<prefix>-<hex>`; no nodes: the case's
/// NodePool ([`Case::node_pool`]) is the only room its pods get.
pub async fn case(prefix: &str) -> Result<Case> {
    let harness = tokio::task::spawn_blocking(harness)
        .await?
        .map_err(|e| anyhow!("harness: {e}"))?;
    let client = TestEnv::shared().client().await?;
    let ns = create_namespace(&client, prefix).await?;
    Ok(Case { client, ns, harness })
}

/// Creates PriorityClass `name` of `value` unless it exists (for the cases with priorities; cluster-scoped, so
/// shared by every case that names it).
pub async fn priority_class(client: &Client, name: &str, value: i32) -> Result<()> {
    let pc: PriorityClass = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": { "name": name }, "value": value, "globalDefault": false,
    }))?;
    Api::<PriorityClass>::all(client.clone())
        .patch(name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&pc))
        .await
        .with_context(|| format!("creating PriorityClass {name}"))?;
    Ok(())
}

/// The pod's `PodScheduled` condition as `(status, reason)`.
pub fn pod_scheduled(p: &Pod) -> Option<(String, String)> {
    let conds = p.status.as_ref()?.conditions.as_ref()?;
    let c = conds.iter().find(|c| c.type_ == "PodScheduled")?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

impl Case {
    /// The NodePool's name: the namespace's.
    pub fn pool(&self) -> &str {
        &self.ns
    }

    /// Creates this case's NodePool ([`Case::pool`]): see [`Case::node_pool_named`].
    pub async fn node_pool(&self, cpu_limit: Option<&str>) -> Result<()> {
        self.node_pool_named(self.pool(), cpu_limit).await
    }

    /// Creates NodePool `name`: [`INSTANCE_TYPE`] on-demand nodes of [`NODE_CLASS`], labelled [`NODEPOOL_LABEL`]
    /// by Karpenter and tainted [`CASE_TAINT`], with a `limits.cpu` when `cpu_limit` is given; waits until it is
    /// Ready. Never consolidated (`consolidateAfter: Never`): a case's nodes stay while it watches them, also empty.
    /// Limits: Karpenter counts a NodeClaim being launched at its instance type's capacity (8 cpu), but the KWOK
    /// provider gives the Node the capacity its NodeClaim requested (`kwok/cloudprovider/cloudprovider.go`,
    /// `toNode`), so the pool's `status.resources` then sums its members' requests (7 cpu for two members).
    pub async fn node_pool_named(&self, name: &str, cpu_limit: Option<&str>) -> Result<()> {
        let mut spec = json!({
            "disruption": { "consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "Never" },
            "template": { "spec": {
                "expireAfter": "Never",
                "nodeClassRef": { "group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": NODE_CLASS },
                "requirements": [
                    { "key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE] },
                    { "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"] },
                ],
                "taints": [{ "key": CASE_TAINT, "value": self.ns, "effect": "NoSchedule" }],
            } },
        });
        if let Some(cpu) = cpu_limit {
            spec["limits"] = json!({ "cpu": cpu });
        }
        let np: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": { "name": name }, "spec": spec,
        }))?;
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &node_pool_resource());
        api.create(&PostParams::default(), &np)
            .await
            .with_context(|| format!("creating NodePool {name}"))?;
        // Karpenter provisions only for a Ready NodePool (its node class resolved and Ready, its spec validated).
        self.until(&format!("NodePool {name} Ready"), || async {
            let np = api.get(name).await?;
            let ready = np.data["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
            Ok(ready.then_some(()))
        })
        .await
    }

    /// The NodePool's `status.resources.cpu` (what its nodes hold, the figure its `limits` are checked against).
    pub async fn pool_cpu(&self) -> Result<String> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &node_pool_resource());
        let np = api.get(self.pool()).await?;
        Ok(np.data["status"]["resources"]["cpu"]
            .as_str()
            .unwrap_or("0")
            .to_string())
    }

    /// Creates PodGroup `name`, a gang of `min_count`.
    pub async fn pod_group(&self, name: &str, min_count: i32) -> Result<()> {
        self.pod_group_with(name, min_count, json!({})).await
    }

    /// Creates PodGroup `name`, a gang of `min_count`, with the fields of `extra` added to its spec
    /// (`priorityClassName`, `preemptionDelaySeconds`, ...).
    pub async fn pod_group_with(&self, name: &str, min_count: i32, extra: serde_json::Value) -> Result<()> {
        let mut spec = json!({ "schedulingPolicy": { "gang": { "minCount": min_count } } });
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        let pg: PodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
            "metadata": { "name": name },
            "spec": spec,
        }))?;
        Api::<PodGroup>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &pg)
            .await
            .with_context(|| format!("creating PodGroup {name}"))?;
        Ok(())
    }

    /// Creates the members `<group>-<i>` for `i` in `members` of PodGroup `group`: `phalanx-scheduler`, one
    /// container of [`MEMBER_CPU`], only for this case's NodePool (its label selected, its taint tolerated), with
    /// `priority_class` when given.
    pub async fn members(
        &self,
        group: &str,
        members: Range<usize>,
        priority_class: Option<&str>,
    ) -> Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        for i in members {
            let mut pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": { "name": format!("{group}-{i}"), "labels": { phalanx_api::labels::POD_GROUP: group } },
                "spec": {
                    "schedulerName": phalanx_api::DEFAULT_SCHEDULER_NAME,
                    "nodeSelector": { NODEPOOL_LABEL: self.pool() },
                    "tolerations": [{ "key": CASE_TAINT, "operator": "Equal", "value": self.ns,
                                      "effect": "NoSchedule" }],
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{ "name": "c", "image": "busybox",
                                     "resources": { "requests": { "cpu": MEMBER_CPU } } }],
                },
            });
            if let Some(pc) = priority_class {
                pod["spec"]["priorityClassName"] = json!(pc);
            }
            let pod: Pod = serde_json::from_value(pod)?;
            api.create(&PostParams::default(), &pod)
                .await
                .with_context(|| format!("creating pod {group}-{i}"))?;
        }
        Ok(())
    }

    /// A pod `name` of [`MEMBER_CPU`] for NodePool `pool` that no scheduler serves, which the test marks
    /// `PodScheduled=False/Unschedulable` as a scheduler that found no room would: Karpenter provisions for it
    /// (`IsProvisionable`), so its NodeClaim shows that a provisioning round ran after it was created.
    pub async fn unschedulable_probe(&self, name: &str, pool: &str) -> Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name },
            "spec": {
                "schedulerName": "autoscaling-test-probe",
                "nodeSelector": { NODEPOOL_LABEL: pool },
                "tolerations": [{ "key": CASE_TAINT, "operator": "Equal", "value": self.ns, "effect": "NoSchedule" }],
                "containers": [{ "name": "c", "image": "busybox",
                                 "resources": { "requests": { "cpu": MEMBER_CPU } } }],
            },
        }))?;
        api.create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("creating pod {name}"))?;
        let now = k8s_openapi::jiff::Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)?
            .to_string();
        let status = json!({ "status": { "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "no node of its NodePool yet", "lastTransitionTime": now,
        }] } });
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .with_context(|| format!("marking pod {name} Unschedulable"))?;
        Ok(())
    }

    /// Karpenter's events on pod `pod` of this namespace: `(reason, message)` (`Nominated`: it made or found a
    /// NodeClaim for the pod; `FailedScheduling`: it could not, e.g. over a NodePool's limits).
    pub async fn karpenter_events(&self, pod: &str) -> Result<Vec<(String, String)>> {
        let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(self.client.clone(), &self.ns);
        let lp = ListParams::default().fields(&format!("involvedObject.name={pod}"));
        Ok(api
            .list(&lp)
            .await?
            .items
            .into_iter()
            .filter(|e| e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("karpenter"))
            .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
            .collect())
    }

    /// A gang: PodGroup `name` of `min_count` and its members `0..members`.
    pub async fn gang(&self, name: &str, min_count: i32, members: usize) -> Result<()> {
        self.pod_group(name, min_count).await?;
        self.members(name, 0..members, None).await
    }

    /// The members of PodGroup `group`, not being deleted.
    pub async fn pods(&self, group: &str) -> Result<Vec<Pod>> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let sel = format!("{}={group}", phalanx_api::labels::POD_GROUP);
        let list = api.list(&ListParams::default().labels(&sel)).await?;
        Ok(list
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect())
    }

    /// `(members, bound)` of PodGroup `group`.
    pub async fn counts(&self, group: &str) -> Result<(usize, usize)> {
        let pods = self.pods(group).await?;
        Ok((pods.len(), pods.iter().filter(|p| bound(p)).count()))
    }

    /// PodGroup `group`'s `PodGroupInitiallyScheduled` condition.
    pub async fn group_condition(&self, group: &str) -> Result<Option<Condition>> {
        let pg = Api::<PodGroup>::namespaced(self.client.clone(), &self.ns)
            .get(group)
            .await?;
        Ok(pg.status.and_then(|s| {
            s.conditions
                .into_iter()
                .find(|c| c.type_ == POD_GROUP_INITIALLY_SCHEDULED)
        }))
    }

    /// The NodeClaims of this case's NodePool.
    pub async fn node_claims(&self) -> Result<Vec<DynamicObject>> {
        self.node_claims_of(self.pool()).await
    }

    /// The NodeClaims of NodePool `pool`.
    pub async fn node_claims_of(&self, pool: &str) -> Result<Vec<DynamicObject>> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &node_claim_resource());
        let sel = format!("{NODEPOOL_LABEL}={pool}");
        Ok(api.list(&ListParams::default().labels(&sel)).await?.items)
    }

    /// The Nodes of this case's NodePool.
    pub async fn nodes(&self) -> Result<Vec<Node>> {
        let sel = format!("{NODEPOOL_LABEL}={}", self.pool());
        Ok(Api::<Node>::all(self.client.clone())
            .list(&ListParams::default().labels(&sel))
            .await?
            .items)
    }

    /// Waits until the NodePool has `n` NodeClaims, each `Initialized` (its Node registered, Ready, the startup
    /// taints gone: `pkg/controllers/nodeclaim/lifecycle/initialization.go`), and returns their names.
    pub async fn until_initialized(&self, n: usize) -> Result<Vec<String>> {
        self.until(
            &format!("{n} NodeClaims of NodePool {} Initialized", self.pool()),
            || async {
                let claims = self.node_claims().await?;
                let init = claims
                    .iter()
                    .filter(|c| claim_condition(c, "Initialized"))
                    .count();
                Ok((claims.len() == n && init == n)
                    .then(|| claims.iter().map(ResourceExt::name_any).collect()))
            },
        )
        .await
    }

    /// [`wait_or_describe`] with [`WAIT`]: a timeout also shows the case ([`Case::describe`]).
    pub async fn until<T, F, Fut>(&self, what: &str, probe: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<T>>>,
    {
        wait_or_describe(what, WAIT, probe, || self.describe()).await
    }

    /// Every pod and PodGroup of the namespace, the NodePool's NodeClaims and Nodes, and where Karpenter logs: the
    /// context of a failed check.
    pub async fn describe(&self) -> String {
        let mut out = format!("--- namespace and NodePool {} ---\n", self.ns);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        match pods.list(&ListParams::default()).await {
            Ok(list) => {
                for p in &list.items {
                    let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
                    let events = self.karpenter_events(&p.name_any()).await.unwrap_or_default();
                    let _ = writeln!(
                        out,
                        "pod {} node={} PodScheduled={:?} Karpenter: {events:?}",
                        p.name_any(),
                        node.unwrap_or_else(|| "-".into()),
                        pod_scheduled(p)
                    );
                }
            }
            Err(e) => {
                let _ = writeln!(out, "listing pods: {e}");
            }
        }
        let groups: Api<PodGroup> = Api::namespaced(self.client.clone(), &self.ns);
        if let Ok(list) = groups.list(&ListParams::default()).await {
            for g in &list.items {
                let cond = g.status.as_ref().and_then(|s| {
                    s.conditions
                        .iter()
                        .find(|c| c.type_ == POD_GROUP_INITIALLY_SCHEDULED)
                });
                let _ = writeln!(out, "PodGroup {}: {}", g.name_any(), show(cond));
            }
        }
        match self.node_claims().await {
            Ok(claims) => {
                for c in &claims {
                    let conds: Vec<String> = c.data["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|c| {
                            format!(
                                "{}={}",
                                c["type"].as_str().unwrap_or("?"),
                                c["status"].as_str().unwrap_or("?")
                            )
                        })
                        .collect();
                    let node = c.data["status"]["nodeName"].as_str().unwrap_or("-");
                    let _ = writeln!(out, "NodeClaim {} node={node} {}", c.name_any(), conds.join(" "));
                }
            }
            Err(e) => {
                let _ = writeln!(out, "listing NodeClaims: {e}");
            }
        }
        if let Ok(cpu) = self.pool_cpu().await {
            let _ = writeln!(out, "NodePool status.resources.cpu={cpu}");
        }
        let _ = writeln!(out, "Karpenter's log: {}", self.harness.karpenter_log.display());
        out
    }
}

/// Whether NodeClaim `c` has condition `type_` True.
pub fn claim_condition(c: &DynamicObject, type_: &str) -> bool {
    c.data["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|x| x["type"] == type_ && x["status"] == "True"))
}
