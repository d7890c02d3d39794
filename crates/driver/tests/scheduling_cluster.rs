//! The scheduling driver on a real control plane (phalanx-testenv: kube-apiserver, etcd, KCM v1.37.2 and kwok).
//!
//! Every test creates its own namespace, its own kwok nodes labelled `phalanx.dev/test-ns=<ns>`, and its own
//! in-process scheduler (`phalanx_driver::run`) with a unique scheduler name and `node_selector` over those nodes, so
//! tests share the control plane without seeing each other's pods or nodes. Scenario numbers are those of
//! kubernetes `test/integration/scheduler/podgroup/podgroup_test.go` (`TestPodGroupScheduling`); docs/testing.md
//! ("Scenario index") lists every S-number with its upstream case, and each test names its case.

mod common;

use common::cluster::{Ctx, SETTLE, Sched, milli, node_of, pod_cpu, pod_scheduled, setup, tracked};

use std::{
    collections::{BTreeMap, HashMap},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use phalanx_api::v1beta1::PodGroup;
use phalanx_testenv::{TEST_NS_LABEL, wait_for};
use rand::seq::SliceRandom;
use serde_json::json;

/// The helpers only this binary uses; the shared ones are in `common/cluster.rs`.
impl Ctx {
    async fn pod(&self, name: &str, cpu: &str, group: Option<&str>) -> anyhow::Result<()> {
        self.pod_with(name, cpu, group, &self.sched.clone(), None).await
    }

    async fn pod_with(
        &self,
        name: &str,
        cpu: &str,
        group: Option<&str>,
        scheduler: &str,
        node: Option<&str>,
    ) -> anyhow::Result<()> {
        let mut labels = BTreeMap::new();
        if let Some(g) = group {
            labels.insert(phalanx_api::labels::POD_GROUP.to_string(), g.to_string());
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": labels },
            "spec": {
                "schedulerName": scheduler,
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": cpu } } }],
            }
        }))?;
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("creating pod {name}"))?;
        Ok(())
    }

    async fn group(&self, name: &str, gang: Option<i32>) -> anyhow::Result<()> {
        let policy = match gang {
            Some(n) => json!({ "gang": { "minCount": n } }),
            None => json!({ "basic": {} }),
        };
        let pg: PodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.phalanx.dev/v1beta1",
            "kind": "PodGroup",
            "metadata": { "name": name },
            "spec": { "schedulingPolicy": policy },
        }))?;
        self.pod_groups()
            .create(&PostParams::default(), &pg)
            .await
            .with_context(|| format!("creating PodGroup {name}"))?;
        Ok(())
    }

    async fn delete_pod(&self, name: &str) -> anyhow::Result<()> {
        self.pods()
            .delete(name, &DeleteParams::default().grace_period(0))
            .await?;
        let api = self.pods();
        wait_for(&format!("pod {name} gone"), SETTLE, || {
            let api = api.clone();
            async move { Ok(api.get_opt(name).await?.is_none().then_some(())) }
        })
        .await
    }

    /// Waits for `PodScheduled=False` with `reason` on `name`; returns the message.
    async fn wait_pod_reason(&self, name: &str, reason: &str) -> anyhow::Result<String> {
        let api = self.pods();
        wait_for(&format!("pod {name} PodScheduled=False/{reason}"), SETTLE, || {
            let api = api.clone();
            async move {
                let p = api.get(name).await?;
                Ok(pod_scheduled(&p)
                    .filter(|(s, r, _)| s == "False" && r == reason)
                    .map(|(_, _, m)| m))
            }
        })
        .await
    }

    /// Waits for the PodGroupInitiallyScheduled condition with `status`/`reason`; returns its message.
    async fn wait_group(&self, name: &str, status: &str, reason: &str) -> anyhow::Result<String> {
        let api = self.pod_groups();
        wait_for(&format!("PodGroup {name} {status}/{reason}"), SETTLE, || {
            let api = api.clone();
            async move {
                let g = api.get(name).await?;
                Ok(group_condition(&g)
                    .filter(|c| c.status == status && c.reason == reason)
                    .map(|c| c.message))
            }
        })
        .await
    }

    /// Waits until the PodGroup's `PodGroupInitiallyScheduled` condition has this status, reason and message.
    async fn wait_group_message(
        &self,
        name: &str,
        status: &str,
        reason: &str,
        message: &str,
    ) -> anyhow::Result<()> {
        let api = self.pod_groups();
        wait_for(
            &format!("PodGroup {name} {status}/{reason} {message:?}"),
            SETTLE,
            || {
                let api = api.clone();
                async move {
                    let g = api.get(name).await?;
                    Ok(group_condition(&g)
                        .filter(|c| c.status == status && c.reason == reason && c.message == message)
                        .map(|_| ()))
                }
            },
        )
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
        for p in Api::<Pod>::all(self.client.clone())
            .list(&ListParams::default())
            .await?
            .items
        {
            if let Some(n) = node_of(&p).filter(|n| cap.contains_key(*n)) {
                *used.entry(n.to_owned()).or_default() += pod_cpu(&p);
            }
        }
        for (n, u) in &used {
            ensure!(
                u <= &cap[n],
                "node {n} overcommitted: {u}m requested of {}m",
                cap[n]
            );
        }
        Ok(())
    }
}

fn group_condition(g: &PodGroup) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    g.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED)
        .cloned()
}

fn count_in(b: &HashMap<String, String>, names: &[String]) -> usize {
    names.iter().filter(|n| b.contains_key(*n)).count()
}

// ---------------------------------------------------------------------------------------------------------------

/// S1: gang(3), three 1-CPU pods on a 4-CPU node: all bound, condition True/Scheduled; events recorded.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`, `TestPodGroupScheduling`, case
/// "gang schedules when pod group and resources are available".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_gang_all_fit() -> anyhow::Result<()> {
    let cx = setup("s1").await?;
    cx.node("n", "4").await?;
    let s = cx.start();
    cx.group("pg1", Some(3)).await?;
    for p in ["p1", "p2", "p3"] {
        cx.pod(p, "1", Some("pg1")).await?;
    }
    cx.wait_bound(&["p1", "p2", "p3"]).await?;
    cx.wait_group("pg1", "True", "Scheduled").await?;
    let g = cx.pod_groups().get("pg1").await?;
    let c = group_condition(&g).context("condition")?;
    assert_eq!(
        c.observed_generation, g.metadata.generation,
        "observedGeneration is set"
    );
    // kube-scheduler-style events on the pods.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(cx.client.clone(), &cx.ns);
    wait_for("Scheduled event for p1", SETTLE, || async {
        let l = events.list(&ListParams::default()).await?;
        Ok(l.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("Scheduled")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("p1")
            })
            .then_some(()))
    })
    .await?;
    assert!(
        s.metrics()
            .contains("phalanx_scheduler_schedule_attempts_total{result=\"scheduled\"}"),
        "{}",
        s.metrics()
    );
    s.stop().await
}

/// S2: only 2 of 3 gang pods: both wait with WaitingForQuorum, and the PodGroup says the same. The third binds all.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`, `TestPodGroupScheduling`, case
/// "gang waits for quorum to start, then schedules".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s2_quorum_wait() -> anyhow::Result<()> {
    let cx = setup("s2").await?;
    cx.node("n", "4").await?;
    let s = cx.start();
    cx.group("pg1", Some(3)).await?;
    cx.pod("p1", "1", Some("pg1")).await?;
    cx.pod("p2", "1", Some("pg1")).await?;
    // Each member says what it waits for in upstream's Permit words, with the counts of its own last write (issue
    // 35, defect 13); it is not written again as members arrive, so a gang of N costs N pod writes.
    for p in ["p1", "p2"] {
        let m = cx.wait_pod_reason(p, "WaitingForQuorum").await?;
        let counts = m
            .strip_prefix("waiting for minCount pods from a gang to appear in scheduling queue: ")
            .unwrap_or_default();
        assert!(
            [
                "1 of 3 pods present (minCount 3) when this pod was last updated",
                "2 of 3 pods present (minCount 3) when this pod was last updated"
            ]
            .contains(&counts),
            "{p}: {m}"
        );
    }
    cx.wait_group_message(
        "pg1",
        "False",
        "WaitingForQuorum",
        "2 of 3 pods present (minCount 3)",
    )
    .await?;
    cx.stays_unbound(&["p1", "p2"], Duration::from_secs(2)).await?;
    // The wait is announced once per pod, not once per count ("1 of 3 ...", "2 of 3 ...").
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(cx.client.clone(), &cx.ns);
    let waits = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("WaitingForQuorum")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("p1")
        })
        .count();
    assert_eq!(waits, 1, "one WaitingForQuorum event for p1");
    cx.pod("p3", "1", Some("pg1")).await?;
    cx.wait_bound(&["p1", "p2", "p3"]).await?;
    cx.wait_group("pg1", "True", "Scheduled").await?;
    s.stop().await
}

/// A gang bound as its quorum arrives: 24 members created at once, so that members' `WaitingForQuorum` writes
/// are still on their way when the last members arrive and the gang is bound. Each bound pod keeps the binding's
/// `PodScheduled=True`: a wait written after its pod was bound would contradict the cluster (the write carries
/// the resourceVersion it decided on, and a conflict makes it read the pod again and see it bound). Checked once
/// nothing the scheduler decided is in flight any more, its condition writes included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_bound_as_its_quorum_arrives_stays_scheduled() -> anyhow::Result<()> {
    let cx = setup("quorum-race").await?;
    cx.node("n", "32").await?;
    let s = cx.start();
    cx.group("pg", Some(24)).await?;
    let names: Vec<String> = (0..24).map(|i| format!("q{i}")).collect();
    stream::iter(&names)
        .map(|n| cx.pod(n, "1", Some("pg")))
        .buffer_unordered(24)
        .try_collect::<Vec<()>>()
        .await?;
    cx.wait_bound(&names).await?;
    cx.wait_idle(&s).await?;
    let pods = cx.pods();
    for n in &names {
        let p = pods.get(n).await?;
        let c = pod_scheduled(&p).context("PodScheduled")?;
        ensure!(
            c.0 == "True",
            "{n} is bound but says PodScheduled={}/{}: {}",
            c.0,
            c.1,
            c.2
        );
    }
    s.stop().await
}

/// S3: pods before their PodGroup wait with WaitingForPodGroup; then the gang does not fit (blocker) and is
/// Unschedulable with nothing bound; deleting the blocker binds all three.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`, `TestPodGroupScheduling`, case
/// "gang waits for pod group, then for resources, then schedules".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_group_missing_then_capacity() -> anyhow::Result<()> {
    let cx = setup("s3").await?;
    cx.node("n", "4").await?;
    let s = cx.start();
    cx.pod("blocker", "2", None).await?;
    cx.wait_bound(&["blocker"]).await?;
    for p in ["p1", "p2", "p3"] {
        cx.pod(p, "1", Some("pg1")).await?;
    }
    let m = cx.wait_pod_reason("p1", "WaitingForPodGroup").await?;
    assert!(m.contains("\"pg1\""), "message names the group: {m}");
    cx.group("pg1", Some(3)).await?;
    cx.wait_group("pg1", "False", "Unschedulable").await?;
    for p in ["p1", "p2", "p3"] {
        cx.wait_pod_reason(p, "Unschedulable").await?;
    }
    cx.stays_unbound(&["p1", "p2", "p3"], Duration::from_secs(1))
        .await?;
    // What `kubectl describe pod p1` shows: the wait for the group as its own Normal event, then a Warning
    // FailedScheduling whose note is the pod's current unschedulable message, not an earlier one.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(cx.client.clone(), &cx.ns);
    wait_for("p1 events", SETTLE, || async {
        let current = pod_scheduled(&cx.pods().get("p1").await?).map(|(_, _, m)| m);
        let l = events.list(&ListParams::default()).await?;
        let of_p1: Vec<_> = l
            .items
            .iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("p1"))
            .collect();
        let waited = of_p1.iter().any(|e| {
            e.reason.as_deref() == Some("WaitingForPodGroup") && e.type_.as_deref() == Some("Normal")
        });
        let failed = of_p1.iter().any(|e| {
            e.reason.as_deref() == Some("FailedScheduling")
                && e.type_.as_deref() == Some("Warning")
                && e.note.is_some()
                && e.note == current
        });
        Ok((waited && failed).then_some(()))
    })
    .await?;
    cx.delete_pod("blocker").await?;
    cx.wait_bound(&["p1", "p2", "p3"]).await?;
    cx.wait_group("pg1", "True", "Scheduled").await?;
    s.stop().await
}

/// S4: minCount 3 with 4 pods and room for 3: exactly 3 bind; the 4th binds once the small blocker goes.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`, `TestPodGroupScheduling`, case
/// "minCount is scheduled, but one pod from a gang remain unschedulable until the blocked resources are released".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_min_count_below_pod_count() -> anyhow::Result<()> {
    let cx = setup("s4").await?;
    cx.node("n", "4").await?;
    let s = cx.start();
    cx.pod("small-blocker", "1", None).await?;
    cx.wait_bound(&["small-blocker"]).await?;
    let names: Vec<String> = (1..=4).map(|i| format!("p{i}")).collect();
    for p in &names {
        cx.pod(p, "1", Some("pg1")).await?;
    }
    cx.group("pg1", Some(3)).await?;
    cx.wait_group("pg1", "True", "Scheduled").await?;
    let b = wait_for("3 of 4 bound", SETTLE, || async {
        let b = cx.bindings().await?;
        Ok((count_in(&b, &names) == 3).then_some(b))
    })
    .await?;
    let left = names
        .iter()
        .find(|n| !b.contains_key(*n))
        .context("one left")?
        .clone();
    cx.wait_pod_reason(&left, "Unschedulable").await?;
    cx.stays_unbound(&[left.as_str()], Duration::from_secs(1)).await?;
    cx.delete_pod("small-blocker").await?;
    cx.wait_bound(&[left.as_str()]).await?;
    cx.no_overcommit().await?;
    s.stop().await
}

/// Creates two gang(3) groups of 3 one-CPU pods in `order` on one 4-CPU node; returns (bound of a, bound of b).
async fn two_gangs(
    cx: &Ctx,
    a: &str,
    b: &str,
    order: &[String],
    gap: Duration,
) -> anyhow::Result<(usize, usize)> {
    cx.group(a, Some(3)).await?;
    cx.group(b, Some(3)).await?;
    for name in order {
        let g = if name.starts_with(&format!("{a}-")) { a } else { b };
        cx.pod(name, "1", Some(g)).await?;
        tokio::time::sleep(gap).await;
    }
    let an: Vec<String> = (1..=3).map(|i| format!("{a}-p{i}")).collect();
    let bn: Vec<String> = (1..=3).map(|i| format!("{b}-p{i}")).collect();
    // Settled: one gang fully bound and every pod of the other marked unschedulable.
    let loser_settled = |bind: &HashMap<String, String>, pods: &[Pod]| {
        let (w, l) = if count_in(bind, &an) == 3 {
            (&an, &bn)
        } else {
            (&bn, &an)
        };
        count_in(bind, w) == 3
            && l.iter().all(|n| {
                pods.iter()
                    .find(|p| p.name_any() == *n)
                    .and_then(pod_scheduled)
                    .is_some_and(|(s, r, _)| s == "False" && r == "Unschedulable")
            })
    };
    wait_for("one gang bound, the other unschedulable", SETTLE, || async {
        let pods = cx.pods().list(&ListParams::default()).await?.items;
        let bind: HashMap<String, String> = pods
            .iter()
            .filter_map(|p| Some((p.name_any(), node_of(p)?.to_owned())))
            .collect();
        let (x, y) = (count_in(&bind, &an), count_in(&bind, &bn));
        if x + y > 3 {
            bail!("{x}+{y} pods bound on a 4-CPU node");
        }
        Ok(loser_settled(&bind, &pods).then_some(()))
    })
    .await?;
    // Settled means decided: the winner holds the node and every loser pod says Unschedulable, so nothing is left to
    // bind (no pause needed before reading).
    let bind = cx.bindings().await?;
    Ok((count_in(&bind, &an), count_in(&bind, &bn)))
}

/// S5: interleaved creation, pg1's quorum first: pg1 bound entirely, pg2 entirely unschedulable. Never 2+2.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`, `TestPodGroupScheduling`, case "two
/// gangs competing for the same resources shouldn't deadlock".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_two_gangs_no_deadlock() -> anyhow::Result<()> {
    let cx = setup("s5").await?;
    cx.node("n", "4").await?;
    let s = cx.start();
    let order: Vec<String> = (1..=3)
        .flat_map(|i| [format!("pg1-p{i}"), format!("pg2-p{i}")])
        .collect();
    let (a, b) = two_gangs(&cx, "pg1", "pg2", &order, Duration::from_millis(300)).await?;
    assert_eq!((a, b), (3, 0));
    cx.wait_group("pg2", "False", "Unschedulable").await?;
    cx.wait_group("pg1", "True", "Scheduled").await?;
    s.stop().await
}

/// S6: the same with reversed creation order: pg2 (its pods reach quorum first) wins.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`, `TestPodGroupScheduling`, case "two
/// gangs competing for the same resources shouldn't deadlock, reversed order".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_two_gangs_reversed() -> anyhow::Result<()> {
    let cx = setup("s6").await?;
    cx.node("n", "4").await?;
    let s = cx.start();
    let order: Vec<String> = (1..=3)
        .rev()
        .flat_map(|i| [format!("pg2-p{i}"), format!("pg1-p{i}")])
        .collect();
    let (a, b) = two_gangs(&cx, "pg1", "pg2", &order, Duration::from_millis(300)).await?;
    assert_eq!((a, b), (0, 3));
    cx.wait_group("pg1", "False", "Unschedulable").await?;
    s.stop().await
}

/// Two gangs competing for one node, 20 repetitions in random creation order with no pause: never 2+2.
///
/// A stress form of S5 and S6. Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`,
/// `TestPodGroupScheduling`, cases "two gangs competing for the same resources shouldn't deadlock" and "…, reversed
/// order".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gangs_random_order_20x() -> anyhow::Result<()> {
    let cx = setup("race").await?;
    let s = cx.start();
    let mut rng = rand::rng();
    for rep in 0..20 {
        let node = cx.node(&format!("r{rep}"), "4").await?;
        let (a, b) = (format!("a{rep}"), format!("b{rep}"));
        let mut order: Vec<String> = (1..=3)
            .flat_map(|i| [format!("{a}-p{i}"), format!("{b}-p{i}")])
            .collect();
        order.shuffle(&mut rng);
        let (x, y) = two_gangs(&cx, &a, &b, &order, Duration::ZERO).await?;
        assert!(
            (x, y) == (3, 0) || (x, y) == (0, 3),
            "rep {rep}: {x}+{y} with order {order:?}"
        );
        cx.no_overcommit().await?;
        // Clear the node for the next repetition: delete pods (grace 0) and the node.
        let api = cx.pods();
        stream::iter(order.clone())
            .map(|n| {
                let api = api.clone();
                async move {
                    api.delete(&n, &DeleteParams::default().grace_period(0))
                        .await
                        .map(|_| ())
                }
            })
            .buffer_unordered(6)
            .try_collect::<Vec<_>>()
            .await?;
        wait_for("pods of the repetition gone", SETTLE, || async {
            Ok(cx
                .pods()
                .list(&ListParams::default())
                .await?
                .items
                .is_empty()
                .then_some(()))
        })
        .await?;
        Api::<Node>::all(cx.client.clone())
            .delete(&node, &DeleteParams::default())
            .await?;
    }
    s.stop().await
}

/// S8: a basic group schedules each arrival on its own; no quorum.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`, `TestPodGroupScheduling`, case
/// "basic group schedules when pod group and resources are available, without gang enforcement".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_basic_group_each_arrival_binds() -> anyhow::Result<()> {
    let cx = setup("s8").await?;
    cx.node("n", "4").await?;
    let s = cx.start();
    cx.group("pg1", None).await?;
    cx.pod("p1", "1", Some("pg1")).await?;
    cx.wait_bound(&["p1"]).await?;
    cx.wait_group("pg1", "True", "Scheduled").await?;
    cx.pod("p2", "1", Some("pg1")).await?;
    cx.pod("p3", "1", Some("pg1")).await?;
    cx.wait_bound(&["p1", "p2", "p3"]).await?;
    // The later cycles ran on the snapshot kept from the first, brought up to date (see
    // `crates/driver/src/cache/snapshot.rs`), not on one built from scratch.
    let m = s.metrics();
    let incremental = m
        .lines()
        .find(|l| l.starts_with("phalanx_scheduler_snapshot_duration_seconds_count{mode=\"incremental\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(incremental >= 1, "no incremental snapshot update:\n{m}");
    s.stop().await
}

/// S9: basic group with room for 2 of 3: two bind, one Unschedulable; the third binds once the blocker goes.
///
/// Upstream: kubernetes `test/integration/scheduler/podgroup/podgroup_test.go`, `TestPodGroupScheduling`, case
/// "basic group waits for pod group, part of it waits for resources, then schedules".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s9_basic_partial_capacity() -> anyhow::Result<()> {
    let cx = setup("s9").await?;
    cx.node("n", "4").await?;
    let s = cx.start();
    cx.pod("blocker", "2", None).await?;
    cx.wait_bound(&["blocker"]).await?;
    let names: Vec<String> = (1..=3).map(|i| format!("p{i}")).collect();
    for p in &names {
        cx.pod(p, "1", Some("pg1")).await?;
    }
    cx.wait_pod_reason("p1", "WaitingForPodGroup").await?;
    cx.group("pg1", None).await?;
    let b = wait_for("2 of 3 bound", SETTLE, || async {
        let b = cx.bindings().await?;
        Ok((count_in(&b, &names) == 2).then_some(b))
    })
    .await?;
    let left = names
        .iter()
        .find(|n| !b.contains_key(*n))
        .context("one left")?
        .clone();
    cx.wait_pod_reason(&left, "Unschedulable").await?;
    cx.wait_group("pg1", "True", "Scheduled").await?;
    cx.delete_pod("blocker").await?;
    cx.wait_bound(&[left.as_str()]).await?;
    s.stop().await
}

/// A 100-pod gang on 50 two-CPU nodes (exactly full) binds completely. Prints the bind rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_of_100_on_50_nodes() -> anyhow::Result<()> {
    let cx = setup("big").await?;
    stream::iter(0..50)
        .map(|i| {
            let cx = &cx;
            async move { cx.node(&format!("n{i}"), "2").await }
        })
        .buffer_unordered(10)
        .try_collect::<Vec<_>>()
        .await?;
    let s = cx.start();
    cx.group("big", Some(100)).await?;
    let names: Vec<String> = (0..100).map(|i| format!("w{i}")).collect();
    stream::iter(names.clone())
        .map(|n| {
            let cx = &cx;
            async move { cx.pod(&n, "1", Some("big")).await }
        })
        .buffer_unordered(10)
        .try_collect::<Vec<_>>()
        .await?;
    let created = Instant::now();
    let b = wait_for("100 pods bound", Duration::from_secs(120), || async {
        let b = cx.bindings().await?;
        Ok((count_in(&b, &names) == 100).then_some(b))
    })
    .await?;
    let took = created.elapsed();
    eprintln!(
        "100-pod gang: all bound {took:?} after the last pod was created ({:.0} pods/s)",
        100.0 / took.as_secs_f64()
    );
    let m = s.metrics();
    let pick = |name: &str| {
        m.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    if let (Some(sum), Some(n)) = (
        pick("phalanx_scheduler_binding_duration_seconds_sum"),
        pick("phalanx_scheduler_binding_duration_seconds_count"),
    ) {
        eprintln!(
            "scheduler side: {n} binds, mean bind latency {:.1} ms",
            1000.0 * sum / n.max(1.0)
        );
        assert!(n >= 100.0, "at least 100 bind calls recorded, got {n}");
    }
    let mut per_node: HashMap<&str, usize> = HashMap::new();
    for n in b.values() {
        *per_node.entry(n.as_str()).or_default() += 1;
    }
    assert_eq!(per_node.len(), 50, "every node used");
    assert!(
        per_node.values().all(|c| *c == 2),
        "two pods per node: {per_node:?}"
    );
    cx.no_overcommit().await?;
    if let Err(e) = cx.wait_group("big", "True", "Scheduled").await {
        let g = cx.pod_groups().get("big").await?;
        bail!("{e:#}; group status: {:?}", g.status);
    }
    s.stop().await
}

/// Pods of another scheduler are left alone (no binding, no condition), yet count as usage when bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_schedulers_pods_left_alone() -> anyhow::Result<()> {
    let cx = setup("other").await?;
    let node = cx.node("n", "4").await?;
    let s = cx.start();
    cx.pod_with("foreign-pending", "1", None, "some-other-scheduler", None)
        .await?;
    cx.pod_with("foreign-bound", "3", None, "some-other-scheduler", Some(&node))
        .await?;
    cx.pod("mine-small", "1", None).await?;
    cx.pod("mine-big", "2", None).await?;
    cx.wait_bound(&["mine-small"]).await?;
    cx.wait_pod_reason("mine-big", "Unschedulable").await?;
    cx.stays_unbound(&["foreign-pending", "mine-big"], Duration::from_secs(2))
        .await?;
    let p = cx.pods().get("foreign-pending").await?;
    assert!(
        pod_scheduled(&p).is_none(),
        "no condition written on a foreign pod: {:?}",
        pod_scheduled(&p)
    );
    s.stop().await
}

/// A pod whose PodGroup appears 10 s later shows WaitingForPodGroup meanwhile and is scheduled after it appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_waits_for_a_pod_group_created_later() -> anyhow::Result<()> {
    let cx = setup("late").await?;
    cx.node("n", "4").await?;
    let s = cx.start();
    let t0 = Instant::now();
    cx.pod("p1", "1", Some("late")).await?;
    let m = cx.wait_pod_reason("p1", "WaitingForPodGroup").await?;
    assert!(m.contains("\"late\""), "{m}");
    cx.stays_unbound(&["p1"], Duration::from_secs(10).saturating_sub(t0.elapsed()))
        .await?;
    cx.group("late", Some(1)).await?;
    cx.wait_bound(&["p1"]).await?;
    cx.wait_group("late", "True", "Scheduled").await?;
    s.stop().await
}

/// Deleting one bound pod of a gang unbinds none of the others, and the group stays Scheduled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_one_member_keeps_the_rest() -> anyhow::Result<()> {
    let cx = setup("del").await?;
    cx.node("n1", "2").await?;
    cx.node("n2", "2").await?;
    let s = cx.start();
    cx.group("pg", Some(3)).await?;
    for p in ["p1", "p2", "p3"] {
        cx.pod(p, "1", Some("pg")).await?;
    }
    let before = cx.wait_bound(&["p1", "p2", "p3"]).await?;
    cx.wait_group("pg", "True", "Scheduled").await?;
    cx.delete_pod("p1").await?;
    // Judged once the scheduler has processed the deletion (it tracks two pods) and has nothing in flight.
    wait_tracked(&s, "the scheduler to drop p1 and settle", |get| {
        get("pods") == 2.0 && nothing_in_flight(get)
    })
    .await?;
    let after = cx.bindings().await?;
    for p in ["p2", "p3"] {
        assert_eq!(after.get(p), before.get(p), "{p} stays on its node");
        let pod = cx.pods().get(p).await?;
        assert!(pod.metadata.deletion_timestamp.is_none(), "{p} not deleted");
    }
    cx.wait_group("pg", "True", "Scheduled").await?;
    s.stop().await
}

/// Killing the scheduler mid-run and restarting it loses nothing: no pod moves or is bound twice, no node is
/// overcommitted, every gang ends bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_restart_loses_nothing() -> anyhow::Result<()> {
    let cx = setup("kill").await?;
    // 3 gangs x 20 one-CPU pods on 15 four-CPU nodes: exactly full.
    stream::iter(0..15)
        .map(|i| {
            let cx = &cx;
            async move { cx.node(&format!("n{i}"), "4").await }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await?;
    let mut all = Vec::new();
    for g in ["ga", "gb", "gc"] {
        cx.group(g, Some(20)).await?;
    }
    // Watch bindings so the kill lands while binds are in flight.
    let (bound_tx, mut bound_rx) = tokio::sync::mpsc::unbounded_channel();
    let wapi = cx.pods();
    let watch_task = tokio::spawn(async move {
        let mut seen: HashMap<String, String> = HashMap::new();
        let mut st = std::pin::pin!(watcher(wapi, watcher::Config::default()).applied_objects());
        while let Some(Ok(p)) = st.next().await {
            if let Some(n) = node_of(&p) {
                let prev = seen.insert(p.name_any(), n.to_owned());
                let _ = bound_tx.send((p.name_any(), n.to_owned(), prev));
            }
        }
    });
    let s = cx.start_with(|o| o.bind_concurrency = 1);
    for g in ["ga", "gb", "gc"] {
        for i in 0..20 {
            let n = format!("{g}-{i}");
            all.push(n.clone());
        }
    }
    stream::iter(all.clone())
        .map(|n| {
            let cx = &cx;
            async move {
                let g = n.split('-').next().unwrap_or_default().to_owned();
                cx.pod(&n, "1", Some(&g)).await
            }
        })
        .buffer_unordered(10)
        .try_collect::<Vec<_>>()
        .await?;
    // Kill after the 10th observed binding.
    let mut seen_bound: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut n_bound = 0;
    while n_bound < 10 {
        let (p, n, prev) = tokio::time::timeout(SETTLE, bound_rx.recv())
            .await?
            .context("watch ended")?;
        match prev {
            None => n_bound += 1,
            Some(prev) => ensure!(prev == n, "pod {p} seen on {prev} and then on {n}"),
        }
        seen_bound.insert(p);
    }
    s.kill().await;
    let at_kill = cx.bindings().await?;
    let n_at_kill = count_in(&at_kill, &all);
    eprintln!("killed with {n_at_kill} of 60 pods bound");
    ensure!(n_at_kill < 60, "the kill came too late to interrupt binding");
    let s2 = cx.start();
    let end = cx
        .wait_bound(&all.iter().map(String::as_str).collect::<Vec<_>>())
        .await?;
    for (p, n) in &at_kill {
        assert_eq!(end.get(p), Some(n), "{p} kept its node across the restart");
    }
    cx.no_overcommit().await?;
    for g in ["ga", "gb", "gc"] {
        cx.wait_group(g, "True", "Scheduled").await?;
    }
    // No pod was ever seen on two nodes: judged once the watch has delivered every pod bound (not after a pause).
    let deadline = tokio::time::Instant::now() + SETTLE;
    while seen_bound.len() < all.len() {
        let Ok(Some((p, n, prev))) = tokio::time::timeout_at(deadline, bound_rx.recv()).await else {
            bail!(
                "the binding watch delivered {} of {} bound pods within {SETTLE:?}",
                seen_bound.len(),
                all.len()
            );
        };
        if let Some(prev) = prev {
            ensure!(prev == n, "pod {p} seen on {prev} and then on {n}");
        }
        seen_bound.insert(p);
    }
    while let Ok((p, n, prev)) = bound_rx.try_recv() {
        if let Some(prev) = prev {
            ensure!(prev == n, "pod {p} seen on {prev} and then on {n}");
        }
    }
    watch_task.abort();
    s2.stop().await
}

/// Only the leader writes: a follower keeps its caches warm but binds nothing and writes no condition; once it
/// becomes leader it schedules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_writes_nothing_until_leader() -> anyhow::Result<()> {
    let cx = setup("leader").await?;
    cx.node("n", "4").await?;
    let s = cx.start_with(|o| o.instance = Some("follower".into()));
    cx.group("pg", Some(2)).await?;
    cx.pod("p1", "1", Some("pg")).await?;
    cx.pod("lonely", "1", Some("missing")).await?;
    cx.stays_unbound(&["p1", "lonely"], Duration::from_secs(2))
        .await?;
    for p in ["p1", "lonely"] {
        let pod = cx.pods().get(p).await?;
        assert!(
            pod_scheduled(&pod).is_none(),
            "follower wrote a condition on {p}: {:?}",
            pod_scheduled(&pod)
        );
    }
    assert!(
        group_condition(&cx.pod_groups().get("pg").await?).is_none(),
        "follower wrote a group condition"
    );
    s.leader.send(true)?;
    cx.wait_pod_reason("lonely", "WaitingForPodGroup").await?;
    cx.wait_pod_reason("p1", "WaitingForQuorum").await?;
    cx.pod("p2", "1", Some("pg")).await?;
    cx.wait_bound(&["p1", "p2"]).await?;
    s.stop().await
}

/// The crash window between binds and the condition write: a gang whose pods were all bound by a scheduler that
/// died before writing `PodGroupInitiallyScheduled` gets True/Scheduled from the next scheduler, although no cycle
/// runs for it (nothing is pending). A group below its quorum is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_gang_without_condition_is_caught_up_after_restart() -> anyhow::Result<()> {
    let cx = setup("catchup").await?;
    let node = cx.node("n", "4").await?;
    cx.group("done", Some(2)).await?;
    cx.group("short", Some(3)).await?;
    for p in ["d1", "d2", "s1", "s2"] {
        let g = if p.starts_with('d') { "done" } else { "short" };
        cx.pod(p, "1", Some(g)).await?;
        // Bound as the dead scheduler would have left them.
        phalanx_testenv::bind_pod(&cx.client, &cx.ns, p, &node).await?;
    }
    let s = cx.start();
    cx.wait_group("done", "True", "Scheduled").await?;
    // "short" has 2 of 3 bound and no pending pod: not placed, so no True condition appears. Judged once the
    // catch-up that wrote "done" has nothing left in flight.
    wait_tracked(&s, "the catch-up's writes done", nothing_in_flight).await?;
    let short = cx.pod_groups().get("short").await?;
    let c = group_condition(&short);
    assert!(
        c.as_ref().is_none_or(|c| c.status != "True"),
        "a group below its quorum is not marked Scheduled: {c:?}"
    );
    s.stop().await
}

/// A placed gang whose condition write was lost for good (every retry failed while the scheduler kept running) is
/// repaired by the leader's periodic re-check, not only by a restart. Gangs bound outside a cycle (pods created with
/// `spec.nodeName`) stand in for the lost write: no cycle runs for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_group_condition_is_repaired_while_running() -> anyhow::Result<()> {
    let cx = setup("repair").await?;
    let node = cx.node("n", "8").await?;
    let sched = cx.sched.clone();
    let bound_gang = |name: &'static str| {
        let (cx, node, sched) = (&cx, node.clone(), sched.clone());
        async move {
            cx.group(name, Some(2)).await?;
            for i in 1..=2 {
                cx.pod_with(&format!("{name}-{i}"), "1", Some(name), &sched, Some(&node))
                    .await?;
            }
            anyhow::Ok(())
        }
    };
    // Counterfactual: with the re-check an hour away, nothing writes the condition of a gang bound after the start.
    let slow = cx.start_with(|o| o.condition_catch_up = Duration::from_secs(3600));
    // A pod it binds shows its loop is past the catch-up it runs on becoming leader.
    cx.pod("probe", "1", None).await?;
    cx.wait_bound(&["probe"]).await?;
    bound_gang("early").await?;
    // Judged once the scheduler knows the gang's pods (probe + 2) and has nothing in flight, not after a pause.
    wait_tracked(&slow, "the scheduler to know the early gang and settle", |get| {
        get("pods") >= 3.0 && nothing_in_flight(get)
    })
    .await?;
    let c = group_condition(&cx.pod_groups().get("early").await?);
    ensure!(
        c.is_none(),
        "nothing should have written the condition yet: {c:?}"
    );
    slow.stop().await?;

    let fast = cx.start_with(|o| o.condition_catch_up = Duration::from_secs(2));
    // The start's own catch-up repairs the older gang ...
    cx.wait_group("early", "True", "Scheduled").await?;
    // ... and the periodic re-check one that appears while it runs.
    bound_gang("late").await?;
    cx.wait_group("late", "True", "Scheduled").await?;
    fast.stop().await
}

/// With `initially_scheduled_by_controllers` (as in `phalanx run`) the driver leaves a standalone group's True to the
/// PodGroup controller. No controller runs here, as when the controller could not write it (a member deleted
/// before its write took the quorum away): after one catch-up interval the driver writes the True it decided itself,
/// and not before, whether the gang showed nothing or the driver's own `WaitingForQuorum` False.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_true_left_to_the_controllers_is_written_after_a_catch_up_interval() -> anyhow::Result<()> {
    let cx = setup("delegated").await?;
    cx.node("n", "8").await?;
    cx.group("g", Some(2)).await?;
    let s = cx.start_with(|o| {
        o.initially_scheduled_by_controllers = true;
        o.condition_catch_up = Duration::from_secs(4);
    });
    let started = std::time::Instant::now();
    cx.pod("g-1", "1", Some("g")).await?;
    cx.pod("g-2", "1", Some("g")).await?;
    cx.wait_bound(&["g-1", "g-2"]).await?;
    // Between the two creations a cycle may say why the group waits (`WaitingForQuorum`): that False is the
    // driver's to write. The True is not, yet.
    let early = group_condition(&cx.pod_groups().get("g").await?);
    // Only meaningful while less than one interval has passed since the start (a slow machine may take longer
    // than that to bind, and then the True is due).
    ensure!(
        started.elapsed() >= Duration::from_secs(4) || early.as_ref().is_none_or(|c| c.status != "True"),
        "the driver wrote the True it leaves to the controllers at once: {early:?}"
    );
    let c = cx.wait_group("g", "True", "Scheduled").await?;
    ensure!(
        started.elapsed() >= Duration::from_secs(4),
        "written after {:?}, before one catch-up interval (4 s): {c:?}",
        started.elapsed()
    );
    // A gang that waited first shows the driver's False; its True still waits for the interval.
    cx.group("w", Some(2)).await?;
    cx.pod("w-1", "1", Some("w")).await?;
    cx.wait_group("w", "False", "WaitingForQuorum").await?;
    // The decision comes after this creation, so the True may not show before 4 s from here.
    let created = std::time::Instant::now();
    cx.pod("w-2", "1", Some("w")).await?;
    cx.wait_bound(&["w-1", "w-2"]).await?;
    let early = group_condition(&cx.pod_groups().get("w").await?);
    ensure!(
        created.elapsed() >= Duration::from_secs(4) || early.as_ref().is_some_and(|c| c.status == "False"),
        "the False should stand until the catch-up: {early:?}"
    );
    let c = cx.wait_group("w", "True", "Scheduled").await?;
    ensure!(
        created.elapsed() >= Duration::from_secs(4),
        "written {:?} after the last member's creation, before one catch-up interval (4 s): {c:?}",
        created.elapsed()
    );
    s.stop().await
}

/// A member that names another scheduler breaks the gang (the other scheduler may bind it alone). While the group
/// waits for quorum its message names that pod; once our members could be placed, the group fails with upstream's
/// SchedulerError message (`validatePodGroup`, `pkg/scheduler/schedule_one_podgroup.go`) and nothing binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_of_another_scheduler_is_reported_and_fails_the_group() -> anyhow::Result<()> {
    let cx = setup("foreign").await?;
    cx.node("n", "4").await?;
    cx.group("waiting", Some(3)).await?;
    cx.group("mixed", Some(1)).await?;
    let s = cx.start();
    cx.pod("w1", "1", Some("waiting")).await?;
    cx.pod_with("w2", "1", Some("waiting"), "default-scheduler", None)
        .await?;
    let api = cx.pod_groups();
    let msg = wait_for("waiting names the foreign pod", SETTLE, || {
        let api = api.clone();
        async move {
            let g = api.get("waiting").await?;
            Ok(group_condition(&g)
                .map(|c| c.message)
                .filter(|m| m.contains("w2") && m.contains("default-scheduler")))
        }
    })
    .await?;
    ensure!(msg.contains("not counted"), "quorum message explains: {msg}");
    // The foreign member first, so it is there when our member's cycle runs: one watch delivers pods in
    // resourceVersion order, so the store holds m2 before the driver hears of m1 (no pause needed).
    cx.pod_with("m2", "1", Some("mixed"), "default-scheduler", None)
        .await?;
    cx.pod("m1", "1", Some("mixed")).await?;
    // Kubernetes 1.38's reason for a failed runtime validation (`PodGroupReasonPodGroupError`); the pods keep
    // `SchedulerError`.
    let msg = cx.wait_group("mixed", "False", "PodGroupError").await?;
    ensure!(
        msg.contains("same .spec.schedulerName") && msg.contains("m2"),
        "upstream's message naming the pod: {msg}"
    );
    let pod_msg = cx.wait_pod_reason("m1", "SchedulerError").await?;
    ensure!(pod_msg == msg, "the pod says the same: {pod_msg}");
    cx.stays_unbound(&["m1", "w1"], Duration::from_secs(2)).await?;
    s.stop().await
}

/// Waits (at most [`SETTLE`]) until `ok` holds for the scheduler's `scheduler_tracked_objects{kind}` gauges
/// (`binds_waiting`, `tasks`, `pods`, ...; an absent kind reads 0), refreshed on every pass of its loop (at least once
/// a second). The positive sign a negative check waits for: what the scheduler knows and has in flight, instead of
/// a pause. The error names the gauges last seen.
async fn wait_tracked(
    s: &Sched,
    what: &str,
    ok: impl Fn(&dyn Fn(&str) -> f64) -> bool,
) -> anyhow::Result<()> {
    let last = std::sync::Mutex::new(String::new());
    let res = wait_for(what, SETTLE, || {
        let text = s.metrics();
        let get = |kind: &str| tracked(&text, kind).unwrap_or(0.0);
        let done = ok(&get);
        *last.lock().unwrap_or_else(|e| e.into_inner()) = text
            .lines()
            .filter(|l| l.starts_with("phalanx_scheduler_tracked_objects{"))
            .collect::<Vec<_>>()
            .join(", ");
        async move { Ok(done.then_some(())) }
    })
    .await;
    res.map_err(|e| {
        e.context(format!(
            "gauges: {}",
            last.lock().unwrap_or_else(|e| e.into_inner())
        ))
    })
}

/// Nothing the scheduler decided is still on its way to the API server (no bind waiting, no background task).
fn nothing_in_flight(get: &dyn Fn(&str) -> f64) -> bool {
    get("binds_waiting") == 0.0 && get("tasks") == 0.0
}

/// Sum of the counter samples of `metric` whose labels contain `label` (e.g. `result="error"`).
fn counter(text: &str, metric: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(metric) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A ValidatingAdmissionPolicy that denies `pods/binding` for one pod: the pod reports the rejection, and its
/// retries back off (upstream `handleBindingCycleError` requeues with backoff: 1 s, 2 s, 4 s, ...). Before the fix
/// it was retried every second, forever, with an API call and an event each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_bind_is_reported_and_retried_with_backoff() -> anyhow::Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let cx = setup("denybind").await?;
    cx.node("n", "4").await?;
    let name = format!("deny-bind-{}", cx.ns);
    let vap: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": { "resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods/binding"]
            }]},
            "validations": [{
                "expression": format!("!(request.namespace == '{}' && object.metadata.name == 'denied')", cx.ns),
                "message": "binding denied by test policy"
            }]
        }
    }))?;
    let vapb: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "policyName": name, "validationActions": ["Deny"] }
    }))?;
    let vaps: Api<ValidatingAdmissionPolicy> = Api::all(cx.client.clone());
    let vapbs: Api<ValidatingAdmissionPolicyBinding> = Api::all(cx.client.clone());
    vaps.create(&PostParams::default(), &vap).await?;
    vapbs.create(&PostParams::default(), &vapb).await?;
    // The API server loads policies asynchronously (an informer): wait until it denies a binding of `denied`
    // before the pod exists (admission runs before the binding looks the pod up, which then answers NotFound).
    let node = format!("{}-n", cx.ns);
    wait_for("the bind-denying policy in force", SETTLE, || async {
        Ok(
            match phalanx_testenv::bind_pod(&cx.client, &cx.ns, "denied", &node).await {
                Err(e) if format!("{e:#}").contains("binding denied by test policy") => Some(()),
                _ => None,
            },
        )
    })
    .await?;
    let s = cx.start();
    let result = async {
        cx.pod("denied", "1", None).await?;
        let msg = match cx.wait_pod_reason("denied", "SchedulerError").await {
            Ok(m) => m,
            Err(e) => bail!("{e}; bindings: {:?}", cx.bindings().await?),
        };
        ensure!(
            msg.contains("binding denied by test policy"),
            "the rejection is reported: {msg}"
        );
        let start = counter(&s.metrics(), "phalanx_scheduler_binds_total", "result=\"error\"");
        tokio::time::sleep(Duration::from_secs(7)).await;
        let end = counter(&s.metrics(), "phalanx_scheduler_binds_total", "result=\"error\"");
        // Backoff 1+2+4 s fits at most 3-4 attempts in 7 s; one per second would be 7.
        ensure!(
            end - start <= 4.0,
            "bind retried {} times in 7 s: no backoff",
            end - start
        );
        ensure!(end > start || start >= 1.0, "the bind was attempted");
        // Other pods are unaffected.
        cx.pod("fine", "1", None).await?;
        cx.wait_bound(&["fine"]).await?;
        Ok(())
    }
    .await;
    let _ = vapbs.delete(&name, &DeleteParams::default()).await;
    let _ = vaps.delete(&name, &DeleteParams::default()).await;
    result?;
    s.stop().await
}

/// After a (re)start the scheduler queues what is pending in creation order, as upstream does, not in the hash order
/// of its caches: two gangs that cannot both fit, created before any scheduler runs, are decided for the older one
/// every time. Before the fix the winner depended on hash order (the names vary per round).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_queues_pending_work_in_creation_order() -> anyhow::Result<()> {
    use rand::Rng;
    for round in 0..5 {
        let cx = setup(&format!("order{round}")).await?;
        cx.node("n", "2").await?;
        let tag: u32 = rand::rng().random_range(0..1_000_000);
        let (older, newer) = (format!("older-{tag}"), format!("newer-{}", tag ^ 0x5a5a5));
        for g in [&older, &newer] {
            cx.group(g, Some(2)).await?;
            for i in 0..2 {
                cx.pod(&format!("{g}-{i}"), "1", Some(g)).await?;
            }
            // Creation timestamps have one-second resolution.
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        let s = cx.start();
        let names = [format!("{older}-0"), format!("{older}-1")];
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        cx.wait_bound(&refs).await?;
        let b = cx.bindings().await?;
        ensure!(
            !b.keys().any(|k| k.starts_with(&newer)),
            "round {round}: the newer gang got pods: {b:?}"
        );
        s.stop().await?;
    }
    Ok(())
}

/// The loop's heartbeat (the liveness probe) keeps beating while the cluster is idle and an entity waits in the
/// unschedulable pool for the 5-minute flush. Before the fix the loop slept until that flush and `/healthz` reported
/// a healthy scheduler as stuck after 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_loop_keeps_beating_with_an_unschedulable_entity() -> anyhow::Result<()> {
    let cx = setup("beat").await?;
    cx.node("n", "1").await?;
    let progress = phalanx_driver::Progress::default();
    let p = progress.clone();
    let s = cx.start_with(move |o| o.progress = p);
    cx.pod("too-big", "4", None).await?;
    cx.wait_pod_reason("too-big", "Unschedulable").await?;
    // The loop beats at least once a second; 10 s without a beat over 15 s of watching is a loop asleep (the
    // defect slept until the 5-minute flush), not a loaded machine.
    let mut worst = Duration::ZERO;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        worst = worst.max(progress.age());
    }
    ensure!(
        worst < Duration::from_secs(10),
        "the loop went {worst:?} without a beat while idle"
    );
    s.stop().await
}
