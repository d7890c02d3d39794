//! What `make quickstart` does, as a test, on the real control plane of `phalanx-testenv`:
//! render the Helm chart and apply it, run the operator in-process with a token of the chart's ServiceAccount (so
//! the chart's RBAC is what the operator gets), create 8 fake GPU nodes in 2 racks, apply `config/samples`, and check
//! that the gang that fits is bound all-or-nothing (PodGroupInitiallyScheduled True/Scheduled) while the group that
//! cannot fit gets False/Unschedulable with a message naming the shortfall and none of its pods bound, and that the
//! CompositePodGroup sample (`lws-0`) is scheduled as one tree (True/Scheduled on the root and both children, one rack).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};
use phalanx::RunOptions;
use phalanx::config::PhalanxConfig;
use phalanx::leader::{LeaderConfig, OnLeaseLost};
use phalanx_api::conditions::{
    COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED, POD_GROUP_INITIALLY_SCHEDULED, reasons,
};
use phalanx_api::labels::POD_GROUP;
use phalanx_api::v1alpha3::CompositePodGroup;
use phalanx_api::v1beta1::PodGroup;
use phalanx_e2e::{
    RACK_LABEL, apply_objects, create_sample_nodes, helm_template, http_get, repo_root, sample_objects,
    service_account_client,
};
use phalanx_testenv::{TEST_NS_LABEL, TestEnv, create_namespace, wait_for};
use tokio_util::sync::CancellationToken;

/// The sample PodGroup that fits (a gang) and the one that cannot fit (config/samples).
const FITS: &str = "train";
const TOO_BIG: &str = "too-big";
const DECISION_TIMEOUT: Duration = Duration::from_secs(90);

fn condition(pg: &PodGroup) -> Option<(String, String, String)> {
    pg.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == POD_GROUP_INITIALLY_SCHEDULED)
        // The samples' pods are created one by one: a cycle between two creations may say that the group waits
        // for its members, which is not yet the decision this test checks.
        .filter(|c| c.reason != reasons::WAITING_FOR_QUORUM)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn members(client: &Client, ns: &str, group: &str) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(pods
        .list(&ListParams::default().labels(&format!("{POD_GROUP}={group}")))
        .await?
        .items)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_gang_binds_all_or_nothing_with_chart_rbac() -> anyhow::Result<()> {
    let env = TestEnv::shared();
    let admin = env.client().await?;
    let ns = create_namespace(&admin, "e2e").await?;

    // 1. The chart, rendered by helm and applied with kube (release named after the namespace, so its cluster-scoped
    //    RBAC objects are unique). The Deployment is applied too: the API server validates it, and without a kubelet
    //    its pods never run, so they never compete for the Lease.
    phalanx_testenv::apply_crds(&admin, &phalanx_api::crds::to_yaml()).await?;
    // The Lease (named after the scheduler name) in the test's namespace rather than kube-system, so that test
    // binaries sharing a control plane never contend for it; the chart's Role for it follows the value.
    let chart = helm_template(
        env,
        &ns,
        &ns,
        &["--set", &format!("leaderElection.namespace={ns}")],
    )?;
    let kinds: BTreeSet<String> = chart
        .iter()
        .filter_map(|o| o.types.as_ref().map(|t| t.kind.clone()))
        .collect();
    for k in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "ConfigMap",
    ] {
        ensure!(kinds.contains(k), "chart renders no {k}: {kinds:?}");
    }
    apply_objects(&admin, &chart, &ns).await?;
    let sa_name = chart
        .iter()
        .find(|o| o.types.as_ref().is_some_and(|t| t.kind == "ServiceAccount"))
        .map(ResourceExt::name_any)
        .context("chart ServiceAccount")?;

    // 2. A client that is the chart's ServiceAccount, and proof that it is restricted: deleting nodes is not granted
    // (deleting pods is: preemption evicts victims, as kube-scheduler's own role allows).
    let sa = service_account_client(env, &admin, &ns, &sa_name).await?;
    let denied = Api::<Node>::all(sa.clone())
        .delete("anything", &DeleteParams::default())
        .await;
    ensure!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.code == 403),
        "the ServiceAccount must not delete nodes, got {denied:?}"
    );

    // 3. The quick start's nodes (config/samples/fake-gpu-nodes.yaml): 8 nodes with 8 GPUs, racks rack-a and rack-b.
    let nodes = create_sample_nodes(&admin, &ns, &ns).await?;
    let rack_of: BTreeMap<String, String> = nodes
        .iter()
        .map(|n: &Node| {
            (
                n.name_any(),
                n.labels().get(RACK_LABEL).cloned().unwrap_or_default(),
            )
        })
        .collect();

    // 4. The operator, in-process, as the ServiceAccount, with leader election on a Lease in the release namespace.
    let shutdown = CancellationToken::new();
    let (bound_tx, bound_rx) = tokio::sync::oneshot::channel();
    let config = PhalanxConfig::load(&repo_root().join("config/phalanx.yaml"))?;
    let opts = RunOptions {
        node_selector: format!("{TEST_NS_LABEL}={ns}"),
        config,
        leader: LeaderConfig {
            enabled: true,
            namespace: Some(ns.clone()),
            identity: Some("e2e-operator".into()),
            ..LeaderConfig::default()
        },
        on_lease_lost: OnLeaseLost::Cancel,
        bound_addr: Some(bound_tx),
        ..RunOptions::default()
    };
    let operator = tokio::spawn(phalanx::run(sa.clone(), opts, shutdown.clone()));
    let addr = tokio::time::timeout(Duration::from_secs(30), bound_rx)
        .await
        .context("metrics server start")??;

    // Ready (caches synced with the ServiceAccount's list/watch rights) and leader (Lease created via the Role).
    wait_for(
        "operator ready and leader",
        Duration::from_secs(60),
        || async move {
            let (ready, _) = http_get(addr, "/readyz").await?;
            let (_, metrics) = http_get(addr, "/metrics").await?;
            Ok((ready == 200 && metrics.lines().any(|l| l == "phalanx_leader 1")).then_some(()))
        },
    )
    .await?;
    let lease = Api::<Lease>::namespaced(admin.clone(), &ns)
        .get(phalanx_api::DEFAULT_SCHEDULER_NAME)
        .await?;
    ensure!(
        lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some("e2e-operator"),
        "Lease holder: {:?}",
        lease.spec
    );

    // 5. The samples.
    apply_objects(&admin, &sample_objects()?, &ns).await?;

    // 6. Decisions.
    let groups: Api<PodGroup> = Api::namespaced(admin.clone(), &ns);
    let fits = wait_for(&format!("PodGroup {FITS} condition"), DECISION_TIMEOUT, || {
        let groups = groups.clone();
        async move { Ok(groups.get(FITS).await.ok().and_then(|g| condition(&g))) }
    })
    .await?;
    ensure!(
        fits.0 == "True" && fits.1 == reasons::SCHEDULED,
        "{FITS}: expected True/Scheduled, got {fits:?}"
    );
    let gang = members(&admin, &ns, FITS).await?;
    ensure!(!gang.is_empty(), "{FITS} has no pods");
    // All of the gang's pods bound (bindings may land just after the condition).
    let placed = wait_for(
        &format!("all pods of {FITS} bound"),
        Duration::from_secs(30),
        || {
            let admin = admin.clone();
            let ns = ns.clone();
            async move {
                let pods = members(&admin, &ns, FITS).await?;
                let nodes: Vec<Option<String>> = pods
                    .iter()
                    .map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
                    .collect();
                Ok(nodes
                    .iter()
                    .all(Option::is_some)
                    .then(|| nodes.into_iter().flatten().collect::<Vec<_>>()))
            }
        },
    )
    .await?;
    ensure!(placed.len() == gang.len(), "pod count changed while waiting");
    for node in &placed {
        ensure!(
            rack_of.contains_key(node),
            "{FITS} pod bound to {node}, not one of this test's nodes"
        );
    }
    let racks: BTreeSet<&String> = placed.iter().filter_map(|n| rack_of.get(n)).collect();
    eprintln!("{FITS}: {} pods on {placed:?} (racks {racks:?})", placed.len());

    let too_big = wait_for(&format!("PodGroup {TOO_BIG} condition"), DECISION_TIMEOUT, || {
        let groups = groups.clone();
        async move { Ok(groups.get(TOO_BIG).await.ok().and_then(|g| condition(&g))) }
    })
    .await?;
    ensure!(
        too_big.0 == "False" && too_big.1 == reasons::UNSCHEDULABLE,
        "{TOO_BIG}: expected False/Unschedulable, got {too_big:?}"
    );
    let msg = too_big.2.to_lowercase();
    ensure!(
        msg.contains("nvidia.com/gpu") || msg.contains("insufficient"),
        "{TOO_BIG}: the message must name the shortfall, got {:?}",
        too_big.2
    );
    // Give a wrong partial bind time to show up, then check none happened.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let unfit = members(&admin, &ns, TOO_BIG).await?;
    ensure!(!unfit.is_empty(), "{TOO_BIG} has no pods");
    let bound: Vec<String> = unfit
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .map(ResourceExt::name_any)
        .collect();
    ensure!(
        bound.is_empty(),
        "{TOO_BIG}: pods {bound:?} were bound although the group cannot fit"
    );
    eprintln!("{TOO_BIG}: {} pods unbound; message: {}", unfit.len(), too_big.2);

    // 7. The other single-level samples are placed too; the gang with a rack constraint and the one that prefers a
    //    rack (16 GPUs: a rack has 32) land inside one rack.
    for (group, one_rack) in [("etl-driver", false), ("etl-workers", true), ("packed", true)] {
        let cond = wait_for(&format!("PodGroup {group} condition"), DECISION_TIMEOUT, || {
            let groups = groups.clone();
            async move { Ok(groups.get(group).await.ok().and_then(|g| condition(&g))) }
        })
        .await?;
        ensure!(
            cond.0 == "True" && cond.1 == reasons::SCHEDULED,
            "{group}: expected True/Scheduled, got {cond:?}"
        );
        let nodes = wait_for(&format!("pods of {group} bound"), Duration::from_secs(30), || {
            let (admin, ns) = (admin.clone(), ns.clone());
            async move {
                let pods = members(&admin, &ns, group).await?;
                let nodes: Vec<Option<String>> = pods
                    .iter()
                    .map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
                    .collect();
                Ok((!nodes.is_empty() && nodes.iter().all(Option::is_some))
                    .then(|| nodes.into_iter().flatten().collect::<Vec<_>>()))
            }
        })
        .await?;
        for node in &nodes {
            ensure!(
                rack_of.contains_key(node),
                "{group} pod bound to {node}, not one of this test's nodes"
            );
        }
        let racks: BTreeSet<&String> = nodes.iter().filter_map(|n| rack_of.get(n)).collect();
        if one_rack {
            ensure!(
                racks.len() == 1,
                "{group} has a rack topology constraint or preference but landed on racks {racks:?}"
            );
        }
        eprintln!("{group}: {} pods on racks {racks:?}", nodes.len());
    }
    // 8. The CompositePodGroup sample (lws-0, composite.yaml): the root gang (minGroupCount 2, rack constraint) is
    //    scheduled as one tree: CompositePodGroupInitiallyScheduled True/Scheduled on the root, both children
    //    True/Scheduled, every pod bound, all inside one rack.
    let cpgs: Api<CompositePodGroup> = Api::namespaced(admin.clone(), &ns);
    let root = wait_for("CompositePodGroup lws-0 condition", DECISION_TIMEOUT, || {
        let cpgs = cpgs.clone();
        async move {
            Ok(cpgs.get("lws-0").await.ok().and_then(|g| {
                g.status?
                    .conditions
                    .iter()
                    .find(|c| c.type_ == COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED && c.status == "True")
                    .map(|c| (c.status.clone(), c.reason.clone()))
            }))
        }
    })
    .await?;
    ensure!(
        root.1 == reasons::SCHEDULED,
        "lws-0: expected True/Scheduled, got {root:?}"
    );
    let mut lws_racks: BTreeSet<String> = BTreeSet::new();
    for group in ["lws-0-leader", "lws-0-workers"] {
        let cond = wait_for(&format!("PodGroup {group} condition"), DECISION_TIMEOUT, || {
            let groups = groups.clone();
            async move {
                Ok(groups
                    .get(group)
                    .await
                    .ok()
                    .and_then(|g| condition(&g))
                    .filter(|c| c.0 == "True"))
            }
        })
        .await?;
        ensure!(
            cond.1 == reasons::SCHEDULED,
            "{group}: expected True/Scheduled, got {cond:?}"
        );
        let nodes = wait_for(&format!("pods of {group} bound"), Duration::from_secs(30), || {
            let (admin, ns) = (admin.clone(), ns.clone());
            async move {
                let pods = members(&admin, &ns, group).await?;
                let nodes: Vec<Option<String>> = pods
                    .iter()
                    .map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
                    .collect();
                Ok((!nodes.is_empty() && nodes.iter().all(Option::is_some))
                    .then(|| nodes.into_iter().flatten().collect::<Vec<_>>()))
            }
        })
        .await?;
        for node in &nodes {
            let rack = rack_of
                .get(node)
                .with_context(|| format!("{group} pod bound to {node}, not one of this test's nodes"))?;
            lws_racks.insert(rack.clone());
        }
        eprintln!("{group}: {} pods on {nodes:?}", nodes.len());
    }
    ensure!(
        lws_racks.len() == 1,
        "lws-0 has a rack constraint on the root but its pods landed on racks {lws_racks:?}"
    );

    // 9. The Job sample (gang-job.yaml): no PodGroup written, the Job's annotation asks for a gang. With the chart's
    //    RBAC, the operator creates the PodGroup batch-gang-job owned by the Job (minCount = parallelism = 4) and
    //    binds the four pods the Job controller creates; the pods carry no group label.
    let job_group = wait_for("PodGroup batch-gang-job scheduled", DECISION_TIMEOUT, || {
        let groups = groups.clone();
        async move {
            Ok(groups
                .get_opt("batch-gang-job")
                .await?
                .filter(|g| condition(g).is_some_and(|c| c.0 == "True" && c.1 == reasons::SCHEDULED)))
        }
    })
    .await?;
    ensure!(
        job_group
            .spec
            .scheduling_policy
            .gang
            .as_ref()
            .map(|g| g.min_count)
            == Some(4)
            && job_group
                .owner_references()
                .iter()
                .any(|o| o.kind == "Job" && o.name == "batch-gang"),
        "batch-gang-job: {:?} {:?}",
        job_group.spec,
        job_group.metadata.owner_references
    );
    let job_pods = wait_for("the 4 Job pods bound", Duration::from_secs(30), || {
        let (admin, ns) = (admin.clone(), ns.clone());
        async move {
            let pods = Api::<Pod>::namespaced(admin, &ns)
                .list(&ListParams::default().labels("batch.kubernetes.io/job-name=batch-gang"))
                .await?;
            let bound = pods
                .items
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .count();
            Ok((pods.items.len() == 4 && bound == 4).then_some(pods.items))
        }
    })
    .await?;
    ensure!(
        job_pods.iter().all(|p| !p.labels().contains_key(POD_GROUP)),
        "Job pods must join through their owner, not a label"
    );

    // Writes that need the chart's other rules went through: a Scheduled event (events) for a gang pod and the
    // PodScheduled=False condition (pods/status) on a pod of the group that cannot fit.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let unfit_pod = unfit[0].name_any();
    let cond = wait_for(
        "PodScheduled=False on a too-big pod",
        Duration::from_secs(30),
        || {
            let (pods, name) = (pods.clone(), unfit_pod.clone());
            async move {
                let pod = pods.get(&name).await?;
                Ok(pod.status.and_then(|s| s.conditions).and_then(|cs| {
                    cs.into_iter()
                        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                }))
            }
        },
    )
    .await?;
    ensure!(
        cond.reason.as_deref() == Some("Unschedulable"),
        "PodScheduled condition: {cond:?}"
    );
    let gang_pod = gang[0].name_any();
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns);
    wait_for(
        &format!("a Scheduled event for {gang_pod}"),
        Duration::from_secs(30),
        || {
            let (events, name) = (events.clone(), gang_pod.clone());
            async move {
                let list = events
                    .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
                    .await?;
                Ok(list
                    .items
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("Scheduled"))
                    .then_some(()))
            }
        },
    )
    .await?;

    // The scheduler's metrics are served by the binary's /metrics: binds were counted.
    let (_, metrics) = http_get(addr, "/metrics").await?;
    let binds: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("phalanx_scheduler_binds_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    ensure!(
        binds >= placed.len() as f64,
        "phalanx_scheduler_binds_total = {binds}, expected >= {}",
        placed.len()
    );

    // 8. Graceful stop: the operator returns Ok and gives up the Lease.
    shutdown.cancel();
    let result = tokio::time::timeout(Duration::from_secs(30), operator)
        .await
        .context("operator stop")??;
    result.context("operator returned an error")?;
    Ok(())
}
