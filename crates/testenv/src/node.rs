//! Fake nodes managed by kwok.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::wait::wait_for;

/// Annotation (with value `fake`) that makes the harness's kwok manage a node (`--manage-nodes-with-annotation-selector`).
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// Label naming the test namespace a node belongs to; schedulers under test select their nodes with it
/// (see docs/testing.md).
pub const TEST_NS_LABEL: &str = "phalanx.dev/test-ns";

/// How long kwok may take to mark a new node Ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Builder for a `v1.Node` that the harness's kwok manages: kwok's `node-initialize` stage marks it Ready and gives
/// it addresses, and its `pod-ready` stage turns pods bound to it Running.
///
/// `status.allocatable` equals `status.capacity`. Defaults: cpu `8`, memory `32Gi`, pods `110`; labels
/// `kubernetes.io/hostname=<name>`, `kubernetes.io/os=linux`, `kubernetes.io/arch=amd64`, `type=kwok`; no taints.
/// Mirrors the fake nodes of kwok's docs (`site/content/en/docs/user/kwok-out-cluster.md`).
#[derive(Debug, Clone)]
pub struct FakeNode {
    name: String,
    capacity: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    taints: Vec<(String, String, String)>,
    unschedulable: bool,
}

impl FakeNode {
    /// A node named `name` (a DNS-1123 subdomain; nodes are cluster-scoped, so derive it from the test namespace).
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        let capacity = [("cpu", "8"), ("memory", "32Gi"), ("pods", "110")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let labels = [
            ("kubernetes.io/hostname", name.as_str()),
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/arch", "amd64"),
            ("type", "kwok"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let annotations = BTreeMap::from([(KWOK_NODE_ANNOTATION.to_string(), "fake".to_string())]);
        FakeNode {
            name,
            capacity,
            labels,
            annotations,
            taints: Vec::new(),
            unschedulable: false,
        }
    }

    /// CPU capacity as a Kubernetes quantity (`"4"`, `"500m"`).
    pub fn cpu(self, q: impl Into<String>) -> Self {
        self.resource("cpu", q)
    }

    /// Memory capacity as a Kubernetes quantity (`"8Gi"`).
    pub fn memory(self, q: impl Into<String>) -> Self {
        self.resource("memory", q)
    }

    /// Maximum number of pods.
    pub fn pods(self, n: u32) -> Self {
        self.resource("pods", n.to_string())
    }

    /// Any resource's capacity (and allocatable), e.g. `("nvidia.com/gpu", "8")` or `("ephemeral-storage", "100Gi")`.
    pub fn resource(mut self, name: impl Into<String>, q: impl Into<String>) -> Self {
        self.capacity.insert(name.into(), q.into());
        self
    }

    /// Adds or replaces a label (e.g. `topology.kubernetes.io/zone`).
    pub fn label(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.labels.insert(k.into(), v.into());
        self
    }

    /// Adds or replaces an annotation. The kwok annotation cannot be removed this way.
    pub fn annotation(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        let k = k.into();
        if k != KWOK_NODE_ANNOTATION {
            self.annotations.insert(k, v.into());
        }
        self
    }

    /// Adds a taint; `effect` is `NoSchedule`, `PreferNoSchedule` or `NoExecute` (checked by [`FakeNode::build`]).
    pub fn taint(mut self, k: impl Into<String>, v: impl Into<String>, effect: impl Into<String>) -> Self {
        self.taints.push((k.into(), v.into(), effect.into()));
        self
    }

    /// Sets `spec.unschedulable` (a cordoned node).
    pub fn unschedulable(mut self, yes: bool) -> Self {
        self.unschedulable = yes;
        self
    }

    /// Labels the node with [`TEST_NS_LABEL`]`=<ns>`, the label schedulers under test select their nodes by.
    pub fn test_namespace(self, ns: &str) -> Self {
        self.label(TEST_NS_LABEL, ns)
    }

    /// The node object, without talking to the API.
    ///
    /// # Errors
    /// When a taint effect is not one of the three Kubernetes effects.
    pub fn build(&self) -> anyhow::Result<Node> {
        let mut taints = Vec::with_capacity(self.taints.len());
        for (key, value, effect) in &self.taints {
            if !matches!(effect.as_str(), "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                bail!(
                    "node {}: taint {key}: effect {effect:?} is not NoSchedule, PreferNoSchedule or NoExecute",
                    self.name
                );
            }
            taints.push(Taint {
                key: key.clone(),
                value: (!value.is_empty()).then(|| value.clone()),
                effect: effect.clone(),
                time_added: None,
            });
        }
        let resources: BTreeMap<String, Quantity> = self
            .capacity
            .iter()
            .map(|(k, v)| (k.clone(), Quantity(v.clone())))
            .collect();
        Ok(Node {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(self.labels.clone()),
                annotations: Some(self.annotations.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                taints: (!taints.is_empty()).then_some(taints),
                unschedulable: self.unschedulable.then_some(true),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                allocatable: Some(resources.clone()),
                capacity: Some(resources),
                ..NodeStatus::default()
            }),
        })
    }

    /// Creates the node and waits (up to 60 s) until kwok has marked it `Ready=True`; returns the node as last read.
    ///
    /// # Errors
    /// On an invalid taint, when the API rejects the node (e.g. a bad quantity or an existing name), or when it
    /// does not turn Ready in time (is kwok running? see `kwok.log` in [`crate::TestEnv::log_dir`]).
    pub async fn create(&self, client: &Client) -> anyhow::Result<Node> {
        let node = self.build()?;
        let api: Api<Node> = Api::all(client.clone());
        api.create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("creating node {}", self.name))?;
        let name = self.name.as_str();
        wait_for(
            &format!("node {name} Ready (kwok node-initialize stage)"),
            READY_TIMEOUT,
            || async {
                let n = api.get(name).await?;
                Ok(is_ready(&n).then_some(n))
            },
        )
        .await
    }
}

/// True when the node's `Ready` condition is `True`.
fn is_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_sets_capacity_allocatable_labels_taints() {
        let n = FakeNode::new("n1")
            .cpu("4")
            .memory("8Gi")
            .pods(20)
            .resource("nvidia.com/gpu", "8")
            .label("topology.kubernetes.io/zone", "z1")
            .test_namespace("ns-1")
            .taint("dedicated", "gpu", "NoSchedule")
            .annotation(KWOK_NODE_ANNOTATION, "real")
            .build()
            .unwrap();
        let st = n.status.unwrap();
        let cap = st.capacity.unwrap();
        assert_eq!(cap.get("cpu"), Some(&Quantity("4".into())));
        assert_eq!(cap.get("memory"), Some(&Quantity("8Gi".into())));
        assert_eq!(cap.get("pods"), Some(&Quantity("20".into())));
        assert_eq!(cap.get("nvidia.com/gpu"), Some(&Quantity("8".into())));
        assert_eq!(st.allocatable.unwrap(), cap);
        let labels = n.metadata.labels.unwrap();
        assert_eq!(
            labels.get("kubernetes.io/hostname").map(String::as_str),
            Some("n1")
        );
        assert_eq!(
            labels.get("topology.kubernetes.io/zone").map(String::as_str),
            Some("z1")
        );
        assert_eq!(labels.get(TEST_NS_LABEL).map(String::as_str), Some("ns-1"));
        let ann = n.metadata.annotations.unwrap();
        assert_eq!(ann.get(KWOK_NODE_ANNOTATION).map(String::as_str), Some("fake"));
        let taints = n.spec.unwrap().taints.unwrap();
        assert_eq!(taints.len(), 1);
        assert_eq!(
            (taints[0].key.as_str(), taints[0].effect.as_str()),
            ("dedicated", "NoSchedule")
        );
        assert_eq!(taints[0].value.as_deref(), Some("gpu"));
    }

    #[test]
    fn defaults_and_bad_taint() {
        let n = FakeNode::new("n2").build().unwrap();
        let spec = n.spec.unwrap();
        assert!(spec.taints.is_none());
        assert!(spec.unschedulable.is_none());
        assert_eq!(n.status.unwrap().capacity.unwrap().len(), 3);
        let err = FakeNode::new("n3")
            .taint("k", "v", "NoSchedul")
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("NoSchedul"), "{err}");
    }

    #[test]
    fn ready_condition() {
        let mut n = FakeNode::new("n4").build().unwrap();
        assert!(!is_ready(&n));
        n.status.as_mut().unwrap().conditions = Some(vec![k8s_openapi::api::core::v1::NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]);
        assert!(is_ready(&n));
    }
}
