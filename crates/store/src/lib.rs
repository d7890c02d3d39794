//! phalanx-store: reflector-fed caches shared by the scheduler and the controllers.
//!
//! One [`Store`] per process watches Nodes, Pods, PodGroups, CompositePodGroups, Workloads, PriorityClasses and
//! PodDisruptionBudgets, the storage kinds the volume plugins read ([`volumes`]), the Dynamic Resource Allocation
//! kinds when the API server serves them ([`dra`]), and the metadata of the built-in pod owners (Jobs, ReplicaSets,
//! Deployments, StatefulSets)
//! so that pods of an annotated owner join its PodGroup without naming it ([`owners`]), keeps them in `kube::runtime::reflector` stores, maintains secondary indexes (pods per node,
//! pods per group, the group tree; see [`index`]) and the assume/forget overlay ([`assumed`]) the scheduler uses to
//! account for binds the watch has not confirmed yet ([`Store::from_state`] builds the same store over a fixed set of
//! objects, for read-only tools). Every change is also published as a [`StoreEvent`] so the
//! scheduling queue can react. Follows the shape of kube-scheduler's cache + informers
//! (`pkg/scheduler/backend/cache`) with kube-rs reflectors (`kube::runtime::reflector`).

pub mod assumed;
mod custom_owners;
pub mod discovery;
pub mod dra;
pub mod events;
pub mod fixed;
mod group_hooks;
pub mod index;
pub mod intern;
mod kind_watch;
pub mod leader;
#[cfg(test)]
mod listed_tests;
#[cfg(test)]
mod owner_tests;
pub mod owners;
pub mod priority;
pub mod record;
mod reflectors;
pub mod retry;
pub mod served_apis;
pub mod server;
pub mod slim;
pub mod upstream;
pub mod volumes;

use std::sync::{
    Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

use k8s_openapi::api::{policy::v1::PodDisruptionBudget, scheduling::v1::PriorityClass};
use kube::runtime::reflector::{ObjectRef, Store as Reader};
use phalanx_api::{
    v1alpha3::CompositePodGroup,
    v1beta1::{PodGroup, Workload},
};
use tokio::{sync::broadcast, time::Instant};

pub use assumed::{AssumeCache, AssumedPod};
pub use events::NoteRecorders;
pub use fixed::{ClusterState, ListError, UpstreamObjects};
pub use index::{ClusterIndex, pod_group_key, pod_group_name, pod_node};
pub use leader::{Leader, LeaderFence};
pub use owners::{OwnerKind, OwnerObject};
pub use record::{KeptCondition, NodeRecord, PodRecord};
// Keys and hierarchy rules are defined once, in the pure core, and shared with the driver and the controllers.
pub use phalanx_scheduler::hierarchy::{
    Ancestry, GroupNode, HierarchyError, MAX_TREE_DEPTH, check_edge, validate_ancestry, validate_tree,
};
pub use phalanx_scheduler::model::{GroupApi, GroupKey, GroupKind, PodKey};

/// Settings for [`Store::start`].
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Capacity of the change-notification channel; a slower subscriber gets `Lagged` and must resync. Default
    /// 16,384 events. The channel allocates every slot up front (about 144 bytes each): 65,536 slots were 9.4 MB
    /// of the scheduler's heap at 5,000 nodes (`docs/benchmarks.md`), and the scheduling loop drains the channel
    /// between cycles of milliseconds, so a burst that outruns 16,384 slots costs one resync.
    pub event_buffer: usize,
    /// LIST page size for the initial and re-lists (kube default 500).
    pub page_size: u32,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            event_buffer: 16_384,
            page_size: 500,
        }
    }
}

/// A change seen by the store, published after the caches and indexes were updated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreEvent {
    /// A pod was added, changed or deleted. `group` is its PodGroup (old or new), `node` its node if bound.
    Pod {
        /// The pod.
        key: PodKey,
        /// Its PodGroup, if it names one.
        group: Option<GroupKey>,
        /// Its node, if bound.
        node: Option<String>,
        /// True when the pod was deleted.
        deleted: bool,
    },
    /// A node was added, changed or deleted.
    Node(String),
    /// A PodGroup or CompositePodGroup was added, changed or deleted.
    Group(GroupKey),
    /// A watched owner (Job, ReplicaSet, Deployment, StatefulSet; see [`owners`]) was added, changed or deleted.
    /// Its pods were re-resolved first (and published as `Pod` events if their group changed).
    Owner(owners::OwnerRef),
    /// A Workload, PriorityClass or PDB changed (rarely relevant to queueing).
    Other,
    /// A storage object changed: a claim, volume, class, CSINode, CSIDriver or CSIStorageCapacity
    /// ([`volumes::VolumeReaders`]).
    Volume,
    /// A Dynamic Resource Allocation object changed: a DeviceClass, ResourceSlice, ResourceClaim or
    /// ResourceClaimTemplate ([`dra::DraReaders`]), or one of those kinds turned out unreadable (403).
    Devices,
    /// A watch re-listed: anything may have changed; subscribers should resync everything.
    Resync,
}

pub(crate) struct Inner {
    nodes: Reader<NodeRecord>,
    pods: Reader<PodRecord>,
    pod_groups: Reader<PodGroup>,
    /// Upstream's `scheduling.k8s.io` groups in Phalanx's types; empty unless served ([`upstream`]).
    upstream: upstream::UpstreamReaders,
    composite_pod_groups: Reader<CompositePodGroup>,
    workloads: Reader<Workload>,
    priority_classes: Reader<PriorityClass>,
    pdbs: Reader<PodDisruptionBudget>,
    volumes: volumes::VolumeReaders,
    /// Empty until discovery decided, and for good when the server does not serve DRA (see `Shared::dra_served`).
    dra: dra::DraReaders,
    shared: Arc<Shared>,
    ready: tokio::sync::watch::Receiver<usize>,
    tasks: Vec<tokio::task::AbortHandle>,
}

/// State the watch tasks update: indexes, the overlay and the notification channel.
pub(crate) struct Shared {
    index: RwLock<ClusterIndex>,
    assumed: Mutex<AssumeCache>,
    events: broadcast::Sender<StoreEvent>,
    pods: Reader<PodRecord>,
    owners: reflectors::OwnerReaders,
    custom: custom_owners::CustomOwners,
    /// Storage kinds (plural names) the scheduler may not list: counted as ready and empty (see
    /// [`Store::unreadable_storage`]).
    forbidden: Mutex<std::collections::BTreeSet<String>>,
    /// Likewise for the DRA kinds ([`Store::unreadable_devices`]).
    forbidden_devices: Mutex<std::collections::BTreeSet<String>>,
    /// Whether the DRA kinds are watched: set once, before discovery counts toward readiness ([`dra`]).
    dra_served: AtomicBool,
    /// Whether upstream's PodGroups are watched: set once, before the pod watch starts ([`upstream`]).
    upstream_groups: AtomicBool,
    /// Whether upstream's CompositePodGroups are watched (at either version): set with [`Shared::upstream_groups`].
    upstream_composites: AtomicBool,
    /// Whether upstream's CompositePodGroups are watched at `v1beta1` (1.38) rather than `v1alpha3`: set with
    /// [`Shared::upstream_groups`].
    upstream_composites_beta: AtomicBool,
    /// How many counts readiness waits for: [`KINDS`], plus [`dra::DRA_KINDS`] once discovery found DRA served
    /// (raised before the discovery's own count, so readiness is never reached without them).
    ready_target: AtomicUsize,
}

impl Shared {
    /// What the caches know of one owner: the built-in metadata caches, else the on-demand cache of its custom kind.
    fn lookup_owner(&self, o: &owners::OwnerRef) -> owners::Lookup {
        if owners::is_pod(&o.api_version, &o.kind) {
            return match self.pods.get(&ObjectRef::new(&o.name).within(&o.namespace)) {
                Some(p) if p.uid() == o.uid => owners::Lookup::Found(Box::new(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: Some(p.name().to_owned()),
                        namespace: Some(p.namespace().to_owned()),
                        uid: Some(p.uid().to_owned()),
                        owner_references: Some(p.owner_references.clone()),
                        ..Default::default()
                    },
                )),
                _ => owners::Lookup::Missing,
            };
        }
        match self.owners.lookup(o) {
            owners::Lookup::NotWatched => self.custom.lookup(o),
            found_or_missing => found_or_missing,
        }
    }

    /// The pod's group (its own, else its owner's; see [`owners::resolve`]) and the owner uids visited.
    fn resolve(&self, pod: &PodRecord) -> (Option<GroupKey>, Vec<String>) {
        if let Some(g) = pod.group_key() {
            return (Some(g), Vec::new());
        }
        let ns = pod.namespace();
        let r = {
            let ix = self
                .index
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            owners::resolve(
                pod,
                |o| self.lookup_owner(o),
                |o| ix.group_of_owner(&o.namespace, &o.uid, Some(pod.labels())),
            )
        };
        (r.group.map(|n| GroupKey::pod_group(ns, &n)), r.chain)
    }

    /// Re-resolves the pods whose owner chain went through `uid`; a pod whose group changed is published (under
    /// its old and its new group, so both are recounted).
    fn reresolve_owner(&self, uid: &str) {
        let keys = self
            .index
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pods_of_owner(uid);
        self.reresolve(keys);
    }

    /// Re-resolves every cached pod that names no group itself (after an owner or PodGroup relist).
    fn reresolve_all(&self) {
        let keys: Vec<PodKey> = self
            .pods
            .state()
            .iter()
            .filter(|p| p.group_name().is_none())
            .map(|p| p.key().clone())
            .collect();
        self.reresolve(keys);
    }

    fn reresolve(&self, keys: Vec<PodKey>) {
        for key in keys {
            let Some(p) = self.pods.get(&ObjectRef::new(&key.name).within(&key.namespace)) else {
                continue;
            };
            let (group, chain) = self.resolve(&p);
            let old = self.index_mut().group_of(&key);
            self.index_mut().apply_pod_resolved(&p, group.clone(), chain);
            if old != group {
                let node = p.node_name().map(str::to_owned);
                if old.is_some() {
                    self.publish(StoreEvent::Pod {
                        key: key.clone(),
                        group: old,
                        node: node.clone(),
                        deleted: false,
                    });
                }
                self.publish(StoreEvent::Pod {
                    key,
                    group,
                    node,
                    deleted: false,
                });
            }
        }
    }

    fn index_mut(&self) -> std::sync::RwLockWriteGuard<'_, ClusterIndex> {
        self.index
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn assumed(&self) -> MutexGuard<'_, AssumeCache> {
        self.assumed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn publish(&self, ev: StoreEvent) {
        // No subscriber is fine: the driver may not have started yet.
        let _ = self.events.send(ev);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Shared, cheaply clonable handle to the caches. Dropping the last clone stops the watches.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

/// Counts readiness always waits for: one initial list per kind watched unconditionally, and the discoveries of DRA
/// and of upstream's PodGroups (one count each once it decided). When DRA is served its four kinds add
/// [`dra::DRA_KINDS`], when upstream's PodGroups are, their watch adds one (`Shared::ready_target`).
const KINDS: usize = 7 + volumes::VOLUME_KINDS + owners::WATCHED_OWNERS.len() + 2;

impl Store {
    /// Spawns one watch per kind on the current tokio runtime and returns at once.
    ///
    /// The watches retry with kube's default backoff, so a kind whose CRD is not installed yet keeps the store
    /// unready instead of failing. Pods are slimmed (`managedFields` cleared) before they are cached. The DRA kinds
    /// are watched only if discovery finds `resource.k8s.io/v1` served (see [`dra`]).
    pub fn start(client: kube::Client, config: StoreConfig) -> Store {
        reflectors::start(client, config)
    }

    /// Resolves once every watched kind has completed its first list (the DRA kinds only when served) and the
    /// indexes are built.
    pub async fn wait_ready(&self) {
        let mut rx = self.inner.ready.clone();
        let target = &self.inner.shared.ready_target;
        // The sender lives in the watch tasks; if they all ended the store can never become ready, so wait forever
        // rather than report a half-filled cache as ready.
        if rx
            .wait_for(|n| *n >= target.load(Ordering::SeqCst))
            .await
            .is_err()
        {
            std::future::pending::<()>().await;
        }
    }

    /// True once every watched kind has completed its first list.
    pub fn is_ready(&self) -> bool {
        // The count before the target: a count that includes DRA's discovery was sent after the target was raised.
        let counted = *self.inner.ready.borrow();
        counted >= self.inner.shared.ready_target.load(Ordering::SeqCst)
    }

    /// Subscribes to change notifications (published after caches and indexes are updated).
    pub fn subscribe(&self) -> broadcast::Receiver<StoreEvent> {
        self.inner.shared.events.subscribe()
    }

    /// Reader of the Node cache: one compact [`NodeRecord`] per node ([`record`]).
    pub fn nodes(&self) -> &Reader<NodeRecord> {
        &self.inner.nodes
    }
    /// Reader of the Pod cache: one compact [`PodRecord`] per pod ([`record`]).
    pub fn pods(&self) -> &Reader<PodRecord> {
        &self.inner.pods
    }
    /// Reader of the PodGroup cache.
    pub fn pod_groups(&self) -> &Reader<PodGroup> {
        &self.inner.pod_groups
    }
    /// Reader of the CompositePodGroup cache.
    pub fn composite_pod_groups(&self) -> &Reader<CompositePodGroup> {
        &self.inner.composite_pod_groups
    }
    /// Reader of the Workload cache.
    pub fn workloads(&self) -> &Reader<Workload> {
        &self.inner.workloads
    }
    /// Reader of the PriorityClass cache.
    pub fn priority_classes(&self) -> &Reader<PriorityClass> {
        &self.inner.priority_classes
    }
    /// Reader of the PodDisruptionBudget cache.
    pub fn pdbs(&self) -> &Reader<PodDisruptionBudget> {
        &self.inner.pdbs
    }
    /// Readers of the storage caches.
    pub fn volumes(&self) -> &volumes::VolumeReaders {
        &self.inner.volumes
    }
    /// The storage kinds (plural names, e.g. `persistentvolumeclaims`) whose list was refused (403): their caches
    /// count as ready and stay empty while the watch keeps retrying, so that a scheduler without the storage RBAC
    /// still schedules pods without volumes; the volume plugins then hold pods with claims with this list in
    /// their message. Empty normally.
    pub fn unreadable_storage(&self) -> Vec<String> {
        self.inner
            .shared
            .forbidden
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// Readers of the Dynamic Resource Allocation caches (`resource.k8s.io/v1`: DeviceClasses, ResourceSlices,
    /// ResourceClaims, ResourceClaimTemplates), `None` when the API server does not serve that version (see
    /// [`dra`]). Decided by one discovery when the store starts: `None` also before that (at most
    /// [`dra::DISCOVERY_PATIENCE`] after [`Store::start`]); settled once [`Store::wait_ready`] resolved.
    pub fn dra(&self) -> Option<&dra::DraReaders> {
        self.dra_served().then_some(&self.inner.dra)
    }
    /// Whether the DRA kinds are watched (`resource.k8s.io/v1` served): [`Store::dra`] is `Some`. False until
    /// discovery decided; settled once [`Store::wait_ready`] resolved.
    pub fn dra_served(&self) -> bool {
        self.inner.shared.dra_served.load(Ordering::SeqCst)
    }
    /// The DRA kinds (plural names: `deviceclasses`, `resourceslices`, `resourceclaims`,
    /// `resourceclaimtemplates`) whose list was refused (403), sorted: as for [`Store::unreadable_storage`], their
    /// caches count as ready and stay empty while the watch keeps retrying, so that a scheduler without the DRA
    /// RBAC still schedules pods without resource claims. Empty normally, and when DRA is not served.
    pub fn unreadable_devices(&self) -> Vec<String> {
        self.inner
            .shared
            .forbidden_devices
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// The hierarchy and per-node index (group -> members, parent -> children, pod -> group, node -> pods).
    /// Hold the guard briefly; watch events wait for it.
    pub fn hierarchy(&self) -> RwLockReadGuard<'_, ClusterIndex> {
        self.inner
            .shared
            .index
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One pod by key.
    pub fn pod(&self, key: &PodKey) -> Option<Arc<PodRecord>> {
        self.inner
            .pods
            .get(&ObjectRef::new(&key.name).within(&key.namespace))
    }

    /// One PodGroup by namespace and name.
    pub fn pod_group(&self, namespace: &str, name: &str) -> Option<Arc<PodGroup>> {
        self.inner.pod_groups.get(&ObjectRef::new(name).within(namespace))
    }

    /// Reader of the cache of upstream's `scheduling.k8s.io` PodGroups, in Phalanx's type ([`upstream`]); empty
    /// when the server does not serve them ([`Store::upstream_served`]).
    pub fn upstream_pod_groups(&self) -> &Reader<PodGroup> {
        &self.inner.upstream.pod_groups
    }

    /// Reader of the cache of upstream's `scheduling.k8s.io/v1alpha3` CompositePodGroups, in Phalanx's type; empty
    /// when not served.
    pub fn upstream_composite_pod_groups(&self) -> &Reader<CompositePodGroup> {
        &self.inner.upstream.composites
    }

    /// Whether upstream's PodGroups are watched (`scheduling.k8s.io/v1beta1` served). False until discovery
    /// decided; settled once [`Store::wait_ready`] resolved.
    pub fn upstream_served(&self) -> bool {
        self.inner.shared.upstream_groups.load(Ordering::SeqCst)
    }

    /// The group-version of upstream's CompositePodGroups as watched: `scheduling.k8s.io/v1beta1` where served
    /// (1.38), else `scheduling.k8s.io/v1alpha3` (1.37). Settled with [`Store::upstream_served`].
    pub fn upstream_composite_group_version(&self) -> &'static str {
        if self.upstream_composites_v1beta1() {
            upstream::UPSTREAM_GROUP_VERSION
        } else {
            upstream::UPSTREAM_COMPOSITE_ALPHA_GROUP_VERSION
        }
    }

    /// The optional APIs the store watches, as decided when it started; settled once [`Store::wait_ready`]
    /// resolved. [`served_apis::until_changed`] tells when the server's answer changes.
    pub fn served_apis(&self) -> served_apis::ServedApis {
        let composites = self.inner.shared.upstream_composites.load(Ordering::SeqCst);
        served_apis::ServedApis {
            dra: self.dra_served(),
            pod_groups: self.upstream_served(),
            composites: composites.then(|| self.upstream_composite_group_version()),
        }
    }

    /// Whether upstream's CompositePodGroups are watched at `v1beta1` ([`Store::upstream_composite_group_version`]).
    pub fn upstream_composites_v1beta1(&self) -> bool {
        self.inner.shared.upstream_composites_beta.load(Ordering::SeqCst)
    }

    /// The PodGroup `key` names, from the cache of its API group (`key.kind` must be `PodGroup`, else `None`).
    pub fn pod_group_at(&self, key: &GroupKey) -> Option<Arc<PodGroup>> {
        if key.kind != GroupKind::PodGroup {
            return None;
        }
        let at = ObjectRef::new(&key.name).within(&key.namespace);
        match key.api {
            GroupApi::Phalanx => self.inner.pod_groups.get(&at),
            GroupApi::Upstream => self.inner.upstream.pod_groups.get(&at),
        }
    }

    /// The CompositePodGroup `key` names, from the cache of its API group (`key.kind` must be `CompositePodGroup`).
    pub fn composite_pod_group_at(&self, key: &GroupKey) -> Option<Arc<CompositePodGroup>> {
        if key.kind != GroupKind::CompositePodGroup {
            return None;
        }
        let at = ObjectRef::new(&key.name).within(&key.namespace);
        match key.api {
            GroupApi::Phalanx => self.inner.composite_pod_groups.get(&at),
            GroupApi::Upstream => self.inner.upstream.composites.get(&at),
        }
    }

    /// Every cached CompositePodGroup of both API groups, with its key.
    pub fn all_composite_pod_groups(&self) -> Vec<(GroupKey, Arc<CompositePodGroup>)> {
        keyed_by_api(
            self.inner.composite_pod_groups.state(),
            self.inner.upstream.composites.state(),
            GroupKey::composite,
        )
    }

    /// Every cached PodGroup of both API groups, with its key.
    pub fn all_pod_groups(&self) -> Vec<(GroupKey, Arc<PodGroup>)> {
        keyed_by_api(
            self.inner.pod_groups.state(),
            self.inner.upstream.pod_groups.state(),
            GroupKey::pod_group,
        )
    }

    /// One CompositePodGroup by namespace and name.
    pub fn composite_pod_group(&self, namespace: &str, name: &str) -> Option<Arc<CompositePodGroup>> {
        self.inner
            .composite_pod_groups
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// Pods bound to `node` according to the watch (assumed pods are separate, see [`Store::assumed`]).
    pub fn pods_on_node(&self, node: &str) -> Vec<Arc<PodRecord>> {
        let keys = self.hierarchy().pods_on_node(node);
        keys.iter().filter_map(|k| self.pod(k)).collect()
    }

    /// The PodGroup `pod` belongs to: its own (label, `spec.schedulingGroup`), else the one its owner chain resolved
    /// to (see [`owners`]), as the index holds it. `None` for a pod in no group or not cached.
    pub fn group_of_pod(&self, pod: &PodRecord) -> Option<GroupKey> {
        pod.group_key().or_else(|| self.hierarchy().group_of(pod.key()))
    }

    /// Walks `pod`'s owner chain over the caches (see [`owners::resolve`]); the integration controller uses the
    /// `top` owner it returns.
    pub fn resolve_owners(&self, pod: &PodRecord) -> owners::Resolution {
        let ix = self.hierarchy();
        owners::resolve(
            pod,
            |o| self.inner.shared.lookup_owner(o),
            |o| ix.group_of_owner(&o.namespace, &o.uid, Some(pod.labels())),
        )
    }

    /// Pods whose resolved owner chain goes through the owner with `uid` (an owner integration reads an owner's
    /// pods this way: an LWS's replica groups are the values of a label among them).
    pub fn pods_of_owner(&self, uid: &str) -> Vec<Arc<PodRecord>> {
        let keys = self.hierarchy().pods_of_owner(uid);
        keys.iter().filter_map(|k| self.pod(k)).collect()
    }

    /// The cached metadata of a built-in owner, [`owners::Lookup::NotWatched`] for other kinds.
    pub fn owner_meta(&self, owner: &owners::OwnerRef) -> owners::Lookup {
        self.inner.shared.lookup_owner(owner)
    }

    /// Every cached built-in owner (Job, ReplicaSet, Deployment, StatefulSet) that is a group owner
    /// ([`Store::is_group_owner`]): annotated, and not a ReplicaSet of a Deployment nor under another annotated owner.
    pub fn annotated_owners(&self) -> Vec<owners::OwnerRef> {
        let mut all = self.inner.shared.owners.annotated();
        all.retain(|o| self.is_group_owner(o));
        all
    }

    /// Whether `owner` is the owner whose group the pods it controls join ([`owners::is_group_owner`] over the
    /// caches): the only owners the owner integration gives a Workload and a PodGroup, so that no other owner of the
    /// same pods gets a group they never join.
    pub fn is_group_owner(&self, owner: &owners::OwnerRef) -> bool {
        let ix = self.hierarchy();
        owners::is_group_owner(
            owner,
            |o| self.inner.shared.lookup_owner(o),
            |o| ix.group_of_owner(&o.namespace, &o.uid, None),
        )
    }

    /// Pods that name the PodGroup `group`, bound or not.
    pub fn group_members(&self, group: &GroupKey) -> Vec<Arc<PodRecord>> {
        let keys = self.hierarchy().members(group);
        keys.iter().filter_map(|k| self.pod(k)).collect()
    }

    /// Facts about a group for hierarchy validation; `None` if the object is not cached.
    pub fn group_node(&self, key: &GroupKey) -> Option<GroupNode> {
        match key.kind {
            GroupKind::PodGroup => self
                .pod_group_at(key)
                .map(|g| group_hooks::pod_group_node(&g, key.api)),
            GroupKind::CompositePodGroup => self
                .composite_pod_group_at(key)
                .map(|g| group_hooks::composite_node(&g, key.api)),
        }
    }

    fn assumed_cache(&self) -> MutexGuard<'_, AssumeCache> {
        self.inner.shared.assumed()
    }

    /// Assumes `pod` on `node`: it counts there until the watch confirms it or it is forgotten (never by time,
    /// `crate::assumed`).
    pub fn assume(&self, pod: Arc<PodRecord>, node: &str) {
        let key = pod.key().clone();
        self.assumed_cache().assume(key, pod, node.to_owned());
    }

    /// Starts a read of bound pods from the API server (a LIST the watch may be ahead of or behind): pods it shows
    /// are assumed through the returned [`ListedAssumptions`], which refuses those the watch deleted since this call
    /// (see [`crate::assumed`]). Call before the LIST is sent; the record ends when the value is dropped.
    pub fn begin_listed_assumptions(&self) -> ListedAssumptions {
        self.assumed_cache().begin_listed();
        ListedAssumptions { store: self.clone() }
    }

    /// The bind for `key` returned: start the expiry timer of its assumption.
    pub fn finish_binding(&self, key: &PodKey) {
        self.assumed_cache().finish_binding(key, Instant::now());
    }

    /// Drops the assumption for `key`; returns whether there was one.
    pub fn forget(&self, key: &PodKey) -> bool {
        self.assumed_cache().forget(key)
    }

    /// Current assumptions.
    pub fn assumed(&self) -> Vec<(PodKey, AssumedPod)> {
        self.assumed_cache().all()
    }

    /// The assumption for `key`, if any (the pod object as assumed, and its node).
    pub fn assumed_pod(&self, key: &PodKey) -> Option<AssumedPod> {
        self.assumed_cache().get(key).cloned()
    }

    /// The node `key` is assumed on, if any.
    pub fn assumed_node(&self, key: &PodKey) -> Option<String> {
        self.assumed_cache().get(key).map(|a| a.node.clone())
    }
}

/// A read of bound pods under way ([`Store::begin_listed_assumptions`]).
#[must_use = "the deletions are recorded only while this value lives"]
pub struct ListedAssumptions {
    store: Store,
}

impl ListedAssumptions {
    /// Assumes `pod`, read bound to `node`, unless the watch deleted it since the read began. Returns whether it
    /// was assumed.
    pub fn assume(&self, pod: Arc<PodRecord>, node: &str) -> bool {
        let key = pod.key().clone();
        self.store
            .assumed_cache()
            .assume_listed(key, pod, node.to_owned())
    }
}

impl Drop for ListedAssumptions {
    fn drop(&mut self) {
        self.store.assumed_cache().end_listed();
    }
}

/// `phalanx`'s objects then `upstream`'s, each with its [`GroupKey`]: `key(namespace, name)` with the API group set.
fn keyed_by_api<K: kube::Resource>(
    phalanx: Vec<Arc<K>>,
    upstream: Vec<Arc<K>>,
    key: fn(&str, &str) -> GroupKey,
) -> Vec<(GroupKey, Arc<K>)> {
    let of = |api: GroupApi, g: Arc<K>| {
        let at = key(
            &g.meta().namespace.clone().unwrap_or_default(),
            &kube::ResourceExt::name_any(&*g),
        );
        (GroupKey { api, ..at }, g)
    };
    let phalanx = phalanx.into_iter().map(|g| of(GroupApi::Phalanx, g));
    phalanx
        .chain(upstream.into_iter().map(|g| of(GroupApi::Upstream, g)))
        .collect()
}
