//! Validation of a Workload's template tree beyond what CEL can express (pure; no client).
//!
//! Follows upstream `ValidateWorkloadSpec` (`pkg/apis/scheduling/validation/validation.go`): template names
//! unique across the whole tree, a CompositePodGroup template at depth `WorkloadMaxTemplateDepth` (4) is
//! invalid ("maximum template hierarchy depth is 4"), and one priority configuration everywhere ("detected
//! multiple priority configurations"). Phalanx adds the KEP-6012 structural rules that upstream only enforces
//! at run time: an `all` template may only have `all` children, and a gang CompositePodGroup template may not
//! have a basic PodGroup template child; and every CompositePodGroup template needs at least one child.

use std::collections::HashMap;
use std::fmt;

use phalanx_api::v1beta1::{CompositePodGroupTemplate, PodGroupTemplate, WorkloadSpec};

pub use phalanx_api::v1beta1::PolicyKind;
pub use phalanx_store::GroupKind;

/// The disruption mode of a template; unset means `single` (upstream default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Disruption {
    /// `disruptionMode.single` (or unset).
    Single,
    /// `disruptionMode.all`.
    All,
}

/// Upstream `WorkloadMaxTemplateDepth`.
pub const MAX_TEMPLATE_DEPTH: usize = 4;

/// The validation-relevant projection of a `PodGroupTemplate` or `CompositePodGroupTemplate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateNode {
    /// PodGroup or CompositePodGroup template.
    pub kind: GroupKind,
    /// `name`.
    pub name: String,
    /// `schedulingPolicy` variant.
    pub policy: PolicyKind,
    /// `disruptionMode` variant (unset = single).
    pub disruption: Disruption,
    /// `priorityClassName` (empty string = unset).
    pub priority_class_name: Option<String>,
    /// `priority`.
    pub priority: Option<i32>,
    /// `preemptionPolicy`.
    pub preemption_policy: Option<phalanx_api::v1beta1::PreemptionPolicy>,
    /// For CompositePodGroup templates: `podGroupTemplates` then `compositePodGroupTemplates`.
    pub children: Vec<TemplateNode>,
}

/// One violation; `Display` gives the message with the JSON path of the offending template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateProblem {
    /// JSON path of the template, e.g. `spec.compositePodGroupTemplates[0].podGroupTemplates[1]`.
    pub path: String,
    /// What is wrong.
    pub kind: TemplateProblemKind,
}

/// What is wrong with a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplateProblemKind {
    /// The name is already used at `first`.
    Duplicate {
        /// The name.
        name: String,
        /// Path of the first use.
        first: String,
    },
    /// A CompositePodGroup template at depth 4 or deeper.
    TooDeep,
    /// Priority configuration differs from the first template's.
    MultiplePriorities,
    /// `all` parent with a `single` child.
    AllParentSingleChild {
        /// The parent name.
        parent: String,
        /// The child name.
        child: String,
    },
    /// Gang CompositePodGroup template with a basic PodGroup template child.
    GangParentBasicChild {
        /// The parent name.
        parent: String,
        /// The child name.
        child: String,
    },
    /// CompositePodGroup template without children.
    NoChildren,
}

impl TemplateProblem {
    /// CamelCase reason for conditions and events.
    pub fn reason(&self) -> &'static str {
        match self.kind {
            TemplateProblemKind::Duplicate { .. } => "DuplicateTemplateName",
            TemplateProblemKind::TooDeep => "TemplateTreeTooDeep",
            TemplateProblemKind::MultiplePriorities => "MultiplePriorities",
            TemplateProblemKind::AllParentSingleChild { .. } => "DisruptionModeMismatch",
            TemplateProblemKind::GangParentBasicChild { .. } => "GangParentBasicChild",
            TemplateProblemKind::NoChildren => "EmptyCompositeTemplate",
        }
    }
}

impl fmt::Display for TemplateProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.path;
        match &self.kind {
            TemplateProblemKind::Duplicate { name, first } => {
                write!(f, "{p}.name: Duplicate value: {name:?} (already used at {first})")
            }
            TemplateProblemKind::TooDeep => {
                write!(f, "{p}: maximum template hierarchy depth is {MAX_TEMPLATE_DEPTH}")
            }
            TemplateProblemKind::MultiplePriorities => {
                write!(
                    f,
                    "spec: Invalid value: detected multiple priority configurations (first difference at {p})"
                )
            }
            TemplateProblemKind::AllParentSingleChild { parent, child } => write!(
                f,
                "{p}: template {child:?} has disruptionMode single but its parent {parent:?} has all; children of an all template must be all"
            ),
            TemplateProblemKind::GangParentBasicChild { parent, child } => write!(
                f,
                "{p}: basic PodGroup template {child:?} is a child of gang CompositePodGroup template {parent:?}; gang composite templates may not have basic PodGroup children"
            ),
            TemplateProblemKind::NoChildren => write!(
                f,
                "{p}: at least one entry in compositePodGroupTemplates or podGroupTemplates must be set"
            ),
        }
    }
}

fn child_path(parent_path: &str, child: &TemplateNode, index: usize) -> String {
    let field = match child.kind {
        GroupKind::PodGroup => "podGroupTemplates",
        GroupKind::CompositePodGroup => "compositePodGroupTemplates",
    };
    format!("{parent_path}.{field}[{index}]")
}

/// Paths of a list of sibling templates, indexed per field as in the API.
fn sibling_paths(parent_path: &str, children: &[TemplateNode]) -> Vec<String> {
    let mut pg_index = 0;
    let mut cpg_index = 0;
    children
        .iter()
        .map(|c| {
            let idx = match c.kind {
                GroupKind::PodGroup => {
                    pg_index += 1;
                    pg_index - 1
                }
                GroupKind::CompositePodGroup => {
                    cpg_index += 1;
                    cpg_index - 1
                }
            };
            child_path(parent_path, c, idx)
        })
        .collect()
}

struct Walk<'a> {
    names: HashMap<&'a str, String>,
    priority: Option<(Option<&'a str>, Option<i32>)>,
    priority_reported: bool,
    problems: Vec<TemplateProblem>,
}

impl<'a> Walk<'a> {
    fn visit(&mut self, node: &'a TemplateNode, path: String, depth: usize, parent: Option<&TemplateNode>) {
        if let Some(first) = self.names.get(node.name.as_str()) {
            self.problems.push(TemplateProblem {
                path: path.clone(),
                kind: TemplateProblemKind::Duplicate {
                    name: node.name.clone(),
                    first: first.clone(),
                },
            });
        } else {
            self.names.insert(node.name.as_str(), path.clone());
        }
        let prio = (
            node.priority_class_name.as_deref().filter(|s| !s.is_empty()),
            node.priority,
        );
        match self.priority {
            None => self.priority = Some(prio),
            Some(first) if first != prio && !self.priority_reported => {
                self.priority_reported = true;
                self.problems.push(TemplateProblem {
                    path: path.clone(),
                    kind: TemplateProblemKind::MultiplePriorities,
                });
            }
            Some(_) => {}
        }
        if let Some(parent) = parent {
            if parent.disruption == Disruption::All && node.disruption == Disruption::Single {
                self.problems.push(TemplateProblem {
                    path: path.clone(),
                    kind: TemplateProblemKind::AllParentSingleChild {
                        parent: parent.name.clone(),
                        child: node.name.clone(),
                    },
                });
            }
            if parent.policy == PolicyKind::Gang
                && node.kind == GroupKind::PodGroup
                && node.policy == PolicyKind::Basic
            {
                self.problems.push(TemplateProblem {
                    path: path.clone(),
                    kind: TemplateProblemKind::GangParentBasicChild {
                        parent: parent.name.clone(),
                        child: node.name.clone(),
                    },
                });
            }
        }
        if node.kind == GroupKind::CompositePodGroup {
            if depth >= MAX_TEMPLATE_DEPTH {
                self.problems.push(TemplateProblem {
                    path,
                    kind: TemplateProblemKind::TooDeep,
                });
                // Upstream stops descending here too.
                return;
            }
            if node.children.is_empty() {
                self.problems.push(TemplateProblem {
                    path: path.clone(),
                    kind: TemplateProblemKind::NoChildren,
                });
            }
            let paths = sibling_paths(&path, &node.children);
            for (child, child_path) in node.children.iter().zip(paths) {
                self.visit(child, child_path, depth + 1, Some(node));
            }
        }
    }
}

/// Validates the top-level template list of a Workload (`podGroupTemplates` followed by
/// `compositePodGroupTemplates`, each in API order). Returns every problem found, in tree order; empty = valid.
/// A top-level CompositePodGroup template is at depth 1.
pub fn validate(top: &[TemplateNode]) -> Vec<TemplateProblem> {
    let mut walk = Walk {
        names: HashMap::new(),
        priority: None,
        priority_reported: false,
        problems: Vec::new(),
    };
    let paths = sibling_paths("spec", top);
    for (node, path) in top.iter().zip(paths) {
        walk.visit(node, path, 1, None);
    }
    walk.problems
}

/// Every template of the tree with its JSON path (`spec.compositePodGroupTemplates[0].podGroupTemplates[1]`), depth
/// first, parents before their children (the order [`validate`] visits them).
pub fn with_paths(top: &[TemplateNode]) -> Vec<(&TemplateNode, String)> {
    fn rec<'a>(nodes: &'a [TemplateNode], parent: &str, out: &mut Vec<(&'a TemplateNode, String)>) {
        for (node, path) in nodes.iter().zip(sibling_paths(parent, nodes)) {
            out.push((node, path.clone()));
            rec(&node.children, &path, out);
        }
    }
    let mut out = Vec::new();
    rec(top, "spec", &mut out);
    out
}

/// Finds a template by name anywhere in the tree.
pub fn find<'a>(top: &'a [TemplateNode], name: &str) -> Option<&'a TemplateNode> {
    for node in top {
        if node.name == name {
            return Some(node);
        }
        if let Some(found) = find(&node.children, name) {
            return Some(found);
        }
    }
    None
}

/// Every template name in the tree, depth first.
pub fn names(top: &[TemplateNode]) -> Vec<String> {
    let mut out = Vec::new();
    fn rec(nodes: &[TemplateNode], out: &mut Vec<String>) {
        for n in nodes {
            out.push(n.name.clone());
            rec(&n.children, out);
        }
    }
    rec(top, &mut out);
    out
}

fn pg_template(t: &PodGroupTemplate) -> TemplateNode {
    TemplateNode {
        kind: GroupKind::PodGroup,
        name: t.name.clone(),
        policy: t.scheduling_policy.kind().unwrap_or(PolicyKind::Basic),
        disruption: if t.disruption_mode.as_ref().is_some_and(|d| d.is_all()) {
            Disruption::All
        } else {
            Disruption::Single
        },
        priority_class_name: t.priority_class_name.clone(),
        priority: t.priority,
        preemption_policy: t.preemption_policy,
        children: vec![],
    }
}

fn cpg_template(t: &CompositePodGroupTemplate) -> TemplateNode {
    let mut children: Vec<TemplateNode> = t.pod_group_templates.iter().flatten().map(pg_template).collect();
    children.extend(t.composite_pod_group_templates.iter().flatten().map(cpg_template));
    TemplateNode {
        kind: GroupKind::CompositePodGroup,
        name: t.name.clone(),
        policy: t.scheduling_policy.kind().unwrap_or(PolicyKind::Basic),
        disruption: if t.disruption_mode.as_ref().is_some_and(|d| d.is_all()) {
            Disruption::All
        } else {
            Disruption::Single
        },
        priority_class_name: t.priority_class_name.clone(),
        priority: t.priority,
        preemption_policy: t.preemption_policy,
        children,
    }
}

/// The template tree of a Workload as [`TemplateNode`]s: `podGroupTemplates` then
/// `compositePodGroupTemplates`, recursively, in API order.
pub fn template_nodes(spec: &WorkloadSpec) -> Vec<TemplateNode> {
    let mut out: Vec<TemplateNode> = spec
        .pod_group_templates
        .iter()
        .flatten()
        .map(pg_template)
        .collect();
    out.extend(
        spec.composite_pod_group_templates
            .iter()
            .flatten()
            .map(cpg_template),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pgt(name: &str) -> TemplateNode {
        TemplateNode {
            kind: GroupKind::PodGroup,
            name: name.into(),
            policy: PolicyKind::Gang,
            disruption: Disruption::Single,
            priority_class_name: None,
            priority: None,
            preemption_policy: None,
            children: vec![],
        }
    }

    fn cpgt(name: &str, children: Vec<TemplateNode>) -> TemplateNode {
        TemplateNode {
            kind: GroupKind::CompositePodGroup,
            children,
            ..pgt(name)
        }
    }

    #[test]
    fn flat_list_is_valid() {
        assert!(validate(&[pgt("a"), pgt("b")]).is_empty());
    }

    #[test]
    fn duplicate_names_across_levels() {
        let top = vec![cpgt("root", vec![pgt("x"), cpgt("sub", vec![pgt("x")])])];
        let p = validate(&top);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].reason(), "DuplicateTemplateName");
        assert_eq!(
            p[0].path,
            "spec.compositePodGroupTemplates[0].compositePodGroupTemplates[0].podGroupTemplates[0]"
        );
        assert!(
            p[0].to_string()
                .contains("already used at spec.compositePodGroupTemplates[0].podGroupTemplates[0]")
        );
    }

    #[test]
    fn depth_limit() {
        let ok = vec![cpgt("c1", vec![cpgt("c2", vec![cpgt("c3", vec![pgt("leaf")])])])];
        assert!(validate(&ok).is_empty());
        let bad = vec![cpgt(
            "c1",
            vec![cpgt("c2", vec![cpgt("c3", vec![cpgt("c4", vec![pgt("leaf")])])])],
        )];
        let p = validate(&bad);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].to_string()
                .ends_with("maximum template hierarchy depth is 4")
        );
    }

    #[test]
    fn multiple_priorities_reported_once() {
        let mut a = pgt("a");
        a.priority_class_name = Some("high".into());
        let mut b = pgt("b");
        b.priority = Some(5);
        let c = pgt("c");
        let p = validate(&[cpgt("r", vec![a, b, c])]);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].to_string()
                .contains("detected multiple priority configurations")
        );
        // identical everywhere is fine, including the nil-ness
        let mut x = pgt("x");
        x.priority = Some(5);
        let mut y = pgt("y");
        y.priority = Some(5);
        let mut r = cpgt("r", vec![x, y]);
        r.priority = Some(5);
        assert!(validate(&[r]).is_empty());
    }

    #[test]
    fn all_parent_single_child_and_gang_basic() {
        let mut root = cpgt("r", vec![pgt("s")]);
        root.disruption = Disruption::All;
        let p = validate(&[root]);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].reason(), "DisruptionModeMismatch");

        let mut basic = pgt("b");
        basic.policy = PolicyKind::Basic;
        let p = validate(&[cpgt("g", vec![basic])]);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].reason(), "GangParentBasicChild");
    }

    #[test]
    fn empty_composite_and_find() {
        let top = vec![cpgt("r", vec![]), cpgt("q", vec![pgt("leaf")])];
        let p = validate(&top);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].reason(), "EmptyCompositeTemplate");
        assert_eq!(find(&top, "leaf").map(|n| n.kind), Some(GroupKind::PodGroup));
        assert!(find(&top, "nope").is_none());
        assert_eq!(names(&top), vec!["r", "q", "leaf"]);
    }
}
