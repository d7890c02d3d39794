//! Topology and disruption for the groups Phalanx creates for an owner (issue 38): annotations on the owner (a
//! JobSet, a LeaderWorkerSet, a Job, any annotated owner), parsed here with errors that name the annotation.
//!
//! Where they apply is the owner integration's to say (`crates/controllers/src/integrations`): on the
//! CompositePodGroup of a unit that starts together (an LWS replica group: leader and workers in one rack), else on
//! each PodGroup. The fields they fill are upstream's `schedulingConstraints.topology` (one required key, KEP-5732)
//! and `disruptionMode`, plus Phalanx's `preferredTopology`.

use std::collections::BTreeMap;

use crate::v1beta1::{MAX_RECOVERY_GRACE_SECONDS, RecoveryAction, RecoveryPolicy};

/// Owner annotation: a node label key every pod of a group (or of a composite) must share one value of, e.g.
/// `topology.kubernetes.io/rack`.
pub const TOPOLOGY_REQUIRED: &str = "scheduling.phalanx.dev/topology-required";
/// Owner annotation: node label keys to pack a group into when it can, narrowest first, comma-separated (at most
/// [`crate::schema::MAX_PREFERRED_TOPOLOGY_LEVELS`]), e.g. `example.com/rack,topology.kubernetes.io/zone`.
pub const TOPOLOGY_PREFERRED: &str = "scheduling.phalanx.dev/topology-preferred";
/// Owner annotation: `single` (the default: a group may be disrupted alone) or `all` (the groups go together).
pub const DISRUPTION_MODE: &str = "scheduling.phalanx.dev/disruption-mode";
/// Owner annotation: what a gang does once it falls below its quorum after its start: `None`, `RestartGroup` or
/// `Fail` (`spec.recoveryPolicy.action`, [`crate::v1beta1::recovery`]).
pub const RECOVERY_ACTION: &str = "scheduling.phalanx.dev/recovery-action";
/// Owner annotation: seconds a gang may stay below its quorum before `RestartGroup` acts, 0 to 86400
/// (`spec.recoveryPolicy.gracePeriodSeconds`); needs [`RECOVERY_ACTION`].
pub const RECOVERY_GRACE_SECONDS: &str = "scheduling.phalanx.dev/recovery-grace-period-seconds";

/// What an owner's policy annotations ask for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerPolicy {
    /// [`TOPOLOGY_REQUIRED`].
    pub required: Option<String>,
    /// [`TOPOLOGY_PREFERRED`], narrowest first.
    pub preferred: Vec<String>,
    /// [`DISRUPTION_MODE`] is `all`; `None` when absent.
    pub disrupt_all: Option<bool>,
    /// [`RECOVERY_ACTION`] and [`RECOVERY_GRACE_SECONDS`], for each gang PodGroup.
    pub recovery: Option<RecoveryPolicy>,
}

/// A bad policy annotation; the message names the annotation and the value (a Warning event on the owner).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("annotation {annotation}={value:?} is invalid: {want}")]
pub struct PolicyAnnotationError {
    /// The annotation.
    pub annotation: &'static str,
    /// The value as written.
    pub value: String,
    /// What is accepted.
    pub want: &'static str,
}

/// Whether `key` is a label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters of
/// alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric (upstream `IsQualifiedName`,
/// `staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go`).
pub fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && edge(name.chars().next())
        && edge(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    });
    name_ok && prefix_ok
}

/// Reads the policy annotations. Never panics; a bad value is an error naming its annotation.
pub fn owner_policy(
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<OwnerPolicy, PolicyAnnotationError> {
    let Some(a) = annotations else {
        return Ok(OwnerPolicy::default());
    };
    let bad = |annotation, value: &str, want| PolicyAnnotationError {
        annotation,
        value: value.to_owned(),
        want,
    };
    let mut out = OwnerPolicy::default();
    if let Some(v) = a.get(TOPOLOGY_REQUIRED) {
        let k = v.trim();
        if !is_label_key(k) {
            return Err(bad(
                TOPOLOGY_REQUIRED,
                v,
                "want one node label key, e.g. topology.kubernetes.io/zone",
            ));
        }
        out.required = Some(k.to_owned());
    }
    if let Some(v) = a.get(TOPOLOGY_PREFERRED) {
        let keys: Vec<String> = v.split(',').map(|k| k.trim().to_owned()).collect();
        let max = crate::schema::MAX_PREFERRED_TOPOLOGY_LEVELS as usize;
        let distinct = keys.iter().collect::<std::collections::BTreeSet<_>>().len() == keys.len();
        if keys.len() > max || !distinct || !keys.iter().all(|k| is_label_key(k)) {
            return Err(bad(
                TOPOLOGY_PREFERRED,
                v,
                "want 1 to 8 distinct node label keys, narrowest first, separated by commas",
            ));
        }
        out.preferred = keys;
    }
    if let Some(v) = a.get(DISRUPTION_MODE) {
        out.disrupt_all = Some(match v.trim() {
            "all" => true,
            "single" => false,
            _ => return Err(bad(DISRUPTION_MODE, v, "want \"single\" or \"all\"")),
        });
    }
    if let Some(v) = a.get(RECOVERY_ACTION) {
        let action = match v.trim() {
            "None" => RecoveryAction::None,
            "RestartGroup" => RecoveryAction::RestartGroup,
            "Fail" => RecoveryAction::Fail,
            _ => {
                return Err(bad(
                    RECOVERY_ACTION,
                    v,
                    "want \"None\", \"RestartGroup\" or \"Fail\"",
                ));
            }
        };
        out.recovery = Some(RecoveryPolicy {
            action: Some(action),
            ..RecoveryPolicy::default()
        });
    }
    if let Some(v) = a.get(RECOVERY_GRACE_SECONDS) {
        let n = v
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|n| (0..=MAX_RECOVERY_GRACE_SECONDS).contains(n))
            .ok_or_else(|| {
                bad(
                    RECOVERY_GRACE_SECONDS,
                    v,
                    "want a whole number of seconds from 0 to 86400",
                )
            })?;
        let Some(r) = out.recovery.as_mut() else {
            return Err(bad(
                RECOVERY_GRACE_SECONDS,
                v,
                "it needs scheduling.phalanx.dev/recovery-action too",
            ));
        };
        r.grace_period_seconds = Some(n);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn policies_parse_and_bad_values_name_their_annotation() {
        let p = owner_policy(Some(&ann(&[
            (TOPOLOGY_REQUIRED, "example.com/rack"),
            (
                TOPOLOGY_PREFERRED,
                "example.com/block, topology.kubernetes.io/zone",
            ),
            (DISRUPTION_MODE, "all"),
            (RECOVERY_ACTION, "RestartGroup"),
            (RECOVERY_GRACE_SECONDS, "30"),
        ])))
        .unwrap();
        let r = p.recovery.clone().unwrap();
        assert_eq!(
            (r.action, r.grace_period_seconds),
            (Some(RecoveryAction::RestartGroup), Some(30))
        );
        assert_eq!(p.required.as_deref(), Some("example.com/rack"));
        assert_eq!(p.preferred, ["example.com/block", "topology.kubernetes.io/zone"]);
        assert_eq!(p.disrupt_all, Some(true));
        assert_eq!(owner_policy(None), Ok(OwnerPolicy::default()));
        for (k, v) in [
            (TOPOLOGY_REQUIRED, "not a key!"),
            (TOPOLOGY_REQUIRED, ""),
            (TOPOLOGY_PREFERRED, "a,a"),
            (TOPOLOGY_PREFERRED, "a,b,c,d,e,f,g,h,i"),
            (DISRUPTION_MODE, "some"),
            (RECOVERY_ACTION, "Restart"),
            (RECOVERY_GRACE_SECONDS, "99999"),
        ] {
            let e = owner_policy(Some(&ann(&[(k, v)]))).unwrap_err();
            assert!(e.to_string().contains(k), "{e}");
        }
        let e = owner_policy(Some(&ann(&[(RECOVERY_GRACE_SECONDS, "30")]))).unwrap_err();
        assert!(e.to_string().contains(RECOVERY_ACTION), "{e}");
        assert!(is_label_key("kubernetes.io/hostname") && is_label_key("rack"));
        assert!(!is_label_key("Example.com/rack") && !is_label_key("-x") && !is_label_key(&"a".repeat(64)));
    }
}
