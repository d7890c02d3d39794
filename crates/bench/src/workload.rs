//! The benchmark's objects: fake nodes, pods and PodGroups for each case, built as plain data (no API calls).
//!
//! One workload shape for every case: `gangs` groups of `gang_size` identical pods (100m CPU, 64Mi each), so that
//! capacity never limits placement and the only differences between cases are the group API and the binder.
//! Upstream's own gang benchmark uses the same shapes (`test/integration/scheduler_perf/podgroup/gangscheduling`
//! templates: a `scheduling.k8s.io/v1beta1` PodGroup with `gang.minCount` and pods naming it in
//! `spec.schedulingGroup.podGroupName`).

use std::fmt;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

/// Label on every benchmark node, so a reused cluster's nodes can be counted.
pub const BENCH_NODE_LABEL: &str = "phalanx.dev/bench-node";
/// `spec.schedulerName` of the bind-rate pods: no scheduler serves it, the benchmark binds them itself.
pub const BIND_RATE_SCHEDULER: &str = "phalanx-bench-nobody";
/// `spec.schedulerName` of upstream kube-scheduler.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// Which scheduler path a case exercises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum Case {
    /// Raw API-server bind rate: pods with a scheduler name nobody serves, bound by the benchmark through
    /// `pods/binding` with the same concurrency as Phalanx's binder (no scheduling, no status writes).
    BindRate,
    /// Upstream kube-scheduler v1.37.2 with `scheduling.k8s.io/v1beta1` PodGroups (gang).
    Upstream,
    /// `phalanx run` (the release binary) as a child process, with `scheduling.phalanx.dev/v1beta1` PodGroups (gang).
    Phalanx,
    /// The same with another `phalanx` binary (`--base-phalanx-bin`, e.g. the last commit's) and without the chart's
    /// admission policies, as that binary was installed: the figures before a change, in the same invocation.
    PhalanxBase,
}

impl Case {
    /// The name printed in result lines and accepted on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Case::BindRate => "bind-rate",
            Case::Upstream => "upstream",
            Case::Phalanx => "phalanx",
            Case::PhalanxBase => "phalanx-base",
        }
    }

    /// True when the case creates PodGroups (and must see them gang-scheduled).
    pub fn has_groups(self) -> bool {
        !matches!(self, Case::BindRate)
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Name of fake node `i` (zero-based): `bench-n00000`, ... Sorted names keep node lists readable.
pub fn node_name(i: usize) -> String {
    format!("bench-n{i:05}")
}

/// Name of group `g` (zero-based).
pub fn group_name(g: usize) -> String {
    format!("gang-{g:05}")
}

/// Name of pod `p` (zero-based) of group `g`.
pub fn pod_name(g: usize, p: usize) -> String {
    format!("gang-{g:05}-{p}")
}

/// The pod `p` of group `g` for `case` in namespace `ns`: one pause container requesting 100m CPU and 64Mi, and
/// with `claim` one device through the run's claim template ([`crate::devices::add_claim`]).
///
/// - bind-rate: `schedulerName` [`BIND_RATE_SCHEDULER`], no group;
/// - upstream: `schedulerName` `default-scheduler`, `spec.schedulingGroup.podGroupName` = the group;
/// - phalanx: `schedulerName` `phalanx-scheduler`, label `scheduling.phalanx.dev/pod-group` = the group.
///
/// # Errors
/// Only if the JSON shape stops matching k8s-openapi's `Pod` (a programming error, reported rather than panicking).
pub fn pod(case: Case, ns: &str, g: usize, p: usize, claim: bool) -> anyhow::Result<Pod> {
    let group = group_name(g);
    let mut v = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name(g, p), "namespace": ns, "labels": {"app": "phalanx-bench"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "c",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}
            }]
        }
    });
    if claim {
        crate::devices::add_claim(&mut v);
    }
    let spec = &mut v["spec"];
    match case {
        Case::BindRate => spec["schedulerName"] = json!(BIND_RATE_SCHEDULER),
        Case::Upstream => {
            spec["schedulerName"] = json!(DEFAULT_SCHEDULER);
            spec["schedulingGroup"] = json!({"podGroupName": group});
        }
        Case::Phalanx | Case::PhalanxBase => {
            spec["schedulerName"] = json!(phalanx_api::DEFAULT_SCHEDULER_NAME);
            v["metadata"]["labels"][phalanx_api::labels::POD_GROUP] = json!(group);
        }
    }
    serde_json::from_value(v).context("building a benchmark Pod")
}

/// An upstream `scheduling.k8s.io/v1beta1` PodGroup named `name` with `gang.minCount = min_count`.
///
/// # Errors
/// Only if the JSON shape stops matching k8s-openapi's type.
pub fn upstream_pod_group(
    ns: &str,
    name: &str,
    min_count: i32,
) -> anyhow::Result<k8s_openapi::api::scheduling::v1beta1::PodGroup> {
    serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    }))
    .context("building an upstream PodGroup")
}

/// A Phalanx `scheduling.phalanx.dev/v1beta1` PodGroup named `name` with `gang.minCount = min_count`.
///
/// # Errors
/// Only if the JSON shape stops matching phalanx-api's type.
pub fn phalanx_pod_group(
    ns: &str,
    name: &str,
    min_count: i32,
) -> anyhow::Result<phalanx_api::v1beta1::PodGroup> {
    serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    }))
    .context("building a Phalanx PodGroup")
}

/// True when `obj` (any object serialised to JSON) has `status.conditions[type == type_].status == "True"`.
/// Used for both PodGroup APIs, whose condition lists have the same shape.
pub fn condition_true(obj: &serde_json::Value, type_: &str) -> bool {
    obj.pointer("/status/conditions")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(serde_json::Value::as_str) == Some(type_)
                    && c.get("status").and_then(serde_json::Value::as_str) == Some("True")
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_carry_the_group_the_way_each_scheduler_reads_it() {
        let up = pod(Case::Upstream, "ns", 3, 7, false).unwrap();
        let spec = up.spec.as_ref().unwrap();
        assert_eq!(up.metadata.name.as_deref(), Some("gang-00003-7"));
        assert_eq!(spec.scheduler_name.as_deref(), Some(DEFAULT_SCHEDULER));
        assert_eq!(
            spec.scheduling_group
                .as_ref()
                .and_then(|g| g.pod_group_name.as_deref()),
            Some("gang-00003")
        );
        let ph = pod(Case::Phalanx, "ns", 3, 7, true).unwrap();
        assert_eq!(phalanx_api::pod_group_name(&ph), Some("gang-00003"));
        assert_eq!(
            ph.spec.as_ref().unwrap().scheduler_name.as_deref(),
            Some(phalanx_api::DEFAULT_SCHEDULER_NAME)
        );
        let br = pod(Case::BindRate, "ns", 0, 0, false).unwrap();
        assert_eq!(phalanx_api::pod_group_name(&br), None);
        assert_eq!(
            br.spec.as_ref().unwrap().scheduler_name.as_deref(),
            Some(BIND_RATE_SCHEDULER)
        );
    }

    #[test]
    fn pod_groups_are_gangs_and_conditions_are_read() {
        let up = upstream_pod_group("ns", "g", 8).unwrap();
        let gang = up.spec.scheduling_policy.gang.as_ref().unwrap();
        assert_eq!(gang.min_count, 8);
        let ph = phalanx_pod_group("ns", "g", 8).unwrap();
        assert_eq!(ph.spec.scheduling_policy.gang.as_ref().unwrap().min_count, 8);

        let t = "PodGroupInitiallyScheduled";
        let yes = json!({"status": {"conditions": [{"type": "Valid", "status": "False"}, {"type": t, "status": "True"}]}});
        let no = json!({"status": {"conditions": [{"type": t, "status": "False"}]}});
        assert!(condition_true(&yes, t));
        assert!(!condition_true(&no, t));
        assert!(!condition_true(&json!({"status": {}}), t));
    }
}
