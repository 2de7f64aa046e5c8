//! Number and boolean text as Go's `strconv` writes and reads it, where sops depends on it.

/// `strconv.FormatFloat(f, 'f', -1, 64)`: shortest round-trip digits, never an exponent.
pub(crate) fn float_f(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_string()
    } else if f.is_infinite() {
        if f > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        // Rust's `Display` for f64 is the shortest round-trip in positional notation.
        format!("{f}")
    }
}

/// Shortest digits of `|f|` and the decimal exponent of the first digit (`d.ddd × 10^exp`).
fn shortest_exp(f: f64) -> (String, i32) {
    let e = format!("{:e}", f.abs());
    let (mant, exp) = e.split_once('e').unwrap_or((e.as_str(), "0"));
    (mant.to_string(), exp.parse().unwrap_or(0))
}

/// `d.ddd` mantissa and exponent written as Go's `%e`: sign and at least two digits.
fn go_exp(mant: &str, exp: i32, e: char, neg: bool) -> String {
    let sign = if exp < 0 { '-' } else { '+' };
    format!(
        "{}{mant}{e}{sign}{:02}",
        if neg { "-" } else { "" },
        exp.unsigned_abs()
    )
}

/// A float as `encoding/json` writes it; `None` for NaN and infinities (Go refuses them).
pub(crate) fn float_json(f: f64) -> Option<String> {
    if !f.is_finite() {
        return None;
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let (mant, exp) = shortest_exp(f);
        let mut s = go_exp(&mant, exp, 'e', f.is_sign_negative());
        // Go trims `e-07` to `e-7`.
        let n = s.len();
        if n >= 4 && &s[n - 4..n - 1] == "e-0" {
            s.remove(n - 2);
        }
        Some(s)
    } else {
        Some(float_f(f))
    }
}

/// sops' `ValToString` for a float: `FormatFloat(f, 'G', -1, 64)`, with `.0` added when the
/// text could be read as an integer.
pub(crate) fn float_val_to_string(f: f64) -> String {
    let g = if !f.is_finite() {
        float_f(f)
    } else {
        let (mant, exp) = shortest_exp(f);
        if f != 0.0 && !(-4..6).contains(&exp) {
            go_exp(&mant, exp, 'E', f.is_sign_negative())
        } else {
            float_f(f)
        }
    };
    if !g.contains('.') && !g.contains('E') && f.is_finite() {
        format!("{g}.0")
    } else {
        g
    }
}

/// `strconv.Atoi` (64-bit): optional sign, decimal digits.
pub(crate) fn atoi(s: &str) -> Option<i64> {
    s.parse::<i64>().ok()
}

/// `strconv.ParseFloat(s, 64)`; a finite overflow is an error, as in Go.
pub(crate) fn parse_float(s: &str) -> Option<f64> {
    let f: f64 = s.parse().ok()?;
    if f.is_infinite() {
        let t = s.trim_start_matches(['+', '-']).to_ascii_lowercase();
        if t != "inf" && t != "infinity" {
            return None;
        }
    }
    Some(f)
}

/// `strconv.ParseBool`.
pub(crate) fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// `strconv.ParseInt(s, 0, 64)`: sign, then `0x`/`0o`/`0b`/leading-`0` octal or decimal,
/// with `_` allowed between digits.
pub(crate) fn parse_int_base0(s: &str) -> Option<i64> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d, true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d, true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d, true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..], true)
    } else {
        (10, lower.as_str(), false)
    };
    // Underscores only between digits (or right after a base prefix).
    let bytes = digits.as_bytes();
    for (i, c) in bytes.iter().enumerate() {
        if *c == b'_' {
            let prev_ok = if i == 0 {
                prefixed
            } else {
                bytes[i - 1] != b'_'
            };
            let next_ok = bytes.get(i + 1).is_some_and(|n| *n != b'_');
            if !prev_ok || !next_ok {
                return None;
            }
        }
    }
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    if clean.is_empty() || clean.starts_with(['+', '-']) {
        return None;
    }
    let magnitude = u64::from_str_radix(&clean, radix).ok()?;
    if neg {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn floats_like_go() {
        assert_eq!(float_f(1.5), "1.5");
        assert_eq!(float_f(1e21), "1000000000000000000000");
        assert_eq!(float_f(1e-7), "0.0000001");
        assert_eq!(float_f(-0.0), "-0");
        assert_eq!(float_f(f64::INFINITY), "+Inf");
        assert_eq!(float_json(1e21).as_deref(), Some("1e+21"));
        assert_eq!(float_json(1.5e-7).as_deref(), Some("1.5e-7"));
        assert_eq!(float_json(1e-10).as_deref(), Some("1e-10"));
        assert_eq!(float_json(-2.5e300).as_deref(), Some("-2.5e+300"));
        assert_eq!(float_json(123.0).as_deref(), Some("123"));
        assert_eq!(float_json(f64::NAN), None);
        assert_eq!(float_val_to_string(1.5), "1.5");
        assert_eq!(float_val_to_string(100000.0), "100000.0");
        assert_eq!(float_val_to_string(1234567.0), "1.234567E+06");
        assert_eq!(float_val_to_string(0.00001), "1E-05");
        assert_eq!(float_val_to_string(0.0001), "0.0001");
        assert_eq!(float_val_to_string(0.0), "0.0");
    }

    #[test]
    fn integers_and_bools_like_go() {
        assert_eq!(atoi("+42"), Some(42));
        assert_eq!(atoi("4 2"), None);
        assert_eq!(parse_int_base0("0x1f"), Some(31));
        assert_eq!(parse_int_base0("017"), Some(15));
        assert_eq!(parse_int_base0("1_000"), Some(1000));
        assert_eq!(parse_int_base0("_1"), None);
        assert_eq!(parse_int_base0("-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_int_base0("9223372036854775808"), None);
        assert_eq!(parse_float("1e400"), None);
        assert_eq!(parse_float("-Inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_bool("True"), Some(true));
        assert_eq!(parse_bool("yes"), None);
    }
}
