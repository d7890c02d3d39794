//! Which pods a cycle's snapshot holds, read from the store in an order that cannot lose a pod.
//!
//! A pod being bound moves from the assume overlay to the watch-fed node index: the store first adds it to the
//! index, then ends its assumption. Reading the node index first and the overlay afterwards can miss a pod whose
//! bind is confirmed in between (it is in neither read), so its node looks free and can be handed out twice. Reading
//! the overlay first cannot: a pod that left the overlay before that read is already in the index, and a pod that
//! leaves it later was read from the overlay. A pod in both reads counts once (upstream's cache takes one lock for
//! both, `pkg/scheduler/backend/cache/cache.go` `UpdateSnapshot`).

use std::collections::HashSet;
use std::sync::Arc;

use phalanx_scheduler::PodKey;
use phalanx_store::{AssumedPod, PodRecord, Store};

/// What the snapshot reads from the cluster caches; [`Store`] implements it.
pub(crate) trait ClusterView {
    /// Pods assumed on a node whose bind the watch has not confirmed yet.
    fn assumed(&self) -> Vec<(PodKey, AssumedPod)>;
    /// Pods the watch shows bound to `node`.
    fn pods_on_node(&self, node: &str) -> Vec<Arc<PodRecord>>;
}

impl ClusterView for Store {
    fn assumed(&self) -> Vec<(PodKey, AssumedPod)> {
        Store::assumed(self)
    }

    fn pods_on_node(&self, node: &str) -> Vec<Arc<PodRecord>> {
        Store::pods_on_node(self, node)
    }
}

/// A pod for the snapshot: the object and, for an assumed pod, the node it is assumed on.
pub(crate) struct SnapshotPod {
    /// The pod as cached.
    pub(crate) pod: Arc<PodRecord>,
    /// `Some(node)` for an assumed pod (its object has no `nodeName` yet).
    pub(crate) assumed_on: Option<String>,
}

/// The non-terminal pods bound or assumed on `nodes`, each once: the overlay is read before the node index (see the
/// module docs). An assumed pod that is also listed bound counts as bound.
pub(crate) fn pods_for_snapshot(view: &impl ClusterView, nodes: &[String]) -> Vec<SnapshotPod> {
    let assumed = view.assumed();
    let mut out = Vec::new();
    let mut seen: HashSet<PodKey> = HashSet::new();
    for n in nodes {
        for p in view.pods_on_node(n) {
            if p.is_terminal() {
                continue;
            }
            seen.insert(p.key().clone());
            out.push(SnapshotPod {
                pod: p,
                assumed_on: None,
            });
        }
    }
    for (key, a) in assumed {
        if seen.contains(&key) {
            continue;
        }
        out.push(SnapshotPod {
            pod: a.pod,
            assumed_on: Some(a.node),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use k8s_openapi::api::core::v1::{Pod, PodSpec};
    use kube::api::ObjectMeta;

    use super::*;

    fn pod(name: &str, node: Option<&str>) -> Arc<PodRecord> {
        Arc::new(PodRecord::from_pod(&Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    /// A store whose watch confirms the bind of `p` right after the node index was read: the interleaving that made
    /// the old order (index first, overlay second) lose `p`.
    struct ConfirmDuringRead {
        assumed: RefCell<Vec<(PodKey, AssumedPod)>>,
        bound: RefCell<Vec<Arc<PodRecord>>>,
    }

    impl ClusterView for ConfirmDuringRead {
        fn assumed(&self) -> Vec<(PodKey, AssumedPod)> {
            self.assumed.borrow().clone()
        }

        fn pods_on_node(&self, _node: &str) -> Vec<Arc<PodRecord>> {
            let before = self.bound.borrow().clone();
            // The watch event lands now: the index gains the pod, then the assumption ends.
            self.bound.borrow_mut().push(pod("p", Some("n1")));
            self.assumed.borrow_mut().clear();
            before
        }
    }

    #[test]
    fn bind_confirmed_while_reading_is_counted_once() {
        let view = ConfirmDuringRead {
            assumed: RefCell::new(vec![(
                PodKey::new("ns", "p"),
                AssumedPod {
                    pod: pod("p", None),
                    node: "n1".into(),
                    uid: "uid-p".into(),
                    bound_at: None,
                },
            )]),
            bound: RefCell::new(vec![pod("q", Some("n1"))]),
        };
        let got = pods_for_snapshot(&view, &["n1".into()]);
        let names: Vec<(String, Option<String>)> = got
            .iter()
            .map(|s| (s.pod.name().to_owned(), s.assumed_on.clone()))
            .collect();
        assert_eq!(
            names,
            vec![("q".to_string(), None), ("p".to_string(), Some("n1".to_string()))]
        );
    }

    #[test]
    fn pod_both_assumed_and_bound_counts_once_as_bound() {
        let view = ConfirmDuringRead {
            assumed: RefCell::new(vec![(
                PodKey::new("ns", "q"),
                AssumedPod {
                    pod: pod("q", None),
                    node: "n1".into(),
                    uid: "uid-q".into(),
                    bound_at: None,
                },
            )]),
            bound: RefCell::new(vec![pod("q", Some("n1"))]),
        };
        let got = pods_for_snapshot(&view, &["n1".into()]);
        assert_eq!(got.len(), 1);
        assert!(got[0].assumed_on.is_none());
    }
}
