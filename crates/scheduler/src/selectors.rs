//! Label and node selectors, tolerations and taints, parsed once from the API objects.
//!
//! Semantics follow upstream `k8s.io/apimachinery/pkg/labels`, `component-helpers/scheduling/corev1`
//! (`nodeaffinity`, `TolerationsTolerateTaint`) and `metav1.LabelSelectorAsSelector`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as ApiLabelSelector;

/// Operator of a label or node selector requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SelectorOp {
    /// Value in the set.
    In,
    /// Key absent or value not in the set.
    NotIn,
    /// Key present.
    Exists,
    /// Key absent.
    DoesNotExist,
    /// Integer value greater than the single value (node selectors only).
    Gt,
    /// Integer value less than the single value (node selectors only).
    Lt,
}

impl SelectorOp {
    fn parse(s: &str) -> Result<SelectorOp, String> {
        Ok(match s {
            "In" => SelectorOp::In,
            "NotIn" => SelectorOp::NotIn,
            "Exists" => SelectorOp::Exists,
            "DoesNotExist" => SelectorOp::DoesNotExist,
            "Gt" => SelectorOp::Gt,
            "Lt" => SelectorOp::Lt,
            other => return Err(format!("unknown selector operator {other:?}")),
        })
    }
}

/// One requirement `key op values`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub op: SelectorOp,
    /// Values (sorted for `In`/`NotIn`).
    pub values: Vec<String>,
}

impl Requirement {
    /// Whether `value` (the label value, `None` when absent) satisfies the requirement.
    pub fn matches_value(&self, value: Option<&str>) -> bool {
        match self.op {
            SelectorOp::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            SelectorOp::NotIn => value.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            SelectorOp::Exists => value.is_some(),
            SelectorOp::DoesNotExist => value.is_none(),
            SelectorOp::Gt | SelectorOp::Lt => {
                let (Some(v), Some(bound)) = (value, self.values.first()) else {
                    return false;
                };
                let (Ok(v), Ok(bound)) = (v.parse::<i64>(), bound.parse::<i64>()) else {
                    return false;
                };
                if self.op == SelectorOp::Gt {
                    v > bound
                } else {
                    v < bound
                }
            }
        }
    }

    /// Whether the label set satisfies the requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_value(labels.get(&self.key).map(String::as_str))
    }
}

/// A pod label selector (upstream `metav1.LabelSelector`). `nothing` models a nil selector,
/// which matches no object; an empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct LabelSelector {
    /// Requirements, ANDed (matchLabels become `In` requirements).
    pub requirements: Vec<Requirement>,
    /// True for a nil selector: matches nothing.
    pub nothing: bool,
}

impl LabelSelector {
    /// Parses an API selector; `None` yields a selector that matches nothing.
    ///
    /// Errors: unknown operator, or `Gt`/`Lt` (not allowed in label selectors).
    pub fn from_api(sel: Option<&ApiLabelSelector>) -> Result<LabelSelector, String> {
        let Some(sel) = sel else {
            return Ok(LabelSelector {
                requirements: vec![],
                nothing: true,
            });
        };
        let mut requirements = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            requirements.push(Requirement {
                key: k.clone(),
                op: SelectorOp::In,
                values: vec![v.clone()],
            });
        }
        for e in sel.match_expressions.iter().flatten() {
            let op = SelectorOp::parse(&e.operator)?;
            if matches!(op, SelectorOp::Gt | SelectorOp::Lt) {
                return Err(format!(
                    "operator {:?} is not allowed in a label selector",
                    e.operator
                ));
            }
            let mut values = e.values.clone().unwrap_or_default();
            values.sort();
            requirements.push(Requirement {
                key: e.key.clone(),
                op,
                values,
            });
        }
        Ok(LabelSelector {
            requirements,
            nothing: false,
        })
    }

    /// Whether the labels match.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }
}

/// One node selector term: expressions on labels and on fields (`metadata.name` only), ANDed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeSelectorTerm {
    /// Label requirements.
    pub labels: Vec<Requirement>,
    /// Field requirements; the key is always `metadata.name`.
    pub fields: Vec<Requirement>,
}

impl NodeSelectorTerm {
    /// Parses a term. Errors: unknown operator or unsupported field.
    pub fn from_api(t: &core::NodeSelectorTerm) -> Result<NodeSelectorTerm, String> {
        let mut labels = Vec::new();
        for e in t.match_expressions.iter().flatten() {
            labels.push(Requirement {
                key: e.key.clone(),
                op: SelectorOp::parse(&e.operator)?,
                values: e.values.clone().unwrap_or_default(),
            });
        }
        let mut fields = Vec::new();
        for e in t.match_fields.iter().flatten() {
            if e.key != "metadata.name" {
                return Err(format!("unsupported node field selector key {:?}", e.key));
            }
            fields.push(Requirement {
                key: e.key.clone(),
                op: SelectorOp::parse(&e.operator)?,
                values: e.values.clone().unwrap_or_default(),
            });
        }
        Ok(NodeSelectorTerm { labels, fields })
    }

    /// The term that selects the node named `node` (`matchFields` `metadata.name In [node]`, as upstream writes a
    /// node-local allocation's `nodeSelector`).
    pub fn node_name(node: &str) -> NodeSelectorTerm {
        NodeSelectorTerm {
            labels: Vec::new(),
            fields: vec![Requirement {
                key: "metadata.name".into(),
                op: SelectorOp::In,
                values: vec![node.to_string()],
            }],
        }
    }

    /// Whether the term is empty (upstream: an empty term matches no node).
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// Whether the node matches; an empty term matches nothing.
    pub fn matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        !self.is_empty()
            && self.labels.iter().all(|r| r.matches(labels))
            && self.fields.iter().all(|r| r.matches_value(Some(node_name)))
    }
}

/// Taint effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    /// Filtered.
    NoSchedule,
    /// Scored (TaintToleration score).
    PreferNoSchedule,
    /// Filtered.
    NoExecute,
}

impl TaintEffect {
    /// Parses an effect string. Errors: unknown effect.
    pub fn parse(s: &str) -> Result<TaintEffect, String> {
        Ok(match s {
            "NoSchedule" => TaintEffect::NoSchedule,
            "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
            "NoExecute" => TaintEffect::NoExecute,
            other => return Err(format!("unknown taint effect {other:?}")),
        })
    }

    /// Upstream string form.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value (empty when unset).
    pub value: String,
    /// Effect.
    pub effect: TaintEffect,
}

/// A pod toleration (`operator` Exists or Equal; unknown operators never tolerate).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// Key; empty with `Exists` tolerates every key.
    pub key: String,
    /// True for `Exists`, false for `Equal` (the default).
    pub exists: bool,
    /// False for an unknown operator (tolerates nothing).
    pub valid: bool,
    /// Value for `Equal`.
    pub value: String,
    /// Effect; `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// Parses a toleration; unknown effects or operators make it tolerate nothing.
    pub fn from_api(t: &core::Toleration) -> Toleration {
        let op = t.operator.as_deref().unwrap_or("Equal");
        let effect = t
            .effect
            .as_deref()
            .filter(|e| !e.is_empty())
            .map(TaintEffect::parse);
        let (effect, effect_ok) = match effect {
            None => (None, true),
            Some(Ok(e)) => (Some(e), true),
            Some(Err(_)) => (None, false),
        };
        Toleration {
            key: t.key.clone().unwrap_or_default(),
            exists: op == "Exists",
            valid: effect_ok && (op == "Exists" || op == "Equal" || op.is_empty()),
            value: t.value.clone().unwrap_or_default(),
            effect,
        }
    }

    /// Upstream `Toleration.ToleratesTaint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if !self.valid {
            return false;
        }
        if let Some(e) = self.effect
            && e != taint.effect
        {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        if self.exists {
            return true;
        }
        // An empty key is only valid with Exists.
        !self.key.is_empty() && self.value == taint.value
    }
}

/// Whether any toleration tolerates the taint.
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| t.tolerates(taint))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn requirement_operators() {
        let l = labels(&[("a", "1"), ("n", "5")]);
        let req = |key: &str, op, vals: &[&str]| Requirement {
            key: key.into(),
            op,
            values: vals.iter().map(|s| s.to_string()).collect(),
        };
        assert!(req("a", SelectorOp::In, &["1", "2"]).matches(&l));
        assert!(!req("a", SelectorOp::NotIn, &["1"]).matches(&l));
        assert!(req("b", SelectorOp::NotIn, &["1"]).matches(&l));
        assert!(req("a", SelectorOp::Exists, &[]).matches(&l));
        assert!(req("b", SelectorOp::DoesNotExist, &[]).matches(&l));
        assert!(req("n", SelectorOp::Gt, &["4"]).matches(&l));
        assert!(!req("n", SelectorOp::Gt, &["5"]).matches(&l));
        assert!(req("n", SelectorOp::Lt, &["6"]).matches(&l));
        assert!(!req("a", SelectorOp::Lt, &["x"]).matches(&l));
        assert!(!req("missing", SelectorOp::Gt, &["1"]).matches(&l));
    }

    #[test]
    fn nil_selector_matches_nothing_empty_matches_all() {
        let l = labels(&[("a", "1")]);
        assert!(!LabelSelector::from_api(None).unwrap().matches(&l));
        assert!(
            LabelSelector::from_api(Some(&ApiLabelSelector::default()))
                .unwrap()
                .matches(&l)
        );
    }

    #[test]
    fn toleration_rules() {
        let taint = Taint {
            key: "k".into(),
            value: "v".into(),
            effect: TaintEffect::NoSchedule,
        };
        let tol = |key: &str, op: &str, value: &str, effect: Option<&str>| {
            Toleration::from_api(&core::Toleration {
                key: Some(key.into()),
                operator: Some(op.into()),
                value: Some(value.into()),
                effect: effect.map(String::from),
                toleration_seconds: None,
            })
        };
        assert!(tol("k", "Equal", "v", None).tolerates(&taint));
        assert!(!tol("k", "Equal", "w", None).tolerates(&taint));
        assert!(tol("k", "Exists", "", Some("NoSchedule")).tolerates(&taint));
        assert!(!tol("k", "Exists", "", Some("NoExecute")).tolerates(&taint));
        assert!(tol("", "Exists", "", None).tolerates(&taint));
        assert!(!tol("", "Equal", "v", None).tolerates(&taint));
        assert!(!tol("k", "Bogus", "v", None).tolerates(&taint));
    }
}
