//! `phalanx explain` of upstream's own PodGroups (`scheduling.k8s.io/v1beta1`), as a user runs it, on a control
//! plane of its own that serves upstream's Workload API (`hack/cluster.sh up --upstream-workload-api`:
//! kube-apiserver, etcd, kube-controller-manager v1.37+ and kwok). The target is named as kubectl names a resource
//! of another API group: `podgroup.scheduling.k8s.io`. A Phalanx PodGroup of the same name is explained apart.

use std::process::Command;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::{core::v1::Pod, scheduling::v1beta1::PodGroup as NativePodGroup};
use kube::{Api, api::PostParams};
use phalanx_testenv::{FakeNode, TEST_NS_LABEL, TestEnv, create_namespace};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_names_upstreams_podgroup_apart_from_phalanxs() -> anyhow::Result<()> {
    let minor = tokio::task::spawn_blocking(TestEnv::binaries_minor).await??;
    if minor < 37 {
        eprintln!(
            "1.{minor}: upstream's Workload API before 1.37 is not scheduled by Phalanx; nothing to check"
        );
        return Ok(());
    }
    let env =
        tokio::task::spawn_blocking(|| TestEnv::dedicated_upstream_api("explain-upstream", false)).await??;
    let result = check(&env).await;
    // Stops the dedicated control plane; blocking, so off the runtime's threads.
    tokio::task::spawn_blocking(move || drop(env)).await?;
    result
}

async fn check(env: &TestEnv) -> anyhow::Result<()> {
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let ns = create_namespace(&client, "ex-upstream").await?;
    let sched = format!("phalanx-{ns}");
    FakeNode::new(format!("{ns}-n1"))
        .cpu("8")
        .memory("32Gi")
        .pods(110)
        .test_namespace(&ns)
        .create(&client)
        .await?;
    // Upstream's gang of 3 with 2 members, Phalanx's of 1 with 1 member: the same name in both API groups.
    let native: NativePodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": { "name": "g" },
        "spec": { "schedulingPolicy": { "gang": { "minCount": 3 } } },
    }))?;
    Api::<NativePodGroup>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &native)
        .await?;
    let ours: phalanx_api::v1beta1::PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
        "metadata": { "name": "g" },
        "spec": { "schedulingPolicy": { "gang": { "minCount": 1 } } },
    }))?;
    Api::<phalanx_api::v1beta1::PodGroup>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &ours)
        .await?;
    for (name, by_field) in [("up-0", true), ("up-1", true), ("ph-0", false)] {
        let group = if by_field {
            json!({ "schedulingGroup": { "podGroupName": "g" } })
        } else {
            json!({})
        };
        let labels = if by_field {
            json!({})
        } else {
            json!({ phalanx_api::labels::POD_GROUP: "g" })
        };
        let mut spec = json!({
            "schedulerName": sched,
            "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": "1" } } }],
        });
        if let (Some(s), Some(g)) = (spec.as_object_mut(), group.as_object()) {
            s.extend(g.clone());
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": labels },
            "spec": spec,
        }))?;
        Api::<Pod>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("creating pod {name}"))?;
    }
    let run = |kind: &str| -> anyhow::Result<Value> {
        let out = Command::new(env!("CARGO_BIN_EXE_kubectl-phalanx"))
            .env_remove("PHALANX_CONFIG")
            .args(["explain", kind, "g", "-n", &ns, "-o", "json"])
            .args(["--kubeconfig", &env.kubeconfig_path().display().to_string()])
            .args(["--scheduler-name", &sched])
            .args(["--node-selector", &format!("{TEST_NS_LABEL}={ns}")])
            .output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.success(), "explain {kind} g failed: {stderr}");
        ensure!(!stderr.contains("panicked"), "{stderr}");
        Ok(serde_json::from_slice(&out.stdout)?)
    };
    let upstream = run("podgroup.scheduling.k8s.io")?;
    ensure!(
        upstream.pointer("/state") == Some(&json!("WaitingForQuorum")),
        "upstream's group: {upstream}"
    );
    ensure!(
        upstream.pointer("/quorum/members") == Some(&json!(["up-0", "up-1"]))
            && upstream.pointer("/quorum/minCount") == Some(&json!(3)),
        "upstream's group counts its own members: {upstream}"
    );
    let phalanx = run("ppg")?;
    ensure!(
        phalanx
            .pointer("/quorum/members")
            .is_none_or(|m| m == &json!(["ph-0"]))
            && phalanx.pointer("/state") != Some(&json!("WaitingForQuorum")),
        "Phalanx's group of the same name: {phalanx}"
    );
    Ok(())
}
