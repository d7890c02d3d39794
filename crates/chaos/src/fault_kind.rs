//! The fault kinds: their names on the command line and in reports, and what each implies for a run. Below the
//! profile ([`crate::context`]) that lists them and the faults ([`crate::faults`]) that inject them, so that both
//! can name a fault without importing each other.

use std::fmt;

use anyhow::Context as _;

/// A fault kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// SIGKILL of the leader mid-gang.
    LeaderKill,
    /// SIGTERM of the leader mid-gang (graceful handover).
    LeaderTerm,
    /// SIGSTOP of the leader past its Lease, then SIGCONT.
    LeaderPause,
    /// SIGKILL and restart of kube-apiserver.
    ApiServerKill,
    /// SIGKILL and restart of etcd.
    EtcdKill,
    /// Watches resumed from a compacted resourceVersion (410 Gone).
    WatchExpiry,
    /// Every second bind denied by admission.
    AdmissionDeny,
    /// Hostile objects.
    Hostile,
    /// SIGKILL of the leader while the victims of its preemption terminate.
    PreemptKill,
    /// Members of a `RestartGroup` gang fail while their replacements cannot bind (the leader killed in the last
    /// round).
    MemberKill,
}

impl Fault {
    /// Every fault, in suite order.
    pub const ALL: [Fault; 10] = [
        Fault::LeaderKill,
        Fault::LeaderTerm,
        Fault::LeaderPause,
        Fault::ApiServerKill,
        Fault::EtcdKill,
        Fault::WatchExpiry,
        Fault::AdmissionDeny,
        Fault::Hostile,
        Fault::PreemptKill,
        Fault::MemberKill,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Fault::LeaderKill => "leader-kill",
            Fault::LeaderTerm => "leader-term",
            Fault::LeaderPause => "leader-pause",
            Fault::ApiServerKill => "apiserver-kill",
            Fault::EtcdKill => "etcd-kill",
            Fault::WatchExpiry => "watch-expiry",
            Fault::AdmissionDeny => "admission-deny",
            Fault::Hostile => "hostile",
            Fault::PreemptKill => "preempt-kill",
            Fault::MemberKill => "member-kill",
        }
    }

    /// Whether the run's random load (gangs arriving and finishing) runs during this fault. `preempt-kill` runs
    /// on a quiet cluster: its verdict counts victims, and only its own pods may compete for the nodes.
    pub fn uses_load(self) -> bool {
        !matches!(self, Fault::PreemptKill | Fault::MemberKill)
    }

    /// Whether the fault measures a failover (the report expects one per run).
    pub fn measures_failover(self) -> bool {
        matches!(
            self,
            Fault::LeaderKill
                | Fault::LeaderTerm
                | Fault::LeaderPause
                | Fault::ApiServerKill
                | Fault::EtcdKill
                | Fault::PreemptKill
                | Fault::MemberKill
        )
    }

    /// Parses [`Fault::name`].
    ///
    /// # Errors
    /// Unknown name.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        Self::ALL.into_iter().find(|f| f.name() == s).with_context(|| {
            format!(
                "unknown fault {s:?}; known: {}",
                Self::ALL.map(Fault::name).join(", ")
            )
        })
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
