//! The text form of an [`Explanation`]: a headline, then one short section per fact that applies, in plain words.

use std::fmt::Write as _;

use super::{Explanation, Standing, facts};

/// Renders `e` as the lines `phalanx explain -o text` prints (ends with a newline).
pub fn text(e: &Explanation) -> String {
    let mut s = String::new();
    let _ = write!(s, "{} {}/{}", e.kind, e.namespace, e.name);
    if let Some(g) = &e.pod_group {
        let _ = write!(s, " (pod group {g:?})");
    }
    let _ = writeln!(s, ": {:?}", e.state);
    let _ = writeln!(s, "  {}", e.summary);
    if let Some(o) = &e.owner {
        let _ = writeln!(s, "  Owner: {o}");
    }
    if let Some(c) = &e.condition {
        let since = c
            .since
            .as_deref()
            .map(|t| format!(" since {t}"))
            .unwrap_or_default();
        let _ = writeln!(s, "  Condition: {}={} ({}){since}", c.type_, c.status, c.reason);
        // The message is shown once: here only when it says something else than the verdict below.
        if !c.message.is_empty() && e.reasons.as_deref() != Some(c.message.as_str()) {
            let _ = writeln!(s, "    {}", c.message);
        }
    }
    if let Some(v) = &e.invalid {
        let _ = writeln!(
            s,
            "  Invalid: {}={} ({}): {}",
            v.type_, v.status, v.reason, v.message
        );
    }
    if let Some(d) = &e.deletion {
        let waits = if d.waiting_for.is_empty() {
            "nothing left to wait for".to_string()
        } else {
            format!(
                "it waits for {}: {}",
                d.waiting_for.len(),
                d.waiting_for.join(", ")
            )
        };
        let _ = writeln!(
            s,
            "  Being deleted since {} (finalizers: {}); {waits}",
            d.since,
            if d.finalizers.is_empty() {
                "none".to_string()
            } else {
                d.finalizers.join(", ")
            }
        );
    }
    if let Some(l) = &e.life {
        super::life::render(&mut s, l);
    }
    if let Some(q) = &e.quorum {
        let _ = writeln!(
            s,
            "  Quorum: {} of {} pods present (minCount {}): {}",
            q.present,
            q.min_count,
            q.min_count,
            if q.members.is_empty() {
                "none".into()
            } else {
                q.members.join(", ")
            }
        );
    }
    if let Some(r) = &e.reasons
        && e.state != Standing::WaitingForQuorum
    {
        let _ = writeln!(s, "  Why: {r}");
    }
    if !e.shortfall.is_empty() {
        let _ = writeln!(s, "  Short:");
        for x in &e.shortfall {
            let q = |v| facts::quantity(&x.resource, v);
            let mut line = format!(
                "    {}: {} requested, {} free on the considered nodes",
                x.resource,
                q(x.needed),
                q(x.free)
            );
            if x.missing > 0 {
                let _ = write!(line, ": {} short", q(x.missing));
            }
            if x.largest_pod > x.largest_free {
                let _ = write!(
                    line,
                    "; one pod requests {}, the most free on one node is {}",
                    q(x.largest_pod),
                    q(x.largest_free)
                );
            }
            let _ = writeln!(s, "{line}");
        }
    }
    if let Some(v) = &e.volumes {
        let _ = writeln!(s, "  Volumes: {v}");
    }
    if let Some(v) = &e.devices {
        let _ = writeln!(s, "  Devices: {v}");
    }
    if !e.domains.is_empty() {
        let _ = writeln!(s, "  Topology domains (closest first):");
        for d in &e.domains {
            let more: Vec<String> = d.more_needed.iter().map(|(r, v)| facts::amount(r, *v)).collect();
            let rest = d.pods - d.fit;
            let tail = if rest == 0 {
                String::new()
            } else {
                format!(
                    "; {rest} more need{} {}",
                    if rest == 1 { "s" } else { "" },
                    more.join(", ")
                )
            };
            let _ = writeln!(
                s,
                "    {} {}: {} of {} pods fit{tail}",
                d.key, d.value, d.fit, d.pods
            );
            if let Some(v) = &d.volumes {
                let _ = writeln!(s, "      volumes: {v}");
            }
            if let Some(v) = &d.devices {
                let _ = writeln!(s, "      devices: {v}");
            }
        }
    }
    if !e.holders.is_empty() {
        let _ = writeln!(
            s,
            "  Holding the room (lowest priority first, at most {}):",
            super::gather::HOLDERS
        );
        for h in &e.holders {
            let g = h
                .group
                .as_deref()
                .map(|g| format!(", group {g}"))
                .unwrap_or_default();
            let uses: Vec<String> = h.requests.iter().map(|(r, v)| facts::amount(r, *v)).collect();
            let _ = writeln!(
                s,
                "    {} on {}: priority {}{g}; {}",
                h.pod,
                h.node,
                h.priority,
                uses.join(", ")
            );
        }
    }
    if let Some(p) = &e.preemption {
        if p.ongoing {
            let _ = writeln!(s, "  Preemption in flight, waiting for:");
            for v in &p.terminating {
                let _ = writeln!(s, "    {v}");
            }
        } else if let (Some(until), Some(left)) = (&p.delayed_until, p.delay_seconds_left) {
            let _ = writeln!(
                s,
                "  Preemption delayed (preemptionDelaySeconds): {}s left, until {until}, for a cluster autoscaler to add nodes; {}",
                left.max(0),
                // The deadline is said already: only what preemption would do.
                p.message
                    .split(", but preemption is delayed")
                    .next()
                    .unwrap_or_default()
            );
        } else if p.success {
            let _ = writeln!(s, "  Preemption would evict:");
            for v in &p.victims {
                let _ = writeln!(s, "    {v}");
            }
        } else {
            let _ = writeln!(s, "  Preemption would not help: {}", p.message);
        }
    }
    if !e.gang_breakers.is_empty() {
        let _ = writeln!(s, "  Members that break the gang:");
        for b in &e.gang_breakers {
            let _ = writeln!(s, "    {b}");
        }
    }
    if !e.placement.is_empty() {
        let _ = writeln!(s, "  Would be placed:");
        for p in &e.placement {
            let _ = writeln!(s, "    {} -> {}", p.pod, p.node);
        }
    }
    if !e.events.is_empty() {
        let _ = writeln!(s, "  Last events:");
        for ev in &e.events {
            let t = ev.time.as_deref().unwrap_or("-");
            let times = if ev.count > 1 {
                format!(" (x{})", ev.count)
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "    {t} {} {} {}{times}: {}",
                ev.object, ev.type_, ev.reason, ev.message
            );
        }
    }
    s
}
