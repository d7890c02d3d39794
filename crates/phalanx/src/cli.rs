//! Command line of the `phalanx` binary (clap derive).
//!
//! Every `run` flag can also be set through an environment variable (`PHALANX_*`, or `KUBECONFIG`), so the Helm
//! chart sets most of them through the Deployment's `env` and the quick start through flags. Flag names follow
//! kube-scheduler's where one exists (`--leader-elect`, `--leader-elect-lease-duration`, ...).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// `phalanx <command>`: the operator's entry point.
#[derive(Debug, Parser)]
#[command(
    name = "phalanx",
    version,
    about = "Gang scheduling for Kubernetes: PodGroups placed all-or-nothing"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The sub-commands of `phalanx`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the store, the controllers and the scheduler in one process.
    Run(Box<RunArgs>),
    /// Print the CustomResourceDefinitions (the bytes of `crds/phalanx.yaml`) to stdout.
    Crds,
    /// Print the version.
    Version,
    /// Explain why a PodGroup, CompositePodGroup or pod is pending (read-only; runs the scheduler's cycles on a
    /// read of the cluster, writes nothing).
    Explain(ExplainArgs),
    /// Show where the PodGroups, CompositePodGroups and pods of some manifests would land, writing nothing.
    Simulate(SimulateArgs),
    /// Print the cluster state the simulator reads (nodes, pods, groups, workloads, priority classes, PDBs) as
    /// one `v1 List`, for `phalanx simulate --snapshot FILE`.
    Snapshot(SnapshotArgs),
}

/// How to reach the cluster (the read-only tools).
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// Kubeconfig file. Without it the in-cluster ServiceAccount or `~/.kube/config` is used.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use (default: the file's current context).
    #[arg(long)]
    pub context: Option<String>,

    /// The scheduler whose view to take: pods with this `spec.schedulerName` are the ones it places.
    #[arg(long, default_value = phalanx_api::DEFAULT_SCHEDULER_NAME)]
    pub scheduler_name: String,

    /// The nodes that scheduler considers (its `--node-selector`, kubectl `-l` syntax). Empty = all nodes.
    #[arg(long, default_value = "")]
    pub node_selector: String,
}

/// Output format of the read-only tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Sentences for people.
    Text,
    /// One JSON document for programs.
    Json,
}

/// `phalanx explain <kind> NAME`.
#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    /// What to explain: podgroup (ppg), compositepodgroup (pcpg) or pod.
    #[arg(value_enum)]
    pub kind: crate::explain::gather::Target,

    /// Its name.
    pub name: String,

    /// Its namespace (default: the kubeconfig context's namespace, as kubectl; else `default`).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,

    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,

    /// The scheduler's configuration file.
    #[command(flatten)]
    pub config: ConfigFileArg,

    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `phalanx simulate -f MANIFESTS`.
#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// Manifest files (multi-document YAML or JSON; `-` = stdin). Repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,

    /// Place against this file (written by `phalanx snapshot`) instead of the live cluster.
    #[arg(long)]
    pub snapshot: Option<PathBuf>,

    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    pub output: Output,

    /// The scheduler's configuration file.
    #[command(flatten)]
    pub config: ConfigFileArg,

    /// The cluster (when no --snapshot).
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `--config` of `explain` and `simulate`.
#[derive(Debug, Clone, Args)]
pub struct ConfigFileArg {
    /// The scheduler's configuration file, as given to `phalanx run --config` (the same `PHALANX_CONFIG` variable
    /// too): weights, scoring strategy, placement limits, search budget. Without it the built-in defaults, which may
    /// differ from a running scheduler's file.
    #[arg(long = "config", value_name = "CONFIG", env = "PHALANX_CONFIG")]
    pub path: Option<PathBuf>,
}

/// Format of `phalanx snapshot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SnapshotFormat {
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

/// `phalanx snapshot`.
#[derive(Debug, Clone, Args)]
pub struct SnapshotArgs {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = SnapshotFormat::Yaml)]
    pub output: SnapshotFormat,

    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Log line format of `phalanx run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line (for log collectors); the default in the Helm chart.
    Json,
    /// Human-readable lines; the default on a terminal.
    Text,
}

/// Flags of `phalanx run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Kubeconfig file. Without it the in-cluster ServiceAccount or `~/.kube/config` is used (kube's `Config::infer`).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use (default: the file's current context).
    #[arg(long, env = "PHALANX_CONTEXT")]
    pub context: Option<String>,

    /// Scheduler configuration file (YAML, see config/phalanx.yaml). Without it the built-in defaults are used.
    #[arg(long, env = "PHALANX_CONFIG")]
    pub config: Option<PathBuf>,

    /// Pods whose `spec.schedulerName` equals this are scheduled by Phalanx.
    #[arg(long, env = "PHALANX_SCHEDULER_NAME", default_value = phalanx_api::DEFAULT_SCHEDULER_NAME)]
    pub scheduler_name: String,

    /// Restrict scheduling to nodes matching this label selector (e.g. `pool=gpu,!maintenance`). Empty = all nodes.
    #[arg(long, env = "PHALANX_NODE_SELECTOR", default_value = "")]
    pub node_selector: String,

    /// Maximum number of `pods/binding` calls in flight, and of decisions whose PreBind writes device claims.
    #[arg(long, env = "PHALANX_BIND_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub bind_concurrency: u32,

    /// Seconds a request of the main API client may wait for the server's next byte after its last write, before
    /// it fails and its connection is dropped (`crate::fenced_client::DEFAULT_READ_TIMEOUT`, 295). Below 295 a
    /// healthy but quiet watch (ended by the server after 290 s) is cut and resumed early; meant for tests.
    #[arg(long = "api-read-timeout", env = "PHALANX_API_READ_TIMEOUT", default_value_t = 295, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub api_read_timeout_secs: u64,

    /// Seconds a gang PodGroup still gathering its pods (fewer than minCount, never scheduled) may see no new member
    /// before it gets one Warning event `WaitingForMembers` (`phalanx_controllers::members_wait`); 0 = never.
    #[arg(long = "members-wait-warning", env = "PHALANX_MEMBERS_WAIT_WARNING", default_value_t = 300, value_parser = clap::value_parser!(u64).range(0..=86400))]
    pub members_wait_warning_secs: u64,

    /// Seconds between the discovery rounds that notice the API server serving other optional APIs than at start
    /// (DRA, upstream's `scheduling.k8s.io` PodGroups and CompositePodGroups): on a change the process exits, to be
    /// restarted and watch what is served (`phalanx_store::served_apis::until_changed`); 0 = never.
    #[arg(long = "api-discovery-interval", env = "PHALANX_API_DISCOVERY_INTERVAL", default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=86400))]
    pub api_discovery_interval_secs: u64,

    /// Address of the HTTP server for /healthz, /readyz and /metrics.
    #[arg(long, env = "PHALANX_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// Log format.
    #[arg(long, env = "PHALANX_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Leader election options.
    #[command(flatten)]
    pub leader: LeaderArgs,
}

/// Leader election flags. With several replicas every replica keeps its caches warm and only the Lease holder
/// schedules and writes.
#[derive(Debug, Clone, Args)]
pub struct LeaderArgs {
    /// Enable leader election (required with more than one replica).
    #[arg(long = "leader-elect", env = "PHALANX_LEADER_ELECT", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub enabled: bool,

    /// Name of the coordination.k8s.io Lease (default: the scheduler name, so that every replica and every
    /// installation of one scheduler name elects one leader).
    #[arg(long = "leader-elect-lease-name", env = "PHALANX_LEASE_NAME")]
    pub lease_name: Option<String>,

    /// Namespace of the Lease (default: kube-system, shared by every installation, as kube-scheduler's Lease).
    #[arg(long = "leader-elect-lease-namespace", env = "PHALANX_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// Holder identity (default: `$POD_NAME`, else the host name plus the process id).
    #[arg(long = "leader-elect-identity", env = "PHALANX_LEASE_IDENTITY")]
    pub identity: Option<String>,

    /// Lease duration in seconds: how long a stale holder keeps the Lease.
    #[arg(long = "leader-elect-lease-duration", env = "PHALANX_LEASE_DURATION", default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..=3600))]
    pub lease_duration_secs: u64,

    /// Seconds before expiry at which the holder renews.
    #[arg(long = "leader-elect-renew-grace", env = "PHALANX_LEASE_GRACE", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub grace_secs: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_flags_parse() {
        let cli = Cli::try_parse_from([
            "phalanx",
            "run",
            "--scheduler-name",
            "s",
            "--leader-elect",
            "--leader-elect-lease-namespace",
            "ns",
            "--bind-concurrency",
            "4",
            "--log-format",
            "json",
            "--node-selector",
            "a=b",
            "--members-wait-warning",
            "0",
        ])
        .expect("flags parse");
        let Command::Run(args) = cli.command else {
            panic!("expected run")
        };
        assert_eq!(args.scheduler_name, "s");
        assert!(args.leader.enabled);
        assert_eq!(args.leader.lease_namespace.as_deref(), Some("ns"));
        assert_eq!(args.bind_concurrency, 4);
        assert_eq!(args.log_format, LogFormat::Json);
        assert_eq!(args.node_selector, "a=b");
        assert_eq!(args.members_wait_warning_secs, 0, "0 turns the warning off");
        let Command::Run(args) = Cli::try_parse_from(["phalanx", "run"]).expect("parses").command else {
            panic!("expected run")
        };
        assert_eq!(args.members_wait_warning_secs, 300);
        assert!(Cli::try_parse_from(["phalanx", "run", "--members-wait-warning", "-1"]).is_err());
    }

    #[test]
    fn tool_flags_parse() {
        let cli = Cli::try_parse_from(["phalanx", "explain", "ppg", "g", "-n", "ns", "-o", "json"])
            .expect("parses");
        let Command::Explain(a) = cli.command else {
            panic!("expected explain")
        };
        assert_eq!(a.kind, crate::explain::gather::Target::Podgroup);
        assert_eq!(
            (
                a.name.as_str(),
                a.namespace.as_deref().unwrap_or_default(),
                a.output
            ),
            ("g", "ns", Output::Json)
        );
        assert!(Cli::try_parse_from(["phalanx", "explain", "deployment", "g"]).is_err());
        assert!(
            Cli::try_parse_from(["phalanx", "simulate"]).is_err(),
            "-f is required"
        );
        let cli = Cli::try_parse_from([
            "phalanx",
            "simulate",
            "-f",
            "a.yaml",
            "-f",
            "-",
            "--snapshot",
            "s.yaml",
        ])
        .expect("parses");
        let Command::Simulate(a) = cli.command else {
            panic!("expected simulate")
        };
        assert_eq!(a.files.len(), 2);
        assert!(a.snapshot.is_some());
        assert!(a.config.path.is_none());
        let cli =
            Cli::try_parse_from(["phalanx", "explain", "ppg", "g", "--config", "c.yaml"]).expect("parses");
        let Command::Explain(a) = cli.command else {
            panic!("expected explain")
        };
        assert_eq!(a.config.path.as_deref(), Some(std::path::Path::new("c.yaml")));
    }

    #[test]
    fn leader_elect_accepts_explicit_false_and_bad_values_fail() {
        let cli = Cli::try_parse_from(["phalanx", "run", "--leader-elect=false"]).expect("parses");
        let Command::Run(args) = cli.command else {
            panic!("expected run")
        };
        assert!(!args.leader.enabled);
        assert!(Cli::try_parse_from(["phalanx", "run", "--bind-concurrency", "0"]).is_err());
        assert!(Cli::try_parse_from(["phalanx", "run", "--log-format", "xml"]).is_err());
    }
}
