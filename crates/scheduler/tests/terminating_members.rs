//! A gang member with a `deletionTimestamp` holds no place in its gang's quorum (issue 35, defect 11): after a
//! `RestartGroup`, or while a finalizer holds its deleted members Terminating, a lone replacement must not be bound
//! because the terminating members still count as bound.

mod common;

use std::sync::Arc;

use common::{Sim, node};
use phalanx_scheduler::GroupKey;

/// Marks the bound pod `name` as being deleted, in the snapshot and the queue, as a watch update would.
fn start_deleting(sim: &mut Sim, name: &str) {
    let mut p = (*sim.pods[name]).clone();
    assert!(p.node_name.is_some(), "{name} is bound");
    p.deleting = true;
    let p = Arc::new(p);
    sim.snap.add_pod(p.clone());
    sim.queue.update_pod(p.clone(), sim.now);
    sim.pods.insert(name.into(), p);
}

#[test]
fn a_lone_replacement_waits_while_its_mates_terminate() {
    let mut sim = Sim::new(vec![node("n0", 8, &[]), node("n1", 8, &[])]);
    sim.add_group(Sim::gang("g", 4));
    for i in 0..4 {
        sim.add_group_pod(&format!("p{i}"), 1000, "g");
    }
    sim.run();
    assert!(sim.bound(&["p0", "p1", "p2", "p3"]), "the gang binds first");
    let key = GroupKey::pod_group(common::NS, "g");
    assert_eq!(sim.snap.scheduled_count(&key), 4);

    // The restart deletes the four; a finalizer holds three Terminating, the fourth is gone and replaced.
    for n in ["p0", "p1", "p2"] {
        start_deleting(&mut sim, n);
    }
    sim.delete_pod("p3");
    assert_eq!(
        sim.snap.scheduled_count(&key),
        0,
        "terminating members are not scheduled members"
    );
    sim.add_group_pod("r3", 1000, "g");
    sim.run();
    let gate = sim.gate("g").map(|g| g.message);
    assert_eq!(
        gate.as_deref(),
        Some("1 of 4 pods present (minCount 4)"),
        "the gang waits for its quorum"
    );
    assert!(
        sim.unbound(&["r3"]),
        "the replacement was bound alone on {:?} while 3 mates were terminating",
        sim.node_of("r3")
    );

    // Once the other three replacements exist, the gang binds whole.
    for i in 0..3 {
        sim.delete_pod(&format!("p{i}"));
        sim.add_group_pod(&format!("r{i}"), 1000, "g");
    }
    sim.run();
    assert!(
        sim.bound(&["r0", "r1", "r2", "r3"]),
        "the recreated gang binds: {:?}",
        sim.failures
    );
}
