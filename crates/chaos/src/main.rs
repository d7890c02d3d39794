//! `phalanx-chaos`: runs the chaos suite against a `phalanx` binary and prints one line per fault.
//!
//! Exit status: 0 without violations, 1 with at least one violation of I1-I8, 2 when the suite itself failed
//! (setup, or a run's harness error: a fault that could not be injected or undone).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use phalanx_chaos::{Fault, Profile, SuiteOptions};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Which {
    /// One run of each fault (minutes).
    Smoke,
    /// 20 leader kills, every other fault 3 times, the admission policy for a minute.
    Full,
}

/// Chaos suite of Phalanx: two real replicas under faults, checked against invariants I1-I8.
#[derive(Debug, Parser)]
#[command(name = "phalanx-chaos")]
struct Args {
    /// Which suite.
    #[arg(long, value_enum, default_value_t = Which::Full)]
    profile: Which,
    /// The `phalanx` binary under test.
    #[arg(long, default_value = "target/debug/phalanx")]
    phalanx_bin: PathBuf,
    /// Work directory (cluster state, logs, audit log, replica logs); default target/chaos/<timestamp>.
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep the cluster running at the end.
    #[arg(long)]
    keep: bool,
    /// Seed of the load (printed; reuse it to replay the same load).
    #[arg(long)]
    seed: Option<u64>,
    /// Only these faults (comma-separated names, e.g. leader-kill,etcd-kill).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Runs per fault (overrides the profile).
    #[arg(long)]
    runs: Option<usize>,
    /// Instead of running the suite: check I6 over a saved audit log (e.g. `<work dir>/cluster/logs/audit.log`),
    /// with the Lease history taken from the log alone, and print the violations.
    #[arg(long, value_name = "AUDIT_LOG")]
    recheck_audit: Option<PathBuf>,
}

/// `--recheck-audit`: I6 from an audit log alone (post-mortems, and checking a changed rule on old runs).
fn recheck(path: PathBuf) -> ExitCode {
    let leases = phalanx_chaos::lease::SharedLeases::default();
    let log = phalanx_chaos::audit::AuditLog::new(path, phalanx_chaos::suite::LEASE_NAME, leases.clone());
    if let Err(e) = log.poll() {
        eprintln!("phalanx-chaos: reading the audit log: {e:#}");
        return ExitCode::from(2);
    }
    let all = log.select(|_| true);
    let v = phalanx_chaos::audit::check_writes(
        &all,
        &leases,
        phalanx_chaos::suite::LEASE_NAME,
        phalanx_chaos::processes::Supervisor::is_replica,
    );
    println!("{} audited requests, {} I6 violation(s)", all.len(), v.len());
    for x in &v {
        println!("  {x}");
    }
    if v.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CHAOS_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    if let Some(path) = args.recheck_audit {
        return recheck(path);
    }
    let only: Result<Vec<Fault>, _> = args.only.iter().map(|s| Fault::parse(s)).collect();
    let only = match only {
        Ok(o) => o,
        Err(e) => {
            eprintln!("phalanx-chaos: {e:#}");
            return ExitCode::from(2);
        }
    };
    let profile = match args.profile {
        Which::Smoke => Profile::smoke(),
        Which::Full => Profile::full(),
    }
    .select(&only, args.runs);
    let stamp = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let opts = SuiteOptions {
        phalanx_bin: args.phalanx_bin,
        work_dir: args
            .work_dir
            .unwrap_or_else(|| PathBuf::from("target/chaos").join(stamp)),
        keep: args.keep,
        seed: args.seed.unwrap_or_else(rand::random),
    };
    let work_dir = std::path::absolute(&opts.work_dir).unwrap_or(opts.work_dir.clone());
    let opts = SuiteOptions { work_dir, ..opts };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("phalanx-chaos: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(phalanx_chaos::run(profile, opts)) {
        Ok(report) => {
            let text = report.render(5);
            print!("{text}");
            let _ = std::fs::write(report.work_dir.join("report.txt"), &text);
            let _ = std::fs::write(report.work_dir.join("violations.txt"), report.render(usize::MAX));
            if report.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("phalanx-chaos: the suite failed: {e:#}");
            ExitCode::from(2)
        }
    }
}
