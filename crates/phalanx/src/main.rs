//! `phalanx`: the operator binary. See the crate library (`phalanx::operator`) for what `run` does.

use std::process::ExitCode;

use clap::Parser;
use phalanx::RunOptions;
use phalanx::cli::{Cli, Command, RunArgs};
use phalanx::config::PhalanxConfig;
use phalanx::leader::{LeaderConfig, OnLeaseLost};
use phalanx::operator;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds => {
            // `phalanx crds | head` closes the pipe early: that is the reader's choice, not an error (print! would
            // panic on the broken pipe).
            use std::io::Write as _;
            match std::io::stdout()
                .lock()
                .write_all(phalanx_api::crds::to_yaml().as_bytes())
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("phalanx: writing the CRDs failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Version => {
            println!("phalanx {}", phalanx::VERSION);
            ExitCode::SUCCESS
        }
        Command::Run(args) => {
            phalanx::telemetry::init(args.log_format);
            let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("phalanx: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(run(*args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "phalanx run failed");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    // Validate the configuration before touching the cluster, so a bad ConfigMap fails fast with the key named.
    let config = match &args.config {
        Some(path) => PhalanxConfig::load(path)?,
        None => PhalanxConfig::default(),
    };
    let fence = phalanx::write_fence::WriteFence::default();
    let client = operator::fenced_client(args.kubeconfig.as_ref(), args.context.as_deref(), &fence).await?;
    let shutdown = operator::shutdown_on_signals();
    let opts = RunOptions {
        scheduler_name: args.scheduler_name,
        node_selector: args.node_selector,
        bind_concurrency: args.bind_concurrency,
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
    };
    tracing::info!(
        version = phalanx::VERSION,
        scheduler_name = %opts.scheduler_name,
        leader_election = opts.leader.enabled,
        "starting phalanx"
    );
    operator::run(client, opts, shutdown).await
}
