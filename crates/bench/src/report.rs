//! The result lines (stable, grep-able `bench-e2e:` prefix; docs/benchmarks.md quotes them).

use std::collections::BTreeMap;

use crate::measure::Summary;
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
