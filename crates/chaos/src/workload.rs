//! The load: gangs (a PodGroup with a gang policy and its pods) arriving while faults happen, and churn (whole
//! gangs deleted, as finished jobs are) so that freed capacity keeps the scheduler busy.
//!
//! Demand exceeds capacity on purpose: with the default profile the initial wave alone asks for about 1.5 times
//! the CPUs of the nodes, so some gangs wait, contention is real, and every bind races against the others.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use rand::Rng as _;
use rand::rngs::StdRng;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::checker::Checker;
use crate::harness::RACK_LABEL;

/// Pod label naming the gang (also in the PodGroup label): churn deletes a gang's pods by it.
pub const GANG_LABEL: &str = "phalanx.dev/chaos-gang";
/// Finalizer that keeps a pod Terminating once deleted, until [`release_holds`] removes it: kwok's pod-delete stage
/// removes a deleted pod at once whatever its grace period, so this stands in for a long graceful termination.
pub const HOLD_FINALIZER: &str = "phalanx.dev/chaos-hold";
/// Per-call timeout of the feeder's API calls: during an outage a call fails fast and the feeder goes on.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// One gang to create.
#[derive(Debug, Clone)]
pub struct GangSpec {
    /// PodGroup name; pods are `<name>-<i>`.
    pub name: String,
    /// Number of pods.
    pub size: usize,
    /// `gang.minCount` (at most `size`).
    pub min_count: usize,
    /// CPU request per pod.
    pub cpu: String,
    /// Memory request per pod.
    pub memory: String,
    /// Keep the gang inside one rack (`schedulingConstraints.topology`).
    pub one_rack: bool,
    /// `spec.priority` set by the user (hostile objects).
    pub priority: Option<i32>,
    /// `priorityClassName` of the pods and the PodGroup.
    pub priority_class: Option<String>,
    /// The pods carry [`HOLD_FINALIZER`].
    pub hold: bool,
    /// `spec.parentCompositePodGroupName` (with a workloadRef; hostile chains).
    pub parent: Option<String>,
    /// Containers per pod, each with the full `cpu`/`memory` requests.
    pub containers: usize,
    /// `spec.schedulerName` of the pods.
    pub scheduler_name: String,
    /// Without a PodGroup: plain pods that do not join any group.
    pub standalone: bool,
}

impl GangSpec {
    /// A random gang `name` of 2-6 pods (minCount = size, or one less for bigger gangs), 1 or 2 CPUs and 1 or
    /// 2 GiB per pod, one in four kept inside one rack.
    pub fn random(rng: &mut StdRng, name: String, scheduler_name: &str) -> Self {
        let size = rng.random_range(2..=6usize);
        let min_count = if size >= 4 && rng.random_bool(0.3) {
            size - 1
        } else {
            size
        };
        let big = rng.random_bool(0.4);
        Self {
            name,
            size,
            min_count,
            cpu: if big { "2" } else { "1" }.into(),
            memory: if big { "2Gi" } else { "1Gi" }.into(),
            one_rack: rng.random_bool(0.25),
            priority: None,
            priority_class: None,
            hold: false,
            parent: None,
            containers: 1,
            scheduler_name: scheduler_name.to_owned(),
            standalone: false,
        }
    }
}

/// The PodGroup kind's API resource (from the API crate, so group, version and plural stay in sync).
pub fn pod_group_resource() -> ApiResource {
    ApiResource::erase::<phalanx_api::v1beta1::PodGroup>(&())
}

/// The CompositePodGroup kind's API resource.
pub fn composite_resource() -> ApiResource {
    ApiResource::erase::<phalanx_api::v1alpha3::CompositePodGroup>(&())
}

fn pod_object(ns: &str, gang: &GangSpec, i: usize) -> anyhow::Result<Pod> {
    let containers: Vec<serde_json::Value> = (0..gang.containers)
        .map(|c| {
            json!({
                "name": format!("c{c}"),
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": gang.cpu, "memory": gang.memory}},
            })
        })
        .collect();
    let labels = if gang.standalone {
        json!({GANG_LABEL: gang.name})
    } else {
        json!({phalanx_api::labels::POD_GROUP: gang.name, GANG_LABEL: gang.name})
    };
    let finalizers: Vec<&str> = if gang.hold { vec![HOLD_FINALIZER] } else { vec![] };
    let mut pod = json!({
        "metadata": {"name": format!("{}-{i}", gang.name), "namespace": ns, "labels": labels, "finalizers": finalizers},
        "spec": {
            "schedulerName": gang.scheduler_name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": false,
            "containers": containers,
        }
    });
    if let Some(c) = &gang.priority_class {
        pod["spec"]["priorityClassName"] = json!(c);
    }
    Ok(serde_json::from_value(pod)?)
}

async fn timed<T>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(CALL_TIMEOUT, f)
        .await
        .with_context(|| format!("{what}: no answer within {CALL_TIMEOUT:?}"))?
        .with_context(|| what.to_owned())
}

/// Creates the PodGroup (unless `standalone`), then its pods. Returns how many pods were created (a pod refused during an outage is
/// skipped: the gang then may never reach minCount, and must then stay without any pod bound).
///
/// # Errors
/// The PodGroup could not be created (no pod is created then).
pub async fn create_gang(client: &Client, ns: &str, gang: &GangSpec) -> anyhow::Result<usize> {
    let mut spec = json!({"schedulingPolicy": {"gang": {"minCount": gang.min_count}}});
    if gang.one_rack {
        spec["schedulingConstraints"] = json!({"topology": [{"key": RACK_LABEL}]});
    }
    if let Some(p) = gang.priority {
        spec["priority"] = json!(p);
    }
    if let Some(c) = &gang.priority_class {
        spec["priorityClassName"] = json!(c);
    }
    if let Some(parent) = &gang.parent {
        spec["parentCompositePodGroupName"] = json!(parent);
        spec["workloadRef"] = json!({"workloadName": "chain", "templateName": "leaf"});
    }
    let ar = pod_group_resource();
    let pg: DynamicObject = serde_json::from_value(json!({
        "apiVersion": ar.api_version, "kind": ar.kind,
        "metadata": {"name": gang.name, "namespace": ns, "labels": {GANG_LABEL: gang.name}},
        "spec": spec,
    }))?;
    let groups: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    if !gang.standalone {
        timed(
            &format!("creating PodGroup {ns}/{}", gang.name),
            groups.create(&PostParams::default(), &pg),
        )
        .await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut created = 0;
    for i in 0..gang.size {
        let pod = pod_object(ns, gang, i)?;
        match timed("creating a pod", pods.create(&PostParams::default(), &pod)).await {
            Ok(_) => created += 1,
            Err(e) => tracing::debug!(error = %format!("{e:#}"), "pod not created"),
        }
    }
    Ok(created)
}

/// Deletes a gang: its pods at once (grace period 0), then its PodGroup.
///
/// # Errors
/// The API refused (or did not answer).
pub async fn delete_gang(client: &Client, ns: &str, name: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("{GANG_LABEL}={name}"));
    timed(
        "deleting a gang's pods",
        pods.delete_collection(&DeleteParams::default().grace_period(0), &lp),
    )
    .await?;
    let groups: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &pod_group_resource());
    timed(
        "deleting a PodGroup",
        groups.delete(name, &DeleteParams::default()),
    )
    .await?;
    Ok(())
}

/// Removes [`HOLD_FINALIZER`] from the pods of `ns` that carry it; with `terminating_only`, only from those
/// already deleted (they then go at once). Returns the names released.
///
/// # Errors
/// The pods cannot be listed; a pod that cannot be patched is skipped (the next call retries it).
pub async fn release_holds(client: &Client, ns: &str, terminating_only: bool) -> anyhow::Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = timed("listing pods", pods.list(&ListParams::default())).await?;
    let mut released = Vec::new();
    for p in list.items {
        let held = p
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == HOLD_FINALIZER));
        if !held || (terminating_only && p.metadata.deletion_timestamp.is_none()) {
            continue;
        }
        let name = p.metadata.name.clone().unwrap_or_default();
        let rest: Vec<String> = p
            .metadata
            .finalizers
            .unwrap_or_default()
            .into_iter()
            .filter(|f| f != HOLD_FINALIZER)
            .collect();
        // The resourceVersion makes the patch a compare-and-swap: another finalizer added meanwhile is not lost.
        let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": p.metadata.resource_version}});
        let (pp, patch) = (PatchParams::default(), Patch::Merge(&patch));
        match timed("releasing a held pod", pods.patch(&name, &pp, &patch)).await {
            Ok(_) => released.push(name),
            Err(e) => tracing::debug!(pod = %name, error = %format!("{e:#}"), "hold not released (retried)"),
        }
    }
    Ok(released)
}

/// How the feeder loads a run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Gangs created at the start of a run.
    pub initial_gangs: usize,
    /// A new gang every ...
    pub arrival: Duration,
    /// A whole gang deleted every ...
    pub churn: Duration,
}

/// What the feeder did.
#[derive(Debug, Clone, Default)]
pub struct FeedStats {
    /// Gangs whose PodGroup was created.
    pub gangs: usize,
    /// Pods created.
    pub pods: usize,
    /// Gangs deleted by churn.
    pub deleted: usize,
    /// API calls that failed (outages make many).
    pub errors: usize,
}

/// The running feeder of one run.
pub struct Feeder {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<FeedStats>,
}

impl Feeder {
    /// Creates the initial wave, then keeps adding and deleting gangs until [`Feeder::stop`].
    pub fn start(
        client: Client,
        ns: String,
        load: LoadConfig,
        mut rng: StdRng,
        scheduler_name: String,
        checker: Arc<Checker>,
    ) -> Self {
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            let mut stats = FeedStats::default();
            let mut seq = 0usize;
            let mut add = async |stats: &mut FeedStats, rng: &mut StdRng| {
                let gang = GangSpec::random(rng, format!("g{seq:03}"), &scheduler_name);
                seq += 1;
                match create_gang(&client, &ns, &gang).await {
                    Ok(n) => {
                        stats.gangs += 1;
                        stats.pods += n;
                        stats.errors += gang.size - n;
                    }
                    Err(_) => stats.errors += 1,
                }
            };
            for _ in 0..load.initial_gangs {
                add(&mut stats, &mut rng).await;
            }
            let mut arrival = tokio::time::interval(load.arrival);
            let mut churn = tokio::time::interval(load.churn);
            arrival.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            churn.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            arrival.tick().await;
            churn.tick().await;
            loop {
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = arrival.tick() => add(&mut stats, &mut rng).await,
                    _ = churn.tick() => {
                        // The oldest gang that is fully bound finishes, like a completed job.
                        let done = checker.gangs(&ns).into_iter().find(|g| g.pods > 0 && g.bound == g.pods);
                        if let Some(g) = done {
                            match delete_gang(&client, &ns, &g.name).await {
                                Ok(()) => stats.deleted += 1,
                                Err(_) => stats.errors += 1,
                            }
                        }
                    }
                }
            }
            stats
        });
        Self { stop, task }
    }

    /// Stops adding and deleting; returns what was done.
    pub async fn stop(self) -> FeedStats {
        self.stop.cancel();
        self.task.await.unwrap_or_default()
    }
}
