//! One kind's cache: the watch loop that feeds a reflector store and runs the kind's hook on every event
//! ([`watch_kind`], [`watch_converted`]), which kinds a refused list does not hold readiness for ([`Tolerate`]),
//! and a cache filled once from a fixed list ([`reader`]). Below the live store's wiring ([`crate::reflectors`]),
//! the DRA caches ([`crate::dra`]) and the store over a fixed state ([`crate::fixed`]), which all build on it
//! without importing each other.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::{
    Api, Resource,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store as Reader, store::Writer},
        watcher,
    },
};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::{Shared, StoreEvent};

/// What one kind does with each watch event after the reflector applied it.
pub(crate) type Hook<K> = Box<dyn Fn(&watcher::Event<K>, &Reader<K>, &Shared) + Send + Sync>;

/// Which kinds a refused list (403) does not hold readiness for, and what the store says then.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tolerate {
    /// A refused list is a watch error like any other: the kind stays unready while the watcher retries.
    No,
    /// A storage kind of [`crate::volumes::VolumeReaders`] ([`crate::Store::unreadable_storage`]).
    Storage,
    /// A Dynamic Resource Allocation kind of [`crate::dra::DraReaders`] ([`crate::Store::unreadable_devices`]).
    Devices,
}

impl Tolerate {
    /// The set of unreadable plurals this kind is recorded in; `None` for [`Tolerate::No`].
    fn set(self, shared: &Shared) -> Option<&Mutex<std::collections::BTreeSet<String>>> {
        match self {
            Tolerate::No => None,
            Tolerate::Storage => Some(&shared.forbidden),
            Tolerate::Devices => Some(&shared.forbidden_devices),
        }
    }
}

/// Records whether a tolerant kind (`plural`) may be listed; true when that changed.
fn set_forbidden(shared: &Shared, tolerate: Tolerate, plural: &str, forbidden: bool) -> bool {
    let Some(set) = tolerate.set(shared) else {
        return false;
    };
    let mut set = set.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if forbidden {
        set.insert(plural.to_owned())
    } else {
        set.remove(plural)
    }
}

/// The loop of one kind's watch: `spawn_with` of [`crate::reflectors`] runs it in a task, the DRA kinds
/// ([`crate::dra`]) in a task of their own.
pub(crate) async fn watch_kind<K>(
    (r, writer): (Reader<K>, Writer<K>),
    api: Api<K>,
    wc: watcher::Config,
    shared: Arc<Shared>,
    ready_tx: watch::Sender<usize>,
    (hook, slim, tolerate): (Hook<K>, fn(&mut K), Tolerate),
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let convert = move |mut o: K, _: &Reader<K>| {
        slim(&mut o);
        o
    };
    watch_converted((r, writer), api, wc, shared, ready_tx, (hook, convert, tolerate)).await;
}

/// [`watch_kind`] for a cache of records of another type than the watched kind (the pods' [`PodRecord`]s):
/// `convert` turns each watched object into its record, seeing the cache as it was before the event.
pub(crate) async fn watch_converted<K, R, F>(
    (r, mut writer): (Reader<R>, Writer<R>),
    api: Api<K>,
    wc: watcher::Config,
    shared: Arc<Shared>,
    ready_tx: watch::Sender<usize>,
    (hook, convert, tolerate): (Hook<R>, F, Tolerate),
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    R: reflector::Lookup<DynamicType = ()> + Clone + Send + Sync + 'static,
    F: Fn(K, &Reader<R>) -> R + Send,
{
    let kind = K::kind(&()).to_string();
    let plural = K::plural(&()).to_string();
    let mut counted = false;
    let stream = watcher(api, wc).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        match item.map(|ev| convert_event(ev, |o| convert(o, &r))) {
            Ok(ev) => {
                writer.apply_watcher_event(&ev);
                if matches!(ev, watcher::Event::InitDone) && set_forbidden(&shared, tolerate, &plural, false)
                {
                    tracing::info!(kind, "{plural} readable again");
                }
                hook(&ev, &r, &shared);
                if matches!(ev, watcher::Event::InitDone) && !counted {
                    counted = true;
                    ready_tx.send_modify(|n| *n += 1);
                    tracing::debug!(kind, objects = r.len(), "cache synced");
                }
            }
            // Without the storage RBAC (a hand-made ClusterRole from before volumes, `rbac.create=false`) the
            // scheduler still schedules pods without volumes; the watch retries with backoff meanwhile. Likewise
            // without the DRA RBAC for pods without resource claims.
            Err(watcher::Error::InitialListFailed(kube::Error::Api(st)))
                if tolerate != Tolerate::No && st.code == 403 =>
            {
                if set_forbidden(&shared, tolerate, &plural, true) {
                    let (waiting, event) = match tolerate {
                        Tolerate::Devices => ("pods with resource claims", StoreEvent::Devices),
                        _ => ("pods with volumes", StoreEvent::Volume),
                    };
                    tracing::warn!(
                        kind,
                        "may not list {plural}: {waiting} wait until the scheduler's ServiceAccount may get, list \
                         and watch it (see the chart's ClusterRole)"
                    );
                    shared.publish(event);
                }
                if !counted {
                    counted = true;
                    ready_tx.send_modify(|n| *n += 1);
                }
            }
            // Errors are stream items; the watcher retries with backoff and the stream continues.
            Err(e) => tracing::warn!(kind, error = %e, "watch error, retrying"),
        }
    }
}

/// One watch event with its object converted by `f`.
fn convert_event<K, R>(ev: watcher::Event<K>, f: impl Fn(K) -> R) -> watcher::Event<R> {
    match ev {
        watcher::Event::Apply(o) => watcher::Event::Apply(f(o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(f(o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(f(o)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// A reader holding exactly `objects`, as after a complete list.
pub(crate) fn reader<K>(objects: Vec<K>) -> reflector::Store<K>
where
    K: reflector::Lookup<DynamicType = ()> + Clone + 'static,
{
    let mut w = reflector::store::Writer::<K>::default();
    w.apply_watcher_event(&watcher::Event::Init);
    for o in objects {
        w.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    w.apply_watcher_event(&watcher::Event::InitDone);
    w.as_reader()
}
