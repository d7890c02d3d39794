//! NodeResourcesFit and NodeResourcesBalancedAllocation (upstream `plugins/noderesources`):
//! the fit filter (`Too many pods`, `Insufficient <resource>`), LeastAllocated (default) or
//! MostAllocated scoring over non-zero requests, the balanced-allocation score, and the
//! placement-level MostAllocated score used by the placement algorithm.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::framework::{Code, FilterPlugin, Plugin, PreFilterPlugin, ScorePlugin};
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::{MAX_NODE_SCORE, Rejection};
use crate::resources::{CPU, EPHEMERAL_STORAGE, MEMORY};
use crate::snapshot::Snapshot;

/// Plugin name of NodeResourcesFit.
pub const NAME: &str = "NodeResourcesFit";
/// Plugin name of NodeResourcesBalancedAllocation.
pub const BALANCED_NAME: &str = "NodeResourcesBalancedAllocation";

/// Scoring strategy of NodeResourcesFit for per-pod scoring (`scoringStrategy` of the configuration,
/// [`crate::config::SchedulerConfig`]). Here, with the plugin that reads it, so that the configuration, which
/// names the plugins, is the only one of the two that imports the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ScoringStrategy {
    /// Prefer emptier nodes (upstream default).
    #[default]
    LeastAllocated,
    /// Prefer fuller nodes (bin packing).
    MostAllocated,
}

/// Resource weight for NodeResourcesFit / BalancedAllocation scoring (upstream
/// `NodeResourcesFitArgs.scoringStrategy.resources`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceWeight {
    /// Resource name, e.g. `cpu`, `memory`, `nvidia.com/gpu`.
    pub name: String,
    /// Weight (1..=100).
    pub weight: i64,
}

/// Filter (upstream `fitsRequest`): pod count first, then every resource; each insufficient
/// resource is one reason. UnschedulableAndUnresolvable when a request exceeds the node's
/// allocatable outright (no preemption can help), else Unschedulable.
pub fn filter(pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
    let mut reasons: Vec<Cow<'static, str>> = Vec::new();
    let mut unresolvable = false;
    if node.pods.len() as i64 + 1 > node.node.allowed_pods {
        reasons.push("Too many pods".into());
        unresolvable |= node.node.allowed_pods < 1;
    }
    let req = &pod.spec.requests;
    if req.is_zero() {
        return if reasons.is_empty() {
            Ok(())
        } else {
            Err(reject(reasons, unresolvable))
        };
    }
    let alloc = &node.node.allocatable;
    let used = &node.requested;
    let mut check = |name: &str, want: i64, have: i64, used: i64| {
        if want > 0 && want > have.saturating_sub(used) {
            reasons.push(match name {
                CPU => "Insufficient cpu".into(),
                MEMORY => "Insufficient memory".into(),
                EPHEMERAL_STORAGE => "Insufficient ephemeral-storage".into(),
                other => format!("Insufficient {other}").into(),
            });
            unresolvable |= want > have;
        }
    };
    check(CPU, req.milli_cpu, alloc.milli_cpu, used.milli_cpu);
    check(MEMORY, req.memory, alloc.memory, used.memory);
    check(
        EPHEMERAL_STORAGE,
        req.ephemeral_storage,
        alloc.ephemeral_storage,
        used.ephemeral_storage,
    );
    for (name, want) in &req.scalar {
        check(name, *want, alloc.scalar(name), used.scalar(name));
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(reject(reasons, unresolvable))
    }
}

fn reject(reasons: Vec<Cow<'static, str>>, unresolvable: bool) -> Rejection {
    let code = if unresolvable {
        Code::UnschedulableAndUnresolvable
    } else {
        Code::Unschedulable
    };
    Rejection {
        plugin: NAME,
        code,
        reasons,
    }
}

/// Upstream `leastRequestedScore`.
pub fn least_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

/// Upstream `mostRequestedScore` (requested is capped at capacity).
pub fn most_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    requested.min(capacity) * MAX_NODE_SCORE / capacity
}

/// A scoring resource resolved once from its name (avoids string matching per node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScoredResource {
    /// cpu (non-zero requests).
    Cpu,
    /// memory (non-zero requests).
    Memory,
    /// ephemeral-storage.
    EphemeralStorage,
    /// Any other resource (skipped when the pod does not request it).
    Scalar(std::sync::Arc<str>),
}

impl ScoredResource {
    /// Resolves a resource name.
    pub fn from_name(name: &str) -> ScoredResource {
        match name {
            CPU => ScoredResource::Cpu,
            MEMORY => ScoredResource::Memory,
            EPHEMERAL_STORAGE => ScoredResource::EphemeralStorage,
            other => ScoredResource::Scalar(other.into()),
        }
    }

    /// Resolves configured weights.
    pub fn resolve(resources: &[ResourceWeight]) -> Vec<(ScoredResource, i64)> {
        resources
            .iter()
            .map(|r| (ScoredResource::from_name(&r.name), r.weight))
            .collect()
    }
}

/// (requested-with-pod, allocatable) for one scoring resource; `None` to skip it (an extended
/// resource the pod does not request). cpu/memory use non-zero requests.
fn alloc_request(pod: &PodInfo, node: &NodeInfo, r: &ScoredResource) -> Option<(i64, i64)> {
    let alloc = &node.node.allocatable;
    match r {
        ScoredResource::Cpu => Some((
            node.non_zero_milli_cpu
                .saturating_add(pod.spec.non_zero_milli_cpu),
            alloc.milli_cpu,
        )),
        ScoredResource::Memory => Some((
            node.non_zero_memory.saturating_add(pod.spec.non_zero_memory),
            alloc.memory,
        )),
        ScoredResource::EphemeralStorage => Some((
            node.requested
                .ephemeral_storage
                .saturating_add(pod.spec.requests.ephemeral_storage),
            alloc.ephemeral_storage,
        )),
        ScoredResource::Scalar(name) => {
            let want = pod.spec.requests.scalar(name);
            if want == 0 {
                return None;
            }
            Some((
                node.requested.scalar(name).saturating_add(want),
                alloc.scalar(name),
            ))
        }
    }
}

/// NodeResourcesFit score (0..=100): weighted average over the scoring resources of
/// LeastAllocated or MostAllocated; resources with zero allocatable are skipped.
pub fn score(
    pod: &PodInfo,
    node: &NodeInfo,
    strategy: ScoringStrategy,
    resources: &[(ScoredResource, i64)],
) -> i64 {
    let (mut total, mut weights) = (0i64, 0i64);
    for (r, weight) in resources {
        let Some((req, alloc)) = alloc_request(pod, node, r) else {
            continue;
        };
        if alloc == 0 {
            continue;
        }
        let s = match strategy {
            ScoringStrategy::LeastAllocated => least_requested(req, alloc),
            ScoringStrategy::MostAllocated => most_requested(req, alloc),
        };
        total += s * weight;
        weights += weight;
    }
    if weights == 0 { 0 } else { total / weights }
}

/// Whether BalancedAllocation skips the pod (upstream PreScore: best-effort pods).
pub fn balanced_skips(pod: &PodInfo) -> bool {
    pod.spec.requests.milli_cpu == 0 && pod.spec.requests.memory == 0
}

/// NodeResourcesBalancedAllocation score (0..=100) over cpu and memory using actual requests:
/// `(1 - std(fractions)) * 100`, fractions capped at 1.
pub fn balanced_score(pod: &PodInfo, node: &NodeInfo) -> i64 {
    let alloc = &node.node.allocatable;
    let mut fr = [0f64; 2];
    let mut n = 0;
    for (req, cap) in [
        (
            node.requested
                .milli_cpu
                .saturating_add(pod.spec.requests.milli_cpu),
            alloc.milli_cpu,
        ),
        (
            node.requested.memory.saturating_add(pod.spec.requests.memory),
            alloc.memory,
        ),
    ] {
        if cap == 0 {
            continue;
        }
        fr[n] = (req as f64 / cap as f64).min(1.0);
        n += 1;
    }
    let std = if n == 2 {
        ((fr[0] - fr[1]) / 2.0).abs()
    } else {
        0.0
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// NodeResourcesFit: Filter ([`filter`]) and Score ([`score`], default weight 1) with the
/// configured strategy and resources (upstream `NodeResourcesFitArgs.scoringStrategy`).
/// Upstream's PreFilter and PreScore only sum the pod's requests, which
/// [`crate::model::PodSpecInfo`] already holds, so there is no state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeResourcesFit {
    /// LeastAllocated or MostAllocated.
    pub strategy: ScoringStrategy,
    /// Scored resources with their weights (1..=100).
    pub resources: Vec<(ScoredResource, i64)>,
}

impl NodeResourcesFit {
    /// The plugin for a strategy and the configured resource weights.
    pub fn new(strategy: ScoringStrategy, resources: &[ResourceWeight]) -> NodeResourcesFit {
        NodeResourcesFit {
            strategy,
            resources: ScoredResource::resolve(resources),
        }
    }
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }
    fn node_local(&self, _: &PodInfo, _: &Snapshot) -> bool {
        true
    }
}

impl PreFilterPlugin for NodeResourcesFit {
    type PreFilterState = ();
    fn pre_filter(&self, _: &PodInfo, _: &Snapshot) -> Option<()> {
        Some(())
    }
}

impl FilterPlugin for NodeResourcesFit {
    fn filter(&self, _: &(), pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
        filter(pod, node)
    }
}

impl ScorePlugin for NodeResourcesFit {
    type PreScoreState = ();
    fn default_weight(&self) -> i64 {
        1
    }
    fn pre_score(&self, _: &PodInfo, _: &Snapshot, _: &[usize]) -> Option<()> {
        Some(())
    }
    /// Already 0..=100: no NormalizeScore, as upstream.
    fn score(&self, _: &(), pod: &PodInfo, node: &NodeInfo) -> i64 {
        score(pod, node, self.strategy, &self.resources)
    }
}

/// NodeResourcesBalancedAllocation: Score only ([`balanced_score`], default weight 1).
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeResourcesBalancedAllocation;

impl Plugin for NodeResourcesBalancedAllocation {
    fn name(&self) -> &'static str {
        BALANCED_NAME
    }
    fn node_local(&self, _: &PodInfo, _: &Snapshot) -> bool {
        true
    }
}

impl ScorePlugin for NodeResourcesBalancedAllocation {
    type PreScoreState = ();
    fn default_weight(&self) -> i64 {
        1
    }
    /// Skip for best-effort pods ([`balanced_skips`]), as upstream's PreScore.
    fn pre_score(&self, pod: &PodInfo, _: &Snapshot, _: &[usize]) -> Option<()> {
        (!balanced_skips(pod)).then_some(())
    }
    /// Already 0..=100: no NormalizeScore, as upstream.
    fn score(&self, _: &(), pod: &PodInfo, node: &NodeInfo) -> i64 {
        balanced_score(pod, node)
    }
}
