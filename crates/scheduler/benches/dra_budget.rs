//! What the DRA allocator's step budget costs (`dra::allocator::ALLOCATION_BUDGET`, the bound on the
//! backtracking of k/k#138765). Three cases on one node of 8 devices, each timed over `BENCH_CALLS` calls
//! (default 2,000), best of `BENCH_REPEAT` runs (default 3):
//! - `dra-first-fit`: 8 claims of 1 device; the first choice of every claim works (the common case);
//! - `dra-greedy-trap`: 8 claims of 1 device where only the last one's selector narrows it to the device every
//!   earlier claim would take first; the search moves the earlier claims (upstream's first-fit fails here);
//! - `dra-budget-exhausted`: 9 claims of 1 device on 9 devices, 8 of them restricted to the same 7 devices: no
//!   assignment exists, yet every claim's own count and the count over all claims (which the allocator checks
//!   first) allow one, so the search runs until the budget stops it: the most one Filter call can cost.
//!
//! Prints `bench: <case> steps=<n> outcome=<allocated|exhausted|unsatisfiable> call_p50_us=<x> call_p99_us=<y>`.
//! Run: `cargo bench -p phalanx-scheduler --bench dra_budget`.

use std::time::Instant;

use phalanx_scheduler::dra::allocator::ALLOCATION_BUDGET;
use phalanx_scheduler::dra::{
    AllocationMode, AllocationOutcome, AttributeValue, ClaimRequests, Device, DeviceId, DeviceRequest,
    DeviceSelector, allocate,
};

const DRIVER: &str = "gpu.example.com";

fn device(i: usize) -> Device {
    Device::new(DeviceId::new(DRIVER, "node-a", &format!("gpu-{i}")))
        .with_attribute("index", AttributeValue::Int(i as i64))
}

/// A claim of one device; `index_in` restricts it to the devices whose index is in the range.
fn claim(i: usize, index_in: Option<std::ops::Range<i64>>) -> ClaimRequests {
    let selectors = index_in
        .map(|range| {
            vec![DeviceSelector::new("index in range", move |d| {
                Ok(matches!(d.attributes.get(&*format!("{DRIVER}/index")), Some(AttributeValue::Int(v)) if range.contains(v)))
            })]
        })
        .unwrap_or_default();
    ClaimRequests {
        name: format!("ns/c{i}").into(),
        requests: vec![DeviceRequest {
            name: "gpu".into(),
            class: DRIVER.into(),
            selectors,
            mode: AllocationMode::ExactCount(1),
            admin_access: false,
        }],
        constraints: Vec::new(),
    }
}

fn run(name: &str, claims: &[ClaimRequests], devices: &[Device]) {
    let calls: usize = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let repeat: usize = std::env::var("BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let claims: Vec<&ClaimRequests> = claims.iter().collect();
    let devices: Vec<&Device> = devices.iter().collect();
    let mut best: Option<(f64, f64)> = None;
    let mut last = String::new();
    for _ in 0..repeat.max(1) {
        let mut times = Vec::with_capacity(calls);
        for _ in 0..calls.max(1) {
            let t = Instant::now();
            let out = allocate(&claims, &devices, |_| false, ALLOCATION_BUDGET);
            times.push(t.elapsed().as_secs_f64() * 1e6);
            last = match out {
                AllocationOutcome::Allocated(_) => "allocated".into(),
                AllocationOutcome::BudgetExhausted { steps } => format!("exhausted steps={steps}"),
                AllocationOutcome::Unsatisfiable(_) => "unsatisfiable".into(),
                AllocationOutcome::TimedOut => "timed out".into(),
            };
        }
        times.sort_by(f64::total_cmp);
        let p50 = times[times.len() / 2];
        let p99 = times[(times.len() * 99 / 100).min(times.len() - 1)];
        if best.is_none_or(|(b, _)| p50 < b) {
            best = Some((p50, p99));
        }
    }
    let (p50, p99) = best.unwrap_or_default();
    println!("bench: {name} outcome={last} call_p50_us={p50:.1} call_p99_us={p99:.1}");
}

fn main() {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let eight: Vec<Device> = (0..8).map(device).collect();
    let nine: Vec<Device> = (0..9).map(device).collect();
    let first_fit: Vec<ClaimRequests> = (0..8).map(|i| claim(i, None)).collect();
    // Claims 0..6 take any device (first fit: gpu-0, gpu-1, ...); the last one accepts only gpu-0.
    let mut trap: Vec<ClaimRequests> = (0..7).map(|i| claim(i, None)).collect();
    trap.push(claim(7, Some(0..1)));
    let mut over: Vec<ClaimRequests> = (0..8).map(|i| claim(i, Some(0..7))).collect();
    over.push(claim(8, None));
    for (name, claims, devices) in [
        ("dra-first-fit", &first_fit, &eight),
        ("dra-greedy-trap", &trap, &eight),
        ("dra-budget-exhausted", &over, &nine),
    ] {
        if filter.as_deref().is_none_or(|f| name.contains(f)) {
            run(name, claims, devices);
        }
    }
}
