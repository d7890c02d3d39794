//! The entry point shared by the `phalanx` and `kubectl-phalanx` binaries (kubectl runs `kubectl-phalanx` for
//! `kubectl phalanx ...`, see the kubectl plugin mechanism, `kubectl plugin --help`).

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;

use crate::RunOptions;
use crate::cli::{Cli, ClusterArgs, Command, Output, RunArgs, SnapshotFormat};
use crate::config::PhalanxConfig;
use crate::leader::{LeaderConfig, OnLeaseLost};
use crate::tools::ClusterSource;
use crate::{explain, operator, simulate, tools};

/// Parses the command line and runs the command; the process's exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds => write_out(phalanx_api::crds::to_yaml().as_bytes(), "the CRDs"),
        Command::Version => {
            println!("phalanx {}", crate::VERSION);
            ExitCode::SUCCESS
        }
        Command::Run(args) => {
            crate::telemetry::init(args.log_format);
            let Some(runtime) = runtime() else {
                return ExitCode::FAILURE;
            };
            match runtime.block_on(run(*args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "phalanx run failed");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Explain(a) => tool(async move {
            // The configuration first: a typo in it is reported without reading the cluster.
            let view = view(&a.cluster, a.config.path.as_deref())?;
            let source = live(&a.cluster);
            let (client, state) = tools::read_cluster(&source).await?;
            // As kubectl: no `-n` means the namespace of the kubeconfig's context.
            let ns = a
                .namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_owned());
            let e = explain::explain(&client, state, a.kind, &ns, &a.name, &view).await?;
            Ok(match a.output {
                Output::Text => explain::render::text(&e),
                Output::Json => serde_json::to_string_pretty(&e)? + "\n",
            })
        }),
        Command::Simulate(a) => tool(async move {
            let source = match &a.snapshot {
                Some(f) => ClusterSource::File(f.clone()),
                None => live(&a.cluster),
            };
            let v =
                simulate::simulate(&a.files, &source, &view(&a.cluster, a.config.path.as_deref())?).await?;
            Ok(match a.output {
                Output::Text => simulate::render(&v),
                Output::Json => serde_json::to_string_pretty(&v)? + "\n",
            })
        }),
        Command::Snapshot(a) => tool(async move {
            eprintln!("phalanx: reading the cluster");
            let (_, state) = tools::read_cluster(&live(&a.cluster)).await?;
            eprintln!(
                "phalanx: {} nodes, {} pods, {} PodGroups, {} CompositePodGroups",
                state.nodes.len(),
                state.pods.len(),
                state.pod_groups.len(),
                state.composite_pod_groups.len()
            );
            let list = tools::objects::to_list(&state)?;
            Ok(match a.output {
                SnapshotFormat::Yaml => serde_saphyr::to_string(&list)?,
                SnapshotFormat::Json => serde_json::to_string_pretty(&list)? + "\n",
            })
        }),
    }
}

fn live(c: &ClusterArgs) -> ClusterSource {
    ClusterSource::Live {
        kubeconfig: c.kubeconfig.clone(),
        context: c.context.clone(),
    }
}

/// The scheduler a tool takes the view of; `config` is read and validated as `phalanx run --config` reads it.
fn view(c: &ClusterArgs, config: Option<&std::path::Path>) -> anyhow::Result<tools::View> {
    let config = match config {
        Some(path) => PhalanxConfig::load(path)?.scheduler,
        None => phalanx_scheduler::config::SchedulerConfig::default(),
    };
    Ok(tools::View {
        scheduler_name: c.scheduler_name.clone(),
        node_selector: c.node_selector.clone(),
        config,
    })
}

fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("phalanx: cannot start the async runtime: {e}");
            None
        }
    }
}

/// Runs a read-only tool: its output to stdout, or its error (with causes) to stderr and exit code 1.
fn tool(f: impl Future<Output = anyhow::Result<String>>) -> ExitCode {
    let Some(rt) = runtime() else {
        return ExitCode::FAILURE;
    };
    match rt.block_on(f) {
        Ok(out) => write_out(out.as_bytes(), "the output"),
        Err(e) => {
            eprintln!("phalanx: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn write_out(bytes: &[u8], what: &str) -> ExitCode {
    // `phalanx crds | head` closes the pipe early: that is the reader's choice, not an error (print! would panic
    // on the broken pipe).
    match std::io::stdout().lock().write_all(bytes) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("phalanx: writing {what} failed: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    // Validate the configuration before touching the cluster, so a bad ConfigMap fails fast with the key named.
    let config = match &args.config {
        Some(path) => PhalanxConfig::load(path)?,
        None => PhalanxConfig::default(),
    };
    let fence = crate::write_fence::WriteFence::default();
    let in_flight = crate::fenced_client::in_flight_limit(
        args.bind_concurrency as usize,
        config.binder.status_concurrency as usize,
    );
    let (client, lease_client) = operator::fenced_clients(
        args.kubeconfig.as_ref(),
        args.context.as_deref(),
        &fence,
        in_flight,
        std::time::Duration::from_secs(args.api_read_timeout_secs),
    )
    .await?;
    let shutdown = operator::shutdown_on_signals();
    let opts = RunOptions {
        scheduler_name: args.scheduler_name,
        node_selector: args.node_selector,
        bind_concurrency: args.bind_concurrency,
        members_wait_warning: std::time::Duration::from_secs(args.members_wait_warning_secs),
        api_discovery_interval: std::time::Duration::from_secs(args.api_discovery_interval_secs),
        metrics_addr: args.metrics_addr,
        config,
        leader: LeaderConfig {
            enabled: args.leader.enabled,
            lease_name: args.leader.lease_name,
            namespace: args.leader.lease_namespace,
            identity: args.leader.identity,
            lease_duration_secs: args.leader.lease_duration_secs,
            grace_secs: args.leader.grace_secs,
        },
        instance: std::env::var("POD_NAME").ok().filter(|p| !p.is_empty()),
        on_lease_lost: OnLeaseLost::ExitProcess,
        bound_addr: None,
        write_fence: Some(fence),
        lease_client: Some(lease_client),
    };
    tracing::info!(
        version = crate::VERSION,
        scheduler_name = %opts.scheduler_name,
        leader_election = opts.leader.enabled,
        "starting phalanx"
    );
    operator::run(client, opts, shutdown).await
}
