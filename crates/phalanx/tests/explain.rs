//! `phalanx explain` / `simulate` / `snapshot` as a user runs them, against the real control plane of
//! phalanx-testenv (kube-apiserver, etcd, kube-controller-manager, kwok). Each test has its own namespace, kwok
//! nodes labelled for it, and scheduler name; the binary is told both (`--scheduler-name`, `--node-selector`), as a
//! scheduler instance partitioning a shared cluster is. No test skips: without the control-plane binaries the
//! testenv fails the test.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, PostParams},
};
use phalanx_api::v1beta1::PodGroup;
use phalanx_driver::SchedulerOptions;
use phalanx_store::{Store, StoreConfig};
use phalanx_testenv::{FakeNode, TEST_NS_LABEL, TestEnv, bind_pod, create_namespace, wait_for};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

struct Ctx {
    client: Client,
    ns: String,
    sched: String,
}

async fn setup(prefix: &str) -> anyhow::Result<Ctx> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let ns = create_namespace(&client, prefix).await?;
    let sched = format!("phalanx-{ns}");
    Ok(Ctx { client, ns, sched })
}

/// What the binary printed.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Ctx {
    fn cli(&self, args: &[&str]) -> Run {
        let selector = format!("{TEST_NS_LABEL}={}", self.ns);
        let kubeconfig = TestEnv::shared().kubeconfig_path().display().to_string();
        let mut all: Vec<&str> = args.to_vec();
        all.extend([
            "--kubeconfig",
            &kubeconfig,
            "--scheduler-name",
            &self.sched,
            "--node-selector",
            &selector,
        ]);
        // The built-in configuration, whatever the developer's shell sets.
        let out = Command::new(env!("CARGO_BIN_EXE_kubectl-phalanx"))
            .env_remove("PHALANX_CONFIG")
            .args(&all)
            .output()
            .expect("the binary runs");
        Run {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `explain KIND NAME` in text and in JSON; both must succeed.
    fn explain(&self, kind: &str, name: &str) -> anyhow::Result<(String, Value)> {
        let t = self.cli(&["explain", kind, name, "-n", &self.ns]);
        ensure!(t.ok, "explain failed: {}", t.stderr);
        assert!(!t.stderr.contains("panicked"), "{}", t.stderr);
        let j = self.cli(&["explain", kind, name, "-n", &self.ns, "-o", "json"]);
        ensure!(j.ok, "explain -o json failed: {}", j.stderr);
        let v: Value = serde_json::from_str(&j.stdout).with_context(|| format!("JSON: {}", j.stdout))?;
        Ok((t.stdout, v))
    }

    async fn node(&self, name: &str, cpu: &str, labels: &[(&str, &str)]) -> anyhow::Result<String> {
        let full = format!("{}-{name}", self.ns);
        let mut n = FakeNode::new(&full)
            .cpu(cpu)
            .memory("32Gi")
            .pods(110)
            .test_namespace(&self.ns);
        for (k, v) in labels {
            n = n.label(*k, *v);
        }
        n.create(&self.client).await?;
        Ok(full)
    }

    fn pod_json(&self, name: &str, cpu: &str, group: Option<&str>, scheduler: &str) -> Value {
        let mut labels = BTreeMap::new();
        if let Some(g) = group {
            labels.insert(phalanx_api::labels::POD_GROUP.to_string(), g.to_string());
        }
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": { "name": name, "namespace": self.ns, "labels": labels },
            "spec": {
                "schedulerName": scheduler,
                "terminationGracePeriodSeconds": 0,
                "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": cpu } } }],
            }
        })
    }

    async fn pod(&self, name: &str, cpu: &str, group: Option<&str>) -> anyhow::Result<()> {
        let sched = self.sched.clone();
        self.create_pod(self.pod_json(name, cpu, group, &sched)).await
    }

    async fn create_pod(&self, v: Value) -> anyhow::Result<()> {
        let pod: Pod = serde_json::from_value(v)?;
        phalanx_testenv::create_pod(&self.client, &self.ns, &pod).await?;
        Ok(())
    }

    fn group_json(&self, name: &str, min: i32, topology: Option<&str>, class: Option<&str>) -> Value {
        let mut spec = json!({ "schedulingPolicy": { "gang": { "minCount": min } } });
        if let Some(k) = topology {
            spec["schedulingConstraints"] = json!({ "topology": [{ "key": k }] });
        }
        if let Some(c) = class {
            spec["priorityClassName"] = json!(c);
        }
        json!({
            "apiVersion": "scheduling.phalanx.dev/v1beta1",
            "kind": "PodGroup",
            "metadata": { "name": name, "namespace": self.ns },
            "spec": spec,
        })
    }

    async fn group(&self, name: &str, min: i32, topology: Option<&str>) -> anyhow::Result<()> {
        self.create_group(self.group_json(name, min, topology, None))
            .await
    }

    async fn create_group(&self, v: Value) -> anyhow::Result<()> {
        let pg: PodGroup = serde_json::from_value(v)?;
        Api::<PodGroup>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &pg)
            .await
            .with_context(|| format!("creating PodGroup {}", pg.name_any()))?;
        Ok(())
    }

    /// Runs this test's scheduler in-process (the driver as `phalanx run` runs it) until `until` holds.
    async fn schedule_until<T, F, Fut>(&self, what: &str, until: F) -> anyhow::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<Option<T>>>,
    {
        let opts = SchedulerOptions {
            scheduler_name: self.sched.clone(),
            node_selector: Some(format!("{TEST_NS_LABEL}={}", self.ns)),
            ..SchedulerOptions::default()
        };
        let store = Store::start(self.client.clone(), StoreConfig::default());
        let (_tx, rx) = tokio::sync::watch::channel(true);
        let shutdown = CancellationToken::new();
        let mut registry = Registry::default();
        let fut = phalanx_driver::run(
            self.client.clone(),
            store,
            opts,
            rx,
            shutdown.clone(),
            &mut registry,
        );
        let handle = tokio::spawn(fut);
        let r = wait_for(what, Duration::from_secs(60), until).await;
        shutdown.cancel();
        handle.await.context("scheduler task")??;
        r
    }

    async fn bindings(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let list = Api::<Pod>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default())
            .await?;
        Ok(list
            .items
            .iter()
            .filter_map(|p| Some((p.name_any(), p.spec.as_ref()?.node_name.clone()?)))
            .collect())
    }
}

fn s(v: &Value, ptr: &str) -> String {
    v.pointer(ptr)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Pods name a PodGroup that does not exist: WaitingForPodGroup, naming the group; a name nothing refers to is a
/// clear error with a non-zero exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_group_missing() -> anyhow::Result<()> {
    let cx = setup("ex-missing").await?;
    cx.node("n1", "4", &[]).await?;
    cx.pod("p1", "1", Some("ghost")).await?;
    let (text, j) = cx.explain("podgroup", "ghost")?;
    assert_eq!(s(&j, "/state"), "WaitingForPodGroup", "{j}");
    assert!(text.contains("Waiting for its group object"), "{text}");
    assert!(text.contains("\"ghost\", which does not exist"), "{text}");
    cx.create_pod(cx.pod_json("theirs", "1", None, "other-scheduler"))
        .await?;
    let r = cx.cli(&["explain", "pod", "theirs", "-n", &cx.ns]);
    assert!(
        !r.ok && r.stderr.contains("names schedulerName \"other-scheduler\""),
        "{}",
        r.stderr
    );
    let (_, jp) = cx.explain("pod", "p1")?;
    assert_eq!(s(&jp, "/state"), "WaitingForPodGroup");
    assert_eq!(s(&jp, "/podGroup"), "ghost");
    // As a kubectl plugin: kubectl finds `kubectl-phalanx` on PATH and passes the arguments through.
    let plugin = Path::new(env!("CARGO_BIN_EXE_kubectl-phalanx"));
    let path = format!(
        "{}:{}",
        plugin
            .parent()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
        std::env::var("PATH").unwrap_or_default()
    );
    let selector = format!("{TEST_NS_LABEL}={}", cx.ns);
    let out = Command::new(TestEnv::shared().bin_dir().join("kubectl"))
        .env("PATH", path)
        .args([
            "phalanx",
            "explain",
            "ppg",
            "ghost",
            "-n",
            &cx.ns,
            "--scheduler-name",
            &cx.sched,
        ])
        .args(["--node-selector", &selector, "--kubeconfig"])
        .arg(TestEnv::shared().kubeconfig_path())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl phalanx: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("WaitingForPodGroup"), "{stdout}");
    let r = cx.cli(&["explain", "podgroup", "nothing", "-n", &cx.ns]);
    assert!(!r.ok, "a missing object fails");
    assert!(
        r.stderr
            .contains(&format!("podgroup {}/nothing not found", cx.ns)),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    Ok(())
}

/// 2 of 3 gang pods: WaitingForQuorum with the count and the members present.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_quorum() -> anyhow::Result<()> {
    let cx = setup("ex-quorum").await?;
    cx.node("n1", "8", &[]).await?;
    cx.group("g", 3, None).await?;
    cx.pod("g-0", "1", Some("g")).await?;
    cx.pod("g-1", "1", Some("g")).await?;
    let (text, j) = cx.explain("ppg", "g")?;
    assert_eq!(s(&j, "/state"), "WaitingForQuorum", "{j}");
    assert_eq!(j.pointer("/quorum/present"), Some(&json!(2)));
    assert_eq!(j.pointer("/quorum/minCount"), Some(&json!(3)));
    assert_eq!(j.pointer("/quorum/members"), Some(&json!(["g-0", "g-1"])));
    assert!(text.contains("2 of 3 pods present (minCount 3)"), "{text}");
    assert!(text.contains("1 more must be created"), "{text}");
    assert!(text.contains("g-0, g-1"), "{text}");
    // A pod without a group is explained as kube-scheduler would schedule it, on its own.
    cx.pod("solo", "100", None).await?;
    let (text, j) = cx.explain("pod", "solo")?;
    assert_eq!(s(&j, "/state"), "Unschedulable", "{j}");
    assert!(j.get("podGroup").is_some_and(Value::is_null), "{j}");
    assert!(
        text.contains("0/1 nodes are available: 1 Insufficient cpu."),
        "{text}"
    );
    Ok(())
}

/// A PodGroup being deleted while its protection finalizer (set here as the controller sets it) waits for its
/// member pods: `explain` says so, with the finalizer and the pods it waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_a_group_being_deleted() -> anyhow::Result<()> {
    let cx = setup("ex-deleting").await?;
    cx.node("n1", "8", &[]).await?;
    cx.group("half", 3, None).await?;
    let groups: Api<PodGroup> = Api::namespaced(cx.client.clone(), &cx.ns);
    groups
        .patch(
            "half",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({ "metadata": { "finalizers": [phalanx_api::finalizers::POD_GROUP_PROTECTION] } }),
            ),
        )
        .await?;
    cx.pod("half-0", "1", Some("half")).await?;
    let (text, j) = cx.explain("ppg", "half")?;
    assert!(
        j.get("deletion").is_some_and(Value::is_null),
        "not being deleted yet: {j}"
    );
    assert!(!text.contains("Being deleted"), "{text}");
    groups.delete("half", &kube::api::DeleteParams::default()).await?;
    let (text, j) = cx.explain("ppg", "half")?;
    assert_eq!(
        j.pointer("/deletion/finalizers"),
        Some(&json!([phalanx_api::finalizers::POD_GROUP_PROTECTION])),
        "{j}"
    );
    assert_eq!(j.pointer("/deletion/waitingFor"), Some(&json!(["half-0"])), "{j}");
    assert!(
        text.contains("(finalizers: scheduling.phalanx.dev/podgroup-protection); it waits for 1: half-0"),
        "{text}"
    );
    // Let the namespace go: the controller is not running here, so the test takes the finalizer off itself.
    groups
        .patch(
            "half",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "metadata": { "finalizers": null } })),
        )
        .await?;
    Ok(())
}

/// A placed gang below its quorum with `recoveryPolicy` `RestartGroup`: explain shows the live condition, the
/// policy in words, the restart count, and when the controller restarts the gang (the same decision it takes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_a_gang_below_its_quorum_and_its_recovery_policy() -> anyhow::Result<()> {
    let cx = setup("ex-life").await?;
    let node = cx.node("n1", "8", &[]).await?;
    let mut g = cx.group_json("rg", 2, None, None);
    g["spec"]["recoveryPolicy"] = json!({ "action": "RestartGroup", "maxRestarts": 3 });
    cx.create_group(g).await?;
    let sched = cx.sched.clone();
    let mut bound = cx.pod_json("rg-0", "1", Some("rg"), &sched);
    bound["spec"]["nodeName"] = json!(node);
    cx.create_pod(bound).await?;
    cx.pod("rg-1", "1", Some("rg")).await?;
    let now = k8s_openapi::jiff::Timestamp::now();
    let t = |ago: i64| {
        (now - k8s_openapi::jiff::SignedDuration::from_secs(ago))
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    };
    Api::<PodGroup>::namespaced(cx.client.clone(), &cx.ns)
        .patch_status(
            "rg",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "status": {
                "conditions": [
                    { "type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled", "message": "",
                      "lastTransitionTime": t(300) },
                    { "type": "PodGroupSatisfied", "status": "False", "reason": "MembersLost",
                      "message": "1 of minCount 2 members bound or succeeded: 1 waiting for a node, 0 disrupted, 0 missing (1 Failed pod(s) kept)",
                      "lastTransitionTime": t(10) },
                ],
                "restarts": 1,
                "lastRestartTime": t(200),
            }})),
        )
        .await?;
    let (text, j) = cx.explain("ppg", "rg")?;
    assert!(
        text.contains("Live: PodGroupSatisfied=False (MembersLost) since"),
        "{text}"
    );
    assert!(
        text.contains("1 of minCount 2 members bound or succeeded"),
        "{text}"
    );
    assert!(
        text.contains("Recovery: onFailure RestartGroup, onDisruption RestartGroup, grace 60 s, maxRestarts 3; restarts 1"),
        "{text}"
    );
    // Within the grace period before a restart: headed as a gang that restarts (issue 35, defect 12).
    assert_eq!(s(&j, "/state"), "Restarting", "{j}");
    let next = s(&j, "/life/next");
    assert!(
        next.starts_with("restart in ") && next.ends_with(" s unless the gang recovers"),
        "{j}"
    );
    let secs: u64 = next
        .trim_start_matches("restart in ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    // 60 s of grace from the loss 10 s ago (the last restart is older).
    assert!((40..=50).contains(&secs), "{next}");
    Ok(())
}

/// A CompositePodGroup tree with one of its two child groups: the root and the leaf both wait for the tree's
/// quorum, and say so with the tree's count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_composite_quorum() -> anyhow::Result<()> {
    let cx = setup("ex-cpg").await?;
    cx.node("n1", "8", &[]).await?;
    let root: phalanx_api::v1alpha3::CompositePodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": { "name": "root", "namespace": cx.ns },
        "spec": {
            "workloadRef": { "workloadName": "w", "templateName": "root" },
            "schedulingPolicy": { "gang": { "minGroupCount": 2 } },
        },
    }))?;
    Api::<phalanx_api::v1alpha3::CompositePodGroup>::namespaced(cx.client.clone(), &cx.ns)
        .create(&PostParams::default(), &root)
        .await?;
    let mut leaf = cx.group_json("leaf", 1, None, None);
    leaf["spec"]["parentCompositePodGroupName"] = json!("root");
    leaf["spec"]["workloadRef"] = json!({ "workloadName": "w", "templateName": "leaf" });
    cx.create_group(leaf).await?;
    cx.pod("leaf-0", "1", Some("leaf")).await?;
    let (text, j) = cx.explain("pcpg", "root")?;
    assert_eq!(s(&j, "/kind"), "CompositePodGroup");
    assert_eq!(s(&j, "/state"), "WaitingForQuorum", "{j}");
    assert!(
        text.contains("composite pod group \"root\" tree: 1 of 1 child groups ready (minGroupCount 2)"),
        "{text}"
    );
    let (text, j) = cx.explain("podgroup", "leaf")?;
    assert_eq!(s(&j, "/state"), "WaitingForQuorum", "{j}");
    assert!(
        text.contains("(minGroupCount 2)"),
        "the leaf names the tree's count: {text}"
    );
    Ok(())
}

/// A gang bigger than the free CPU: Unschedulable since the scheduler's condition, the kube-scheduler style
/// filter reasons, the shortfall, and the pod holding the room with its priority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_resources() -> anyhow::Result<()> {
    let cx = setup("ex-res").await?;
    let n1 = cx.node("n1", "4", &[]).await?;
    cx.node("n2", "4", &[]).await?;
    let mut other = cx.pod_json("other", "2", None, "someone-else");
    other["spec"]["nodeName"] = json!(n1);
    cx.create_pod(other).await?;
    cx.group("big", 3, None).await?;
    for i in 0..3 {
        cx.pod(&format!("big-{i}"), "3", Some("big")).await?;
    }
    let api = Api::<PodGroup>::namespaced(cx.client.clone(), &cx.ns);
    cx.schedule_until("big Unschedulable", || async {
        let g = api.get("big").await?;
        Ok(g.status
            .and_then(|s| s.conditions.into_iter().find(|c| c.reason == "Unschedulable"))
            .map(|_| ()))
    })
    .await?;
    // An event of an earlier PodGroup "big" (another uid, as after a delete and re-create) is not this group's.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(cx.client.clone(), &cx.ns);
    let stale: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": { "name": "big.earlier" },
        "involvedObject": {
            "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup", "namespace": cx.ns, "name": "big",
            "uid": "00000000-0000-0000-0000-000000000001"
        },
        "reason": "EarlierGroupsEvent", "message": "an event of the group this name had before", "type": "Normal",
        "lastTimestamp": k8s_openapi::jiff::Timestamp::now().to_string(),
        "source": { "component": "explain-test" }
    }))?;
    events.create(&PostParams::default(), &stale).await?;
    let (text, j) = cx.explain("podgroup", "big")?;
    assert!(
        !text.contains("EarlierGroupsEvent"),
        "an earlier object's event shown: {text}"
    );
    assert_eq!(s(&j, "/state"), "Unschedulable", "{j}");
    assert_eq!(s(&j, "/condition/reason"), "Unschedulable");
    assert!(!s(&j, "/condition/since").is_empty(), "since when: {j}");
    assert!(s(&j, "/reasons").contains("Insufficient cpu"), "{j}");
    assert_eq!(j.pointer("/shortfall/0/resource"), Some(&json!("cpu")));
    assert_eq!(
        j.pointer("/shortfall/0/missing"),
        Some(&json!(3000)),
        "9 CPU needed, 6 free"
    );
    let holders = j
        .pointer("/holders")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    assert!(
        holders
            .iter()
            .any(|h| h["pod"] == json!(format!("{}/other", cx.ns)) && h["priority"] == json!(0)),
        "{j}"
    );
    assert!(text.contains("nodes are available"), "{text}");
    assert!(
        text.contains("cpu: 9 requested, 6 free on the considered nodes: 3 short"),
        "{text}"
    );
    assert!(
        text.contains("Condition: PodGroupInitiallyScheduled=False (Unschedulable) since"),
        "{text}"
    );
    assert!(
        text.contains("Last events:") && text.contains("FailedScheduling"),
        "{text}"
    );
    Ok(())
}

/// A rack topology group that fits in no rack although the racks together have room: each rack with what it
/// lacks, the closest first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_topology() -> anyhow::Result<()> {
    let cx = setup("ex-topo").await?;
    cx.node("a1", "4", &[("rack", "r1")]).await?;
    cx.node("b1", "4", &[("rack", "r2")]).await?;
    cx.node("b2", "4", &[("rack", "r2")]).await?;
    cx.group("t", 3, Some("rack")).await?;
    for i in 0..3 {
        cx.pod(&format!("t-{i}"), "3", Some("t")).await?;
    }
    let (text, j) = cx.explain("podgroup", "t")?;
    assert_eq!(s(&j, "/state"), "Unschedulable", "{j}");
    assert_eq!(
        j.pointer("/shortfall"),
        Some(&json!([])),
        "12 CPU free in total for 9: {j}"
    );
    assert_eq!(s(&j, "/domains/0/value"), "r2", "closest first: {j}");
    assert_eq!(j.pointer("/domains/0/fit"), Some(&json!(2)));
    assert_eq!(j.pointer("/domains/0/moreNeeded/cpu"), Some(&json!(3000)));
    assert_eq!(s(&j, "/domains/1/value"), "r1");
    assert!(
        text.contains("rack r2: 2 of 3 pods fit; 1 more needs 3 CPU"),
        "{text}"
    );
    assert!(
        text.contains("rack r1: 1 of 3 pods fit; 2 more need 6 CPU"),
        "{text}"
    );
    let why = s(&j, "/reasons");
    assert!(why.contains("placements are available"), "{why}");
    assert!(
        why.contains("\"rack\""),
        "the message names the topology key: {why}"
    );
    assert!(why.contains("rack=r2"), "and the closest domain: {why}");
    Ok(())
}

/// A member of another scheduler breaks the gang: named, with its scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_foreign_member() -> anyhow::Result<()> {
    let cx = setup("ex-foreign").await?;
    cx.node("n1", "8", &[]).await?;
    cx.group("f", 2, None).await?;
    cx.pod("f-0", "1", Some("f")).await?;
    cx.pod("f-1", "1", Some("f")).await?;
    cx.create_pod(cx.pod_json("f-x", "1", Some("f"), "other-scheduler"))
        .await?;
    // And one of ours whose priority differs from its siblings'.
    let class = format!("{}-mid", cx.ns);
    let pc: PriorityClass = serde_json::from_value(json!({ "metadata": { "name": class }, "value": 50 }))?;
    Api::<PriorityClass>::all(cx.client.clone())
        .create(&PostParams::default(), &pc)
        .await?;
    let mut odd = cx.pod_json("f-2", "1", Some("f"), &cx.sched);
    odd["spec"]["priorityClassName"] = json!(class);
    let created = cx.create_pod(odd).await;
    Api::<PriorityClass>::all(cx.client.clone())
        .delete(&class, &Default::default())
        .await?;
    created?;
    let (text, j) = cx.explain("podgroup", "f")?;
    assert_eq!(s(&j, "/state"), "SchedulerError", "{j}");
    let breakers = j
        .pointer("/gangBreakers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    assert!(
        breakers.iter().any(|b| b
            .as_str()
            .is_some_and(|b| b.contains("pod f-x names schedulerName \"other-scheduler\""))),
        "{j}"
    );
    assert!(
        breakers.iter().any(|b| b
            .as_str()
            .is_some_and(|b| b.contains("pod f-2 has priority 50, the rest of the gang 0"))),
        "{j}"
    );
    assert!(text.contains("Members that break the gang:"), "{text}");
    Ok(())
}

/// A high-priority gang on a node full of low-priority work: preemption would evict the low pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_preemption() -> anyhow::Result<()> {
    let cx = setup("ex-preempt").await?;
    let n1 = cx.node("n1", "4", &[]).await?;
    let class = format!("{}-high", cx.ns);
    let pc: PriorityClass = serde_json::from_value(json!({
        "metadata": { "name": class }, "value": 1000, "preemptionPolicy": "PreemptLowerPriority",
    }))?;
    Api::<PriorityClass>::all(cx.client.clone())
        .create(&PostParams::default(), &pc)
        .await?;
    cx.pod("low", "4", None).await?;
    bind_pod(&cx.client, &cx.ns, "low", &n1).await?;
    cx.create_group(cx.group_json("hi", 2, None, Some(&class)))
        .await?;
    for i in 0..2 {
        let mut p = cx.pod_json(&format!("hi-{i}"), "2", Some("hi"), &cx.sched);
        p["spec"]["priorityClassName"] = json!(class);
        cx.create_pod(p).await?;
    }
    let (text, j) = cx.explain("podgroup", "hi")?;
    Api::<PriorityClass>::all(cx.client.clone())
        .delete(&class, &Default::default())
        .await?;
    assert_eq!(s(&j, "/state"), "Preempting", "{j}");
    assert_eq!(j.pointer("/preemption/success"), Some(&json!(true)), "{j}");
    let victims = j
        .pointer("/preemption/victims")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    assert!(
        victims.iter().any(|v| v
            .as_str()
            .is_some_and(|v| v.starts_with(&format!("{}/low on {n1}", cx.ns)))),
        "{j}"
    );
    assert!(text.contains("Preemption would evict:"), "{text}");
    Ok(())
}

/// The gang of `explain_preemption` with `preemptionDelaySeconds: 600` (issue 39): the scheduler holds its preemption
/// and writes the deadline; `explain` reads it back, answers `Unschedulable` (not `Preempting`: nothing is evicted
/// yet) and shows the time left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_a_delayed_preemption_shows_the_time_left() -> anyhow::Result<()> {
    let cx = setup("ex-pdelay").await?;
    let n1 = cx.node("n1", "4", &[]).await?;
    let class = format!("{}-high", cx.ns);
    let pc: PriorityClass = serde_json::from_value(json!({
        "metadata": { "name": class }, "value": 1000, "preemptionPolicy": "PreemptLowerPriority",
    }))?;
    Api::<PriorityClass>::all(cx.client.clone())
        .create(&PostParams::default(), &pc)
        .await?;
    cx.pod("low", "4", None).await?;
    bind_pod(&cx.client, &cx.ns, "low", &n1).await?;
    let mut g = cx.group_json("hi", 2, None, Some(&class));
    g["spec"]["preemptionDelaySeconds"] = json!(600);
    cx.create_group(g).await?;
    for i in 0..2 {
        let mut p = cx.pod_json(&format!("hi-{i}"), "2", Some("hi"), &cx.sched);
        p["spec"]["priorityClassName"] = json!(class);
        cx.create_pod(p).await?;
    }
    let api = Api::<PodGroup>::namespaced(cx.client.clone(), &cx.ns);
    cx.schedule_until("hi's preemption delayed", || async {
        let g = api.get("hi").await?;
        Ok(g.status
            .and_then(|s| {
                s.conditions
                    .into_iter()
                    .find(|c| c.message.contains("preemption is delayed until"))
            })
            .map(|_| ()))
    })
    .await?;
    let (text, j) = cx.explain("podgroup", "hi")?;
    Api::<PriorityClass>::all(cx.client.clone())
        .delete(&class, &Default::default())
        .await?;
    assert_eq!(s(&j, "/state"), "Unschedulable", "{j}");
    assert_eq!(j.pointer("/preemption/success"), Some(&json!(false)), "{j}");
    let left = j
        .pointer("/preemption/delaySecondsLeft")
        .and_then(Value::as_i64)
        .unwrap_or(-1);
    assert!((1..=600).contains(&left), "{j}");
    assert!(!s(&j, "/preemption/delayedUntil").is_empty(), "{j}");
    assert!(
        text.contains("Preemption delayed (preemptionDelaySeconds):"),
        "{text}"
    );
    // Nothing was evicted while the delay runs.
    let low = Api::<Pod>::namespaced(cx.client.clone(), &cx.ns)
        .get("low")
        .await?;
    assert!(low.metadata.deletion_timestamp.is_none(), "low was evicted");
    Ok(())
}

/// `snapshot`, then `simulate` on the file, then the real scheduler on the same manifests: the same pod -> node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulate_matches_the_scheduler() -> anyhow::Result<()> {
    let cx = setup("ex-sim").await?;
    let a1 = cx.node("a1", "4", &[("rack", "r1")]).await?;
    cx.node("b1", "4", &[("rack", "r2")]).await?;
    cx.node("b2", "4", &[("rack", "r2")]).await?;
    // Some of r1 is taken, so the rack group must go to r2.
    let mut used = cx.pod_json("used", "2", None, "someone-else");
    used["spec"]["nodeName"] = json!(a1);
    cx.create_pod(used).await?;
    let snap = cx.cli(&["snapshot"]);
    ensure!(snap.ok, "snapshot failed: {}", snap.stderr);
    let dir = std::env::temp_dir().join(format!("phalanx-{}", cx.ns));
    std::fs::create_dir_all(&dir)?;
    let snap_file = dir.join("snapshot.yaml");
    std::fs::write(&snap_file, &snap.stdout)?;
    let mut docs = vec![
        cx.group_json("rack", 2, Some("rack"), None),
        cx.group_json("too-big", 2, None, None),
    ];
    for i in 0..2 {
        docs.push(cx.pod_json(&format!("rack-{i}"), "3", Some("rack"), &cx.sched));
        docs.push(cx.pod_json(&format!("too-big-{i}"), "8", Some("too-big"), &cx.sched));
    }
    docs.push(cx.pod_json("solo", "1", None, &cx.sched));
    let manifests: String = docs
        .iter()
        .map(|d| serde_json::to_string(d).map(|s| format!("---\n{s}\n")))
        .collect::<Result<_, _>>()?;
    let m_file = dir.join("manifests.yaml");
    std::fs::write(&m_file, &manifests)?;
    let sim = cx.cli(&[
        "simulate",
        "-f",
        &m_file.display().to_string(),
        "--snapshot",
        &snap_file.display().to_string(),
        "-o",
        "json",
    ]);
    ensure!(sim.ok, "simulate failed: {}", sim.stderr);
    let v: Value = serde_json::from_str(&sim.stdout)?;
    let text = cx.cli(&[
        "simulate",
        "-f",
        &m_file.display().to_string(),
        "--snapshot",
        &snap_file.display().to_string(),
    ]);
    ensure!(text.ok, "{}", text.stderr);
    assert!(
        text.stdout
            .contains(&format!("PodGroup {}/too-big: Unschedulable", cx.ns)),
        "{}",
        text.stdout
    );
    let mut predicted: BTreeMap<String, String> = BTreeMap::new();
    for verdict in v.as_array().cloned().unwrap_or_default() {
        for pn in verdict["placement"].as_array().cloned().unwrap_or_default() {
            predicted.insert(
                pn["pod"].as_str().unwrap_or_default().into(),
                pn["node"].as_str().unwrap_or_default().into(),
            );
        }
    }
    let result_of = |name: &str| {
        v.as_array()
            .and_then(|a| a.iter().find(|x| x["name"] == json!(format!("{}/{name}", cx.ns))))
            .map(|x| x["result"].as_str().unwrap_or_default().to_owned())
    };
    assert_eq!(result_of("rack").as_deref(), Some("Scheduled"), "{v}");
    assert_eq!(result_of("too-big").as_deref(), Some("Unschedulable"), "{v}");
    assert_eq!(result_of("solo").as_deref(), Some("Scheduled"), "{v}");
    assert_eq!(predicted.len(), 3, "rack-0, rack-1, solo: {v}");
    // Against the live cluster instead of the file: the same placement.
    let live = cx.cli(&["simulate", "-f", &m_file.display().to_string(), "-o", "json"]);
    ensure!(live.ok, "simulate (live) failed: {}", live.stderr);
    let lv: Value = serde_json::from_str(&live.stdout)?;
    assert_eq!(
        lv, v,
        "the snapshot file and the live cluster give the same verdicts"
    );
    // A manifest of a kind the simulator does not read is refused, naming it.
    let bad_file = dir.join("bad.yaml");
    std::fs::write(
        &bad_file,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n",
    )?;
    let bad = cx.cli(&["simulate", "-f", &bad_file.display().to_string()]);
    assert!(!bad.ok, "a Deployment is refused");
    assert!(
        bad.stderr.contains("document 1 (Deployment \"web\")"),
        "{}",
        bad.stderr
    );
    assert!(!bad.stderr.contains("panicked"), "{}", bad.stderr);
    // Nothing was written by the simulation.
    assert_eq!(cx.bindings().await?.len(), 1, "only `used` is bound");
    // Now for real, in the order of the manifests.
    for d in docs {
        if d["kind"] == json!("PodGroup") {
            cx.create_group(d).await?;
        } else {
            cx.create_pod(d).await?;
        }
    }
    let got = cx
        .schedule_until("the scheduler binds rack-0, rack-1 and solo", || async {
            let b = cx.bindings().await?;
            Ok((b.len() == 4).then_some(b))
        })
        .await?;
    let actual: BTreeMap<String, String> = got.into_iter().filter(|(p, _)| p != "used").collect();
    assert_eq!(actual, predicted, "simulate placed as the scheduler does");
    let _ = std::fs::remove_dir_all(&dir);
    let bad = cx.cli(&[
        "simulate",
        "-f",
        "/nonexistent/m.yaml",
        "--snapshot",
        "/nonexistent/s.yaml",
    ]);
    assert!(
        !bad.ok && bad.stderr.contains("reading /nonexistent/m.yaml"),
        "{}",
        bad.stderr
    );
    Ok(())
}

/// The pods of an annotated Deployment join the Deployment's group, in `explain` as in the scheduler (one
/// function, `Store::group_of_pod`, over a read that includes the owners): before, `explain pod` named the
/// ReplicaSet's group and `explain ppg web-deployment` said "0 of 2 pods present" while the group had both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_resolves_a_deployments_pods_as_the_scheduler_does() -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    let cx = setup("ex-deploy").await?;
    cx.node("n1", "8", &[]).await?;
    let dep: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "web", "annotations": { phalanx_api::owners::GANG_MIN_COUNT: "2" } },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": {
                    "schedulerName": cx.sched, "terminationGracePeriodSeconds": 0,
                    "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": "1" } } }],
                }
            },
        }
    }))?;
    Api::<Deployment>::namespaced(cx.client.clone(), &cx.ns)
        .create(&PostParams::default(), &dep)
        .await?;
    // No controller runs in this binary: the group is written as the owner integration writes it.
    cx.group("web-deployment", 2, None).await?;
    let pods: Api<Pod> = Api::namespaced(cx.client.clone(), &cx.ns);
    let names = wait_for("2 pods of the Deployment", Duration::from_secs(60), || async {
        let mut names: Vec<String> = pods
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        names.sort();
        Ok((names.len() == 2).then_some(names))
    })
    .await?;
    let (text, j) = cx.explain("ppg", "web-deployment")?;
    assert_eq!(j.pointer("/quorum/present"), Some(&json!(2)), "{j}");
    assert_eq!(j.pointer("/quorum/members"), Some(&json!(names)), "{j}");
    assert!(text.contains("2 of 2 pods present"), "{text}");
    // The scheduler's store resolves each pod to the group explain names.
    let live = Store::start(cx.client.clone(), StoreConfig::default());
    tokio::time::timeout(Duration::from_secs(60), live.wait_ready()).await?;
    for name in &names {
        let (_, jp) = cx.explain("pod", name)?;
        let pod = pods.get(name).await?;
        let scheduler = live
            .group_of_pod(&phalanx_store::PodRecord::from_pod(&pod))
            .map(|g| g.name.to_string());
        assert_eq!(s(&jp, "/podGroup"), "web-deployment", "{jp}");
        assert_eq!(
            scheduler.as_deref(),
            Some("web-deployment"),
            "the scheduler's store"
        );
    }
    Ok(())
}

/// An annotated Job whose pod template forgets `schedulerName`: its pending pods are never reported bound
/// ("Scheduled: 3 pod(s) bound" while all 3 were Pending); the group cannot be scheduled, and explain names the
/// pods and their scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_never_counts_a_pending_pod_as_bound() -> anyhow::Result<()> {
    use k8s_openapi::api::batch::v1::Job;
    let cx = setup("ex-pending").await?;
    cx.node("n1", "8", &[]).await?;
    cx.group("infer-job", 3, None).await?;
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "infer", "annotations": { phalanx_api::owners::GANG: "true" } },
        "spec": {
            "parallelism": 3, "completions": 3, "completionMode": "Indexed",
            "template": { "spec": {
                "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": "1" } } }],
            }},
        }
    }))?;
    Api::<Job>::namespaced(cx.client.clone(), &cx.ns)
        .create(&PostParams::default(), &job)
        .await?;
    let pods: Api<Pod> = Api::namespaced(cx.client.clone(), &cx.ns);
    let names = wait_for("3 pods of the Job", Duration::from_secs(60), || async {
        let mut names: Vec<String> = pods
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        names.sort();
        Ok((names.len() == 3).then_some(names))
    })
    .await?;
    let (text, j) = cx.explain("ppg", "infer-job")?;
    assert_eq!(s(&j, "/state"), "SchedulerError", "{j}");
    assert!(!s(&j, "/summary").contains("pod(s) bound"), "{j}");
    let why = s(&j, "/reasons");
    assert!(
        why.starts_with(&format!(
            "pods {} use schedulerName \"default-scheduler\", not \"{}\"",
            names.join(", "),
            cx.sched
        )),
        "{j}"
    );
    assert!(!text.contains("pod(s) bound"), "{text}");
    Ok(())
}

/// A group the controllers found invalid (here: the template of its own claim is missing) after the scheduler wrote
/// its condition: explain shows the scheduler's condition first and the controllers' `Valid=False` beside it, so a
/// pending group whose pods only say "not found" points at the group's spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_the_controllers_verdict_beside_the_schedulers() -> anyhow::Result<()> {
    let cx = setup("ex-invalid").await?;
    cx.node("n1", "8", &[]).await?;
    cx.group("v", 1, None).await?;
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let missing =
        "spec.resourceClaims[0].resourceClaimTemplateName: ResourceClaimTemplate \"fabric-chanel\" not found";
    Api::<PodGroup>::namespaced(cx.client.clone(), &cx.ns)
        .patch_status(
            "v",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "status": { "conditions": [
                { "type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable",
                  "message": "0/1 nodes are available: 1 resourceclaim.resource.k8s.io \"v-fabric\" not found",
                  "lastTransitionTime": now },
                { "type": "Valid", "status": "False", "reason": "ResourceClaimTemplateNotFound", "message": missing,
                  "lastTransitionTime": now },
            ]}})),
        )
        .await?;
    let (text, j) = cx.explain("podgroup", "v")?;
    assert_eq!(s(&j, "/condition/type"), "PodGroupInitiallyScheduled", "{j}");
    assert_eq!(s(&j, "/invalid/reason"), "ResourceClaimTemplateNotFound", "{j}");
    assert!(
        text.contains(&format!(
            "Invalid: Valid=False (ResourceClaimTemplateNotFound): {missing}"
        )),
        "{text}"
    );
    Ok(())
}

/// Every node cordoned (issue 35, defect 12): the cause is the cordon, named first; no resource is "short" (the
/// nodes have room) and no pod is said to hold the room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_names_cordoned_nodes_not_capacity() -> anyhow::Result<()> {
    let cx = setup("ex-cordon").await?;
    for n in ["n1", "n2"] {
        FakeNode::new(format!("{}-{n}", cx.ns))
            .cpu("8")
            .memory("32Gi")
            .pods(110)
            .unschedulable(true)
            .test_namespace(&cx.ns)
            .create(&cx.client)
            .await?;
    }
    let mut other = cx.pod_json("other", "2", None, "someone-else");
    other["spec"]["nodeName"] = json!(format!("{}-n1", cx.ns));
    cx.create_pod(other).await?;
    cx.group("c", 1, None).await?;
    cx.pod("c-0", "1", Some("c")).await?;
    let (text, j) = cx.explain("podgroup", "c")?;
    assert_eq!(s(&j, "/state"), "Unschedulable", "{j}");
    assert!(s(&j, "/reasons").contains("node(s) were unschedulable"), "{j}");
    assert_eq!(j.pointer("/shortfall"), Some(&json!([])), "nothing is short: {j}");
    assert_eq!(
        j.pointer("/holders"),
        Some(&json!([])),
        "nobody holds room it lacks: {j}"
    );
    let summary = s(&j, "/summary");
    assert!(summary.contains("cordoned"), "the cause comes first: {summary}");
    assert!(!text.contains("short"), "{text}");
    Ok(())
}

/// A node whose taint the pods do not tolerate: named as the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_names_an_untolerated_taint() -> anyhow::Result<()> {
    let cx = setup("ex-taint").await?;
    FakeNode::new(format!("{}-n1", cx.ns))
        .cpu("8")
        .memory("32Gi")
        .pods(110)
        .taint("dedicated", "infra", "NoSchedule")
        .test_namespace(&cx.ns)
        .create(&cx.client)
        .await?;
    cx.group("t", 1, None).await?;
    cx.pod("t-0", "1", Some("t")).await?;
    let (_, j) = cx.explain("podgroup", "t")?;
    let summary = s(&j, "/summary");
    assert!(
        summary.contains("taint") && summary.contains("dedicated"),
        "the cause comes first: {summary}"
    );
    assert_eq!(j.pointer("/holders"), Some(&json!([])), "{j}");
    Ok(())
}

/// A member whose claim does not exist in a group the controllers found invalid: headed `Invalid` with the reason
/// first, and the pods on the node are not said to hold anything it lacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_an_invalid_group_with_a_missing_claim() -> anyhow::Result<()> {
    let cx = setup("ex-claim").await?;
    let n1 = cx.node("n1", "8", &[]).await?;
    let mut other = cx.pod_json("other", "2", None, "someone-else");
    other["spec"]["nodeName"] = json!(n1);
    cx.create_pod(other).await?;
    cx.group("v", 1, None).await?;
    let sched = cx.sched.clone();
    let mut p = cx.pod_json("v-0", "1", Some("v"), &sched);
    p["spec"]["resourceClaims"] = json!([{ "name": "fabric", "resourceClaimName": "v-fabric" }]);
    p["spec"]["containers"][0]["resources"]["claims"] = json!([{ "name": "fabric" }]);
    cx.create_pod(p).await?;
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    Api::<PodGroup>::namespaced(cx.client.clone(), &cx.ns)
        .patch_status(
            "v",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "status": { "conditions": [
                { "type": "Valid", "status": "False", "reason": "ResourceClaimTemplateNotFound",
                  "message": "spec.resourceClaims[0].resourceClaimTemplateName: ResourceClaimTemplate \"fabric\" not found",
                  "lastTransitionTime": now },
            ]}})),
        )
        .await?;
    let (text, j) = cx.explain("podgroup", "v")?;
    assert_eq!(s(&j, "/state"), "Invalid", "{j}");
    assert!(s(&j, "/summary").contains("ResourceClaimTemplateNotFound"), "{j}");
    assert_eq!(j.pointer("/holders"), Some(&json!([])), "{j}");
    assert!(!text.contains("Holding the room"), "{text}");
    Ok(())
}

/// A placed gang that lost a member (its replacement does not fit) is headed `Running`, and one that failed for
/// good `Failed`, not `Unschedulable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_heads_a_running_and_a_failed_gang_as_such() -> anyhow::Result<()> {
    let cx = setup("ex-heads").await?;
    let node = cx.node("n1", "8", &[]).await?;
    let t = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let sched = cx.sched.clone();
    let api = Api::<PodGroup>::namespaced(cx.client.clone(), &cx.ns);
    for g in ["run", "dead"] {
        cx.group(g, 2, None).await?;
        let mut bound = cx.pod_json(&format!("{g}-0"), "1", Some(g), &sched);
        bound["spec"]["nodeName"] = json!(node);
        cx.create_pod(bound).await?;
        // The replacement asks for more than the node has: it does not fit.
        cx.pod(&format!("{g}-1"), "16", Some(g)).await?;
        let mut conditions = vec![
            json!({ "type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled", "message": "",
                    "lastTransitionTime": t }),
            json!({ "type": "PodGroupSatisfied", "status": "False", "reason": "MembersLost",
                    "message": "1 of minCount 2 members bound or succeeded", "lastTransitionTime": t }),
        ];
        if g == "dead" {
            conditions.push(
                json!({ "type": "PodGroupFailed", "status": "True", "reason": "MembersLost",
                                    "message": "the gang lost members", "lastTransitionTime": t }),
            );
        }
        api.patch_status(
            g,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "status": { "conditions": conditions } })),
        )
        .await?;
    }
    let (text, j) = cx.explain("podgroup", "run")?;
    assert_eq!(s(&j, "/state"), "Running", "{j}");
    assert!(
        text.starts_with(&format!("PodGroup {}/run: Running", cx.ns)),
        "{text}"
    );
    assert!(s(&j, "/summary").contains("1 of minCount 2"), "{j}");
    let (text, j) = cx.explain("podgroup", "dead")?;
    assert_eq!(s(&j, "/state"), "Failed", "{j}");
    assert!(
        text.starts_with(&format!("PodGroup {}/dead: Failed", cx.ns)),
        "{text}"
    );
    assert!(!s(&j, "/summary").contains("does not fit"), "{j}");
    Ok(())
}
