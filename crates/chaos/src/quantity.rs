//! Resource quantities (`"500m"`, `"2Gi"`, `"9E"`) as milli-units in `i128`, and a pod's effective requests.
//!
//! The checker computes node usage on its own instead of reusing the scheduler's arithmetic, so that a bug there
//! cannot hide itself. `i128` milli-units hold every quantity the API server accepts, including sums of several
//! `9E` requests that overflow the `i64` Kubernetes itself uses (`k8s.io/apimachinery/pkg/api/resource`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

/// Requests per resource name, in milli-units (1 CPU = 1000, 1 byte of memory = 1000).
pub type Requests = BTreeMap<String, i128>;

/// Parses a quantity into milli-units, rounding up (as `Quantity.MilliValue` does).
///
/// Grammar of `k8s.io/apimachinery/pkg/api/resource/quantity.go`: an optionally signed decimal number followed
/// by a binary suffix (`Ki`..`Ei`), a decimal SI suffix (`n`, `u`, `m`, ``, `k`, `M`, `G`, `T`, `P`, `E`) or a
/// decimal exponent (`e3`, `E-2`).
///
/// # Errors
/// The text is not a quantity, or its value does not fit `i128` milli-units.
pub fn parse_milli(text: &str) -> anyhow::Result<i128> {
    let s = text.trim();
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let split = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(split);
    anyhow::ensure!(
        !number.is_empty() && number != "." && number.matches('.').count() <= 1,
        "not a quantity: {text:?}"
    );
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let digits = format!("{int_part}{frac_part}");
    let overflow = || anyhow::anyhow!("quantity {text:?} is too large");
    let mantissa: i128 = digits.parse().map_err(|_| overflow())?;
    // value = mantissa * base^power / 10^frac; in milli-units multiply by 1000 (10^3).
    let (base, power): (i128, i32) = match suffix {
        "Ki" => (1024, 1),
        "Mi" => (1024, 2),
        "Gi" => (1024, 3),
        "Ti" => (1024, 4),
        "Pi" => (1024, 5),
        "Ei" => (1024, 6),
        "n" => (10, -9),
        "u" => (10, -6),
        "m" => (10, -3),
        "" => (10, 0),
        "k" => (10, 3),
        "M" => (10, 6),
        "G" => (10, 9),
        "T" => (10, 12),
        "P" => (10, 15),
        "E" => (10, 18),
        exp if exp.starts_with(['e', 'E']) => {
            let e: i32 = exp[1..]
                .parse()
                .map_err(|_| anyhow::anyhow!("not a quantity: {text:?}"))?;
            anyhow::ensure!(e.abs() <= 30, "quantity {text:?} is out of range");
            (10, e)
        }
        _ => anyhow::bail!("not a quantity: {text:?} (unknown suffix {suffix:?})"),
    };
    let frac = i32::try_from(frac_part.len()).map_err(|_| overflow())?;
    // Numerator and denominator as powers: binary multipliers never reduce, decimal ones fold into 10^k.
    let mut num = mantissa.checked_mul(1000).ok_or_else(overflow)?;
    let mut den: i128 = 1;
    if base == 1024 {
        num = num.checked_mul(1024i128.pow(power as u32)).ok_or_else(overflow)?;
        den = 10i128.checked_pow(frac as u32).ok_or_else(overflow)?;
    } else {
        let k = power - frac;
        if k >= 0 {
            num = num
                .checked_mul(10i128.checked_pow(k as u32).ok_or_else(overflow)?)
                .ok_or_else(overflow)?;
        } else {
            den = 10i128.checked_pow((-k) as u32).ok_or_else(overflow)?;
        }
    }
    let milli = num / den + i128::from(num % den != 0);
    Ok(if negative { -milli } else { milli })
}

fn container_requests(c: &Container) -> anyhow::Result<Requests> {
    let mut out = Requests::new();
    let Some(res) = c.resources.as_ref() else {
        return Ok(out);
    };
    // A limit without a request defaults the request (API defaulting does this for every resource; the
    // extended resources of the samples rely on it).
    if let Some(limits) = res.limits.as_ref() {
        for (k, q) in limits {
            out.insert(k.clone(), parse_milli(&q.0)?);
        }
    }
    if let Some(requests) = res.requests.as_ref() {
        for (k, q) in requests {
            out.insert(k.clone(), parse_milli(&q.0)?);
        }
    }
    Ok(out)
}

/// What `pod` occupies on its node: per resource, the larger of the sum over its containers and the largest
/// init container, plus `spec.overhead`, plus one `pods` slot (kube-scheduler's `computePodResourceRequest`,
/// `pkg/scheduler/framework/plugins/noderesources/fit.go`; restartable init containers are counted with the
/// containers, as in `k8s.io/component-helpers/resource`).
///
/// # Errors
/// A request or limit is not a valid quantity.
pub fn pod_requests(pod: &Pod) -> anyhow::Result<Requests> {
    let mut sum = Requests::new();
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(sum);
    };
    let add = |into: &mut Requests, r: &Requests| {
        for (k, v) in r {
            *into.entry(k.clone()).or_default() += v;
        }
    };
    for c in &spec.containers {
        add(&mut sum, &container_requests(c)?);
    }
    let mut init_max = Requests::new();
    let mut sidecars = Requests::new();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            add(&mut sidecars, &r);
            add(&mut sum, &r);
        } else {
            // A regular init container runs beside the sidecars started before it.
            for (k, v) in &r {
                let with_sidecars = v + sidecars.get(k).copied().unwrap_or(0);
                let e = init_max.entry(k.clone()).or_default();
                *e = (*e).max(with_sidecars);
            }
        }
    }
    for (k, v) in init_max {
        let e = sum.entry(k).or_default();
        *e = (*e).max(v);
    }
    for (k, q) in spec.overhead.iter().flatten() {
        *sum.entry(k.clone()).or_default() += parse_milli(&q.0)?;
    }
    *sum.entry("pods".into()).or_default() += 1000;
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes_and_rounds_up() {
        assert_eq!(parse_milli("1").unwrap(), 1000);
        assert_eq!(parse_milli("500m").unwrap(), 500);
        assert_eq!(parse_milli("1.5").unwrap(), 1500);
        assert_eq!(parse_milli("2Gi").unwrap(), 2 * 1024 * 1024 * 1024 * 1000);
        assert_eq!(parse_milli("1k").unwrap(), 1_000_000);
        assert_eq!(parse_milli("1e3").unwrap(), 1_000_000);
        assert_eq!(parse_milli("1E3").unwrap(), 1_000_000);
        assert_eq!(parse_milli("1n").unwrap(), 1, "rounded up to one milli-unit");
        assert_eq!(parse_milli("0.5Ki").unwrap(), 512_000);
        assert_eq!(parse_milli("-1").unwrap(), -1000);
    }

    #[test]
    fn nine_exa_twice_does_not_overflow() {
        let nine_e = parse_milli("9E").unwrap();
        assert_eq!(nine_e, 9_000_000_000_000_000_000_000);
        assert!(nine_e * 2 > i128::from(i64::MAX));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "abc", "1x", "1.2.3", ".", "1ee"] {
            assert!(parse_milli(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pod_requests_sum_containers_and_count_a_slot() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "9E"}}},
                    {"name": "b", "resources": {"requests": {"memory": "9E"}, "limits": {"nvidia.com/gpu": "2"}}}
                ],
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "3"}}}]
            }
        }))
        .unwrap();
        let r = pod_requests(&pod).unwrap();
        assert_eq!(
            r["cpu"], 3000,
            "the init container's 3 CPUs exceed the containers' 1"
        );
        assert_eq!(r["memory"], 2 * parse_milli("9E").unwrap());
        assert_eq!(r["nvidia.com/gpu"], 2000, "a limit defaults the request");
        assert_eq!(r["pods"], 1000);
    }
}
