//! Scheduler configuration, read by the binary from YAML.
//!
//! Defaults follow upstream's default profile (`pkg/scheduler/apis/config/v1/default_plugins.go`)
//! and queue defaults (`pkg/scheduler/backend/queue`): score weights TaintToleration 3,
//! NodeAffinity 2, PodTopologySpread 2, InterPodAffinity 2, NodeResourcesFit 1,
//! NodeResourcesBalancedAllocation 1; placement score weights NodeResourcesFit 1 and
//! PodGroupPodsCount 1; backoff 1 s initial, 10 s max; unschedulable flush 5 min.

use std::time::Duration;

use serde::{Deserialize, Serialize};

// NodeResourcesFit's own arguments live with the plugin, which reads them; the configuration names them here too.
pub use crate::plugins::node_resources::{ResourceWeight, ScoringStrategy};

/// Error from [`SchedulerConfig::validate`]; `key` is the camelCase path of the bad field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid scheduler configuration: {key}: {message}")]
pub struct ConfigError {
    /// Path of the offending key, e.g. `pluginWeights.taintToleration`.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// Weights of the per-pod Score plugins. A weight of 0 disables the plugin's score.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PluginWeights {
    /// TaintToleration (default 3).
    pub taint_toleration: i64,
    /// NodeAffinity (default 2).
    pub node_affinity: i64,
    /// PodTopologySpread (default 2).
    pub pod_topology_spread: i64,
    /// InterPodAffinity (default 2).
    pub inter_pod_affinity: i64,
    /// NodeResourcesFit (default 1).
    pub node_resources_fit: i64,
    /// NodeResourcesBalancedAllocation (default 1).
    pub node_resources_balanced_allocation: i64,
}

impl PluginWeights {
    /// Every field as (upstream plugin name, YAML key under `pluginWeights`).
    pub const KEYS: [(&'static str, &'static str); 6] = [
        (crate::plugins::taint_toleration::NAME, "taintToleration"),
        (crate::plugins::node_affinity::NAME, "nodeAffinity"),
        (crate::plugins::pod_topology_spread::NAME, "podTopologySpread"),
        (crate::plugins::inter_pod_affinity::NAME, "interPodAffinity"),
        (crate::plugins::node_resources::NAME, "nodeResourcesFit"),
        (
            crate::plugins::node_resources::BALANCED_NAME,
            "nodeResourcesBalancedAllocation",
        ),
    ];

    /// The configured weight of a Score plugin by upstream name (e.g. `"TaintToleration"`), or
    /// `None` when there is no key for it: the profile then uses the plugin's
    /// [`crate::framework::ScorePlugin::default_weight`].
    pub fn get(&self, plugin: &str) -> Option<i64> {
        use crate::plugins::{
            inter_pod_affinity, node_affinity, node_resources, pod_topology_spread, taint_toleration,
        };
        Some(match plugin {
            taint_toleration::NAME => self.taint_toleration,
            node_affinity::NAME => self.node_affinity,
            pod_topology_spread::NAME => self.pod_topology_spread,
            inter_pod_affinity::NAME => self.inter_pod_affinity,
            node_resources::NAME => self.node_resources_fit,
            node_resources::BALANCED_NAME => self.node_resources_balanced_allocation,
            _ => return None,
        })
    }
}

impl Default for PluginWeights {
    fn default() -> Self {
        PluginWeights {
            taint_toleration: 3,
            node_affinity: 2,
            pod_topology_spread: 2,
            inter_pod_affinity: 2,
            node_resources_fit: 1,
            node_resources_balanced_allocation: 1,
        }
    }
}

/// Weights of the PlacementScore plugins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PlacementScoreWeights {
    /// NodeResourcesFit, always MostAllocated over the placement (default 1).
    pub node_resources_fit: i64,
    /// PodGroupPodsCount (default 1).
    pub pod_group_pods_count: i64,
    /// TopologyPacking (Phalanx; default 1, 0 = upstream's scoring): the placement that leaves the
    /// least free capacity in its domain wins, so the next large group still finds a whole domain.
    pub topology_packing: i64,
}

impl Default for PlacementScoreWeights {
    fn default() -> Self {
        PlacementScoreWeights {
            node_resources_fit: 1,
            pod_group_pods_count: 1,
            topology_packing: 1,
        }
    }
}

/// The whole configuration. Units: durations in milliseconds (`*Ms`) or seconds (`*Seconds`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// Per-pod score plugin weights.
    pub plugin_weights: PluginWeights,
    /// NodeResourcesFit per-pod scoring strategy.
    pub scoring_strategy: ScoringStrategy,
    /// Resources and weights scored by NodeResourcesFit (default cpu:1, memory:1).
    pub scoring_resources: Vec<ResourceWeight>,
    /// PlacementScore plugin weights.
    pub placement_score_weights: PlacementScoreWeights,
    /// Initial backoff in milliseconds (default 1000).
    pub pod_initial_backoff_ms: u64,
    /// Maximum backoff in milliseconds before the sqrt(group size) factor (default 10000).
    pub pod_max_backoff_ms: u64,
    /// Entities stay at most this long in the unschedulable pool before a flush moves them
    /// back (default 300 s, upstream `podMaxInUnschedulablePodsDuration`).
    pub unschedulable_flush_seconds: u64,
    /// Time budget for the reorder retry of a failed heterogeneous group, in milliseconds
    /// (default 50; 0 disables the retry).
    pub reorder_budget_ms: u64,
    /// Maximum number of alternative orders tried by the reorder retry (default 2).
    pub reorder_max_attempts: u32,
    /// percentageOfNodesToScore: 0 = adaptive (upstream default), else 1..=100.
    pub percentage_of_nodes_to_score: u32,
    /// Preemption by a topology-constrained group evaluates this many of its best placements
    /// and keeps the least disruptive one (default 5, 1..=100; 1 = upstream's single best
    /// placement). Beyond upstream: 1.37 preempts for the single best placement and lists
    /// scoring placements by victim cost as future work.
    pub preemption_candidate_placements: u32,
    /// percentageOfPlacementsToScore (upstream k/k#139064): a topology group stops evaluating
    /// placements once this share of them proved feasible (at least one). 0 = adaptive (default):
    /// `max(5, 100 - nodes x 9/500)` percent, where `nodes` counts the nodes of every placement, so
    /// 10% at 5,000 nodes; else 1..=100 (100 = evaluate every placement). Phalanx rounds the count up.
    pub percentage_of_placements_to_score: u32,
    /// Time budget in milliseconds of the sibling search of a root CompositePodGroup, run when
    /// the greedy pass fails (default 50; 0 disables it; at most 10000). Beyond upstream.
    pub sibling_search_budget_ms: u64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            plugin_weights: PluginWeights::default(),
            scoring_strategy: ScoringStrategy::LeastAllocated,
            scoring_resources: vec![
                ResourceWeight {
                    name: "cpu".into(),
                    weight: 1,
                },
                ResourceWeight {
                    name: "memory".into(),
                    weight: 1,
                },
            ],
            placement_score_weights: PlacementScoreWeights::default(),
            pod_initial_backoff_ms: 1000,
            pod_max_backoff_ms: 10_000,
            unschedulable_flush_seconds: 300,
            reorder_budget_ms: 50,
            reorder_max_attempts: 2,
            percentage_of_nodes_to_score: 0,
            preemption_candidate_placements: 5,
            percentage_of_placements_to_score: 0,
            sibling_search_budget_ms: 50,
        }
    }
}

impl SchedulerConfig {
    /// Checks ranges. Errors name the offending key (camelCase path).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: String| {
            Err(ConfigError {
                key: key.into(),
                message,
            })
        };
        let w = &self.plugin_weights;
        let plugin_weights = PluginWeights::KEYS
            .iter()
            .map(|(plugin, key)| (format!("pluginWeights.{key}"), w.get(plugin).unwrap_or_default()));
        let placement_weights = [
            (
                "placementScoreWeights.nodeResourcesFit".to_string(),
                self.placement_score_weights.node_resources_fit,
            ),
            (
                "placementScoreWeights.podGroupPodsCount".to_string(),
                self.placement_score_weights.pod_group_pods_count,
            ),
            (
                "placementScoreWeights.topologyPacking".to_string(),
                self.placement_score_weights.topology_packing,
            ),
        ];
        for (key, v) in plugin_weights.chain(placement_weights) {
            if !(0..=100).contains(&v) {
                return bad(&key, format!("weight {v} must be between 0 and 100"));
            }
        }
        if self.scoring_resources.is_empty() {
            return bad("scoringResources", "must list at least one resource".into());
        }
        for (i, r) in self.scoring_resources.iter().enumerate() {
            if r.name.is_empty() {
                return bad(&format!("scoringResources[{i}].name"), "must not be empty".into());
            }
            if !(1..=100).contains(&r.weight) {
                return bad(
                    &format!("scoringResources[{i}].weight"),
                    format!("weight {} must be between 1 and 100", r.weight),
                );
            }
            if self.scoring_resources[..i].iter().any(|o| o.name == r.name) {
                return bad(
                    &format!("scoringResources[{i}].name"),
                    format!("duplicate resource {:?}", r.name),
                );
            }
        }
        if self.pod_initial_backoff_ms == 0 {
            return bad("podInitialBackoffMs", "must be greater than 0".into());
        }
        if self.pod_max_backoff_ms < self.pod_initial_backoff_ms {
            return bad(
                "podMaxBackoffMs",
                format!(
                    "{} must be at least podInitialBackoffMs ({})",
                    self.pod_max_backoff_ms, self.pod_initial_backoff_ms
                ),
            );
        }
        if self.unschedulable_flush_seconds == 0 {
            return bad("unschedulableFlushSeconds", "must be greater than 0".into());
        }
        if self.percentage_of_nodes_to_score > 100 {
            return bad(
                "percentageOfNodesToScore",
                format!("{} must be between 0 and 100", self.percentage_of_nodes_to_score),
            );
        }
        if !(1..=100).contains(&self.preemption_candidate_placements) {
            return bad(
                "preemptionCandidatePlacements",
                format!(
                    "{} must be between 1 and 100",
                    self.preemption_candidate_placements
                ),
            );
        }
        if self.reorder_budget_ms > 10_000 {
            return bad(
                "reorderBudgetMs",
                format!("{} must be at most 10000", self.reorder_budget_ms),
            );
        }
        if self.percentage_of_placements_to_score > 100 {
            return bad(
                "percentageOfPlacementsToScore",
                format!(
                    "{} must be between 0 and 100",
                    self.percentage_of_placements_to_score
                ),
            );
        }
        if self.sibling_search_budget_ms > 10_000 {
            return bad(
                "siblingSearchBudgetMs",
                format!("{} must be at most 10000", self.sibling_search_budget_ms),
            );
        }
        Ok(())
    }

    /// Initial backoff.
    pub fn initial_backoff(&self) -> Duration {
        Duration::from_millis(self.pod_initial_backoff_ms)
    }

    /// Maximum backoff (before the group-size factor).
    pub fn max_backoff(&self) -> Duration {
        Duration::from_millis(self.pod_max_backoff_ms)
    }

    /// Unschedulable flush interval.
    pub fn flush_interval(&self) -> Duration {
        Duration::from_secs(self.unschedulable_flush_seconds)
    }

    /// Reorder retry budget.
    pub fn reorder_budget(&self) -> Duration {
        Duration::from_millis(self.reorder_budget_ms)
    }

    /// Sibling search budget per root CompositePodGroup.
    pub fn sibling_search_budget(&self) -> Duration {
        Duration::from_millis(self.sibling_search_budget_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_matches_upstream_profile() {
        let c = SchedulerConfig::default();
        c.validate().unwrap();
        assert_eq!(c.plugin_weights.taint_toleration, 3);
        assert_eq!(c.plugin_weights.node_affinity, 2);
        assert_eq!(
            c.placement_score_weights,
            PlacementScoreWeights {
                node_resources_fit: 1,
                pod_group_pods_count: 1,
                topology_packing: 1,
            }
        );
        assert_eq!(c.percentage_of_placements_to_score, 0);
        assert_eq!(c.sibling_search_budget(), Duration::from_millis(50));
        assert_eq!(c.initial_backoff(), Duration::from_secs(1));
        assert_eq!(c.max_backoff(), Duration::from_secs(10));
        assert_eq!(c.flush_interval(), Duration::from_secs(300));
        assert_eq!(c.reorder_budget(), Duration::from_millis(50));
    }

    #[test]
    fn errors_name_the_key() {
        let mut c = SchedulerConfig::default();
        c.plugin_weights.node_affinity = 101;
        assert_eq!(c.validate().unwrap_err().key, "pluginWeights.nodeAffinity");
        let c = SchedulerConfig {
            pod_max_backoff_ms: 10,
            ..Default::default()
        };
        assert_eq!(c.validate().unwrap_err().key, "podMaxBackoffMs");
        let c = SchedulerConfig {
            percentage_of_nodes_to_score: 101,
            ..Default::default()
        };
        assert_eq!(c.validate().unwrap_err().key, "percentageOfNodesToScore");
        let c = SchedulerConfig {
            preemption_candidate_placements: 0,
            ..Default::default()
        };
        assert_eq!(c.validate().unwrap_err().key, "preemptionCandidatePlacements");
    }

    #[test]
    fn weights_by_plugin_name_cover_every_key() {
        let w = PluginWeights {
            taint_toleration: 1,
            node_affinity: 2,
            pod_topology_spread: 3,
            inter_pod_affinity: 4,
            node_resources_fit: 5,
            node_resources_balanced_allocation: 6,
        };
        let got: Vec<Option<i64>> = PluginWeights::KEYS.iter().map(|(p, _)| w.get(p)).collect();
        assert_eq!(got, (1..=6).map(Some).collect::<Vec<_>>());
        assert_eq!(w.get("NodeName"), None);
        // The YAML keys of KEYS are the serde field names.
        let json = serde_json::to_value(&w).unwrap();
        for (plugin, key) in PluginWeights::KEYS {
            assert_eq!(json[key].as_i64(), w.get(plugin), "{key}");
        }
    }

    #[test]
    fn deserializes_camel_case_and_rejects_unknown_keys() {
        let c: SchedulerConfig = serde_json::from_str(
            r#"{"scoringStrategy":"MostAllocated","pluginWeights":{"taintToleration":5},"reorderBudgetMs":20}"#,
        )
        .unwrap();
        assert_eq!(c.scoring_strategy, ScoringStrategy::MostAllocated);
        assert_eq!(c.plugin_weights.taint_toleration, 5);
        assert_eq!(c.plugin_weights.node_affinity, 2);
        assert_eq!(c.reorder_budget_ms, 20);
        assert_eq!(c.preemption_candidate_placements, 5);
        let c: SchedulerConfig = serde_json::from_str(r#"{"preemptionCandidatePlacements":1}"#).unwrap();
        assert_eq!(c.preemption_candidate_placements, 1);
        let e = serde_json::from_str::<SchedulerConfig>(r#"{"bogus":1}"#).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
    }
}
