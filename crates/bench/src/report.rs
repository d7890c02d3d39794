//! The result lines (stable, grep-able `bench-e2e:` prefix; docs/benchmarks.md quotes them).

use std::collections::BTreeMap;

use crate::measure::{Figures, Summary, median};
use crate::workload::Case;

/// `bench-e2e: <case> nodes=<n> pods=<p> pods_per_sec=<x> wall_s=<y> first_bind_s=.. steady_pods_per_sec=..
/// groups_scheduled=<g>/<G> round=<r> load=<1m/5m/15m>` (groups omitted for bind-rate).
pub fn run_line(
    case: Case,
    nodes: usize,
    s: &Summary,
    groups_scheduled: usize,
    gangs: usize,
    round: usize,
    load: &str,
) -> String {
    let groups = if case.has_groups() {
        format!(" groups_scheduled={groups_scheduled}/{gangs}")
    } else {
        String::new()
    };
    format!(
        "bench-e2e: {case} nodes={nodes} pods={} pods_per_sec={:.1} wall_s={:.2} first_bind_s={:.2} \
         steady_pods_per_sec={:.1}{groups} round={round} load={}",
        s.pods,
        s.pods_per_sec,
        s.wall_s,
        s.first_bind_s,
        s.steady_pods_per_sec,
        load.replace(' ', "/")
    )
}

/// `bench-e2e: <case> nodes=<n> pods=<p> FAILED round=<r>: <why>`: a run that did not bind or gang-schedule
/// everything reports no rate.
pub fn failure_line(case: Case, nodes: usize, pods: usize, round: usize, why: &str) -> String {
    format!("bench-e2e: {case} nodes={nodes} pods={pods} FAILED round={round}: {why}")
}

/// `bench-e2e: ratio phalanx/upstream=<r> phalanx/bind-rate=<s> steady_phalanx/upstream=.. steady_phalanx/bind-rate=..`
/// from median pods/s (`medians`) and median steady pods/s (`steady`); `n/a` where a case has no successful run.
pub fn ratio_line(medians: &BTreeMap<Case, f64>, steady: &BTreeMap<Case, f64>) -> String {
    let ratio = |m: &BTreeMap<Case, f64>, den: Case| match (m.get(&Case::Phalanx), m.get(&den)) {
        (Some(p), Some(d)) if *d > 0.0 => format!("{:.2}", p / d),
        _ => "n/a".to_owned(),
    };
    format!(
        "bench-e2e: ratio phalanx/upstream={} phalanx/bind-rate={} steady_phalanx/upstream={} steady_phalanx/bind-rate={}",
        ratio(medians, Case::Upstream),
        ratio(medians, Case::BindRate),
        ratio(steady, Case::Upstream),
        ratio(steady, Case::BindRate)
    )
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.digits$}"))
}

/// The lines printed after a successful run, before its run line:
/// - `bench-e2e: <case> api_writes_per_pod=..` (all clients' writes) and `api_calls_per_pod=..` (every request of
///   the scheduler's identity);
/// - for a scheduler process: `bench-e2e: <case> process peak_rss_mb=.. cpu_s_per_1000_pods=.. ...`;
/// - for group cases: `bench-e2e: <case> gang_latency_p50_s=.. gang_latency_p99_s=.. ...`.
pub fn figure_lines(case: Case, f: &Figures, clock_ticks: u64) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(w) = f.api_writes_per_pod {
        out.push(format!(
            "bench-e2e: {case} api_writes_per_pod={w:.2} (mutating API requests of all clients from start to the \
             last group scheduled, per pod; minus bind-rate's figure and plus 1 = the scheduler's own)"
        ));
    }
    if let Some(c) = f.api_calls_per_pod {
        out.push(format!(
            "bench-e2e: {case} api_calls_per_pod={c:.2} (requests of every verb, GET/LIST/WATCH included, by user \
             system:kube-scheduler = APF FlowSchema kube-scheduler, from start to the last group scheduled, per pod)"
        ));
    }
    if let Some(end) = f.at_end {
        let first = f.at_first_bind;
        out.push(format!(
            "bench-e2e: {case} process peak_rss_mb={:.1} rss_at_first_bind_mb={} cpu_s={:.2} cpu_s_at_first_bind={} \
             cpu_s_per_1000_pods={} (/proc/<pid>/status VmHWM, /proc/<pid>/stat utime+stime / CLK_TCK={clock_ticks}, \
             read after the last group was scheduled)",
            end.peak_rss_mb(),
            opt(first.map(|p| p.rss_mb()), 1),
            end.cpu_s,
            opt(first.map(|p| p.cpu_s), 2),
            opt(f.cpu_s_per_1000_pods, 3),
        ));
    }
    if case.has_groups() {
        out.push(format!(
            "bench-e2e: {case} gang_latency_p50_s={} gang_latency_p99_s={} (scheduler start to a group's last \
             member bound; every group exists before the start) gang_latency_from_created_p50_s={} \
             gang_latency_from_created_p99_s={}",
            opt(f.gang_p50_s, 2),
            opt(f.gang_p99_s, 2),
            opt(f.gang_from_created_p50_s, 2),
            opt(f.gang_from_created_p99_s, 2),
        ));
    }
    out
}

/// `bench-e2e: ratio-resources phalanx/upstream peak_rss=.. cpu_s_per_1000_pods=.. api_calls_per_pod=..
/// api_writes_per_pod=.. gang_latency_p99=..`: medians over the successful runs of each case, `n/a` where a case
/// has none (or no figure). The targets at 5,000 nodes are in the line's tail.
pub fn resource_ratio_line(figures: &BTreeMap<Case, Vec<Figures>>) -> String {
    let med = |case: Case, get: fn(&Figures) -> Option<f64>| -> Option<f64> {
        let v: Vec<f64> = figures.get(&case)?.iter().filter_map(get).collect();
        median(&v)
    };
    let ratio = |get: fn(&Figures) -> Option<f64>| match (med(Case::Phalanx, get), med(Case::Upstream, get)) {
        (Some(p), Some(u)) if u > 0.0 => format!("{:.3}", p / u),
        _ => "n/a".to_owned(),
    };
    format!(
        "bench-e2e: ratio-resources phalanx/upstream peak_rss={} cpu_s_per_1000_pods={} api_calls_per_pod={} \
         api_writes_per_pod={} gang_latency_p99={} (targets at 5,000 nodes: peak_rss <= 0.333, cpu <= 0.2, \
         api_calls <= 1)",
        ratio(|f| f.at_end.map(|p| p.peak_rss_mb())),
        ratio(|f| f.cpu_s_per_1000_pods),
        ratio(|f| f.api_calls_per_pod),
        ratio(|f| f.api_writes_per_pod),
        ratio(|f| f.gang_p99_s),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_line_uses_medians_and_says_na_when_missing() {
        let m = BTreeMap::from([
            (Case::Phalanx, 300.0),
            (Case::Upstream, 150.0),
            (Case::BindRate, 600.0),
        ]);
        let st = BTreeMap::from([(Case::Phalanx, 300.0), (Case::Upstream, 200.0)]);
        assert_eq!(
            ratio_line(&m, &st),
            "bench-e2e: ratio phalanx/upstream=2.00 phalanx/bind-rate=0.50 \
             steady_phalanx/upstream=1.50 steady_phalanx/bind-rate=n/a"
        );
        let m = BTreeMap::from([(Case::Phalanx, 300.0)]);
        assert!(
            ratio_line(&m, &BTreeMap::new())
                .starts_with("bench-e2e: ratio phalanx/upstream=n/a phalanx/bind-rate=n/a ")
        );
    }

    fn figures(rss_mb: u64, cpu: f64, calls: f64) -> Figures {
        Figures {
            api_calls_per_pod: Some(calls),
            api_writes_per_pod: Some(calls / 2.0),
            at_end: Some(crate::procfs::ProcSample {
                peak_rss_bytes: rss_mb * 1024 * 1024,
                rss_bytes: rss_mb * 1024 * 1024,
                cpu_s: cpu,
            }),
            cpu_s_per_1000_pods: Some(cpu),
            gang_p99_s: Some(cpu),
            ..Figures::default()
        }
    }

    #[test]
    fn resource_ratios_are_phalanx_over_upstream_medians() {
        let f = BTreeMap::from([
            (Case::Phalanx, vec![figures(50, 1.0, 3.0)]),
            (
                Case::Upstream,
                vec![
                    figures(200, 10.0, 6.0),
                    figures(100, 2.0, 2.0),
                    figures(150, 4.0, 4.0),
                ],
            ),
            (Case::BindRate, vec![Figures::default()]),
        ]);
        let l = resource_ratio_line(&f);
        assert!(
            l.starts_with(
                "bench-e2e: ratio-resources phalanx/upstream peak_rss=0.333 cpu_s_per_1000_pods=0.250 \
                 api_calls_per_pod=0.750 api_writes_per_pod=0.750 gang_latency_p99=0.250 "
            ),
            "{l}"
        );
        let only = BTreeMap::from([(Case::Phalanx, vec![figures(50, 1.0, 3.0)])]);
        assert!(resource_ratio_line(&only).contains("peak_rss=n/a cpu_s_per_1000_pods=n/a"));
    }

    #[test]
    fn figure_lines_name_every_figure() {
        let mut f = figures(64, 2.5, 3.0);
        f.gang_p50_s = Some(1.0);
        let lines = figure_lines(Case::Phalanx, &f, 100).join("\n");
        for key in [
            "bench-e2e: phalanx api_writes_per_pod=1.50 ",
            "bench-e2e: phalanx api_calls_per_pod=3.00 ",
            "bench-e2e: phalanx process peak_rss_mb=64.0 rss_at_first_bind_mb=n/a cpu_s=2.50 ",
            "cpu_s_per_1000_pods=2.500 ",
            "CLK_TCK=100",
            "bench-e2e: phalanx gang_latency_p50_s=1.00 gang_latency_p99_s=2.50 ",
            "gang_latency_from_created_p99_s=n/a",
        ] {
            assert!(lines.contains(key), "{key} missing in\n{lines}");
        }
        let br = figure_lines(Case::BindRate, &Figures::default(), 100);
        assert!(br.is_empty(), "{br:?}");
    }

    #[test]
    fn run_line_has_the_documented_prefix() {
        let s = Summary {
            pods: 800,
            wall_s: 4.0,
            pods_per_sec: 200.0,
            first_bind_s: 1.0,
            steady_pods_per_sec: 266.3,
        };
        let l = run_line(Case::Upstream, 500, &s, 100, 100, 0, "1.0 2.0 3.0");
        assert!(
            l.starts_with("bench-e2e: upstream nodes=500 pods=800 pods_per_sec=200.0 wall_s=4.00 "),
            "{l}"
        );
        assert!(
            l.contains("groups_scheduled=100/100") && l.ends_with("load=1.0/2.0/3.0"),
            "{l}"
        );
        assert!(!run_line(Case::BindRate, 1, &s, 0, 0, 0, "x").contains("groups_scheduled"));
    }
}
