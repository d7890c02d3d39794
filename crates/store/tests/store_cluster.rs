//! The store against a real control plane (phalanx-testenv): readiness, slimming, the per-node and per-group
//! indexes, the group tree, and the assume overlay confirmed by the watch.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, PostParams},
};
use phalanx_api::{v1alpha3::CompositePodGroup, v1beta1::PodGroup};
use phalanx_store::{GroupKey, PodKey, Store, StoreConfig, StoreEvent};
use phalanx_testenv::{FakeNode, TestEnv, bind_pod, create_namespace, wait_for};
use serde_json::json;

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_follow_the_cluster() -> anyhow::Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let ns = create_namespace(&client, "store").await?;
    let node = format!("{ns}-n");
    FakeNode::new(&node)
        .cpu("4")
        .memory("8Gi")
        .test_namespace(&ns)
        .create(&client)
        .await?;

    let store = Store::start(client.clone(), StoreConfig::default());
    let mut events = store.subscribe();
    tokio::time::timeout(T, store.wait_ready()).await?;
    assert!(store.is_ready());

    let cpg: CompositePodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1alpha3", "kind": "CompositePodGroup",
        "metadata": { "name": "root" },
        "spec": { "workloadRef": { "workloadName": "w", "templateName": "root" }, "schedulingPolicy": { "gang": { "minGroupCount": 1 } } }
    }))?;
    Api::<CompositePodGroup>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cpg)
        .await?;
    let pg: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
        "metadata": { "name": "leaf" },
        "spec": {
            "parentCompositePodGroupName": "root",
            "workloadRef": { "workloadName": "w", "templateName": "leaf" },
            "schedulingPolicy": { "basic": {} }
        }
    }))?;
    Api::<PodGroup>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pg)
        .await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "p", "labels": { "scheduling.phalanx.dev/pod-group": "leaf" } },
        "spec": { "schedulerName": "nobody", "containers": [{ "name": "c", "image": "x" }] }
    }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod).await?;

    let leaf = GroupKey::pod_group(&ns, "leaf");
    let root = GroupKey::composite(&ns, "root");
    let key = PodKey::new(&ns, "p");
    wait_for("pod and groups indexed", T, || async {
        let h = store.hierarchy();
        Ok((h.members(&leaf) == vec![key.clone()] && h.children(&root) == vec![leaf.clone()]).then_some(()))
    })
    .await?;
    assert_eq!(store.hierarchy().root_of(&leaf, 8), root);
    assert_eq!(store.hierarchy().group_of(&key), Some(leaf.clone()));
    let cached = store.pod(&key).ok_or_else(|| anyhow::anyhow!("pod cached"))?;
    assert!(
        cached.metadata.managed_fields.is_none() || cached.managed_fields().is_empty(),
        "slimmed"
    );
    let leaf_node = store
        .group_node(&leaf)
        .ok_or_else(|| anyhow::anyhow!("leaf node"))?;
    let root_node = store
        .group_node(&root)
        .ok_or_else(|| anyhow::anyhow!("root node"))?;
    // Gang CPG over a basic PodGroup is invalid; the store hands the facts to the pure validator.
    assert!(phalanx_store::check_edge(&root_node, &leaf_node).is_err());

    // Assume, then bind for real: the watch confirms and ends the assumption; the pod is indexed on its node.
    store.assume(cached.clone(), &node);
    assert_eq!(store.assumed_node(&key).as_deref(), Some(node.as_str()));
    bind_pod(&client, &ns, "p", &node).await?;
    wait_for("assumption confirmed by the watch", T, || async {
        Ok((store.assumed_node(&key).is_none() && store.pods_on_node(&node).len() == 1).then_some(()))
    })
    .await?;
    let mut saw_pod_event = false;
    while let Ok(ev) = events.try_recv() {
        saw_pod_event |= matches!(ev, StoreEvent::Pod { key: k, .. } if k == key);
    }
    assert!(saw_pod_event, "a Pod event was published");

    pods.delete("p", &DeleteParams::default().grace_period(0)).await?;
    wait_for("pod removed from the indexes", T, || async {
        Ok(
            (store.pods_on_node(&node).is_empty() && store.hierarchy().members(&leaf).is_empty())
                .then_some(()),
        )
    })
    .await?;
    assert_eq!(store.group_members(&leaf).len(), 0);
    let _ = cached.name_any();
    Ok(())
}
