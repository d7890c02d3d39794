//! The owner-uid link between a custom owner's pods and their PodGroup is namespaced, against a real control plane
//! (phalanx-testenv): a PodGroup in one namespace labelled with the uid of an owner in another namespace does not
//! take that owner's pods, and deleting a same-named group carrying that uid elsewhere does not unlink them
//! (issue 35, defect 8).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use phalanx_api::v1beta1::PodGroup;
use phalanx_store::{GroupKey, PodKey, Store, StoreConfig, StoreEvent};
use phalanx_testenv::{TestEnv, create_namespace, wait_for};
use serde_json::json;
use tokio::sync::broadcast::{Receiver, error::RecvError};

const T: Duration = Duration::from_secs(60);

/// A PodGroup labelled with `owner_uid` (`scheduling.phalanx.dev/owner-uid`), as the owner integration makes them.
fn labelled_group(name: &str, owner_uid: &str) -> anyhow::Result<PodGroup> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
        "metadata": { "name": name, "labels": { phalanx_api::owners::OWNER_UID_LABEL: owner_uid } },
        "spec": {
            "workloadRef": { "workloadName": name, "templateName": "t" },
            "schedulingPolicy": { "basic": {} }
        }
    }))?)
}

/// Waits for the store to publish `StoreEvent::Group(key)` while `exists` is what the index says of the group: the
/// store publishes it after the whole watch event is handled (owner label recorded or forgotten, pods re-resolved),
/// so what a test reads afterwards includes that event.
async fn group_event(
    events: &mut Receiver<StoreEvent>,
    store: &Store,
    key: &GroupKey,
    exists: bool,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Err(_) => anyhow::bail!("no Group event for {key:?} with exists={exists} within {T:?}"),
            Ok(Err(RecvError::Lagged(n))) => anyhow::bail!("the store event stream lagged by {n} events"),
            Ok(Err(RecvError::Closed)) => anyhow::bail!("the store event stream closed"),
            Ok(Ok(StoreEvent::Group(k))) if k == *key && store.hierarchy().group_exists(key) == exists => {
                return Ok(());
            }
            Ok(Ok(_)) => {}
        }
    }
}

/// A pod in namespace `b` controlled by an owner of a kind the API does not serve (so the walk ends there and the
/// pod joins the group of `b` labelled with the owner's uid) keeps `b`'s group when a PodGroup in namespace `a`
/// carries the same uid, and when a same-named group carrying it in namespace `c` is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_uid_label_links_pods_of_its_own_namespace_only() -> anyhow::Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let a = create_namespace(&client, "tenancy-a").await?;
    let b = create_namespace(&client, "tenancy-b").await?;
    let c = create_namespace(&client, "tenancy-c").await?;
    // A group/version no API serves: discovery answers 404, so the kind is not watched and the label decides.
    let api_version = format!("{b}.unserved.phalanx.dev/v1");
    let owner_uid = format!("{b}-owner-uid");

    let store = Store::start(client.clone(), StoreConfig::default());
    let mut events = store.subscribe();
    tokio::time::timeout(T, store.wait_ready()).await?;

    let groups = |ns: &str| Api::<PodGroup>::namespaced(client.clone(), ns);
    groups(&b)
        .create(&PostParams::default(), &labelled_group("own", &owner_uid)?)
        .await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "p", "ownerReferences": [{
            "apiVersion": api_version, "kind": "Thing", "name": "t", "uid": owner_uid, "controller": true }] },
        "spec": { "schedulerName": "nobody", "containers": [{ "name": "c", "image": "x" }] }
    }))?;
    Api::<Pod>::namespaced(client.clone(), &b)
        .create(&PostParams::default(), &pod)
        .await?;
    let key = PodKey::new(&b, "p");
    let own = GroupKey::pod_group(&b, "own");
    wait_for("b's pod resolved to b's labelled group", T, || async {
        Ok((store.hierarchy().group_of(&key) == Some(own.clone())).then_some(()))
    })
    .await?;

    // Namespace a labels a group of its own with b's owner uid.
    let evil = GroupKey::pod_group(&a, "evil");
    groups(&a)
        .create(&PostParams::default(), &labelled_group("evil", &owner_uid)?)
        .await?;
    group_event(&mut events, &store, &evil, true).await?;
    let seen = store.hierarchy().group_of(&key);
    assert_eq!(
        seen,
        Some(own.clone()),
        "a group in namespace {a} carrying b's owner uid re-linked b's pod"
    );

    // A same-named group carrying the uid in namespace c comes and goes.
    let same_name = GroupKey::pod_group(&c, "own");
    groups(&c)
        .create(&PostParams::default(), &labelled_group("own", &owner_uid)?)
        .await?;
    group_event(&mut events, &store, &same_name, true).await?;
    groups(&c).delete("own", &DeleteParams::default()).await?;
    group_event(&mut events, &store, &same_name, false).await?;
    let seen = store.hierarchy().group_of(&key);
    assert_eq!(
        seen,
        Some(own),
        "deleting {c}/own unlinked b's pod from its group"
    );
    Ok(())
}
