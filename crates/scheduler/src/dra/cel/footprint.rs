//! What of a device a selector reads, so that devices that agree on it share one evaluation.
//!
//! A GPU node publishes eight devices that differ in their name and perhaps a UUID, and a class selector
//! (`device.driver == "gpu.example.com"`) or a request's (`device.attributes["gpu.example.com"].model == "H100"`)
//! reads none of that: its answer is the same for every device with the same driver and model. Upstream evaluates
//! the expression per device and allocation attempt
//! (`staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable/allocator_stable.go`,
//! `selectorsMatch`); here [`Footprint::of`] walks the expression tree once, and [`Footprint::project`] gives
//! each device the values it reads, the key of a result cache shared by every device (see `super::evaluate`).
//!
//! The reads recognised are `device.driver`, and `device.attributes["<domain>"].<name>`,
//! `device.attributes["<domain>"]["<name>"]` and the same on `capacity` (each also under `has()`), with string
//! literals for domain and name. Any other use of `device` (a domain map passed whole, iterated by a macro or
//! indexed by a computed key, a comprehension variable named `device`) makes the footprint the whole device,
//! and that device's result is cached per device only, as before.

use std::sync::Arc;

use cel::common::ast::{Expr, IdedExpr, LiteralValue, operators};

use crate::dra::{AttributeValue, Device};

/// The variable a selector sees the device as.
const DEVICE: &str = "device";

/// Which map of the device a read goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Map {
    Attributes,
    Capacity,
}

/// One thing read of a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Read {
    Driver,
    /// An attribute or capacity, by domain and name.
    Entry(Map, String, String),
}

/// What of a device an expression reads: a list of reads, or the whole device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Footprint {
    /// These reads only, each once, in the order first met.
    Reads(Vec<Read>),
    /// Something not recognised: the result may depend on anything.
    Whole,
}

/// One value a device gives for a [`Read`]: `None` for an entry the device does not have.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Part {
    Driver(Arc<str>),
    Attribute(Option<AttributeValue>),
    Capacity(Option<i64>),
}

impl Footprint {
    /// The footprint of `expr`, a parsed selector.
    pub(crate) fn of(expr: &IdedExpr) -> Footprint {
        let mut reads = Vec::new();
        if visit(expr, &mut reads) {
            Footprint::Reads(reads)
        } else {
            Footprint::Whole
        }
    }

    /// The values `device` gives for the reads, in their order; `None` for [`Footprint::Whole`]. Two devices with
    /// equal projections get the same result from the expression. An unqualified attribute or capacity name is the
    /// driver's domain, as the evaluation environment resolves it (`super::device_value`), and of two names that
    /// resolve to the same entry the last in the device's order wins there and here.
    pub(crate) fn project(&self, device: &Device) -> Option<Vec<Part>> {
        let Footprint::Reads(reads) = self else {
            return None;
        };
        let driver = &*device.id.driver;
        let found = |name: &str, domain: &str, entry: &str| split(name, driver) == (domain, entry);
        Some(
            reads
                .iter()
                .map(|r| match r {
                    Read::Driver => Part::Driver(device.id.driver.clone()),
                    Read::Entry(Map::Attributes, domain, entry) => Part::Attribute(
                        device
                            .attributes
                            .iter()
                            .rev()
                            .find(|(n, _)| found(n, domain, entry))
                            .map(|(_, v)| v.clone()),
                    ),
                    Read::Entry(Map::Capacity, domain, entry) => Part::Capacity(
                        device
                            .capacity
                            .iter()
                            .rev()
                            .find(|(n, _)| found(n, domain, entry))
                            .map(|(_, v)| *v),
                    ),
                })
                .collect(),
        )
    }
}

/// The domain and name of a qualified attribute or capacity name; an unqualified one is in `driver`'s domain.
pub(crate) fn split<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    name.split_once('/').unwrap_or((driver, name))
}

/// Adds the reads of `e` to `reads`; false when `e` uses the device in a way not recognised.
fn visit(e: &IdedExpr, reads: &mut Vec<Read>) -> bool {
    if let Some(r) = read(e) {
        if !reads.contains(&r) {
            reads.push(r);
        }
        return true;
    }
    match &e.expr {
        Expr::Ident(name) => name != DEVICE,
        Expr::Literal(_) | Expr::Unspecified => true,
        Expr::Select(s) => visit(&s.operand, reads),
        Expr::Call(c) => c.target.iter().all(|t| visit(t, reads)) && c.args.iter().all(|a| visit(a, reads)),
        Expr::List(l) => l.elements.iter().all(|x| visit(x, reads)),
        Expr::Comprehension(c) => {
            // A loop variable named `device` hides the device: its reads are not the device's.
            let hides =
                c.iter_var == DEVICE || c.iter_var2.as_deref() == Some(DEVICE) || c.accu_var == DEVICE;
            !hides
                && [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result]
                    .into_iter()
                    .all(|x| visit(x, reads))
        }
        // Map and message literals: not in a selector worth sharing; the whole device keeps them correct.
        Expr::Map(_) | Expr::Struct(_) => false,
    }
}

/// The read `e` is, when it is one of the recognised forms.
fn read(e: &IdedExpr) -> Option<Read> {
    match &e.expr {
        Expr::Select(s) if is_device(&s.operand) => (s.field == "driver").then_some(Read::Driver),
        Expr::Select(s) => {
            let (map, domain) = domain_map(&s.operand)?;
            Some(Read::Entry(map, domain, s.field.clone()))
        }
        Expr::Call(c) if c.func_name == operators::INDEX && c.target.is_none() => {
            let [map, key] = c.args.as_slice() else {
                return None;
            };
            let (map, domain) = domain_map(map)?;
            Some(Read::Entry(map, domain, string(key)?))
        }
        _ => None,
    }
}

/// `device.attributes["<domain>"]` or `device.capacity["<domain>"]`.
fn domain_map(e: &IdedExpr) -> Option<(Map, String)> {
    let Expr::Call(c) = &e.expr else {
        return None;
    };
    if c.func_name != operators::INDEX || c.target.is_some() {
        return None;
    }
    let [map, key] = c.args.as_slice() else {
        return None;
    };
    let Expr::Select(s) = &map.expr else {
        return None;
    };
    if s.test || !is_device(&s.operand) {
        return None;
    }
    let map = match s.field.as_str() {
        "attributes" => Map::Attributes,
        "capacity" => Map::Capacity,
        _ => return None,
    };
    Some((map, string(key)?))
}

fn is_device(e: &IdedExpr) -> bool {
    matches!(&e.expr, Expr::Ident(n) if n == DEVICE)
}

fn string(e: &IdedExpr) -> Option<String> {
    match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner().to_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::DeviceId;

    fn of(expression: &str) -> Footprint {
        Footprint::of(cel::Program::compile(expression).expect("parses").expression())
    }

    fn entry(map: Map, domain: &str, name: &str) -> Read {
        Read::Entry(map, domain.into(), name.into())
    }

    #[test]
    fn the_recognised_reads_are_listed_once_each() {
        assert_eq!(
            of(r#"device.driver == "a" || device.driver == "b""#),
            Footprint::Reads(vec![Read::Driver])
        );
        assert_eq!(
            of(
                r#"device.attributes["g.example.com"].model == "H100" && has(device.capacity["g.example.com"].memory)
                && device.attributes["g.example.com"]["index"] < 4"#
            ),
            Footprint::Reads(vec![
                entry(Map::Attributes, "g.example.com", "model"),
                entry(Map::Capacity, "g.example.com", "memory"),
                entry(Map::Attributes, "g.example.com", "index"),
            ])
        );
        assert_eq!(of("1 == 1"), Footprint::Reads(Vec::new()));
    }

    #[test]
    fn any_other_use_of_the_device_is_the_whole_device() {
        for e in [
            r#"device.attributes["g.example.com"].exists(k, k == "model")"#,
            r#"size(device.attributes["g.example.com"]) > 2"#,
            r#"device.attributes["g" + ".example.com"].model == "x""#,
            r#"device.attributes["g.example.com"][device.driver] == "x""#,
            "device.attributes == device.capacity",
            r#"[1].exists(device, device == 1) && device.driver == "x""#,
            r#"{"a": device.driver}["a"] == "x""#,
            "device.name == \"x\"",
        ] {
            assert_eq!(of(e), Footprint::Whole, "{e}");
        }
    }

    #[test]
    fn devices_that_agree_on_the_reads_project_alike() {
        let f = of(r#"device.attributes["g.example.com"].model == "H100""#);
        let a = Device::new(DeviceId::new("g.example.com", "p", "gpu-0"))
            .with_attribute("model", AttributeValue::String("H100".into()))
            .with_attribute("uuid", AttributeValue::String("a".into()));
        let b = Device::new(DeviceId::new("g.example.com", "q", "gpu-1"))
            .with_attribute("g.example.com/model", AttributeValue::String("H100".into()))
            .with_attribute("uuid", AttributeValue::String("b".into()));
        let c = Device::new(DeviceId::new("g.example.com", "p", "gpu-2"))
            .with_attribute("model", AttributeValue::String("A100".into()));
        let none = Device::new(DeviceId::new("g.example.com", "p", "gpu-3"));
        assert_eq!(f.project(&a), f.project(&b));
        assert_ne!(f.project(&a), f.project(&c));
        assert_eq!(f.project(&none), Some(vec![Part::Attribute(None)]));
        // Another driver's unqualified `model` is in its own domain, not the one read.
        let other = Device::new(DeviceId::new("h.example.com", "p", "gpu-0"))
            .with_attribute("model", AttributeValue::String("H100".into()));
        assert_eq!(f.project(&other), f.project(&none));
        assert_eq!(of("device.name == \"x\"").project(&a), None);
    }
}
