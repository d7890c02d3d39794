//! A [`Store`] over a fixed set of objects, read once: what `phalanx explain` and `phalanx simulate` run the
//! scheduling core on, so that a read-only tool and the scheduler see the cluster through the same caches and
//! indexes (the reflector stores of [`Store::start`], fed here by one synthetic list instead of a watch).
//!
//! [`ClusterState::list`] fills a state from the API with one paginated LIST per kind (verbs `list` only, no
//! watch); a state can also be written to a file and read back by the caller (it is plain Kubernetes objects).

use std::sync::{Arc, Mutex, RwLock};

use k8s_openapi::api::{
    core::v1::{Node, Pod},
    policy::v1::PodDisruptionBudget,
    scheduling::v1::PriorityClass,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::ListParams,
    runtime::{reflector, watcher},
};
use phalanx_api::{
    v1alpha3::CompositePodGroup,
    v1beta1::{PodGroup, Workload},
};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};

use crate::{AssumeCache, ClusterIndex, GroupKey, GroupKind, Inner, KINDS, Shared, Store};

/// Every object the scheduler's store watches, as one list per kind (the kinds of [`Store::start`]).
#[derive(Clone, Debug, Default)]
pub struct ClusterState {
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Pods of every namespace, bound or pending.
    pub pods: Vec<Pod>,
    /// PodGroups (`scheduling.phalanx.dev/v1beta1`).
    pub pod_groups: Vec<PodGroup>,
    /// CompositePodGroups (`scheduling.phalanx.dev/v1alpha3`).
    pub composite_pod_groups: Vec<CompositePodGroup>,
    /// Workloads (`scheduling.phalanx.dev/v1beta1`).
    pub workloads: Vec<Workload>,
    /// PriorityClasses (`scheduling.k8s.io/v1`).
    pub priority_classes: Vec<PriorityClass>,
    /// PodDisruptionBudgets (`policy/v1`).
    pub pdbs: Vec<PodDisruptionBudget>,
}

impl ClusterState {
    /// Lists every kind once (pages of 500). Errors: the first failed LIST, naming the kind (a missing CRD gives
    /// the API's 404 for that kind, a missing `list` permission its 403).
    pub async fn list(client: &Client) -> Result<ClusterState, ListError> {
        Ok(ClusterState {
            nodes: list_all(client).await?,
            pods: list_all(client).await?,
            pod_groups: list_all(client).await?,
            composite_pod_groups: list_all(client).await?,
            workloads: list_all(client).await?,
            priority_classes: list_all(client).await?,
            pdbs: list_all(client).await?,
        })
    }
}

/// A LIST of [`ClusterState::list`] failed.
#[derive(Debug, thiserror::Error)]
#[error("listing {kind} failed: {source}")]
pub struct ListError {
    /// The resource (plural), e.g. `podgroups`.
    pub kind: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

async fn list_all<K>(client: &Client) -> Result<Vec<K>, ListError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    let mut lp = ListParams::default().limit(500);
    let mut out = Vec::new();
    loop {
        let page = api.list(&lp).await.map_err(|source| ListError {
            kind: K::plural(&()).to_string(),
            source,
        })?;
        out.extend(page.items.into_iter().map(|mut o| {
            o.managed_fields_mut().clear();
            o
        }));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => return Ok(out),
        }
    }
}

fn reader<K>(objects: Vec<K>) -> reflector::Store<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let mut w = reflector::store::Writer::<K>::default();
    w.apply_watcher_event(&watcher::Event::Init);
    for o in objects {
        w.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    w.apply_watcher_event(&watcher::Event::InitDone);
    w.as_reader()
}

fn group_keys<K: Resource<DynamicType = ()>>(
    objects: &[K],
    kind: GroupKind,
    parent: fn(&K) -> Option<String>,
) -> Vec<(GroupKey, Option<String>)> {
    objects
        .iter()
        .map(|o| {
            let key = GroupKey {
                kind,
                namespace: o.namespace().unwrap_or_default().into(),
                name: o.name_any().into(),
            };
            (key, parent(o))
        })
        .collect()
}

impl Store {
    /// A store holding exactly `state`, ready at once, with no watch behind it: it never changes except through
    /// [`Store::assume`] (which a simulation uses to count the pods it placed). Its indexes are built as after a
    /// watch's initial list.
    pub fn from_state(state: ClusterState) -> Store {
        let mut index = ClusterIndex::default();
        index.reset_group_owners(state.pod_groups.iter().filter_map(|g| {
            let uid = g.labels().get(phalanx_api::owners::OWNER_UID_LABEL)?.clone();
            Some((
                GroupKey::pod_group(&g.namespace().unwrap_or_default(), &g.name_any()),
                uid,
            ))
        }));
        index.reset_groups(
            GroupKind::PodGroup,
            group_keys(&state.pod_groups, GroupKind::PodGroup, |g: &PodGroup| {
                g.spec.parent_composite_pod_group_name.clone()
            }),
        );
        index.reset_groups(
            GroupKind::CompositePodGroup,
            group_keys(
                &state.composite_pod_groups,
                GroupKind::CompositePodGroup,
                |g: &CompositePodGroup| g.spec.parent_composite_pod_group_name.clone(),
            ),
        );
        let (events, _) = broadcast::channel(16);
        let (_ready_tx, ready) = watch::channel(KINDS);
        let pods = reader(state.pods);
        // No owner is read: pods of an annotated Job or StatefulSet resolve to their own group label only.
        let (custom, _requests) = crate::custom_owners::CustomOwners::new();
        let store = Store {
            inner: Arc::new(Inner {
                nodes: reader(state.nodes),
                pods: pods.clone(),
                pod_groups: reader(state.pod_groups),
                composite_pod_groups: reader(state.composite_pod_groups),
                workloads: reader(state.workloads),
                priority_classes: reader(state.priority_classes),
                pdbs: reader(state.pdbs),
                shared: Arc::new(Shared {
                    index: RwLock::new(index),
                    assumed: Mutex::new(AssumeCache::new()),
                    events,
                    pods,
                    owners: crate::reflectors::OwnerReaders::empty(),
                    custom,
                }),
                ready,
                tasks: Vec::new(),
            }),
        };
        // Pods join their group as in the live store: their own label, else their owner (no owner object is read
        // here, so a Job's or StatefulSet's pods resolve to the group derived from their controller's name, which
        // is the one the owner integration creates).
        let shared = &store.inner.shared;
        let pods = store.inner.pods.state();
        let resolved: Vec<_> = pods
            .iter()
            .map(|p| {
                let (g, chain) = shared.resolve(p);
                (p.as_ref(), g, chain)
            })
            .collect();
        shared.index_mut().reset_pods_resolved(resolved);
        store
    }
}
