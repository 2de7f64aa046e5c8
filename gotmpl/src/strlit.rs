//! Go literal syntax: `strconv.Unquote`, `strconv.UnquoteChar`, and the number rules of
//! `parse.NumberNode` (base prefixes, underscores, floats, character constants).

use crate::ast::Number;
use crate::lex::Kind;

/// Decodes one escape or character at the start of `s` (after the opening quote).
/// Returns the char and the rest.
fn unquote_char(s: &str, quote: char) -> Option<(char, &str)> {
    let mut it = s.chars();
    let c = it.next()?;
    if c == quote && (quote == '\'' || quote == '"') {
        return None;
    }
    if c != '\\' {
        return Some((c, it.as_str()));
    }
    let e = it.next()?;
    let rest = it.as_str();
    let simple = match e {
        'a' => Some('\x07'),
        'b' => Some('\x08'),
        'f' => Some('\x0c'),
        'n' => Some('\n'),
        'r' => Some('\r'),
        't' => Some('\t'),
        'v' => Some('\x0b'),
        '\\' => Some('\\'),
        '\'' | '"' => {
            if e != quote {
                return None;
            }
            Some(e)
        }
        _ => None,
    };
    if let Some(c) = simple {
        return Some((c, rest));
    }
    let hex = |n: usize| -> Option<(u32, &str)> {
        if rest.len() < n || !rest.is_char_boundary(n) {
            return None;
        }
        let v = u32::from_str_radix(&rest[..n], 16).ok()?;
        Some((v, &rest[n..]))
    };
    match e {
        'x' => {
            let (v, r) = hex(2)?;
            // A \x escape is a byte; in valid UTF-8 strings only ASCII survives as a char.
            if v >= 0x80 {
                return None;
            }
            Some((char::from_u32(v)?, r))
        }
        'u' => {
            let (v, r) = hex(4)?;
            Some((char::from_u32(v)?, r))
        }
        'U' => {
            let (v, r) = hex(8)?;
            Some((char::from_u32(v)?, r))
        }
        '0'..='7' => {
            if rest.len() < 2 {
                return None;
            }
            let v = u32::from_str_radix(&format!("{e}{}", &rest[..2]), 8).ok()?;
            if v > 0x7f {
                return None;
            }
            Some((char::from_u32(v)?, &rest[2..]))
        }
        _ => None,
    }
}

/// `strconv.Unquote` for `"..."` and raw strings. `None` on invalid syntax.
pub(crate) fn unquote(q: &str) -> Option<String> {
    if q.len() < 2 {
        return None;
    }
    if q.starts_with('`') && q.ends_with('`') {
        return Some(q[1..q.len() - 1].replace('\r', ""));
    }
    if !(q.starts_with('"') && q.ends_with('"')) {
        return None;
    }
    let mut s = &q[1..q.len() - 1];
    let mut out = String::with_capacity(s.len());
    while !s.is_empty() {
        if s.starts_with('\n') {
            return None;
        }
        let (c, rest) = unquote_char(s, '"')?;
        out.push(c);
        s = rest;
    }
    Some(out)
}

fn underscore_ok(s: &str) -> bool {
    // Go: underscores must separate digits (or follow a base prefix).
    let b = s.trim_start_matches(['+', '-']).as_bytes();
    let mut prev = b'0';
    let mut i = 0;
    let has_prefix = b.len() >= 2 && b[0] == b'0' && matches!(b[1] | 0x20, b'x' | b'b' | b'o');
    if has_prefix {
        i = 2;
        prev = b'0';
    }
    while i < b.len() {
        let c = b[i];
        if c == b'_' {
            if prev == b'_' || !(prev.is_ascii_hexdigit() || has_prefix && i == 2) {
                return false;
            }
        } else if prev == b'_' && !c.is_ascii_hexdigit() {
            return false;
        }
        prev = c;
        i += 1;
    }
    prev != b'_'
}

/// `strconv.ParseInt(text, 0, 64)` / `ParseUint`: (value fits i64, value fits u64).
fn parse_int(text: &str) -> (Option<i64>, Option<u64>) {
    if text.contains('_') && !underscore_ok(text) {
        return (None, None);
    }
    let clean: String = text.chars().filter(|c| *c != '_').collect();
    let (neg, body) = match clean.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, clean.strip_prefix('+').unwrap_or(&clean)),
    };
    let (radix, digits) =
        if let Some(d) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (16, d)
        } else if let Some(d) = body.strip_prefix("0b").or_else(|| body.strip_prefix("0B")) {
            (2, d)
        } else if let Some(d) = body.strip_prefix("0o").or_else(|| body.strip_prefix("0O")) {
            (8, d)
        } else if body.len() > 1 && body.starts_with('0') {
            (8, &body[1..])
        } else {
            (10, body)
        };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return (None, None);
    }
    let Ok(mag) = u128::from_str_radix(digits, radix) else {
        return (None, None);
    };
    let i = if neg {
        if mag <= i64::MAX as u128 + 1 {
            Some((-(mag as i128)) as i64)
        } else {
            None
        }
    } else if mag <= i64::MAX as u128 {
        Some(mag as i64)
    } else {
        None
    };
    let u = if !neg && mag <= u64::MAX as u128 {
        Some(mag as u64)
    } else {
        None
    };
    // Go's ParseUint rejects a sign.
    let u = if text.starts_with(['+', '-']) {
        None
    } else {
        u
    };
    (i, u)
}

fn parse_float(text: &str) -> Option<f64> {
    if text.contains('_') && !underscore_ok(text) {
        return None;
    }
    let clean: String = text.chars().filter(|c| *c != '_').collect();
    let lower = clean.to_ascii_lowercase();
    let (neg, body) = match lower.strip_prefix('-') {
        Some(b) => (true, b.to_string()),
        None => (false, lower.strip_prefix('+').unwrap_or(&lower).to_string()),
    };
    let v = if let Some(h) = body.strip_prefix("0x") {
        // hex float: mantissa p exponent
        let (m, e) = h.split_once('p')?;
        let e: i32 = e.parse().ok()?;
        let (ip, fp) = m.split_once('.').unwrap_or((m, ""));
        let mut v = 0f64;
        for c in ip.chars().chain(fp.chars()) {
            v = v * 16.0 + c.to_digit(16)? as f64;
        }
        v * 2f64.powi(e - 4 * fp.len() as i32)
    } else {
        if body.is_empty()
            || !body
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | '+' | '-'))
        {
            return None;
        }
        body.parse::<f64>().ok()?
    };
    Some(if neg { -v } else { v })
}

/// Builds a number node like `parse.newNumber`. The error is Go's message.
pub(crate) fn number(text: &str, kind: Kind) -> Result<Number, String> {
    let mut n = Number {
        text: text.to_string(),
        int: None,
        float: None,
        uint_only: false,
        complex: false,
        is_char: false,
    };
    if kind == Kind::CharConstant {
        let inner = &text[1..];
        let (c, tail) = unquote_char(inner, '\'').ok_or_else(|| "invalid syntax".to_string())?;
        if tail != "'" {
            return Err(format!("malformed character constant: {text}"));
        }
        n.int = Some(c as i64);
        n.float = Some(c as u32 as f64);
        n.is_char = true;
        return Ok(n);
    }
    if kind == Kind::Complex || text.ends_with('i') {
        n.complex = true;
        return Ok(n);
    }
    let (i, u) = parse_int(text);
    n.int = i;
    if let Some(i) = i {
        n.float = Some(i as f64);
    } else if let Some(u) = u {
        n.uint_only = true;
        n.float = Some(u as f64);
    } else if let Some(f) = parse_float(text) {
        if !text.contains(['.', 'e', 'E', 'p', 'P']) {
            return Err(format!("integer overflow: {}", crate::gofmt::quote(text)));
        }
        n.float = Some(f);
        if f.fract() == 0.0 && f.abs() < 9.2e18 {
            n.int = Some(f as i64);
        }
    }
    if n.int.is_none() && n.float.is_none() {
        return Err(format!(
            "illegal number syntax: {}",
            crate::gofmt::quote(text)
        ));
    }
    Ok(n)
}

/// Go's `isHexInt`: a hex literal without a `p` exponent.
pub(crate) fn is_hex_int(text: &str) -> bool {
    let t = text.trim_start_matches(['+', '-']);
    t.len() > 2
        && t.starts_with('0')
        && matches!(t.as_bytes()[1], b'x' | b'X')
        && !t.contains(['p', 'P'])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn strings() {
        assert_eq!(
            unquote(r#""a\tb\u00e9\x41""#).as_deref(),
            Some("a\tb\u{e9}A")
        );
        assert_eq!(unquote("`a\\n`").as_deref(), Some("a\\n"));
        assert_eq!(unquote(r#""\q""#), None);
    }

    #[test]
    fn numbers() {
        let n = number("0x1F", Kind::Number).unwrap();
        assert_eq!(n.int, Some(31));
        assert_eq!(number("1_000", Kind::Number).unwrap().int, Some(1000));
        assert_eq!(number("017", Kind::Number).unwrap().int, Some(15));
        assert_eq!(number("1.5", Kind::Number).unwrap().float, Some(1.5));
        assert_eq!(number("'a'", Kind::CharConstant).unwrap().int, Some(97));
        assert!(
            number("99999999999999999999", Kind::Number).is_err()
                || number("99999999999999999999", Kind::Number)
                    .unwrap()
                    .uint_only
        );
        assert_eq!(
            number("999999999999999999999", Kind::Number).unwrap_err(),
            "integer overflow: \"999999999999999999999\""
        );
    }
}
