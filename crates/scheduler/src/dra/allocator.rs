//! Joint allocation of several claims on one node, with backtracking in a step budget.
//!
//! Upstream's allocator (`structured/internal/experimental/allocator_experimental.go`) allocates the claims of
//! one pod together and backtracks within them. A gang puts several pods on a node in one cycle, and allocating
//! each pod's claims on its own is greedy across pods: a first member that takes the one device a later member's
//! selector accepts strands that member although a swap would fit both (k/k#138765). So the caller passes every
//! claim it needs on the node (the ones already chosen in this cycle and the new pod's), and this search treats
//! them as one problem.
//!
//! The search fills slots in order: one slot per device of an `ExactCount` request (and per device of an `All`
//! request, fixed). Before it starts:
//! - if the slots that take a device for themselves outnumber the devices any of them may take, no assignment
//!   exists (a count over the union of their candidates), and the answer is [`AllocationOutcome::Unsatisfiable`]
//!   without a search;
//! - the slots are ordered most constrained first (fewest candidates; ties keep the order of claims and requests
//!   given), the classic heuristic that fills a request only one device satisfies before the requests that
//!   could take any, so that the trap of k/k#138765 costs one step per slot instead of a search through the
//!   earlier claims' choices.
//!
//! For each slot it tries the candidates of the request in the order of `devices`, skipping devices taken by an
//! earlier slot or held by other claims (`in_use`), and devices that break a `matchAttribute` constraint already
//! fixed by an earlier slot. Slots of one request take candidates in increasing order, so no set of devices is
//! tried twice in another order. Each candidate tried is one step; the search stops with
//! [`AllocationOutcome::BudgetExhausted`] after `budget` steps. `benches/dra_budget.rs` measures what a step costs.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use super::{AllocationMode, AttributeValue, ClaimRequests, Device, DeviceId};

/// Candidates one joint allocation may try before the node counts as not fitting (the budget Filter passes to
/// [`allocate_until`]). Measured by `benches/dra_budget.rs` on a 2-core machine: 8 claims on 8 devices take about
/// 3-6 µs whether first fit works or the greedy trap of k/k#138765 has to be undone, and a search that exhausts
/// this budget about 0.35 ms (35 ns a step): the most one Filter call of a pod with claims can cost a node.
pub const ALLOCATION_BUDGET: u64 = 10_000;

/// The devices one claim got, per request, in request order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimAllocation {
    /// `(request name, device, admin access)` for each device allocated.
    pub devices: Vec<(Arc<str>, DeviceId, bool)>,
}

/// The request that could not be satisfied and how far it got, for messages ("request gpu of claim ns/c: 1 of
/// 2 devices of class gpu.example.com fit").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    /// Index of the claim in the input.
    pub claim: usize,
    /// The request's name.
    pub request: Arc<str>,
    /// Its class.
    pub class: Arc<str>,
    /// Devices it wants (for `All`, the matching devices reachable; at least 1).
    pub wanted: u32,
    /// Matching devices that are free of other claims (ignoring this allocation's other requests and the
    /// constraints): the number an operator can act on.
    pub free: u32,
    /// A selector failed to evaluate (the message names the expression), if that is why.
    pub error: Option<String>,
}

/// How a joint allocation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocationOutcome {
    /// Every claim got its devices, in input order.
    Allocated(Vec<ClaimAllocation>),
    /// No choice of devices satisfies every claim; the shortfall names the first request the search could not
    /// fill on its deepest attempt.
    Unsatisfiable(Shortfall),
    /// The search tried `steps` candidates without an answer (the node counts as not fitting).
    BudgetExhausted {
        /// Steps taken.
        steps: u64,
    },
    /// The deadline passed (while evaluating selectors or searching) before an answer.
    TimedOut,
}

/// How many search steps go between two reads of the clock.
const CLOCK_EVERY: u64 = 256;

/// One slot: a device to choose for request `request` of claim `claim`; `fixed` for an `All` request, whose
/// devices are given.
struct Slot {
    claim: usize,
    request: usize,
    /// Indexes into the device list of the candidates, in order.
    candidates: Arc<[usize]>,
    /// For an `ExactCount` request: the position of this slot among the request's slots (0 for the first).
    rank: usize,
    fixed: Option<usize>,
    admin: bool,
}

struct Search<'a> {
    devices: &'a [&'a Device],
    claims: &'a [&'a ClaimRequests],
    slots: Vec<Slot>,
    /// Device index chosen per slot.
    chosen: Vec<usize>,
    /// Candidate position chosen per slot (for the increasing order within a request).
    position: Vec<usize>,
    taken: HashSet<usize>,
    steps: u64,
    budget: u64,
    deadline: Option<Instant>,
    timed_out: bool,
    deepest: usize,
}

/// Allocates `claims` together from `devices` (the devices reachable from the node, in a stable order), where
/// `in_use(id)` says whether another claim holds the device. At most `budget` candidates are tried.
///
/// A claim without requests gets an empty allocation. An `All` request takes every matching device; it fails when
/// none matches, or when one is in use and the request has no admin access.
pub fn allocate(
    claims: &[&ClaimRequests],
    devices: &[&Device],
    in_use: impl Fn(&DeviceId) -> bool,
    budget: u64,
) -> AllocationOutcome {
    allocate_until(claims, devices, in_use, budget, None)
}

/// [`allocate`], giving up with [`AllocationOutcome::TimedOut`] once `deadline` has passed: the clock is read
/// before each selector evaluation (one may take up to CELSelectorExpressionMaxCost) and every
/// [`CLOCK_EVERY`] search steps.
pub fn allocate_until(
    claims: &[&ClaimRequests],
    devices: &[&Device],
    in_use: impl Fn(&DeviceId) -> bool,
    budget: u64,
    deadline: Option<Instant>,
) -> AllocationOutcome {
    let late = || deadline.is_some_and(|d| Instant::now() >= d);
    let mut slots = Vec::new();
    for (ci, claim) in claims.iter().enumerate() {
        for (ri, req) in claim.requests.iter().enumerate() {
            let mut matching = Vec::new();
            for (di, d) in devices.iter().enumerate() {
                let mut ok = true;
                for s in &req.selectors {
                    if late() {
                        return AllocationOutcome::TimedOut;
                    }
                    match s.matches(d) {
                        Ok(true) => {}
                        Ok(false) => {
                            ok = false;
                            break;
                        }
                        Err(e) => {
                            return AllocationOutcome::Unsatisfiable(Shortfall {
                                claim: ci,
                                request: req.name.clone(),
                                class: req.class.clone(),
                                wanted: wanted(req.mode, 0),
                                free: 0,
                                error: Some(format!("selector {:?} on device {}: {e}", s.source, d.id)),
                            });
                        }
                    }
                }
                if ok {
                    matching.push(di);
                }
            }
            let free: Vec<usize> = matching
                .iter()
                .copied()
                .filter(|&di| req.admin_access || !in_use(&devices[di].id))
                .collect();
            let shortfall = |wanted: u32| Shortfall {
                claim: ci,
                request: req.name.clone(),
                class: req.class.clone(),
                wanted,
                free: u32::try_from(free.len()).unwrap_or(u32::MAX),
                error: None,
            };
            match req.mode {
                AllocationMode::All => {
                    if matching.is_empty() || free.len() < matching.len() {
                        let n = u32::try_from(matching.len()).unwrap_or(u32::MAX).max(1);
                        return AllocationOutcome::Unsatisfiable(shortfall(n));
                    }
                    for &di in &matching {
                        slots.push(Slot {
                            claim: ci,
                            request: ri,
                            candidates: Arc::from([di]),
                            rank: 0,
                            fixed: Some(di),
                            admin: req.admin_access,
                        });
                    }
                }
                AllocationMode::ExactCount(n) => {
                    if (free.len() as u64) < u64::from(n) {
                        return AllocationOutcome::Unsatisfiable(shortfall(n));
                    }
                    let candidates: Arc<[usize]> = free.into();
                    for rank in 0..n as usize {
                        slots.push(Slot {
                            claim: ci,
                            request: ri,
                            candidates: candidates.clone(),
                            rank,
                            fixed: None,
                            admin: req.admin_access,
                        });
                    }
                }
            }
        }
    }
    if let Some(short) = too_few_devices(claims, &slots) {
        return AllocationOutcome::Unsatisfiable(short);
    }
    // Stable: the slots of one request keep their ranks in order, next to each other (they share a length).
    slots.sort_by_key(|s| s.candidates.len());
    let n = slots.len();
    let mut search = Search {
        devices,
        claims,
        slots,
        chosen: vec![usize::MAX; n],
        position: vec![0; n],
        taken: HashSet::new(),
        steps: 0,
        budget,
        deadline,
        timed_out: false,
        deepest: 0,
    };
    match search.fill(0) {
        Some(true) => AllocationOutcome::Allocated(search.result()),
        None if search.timed_out => AllocationOutcome::TimedOut,
        None => AllocationOutcome::BudgetExhausted { steps: search.steps },
        Some(false) => {
            let slot = &search.slots[search.deepest.min(n.saturating_sub(1))];
            let claim = claims[slot.claim];
            let req = &claim.requests[slot.request];
            let free = u32::try_from(slot.candidates.len()).unwrap_or(u32::MAX);
            AllocationOutcome::Unsatisfiable(Shortfall {
                claim: slot.claim,
                request: req.name.clone(),
                class: req.class.clone(),
                wanted: wanted(req.mode, free),
                free,
                error: None,
            })
        }
    }
}

/// The count check before the search: the slots without admin access each need a device of their own, so when
/// they are more than the devices any of them may take, none of the assignments exists. Names the last such
/// slot's request (the new pod's, when the caller passes the claims already placed first): it wants its own count,
/// and what is free for it is what the other slots leave of those devices.
fn too_few_devices(claims: &[&ClaimRequests], slots: &[Slot]) -> Option<Shortfall> {
    let own: Vec<&Slot> = slots.iter().filter(|s| !s.admin).collect();
    let union: HashSet<usize> = own.iter().flat_map(|s| s.candidates.iter().copied()).collect();
    let last = own.last()?;
    (own.len() > union.len()).then(|| {
        let mine = own
            .iter()
            .filter(|s| (s.claim, s.request) == (last.claim, last.request))
            .count();
        let req = &claims[last.claim].requests[last.request];
        Shortfall {
            claim: last.claim,
            request: req.name.clone(),
            class: req.class.clone(),
            wanted: u32::try_from(mine).unwrap_or(u32::MAX),
            free: u32::try_from(union.len().saturating_sub(own.len() - mine)).unwrap_or(u32::MAX),
            error: None,
        }
    })
}

fn wanted(mode: AllocationMode, matching: u32) -> u32 {
    match mode {
        AllocationMode::ExactCount(n) => n,
        AllocationMode::All => matching.max(1),
    }
}

impl Search<'_> {
    /// Fills slots `i..`: `Some(true)` when all are filled, `Some(false)` when no choice works, `None` when the
    /// budget ran out or the deadline passed (`timed_out`).
    fn fill(&mut self, i: usize) -> Option<bool> {
        if i == self.slots.len() {
            return Some(true);
        }
        self.deepest = self.deepest.max(i);
        let start = match (self.slots[i].fixed, self.slots[i].rank) {
            (None, r) if r > 0 => self.position[i - 1] + 1,
            _ => 0,
        };
        let candidates = self.slots[i].candidates.clone();
        for (pos, &di) in candidates.iter().enumerate().skip(start) {
            self.steps += 1;
            if self.steps > self.budget {
                return None;
            }
            if self.steps.is_multiple_of(CLOCK_EVERY) && self.deadline.is_some_and(|d| Instant::now() >= d) {
                self.timed_out = true;
                return None;
            }
            let admin = self.slots[i].admin;
            // An admin-access pick leaves the device free for the others, and may share one with them.
            if !admin && self.taken.contains(&di) {
                continue;
            }
            if !self.constraints_hold(i, di) {
                continue;
            }
            self.chosen[i] = di;
            self.position[i] = pos;
            if !admin {
                self.taken.insert(di);
            }
            match self.fill(i + 1) {
                Some(false) => {}
                other => return other,
            }
            if !admin {
                self.taken.remove(&di);
            }
            self.chosen[i] = usize::MAX;
        }
        Some(false)
    }

    /// Whether device `di` in slot `i` agrees with every `matchAttribute` constraint of its claim that covers
    /// its request, given the earlier slots of the claim.
    fn constraints_hold(&self, i: usize, di: usize) -> bool {
        let slot = &self.slots[i];
        let claim = self.claims[slot.claim];
        let name = &claim.requests[slot.request].name;
        for c in claim.constraints.iter().filter(|c| c.covers(name)) {
            let Some(value) = self.devices[di].attributes.get(&c.attribute) else {
                return false;
            };
            let earlier = (0..i).filter(|&j| {
                let s = &self.slots[j];
                s.claim == slot.claim && c.covers(&claim.requests[s.request].name)
            });
            for j in earlier {
                let other: Option<&AttributeValue> =
                    self.devices[self.chosen[j]].attributes.get(&c.attribute);
                if other != Some(value) {
                    return false;
                }
            }
        }
        true
    }

    fn result(&self) -> Vec<ClaimAllocation> {
        let mut out: Vec<ClaimAllocation> = self
            .claims
            .iter()
            .map(|_| ClaimAllocation { devices: Vec::new() })
            .collect();
        // In request order within each claim, whatever order the search filled the slots in.
        let mut filled: Vec<(&Slot, usize)> = self.slots.iter().zip(self.chosen.iter().copied()).collect();
        filled.sort_by_key(|(s, _)| (s.claim, s.request, s.rank));
        for (slot, di) in filled {
            let req = &self.claims[slot.claim].requests[slot.request];
            out[slot.claim]
                .devices
                .push((req.name.clone(), self.devices[di].id.clone(), slot.admin));
        }
        out
    }
}
