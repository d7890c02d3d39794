//! The configuration file of `phalanx run` (`--config`, shipped as `config/phalanx.yaml` and as the Helm chart's
//! ConfigMap).
//!
//! Shape (YAML, camelCase, unknown keys rejected at every level):
//! ```yaml
//! apiVersion: config.phalanx.dev/v1alpha1
//! kind: PhalanxConfiguration
//! scheduler: { ... }        # phalanx_scheduler::config::SchedulerConfig
//! ```
//! The envelope mirrors kube-scheduler's `KubeSchedulerConfiguration` (`apiVersion`/`kind` + profile), so a
//! future incompatible format can be told apart. Errors name the offending key as a dotted path
//! (`scheduler.backoff.initialSeconds`), which is what an operator needs to fix a ConfigMap.

use std::path::{Path, PathBuf};

use phalanx_scheduler::config::SchedulerConfig;
use serde::{Deserialize, Serialize};

/// `apiVersion` the configuration file must carry.
pub const API_VERSION: &str = "config.phalanx.dev/v1alpha1";
/// `kind` the configuration file must carry.
pub const KIND: &str = "PhalanxConfiguration";

/// The parsed configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PhalanxConfig {
    /// Must be [`API_VERSION`] when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Must be [`KIND`] when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The scheduler profile: plugin weights, placement score weights, backoff and timeouts. Missing keys take
    /// the defaults of [`SchedulerConfig::default`].
    #[serde(default)]
    pub scheduler: SchedulerConfig,
    /// Binding and status-writing limits of the scheduling driver.
    #[serde(default)]
    pub binder: BinderConfig,
    /// Reconciler settings of the Workload, PodGroup and CompositePodGroup controllers.
    #[serde(default)]
    pub controllers: ControllersConfig,
    /// How gangs work with a cluster autoscaler (Karpenter, Cluster Autoscaler): see docs/operations.md
    /// "Autoscaling".
    #[serde(default)]
    pub autoscaling: AutoscalingConfig,
}

/// `autoscaling:` section: how pending gangs and a cluster autoscaler work together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AutoscalingConfig {
    /// Seconds a gang that could preempt waits, after its first unschedulable attempt, before it evicts anything
    /// (0-86400, default 0: preempt at once, kube-scheduler's behaviour). A PodGroup's or root CompositePodGroup's
    /// `spec.preemptionDelaySeconds` overrides it. Meanwhile its members carry `PodScheduled=False/Unschedulable`,
    /// so that an autoscaler can add nodes instead of victims (KAI-Scheduler's `preemption-delay`).
    pub preemption_delay_seconds: u32,
    /// Create a Cluster Autoscaler `autoscaling.x-k8s.io/v1` ProvisioningRequest for every gang that opts in, and
    /// place the gang only once the request is `Provisioned=True` (default false; needs the ProvisioningRequest
    /// CRD on the cluster).
    pub provisioning_requests: bool,
    /// The ProvisioningRequest class of the requests Phalanx creates (default
    /// `best-effort-atomic-scale-up.autoscaling.x-k8s.io`, Cluster Autoscaler's atomic scale-up).
    pub provisioning_class_name: String,
}

/// Cluster Autoscaler's atomic scale-up class (`provisioningrequest/apis`, `ProvisioningClassBestEffortAtomicScaleUp`).
pub const DEFAULT_PROVISIONING_CLASS: &str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";

impl Default for AutoscalingConfig {
    fn default() -> Self {
        Self {
            preemption_delay_seconds: 0,
            provisioning_requests: false,
            provisioning_class_name: DEFAULT_PROVISIONING_CLASS.to_owned(),
        }
    }
}

/// `binder:` section: how the scheduling driver applies decisions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct BinderConfig {
    /// Timeout of one `pods/binding` call in seconds (1-300, default 10). A timed-out bind is forgotten and the pod
    /// retried, so one slow API call cannot hold a gang's capacity forever.
    pub timeout_seconds: u64,
    /// How long PreBind waits for a gang's PersistentVolumeClaims to be bound (by kube-controller-manager's PV
    /// controller, or a provisioner for a `WaitForFirstConsumer` class) before it binds no pod of the gang and
    /// retries it (1-86400 seconds, default 600: upstream VolumeBinding's `bindTimeoutSeconds`).
    pub volume_bind_timeout_seconds: u64,
    /// Status patches and events in flight (1-1024, default 16).
    pub status_concurrency: u32,
    /// Emit the `Scheduled` event for every bound pod (default true), as kube-scheduler does
    /// (`pkg/scheduler/schedule_one.go`, "Successfully assigned"). It is a third (gangs of 8) to a half (gangs of
    /// 1,000) of the API writes per bound pod (`docs/benchmarks.md`); `false` leaves a bound pod with its
    /// `PodScheduled=True` condition only.
    pub scheduled_events: bool,
}

impl Default for BinderConfig {
    fn default() -> Self {
        Self {
            timeout_seconds: 10,
            volume_bind_timeout_seconds: 600,
            status_concurrency: 16,
            scheduled_events: true,
        }
    }
}

/// `controllers:` section: the reconcilers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ControllersConfig {
    /// Parallel reconciles per controller (1-256, default 16).
    pub concurrency: u16,
    /// Seconds between safety re-checks of every object (10-86400, default 300).
    pub resync_seconds: u64,
    /// Upper bound in seconds of the per-object retry backoff after errors (1-3600, default 120).
    pub max_backoff_seconds: u64,
    /// Minimum milliseconds between two status writes of one object, and before its first (0-60000, default 1000).
    pub min_status_interval_ms: u64,
}

impl Default for ControllersConfig {
    fn default() -> Self {
        Self {
            concurrency: 16,
            resync_seconds: 300,
            max_backoff_seconds: 120,
            min_status_interval_ms: 1000,
        }
    }
}

/// Checks `value` against an inclusive range, naming `key` on failure.
fn in_range(origin: &str, key: &str, value: u64, min: u64, max: u64) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            origin: origin.to_owned(),
            key: key.to_owned(),
            message: format!("{value} must be between {min} and {max}"),
        })
    }
}

/// Why a configuration file was rejected. Every variant names the file and, where it applies, the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read. The I/O error is the `source`, not part of the message: callers print the
    /// chain (`{:#}`), which would show it twice.
    #[error("cannot read configuration file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not YAML.
    #[error("configuration file {origin} is not valid YAML: {message}")]
    Yaml {
        /// The file name (or `<inline>`).
        origin: String,
        /// The parser's message (with line and column).
        message: String,
    },
    /// A key is unknown or a value has the wrong type.
    #[error("configuration file {origin}: key `{key}`: {message}")]
    Field {
        /// The file name (or `<inline>`).
        origin: String,
        /// Dotted path of the key, e.g. `scheduler.backoff`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// The values parse but are out of range (from [`SchedulerConfig::validate`]).
    #[error("configuration file {origin}: key `{key}`: {message}")]
    Invalid {
        /// The file name (or `<inline>`).
        origin: String,
        /// Dotted path of the key, e.g. `scheduler.pluginWeights.nodeAffinity`.
        key: String,
        /// What is wrong with its value.
        message: String,
    },
}

impl PhalanxConfig {
    /// Reads, parses and validates a configuration file.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file and the bad key.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and validates configuration text; `origin` names it in errors.
    ///
    /// The YAML is first read into a JSON value and then deserialised with `serde_path_to_error`, so a type error or
    /// an unknown key deep inside comes back with its dotted path.
    ///
    /// # Errors
    /// [`ConfigError`] naming the bad key.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        // An empty file means "all defaults".
        let value: serde_json::Value = if text.trim().is_empty() {
            serde_json::Value::Object(serde_json::Map::new())
        } else {
            serde_saphyr::from_str(text).map_err(|e| ConfigError::Yaml {
                origin: origin.to_owned(),
                message: e.to_string(),
            })?
        };
        let value = match value {
            serde_json::Value::Null => serde_json::Value::Object(serde_json::Map::new()),
            v => v,
        };
        let config: PhalanxConfig = serde_path_to_error::deserialize(value).map_err(|e| {
            let key = e.path().to_string();
            ConfigError::Field {
                origin: origin.to_owned(),
                key: if key == "." { "<root>".to_owned() } else { key },
                message: e.into_inner().to_string(),
            }
        })?;
        config.validate(origin)?;
        Ok(config)
    }

    /// Checks the envelope and the scheduler profile.
    ///
    /// # Errors
    /// [`ConfigError::Field`] for a wrong `apiVersion`/`kind`, [`ConfigError::Invalid`] for a bad profile value.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let field = |key: &str, message: String| ConfigError::Field {
            origin: origin.to_owned(),
            key: key.to_owned(),
            message,
        };
        if let Some(v) = self.api_version.as_deref()
            && v != API_VERSION
        {
            return Err(field("apiVersion", format!("must be {API_VERSION:?}, got {v:?}")));
        }
        if let Some(k) = self.kind.as_deref()
            && k != KIND
        {
            return Err(field("kind", format!("must be {KIND:?}, got {k:?}")));
        }
        self.scheduler.validate().map_err(|e| ConfigError::Invalid {
            origin: origin.to_owned(),
            key: format!("scheduler.{}", e.key),
            message: e.message,
        })?;
        let (b, c) = (&self.binder, &self.controllers);
        in_range(origin, "binder.timeoutSeconds", b.timeout_seconds, 1, 300)?;
        in_range(
            origin,
            "binder.volumeBindTimeoutSeconds",
            b.volume_bind_timeout_seconds,
            1,
            86_400,
        )?;
        in_range(
            origin,
            "binder.statusConcurrency",
            u64::from(b.status_concurrency),
            1,
            1024,
        )?;
        in_range(
            origin,
            "controllers.concurrency",
            u64::from(c.concurrency),
            1,
            256,
        )?;
        in_range(origin, "controllers.resyncSeconds", c.resync_seconds, 10, 86_400)?;
        in_range(
            origin,
            "controllers.maxBackoffSeconds",
            c.max_backoff_seconds,
            1,
            3600,
        )?;
        in_range(
            origin,
            "controllers.minStatusIntervalMs",
            c.min_status_interval_ms,
            0,
            60_000,
        )?;
        let a = &self.autoscaling;
        in_range(
            origin,
            "autoscaling.preemptionDelaySeconds",
            u64::from(a.preemption_delay_seconds),
            0,
            86_400,
        )?;
        // A DNS subdomain, as the class names of ProvisioningRequests are (`spec.provisioningClassName`).
        let class = &a.provisioning_class_name;
        if class.is_empty()
            || class.len() > 253
            || !class.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            })
        {
            return Err(ConfigError::Invalid {
                origin: origin.to_owned(),
                key: "autoscaling.provisioningClassName".to_owned(),
                message: format!(
                    "{class:?} must be a DNS subdomain (lowercase letters, digits, '-' and '.')"
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/phalanx.yaml")
    }

    #[test]
    fn shipped_config_parses_and_validates() {
        let config = PhalanxConfig::load(&shipped_path()).expect("config/phalanx.yaml is valid");
        assert_eq!(config.api_version.as_deref(), Some(API_VERSION));
        assert_eq!(config.kind.as_deref(), Some(KIND));
    }

    #[test]
    fn shipped_config_matches_chart_default() {
        // The chart's ConfigMap embeds the same file, so the defaults a Helm user gets are the documented ones.
        let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/phalanx/files/phalanx.yaml");
        let a = std::fs::read_to_string(shipped_path()).expect("read config/phalanx.yaml");
        let b = std::fs::read_to_string(&chart).expect("read charts/phalanx/files/phalanx.yaml");
        assert_eq!(
            a, b,
            "charts/phalanx/files/phalanx.yaml must be a copy of config/phalanx.yaml"
        );
    }

    #[test]
    fn empty_file_means_defaults() {
        let config = PhalanxConfig::parse("", "<inline>").expect("empty is fine");
        assert!(config.api_version.is_none());
        PhalanxConfig::parse("# only a comment\n", "<inline>").expect("comment-only is fine");
    }

    #[test]
    fn unknown_top_level_key_is_named() {
        let err = PhalanxConfig::parse("schedular: {}\n", "test.yaml").expect_err("typo must be rejected");
        let msg = err.to_string();
        assert!(msg.contains("schedular"), "{msg}");
        assert!(msg.contains("test.yaml"), "{msg}");
    }

    #[test]
    fn unknown_scheduler_key_is_named_with_its_path() {
        let err = PhalanxConfig::parse("scheduler:\n  noSuchKnob: 3\n", "test.yaml").expect_err("rejected");
        let msg = err.to_string();
        assert!(msg.contains("noSuchKnob"), "{msg}");
        assert!(
            matches!(&err, ConfigError::Field { key, .. } if key.starts_with("scheduler")),
            "{err:?}"
        );
    }

    #[test]
    fn unknown_nested_key_is_named_with_its_path() {
        let text = "scheduler:\n  pluginWeights:\n    nodeAfinity: 2\n";
        let err = PhalanxConfig::parse(text, "test.yaml").expect_err("typo must be rejected");
        let msg = err.to_string();
        assert!(msg.contains("nodeAfinity"), "{msg}");
        assert!(
            matches!(&err, ConfigError::Field { key, .. } if key == "scheduler.pluginWeights.nodeAfinity"),
            "{err:?}"
        );
    }

    #[test]
    fn out_of_range_value_is_named() {
        let text = "scheduler:\n  pluginWeights:\n    nodeAffinity: 101\n";
        let err = PhalanxConfig::parse(text, "test.yaml").expect_err("101 is out of range");
        assert!(
            matches!(&err, ConfigError::Invalid { key, .. } if key == "scheduler.pluginWeights.nodeAffinity"),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("scheduler.pluginWeights.nodeAffinity"),
            "{err}"
        );
    }

    #[test]
    fn wrong_type_is_named() {
        let err =
            PhalanxConfig::parse("scheduler:\n  podMaxBackoffMs: soon\n", "x").expect_err("not a number");
        assert!(
            matches!(&err, ConfigError::Field { key, .. } if key == "scheduler.podMaxBackoffMs"),
            "{err:?}"
        );
    }

    #[test]
    fn shipped_config_values_are_the_defaults() {
        // The file documents the defaults; if a default changes in code, the file must follow.
        let config = PhalanxConfig::load(&shipped_path()).expect("valid");
        assert_eq!(config.scheduler, SchedulerConfig::default());
        assert_eq!(config.binder, BinderConfig::default());
        assert_eq!(config.controllers, ControllersConfig::default());
    }

    #[test]
    fn binder_and_controller_ranges_are_named() {
        let err = PhalanxConfig::parse("binder:\n  timeoutSeconds: 0\n", "x").expect_err("0 s is refused");
        assert!(
            matches!(&err, ConfigError::Invalid { key, .. } if key == "binder.timeoutSeconds"),
            "{err:?}"
        );
        let err =
            PhalanxConfig::parse("controllers:\n  resyncSeconds: 1\n", "x").expect_err("1 s is refused");
        assert!(
            matches!(&err, ConfigError::Invalid { key, .. } if key == "controllers.resyncSeconds"),
            "{err:?}"
        );
        let err = PhalanxConfig::parse("controllers:\n  resync: 60\n", "x").expect_err("unknown key");
        assert!(
            matches!(&err, ConfigError::Field { key, .. } if key == "controllers.resync"),
            "{err:?}"
        );
    }

    #[test]
    fn wrong_kind_is_named() {
        let err = PhalanxConfig::parse("kind: KubeSchedulerConfiguration\n", "x").expect_err("rejected");
        assert!(
            matches!(&err, ConfigError::Field { key, .. } if key == "kind"),
            "{err:?}"
        );
    }

    #[test]
    fn broken_yaml_is_reported() {
        let err = PhalanxConfig::parse("scheduler: [unclosed\n", "x").expect_err("rejected");
        assert!(matches!(err, ConfigError::Yaml { .. }), "{err:?}");
    }
}
