//! What the audit log says about the object of a violation: who bound the pods of a broken gang and when, who
//! wrote the status that regressed, who bound the pods of an overcommitted node. Appended to the violation's
//! detail, so a report line can be checked against the logs without a second tool.

use std::collections::BTreeMap;

use crate::audit::{AuditEvent, AuditLog};
use crate::invariants::{Invariant, Violation};

fn time(e: &AuditEvent) -> String {
    e.received.strftime("%H:%M:%S%.3f").to_string()
}

/// (pod, user, node, HTTP code).
type AttemptKey<'a> = (&'a str, &'a str, &'a str, u16);

/// Per pod: the bind attempts, grouped by (user, node, HTTP code), with count, first and last time.
fn bind_history(events: &[AuditEvent]) -> String {
    let mut by: BTreeMap<AttemptKey<'_>, (usize, String, String)> = BTreeMap::new();
    for e in events {
        let key = (
            e.name.as_str(),
            e.user.as_str(),
            e.bind_target.as_deref().unwrap_or("?"),
            e.code,
        );
        let entry = by.entry(key).or_insert_with(|| (0, time(e), String::new()));
        entry.0 += 1;
        entry.2 = time(e);
    }
    if by.is_empty() {
        return "no bind attempt in the audit log".into();
    }
    by.iter()
        .map(|((pod, user, node, code), (n, first, last))| {
            if *n == 1 {
                format!("{pod}->{node} by {user} HTTP {code} at {first}")
            } else {
                format!("{pod}->{node} by {user} HTTP {code} x{n} {first}..{last}")
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Appends audit evidence to `v` (I1, I2, I3, I5; I4, I6, I7 and I8 carry theirs already).
pub fn enrich(audit: &AuditLog, v: &mut Violation) {
    let Some((ns, name)) = v.object.clone() else {
        return;
    };
    let extra = match v.invariant {
        Invariant::GangsWholeOrEmpty => {
            let prefix = format!("{name}-");
            let binds = audit.select(|e| {
                e.namespace == ns
                    && e.resource == "pods"
                    && e.subresource == "binding"
                    && e.name.starts_with(&prefix)
            });
            let deletes = audit.select(|e| {
                e.namespace == ns && e.resource == "pods" && e.verb == "delete" && e.name.starts_with(&prefix)
            });
            let deleted: Vec<String> = deletes
                .iter()
                .map(|e| format!("{} by {} HTTP {} at {}", e.name, e.user, e.code, time(e)))
                .collect();
            if deleted.is_empty() {
                format!("binds: {}", bind_history(&binds))
            } else {
                format!(
                    "binds: {} | deletions: {}",
                    bind_history(&binds),
                    deleted.join(", ")
                )
            }
        }
        Invariant::SingleBinding => {
            let binds = audit.select(|e| {
                e.namespace == ns && e.subresource == "binding" && e.name == name && e.resource == "pods"
            });
            format!("binds: {}", bind_history(&binds))
        }
        Invariant::NoOvercommit => {
            let at = v.at;
            let mut binds = audit.select(|e| {
                e.is_bind() && e.bind_target.as_deref() == Some(name.as_str()) && e.received <= at
            });
            let skip = binds.len().saturating_sub(12);
            binds.drain(..skip);
            let list: Vec<String> = binds
                .iter()
                .map(|e| format!("{}/{} by {} at {}", e.namespace, e.name, e.user, time(e)))
                .collect();
            format!("last accepted binds to {name}: {}", list.join(", "))
        }
        Invariant::InitiallyScheduledSticks => {
            let at = v.at;
            let mut writes = audit.select(|e| {
                e.namespace == ns
                    && e.resource == "podgroups"
                    && e.subresource == "status"
                    && e.name == name
                    && e.received <= at
            });
            let skip = writes.len().saturating_sub(3);
            writes.drain(..skip);
            let list: Vec<String> = writes
                .iter()
                .map(|e| format!("{} at {} (HTTP {})", e.user, time(e), e.code))
                .collect();
            format!("last status writes before it: {}", list.join(", "))
        }
        Invariant::PendingHasReason
        | Invariant::NoWriteWithoutLease
        | Invariant::SinglePreemption
        | Invariant::RestartedGangsNotPartial => return,
    };
    v.detail = format!("{} | {extra}", v.detail);
}
