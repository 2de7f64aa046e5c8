//! sprig's string, hashing, encoding and regex functions, and Flux Operator's `slugify`.

use super::ctx::{Ctx, FResult};
use crate::gofmt::{quote as go_quote, sprint_value};
use crate::value::{MapKind, Value};

/// The argument as a Go string (callers validated the type).
pub(crate) fn s(v: &Value) -> &str {
    match v {
        Value::Str(s) => s,
        _ => "",
    }
}

pub(crate) fn i(v: &Value) -> i64 {
    match v {
        Value::Int(i, _) => *i,
        _ => 0,
    }
}

/// sprig's `strval`.
pub(crate) fn strval(v: &Value) -> String {
    match v {
        Value::Str(s) => s.to_string(),
        v => sprint_value(v),
    }
}

/// Go's `s[a:b]` on bytes, with Go's panic text when out of range.
fn byte_slice(s: &str, a: usize, b: usize) -> Result<String, String> {
    if a > b || b > s.len() {
        return Err(format!(
            "runtime error: slice bounds out of range [{a}:{b}]"
        ));
    }
    Ok(String::from_utf8_lossy(&s.as_bytes()[a..b]).into_owned())
}

pub(super) fn trunc(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let (n, st) = (i(&a[0]), s(&a[1]));
    let len = st.len() as i64;
    let r = if n < 0 && len + n > 0 {
        byte_slice(st, (len + n) as usize, st.len())?
    } else if n >= 0 && len > n {
        byte_slice(st, 0, n as usize)?
    } else {
        st.to_string()
    };
    c.string(r)
}

pub(super) fn trim(c: &mut Ctx, a: Vec<Value>) -> FResult {
    c.string(s(&a[0]).trim().to_string())
}

/// Go's `unicode.ToUpper` on one rune: only one-to-one mappings (`ß` stays `ß`).
fn rune_upper(ch: char) -> char {
    let mut it = ch.to_uppercase();
    match (it.next(), it.next()) {
        (Some(u), None) => u,
        _ => ch,
    }
}

fn rune_lower(ch: char) -> char {
    if ch == '\u{130}' {
        return 'i';
    }
    let mut it = ch.to_lowercase();
    match (it.next(), it.next()) {
        (Some(l), None) => l,
        _ => ch,
    }
}

pub(super) fn upper(c: &mut Ctx, a: Vec<Value>) -> FResult {
    c.string(s(&a[0]).chars().map(rune_upper).collect())
}

pub(super) fn lower(c: &mut Ctx, a: Vec<Value>) -> FResult {
    c.string(s(&a[0]).chars().map(rune_lower).collect())
}

pub(super) fn title(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let mut out = String::new();
    let mut prev_sep = true;
    for ch in s(&a[0]).chars() {
        if prev_sep {
            out.push(rune_upper(ch));
        } else {
            out.push(ch);
        }
        prev_sep = if ch.is_ascii() {
            !(ch.is_ascii_alphanumeric() || ch == '_')
        } else if ch.is_alphanumeric() {
            false
        } else {
            ch.is_whitespace()
        };
    }
    c.string(out)
}

pub(super) fn substr(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let (start, end, st) = (i(&a[0]), i(&a[1]), s(&a[2]));
    let r = if start < 0 {
        if end < 0 {
            return Err(format!("runtime error: slice bounds out of range [:{end}]"));
        }
        byte_slice(st, 0, end as usize)?
    } else if end < 0 || end as usize > st.len() {
        byte_slice(st, start as usize, st.len())?
    } else {
        byte_slice(st, start as usize, end as usize)?
    };
    c.string(r)
}

pub(super) fn repeat(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let (n, st) = (i(&a[0]), s(&a[1]));
    if n < 0 {
        return Err("strings: negative Repeat count".into());
    }
    let total = (st.len() as u128) * (n as u128);
    if total > c.max_bytes as u128 {
        return Err(format!(
            "exceeded maximum output size ({} bytes)",
            c.max_bytes
        ));
    }
    c.produce(total as usize)?;
    Ok(Value::str(st.repeat(n as usize)))
}

pub(super) fn trim_all(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let cut = s(&a[0]);
    c.string(s(&a[1]).trim_matches(|ch| cut.contains(ch)).to_string())
}

pub(super) fn trim_suffix(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let b = s(&a[1]);
    c.string(b.strip_suffix(s(&a[0])).unwrap_or(b).to_string())
}

pub(super) fn trim_prefix(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let b = s(&a[1]);
    c.string(b.strip_prefix(s(&a[0])).unwrap_or(b).to_string())
}

pub(super) fn contains(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(s(&a[1]).contains(s(&a[0]))))
}

pub(super) fn has_prefix(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(s(&a[1]).starts_with(s(&a[0]))))
}

pub(super) fn has_suffix(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(s(&a[1]).ends_with(s(&a[0]))))
}

pub(super) fn quote(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let parts: Vec<String> = a
        .iter()
        .filter(|v| !matches!(v, Value::Nil | Value::Invalid))
        .map(|v| go_quote(&strval(v)))
        .collect();
    c.string(parts.join(" "))
}

pub(super) fn squote(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let parts: Vec<String> = a
        .iter()
        .filter(|v| !matches!(v, Value::Nil | Value::Invalid))
        .map(|v| format!("'{}'", sprint_value(v)))
        .collect();
    c.string(parts.join(" "))
}

pub(super) fn cat(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let parts: Vec<String> = a
        .iter()
        .filter(|v| !matches!(v, Value::Nil | Value::Invalid))
        .map(sprint_value)
        .collect();
    c.string(parts.join(" "))
}

fn replace_all(c: &mut Ctx, src: &str, old: &str, new: &str) -> Result<String, String> {
    let count = if old.is_empty() {
        src.chars().count() + 1
    } else {
        src.matches(old).count()
    };
    let total = src.len() as u128 + (count as u128) * (new.len() as u128);
    if total > c.max_bytes as u128 {
        return Err(format!(
            "exceeded maximum output size ({} bytes)",
            c.max_bytes
        ));
    }
    c.produce(total as usize)?;
    Ok(src.replace(old, new))
}

fn do_indent(c: &mut Ctx, n: i64, st: &str) -> Result<String, String> {
    if n < 0 {
        return Err("strings: negative Repeat count".into());
    }
    if n as u128 > c.max_bytes as u128 {
        return Err(format!(
            "exceeded maximum output size ({} bytes)",
            c.max_bytes
        ));
    }
    let pad = " ".repeat(n as usize);
    let body = replace_all(c, st, "\n", &format!("\n{pad}"))?;
    Ok(pad + &body)
}

pub(super) fn indent(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = do_indent(c, i(&a[0]), s(&a[1]))?;
    c.string(r)
}

pub(super) fn nindent(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = do_indent(c, i(&a[0]), s(&a[1]))?;
    c.string(format!("\n{r}"))
}

pub(super) fn replace(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = replace_all(c, s(&a[2]), s(&a[0]), s(&a[1]))?;
    Ok(Value::str(r))
}

pub(super) fn plural(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(if i(&a[2]) == 1 {
        a[0].clone()
    } else {
        a[1].clone()
    })
}

pub(super) fn to_string(c: &mut Ctx, a: Vec<Value>) -> FResult {
    c.string(strval(&a[0]))
}

/// sprig's `strslice`.
pub(crate) fn strslice(v: &Value) -> Vec<String> {
    match v {
        Value::List(l, ..) => l
            .iter()
            .filter(|e| !matches!(e, Value::Nil | Value::Invalid))
            .map(strval)
            .collect(),
        Value::Nil | Value::Invalid => Vec::new(),
        v => vec![strval(v)],
    }
}

pub(super) fn to_strings(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let l = strslice(&a[0]);
    c.charge(l.len() as u64)?;
    Ok(Value::str_list(l))
}

/// Go's `strings.SplitN` (`n < 0`: all).
fn go_split(st: &str, sep: &str, n: i64) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    if sep.is_empty() {
        let chars: Vec<String> = st.chars().map(String::from).collect();
        if n > 0 && (n as usize) < chars.len() {
            let mut head: Vec<String> = chars[..n as usize - 1].to_vec();
            let used: usize = head.iter().map(String::len).sum();
            head.push(st[used..].to_string());
            return head;
        }
        return chars;
    }
    if n < 0 {
        st.split(sep).map(str::to_string).collect()
    } else {
        st.splitn(n as usize, sep).map(str::to_string).collect()
    }
}

fn split_map(c: &mut Ctx, parts: Vec<String>) -> FResult {
    c.charge(parts.len() as u64)?;
    let m = parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| (format!("_{i}"), Value::str(p)))
        .collect();
    Ok(Value::map_of(m, MapKind::Str))
}

pub(super) fn split(c: &mut Ctx, a: Vec<Value>) -> FResult {
    split_map(c, go_split(s(&a[1]), s(&a[0]), -1))
}

pub(super) fn splitn(c: &mut Ctx, a: Vec<Value>) -> FResult {
    split_map(c, go_split(s(&a[2]), s(&a[0]), i(&a[1])))
}

pub(super) fn split_list(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let parts = go_split(s(&a[1]), s(&a[0]), -1);
    c.charge(parts.len() as u64)?;
    Ok(Value::str_list(parts))
}

pub(super) fn join(c: &mut Ctx, a: Vec<Value>) -> FResult {
    c.string(strslice(&a[1]).join(s(&a[0])))
}

pub(super) fn sort_alpha(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let mut l = match &a[0] {
        Value::List(..) => strslice(&a[0]),
        v => vec![strval(v)],
    };
    c.charge(l.len() as u64)?;
    l.sort();
    Ok(Value::str_list(l))
}

pub(super) fn sha1sum(c: &mut Ctx, a: Vec<Value>) -> FResult {
    use sha1::Digest;
    c.produce(s(&a[0]).len())?;
    Ok(Value::str(hex::encode(sha1::Sha1::digest(
        s(&a[0]).as_bytes(),
    ))))
}

pub(super) fn sha256sum(c: &mut Ctx, a: Vec<Value>) -> FResult {
    use sha2::Digest;
    c.produce(s(&a[0]).len())?;
    Ok(Value::str(hex::encode(sha2::Sha256::digest(
        s(&a[0]).as_bytes(),
    ))))
}

/// Adler-32 of `data`.
pub(crate) fn adler32(data: &[u8]) -> u32 {
    let (mut x, mut y) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for b in chunk {
            x += u32::from(*b);
            y += x;
        }
        x %= 65521;
        y %= 65521;
    }
    (y << 16) | x
}

pub(super) fn adler32sum(c: &mut Ctx, a: Vec<Value>) -> FResult {
    c.produce(s(&a[0]).len())?;
    Ok(Value::str(adler32(s(&a[0]).as_bytes()).to_string()))
}

pub(super) fn b64enc(c: &mut Ctx, a: Vec<Value>) -> FResult {
    c.string(crate::encoding::b64_encode(s(&a[0]).as_bytes()))
}

pub(super) fn b64dec(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = match crate::encoding::b64_decode(s(&a[0])) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => e,
    };
    c.string(r)
}

pub(super) fn b32enc(c: &mut Ctx, a: Vec<Value>) -> FResult {
    c.string(crate::encoding::b32_encode(s(&a[0]).as_bytes()))
}

pub(super) fn b32dec(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = match crate::encoding::b32_decode(s(&a[0])) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => e,
    };
    c.string(r)
}

pub(super) fn slugify(c: &mut Ctx, a: Vec<Value>) -> FResult {
    c.string(crate::slug::make(s(&a[0])))
}

// ---- regex ----

const REGEX_SIZE_LIMIT: usize = 1 << 20;

fn compile(re: &str) -> Result<regex::Regex, String> {
    if re.len() > 64 * 1024 {
        return Err("error parsing regexp: expression too large".into());
    }
    regex::RegexBuilder::new(re)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .nest_limit(250)
        .build()
        .map_err(|e| {
            let msg = e.to_string();
            let last = msg
                .lines()
                .rfind(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .to_string();
            format!(
                "error parsing regexp: {}",
                last.trim_start_matches("error: ")
            )
        })
}

fn must_compile(re: &str) -> Result<regex::Regex, String> {
    compile(re).map_err(|e| format!("regexp: Compile({}): {e}", go_quote(re)))
}

pub(super) fn regex_match(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(
        compile(s(&a[0]))
            .map(|r| r.is_match(s(&a[1])))
            .unwrap_or(false),
    ))
}

pub(super) fn must_regex_match(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Bool(compile(s(&a[0]))?.is_match(s(&a[1]))))
}

fn find_all(c: &mut Ctx, r: &regex::Regex, st: &str, n: i64) -> FResult {
    if n == 0 {
        return Ok(Value::list_of(
            Vec::new(),
            crate::value::ListKind::Str,
            true,
        ));
    }
    let mut out = Vec::new();
    for m in r.find_iter(st) {
        if n > 0 && out.len() as i64 >= n {
            break;
        }
        c.charge(1)?;
        out.push(m.as_str().to_string());
    }
    if out.is_empty() {
        return Ok(Value::list_of(
            Vec::new(),
            crate::value::ListKind::Str,
            true,
        ));
    }
    Ok(Value::str_list(out))
}

pub(super) fn regex_find_all(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = must_compile(s(&a[0]))?;
    find_all(c, &r, s(&a[1]), i(&a[2]))
}

pub(super) fn must_regex_find_all(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = compile(s(&a[0]))?;
    find_all(c, &r, s(&a[1]), i(&a[2]))
}

pub(super) fn regex_find(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = must_compile(s(&a[0]))?;
    c.string(
        r.find(s(&a[1]))
            .map(|m| m.as_str().to_string())
            .unwrap_or_default(),
    )
}

pub(super) fn must_regex_find(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = compile(s(&a[0]))?;
    c.string(
        r.find(s(&a[1]))
            .map(|m| m.as_str().to_string())
            .unwrap_or_default(),
    )
}

fn replace_re(c: &mut Ctx, r: &regex::Regex, st: &str, repl: &str, literal: bool) -> FResult {
    // Bound the result before building it: every match may add `repl` (expanded) bytes.
    let matches = r.find_iter(st).take(c.max_bytes + 1).count();
    c.charge(matches as u64)?;
    if (matches as u128) * (repl.len() as u128 + 1) + st.len() as u128 > (c.max_bytes as u128) * 4 {
        return Err(format!(
            "exceeded maximum output size ({} bytes)",
            c.max_bytes
        ));
    }
    let out = if literal {
        r.replace_all(st, regex::NoExpand(repl)).into_owned()
    } else {
        r.replace_all(st, repl).into_owned()
    };
    c.string(out)
}

pub(super) fn regex_replace_all(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = must_compile(s(&a[0]))?;
    replace_re(c, &r, s(&a[1]), s(&a[2]), false)
}

pub(super) fn must_regex_replace_all(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = compile(s(&a[0]))?;
    replace_re(c, &r, s(&a[1]), s(&a[2]), false)
}

pub(super) fn regex_replace_all_literal(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = must_compile(s(&a[0]))?;
    replace_re(c, &r, s(&a[1]), s(&a[2]), true)
}

pub(super) fn must_regex_replace_all_literal(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = compile(s(&a[0]))?;
    replace_re(c, &r, s(&a[1]), s(&a[2]), true)
}

fn re_split(c: &mut Ctx, r: &regex::Regex, st: &str, n: i64) -> FResult {
    if n == 0 {
        return Ok(Value::list_of(
            Vec::new(),
            crate::value::ListKind::Str,
            true,
        ));
    }
    if !r.as_str().is_empty() && st.is_empty() {
        return Ok(Value::str_list(vec![String::new()]));
    }
    let mut out = Vec::new();
    let (mut beg, mut end) = (0, 0);
    for m in r.find_iter(st) {
        if n > 0 && out.len() as i64 == n - 1 {
            break;
        }
        c.charge(1)?;
        end = m.start();
        if m.end() != 0 {
            out.push(st[beg..end].to_string());
        }
        beg = m.end();
    }
    if end != st.len() {
        out.push(st[beg..].to_string());
    }
    Ok(Value::str_list(out))
}

pub(super) fn regex_split(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = must_compile(s(&a[0]))?;
    re_split(c, &r, s(&a[1]), i(&a[2]))
}

pub(super) fn must_regex_split(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let r = compile(s(&a[0]))?;
    re_split(c, &r, s(&a[1]), i(&a[2]))
}

pub(super) fn regex_quote_meta(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let mut out = String::new();
    for ch in s(&a[0]).chars() {
        if "\\.+*?()|[]{}^$".contains(ch) {
            out.push('\\');
        }
        out.push(ch);
    }
    c.string(out)
}
