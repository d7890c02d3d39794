//! Metadata caches of custom-resource owners (JobSet, LeaderWorkerSet, PyTorchJob, ...), started on demand.
//!
//! The first time a pod's owner chain reaches a kind the store does not watch, the store starts a metadata-only
//! watch of that kind (its resource found by discovery) and, until that watch has listed once, answers
//! [`Lookup::Missing`] for it: the pod waits (under its owner's derived group name) instead of being scheduled alone
//! before the store knows whether the owner is annotated. When the list is done every pod is resolved again. A kind
//! the API does not serve, or that the ServiceAccount may not list and watch (RBAC), becomes
//! [`Lookup::NotWatched`]: its pods then join only a PodGroup already labelled with their owner's uid.
//!
//! Discovery and a refused first list are retried with an exponential backoff (1 s doubling to 5 min,
//! [`crate::retry::backoff`]), each retry logged at `warn`: a transient failure (a 503 from an aggregated API that
//! is not ready, a timeout) keeps the kind `Missing`, so its pods wait; a kind not served (yet: a CRD created a
//! moment ago) or not readable is `NotWatched` until a retry succeeds. One failed discovery therefore never disables
//! a kind for the life of the process.
//!
//! Cluster-scoped kinds are looked up by name alone (a namespaced pod may be owned by a cluster-scoped object, as the
//! garbage collector allows); their changes are published once per namespace of the pods they own, where the groups
//! live.
//!
//! Follows the dynamic-informer pattern of upstream's garbage collector (`pkg/controller/garbagecollector`, which
//! starts a metadata informer per discovered resource and re-runs discovery periodically) and KAI-Scheduler's
//! pod-grouper (which reads a pod's top owner of any kind).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind, PartialObjectMeta, PartialObjectMetaExt as _};
use kube::discovery::Scope;
use kube::runtime::reflector::{ObjectRef, Store as Reader, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;

use crate::owners::{Lookup, OwnerRef};
use crate::{OwnerKind, OwnerObject, Shared, StoreEvent};

/// `(apiVersion, kind)` of an owner reference.
type KindKey = (String, String);

/// First wait before discovery of a kind is tried again.
const RETRY_BASE: Duration = Duration::from_secs(1);
/// Longest wait between two discovery attempts.
const RETRY_MAX: Duration = Duration::from_secs(300);

/// State of one custom kind's cache.
#[derive(Clone)]
enum KindCache {
    /// Discovery or the first list is running, or is retried after a transient failure: lookups answer `Missing`
    /// (pods wait).
    Starting,
    /// Listed: lookups answer from the cache; `namespaced` is false for a cluster-scoped kind.
    Synced {
        reader: Reader<PartialObjectMeta<DynamicObject>>,
        resource: ApiResource,
        namespaced: bool,
    },
    /// Not served, or not readable with our RBAC (retried with backoff): lookups answer `NotWatched`.
    Unavailable,
}

/// The custom kinds seen so far and the channel that starts a watch for a new one.
pub(crate) struct CustomOwners {
    kinds: RwLock<HashMap<KindKey, KindCache>>,
    /// `None` in a store over a fixed state, which starts nothing: a kind it was not given is `NotWatched`, as a
    /// kind the API does not serve is in a live store.
    start: Option<mpsc::UnboundedSender<KindKey>>,
}

impl CustomOwners {
    /// A set with no kinds, and the receiver that [`run`] serves.
    pub(crate) fn new() -> (CustomOwners, mpsc::UnboundedReceiver<KindKey>) {
        let (start, rx) = mpsc::unbounded_channel();
        (
            CustomOwners {
                kinds: RwLock::default(),
                start: Some(start),
            },
            rx,
        )
    }

    /// The kinds of a fixed state ([`crate::Store::from_state`]), each listed in full, holding the `objects` of
    /// their kind.
    pub(crate) fn fixed(kinds: &[OwnerKind], objects: &[OwnerObject]) -> CustomOwners {
        let mut map = HashMap::new();
        for k in kinds {
            let (group, version) = split_api_version(&k.api_version);
            let resource =
                ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, &k.kind), &k.plural);
            let mut w: Writer<PartialObjectMeta<DynamicObject>> = Writer::new(resource.clone());
            w.apply_watcher_event(&watcher::Event::Init);
            for o in objects
                .iter()
                .filter(|o| o.api_version == k.api_version && o.kind == k.kind)
            {
                w.apply_watcher_event(&watcher::Event::InitApply(
                    o.metadata.clone().into_response_partial::<DynamicObject>(),
                ));
            }
            w.apply_watcher_event(&watcher::Event::InitDone);
            let state = KindCache::Synced {
                reader: w.as_reader(),
                resource,
                namespaced: k.namespaced,
            };
            map.insert((k.api_version.clone(), k.kind.clone()), state);
        }
        CustomOwners {
            kinds: RwLock::new(map),
            start: None,
        }
    }

    fn set(&self, key: KindKey, state: KindCache) {
        self.kinds
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, state);
    }

    fn is_unavailable(&self, key: &KindKey) -> bool {
        matches!(
            self.kinds
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(key),
            Some(KindCache::Unavailable)
        )
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
            None => match &self.start {
                Some(start) => {
                    self.set(key.clone(), KindCache::Starting);
                    let _ = start.send(key);
                    Lookup::Missing
                }
                None => Lookup::NotWatched,
            },
            Some(KindCache::Starting) => Lookup::Missing,
            Some(KindCache::Unavailable) => Lookup::NotWatched,
            Some(KindCache::Synced {
                reader,
                resource,
                namespaced,
            }) => {
                let r = ObjectRef::new_with(&o.name, resource);
                let r = if namespaced { r.within(&o.namespace) } else { r };
                match reader.get(&r) {
                    Some(m) if m.metadata.uid.as_deref() == Some(o.uid.as_str()) => {
                        Lookup::Found(Box::new(m.metadata.clone()))
                    }
                    _ => Lookup::Missing,
                }
            }
        }
    }
}

/// `(group, version)` of an `apiVersion` (`""` for the core group).
pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

/// Whether a discovery or list error says the kind is not there for us (not served, not found, or not allowed),
/// rather than that the API failed for a moment.
pub(crate) fn is_absent(e: &kube::Error) -> bool {
    match e {
        kube::Error::Discovery(_) => true,
        kube::Error::Api(s) => s.code == 403 || s.code == 404,
        _ => false,
    }
}

/// Serves watch requests for new custom kinds until the store is dropped (its tasks are aborted then).
pub(crate) async fn run(
    client: Client,
    wc: watcher::Config,
    shared: Arc<Shared>,
    mut requests: mpsc::UnboundedReceiver<KindKey>,
) {
    // The kinds' tasks live in this set: when the store is dropped this task is aborted and the set aborts them.
    let mut kinds = tokio::task::JoinSet::new();
    while let Some(key) = requests.recv().await {
        kinds.spawn(serve_kind(client.clone(), wc.clone(), shared.clone(), key));
    }
}

/// Discovers one kind and keeps its cache; discovery, and a first list the API refuses, are retried with backoff.
async fn serve_kind(client: Client, wc: watcher::Config, shared: Arc<Shared>, key: KindKey) {
    let (api_version, kind) = key.clone();
    let (group, version) = split_api_version(&api_version);
    let gvk = GroupVersionKind::gvk(group, version, &kind);
    let mut failures = 0u32;
    loop {
        let error = match kube::discovery::pinned_kind(&client, &gvk).await {
            Ok((ar, caps)) => {
                let namespaced = caps.scope == Scope::Namespaced;
                // Returns only when the first list is refused; a synced watch runs until the store is dropped.
                watch_kind(&client, &wc, &shared, &key, ar, namespaced).await
            }
            Err(e) => e,
        };
        failures = failures.saturating_add(1);
        let delay = crate::retry::backoff(RETRY_BASE, failures, RETRY_MAX);
        if is_absent(&error) {
            tracing::warn!(api_version, kind, attempt = failures, error = %error, ?delay,
                "owner kind not served or not readable; its pods join only PodGroups labelled with their owner's uid; retrying");
            if !shared.custom.is_unavailable(&key) {
                shared.custom.set(key.clone(), KindCache::Unavailable);
                shared.reresolve_all();
            }
        } else {
            // The kind stays as it was (Starting at first): its pods wait rather than be scheduled alone.
            tracing::warn!(api_version, kind, attempt = failures, error = %error, ?delay,
                "discovery of owner kind failed; retrying");
        }
        tokio::time::sleep(delay).await;
    }
}

/// Watches one discovered kind. Returns the error when its first list is refused (RBAC, or gone again); otherwise
/// runs until the store is dropped (the watcher retries with kube's default backoff).
async fn watch_kind(
    client: &Client,
    wc: &watcher::Config,
    shared: &Arc<Shared>,
    key: &KindKey,
    ar: ApiResource,
    namespaced: bool,
) -> kube::Error {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client.clone(), &ar);
    let writer: Writer<PartialObjectMeta<DynamicObject>> = Writer::new(ar.clone());
    let reader = writer.as_reader();
    let stream = watcher(api, wc.clone())
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
                owner_changed(shared, owner, namespaced);
            }
            Ok(watcher::Event::InitDone) => {
                synced = true;
                shared.custom.set(
                    key.clone(),
                    KindCache::Synced {
                        reader: reader.clone(),
                        resource: ar.clone(),
                        namespaced,
                    },
                );
                tracing::info!(api_version = %key.0, kind = %key.1, namespaced, "owner kind cache synced");
                shared.reresolve_all();
                shared.publish(StoreEvent::Resync);
            }
            Ok(_) => {}
            Err(e) => {
                let e = match refused(e) {
                    Ok(refusal) if !synced => return refusal,
                    Ok(refusal) => watcher::Error::WatchFailed(refusal),
                    Err(e) => e,
                };
                tracing::warn!(api_version = %key.0, kind = %key.1, error = %e, "watch error, retrying");
            }
        }
    }
    // The stream never ends on its own (the watcher retries); treat an end like a refusal so the kind is retried.
    kube::Error::Discovery(kube::error::DiscoveryError::MissingKind(format!(
        "{}/{}",
        key.0, key.1
    )))
}

/// Re-resolves the pods of a changed owner and publishes the change: once for a namespaced owner, once per
/// namespace of its pods for a cluster-scoped one (its groups live there).
fn owner_changed(shared: &Shared, owner: OwnerRef, namespaced: bool) {
    shared.reresolve_owner(&owner.uid);
    if namespaced {
        shared.publish(StoreEvent::Owner(owner));
        return;
    }
    let namespaces: BTreeSet<String> = shared
        .index
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .pods_of_owner(&owner.uid)
        .into_iter()
        .map(|k| k.namespace.to_string())
        .collect();
    for namespace in namespaces {
        shared.publish(StoreEvent::Owner(OwnerRef {
            namespace,
            ..owner.clone()
        }));
    }
}

/// The API error of a refused list or watch (403, or 404: the kind went away), else the error as it was.
fn refused(e: watcher::Error) -> Result<kube::Error, watcher::Error> {
    match e {
        watcher::Error::InitialListFailed(k @ kube::Error::Api(_))
        | watcher::Error::WatchStartFailed(k @ kube::Error::Api(_))
        | watcher::Error::WatchFailed(k @ kube::Error::Api(_))
            if is_absent(&k) =>
        {
            Ok(k)
        }
        other => Err(other),
    }
}
