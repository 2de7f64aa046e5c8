//! The envsubst evaluator: pure text in, text out, within a [`Budget`].
//!
//! Every operator runs in time linear (or, for globs with `?` or classes, bounded by the
//! budget) in the sizes of the value and the pattern: the prefix and suffix operators use
//! [`Glob`], the replacement operators a linear substring search whose result size is known
//! before it is built.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::budget::{Budget, BudgetError};
use super::error::EnvsubstError;
use super::glob::Glob;
use super::parse::{Node, is_default_op, parse};

/// Where variable values come from (`None` = undefined).
pub(super) type Lookup<'v> = dyn Fn(&str) -> Option<Cow<'v, str>> + 'v;

/// Evaluates `text` with variables from `lookup` (`None` = undefined) within the default
/// [`super::Limits`]. In strict mode an undefined variable used without a default-style
/// operator is an error; otherwise it reads as the empty string.
pub fn envsubst(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
    strict: bool,
) -> Result<String, EnvsubstError> {
    envsubst_with(text, lookup, strict, &mut Budget::default())
}

/// [`envsubst`] accounting its work and output to `budget`.
pub fn envsubst_with(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
    strict: bool,
    budget: &mut Budget,
) -> Result<String, EnvsubstError> {
    eval_text(text, &|name| lookup(name).map(Cow::Owned), strict, budget)
}

/// [`envsubst`] over a map.
pub fn envsubst_map(
    text: &str,
    vars: &BTreeMap<String, String>,
    strict: bool,
) -> Result<String, EnvsubstError> {
    envsubst_map_with(text, vars, strict, &mut Budget::default())
}

/// [`envsubst_map`] accounting its work and output to `budget`.
pub fn envsubst_map_with(
    text: &str,
    vars: &BTreeMap<String, String>,
    strict: bool,
    budget: &mut Budget,
) -> Result<String, EnvsubstError> {
    eval_text(
        text,
        &|name| vars.get(name).map(|v| Cow::Borrowed(v.as_str())),
        strict,
        budget,
    )
}

/// Parses and evaluates `text`.
pub(super) fn eval_text<'v>(
    text: &str,
    lookup: &Lookup<'v>,
    strict: bool,
    budget: &mut Budget,
) -> Result<String, EnvsubstError> {
    budget.work_units(text.len() as u64)?;
    let nodes = parse(text)?;
    let mut out = String::with_capacity(text.len().min(budget.limits().object_bytes));
    let mut ev = Eval {
        lookup,
        strict,
        budget,
    };
    for n in &nodes {
        ev.node(n, &mut out)?;
    }
    Ok(out)
}

struct Eval<'a, 'v> {
    lookup: &'a Lookup<'v>,
    strict: bool,
    budget: &'a mut Budget,
}

impl Eval<'_, '_> {
    fn push(&mut self, out: &mut String, s: &str) -> Result<(), BudgetError> {
        self.budget.bytes_out(s.len())?;
        out.push_str(s);
        Ok(())
    }

    fn node(&mut self, node: &Node, out: &mut String) -> Result<(), EnvsubstError> {
        match node {
            Node::Text(t) => self.push(out, t)?,
            Node::Expr(e) => {
                let mut args = Vec::with_capacity(e.args.len());
                for a in &e.args {
                    let mut s = String::new();
                    self.node(a, &mut s)?;
                    args.push(s);
                }
                let value = match (self.lookup)(&e.param) {
                    Some(v) => v,
                    None if self.strict && !is_default_op(&e.op) => {
                        return Err(EnvsubstError::VarNotSet(e.param.clone()));
                    }
                    None => Cow::Borrowed(""),
                };
                let result = apply(&e.op, &value, &args, self.budget)?;
                self.push(out, &result)?;
            }
        }
        Ok(())
    }
}

fn apply<'s>(
    op: &str,
    s: &'s str,
    args: &'s [String],
    budget: &mut Budget,
) -> Result<Cow<'s, str>, BudgetError> {
    let arg = |i: usize| args.get(i).map(String::as_str);
    let mapped = |budget: &mut Budget| budget.work_units(s.len() as u64);
    Ok(match op {
        "," => {
            mapped(budget)?;
            Cow::Owned(first_char_mapped(s, false))
        }
        ",," => {
            mapped(budget)?;
            Cow::Owned(s.to_lowercase())
        }
        "^" => {
            mapped(budget)?;
            Cow::Owned(first_char_mapped(s, true))
        }
        "^^" => {
            mapped(budget)?;
            Cow::Owned(s.to_uppercase())
        }
        "#" => match arg(0) {
            None => Cow::Owned(s.len().to_string()),
            Some(p) => trim_prefix(s, p, false, budget)?,
        },
        "##" => match arg(0) {
            None => Cow::Borrowed(s),
            Some(p) => trim_prefix(s, p, true, budget)?,
        },
        "%" => match arg(0) {
            None => Cow::Borrowed(s),
            Some(p) => trim_suffix(s, p, false, budget)?,
        },
        "%%" => match arg(0) {
            None => Cow::Borrowed(s),
            Some(p) => trim_suffix(s, p, true, budget)?,
        },
        ":" => Cow::Owned(substring(s, args)),
        "/" => match args {
            [] => Cow::Borrowed(s),
            [p] => replace(s, p, "", Some(1), budget)?,
            [p, r, ..] => replace(s, p, r, Some(1), budget)?,
        },
        "//" => match args {
            [] => Cow::Borrowed(s),
            [p] => replace(s, p, "", None, budget)?,
            [p, r, ..] => replace(s, p, r, None, budget)?,
        },
        "/#" => match args {
            [p, r] => match s.strip_prefix(p.as_str()) {
                Some(rest) => Cow::Owned(format!("{r}{rest}")),
                None => Cow::Borrowed(s),
            },
            _ => Cow::Borrowed(s),
        },
        "/%" => match args {
            [p, r] => match s.strip_suffix(p.as_str()) {
                Some(rest) => Cow::Owned(format!("{rest}{r}")),
                None => Cow::Borrowed(s),
            },
            _ => Cow::Borrowed(s),
        },
        // Plain `${var}`, default operators and unknown casing combinations.
        _ => {
            if s.is_empty() && !args.is_empty() {
                Cow::Owned(args.concat())
            } else {
                Cow::Borrowed(s)
            }
        }
    })
}

/// Replaces the first `limit` (all, without a limit) occurrences of `from` with `to`. The
/// result's size is computed, and checked against the budget, before it is built: with an
/// empty `from`, `to` goes between every two characters.
fn replace<'s>(
    s: &'s str,
    from: &str,
    to: &str,
    limit: Option<usize>,
    budget: &mut Budget,
) -> Result<Cow<'s, str>, BudgetError> {
    budget.work_units(s.len() as u64 + from.len() as u64)?;
    // An empty `from` matches before every character and at the end.
    let all = if from.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(from).count()
    };
    let occurrences = all.min(limit.unwrap_or(usize::MAX));
    if occurrences == 0 {
        return Ok(Cow::Borrowed(s));
    }
    let size =
        (s.len() - occurrences * from.len()).saturating_add(occurrences.saturating_mul(to.len()));
    budget.fits(size)?;
    budget.work_units(size as u64)?;
    Ok(Cow::Owned(match limit {
        Some(n) => s.replacen(from, to, n),
        None => s.replace(from, to),
    }))
}

fn first_char_mapped(s: &str, upper: bool) -> String {
    let mut chars = s.chars();
    match chars.next() {
        None => String::new(),
        Some(c) => {
            let mut out: String = if upper {
                c.to_uppercase().collect()
            } else {
                c.to_lowercase().collect()
            };
            out.push_str(chars.as_str());
            out
        }
    }
}

/// Bash-like substring on bytes (as Flux does); a position or length that is not an integer
/// leaves the value unchanged.
fn substring(s: &str, args: &[String]) -> String {
    let bytes = s.as_bytes();
    let len = bytes.len() as i64;
    let slice = |a: i64, b: i64| -> String {
        let a = a.clamp(0, len) as usize;
        let b = b.clamp(0, len) as usize;
        if a >= b {
            return String::new();
        }
        String::from_utf8_lossy(&bytes[a..b]).into_owned()
    };
    let Some(first) = args.first() else {
        return s.to_string();
    };
    let Ok(mut pos) = first.parse::<i64>() else {
        return s.to_string();
    };
    if pos < 0 {
        pos = len.saturating_add(pos).max(0);
    }
    let Some(second) = args.get(1) else {
        return if pos < len {
            slice(pos, len)
        } else {
            String::new()
        };
    };
    let Ok(length) = second.parse::<i64>() else {
        return s.to_string();
    };
    if length < 0 {
        let end = len.saturating_add(length);
        if end < pos {
            return String::new();
        }
        return slice(pos, end);
    }
    if pos.saturating_add(length) >= len {
        return if pos < len {
            slice(pos, len)
        } else {
            String::new()
        };
    }
    slice(pos, pos + length)
}

/// Removes the shortest (or longest) non-empty prefix matching `pattern` (a malformed pattern
/// keeps the value).
fn trim_prefix<'s>(
    s: &'s str,
    pattern: &str,
    longest: bool,
    budget: &mut Budget,
) -> Result<Cow<'s, str>, BudgetError> {
    let Ok(glob) = Glob::parse(pattern, budget)? else {
        return Ok(Cow::Borrowed(s));
    };
    Ok(match glob.prefix(s, longest, budget)? {
        Some(end) => Cow::Borrowed(&s[end..]),
        None => Cow::Borrowed(s),
    })
}

/// Removes the shortest (or longest) non-empty suffix matching `pattern` (a malformed pattern
/// keeps the value).
fn trim_suffix<'s>(
    s: &'s str,
    pattern: &str,
    longest: bool,
    budget: &mut Budget,
) -> Result<Cow<'s, str>, BudgetError> {
    let Ok(glob) = Glob::parse(pattern, budget)? else {
        return Ok(Cow::Borrowed(s));
    };
    Ok(match glob.suffix(s, longest, budget)? {
        Some(start) => Cow::Borrowed(&s[..start]),
        None => Cow::Borrowed(s),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::budget::Limits;
    use super::*;

    #[test]
    fn replacement_size_is_checked_before_building() {
        let big = "a".repeat(1000);
        let mut b = Budget::new(Limits {
            object_bytes: 100_000,
            ..Default::default()
        });
        // 1001 insertions of 1000 bytes: about 1 MB, over the limit.
        assert_eq!(
            replace(&big, "", &big, None, &mut b),
            Err(BudgetError::ObjectBytes { limit: 100_000 })
        );
        assert_eq!(replace("abc", "", "-", None, &mut b).unwrap(), "-a-b-c-");
        assert_eq!(replace("abab", "b", "", Some(1), &mut b).unwrap(), "aab");
        assert_eq!(replace("abab", "x", "y", None, &mut b).unwrap(), "abab");
    }
}
