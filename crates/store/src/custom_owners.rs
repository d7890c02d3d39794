//! Metadata caches of custom-resource owners (JobSet, LeaderWorkerSet, PyTorchJob, ...), started on demand.
//!
//! The first time a pod's owner chain reaches a kind the store does not watch, the store starts a metadata-only
//! watch of that kind (its resource found by discovery) and, until that watch has listed once, answers
//! [`Lookup::Missing`] for it: the pod waits (under its owner's derived group name) instead of being scheduled alone
//! before the store knows whether the owner is annotated. When the list is done every pod is resolved again. A kind
//! the API does not serve, or that the ServiceAccount may not list and watch (RBAC), becomes
//! [`Lookup::NotWatched`]: its pods then join only a PodGroup already labelled with their owner's uid.
//!
//! Follows the dynamic-informer pattern of upstream's garbage collector (`pkg/controller/garbagecollector`, which
//! starts a metadata informer per discovered resource) and KAI-Scheduler's pod-grouper (which reads a pod's top
//! owner of any kind).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store as Reader, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;

use crate::owners::{Lookup, OwnerRef};
use crate::{Shared, StoreEvent};

/// `(apiVersion, kind)` of an owner reference.
type KindKey = (String, String);

/// State of one custom kind's cache.
#[derive(Clone)]
enum KindCache {
    /// Discovery or the first list is running: lookups answer `Missing` (pods wait).
    Starting,
    /// Listed: lookups answer from the cache.
    Synced(Reader<PartialObjectMeta<DynamicObject>>, ApiResource),
    /// Not served, or not readable with our RBAC: lookups answer `NotWatched`.
    Unavailable,
}

/// The custom kinds seen so far and the channel that starts a watch for a new one.
pub(crate) struct CustomOwners {
    kinds: RwLock<HashMap<KindKey, KindCache>>,
    start: mpsc::UnboundedSender<KindKey>,
}

impl CustomOwners {
    /// A set with no kinds, and the receiver that [`run`] serves.
    pub(crate) fn new() -> (CustomOwners, mpsc::UnboundedReceiver<KindKey>) {
        let (start, rx) = mpsc::unbounded_channel();
        (
            CustomOwners {
                kinds: RwLock::default(),
                start,
            },
            rx,
        )
    }

    fn set(&self, key: KindKey, state: KindCache) {
        self.kinds
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, state);
    }

    /// What the cache of `o`'s kind knows of `o`; the first lookup of a kind starts its watch.
    pub(crate) fn lookup(&self, o: &OwnerRef) -> Lookup {
        let key = (o.api_version.clone(), o.kind.clone());
        let state = self
            .kinds
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
            .cloned();
        match state {
            None => {
                self.set(key.clone(), KindCache::Starting);
                let _ = self.start.send(key);
                Lookup::Missing
            }
            Some(KindCache::Starting) => Lookup::Missing,
            Some(KindCache::Unavailable) => Lookup::NotWatched,
            Some(KindCache::Synced(r, ar)) => {
                match r.get(&ObjectRef::new_with(&o.name, ar).within(&o.namespace)) {
                    Some(m) if m.metadata.uid.as_deref() == Some(o.uid.as_str()) => {
                        Lookup::Found(Box::new(m.metadata.clone()))
                    }
                    _ => Lookup::Missing,
                }
            }
        }
    }
}

/// Serves watch requests for new custom kinds until the store is dropped (its tasks are aborted then).
pub(crate) async fn run(
    client: Client,
    wc: watcher::Config,
    shared: Arc<Shared>,
    mut requests: mpsc::UnboundedReceiver<KindKey>,
) {
    // The watches live in this set: when the store is dropped this task is aborted and the set aborts them.
    let mut watches = tokio::task::JoinSet::new();
    while let Some(key) = requests.recv().await {
        let (api_version, kind) = key.clone();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &kind);
        match kube::discovery::pinned_kind(&client, &gvk).await {
            Ok((ar, _)) => {
                watches.spawn(watch_kind(client.clone(), wc.clone(), shared.clone(), key, ar));
            }
            Err(e) => {
                tracing::info!(api_version, kind, error = %e, "owner kind not served; its pods join only labelled groups");
                shared.custom.set(key, KindCache::Unavailable);
                shared.reresolve_all();
            }
        }
    }
}

async fn watch_kind(client: Client, wc: watcher::Config, shared: Arc<Shared>, key: KindKey, ar: ApiResource) {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &ar);
    let writer: Writer<PartialObjectMeta<DynamicObject>> = Writer::new(ar.clone());
    let reader = writer.as_reader();
    let stream = watcher(api, wc)
        .default_backoff()
        .modify(|o: &mut PartialObjectMeta<DynamicObject>| o.managed_fields_mut().clear())
        .reflect(writer);
    let mut stream = std::pin::pin!(stream);
    let mut synced = false;
    while let Some(item) = stream.next().await {
        match item {
            Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) if synced => {
                let owner = OwnerRef {
                    api_version: key.0.clone(),
                    kind: key.1.clone(),
                    namespace: o.namespace().unwrap_or_default(),
                    name: o.name_any(),
                    uid: o.uid().unwrap_or_default(),
                };
                shared.reresolve_owner(&owner.uid);
                shared.publish(StoreEvent::Owner(owner));
            }
            Ok(watcher::Event::InitDone) => {
                synced = true;
                shared
                    .custom
                    .set(key.clone(), KindCache::Synced(reader.clone(), ar.clone()));
                shared.reresolve_all();
                shared.publish(StoreEvent::Resync);
            }
            Ok(_) => {}
            Err(e) if !synced && is_forbidden(&e) => {
                tracing::warn!(api_version = %key.0, kind = %key.1, error = %e,
                    "cannot list/watch this owner kind (RBAC); its pods join only labelled groups");
                shared.custom.set(key, KindCache::Unavailable);
                shared.reresolve_all();
                return;
            }
            Err(e) => {
                tracing::warn!(api_version = %key.0, kind = %key.1, error = %e, "watch error, retrying")
            }
        }
    }
}

fn is_forbidden(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 403 || s.code == 404,
        _ => false,
    }
}
