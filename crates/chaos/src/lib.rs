//! phalanx-chaos: the chaos suite of Phalanx's fault-tolerance work.
//!
//! Two real `phalanx run` replicas (leader election on a Lease, each with its own client certificate) schedule
//! gangs on a real control plane (`hack/cluster.sh`, audit log on) while faults are injected: SIGKILL and SIGSTOP
//! of the leader, SIGKILL of kube-apiserver and of etcd, watches expired by compaction, an admission policy that
//! denies every second bind, hostile objects, the leader killed while the victims of its preemption terminate. An
//! observer that shares no code with the scheduler checks eight invariants (I8 in the `member-kill` fault):
//!
//! - I1 no pod is ever bound to two nodes;
//! - I2 no node's requests ever exceed its allocatable;
//! - I3 once faults stop, every gang is whole (bound >= minCount) or has no pod bound, within 60 s;
//! - I4 every pending pod has a `PodScheduled` condition with a reason, after a settle time;
//! - I5 no `PodGroupInitiallyScheduled` condition goes from True to False;
//! - I6 no write from a replica after its Lease expired (audit log against the Lease's history);
//! - I7 no pod is evicted except for a waiting higher-priority preemptor, and no preemptor's victims are evicted
//!   twice (audit log against the pods' history);
//! - I8 a gang with `recoveryPolicy` `RestartGroup` is not left partly running past its grace period
//!   ([`member_kill`]).
//!
//! Modules: [`harness`] (control plane), [`processes`] (replicas), [`proxy`] (connection cuts), [`fault_kind`], [`faults`] and
//! [`preempt_kill`], [`member_kill`] (with what they share, [`injection`]), [`workload`] (the load), [`checker`] (I1-I5), [`audit`] and [`lease`] (I6), [`evictions`]
//! (I7), [`controls`] (planted violations
//! that prove each check can fail), [`evidence`], [`suite`] and [`report`]. How to run it: `docs/testing.md`; what it guarantees:
//! `docs/operations.md`.

#![warn(missing_docs)]

pub mod audit;
pub mod certs;
pub mod checker;
pub mod context;
pub mod controls;
pub mod evictions;
pub mod evidence;
pub mod fault_kind;
pub mod faults;
pub mod harness;
pub mod injection;
pub mod invariants;
pub mod lease;
pub mod member_kill;
pub mod preempt_kill;
pub mod processes;
pub mod proxy;
pub mod quantity;
pub mod report;
pub mod suite;
pub mod workload;

pub use context::Profile;
pub use fault_kind::Fault;
pub use report::SuiteReport;
pub use suite::{SuiteOptions, run};
