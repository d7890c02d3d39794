//! Which PodGroups get a Cluster Autoscaler ProvisioningRequest, and whether theirs is provisioned: the one rule
//! the ProvisioningRequest controller (which makes the requests) and the scheduler (which holds the gang until
//! then) share. docs/operations.md "Autoscaling" describes the feature.

use crate::conditions::{CAPACITY_PROVISIONED, POD_GROUP_INITIALLY_SCHEDULED};
use crate::labels::PROVISIONING_REQUEST;
use crate::v1beta1::PodGroup;

/// Whether `pg` asks for a ProvisioningRequest: annotation `scheduling.phalanx.dev/provisioning-request` is
/// exactly `"true"`.
pub fn opted_in(pg: &PodGroup) -> bool {
    pg.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROVISIONING_REQUEST))
        .is_some_and(|v| v == "true")
}

/// Whether `pg` can have a ProvisioningRequest: a gang (`schedulingPolicy.gang`) not in a CompositePodGroup tree
/// (no `spec.parentCompositePodGroupName`). Groups of a tree and basic groups are not supported yet.
pub fn supported(pg: &PodGroup) -> bool {
    pg.spec.scheduling_policy.gang.is_some()
        && pg
            .spec
            .parent_composite_pod_group_name
            .as_deref()
            .is_none_or(str::is_empty)
}

/// Whether the scheduler holds `pg`'s pending members until its request is provisioned: it opted in, is
/// [`supported`], was never placed (`PodGroupInitiallyScheduled` is not True), and its `CapacityProvisioned`
/// condition is not True. A group whose condition says the CRD is missing is not held.
pub fn waits_for_capacity(pg: &PodGroup) -> bool {
    if !opted_in(pg) || !supported(pg) {
        return false;
    }
    let conditions = pg
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let status = |t: &str| conditions.iter().find(|c| c.type_ == t);
    if status(POD_GROUP_INITIALLY_SCHEDULED).is_some_and(|c| c.status == "True") {
        return false;
    }
    match status(CAPACITY_PROVISIONED) {
        Some(c) => c.status != "True" && c.reason != crate::conditions::capacity::CRD_MISSING,
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::capacity;
    use crate::v1beta1::{GangSchedulingPolicy, PodGroupSpec, PodGroupStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use std::collections::BTreeMap;

    fn gang(annotation: Option<&str>) -> PodGroup {
        let mut spec = PodGroupSpec::default();
        spec.scheduling_policy.gang = Some(GangSchedulingPolicy { min_count: 4 });
        let mut pg = PodGroup::new("g", spec);
        pg.metadata.annotations =
            annotation.map(|v| BTreeMap::from([(PROVISIONING_REQUEST.to_string(), v.to_string())]));
        pg
    }

    fn with(mut pg: PodGroup, type_: &str, status: &str, reason: &str) -> PodGroup {
        let st = pg.status.get_or_insert_with(PodGroupStatus::default);
        st.conditions.push(Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
            observed_generation: None,
        });
        pg
    }

    #[test]
    fn only_an_opted_in_standalone_gang_waits_until_provisioned() {
        assert!(!waits_for_capacity(&gang(None)));
        assert!(!waits_for_capacity(&gang(Some("yes"))), "only \"true\" opts in");
        assert!(waits_for_capacity(&gang(Some("true"))), "no condition yet: held");
        let pending = with(
            gang(Some("true")),
            CAPACITY_PROVISIONED,
            "False",
            capacity::PENDING,
        );
        assert!(waits_for_capacity(&pending));
        let done = with(
            gang(Some("true")),
            CAPACITY_PROVISIONED,
            "True",
            capacity::PROVISIONED,
        );
        assert!(!waits_for_capacity(&done));
        let missing = with(
            gang(Some("true")),
            CAPACITY_PROVISIONED,
            "False",
            capacity::CRD_MISSING,
        );
        assert!(!waits_for_capacity(&missing), "no CRD: not held forever");
        let placed = with(pending, POD_GROUP_INITIALLY_SCHEDULED, "True", "Scheduled");
        assert!(!waits_for_capacity(&placed), "a placed gang is never held again");
        let mut child = gang(Some("true"));
        child.spec.parent_composite_pod_group_name = Some("root".into());
        assert!(!supported(&child) && !waits_for_capacity(&child));
        let mut basic = gang(Some("true"));
        basic.spec.scheduling_policy.gang = None;
        assert!(!waits_for_capacity(&basic));
    }
}
