//! The store against a real control plane (phalanx-testenv): readiness, slimming, the per-node and per-group
//! indexes, the group tree, the assume overlay confirmed by the watch, the storage and DRA caches without their
//! RBAC, and a server that does not serve DRA (a control plane of its own).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, PostParams},
};
use phalanx_api::{v1alpha3::CompositePodGroup, v1beta1::PodGroup};
use phalanx_store::{GroupKey, PodKey, Store, StoreConfig, StoreEvent};
use phalanx_testenv::{FakeNode, TestEnv, bind_pod, create_namespace, wait_for};
use serde_json::json;

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_follow_the_cluster() -> anyhow::Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let ns = create_namespace(&client, "store").await?;
    let node = format!("{ns}-n");
    FakeNode::new(&node)
        .cpu("4")
        .memory("8Gi")
        .test_namespace(&ns)
        .create(&client)
        .await?;

    let store = Store::start(client.clone(), StoreConfig::default());
    let mut events = store.subscribe();
    tokio::time::timeout(T, store.wait_ready()).await?;
    assert!(store.is_ready());

    let cpg: CompositePodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1alpha3", "kind": "CompositePodGroup",
        "metadata": { "name": "root" },
        "spec": { "workloadRef": { "workloadName": "w", "templateName": "root" }, "schedulingPolicy": { "gang": { "minGroupCount": 1 } } }
    }))?;
    Api::<CompositePodGroup>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cpg)
        .await?;
    let pg: PodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
        "metadata": { "name": "leaf" },
        "spec": {
            "parentCompositePodGroupName": "root",
            "workloadRef": { "workloadName": "w", "templateName": "leaf" },
            "schedulingPolicy": { "basic": {} }
        }
    }))?;
    Api::<PodGroup>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pg)
        .await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "p", "labels": { "scheduling.phalanx.dev/pod-group": "leaf" } },
        "spec": { "schedulerName": "nobody", "containers": [{ "name": "c", "image": "x" }] }
    }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod).await?;

    let leaf = GroupKey::pod_group(&ns, "leaf");
    let root = GroupKey::composite(&ns, "root");
    let key = PodKey::new(&ns, "p");
    wait_for("pod and groups indexed", T, || async {
        let h = store.hierarchy();
        Ok((h.members(&leaf) == vec![key.clone()] && h.children(&root) == vec![leaf.clone()]).then_some(()))
    })
    .await?;
    assert_eq!(store.hierarchy().root_of(&leaf, 8), root);
    assert_eq!(store.hierarchy().group_of(&key), Some(leaf.clone()));
    let cached = store.pod(&key).ok_or_else(|| anyhow::anyhow!("pod cached"))?;
    // The cache holds the compact record: the scheduler's model of the pod, built once.
    assert_eq!(
        (cached.scheduler_name(), cached.group_name()),
        ("nobody", Some("leaf"))
    );
    assert!(!cached.uid().is_empty() && cached.resource_version.is_some());
    let leaf_node = store
        .group_node(&leaf)
        .ok_or_else(|| anyhow::anyhow!("leaf node"))?;
    let root_node = store
        .group_node(&root)
        .ok_or_else(|| anyhow::anyhow!("root node"))?;
    // Gang CPG over a basic PodGroup is invalid; the store hands the facts to the pure validator.
    assert!(phalanx_store::check_edge(&root_node, &leaf_node).is_err());

    // Assume, then bind for real: the watch confirms and ends the assumption; the pod is indexed on its node.
    store.assume(cached.clone(), &node);
    assert_eq!(store.assumed_node(&key).as_deref(), Some(node.as_str()));
    bind_pod(&client, &ns, "p", &node).await?;
    wait_for("assumption confirmed by the watch", T, || async {
        Ok((store.assumed_node(&key).is_none() && store.pods_on_node(&node).len() == 1).then_some(()))
    })
    .await?;
    let mut saw_pod_event = false;
    while let Ok(ev) = events.try_recv() {
        saw_pod_event |= matches!(ev, StoreEvent::Pod { key: k, .. } if k == key);
    }
    assert!(saw_pod_event, "a Pod event was published");

    pods.delete("p", &DeleteParams::default().grace_period(0)).await?;
    wait_for("pod removed from the indexes", T, || async {
        Ok(
            (store.pods_on_node(&node).is_empty() && store.hierarchy().members(&leaf).is_empty())
                .then_some(()),
        )
    })
    .await?;
    assert_eq!(store.group_members(&leaf).len(), 0);
    Ok(())
}

/// A custom owner kind whose discovery fails at first look is resolved once discovery works: the store retries
/// with backoff. The failure is a real 503 (no test seam): the kind's group/version is claimed by an APIService
/// whose Service does not exist (an aggregated API that is not up yet), so `GET /apis/<group>/v1` answers 503. Then
/// the APIService goes and a CRD serves the group instead. While it fails the kind stays `Missing` (its pods wait);
/// before, one failed discovery made it `NotWatched` for the life of the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_kind_whose_discovery_fails_once_is_resolved_after_the_retry() -> anyhow::Result<()> {
    use kube::api::DynamicObject;
    use kube::core::{ApiResource, GroupVersionKind};
    use phalanx_store::owners::{Lookup, OwnerRef};
    discovery_failures::install();
    let env = TestEnv::shared();
    // Without kube's default retry layer, which retries a 503 up to 15 times (`kube::client::retry`, over minutes)
    // before the caller sees it: so the store's discovery really fails, at once.
    let mut config = env.config().await?;
    config.default_retry = false;
    let client = kube::Client::try_from(config)?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let ns = create_namespace(&client, "store-retry").await?;
    // A group of its own, so no other test (or an earlier run on a kept cluster) serves it.
    let group = format!("{ns}.example.phalanx.dev");
    let api_version = format!("{group}/v1");
    let apiservices: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService"),
            "apiservices",
        ),
    );
    let apiservice = format!("v1.{group}");
    apiservices
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": { "name": apiservice },
                "spec": {
                    "group": group, "version": "v1", "insecureSkipTLSVerify": true,
                    "groupPriorityMinimum": 1000, "versionPriority": 15,
                    "service": { "namespace": ns, "name": "not-there", "port": 443 },
                },
            }))?,
        )
        .await?;
    // Once the aggregator has marked it unavailable its discovery answers at once (before, a request may wait for
    // the client's read timeout).
    wait_for("the APIService marked unavailable", T, || async {
        let a = apiservices.get(&apiservice).await?;
        let conditions = a.data.pointer("/status/conditions").cloned().unwrap_or_default();
        let unavailable = conditions.as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Available" && c["status"] == "False")
        });
        Ok(unavailable.then_some(()))
    })
    .await?;
    let last = std::sync::Mutex::new(String::new());
    wait_for("discovery of the group fails with 503", T, || async {
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            client.list_api_group_resources(&api_version),
        )
        .await;
        if let Ok(mut l) = last.lock() {
            *l = format!("{r:?}");
        }
        Ok(matches!(r, Ok(Err(kube::Error::Api(s))) if s.code == 503).then_some(()))
    })
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "{e}; last answer: {}",
            last.lock().map(|l| l.clone()).unwrap_or_default()
        )
    })?;

    let store = Store::start(client.clone(), StoreConfig::default());
    tokio::time::timeout(T, store.wait_ready()).await?;
    let widget = |uid: &str| OwnerRef {
        api_version: api_version.clone(),
        kind: "Widget".into(),
        namespace: ns.clone(),
        name: "w".into(),
        uid: uid.into(),
    };
    // The first lookup starts the kind: discovery answers 503 (the first attempt and the retries at 1 s and 3 s).
    assert!(matches!(store.owner_meta(&widget("none")), Lookup::Missing));
    // The positive sign: the store has logged three failed discoveries of the kind (the first attempt and the
    // retries at 1 s and 3 s), each of which left it as it was.
    wait_for("three failed discoveries of Widget logged", T * 2, || {
        let n = discovery_failures::count(&api_version);
        async move { Ok((n >= 3).then_some(())) }
    })
    .await
    .map_err(|e| e.context(format!("{} logged", discovery_failures::count(&api_version))))?;
    let meanwhile = store.owner_meta(&widget("none"));
    assert!(
        matches!(meanwhile, Lookup::Missing),
        "a transient discovery failure keeps the kind Missing (its pods wait), got {meanwhile:?}"
    );

    // The aggregated API goes, a CRD serves the group: the next retry finds the kind and lists it.
    apiservices.delete(&apiservice, &DeleteParams::default()).await?;
    let crd_name = format!("widgets.{group}");
    phalanx_testenv::apply_crds(
        &client,
        &serde_json::to_string(&json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": { "name": crd_name },
            "spec": {
                "group": group, "scope": "Namespaced",
                "names": { "plural": "widgets", "singular": "widget", "kind": "Widget" },
                "versions": [{ "name": "v1", "served": true, "storage": true,
                    "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } } }],
            }
        }))?,
    )
    .await?;
    let widgets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, "v1", "Widget"), "widgets"),
    );
    let created = widgets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": api_version, "kind": "Widget",
                "metadata": { "name": "w", "annotations": { phalanx_api::owners::GANG_MIN_COUNT: "2" } },
            }))?,
        )
        .await?;
    let uid = created.uid().unwrap_or_default();
    let found = wait_for(
        "the Widget found after the retry",
        Duration::from_secs(60),
        || async {
            Ok(match store.owner_meta(&widget(&uid)) {
                Lookup::Found(m) => Some(m),
                _ => None,
            })
        },
    )
    .await?;
    assert!(phalanx_api::owners::wants_gang(found.annotations.as_ref()));
    // And a pod it owns joins its group.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "wp", "ownerReferences": [{
            "apiVersion": api_version, "kind": "Widget", "name": "w", "uid": uid, "controller": true }] },
        "spec": { "schedulerName": "nobody", "containers": [{ "name": "c", "image": "x" }] }
    }))?;
    Api::<Pod>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pod)
        .await?;
    let key = PodKey::new(&ns, "wp");
    wait_for("the Widget's pod resolved to its group", T, || async {
        Ok(store
            .hierarchy()
            .group_of(&key)
            .filter(|g| &*g.name == "w-widget")
            .map(|_| ()))
    })
    .await?;
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(client.clone());
    crds.delete(&crd_name, &DeleteParams::default()).await?;
    Ok(())
}

/// The start-up probe reads the version the control plane's own binary reports, sees the CRDs once applied and DRA
/// (GA and on by default from 1.34), and says what happens to `spec.schedulingGroup` on this version. Runs against
/// whichever version `K8S_VERSION` built (`make test-compat`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_probe_matches_the_control_plane() -> anyhow::Result<()> {
    use phalanx_store::server::{ServerFeatures, Severity};
    let env = TestEnv::shared();
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    // `kube-apiserver --version` prints `Kubernetes v1.37.2`.
    let out = std::process::Command::new(env.bin_dir().join("kube-apiserver"))
        .arg("--version")
        .output()?;
    let built = String::from_utf8(out.stdout)?;
    let built = built.trim().trim_start_matches("Kubernetes ").to_owned();

    let features = ServerFeatures::probe(&client).await?;
    let version = features.version.clone().expect("a parsable /version");
    assert_eq!(version.git_version, built);
    // `v1.37.2` or a pre-release such as `v1.38.0-beta.0` (more dots): the minor is the second component.
    assert_eq!(
        format!("v1.{}", version.minor),
        built.split('.').take(2).collect::<Vec<_>>().join(".")
    );
    assert!(
        features.missing_crds().is_empty(),
        "{:?}",
        features.missing_crds()
    );
    assert!(features.serves_dra(), "resource.k8s.io/v1 not served on {built}");
    assert!(features.serves("policy/v1") && features.serves("coordination.k8s.io/v1"));
    // Upstream's workload API is off by default on every supported version (GenericWorkload is beta, off).
    assert_eq!(features.upstream_version("podgroups"), None);

    let gaps = features.gaps();
    assert!(gaps.iter().all(|g| g.severity < Severity::Error), "{gaps:?}");
    let note = gaps
        .iter()
        .find(|g| g.feature == "pod-scheduling-group")
        .expect("the spec.schedulingGroup note");
    assert_eq!(
        note.message.contains("does not serve"),
        version.minor < 36,
        "{}",
        note.message
    );
    Ok(())
}

/// With upstream's workload API on (a control plane of its own: the gates and `--runtime-config` of
/// `UPSTREAM_WORKLOAD_API=1`, hack/cluster.sh) the probe finds each upstream kind at its newest served version:
/// Workload and PodGroup in `scheduling.k8s.io/v1beta1`, CompositePodGroup in v1alpha3 on 1.37 and in v1beta1 from
/// 1.38 (its gate went beta: `pkg/registry/scheduling/rest/storage_scheduling.go` serves it in v1beta1 too). Before
/// 1.37 there is no CompositePodGroup gate (kube-apiserver refuses unknown gates), so the test checks 1.37 and later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_probe_matches_the_control_plane_with_upstreams_workload_api() -> anyhow::Result<()> {
    use phalanx_store::server::ServerFeatures;
    let minor = tokio::task::spawn_blocking(TestEnv::binaries_minor).await??;
    if minor < 37 {
        eprintln!("1.{minor}: no CompositePodGroup gate before 1.37; nothing to check");
        return Ok(());
    }
    let env = tokio::task::spawn_blocking(|| {
        TestEnv::dedicated(
            "upstream-workload-api",
            &[
                "--feature-gates=GenericWorkload=true,CompositePodGroup=true,TopologyAwareWorkloadScheduling=true",
                "--runtime-config=scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true",
            ],
        )
    })
    .await??;
    let features = ServerFeatures::probe(&env.client().await?).await?;
    let (beta, alpha) = ("scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha3");
    assert_eq!(features.upstream_version("workloads"), Some(beta));
    assert_eq!(features.upstream_version("podgroups"), Some(beta));
    let composite = if minor >= 38 { beta } else { alpha };
    assert_eq!(features.upstream_version("compositepodgroups"), Some(composite));
    let note = features
        .gaps()
        .into_iter()
        .find(|g| g.feature == "upstream-workload-api")
        .expect("the upstream workload API note");
    assert!(
        note.message.contains(&format!("CompositePodGroup ({composite})")),
        "{}",
        note.message
    );
    tokio::task::spawn_blocking(move || drop(env)).await?;
    Ok(())
}

/// Without the storage RBAC (a ClusterRole from before the volume plugins) the store still becomes ready: the six
/// storage kinds count as ready and empty, and `unreadable_storage` names them for the volume plugins' message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_without_storage_rbac_is_ready_and_names_what_it_may_not_read() -> anyhow::Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let env = TestEnv::shared();
    let admin = env.client().await?;
    phalanx_testenv::apply_crds(&admin, &phalanx_api::crds::to_yaml()).await?;
    let ns = create_namespace(&admin, "nostorage").await?;
    let user = format!("{ns}-user");
    let read = json!(["get", "list", "watch"]);
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": { "name": &user },
        "rules": [
            { "apiGroups": [""], "resources": ["pods", "nodes"], "verbs": read },
            { "apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": read },
            { "apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": read },
            { "apiGroups": ["scheduling.phalanx.dev"], "resources": ["workloads", "podgroups", "compositepodgroups"], "verbs": read },
            { "apiGroups": ["batch"], "resources": ["jobs"], "verbs": read },
            { "apiGroups": ["apps"], "resources": ["replicasets", "deployments", "statefulsets"], "verbs": read },
        ],
    }))?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": { "name": &user },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": &user },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": &user }],
    }))?;
    let pp = PostParams::default();
    Api::<ClusterRole>::all(admin.clone()).create(&pp, &role).await?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&pp, &binding)
        .await?;
    let mut config = env.config().await?;
    config.auth_info.impersonate = Some(user.clone());
    let client = kube::Client::try_from(config)?;
    let store = Store::start(client, StoreConfig::default());
    tokio::time::timeout(T, store.wait_ready())
        .await
        .map_err(|_| anyhow::anyhow!("the store was not ready within {T:?} without the storage RBAC"))?;
    let mut unreadable = store.unreadable_storage();
    unreadable.sort();
    // Likewise the DRA kinds (served here, not readable by this user).
    anyhow::ensure!(
        store.dra_served(),
        "resource.k8s.io/v1 is served by the test control plane"
    );
    let devices = store.unreadable_devices();
    anyhow::ensure!(
        devices
            == [
                "deviceclasses",
                "resourceclaims",
                "resourceclaimtemplates",
                "resourceslices"
            ],
        "unreadable devices: {devices:?}"
    );
    anyhow::ensure!(
        unreadable
            == [
                "csidrivers",
                "csinodes",
                "csistoragecapacities",
                "persistentvolumeclaims",
                "persistentvolumes",
                "storageclasses"
            ],
        "unreadable: {unreadable:?}"
    );
    let dp = DeleteParams::default();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(&user, &dp)
        .await?;
    Api::<ClusterRole>::all(admin).delete(&user, &dp).await?;
    Ok(())
}

/// The DRA caches follow the cluster: a DeviceClass, a ResourceSlice, a ResourceClaim and a ResourceClaimTemplate
/// appear in the readers, slimmed, and each change is published as `StoreEvent::Devices`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dra_caches_follow_the_cluster() -> anyhow::Result<()> {
    use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
    use kube::runtime::reflector::ObjectRef;
    let env = TestEnv::shared();
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let ns = create_namespace(&client, "dra").await?;
    let store = Store::start(client.clone(), StoreConfig::default());
    let mut events = store.subscribe();
    tokio::time::timeout(T, store.wait_ready()).await?;
    anyhow::ensure!(
        store.dra_served(),
        "resource.k8s.io/v1 is served by the test control plane"
    );
    let dra = store
        .dra()
        .ok_or_else(|| anyhow::anyhow!("dra() is Some when served"))?;
    assert!(store.unreadable_devices().is_empty());

    // Cluster-scoped objects are named after the test namespace: the control plane is shared by the binary.
    let class = format!("{ns}-gpu");
    let slice = format!("{ns}-node-a-gpu");
    let pp = PostParams::default();
    let dc: DeviceClass = serde_json::from_value(json!({
        "metadata": { "name": &class, "annotations": { phalanx_store::slim::LAST_APPLIED: "{}" } },
        "spec": { "selectors": [{ "cel": { "expression": "device.driver == 'gpu.example.com'" } }] },
    }))?;
    Api::<DeviceClass>::all(client.clone()).create(&pp, &dc).await?;
    let rs: ResourceSlice = serde_json::from_value(json!({
        "metadata": { "name": &slice },
        "spec": {
            "driver": "gpu.example.com",
            "pool": { "name": "node-a", "generation": 1, "resourceSliceCount": 1 },
            "nodeName": "node-a",
            "devices": [{ "name": "gpu-0" }],
        },
    }))?;
    Api::<ResourceSlice>::all(client.clone()).create(&pp, &rs).await?;
    let spec =
        json!({ "devices": { "requests": [{ "name": "gpu", "exactly": { "deviceClassName": &class } }] } });
    let rc: ResourceClaim = serde_json::from_value(json!({ "metadata": { "name": "claim" }, "spec": spec }))?;
    Api::<ResourceClaim>::namespaced(client.clone(), &ns)
        .create(&pp, &rc)
        .await?;
    let rct: ResourceClaimTemplate =
        serde_json::from_value(json!({ "metadata": { "name": "tmpl" }, "spec": { "spec": spec } }))?;
    Api::<ResourceClaimTemplate>::namespaced(client.clone(), &ns)
        .create(&pp, &rct)
        .await?;

    let seen = wait_for("the four DRA objects cached", T, || async {
        let c = dra.classes.get(&ObjectRef::new(&class));
        let s = dra.slices.get(&ObjectRef::new(&slice));
        let rc = dra.claims.get(&ObjectRef::new("claim").within(&ns));
        let t = dra.templates.get(&ObjectRef::new("tmpl").within(&ns));
        Ok(match (c, s, rc, t) {
            (Some(c), Some(s), Some(rc), Some(t)) => Some((c, s, rc, t)),
            _ => None,
        })
    })
    .await?;
    let (c, s, rc, t) = seen;
    assert_eq!(s.spec.driver, "gpu.example.com");
    assert_eq!(s.spec.pool.name, "node-a");
    assert_eq!(s.spec.node_name.as_deref(), Some("node-a"));
    assert_eq!(s.spec.devices.as_ref().map(|d| d[0].name.as_str()), Some("gpu-0"));
    let requests = rc
        .spec
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.requests.as_ref());
    assert_eq!(
        requests
            .and_then(|r| r[0].exactly.as_ref())
            .map(|e| e.device_class_name.as_str()),
        Some(class.as_str())
    );
    assert_eq!(t.name_any(), "tmpl");
    for m in [&c.metadata, &s.metadata, &rc.metadata, &t.metadata] {
        assert!(m.managed_fields.is_none(), "slimmed: {:?}", m.name);
    }
    assert!(
        c.annotations().get(phalanx_store::slim::LAST_APPLIED).is_none(),
        "the kubectl apply copy is dropped"
    );
    let mut devices = 0;
    while let Ok(ev) = events.try_recv() {
        devices += usize::from(ev == StoreEvent::Devices);
    }
    assert!(
        devices >= 4,
        "one Devices event per created object, saw {devices}"
    );

    // A deletion is published too and leaves the cache.
    Api::<ResourceSlice>::all(client.clone())
        .delete(&slice, &DeleteParams::default())
        .await?;
    wait_for("the slice removed from the cache", T, || async {
        Ok(dra.slices.get(&ObjectRef::new(&slice)).is_none().then_some(()))
    })
    .await?;
    assert!(
        std::iter::from_fn(|| events.try_recv().ok()).any(|ev| ev == StoreEvent::Devices),
        "a Devices event for the deletion"
    );
    Api::<DeviceClass>::all(client.clone())
        .delete(&class, &DeleteParams::default())
        .await?;
    Ok(())
}

/// On a server that does not serve `resource.k8s.io/v1` (a control plane of its own, its kube-apiserver started
/// with `--runtime-config=resource.k8s.io/v1=false`) the store watches no DRA kind and is ready without them;
/// `ClusterState::list` has no DRA objects either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_on_a_server_without_dra_is_ready_without_it() -> anyhow::Result<()> {
    let env = tokio::task::spawn_blocking(|| {
        TestEnv::dedicated("no-dra", &["--runtime-config=resource.k8s.io/v1=false"])
    })
    .await??;
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let features = phalanx_store::server::ServerFeatures::probe(&client).await?;
    anyhow::ensure!(
        !features.serves_dra(),
        "the dedicated control plane still serves resource.k8s.io/v1: {:?}",
        features.group_versions
    );

    let store = Store::start(client.clone(), StoreConfig::default());
    // Well under the discovery's patience (30 s): a 404 is an answer, not retried.
    let quick = Duration::from_secs(10);
    anyhow::ensure!(quick < phalanx_store::dra::DISCOVERY_PATIENCE);
    tokio::time::timeout(quick, store.wait_ready())
        .await
        .map_err(|_| anyhow::anyhow!("the store was not ready within {quick:?} on a server without DRA"))?;
    assert!(store.is_ready());
    assert!(!store.dra_served());
    assert!(store.dra().is_none());
    assert!(store.unreadable_devices().is_empty());

    let state = phalanx_store::ClusterState::list(&client).await?;
    assert!(state.dra.is_none());
    assert!(Store::from_state(state).dra().is_none());
    drop(store);
    // Stops the dedicated control plane (hack/cluster.sh down); blocking, so off the runtime's threads.
    tokio::task::spawn_blocking(move || drop(env)).await?;
    Ok(())
}

/// Counts the store's `discovery of owner kind failed; retrying` warnings per `api_version` (the positive sign of
/// a retry that failed), through a process-wide `tracing` subscriber that records nothing else.
mod discovery_failures {
    use std::collections::BTreeMap;
    use std::sync::{Mutex, Once, PoisonError};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    /// The warning of `crates/store/src/custom_owners.rs`, `serve_kind`, for a transient discovery failure.
    const MESSAGE: &str = "discovery of owner kind failed; retrying";

    static COUNTS: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());
    static INSTALL: Once = Once::new();

    /// Installs the counter as the global subscriber (once; a no-op if another was installed first, in which
    /// case [`count`] stays 0 and the caller's wait names it).
    pub fn install() {
        INSTALL.call_once(|| {
            let _ = tracing::subscriber::set_global_default(Counter);
        });
    }

    /// Failed discoveries logged so far for `api_version`.
    pub fn count(api_version: &str) -> u32 {
        COUNTS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(api_version)
            .copied()
            .unwrap_or(0)
    }

    struct Counter;

    #[derive(Default)]
    struct Fields {
        message: String,
        api_version: String,
    }

    impl Visit for Fields {
        fn record_str(&mut self, field: &Field, value: &str) {
            if field.name() == "api_version" {
                self.api_version = value.to_owned();
            }
        }

        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            match field.name() {
                "message" => self.message = format!("{value:?}"),
                "api_version" => self.api_version = format!("{value:?}").trim_matches('"').to_owned(),
                _ => {}
            }
        }
    }

    impl Subscriber for Counter {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            *metadata.level() == Level::WARN
        }

        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }

        fn record(&self, _: &Id, _: &Record<'_>) {}

        fn record_follows_from(&self, _: &Id, _: &Id) {}

        fn event(&self, event: &Event<'_>) {
            let mut f = Fields::default();
            event.record(&mut f);
            if f.message == MESSAGE {
                *COUNTS
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(f.api_version)
                    .or_default() += 1;
            }
        }

        fn enter(&self, _: &Id) {}

        fn exit(&self, _: &Id) {}
    }
}

/// Issue 35: a new leader reads the bound pods with a quorum LIST and assumes those its watch does not show bound
/// yet. A pod deleted after the LIST was served but before its page is handled is gone from the watch already; an
/// assumption of it would never end (nothing expires), keeping its room and parking the preemptors that pick it as
/// a victim. Replayed against a real API server with the deletion in exactly that window: the read refuses the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_pod_deleted_before_its_page_is_handled_is_not_assumed() -> anyhow::Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let ns = create_namespace(&client, "store-listed").await?;
    let node = format!("{ns}-n");
    FakeNode::new(&node)
        .cpu("4")
        .memory("8Gi")
        .test_namespace(&ns)
        .create(&client)
        .await?;
    let store = Store::start(client.clone(), StoreConfig::default());
    tokio::time::timeout(T, store.wait_ready()).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for name in ["gone", "kept"] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "schedulerName": "nobody", "containers": [{ "name": "c", "image": "x" }] }
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
        bind_pod(&client, &ns, name, &node).await?;
    }
    let (gone, kept) = (PodKey::new(&ns, "gone"), PodKey::new(&ns, "kept"));
    wait_for("both pods cached bound", T, || async {
        Ok((store.pods_on_node(&node).len() == 2).then_some(()))
    })
    .await?;

    // The read begins, the LIST is served with both pods, then `gone` is deleted and the watch shows it.
    let listed = store.begin_listed_assumptions();
    let page = pods
        .list(&kube::api::ListParams::default().fields("spec.nodeName!="))
        .await?;
    assert_eq!(page.items.len(), 2);
    pods.delete("gone", &DeleteParams::default().grace_period(0))
        .await?;
    wait_for("the watch shows the deletion", T, || async {
        Ok(store.pod(&gone).is_none().then_some(()))
    })
    .await?;
    // Now the page is handled as the driver does: a pod the cache does not show bound is assumed.
    let mut refused = Vec::new();
    for p in &page.items {
        let record = std::sync::Arc::new(phalanx_store::PodRecord::from_pod(p));
        if store.pod(record.key()).is_some_and(|c| c.node_name().is_some()) {
            continue;
        }
        if !listed.assume(record.clone(), &node) {
            refused.push(p.name_any());
        }
    }
    drop(listed);
    assert_eq!(refused, vec!["gone".to_owned()]);
    assert_eq!(
        store.assumed_node(&gone),
        None,
        "no assumption is left that no event can end"
    );
    assert_eq!(store.assumed_node(&kept), None, "cached bound: nothing to assume");
    assert_eq!(store.pods_on_node(&node).len(), 1);
    Ok(())
}
