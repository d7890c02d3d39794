//! The plan a per-kind rule returns ([`Plan`]: units of [`PlannedGroup`]s), its errors, and the count helpers
//! the rules share.

use phalanx_api::owners::MemberSelector;
use serde_json::Value;

/// One PodGroup a rule asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedGroup {
    /// The group's part of the name, appended to the unit's name (`driver`, `workers`); a DNS label.
    pub part: String,
    /// Gang quorum, `1..=i32::MAX`; `None` for a group of independent pods (upstream's Basic policy), such as a
    /// leader that must run before its workers exist.
    pub min_count: Option<i32>,
    /// The pod labels that select its members (all must match), among the owner's pods.
    pub members: MemberSelector,
}

/// The groups of one scheduling unit of an owner: the whole owner (a JobSet) or one replica group (an LWS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unit {
    /// The unit's part of the name: empty for the whole owner, `"<index>"` for a replica group.
    pub part: String,
    /// True: the groups are the children of one CompositePodGroup, placed all or nothing together. False: each
    /// group is scheduled on its own (stages that start one after another must not wait for each other).
    pub composite: bool,
    /// The groups, in the owner's order; never empty.
    pub groups: Vec<PlannedGroup>,
}

/// What a rule decided for an owner: its units, and notes for a Warning event on the owner (a setting that cannot
/// work with a gang, named with the advice).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The units; empty when the owner runs no pods now (every replicated job scaled to 0).
    pub units: Vec<Unit>,
    /// `Some(label)`: the units are templates repeated per replica group. Each value of this pod label among the
    /// owner's pods (an LWS's `group-index`) is its own copy of the units, its parts suffixed `-<value>` and its
    /// members also matching the label; nothing ties the copies together. Per value found, not per `spec.replicas`,
    /// so a huge replica count costs nothing until its pods exist.
    pub replicated_by: Option<String>,
    /// Warnings, each naming the field or annotation.
    pub warnings: Vec<String>,
}

/// Why a rule cannot plan an owner; the message is the Warning event's note and names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KindError {
    /// A count is out of range or the product of counts overflows a minCount.
    #[error("{field} is {value}: want 0 to {max}", max = i32::MAX)]
    OutOfRange {
        /// The field path, e.g. `spec.replicatedJobs[1].replicas`.
        field: String,
        /// The value (or the product that overflowed).
        value: i128,
    },
    /// A required field is missing or not of its type.
    #[error("{field} is missing or not a {want}")]
    Missing {
        /// The field path.
        field: String,
        /// The JSON type wanted.
        want: &'static str,
    },
}

/// An integer field, absent = `default`; refused when negative or above `i32::MAX`.
pub(crate) fn count(
    v: &Value,
    pointer: &str,
    field: impl Fn() -> String,
    default: i64,
) -> Result<i64, KindError> {
    let Some(x) = v.pointer(pointer) else {
        return Ok(default);
    };
    let n = x.as_i64().ok_or_else(|| KindError::Missing {
        field: field(),
        want: "integer",
    })?;
    if !(0..=i64::from(i32::MAX)).contains(&n) {
        return Err(KindError::OutOfRange {
            field: field(),
            value: n.into(),
        });
    }
    Ok(n)
}

/// `a × b` as a minCount, refused (naming `field`) past `i32::MAX`.
pub(crate) fn product(a: i64, b: i64, field: impl Fn() -> String) -> Result<i64, KindError> {
    let p = i128::from(a) * i128::from(b);
    if p > i128::from(i32::MAX) {
        return Err(KindError::OutOfRange {
            field: field(),
            value: p,
        });
    }
    Ok(i64::try_from(p).unwrap_or(i64::MAX))
}

/// Per unit of a plan: whether it is a composite, and its groups' parts and minCounts (tests of the rules).
#[cfg(test)]
pub(crate) type Shape = Vec<(bool, Vec<(String, Option<i32>)>)>;

/// The [`Shape`] of `p`.
#[cfg(test)]
pub(crate) fn shape(p: &Plan) -> Shape {
    p.units
        .iter()
        .map(|u| {
            (
                u.composite,
                u.groups.iter().map(|g| (g.part.clone(), g.min_count)).collect(),
            )
        })
        .collect()
}
