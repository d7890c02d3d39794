//! Phalanx schedules upstream's own PodGroups (`scheduling.k8s.io/v1beta1`, KEP-4671) on a control plane that
//! serves them: a dedicated one (`hack/cluster.sh up --upstream-workload-api`: kube-apiserver, etcd and
//! kube-controller-manager v1.37.2 with the `GenericWorkload` gates, and kwok nodes). Pods join a native group
//! through `spec.schedulingGroup.podGroupName`, as upstream's pods do; Phalanx's label keeps naming Phalanx's
//! groups; the scheduler writes the native group's `PodGroupInitiallyScheduled` condition as upstream's
//! scheduler does (`pkg/scheduler/framework/plugins/gangscheduling`, 1.37), and never touches a native group whose
//! pods name another scheduler.

mod common;

use std::collections::BTreeMap;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::{
    core::v1::Pod,
    scheduling::{v1::PriorityClass, v1beta1::PodGroup as NativePodGroup},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Api, api::PostParams};
use phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED;
use phalanx_api::native::{CompositeVersion, NativeCompositePodGroup, V1alpha3, V1beta1};
use phalanx_testenv::{TestEnv, wait_for};
use serde_json::json;

use common::cluster::{Ctx, SETTLE, setup_on};
use common::devices::{Devices, allocations};
use common::volumes::{Member, Storage, claim, host_node, pod_of, volume_of, wait_claims_bound};

/// A scheduler name no scheduler of the test cluster answers to (kube-scheduler runs as `default-scheduler`).
const ELSEWHERE: &str = "elsewhere";

/// A native gang PodGroup of `min` pods.
async fn native_group(ctx: &Ctx, name: &str, min: i32) -> anyhow::Result<()> {
    native_group_with(
        ctx,
        name,
        json!({ "schedulingPolicy": { "gang": { "minCount": min } } }),
    )
    .await
}

/// A native PodGroup of `spec`.
async fn native_group_with(ctx: &Ctx, name: &str, spec: serde_json::Value) -> anyhow::Result<()> {
    let g: NativePodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": { "name": name },
        "spec": spec,
    }))?;
    native(ctx)
        .create(&PostParams::default(), &g)
        .await
        .with_context(|| format!("creating scheduling.k8s.io PodGroup {name}"))?;
    Ok(())
}

fn native(ctx: &Ctx) -> Api<NativePodGroup> {
    Api::namespaced(ctx.client.clone(), &ctx.ns)
}

/// A native CompositePodGroup (`scheduling.k8s.io/<V>`) of `spec`.
async fn native_composite<V: CompositeVersion>(
    ctx: &Ctx,
    name: &str,
    spec: serde_json::Value,
) -> anyhow::Result<()> {
    let g: NativeCompositePodGroup<V> = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": spec,
    }))?;
    Api::<NativeCompositePodGroup<V>>::namespaced(ctx.client.clone(), &ctx.ns)
        .create(&PostParams::default(), &g)
        .await
        .with_context(|| format!("creating scheduling.k8s.io CompositePodGroup {name}"))?;
    Ok(())
}

/// `n` pods `<prefix>-<i>` of `scheduler` requesting `cpu`, naming `field` by `spec.schedulingGroup` and `label` by
/// Phalanx's label (either may be absent).
async fn pods(
    ctx: &Ctx,
    prefix: &str,
    n: usize,
    cpu: &str,
    (field, label): (Option<&str>, Option<&str>),
    scheduler: &str,
) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    for i in 1..=n {
        let name = format!("{prefix}-{i}");
        let labels: BTreeMap<String, String> = label
            .map(|l| (phalanx_api::labels::POD_GROUP.to_owned(), l.to_owned()))
            .into_iter()
            .collect();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": labels },
            "spec": {
                "schedulerName": scheduler,
                "schedulingGroup": field.map(|f| json!({ "podGroupName": f })),
                "terminationGracePeriodSeconds": 0,
                "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": cpu } } }],
            }
        }))?;
        ctx.pods()
            .create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("creating pod {name}"))?;
        names.push(name);
    }
    Ok(names)
}

/// The native group's `PodGroupInitiallyScheduled`, once it has `status` and `reason`.
async fn wait_native(ctx: &Ctx, name: &str, status: &str, reason: &str) -> anyhow::Result<Condition> {
    let api = native(ctx);
    wait_for(
        &format!("scheduling.k8s.io PodGroup {name} {status}/{reason}"),
        SETTLE,
        || {
            let api = api.clone();
            async move {
                let g = api.get(name).await?;
                Ok(initially_scheduled(&g).filter(|c| c.status == status && c.reason == reason))
            }
        },
    )
    .await
}

fn initially_scheduled(g: &NativePodGroup) -> Option<Condition> {
    g.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == POD_GROUP_INITIALLY_SCHEDULED)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_pod_groups_are_scheduled_beside_phalanx_groups() -> anyhow::Result<()> {
    // The compatibility suite runs this on every supported version: before 1.37 there is no PodGroup parent, no
    // CompositePodGroup and no WorkloadWithJob gate (kube-apiserver refuses gates it does not know), and upstream's
    // objects are not what Phalanx schedules there.
    let minor = tokio::task::spawn_blocking(TestEnv::binaries_minor).await??;
    if minor < 37 {
        eprintln!(
            "1.{minor}: upstream's Workload API before 1.37 is not scheduled by Phalanx; nothing to check"
        );
        return Ok(());
    }
    let env = tokio::task::spawn_blocking(|| TestEnv::dedicated_upstream_api("upstream-api", true)).await??;
    let client = env.client().await?;
    let result = scenarios(client, minor).await;
    // Stops the dedicated control plane (hack/cluster.sh down); blocking, so off the runtime's threads.
    tokio::task::spawn_blocking(move || drop(env)).await?;
    result
}

async fn scenarios(client: kube::Client, minor: u32) -> anyhow::Result<()> {
    // A native gang binds whole, with upstream's condition on the native object.
    let ctx = setup_on(client.clone(), "native-gang").await?;
    for i in 0..2 {
        ctx.node(&format!("n{i}"), "4").await?;
    }
    let sched = ctx.start();
    native_group(&ctx, "train", 3).await?;
    let members = pods(&ctx, "train", 3, "2", (Some("train"), None), &ctx.sched).await?;
    ctx.wait_bound(&members).await?;
    let c = wait_native(&ctx, "train", "True", "Scheduled").await?;
    let generation = native(&ctx).get("train").await?.metadata.generation;
    ensure!(
        c.observed_generation == generation,
        "observedGeneration {:?}, the object's generation {generation:?}",
        c.observed_generation
    );

    // One that cannot fit (2 pods of 3 CPUs; `train` left 0 and 2 CPUs free) binds nothing and says Unschedulable
    // on the native object.
    native_group(&ctx, "big", 2).await?;
    let big = pods(&ctx, "big", 2, "3", (Some("big"), None), &ctx.sched).await?;
    let c = wait_native(&ctx, "big", "False", "Unschedulable").await?;
    ensure!(
        !c.message.is_empty(),
        "an Unschedulable condition without a message"
    );
    ctx.stays_unbound_after_cycle(&sched, &big).await?;
    sched.stop().await?;

    // The same name in both API groups: the label joins Phalanx's group (minCount 2, two pods: binds), the field
    // joins upstream's (minCount 3, two pods: waits for its quorum). Counted in one group, all four would bind.
    let ctx = setup_on(client.clone(), "same-name").await?;
    ctx.node("n0", "16").await?;
    let sched = ctx.start();
    ctx.pod_group_with("same", 2, None, serde_json::Value::Null)
        .await?;
    native_group(&ctx, "same", 3).await?;
    let ours = pods(&ctx, "phalanx", 2, "1", (None, Some("same")), &ctx.sched).await?;
    let theirs = pods(&ctx, "upstream", 2, "1", (Some("same"), None), &ctx.sched).await?;
    ctx.wait_bound(&ours).await?;
    ctx.wait_pg("same", "True", "Scheduled").await?;
    ctx.wait_pod_waiting(&theirs[0], "WaitingForQuorum").await?;
    let api = native(&ctx);
    wait_for("the native group counts its own 2 of 3 members", SETTLE, || {
        let api = api.clone();
        async move {
            let g = api.get("same").await?;
            Ok(initially_scheduled(&g).filter(|c| {
                c.status == "False"
                    && c.reason == "WaitingForQuorum"
                    && c.message.contains("2 of 3 pods present")
            }))
        }
    })
    .await?;
    // The group is gated (no cycle runs for it), so its count is the sign: none of its members is bound.
    let bound = ctx.bindings().await?;
    ensure!(
        theirs.iter().all(|p| !bound.contains_key(p)),
        "a member of the native gang was bound before its quorum: {bound:?}"
    );
    // The third member completes the native gang.
    let third = pods(&ctx, "upstream-late", 1, "1", (Some("same"), None), &ctx.sched).await?;
    let mut all = theirs.clone();
    all.extend(third);
    ctx.wait_bound(&all).await?;
    wait_native(&ctx, "same", "True", "Scheduled").await?;

    // A pod naming a group by both is refused, with a message naming both.
    let both = pods(&ctx, "both", 1, "1", (Some("same"), Some("same")), &ctx.sched).await?;
    let refused = ctx.wait_pod_waiting(&both[0], "SchedulerError").await?;
    ensure!(
        refused.contains("names two PodGroups") && refused.contains("spec.schedulingGroup.podGroupName"),
        "ambiguous pod's message: {refused}"
    );

    // A native gang with a member of another scheduler is refused whole, with the reason and message of 1.38's
    // runtime validation (`pkg/scheduler/schedule_one_podgroup.go`, `validatePodGroupHierarchy`).
    native_group(&ctx, "mixed", 1).await?;
    // The other scheduler's member first: created after ours, it could come after our member's cycle.
    pods(&ctx, "mixed-other", 1, "1", (Some("mixed"), None), ELSEWHERE).await?;
    let mixed = pods(&ctx, "mixed", 1, "1", (Some("mixed"), None), &ctx.sched).await?;
    let c = wait_native(&ctx, "mixed", "False", "PodGroupError").await?;
    ensure!(
        c.message.contains("should have the same .spec.schedulerName"),
        "mixed gang's message: {}",
        c.message
    );
    ctx.stays_unbound_after_cycle(&sched, &mixed).await?;

    // A native group whose pods name another scheduler is never touched: no condition, no bind, while Phalanx
    // binds its own gang placed after it.
    native_group(&ctx, "theirs", 1).await?;
    let foreign = pods(&ctx, "foreign", 1, "1", (Some("theirs"), None), ELSEWHERE).await?;
    native_group(&ctx, "after", 1).await?;
    let after = pods(&ctx, "after", 1, "1", (Some("after"), None), &ctx.sched).await?;
    ctx.wait_bound(&after).await?;
    wait_native(&ctx, "after", "True", "Scheduled").await?;
    ctx.stays_unbound_after_cycle(&sched, &foreign).await?;
    let g = native(&ctx).get("theirs").await?;
    ensure!(
        initially_scheduled(&g).is_none(),
        "Phalanx wrote a condition on a group of another scheduler: {:?}",
        initially_scheduled(&g)
    );
    sched.stop().await?;

    side_by_side(client.clone()).await?;
    // 1.38 serves CompositePodGroups at v1beta1 alone (hack/cluster.sh), 1.37 at v1alpha3.
    if minor >= 38 {
        hierarchy_and_topology::<V1beta1>(client.clone()).await?;
    } else {
        hierarchy_and_topology::<V1alpha3>(client.clone()).await?;
    }
    preemption(client.clone()).await?;
    native_group_claim(client.clone()).await?;
    native_volumes(client.clone()).await?;
    job_with_scheduling(client).await
}

/// A native gang whose members each mount a WaitForFirstConsumer claim, with one local volume on each of two nodes:
/// Phalanx's VolumeBinding is the same for either kind of group, so each member lands on its volume's node, every
/// claim is bound to its own volume by kube-controller-manager's PV controller, and the native group says
/// `Scheduled`.
async fn native_volumes(client: kube::Client) -> anyhow::Result<()> {
    let ctx = setup_on(client, "native-vol").await?;
    let mut st = Storage::new(&ctx);
    let class = st.class("local", true, None).await?;
    let mut on = BTreeMap::new();
    for n in ["a", "b"] {
        let node = host_node(&ctx, n, &[]).await?;
        let pv = st
            .volume(&format!("pv-{n}"), &class, Some(&node), json!({}))
            .await?;
        on.insert(pv, node);
    }
    native_group(&ctx, "vols", 2).await?;
    for i in 0..2 {
        claim(&ctx, &format!("c{i}"), &class, None, &[]).await?;
        pod_of(
            &ctx,
            &format!("vols-{i}"),
            Member::Native("vols"),
            &format!("c{i}"),
        )
        .await?;
    }
    let sched = ctx.start();
    let got = ctx.wait_bound(&["vols-0", "vols-1"]).await?;
    let claims = wait_claims_bound(&ctx, &["c0", "c1"]).await?;
    for i in 0..2 {
        let pv = volume_of(&claims, &format!("c{i}"));
        ensure!(
            on.get(&pv) == got.get(&format!("vols-{i}")),
            "vols-{i} is on {:?} but its volume {pv} is on {:?}",
            got.get(&format!("vols-{i}")),
            on.get(&pv)
        );
    }
    ensure!(
        volume_of(&claims, "c0") != volume_of(&claims, "c1"),
        "each claim its own volume: {claims:?}"
    );
    wait_native(&ctx, "vols", "True", "Scheduled").await?;
    sched.stop().await?;
    st.cleanup().await
}

/// A native gang whose PodGroup has its own claim (`spec.resourceClaims`, KEP-5729, gate `DRAWorkloadResourceClaims`):
/// kube-controller-manager generates one ResourceClaim for the group (`pkg/controller/resourceclaim/controller.go`,
/// `handlePodGroupClaim`), records it in the group's `status.resourceClaimStatuses`, and resolves every member's
/// entry of the same name and template to it in the pod's `status.resourceClaimStatuses` (`resourceclaim.BindTo`).
/// Phalanx allocates that claim once, in the group's cycle, on the one node that holds all three members (the
/// device is node-local), and reserves it for each of them.
async fn native_group_claim(client: kube::Client) -> anyhow::Result<()> {
    let ctx = setup_on(client, "native-dra").await?;
    let mut dev = Devices::new(&ctx).await?;
    for n in ["a", "b"] {
        let node = ctx.node(n, "8").await?;
        dev.slice(&node, &["a100"; 2]).await?;
    }
    dev.template("one", 1, None, None).await?;
    let entry = json!({ "name": "gpu", "resourceClaimTemplateName": "one" });
    native_group_with(
        &ctx,
        "g",
        json!({ "schedulingPolicy": { "gang": { "minCount": 3 } }, "resourceClaims": [entry] }),
    )
    .await?;
    let sched = ctx.start();
    let mut members = Vec::new();
    for i in 1..=3 {
        let name = format!("g-{i}");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": {
                "schedulerName": ctx.sched,
                "schedulingGroup": { "podGroupName": "g" },
                "terminationGracePeriodSeconds": 0,
                "resourceClaims": [entry],
                "containers": [{
                    "name": "c", "image": "busybox",
                    "resources": { "requests": { "cpu": "1" }, "claims": [{ "name": "gpu" }] },
                }],
            }
        }))?;
        ctx.pods().create(&PostParams::default(), &pod).await?;
        members.push(name);
    }
    let bound = ctx.wait_bound(&members).await?;
    let nodes: std::collections::BTreeSet<&String> = bound.values().collect();
    ensure!(
        nodes.len() == 1,
        "the users of one node-local device on {nodes:?}"
    );
    wait_native(&ctx, "g", "True", "Scheduled").await?;
    let g = native(&ctx).get("g").await?;
    let claim = g
        .status
        .and_then(|s| s.resource_claim_statuses)
        .and_then(|s| s.into_iter().find(|c| c.name == "gpu"))
        .and_then(|c| c.resource_claim_name)
        .context("the group's status.resourceClaimStatuses names no claim for gpu")?;
    for p in &members {
        let named = ctx
            .pods()
            .get(p)
            .await?
            .status
            .and_then(|s| s.resource_claim_statuses)
            .and_then(|s| s.into_iter().find(|c| c.name == "gpu"))
            .and_then(|c| c.resource_claim_name);
        ensure!(
            named.as_deref() == Some(claim.as_str()),
            "{p} resolves gpu to {named:?}, the group's claim is {claim}"
        );
    }
    let alloc = allocations(&ctx).await?;
    ensure!(
        alloc.len() == 1,
        "one claim allocated for the group, got {:?}",
        alloc.keys()
    );
    let (node, devices, mut reserved) = alloc
        .get(&claim)
        .cloned()
        .context("the group's claim is not allocated")?;
    ensure!(devices.len() == 1, "one device for the group: {devices:?}");
    ensure!(
        node.as_ref() == nodes.into_iter().next(),
        "allocated on {node:?}, the gang on {bound:?}"
    );
    reserved.sort();
    ensure!(reserved == members, "reserved for {reserved:?}");
    sched.stop().await?;
    dev.cleanup().await
}

/// A Job with `spec.scheduling.schedulingPolicy.gang` (KEP-6089, the `WorkloadWithJob` gate, 1.37 alpha and 1.38):
/// kube-controller-manager's Job controller creates the Workload, the PodGroup and the pods naming it
/// (`pkg/controller/job/job_scheduling_manager.go`); Phalanx, named by the pod template, binds them as one gang
/// and writes the PodGroup's condition. With 3 of 4 CPUs per member on 2 nodes, the gang of 3 never fits: nothing
/// binds, then a third node completes it.
async fn job_with_scheduling(client: kube::Client) -> anyhow::Result<()> {
    let ctx = setup_on(client.clone(), "native-job").await?;
    for i in 0..2 {
        ctx.node(&format!("n{i}"), "4").await?;
    }
    let sched = ctx.start();
    let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
        "metadata": { "name": "train" },
        "spec": {
            "parallelism": 3,
            "completions": 3,
            "scheduling": { "schedulingPolicy": { "gang": { "minCount": 3 } } },
            "template": { "spec": {
                "schedulerName": ctx.sched,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": "3" } } }],
            } },
        },
    }))?;
    Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), &ctx.ns)
        .create(&PostParams::default(), &job)
        .await
        .context("creating a Job with spec.scheduling (is WorkloadWithJob on?)")?;
    // The Job controller names the PodGroup; find it through the pods it creates.
    let group = wait_for("the Job's pods naming a PodGroup", SETTLE, || async {
        let pods = ctx.pods().list(&Default::default()).await?;
        let groups: std::collections::BTreeSet<String> = pods
            .items
            .iter()
            .filter_map(|p| p.spec.as_ref()?.scheduling_group.as_ref()?.pod_group_name.clone())
            .collect();
        Ok((pods.items.len() == 3 && groups.len() == 1)
            .then(|| groups.into_iter().next().unwrap_or_default()))
    })
    .await?;
    let c = wait_native(&ctx, &group, "False", "Unschedulable").await?;
    ensure!(
        !c.message.is_empty(),
        "an Unschedulable condition without a message"
    );
    ensure!(
        ctx.bindings().await?.is_empty(),
        "a member of the unplaceable gang was bound"
    );
    ctx.node("n2", "4").await?;
    let members: Vec<String> = ctx
        .pods()
        .list(&Default::default())
        .await?
        .items
        .iter()
        .map(kube::ResourceExt::name_any)
        .collect();
    ctx.wait_bound(&members).await?;
    wait_native(&ctx, &group, "True", "Scheduled").await?;
    sched.stop().await
}

/// kube-scheduler (gates on, `default-scheduler`) and Phalanx on one cluster: each binds the native gang whose pods
/// name it, Phalanx binds none of kube-scheduler's pods and never writes kube-scheduler's group.
async fn side_by_side(client: kube::Client) -> anyhow::Result<()> {
    let ctx = setup_on(client, "side-by-side").await?;
    ctx.node("n0", "8").await?;
    let sched = ctx.start();
    native_group(&ctx, "upstreams", 2).await?;
    native_group(&ctx, "ours", 2).await?;
    let theirs = pods(
        &ctx,
        "upstreams",
        2,
        "1",
        (Some("upstreams"), None),
        "default-scheduler",
    )
    .await?;
    let ours = pods(&ctx, "ours", 2, "1", (Some("ours"), None), &ctx.sched).await?;
    let mut all = theirs.clone();
    all.extend(ours.iter().cloned());
    ctx.wait_bound(&all).await?;
    wait_native(&ctx, "ours", "True", "Scheduled").await?;
    // Phalanx's binds are exactly its own two pods (`phalanx_scheduler_binds_total` of this instance, whose nodes
    // are this namespace's).
    wait_for("Phalanx counted its two binds", SETTLE, || async {
        Ok((sched.counter("phalanx_scheduler_binds_total", "") == 2.0).then_some(()))
    })
    .await?;
    let g = native(&ctx).get("upstreams").await?;
    let managers: Vec<String> = g
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    ensure!(
        !managers
            .iter()
            .any(|m| m == phalanx_api::field_managers::SCHEDULER),
        "Phalanx wrote kube-scheduler's group: managers {managers:?}"
    );
    sched.stop().await
}

/// A native CompositePodGroup with a required rack constraint over two native gangs lands in one rack, and its
/// condition is written on the native object, at the version `V` the cluster serves.
async fn hierarchy_and_topology<V: CompositeVersion>(client: kube::Client) -> anyhow::Result<()> {
    let ctx = setup_on(client, "native-tree").await?;
    for (i, rack) in ["a", "a", "b", "b"].into_iter().enumerate() {
        ctx.node_labelled(&format!("n{i}"), "4", &[("rack", rack)])
            .await?;
    }
    let sched = ctx.start();
    native_composite::<V>(
        &ctx,
        "job",
        json!({
            "workloadRef": { "workloadName": "w", "templateName": "job" },
            "schedulingPolicy": { "gang": { "minGroupCount": 2 } },
            "schedulingConstraints": { "topology": [{ "key": "rack" }] },
        }),
    )
    .await?;
    let mut members = Vec::new();
    for leaf in ["driver", "workers"] {
        native_group_with(
            &ctx,
            leaf,
            json!({
                "parentCompositePodGroupName": "job",
                "workloadRef": { "workloadName": "w", "templateName": leaf },
                "schedulingPolicy": { "gang": { "minCount": 2 } },
            }),
        )
        .await?;
        members.extend(pods(&ctx, leaf, 2, "2", (Some(leaf), None), &ctx.sched).await?);
    }
    let bound = ctx.wait_bound(&members).await?;
    let racks: std::collections::BTreeSet<&str> = members
        .iter()
        .map(|p| {
            if bound[p].ends_with("n0") || bound[p].ends_with("n1") {
                "a"
            } else {
                "b"
            }
        })
        .collect();
    ensure!(racks.len() == 1, "the tree spans racks {racks:?}: {bound:?}");
    wait_native(&ctx, "driver", "True", "Scheduled").await?;
    let api: Api<NativeCompositePodGroup<V>> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    wait_for("native CompositePodGroup job scheduled", SETTLE, || {
        let api = api.clone();
        async move {
            let g = api.get("job").await?;
            Ok(g.conditions()
                .iter()
                .find(|c| {
                    c.type_ == phalanx_api::conditions::COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED
                        && c.status == "True"
                        && c.reason == "Scheduled"
                })
                .cloned())
        }
    })
    .await?;
    sched.stop().await
}

/// A high-priority native gang preempts a low-priority native gang that holds the node.
async fn preemption(client: kube::Client) -> anyhow::Result<()> {
    let ctx = setup_on(client.clone(), "native-preempt").await?;
    let classes: Api<PriorityClass> = Api::all(client);
    for (short, value) in [("low", 10), ("high", 1000)] {
        let pc: PriorityClass = serde_json::from_value(json!({
            "metadata": { "name": format!("{}-{short}", ctx.ns) },
            "value": value,
        }))?;
        classes.create(&PostParams::default(), &pc).await?;
    }
    ctx.node("n0", "4").await?;
    let sched = ctx.start();
    let victims = priority_gang(&ctx, "low").await?;
    ctx.wait_bound(&victims).await?;
    let winners = priority_gang(&ctx, "high").await?;
    ctx.wait_bound(&winners).await?;
    let left = ctx.bindings().await?;
    ensure!(
        victims.iter().all(|v| !left.contains_key(v)),
        "a low-priority member still holds the node: {left:?}"
    );
    wait_native(&ctx, "high", "True", "Scheduled").await?;
    let result = sched.stop().await;
    for short in ["low", "high"] {
        classes
            .delete(&format!("{}-{short}", ctx.ns), &Default::default())
            .await?;
    }
    result
}

/// A native gang `name` of 2 pods of 2 CPUs, group and pods of the PriorityClass `<ns>-<name>`.
async fn priority_gang(ctx: &Ctx, name: &str) -> anyhow::Result<Vec<String>> {
    let class = format!("{}-{name}", ctx.ns);
    native_group_with(
        ctx,
        name,
        json!({ "schedulingPolicy": { "gang": { "minCount": 2 } }, "priorityClassName": class }),
    )
    .await?;
    let mut names = Vec::new();
    for i in 1..=2 {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": format!("{name}-{i}") },
            "spec": {
                "schedulerName": ctx.sched,
                "priorityClassName": class,
                "schedulingGroup": { "podGroupName": name },
                "terminationGracePeriodSeconds": 0,
                "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": "2" } } }],
            }
        }))?;
        ctx.pods().create(&PostParams::default(), &pod).await?;
        names.push(format!("{name}-{i}"));
    }
    Ok(names)
}
