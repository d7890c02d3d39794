//! PriorityClass resolution for PodGroups and CompositePodGroups (pure; no client). One definition for the
//! controllers, which write the result into `spec`, and the scheduler, which trusts the class and not `spec.priority`
//! (a tenant could set that field before the controller does).
//!
//! Upstream the Priority admission plugin (`plugin/pkg/admission/priority/admission.go`) fills `priority` and
//! `preemptionPolicy` of pods and, since 1.36/1.37, of PodGroups and CompositePodGroups. A CRD gets no
//! admission plugin, so the controllers do the same after the fact: the named PriorityClass, else the global
//! default PriorityClass (the one with the lowest value if several are marked default, as upstream), else
//! priority 0 and `PreemptLowerPriority`.

use k8s_openapi::api::scheduling::v1::PriorityClass;

/// Upstream default preemption policy.
pub const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";

/// Where a resolved priority came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The PriorityClass named in `priorityClassName`.
    Named(String),
    /// The global default PriorityClass (`globalDefault: true`).
    GlobalDefault(String),
    /// No class named and no global default: priority 0.
    None,
}

impl std::fmt::Display for Source {
    /// `PriorityClass "high"`, `the global default PriorityClass "low"`, or `no priorityClassName and no global
    /// default PriorityClass`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Named(n) => write!(f, "PriorityClass {n:?}"),
            Source::GlobalDefault(n) => write!(f, "the global default PriorityClass {n:?}"),
            Source::None => f.write_str("no priorityClassName and no global default PriorityClass"),
        }
    }
}

/// A resolved priority and preemption policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The integer priority.
    pub priority: i32,
    /// `PreemptLowerPriority` or `Never`.
    pub preemption_policy: String,
    /// Where it came from.
    pub source: Source,
}

/// Resolution failure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// `priorityClassName` names a PriorityClass that does not exist (upstream admission message).
    #[error("no PriorityClass with name {0} was found")]
    NotFound(String),
}

impl ResolveError {
    /// CamelCase reason for conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            ResolveError::NotFound(_) => "PriorityClassNotFound",
        }
    }
}

fn policy_of(pc: &PriorityClass) -> String {
    pc.preemption_policy
        .clone()
        .unwrap_or_else(|| PREEMPT_LOWER_PRIORITY.to_string())
}

fn name_of(pc: &PriorityClass) -> String {
    pc.metadata.name.clone().unwrap_or_default()
}

/// The global default PriorityClass: among those with `globalDefault: true`, the lowest value (upstream
/// `getDefaultPriorityClass`); ties broken by name so the result does not depend on list order.
pub fn global_default<'a>(classes: impl IntoIterator<Item = &'a PriorityClass>) -> Option<&'a PriorityClass> {
    classes
        .into_iter()
        .filter(|pc| pc.global_default == Some(true))
        .min_by(|a, b| {
            a.value
                .unwrap_or(0)
                .cmp(&b.value.unwrap_or(0))
                .then_with(|| name_of(a).cmp(&name_of(b)))
        })
}

/// Resolves `priorityClassName` (None or "" = not set) against the known PriorityClasses.
pub fn resolve<'a>(
    class_name: Option<&str>,
    classes: impl IntoIterator<Item = &'a PriorityClass> + Clone,
) -> Result<Resolved, ResolveError> {
    match class_name.filter(|n| !n.is_empty()) {
        Some(name) => {
            let pc = classes
                .into_iter()
                .find(|pc| pc.metadata.name.as_deref() == Some(name))
                .ok_or_else(|| ResolveError::NotFound(name.to_string()))?;
            Ok(Resolved {
                priority: pc.value.unwrap_or(0),
                preemption_policy: policy_of(pc),
                source: Source::Named(name.into()),
            })
        }
        None => Ok(match global_default(classes) {
            Some(pc) => Resolved {
                priority: pc.value.unwrap_or(0),
                preemption_policy: policy_of(pc),
                source: Source::GlobalDefault(name_of(pc)),
            },
            None => Resolved {
                priority: 0,
                preemption_policy: PREEMPT_LOWER_PRIORITY.into(),
                source: Source::None,
            },
        }),
    }
}

/// A priority field that a group's author wrote (not the controller filling it) and that its PriorityClass does
/// not give. Upstream's Priority admission plugin refuses such a pod at creation
/// (`plugin/pkg/admission/priority/admission.go`: a `priority` or `preemptionPolicy` that differs from the one
/// computed from the class); a CRD has no admission plugin, so the controllers report it as `Valid=False`, and the
/// scheduler uses the computed value. One exception: a written `Never` under a class that may preempt is honoured
/// (restricting oneself is always safe), so only the escalation is reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecMismatch {
    /// `priority` written with another value than the computed one.
    Priority {
        /// JSON path of the field, e.g. `spec.priority`.
        field: String,
        /// The value written.
        given: i32,
        /// The value computed from the class (the one the scheduler uses).
        computed: i32,
        /// Where it was computed from.
        origin: Source,
    },
    /// `preemptionPolicy: PreemptLowerPriority` written under a class whose policy is `Never`.
    PreemptionPolicy {
        /// JSON path of the field, e.g. `spec.preemptionPolicy`.
        field: String,
        /// The class that says `Never`.
        origin: Source,
    },
}

impl SpecMismatch {
    /// CamelCase reason for conditions and events: `PriorityIgnored` or `PreemptionPolicyIgnored`.
    pub fn reason(&self) -> &'static str {
        match self {
            SpecMismatch::Priority { .. } => "PriorityIgnored",
            SpecMismatch::PreemptionPolicy { .. } => "PreemptionPolicyIgnored",
        }
    }
}

impl std::fmt::Display for SpecMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecMismatch::Priority {
                field,
                given,
                computed,
                origin: origin @ Source::None,
            } => write!(
                f,
                "{field}: {given} must not be set by hand: priority admission computed {computed} ({origin}), and \
                 the scheduler uses {computed}"
            ),
            SpecMismatch::Priority {
                field,
                given,
                computed,
                origin,
            } => write!(
                f,
                "{field}: {given} must not be set by hand: priority admission computed {computed} from {origin}, \
                 and the scheduler uses {computed}"
            ),
            SpecMismatch::PreemptionPolicy { field, origin } => write!(
                f,
                "{field}: {PREEMPT_LOWER_PRIORITY} must not be set by hand: {origin} has preemptionPolicy Never, and \
                 the scheduler uses Never"
            ),
        }
    }
}

/// The fields of `prefix` (`spec`, or a Workload template's path) that their author wrote and `resolved` does not
/// give: `priority` (`None` = not written by the author) when it differs, and `preemptionPolicy` when the author
/// wrote `PreemptLowerPriority` (`wrote_preempt_lower`) and the class says `Never`. Empty = consistent.
pub fn check_written(
    prefix: &str,
    priority: Option<i32>,
    wrote_preempt_lower: bool,
    resolved: &Resolved,
) -> Vec<SpecMismatch> {
    let mut out = Vec::new();
    if let Some(given) = priority.filter(|p| *p != resolved.priority) {
        out.push(SpecMismatch::Priority {
            field: format!("{prefix}.priority"),
            given,
            computed: resolved.priority,
            origin: resolved.source.clone(),
        });
    }
    if wrote_preempt_lower && resolved.preemption_policy == "Never" {
        out.push(SpecMismatch::PreemptionPolicy {
            field: format!("{prefix}.preemptionPolicy"),
            origin: resolved.source.clone(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pc(name: &str, value: i32, default: bool, policy: Option<&str>) -> PriorityClass {
        PriorityClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            value: Some(value),
            global_default: Some(default),
            preemption_policy: policy.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn named_class() {
        let classes = [pc("high", 1000, false, Some("Never")), pc("def", 10, true, None)];
        let r = resolve(Some("high"), &classes).unwrap();
        assert_eq!(r.priority, 1000);
        assert_eq!(r.preemption_policy, "Never");
        assert_eq!(r.source, Source::Named("high".into()));
    }

    #[test]
    fn missing_class_is_an_error() {
        let classes = [pc("def", 10, true, None)];
        let e = resolve(Some("nope"), &classes).unwrap_err();
        assert_eq!(e.to_string(), "no PriorityClass with name nope was found");
        assert_eq!(e.reason(), "PriorityClassNotFound");
    }

    #[test]
    fn global_default_lowest_wins() {
        let classes = [
            pc("a", 50, true, None),
            pc("b", 20, true, Some("Never")),
            pc("c", 5, false, None),
        ];
        let r = resolve(None, &classes).unwrap();
        assert_eq!(r.priority, 20);
        assert_eq!(r.preemption_policy, "Never");
        assert_eq!(r.source, Source::GlobalDefault("b".into()));
        assert_eq!(resolve(Some(""), &classes).unwrap().priority, 20);
    }

    /// Upstream admission's two refusals, said on the object: a hand-written priority names the field and the
    /// computed value; PreemptLowerPriority under a Never class is an escalation; Never under any class is not.
    #[test]
    fn written_values_the_class_does_not_give() {
        let classes = [pc("never", 10, false, Some("Never")), pc("may", 100, false, None)];
        let never = resolve(Some("never"), &classes).unwrap();
        let got = check_written("spec", Some(1_000_000_000), true, &never);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].reason(), "PriorityIgnored");
        assert_eq!(
            got[0].to_string(),
            "spec.priority: 1000000000 must not be set by hand: priority admission computed 10 from PriorityClass \
             \"never\", and the scheduler uses 10"
        );
        assert_eq!(got[1].reason(), "PreemptionPolicyIgnored");
        assert!(
            got[1]
                .to_string()
                .starts_with("spec.preemptionPolicy: PreemptLowerPriority"),
            "{}",
            got[1]
        );
        assert!(
            check_written("spec", Some(10), false, &never).is_empty(),
            "the computed value is fine"
        );
        let may = resolve(Some("may"), &classes).unwrap();
        assert!(check_written("spec", None, true, &may).is_empty());
        let none = resolve(None, &classes).unwrap();
        let got = check_written("spec.podGroupTemplates[0]", Some(5), false, &none);
        assert_eq!(
            got[0].to_string(),
            "spec.podGroupTemplates[0].priority: 5 must not be set by hand: priority admission computed 0 (no \
             priorityClassName and no global default PriorityClass), and the scheduler uses 0"
        );
    }

    #[test]
    fn nothing_means_zero() {
        let classes = [pc("c", 5, false, None)];
        let r = resolve(None, &classes).unwrap();
        assert_eq!(
            (r.priority, r.preemption_policy.as_str(), r.source),
            (0, PREEMPT_LOWER_PRIORITY, Source::None)
        );
    }
}
