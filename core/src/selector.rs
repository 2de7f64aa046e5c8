//! Kubernetes label selectors in their string form (`a=b,c!=d,e in (f,g),h notin (i),!j,k`),
//! used for labels and annotations alike: kustomize's patch and replacement targets, Flux's
//! `spec.ignore` targets and health-check selectors.
//!
//! Two readings of the same syntax:
//! - [`LabelSelector::parse`] is lenient: empty terms are skipped and a key is anything without
//!   white space;
//! - [`LabelSelector::parse_strict`] is the grammar kustomize applies to `labelSelector` and
//!   `annotationSelector`: an empty term is an error, keys are made of letters, digits and
//!   `-_./`, `key>n` / `key<n` compare integers, and `in(`/`notin(` need no space before the
//!   list.

use serde_json::{Map, Value};

/// A selector expression that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorParseError {
    /// `in` / `notin` without a parenthesised list.
    #[error("expected a (...) list in {0:?}")]
    ExpectedList(String),
    /// A requirement with an empty key or a key with white space (strict parsing: with any
    /// character other than a letter, a digit or `-_./`).
    #[error("invalid key in {0:?}")]
    InvalidKey(String),
    /// Strict parsing: an empty requirement (`a=b,,c`, a trailing comma).
    #[error("empty requirement in {0:?}")]
    EmptyRequirement(String),
    /// Strict parsing: `key>n` or `key<n` where `n` is not an integer.
    #[error("{0:?}: not an integer")]
    NotAnInteger(String),
}

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// `key`
    Exists(String),
    /// `!key`
    NotExists(String),
    /// `key=value` or `key==value`
    Equals(String, String),
    /// `key!=value`
    NotEquals(String, String),
    /// `key in (a,b)`
    In(String, Vec<String>),
    /// `key notin (a,b)`
    NotIn(String, Vec<String>),
    /// `key>n`: the value is an integer greater than `n`.
    GreaterThan(String, i64),
    /// `key<n`: the value is an integer less than `n`.
    LessThan(String, i64),
}

impl Requirement {
    /// The label key the requirement is about.
    pub fn key(&self) -> &str {
        match self {
            Requirement::Exists(k)
            | Requirement::NotExists(k)
            | Requirement::Equals(k, _)
            | Requirement::NotEquals(k, _)
            | Requirement::In(k, _)
            | Requirement::NotIn(k, _)
            | Requirement::GreaterThan(k, _)
            | Requirement::LessThan(k, _) => k,
        }
    }

    /// Whether the value of the key (`None`: absent) satisfies the requirement.
    pub fn matches_value(&self, value: Option<&str>) -> bool {
        match self {
            Requirement::Exists(_) => value.is_some(),
            Requirement::NotExists(_) => value.is_none(),
            Requirement::Equals(_, v) => value == Some(v.as_str()),
            Requirement::NotEquals(_, v) => value != Some(v.as_str()),
            Requirement::In(_, vs) => value.is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(_, vs) => value.is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::GreaterThan(_, n) => value
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x > *n),
            Requirement::LessThan(_, n) => value
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x < *n),
        }
    }
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on the commas that are not inside a `(...)` list. A `)` without its `(` either
/// counts as nothing (`strict == false`) or leaves the rest in one term, which strict parsing
/// then rejects (`strict == true`).
fn split_terms(expr: &str, strict: bool) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i64;
    let mut start = 0;
    for (i, c) in expr.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if strict || depth > 0 => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&expr[start..]);
    parts
}

fn parse_term(term: &str) -> Result<Requirement, SelectorParseError> {
    let set_op = |op: &str| -> Option<Result<(String, Vec<String>), SelectorParseError>> {
        let (key, rest) = term.split_once(op)?;
        let inner = rest
            .trim()
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(|| SelectorParseError::ExpectedList(term.to_string()));
        Some(inner.map(|inner| {
            (
                key.trim().to_string(),
                inner
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect(),
            )
        }))
    };
    let req = if let Some(r) = set_op(" notin ") {
        let (k, vs) = r?;
        Requirement::NotIn(k, vs)
    } else if let Some(r) = set_op(" in ") {
        let (k, vs) = r?;
        Requirement::In(k, vs)
    } else if let Some((k, v)) = term.split_once("!=") {
        Requirement::NotEquals(k.trim().into(), v.trim().into())
    } else if let Some((k, v)) = term.split_once("==") {
        Requirement::Equals(k.trim().into(), v.trim().into())
    } else if let Some((k, v)) = term.split_once('=') {
        Requirement::Equals(k.trim().into(), v.trim().into())
    } else if let Some(k) = term.strip_prefix('!') {
        Requirement::NotExists(k.trim().into())
    } else {
        Requirement::Exists(term.to_string())
    };
    let key = req.key();
    if key.is_empty() || key.contains(char::is_whitespace) {
        return Err(SelectorParseError::InvalidKey(term.to_string()));
    }
    Ok(req)
}

/// `key in (a,b)` / `key notin(a,b)` for strict parsing; `None` when `term` is not one (a term
/// without a parenthesised list after the operator is read as something else).
fn strict_set_op(term: &str, word: &str) -> Option<(String, Vec<String>)> {
    let spaced = format!(" {word} ");
    let open = format!(" {word}(");
    let at = term.find(&spaced).or_else(|| term.find(&open))?;
    let key = term[..at].trim().to_string();
    let rest = term[at + 1 + word.len()..].trim();
    let inner = rest.strip_prefix('(')?.strip_suffix(')')?;
    Some((
        key,
        inner.split(',').map(|v| v.trim().to_string()).collect(),
    ))
}

fn parse_term_strict(term: &str) -> Result<Requirement, SelectorParseError> {
    let int = |v: &str| {
        v.trim()
            .parse::<i64>()
            .map_err(|_| SelectorParseError::NotAnInteger(term.to_string()))
    };
    let req = if let Some(k) = term.strip_prefix('!') {
        Requirement::NotExists(k.trim().to_string())
    } else if let Some((k, vs)) = strict_set_op(term, "notin") {
        Requirement::NotIn(k, vs)
    } else if let Some((k, vs)) = strict_set_op(term, "in") {
        Requirement::In(k, vs)
    } else if let Some((k, v)) = term.split_once("!=") {
        Requirement::NotEquals(k.trim().into(), v.trim().into())
    } else if let Some((k, v)) = term.split_once("==") {
        Requirement::Equals(k.trim().into(), v.trim().into())
    } else if let Some((k, v)) = term.split_once('=') {
        Requirement::Equals(k.trim().into(), v.trim().into())
    } else if let Some((k, v)) = term.split_once('>') {
        Requirement::GreaterThan(k.trim().into(), int(v)?)
    } else if let Some((k, v)) = term.split_once('<') {
        Requirement::LessThan(k.trim().into(), int(v)?)
    } else {
        Requirement::Exists(term.to_string())
    };
    let key = req.key();
    let valid = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if !valid {
        return Err(SelectorParseError::InvalidKey(term.to_string()));
    }
    Ok(req)
}

impl LabelSelector {
    /// Parses a selector expression with the strict grammar described in the module
    /// documentation; the empty (or blank) expression matches everything.
    pub fn parse_strict(expr: &str) -> Result<Self, SelectorParseError> {
        if expr.trim().is_empty() {
            return Ok(LabelSelector::default());
        }
        split_terms(expr, true)
            .into_iter()
            .map(|term| {
                let term = term.trim();
                if term.is_empty() {
                    return Err(SelectorParseError::EmptyRequirement(expr.to_string()));
                }
                parse_term_strict(term)
            })
            .collect::<Result<Vec<_>, _>>()
            .map(LabelSelector)
    }

    /// Parses a selector expression; the empty expression matches everything.
    pub fn parse(expr: &str) -> Result<Self, SelectorParseError> {
        split_terms(expr, false)
            .into_iter()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(parse_term)
            .collect::<Result<Vec<_>, _>>()
            .map(LabelSelector)
    }

    /// The requirements, in the order written.
    pub fn requirements(&self) -> &[Requirement] {
        &self.0
    }

    /// Whether the selector has no requirement (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a lookup of values by key satisfies every requirement.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.matches_by(get)
    }

    /// Like [`LabelSelector::matches_with`], for a lookup that gives owned or borrowed text
    /// (`String`, `Cow<str>`, ...), e.g. one that reads non-string values as their text.
    pub fn matches_by<S: AsRef<str>>(&self, get: impl Fn(&str) -> Option<S>) -> bool {
        self.0.iter().all(|r| {
            let value = get(r.key());
            r.matches_value(value.as_ref().map(AsRef::as_ref))
        })
    }

    /// Whether a JSON label (or annotation) map satisfies every requirement; values that are
    /// not strings count as absent.
    pub fn matches(&self, map: Option<&Map<String, Value>>) -> bool {
        self.matches_with(|k| map.and_then(|m| m.get(k)).and_then(Value::as_str))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_and_matches() {
        let labels = json!({"app": "web", "tier": "front", "n": 1});
        let m = labels.as_object();
        let ok = |e: &str| LabelSelector::parse(e).unwrap().matches(m);
        assert!(ok(""));
        assert!(ok("app=web"));
        assert!(ok("app==web"));
        assert!(ok("app!=db"));
        assert!(ok("app in (web, db)"));
        assert!(!ok("app notin (web)"));
        assert!(ok("missing notin (web)"));
        assert!(ok("!missing"));
        assert!(!ok("!app"));
        assert!(ok("tier"));
        assert!(!ok("n"), "a number is not a label value");
        assert!(ok("app in (web),tier=front"));
        assert!(!ok("app in (web),tier=back"));
        assert_eq!(
            LabelSelector::parse("a in b"),
            Err(SelectorParseError::ExpectedList("a in b".into()))
        );
        assert!(matches!(
            LabelSelector::parse("a b=c"),
            Err(SelectorParseError::InvalidKey(_))
        ));
        assert!(LabelSelector::parse(" , ").unwrap().is_empty());
    }

    #[test]
    fn strict_grammar() {
        let labels = json!({"a": "x", "n": "7", "e": ""});
        let m = labels.as_object();
        let ok = |e: &str| LabelSelector::parse_strict(e).map(|s| s.matches(m));
        assert_eq!(ok(""), Ok(true));
        assert_eq!(ok("  "), Ok(true));
        assert_eq!(ok("a=x"), Ok(true));
        assert_eq!(ok("a==x,n"), Ok(true));
        assert_eq!(ok("a!=x"), Ok(false));
        assert_eq!(ok("a in (x, y)"), Ok(true));
        assert_eq!(ok("a in(x)"), Ok(true));
        assert_eq!(ok("a notin(x)"), Ok(false));
        assert_eq!(ok("!b"), Ok(true));
        assert_eq!(ok("n>6,n<8"), Ok(true));
        assert_eq!(ok("n>7"), Ok(false));
        assert_eq!(ok("a>1"), Ok(false), "not a number: no match");
        // An empty value in a list is a value.
        assert_eq!(ok("e in (x,)"), Ok(true));
        assert_eq!(
            ok("a=x,"),
            Err(SelectorParseError::EmptyRequirement("a=x,".into()))
        );
        assert_eq!(
            ok("n>z"),
            Err(SelectorParseError::NotAnInteger("n>z".into()))
        );
        assert!(matches!(
            ok("a in x"),
            Err(SelectorParseError::InvalidKey(_))
        ));
        assert!(matches!(ok("a:b"), Err(SelectorParseError::InvalidKey(_))));
        assert!(matches!(ok("!a=b"), Err(SelectorParseError::InvalidKey(_))));
        // An unmatched `)` keeps the rest in one term, which is then invalid.
        assert!(ok("a in (x)), b").is_err());
        assert!(ok("a=x,,b").is_err());
    }

    #[test]
    fn matches_owned_values() {
        let sel = LabelSelector::parse_strict("n=1,m").unwrap();
        let get = |k: &str| match k {
            "n" => Some(String::from("1")),
            "m" => Some(String::new()),
            _ => None,
        };
        assert!(sel.matches_by(get));
        assert!(!sel.matches_by(|_| None::<String>));
    }
}
