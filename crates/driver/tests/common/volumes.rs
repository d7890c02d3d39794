//! Storage for the real-cluster tests: StorageClasses, PersistentVolumes pinned to nodes, CSINodes, claims, pods
//! mounting them (members of Phalanx's groups or of upstream's), and what the claims got bound to.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use super::cluster::{Ctx, SETTLE};

/// The node label a pinned volume's affinity names.
pub const HOST: &str = "kubernetes.io/hostname";

/// Cluster-scoped objects of one test, named after its namespace and deleted at its end.
pub struct Storage<'a> {
    ctx: &'a Ctx,
    classes: Vec<String>,
    /// The PersistentVolumes made so far, by full name.
    pub volumes: Vec<String>,
    csi_nodes: Vec<String>,
}

impl<'a> Storage<'a> {
    pub fn new(ctx: &'a Ctx) -> Self {
        Storage {
            ctx,
            classes: vec![],
            volumes: vec![],
            csi_nodes: vec![],
        }
    }

    /// A StorageClass `<ns>-<name>`; `provisioner` None is `kubernetes.io/no-provisioner`.
    pub async fn class(
        &mut self,
        name: &str,
        wait: bool,
        provisioner: Option<&str>,
    ) -> anyhow::Result<String> {
        let full = format!("{}-{name}", self.ctx.ns);
        let sc: StorageClass = serde_json::from_value(json!({
            "metadata": { "name": full },
            "provisioner": provisioner.unwrap_or("kubernetes.io/no-provisioner"),
            "volumeBindingMode": if wait { "WaitForFirstConsumer" } else { "Immediate" },
        }))?;
        Api::<StorageClass>::all(self.ctx.client.clone())
            .create(&PostParams::default(), &sc)
            .await
            .with_context(|| format!("creating StorageClass {full}"))?;
        self.classes.push(full.clone());
        Ok(full)
    }

    /// A PersistentVolume `<ns>-<name>` of `class`, 1Gi, with node affinity to `on` (a node name, by hostname
    /// label) and the extra `spec` fields given.
    pub async fn volume(
        &mut self,
        name: &str,
        class: &str,
        on: Option<&str>,
        extra: serde_json::Value,
    ) -> anyhow::Result<String> {
        let full = format!("{}-{name}", self.ctx.ns);
        let mut spec = json!({
            "capacity": { "storage": "1Gi" },
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": { "path": format!("/tmp/{full}") },
        });
        if let Some(n) = on {
            spec["nodeAffinity"] = json!({ "required": { "nodeSelectorTerms": [
                { "matchExpressions": [{ "key": HOST, "operator": "In", "values": [n] }] }
            ]}});
        }
        merge(&mut spec, extra);
        let labels = spec.get("labels").cloned();
        if let Some(m) = spec.as_object_mut() {
            m.remove("labels");
        }
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": { "name": full, "labels": labels },
            "spec": spec,
        }))?;
        Api::<PersistentVolume>::all(self.ctx.client.clone())
            .create(&PostParams::default(), &pv)
            .await
            .with_context(|| format!("creating PersistentVolume {full}"))?;
        self.volumes.push(full.clone());
        Ok(full)
    }

    /// A CSINode for `node` with an attach limit of `count` for `driver`.
    pub async fn csi_node(&mut self, node: &str, driver: &str, count: i32) -> anyhow::Result<()> {
        let n: CSINode = serde_json::from_value(json!({
            "metadata": { "name": node },
            "spec": { "drivers": [{ "name": driver, "nodeID": node, "allocatable": { "count": count } }] },
        }))?;
        Api::<CSINode>::all(self.ctx.client.clone())
            .create(&PostParams::default(), &n)
            .await
            .with_context(|| format!("creating CSINode {node}"))?;
        self.csi_nodes.push(node.to_owned());
        Ok(())
    }

    pub async fn cleanup(self) -> anyhow::Result<()> {
        let dp = DeleteParams::default();
        for v in &self.volumes {
            let _ = Api::<PersistentVolume>::all(self.ctx.client.clone())
                .delete(v, &dp)
                .await;
        }
        for c in &self.classes {
            let _ = Api::<StorageClass>::all(self.ctx.client.clone())
                .delete(c, &dp)
                .await;
        }
        for n in &self.csi_nodes {
            let _ = Api::<CSINode>::all(self.ctx.client.clone()).delete(n, &dp).await;
        }
        Ok(())
    }
}

pub fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(a), serde_json::Value::Object(b)) = (into.as_object_mut(), from) {
        for (k, v) in b {
            a.insert(k, v);
        }
    }
}

pub fn claims(ctx: &Ctx) -> Api<PersistentVolumeClaim> {
    Api::namespaced(ctx.client.clone(), &ctx.ns)
}

/// A claim of 1Gi; `volume` pre-binds it; `modes` default ReadWriteOnce.
pub async fn claim(
    ctx: &Ctx,
    name: &str,
    class: &str,
    volume: Option<&str>,
    modes: &[&str],
) -> anyhow::Result<()> {
    let modes = if modes.is_empty() {
        vec!["ReadWriteOnce"]
    } else {
        modes.to_vec()
    };
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "accessModes": modes,
            "storageClassName": class,
            "volumeName": volume,
            "resources": { "requests": { "storage": "1Gi" } },
        },
    }))?;
    claims(ctx)
        .create(&PostParams::default(), &pvc)
        .await
        .with_context(|| format!("creating claim {name}"))?;
    Ok(())
}

/// How a test pod names its group.
#[derive(Clone, Copy, Debug)]
pub enum Member<'a> {
    /// No group.
    Alone,
    /// Phalanx's group of this name (the `scheduling.phalanx.dev/pod-group` label).
    Phalanx(&'a str),
    /// Upstream's `scheduling.k8s.io` PodGroup of this name (`spec.schedulingGroup.podGroupName`).
    Native(&'a str),
}

/// A pod of Phalanx's `group` (None: standalone) mounting `claim`.
pub async fn pod(ctx: &Ctx, name: &str, group: Option<&str>, claim: &str) -> anyhow::Result<()> {
    pod_of(ctx, name, group.map_or(Member::Alone, Member::Phalanx), claim).await
}

/// A pod, member as `member` says, mounting `claim` (100m CPU, the test's scheduler).
pub async fn pod_of(ctx: &Ctx, name: &str, member: Member<'_>, claim: &str) -> anyhow::Result<()> {
    let mut labels = BTreeMap::new();
    if let Member::Phalanx(g) = member {
        labels.insert(phalanx_api::labels::POD_GROUP.to_string(), g.to_string());
    }
    let mut p = json!({
        "metadata": { "name": name, "labels": labels },
        "spec": {
            "schedulerName": ctx.sched,
            "terminationGracePeriodSeconds": 0,
            "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": "100m" } },
                             "volumeMounts": [{ "name": "data", "mountPath": "/data" }] }],
            "volumes": [{ "name": "data", "persistentVolumeClaim": { "claimName": claim } }],
        }
    });
    if let Member::Native(g) = member {
        p["spec"]["schedulingGroup"] = json!({ "podGroupName": g });
    }
    let p: Pod = serde_json::from_value(p)?;
    ctx.pods()
        .create(&PostParams::default(), &p)
        .await
        .with_context(|| format!("creating pod {name}"))?;
    Ok(())
}

/// Claim name -> bound volume name, for the claims that are Bound.
pub async fn bound_claims(ctx: &Ctx) -> anyhow::Result<HashMap<String, String>> {
    Ok(claims(ctx)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
        .filter_map(|c| Some((c.name_any(), c.spec?.volume_name?)))
        .collect())
}

pub async fn wait_claims_bound(ctx: &Ctx, names: &[&str]) -> anyhow::Result<HashMap<String, String>> {
    phalanx_testenv::wait_for(&format!("claims {names:?} Bound"), SETTLE, || async {
        let b = bound_claims(ctx).await?;
        Ok(names.iter().all(|n| b.contains_key(*n)).then_some(b))
    })
    .await
}

pub async fn host_node(ctx: &Ctx, name: &str, extra: &[(&str, &str)]) -> anyhow::Result<String> {
    let full = format!("{}-{name}", ctx.ns);
    let mut labels = vec![(HOST, full.as_str())];
    labels.extend_from_slice(extra);
    ctx.node_labelled(name, "8", &labels).await
}

pub fn volume_of(claims: &HashMap<String, String>, claim: &str) -> String {
    claims.get(claim).cloned().unwrap_or_default()
}
