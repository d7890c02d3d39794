//! Plugin registry and profile (upstream `pkg/scheduler/framework/runtime/registry.go`,
//! `framework.go` `NewFramework`, and the default profile of
//! `pkg/scheduler/apis/config/v1/default_plugins.go`).
//!
//! A [`Registry`] maps upstream plugin names to factories that build the plugin from the
//! [`SchedulerConfig`] (upstream plugin args). A [`Profile`] picks registered plugins by name,
//! in order: Filter runs in that order, and each Score plugin gets its weight from
//! `pluginWeights` (or its default weight), weight 0 leaving it out. The in-tree registry
//! registers in the order of upstream's default profile, and [`Profile::in_tree`] enables all
//! of it, so adding a plugin is: write its module, add one line to [`Registry::in_tree`].

use std::fmt;
use std::sync::Arc;

pub use crate::plugins::cycle_state::CycleState;

use crate::config::SchedulerConfig;
use crate::framework::{FilterPlugin, Plugin, ScorePlugin};
use crate::model::PodInfo;
use crate::plugins::cycle_state::{FilterSlot, ScoreSlot, filter_slot, score_slot};
use crate::plugins::{
    dynamic_resources, inter_pod_affinity, node_affinity, node_name, node_ports, node_resources,
    node_unschedulable, node_volume_limits, pod_topology_spread, taint_toleration, volume_binding,
    volume_restrictions, volume_zone,
};
use crate::snapshot::Snapshot;

/// Errors of registration and profile building; messages name the plugin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// [`Registry::register`] with a name already taken (upstream: "a plugin named %v already
    /// exists").
    #[error("a plugin named {0:?} is already registered")]
    AlreadyRegistered(String),
    /// A profile names a plugin that is not registered.
    #[error("plugin {name:?} is not registered (registered plugins: {known})")]
    NotRegistered {
        /// The unknown name.
        name: String,
        /// Registered names, comma-separated, in registration order.
        known: String,
    },
    /// A profile names a plugin twice.
    #[error("plugin {0:?} is listed more than once in the profile")]
    DuplicateInProfile(String),
    /// A factory built a plugin whose [`Plugin::name`] is not the name it is registered under.
    #[error("the factory registered as {registered:?} built a plugin named {built:?}")]
    NameMismatch {
        /// Registered name.
        registered: String,
        /// [`Plugin::name`] of what the factory built.
        built: String,
    },
}

/// A built plugin and the extension points it takes part in (upstream: whichever interfaces
/// the object returned by the factory implements; Rust cannot ask, so the constructor says).
pub struct PluginInstance {
    name: &'static str,
    plugin: Arc<dyn Plugin>,
    filter: Option<Box<dyn FilterSlot>>,
    score: Option<(Box<dyn ScoreSlot>, i64)>,
}

impl fmt::Debug for PluginInstance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginInstance")
            .field("name", &self.name)
            .field("filter", &self.filter.is_some())
            .field("default_weight", &self.score.as_ref().map(|s| s.1))
            .finish()
    }
}

impl PluginInstance {
    /// A PreFilter + Filter plugin.
    pub fn filter<P: FilterPlugin>(plugin: P) -> PluginInstance {
        let p = Arc::new(plugin);
        PluginInstance {
            name: p.name(),
            plugin: p.clone(),
            filter: Some(filter_slot(p)),
            score: None,
        }
    }

    /// A PreScore + Score (+ NormalizeScore) plugin.
    pub fn score<P: ScorePlugin>(plugin: P) -> PluginInstance {
        let p = Arc::new(plugin);
        PluginInstance {
            name: p.name(),
            plugin: p.clone(),
            filter: None,
            score: Some((score_slot(p.clone()), p.default_weight())),
        }
    }

    /// A plugin at both the Filter and the Score extension points (one instance shared by
    /// both, as upstream).
    pub fn filter_and_score<P: FilterPlugin + ScorePlugin>(plugin: P) -> PluginInstance {
        let p = Arc::new(plugin);
        PluginInstance {
            name: Plugin::name(&*p),
            plugin: p.clone(),
            filter: Some(filter_slot(p.clone())),
            score: Some((score_slot(p.clone()), p.default_weight())),
        }
    }

    /// The plugin's name ([`Plugin::name`]).
    pub fn name(&self) -> &'static str {
        self.name
    }
}

/// Builds a plugin from the configuration (upstream `PluginFactory`).
pub type PluginFactory = Box<dyn Fn(&SchedulerConfig) -> PluginInstance + Send + Sync>;

/// Plugin factories by upstream name, in registration order (upstream `Registry`).
#[derive(Default)]
pub struct Registry {
    factories: Vec<(&'static str, PluginFactory)>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// The in-tree plugins (upstream `NewInTreeRegistry`), registered in the order of
    /// upstream's default profile (`getDefaultPlugins`, MultiPoint): that order is the Filter
    /// order of [`Profile::in_tree`].
    pub fn in_tree() -> Registry {
        use crate::plugins::dynamic_resources::DynamicResources;
        use crate::plugins::inter_pod_affinity::InterPodAffinity;
        use crate::plugins::node_affinity::NodeAffinity;
        use crate::plugins::node_name::NodeName;
        use crate::plugins::node_ports::NodePorts;
        use crate::plugins::node_resources::{NodeResourcesBalancedAllocation, NodeResourcesFit};
        use crate::plugins::node_unschedulable::NodeUnschedulable;
        use crate::plugins::pod_topology_spread::PodTopologySpread;
        use crate::plugins::taint_toleration::TaintToleration;
        use crate::plugins::{
            node_volume_limits::NodeVolumeLimits, volume_binding::VolumeBinding,
            volume_restrictions::VolumeRestrictions, volume_zone::VolumeZone,
        };
        let factories: Vec<(&'static str, PluginFactory)> = vec![
            (
                node_unschedulable::NAME,
                Box::new(|_| PluginInstance::filter(NodeUnschedulable)),
            ),
            (node_name::NAME, Box::new(|_| PluginInstance::filter(NodeName))),
            (
                taint_toleration::NAME,
                Box::new(|_| PluginInstance::filter_and_score(TaintToleration)),
            ),
            (
                node_affinity::NAME,
                Box::new(|_| PluginInstance::filter_and_score(NodeAffinity)),
            ),
            (node_ports::NAME, Box::new(|_| PluginInstance::filter(NodePorts))),
            (
                node_resources::NAME,
                Box::new(|c| {
                    PluginInstance::filter_and_score(NodeResourcesFit::new(
                        c.scoring_strategy,
                        &c.scoring_resources,
                    ))
                }),
            ),
            (
                volume_restrictions::NAME,
                Box::new(|_| PluginInstance::filter(VolumeRestrictions)),
            ),
            (
                node_volume_limits::NAME,
                Box::new(|_| PluginInstance::filter(NodeVolumeLimits)),
            ),
            (
                volume_binding::NAME,
                Box::new(|_| PluginInstance::filter(VolumeBinding)),
            ),
            (
                volume_zone::NAME,
                Box::new(|_| PluginInstance::filter(VolumeZone)),
            ),
            (
                pod_topology_spread::NAME,
                Box::new(|_| PluginInstance::filter_and_score(PodTopologySpread)),
            ),
            (
                inter_pod_affinity::NAME,
                Box::new(|_| PluginInstance::filter_and_score(InterPodAffinity)),
            ),
            (
                dynamic_resources::NAME,
                Box::new(|_| PluginInstance::filter(DynamicResources)),
            ),
            (
                node_resources::BALANCED_NAME,
                Box::new(|_| PluginInstance::score(NodeResourcesBalancedAllocation)),
            ),
        ];
        Registry { factories }
    }

    /// Registers a factory under `name` (upstream `Registry.Register`). Errors when the name is
    /// taken.
    pub fn register(
        &mut self,
        name: &'static str,
        factory: impl Fn(&SchedulerConfig) -> PluginInstance + Send + Sync + 'static,
    ) -> Result<(), RegistryError> {
        if self.factories.iter().any(|(n, _)| *n == name) {
            return Err(RegistryError::AlreadyRegistered(name.into()));
        }
        self.factories.push((name, Box::new(factory)));
        Ok(())
    }

    /// Registered names, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.factories.iter().map(|(n, _)| *n)
    }

    /// Builds the plugin registered as `name`. Errors: not registered, or the factory built a
    /// plugin with another name.
    pub fn build(&self, name: &str, config: &SchedulerConfig) -> Result<PluginInstance, RegistryError> {
        let Some((registered, factory)) = self.factories.iter().find(|(n, _)| *n == name) else {
            return Err(RegistryError::NotRegistered {
                name: name.into(),
                known: self.names().collect::<Vec<_>>().join(", "),
            });
        };
        let built = factory(config);
        if built.name != *registered {
            return Err(RegistryError::NameMismatch {
                registered: (*registered).into(),
                built: built.name.into(),
            });
        }
        Ok(built)
    }
}

/// The plugins of one scheduler profile, built and weighted (upstream `frameworkImpl` of a
/// `KubeSchedulerProfile`): Filter plugins in profile order, Score plugins with a non-zero
/// weight. Immutable; per-pod state lives in a [`CycleState`] made from it.
pub struct Profile {
    /// Distinct plugins taking part, in profile order, for [`Plugin::node_local`].
    plugins: Vec<Arc<dyn Plugin>>,
    names: Vec<&'static str>,
    /// Slots in order with nothing computed; cloned into every new [`CycleState`].
    template: CycleState,
    filter_names: Vec<&'static str>,
    /// Per score slot: plugin name, weight (> 0) and index into `plugins`.
    scores: Vec<(&'static str, i64, usize)>,
}

impl fmt::Debug for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Profile")
            .field("filters", &self.filter_names)
            .field("scores", &self.score_plugins())
            .finish()
    }
}

impl Profile {
    /// Builds the plugins `names` from `registry`, in that order. A Score plugin's weight is
    /// `config.plugin_weights` for its name ([`crate::config::PluginWeights::get`]), else its
    /// [`ScorePlugin::default_weight`]; weight 0 leaves its score out (its Filter, if any,
    /// still runs). The config should have passed [`SchedulerConfig::validate`]. Errors: an
    /// unknown or repeated name, or a factory that built a differently named plugin.
    pub fn new(
        registry: &Registry,
        names: &[&str],
        config: &SchedulerConfig,
    ) -> Result<Profile, RegistryError> {
        let mut plugins = Vec::with_capacity(names.len());
        let mut built_names = Vec::with_capacity(names.len());
        let mut filters = Vec::new();
        let mut filter_names = Vec::new();
        let mut score_slots = Vec::new();
        let mut scores = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) {
                return Err(RegistryError::DuplicateInProfile((*name).into()));
            }
            let built = registry.build(name, config)?;
            let mut takes_part = false;
            if let Some(slot) = built.filter {
                filters.push(slot);
                filter_names.push(built.name);
                takes_part = true;
            }
            if let Some((slot, default_weight)) = built.score {
                let weight = config.plugin_weights.get(built.name).unwrap_or(default_weight);
                if weight != 0 {
                    score_slots.push(slot);
                    scores.push((built.name, weight, plugins.len()));
                    takes_part = true;
                }
            }
            // A score-only plugin weighted 0 takes no part (not even in batching decisions).
            if takes_part {
                plugins.push(built.plugin);
                built_names.push(built.name);
            }
        }
        Ok(Profile {
            plugins,
            names: built_names,
            template: CycleState::new(filters, score_slots),
            filter_names,
            scores,
        })
    }

    /// Every in-tree plugin in upstream's default-profile order, weighted from `config`.
    pub fn in_tree(config: &SchedulerConfig) -> Profile {
        let registry = Registry::in_tree();
        let names: Vec<&str> = registry.names().collect();
        // Cannot fail: the names come from the registry itself, once each, and each in-tree
        // factory builds the plugin of its name (tested below).
        Profile::new(&registry, &names, config).expect("the in-tree profile is valid")
    }

    /// Names of the plugins taking part (all listed ones but score-only plugins weighted 0),
    /// in order.
    pub fn plugins(&self) -> &[&'static str] {
        &self.names
    }

    /// Names of the Filter plugins, in the order Filter runs.
    pub fn filter_plugins(&self) -> &[&'static str] {
        &self.filter_names
    }

    /// The enabled Score plugins and their weights (weight 0 ones are absent).
    pub fn score_plugins(&self) -> Vec<(&'static str, i64)> {
        self.scores.iter().map(|&(n, w, _)| (n, w)).collect()
    }

    /// A fresh [`CycleState`] for this profile (nothing computed: run
    /// [`CycleState::pre_filter`] before filtering).
    pub fn cycle_state(&self) -> CycleState {
        self.template.clone()
    }

    /// PreFilter of `pod` on `snapshot`: a new [`CycleState`] ready for
    /// [`CycleState::filter`] and the PreFilter extensions.
    pub fn pre_filter(&self, pod: &PodInfo, snapshot: &Snapshot) -> CycleState {
        let mut state = self.cycle_state();
        state.pre_filter(pod, snapshot);
        state
    }

    /// Whether every plugin is node-local for `pod` ([`Plugin::node_local`]).
    pub fn node_local(&self, pod: &PodInfo, snapshot: &Snapshot) -> bool {
        self.plugins.iter().all(|p| p.node_local(pod, snapshot))
    }

    /// [`Plugin::node_local`] of every plugin into `out` (by plugin index); returns whether
    /// all are.
    pub(crate) fn node_local_each(&self, pod: &PodInfo, snapshot: &Snapshot, out: &mut Vec<bool>) -> bool {
        out.clear();
        out.extend(self.plugins.iter().map(|p| p.node_local(pod, snapshot)));
        out.iter().all(|&l| l)
    }

    /// For a pod some plugins are not node-local for (`local`, from [`Profile::node_local_each`]): whether all of
    /// those are Filter-only plugins that run per pod on top of the batching cache ([`Plugin::filter_per_pod`]) and
    /// come after every other Filter plugin. Then `out` marks their Filter slots (by slot index) and the answer is
    /// true; otherwise false (the pod is not batched).
    pub(crate) fn per_pod_filters(&self, pod: &PodInfo, local: &[bool], out: &mut Vec<bool>) -> bool {
        out.clear();
        out.resize(self.filter_names.len(), false);
        for (i, p) in self.plugins.iter().enumerate() {
            if local.get(i).copied().unwrap_or(false) {
                continue;
            }
            let scores = self.scores.iter().any(|&(_, _, owner)| owner == i);
            let slot = self.filter_names.iter().position(|n| *n == self.names[i]);
            match slot {
                Some(f) if !scores && p.filter_per_pod(pod) => out[f] = true,
                _ => return false,
            }
        }
        // Per-pod slots last: the first rejection stays the one the full Filter pass would report.
        let first = out.iter().position(|&m| m).unwrap_or(out.len());
        out[first..].iter().all(|&m| m)
    }

    /// Number of score slots.
    pub(crate) fn score_count(&self) -> usize {
        self.scores.len()
    }

    /// Weight of score slot `j`.
    pub(crate) fn weight(&self, j: usize) -> i64 {
        self.scores[j].1
    }

    /// Plugin index (into [`Profile::node_local_each`]'s output) of score slot `j`.
    pub(crate) fn score_owner(&self, j: usize) -> usize {
        self.scores[j].2
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::PreFilterPlugin;
    use crate::model::NodeInfo;
    use crate::plugins::Rejection;

    #[test]
    fn in_tree_profile_follows_upstream_default_order_and_weights() {
        let p = Profile::in_tree(&SchedulerConfig::default());
        assert_eq!(
            p.filter_plugins(),
            [
                "NodeUnschedulable",
                "NodeName",
                "TaintToleration",
                "NodeAffinity",
                "NodePorts",
                "NodeResourcesFit",
                "VolumeRestrictions",
                "NodeVolumeLimits",
                "VolumeBinding",
                "VolumeZone",
                "PodTopologySpread",
                "InterPodAffinity",
                "DynamicResources",
            ]
        );
        assert_eq!(
            p.score_plugins(),
            [
                ("TaintToleration", 3),
                ("NodeAffinity", 2),
                ("NodeResourcesFit", 1),
                ("PodTopologySpread", 2),
                ("InterPodAffinity", 2),
                ("NodeResourcesBalancedAllocation", 1),
            ]
        );
    }

    #[test]
    fn unknown_plugin_name_is_a_clear_error() {
        let err = Profile::new(
            &Registry::in_tree(),
            &["NodeName", "NodeAfinity"],
            &SchedulerConfig::default(),
        )
        .unwrap_err();
        assert_eq!(
            err,
            RegistryError::NotRegistered {
                name: "NodeAfinity".into(),
                known: "NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodePorts, \
                        NodeResourcesFit, VolumeRestrictions, NodeVolumeLimits, VolumeBinding, VolumeZone, \
                        PodTopologySpread, InterPodAffinity, DynamicResources, NodeResourcesBalancedAllocation"
                    .into(),
            }
        );
        assert!(
            err.to_string().starts_with(
                "plugin \"NodeAfinity\" is not registered (registered plugins: NodeUnschedulable,"
            ),
            "{err}"
        );
        let err = Profile::new(
            &Registry::in_tree(),
            &["NodeName", "NodeName"],
            &SchedulerConfig::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "plugin \"NodeName\" is listed more than once in the profile"
        );
    }

    #[test]
    fn weight_zero_disables_the_score_but_not_the_filter() {
        let mut config = SchedulerConfig::default();
        config.plugin_weights.taint_toleration = 0;
        config.plugin_weights.node_resources_balanced_allocation = 0;
        config.plugin_weights.node_affinity = 7;
        let p = Profile::in_tree(&config);
        assert_eq!(
            p.score_plugins(),
            [
                ("NodeAffinity", 7),
                ("NodeResourcesFit", 1),
                ("PodTopologySpread", 2),
                ("InterPodAffinity", 2),
            ]
        );
        assert!(p.filter_plugins().contains(&"TaintToleration"));
        assert!(p.plugins().contains(&"TaintToleration"));
        assert!(!p.plugins().contains(&"NodeResourcesBalancedAllocation"));
    }

    /// A plugin outside the tree: rejects nodes named "bad"; no PreFilter state.
    struct NoBad;
    impl Plugin for NoBad {
        fn name(&self) -> &'static str {
            "NoBad"
        }
        fn node_local(&self, _: &PodInfo, _: &Snapshot) -> bool {
            true
        }
    }
    impl PreFilterPlugin for NoBad {
        type PreFilterState = ();
        fn pre_filter(&self, _: &PodInfo, _: &Snapshot) -> Option<()> {
            Some(())
        }
    }
    impl FilterPlugin for NoBad {
        fn filter(&self, _: &(), _: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
            if node.name() == "bad" {
                return Err(Rejection::new(
                    "NoBad",
                    crate::framework::Code::Unschedulable,
                    "bad node",
                ));
            }
            Ok(())
        }
    }

    #[test]
    fn registering_a_plugin_adds_it_to_profiles() {
        let mut r = Registry::in_tree();
        r.register("NoBad", |_| PluginInstance::filter(NoBad)).unwrap();
        assert_eq!(
            r.register("NoBad", |_| PluginInstance::filter(NoBad)),
            Err(RegistryError::AlreadyRegistered("NoBad".into()))
        );
        let config = SchedulerConfig::default();
        let p = Profile::new(&r, &["NodeName", "NoBad"], &config).unwrap();
        assert_eq!(p.filter_plugins(), ["NodeName", "NoBad"]);
        assert!(p.score_plugins().is_empty());
        let snap = Snapshot::new([
            Arc::new(crate::model::NodeStatic::simple("bad", 1000, 1 << 30, &[])),
            Arc::new(crate::model::NodeStatic::simple("good", 1000, 1 << 30, &[])),
        ]);
        let pod = PodInfo::simple("ns", "p", 100);
        let st = p.pre_filter(&pod, &snap);
        assert_eq!(st.filter(&pod, snap.node(0)).unwrap_err().reasons, ["bad node"]);
        assert!(st.filter(&pod, snap.node(1)).is_ok());
        // A factory must build the plugin of its name.
        r.register("Alias", |_| PluginInstance::filter(NoBad)).unwrap();
        assert_eq!(
            Profile::new(&r, &["Alias"], &config).unwrap_err().to_string(),
            "the factory registered as \"Alias\" built a plugin named \"NoBad\""
        );
    }
}
