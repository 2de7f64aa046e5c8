//! The parts of Go's `fmt` and `strconv` that templates reach: `%v` printing of values,
//! `strconv.Quote`, float formatting, `Sprint`/`Sprintln` spacing and `Sprintf`.

use crate::value::Value;

/// Go's `strconv.IsPrint`, approximated for the categories that matter in practice.
pub(crate) fn is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(c as u32,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E
        | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB | 0xE000..=0xF8FF | 0xFFFE | 0xFFFF
        | 0xF0000..=0x10FFFF | 0xD800..=0xDFFF)
}

/// Go's `strconv.Quote`.
pub(crate) fn quote(s: &str) -> String {
    quote_with(s, '"', false)
}

/// Go's `strconv.QuoteWith` (`ascii` = `QuoteToASCII`).
pub(crate) fn quote_with(s: &str, q: char, ascii: bool) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push(q);
    for c in s.chars() {
        match c {
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            '\\' => out.push_str("\\\\"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x80 && is_print(c) => out.push(c),
            c if !ascii && is_print(c) => out.push(c),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push(q);
    out
}

/// Shortest decimal digits and decimal exponent of `f` (finite, non-negative):
/// `f = 0.d1d2d3... * 10^dp`.
fn shortest_digits(f: f64) -> (String, i32) {
    let e = format!("{:e}", f);
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let digits = digits.trim_end_matches('0').to_string();
    if digits.is_empty() {
        return ("0".into(), 1);
    }
    (digits, exp + 1)
}

fn special(f: f64) -> Option<&'static str> {
    if f.is_nan() {
        Some("NaN")
    } else if f.is_infinite() {
        Some(if f > 0.0 { "+Inf" } else { "-Inf" })
    } else {
        None
    }
}

fn exp_form(digits: &str, dp: i32, neg: bool) -> String {
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    s.push_str(&digits[..1]);
    if digits.len() > 1 {
        s.push('.');
        s.push_str(&digits[1..]);
    }
    let exp = if digits == "0" { 0 } else { dp - 1 };
    s.push('e');
    s.push(if exp < 0 { '-' } else { '+' });
    s.push_str(&format!("{:02}", exp.abs()));
    s
}

fn plain_form(digits: &str, dp: i32, neg: bool) -> String {
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    if dp <= 0 {
        s.push_str("0.");
        for _ in 0..(-dp) {
            s.push('0');
        }
        s.push_str(digits);
    } else if dp as usize >= digits.len() {
        s.push_str(digits);
        for _ in 0..(dp as usize - digits.len()) {
            s.push('0');
        }
    } else {
        s.push_str(&digits[..dp as usize]);
        s.push('.');
        s.push_str(&digits[dp as usize..]);
    }
    s
}

/// `strconv.FormatFloat(f, 'g', -1, 64)`, which is also fmt's `%v`.
pub(crate) fn format_g(f: f64) -> String {
    if let Some(s) = special(f) {
        return s.to_string();
    }
    let neg = f.is_sign_negative();
    let (digits, dp) = shortest_digits(f.abs());
    if f == 0.0 {
        return if neg { "-0".into() } else { "0".into() };
    }
    let exp = dp - 1;
    if !(-4..6).contains(&exp) {
        return exp_form(&digits, dp, neg);
    }
    plain_form(&digits, dp, neg)
}

/// encoding/json's float format.
pub(crate) fn format_json_float(f: f64) -> String {
    let a = f.abs();
    if a != 0.0 && !(1e-6..1e21).contains(&a) {
        let neg = f.is_sign_negative();
        let (digits, dp) = shortest_digits(a);
        let s = exp_form(&digits, dp, neg);
        // "1e-07" -> "1e-7"
        if let Some(i) = s.find("e-0") {
            return format!("{}e-{}", &s[..i], &s[i + 3..]);
        }
        if let Some(i) = s.find("e+0") {
            return format!("{}e+{}", &s[..i], &s[i + 3..]);
        }
        return s;
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let (digits, dp) = shortest_digits(a);
    plain_form(&digits, dp, f.is_sign_negative())
}

/// `%.Nf` / `%.Ne` with Go's rounding (round half to even on the exact binary value, as Rust does).
pub(crate) fn format_f(f: f64, prec: usize) -> String {
    if let Some(s) = special(f) {
        return s.to_string();
    }
    format!("{:.*}", prec, f)
}

pub(crate) fn format_e(f: f64, prec: usize) -> String {
    if let Some(s) = special(f) {
        return s.to_string();
    }
    let s = format!("{:.*e}", prec, f);
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    format!("{}e{}{:02}", m, if e < 0 { '-' } else { '+' }, e.abs())
}

thread_local! {
    static PRINT_CAP: std::cell::Cell<usize> = const { std::cell::Cell::new(16 << 20) };
}

/// Work bound for printing one value: beyond this many bytes printing stops (the result is
/// then over the render's output limit, which callers enforce, so it never reaches the output).
pub(crate) fn print_cap() -> usize {
    PRINT_CAP.with(|c| c.get())
}

/// Sets [`print_cap`] for renders on this thread (renders are synchronous).
pub(crate) fn set_print_cap(bytes: usize) {
    PRINT_CAP.with(|c| c.set(bytes));
}

/// Writes `v` as Go's `fmt.Sprint(v)` would (`%v`). `depth` bounds cyclic maps.
pub(crate) fn write_value(out: &mut String, v: &Value, depth: usize) {
    if out.len() > print_cap() {
        return;
    }
    if depth > 200 {
        out.push_str("...");
        return;
    }
    match v {
        Value::Invalid | Value::Nil => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i, _) => out.push_str(&i.to_string()),
        Value::Float(f) => out.push_str(&format_g(*f)),
        Value::Str(s) => out.push_str(s),
        Value::List(l, ..) => {
            out.push('[');
            for (i, e) in l.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_value(out, e, depth + 1);
            }
            out.push(']');
        }
        Value::Map(m, _) => {
            out.push_str("map[");
            for (i, (k, e)) in m.borrow().iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                write_value(out, e, depth + 1);
            }
            out.push(']');
        }
    }
}

pub(crate) fn sprint_value(v: &Value) -> String {
    let mut s = String::new();
    write_value(&mut s, v, 0);
    s
}

/// `fmt.Sprint`: spaces between operands when neither is a string.
pub(crate) fn sprint(args: &[Value]) -> String {
    let mut out = String::new();
    for (i, a) in args.iter().enumerate() {
        let is_str = matches!(a, Value::Str(_));
        if i > 0 && !is_str && !matches!(args[i - 1], Value::Str(_)) {
            out.push(' ');
        }
        write_value(&mut out, a, 0);
    }
    out
}

/// `fmt.Sprintln`.
pub(crate) fn sprintln(args: &[Value]) -> String {
    let mut out = String::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        write_value(&mut out, a, 0);
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats() {
        assert_eq!(format_g(6.5), "6.5");
        assert_eq!(format_g(1e21), "1e+21");
        assert_eq!(format_g(1e6), "1e+06");
        assert_eq!(format_g(123456.0), "123456");
        assert_eq!(format_g(0.0001), "0.0001");
        assert_eq!(format_g(0.00001), "1e-05");
        assert_eq!(format_json_float(1e21), "1e+21");
        assert_eq!(format_json_float(1e20), "100000000000000000000");
        assert_eq!(format_json_float(1e-7), "1e-7");
    }

    #[test]
    fn quoting_and_sprint() {
        assert_eq!(quote("a\"b\n\u{1}é"), "\"a\\\"b\\n\\x01é\"");
        let v = Value::from_json(&serde_json::json!({"b": [1, "x", null], "a": true}));
        assert_eq!(sprint_value(&v), "map[a:true b:[1 x <nil>]]");
        assert_eq!(
            sprint(&[Value::int(1), Value::int(2), Value::str("a"), Value::int(3)]),
            "1 2a3"
        );
    }
}
