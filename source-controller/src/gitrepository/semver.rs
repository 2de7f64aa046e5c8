//! SemVer constraints in the style of Masterminds/semver v3 (what Flux uses for `ref.semver`).
//!
//! Syntax: comparators separated by spaces or commas are ANDed, groups separated by `||` are
//! ORed. Operators: `=`, `!=`, `>`, `<`, `>=`, `=>`, `<=`, `=<`, `~`, `~>`, `^`, hyphen ranges
//! (`1.2 - 1.4.5`) and wildcards (`1.2.x`, `1.*`, `*`). A leading `v` is accepted on versions.
//! Partial versions fill missing parts with zero for `>=`/`<`, and act as wildcards for `=`,
//! `>` and `<=`. A pre-release version only matches a comparator group that itself mentions
//! a pre-release.

use semver::{Prerelease, Version};

/// Why a constraint could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConstraintError {
    #[error("empty semver constraint")]
    Empty,
    #[error("improper constraint: {0}")]
    Invalid(String),
}

/// A parsed partial version: `1`, `1.2`, `1.2.3`, `1.2.3-rc.1`; `None` parts are wildcards.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Partial {
    major: Option<u64>,
    minor: Option<u64>,
    patch: Option<u64>,
    pre: Prerelease,
}

impl Partial {
    fn floor(&self) -> Version {
        let mut v = Version::new(
            self.major.unwrap_or(0),
            self.minor.unwrap_or(0),
            self.patch.unwrap_or(0),
        );
        v.pre = self.pre.clone();
        v
    }

    /// The first version above every version this partial denotes (`None`: unbounded).
    fn ceiling(&self) -> Option<Version> {
        match (self.major, self.minor, self.patch) {
            (None, _, _) => None,
            (Some(m), None, _) => Some(Version::new(m.checked_add(1)?, 0, 0)),
            (Some(m), Some(n), None) => Some(Version::new(m, n.checked_add(1)?, 0)),
            (Some(_), Some(_), Some(_)) => None,
        }
    }

    fn is_exact(&self) -> bool {
        self.patch.is_some()
    }
}

fn parse_part(s: &str, whole: &str) -> Result<Option<u64>, ConstraintError> {
    if matches!(s, "x" | "X" | "*") {
        return Ok(None);
    }
    s.parse::<u64>()
        .map(Some)
        .map_err(|_| ConstraintError::Invalid(whole.to_string()))
}

fn parse_partial(raw: &str) -> Result<Partial, ConstraintError> {
    let s = raw.trim();
    let s = s.strip_prefix('v').unwrap_or(s);
    if s.is_empty() {
        return Err(ConstraintError::Invalid(raw.to_string()));
    }
    // Build metadata is ignored for precedence.
    let s = s.split_once('+').map_or(s, |(a, _)| a);
    let (core, pre) = match s.split_once('-') {
        Some((c, p)) => (
            c,
            Prerelease::new(p).map_err(|_| ConstraintError::Invalid(raw.to_string()))?,
        ),
        None => (s, Prerelease::EMPTY),
    };
    let mut parts = core.split('.');
    let major = parse_part(parts.next().unwrap_or(""), raw)?;
    let minor = match parts.next() {
        Some(p) => parse_part(p, raw)?,
        None => None,
    };
    let patch = match parts.next() {
        Some(p) => parse_part(p, raw)?,
        None => None,
    };
    if parts.next().is_some() {
        return Err(ConstraintError::Invalid(raw.to_string()));
    }
    // A wildcard makes every later part a wildcard.
    let minor = major.and(minor);
    let patch = minor.and(patch);
    Ok(Partial {
        major,
        minor,
        patch,
        pre,
    })
}

/// One bound of a range.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cmp {
    Ge(Version),
    Gt(Version),
    Lt(Version),
    Le(Version),
    Ne(Partial),
}

impl Cmp {
    fn matches(&self, v: &Version) -> bool {
        match self {
            Cmp::Ge(b) => v >= b,
            Cmp::Gt(b) => v > b,
            Cmp::Lt(b) => v < b,
            Cmp::Le(b) => v <= b,
            Cmp::Ne(p) => !in_partial(p, v),
        }
    }
}

fn in_partial(p: &Partial, v: &Version) -> bool {
    if p.is_exact() {
        return *v == p.floor();
    }
    let lo = p.floor();
    v >= &lo && p.ceiling().is_none_or(|hi| *v < hi)
}

/// A comparator group (ANDed bounds) and whether it mentions a pre-release.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Group {
    bounds: Vec<Cmp>,
    allows_pre: bool,
}

/// A parsed constraint (ORed groups).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constraint {
    groups: Vec<Group>,
}

fn split_op(tok: &str) -> (&str, &str) {
    for op in ["!=", ">=", "=>", "<=", "=<", "~>", ">", "<", "=", "~", "^"] {
        if let Some(rest) = tok.strip_prefix(op) {
            return (op, rest.trim());
        }
    }
    ("", tok)
}

fn comparator(op: &str, operand: &str, out: &mut Vec<Cmp>) -> Result<bool, ConstraintError> {
    let p = parse_partial(operand)?;
    let has_pre = !p.pre.is_empty();
    let exact_or_range = |out: &mut Vec<Cmp>, p: &Partial| {
        if p.is_exact() {
            out.push(Cmp::Ge(p.floor()));
            out.push(Cmp::Le(p.floor()));
        } else {
            out.push(Cmp::Ge(p.floor()));
            if let Some(hi) = p.ceiling() {
                out.push(Cmp::Lt(hi));
            }
        }
    };
    match op {
        "" | "=" => exact_or_range(out, &p),
        "!=" => out.push(Cmp::Ne(p)),
        ">" => match p.ceiling() {
            Some(hi) if !p.is_exact() => out.push(Cmp::Ge(hi)),
            _ if p.major.is_none() => out.push(Cmp::Lt(Version::new(0, 0, 0))),
            _ => out.push(Cmp::Gt(p.floor())),
        },
        ">=" | "=>" => out.push(Cmp::Ge(p.floor())),
        "<" => out.push(Cmp::Lt(p.floor())),
        "<=" | "=<" => match p.ceiling() {
            Some(hi) if !p.is_exact() => out.push(Cmp::Lt(hi)),
            None if p.major.is_none() => {}
            _ => out.push(Cmp::Le(p.floor())),
        },
        "~" | "~>" => {
            out.push(Cmp::Ge(p.floor()));
            let hi = match (p.major, p.minor) {
                (None, _) => None,
                (Some(m), None) => m.checked_add(1).map(|m| Version::new(m, 0, 0)),
                (Some(m), Some(n)) => n.checked_add(1).map(|n| Version::new(m, n, 0)),
            };
            if let Some(hi) = hi {
                out.push(Cmp::Lt(hi));
            }
        }
        "^" => {
            out.push(Cmp::Ge(p.floor()));
            let hi = match (p.major, p.minor, p.patch) {
                (None, _, _) => None,
                (Some(0), None, _) => Some(Version::new(1, 0, 0)),
                (Some(0), Some(0), None) => Some(Version::new(0, 1, 0)),
                (Some(0), Some(0), Some(z)) => z.checked_add(1).map(|z| Version::new(0, 0, z)),
                (Some(0), Some(n), _) => n.checked_add(1).map(|n| Version::new(0, n, 0)),
                (Some(m), _, _) => m.checked_add(1).map(|m| Version::new(m, 0, 0)),
            };
            if let Some(hi) = hi {
                out.push(Cmp::Lt(hi));
            }
        }
        other => return Err(ConstraintError::Invalid(other.to_string())),
    }
    Ok(has_pre)
}

impl Constraint {
    /// Parses a Masterminds-style constraint.
    pub fn parse(input: &str) -> Result<Self, ConstraintError> {
        if input.trim().is_empty() {
            return Err(ConstraintError::Empty);
        }
        let mut groups = Vec::new();
        for raw_group in input.split("||") {
            let tokens: Vec<&str> = raw_group
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|t| !t.is_empty())
                .collect();
            if tokens.is_empty() {
                return Err(ConstraintError::Invalid(input.to_string()));
            }
            // Join an operator written apart from its version (`>= 1.2`).
            let mut merged: Vec<String> = Vec::new();
            let mut i = 0;
            while i < tokens.len() {
                let t = tokens[i];
                let (op, rest) = split_op(t);
                if !op.is_empty() && rest.is_empty() {
                    let Some(next) = tokens.get(i + 1) else {
                        return Err(ConstraintError::Invalid(input.to_string()));
                    };
                    merged.push(format!("{op}{next}"));
                    i += 2;
                } else {
                    merged.push(t.to_string());
                    i += 1;
                }
            }
            let mut bounds = Vec::new();
            let mut allows_pre = false;
            let mut j = 0;
            while j < merged.len() {
                // Hyphen range: `A - B`.
                if merged.get(j + 1).is_some_and(|t| t == "-") {
                    let Some(hi) = merged.get(j + 2) else {
                        return Err(ConstraintError::Invalid(input.to_string()));
                    };
                    allows_pre |= comparator(">=", &merged[j], &mut bounds)?;
                    allows_pre |= comparator("<=", hi, &mut bounds)?;
                    j += 3;
                    continue;
                }
                let (op, operand) = split_op(&merged[j]);
                allows_pre |= comparator(op, operand, &mut bounds)?;
                j += 1;
            }
            groups.push(Group { bounds, allows_pre });
        }
        Ok(Constraint { groups })
    }

    /// Whether `v` satisfies the constraint.
    pub fn matches(&self, v: &Version) -> bool {
        self.groups
            .iter()
            .any(|g| (v.pre.is_empty() || g.allows_pre) && g.bounds.iter().all(|b| b.matches(v)))
    }
}

/// Parses a tag name as a version the way Masterminds' `NewVersion` does: an optional `v`
/// prefix and optionally missing minor/patch (`v1.2` is `1.2.0`).
pub fn parse_version(tag: &str) -> Option<Version> {
    let s = tag.strip_prefix('v').unwrap_or(tag);
    if let Ok(v) = Version::parse(s) {
        return Some(v);
    }
    let (core, rest) = match s.find(['-', '+']) {
        Some(i) => s.split_at(i),
        None => (s, ""),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if parts.is_empty() || parts.len() > 3 || parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    let mut full = parts.join(".");
    for _ in parts.len()..3 {
        full.push_str(".0");
    }
    full.push_str(rest);
    Version::parse(&full).ok()
}

/// The highest version among `tags` satisfying `constraint` (ties keep the first seen).
pub fn select_highest<'a, I>(constraint: &Constraint, tags: I) -> Option<(&'a str, Version)>
where
    I: IntoIterator<Item = &'a str>,
{
    let mut best: Option<(&str, Version)> = None;
    for t in tags {
        let Some(v) = parse_version(t) else { continue };
        if !constraint.matches(&v) {
            continue;
        }
        if best.as_ref().is_none_or(|(_, b)| v > *b) {
            best = Some((t, v));
        }
    }
    best
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn m(c: &str, v: &str) -> bool {
        Constraint::parse(c)
            .unwrap()
            .matches(&parse_version(v).unwrap())
    }

    #[test]
    fn comparison_operators() {
        assert!(m(">=1.2.0", "1.2.0"));
        assert!(!m(">=1.2.0", "1.1.9"));
        assert!(m(">1.2.0", "1.2.1"));
        assert!(!m(">1.2.0", "1.2.0"));
        assert!(m("<2", "1.99.0"));
        assert!(!m("<2", "2.0.0"));
        assert!(m("<=1.2", "1.2.9"));
        assert!(!m("<=1.2", "1.3.0"));
        assert!(m(">1.2", "1.3.0"));
        assert!(!m(">1.2", "1.2.9"));
        assert!(m("!=1.2.3", "1.2.4"));
        assert!(!m("!=1.2.3", "1.2.3"));
        assert!(m("=1.2.3", "1.2.3"));
        assert!(m("1.2", "1.2.7"));
        assert!(!m("1.2", "1.3.0"));
    }

    #[test]
    fn tilde_and_caret() {
        assert!(m("~1.2.3", "1.2.9"));
        assert!(!m("~1.2.3", "1.3.0"));
        assert!(m("~1", "1.9.0"));
        assert!(!m("~1", "2.0.0"));
        assert!(m("^1.2.3", "1.9.9"));
        assert!(!m("^1.2.3", "2.0.0"));
        assert!(!m("^1.2.3", "1.2.2"));
        assert!(m("^0.2.3", "0.2.9"));
        assert!(!m("^0.2.3", "0.3.0"));
        assert!(m("^0.0.3", "0.0.3"));
        assert!(!m("^0.0.3", "0.0.4"));
        assert!(m("~>2.1", "2.1.5"));
    }

    #[test]
    fn wildcards_ranges_and_groups() {
        assert!(m("*", "3.4.5"));
        assert!(m("1.2.x", "1.2.0"));
        assert!(!m("1.2.x", "1.3.0"));
        assert!(m("1.*", "1.9.0"));
        assert!(m("1.2 - 1.4.5", "1.4.5"));
        assert!(!m("1.2 - 1.4.5", "1.4.6"));
        assert!(!m("1.2 - 1.4.5", "1.1.9"));
        assert!(m(">= 1.2, < 1.4", "1.3.0"));
        assert!(!m(">= 1.2, < 1.4", "1.4.0"));
        assert!(m("<1.0 || >=2.0", "0.5.0"));
        assert!(m("<1.0 || >=2.0", "2.1.0"));
        assert!(!m("<1.0 || >=2.0", "1.5.0"));
    }

    #[test]
    fn prereleases_need_a_prerelease_constraint() {
        assert!(!m(">=1.0.0", "1.1.0-rc.1"));
        assert!(m(">=1.0.0-0", "1.1.0-rc.1"));
        assert!(m(">=1.1.0-rc.1", "1.1.0-rc.2"));
    }

    #[test]
    fn invalid_constraints_are_errors() {
        assert_eq!(Constraint::parse(""), Err(ConstraintError::Empty));
        assert!(Constraint::parse("abc").is_err());
        assert!(Constraint::parse(">=").is_err());
        assert!(Constraint::parse("1.2.3.4").is_err());
        assert!(Constraint::parse("1.2 -").is_err());
    }

    #[test]
    fn selects_the_highest_matching_tag() {
        let c = Constraint::parse(">=1.0.0 <2.0.0").unwrap();
        let tags = [
            "v0.9.0",
            "v1.0.0",
            "v1.10.0",
            "v1.9.3",
            "v2.0.0",
            "latest",
            "v1.11.0-rc.1",
        ];
        let (t, v) = select_highest(&c, tags.iter().copied()).unwrap();
        assert_eq!(t, "v1.10.0");
        assert_eq!(v, Version::new(1, 10, 0));
        let none = Constraint::parse(">=5").unwrap();
        assert!(select_highest(&none, tags.iter().copied()).is_none());
    }

    #[test]
    fn partial_tag_versions_parse() {
        assert_eq!(parse_version("v1.2"), Some(Version::new(1, 2, 0)));
        assert_eq!(parse_version("3"), Some(Version::new(3, 0, 0)));
        assert_eq!(parse_version("1.2.3-rc.1").unwrap().pre.as_str(), "rc.1");
        assert_eq!(parse_version("release"), None);
    }
}
