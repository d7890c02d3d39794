//! A [`Store`] over a fixed set of objects, read once: what `phalanx explain` and `phalanx simulate` run the
//! scheduling core on, so that a read-only tool and the scheduler see the cluster through the same caches and
//! indexes (the reflector stores of [`Store::start`], fed here by one synthetic list instead of a watch).
//!
//! [`ClusterState::list`] fills a state from the API with one paginated LIST per kind (verbs `list` only, no
//! watch); a state can also be written to a file and read back by the caller (it is plain Kubernetes objects).
//!
//! Pods join their owner's group here exactly as in the live store (one function, [`crate::owners::resolve`]): the
//! state carries the metadata of the pods' owners, the built-in kinds and the custom kinds their chains reach, as
//! the live store's metadata caches hold them. Without it a Deployment's pods would resolve to their ReplicaSet's
//! group, a group that does not exist, and `phalanx explain` would disagree with the scheduler.

use std::sync::{
    Arc, Mutex, RwLock,
    atomic::{AtomicBool, AtomicUsize},
};

use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet, StatefulSet},
    batch::v1::Job,
};
use k8s_openapi::api::{
    core::v1::{Node, Pod},
    policy::v1::PodDisruptionBudget,
    scheduling::v1::PriorityClass,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DynamicObject, ListParams},
    core::{ApiResource, GroupVersionKind},
    discovery::Scope,
};
use phalanx_api::{
    v1alpha3::CompositePodGroup,
    v1beta1::{PodGroup, Workload},
};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};

use crate::kind_watch::reader;
use crate::owners::{OwnerKind, OwnerObject};
use crate::{AssumeCache, ClusterIndex, GroupApi, GroupKey, GroupKind, Inner, KINDS, Shared, Store};

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
    /// Claims, volumes, storage classes and the CSI objects (what the volume plugins read).
    pub volumes: crate::volumes::VolumeObjects,
    /// DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates (`resource.k8s.io/v1`, what the
    /// DRA plugin reads); `None` when the API server does not serve that version, and in a state read from
    /// manifests until it holds such an object. [`Store::from_state`] has DRA caches ([`Store::dra`]) exactly when
    /// this is `Some`.
    pub dra: Option<crate::dra::DraObjects>,
    /// Upstream's own groups (`scheduling.k8s.io`), in Phalanx's types; `None` when the server does not serve
    /// `scheduling.k8s.io/v1beta1` PodGroups. [`Store::from_state`] schedules them, and reads a pod's
    /// `spec.schedulingGroup` as naming one of them, exactly when this is `Some` (see [`crate::upstream`]).
    pub upstream: Option<UpstreamObjects>,
    /// The metadata of the pods' owners: every Job, ReplicaSet, Deployment and StatefulSet, and every object of the
    /// custom kinds in [`ClusterState::owner_kinds`]. Empty in a state read from manifests: pods of an owner then
    /// wait for the group derived from their controller's name.
    pub owners: Vec<OwnerObject>,
    /// The custom owner kinds listed in full. A custom kind not listed here is one the cluster does not serve or
    /// the reader may not list: as in the live store, its pods join only a PodGroup labelled with their owner's uid.
    pub owner_kinds: Vec<OwnerKind>,
}

/// Upstream's PodGroups and CompositePodGroups of a [`ClusterState`], converted ([`crate::upstream::converted`]).
#[derive(Clone, Debug, Default)]
pub struct UpstreamObjects {
    /// `scheduling.k8s.io/v1beta1` PodGroups.
    pub pod_groups: Vec<PodGroup>,
    /// CompositePodGroups, `scheduling.k8s.io/v1beta1` where served (1.38) else `v1alpha3` (empty when neither).
    pub composite_pod_groups: Vec<CompositePodGroup>,
    /// Whether CompositePodGroups are served (at either version).
    pub composites_served: bool,
    /// Whether [`UpstreamObjects::composite_pod_groups`] were read at `v1beta1`.
    pub composites_v1beta1: bool,
}

impl ClusterState {
    /// Lists every kind once (pages of 500). Errors: the first failed LIST, naming the kind (a missing CRD gives
    /// the API's 404 for that kind, a missing `list` permission its 403).
    ///
    /// The DRA kinds are listed when one discovery request (`GET /apis/resource.k8s.io/v1`, not retried) finds
    /// them served, else [`ClusterState::dra`] is `None`; a failure of that request other than 404 is an error
    /// (kind `resource.k8s.io/v1 discovery`).
    ///
    /// The owners are read as metadata only (verb `list` on jobs, replicasets, deployments and statefulsets, and
    /// on each custom kind the pods' owner chains reach, found by discovery). A custom kind that is not served or
    /// may not be listed (404, 403) is left out, as the live store leaves it unwatched; any other failure is an
    /// error.
    pub async fn list(client: &Client) -> Result<ClusterState, ListError> {
        let pods: Vec<Pod> = list_all(client).await?;
        let (owners, owner_kinds) = list_owners(client, &pods).await?;
        Ok(ClusterState {
            nodes: list_all(client).await?,
            pods,
            pod_groups: list_all(client).await?,
            composite_pod_groups: list_all(client).await?,
            workloads: list_all(client).await?,
            priority_classes: list_all(client).await?,
            pdbs: list_all(client).await?,
            volumes: crate::volumes::VolumeObjects {
                claims: list_all(client).await?,
                volumes: list_all(client).await?,
                classes: list_all(client).await?,
                csi_nodes: list_all(client).await?,
                csi_drivers: list_all(client).await?,
                capacities: list_all(client).await?,
            },
            dra: list_dra(client).await?,
            upstream: list_upstream(client).await?,
            owners,
            owner_kinds,
        })
    }
}

/// The DRA objects, `None` when the server does not serve them.
async fn list_dra(client: &Client) -> Result<Option<crate::dra::DraObjects>, ListError> {
    let served = crate::dra::discover(client).await.map_err(|source| ListError {
        kind: format!("{} discovery", crate::server::DRA_GROUP_VERSION),
        source,
    })?;
    if !served {
        return Ok(None);
    }
    Ok(Some(crate::dra::DraObjects {
        classes: list_all(client).await?,
        slices: list_all(client).await?,
        claims: list_all(client).await?,
        templates: list_all(client).await?,
    }))
}

/// Upstream's groups, `None` when `scheduling.k8s.io/v1beta1` PodGroups are not served (one discovery request per
/// group-version, not retried; a failure other than 404 is an error).
async fn list_upstream(client: &Client) -> Result<Option<UpstreamObjects>, ListError> {
    use crate::upstream::{UPSTREAM_COMPOSITE_ALPHA_GROUP_VERSION, UPSTREAM_GROUP_VERSION, converted};
    use k8s_openapi::api::scheduling::v1beta1;
    use phalanx_api::native::{NativeCompositePodGroup, V1alpha3, V1beta1};
    let discover = |gv: &'static str, plural: &'static str| async move {
        crate::discovery::discover(client, gv, &[plural])
            .await
            .map_err(|source| ListError {
                kind: format!("{gv} discovery"),
                source,
            })
    };
    if !discover(UPSTREAM_GROUP_VERSION, "podgroups").await? {
        return Ok(None);
    }
    let pod_groups: Vec<v1beta1::PodGroup> = list_all(client).await?;
    // As the watch reads them (`crate::upstream`): v1beta1 where served (1.38), else v1alpha3.
    let composites_v1beta1 = discover(UPSTREAM_GROUP_VERSION, "compositepodgroups").await?;
    let composites_alpha =
        !composites_v1beta1 && discover(UPSTREAM_COMPOSITE_ALPHA_GROUP_VERSION, "compositepodgroups").await?;
    let composite_pod_groups = if composites_v1beta1 {
        let l: Vec<NativeCompositePodGroup<V1beta1>> = list_all(client).await?;
        l.into_iter().map(converted).collect()
    } else if composites_alpha {
        let l: Vec<NativeCompositePodGroup<V1alpha3>> = list_all(client).await?;
        l.into_iter().map(converted).collect()
    } else {
        Vec::new()
    };
    Ok(Some(UpstreamObjects {
        pod_groups: pod_groups.into_iter().map(converted).collect(),
        composite_pod_groups,
        composites_served: composites_v1beta1 || composites_alpha,
        composites_v1beta1,
    }))
}

/// The built-in owners, then the custom kinds reached from the pods' controller references (and from theirs, up to
/// [`crate::owners::MAX_OWNER_DEPTH`] levels, as the walk goes).
async fn list_owners(client: &Client, pods: &[Pod]) -> Result<(Vec<OwnerObject>, Vec<OwnerKind>), ListError> {
    let mut owners = Vec::new();
    owners.extend(list_builtin::<Job>(client).await?);
    owners.extend(list_builtin::<ReplicaSet>(client).await?);
    owners.extend(list_builtin::<Deployment>(client).await?);
    owners.extend(list_builtin::<StatefulSet>(client).await?);
    let mut tried = std::collections::BTreeSet::new();
    let mut kinds = Vec::new();
    for _ in 0..crate::owners::MAX_OWNER_DEPTH {
        let wanted: std::collections::BTreeSet<(String, String)> = pods
            .iter()
            .map(|p| &p.metadata)
            .chain(owners.iter().map(|o| &o.metadata))
            .filter_map(crate::owners::controller_of)
            .filter(|c| {
                !crate::owners::is_watched(&c.api_version, &c.kind)
                    && !crate::owners::is_pod(&c.api_version, &c.kind)
            })
            .map(|c| (c.api_version.clone(), c.kind.clone()))
            .filter(|k| !tried.contains(k))
            .collect();
        if wanted.is_empty() {
            break;
        }
        for (api_version, kind) in wanted {
            tried.insert((api_version.clone(), kind.clone()));
            if let Some((k, objects)) = list_custom(client, &api_version, &kind).await? {
                kinds.push(k);
                owners.extend(objects);
            }
        }
    }
    Ok((owners, kinds))
}

async fn list_builtin<K>(client: &Client) -> Result<Vec<OwnerObject>, ListError>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    let plural = K::plural(&()).to_string();
    list_metadata(&api, &plural, &K::api_version(&()), &K::kind(&())).await
}

/// One custom kind: `None` when it is not served or may not be listed.
async fn list_custom(
    client: &Client,
    api_version: &str,
    kind: &str,
) -> Result<Option<(OwnerKind, Vec<OwnerObject>)>, ListError> {
    let (group, version) = crate::custom_owners::split_api_version(api_version);
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps): (ApiResource, _) = match kube::discovery::pinned_kind(client, &gvk).await {
        Ok(found) => found,
        Err(e) if crate::custom_owners::is_absent(&e) => return Ok(None),
        Err(source) => {
            return Err(ListError {
                kind: format!("{kind} ({api_version}) discovery"),
                source,
            });
        }
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    match list_metadata(&api, &ar.plural, api_version, kind).await {
        Ok(objects) => Ok(Some((
            OwnerKind {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
                plural: ar.plural.clone(),
                namespaced: caps.scope == Scope::Namespaced,
            },
            objects,
        ))),
        Err(e) if crate::custom_owners::is_absent(&e.source) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Every object of `api`, metadata only, pages of 500.
async fn list_metadata<K>(
    api: &Api<K>,
    plural: &str,
    api_version: &str,
    kind: &str,
) -> Result<Vec<OwnerObject>, ListError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut lp = ListParams::default().limit(500);
    let mut out = Vec::new();
    loop {
        let page = api.list_metadata(&lp).await.map_err(|source| ListError {
            kind: plural.to_owned(),
            source,
        })?;
        out.extend(page.items.into_iter().map(|mut o| {
            o.metadata.managed_fields = None;
            OwnerObject {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
                metadata: o.metadata,
            }
        }));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => return Ok(out),
        }
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

fn group_keys<K: Resource<DynamicType = ()>>(
    objects: &[K],
    (kind, api): (GroupKind, GroupApi),
    parent: fn(&K) -> Option<String>,
) -> Vec<(GroupKey, Option<String>)> {
    objects
        .iter()
        .map(|o| {
            let key = GroupKey {
                kind,
                api,
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
                g.annotations().get(phalanx_api::owners::MEMBERS).cloned(),
            ))
        }));
        index.reset_groups(
            (GroupKind::PodGroup, GroupApi::Phalanx),
            group_keys(
                &state.pod_groups,
                (GroupKind::PodGroup, GroupApi::Phalanx),
                |g: &PodGroup| g.spec.parent_composite_pod_group_name.clone(),
            ),
        );
        index.reset_groups(
            (GroupKind::CompositePodGroup, GroupApi::Phalanx),
            group_keys(
                &state.composite_pod_groups,
                (GroupKind::CompositePodGroup, GroupApi::Phalanx),
                |g: &CompositePodGroup| g.spec.parent_composite_pod_group_name.clone(),
            ),
        );
        let upstream_served = state.upstream.is_some();
        let upstream = state.upstream.unwrap_or_default();
        index.reset_groups(
            (GroupKind::PodGroup, GroupApi::Upstream),
            group_keys(
                &upstream.pod_groups,
                (GroupKind::PodGroup, GroupApi::Upstream),
                |g: &PodGroup| g.spec.parent_composite_pod_group_name.clone(),
            ),
        );
        index.reset_groups(
            (GroupKind::CompositePodGroup, GroupApi::Upstream),
            group_keys(
                &upstream.composite_pod_groups,
                (GroupKind::CompositePodGroup, GroupApi::Upstream),
                |g: &CompositePodGroup| g.spec.parent_composite_pod_group_name.clone(),
            ),
        );
        let (events, _) = broadcast::channel(16);
        let dra_served = state.dra.is_some();
        let target = KINDS + if dra_served { crate::dra::DRA_KINDS } else { 0 };
        let (_ready_tx, ready) = watch::channel(target);
        let mut interner = crate::intern::Interner::default();
        let pods = reader(
            state
                .pods
                .iter()
                .map(|p| crate::PodRecord::from_pod_shared(p, &mut interner, upstream_served))
                .collect(),
        );
        let owners = crate::reflectors::OwnerReaders::from_objects(&state.owners);
        let custom = crate::custom_owners::CustomOwners::fixed(&state.owner_kinds, &state.owners);
        let store = Store {
            inner: Arc::new(Inner {
                nodes: reader(state.nodes.iter().map(crate::NodeRecord::from_node).collect()),
                pods: pods.clone(),
                pod_groups: reader(state.pod_groups),
                upstream: crate::upstream::UpstreamReaders {
                    pod_groups: reader(upstream.pod_groups),
                    composites: reader(upstream.composite_pod_groups),
                },
                composite_pod_groups: reader(state.composite_pod_groups),
                workloads: reader(state.workloads),
                priority_classes: reader(state.priority_classes),
                pdbs: reader(state.pdbs),
                volumes: crate::volumes::VolumeReaders {
                    claims: reader(state.volumes.claims),
                    volumes: reader(state.volumes.volumes),
                    classes: reader(state.volumes.classes),
                    csi_nodes: reader(state.volumes.csi_nodes),
                    csi_drivers: reader(state.volumes.csi_drivers),
                    capacities: reader(state.volumes.capacities),
                },
                dra: crate::dra::DraReaders::from_objects(state.dra.unwrap_or_default()),
                shared: Arc::new(Shared {
                    index: RwLock::new(index),
                    assumed: Mutex::new(AssumeCache::new()),
                    events,
                    pods,
                    owners,
                    custom,
                    forbidden: Mutex::new(Default::default()),
                    forbidden_devices: Mutex::new(Default::default()),
                    dra_served: AtomicBool::new(dra_served),
                    upstream_groups: AtomicBool::new(upstream_served),
                    upstream_composites: AtomicBool::new(upstream_served && upstream.composites_served),
                    upstream_composites_beta: AtomicBool::new(upstream_served && upstream.composites_v1beta1),
                    ready_target: AtomicUsize::new(target),
                }),
                ready,
                tasks: Vec::new(),
            }),
        };
        // Pods join their group as in the live store: their own label, else their owner's, by the same walk over
        // the owners' metadata of the state (a state without owners, read from manifests, resolves a Job's or
        // StatefulSet's pods to the group derived from their controller's name, the one the integration creates).
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
