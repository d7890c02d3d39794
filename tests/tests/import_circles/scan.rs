//! Reading one source file: tokens without comments and literals, then the paths it writes (`use` trees and paths
//! in code), outside `#[cfg(test)]` items.

/// A token of Rust source with comments, string and char literals removed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
    /// A number or a literal: only keeps tokens apart.
    Other,
}

/// Tokens of `src` with their 1-based line numbers.
pub(crate) fn lex(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    // Advances over `c[from..to]`, counting newlines.
    let skip = |from: usize, to: usize, line: &mut usize| {
        *line += c[from..to.min(c.len())].iter().filter(|&&ch| ch == '\n').count();
        to
    };
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i = skip(i, i + 1, &mut line);
        } else if ch == '/' && at(i + 1) == '/' {
            let mut j = i;
            while j < c.len() && c[j] != '\n' {
                j += 1;
            }
            i = j;
        } else if ch == '/' && at(i + 1) == '*' {
            // Block comments nest.
            let (mut j, mut depth) = (i + 2, 1);
            while j < c.len() && depth > 0 {
                if c[j] == '/' && at(j + 1) == '*' {
                    depth += 1;
                    j += 2;
                } else if c[j] == '*' && at(j + 1) == '/' {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            i = skip(i, j, &mut line);
        } else if let Some(end) = raw_string_end(&c, i) {
            i = skip(i, end, &mut line);
            out.push((Tok::Other, line));
        } else if ch == '"' || (ch == 'b' && at(i + 1) == '"') {
            let mut j = if ch == 'b' { i + 2 } else { i + 1 };
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            i = skip(i, j + 1, &mut line);
            out.push((Tok::Other, line));
        } else if ch == '\'' || (ch == 'b' && at(i + 1) == '\'') {
            let q = if ch == 'b' { i + 1 } else { i };
            if at(q + 1) == '\\' {
                // Past the backslash and the escaped character (`'\''`), to the closing quote.
                let mut j = q + 3;
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push((Tok::Other, line));
            } else if at(q + 2) == '\'' {
                i = q + 3;
                out.push((Tok::Other, line));
            } else {
                // A lifetime or a label: its name follows as an identifier, harmless.
                i = q + 1;
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let mut j = i;
            while j < c.len() && (c[j].is_alphanumeric() || c[j] == '_') {
                j += 1;
            }
            out.push((Tok::Ident(c[i..j].iter().collect()), line));
            i = j;
        } else if ch.is_ascii_digit() {
            let mut j = i;
            while j < c.len() && (c[j].is_alphanumeric() || c[j] == '_') {
                j += 1;
            }
            out.push((Tok::Other, line));
            i = j;
        } else if ch == ':' && at(i + 1) == ':' {
            out.push((Tok::PathSep, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// The end (exclusive) of a raw string literal (`r"…"`, `r#"…"#`, `br#"…"#`) starting at `i`, if one does.
pub(crate) fn raw_string_end(c: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    if c.get(j) == Some(&'b') {
        j += 1;
    }
    if c.get(j) != Some(&'r') || (i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')) {
        return None;
    }
    j += 1;
    let hashes = c[j..].iter().take_while(|&&ch| ch == '#').count();
    j += hashes;
    if c.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < c.len() {
        if c[j] == '"' && c[j + 1..].iter().take(hashes).filter(|&&ch| ch == '#').count() == hashes {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(c.len())
}

/// A path written in a file, as written (`crate::a::X`, `super::b`, `child::f`), split into segments.
#[derive(Debug, Clone)]
pub(crate) struct Reference {
    /// The module the path is written in (inline `mod x { … }` blocks included).
    pub(crate) module: Vec<String>,
    pub(crate) segments: Vec<String>,
    pub(crate) line: usize,
    /// Written in a `use` declaration.
    pub(crate) is_use: bool,
    /// A `pub` / `pub(…)` `use`: a re-export.
    pub(crate) is_pub_use: bool,
    /// A `use` at item level of `module` (not in a function body): it binds a name other modules can name.
    pub(crate) binds: bool,
    /// `use … as alias` (or the name a `use` binds when different from the last segment).
    pub(crate) alias: Option<String>,
}

/// What one file says: its paths, and the `#[cfg(test)] mod x;` modules it declares (test-only files).
#[derive(Debug, Default)]
pub(crate) struct FileFacts {
    pub(crate) references: Vec<Reference>,
    pub(crate) test_only_children: Vec<String>,
    /// `#![cfg(test)]`: the whole file is test code.
    pub(crate) test_only: bool,
    /// Inline non-test modules (`mod x { … }`), as module paths.
    pub(crate) inline_modules: Vec<Vec<String>>,
}

/// Reads the paths of one file whose module is `module`; `is_module(path)` says whether a module path exists (to
/// tell a bare child-module path `child::f` from an external crate or a type).
pub(crate) fn scan_file(src: &str, module: &[String], is_module: &dyn Fn(&[String]) -> bool) -> FileFacts {
    let toks = lex(src);
    let tok = |i: usize| toks.get(i).map(|(t, _)| t);
    let is_punct = |i: usize, p: char| tok(i) == Some(&Tok::Punct(p));
    let is_ident = |i: usize, s: &str| matches!(tok(i), Some(Tok::Ident(x)) if x == s);
    let mut facts = FileFacts::default();
    // Inline modules open: (name, brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let line = toks[i].1;
        let current = |inline: &[(String, usize)]| {
            let mut m = module.to_vec();
            m.extend(inline.iter().map(|(n, _)| n.clone()));
            m
        };
        // `#![cfg(test)]` / `#[cfg(test)]` followed by an item: skip it whole.
        if is_punct(i, '#') {
            let inner = is_punct(i + 1, '!');
            let a = if inner { i + 2 } else { i + 1 };
            if is_punct(a, '[')
                && is_ident(a + 1, "cfg")
                && is_punct(a + 2, '(')
                && is_ident(a + 3, "test")
                && is_punct(a + 4, ')')
                && is_punct(a + 5, ']')
            {
                if inner {
                    facts.test_only = true;
                    return facts;
                }
                let (end, test_mod) = skip_item(&toks, a + 6);
                if let Some(name) = test_mod {
                    facts.test_only_children.push(name);
                }
                i = end;
                continue;
            }
        }
        match tok(i) {
            Some(Tok::Punct('{')) => depth += 1,
            Some(Tok::Punct('}')) => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d > depth) {
                    inline.pop();
                }
            }
            Some(Tok::Ident(k)) if k == "mod" => {
                if let (Some(Tok::Ident(name)), true) = (tok(i + 1), is_punct(i + 2, '{')) {
                    inline.push((name.clone(), depth + 1));
                    facts.inline_modules.push(current(&inline));
                    depth += 1;
                    i += 3;
                    continue;
                }
            }
            Some(Tok::Ident(k)) if k == "use" && tok(i + 1) != Some(&Tok::PathSep) => {
                let is_pub_use = is_ident(i.wrapping_sub(1), "pub")
                    || (is_punct(i.wrapping_sub(1), ')') && pub_before_paren(&toks, i - 1));
                let item_depth = inline.last().map_or(0, |(_, d)| *d);
                let mut leaves = Vec::new();
                let mut j = i + 1;
                parse_tree(&toks, &mut j, Vec::new(), &mut leaves);
                for (segments, alias) in leaves {
                    facts.references.push(Reference {
                        module: current(&inline),
                        segments,
                        line,
                        is_use: true,
                        is_pub_use,
                        binds: depth == item_depth,
                        alias,
                    });
                }
                i = j;
                continue;
            }
            _ => {}
        }
        // A path in code: `crate::…`, `super::…`, `self::…`, `$crate::…` or `child::…`.
        if let Some(Tok::Ident(first)) = tok(i)
            && tok(i + 1) == Some(&Tok::PathSep)
            && tok(i.wrapping_sub(1)) != Some(&Tok::PathSep)
            // `pub(in crate::x)` is a visibility, not a use (`for x in crate::f()` is).
            && !(is_ident(i.wrapping_sub(1), "in") && is_punct(i.wrapping_sub(2), '('))
        {
            let mut child = current(&inline);
            child.push(first.clone());
            if matches!(first.as_str(), "crate" | "super" | "self") || is_module(&child) {
                let mut leaves = Vec::new();
                let mut j = i;
                parse_tree(&toks, &mut j, Vec::new(), &mut leaves);
                for (segments, _) in leaves {
                    facts.references.push(Reference {
                        module: current(&inline),
                        segments,
                        line,
                        is_use: false,
                        is_pub_use: false,
                        binds: false,
                        alias: None,
                    });
                }
                i = j.max(i + 1);
                continue;
            }
        }
        i += 1;
    }
    facts
}

/// Whether the `)` at `close` ends `pub(…)`.
pub(crate) fn pub_before_paren(toks: &[(Tok, usize)], close: usize) -> bool {
    let mut k = close;
    while k > 0 {
        k -= 1;
        if toks[k].0 == Tok::Punct('(') {
            return k > 0 && toks[k - 1].0 == Tok::Ident("pub".into());
        }
    }
    false
}

/// Skips the item starting at `i` (after its `#[cfg(test)]`): further attributes, then tokens up to a `;` or the
/// `}` closing its body. Returns the index after it, and the name if the item is `mod name;` (a test-only file).
pub(crate) fn skip_item(toks: &[(Tok, usize)], mut i: usize) -> (usize, Option<String>) {
    let start = i;
    let mut depth = 0usize;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']') => depth = depth.saturating_sub(1),
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return (i + 1, None);
                }
            }
            Tok::Punct(';') if depth == 0 => {
                let words: Vec<&Tok> = toks[start..i].iter().map(|(t, _)| t).collect();
                let name = match words.as_slice() {
                    [.., Tok::Ident(m), Tok::Ident(name)] if m == "mod" => Some(name.clone()),
                    _ => None,
                };
                return (i + 1, name);
            }
            // `#[…]` attributes between `#[cfg(test)]` and the item are bracketed: the depth count skips them.
            _ => {}
        }
        i += 1;
    }
    (i, None)
}

/// Parses a path or a `use` tree at `*i` (`a::b::{self, c::D as E, *}`), appending each leaf path with its alias.
/// Leaves `*i` after the tree.
pub(crate) fn parse_tree(
    toks: &[(Tok, usize)],
    i: &mut usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let mut segments = prefix;
    loop {
        match toks.get(*i).map(|(t, _)| t) {
            Some(Tok::Ident(s)) => {
                segments.push(s.clone());
                *i += 1;
                if toks.get(*i).map(|(t, _)| t) == Some(&Tok::PathSep) {
                    *i += 1;
                    continue;
                }
                break;
            }
            Some(Tok::Punct('$')) => *i += 1,
            Some(Tok::Punct('{')) => {
                *i += 1;
                while *i < toks.len() && toks[*i].0 != Tok::Punct('}') {
                    let before = *i;
                    parse_tree(toks, i, segments.clone(), out);
                    // Past a `,`, or past a token no tree starts with (so the loop always moves on).
                    if toks.get(*i).map(|(t, _)| t) == Some(&Tok::Punct(',')) || *i == before {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            Some(Tok::Punct('*')) => {
                *i += 1;
                break;
            }
            _ => break,
        }
    }
    let mut alias = None;
    if let (Some(Tok::Ident(a)), Some(Tok::Ident(name))) =
        (toks.get(*i).map(|(t, _)| t), toks.get(*i + 1).map(|(t, _)| t))
        && a == "as"
    {
        alias = Some(name.clone());
        *i += 2;
    }
    if segments.last().is_some_and(|s| s == "self") && segments.len() > 1 {
        segments.pop();
    }
    if !segments.is_empty() {
        out.push((segments, alias));
    }
}
