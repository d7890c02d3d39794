//! The eight invariants the suite checks, and what a violation of one records.

use std::fmt;

use k8s_openapi::jiff::Timestamp;

/// One of the invariants of the fault-tolerance issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// I1: no pod is ever bound to two nodes.
    SingleBinding,
    /// I2: no node's requests ever exceed its allocatable.
    NoOvercommit,
    /// I3: once faults stop, every gang is whole or has no pod bound, within 60 s.
    GangsWholeOrEmpty,
    /// I4: every pending pod of ours carries a `PodScheduled` condition with a reason, after a settle time.
    PendingHasReason,
    /// I5: no `PodGroupInitiallyScheduled` condition goes from True to False.
    InitiallyScheduledSticks,
    /// I6: no write from a replica after its Lease expired.
    NoWriteWithoutLease,
    /// I7: no pod is evicted except for a waiting higher-priority preemptor, and no preemptor's victims are
    /// evicted twice ([`crate::evictions`]).
    SinglePreemption,
    /// I8: a gang with `recoveryPolicy` `RestartGroup` is not left partly running past its grace period (plus
    /// slack and a Lease takeover; checked by the `member-kill` fault, [`crate::member_kill`]).
    RestartedGangsNotPartial,
}

impl Invariant {
    /// All eight, in report order.
    pub const ALL: [Invariant; 8] = [
        Invariant::SingleBinding,
        Invariant::NoOvercommit,
        Invariant::GangsWholeOrEmpty,
        Invariant::PendingHasReason,
        Invariant::InitiallyScheduledSticks,
        Invariant::NoWriteWithoutLease,
        Invariant::SinglePreemption,
        Invariant::RestartedGangsNotPartial,
    ];

    /// `I1` .. `I8`.
    pub fn code(self) -> &'static str {
        match self {
            Invariant::SingleBinding => "I1",
            Invariant::NoOvercommit => "I2",
            Invariant::GangsWholeOrEmpty => "I3",
            Invariant::PendingHasReason => "I4",
            Invariant::InitiallyScheduledSticks => "I5",
            Invariant::NoWriteWithoutLease => "I6",
            Invariant::SinglePreemption => "I7",
            Invariant::RestartedGangsNotPartial => "I8",
        }
    }

    /// Index into count arrays (0..8).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A violation, with the evidence a reader needs to find it in the logs.
#[derive(Debug, Clone)]
pub struct Violation {
    /// Which invariant.
    pub invariant: Invariant,
    /// When it was observed (or, for I6 and I7, when the offending request reached the API server).
    pub at: Timestamp,
    /// The object it is about, `(namespace, name)` (a node has an empty namespace), when there is one: the
    /// suite adds what the audit log says about it.
    pub object: Option<(String, String)>,
    /// Objects, nodes, times and amounts involved.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}: {}", self.invariant.code(), self.at, self.detail)
    }
}

/// Violations per invariant, in [`Invariant::ALL`] order.
pub type Counts = [usize; Invariant::ALL.len()];

/// Counts `violations` per invariant.
pub fn count(violations: &[Violation]) -> Counts {
    let mut c = [0; Invariant::ALL.len()];
    for v in violations {
        c[v.invariant.index()] += 1;
    }
    c
}
