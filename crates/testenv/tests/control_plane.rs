//! End-to-end proof of the harness against the real control plane: namespaces, kwok nodes, binding, pod
//! lifecycle, garbage collection and CRD installation.

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Node, Pod, PodSpec, ServiceAccount};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ObjectMeta, PostParams};
use kube::{Api, ResourceExt as _};
use phalanx_testenv::{
    FakeNode, KWOK_NODE_ANNOTATION, TEST_NS_LABEL, TestEnv, apply_crds, bind_pod, create_namespace, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A pod no scheduler picks up (there is no kube-scheduler, and the name is nobody's), so only our Binding places it.
fn unscheduled_pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            scheduler_name: Some("phalanx-testenv-nobody".into()),
            containers: vec![Container {
                name: "main".into(),
                image: Some("registry.invalid/pause:1".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

#[tokio::test]
async fn namespace_node_bind_running_delete() -> anyhow::Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;

    let ns = create_namespace(&client, "testenv-e2e").await?;
    assert!(ns.starts_with("testenv-e2e-"), "{ns}");
    Api::<Namespace>::all(client.clone())
        .get(&ns)
        .await
        .context("the namespace exists")?;
    Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .get("default")
        .await
        .context("create_namespace waited for the default ServiceAccount")?;

    let node_name = format!("{ns}-gpu");
    let node = FakeNode::new(&node_name)
        .cpu("4")
        .memory("8Gi")
        .pods(20)
        .resource("nvidia.com/gpu", "8")
        .label("topology.kubernetes.io/zone", "zone-a")
        .test_namespace(&ns)
        .taint("dedicated", "gpu", "NoSchedule")
        .create(&client)
        .await?;
    // Ready came from kwok; the capacity the test asked for survived node creation and kwok's node-initialize stage.
    let status = node.status.clone().context("node status")?;
    let ready = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready");
    assert_eq!(ready.map(|c| c.status).as_deref(), Some("True"));
    let alloc = status.allocatable.context("allocatable")?;
    assert_eq!(alloc.get("nvidia.com/gpu"), Some(&Quantity("8".into())));
    assert_eq!(alloc.get("cpu"), Some(&Quantity("4".into())));
    assert_eq!(alloc.get("pods"), Some(&Quantity("20".into())));
    assert_eq!(
        status.capacity.context("capacity")?.get("memory"),
        Some(&Quantity("8Gi".into()))
    );
    assert!(
        status
            .addresses
            .unwrap_or_default()
            .iter()
            .any(|a| a.type_ == "InternalIP"),
        "kwok gives the node an InternalIP"
    );
    assert_eq!(node.labels().get(TEST_NS_LABEL), Some(&ns));
    assert_eq!(
        node.annotations().get(KWOK_NODE_ANNOTATION).map(String::as_str),
        Some("fake")
    );
    let taints = node.spec.clone().and_then(|s| s.taints).unwrap_or_default();
    // Exactly the requested taint: admission adds no node.kubernetes.io/not-ready (the harness runs no
    // node-lifecycle controller that would take it away again).
    assert_eq!(taints.len(), 1, "{taints:?}");
    assert!(
        taints
            .iter()
            .any(|t| t.key == "dedicated" && t.effect == "NoSchedule"),
        "{taints:?}"
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &unscheduled_pod("p1"))
        .await?;
    // Unbound, the pod stays Pending: kwok only touches pods on its nodes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let p = pods.get("p1").await?;
    assert_eq!(p.status.and_then(|s| s.phase).as_deref(), Some("Pending"));

    bind_pod(&client, &ns, "p1", &node_name).await?;
    let running = wait_for("pod p1 Running", TIMEOUT, || async {
        let p = pods.get("p1").await?;
        let phase = p.status.as_ref().and_then(|s| s.phase.clone());
        Ok((phase.as_deref() == Some("Running")).then_some(p))
    })
    .await?;
    assert_eq!(
        running.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(node_name.as_str())
    );
    assert!(
        running.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some(),
        "kwok assigns a pod IP"
    );

    // A second binding of a bound pod is refused by the API.
    assert!(bind_pod(&client, &ns, "p1", &node_name).await.is_err());

    // Default grace period: without kwok's pod-delete stage this would hang in Terminating.
    pods.delete("p1", &DeleteParams::default()).await?;
    wait_for("pod p1 gone", TIMEOUT, || async {
        Ok(pods.get_opt("p1").await?.is_none().then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn namespaces_are_unique_and_nodes_get_ready_concurrently() -> anyhow::Result<()> {
    let client = TestEnv::shared().client().await?;
    let a = create_namespace(&client, "same").await?;
    let b = create_namespace(&client, "same").await?;
    assert_ne!(a, b);
    let builders: Vec<FakeNode> = (0..5)
        .map(|i| FakeNode::new(format!("{a}-n{i}")).test_namespace(&a))
        .collect();
    let nodes = futures::future::try_join_all(builders.iter().map(|b| b.create(&client))).await?;
    assert_eq!(nodes.len(), 5);
    let listed = Api::<Node>::all(client.clone())
        .list(&kube::api::ListParams::default().labels(&format!("{TEST_NS_LABEL}={a}")))
        .await?;
    assert_eq!(listed.items.len(), 5);
    // A node with an invalid quantity is refused by the API, not silently accepted.
    assert!(
        FakeNode::new(format!("{a}-bad"))
            .cpu("lots")
            .create(&client)
            .await
            .is_err()
    );
    Ok(())
}

#[tokio::test]
async fn controller_manager_collects_garbage() -> anyhow::Result<()> {
    let client = TestEnv::shared().client().await?;
    let ns = create_namespace(&client, "gc").await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let owner = cms
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("owner".into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            },
        )
        .await?;
    let dependent = ConfigMap {
        metadata: ObjectMeta {
            name: Some("dependent".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "owner".into(),
                uid: owner.uid().context("owner uid")?,
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    cms.create(&PostParams::default(), &dependent).await?;
    cms.delete("owner", &DeleteParams::background()).await?;
    wait_for("dependent ConfigMap garbage-collected", TIMEOUT, || async {
        Ok(cms.get_opt("dependent").await?.is_none().then_some(()))
    })
    .await?;
    Ok(())
}

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.testenv.phalanx.dev
spec:
  group: testenv.phalanx.dev
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, minimum: 1}
---
"#;

#[tokio::test]
async fn apply_crds_is_idempotent_and_waits_for_established() -> anyhow::Result<()> {
    let client = TestEnv::shared().client().await?;
    apply_crds(&client, WIDGET_CRD).await?;
    apply_crds(&client, WIDGET_CRD).await?;
    let ns = create_namespace(&client, "crd").await?;
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("testenv.phalanx.dev", "v1", "Widget"));
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
    let mut w = DynamicObject::new("w1", &ar);
    w.data = serde_json::json!({"spec": {"size": 3}});
    widgets.create(&PostParams::default(), &w).await?;
    // The schema is enforced: the CRD really is the one applied.
    let mut bad = DynamicObject::new("w2", &ar);
    bad.data = serde_json::json!({"spec": {"size": 0}});
    assert!(widgets.create(&PostParams::default(), &bad).await.is_err());
    assert!(apply_crds(&client, "kind: NotACrd\n").await.is_err());
    Ok(())
}

/// Clients made in two different runtimes both work: the harness keeps no client across runtimes.
#[test]
fn clients_per_runtime() -> anyhow::Result<()> {
    for _ in 0..2 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let client = TestEnv::shared().client().await?;
            let v = client.apiserver_version().await?;
            assert_eq!(v.git_version, "v1.37.2");
            anyhow::Ok(())
        })?;
    }
    Ok(())
}
