//! The bounds a CEL selector must stay within before the scheduling loop evaluates it (upstream: the limits of
//! `k8s.io/api/resource/v1/types.go`, enforced by `staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go`):
//!
//! - length: at most [`MAX_EXPRESSION_LENGTH`] bytes (`CELSelectorExpressionMaxLength`, 10 Ki);
//! - nesting: at most [`MAX_NESTING`] open brackets, checked on the text before parsing, and an expression tree
//!   at most [`MAX_NESTING`] deep, checked after. The `cel` crate's parser and evaluator recurse once per level
//!   (a flat `1+1+…` is as deep as it is long), and an unoptimised build needs about 40 KiB of stack per level:
//!   2,500 terms abort the process on a 2 MiB stack. So the text is parsed on a thread of its own with
//!   [`PARSE_STACK`] bytes of stack (enough for any 10 Ki expression), and a tree deeper than the limit is
//!   refused there, before it can reach the loop's stack;
//! - cost: at most [`MAX_COST`] (`CELSelectorExpressionMaxCost`, 1,000,000). The `cel` crate has no cost
//!   tracking, so instead of upstream's runtime cost (counted while evaluating, stopping at the limit)
//!   [`estimate_cost`] bounds the worst case from the expression tree, as upstream's admission check does
//!   (cel-go `checker/cost.go`): one unit per identifier, field selection and function call, 10 per list and 30
//!   per map literal, a tenth of a unit per character a string function reads, and each comprehension's body
//!   times the size of its range. Sizes come from upstream's device limits ([`DeviceLimits::UPSTREAM`]) or from
//!   the literal; a device beyond those limits gets its own estimate before it is evaluated. So the estimate is
//!   never below the actual cost, and an expression whose costly branch would not run is refused all the same,
//!   as upstream refuses it at admission.

use cel::Program;
use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};

use crate::dra::{AttributeValue, Device, SelectorError};

/// Longest expression, in bytes (upstream `CELSelectorExpressionMaxLength`).
pub const MAX_EXPRESSION_LENGTH: usize = 10 * 1024;

/// Highest cost of one evaluation (upstream `CELSelectorExpressionMaxCost`).
pub const MAX_COST: u64 = 1_000_000;

/// Deepest nesting: open brackets in the text, and levels of the expression tree. An unoptimised build evaluates
/// about 50 levels on a 2 MiB stack; real selectors are under 10 deep.
pub const MAX_NESTING: usize = 32;

/// Stack of the thread that parses, in bytes: the parser of a 10 Ki flat chain needs about 200 MiB unoptimised.
/// Only the pages touched are ever allocated.
pub const PARSE_STACK: usize = 512 << 20;

/// Size bounds of a device as CEL sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Most entries of any map (domains; attributes or capacities of one domain).
    pub entries: u64,
    /// Longest string (attribute value or name), in bytes.
    pub value_len: u64,
}

impl DeviceLimits {
    /// Upstream's: 32 attributes and capacities per device (`ResourceSliceMaxAttributesAndCapacitiesPerDevice`),
    /// string and version values of at most 64 bytes (`DeviceAttributeMaxValueLength`).
    pub const UPSTREAM: DeviceLimits = DeviceLimits {
        entries: 32,
        value_len: 64,
    };

    /// The sizes `device` actually has.
    pub fn of(device: &Device) -> DeviceLimits {
        let entries = (device.attributes.len() + device.capacity.len()) as u64;
        let value_len = device
            .attributes
            .iter()
            .map(|(k, v)| match v {
                AttributeValue::String(s) | AttributeValue::Version(s) => s.len().max(k.len()),
                _ => k.len(),
            })
            .chain(device.capacity.keys().map(|k| k.len()))
            .chain(std::iter::once(device.id.driver.len()))
            .max()
            .unwrap_or(0) as u64;
        DeviceLimits { entries, value_len }
    }

    /// Whether every bound of `self` is at most `other`'s.
    pub fn within(self, other: DeviceLimits) -> bool {
        self.entries <= other.entries && self.value_len <= other.value_len
    }

    /// The larger of each bound.
    pub fn max(self, other: DeviceLimits) -> DeviceLimits {
        DeviceLimits {
            entries: self.entries.max(other.entries),
            value_len: self.value_len.max(other.value_len),
        }
    }
}

/// Parses `expression` within the length and nesting limits.
///
/// # Errors
/// `"compilation failed: …"`: too long, nested too deep (text or tree), the parse thread could not start, or the
/// parser's own message.
pub fn parse_bounded(expression: &str) -> Result<Program, SelectorError> {
    let fail = |m: String| SelectorError(format!("compilation failed: {m}"));
    if expression.len() > MAX_EXPRESSION_LENGTH {
        return Err(fail(format!(
            "expression is {} bytes long, more than the limit of {MAX_EXPRESSION_LENGTH}",
            expression.len()
        )));
    }
    let nesting = bracket_nesting(expression);
    if nesting > MAX_NESTING {
        return Err(fail(format!(
            "brackets nest {nesting} deep, more than the limit of {MAX_NESTING}"
        )));
    }
    let source = expression.to_owned();
    std::thread::Builder::new()
        .name("cel-parse".into())
        .stack_size(PARSE_STACK)
        .spawn(move || {
            let program = Program::compile(&source).map_err(|e| fail(e.to_string()))?;
            // Measured (and, when too deep, dropped) on this thread, whose stack the tree fits.
            let depth = depth(program.expression());
            if depth > MAX_NESTING {
                return Err(fail(format!(
                    "the expression is {depth} levels deep, more than the limit of {MAX_NESTING}"
                )));
            }
            Ok(program)
        })
        .map_err(|e| fail(format!("cannot start the parser thread: {e}")))?
        .join()
        .unwrap_or_else(|_| Err(fail("the parser panicked".into())))
}

/// The deepest nesting of `(`, `[` and `{` outside string literals (quoted with `'` or `"`, single or triple,
/// raw or with escapes).
fn bracket_nesting(s: &str) -> usize {
    let b = s.as_bytes();
    let (mut depth, mut max, mut i) = (0usize, 0usize, 0usize);
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'') => {
                let raw = i > 0 && matches!(b[i - 1], b'r' | b'R');
                let triple = b.len() >= i + 3 && b[i + 1] == q && b[i + 2] == q;
                let close: &[u8] = if triple { &b[i..i + 3] } else { &b[i..=i] };
                i += close.len();
                while i < b.len() && !b[i..].starts_with(close) {
                    i += if b[i] == b'\\' && !raw { 2 } else { 1 };
                }
                i += close.len();
                continue;
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    max
}

/// The direct children of a node.
fn children(e: &IdedExpr) -> Vec<&IdedExpr> {
    match &e.expr {
        Expr::Call(c) => c.target.iter().map(|t| &**t).chain(&c.args).collect(),
        Expr::Comprehension(c) => vec![&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result],
        Expr::List(l) => l.elements.iter().collect(),
        Expr::Map(m) => m.entries.iter().flat_map(|e| entry(&e.expr)).collect(),
        Expr::Struct(s) => s.entries.iter().flat_map(|e| entry(&e.expr)).collect(),
        Expr::Select(s) => vec![&s.operand],
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Vec::new(),
    }
}

fn entry(e: &EntryExpr) -> Vec<&IdedExpr> {
    match e {
        EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
        EntryExpr::StructField(f) => vec![&f.value],
    }
}

/// Levels of the tree, counted without recursion.
fn depth(root: &IdedExpr) -> usize {
    let mut max = 0;
    let mut stack = vec![(root, 1usize)];
    while let Some((e, d)) = stack.pop() {
        max = max.max(d);
        stack.extend(children(e).into_iter().map(|c| (c, d + 1)));
    }
    max
}

/// An upper bound on what evaluating `e` costs on a device within `limits`, in cel-go's units (see the module
/// documentation); saturates at `u64::MAX`. Recurses once per level: call it only on a tree within
/// [`MAX_NESTING`].
pub fn estimate_cost(e: &IdedExpr, limits: DeviceLimits) -> u64 {
    Estimator {
        limits,
        scope: Vec::new(),
    }
    .walk(e)
    .cost
}

/// What the estimator knows of a value: the cost to compute it, its size (elements of a list or map, bytes of a
/// string) and the size of its elements.
#[derive(Debug, Clone, Copy)]
struct Est {
    cost: u64,
    len: u64,
    elem: u64,
}

struct Estimator {
    limits: DeviceLimits,
    /// Comprehension variables in scope: name → (size, element size).
    scope: Vec<(String, u64, u64)>,
}

impl Estimator {
    /// The bound for a value nothing more is known of: any map or string a device holds.
    fn any(&self) -> u64 {
        self.limits.entries.max(self.limits.value_len)
    }

    fn walk(&mut self, e: &IdedExpr) -> Est {
        let any = self.any();
        match &e.expr {
            Expr::Literal(l) => {
                let len = match l {
                    LiteralValue::String(s) => s.inner().len() as u64,
                    LiteralValue::Bytes(b) => b.inner().len() as u64,
                    _ => 1,
                };
                Est {
                    cost: 0,
                    len,
                    elem: 1,
                }
            }
            Expr::Ident(name) => match self.scope.iter().rev().find(|(n, _, _)| n == name) {
                Some(&(_, len, elem)) => Est { cost: 1, len, elem },
                None => Est {
                    cost: 1,
                    len: any,
                    elem: any,
                },
            },
            Expr::Select(s) => {
                let o = self.walk(&s.operand);
                Est {
                    cost: o.cost.saturating_add(1),
                    len: any,
                    elem: any,
                }
            }
            Expr::List(l) => {
                let parts: Vec<Est> = l.elements.iter().map(|x| self.walk(x)).collect();
                Est {
                    cost: sum(parts.iter().map(|p| p.cost)).saturating_add(10),
                    len: parts.len() as u64,
                    elem: parts.iter().map(|p| p.len).max().unwrap_or(1),
                }
            }
            Expr::Map(_) | Expr::Struct(_) | Expr::Unspecified => {
                let parts: Vec<Est> = children(e).into_iter().map(|x| self.walk(x)).collect();
                Est {
                    cost: sum(parts.iter().map(|p| p.cost)).saturating_add(30),
                    len: (parts.len() as u64).div_ceil(2),
                    elem: parts.iter().map(|p| p.len).max().unwrap_or(1),
                }
            }
            Expr::Call(c) => {
                let parts: Vec<Est> = c
                    .target
                    .iter()
                    .map(|t| &**t)
                    .chain(&c.args)
                    .map(|x| self.walk(x))
                    .collect();
                let read = sum(parts.iter().map(|p| p.len));
                let (len, elem) = match c.func_name.as_str() {
                    // Concatenation of strings or lists.
                    "_+_" => (read, parts.iter().map(|p| p.elem).max().unwrap_or(1)),
                    "_[_]" | "dyn" => (any, any),
                    _ => (1, 1),
                };
                Est {
                    // One unit for the call, and a tenth of a unit per element or byte it may read.
                    cost: sum(parts.iter().map(|p| p.cost))
                        .saturating_add(1)
                        .saturating_add(read.div_ceil(10)),
                    len,
                    elem,
                }
            }
            Expr::Comprehension(c) => {
                let range = self.walk(&c.iter_range);
                let init = self.walk(&c.accu_init);
                self.scope.push((c.iter_var.clone(), range.elem, any));
                if let Some(v) = &c.iter_var2 {
                    self.scope.push((v.clone(), range.elem, any));
                }
                // The accumulator grows by at most one element per iteration (map, filter).
                self.scope
                    .push((c.accu_var.clone(), range.len.max(init.len), range.elem));
                let body = {
                    let cond = self.walk(&c.loop_cond);
                    let step = self.walk(&c.loop_step);
                    cond.cost.saturating_add(step.cost).saturating_add(1)
                };
                let result = self.walk(&c.result);
                self.scope
                    .truncate(self.scope.len() - 2 - usize::from(c.iter_var2.is_some()));
                Est {
                    cost: range
                        .cost
                        .saturating_add(init.cost)
                        .saturating_add(result.cost)
                        .saturating_add(range.len.saturating_mul(body)),
                    len: range.len,
                    elem: range.elem,
                }
            }
        }
    }
}

fn sum(v: impl Iterator<Item = u64>) -> u64 {
    v.fold(0, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a thread with a 2 MiB stack (a tokio worker's), a flat chain of 2,500 terms used to abort the process
    /// in the parser; it is refused, and so is one past the length limit and one nested too deep.
    #[test]
    fn long_or_deep_expressions_are_refused_without_overflowing_a_2_mib_stack() {
        let outcome = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                let flat = vec!["1"; 2500].join("+");
                let long = vec!["1"; 6000].join("+");
                let parens = format!("{}1{}", "(".repeat(40), ")".repeat(40));
                let ok = format!("{} == 3", ["1"; 3].join("+"));
                [flat, long, parens, ok].map(|e| parse_bounded(&e).map(|_| ()).map_err(|e| e.0))
            })
            .expect("thread starts")
            .join()
            .expect("no panic");
        let [flat, long, parens, ok] = outcome;
        assert!(
            flat.as_ref()
                .is_err_and(|e| e.contains("2500 levels deep, more than the limit of 32")),
            "{flat:?}"
        );
        assert!(
            long.as_ref()
                .is_err_and(|e| e.contains("11999 bytes long, more than the limit of 10240")),
            "{long:?}"
        );
        assert!(
            parens
                .as_ref()
                .is_err_and(|e| e.contains("brackets nest 40 deep")),
            "{parens:?}"
        );
        assert_eq!(ok, Ok(()));
    }

    #[test]
    fn brackets_inside_strings_do_not_count() {
        assert_eq!(
            bracket_nesting(r#"f("((((", '[[', """ ((( """, r"\(") + (g([1]))"#),
            3
        );
    }
}
