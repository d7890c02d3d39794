//! Creating pods, and binding them the way a scheduler does.

use std::time::{Duration, Instant};

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

/// How long [`create_pod`] retries while the Priority admission plugin has not yet seen a new PriorityClass.
const PRIORITY_CLASS_LAG: Duration = Duration::from_secs(10);

/// Creates `pod` in namespace `ns`. While the API server refuses it with 403 "no PriorityClass with name … was
/// found", it retries every 100 ms for up to 10 s: the Priority admission plugin reads PriorityClasses from an
/// informer (`plugin/pkg/admission/priority/admission.go`), so a class created a moment before may not be in it
/// yet. A test that creates a class and then a pod using it would otherwise fail now and then.
///
/// # Errors
/// Any other refusal at once, or that one after 10 s.
pub async fn create_pod(client: &Client, ns: &str, pod: &Pod) -> anyhow::Result<Pod> {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let name = pod.metadata.name.clone().unwrap_or_default();
    let start = Instant::now();
    loop {
        match api.create(&PostParams::default(), pod).await {
            Err(kube::Error::Api(s))
                if s.code == 403
                    && s.message.contains("no PriorityClass with name")
                    && start.elapsed() < PRIORITY_CLASS_LAG =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            res => return res.with_context(|| format!("creating pod {ns}/{name}")),
        }
    }
}
