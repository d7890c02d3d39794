//! Wiring of kube watchers into the reflector stores, the indexes and the notification channel.
//!
//! Each kind runs `watcher(..).default_backoff().modify(slim).reflect(writer)` in its own task (`slim` drops what
//! nothing reads, see [`crate::slim`]). The
//! stream is polled by that task before anyone awaits readiness (awaiting first deadlocks: `kube::runtime::reflector::Store::wait_until_ready` is fed only by the stream). The
//! per-event hook runs after the reflector applied the event, so at `InitDone` the reader already holds the full
//! relisted state and the indexes are rebuilt from it (a `Delete` may be missed across a relist: kube-rs's watcher
//! reports a relist as `Init`/`InitApply`/`InitDone`, not as deletes).

use std::{
    fmt::Debug,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

use futures::StreamExt;
use k8s_openapi::api::{
    apps::v1::{Deployment, ReplicaSet, StatefulSet},
    batch::v1::Job,
    core::v1::{Node, Pod},
    policy::v1::PodDisruptionBudget,
    scheduling::v1::PriorityClass,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        WatchStreamExt,
        reflector::{self, ObjectRef, Store as Reader, store::Writer},
        watcher,
    },
};
use phalanx_api::{
    v1alpha3::CompositePodGroup,
    v1beta1::{PodGroup, Workload},
};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};

use crate::group_hooks::{composite_hook, pod_group_hook};
use crate::kind_watch::{Hook, Tolerate, watch_converted, watch_kind};
use crate::{
    AssumeCache, ClusterIndex, GroupApi, Inner, PodKey, Shared, Store, StoreConfig, StoreEvent,
    owners::{Lookup, OwnerRef},
    record::{NodeRecord, PodRecord},
};

/// Metadata-only caches of the built-in owners ([`owners::WATCHED_OWNERS`]).
pub(crate) struct OwnerReaders {
    jobs: Reader<PartialObjectMeta<Job>>,
    replica_sets: Reader<PartialObjectMeta<ReplicaSet>>,
    deployments: Reader<PartialObjectMeta<Deployment>>,
    stateful_sets: Reader<PartialObjectMeta<StatefulSet>>,
}

impl OwnerReaders {
    /// Readers holding exactly the built-in owners among `objects` (a store over a fixed state,
    /// [`crate::Store::from_state`]); objects of other kinds are left to the custom-owner caches.
    pub(crate) fn from_objects(objects: &[crate::OwnerObject]) -> Self {
        fn ready<K: Resource<DynamicType = ()> + Clone + 'static>(
            objects: &[crate::OwnerObject],
        ) -> Reader<PartialObjectMeta<K>> {
            use kube::core::PartialObjectMetaExt as _;
            let mut w = reflector::store::Writer::<PartialObjectMeta<K>>::default();
            w.apply_watcher_event(&watcher::Event::Init);
            for o in objects
                .iter()
                .filter(|o| o.api_version == K::api_version(&()) && o.kind == K::kind(&()))
            {
                w.apply_watcher_event(&watcher::Event::InitApply(
                    o.metadata.clone().into_response_partial::<K>(),
                ));
            }
            w.apply_watcher_event(&watcher::Event::InitDone);
            w.as_reader()
        }
        OwnerReaders {
            jobs: ready(objects),
            replica_sets: ready(objects),
            deployments: ready(objects),
            stateful_sets: ready(objects),
        }
    }

    /// Every cached owner whose annotations ask for a gang ([`phalanx_api::owners::wants_gang`]). Not all of them
    /// get a group: [`crate::Store::annotated_owners`] keeps the group owners ([`crate::owners::is_group_owner`]).
    pub(crate) fn annotated(&self) -> Vec<OwnerRef> {
        fn of<K: Resource<DynamicType = ()> + Clone>(
            r: &Reader<PartialObjectMeta<K>>,
            out: &mut Vec<OwnerRef>,
        ) {
            for m in r.state() {
                if phalanx_api::owners::wants_gang(m.metadata.annotations.as_ref()) {
                    out.push(OwnerRef {
                        api_version: K::api_version(&()).to_string(),
                        kind: K::kind(&()).to_string(),
                        namespace: m.namespace().unwrap_or_default(),
                        name: m.name_any(),
                        uid: m.uid().unwrap_or_default(),
                    });
                }
            }
        }
        let mut out = Vec::new();
        of(&self.jobs, &mut out);
        of(&self.replica_sets, &mut out);
        of(&self.deployments, &mut out);
        of(&self.stateful_sets, &mut out);
        out
    }

    /// What the caches know of one owner reference; a cached object with another uid (deleted and re-created
    /// under the same name) counts as missing.
    pub(crate) fn lookup(&self, o: &OwnerRef) -> Lookup {
        fn get<K: Resource<DynamicType = ()> + Clone>(
            r: &Reader<PartialObjectMeta<K>>,
            o: &OwnerRef,
        ) -> Lookup {
            match r.get(&ObjectRef::new(&o.name).within(&o.namespace)) {
                Some(m) if m.metadata.uid.as_deref() == Some(o.uid.as_str()) => {
                    Lookup::Found(Box::new(m.metadata.clone()))
                }
                _ => Lookup::Missing,
            }
        }
        match (o.api_version.as_str(), o.kind.as_str()) {
            ("batch/v1", "Job") => get(&self.jobs, o),
            ("apps/v1", "ReplicaSet") => get(&self.replica_sets, o),
            ("apps/v1", "Deployment") => get(&self.deployments, o),
            ("apps/v1", "StatefulSet") => get(&self.stateful_sets, o),
            // Custom kinds: see Shared::lookup_owner (crate::custom_owners).
            _ => Lookup::NotWatched,
        }
    }
}

pub(crate) fn start(client: Client, config: StoreConfig) -> Store {
    let (events, _) = broadcast::channel(config.event_buffer.max(16));
    let (pods_reader, pods_writer) = reflector::store::<PodRecord>();
    let (jobs, jobs_w) = reflector::store();
    let (replica_sets, replica_sets_w) = reflector::store();
    let (deployments, deployments_w) = reflector::store();
    let (stateful_sets, stateful_sets_w) = reflector::store();
    let (custom, custom_requests) = crate::custom_owners::CustomOwners::new();
    let shared = Arc::new(Shared {
        index: RwLock::new(ClusterIndex::default()),
        assumed: Mutex::new(AssumeCache::new()),
        events,
        pods: pods_reader.clone(),
        owners: OwnerReaders {
            jobs,
            replica_sets,
            deployments,
            stateful_sets,
        },
        custom,
        forbidden: Mutex::new(Default::default()),
        forbidden_devices: Mutex::new(Default::default()),
        dra_served: AtomicBool::new(false),
        upstream_groups: AtomicBool::new(false),
        upstream_composites: AtomicBool::new(false),
        upstream_composites_beta: AtomicBool::new(false),
        ready_target: AtomicUsize::new(crate::KINDS),
    });
    let (ready_tx, ready) = watch::channel(0usize);
    let wc = watcher::Config::default()
        .page_size(config.page_size)
        .any_semantic();
    let mut tasks = Vec::new();

    // Nodes too are cached as records (the scheduler's model); a heartbeat keeps the model already shared.
    let to_node_record = |n: Node, cached: &Reader<NodeRecord>| {
        let record = NodeRecord::from_node(&n);
        match cached.get(&ObjectRef::new(&record.name)) {
            Some(previous) => record.sharing_model_of(&previous),
            None => record,
        }
    };
    let (nodes, nodes_writer) = reflector::store::<NodeRecord>();
    let task = tokio::spawn(watch_converted::<Node, NodeRecord, _>(
        (nodes.clone(), nodes_writer),
        Api::all(client.clone()),
        wc.clone(),
        shared.clone(),
        ready_tx.clone(),
        (Box::new(node_hook), to_node_record, Tolerate::No),
    ));
    tasks.push(task.abort_handle());
    // Upstream's PodGroups are discovered before the pods are watched: a pod's `spec.schedulingGroup` names one of
    // them only where they are served (`crate::record::group_of`).
    let (upstream, mut upstream_decided) =
        crate::upstream::spawn(&client, &wc, &shared, &ready_tx, &mut tasks);
    // Pods are cached as records (see `crate::record`); a status-only update keeps the model already shared.
    let interner = std::cell::RefCell::new(crate::intern::Interner::default());
    let upstream_shared = shared.clone();
    let to_record = move |p: Pod, cached: &Reader<PodRecord>| {
        let upstream = upstream_shared.upstream_groups.load(Ordering::SeqCst);
        let record = PodRecord::from_pod_shared(&p, &mut interner.borrow_mut(), upstream);
        match cached.get(&ObjectRef::new(record.name()).within(record.namespace())) {
            Some(previous) => record.sharing_model_of(&previous),
            None => record,
        }
    };
    let pods = pods_reader.clone();
    let pod_watch = watch_converted::<Pod, PodRecord, _>(
        (pods_reader, pods_writer),
        Api::all(client.clone()),
        wc.clone(),
        shared.clone(),
        ready_tx.clone(),
        (Box::new(pod_hook), to_record, Tolerate::No),
    );
    let task = tokio::spawn(async move {
        // The sender lives in the discovery task, which decides before it ends (at most the discovery patience).
        let _ = upstream_decided.wait_for(Option::is_some).await;
        pod_watch.await;
    });
    tasks.push(task.abort_handle());
    spawn_owner::<Job>(
        jobs_w,
        Api::all(client.clone()),
        &wc,
        &shared,
        &ready_tx,
        &mut tasks,
    );
    spawn_owner::<ReplicaSet>(
        replica_sets_w,
        Api::all(client.clone()),
        &wc,
        &shared,
        &ready_tx,
        &mut tasks,
    );
    spawn_owner::<Deployment>(
        deployments_w,
        Api::all(client.clone()),
        &wc,
        &shared,
        &ready_tx,
        &mut tasks,
    );
    spawn_owner::<StatefulSet>(
        stateful_sets_w,
        Api::all(client.clone()),
        &wc,
        &shared,
        &ready_tx,
        &mut tasks,
    );
    // Custom owner kinds are watched on demand and do not count for readiness (crate::custom_owners).
    let custom_task = tokio::spawn(crate::custom_owners::run(
        client.clone(),
        wc.clone(),
        shared.clone(),
        custom_requests,
    ));
    tasks.push(custom_task.abort_handle());
    let pod_groups = spawn_with(
        reflector::store::<PodGroup>(),
        Api::all(client.clone()),
        wc.clone(),
        &shared,
        &ready_tx,
        &mut tasks,
        (
            Box::new(|ev, r, s| pod_group_hook(ev, r, s, GroupApi::Phalanx)),
            crate::slim::group_managed_fields::<PodGroup>,
            Tolerate::No,
        ),
    );
    let composite_pod_groups = spawn_with(
        reflector::store::<CompositePodGroup>(),
        Api::all(client.clone()),
        wc.clone(),
        &shared,
        &ready_tx,
        &mut tasks,
        (
            Box::new(|ev, r, s| composite_hook(ev, r, s, GroupApi::Phalanx)),
            crate::slim::group_managed_fields::<CompositePodGroup>,
            Tolerate::No,
        ),
    );
    let workloads = spawn::<Workload>(
        Api::all(client.clone()),
        wc.clone(),
        &shared,
        &ready_tx,
        &mut tasks,
        Box::new(other_hook),
    );
    let priority_classes = spawn::<PriorityClass>(
        Api::all(client.clone()),
        wc.clone(),
        &shared,
        &ready_tx,
        &mut tasks,
        Box::new(other_hook),
    );
    let pdbs = spawn::<PodDisruptionBudget>(
        Api::all(client.clone()),
        wc.clone(),
        &shared,
        &ready_tx,
        &mut tasks,
        Box::new(other_hook),
    );
    let volumes = crate::volumes::VolumeReaders {
        claims: spawn_storage(
            &client,
            &wc,
            &shared,
            &ready_tx,
            &mut tasks,
            crate::slim::storage_object,
        ),
        volumes: spawn_storage(
            &client,
            &wc,
            &shared,
            &ready_tx,
            &mut tasks,
            crate::slim::storage_object,
        ),
        classes: spawn_storage(
            &client,
            &wc,
            &shared,
            &ready_tx,
            &mut tasks,
            crate::slim::storage_object,
        ),
        csi_nodes: spawn_storage(
            &client,
            &wc,
            &shared,
            &ready_tx,
            &mut tasks,
            crate::slim::csi_node,
        ),
        csi_drivers: spawn_storage(
            &client,
            &wc,
            &shared,
            &ready_tx,
            &mut tasks,
            crate::slim::storage_object,
        ),
        capacities: spawn_storage(
            &client,
            &wc,
            &shared,
            &ready_tx,
            &mut tasks,
            crate::slim::storage_object,
        ),
    };
    let dra = crate::dra::spawn(&client, &wc, &shared, &ready_tx, &mut tasks);

    Store {
        inner: Arc::new(Inner {
            nodes,
            pods,
            pod_groups,
            upstream,
            composite_pod_groups,
            workloads,
            priority_classes,
            pdbs,
            volumes,
            dra,
            shared,
            ready,
            tasks,
        }),
    }
}

fn spawn<K>(
    api: Api<K>,
    wc: watcher::Config,
    shared: &Arc<Shared>,
    ready_tx: &watch::Sender<usize>,
    tasks: &mut Vec<tokio::task::AbortHandle>,
    hook: Hook<K>,
) -> Reader<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let on = (hook, crate::slim::managed_fields::<K> as fn(&mut K), Tolerate::No);
    spawn_with(reflector::store::<K>(), api, wc, shared, ready_tx, tasks, on)
}

/// Watches one storage kind of [`crate::volumes::VolumeReaders`], cluster-wide, slimmed by `slim`; every change is a
/// [`StoreEvent::Volume`].
fn spawn_storage<K>(
    client: &Client,
    wc: &watcher::Config,
    shared: &Arc<Shared>,
    ready_tx: &watch::Sender<usize>,
    tasks: &mut Vec<tokio::task::AbortHandle>,
    slim: fn(&mut K),
) -> Reader<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let on = (Box::new(volume_hook) as Hook<K>, slim, Tolerate::Storage);
    let api = Api::all(client.clone());
    spawn_with(
        reflector::store::<K>(),
        api,
        wc.clone(),
        shared,
        ready_tx,
        tasks,
        on,
    )
}

/// Watches the metadata of one built-in owner kind: each change re-resolves the pods whose owner chain went
/// through that object and is published as [`StoreEvent::Owner`].
fn spawn_owner<K>(
    writer: Writer<PartialObjectMeta<K>>,
    api: Api<PartialObjectMeta<K>>,
    wc: &watcher::Config,
    shared: &Arc<Shared>,
    ready_tx: &watch::Sender<usize>,
    tasks: &mut Vec<tokio::task::AbortHandle>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let shared = shared.clone();
    let ready_tx = ready_tx.clone();
    let wc = wc.clone();
    let kind = K::kind(&()).to_string();
    let api_version = K::api_version(&()).to_string();
    let task = tokio::spawn(async move {
        let mut counted = false;
        let stream = watcher(api, wc)
            .default_backoff()
            .modify(|o: &mut PartialObjectMeta<K>| o.managed_fields_mut().clear())
            .reflect(writer);
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => {
                    let owner = OwnerRef {
                        api_version: api_version.clone(),
                        kind: kind.clone(),
                        namespace: o.namespace().unwrap_or_default(),
                        name: o.name_any(),
                        uid: o.uid().unwrap_or_default(),
                    };
                    shared.reresolve_owner(&owner.uid);
                    shared.publish(StoreEvent::Owner(owner));
                }
                Ok(watcher::Event::InitDone) => {
                    shared.reresolve_all();
                    shared.publish(StoreEvent::Resync);
                    if !counted {
                        counted = true;
                        ready_tx.send_modify(|n| *n += 1);
                        tracing::debug!(kind, "owner cache synced");
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(kind, error = %e, "watch error, retrying"),
            }
        }
    });
    tasks.push(task.abort_handle());
}

/// Watches one kind into `reader`/`writer`: each event goes to `hook` after the cache is updated, each object is
/// slimmed by `slim` first, and readiness is counted at the first complete list. A tolerant kind ([`Tolerate`]:
/// the storage and DRA kinds) counts as ready at a refused list (403) too, and is recorded as unreadable until a
/// list succeeds.
fn spawn_with<K>(
    (reader, writer): (Reader<K>, Writer<K>),
    api: Api<K>,
    wc: watcher::Config,
    shared: &Arc<Shared>,
    ready_tx: &watch::Sender<usize>,
    tasks: &mut Vec<tokio::task::AbortHandle>,
    on: (Hook<K>, fn(&mut K), Tolerate),
) -> Reader<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let task = tokio::spawn(watch_kind(
        (reader.clone(), writer),
        api,
        wc,
        shared.clone(),
        ready_tx.clone(),
        on,
    ));
    tasks.push(task.abort_handle());
    reader
}

fn node_hook(ev: &watcher::Event<NodeRecord>, _: &Reader<NodeRecord>, s: &Shared) {
    match ev {
        watcher::Event::Apply(n) | watcher::Event::Delete(n) => {
            s.publish(StoreEvent::Node(n.name.to_string()))
        }
        watcher::Event::InitDone => s.publish(StoreEvent::Resync),
        _ => {}
    }
}

pub(crate) fn pod_hook(ev: &watcher::Event<PodRecord>, reader: &Reader<PodRecord>, s: &Shared) {
    match ev {
        watcher::Event::Apply(p) => {
            let key = p.key().clone();
            let old_group = s.index_mut().group_of(&key);
            let (new_group, chain) = s.resolve(p);
            s.index_mut().apply_pod_resolved(p, new_group.clone(), chain);
            s.assumed().observe(&key, p);
            // A pod can own pods (an LWS leader owns its workers' StatefulSet): theirs may resolve now.
            s.reresolve_owner(p.uid());
            let group = new_group.or(old_group);
            s.publish(StoreEvent::Pod {
                key,
                group,
                node: p.node_name().map(str::to_owned),
                deleted: false,
            });
        }
        watcher::Event::Delete(p) => {
            let key = p.key().clone();
            let old_group = s.index_mut().group_of(&key);
            s.index_mut().remove_pod(&key);
            s.assumed().observe_delete(&key, p.uid());
            s.reresolve_owner(p.uid());
            s.publish(StoreEvent::Pod {
                key,
                group: old_group.or_else(|| p.group_key()),
                node: p.node_name().map(str::to_owned),
                deleted: true,
            });
        }
        watcher::Event::InitDone => {
            let pods = reader.state();
            // The pods the index still holds from before the relist and the relist no longer shows were deleted
            // meanwhile: a read of bound pods under way must not assume them (see `crate::assumed`).
            let away: Vec<PodKey> = if s.assumed().is_listing() {
                let now: std::collections::HashSet<&PodKey> = pods.iter().map(|p| p.key()).collect();
                s.index_mut()
                    .pod_keys()
                    .filter(|k| !now.contains(k))
                    .cloned()
                    .collect()
            } else {
                Vec::new()
            };
            let resolved: Vec<_> = pods
                .iter()
                .map(|p| {
                    let (g, chain) = s.resolve(p);
                    (p.as_ref(), g, chain)
                })
                .collect();
            s.index_mut().reset_pods_resolved(resolved);
            // One map lookup per assumption (not a scan of every pod), and the map is built before the assumption
            // lock is taken, so a relist of many pods holds that lock only briefly.
            let by_key: std::collections::HashMap<&PodKey, &PodRecord> =
                pods.iter().map(|p| (p.key(), p.as_ref())).collect();
            let mut assumed = s.assumed();
            for (key, a) in assumed.all() {
                match by_key.get(&key) {
                    Some(p) => assumed.observe(&key, p),
                    None => assumed.observe_delete(&key, &a.uid),
                }
            }
            assumed.observe_relisted_away(away);
            drop(assumed);
            s.publish(StoreEvent::Resync);
        }
        watcher::Event::Init | watcher::Event::InitApply(_) => {}
    }
}

fn volume_hook<K: Resource<DynamicType = ()> + Clone>(ev: &watcher::Event<K>, _: &Reader<K>, s: &Shared) {
    match ev {
        watcher::Event::Apply(_) | watcher::Event::Delete(_) => s.publish(StoreEvent::Volume),
        watcher::Event::InitDone => s.publish(StoreEvent::Resync),
        _ => {}
    }
}

fn other_hook<K: Resource<DynamicType = ()> + Clone>(ev: &watcher::Event<K>, _: &Reader<K>, s: &Shared) {
    match ev {
        watcher::Event::Apply(_) | watcher::Event::Delete(_) => s.publish(StoreEvent::Other),
        watcher::Event::InitDone => s.publish(StoreEvent::Resync),
        _ => {}
    }
}
