//! CEL device selectors: `selectors[].cel.expression` of DeviceClasses and requests, compiled once with the `cel`
//! crate and evaluated per device in the environment upstream gives them
//! (`staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go`):
//! - `device.driver`, a string;
//! - `device.attributes["<domain>"].<name>` and `device.capacity["<domain>"].<name>`; a domain the device does not
//!   have is an empty map, so `has(device.attributes["x.example.com"].model)` is false rather than an error;
//! - quantities (`quantity("40Gi")`, `q.compareTo(r)`, `q.isGreaterThan(r)`, `q.isLessThan(r)`, `q.asInteger()`),
//!   and semantic versions (`semver("1.2.3")`, the same comparisons, `v.major()`, `v.minor()`, `v.patch()`), as
//!   the Kubernetes CEL libraries define them.
//!
//! Quantities are CEL ints in the quantity's base unit (a capacity of `40Gi` is 42949672960), and versions are
//! strings; `compareTo` and its companions compare ints as quantities and strings as versions. So an expression
//! upstream's type checker would reject (`device.capacity["d"].memory > 5`) evaluates here instead: selectors are
//! validated by the API server at admission, which is what a tenant meets first.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use cel::extractors::This;
use cel::{Context, ExecutionError, Program, Value};

use super::{AttributeValue, Device, DeviceSelector, SelectorError};

/// Compiles `expression` into a selector.
///
/// # Errors
/// The expression does not parse: `"compilation failed: <parser message>"`.
pub fn compile(expression: &str) -> Result<DeviceSelector, SelectorError> {
    let program =
        Program::compile(expression).map_err(|e| SelectorError(format!("compilation failed: {e}")))?;
    let domains = referenced_domains(expression);
    let program = Arc::new(program);
    Ok(DeviceSelector::new(expression, move |device| {
        evaluate(&program, &domains, device)
    }))
}

fn evaluate(program: &Program, domains: &[String], device: &Device) -> Result<bool, SelectorError> {
    let mut ctx = Context::default();
    register(&mut ctx).map_err(|e| SelectorError(format!("internal error: {e}")))?;
    ctx.add_variable_from_value("device", device_value(device, domains));
    match program.execute(&ctx) {
        Ok(Value::Bool(b)) => Ok(b),
        Ok(other) => Err(SelectorError(format!("must evaluate to bool, not {other:?}"))),
        Err(e) => Err(SelectorError(e.to_string())),
    }
}

/// The `device` variable: driver, and attributes and capacities by domain then name.
fn device_value(device: &Device, domains: &[String]) -> Value {
    let driver = &*device.id.driver;
    let mut attributes: HashMap<String, HashMap<String, Value>> = HashMap::new();
    for (name, value) in &device.attributes {
        let (domain, id) = split(name, driver);
        let v = match value {
            AttributeValue::Int(i) => Value::Int(*i),
            AttributeValue::Bool(b) => Value::Bool(*b),
            AttributeValue::String(s) | AttributeValue::Version(s) => Value::String(Arc::new(s.to_string())),
        };
        attributes.entry(domain.into()).or_default().insert(id.into(), v);
    }
    let mut capacity: HashMap<String, HashMap<String, Value>> = HashMap::new();
    for (name, value) in &device.capacity {
        let (domain, id) = split(name, driver);
        capacity
            .entry(domain.into())
            .or_default()
            .insert(id.into(), Value::Int(*value));
    }
    for d in domains {
        attributes.entry(d.clone()).or_default();
        capacity.entry(d.clone()).or_default();
    }
    let mut out: HashMap<String, Value> = HashMap::new();
    out.insert("driver".into(), Value::String(Arc::new(driver.to_owned())));
    out.insert("attributes".into(), nested(attributes));
    out.insert("capacity".into(), nested(capacity));
    out.into()
}

fn nested(m: HashMap<String, HashMap<String, Value>>) -> Value {
    let m: HashMap<String, Value> = m.into_iter().map(|(k, v)| (k, v.into())).collect();
    m.into()
}

fn split<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    name.split_once('/').unwrap_or((driver, name))
}

/// The string literals indexed into `attributes[...]` or `capacity[...]`: the domains that must exist (empty)
/// for `has()` to answer false rather than fail on a missing key.
fn referenced_domains(expression: &str) -> Vec<String> {
    let mut out = Vec::new();
    for marker in ["attributes[", "capacity["] {
        let mut rest = expression;
        while let Some(i) = rest.find(marker) {
            rest = rest[i + marker.len()..].trim_start();
            let Some(quote) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') else {
                continue;
            };
            if let Some(end) = rest[1..].find(quote) {
                let d = &rest[1..1 + end];
                if !out.iter().any(|o: &String| o == d) {
                    out.push(d.to_owned());
                }
            }
        }
    }
    out
}

fn register(ctx: &mut Context) -> Result<(), cel::DeclarationError> {
    ctx.add_function("quantity", |s: Arc<String>| {
        crate::resources::parse_value(&s).map_err(|e| ExecutionError::function_error("quantity", e.0))
    })?;
    ctx.add_function("semver", |s: Arc<String>| {
        Semver::parse(&s)
            .map(|_| Value::String(s.clone()))
            .ok_or_else(|| ExecutionError::function_error("semver", format!("invalid semver {s:?}")))
    })?;
    ctx.add_function("compareTo", |This(a): This<Value>, b: Value| {
        compare("compareTo", &a, &b).map(|o| o as i64)
    })?;
    ctx.add_function("isGreaterThan", |This(a): This<Value>, b: Value| {
        compare("isGreaterThan", &a, &b).map(|o| o == Ordering::Greater)
    })?;
    ctx.add_function("isLessThan", |This(a): This<Value>, b: Value| {
        compare("isLessThan", &a, &b).map(|o| o == Ordering::Less)
    })?;
    ctx.add_function("asInteger", |This(a): This<i64>| a)?;
    ctx.add_function("major", |This(v): This<Arc<String>>| part("major", &v, 0))?;
    ctx.add_function("minor", |This(v): This<Arc<String>>| part("minor", &v, 1))?;
    ctx.add_function("patch", |This(v): This<Arc<String>>| part("patch", &v, 2))?;
    Ok(())
}

fn compare(function: &str, a: &Value, b: &Value) -> Result<Ordering, ExecutionError> {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Ok(x.cmp(y)),
        (Value::String(x), Value::String(y)) => match (Semver::parse(x), Semver::parse(y)) {
            (Some(x), Some(y)) => Ok(x.cmp(&y)),
            _ => Err(ExecutionError::function_error(function, "not a semantic version")),
        },
        _ => Err(ExecutionError::function_error(function, "no such overload")),
    }
}

fn part(function: &str, v: &str, i: usize) -> Result<i64, ExecutionError> {
    let s =
        Semver::parse(v).ok_or_else(|| ExecutionError::function_error(function, "not a semantic version"))?;
    Ok(i64::try_from([s.major, s.minor, s.patch][i]).unwrap_or(i64::MAX))
}

/// A semantic version 2.0.0 (build metadata ignored in comparisons, as the specification says).
#[derive(Debug, PartialEq, Eq)]
struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<String>,
}

impl Semver {
    fn parse(s: &str) -> Option<Semver> {
        let core_pre = s.split_once('+').map_or(s, |(c, _)| c);
        let (core, pre) = match core_pre.split_once('-') {
            Some((c, p)) => (c, p.split('.').map(str::to_owned).collect::<Vec<_>>()),
            None => (core_pre, Vec::new()),
        };
        if pre.iter().any(String::is_empty) {
            return None;
        }
        let mut parts = core.split('.');
        let mut num = || -> Option<u64> {
            let p = parts.next()?;
            if p.is_empty() || (p.len() > 1 && p.starts_with('0')) {
                return None;
            }
            p.parse().ok()
        };
        let v = Semver {
            major: num()?,
            minor: num()?,
            patch: num()?,
            pre,
        };
        parts.next().is_none().then_some(v)
    }
}

impl Ord for Semver {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                // A pre-release sorts before the release.
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => {
                    for (a, b) in self.pre.iter().zip(&other.pre) {
                        let o = match (a.parse::<u64>(), b.parse::<u64>()) {
                            (Ok(x), Ok(y)) => x.cmp(&y),
                            (Ok(_), Err(_)) => Ordering::Less,
                            (Err(_), Ok(_)) => Ordering::Greater,
                            (Err(_), Err(_)) => a.cmp(b),
                        };
                        if o != Ordering::Equal {
                            return o;
                        }
                    }
                    self.pre.len().cmp(&other.pre.len())
                }
            })
    }
}

impl PartialOrd for Semver {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
