//! Gangs for pods that no PodGroup names: the owner annotations, their parsing, and the names of the PodGroup and
//! Workload that Phalanx creates for an annotated owner (a Job, a StatefulSet, a Deployment, or any custom
//! resource at the top of a pod's `ownerReferences` chain).
//!
//! Upstream equivalent: the Job controller's Workload/PodGroup compilation of KEP-5547 (`WorkloadWithJob`,
//! `pkg/controller/job` in Kubernetes 1.36+) driven by `Job.spec.scheduling`; peers use owner annotations the same
//! way (KAI-Scheduler's pod-grouper, Volcano's `scheduling.k8s.io/group-name`). Phalanx cannot add a field to
//! `batch/v1` Job, so the intent is an annotation on the owner.

use std::collections::BTreeMap;

/// Owner annotation `"true"`: gang-schedule this owner's pods, `minCount` = the owner's `spec.parallelism`
/// (Jobs) or `spec.replicas` (StatefulSets, Deployments, ReplicaSets, any resource with that field).
pub const GANG: &str = "scheduling.phalanx.dev/gang";

/// Owner annotation with a decimal `minCount` in `1..=`[`MAX_MIN_COUNT`]: gang-schedule this owner's pods with that
/// quorum. Wins over [`GANG`]; required for owners without `spec.replicas`/`spec.parallelism`.
pub const GANG_MIN_COUNT: &str = "scheduling.phalanx.dev/gang-min-count";

/// Annotation on the PodGroup Phalanx creates for an owner: the owner's `metadata.generation` its `minCount` was
/// computed from. While the owner's generation is newer (it was scaled and the PodGroup is not rewritten yet), the
/// scheduler holds the group's pending pods, so that a scale-up joins the new quorum as one step.
pub const OWNER_GENERATION: &str = "scheduling.phalanx.dev/owner-generation";

/// Label on the PodGroup and Workload Phalanx creates for an owner: the owner's `metadata.uid`. Lets the store
/// find the group of pods whose top owner is a custom resource it does not watch.
pub const OWNER_UID_LABEL: &str = "scheduling.phalanx.dev/owner-uid";

/// Annotation on a PodGroup Phalanx creates for one part of an owner (a JobSet's replicated job, an LWS replica
/// group's workers): which of the owner's pods are its members, as label requirements `key=value` or `key!=value`
/// joined by `,` (the equality subset of a kubectl label selector, [`MemberSelector`]). A `!=` requirement also
/// needs the label present. Absent: every pod of the owner. The store links a pod of the owner to the first of the
/// owner's groups (by name) whose selector it matches.
pub const MEMBERS: &str = "scheduling.phalanx.dev/members";

/// The largest accepted [`GANG_MIN_COUNT`]: a group's pods are counted in `int32` upstream.
pub const MAX_MIN_COUNT: i64 = i32::MAX as i64;

/// What an owner's annotations ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GangRequest {
    /// [`GANG`] is `"true"`: `minCount` follows the owner's replicas / parallelism.
    FollowReplicas,
    /// [`GANG_MIN_COUNT`] gives the quorum.
    MinCount(i32),
}

/// A bad owner annotation; the message names the annotation and the value (shown in a Warning event).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GangAnnotationError {
    /// `gang-min-count` is not a whole number in `1..=2147483647`.
    #[error(
        "annotation {GANG_MIN_COUNT}={value:?} is invalid: want a whole number from 1 to {MAX_MIN_COUNT}"
    )]
    BadMinCount {
        /// The value as written.
        value: String,
    },
    /// `gang` is neither `"true"` nor `"false"`.
    #[error("annotation {GANG}={value:?} is invalid: want \"true\" or \"false\"")]
    BadGang {
        /// The value as written.
        value: String,
    },
}

/// Reads [`GANG`] and [`GANG_MIN_COUNT`] from an owner's annotations.
///
/// Returns `Ok(None)` when neither asks for a gang (absent, or `gang: "false"` without a min count),
/// `Ok(Some(_))` with the request, or an error naming the annotation for values such as `"abc"`, `"-1"`, `"0"` or
/// `"99999999999"`. Never panics.
pub fn gang_request(
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<GangRequest>, GangAnnotationError> {
    let Some(a) = annotations else { return Ok(None) };
    if let Some(v) = a.get(GANG_MIN_COUNT) {
        let n = v
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=MAX_MIN_COUNT).contains(n))
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| GangAnnotationError::BadMinCount { value: v.clone() })?;
        return Ok(Some(GangRequest::MinCount(n)));
    }
    match a.get(GANG).map(|v| v.trim()) {
        None => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(Some(GangRequest::FollowReplicas)),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(None),
        Some(v) => Err(GangAnnotationError::BadGang { value: v.to_string() }),
    }
}

/// True when the annotations mention a gang at all (valid or not): such an owner's pods wait for its PodGroup
/// instead of being scheduled one by one, so a typo never silently turns a gang into single pods.
pub fn wants_gang(annotations: Option<&BTreeMap<String, String>>) -> bool {
    match annotations {
        None => false,
        Some(a) => {
            a.contains_key(GANG_MIN_COUNT)
                || a.get(GANG)
                    .is_some_and(|v| !v.trim().eq_ignore_ascii_case("false"))
        }
    }
}

/// How a pod label must match for a [`MemberSelector`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LabelMatch {
    /// The label is present with this value.
    Equals(String),
    /// The label is present with any other value.
    NotEquals(String),
    /// The label is absent (written `!key`).
    Absent,
}

impl LabelMatch {
    /// Whether a label value (`None`: absent) matches.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match self {
            LabelMatch::Equals(v) => value == Some(v.as_str()),
            LabelMatch::NotEquals(v) => value.is_some_and(|x| x != v),
            LabelMatch::Absent => value.is_none(),
        }
    }
}

/// The members of a PodGroup among its owner's pods ([`MEMBERS`]): every requirement must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct MemberSelector(pub BTreeMap<String, LabelMatch>);

/// A [`MEMBERS`] value that does not parse; the message names the annotation and the bad requirement.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("annotation {MEMBERS}: requirement {0:?} is not key=value or key!=value")]
pub struct MemberSelectorError(pub String);

impl MemberSelector {
    /// Whether a pod with `labels` is a member.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0
            .iter()
            .all(|(k, m)| m.matches(labels.get(k).map(String::as_str)))
    }

    /// Parses `k=v,k2!=v2,!k3` (spaces around items ignored; an empty value is an empty selector, matching all).
    ///
    /// # Errors
    /// An item without `=`, or with an empty key.
    pub fn parse(s: &str) -> Result<Self, MemberSelectorError> {
        let mut out = BTreeMap::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, m) = match item.split_once("!=") {
                None if item.starts_with('!') => (&item[1..], LabelMatch::Absent),
                Some((k, v)) => (k, LabelMatch::NotEquals(v.trim().to_owned())),
                None => match item.split_once('=') {
                    Some((k, v)) => (k, LabelMatch::Equals(v.trim_start_matches('=').trim().to_owned())),
                    None => return Err(MemberSelectorError(item.to_owned())),
                },
            };
            let k = k.trim();
            if k.is_empty() || k.contains(['=', '!']) {
                return Err(MemberSelectorError(item.to_owned()));
            }
            out.insert(k.to_owned(), m);
        }
        Ok(Self(out))
    }
}

impl std::fmt::Display for MemberSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (k, m)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match m {
                LabelMatch::Equals(v) => write!(f, "{k}={v}")?,
                LabelMatch::NotEquals(v) => write!(f, "{k}!={v}")?,
                LabelMatch::Absent => write!(f, "!{k}")?,
            }
        }
        Ok(())
    }
}

/// Name of a group Phalanx creates for one part of an owner: `<name>-<kind>-<part>-...` in lower case (e.g.
/// `train-jobset-workers`, `infer-leaderworkerset-1-leader`); with no parts, [`owner_group_name`]. Cut and hashed
/// past 253 characters as that is.
pub fn unit_group_name(kind: &str, name: &str, parts: &[&str]) -> String {
    let mut full = format!("{name}-{}", kind.to_ascii_lowercase());
    for p in parts.iter().filter(|p| !p.is_empty()) {
        full.push('-');
        full.push_str(&p.to_ascii_lowercase());
    }
    shorten(full)
}

/// Name of the PodGroup (and of its Workload) Phalanx creates for the owner `kind`/`name`: `<name>-<kind>` in
/// lower case, e.g. `train-job` for Job `train`, so owners of different kinds with one name do not collide.
/// Names longer than 253 characters (a DNS subdomain) are cut and end in a 10-hex-digit FNV-1a hash of the full
/// name, so they stay unique and valid.
pub fn owner_group_name(kind: &str, name: &str) -> String {
    unit_group_name(kind, name, &[])
}

/// `full` if it is a DNS subdomain's length, else cut and suffixed with a hash of `full`.
fn shorten(full: String) -> String {
    const MAX: usize = 253;
    if full.len() <= MAX {
        return full;
    }
    let hash = full.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut cut = MAX - 11;
    while !full.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = full[..cut].trim_end_matches(['-', '.']);
    format!("{head}-{:010x}", hash & 0xff_ffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn member_selectors_round_trip() {
        let s = MemberSelector::parse("a=1, b!=0,c=,!d").unwrap();
        assert_eq!(s.to_string(), "a=1,b!=0,c=,!d");
        assert!(
            !s.matches(&ann(&[("a", "1"), ("b", "2"), ("c", ""), ("d", "x")])),
            "d must be absent"
        );
        assert_eq!(MemberSelector::parse(&s.to_string()), Ok(s.clone()));
        let labels = |pairs: &[(&str, &str)]| ann(pairs);
        assert!(s.matches(&labels(&[("a", "1"), ("b", "2"), ("c", "")])));
        assert!(!s.matches(&labels(&[("a", "1"), ("b", "0"), ("c", "")])));
        assert!(
            !s.matches(&labels(&[("a", "1"), ("c", "")])),
            "!= needs the label"
        );
        assert!(MemberSelector::parse("").unwrap().matches(&labels(&[])));
        assert!(MemberSelector::parse("nokey").is_err());
        assert!(MemberSelector::parse("=v").is_err());
        assert!(MemberSelector::parse("!").is_err());
        assert_eq!(
            unit_group_name("JobSet", "train", &["workers"]),
            "train-jobset-workers"
        );
        assert_eq!(
            unit_group_name("LeaderWorkerSet", "infer", &["1", "", "leader"]),
            "infer-leaderworkerset-1-leader"
        );
        assert_eq!(unit_group_name("Job", "x", &[]), owner_group_name("Job", "x"));
        assert!(unit_group_name("JobSet", &"n".repeat(300), &["w"]).len() <= 253);
    }

    #[test]
    fn requests() {
        assert_eq!(gang_request(None), Ok(None));
        assert_eq!(gang_request(Some(&ann(&[]))), Ok(None));
        assert_eq!(
            gang_request(Some(&ann(&[(GANG, "true")]))),
            Ok(Some(GangRequest::FollowReplicas))
        );
        assert_eq!(gang_request(Some(&ann(&[(GANG, "false")]))), Ok(None));
        assert_eq!(
            gang_request(Some(&ann(&[(GANG_MIN_COUNT, "8")]))),
            Ok(Some(GangRequest::MinCount(8)))
        );
        assert_eq!(
            gang_request(Some(&ann(&[(GANG, "true"), (GANG_MIN_COUNT, "3")]))),
            Ok(Some(GangRequest::MinCount(3)))
        );
    }

    #[test]
    fn bad_values_name_the_annotation() {
        for v in ["abc", "-1", "0", "99999999999", "", "1.5"] {
            let e = gang_request(Some(&ann(&[(GANG_MIN_COUNT, v)]))).unwrap_err();
            assert!(e.to_string().contains(GANG_MIN_COUNT), "{e}");
            assert!(wants_gang(Some(&ann(&[(GANG_MIN_COUNT, v)]))));
        }
        let e = gang_request(Some(&ann(&[(GANG, "yes")]))).unwrap_err();
        assert!(e.to_string().contains(GANG), "{e}");
        assert!(wants_gang(Some(&ann(&[(GANG, "yes")]))));
        assert!(!wants_gang(Some(&ann(&[(GANG, "false")]))));
    }

    #[test]
    fn names() {
        assert_eq!(owner_group_name("Job", "train"), "train-job");
        assert_eq!(owner_group_name("StatefulSet", "db"), "db-statefulset");
        let long = owner_group_name("Job", &"a".repeat(300));
        assert_eq!(long.len(), 253);
        assert_ne!(long, owner_group_name("Job", &"a".repeat(301)));
    }
}
