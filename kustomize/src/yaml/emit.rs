//! `serde_json::Value` to YAML text in the style `kubectl kustomize` prints: mapping keys sorted,
//! two-space indent, block sequences not indented under their key, literal block scalars for
//! multi-line strings, and quotes only where a plain scalar would read back differently.

use std::fmt::Write as _;

use serde_json::Value;

use super::scalar::{looks_like_timestamp, resolve_plain};

/// Objects at or above which [`to_yaml_stream`] prints on several threads.
const PARALLEL_MIN_OBJECTS: usize = 48;

/// Serialises objects as a YAML stream separated by `---` lines (no leading separator).
/// Large streams are printed in pieces on several threads (each object's text depends only
/// on the object) and joined in order.
pub fn to_yaml_stream(objs: &[Value]) -> String {
    let threads = crate::par::threads();
    let mut out = String::new();
    if threads < 2 || objs.len() < PARALLEL_MIN_OBJECTS {
        write_stream(&mut out, objs, true);
        return out;
    }
    // More pieces than threads: objects differ a lot in size (a CRD against a Service).
    let piece = objs.len().div_ceil(threads * 4);
    let chunks: Vec<(usize, &[Value])> = objs.chunks(piece).enumerate().collect();
    let texts = crate::par::map_ordered(&chunks, threads, |(i, chunk)| {
        let mut text = String::new();
        write_stream(&mut text, chunk, *i == 0);
        text
    });
    out.reserve(texts.iter().map(String::len).sum());
    for t in texts {
        out.push_str(&t);
    }
    out
}

/// Appends objects to `out`, each but the first of the stream after a `---` line.
fn write_stream(out: &mut String, objs: &[Value], starts_stream: bool) {
    for (i, obj) in objs.iter().enumerate() {
        if i > 0 || !starts_stream {
            out.push_str("---\n");
        }
        write_document(out, obj);
    }
}

/// Serialises one value as a YAML document.
pub fn to_yaml(v: &Value) -> String {
    let mut out = String::new();
    write_document(&mut out, v);
    out
}

fn write_document(out: &mut String, v: &Value) {
    match v {
        Value::Object(m) if !m.is_empty() => write_map(out, v, 0),
        Value::Array(a) if !a.is_empty() => write_seq(out, v, 0),
        other => {
            // Like libyaml, a scalar document's block content and folded lines are indented
            // (at column 0 a `---` line would end the document).
            write_scalar_inline(out, other, 2);
            out.push('\n');
        }
    }
}

fn indent(out: &mut String, n: usize) {
    const SPACES: &str = "                                                                ";
    let mut left = n;
    while left > 0 {
        let k = left.min(SPACES.len());
        out.push_str(&SPACES[..k]);
        left -= k;
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
    if a.is_ascii() && b.is_ascii() {
        // ASCII bytes are their own code points: no decoding, no allocation.
        return units_order(a.as_bytes(), b.as_bytes(), char::from);
    }
    let ar: Vec<char> = a.chars().collect();
    let br: Vec<char> = b.chars().collect();
    units_order(&ar, &br, |c| c)
}

/// [`key_order`] over code points given as `T` (bytes of ASCII text, or chars).
fn units_order<T: Copy + Ord>(ar: &[T], br: &[T], ch: impl Fn(T) -> char) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let digit = |u: T| ch(u).is_ascii_digit();
    let mut digits = false;
    let n = ar.len().min(br.len());
    for i in 0..n {
        if ar[i] == br[i] {
            digits = digit(ar[i]);
            continue;
        }
        let al = ch(ar[i]).is_alphabetic();
        let bl = ch(br[i]).is_alphabetic();
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
        if ch(ar[i]) == '0' || ch(br[i]) == '0' {
            let mut j = i;
            while j > 0 && digit(ar[j - 1]) {
                j -= 1;
                if ch(ar[j]) != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let value = |u: T| i64::from(ch(u) as u8 - b'0');
        let mut ai = i;
        while ai < ar.len() && digit(ar[ai]) {
            an = an.saturating_mul(10).saturating_add(value(ar[ai]));
            ai += 1;
        }
        let mut bi = i;
        while bi < br.len() && digit(br[bi]) {
            bn = bn.saturating_mul(10).saturating_add(value(br[bi]));
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
        let start = out.len();
        write_key(out, k);
        // Bytes bound characters: only a long key needs counting.
        if out.len() - start > MAX_SIMPLE_KEY && out[start..].chars().count() > MAX_SIMPLE_KEY {
            // Like go-yaml: a long key is written as an explicit `? key` (an implicit key may
            // not exceed 1024 characters).
            out.insert_str(start, "? ");
            out.push('\n');
            indent(out, ind);
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

fn write_key(out: &mut String, k: &str) {
    match style_for(k) {
        Style::Plain => out.push_str(k),
        Style::Single => push_single_quoted(out, k),
        Style::Double | Style::Literal => push_double_quoted(out, k),
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
    // Printable ASCII (and line breaks) needs no decoding; anything else is checked per char.
    let plain_ascii = s.bytes().all(|b| (b' '..0x7f).contains(&b) || b == b'\n');
    if !plain_ascii && s.chars().any(|c| !is_printable(c)) {
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

fn push_single_quoted(out: &mut String, s: &str) {
    out.push('\'');
    for (i, part) in s.split('\'').enumerate() {
        if i > 0 {
            out.push_str("''");
        }
        out.push_str(part);
    }
    out.push('\'');
}

fn push_double_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        push_escaped(out, c);
    }
    out.push('"');
}

/// Appends `c` as it appears inside a double-quoted scalar; returns the characters written.
fn push_escaped(out: &mut String, c: char) -> usize {
    let fixed = match c {
        '"' => "\\\"",
        '\\' => "\\\\",
        '\n' => "\\n",
        '\t' => "\\t",
        '\r' => "\\r",
        '\0' => "\\0",
        c if !is_printable(c) => {
            let cp = c as u32;
            let before = out.len();
            let _ = if cp <= 0xff {
                write!(out, "\\x{cp:02X}")
            } else if cp <= 0xffff {
                write!(out, "\\u{cp:04X}")
            } else {
                write!(out, "\\U{cp:08X}")
            };
            return out.len() - before;
        }
        c => {
            out.push(c);
            return 1;
        }
    };
    out.push_str(fixed);
    fixed.len()
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
    let mut col = column(out);
    if s.len() + col <= BEST_WIDTH || !s.contains(' ') {
        match style {
            Style::Plain => out.push_str(s),
            Style::Single => push_single_quoted(out, s),
            _ => push_double_quoted(out, s),
        }
        return;
    }
    let bytes = s.as_bytes();
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
    // Byte offsets: a space is one byte, so "the next character is a space" and "this space is
    // the last character" read the same on bytes as on characters.
    let last = bytes.len() - 1;
    for (i, c) in s.char_indices() {
        if c == ' ' {
            let next_space = bytes.get(i + 1) == Some(&b' ');
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
        col += match (quote, c) {
            (Some('\''), '\'') => {
                out.push_str("''");
                2
            }
            (Some('"'), c) => push_escaped(out, c),
            (_, c) => {
                out.push(c);
                1
            }
        };
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
