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
//!
//! Limits (upstream `k8s.io/api/resource/v1/types.go` and `compile.go`), checked by [`compile`] before anything
//! runs on the scheduling loop: see [`limits`].

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, OnceLock};

use cel::extractors::This;
use cel::{Context, ExecutionError, Program, Value};

use super::{AttributeValue, Device, DeviceSelector, SelectorError};

mod footprint;
pub mod limits;

use footprint::{Footprint, Part, split};
use limits::{DeviceLimits, MAX_COST};

use crate::fx::Fx;

/// One compiled expression: the program, the domains it indexes, what of a device it reads, and its results by
/// the values read ([`Footprint::project`]), shared by every device that agrees on them.
#[derive(Debug)]
pub(crate) struct Compiled {
    pub(crate) program: Program,
    domains: Vec<String>,
    footprint: Footprint,
    results: Mutex<HashMap<Vec<Part>, Result<bool, SelectorError>, Fx>>,
}

/// Most results one expression keeps by projection; past it the table starts over. Projections are as many as
/// the distinct values of what the expression reads (models, sizes, drivers), a handful on a real cluster; the
/// bound is for an expression that reads a per-device value such as a UUID.
const RESULTS_KEPT: usize = 4096;

/// Most results all expressions keep together (some 100-200 bytes each); past it a new result is evaluated but not
/// kept. Claims are a tenant's to write, and thousands of expressions that each read a per-device value would
/// otherwise keep [`RESULTS_KEPT`] results apiece.
const ALL_RESULTS_KEPT: usize = 256 * 1024;

/// Results kept by all live [`Compiled`] programs.
static KEPT: AtomicUsize = AtomicUsize::new(0);

impl Drop for Compiled {
    fn drop(&mut self) {
        let n = self
            .results
            .get_mut()
            .map_or_else(|p| p.into_inner().len(), |r| r.len());
        KEPT.fetch_sub(n, AtomicOrdering::Relaxed);
    }
}

/// Most distinct expressions kept compiled; past it the cache starts over (a bound on memory, not a working set:
/// a cluster has a handful of classes and templates).
const CACHE_ENTRIES: usize = 4096;

type ProgramCache = Mutex<HashMap<Arc<str>, Arc<Compiled>>>;

fn cache() -> &'static ProgramCache {
    static CACHE: OnceLock<ProgramCache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The compiled form of `expression`, parsed at most once per process while it stays in the cache (each catalog
/// rebuild asks again for every class and claim).
///
/// # Errors
/// As [`compile`].
pub(crate) fn program(expression: &str) -> Result<Arc<Compiled>, SelectorError> {
    if let Some(c) = cache()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(expression)
    {
        return Ok(c.clone());
    }
    let program = limits::parse_bounded(expression)?;
    let cost = limits::estimate_cost(program.expression(), DeviceLimits::UPSTREAM);
    if cost > MAX_COST {
        return Err(SelectorError(format!(
            "estimated cost {cost} exceeds the limit {MAX_COST} (CELSelectorExpressionMaxCost)"
        )));
    }
    let compiled = Arc::new(Compiled {
        footprint: Footprint::of(program.expression()),
        program,
        domains: referenced_domains(expression),
        results: Mutex::default(),
    });
    let mut c = cache().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if c.len() >= CACHE_ENTRIES {
        c.clear();
    }
    Ok(c.entry(expression.into()).or_insert(compiled).clone())
}

/// Compiles `expression` into a selector (once per process, see [`program`]). Devices that give the same values
/// for what the expression reads (its driver, the attributes and capacities it names) share one evaluation, kept
/// with the program: a class's selector is evaluated once per driver, not once per device. An expression that
/// uses the device otherwise is evaluated per device (and cached per device by [`DeviceSelector::cached`]).
///
/// # Errors
/// `"compilation failed: …"` when the expression is longer than [`limits::MAX_EXPRESSION_LENGTH`] bytes, nests
/// deeper than [`limits::MAX_NESTING`] or does not parse; `"estimated cost N exceeds the limit 1000000
/// (CELSelectorExpressionMaxCost)"` when its worst case on a device within upstream's limits costs more than
/// [`MAX_COST`].
pub fn compile(expression: &str) -> Result<DeviceSelector, SelectorError> {
    let compiled = program(expression)?;
    let shares = compiled.footprint != Footprint::Whole;
    let selector = DeviceSelector::new(expression, move |device| evaluate(&compiled, device));
    Ok(if shares {
        selector.sharing_results()
    } else {
        selector
    })
}

fn evaluate(compiled: &Compiled, device: &Device) -> Result<bool, SelectorError> {
    // A device beyond upstream's limits (the API server enforces them; an older or newer one might not) gets its
    // own bound, so that the runtime limit holds for every evaluation; its result is its own.
    let seen = DeviceLimits::of(device);
    if !seen.within(DeviceLimits::UPSTREAM) {
        let cost = limits::estimate_cost(compiled.program.expression(), seen.max(DeviceLimits::UPSTREAM));
        if cost > MAX_COST {
            return Err(SelectorError(format!(
                "estimated cost {cost} on this device exceeds the limit {MAX_COST} (CELSelectorExpressionMaxCost)"
            )));
        }
        return run(compiled, device);
    }
    let Some(key) = compiled.footprint.project(device) else {
        return run(compiled, device);
    };
    let results = || {
        compiled
            .results
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    if let Some(r) = results().get(&key) {
        return r.clone();
    }
    // Evaluated without the lock: two threads may both evaluate one projection, and give the same answer.
    let r = run(compiled, device);
    let mut kept = results();
    if kept.len() >= RESULTS_KEPT {
        KEPT.fetch_sub(kept.len(), AtomicOrdering::Relaxed);
        kept.clear();
    }
    if KEPT.load(AtomicOrdering::Relaxed) < ALL_RESULTS_KEPT && kept.insert(key, r.clone()).is_none() {
        KEPT.fetch_add(1, AtomicOrdering::Relaxed);
    }
    r
}

/// Evaluates the program on `device`.
fn run(compiled: &Compiled, device: &Device) -> Result<bool, SelectorError> {
    // The standard library and the Kubernetes functions, built once per thread: building them took most of an
    // evaluation (a catalog's first pass evaluates every selector on every device).
    thread_local! {
        static ROOT: Result<Context<'static, 'static>, String> = {
            let mut ctx = Context::default();
            register(&mut ctx).map(|()| ctx).map_err(|e| e.to_string())
        };
    }
    ROOT.with(|root| {
        let root = root
            .as_ref()
            .map_err(|e| SelectorError(format!("internal error: {e}")))?;
        let mut ctx = root.new_inner_scope();
        ctx.add_variable_from_value("device", device_value(device, &compiled.domains));
        match compiled.program.execute(&ctx) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(SelectorError(format!("must evaluate to bool, not {other:?}"))),
            Err(e) => Err(SelectorError(e.to_string())),
        }
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::DeviceId;

    /// Each rebuild of the catalog asks for the same expressions again: they are parsed once.
    #[test]
    fn an_expression_is_compiled_once() {
        let e = r#"device.driver == "compile-once.example.com""#;
        let a = program(e).expect("compiles");
        let b = program(e).expect("compiles");
        assert!(Arc::ptr_eq(&a, &b), "the second compile parsed again");
        let s = compile(e).expect("compiles");
        let d = Device::new(DeviceId::new("compile-once.example.com", "p", "d"));
        assert_eq!(s.matches(&d), Ok(true));
    }

    /// Devices that agree on what an expression reads share one evaluation ([`footprint`]): every device gets
    /// the answer, or the error, that evaluating the expression on it alone gives, whatever order they come in.
    #[test]
    fn a_shared_result_is_the_one_each_device_gets_alone() {
        let expressions = [
            r#"device.driver == "g.example.com""#,
            r#"device.attributes["g.example.com"].model == "H100""#,
            r#"has(device.attributes["g.example.com"].model) && device.attributes["g.example.com"].model != "A100""#,
            r#"device.capacity["g.example.com"].memory.compareTo(quantity("40Gi")) >= 0"#,
            r#"device.attributes["g.example.com"]["index"] < 2 || device.driver == "h.example.com""#,
            r#"device.attributes["g.example.com"].exists(k, k == "model")"#,
        ];
        let mut devices = Vec::new();
        for (i, driver) in ["g.example.com", "h.example.com"].into_iter().enumerate() {
            for d in 0..6i64 {
                let mut dev = Device::new(DeviceId::new(driver, "p", &format!("d{i}-{d}")))
                    .with_attribute("uuid", AttributeValue::String(format!("u{i}{d}").into()))
                    .with_attribute("index", AttributeValue::Int(d % 3));
                if d % 2 == 0 {
                    let model = if d % 4 == 0 { "H100" } else { "A100" };
                    dev = dev.with_attribute("model", AttributeValue::String(model.into()));
                }
                if d != 5 {
                    dev.capacity
                        .insert(format!("{driver}/memory").into(), (d + 38) << 30);
                }
                devices.push(dev);
            }
        }
        for (n, e) in expressions.iter().enumerate() {
            // A fresh program per order, so that the table starts empty.
            let alone: Vec<_> = devices.iter().map(|d| run(&fresh(e), d)).collect();
            let shared = fresh(e);
            let forward: Vec<_> = devices.iter().map(|d| evaluate(&shared, d)).collect();
            let shared = fresh(e);
            let mut backward: Vec<_> = devices.iter().rev().map(|d| evaluate(&shared, d)).collect();
            backward.reverse();
            assert_eq!(forward, alone, "expression {n}: {e}");
            assert_eq!(backward, alone, "expression {n} backwards: {e}");
            assert!(
                alone.contains(&Ok(true)) || n == 5,
                "expression {n} matches nothing: {alone:?}"
            );
        }
        // The class selector reads the driver only: two evaluations for twelve devices.
        let shared = fresh(expressions[0]);
        for d in &devices {
            evaluate(&shared, d).expect("evaluates");
        }
        assert_eq!(shared.results.lock().expect("not poisoned").len(), 2);
    }

    fn fresh(expression: &str) -> Compiled {
        let program = Program::compile(expression).expect("parses");
        Compiled {
            footprint: Footprint::of(program.expression()),
            program,
            domains: referenced_domains(expression),
            results: Mutex::default(),
        }
    }

    /// Nested comprehensions over literal lists of 100: a million iterations of the innermost body, the
    /// selector that took 0.13 s per device in cel 0.15 (4 s unoptimised).
    #[test]
    fn a_selector_over_the_cost_limit_is_refused() {
        let l = format!(
            "[{}]",
            (0..100).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
        );
        let e = format!("{l}.all(a, {l}.all(b, {l}.all(c, a + b + c >= 0)))");
        let err = compile(&e).expect_err("a billion-step selector compiles");
        assert!(
            err.0.contains("exceeds the limit 1000000") && err.0.contains("CELSelectorExpressionMaxCost"),
            "{err}"
        );
        // Ten elements a level costs about a thousand bodies: allowed.
        let l = "[0,1,2,3,4,5,6,7,8,9]";
        let e = format!("{l}.all(a, {l}.all(b, {l}.all(c, a + b + c >= 0)))");
        let c = program(&e).expect("a small nested selector compiles");
        let cost = limits::estimate_cost(c.program.expression(), DeviceLimits::UPSTREAM);
        assert!(cost > 1000 && cost < MAX_COST, "cost {cost}");
    }

    /// A device beyond upstream's limits (here 5,000 attributes in one domain) gets its own bound.
    #[test]
    fn a_device_beyond_upstream_limits_is_bounded_by_its_own_sizes() {
        let e =
            r#"device.attributes["d.example.com"].all(a, device.attributes["d.example.com"].all(b, true))"#;
        let s = compile(e).expect("within the limit for upstream's 32 attributes");
        let mut d = Device::new(DeviceId::new("d.example.com", "p", "d"));
        for i in 0..5000 {
            d = d.with_attribute(&format!("a{i}"), AttributeValue::Int(i));
        }
        let err = s.matches(&d).expect_err("25 million iterations evaluated");
        assert!(err.0.contains("on this device exceeds the limit"), "{err}");
    }
}
