//! Topology beyond upstream through the scheduling driver on a real control plane (phalanx-testenv: kube-apiserver,
//! etcd, KCM v1.37.2 and kwok): `schedulingConstraints.preferredTopology` honoured and relaxed, combined with a
//! required key, TopologyPacking against upstream's scoring, and the sibling search of a CompositePodGroup. The same
//! cases on the pure core are in `crates/scheduler/tests/topology.rs`; docs/api.md describes the fields.

mod common;

use std::collections::{BTreeSet, HashMap};

use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use phalanx_testenv::wait_for;
use serde_json::json;

use common::cluster::{Ctx, SETTLE, setup};

/// The values of node label `key` on the nodes that `pods` are bound to.
fn domains(
    bindings: &HashMap<String, String>,
    nodes: &HashMap<String, String>,
    pods: &[String],
) -> BTreeSet<String> {
    pods.iter()
        .filter_map(|p| nodes.get(bindings.get(p)?).cloned())
        .collect()
}

/// A node's `(name, cpu, labels)`.
type NodeSpec<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

/// Creates nodes `(name, cpu, labels)`; returns node name -> value of each label key asked for later.
async fn nodes(ctx: &Ctx, spec: &[NodeSpec<'_>], key: &str) -> anyhow::Result<HashMap<String, String>> {
    let mut by_node = HashMap::new();
    for (name, cpu, labels) in spec {
        let full = ctx.node_labelled(name, cpu, labels).await?;
        if let Some((_, v)) = labels.iter().find(|(k, _)| *k == key) {
            by_node.insert(full, v.to_string());
        }
    }
    Ok(by_node)
}

/// Two blocks of two racks of two 4-CPU nodes; returns node -> rack and node -> block.
async fn blocks(ctx: &Ctx) -> anyhow::Result<(HashMap<String, String>, HashMap<String, String>)> {
    let (mut rack, mut block) = (HashMap::new(), HashMap::new());
    for (b, racks) in [("b1", ["r1", "r2"]), ("b2", ["r3", "r4"])] {
        for r in racks {
            for i in 0..2 {
                let full = ctx
                    .node_labelled(&format!("{r}-n{i}"), "4", &[("block", b), ("rack", r)])
                    .await?;
                rack.insert(full.clone(), r.to_string());
                block.insert(full, b.to_string());
            }
        }
    }
    Ok((rack, block))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_rack_is_honoured_then_relaxed_to_the_block() -> anyhow::Result<()> {
    let ctx = setup("topo-pref").await?;
    let (rack, block) = blocks(&ctx).await?;
    let sched = ctx.start();
    let preferred = json!({ "preferredTopology": [{ "key": "rack" }, { "key": "block" }] });
    // 4 x 2 CPU = 8 CPU: one rack holds it.
    ctx.pod_group_with("fits-rack", 4, None, preferred.clone())
        .await?;
    let a = ctx.pods_of("fits-rack", 4, "2").await?;
    let b = ctx.wait_bound(&a).await?;
    ensure!(
        domains(&b, &rack, &a).len() == 1,
        "one rack: {:?}",
        domains(&b, &rack, &a)
    );
    // 6 x 2 CPU = 12 CPU: no rack holds it; the untouched block (16 CPU) does.
    ctx.pod_group_with("fits-block", 6, None, preferred).await?;
    let c = ctx.pods_of("fits-block", 6, "2").await?;
    let b = ctx.wait_bound(&c).await?;
    ensure!(
        domains(&b, &block, &c).len() == 1,
        "one block: {:?}",
        domains(&b, &block, &c)
    );
    ensure!(
        domains(&b, &rack, &c).len() == 2,
        "two racks: {:?}",
        domains(&b, &rack, &c)
    );
    ensure!(
        domains(&b, &block, &a).is_disjoint(&domains(&b, &block, &c)),
        "the block gang avoided the partly used block"
    );
    ctx.wait_pg("fits-block", "True", "Scheduled").await?;
    sched.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_zone_with_preferred_rack() -> anyhow::Result<()> {
    let ctx = setup("topo-req-pref").await?;
    let spec: &[NodeSpec<'_>] = &[
        ("a", "4", &[("zone", "z1"), ("rack", "r1")]),
        ("b", "4", &[("zone", "z1"), ("rack", "r2")]),
        ("c", "4", &[("zone", "z2"), ("rack", "r3")]),
        ("d", "4", &[("zone", "z2"), ("rack", "r3")]),
    ];
    let rack = nodes(&ctx, spec, "rack").await?;
    let zone: HashMap<String, String> = rack
        .iter()
        .map(|(n, r)| (n.clone(), if r == "r3" { "z2" } else { "z1" }.to_string()))
        .collect();
    let sched = ctx.start();
    let constraints = json!({ "topology": [{ "key": "zone" }], "preferredTopology": [{ "key": "rack" }] });
    ctx.pod_group_with("first", 4, None, constraints.clone()).await?;
    let first = ctx.pods_of("first", 4, "2").await?;
    let b = ctx.wait_bound(&first).await?;
    // Only r3 holds 8 CPU in one rack.
    ensure!(
        domains(&b, &rack, &first) == BTreeSet::from(["r3".to_string()]),
        "first in r3"
    );
    ctx.pod_group_with("second", 4, None, constraints).await?;
    let second = ctx.pods_of("second", 4, "2").await?;
    let b = ctx.wait_bound(&second).await?;
    // No whole rack is left: the preference relaxes, the required zone holds.
    ensure!(
        domains(&b, &zone, &second) == BTreeSet::from(["z1".to_string()]),
        "second in z1"
    );
    ensure!(domains(&b, &rack, &second).len() == 2, "second spans r1 and r2");
    sched.stop().await
}

/// Rack "big": 7 nodes of 4 CPU, 3 of them full; rack "small": 3 empty nodes. A gang of 2 x 4 CPU scores 71 in
/// "big" and 66 in "small" under upstream's MostAllocated, which leaves 2 + 3 free nodes and no rack for a 4-node
/// gang. TopologyPacking puts the first gang in "small" (1 node left, against 2) and the second fits in "big".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packing_leaves_a_whole_rack_for_the_next_gang() -> anyhow::Result<()> {
    let ctx = setup("topo-pack").await?;
    let mut rack = HashMap::new();
    let mut big = Vec::new();
    for i in 0..7 {
        let n = ctx
            .node_labelled(&format!("big-{i}"), "4", &[("rack", "big")])
            .await?;
        rack.insert(n.clone(), "big".to_string());
        big.push(n);
    }
    for i in 0..3 {
        let n = ctx
            .node_labelled(&format!("small-{i}"), "4", &[("rack", "small")])
            .await?;
        rack.insert(n, "small".to_string());
    }
    // Load: pods bound directly to three "big" nodes (no scheduler involved).
    for (i, node) in big.iter().take(3).enumerate() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": format!("load-{i}") },
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": "4" } } }],
            }
        }))?;
        ctx.pods().create(&PostParams::default(), &pod).await?;
    }
    let sched = ctx.start();
    let by_rack = json!({ "topology": [{ "key": "rack" }] });
    ctx.pod_group_with("first", 2, None, by_rack.clone()).await?;
    let first = ctx.pods_of("first", 2, "4").await?;
    let b = ctx.wait_bound(&first).await?;
    ensure!(
        domains(&b, &rack, &first) == BTreeSet::from(["small".to_string()]),
        "first gang in small"
    );
    ctx.pod_group_with("second", 4, None, by_rack).await?;
    let second = ctx.pods_of("second", 4, "4").await?;
    let b = ctx.wait_bound(&second).await?;
    ensure!(
        domains(&b, &rack, &second) == BTreeSet::from(["big".to_string()]),
        "second gang in big"
    );
    sched.stop().await
}

/// Rack r1: two 4-CPU nodes; rack r2: four 2-CPU nodes. Under root gang(minGroupCount 2), child "a" (2 x 2 CPU)
/// fits both racks and scores r1 best; child "b" (2 x 4 CPU) fits only r1. Greedy sibling order strands "b"; the
/// sibling search places "a" in r2 and "b" in r1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_whose_first_child_would_strand_the_second_is_placed_whole() -> anyhow::Result<()> {
    let ctx = setup("topo-sibling").await?;
    let names: Vec<String> = (0..2)
        .map(|i| format!("r1-{i}"))
        .chain((0..4).map(|i| format!("r2-{i}")))
        .collect();
    let spec: Vec<NodeSpec<'_>> = names
        .iter()
        .map(|n| {
            if n.starts_with("r1") {
                (n.as_str(), "4", &[("rack", "r1")][..])
            } else {
                (n.as_str(), "2", &[("rack", "r2")][..])
            }
        })
        .collect();
    let rack = nodes(&ctx, &spec, "rack").await?;
    let sched = ctx.start();
    let by_rack = json!({ "topology": [{ "key": "rack" }] });
    ctx.cpg("root", Some(2), None).await?;
    ctx.pod_group_with("a", 2, Some("root"), by_rack.clone()).await?;
    ctx.pod_group_with("b", 2, Some("root"), by_rack).await?;
    let a = ctx.pods_of("a", 2, "2").await?;
    let b_pods = ctx.pods_of("b", 2, "4").await?;
    let all: Vec<String> = a.iter().chain(&b_pods).cloned().collect();
    let b = ctx.wait_bound(&all).await?;
    ensure!(
        domains(&b, &rack, &a) == BTreeSet::from(["r2".to_string()]),
        "a in r2"
    );
    ensure!(
        domains(&b, &rack, &b_pods) == BTreeSet::from(["r1".to_string()]),
        "b in r1"
    );
    ctx.wait_cpg("root", "True", "Scheduled").await?;
    sched.stop().await
}

/// A bare pod `name`, a member of `group` when given, requesting `cpu`, bound to `node` by hand when given (a filler).
async fn bare_pod(
    ctx: &Ctx,
    group: Option<&str>,
    name: &str,
    cpu: &str,
    node: Option<&str>,
) -> anyhow::Result<()> {
    let mut labels = serde_json::Map::new();
    if let Some(g) = group {
        labels.insert(phalanx_api::labels::POD_GROUP.into(), g.into());
    }
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels },
        "spec": {
            "schedulerName": ctx.sched,
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": cpu } } }],
        }
    }))?;
    ctx.pods().create(&PostParams::default(), &pod).await?;
    Ok(())
}

/// Deletes pod `name` and waits until it is gone.
async fn delete_pod(ctx: &Ctx, name: &str) -> anyhow::Result<()> {
    ctx.pods().delete(name, &DeleteParams::default()).await?;
    wait_for(&format!("pod {name} gone"), SETTLE, || async {
        Ok(ctx.pods().get_opt(name).await?.is_none().then_some(()))
    })
    .await
}

/// Sets (or, with `None`, clears) the node lifecycle controller's `unreachable` NoSchedule taint on `node`.
async fn unreachable(ctx: &Ctx, node: &str, on: bool) -> anyhow::Result<()> {
    let taints = on.then(|| json!([{ "key": "node.kubernetes.io/unreachable", "effect": "NoSchedule" }]));
    Api::<Node>::all(ctx.client.clone())
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "taints": taints } })),
        )
        .await?;
    Ok(())
}

/// A running gang's replacement member goes back to the gang's domain (kueue#14092, grove#277): the members still
/// running pin it, for a required key and for a preferred level alike, and within the domain it avoids a node the
/// node lifecycle controller tainted. When the domain is full the replacement stays pending, although the other rack
/// is empty, and the pod's message names the domain; once room returns in the domain, it binds there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_member_returns_to_its_gangs_rack() -> anyhow::Result<()> {
    let ctx = setup("topo-replace").await?;
    // Two racks of three 4-CPU nodes; default scoring (LeastAllocated) would send a lone pod to the emptier rack.
    let spec: &[NodeSpec<'_>] = &[
        ("r1-a", "4", &[("rack", "r1")]),
        ("r1-b", "4", &[("rack", "r1")]),
        ("r1-c", "4", &[("rack", "r1")]),
        ("r2-a", "4", &[("rack", "r2")]),
        ("r2-b", "4", &[("rack", "r2")]),
        ("r2-c", "4", &[("rack", "r2")]),
    ];
    let rack = nodes(&ctx, spec, "rack").await?;
    let sched = ctx.start();
    for (group, constraints) in [
        ("req", json!({ "topology": [{ "key": "rack" }] })),
        ("pref", json!({ "preferredTopology": [{ "key": "rack" }] })),
    ] {
        // 3 x 3 CPU: one rack (a pod per node); the other rack stays empty.
        ctx.pod_group_with(group, 3, None, constraints).await?;
        let members = ctx.pods_of(group, 3, "3").await?;
        let b = ctx.wait_bound(&members).await?;
        let home = domains(&b, &rack, &members);
        ensure!(home.len() == 1, "{group}: one rack, got {home:?}");
        // A member is lost; its replacement lands in the same rack, although the other rack is emptier.
        delete_pod(&ctx, &members[0]).await?;
        let replacement = format!("{group}-new");
        bare_pod(&ctx, Some(group), &replacement, "3", None).await?;
        let b = ctx.wait_bound(std::slice::from_ref(&replacement)).await?;
        let now = domains(&b, &rack, std::slice::from_ref(&replacement));
        ensure!(
            now == home,
            "{group}: the replacement went to {now:?}, the gang runs in {home:?}"
        );
        // The racks are shared with the next case.
        for p in members.iter().skip(1).chain([&replacement]) {
            delete_pod(&ctx, p).await?;
        }
        ctx.pod_groups().delete(group, &DeleteParams::default()).await?;
    }

    // 2 x 4 CPU with the rack required: two nodes of one rack, its third node empty.
    ctx.pod_group_with("full", 2, None, json!({ "topology": [{ "key": "rack" }] }))
        .await?;
    let members = ctx.pods_of("full", 2, "4").await?;
    let b = ctx.wait_bound(&members).await?;
    let home = domains(&b, &rack, &members);
    ensure!(home.len() == 1, "full: one rack, got {home:?}");
    let home_rack = home.into_iter().next().unwrap_or_default();
    let lost = b[&members[0]].clone();
    let spare = rack
        .iter()
        .find(|(n, r)| **r == home_rack && !b.values().any(|bn| bn == *n))
        .map(|(n, _)| n.clone())
        .context("the home rack's empty node")?;
    // The lost member's node is then unreachable: the replacement takes the rack's other free node.
    unreachable(&ctx, &lost, true).await?;
    delete_pod(&ctx, &members[0]).await?;
    bare_pod(&ctx, Some("full"), "full-new", "4", None).await?;
    let b = ctx.wait_bound(&["full-new"]).await?;
    ensure!(
        b["full-new"] == spare,
        "the replacement went to {}, want {spare} ({lost} is tainted)",
        b["full-new"]
    );
    // The rack is now full (the tainted node aside): a second replacement stays pending, with the rack named,
    // although the other rack is empty.
    delete_pod(&ctx, "full-new").await?;
    bare_pod(&ctx, None, "filler", "4", Some(&spare)).await?;
    bare_pod(&ctx, Some("full"), "full-newer", "4", None).await?;
    // PodGroupInitiallyScheduled stays True (it is terminal, as upstream's): the pod's condition tells.
    let msg = ctx.wait_pod_unschedulable("full-newer").await?;
    let want = format!("the group's scheduled members hold it to domain rack={home_rack}, which is full");
    ensure!(msg.contains(&want), "the message names the rack: {msg}");
    ctx.stays_unbound(&["full-newer"], Duration::from_secs(2)).await?;
    // The taint lifts: the replacement binds in its rack.
    unreachable(&ctx, &lost, false).await?;
    let b = ctx.wait_bound(&["full-newer"]).await?;
    ensure!(
        b["full-newer"] == lost,
        "the replacement went to {}, want {lost}",
        b["full-newer"]
    );
    sched.stop().await
}
