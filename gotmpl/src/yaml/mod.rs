//! `sigs.k8s.io/yaml.Marshal` output: the value goes through JSON (so floats that are whole
//! become ints) and is printed by go-yaml v2: keys in v2's natural order, 2-space indent,
//! sequences under a mapping key not indented, v2's quoting rules and line folding at 80.

use std::cmp::Ordering;

use crate::gofmt::{format_g, format_json_float};
use crate::value::Value;

const BEST_WIDTH: usize = 80;

/// go-yaml v2's `keyList.Less` for string keys.
fn key_less(a: &str, b: &str) -> bool {
    let ar: Vec<char> = a.chars().collect();
    let br: Vec<char> = b.chars().collect();
    let mut i = 0;
    while i < ar.len() && i < br.len() {
        if ar[i] == br[i] {
            i += 1;
            continue;
        }
        let (al, bl) = (ar[i].is_alphabetic(), br[i].is_alphabetic());
        if al && bl {
            return ar[i] < br[i];
        }
        if al || bl {
            return bl;
        }
        let (mut an, mut bn) = (0i64, 0i64);
        if ar[i] == '0' || br[i] == '0' {
            let mut j = i as isize - 1;
            while j >= 0 && ar[j as usize].is_ascii_digit() {
                if ar[j as usize] != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
                j -= 1;
            }
        }
        let mut ai = i;
        while ai < ar.len() && ar[ai].is_ascii_digit() {
            an = an.wrapping_mul(10).wrapping_add(ar[ai] as i64 - '0' as i64);
            ai += 1;
        }
        let mut bi = i;
        while bi < br.len() && br[bi].is_ascii_digit() {
            bn = bn.wrapping_mul(10).wrapping_add(br[bi] as i64 - '0' as i64);
            bi += 1;
        }
        if an != bn {
            return an < bn;
        }
        if ai != bi {
            return ai < bi;
        }
        return ar[i] < br[i];
    }
    ar.len() < br.len()
}

fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 8 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let rest = &s[5..];
    let (date, time) = match rest.find(['T', 't', ' ']) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let mut parts = date.split('-');
    let (Some(m), Some(d), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let num = |x: &str, max: u32| {
        !x.is_empty()
            && x.len() <= 2
            && x.bytes().all(|c| c.is_ascii_digit())
            && x.parse::<u32>().is_ok_and(|v| (1..=max).contains(&v))
    };
    if !num(m, 12) || !num(d, 31) {
        return false;
    }
    match time {
        None => true,
        Some(t) => {
            let hms: Vec<&str> = t.splitn(3, ':').collect();
            hms.len() == 3
                && hms[0].len() <= 2
                && hms[0].bytes().all(|c| c.is_ascii_digit())
                && hms[1].len() <= 2
        }
    }
}

fn yaml_style_float(s: &str) -> bool {
    let t = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mant, exp) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], Some(&t[i + 1..])),
        None => (t, None),
    };
    let mant_ok = if let Some(frac) = mant.strip_prefix('.') {
        !frac.is_empty() && frac.bytes().all(|c| c.is_ascii_digit())
    } else {
        let (ip, fp) = mant.split_once('.').unwrap_or((mant, ""));
        !ip.is_empty()
            && ip.bytes().all(|c| c.is_ascii_digit())
            && fp.bytes().all(|c| c.is_ascii_digit())
    };
    let exp_ok = exp.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && e.bytes().all(|c| c.is_ascii_digit())
    });
    mant_ok && exp_ok
}

fn parses_as_go_int(s: &str) -> bool {
    crate::strlit::number(s, crate::lex::Kind::Number)
        .map(|n| {
            (n.int.is_some() || n.uint_only) && !s.contains(['.', 'e', 'E', 'p', 'P'])
                || crate::strlit::is_hex_int(s)
        })
        .unwrap_or(false)
}

/// Whether go-yaml v2 would read `s`, unquoted, as something other than a string.
fn resolves_non_str(s: &str) -> bool {
    const MAP: &[&str] = &[
        "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON", "n", "N", "no",
        "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF", "", "~", "null", "Null",
        "NULL", ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf",
        "-.Inf", "-.INF",
    ];
    if MAP.contains(&s) {
        return true;
    }
    match s.as_bytes()[0] {
        b'.' => s[1..].bytes().all(|c| c.is_ascii_digit()) && s.len() > 1 || yaml_style_float(s),
        b'0'..=b'9' | b'+' | b'-' => {
            if is_timestamp(s) {
                return true;
            }
            let plain = s.replace('_', "");
            if parses_as_go_int(&plain) || yaml_style_float(&plain) {
                return true;
            }
            let bin = plain
                .strip_prefix("0b")
                .or_else(|| plain.strip_prefix("-0b"));
            bin.is_some_and(|b| !b.is_empty() && b.bytes().all(|c| c == b'0' || c == b'1'))
        }
        _ => false,
    }
}

fn is_base60_float(s: &str) -> bool {
    let t = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (main, _frac) = match t.split_once('.') {
        Some((m, f)) => (m, Some(f)),
        None => (t, None),
    };
    let mut parts = main.split(':');
    let Some(first) = parts.next() else {
        return false;
    };
    if first.is_empty()
        || !first.as_bytes()[0].is_ascii_digit()
        || !first.bytes().all(|c| c.is_ascii_digit() || c == b'_')
    {
        return false;
    }
    let mut n = 0;
    for p in parts {
        n += 1;
        let ok = match p.len() {
            1 => p.as_bytes()[0].is_ascii_digit(),
            2 => (b'0'..=b'5').contains(&p.as_bytes()[0]) && p.as_bytes()[1].is_ascii_digit(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    n > 0 && _frac.is_none_or(|f| f.bytes().all(|c| c.is_ascii_digit() || c == b'_'))
}

fn is_printable(c: char) -> bool {
    let u = c as u32;
    u == 0x0A
        || (0x20..=0x7E).contains(&u)
        || u == 0x85
        || (0xA0..=0xD7FF).contains(&u)
        || ((0xE000..=0xFFFD).contains(&u) && u != 0xFEFF)
        || (0x10000..=0x10FFFF).contains(&u)
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn is_blankz(c: Option<char>) -> bool {
    match c {
        None => true,
        Some(c) => c == ' ' || c == '\t' || is_break(c) || c == '\0',
    }
}

struct Analysis {
    multiline: bool,
    block_plain: bool,
    single: bool,
    block: bool,
}

/// libyaml's `yaml_emitter_analyze_scalar` (block context only).
fn analyze(s: &str) -> Analysis {
    if s.is_empty() {
        return Analysis {
            multiline: false,
            block_plain: true,
            single: true,
            block: false,
        };
    }
    let chars: Vec<char> = s.chars().collect();
    let (mut block_ind, mut flow_ind, mut line_breaks, mut special) = (false, false, false, false);
    let (mut leading_space, mut leading_break, mut trailing_space, mut trailing_break) =
        (false, false, false, false);
    let (mut break_space, mut space_break, mut prev_space, mut prev_break) =
        (false, false, false, false);
    if s.starts_with("---") || s.starts_with("...") {
        block_ind = true;
        flow_ind = true;
    }
    let mut preceded_ws = true;
    let mut followed_ws = is_blankz(chars.get(1).copied());
    let n = chars.len();
    for (i, &c) in chars.iter().enumerate() {
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => {
                    flow_ind = true;
                    block_ind = true;
                }
                '?' | ':' => {
                    flow_ind = true;
                    if followed_ws {
                        block_ind = true;
                    }
                }
                '-' if followed_ws => {
                    flow_ind = true;
                    block_ind = true;
                }
                _ => {}
            }
        } else {
            match c {
                ',' | '?' | '[' | ']' | '{' | '}' => flow_ind = true,
                ':' => {
                    flow_ind = true;
                    if followed_ws {
                        block_ind = true;
                    }
                }
                '#' if preceded_ws => {
                    flow_ind = true;
                    block_ind = true;
                }
                _ => {}
            }
        }
        if !is_printable(c) || c == '\u{FEFF}' {
            special = true;
        }
        if is_break(c) {
            line_breaks = true;
        }
        if c == ' ' {
            if i == 0 {
                leading_space = true;
            }
            if i == n - 1 {
                trailing_space = true;
            }
            if prev_break {
                break_space = true;
            }
            prev_space = true;
            prev_break = false;
        } else if is_break(c) {
            if i == 0 {
                leading_break = true;
            }
            if i == n - 1 {
                trailing_break = true;
            }
            if prev_space {
                space_break = true;
            }
            prev_space = false;
            prev_break = true;
        } else {
            prev_space = false;
            prev_break = false;
        }
        preceded_ws = is_blankz(Some(c));
        followed_ws = is_blankz(chars.get(i + 2).copied());
    }
    let (mut block_plain, mut single, mut block) = (true, true, true);
    if leading_space || leading_break || trailing_space || trailing_break {
        block_plain = false;
    }
    if trailing_space {
        block = false;
    }
    if break_space {
        block_plain = false;
        single = false;
    }
    if space_break || special {
        block_plain = false;
        single = false;
        block = false;
    }
    if line_breaks {
        block_plain = false;
    }
    if block_ind {
        block_plain = false;
    }
    let _ = flow_ind;
    Analysis {
        multiline: line_breaks,
        block_plain,
        single,
        block,
    }
}

struct Out {
    buf: String,
    col: usize,
}

impl Out {
    fn push(&mut self, s: &str) {
        for c in s.chars() {
            if c == '\n' {
                self.col = 0;
            } else {
                self.col += 1;
            }
        }
        self.buf.push_str(s);
    }

    fn indent(&mut self, n: usize) {
        self.push("\n");
        self.push(&" ".repeat(n));
    }
}

#[derive(PartialEq)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

fn write_double(o: &mut Out, s: &str, indent: usize, breaks: bool) {
    o.push("\"");
    let chars: Vec<char> = s.chars().collect();
    let mut spaces = false;
    for (i, &c) in chars.iter().enumerate() {
        if !is_printable(c) || c == '\u{FEFF}' || is_break(c) || c == '"' || c == '\\' {
            let e = match c {
                '\0' => "\\0".to_string(),
                '\x07' => "\\a".to_string(),
                '\x08' => "\\b".to_string(),
                '\t' => "\\t".to_string(),
                '\n' => "\\n".to_string(),
                '\x0b' => "\\v".to_string(),
                '\x0c' => "\\f".to_string(),
                '\r' => "\\r".to_string(),
                '\x1b' => "\\e".to_string(),
                '"' => "\\\"".to_string(),
                '\\' => "\\\\".to_string(),
                '\u{85}' => "\\N".to_string(),
                '\u{A0}' => "\\_".to_string(),
                '\u{2028}' => "\\L".to_string(),
                '\u{2029}' => "\\P".to_string(),
                c if (c as u32) <= 0xFF => format!("\\x{:02X}", c as u32),
                c if (c as u32) <= 0xFFFF => format!("\\u{:04X}", c as u32),
                c => format!("\\U{:08X}", c as u32),
            };
            o.push(&e);
            spaces = false;
        } else if c == ' ' {
            if breaks && !spaces && o.col > BEST_WIDTH && i != 0 && i != chars.len() - 1 {
                o.indent(indent);
                if chars.get(i + 1) == Some(&' ') {
                    o.push("\\");
                }
            } else {
                o.push(" ");
            }
            spaces = true;
        } else {
            o.push(c.encode_utf8(&mut [0; 4]));
            spaces = false;
        }
    }
    o.push("\"");
}

fn write_plain_or_single(o: &mut Out, s: &str, indent: usize, breaks: bool, single: bool) {
    if single {
        o.push("'");
    }
    let chars: Vec<char> = s.chars().collect();
    let mut spaces = false;
    for (i, &c) in chars.iter().enumerate() {
        if c == ' ' {
            let next_space = chars.get(i + 1) == Some(&' ');
            let edge_ok = !single || (i != 0 && i != chars.len() - 1);
            if breaks && !spaces && o.col > BEST_WIDTH && edge_ok && !next_space {
                o.indent(indent);
            } else {
                o.push(" ");
            }
            spaces = true;
        } else {
            if single && c == '\'' {
                o.push("'");
            }
            o.push(c.encode_utf8(&mut [0; 4]));
            spaces = false;
        }
    }
    if single {
        o.push("'");
    }
}

fn write_literal(o: &mut Out, s: &str, indent: usize) {
    o.push("|");
    let first = s.chars().next();
    if first == Some(' ') || first.is_some_and(is_break) {
        o.push("2");
    }
    let chars: Vec<char> = s.chars().collect();
    let n = chars.len();
    if n == 0 || !is_break(chars[n - 1]) {
        o.push("-");
    } else if n == 1 || is_break(chars[n - 2]) {
        o.push("+");
    }
    o.push("\n");
    let mut breaks = true;
    for &c in &chars {
        if is_break(c) {
            o.push("\n");
            breaks = true;
        } else {
            if breaks {
                o.push(&" ".repeat(indent));
                breaks = false;
            }
            o.push(c.encode_utf8(&mut [0; 4]));
        }
    }
}

/// Writes a string scalar; `key` = simple-key context. Returns whether it ended with a newline.
fn write_str(o: &mut Out, s: &str, indent: usize, key: bool) -> bool {
    let can_plain = !resolves_non_str(s) && !is_base60_float(s);
    let mut style = if s.contains('\n') {
        Style::Literal
    } else if can_plain {
        Style::Plain
    } else {
        Style::Double
    };
    let a = analyze(s);
    if style == Style::Plain && (!a.block_plain || (s.is_empty() && key)) {
        style = Style::Single;
    }
    if style == Style::Single && !a.single {
        style = Style::Double;
    }
    if style == Style::Literal && (!a.block || key) {
        style = Style::Double;
    }
    let _ = a.multiline;
    match style {
        Style::Plain => write_plain_or_single(o, s, indent, !key, false),
        Style::Single => write_plain_or_single(o, s, indent, !key, true),
        Style::Double => write_double(o, s, indent, !key),
        Style::Literal => {
            write_literal(o, s, indent.max(2));
            if !o.buf.ends_with('\n') {
                o.push("\n");
            }
            return true;
        }
    }
    false
}

fn scalar_text(v: &Value) -> Option<String> {
    Some(match v {
        Value::Invalid | Value::Nil => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i, _) => i.to_string(),
        Value::Float(f) => {
            let j = format_json_float(*f);
            if j.bytes().all(|c| c.is_ascii_digit() || c == b'-')
                && (j.parse::<i64>().is_ok() || j.parse::<u64>().is_ok())
            {
                j
            } else {
                format_g(*f)
            }
        }
        Value::List(l, _, nil) if l.is_empty() => {
            if *nil {
                "null".into()
            } else {
                "[]".into()
            }
        }
        Value::Map(m, _) if m.borrow().is_empty() => "{}".into(),
        _ => return None,
    })
}

fn sorted_entries(v: &Value) -> Vec<(String, Value)> {
    let Value::Map(m, _) = v else {
        return Vec::new();
    };
    let mut e: Vec<(String, Value)> = m
        .borrow()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    e.sort_by(|a, b| {
        if key_less(&a.0, &b.0) {
            Ordering::Less
        } else if key_less(&b.0, &a.0) {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    });
    e
}

/// Writes a node that starts at the current position; `indent` is its block indentation.
fn write_node(o: &mut Out, v: &Value, indent: usize, depth: usize) -> Result<(), String> {
    if depth > 500 {
        return Err(
            "error marshaling into JSON: json: unsupported value: encountered a cycle".into(),
        );
    }
    if o.buf.len() > crate::gofmt::print_cap() {
        return Err("exceeded maximum output size".into());
    }
    if let Value::Float(f) = v
        && !f.is_finite()
    {
        return Err(format!(
            "error marshaling into JSON: json: unsupported value: {}",
            format_g(*f)
        ));
    }
    if let Some(t) = scalar_text(v) {
        o.push(&t);
        o.push("\n");
        return Ok(());
    }
    match v {
        Value::Str(s) => {
            let ended = write_str(o, s, indent, false);
            if !ended {
                o.push("\n");
            }
        }
        Value::List(l, ..) => {
            for (i, e) in l.iter().enumerate() {
                if i > 0 {
                    o.push(&" ".repeat(indent));
                }
                o.push("- ");
                write_node(o, e, indent + 2, depth + 1)?;
            }
        }
        Value::Map(..) => {
            for (i, (k, e)) in sorted_entries(v).iter().enumerate() {
                if i > 0 {
                    o.push(&" ".repeat(indent));
                }
                write_str(o, k, indent, true);
                o.push(":");
                match e {
                    Value::Map(..) if scalar_text(e).is_none() => {
                        o.push("\n");
                        o.push(&" ".repeat(indent + 2));
                        write_node(o, e, indent + 2, depth + 1)?;
                    }
                    Value::List(..) if scalar_text(e).is_none() => {
                        o.push("\n");
                        o.push(&" ".repeat(indent));
                        write_node(o, e, indent, depth + 1)?;
                    }
                    _ => {
                        o.push(" ");
                        write_node(o, e, indent + 2, depth + 1)?;
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Characters encoding/json leaves raw that go-yaml's reader then rejects.
fn has_yaml_control(v: &Value, depth: usize, budget: &mut usize) -> bool {
    let bad = |s: &str| {
        s.chars()
            .any(|c| matches!(c as u32, 0x7F..=0x84 | 0x86..=0x9F))
    };
    if depth > 500 || *budget == 0 {
        return false;
    }
    *budget -= 1;
    match v {
        Value::Str(s) => bad(s),
        Value::List(l, ..) => l.iter().any(|e| has_yaml_control(e, depth + 1, budget)),
        Value::Map(m, _) => m
            .borrow()
            .iter()
            .any(|(k, e)| bad(k) || has_yaml_control(e, depth + 1, budget)),
        _ => false,
    }
}

/// `sigs.k8s.io/yaml.Marshal(v)`.
pub(crate) fn marshal(v: &Value) -> Result<String, String> {
    if has_yaml_control(v, 0, &mut 1_000_000) {
        return Err(
            "error converting JSON to YAML: yaml: control characters are not allowed".into(),
        );
    }
    let mut o = Out {
        buf: String::new(),
        col: 0,
    };
    write_node(&mut o, v, 0, 0)?;
    Ok(o.buf)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
