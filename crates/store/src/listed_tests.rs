//! Tests of the read of bound pods a new leader makes ([`crate::Store::begin_listed_assumptions`]) against the
//! watch's deletions, driven through the pod watch's hook as the reflector calls it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use kube::{api::ObjectMeta, runtime::watcher};

use crate::{PodKey, PodRecord, reflectors::pod_hook};

fn bound(name: &str, uid: &str, node: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn record(p: &Pod) -> Arc<PodRecord> {
    Arc::new(PodRecord::from_pod(p))
}

/// Issue 35: a new leader's fresh LIST of bound pods showed four pods that their namespace's deletion removed
/// before the page was handled. The watch had delivered their deletions already, the pods were assumed anyway,
/// and nothing ever ended those assumptions: their room stayed taken, and the preemptors that chose them as
/// victims (nothing to evict: they were gone) waited for deletions that had happened. A pod the watch deleted
/// after the read began is not assumed, whether the watch showed the delete or a relist dropped it.
#[test]
fn a_listed_pod_the_watch_deleted_meanwhile_is_not_assumed() {
    let (gone, kept, relisted) = (
        bound("gone", "u-gone", "n1"),
        bound("kept", "u-kept", "n2"),
        bound("relisted", "u-rel", "n3"),
    );
    let store = crate::Store::from_state(crate::ClusterState {
        pods: vec![gone.clone(), kept.clone(), relisted.clone()],
        ..Default::default()
    });
    let shared = store.inner.shared.clone();
    let key = |n: &str| PodKey::new("ns", n);

    // Before the fix the read assumed with `Store::assume`: the watch's delete came first, so nothing ends it.
    store.assume(record(&gone), "n1");
    assert!(store.assumed_node(&key("gone")).is_some());
    store.forget(&key("gone"));

    let listed = store.begin_listed_assumptions();
    // The LIST is served with all three; then the watch deletes `gone`, and a relist no longer shows `relisted`.
    pod_hook(
        &watcher::Event::Delete((*record(&gone)).clone()),
        &store.inner.pods,
        &shared,
    );
    let after_relist = crate::kind_watch::reader(vec![(*record(&gone)).clone(), (*record(&kept)).clone()]);
    pod_hook(&watcher::Event::InitDone, &after_relist, &shared);
    // Only then is the page handled.
    assert!(!listed.assume(record(&gone), "n1"), "deleted by the watch");
    assert!(!listed.assume(record(&relisted), "n3"), "dropped by a relist");
    assert!(listed.assume(record(&kept), "n2"), "still there");
    assert_eq!(store.assumed_node(&key("gone")), None);
    assert_eq!(store.assumed_node(&key("relisted")), None);
    assert_eq!(store.assumed_node(&key("kept")).as_deref(), Some("n2"));
    // A deletion the watch shows after the assumption ends it as before.
    pod_hook(
        &watcher::Event::Delete((*record(&kept)).clone()),
        &store.inner.pods,
        &shared,
    );
    assert_eq!(store.assumed_node(&key("kept")), None);
    drop(listed);

    // The record lasts only as long as a read: nothing is remembered once it ends.
    let shared_cache = shared.assumed();
    assert!(!shared_cache.is_listing());
    drop(shared_cache);
    pod_hook(
        &watcher::Event::Delete((*record(&relisted)).clone()),
        &store.inner.pods,
        &shared,
    );
    let again = store.begin_listed_assumptions();
    assert!(
        again.assume(record(&gone), "n1"),
        "a later read starts with an empty record"
    );
}
