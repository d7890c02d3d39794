//! Resource quantities and pod request arithmetic.
//!
//! Follows upstream `k8s.io/component-helpers/resource` (`PodRequests`) and
//! `pkg/scheduler/framework/types.go` (`Resource`): cpu is tracked in millicores, every other
//! resource in its base unit (bytes for memory, ephemeral-storage and `hugepages-*`, a count for
//! extended resources such as `nvidia.com/gpu`).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Resource name of cpu.
pub const CPU: &str = "cpu";
/// Resource name of memory.
pub const MEMORY: &str = "memory";
/// Resource name of ephemeral storage.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// Resource name of the pod count.
pub const PODS: &str = "pods";
/// Default cpu request (millicores) used for scoring pods that set none
/// (upstream `DefaultMilliCPURequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Default memory request (bytes) used for scoring pods that set none
/// (upstream `DefaultMemoryRequest`, 200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// The largest quantity the core computes with, per resource: 2^50 (1 PiB of memory, about 10^12 millicores). A pod
/// requesting more is unschedulable with a SchedulerError that says so; a node offering more counts as offering
/// this. The bound keeps every sum over the pods of a node, and every score product, inside `i64`.
pub const MAX_QUANTITY: i64 = 1 << 50;

/// Error parsing a Kubernetes quantity string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {0:?}")]
pub struct QuantityError(pub String);

/// A set of resource amounts (upstream `framework.Resource`).
///
/// `scalar` holds every other resource (hugepages, extended resources) sorted by name, so
/// equality is structural. Amounts are `i64`: millicores for cpu, base units otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    /// Millicores.
    pub milli_cpu: i64,
    /// Bytes.
    pub memory: i64,
    /// Bytes.
    pub ephemeral_storage: i64,
    /// Other resources, sorted by name, no duplicates, no zero entries.
    pub scalar: Vec<(Arc<str>, i64)>,
}

impl Resources {
    /// Whether every amount is zero (upstream "best effort" request).
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0 && self.memory == 0 && self.ephemeral_storage == 0 && self.scalar.is_empty()
    }

    /// Amount of a scalar resource (0 when absent).
    pub fn scalar(&self, name: &str) -> i64 {
        match self.scalar.binary_search_by(|(n, _)| (**n).cmp(name)) {
            Ok(i) => self.scalar[i].1,
            Err(_) => 0,
        }
    }

    /// Amount of any resource by name (`pods` is not part of `Resources`; returns 0).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.milli_cpu,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            _ => self.scalar(name),
        }
    }

    /// Sets a resource by name.
    pub fn set(&mut self, name: &str, v: i64) {
        match name {
            CPU => self.milli_cpu = v,
            MEMORY => self.memory = v,
            EPHEMERAL_STORAGE => self.ephemeral_storage = v,
            PODS => {}
            _ => match self.scalar.binary_search_by(|(n, _)| (**n).cmp(name)) {
                Ok(i) => {
                    if v == 0 {
                        self.scalar.remove(i);
                    } else {
                        self.scalar[i].1 = v;
                    }
                }
                Err(i) => {
                    if v != 0 {
                        self.scalar.insert(i, (Arc::from(name), v));
                    }
                }
            },
        }
    }

    /// Adds `other` to `self` (element-wise), saturating: tenant quantities can be as large as `9E`, and two of
    /// them must not wrap into a negative request that fits anywhere.
    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_add(other.ephemeral_storage);
        for (n, v) in &other.scalar {
            let cur = self.scalar(n);
            self.set(n, cur.saturating_add(*v));
        }
    }

    /// Subtracts `other` from `self` (element-wise), saturating; the exact inverse of [`Resources::add`] whenever
    /// that did not saturate, which values bounded by [`MAX_QUANTITY`] guarantee for any realistic pod count.
    pub fn sub(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.saturating_sub(other.milli_cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.saturating_sub(other.ephemeral_storage);
        for (n, v) in &other.scalar {
            let cur = self.scalar(n);
            self.set(n, cur.saturating_sub(*v));
        }
    }

    /// The first resource above [`MAX_QUANTITY`], as `(name, value)`.
    pub fn first_above_limit(&self) -> Option<(String, i64)> {
        [
            (CPU, self.milli_cpu),
            (MEMORY, self.memory),
            ("ephemeral-storage", self.ephemeral_storage),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .chain(self.scalar.iter().map(|(n, v)| (n.to_string(), *v)))
        .find(|(_, v)| *v > MAX_QUANTITY)
    }

    /// Every resource capped at [`MAX_QUANTITY`] (node allocatable: larger capacities cannot be used anyway).
    pub fn capped(mut self) -> Resources {
        self.milli_cpu = self.milli_cpu.min(MAX_QUANTITY);
        self.memory = self.memory.min(MAX_QUANTITY);
        self.ephemeral_storage = self.ephemeral_storage.min(MAX_QUANTITY);
        for (_, v) in self.scalar.iter_mut() {
            *v = (*v).min(MAX_QUANTITY);
        }
        self
    }

    /// Element-wise maximum (upstream `maxResourceList`).
    pub fn max_with(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        for (n, v) in &other.scalar {
            let cur = self.scalar(n);
            if *v > cur {
                self.set(n, *v);
            }
        }
    }

    /// Builds from a Kubernetes resource list (`pods` is ignored).
    ///
    /// Errors: a quantity that does not parse.
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Result<Resources, QuantityError> {
        let mut r = Resources::default();
        for (name, q) in list {
            if name == PODS {
                continue;
            }
            let v = if name == CPU {
                parse_milli(&q.0)?
            } else {
                parse_value(&q.0)?
            };
            r.set(name, v);
        }
        Ok(r)
    }
}

/// A parsed quantity: `mantissa * 10^exp10 * 2^exp2`.
struct Parsed {
    mantissa: i128,
    exp10: i32,
    exp2: u32,
}

fn parse(s: &str) -> Result<Parsed, QuantityError> {
    let err = || QuantityError(s.to_string());
    let s = s.trim();
    if s.is_empty() {
        return Err(err());
    }
    let (neg, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (num, suffix) = body.split_at(num_end);
    if num.is_empty() || num == "." {
        return Err(err());
    }
    let mut mantissa: i128 = 0;
    let mut exp10: i32 = 0;
    let mut seen_dot = false;
    for c in num.chars() {
        if c == '.' {
            if seen_dot {
                return Err(err());
            }
            seen_dot = true;
            continue;
        }
        let d = c.to_digit(10).ok_or_else(err)? as i128;
        if mantissa > i128::MAX / 100 {
            // Drop precision beyond ~36 significant digits.
            if !seen_dot {
                exp10 += 1;
            }
            continue;
        }
        mantissa = mantissa * 10 + d;
        if seen_dot {
            exp10 -= 1;
        }
    }
    let (e10, e2) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        other if other.starts_with(['e', 'E']) => {
            let e: i32 = other[1..].parse().map_err(|_| err())?;
            if e.abs() > 40 {
                return Err(err());
            }
            (e, 0)
        }
        _ => return Err(err()),
    };
    Ok(Parsed {
        mantissa: if neg { -mantissa } else { mantissa },
        exp10: exp10 + e10,
        exp2: e2,
    })
}

/// Value scaled by `10^scale`, rounded up (upstream `Quantity.ScaledValue` rounds up).
fn scaled(p: &Parsed, scale: i32) -> i64 {
    // A shift can push bits out silently (a huge mantissa with `Ei`); saturate instead.
    let mut v = p
        .mantissa
        .checked_mul(1i128 << p.exp2)
        .unwrap_or(if p.mantissa < 0 { i128::MIN } else { i128::MAX });
    let e = p.exp10 + scale;
    if e >= 0 {
        for _ in 0..e {
            v = v.saturating_mul(10);
        }
    } else {
        let mut div: i128 = 1;
        for _ in 0..(-e).min(38) {
            div *= 10;
        }
        let q = v / div;
        v = if v % div > 0 { q + 1 } else { q };
    }
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// Parses a quantity into millis (rounded up), as upstream `MilliValue()` does. Used for cpu.
pub fn parse_milli(s: &str) -> Result<i64, QuantityError> {
    Ok(scaled(&parse(s)?, 3))
}

/// Parses a quantity into base units (rounded up), as upstream `Value()` does.
pub fn parse_value(s: &str) -> Result<i64, QuantityError> {
    Ok(scaled(&parse(s)?, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_like_upstream() {
        assert_eq!(parse_milli("1").unwrap(), 1000);
        assert_eq!(parse_milli("100m").unwrap(), 100);
        assert_eq!(parse_milli("0.5").unwrap(), 500);
        assert_eq!(parse_milli("1.0001").unwrap(), 1001); // rounds up
        assert_eq!(parse_value("1Gi").unwrap(), 1 << 30);
        assert_eq!(parse_value("1G").unwrap(), 1_000_000_000);
        assert_eq!(parse_value("1.5Ki").unwrap(), 1536);
        assert_eq!(parse_value("1e3").unwrap(), 1000);
        assert_eq!(parse_value("8").unwrap(), 8);
        assert_eq!(parse_value("100m").unwrap(), 1); // rounds up
        assert!(parse_value("abc").is_err());
        assert!(parse_value("1Qi").is_err());
        assert!(parse_value("").is_err());
    }

    #[test]
    fn huge_quantities_saturate_instead_of_wrapping() {
        let nine_e = Resources {
            memory: parse_value("9E").unwrap(),
            ..Default::default()
        };
        let mut sum = nine_e.clone();
        sum.add(&nine_e);
        assert_eq!(sum.memory, i64::MAX, "two 9E containers do not wrap negative");
        assert_eq!(
            sum.first_above_limit().map(|(n, _)| n),
            Some("memory".to_string())
        );
        assert_eq!(
            parse_value("99999999999999999999999999999999999Ei").unwrap(),
            i64::MAX
        );
        assert_eq!(nine_e.capped().memory, MAX_QUANTITY);
    }

    #[test]
    fn add_sub_are_inverse() {
        let mut a = Resources::default();
        a.set("nvidia.com/gpu", 2);
        let mut b = Resources {
            milli_cpu: 5,
            ..Default::default()
        };
        b.set("nvidia.com/gpu", 1);
        b.set("hugepages-2Mi", 4);
        let orig = a.clone();
        a.add(&b);
        assert_eq!(a.scalar("nvidia.com/gpu"), 3);
        a.sub(&b);
        assert_eq!(a, orig);
    }
}
