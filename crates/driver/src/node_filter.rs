//! The `nodeSelector` option: a label selector string that restricts which nodes this scheduler instance uses.
//!
//! Syntax is the `kubectl -l` / `metav1.ParseToLabelSelector` set-based syntax (`k8s.io/apimachinery/pkg/labels`
//! `Parse`): comma-separated requirements `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`. Used to
//! partition a cluster between scheduler instances, and by tests to isolate their nodes on a shared control plane.

use std::collections::BTreeMap;

/// One parsed requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Req {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed node label selector; the empty selector matches every node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFilter {
    reqs: Vec<Req>,
}

/// A selector string that does not parse; the message names the offending part.
#[derive(Debug, thiserror::Error)]
#[error("invalid nodeSelector {input:?}: {reason}")]
pub struct NodeFilterError {
    input: String,
    reason: String,
}

impl NodeFilter {
    /// Parses `s` (empty or whitespace = match all).
    pub fn parse(s: &str) -> Result<Self, NodeFilterError> {
        let err = |reason: String| NodeFilterError {
            input: s.to_owned(),
            reason,
        };
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let req = if let Some(k) = part.strip_prefix('!') {
                Req::NotExists(key(k.trim()).map_err(&err)?)
            } else if let Some((k, v)) = part.split_once("!=") {
                Req::NotIn(key(k.trim()).map_err(&err)?, vec![v.trim().to_owned()])
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Req::In(key(k.trim()).map_err(&err)?, vec![v.trim().to_owned()])
            } else if let Some((k, rest)) = split_word(part, " notin ") {
                Req::NotIn(key(k).map_err(&err)?, set(rest).map_err(&err)?)
            } else if let Some((k, rest)) = split_word(part, " in ") {
                Req::In(key(k).map_err(&err)?, set(rest).map_err(&err)?)
            } else {
                Req::Exists(key(part).map_err(&err)?)
            };
            reqs.push(req);
        }
        Ok(Self { reqs })
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
        self.reqs.iter().all(|r| match r {
            Req::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            Req::NotIn(k, vs) => get(k).is_none_or(|v| vs.iter().all(|x| x != v)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }

    /// True when the selector has no requirement.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn split_word<'a>(part: &'a str, word: &str) -> Option<(&'a str, &'a str)> {
    part.find(word)
        .map(|i| (part[..i].trim(), part[i + word.len()..].trim()))
}

fn key(k: &str) -> Result<String, String> {
    if k.is_empty() || k.contains(char::is_whitespace) || k.contains(['(', ')', '=', '!']) {
        return Err(format!("bad label key {k:?}"));
    }
    Ok(k.to_owned())
}

fn set(rest: &str) -> Result<Vec<String>, String> {
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised value list, got {rest:?}"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn parses_and_matches() {
        let f = NodeFilter::parse("phalanx.dev/test-ns=ns1, zone in (a, b),!gpu,rack,tier!=x").unwrap();
        assert!(f.matches(Some(&labels(&[
            ("phalanx.dev/test-ns", "ns1"),
            ("zone", "b"),
            ("rack", "r")
        ]))));
        assert!(!f.matches(Some(&labels(&[
            ("phalanx.dev/test-ns", "ns2"),
            ("zone", "b"),
            ("rack", "r")
        ]))));
        assert!(!f.matches(Some(&labels(&[
            ("phalanx.dev/test-ns", "ns1"),
            ("zone", "c"),
            ("rack", "r")
        ]))));
        assert!(!f.matches(Some(&labels(&[
            ("phalanx.dev/test-ns", "ns1"),
            ("zone", "a"),
            ("rack", "r"),
            ("gpu", "1")
        ]))));
        assert!(!f.matches(Some(&labels(&[("phalanx.dev/test-ns", "ns1"), ("zone", "a")]))));
        assert!(NodeFilter::parse("").unwrap().matches(None));
        assert!(NodeFilter::parse("a notin (x)").unwrap().matches(None));
        assert!(NodeFilter::parse("a in x").is_err());
        assert!(NodeFilter::parse("bad key=1").is_err());
    }
}
