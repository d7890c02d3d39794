//! What the API server serves, probed once at start, and what Phalanx does without it.
//!
//! Phalanx supports Kubernetes 1.34 to 1.38. Most of what it reads and writes is GA in all of them; what is not is
//! listed by [`ServerFeatures::gaps`], each with the plain sentence the binary logs once at start and the way the
//! feature degrades. Nothing here writes to the cluster: a probe is `GET /version` plus discovery (`GET /apis` and
//! `GET /apis/<group>/<version>` for Phalanx's own group and, where served, upstream's workload API), which every
//! authenticated user may read (the `system:discovery` ClusterRole).
//!
//! Where a feature depends on a server feature gate rather than on the version or discovery, the sentence says so:
//! a pod field behind a gate that is off is dropped by the server on write, and nothing a client can read tells the
//! two apart (the OpenAPI document lists gated fields either way).

use std::collections::{BTreeMap, BTreeSet};

use kube::Client;

/// The oldest and newest minor versions the compatibility suite runs on (`make test-compat-all`, docs/testing.md).
pub const SUPPORTED_MINORS: std::ops::RangeInclusive<u32> = 34..=38;

/// Phalanx's own kinds: (group/version, plural, kind). The store watches each; without them nothing schedules.
const PHALANX_KINDS: [(&str, &str, &str); 3] = [
    ("scheduling.phalanx.dev/v1beta1", "podgroups", "PodGroup"),
    ("scheduling.phalanx.dev/v1beta1", "workloads", "Workload"),
    (
        "scheduling.phalanx.dev/v1alpha3",
        "compositepodgroups",
        "CompositePodGroup",
    ),
];

/// Upstream's workload API (KEP-4671), the kinds Phalanx mirrors in its own group: (plural, kind), and the
/// group-versions that may serve them, newest first. The server serves them only with the `GenericWorkload` gate
/// (`CompositePodGroup` for compositepodgroups) and the beta/alpha versions turned on by `--runtime-config`. 1.37
/// serves Workload and PodGroup in v1beta1 and CompositePodGroup in v1alpha3 only; 1.38 adds CompositePodGroup to
/// v1beta1 (the gate went beta; `pkg/registry/scheduling/rest/storage_scheduling.go`), v1alpha3 still serving all
/// three.
const UPSTREAM_KINDS: [(&str, &str); 3] = [
    ("workloads", "Workload"),
    ("podgroups", "PodGroup"),
    ("compositepodgroups", "CompositePodGroup"),
];
const UPSTREAM_GROUP_VERSIONS: [&str; 2] = ["scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha3"];

/// Dynamic Resource Allocation's GA API (Kubernetes 1.34+, KEP-4381); absent when the cluster turns it off.
pub const DRA_GROUP_VERSION: &str = "resource.k8s.io/v1";

/// The minor version from which pods carry `spec.schedulingGroup` (KEP-4671, behind the `GenericWorkload` gate).
const POD_SCHEDULING_GROUP_MINOR: u32 = 36;

/// The server's version as `GET /version` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerVersion {
    /// Major version (1).
    pub major: u32,
    /// Minor version, without the `+` some distributions append (`"37+"` is 37).
    pub minor: u32,
    /// The full version, e.g. `v1.34.4` or `v1.35.2-gke.1000`.
    pub git_version: String,
}

impl ServerVersion {
    /// Parses the `major`/`minor` strings of `/version`. Distributions append `+` or other text to the minor
    /// (`"37+"`); the leading digits count. `None` when either has no leading digits.
    pub fn parse(major: &str, minor: &str, git_version: &str) -> Option<ServerVersion> {
        fn digits(s: &str) -> Option<u32> {
            let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
            s[..end].parse().ok()
        }
        Some(ServerVersion {
            major: digits(major)?,
            minor: digits(minor)?,
            git_version: git_version.to_owned(),
        })
    }
}

/// How much a [`FeatureGap`] matters: the level it is logged at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// A fact about this server worth one line; Phalanx works as documented.
    Info,
    /// A feature is off or untested here; the rest works.
    Warn,
    /// Phalanx cannot schedule until it is fixed (it waits, and is not ready).
    Error,
}

/// One thing this server lacks, and what Phalanx does about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGap {
    /// Stable short name, e.g. `crds`, `pod-scheduling-group`, `dra`, `version` (a log field).
    pub feature: &'static str,
    /// Log level.
    pub severity: Severity,
    /// The sentence to log: what is missing, and how Phalanx degrades.
    pub message: String,
}

/// What one API server serves (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerFeatures {
    /// `None` when `/version` could not be parsed.
    pub version: Option<ServerVersion>,
    /// Every served `group/version` of the named groups (`GET /apis`); the core group is left out.
    pub group_versions: BTreeSet<String>,
    /// Resource plurals served in Phalanx's group-versions and in upstream's workload group-versions, by
    /// group-version.
    pub resources: BTreeMap<String, BTreeSet<String>>,
}

impl ServerFeatures {
    /// Asks the server: `/version`, `/apis`, and the resource lists of Phalanx's group-versions that are served.
    ///
    /// # Errors
    /// A request failed for another reason than the group-version not being served (network, authentication).
    pub async fn probe(client: &Client) -> Result<ServerFeatures, kube::Error> {
        let info = client.apiserver_version().await?;
        let version = ServerVersion::parse(&info.major, &info.minor, &info.git_version);
        let mut group_versions = BTreeSet::new();
        for group in client.list_api_groups().await?.groups {
            group_versions.extend(group.versions.into_iter().map(|v| v.group_version));
        }
        let mut resources = BTreeMap::new();
        let mut ours: BTreeSet<&str> = PHALANX_KINDS.iter().map(|(gv, _, _)| *gv).collect();
        ours.extend(UPSTREAM_GROUP_VERSIONS);
        for gv in ours.into_iter().filter(|gv| group_versions.contains(*gv)) {
            match client.list_api_group_resources(gv).await {
                Ok(list) => {
                    let plurals = list.resources.into_iter().map(|r| r.name);
                    resources.insert(gv.to_owned(), plurals.filter(|n| !n.contains('/')).collect());
                }
                // Removed between the two requests: not served.
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(ServerFeatures {
            version,
            group_versions,
            resources,
        })
    }

    /// Whether `group_version` (e.g. `resource.k8s.io/v1`) is served.
    pub fn serves(&self, group_version: &str) -> bool {
        self.group_versions.contains(group_version)
    }

    /// Whether Dynamic Resource Allocation's v1 API is served.
    pub fn serves_dra(&self) -> bool {
        self.serves(DRA_GROUP_VERSION)
    }

    /// The group-version in which the server serves upstream's kind `plural` (`workloads`, `podgroups`,
    /// `compositepodgroups`), the newest when several do: `scheduling.k8s.io/v1beta1` for a CompositePodGroup on
    /// 1.38, `scheduling.k8s.io/v1alpha3` on 1.37. `None` when upstream's workload API is off (the default).
    pub fn upstream_version(&self, plural: &str) -> Option<&'static str> {
        UPSTREAM_GROUP_VERSIONS
            .into_iter()
            .find(|gv| self.resources.get(*gv).is_some_and(|p| p.contains(plural)))
    }

    /// Phalanx's kinds that are not served, as `Kind (group/version)`.
    pub fn missing_crds(&self) -> Vec<String> {
        PHALANX_KINDS
            .iter()
            .filter(|(gv, plural, _)| !self.resources.get(*gv).is_some_and(|p| p.contains(*plural)))
            .map(|(gv, _, kind)| format!("{kind} ({gv})"))
            .collect()
    }

    /// Everything this server lacks that Phalanx would use, most severe first. Empty on a 1.36+ server with the
    /// CRDs and DRA served, apart from the `spec.schedulingGroup` note (and, where upstream's workload API is on,
    /// a note naming its kinds' group-versions).
    pub fn gaps(&self) -> Vec<FeatureGap> {
        let mut gaps = Vec::new();
        let missing = self.missing_crds();
        if !missing.is_empty() {
            gaps.push(FeatureGap {
                feature: "crds",
                severity: Severity::Error,
                message: format!(
                    "{} not served: the Phalanx CRDs are not installed (`kubectl apply --server-side -f crds/`, or \
                     the Helm chart); nothing is scheduled, and the replica stays unready, until they are",
                    missing.join(", ")
                ),
            });
        }
        match &self.version {
            None => gaps.push(FeatureGap {
                feature: "version",
                severity: Severity::Warn,
                message: "the server's /version could not be parsed; assuming a supported version".into(),
            }),
            Some(v) if v.major != 1 || v.minor < *SUPPORTED_MINORS.start() => gaps.push(FeatureGap {
                feature: "version",
                severity: Severity::Warn,
                message: format!(
                    "Kubernetes {} is older than the oldest supported version (v1.{}); continuing untested",
                    v.git_version,
                    SUPPORTED_MINORS.start()
                ),
            }),
            Some(v) if v.minor > *SUPPORTED_MINORS.end() => gaps.push(FeatureGap {
                feature: "version",
                severity: Severity::Info,
                message: format!(
                    "Kubernetes {} is newer than the newest tested version (v1.{})",
                    v.git_version,
                    SUPPORTED_MINORS.end()
                ),
            }),
            Some(_) => {}
        }
        if !self.serves_dra() {
            gaps.push(FeatureGap {
                feature: "dra",
                severity: Severity::Warn,
                message: format!(
                    "{DRA_GROUP_VERSION} is not served (Dynamic Resource Allocation is off): a pod whose \
                     spec.resourceClaims name a claim cannot get its devices"
                ),
            });
        }
        let label = phalanx_api::labels::POD_GROUP;
        let message = match &self.version {
            Some(v) if v.minor < POD_SCHEDULING_GROUP_MINOR => format!(
                "Kubernetes {} does not serve a pod's spec.schedulingGroup (1.{POD_SCHEDULING_GROUP_MINOR}+): the \
                 server drops it, so a pod joins a group by the label {label} or through its owner",
                v.git_version
            ),
            // Upstream's PodGroups are served only with the GenericWorkload gate, which also keeps the field.
            _ if self.upstream_version("podgroups").is_some() => format!(
                "a pod's spec.schedulingGroup is kept here (the server serves upstream's PodGroups, so its feature \
                 gate GenericWorkload is on): it names upstream's PodGroup, and the label {label} names Phalanx's"
            ),
            _ => format!(
                "a pod's spec.schedulingGroup is kept only where the server's feature gate GenericWorkload is on \
                 (off by default); the label {label} works everywhere"
            ),
        };
        gaps.push(FeatureGap {
            feature: "pod-scheduling-group",
            severity: Severity::Info,
            message,
        });
        let upstream: Vec<String> = UPSTREAM_KINDS
            .iter()
            .filter_map(|(plural, kind)| self.upstream_version(plural).map(|gv| format!("{kind} ({gv})")))
            .collect();
        if !upstream.is_empty() {
            gaps.push(FeatureGap {
                feature: "upstream-workload-api",
                severity: Severity::Info,
                message: format!(
                    "the server also serves upstream's workload API: {}; Phalanx schedules upstream's groups too \
                     when their pods name it (a pod joins one by spec.schedulingGroup.podGroupName, Phalanx's by \
                     its label); the kinds share names, so `kubectl get podgroups` may list upstream's: use the full \
                     names (podgroups.scheduling.phalanx.dev) or the short names (ppg, pcpg)",
                    upstream.join(", ")
                ),
            });
        }
        gaps.sort_by_key(|g| std::cmp::Reverse(g.severity));
        gaps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn features(minor: &str, gvs: &[&str], with_crds: bool) -> ServerFeatures {
        let mut f = ServerFeatures {
            version: ServerVersion::parse("1", minor, &format!("v1.{minor}.0")),
            group_versions: gvs.iter().map(|s| (*s).to_owned()).collect(),
            resources: BTreeMap::new(),
        };
        if with_crds {
            for (gv, plural, _) in PHALANX_KINDS {
                f.group_versions.insert(gv.to_owned());
                f.resources
                    .entry(gv.to_owned())
                    .or_default()
                    .insert(plural.to_owned());
            }
        }
        f
    }

    fn names(f: &ServerFeatures) -> Vec<&'static str> {
        f.gaps().iter().map(|g| g.feature).collect()
    }

    #[test]
    fn parses_distribution_minors() {
        let v = ServerVersion::parse("1", "37+", "v1.37.2-gke.1").unwrap();
        assert_eq!((v.major, v.minor), (1, 37));
        assert_eq!(ServerVersion::parse("1", "", "x"), None);
        assert_eq!(ServerVersion::parse("", "34", "x"), None);
    }

    #[test]
    fn a_full_1_37_server_has_only_the_gate_note() {
        let f = features("37", &[DRA_GROUP_VERSION], true);
        assert!(f.missing_crds().is_empty());
        let gaps = f.gaps();
        assert_eq!(names(&f), ["pod-scheduling-group"]);
        assert!(gaps[0].message.contains("GenericWorkload"), "{}", gaps[0].message);
    }

    #[test]
    fn a_1_34_server_drops_the_pod_field() {
        let f = features("34", &[DRA_GROUP_VERSION], true);
        let gaps = f.gaps();
        assert_eq!(names(&f), ["pod-scheduling-group"]);
        assert!(gaps[0].message.contains("does not serve"), "{}", gaps[0].message);
        assert!(gaps[0].message.contains(phalanx_api::labels::POD_GROUP));
    }

    #[test]
    fn missing_crds_come_first_and_name_each_kind() {
        let mut f = features("35", &[DRA_GROUP_VERSION], true);
        f.resources.remove("scheduling.phalanx.dev/v1alpha3");
        let gaps = f.gaps();
        assert_eq!(gaps[0].feature, "crds");
        assert_eq!(gaps[0].severity, Severity::Error);
        assert!(
            gaps[0]
                .message
                .starts_with("CompositePodGroup (scheduling.phalanx.dev/v1alpha3) not served")
        );
        let none = features("35", &[DRA_GROUP_VERSION], false);
        assert_eq!(none.missing_crds().len(), 3);
    }

    #[test]
    fn versions_outside_the_supported_range_and_dra_off() {
        let old = features("33", &[], true);
        assert_eq!(names(&old), ["version", "dra", "pod-scheduling-group"]);
        assert!(
            old.gaps()[0]
                .message
                .contains("older than the oldest supported version (v1.34)")
        );
        let new = features("39", &[DRA_GROUP_VERSION], true);
        assert_eq!(new.gaps()[0].severity, Severity::Info);
        assert!(
            new.gaps()[0]
                .message
                .contains("newer than the newest tested version (v1.38)")
        );
        let supported = features("38", &[DRA_GROUP_VERSION], true);
        assert_eq!(names(&supported), ["pod-scheduling-group"]);
    }

    fn with_upstream(mut f: ServerFeatures, served: &[(&str, &[&str])]) -> ServerFeatures {
        for (gv, plurals) in served {
            f.group_versions.insert((*gv).to_owned());
            let set = f.resources.entry((*gv).to_owned()).or_default();
            set.extend(plurals.iter().map(|p| (*p).to_owned()));
        }
        f
    }

    #[test]
    fn upstream_workload_api_by_version() {
        let all: &[&str] = &["workloads", "podgroups", "compositepodgroups"];
        // 1.37: CompositePodGroup in v1alpha3 only.
        let f37 = with_upstream(
            features("37", &[DRA_GROUP_VERSION], true),
            &[
                ("scheduling.k8s.io/v1beta1", &["workloads", "podgroups"]),
                ("scheduling.k8s.io/v1alpha3", all),
            ],
        );
        assert_eq!(
            f37.upstream_version("podgroups"),
            Some("scheduling.k8s.io/v1beta1")
        );
        assert_eq!(
            f37.upstream_version("compositepodgroups"),
            Some("scheduling.k8s.io/v1alpha3")
        );
        // 1.38: CompositePodGroup in v1beta1 too, which wins.
        let f38 = with_upstream(
            features("38", &[DRA_GROUP_VERSION], true),
            &[
                ("scheduling.k8s.io/v1beta1", all),
                ("scheduling.k8s.io/v1alpha3", all),
            ],
        );
        assert_eq!(
            f38.upstream_version("compositepodgroups"),
            Some("scheduling.k8s.io/v1beta1")
        );
        assert_eq!(names(&f38), ["pod-scheduling-group", "upstream-workload-api"]);
        let note = &f38.gaps()[1].message;
        assert!(
            note.contains("CompositePodGroup (scheduling.k8s.io/v1beta1)")
                && note.contains("Phalanx schedules upstream's groups too"),
            "{note}"
        );
        let field = &f38.gaps()[0].message;
        assert!(field.contains("is kept here"), "{field}");
        // Off (the default): a served group-version without the kinds (the runtime-config without the gate).
        let off = with_upstream(
            features("38", &[DRA_GROUP_VERSION], true),
            &[("scheduling.k8s.io/v1beta1", &[])],
        );
        assert_eq!(off.upstream_version("workloads"), None);
        assert_eq!(names(&off), ["pod-scheduling-group"]);
    }
}
