//! What a scalar means: go-yaml v3's resolution of plain scalars (null, bool, int, float,
//! timestamp, string) and of explicitly tagged ones, with Go's number and time syntax, and
//! the text Go prints for floats and times.

/// A resolved scalar.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Resolved {
    Null,
    Bool(bool),
    Int(i64),
    /// An integer above `i64::MAX` (Go decodes it as `uint64`).
    UInt(u64),
    Float(f64),
    /// RFC 3339 text with nanoseconds, as Go's `time.RFC3339Nano` formats it.
    Time(String),
    Str,
}

pub(super) const STR: &str = "!!str";
pub(super) const NULL: &str = "!!null";
pub(super) const BOOL: &str = "!!bool";
pub(super) const INT: &str = "!!int";
pub(super) const FLOAT: &str = "!!float";
pub(super) const TIMESTAMP: &str = "!!timestamp";
pub(super) const BINARY: &str = "!!binary";
pub(super) const MERGE: &str = "!!merge";

impl Resolved {
    pub(super) fn tag(&self) -> &'static str {
        match self {
            Resolved::Null => NULL,
            Resolved::Bool(_) => BOOL,
            Resolved::Int(_) | Resolved::UInt(_) => INT,
            Resolved::Float(_) => FLOAT,
            Resolved::Time(_) => TIMESTAMP,
            Resolved::Str => STR,
        }
    }
}

/// `tag:yaml.org,2002:x` → `!!x`.
pub(super) fn short_tag(tag: &str) -> String {
    match tag.strip_prefix("tag:yaml.org,2002:") {
        Some(rest) => format!("!!{rest}"),
        None => tag.to_string(),
    }
}

/// The resolution of an untagged plain scalar.
pub(super) fn resolve_plain(s: &str) -> Resolved {
    resolve_with("", s).unwrap_or(Resolved::Str)
}

/// Resolution under a (short) tag; `Err` when the text cannot have that tag. Tags that are
/// not resolvable (`!!binary`, custom tags) give [`Resolved::Str`].
pub(super) fn resolve_tagged(tag: &str, s: &str) -> Result<Resolved, ()> {
    if !matches!(tag, "" | STR | BOOL | INT | FLOAT | NULL | TIMESTAMP) {
        return Ok(Resolved::Str);
    }
    resolve_with(tag, s)
}

fn hint(s: &str) -> u8 {
    match s.as_bytes().first() {
        None => b'N',
        Some(b'+' | b'-') => b'S',
        Some(b'0'..=b'9') => b'D',
        Some(b'y' | b'Y' | b'n' | b'N' | b't' | b'T' | b'f' | b'F' | b'o' | b'O' | b'~') => b'M',
        Some(b'.') => b'.',
        Some(_) => 0,
    }
}

fn lookup(s: &str) -> Option<Resolved> {
    Some(match s {
        "true" | "True" | "TRUE" => Resolved::Bool(true),
        "false" | "False" | "FALSE" => Resolved::Bool(false),
        "" | "~" | "null" | "Null" | "NULL" => Resolved::Null,
        ".nan" | ".NaN" | ".NAN" => Resolved::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => Resolved::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => Resolved::Float(f64::NEG_INFINITY),
        _ => return None,
    })
}

fn resolve_with(tag: &str, s: &str) -> Result<Resolved, ()> {
    let h = hint(s);
    let mut out = Resolved::Str;
    if h != 0 && tag != STR {
        if let Some(r) = lookup(s) {
            out = r;
        } else if h == b'.' {
            if let Some(f) = go_parse_float(s) {
                out = Resolved::Float(f);
            }
        } else if h == b'D' || h == b'S' {
            out = resolve_number(tag, s);
        }
    }
    if tag.is_empty() || tag == STR || tag == out.tag() {
        return Ok(out);
    }
    match (tag, &out) {
        (FLOAT, Resolved::Int(i)) => Ok(Resolved::Float(*i as f64)),
        _ => Err(()),
    }
}

fn resolve_number(tag: &str, s: &str) -> Resolved {
    if (tag.is_empty() || tag == TIMESTAMP)
        && let Some(t) = parse_timestamp(s)
    {
        return Resolved::Time(t);
    }
    let plain: String = s.chars().filter(|&c| c != '_').collect();
    if let Some(i) = go_parse_int(&plain) {
        return Resolved::Int(i);
    }
    if let Some(u) = go_parse_uint(&plain) {
        return Resolved::UInt(u);
    }
    if yaml_style_float(&plain)
        && let Some(f) = go_parse_float(&plain)
    {
        return Resolved::Float(f);
    }
    Resolved::Str
}

/// Go's `strconv.ParseUint(s, 0, 64)` (base prefixes `0b`, `0o`, `0x`, a leading `0` is
/// octal); `s` has no underscores.
fn go_parse_uint(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.is_empty() {
        return None;
    }
    let (base, digits): (u32, &[u8]) = if b.first() == Some(&b'0') {
        match b.get(1).map(u8::to_ascii_lowercase) {
            Some(b'b') if b.len() >= 3 => (2, b.get(2..).unwrap_or_default()),
            Some(b'o') if b.len() >= 3 => (8, b.get(2..).unwrap_or_default()),
            Some(b'x') if b.len() >= 3 => (16, b.get(2..).unwrap_or_default()),
            _ => (8, b.get(1..).unwrap_or_default()),
        }
    } else {
        (10, b)
    };
    let mut n: u64 = 0;
    for &c in digits {
        let d = (c as char).to_digit(36)?;
        if d >= base {
            return None;
        }
        n = n.checked_mul(u64::from(base))?.checked_add(u64::from(d))?;
    }
    Some(n)
}

/// Go's `strconv.ParseInt(s, 0, 64)`.
fn go_parse_int(s: &str) -> Option<i64> {
    let (neg, rest) = match s.as_bytes().first() {
        Some(b'+') => (false, s.get(1..)?),
        Some(b'-') => (true, s.get(1..)?),
        Some(_) => (false, s),
        None => return None,
    };
    let u = go_parse_uint(rest)?;
    if neg {
        if u > 1u64 << 63 {
            return None;
        }
        Some((u as i64).wrapping_neg())
    } else {
        i64::try_from(u).ok()
    }
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let st = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - st
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Go's `strconv.ParseFloat(s, 64)` for decimal text (underscores allowed between digits);
/// `None` on a syntax error or an overflow.
fn go_parse_float(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let mut saw_digits = false;
    let mut saw_dot = false;
    while let Some(&c) = b.get(i) {
        match c {
            b'_' => {}
            b'.' if !saw_dot => saw_dot = true,
            b'0'..=b'9' => saw_digits = true,
            _ => break,
        }
        i += 1;
    }
    if !saw_digits {
        return None;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !b.get(i).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == b'_') {
            i += 1;
        }
    }
    if i != b.len() {
        return None;
    }
    if s.contains('_') && !underscores_ok(s) {
        return None;
    }
    let clean: String = s.chars().filter(|&c| c != '_').collect();
    let f: f64 = clean.parse().ok()?;
    f.is_finite().then_some(f)
}

/// Go's rule: an underscore only between two digits.
fn underscores_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let body = match b.first() {
        Some(b'+' | b'-') => b.get(1..).unwrap_or_default(),
        _ => b,
    };
    let mut saw = b'^';
    for &c in body {
        if c.is_ascii_digit() {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
    }
    saw != b'_'
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)`, with YAML's names for infinities and NaN.
pub(super) fn format_float(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        };
    }
    let sign = if f.is_sign_negative() { "-" } else { "" };
    let sci = format!("{:e}", f.abs());
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
    let digits = if digits.is_empty() {
        "0".to_string()
    } else {
        digits
    };
    let nd = digits.len() as i32;
    if !(-4..6).contains(&exp) {
        let mut out = format!("{sign}{}", digits.get(..1).unwrap_or("0"));
        if nd > 1 {
            out.push('.');
            out.push_str(digits.get(1..).unwrap_or_default());
        }
        let (es, ev) = if exp < 0 { ('-', -exp) } else { ('+', exp) };
        out.push_str(&format!("e{es}{ev:02}"));
        return out;
    }
    let dp = exp + 1;
    let digit = |k: i32| -> char {
        usize::try_from(k)
            .ok()
            .and_then(|k| digits.as_bytes().get(k))
            .map_or('0', |&d| d as char)
    };
    let mut out = sign.to_string();
    if dp > 0 {
        for k in 0..dp {
            out.push(digit(k));
        }
    } else {
        out.push('0');
    }
    let prec = (nd - dp).max(0);
    if prec > 0 {
        out.push('.');
        for k in 0..prec {
            out.push(digit(dp + k));
        }
    }
    out
}

/// A YAML timestamp in one of go-yaml's accepted forms, as RFC 3339 text with nanoseconds.
pub(super) fn parse_timestamp(s: &str) -> Option<String> {
    let b = s.as_bytes();
    if !b.get(..4).is_some_and(|y| y.iter().all(u8::is_ascii_digit)) || b.get(4) != Some(&b'-') {
        return None;
    }
    parse_time_layout(b, Some(b'T'), true)
        .or_else(|| parse_time_layout(b, Some(b't'), true))
        .or_else(|| parse_time_layout(b, Some(b' '), false))
        .or_else(|| parse_time_layout(b, None, false))
}

/// Go's `getnum`: one or two digits (exactly two when `fixed`).
fn getnum(b: &[u8], i: &mut usize, fixed: bool) -> Option<u32> {
    let d0 = *b.get(*i).filter(|c| c.is_ascii_digit())?;
    match b.get(*i + 1).filter(|c| c.is_ascii_digit()) {
        Some(&d1) => {
            *i += 2;
            Some(u32::from(d0 - b'0') * 10 + u32::from(d1 - b'0'))
        }
        None if fixed => None,
        None => {
            *i += 1;
            Some(u32::from(d0 - b'0'))
        }
    }
}

fn days_in(month: u32, year: i64) -> u32 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// One of Go's layouts `2006-1-2` + (`sep` `15:4:5.999999999` + zone `Z07:00` when `zone`).
fn parse_time_layout(b: &[u8], sep: Option<u8>, zone: bool) -> Option<String> {
    let year: i64 = std::str::from_utf8(b.get(..4)?).ok()?.parse().ok()?;
    let mut i = 5;
    let month = getnum(b, &mut i, false)?;
    if b.get(i) != Some(&b'-') {
        return None;
    }
    i += 1;
    let day = getnum(b, &mut i, false)?;
    if !(1..=12).contains(&month) {
        return None;
    }
    let (mut hour, mut min, mut sec, mut nsec, mut offset) = (0, 0, 0, 0u32, 0i64);
    if let Some(sep) = sep {
        if b.get(i) != Some(&sep) {
            return None;
        }
        i += 1;
        hour = getnum(b, &mut i, false)?;
        if b.get(i) != Some(&b':') {
            return None;
        }
        i += 1;
        min = getnum(b, &mut i, false)?;
        if b.get(i) != Some(&b':') {
            return None;
        }
        i += 1;
        sec = getnum(b, &mut i, false)?;
        if hour >= 24 || min >= 60 || sec >= 60 {
            return None;
        }
        if matches!(b.get(i), Some(b'.' | b',')) && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
            let st = i + 1;
            let mut j = st;
            while b.get(j).is_some_and(u8::is_ascii_digit) {
                j += 1;
            }
            let mut digits: String = std::str::from_utf8(b.get(st..j)?)
                .ok()?
                .chars()
                .take(9)
                .collect();
            while digits.len() < 9 {
                digits.push('0');
            }
            nsec = digits.parse().ok()?;
            i = j;
        }
        if zone {
            if b.get(i) == Some(&b'Z') {
                i += 1;
            } else {
                let z = b.get(i..i + 6)?;
                if z.get(3) != Some(&b':') {
                    return None;
                }
                let mut k = 1;
                let hr = getnum(z, &mut k, true)?;
                let mut k = 4;
                let mm = getnum(z, &mut k, true)?;
                if hr > 24 || mm > 60 {
                    return None;
                }
                let off = i64::from(hr * 60 + mm) * 60;
                offset = match z.first() {
                    Some(b'+') => off,
                    Some(b'-') => -off,
                    _ => return None,
                };
                i += 6;
            }
        }
    }
    if i != b.len() || day < 1 || day > days_in(month, year) {
        return None;
    }
    let mut out = format!("{year:04}-{month:02}-{day:02}T{hour:02}:{min:02}:{sec:02}");
    if nsec > 0 {
        let frac = format!("{nsec:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    if offset == 0 {
        out.push('Z');
    } else {
        let sign = if offset < 0 { '-' } else { '+' };
        let m = offset.abs() / 60;
        out.push_str(&format!("{sign}{:02}:{:02}", m / 60, m % 60));
    }
    Some(out)
}

/// Strings that YAML 1.1 reads as booleans; go-yaml quotes them on output.
pub(super) fn is_old_bool(s: &str) -> bool {
    matches!(
        s,
        "y" | "Y"
            | "yes"
            | "Yes"
            | "YES"
            | "on"
            | "On"
            | "ON"
            | "n"
            | "N"
            | "no"
            | "No"
            | "NO"
            | "off"
            | "Off"
            | "OFF"
    )
}

/// `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$` (YAML 1.1 base-60 floats), quoted
/// on output.
pub(super) fn is_base60_float(s: &str) -> bool {
    let b = s.as_bytes();
    let Some(&c) = b.first() else { return false };
    if !(c == b'+' || c == b'-' || c.is_ascii_digit()) || !s.contains(':') {
        return false;
    }
    let mut i = usize::from(c == b'+' || c == b'-');
    if !b.get(i).is_some_and(u8::is_ascii_digit) {
        return false;
    }
    while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == b'_') {
        i += 1;
    }
    let mut groups = 0;
    while b.get(i) == Some(&b':') {
        i += 1;
        let st = i;
        while i < st + 2 && b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let n = i - st;
        if n == 0 {
            return false;
        }
        if n == 2 && b.get(st).is_some_and(|d| *d > b'5') {
            // `[0-5]?[0-9]`: a two-digit group starts with 0-5; otherwise backtrack to one.
            i = st + 1;
            if b.get(i).is_some_and(u8::is_ascii_digit) {
                return false;
            }
        }
        groups += 1;
    }
    if groups == 0 {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == b'_') {
            i += 1;
        }
    }
    i == b.len()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn plain_resolution_follows_go_yaml() {
        assert_eq!(resolve_plain("0x1F"), Resolved::Int(31));
        assert_eq!(resolve_plain("0755"), Resolved::Int(493));
        assert_eq!(resolve_plain("08"), Resolved::Float(8.0));
        assert_eq!(resolve_plain("1_000"), Resolved::Int(1000));
        assert_eq!(resolve_plain("0b101"), Resolved::Int(5));
        assert_eq!(resolve_plain("0o17"), Resolved::Int(15));
        assert_eq!(resolve_plain("+12"), Resolved::Int(12));
        assert_eq!(
            resolve_plain("9223372036854775808"),
            Resolved::UInt(1 << 63)
        );
        assert_eq!(
            resolve_plain("-9223372036854775808"),
            Resolved::Int(i64::MIN)
        );
        assert_eq!(resolve_plain("1e400"), Resolved::Str);
        assert_eq!(resolve_plain(".5"), Resolved::Float(0.5));
        assert_eq!(resolve_plain("1:30"), Resolved::Str);
        assert_eq!(resolve_plain("yes"), Resolved::Str);
        assert_eq!(resolve_plain("True"), Resolved::Bool(true));
        assert_eq!(resolve_plain("tRUE"), Resolved::Str);
        assert_eq!(resolve_plain("~"), Resolved::Null);
        assert_eq!(resolve_plain("<<"), Resolved::Str);
        assert_eq!(
            resolve_plain("2024-1-2t3:4:5.123456789123-07:00"),
            Resolved::Time("2024-01-02T03:04:05.123456789-07:00".into())
        );
        assert_eq!(
            resolve_plain("2001-12-14 21:59:43.10"),
            Resolved::Time("2001-12-14T21:59:43.1Z".into())
        );
        assert_eq!(resolve_plain("2024-02-30"), Resolved::Str);
        assert_eq!(
            resolve_plain("2024-01-01T00:00:00+00:00"),
            Resolved::Time("2024-01-01T00:00:00Z".into())
        );
    }

    #[test]
    fn tagged_resolution() {
        assert_eq!(resolve_tagged(FLOAT, "1"), Ok(Resolved::Float(1.0)));
        assert_eq!(resolve_tagged(STR, "1"), Ok(Resolved::Str));
        assert_eq!(resolve_tagged(INT, "x"), Err(()));
        assert_eq!(resolve_tagged(BOOL, "yes"), Err(()));
        assert_eq!(resolve_tagged("!custom", "1"), Ok(Resolved::Str));
    }

    #[test]
    fn floats_print_as_go() {
        for (f, s) in [
            (1.0, "1"),
            (1e6, "1e+06"),
            (123456789.0, "1.23456789e+08"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-0.0, "-0"),
            (0.5, "0.5"),
            (1e20, "1e+20"),
            (123456.5, "123456.5"),
            (1.5e-7, "1.5e-07"),
            (f64::INFINITY, ".inf"),
        ] {
            assert_eq!(format_float(f), s);
        }
    }

    #[test]
    fn base60_and_old_bools() {
        assert!(is_base60_float("1:30"));
        assert!(is_base60_float("190:20:30.15"));
        assert!(!is_base60_float("1:60"));
        assert!(!is_base60_float("12:345"));
        assert!(is_old_bool("on"));
        assert!(!is_old_bool("true"));
    }
}
