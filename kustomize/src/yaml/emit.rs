//! `serde_json::Value` to YAML text in the style `kubectl kustomize` prints: mapping keys sorted,
//! two-space indent, block sequences not indented under their key, literal block scalars for
//! multi-line strings, and quotes only where a plain scalar would read back differently.

use std::fmt::Write as _;

use serde_json::Value;

use super::scalar::{looks_like_timestamp, resolve_plain};

/// Serialises objects as a YAML stream separated by `---` lines (no leading separator).
pub fn to_yaml_stream(objs: &[Value]) -> String {
    let mut out = String::new();
    for (i, obj) in objs.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&to_yaml(obj));
    }
    out
}

/// Serialises one value as a YAML document.
pub fn to_yaml(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Object(m) if !m.is_empty() => write_map(&mut out, v, 0),
        Value::Array(a) if !a.is_empty() => write_seq(&mut out, v, 0),
        other => {
            // Like libyaml, a scalar document's block content and folded lines are indented
            // (at column 0 a `---` line would end the document).
            write_scalar_inline(&mut out, other, 2);
            out.push('\n');
        }
    }
    out
}

fn indent(out: &mut String, n: usize) {
    for _ in 0..n {
        out.push(' ');
    }
}

fn sorted_entries(v: &Value) -> Vec<(&String, &Value)> {
    let mut entries: Vec<(&String, &Value)> = match v {
        Value::Object(m) => m.iter().collect(),
        _ => Vec::new(),
    };
    entries.sort_by(|a, b| key_order(a.0, b.0));
    entries
}

/// The order go-yaml gives mapping keys: letters by code point, a non-letter before a letter
/// (after a letter when following digits), and runs of digits compared as numbers.
pub fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let ar: Vec<char> = a.chars().collect();
    let br: Vec<char> = b.chars().collect();
    let mut digits = false;
    let n = ar.len().min(br.len());
    for i in 0..n {
        if ar[i] == br[i] {
            digits = ar[i].is_ascii_digit();
            continue;
        }
        let al = ar[i].is_alphabetic();
        let bl = br[i].is_alphabetic();
        if al && bl {
            return ar[i].cmp(&br[i]);
        }
        if al || bl {
            let a_first = if digits { al } else { bl };
            return if a_first {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        let (mut an, mut bn): (i64, i64) = (0, 0);
        if ar[i] == '0' || br[i] == '0' {
            let mut j = i;
            while j > 0 && ar[j - 1].is_ascii_digit() {
                j -= 1;
                if ar[j] != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let mut ai = i;
        while ai < ar.len() && ar[ai].is_ascii_digit() {
            an = an
                .saturating_mul(10)
                .saturating_add(i64::from(ar[ai] as u8 - b'0'));
            ai += 1;
        }
        let mut bi = i;
        while bi < br.len() && br[bi].is_ascii_digit() {
            bn = bn
                .saturating_mul(10)
                .saturating_add(i64::from(br[bi] as u8 - b'0'));
            bi += 1;
        }
        if an != bn {
            return an.cmp(&bn);
        }
        if ai != bi {
            return ai.cmp(&bi);
        }
        return ar[i].cmp(&br[i]);
    }
    ar.len().cmp(&br.len())
}

/// go-yaml's longest implicit (simple) key; longer keys are written as `? key`.
const MAX_SIMPLE_KEY: usize = 128;

/// Writes a non-empty mapping whose keys start at column `ind`; the first key is written
/// at the current position (the caller has already indented).
fn write_map_body(out: &mut String, v: &Value, ind: usize, first_inline: bool) {
    for (i, (k, val)) in sorted_entries(v).into_iter().enumerate() {
        if i > 0 || !first_inline {
            indent(out, ind);
        }
        let key = key_text(k);
        if key.chars().count() > MAX_SIMPLE_KEY {
            // Like go-yaml: a long key is written as an explicit `? key` (an implicit key may
            // not exceed 1024 characters).
            out.push_str("? ");
            out.push_str(&key);
            out.push('\n');
            indent(out, ind);
        } else {
            out.push_str(&key);
        }
        out.push(':');
        match val {
            Value::Object(m) if !m.is_empty() => {
                out.push('\n');
                write_map(out, val, ind + 2);
            }
            Value::Array(a) if !a.is_empty() => {
                out.push('\n');
                write_seq(out, val, ind);
            }
            _ => {
                out.push(' ');
                write_scalar_inline(out, val, ind + 2);
                out.push('\n');
            }
        }
    }
}

fn write_map(out: &mut String, v: &Value, ind: usize) {
    write_map_body(out, v, ind, false);
}

fn write_seq(out: &mut String, v: &Value, ind: usize) {
    let Value::Array(items) = v else { return };
    for item in items {
        indent(out, ind);
        write_seq_item(out, item, ind);
    }
}

/// Writes `- item` where the dash is at column `ind` and has already been indented to.
fn write_seq_item(out: &mut String, item: &Value, ind: usize) {
    out.push_str("- ");
    match item {
        Value::Object(m) if !m.is_empty() => write_map_body(out, item, ind + 2, true),
        Value::Array(a) if !a.is_empty() => {
            for (i, sub) in a.iter().enumerate() {
                if i > 0 {
                    indent(out, ind + 2);
                }
                write_seq_item(out, sub, ind + 2);
            }
        }
        _ => {
            write_scalar_inline(out, item, ind + 2);
            out.push('\n');
        }
    }
}

/// Writes a scalar (or an empty collection) after `key: ` or `- `; block scalar content is
/// indented to `content_ind`.
fn write_scalar_inline(out: &mut String, v: &Value, content_ind: usize) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number_text(n)),
        Value::Object(_) => out.push_str("{}"),
        Value::Array(_) => out.push_str("[]"),
        Value::String(s) => write_string(out, s, content_ind),
    }
}

/// Formats a number like Go's `encoding/json` does.
pub fn number_text(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let Some(f) = n.as_f64() else {
        return n.to_string();
    };
    go_float(f)
}

fn go_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // exponent form, with Go's `e-07` shortened to `e-7`
        let s = format!("{f:e}");
        let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        return format!("{mant}e{sign}{digits}");
    }
    let s = format!("{f}");
    s
}

fn key_text(k: &str) -> String {
    match style_for(k) {
        Style::Plain => k.to_string(),
        Style::Single => single_quoted(k),
        Style::Double | Style::Literal => double_quoted(k),
    }
}

#[derive(PartialEq)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

fn is_yaml11_special(s: &str) -> bool {
    matches!(
        s,
        "y" | "Y"
            | "yes"
            | "Yes"
            | "YES"
            | "n"
            | "N"
            | "no"
            | "No"
            | "NO"
            | "on"
            | "On"
            | "ON"
            | "off"
            | "Off"
            | "OFF"
    ) || is_base60(s)
}

fn is_base60(s: &str) -> bool {
    // [-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (main, frac) = s.split_once('.').unwrap_or((s, ""));
    if !frac.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return false;
    }
    let mut parts = main.split(':');
    let Some(head) = parts.next() else {
        return false;
    };
    if !head.starts_with(|c: char| c.is_ascii_digit())
        || !head.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return false;
    }
    let mut any = false;
    for p in parts {
        any = true;
        if p.is_empty() || p.len() > 2 || !p.chars().all(|c| c.is_ascii_digit()) {
            return false;
        }
        if p.len() == 2 && p.as_bytes()[0] > b'5' {
            return false;
        }
    }
    any
}

/// go-yaml's notion of a printable character (no C0/C1 controls, no BOM, nothing outside the
/// Basic Multilingual Plane, no U+FFFE/U+FFFF).
fn is_printable(c: char) -> bool {
    c == '\n'
        || (c >= ' '
            && c != '\u{7f}'
            && !('\u{80}'..'\u{a0}').contains(&c)
            && c != '\u{feff}'
            && c != '\u{fffe}'
            && c != '\u{ffff}'
            && (c as u32) <= 0xffff)
}

/// Whether a plain scalar with this text would not read back as this string (in YAML 1.2 as
/// kustomize resolves it, or as a YAML 1.1 boolean or sexagesimal number).
fn reads_as_other_type(s: &str) -> bool {
    let first = s.as_bytes()[0];
    let special_float = matches!(
        s,
        ".inf"
            | ".Inf"
            | ".INF"
            | ".nan"
            | ".NaN"
            | ".NAN"
            | "+.inf"
            | "+.Inf"
            | "+.INF"
            | "-.inf"
            | "-.Inf"
            | "-.INF"
    );
    if special_float {
        return true;
    }
    if first.is_ascii_digit() || matches!(first, b'-' | b'+' | b'.') {
        return !matches!(resolve_plain(s), Value::String(ref x) if x == s)
            || is_base60(s)
            || looks_like_timestamp(s);
    }
    matches!(
        s,
        "~" | "null" | "Null" | "NULL" | "true" | "True" | "TRUE" | "false" | "False" | "FALSE"
    ) || is_yaml11_special(s)
}

fn style_for(s: &str) -> Style {
    if s.is_empty() {
        return Style::Double;
    }
    if reads_as_other_type(s) {
        return Style::Double;
    }
    let special = s.chars().any(|c| !is_printable(c));
    if special {
        return Style::Double;
    }
    if s.contains('\n') {
        let trailing_space_line = s.split('\n').any(|l| l.ends_with(' ') || l.ends_with('\t'));
        // Only line breaks: a block scalar would have no content line (clipping reads it back
        // empty, and yaml-rust2 rejects a `---` right after a kept one).
        if trailing_space_line || s.bytes().all(|b| b == b'\n') {
            return Style::Double;
        }
        return Style::Literal;
    }
    if plain_ok(s) {
        Style::Plain
    } else {
        Style::Single
    }
}

fn plain_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let first = b[0];
    if b.first().is_some_and(|c| *c == b' ') || b.last().is_some_and(|c| *c == b' ') {
        return false;
    }
    if b",[]{}#&*!|>'\"%@`".contains(&first) {
        return false;
    }
    if (first == b'-' || first == b'?' || first == b':') && (b.len() == 1 || b[1] == b' ') {
        return false;
    }
    // Like go-yaml: anything that starts like a document marker is quoted (a plain `... x` at
    // column 0 ends the document).
    if s.starts_with("---") || s.starts_with("...") {
        return false;
    }
    if s.contains(": ") || s.contains(" #") || s.ends_with(':') || s.contains('\t') {
        return false;
    }
    true
}

fn single_quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c if !is_printable(c) => {
                let cp = c as u32;
                if cp <= 0xff {
                    let _ = write!(out, "\\x{cp:02X}");
                } else if cp <= 0xffff {
                    let _ = write!(out, "\\u{cp:04X}");
                } else {
                    let _ = write!(out, "\\U{cp:08X}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// go-yaml's preferred line width: flow scalars longer than this are folded at spaces.
const BEST_WIDTH: usize = 80;

/// The column the next character is written at.
fn column(out: &str) -> usize {
    let start = out.rfind('\n').map_or(0, |i| i + 1);
    out[start..].chars().count()
}

/// Writes a plain, single- or double-quoted scalar, folding long lines at single spaces the
/// way go-yaml's emitter does (continuation lines indented to `content_ind`).
fn write_folded(out: &mut String, s: &str, style: &Style, content_ind: usize) {
    if s.len() + column(out) <= BEST_WIDTH || !s.contains(' ') {
        match style {
            Style::Plain => out.push_str(s),
            Style::Single => out.push_str(&single_quoted(s)),
            _ => out.push_str(&double_quoted(s)),
        }
        return;
    }
    let chars: Vec<char> = s.chars().collect();
    let mut col = column(out);
    let quote = match style {
        Style::Plain => None,
        Style::Single => Some('\''),
        _ => Some('"'),
    };
    if let Some(q) = quote {
        out.push(q);
        col += 1;
    }
    let mut spaces = false;
    let last = chars.len() - 1;
    for (i, &c) in chars.iter().enumerate() {
        if c == ' ' {
            let next_space = chars.get(i + 1) == Some(&' ');
            let may_break = !spaces
                && col > BEST_WIDTH
                && match style {
                    Style::Plain => !next_space,
                    Style::Single => i != 0 && i != last && !next_space,
                    _ => i != 0 && i != last,
                };
            if may_break {
                out.push('\n');
                indent(out, content_ind);
                col = content_ind;
                if quote == Some('"') && next_space {
                    out.push('\\');
                    col += 1;
                }
            } else {
                out.push(' ');
                col += 1;
            }
            spaces = true;
            continue;
        }
        spaces = false;
        let piece = match (quote, c) {
            (Some('\''), '\'') => "''".to_string(),
            (Some('"'), c) => {
                let q = double_quoted(&c.to_string());
                q[1..q.len() - 1].to_string()
            }
            (_, c) => c.to_string(),
        };
        col += piece.chars().count();
        out.push_str(&piece);
    }
    if let Some(q) = quote {
        out.push(q);
    }
}

fn write_string(out: &mut String, s: &str, content_ind: usize) {
    match style_for(s) {
        style @ (Style::Plain | Style::Single | Style::Double) => {
            write_folded(out, s, &style, content_ind)
        }
        Style::Literal => {
            let body = s.trim_end_matches('\n');
            let trailing = s.len() - body.len();
            out.push('|');
            // an indentation indicator when the text starts with a space or a line break
            if s.starts_with([' ', '\n']) {
                out.push('2');
            }
            match trailing {
                0 => out.push('-'),
                1 => {}
                _ => out.push('+'),
            }
            let mut lines: Vec<&str> = body.split('\n').collect();
            lines.extend(std::iter::repeat_n("", trailing.saturating_sub(1)));
            for line in lines {
                out.push('\n');
                if !line.is_empty() {
                    indent(out, content_ind);
                    out.push_str(line);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::parse::parse_stream;
    use serde_json::json;

    #[test]
    fn kubectl_style() {
        let v = json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x", "labels": {}},
            "data": {"y": "yes", "b": "a: b", "m": "multi\nline\n", "n": "one\ntwo", "z": "  lead", "e": ""},
            "list": [{"b": 1, "a": [1, 2]}, [3, 4], "s"]});
        let text = to_yaml(&v);
        let expected = "apiVersion: v1\ndata:\n  b: 'a: b'\n  e: \"\"\n  m: |\n    multi\n    line\n  \"n\": |-\n    one\n    two\n  \"y\": \"yes\"\n  z: '  lead'\nkind: ConfigMap\nlist:\n- a:\n  - 1\n  - 2\n  b: 1\n- - 3\n  - 4\n- s\nmetadata:\n  labels: {}\n  name: x\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn round_trips_awkward_strings() {
        let strings = [
            "yes",
            "0777",
            "1e3",
            "~",
            "",
            " x",
            "x ",
            "- x",
            "-x",
            "a #b",
            "#c",
            "a:b",
            "a: b",
            "x:",
            "@x",
            "'q'",
            "\"dq\"",
            "tab\there",
            "multi\nline",
            "trail \nx",
            "\nlead",
            "end\n\n",
            "1:20",
            "2020-01-01",
            "null",
            "=",
            "*",
            "!x",
            "[a]",
            "{b}",
            "%x",
            "line\n  indented\n",
            "\u{1}ctl",
            "ünï",
            "true",
            "False",
        ];
        for s in strings {
            let v = json!({"k": s, "l": [s]});
            let text = to_yaml(&v);
            let back = parse_stream(&text, "t").unwrap();
            assert_eq!(back, vec![v.clone()], "text was:\n{text}");
        }
    }

    #[test]
    fn keys_sort_like_go_yaml() {
        // the order kubectl kustomize prints these keys in
        let mut keys = vec![
            "NAMESPACE_LABEL",
            "NAME_LABEL",
            "xy",
            "x.y",
            "x-y",
            "a10",
            "a9",
            "b",
            "B",
            "a_b",
            "ab",
            "a01",
            "a1",
        ];
        keys.sort_by(|a, b| key_order(a, b));
        let want = [
            "B",
            "NAME_LABEL",
            "NAMESPACE_LABEL",
            "a_b",
            "a1",
            "a01",
            "a9",
            "a10",
            "ab",
            "b",
            "x-y",
            "x.y",
            "xy",
        ];
        assert_eq!(keys, want);
    }

    #[test]
    fn floats_like_go() {
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(1.5e-7), "1.5e-7");
        assert_eq!(go_float(0.25), "0.25");
    }

    /// Found by the `yaml` fuzz target: scalar documents printed at column 0 swallowed the
    /// next `---` (literal) or started a line with `---` (folded double-quoted), a plain
    /// `... x` ended the document, a string of only line breaks read back empty, and a key
    /// over 1024 characters did not parse.
    #[test]
    fn scalar_documents_and_bare_line_breaks_round_trip() {
        let long = format!(
            "lit:t-----  {}li {{cn@m@], e\u{19e}{}\n---    --",
            "\u{16}".repeat(50),
            "\u{16}".repeat(30)
        );
        let docs = vec![
            json!("----  a x\n----&y text"),
            json!("e, ~, tru-\n# bG8=\n"),
            json!(long),
            json!("-siona.5"),
            json!({"k": "\n", "l": ["\n", "\n\n"], "m": {"n": "\n"}}),
            json!("\n"),
            json!("... fold----"),
            json!({"k": "...x", "l": ["---x", "... y"]}),
            json!({"k".repeat(1100): {"a".repeat(200): "v", "b": [1, "x".repeat(129)]}}),
            json!([{"q".repeat(130): ["s"], "r": {"t".repeat(130): {}}}]),
        ];
        let text = to_yaml_stream(&docs);
        let back = parse_stream(&text, "t").unwrap();
        assert_eq!(back, docs, "text was:\n{text}");
    }

    #[test]
    fn stream_separators() {
        let s = to_yaml_stream(&[json!({"a": 1}), json!({"b": 2})]);
        assert_eq!(s, "a: 1\n---\nb: 2\n");
    }
}
