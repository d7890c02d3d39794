//! Bytes per cached pod and per cached node, from the allocator's counters (dhat's heap statistics), not from RSS:
//! the yardstick for the compact store.
//!
//! Each object is built as kube-apiserver v1.37 returns the end-to-end benchmark's objects (crates/bench: a pod of
//! one `pause` container requesting 100m CPU and 64Mi, with what defaulting and admission add: the service-account
//! token volume and its mount, the two default tolerations, `status` with its conditions, `managedFields`; a kwok
//! node with its labels, status, conditions and addresses). Then it is kept the way the runtime keeps it, and the
//! heap that stays allocated is divided by the number of objects:
//! - `store_pod`: the watch cache's record, `Arc<PodRecord>` (`phalanx_store::record`), the scheduler's model of
//!   the pod included (the driver hands that model to the core as it is), with labels and names shared through
//!   the cache's interner (`phalanx_store::intern`) as the store shares them;
//! - `pod_info_owner_group`: what a pod that joins its owner's group (no group label of its own) costs on top: a
//!   copy of the model with that group, sharing labels and scheduling data;
//! - `store_node`: the node cache's record, `Arc<NodeRecord>`, the scheduler's `NodeStatic` of the node included.
//!
//! Prints `bench: cache-bytes pods=<n> store_pod=<bytes> pod_info_owner_group=<bytes> nodes=<n>
//! store_node=<bytes>`. Before the compact records the caches held the slimmed decoded objects: 7,544 bytes per pod
//! plus a `PodInfo` of 1,700, 3,558 bytes per node plus a `NodeStatic` of 1,100 (docs/benchmarks.md). `BENCH_PODS` (default 10,000) and `BENCH_NODES` (default 5,000) set the counts.
//! Run: `cargo bench -p phalanx-store --bench cache_bytes`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use phalanx_scheduler::PodInfo;
use phalanx_store::{NodeRecord, PodRecord};
use serde_json::{Value, json};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const TIME: &str = "2026-12-04T12:00:00Z";

/// The benchmark's pod `g<g>-p<p>` as the API server returns it once bound.
fn served_pod(i: usize) -> Value {
    let (g, p) = (i / 8, i % 8);
    let name = format!("gang-{g:05}-{p}");
    let fields = |m: &str, f: Value| {
        json!({ "manager": m, "operation": "Update", "apiVersion": "v1", "time": TIME,
        "fieldsType": "FieldsV1", "fieldsV1": f })
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "bench-phalanx", "uid": format!("6f1c2a3e-0000-4000-8000-{i:012}"),
            "resourceVersion": format!("{}", 100_000 + i), "creationTimestamp": TIME,
            "labels": { "app": "phalanx-bench", "scheduling.phalanx.dev/pod-group": format!("gang-{g:05}") },
            "managedFields": [
                fields("phalanx-bench", json!({ "f:metadata": { "f:labels": { ".": {}, "f:app": {} } },
                    "f:spec": { "f:containers": { "k:{\"name\":\"c\"}": { ".": {}, "f:image": {}, "f:name": {},
                    "f:resources": { ".": {}, "f:requests": { ".": {}, "f:cpu": {}, "f:memory": {} } } } } } })),
                fields("kwok", json!({ "f:status": { "f:conditions": {}, "f:phase": {}, "f:podIP": {} } })),
            ],
        },
        "spec": {
            "volumes": [{ "name": "kube-api-access-abcde", "projected": { "defaultMode": 420, "sources": [
                { "serviceAccountToken": { "expirationSeconds": 3607, "path": "token" } },
                { "configMap": { "name": "kube-root-ca.crt", "items": [{ "key": "ca.crt", "path": "ca.crt" }] } },
                { "downwardAPI": { "items": [{ "path": "namespace",
                    "fieldRef": { "apiVersion": "v1", "fieldPath": "metadata.namespace" } }] } },
            ] } }],
            "containers": [{
                "name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": { "requests": { "cpu": "100m", "memory": "64Mi" } },
                "volumeMounts": [{ "name": "kube-api-access-abcde", "readOnly": true,
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount" }],
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 0, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "nodeName": format!("node-{:04}", i % 5000),
            "securityContext": {}, "schedulerName": "phalanx-scheduler",
            "tolerations": [
                { "key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 },
                { "key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 },
            ],
            "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running", "qosClass": "Burstable", "hostIP": "10.0.0.1", "podIP": "10.0.0.1", "startTime": TIME,
            "hostIPs": [{ "ip": "10.0.0.1" }], "podIPs": [{ "ip": "10.0.0.1" }],
            "conditions": (["Initialized", "Ready", "ContainersReady", "PodScheduled"].iter().map(|t| json!({
                "type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": TIME })).collect::<Vec<_>>()),
            "containerStatuses": [{ "name": "c", "ready": true, "restartCount": 0, "started": true,
                "image": "registry.k8s.io/pause:3.10", "imageID": "", "state": { "running": { "startedAt": TIME } } }],
        },
    })
}

/// A kwok node of the benchmark, as served.
fn served_node(i: usize) -> Value {
    let name = format!("node-{i:04}");
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name, "uid": format!("7a2b3c4d-0000-4000-8000-{i:012}"), "resourceVersion": format!("{}", 50_000 + i),
            "creationTimestamp": TIME,
            "labels": { "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "type": "kwok", "rack": format!("rack-{}", i % 50), "topology.kubernetes.io/zone": "zone-a" },
            "annotations": { "kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0" },
        },
        "spec": { "taints": [{ "key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule" }] },
        "status": {
            "capacity": { "cpu": "32", "memory": "128Gi", "pods": "110" },
            "allocatable": { "cpu": "32", "memory": "128Gi", "pods": "110" },
            "conditions": (["Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"].iter()
                .map(|t| json!({ "type": t, "status": (if *t == "Ready" { "True" } else { "False" }),
                    "lastHeartbeatTime": TIME, "lastTransitionTime": TIME, "reason": "KubeletReady",
                    "message": "kubelet is posting ready status" })).collect::<Vec<_>>()),
            "addresses": [{ "type": "InternalIP", "address": "10.0.0.1" }, { "type": "Hostname", "address": name }],
            "daemonEndpoints": { "kubeletEndpoint": { "Port": 10250 } },
            "nodeInfo": { "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
                "containerRuntimeVersion": "", "kubeletVersion": "fake", "kubeProxyVersion": "fake",
                "operatingSystem": "linux", "architecture": "amd64" },
            "phase": "Running",
        },
    })
}

fn heap() -> usize {
    dhat::HeapStats::get().curr_bytes
}

/// Heap bytes that `make` leaves allocated, per object, over `n` objects (the kept values are returned so they stay
/// alive while the counter is read).
fn per_object<T>(n: usize, mut make: impl FnMut(usize) -> T) -> (usize, Vec<T>) {
    let before = heap();
    let mut kept = Vec::with_capacity(n);
    let after_vec = heap();
    for i in 0..n {
        kept.push(make(i));
    }
    let bytes = heap() - after_vec + (after_vec - before);
    (bytes / n.max(1), kept)
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let count = |var: &str, default: usize| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| *n > 0)
            .unwrap_or(default)
    };
    let (pods, nodes) = (count("BENCH_PODS", 10_000), count("BENCH_NODES", 5_000));
    let decode_pod =
        |i: usize| -> Pod { serde_json::from_value(served_pod(i)).expect("the served pod decodes") };
    let decode_node =
        |i: usize| -> Node { serde_json::from_value(served_node(i)).expect("the served node decodes") };

    // One interner for the cache, as the store keeps one: the 8 pods of a gang share their labels and names.
    let mut interner = phalanx_store::intern::Interner::default();
    let (store_pod, cached) = per_object(pods, |i| {
        Arc::new(PodRecord::from_pod_shared(&decode_pod(i), &mut interner, false))
    });
    // The driver hands the record's own model to the core (an `Arc` clone, no heap); only a pod that joins its
    // owner's group (no label of its own) gets a copy of the model with that group, sharing labels and spec.
    let (pod_info, infos) = per_object(pods, |i| {
        Arc::new(PodInfo {
            group_name: Some("owner-group".into()),
            ..(*cached[i].info).clone()
        })
    });
    let (store_node, cached_nodes) = per_object(nodes, |i| Arc::new(NodeRecord::from_node(&decode_node(i))));
    assert!(
        cached_nodes.iter().all(|n| n.model.is_ok()),
        "the served nodes convert"
    );
    println!(
        "bench: cache-bytes pods={pods} store_pod={store_pod} pod_info_owner_group={pod_info} nodes={nodes} \
         store_node={store_node}"
    );
    drop((cached, infos, cached_nodes));
}
