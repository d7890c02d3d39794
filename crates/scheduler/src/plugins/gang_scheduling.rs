//! GangScheduling's PlacementFeasible (upstream `plugins/gangscheduling`): the
//! Unschedulable/Wait/Success arithmetic on (scheduled, remaining) against minCount
//! (1 for basic groups). Its PreEnqueue quorum gate lives in [`crate::queue`].

use crate::framework::{Code, PlacementFeasiblePlugin, PlacementProgress, Status};
use crate::model::GroupInfo;

/// Plugin name.
pub const NAME: &str = "GangScheduling";

/// The PlacementFeasible plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct GangScheduling;

impl PlacementFeasiblePlugin for GangScheduling {
    fn name(&self) -> &'static str {
        NAME
    }

    fn feasible(&self, group: &GroupInfo, p: PlacementProgress) -> Status {
        let min = group.policy.min_count() as usize;
        if p.remaining + p.scheduled < min {
            Status::new(
                Code::Unschedulable,
                format!(
                    "minCount ({min}) cannot be satisfied: {} scheduled, {} remaining",
                    p.scheduled, p.remaining
                ),
            )
        } else if p.scheduled < min {
            Status::new(
                Code::Wait,
                format!(
                    "minCount ({min}) is not yet satisfied: {} scheduled, {} remaining",
                    p.scheduled, p.remaining
                ),
            )
        } else {
            Status::success()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GroupPolicy;

    #[test]
    fn arithmetic_and_messages() {
        let g = GroupInfo::new("ns", "pg", GroupPolicy::Gang { min_count: 3 });
        let f =
            |scheduled, remaining| GangScheduling.feasible(&g, PlacementProgress { scheduled, remaining });
        let s = f(0, 2);
        assert_eq!(s.code, Code::Unschedulable);
        assert_eq!(
            s.message,
            "minCount (3) cannot be satisfied: 0 scheduled, 2 remaining"
        );
        let s = f(1, 2);
        assert_eq!(s.code, Code::Wait);
        assert_eq!(
            s.message,
            "minCount (3) is not yet satisfied: 1 scheduled, 2 remaining"
        );
        assert!(f(3, 0).is_success());
        let basic = GroupInfo::new("ns", "b", GroupPolicy::Basic);
        assert_eq!(
            GangScheduling
                .feasible(
                    &basic,
                    PlacementProgress {
                        scheduled: 0,
                        remaining: 1
                    }
                )
                .code,
            Code::Wait
        );
        assert!(
            GangScheduling
                .feasible(
                    &basic,
                    PlacementProgress {
                        scheduled: 1,
                        remaining: 0
                    }
                )
                .is_success()
        );
    }
}
