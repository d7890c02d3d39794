//! The suite's output: one line per run while it goes, one line per fault at the end, then every violation with
//! its evidence.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use crate::fault_kind::Fault;
use crate::injection::Outcome;
use crate::invariants::{Counts, Invariant, Violation, count};
use crate::processes::ExitRecord;
use crate::workload::FeedStats;

/// Everything a suite produced.
#[derive(Debug, Clone)]
pub struct SuiteReport {
    /// `smoke` or `full`.
    pub profile: &'static str,
    /// Seed of the load.
    pub seed: u64,
    /// Every run, in order.
    pub results: Vec<RunResult>,
    /// What the negative controls caught.
    pub controls: Vec<String>,
    /// Time until the first run could start (cluster, nodes, CRDs, controls, replicas).
    pub setup: Duration,
    /// Wall time of the whole suite.
    pub duration: Duration,
    /// Audit log lines that did not parse.
    pub audit_bad_lines: usize,
    /// Where the logs are.
    pub work_dir: PathBuf,
}

/// The result of one run (the suite fills it in; it lives here, with the report made of it, so the report does
/// not import the suite that calls it).
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The fault.
    pub fault: Fault,
    /// 1-based run number of this fault.
    pub index: usize,
    /// The run's namespace.
    pub namespace: String,
    /// What the feeder did.
    pub feed: FeedStats,
    /// Pods of the run that were bound.
    pub bound: usize,
    /// What the fault measured.
    pub outcome: Outcome,
    /// Fault over -> every gang whole or empty (`None`: not within the limit).
    pub recovery: Option<Duration>,
    /// Violations found in this run.
    pub violations: Vec<Violation>,
    /// Replica exits during the run.
    pub exits: Vec<ExitRecord>,
    /// Wall time of the run.
    pub duration: Duration,
    /// A harness failure (the fault could not be injected or undone, the cluster did not come back); the run's
    /// invariants were then checked only as far as it got.
    pub error: Option<String>,
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

fn counts_text(c: &Counts) -> String {
    Invariant::ALL
        .iter()
        .map(|i| format!("{}={}", i.code(), c[i.index()]))
        .collect::<Vec<_>>()
        .join(" ")
}

fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    // Nearest rank: the smallest value with at least p of the samples at or below it.
    let idx = ((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1);
    sorted.get(idx).copied()
}

fn dist(mut v: Vec<Duration>, expected: usize) -> String {
    v.sort();
    let missing = expected.saturating_sub(v.len());
    let miss = if missing > 0 {
        format!(" ({missing} not measured)")
    } else {
        String::new()
    };
    match (percentile(&v, 0.5), v.last()) {
        (Some(p50), Some(max)) => format!("p50 {} max {}{miss}", secs(p50), secs(*max)),
        _ => format!("-{miss}"),
    }
}

/// One line for a finished run (printed as the suite goes).
pub fn run_line(r: &RunResult) -> String {
    let c = count(&r.violations);
    let unexpected = r.exits.iter().filter(|e| !e.expected).count();
    format!(
        "run {:<14} #{:<2} ns={} gangs={} pods={} bound={} {} recovery={} failover={} exits={}({} unexpected) {} | {}",
        r.fault.name(),
        r.index,
        r.namespace,
        r.feed.gangs,
        r.feed.pods,
        r.bound,
        counts_text(&c),
        r.recovery.map_or("NOT WITHIN LIMIT".into(), secs),
        r.outcome.failover.map_or("-".into(), secs),
        r.exits.len(),
        unexpected,
        secs(r.duration),
        r.outcome.notes.join("; ")
    ) + &r
        .error
        .as_ref()
        .map_or(String::new(), |e| format!(" | HARNESS ERROR: {e}"))
}

impl SuiteReport {
    /// Every violation with its fault and run.
    pub fn violations(&self) -> Vec<(Fault, usize, &Violation)> {
        self.results
            .iter()
            .flat_map(|r| r.violations.iter().map(move |v| (r.fault, r.index, v)))
            .collect()
    }

    /// No violation in any run.
    pub fn ok(&self) -> bool {
        self.results.iter().all(|r| r.violations.is_empty())
    }

    /// Runs that ended with a harness error, with the error.
    pub fn harness_errors(&self) -> Vec<(Fault, usize, &str)> {
        self.results
            .iter()
            .filter_map(|r| Some((r.fault, r.index, r.error.as_deref()?)))
            .collect()
    }

    /// One line per fault: runs, pods bound, violations per invariant, recovery and failover times, replica exits,
    /// wall time.
    pub fn fault_lines(&self) -> Vec<String> {
        let mut by: BTreeMap<Fault, Vec<&RunResult>> = BTreeMap::new();
        for r in &self.results {
            by.entry(r.fault).or_default().push(r);
        }
        Fault::ALL
            .iter()
            .filter_map(|f| by.get(f).map(|rs| (f, rs)))
            .map(|(f, rs)| {
                let mut c = [0; Invariant::ALL.len()];
                for r in rs {
                    for (i, n) in count(&r.violations).iter().enumerate() {
                        c[i] += n;
                    }
                }
                let recoveries: Vec<Duration> = rs.iter().filter_map(|r| r.recovery).collect();
                let failovers: Vec<Duration> = rs.iter().filter_map(|r| r.outcome.failover).collect();
                let exits: usize = rs.iter().map(|r| r.exits.len()).sum();
                let unexpected: usize = rs.iter().map(|r| r.exits.iter().filter(|e| !e.expected).count()).sum();
                let failover_expected = if f.measures_failover() { rs.len() } else { 0 };
                let errors = rs.iter().filter(|r| r.error.is_some()).count();
                let errors = if errors > 0 { format!(" HARNESS ERRORS={errors}") } else { String::new() };
                format!(
                    "{:<14} runs={:<2} bound={:<5} {} recovery {} failover {} exits={} ({} by the replica itself) time={}{errors}",
                    f.name(),
                    rs.len(),
                    rs.iter().map(|r| r.bound).sum::<usize>(),
                    counts_text(&c),
                    dist(recoveries, rs.len()),
                    dist(failovers, failover_expected),
                    exits,
                    unexpected,
                    secs(rs.iter().map(|r| r.duration).sum())
                )
            })
            .collect()
    }

    /// The whole report as text: header, controls, one line per fault, then the violations grouped per run and
    /// invariant (at most `per_group` each; all of them with `usize::MAX`), then the replica exits the suite did
    /// not cause, grouped by reason.
    pub fn render(&self, per_group: usize) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "phalanx-chaos {} suite, seed {}: {} runs in {} (setup {}); logs in {}",
            self.profile,
            self.seed,
            self.results.len(),
            secs(self.duration),
            secs(self.setup),
            self.work_dir.display()
        );
        for c in &self.controls {
            let _ = writeln!(s, "control: {c}");
        }
        for l in self.fault_lines() {
            let _ = writeln!(s, "{l}");
        }
        let total = self.violations().len();
        if total == 0 {
            let _ = writeln!(s, "no violation of I1-I8");
        } else {
            let _ = writeln!(s, "{total} violation(s):");
        }
        for r in &self.results {
            for inv in Invariant::ALL {
                let vs: Vec<&Violation> = r.violations.iter().filter(|v| v.invariant == inv).collect();
                if vs.is_empty() {
                    continue;
                }
                let _ = writeln!(s, "  [{} #{}] {} x{}:", r.fault, r.index, inv.code(), vs.len());
                for v in vs.iter().take(per_group) {
                    let _ = writeln!(s, "    {} {}", v.at, v.detail);
                }
                if vs.len() > per_group {
                    let _ = writeln!(s, "    ... {} more (violations.txt)", vs.len() - per_group);
                }
            }
        }
        let mut reasons: BTreeMap<(Fault, usize, &str), (usize, &str)> = BTreeMap::new();
        for r in &self.results {
            for e in r.exits.iter().filter(|e| !e.expected) {
                let entry = reasons
                    .entry((r.fault, r.index, e.reason.as_str()))
                    .or_insert((0, e.status.as_str()));
                entry.0 += 1;
            }
        }
        for ((f, i, reason), (n, status)) in reasons {
            let _ = writeln!(
                s,
                "  [{f} #{i}] {n} replica exit(s) by the replica itself ({status}): {reason}"
            );
        }
        for (f, i, e) in self.harness_errors() {
            let _ = writeln!(s, "  [{f} #{i}] HARNESS ERROR (not a scheduler verdict): {e}");
        }
        if self.audit_bad_lines > 0 {
            let _ = writeln!(
                s,
                "warning: {} audit log lines did not parse",
                self.audit_bad_lines
            );
        }
        s
    }
}
