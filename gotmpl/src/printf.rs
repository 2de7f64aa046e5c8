//! Go's `fmt.Sprintf` for template values: the verbs templates use (`%v %s %d %q %t %f %e %g
//! %x %X %o %b %c %U %T %%`), flags `+ - # 0 space`, width and precision (also `*`), and
//! Go's error forms (`%!d(string=x)`, `%!d(MISSING)`, `%!(EXTRA ...)`).

use crate::gofmt::{format_e, format_f, format_g, quote_with, sprint_value};
use crate::value::Value;

#[derive(Default, Clone, Copy)]
struct Spec {
    plus: bool,
    minus: bool,
    sharp: bool,
    zero: bool,
    space: bool,
    width: Option<usize>,
    prec: Option<usize>,
}

fn pad(out: &mut String, s: &str, sp: &Spec, numeric: bool) {
    let n = s.chars().count();
    let w = sp.width.unwrap_or(0);
    if n >= w {
        out.push_str(s);
        return;
    }
    let fill = w - n;
    if sp.minus {
        out.push_str(s);
        out.extend(std::iter::repeat_n(' ', fill));
    } else if sp.zero && numeric {
        let (sign, digits) = match s.chars().next() {
            Some(c @ ('+' | '-' | ' ')) => (Some(c), &s[1..]),
            _ => (None, s),
        };
        if let Some(c) = sign {
            out.push(c);
        }
        out.extend(std::iter::repeat_n('0', fill));
        out.push_str(digits);
    } else if sp.zero && !numeric {
        out.extend(std::iter::repeat_n('0', fill));
        out.push_str(s);
    } else {
        out.extend(std::iter::repeat_n(' ', fill));
        out.push_str(s);
    }
}

fn sign(neg: bool, sp: &Spec) -> &'static str {
    if neg {
        "-"
    } else if sp.plus {
        "+"
    } else if sp.space {
        " "
    } else {
        ""
    }
}

fn fmt_int(i: i64, verb: char, sp: &Spec) -> Option<String> {
    let neg = i < 0;
    let mag = i.unsigned_abs();
    let mut digits = match verb {
        'd' | 'v' => mag.to_string(),
        'x' => format!("{mag:x}"),
        'X' => format!("{mag:X}"),
        'o' | 'O' => format!("{mag:o}"),
        'b' => format!("{mag:b}"),
        'c' => return Some(char::from_u32(i as u32).unwrap_or('\u{FFFD}').to_string()),
        'q' => {
            let c = char::from_u32(i as u32).unwrap_or('\u{FFFD}');
            return Some(quote_with(&c.to_string(), '\'', sp.plus));
        }
        'U' => return Some(format!("U+{:04X}", i)),
        _ => return None,
    };
    if let Some(p) = sp.prec {
        while digits.len() < p {
            digits.insert(0, '0');
        }
        if p == 0 && mag == 0 {
            digits.clear();
        }
    }
    let prefix = match (verb, sp.sharp) {
        ('x', true) => "0x",
        ('X', true) => "0X",
        ('o', true) => "0",
        ('b', true) => "0b",
        ('O', _) => "0o",
        _ => "",
    };
    Some(format!("{}{}{}", sign(neg, sp), prefix, digits))
}

fn fmt_float(f: f64, verb: char, sp: &Spec) -> Option<String> {
    let neg = f.is_sign_negative() && !f.is_nan();
    let a = f.abs();
    let body = match verb {
        'v' | 'g' | 'G' => match sp.prec {
            None => format_g(a),
            Some(p) => {
                let p = p.max(1);
                // %.Ng: N significant digits, exponent if exp < -4 || exp >= N.
                let e = format_e(a, p - 1);
                let exp: i32 = e
                    .split_once('e')
                    .map(|(_, x)| x.parse().unwrap_or(0))
                    .unwrap_or(0);
                if exp < -4 || exp >= p as i32 {
                    let (m, x) = e.split_once('e').unwrap_or((&e, "+00"));
                    let m = if m.contains('.') {
                        m.trim_end_matches('0').trim_end_matches('.')
                    } else {
                        m
                    };
                    format!("{m}e{x}")
                } else {
                    let s = format_f(a, (p as i32 - 1 - exp).max(0) as usize);
                    if s.contains('.') {
                        s.trim_end_matches('0').trim_end_matches('.').to_string()
                    } else {
                        s
                    }
                }
            }
        },
        'f' | 'F' => format_f(a, sp.prec.unwrap_or(6)),
        'e' => format_e(a, sp.prec.unwrap_or(6)),
        'E' => format_e(a, sp.prec.unwrap_or(6)).to_uppercase(),
        _ => return None,
    };
    let body = if verb == 'G' {
        body.to_uppercase()
    } else {
        body
    };
    if f.is_nan() {
        return Some(format!("{}NaN", if sp.plus { "+" } else { "" }));
    }
    if f.is_infinite() {
        return Some(format!("{}Inf", if neg { "-" } else { "+" }));
    }
    Some(format!("{}{}", sign(neg, sp), body))
}

fn fmt_str(s: &str, verb: char, sp: &Spec) -> Option<String> {
    let s: String = match sp.prec {
        Some(p) if matches!(verb, 's' | 'v' | 'q' | 'x' | 'X') => s.chars().take(p).collect(),
        _ => s.to_string(),
    };
    Some(match verb {
        's' | 'v' => s,
        'q' => {
            if sp.sharp
                && !s.contains('`')
                && s.chars()
                    .all(|c| c != '\r' && (c == '\t' || !c.is_control()))
            {
                format!("`{s}`")
            } else {
                quote_with(&s, '"', sp.plus)
            }
        }
        'x' | 'X' => {
            let mut out = String::new();
            for (i, b) in s.bytes().enumerate() {
                if sp.space && i > 0 {
                    out.push(' ');
                }
                if sp.sharp && (sp.space || i == 0) {
                    out.push_str(if verb == 'x' { "0x" } else { "0X" });
                }
                if verb == 'x' {
                    out.push_str(&format!("{b:02x}"));
                } else {
                    out.push_str(&format!("{b:02X}"));
                }
            }
            out
        }
        _ => return None,
    })
}

fn bad_verb(out: &mut String, verb: char, v: &Value) {
    match v {
        Value::Nil | Value::Invalid => out.push_str(&format!("%!{verb}(<nil>)")),
        v => out.push_str(&format!("%!{verb}({}={})", v.type_name(), sprint_value(v))),
    }
}

/// Formats one operand; `top` is false inside lists and maps.
fn fmt_value(out: &mut String, v: &Value, verb: char, sp: &Spec, top: bool, depth: usize) {
    if depth > 100 || out.len() > crate::gofmt::print_cap() {
        out.push_str("...");
        return;
    }
    if verb == 'T' {
        let t = if matches!(v, Value::Nil | Value::Invalid) {
            "<nil>"
        } else {
            v.type_name()
        };
        pad(out, t, sp, false);
        return;
    }
    let r = match v {
        Value::Nil | Value::Invalid => {
            if verb == 'v' || !top {
                Some("<nil>".to_string())
            } else {
                None
            }
        }
        Value::Bool(b) => matches!(verb, 'v' | 't').then(|| b.to_string()),
        Value::Int(i, _) => fmt_int(*i, verb, sp),
        Value::Float(f) => fmt_float(*f, verb, sp),
        Value::Str(s) => fmt_str(s, verb, sp),
        Value::List(l, ..) => {
            out.push('[');
            for (i, e) in l.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                fmt_value(out, e, verb, sp, false, depth + 1);
            }
            out.push(']');
            return;
        }
        Value::Map(m, _) => {
            out.push_str("map[");
            for (i, (k, e)) in m.borrow().iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                fmt_value(out, &Value::str(k.as_str()), verb, sp, false, depth + 1);
                out.push(':');
                fmt_value(out, e, verb, sp, false, depth + 1);
            }
            out.push(']');
            return;
        }
    };
    match r {
        Some(s) => {
            let numeric =
                matches!(v, Value::Int(..) | Value::Float(_)) && !matches!(verb, 'c' | 'q' | 'U');
            pad(out, &s, sp, numeric);
        }
        None => bad_verb(out, verb, v),
    }
}

/// `fmt.Sprintf(format, args...)`. `limit` bounds the output size (an error beyond it).
pub(crate) fn sprintf(format: &str, args: &[Value], limit: usize) -> Result<String, String> {
    let mut out = String::new();
    let mut argi = 0;
    let mut reordered = false;
    let mut chars = format.chars().peekable();
    let too_big = || format!("exceeded maximum output size ({limit} bytes)");
    while let Some(c) = chars.next() {
        if out.len() > limit {
            return Err(too_big());
        }
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut sp = Spec::default();
        while let Some(&f) = chars.peek() {
            match f {
                '+' => sp.plus = true,
                '-' => sp.minus = true,
                '#' => sp.sharp = true,
                '0' => sp.zero = !sp.minus,
                ' ' => sp.space = true,
                _ => break,
            }
            chars.next();
        }
        let num = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
                   argi: &mut usize|
         -> Option<usize> {
            if chars.peek() == Some(&'*') {
                chars.next();
                let v = args.get(*argi).and_then(|a| {
                    if let Value::Int(i, _) = a {
                        Some(*i)
                    } else {
                        None
                    }
                });
                *argi += 1;
                return v.map(|i| i.clamp(0, i64::MAX / 4) as usize);
            }
            let mut n: Option<usize> = None;
            while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                n = Some(n.unwrap_or(0).saturating_mul(10).saturating_add(d as usize));
                chars.next();
            }
            n
        };
        let arg_index =
            |chars: &mut std::iter::Peekable<std::str::Chars<'_>>, argi: &mut usize| -> bool {
                if chars.peek() == Some(&'[') {
                    let mut look = chars.clone();
                    look.next();
                    let mut n: usize = 0;
                    let mut digits = 0;
                    while let Some(d) = look.peek().and_then(|c| c.to_digit(10)) {
                        n = n.saturating_mul(10).saturating_add(d as usize);
                        digits += 1;
                        look.next();
                    }
                    if digits > 0 && look.peek() == Some(&']') && n >= 1 {
                        look.next();
                        *chars = look;
                        *argi = n - 1;
                        return true;
                    }
                }
                false
            };
        reordered |= arg_index(&mut chars, &mut argi);
        sp.width = num(&mut chars, &mut argi);
        if chars.peek() == Some(&'.') {
            chars.next();
            reordered |= arg_index(&mut chars, &mut argi);
            sp.prec = Some(num(&mut chars, &mut argi).unwrap_or(0));
        }
        reordered |= arg_index(&mut chars, &mut argi);
        if sp.width.unwrap_or(0) > limit || sp.prec.unwrap_or(0) > limit {
            return Err(too_big());
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.get(argi) else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        argi += 1;
        fmt_value(&mut out, arg, verb, &sp, true, 0);
    }
    if !reordered && argi < args.len() {
        out.push_str("%!(EXTRA ");
        for (i, a) in args[argi..].iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            match a {
                Value::Nil | Value::Invalid => out.push_str("<nil>"),
                a => out.push_str(&format!("{}={}", a.type_name(), sprint_value(a))),
            }
        }
        out.push(')');
    }
    if out.len() > limit {
        return Err(too_big());
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn f(fmt: &str, args: &[Value]) -> String {
        sprintf(fmt, args, 1 << 20).unwrap()
    }

    #[test]
    fn verbs() {
        assert_eq!(f("%s-%d", &[Value::str("a"), Value::int(3)]), "a-3");
        assert_eq!(
            f(
                "%05d|%-4s|%4s",
                &[Value::int(-42), Value::str("ab"), Value::str("cd")]
            ),
            "-0042|ab  |  cd"
        );
        assert_eq!(
            f(
                "%.2f %v %q",
                &[Value::Float(2.25159), Value::Float(6.5), Value::str("x\"y")]
            ),
            "2.25 6.5 \"x\\\"y\""
        );
        assert_eq!(
            f(
                "%x %X %t %%",
                &[Value::int(255), Value::str("hi"), Value::Bool(true)]
            ),
            "ff 6869 true %"
        );
        assert_eq!(f("%d", &[Value::str("x")]), "%!d(string=x)");
        assert_eq!(f("%d %d", &[Value::int(1)]), "1 %!d(MISSING)");
        assert_eq!(
            f("%d", &[Value::int(1), Value::str("a")]),
            "1%!(EXTRA string=a)"
        );
    }
}
