//! The configuration as the binary reads it: YAML through serde-saphyr.

use phalanx_scheduler::SchedulerConfig;
use phalanx_scheduler::config::ScoringStrategy;

#[test]
fn yaml_with_every_key_round_trips() {
    let yaml = r#"
pluginWeights:
  taintToleration: 3
  nodeAffinity: 2
  podTopologySpread: 2
  interPodAffinity: 2
  nodeResourcesFit: 5
  nodeResourcesBalancedAllocation: 0
scoringStrategy: MostAllocated
scoringResources:
  - {name: cpu, weight: 2}
  - {name: nvidia.com/gpu, weight: 10}
placementScoreWeights: {nodeResourcesFit: 1, podGroupPodsCount: 3, topologyPacking: 0}
podInitialBackoffMs: 500
podMaxBackoffMs: 20000
unschedulableFlushSeconds: 60
reorderBudgetMs: 10
reorderMaxAttempts: 1
percentageOfNodesToScore: 50
percentageOfPlacementsToScore: 20
siblingSearchBudgetMs: 5
"#;
    let c: SchedulerConfig = serde_saphyr::from_str(yaml).unwrap();
    c.validate().unwrap();
    assert_eq!(c.scoring_strategy, ScoringStrategy::MostAllocated);
    assert_eq!(c.plugin_weights.node_resources_fit, 5);
    assert_eq!(c.scoring_resources[1].name, "nvidia.com/gpu");
    assert_eq!(c.placement_score_weights.pod_group_pods_count, 3);
    assert_eq!(c.percentage_of_nodes_to_score, 50);
    assert_eq!(c.placement_score_weights.topology_packing, 0);
    assert_eq!(c.percentage_of_placements_to_score, 20);
    assert_eq!(c.sibling_search_budget_ms, 5);
    let back: SchedulerConfig = serde_saphyr::from_str(&serde_saphyr::to_string(&c).unwrap()).unwrap();
    assert_eq!(back, c);
}

#[test]
fn empty_yaml_is_the_default() {
    let c: SchedulerConfig = serde_saphyr::from_str("{}").unwrap();
    assert_eq!(c, SchedulerConfig::default());
}

#[test]
fn unknown_and_bad_keys_are_reported() {
    let e = serde_saphyr::from_str::<SchedulerConfig>("pluginWeights:\n  taintTolerations: 3\n").unwrap_err();
    assert!(e.to_string().contains("taintTolerations"), "{e}");
    let c: SchedulerConfig =
        serde_saphyr::from_str("scoringResources:\n  - {name: cpu, weight: 0}\n").unwrap();
    let err = c.validate().unwrap_err();
    assert_eq!(err.key, "scoringResources[0].weight");
    assert_eq!(
        err.to_string(),
        "invalid scheduler configuration: scoringResources[0].weight: weight 0 must be between 1 and 100"
    );
    let c: SchedulerConfig = serde_saphyr::from_str("percentageOfPlacementsToScore: 101\n").unwrap();
    assert_eq!(c.validate().unwrap_err().key, "percentageOfPlacementsToScore");
    let c: SchedulerConfig = serde_saphyr::from_str("siblingSearchBudgetMs: 10001\n").unwrap();
    assert_eq!(c.validate().unwrap_err().key, "siblingSearchBudgetMs");
}

#[test]
fn plugin_weights_from_yaml_weight_the_profile() {
    let yaml =
        "pluginWeights:\n  taintToleration: 0\n  nodeAffinity: 5\n  nodeResourcesBalancedAllocation: 0\n";
    let c: SchedulerConfig = serde_saphyr::from_str(yaml).unwrap();
    c.validate().unwrap();
    let profile = phalanx_scheduler::plugins::registry::Profile::in_tree(&c);
    assert_eq!(
        profile.score_plugins(),
        [
            ("NodeAffinity", 5),
            ("NodeResourcesFit", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
        ]
    );
    // Weight 0 drops TaintToleration's score, not its Filter.
    assert!(profile.filter_plugins().contains(&"TaintToleration"));
}

#[test]
fn shipped_config_file_weights_match_the_upstream_default_profile() {
    // config/phalanx.yaml (scheduler.pluginWeights) must stay valid and equal to the defaults.
    let text = include_str!("../../../config/phalanx.yaml");
    let doc: serde_json::Value = serde_saphyr::from_str(text).unwrap();
    let weights: phalanx_scheduler::config::PluginWeights =
        serde_json::from_value(doc["scheduler"]["pluginWeights"].clone()).unwrap();
    assert_eq!(weights, phalanx_scheduler::config::PluginWeights::default());
}
