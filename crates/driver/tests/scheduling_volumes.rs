//! Volumes on a real control plane (phalanx-testenv: kube-apiserver, etcd, kube-controller-manager v1.37.2 with its
//! PV controller, and kwok): bound volumes pin their pods, WaitForFirstConsumer claims are bound all-or-nothing per
//! gang, dynamic provisioning goes through `volume.kubernetes.io/selected-node` (the test plays the external
//! provisioner), and the VolumeRestrictions, NodeVolumeLimits and VolumeZone filters keep pods where upstream does.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use common::cluster::{Ctx, SETTLE, pod_scheduled, setup};

use common::volumes::{
    HOST, Storage, bound_claims, claim, claims, host_node, pod, volume_of, wait_claims_bound,
};
const PROVISIONER: &str = "test.phalanx.dev/provisioner";

/// Plays an external provisioner for claims of `class`: once a claim has `volume.kubernetes.io/selected-node`, it
/// creates a 1Gi volume pinned to that node and pre-bound to the claim (kube-controller-manager's PV controller
/// then binds the two), after `delay`.
fn provisioner(ctx: &Ctx, class: String, delay: Duration) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    let (client, ns) = (ctx.client.clone(), ctx.ns.clone());
    tokio::spawn(async move {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        let mut done = std::collections::HashSet::new();
        loop {
            for c in claims.list(&ListParams::default()).await?.items {
                let Some(node) = c.annotations().get("volume.kubernetes.io/selected-node").cloned() else {
                    continue;
                };
                let cname = c.name_any();
                if done.contains(&cname)
                    || c.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()) != Some(&class)
                {
                    continue;
                }
                tokio::time::sleep(delay).await;
                let pv: PersistentVolume = serde_json::from_value(json!({
                    "metadata": { "name": format!("{ns}-{cname}"), "labels": { "test-ns": ns } },
                    "spec": {
                        "capacity": { "storage": "1Gi" },
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": class,
                        "persistentVolumeReclaimPolicy": "Delete",
                        "hostPath": { "path": "/tmp/x" },
                        "claimRef": { "namespace": ns, "name": cname, "uid": c.uid() },
                        "nodeAffinity": { "required": { "nodeSelectorTerms": [
                            { "matchExpressions": [{ "key": HOST, "operator": "In", "values": [node] }] }
                        ]}},
                    },
                }))?;
                pvs.create(&PostParams::default(), &pv).await?;
                done.insert(cname);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_volume_with_node_affinity_keeps_its_pod_on_that_node() -> anyhow::Result<()> {
    let ctx = setup("vol-bound").await?;
    let mut st = Storage::new(&ctx);
    let a = host_node(&ctx, "a", &[]).await?;
    let b = host_node(&ctx, "b", &[]).await?;
    let _c = host_node(&ctx, "c", &[]).await?;
    let class = format!("{}-manual", ctx.ns);
    let pv = st.volume("pv", &class, Some(&b), json!({})).await?;
    claim(&ctx, "data", &class, Some(&pv), &[]).await?;
    wait_claims_bound(&ctx, &["data"]).await?;
    let sched = ctx.start();
    for i in 0..3 {
        pod(&ctx, &format!("p{i}"), None, "data").await?;
    }
    let got = ctx.wait_bound(&["p0", "p1", "p2"]).await?;
    for i in 0..3 {
        ensure!(
            got[&format!("p{i}")] == b,
            "p{i} went to {} (its volume is on {b}, not {a})",
            got[&format!("p{i}")]
        );
    }
    sched.stop().await?;
    st.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_binds_each_member_to_its_own_local_volume() -> anyhow::Result<()> {
    let ctx = setup("vol-gang").await?;
    let mut st = Storage::new(&ctx);
    let a = host_node(&ctx, "a", &[]).await?;
    let b = host_node(&ctx, "b", &[]).await?;
    let class = st.class("local", true, None).await?;
    let mut on = HashMap::new();
    for i in 0..4 {
        let n = if i < 2 { &a } else { &b };
        let pv = st.volume(&format!("pv{i}"), &class, Some(n), json!({})).await?;
        on.insert(pv, n.clone());
    }
    ctx.pod_group_with("g", 4, None, serde_json::Value::Null).await?;
    for i in 0..4 {
        claim(&ctx, &format!("c{i}"), &class, None, &[]).await?;
        pod(&ctx, &format!("g-{i}"), Some("g"), &format!("c{i}")).await?;
    }
    let sched = ctx.start();
    let got = ctx.wait_bound(&["g-0", "g-1", "g-2", "g-3"]).await?;
    let claims = wait_claims_bound(&ctx, &["c0", "c1", "c2", "c3"]).await?;
    let mut used: Vec<String> = claims.values().cloned().collect();
    used.sort();
    used.dedup();
    ensure!(used.len() == 4, "each claim its own volume: {claims:?}");
    for i in 0..4 {
        let pv = volume_of(&claims, &format!("c{i}"));
        ensure!(
            on.get(&pv) == got.get(&format!("g-{i}")),
            "g-{i} is on {:?} but its volume {pv} is on {:?}",
            got.get(&format!("g-{i}")),
            on.get(&pv)
        );
    }
    ctx.wait_pg("g", "True", "Scheduled").await?;
    sched.stop().await?;
    st.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gangs_and_one_gangs_volumes_give_one_whole_gang_and_one_untouched() -> anyhow::Result<()> {
    let ctx = setup("vol-two").await?;
    let mut st = Storage::new(&ctx);
    let a = host_node(&ctx, "a", &[]).await?;
    let b = host_node(&ctx, "b", &[]).await?;
    let class = st.class("local", true, None).await?;
    st.volume("pv0", &class, Some(&a), json!({})).await?;
    st.volume("pv1", &class, Some(&b), json!({})).await?;
    for g in ["x", "y"] {
        ctx.pod_group_with(g, 2, None, serde_json::Value::Null).await?;
        for i in 0..2 {
            claim(&ctx, &format!("{g}{i}"), &class, None, &[]).await?;
            pod(&ctx, &format!("{g}-{i}"), Some(g), &format!("{g}{i}")).await?;
        }
    }
    let sched = ctx.start();
    let whole = phalanx_testenv::wait_for("one gang bound", SETTLE, || async {
        let b = ctx.bindings().await?;
        Ok(["x", "y"]
            .into_iter()
            .find(|g| b.contains_key(&format!("{g}-0")) && b.contains_key(&format!("{g}-1"))))
    })
    .await?;
    let other = if whole == "x" { "y" } else { "x" };
    wait_claims_bound(&ctx, &[&format!("{whole}0"), &format!("{whole}1")]).await?;
    ctx.stays_unbound(
        &[format!("{other}-0"), format!("{other}-1")],
        Duration::from_secs(3),
    )
    .await?;
    let claims = bound_claims(&ctx).await?;
    ensure!(
        !claims.contains_key(&format!("{other}0")) && !claims.contains_key(&format!("{other}1")),
        "gang {other} took a volume: {claims:?}"
    );
    let pvs = Api::<PersistentVolume>::all(ctx.client.clone());
    for v in &st.volumes {
        let pv = pvs.get(v).await?;
        let by = pv
            .spec
            .and_then(|s| s.claim_ref)
            .and_then(|r| r.name)
            .unwrap_or_default();
        ensure!(
            by.starts_with(whole),
            "volume {v} is claimed by {by:?}, not by gang {whole}"
        );
    }
    let msg = ctx.wait_pod_unschedulable(&format!("{other}-0")).await?;
    ensure!(
        msg.contains("node(s) didn't find available persistent volumes to bind"),
        "message: {msg}"
    );
    sched.stop().await?;
    st.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_provisioning_selects_the_nodes_and_binds_only_after_the_volumes_exist() -> anyhow::Result<()>
{
    let ctx = setup("vol-dyn").await?;
    let mut st = Storage::new(&ctx);
    host_node(&ctx, "a", &[]).await?;
    host_node(&ctx, "b", &[]).await?;
    let class = st.class("dyn", true, Some(PROVISIONER)).await?;
    ctx.pod_group_with("g", 2, None, serde_json::Value::Null).await?;
    for i in 0..2 {
        claim(&ctx, &format!("c{i}"), &class, None, &[]).await?;
        pod(&ctx, &format!("g-{i}"), Some("g"), &format!("c{i}")).await?;
    }
    let sched = ctx.start();
    // The claims get the chosen nodes; the pods wait while the provisioner has not answered.
    let selected = phalanx_testenv::wait_for("selected-node on both claims", SETTLE, || async {
        let mut out = HashMap::new();
        for c in claims(&ctx).list(&ListParams::default()).await?.items {
            if let Some(n) = c.annotations().get("volume.kubernetes.io/selected-node") {
                out.insert(c.name_any(), n.clone());
            }
        }
        Ok((out.len() == 2).then_some(out))
    })
    .await?;
    ctx.stays_unbound(&["g-0", "g-1"], Duration::from_secs(3)).await?;
    // While PreBind waits, the group and its pods say so.
    let cond = ctx.wait_pg("g", "False", "WaitingForVolumeBinding").await?;
    ensure!(
        cond.message
            .contains(&format!("claims {0}/c0, {0}/c1 to be bound", ctx.ns)),
        "group message: {}",
        cond.message
    );
    let p = ctx.pods().get("g-0").await?;
    let (_, reason, _) = pod_scheduled(&p).context("g-0 has no PodScheduled")?;
    ensure!(
        reason == "WaitingForVolumeBinding",
        "g-0 PodScheduled reason {reason}"
    );
    let prov = provisioner(&ctx, class.clone(), Duration::from_millis(500));
    let got = ctx.wait_bound(&["g-0", "g-1"]).await?;
    prov.abort();
    let claims = wait_claims_bound(&ctx, &["c0", "c1"]).await?;
    for i in 0..2 {
        ensure!(
            selected.get(&format!("c{i}")) == got.get(&format!("g-{i}")),
            "g-{i} on {:?}, its claim was provisioned for {:?}",
            got.get(&format!("g-{i}")),
            selected.get(&format!("c{i}"))
        );
        st.volumes.push(volume_of(&claims, &format!("c{i}")));
    }
    sched.stop().await?;
    st.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioner_that_never_answers_leaves_the_gang_unbound_with_a_message() -> anyhow::Result<()> {
    let ctx = setup("vol-silent").await?;
    let mut st = Storage::new(&ctx);
    host_node(&ctx, "a", &[]).await?;
    let class = st.class("silent", true, Some(PROVISIONER)).await?;
    ctx.pod_group_with("g", 2, None, serde_json::Value::Null).await?;
    for i in 0..2 {
        claim(&ctx, &format!("c{i}"), &class, None, &[]).await?;
        pod(&ctx, &format!("g-{i}"), Some("g"), &format!("c{i}")).await?;
    }
    let sched = ctx.start_with(|o| o.volume_bind_timeout = Duration::from_secs(3));
    let cond = ctx.wait_pg("g", "False", "SchedulerError").await?;
    let (c0, c1) = (format!("{}/c0", ctx.ns), format!("{}/c1", ctx.ns));
    ensure!(
        cond.message
            .contains(&format!("claims {c0}, {c1} were not bound within 3s"))
            && cond.message.contains("(waiting for the provisioner)"),
        "group message: {}",
        cond.message
    );
    let p = ctx.pods().get("g-0").await?;
    let (status, reason, message) = pod_scheduled(&p).context("g-0 has no PodScheduled")?;
    ensure!(
        status == "False" && reason == "SchedulerError" && message.contains("VolumeBinding"),
        "g-0: {status}/{reason}: {message}"
    );
    ensure!(
        ctx.bindings().await?.is_empty(),
        "no pod of the gang may be bound"
    );
    sched.stop().await?;
    st.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_once_pod_claim_in_use_keeps_the_second_pod_pending() -> anyhow::Result<()> {
    let ctx = setup("vol-rwop").await?;
    let mut st = Storage::new(&ctx);
    host_node(&ctx, "a", &[]).await?;
    host_node(&ctx, "b", &[]).await?;
    let class = format!("{}-manual", ctx.ns);
    let pv = st
        .volume("pv", &class, None, json!({ "accessModes": ["ReadWriteOncePod"] }))
        .await?;
    claim(&ctx, "solo", &class, Some(&pv), &["ReadWriteOncePod"]).await?;
    wait_claims_bound(&ctx, &["solo"]).await?;
    let sched = ctx.start();
    pod(&ctx, "first", None, "solo").await?;
    ctx.wait_bound(&["first"]).await?;
    pod(&ctx, "second", None, "solo").await?;
    let msg = ctx.wait_pod_unschedulable("second").await?;
    ensure!(
        msg.contains(
            "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
        ),
        "message: {msg}"
    );
    sched.stop().await?;
    st.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csi_node_limit_of_two_keeps_a_third_volume_off_the_node() -> anyhow::Result<()> {
    let ctx = setup("vol-limit").await?;
    let mut st = Storage::new(&ctx);
    let a = host_node(&ctx, "a", &[]).await?;
    let driver = "csi.test.phalanx.dev";
    st.csi_node(&a, driver, 2).await?;
    let class = format!("{}-csi", ctx.ns);
    for i in 0..3 {
        let pv = st
            .volume(
                &format!("pv{i}"),
                &class,
                None,
                json!({ "hostPath": null, "csi": { "driver": driver, "volumeHandle": format!("{}-h{i}", ctx.ns) } }),
            )
            .await?;
        claim(&ctx, &format!("c{i}"), &class, Some(&pv), &[]).await?;
    }
    wait_claims_bound(&ctx, &["c0", "c1", "c2"]).await?;
    let sched = ctx.start();
    pod(&ctx, "p0", None, "c0").await?;
    pod(&ctx, "p1", None, "c1").await?;
    ctx.wait_bound(&["p0", "p1"]).await?;
    pod(&ctx, "p2", None, "c2").await?;
    let msg = ctx.wait_pod_unschedulable("p2").await?;
    ensure!(msg.contains("node(s) exceed max volume count"), "message: {msg}");
    sched.stop().await?;
    st.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zonal_volume_keeps_its_pod_in_its_zone() -> anyhow::Result<()> {
    let ctx = setup("vol-zone").await?;
    let mut st = Storage::new(&ctx);
    let zone = "topology.kubernetes.io/zone";
    host_node(&ctx, "a", &[(zone, "z1")]).await?;
    let b = host_node(&ctx, "b", &[(zone, "z2")]).await?;
    host_node(&ctx, "c", &[(zone, "z1")]).await?;
    let class = format!("{}-zonal", ctx.ns);
    let pv = st
        .volume("pv", &class, None, json!({ "labels": { zone: "z2" } }))
        .await?;
    claim(&ctx, "data", &class, Some(&pv), &[]).await?;
    wait_claims_bound(&ctx, &["data"]).await?;
    let sched = ctx.start();
    pod(&ctx, "p", None, "data").await?;
    let got = ctx.wait_bound(&["p"]).await?;
    ensure!(
        got["p"] == b,
        "p went to {}, not to the only node of zone z2",
        got["p"]
    );
    sched.stop().await?;
    st.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rack_constrained_gang_goes_to_the_rack_where_its_volumes_are() -> anyhow::Result<()> {
    let ctx = setup("vol-rack").await?;
    let mut st = Storage::new(&ctx);
    let mut rack_of = HashMap::new();
    let mut on_r2 = Vec::new();
    for (n, r) in [("a1", "r1"), ("a2", "r1"), ("b1", "r2"), ("b2", "r2")] {
        let full = host_node(&ctx, n, &[("rack", r)]).await?;
        rack_of.insert(full.clone(), r);
        if r == "r2" {
            on_r2.push(full);
        }
    }
    let class = st.class("local", true, None).await?;
    for (i, n) in on_r2.iter().enumerate() {
        st.volume(&format!("pv{i}"), &class, Some(n), json!({})).await?;
    }
    ctx.pod_group_with("g", 2, None, json!({ "topology": [{ "key": "rack" }] }))
        .await?;
    for i in 0..2 {
        claim(&ctx, &format!("c{i}"), &class, None, &[]).await?;
        pod(&ctx, &format!("g-{i}"), Some("g"), &format!("c{i}")).await?;
    }
    let sched = ctx.start();
    let got = ctx.wait_bound(&["g-0", "g-1"]).await?;
    for i in 0..2 {
        let n = &got[&format!("g-{i}")];
        ensure!(
            rack_of.get(n) == Some(&"r2"),
            "g-{i} went to {n} in rack {:?}",
            rack_of.get(n)
        );
    }
    wait_claims_bound(&ctx, &["c0", "c1"]).await?;
    sched.stop().await?;
    st.cleanup().await
}
