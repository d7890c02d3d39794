//! Room freed for groups that failed short of it: Phalanx's early retry, beyond upstream's queue.
//!
//! Upstream requeues an unschedulable entity on a matching cluster event through its backoff
//! (`pkg/scheduler/backend/queue/scheduling_queue.go`, `requeuePodWithQueueingStrategy`), and a group's backoff cap
//! grows with the square root of its size: a gang of 32 that failed a few times while the cluster was busy can wait
//! about 57 s once the cluster drains. The backoff is there so that a group that cannot fit does not take a cycle per
//! event. A group that failed short of room (members rejected as `Unschedulable`, whose summed requests are the room
//! it lacked, `Requeue::short_of`) and since then saw deleted pods free at least that much has earned a retry: this
//! module keeps that account, and the queue clears the group's backoff when the account covers it. One early retry per failure at most, and only
//! after real capacity came back, so the guard the backoff gives stays.

use std::collections::HashMap;

use crate::model::EntityKey;
use crate::resources::Resources;

/// What one watched group asks for and what was freed since it failed.
#[derive(Debug)]
struct Account {
    /// The room the group lacked at its failure: the summed requests of its members rejected for room.
    demand: Resources,
    /// Summed requests of the assigned pods deleted (or finished) since.
    freed: Resources,
}

/// The groups waiting for room, by entity (one owner: the [`super::SchedulingQueue`]).
#[derive(Debug, Default)]
pub(super) struct RoomWatch {
    accounts: HashMap<EntityKey, Account>,
}

impl RoomWatch {
    /// Starts the account of a group that just failed short of `demand`; a zero demand (no member rejected for
    /// room, or members that request nothing) ends it instead, since any deletion would cover it.
    pub(super) fn watch(&mut self, key: EntityKey, demand: Resources) {
        if demand.is_zero() {
            self.accounts.remove(&key);
        } else {
            self.accounts.insert(
                key,
                Account {
                    demand,
                    freed: Resources::default(),
                },
            );
        }
    }

    /// Ends a group's account (it was popped again, or left the queue).
    pub(super) fn forget(&mut self, key: &EntityKey) {
        self.accounts.remove(key);
    }

    /// Adds the requests of a deleted assigned pod to every account and returns the groups whose account now covers
    /// their demand; their accounts end.
    pub(super) fn freed(&mut self, requests: &Resources) -> Vec<EntityKey> {
        if self.accounts.is_empty() || requests.is_zero() {
            return Vec::new();
        }
        let mut covered = Vec::new();
        for (key, a) in &mut self.accounts {
            a.freed.add(requests);
            if covers(&a.freed, &a.demand) {
                covered.push(key.clone());
            }
        }
        for key in &covered {
            self.accounts.remove(key);
        }
        covered
    }

    /// Number of groups watched.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.accounts.len()
    }
}

/// Whether `have` is at least `want` in every resource `want` asks for.
fn covers(have: &Resources, want: &Resources) -> bool {
    have.milli_cpu >= want.milli_cpu
        && have.memory >= want.memory
        && have.ephemeral_storage >= want.ephemeral_storage
        && want.scalar.iter().all(|(n, v)| have.scalar(n) >= *v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GroupKey;

    fn res(cpu: i64, gpu: i64) -> Resources {
        let mut r = Resources {
            milli_cpu: cpu,
            ..Resources::default()
        };
        r.set("nvidia.com/gpu", gpu);
        r
    }

    fn key(name: &str) -> EntityKey {
        EntityKey::Group(GroupKey::pod_group("ns", name))
    }

    #[test]
    fn a_group_is_covered_once_the_freed_requests_reach_its_demand_in_every_resource() {
        let mut w = RoomWatch::default();
        w.watch(key("big"), res(800, 64));
        w.watch(key("small"), res(100, 8));
        // 8 GPUs and plenty of cpu: only the small group is covered.
        assert_eq!(w.freed(&res(1000, 8)), vec![key("small")]);
        assert_eq!(w.len(), 1);
        // cpu alone does not cover a GPU demand.
        assert!(w.freed(&res(10_000, 0)).is_empty());
        for _ in 0..6 {
            assert!(w.freed(&res(0, 8)).is_empty());
        }
        assert_eq!(w.freed(&res(0, 8)), vec![key("big")]);
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn zero_demands_are_not_watched_and_a_new_failure_restarts_the_account() {
        let mut w = RoomWatch::default();
        w.watch(key("none"), Resources::default());
        assert_eq!(w.len(), 0);
        w.watch(key("g"), res(0, 16));
        assert!(w.freed(&res(0, 8)).is_empty());
        // A second failure counts from zero again.
        w.watch(key("g"), res(0, 16));
        assert!(w.freed(&res(0, 8)).is_empty());
        assert_eq!(w.freed(&res(0, 8)), vec![key("g")]);
        w.watch(key("g"), res(0, 16));
        w.forget(&key("g"));
        assert!(w.freed(&res(0, 16)).is_empty());
    }
}
