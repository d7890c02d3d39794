//! Binding pods the way a scheduler does.

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

/// Binds pod `ns/pod` to node `node` with `POST /api/v1/namespaces/{ns}/pods/{pod}/binding`, as kube-scheduler's
/// DefaultBinder does (`pkg/scheduler/framework/plugins/defaultbinder`).
///
/// # Errors
/// When the API refuses the binding, e.g. the pod is already bound (409 Conflict) or does not exist (404).
pub async fn bind_pod(client: &Client, ns: &str, pod: &str, node: &str) -> anyhow::Result<()> {
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(pod.to_string()),
            namespace: Some(ns.to_string()),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..ObjectReference::default()
        },
    };
    // The response is a metav1.Status, not a Pod: read it as plain JSON.
    Api::<Pod>::namespaced(client.clone(), ns)
        .create_subresource::<_, serde_json::Value>("binding", pod, &PostParams::default(), &binding)
        .await
        .with_context(|| format!("binding pod {ns}/{pod} to node {node}"))?;
    Ok(())
}
