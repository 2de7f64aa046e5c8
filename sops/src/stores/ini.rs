//! The INI store (reference §4, §10): sections become maps of string values, `;`/`#`
//! comments are kept with their section or key, the `sops` block is the `[sops]` section
//! with flattened keys and newlines escaped as `\n`. Output is go-ini's pretty format.

mod parse;

use crate::error::SopsError;
use crate::stores::dotenv::{bytes_value, val_to_string};
use crate::stores::flatten;
use crate::tree::{Branch, Entry, Value};
use zeroize::Zeroizing;

/// Parses an encrypted INI document and its `[sops]` section.
pub fn load(bytes: &[u8]) -> Result<(Vec<Branch>, Value), SopsError> {
    let mut branches = vec![load_plain(bytes)?];
    let Value::Map(flat) = flatten::take_nested_metadata(&mut branches)? else {
        return Err(SopsError::NoMetadata);
    };
    let flat = flat
        .into_iter()
        .map(|e| match e {
            Entry::Pair(k, Value::Str(s)) => Entry::Pair(k, Value::Str(s.replace("\\n", "\n"))),
            other => other,
        })
        .collect();
    Ok((branches, flatten::unflatten(flat)?))
}

/// Strips the comment marker as sops does: all leading `;`/` ` (or `#`/` `) characters.
fn strip_comment_char(c: &[u8]) -> String {
    let set: &[u8] = match c.first() {
        Some(b';') => b"; ",
        Some(b'#') => b"# ",
        _ => b"",
    };
    let start = c.iter().position(|b| !set.contains(b)).unwrap_or(c.len());
    String::from_utf8_lossy(&c[start..]).into_owned()
}

/// Parses INI into one branch: a map per section (`DEFAULT` first), the section's comment
/// first, each key followed by its comment.
pub fn load_plain(bytes: &[u8]) -> Result<Branch, SopsError> {
    let sections = parse::parse(bytes).map_err(|e| {
        SopsError::Load(format!(
            "Could not unmarshal input data: {} on line {}",
            e.what, e.line
        ))
    })?;
    let mut branch = Vec::with_capacity(sections.len());
    for s in sections {
        let mut items = Vec::with_capacity(s.keys.len() + 1);
        if !s.comment.is_empty() {
            items.push(Entry::Comment(strip_comment_char(&s.comment)));
        }
        for (k, v, c) in s.keys {
            items.push(Entry::Pair(
                String::from_utf8_lossy(&k).into_owned(),
                bytes_value(v),
            ));
            if !c.is_empty() {
                items.push(Entry::Comment(strip_comment_char(&c)));
            }
        }
        branch.push(Entry::Pair(
            String::from_utf8_lossy(&s.name).into_owned(),
            Value::Map(items),
        ));
    }
    Ok(branch)
}

struct OutKey {
    name: String,
    value: Zeroizing<Vec<u8>>,
    comment: String,
}

struct OutSection<'a> {
    name: &'a str,
    comment: &'a str,
    keys: Vec<OutKey>,
}

fn emit_error(why: &str) -> SopsError {
    SopsError::Emit(format!("Error marshaling to INI: {why}"))
}

/// Builds go-ini's in-memory file from the tree, as sops' `encodeTree` does.
fn sections(branches: &[Branch]) -> Result<Vec<OutSection<'_>>, SopsError> {
    let mut out = Vec::new();
    for entry in branches.iter().flatten() {
        let Entry::Pair(name, value) = entry else {
            continue;
        };
        if name.is_empty() {
            return Err(emit_error("Error encoding section : empty section name"));
        }
        let Value::Map(items) = value else {
            return Err(emit_error(
                "Error encoding section: Section values should always be TreeBranches",
            ));
        };
        let mut section = OutSection {
            name,
            comment: "",
            keys: Vec::new(),
        };
        let mut rest = items.as_slice();
        if let Some((Entry::Comment(c) | Entry::LineComment(c), tail)) = rest.split_first() {
            section.comment = c;
            rest = tail;
        }
        let mut last: Option<usize> = None;
        for item in rest {
            match item {
                Entry::Comment(c) | Entry::LineComment(c) => {
                    if let Some(k) = last.and_then(|i| section.keys.get_mut(i)) {
                        k.comment.clone_from(c);
                    }
                }
                Entry::Pair(k, v) => {
                    if k.is_empty() {
                        return Err(emit_error(
                            "Error encoding key: error creating new key: empty key name",
                        ));
                    }
                    let value = val_to_string(v).map_err(|_| {
                        emit_error(&format!("the value of {name}.{k} is not a scalar"))
                    })?;
                    match section.keys.iter().position(|o| o.name == *k) {
                        Some(i) => {
                            if let Some(o) = section.keys.get_mut(i) {
                                o.value = value;
                            }
                            last = Some(i);
                        }
                        None => {
                            last = Some(section.keys.len());
                            section.keys.push(OutKey {
                                name: k.clone(),
                                value,
                                comment: String::new(),
                            });
                        }
                    }
                }
            }
        }
        out.push(section);
    }
    Ok(out)
}

/// Writes comment lines as go-ini does; `trim_plain` trims lines without a marker too
/// (key comments) or not (section comments).
fn write_comment(out: &mut Vec<u8>, comment: &str, trim_plain: bool) -> Result<(), SopsError> {
    for line in comment.split('\n') {
        match line.as_bytes().first() {
            // go-ini indexes the first byte of every line: an empty one makes it panic.
            None => return Err(emit_error("go-ini cannot write an empty comment line")),
            Some(b'#' | b';') => {
                out.extend_from_slice(&line.as_bytes()[..1]);
                out.push(b' ');
                out.extend_from_slice(line[1..].trim().as_bytes());
            }
            Some(_) => {
                out.extend_from_slice(b"; ");
                out.extend_from_slice(if trim_plain { line.trim() } else { line }.as_bytes());
            }
        }
        out.push(b'\n');
    }
    Ok(())
}

/// A key name quoted as go-ini writes it.
fn quoted_name(name: &str) -> String {
    if name.contains(['"', '=', ':']) {
        format!("`{name}`")
    } else if name.contains('`') {
        format!("\"\"\"{name}\"\"\"")
    } else {
        name.to_string()
    }
}

fn has_outer_space(v: &[u8]) -> bool {
    let s = String::from_utf8_lossy(v);
    s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace)
}

/// Emits INI as sops does: go-ini with `PrettyFormat` (`=` aligned per section), a blank line
/// between sections, `; ` comments, values quoted when they need it.
pub fn emit(branches: &[Branch]) -> Result<Zeroizing<Vec<u8>>, SopsError> {
    let sections = sections(branches)?;
    let mut out = Zeroizing::new(Vec::new());
    let last = sections.len().saturating_sub(1);
    for (i, sec) in sections.iter().enumerate() {
        if !sec.comment.is_empty() {
            write_comment(&mut out, sec.comment, false)?;
        }
        if i > 0 || sec.name.to_uppercase() != "DEFAULT" {
            out.push(b'[');
            out.extend_from_slice(sec.name.as_bytes());
            out.extend_from_slice(b"]\n");
        } else if sec.keys.is_empty() {
            continue;
        }
        let align = sec
            .keys
            .iter()
            .map(|k| quoted_name(&k.name).len())
            .max()
            .unwrap_or(0);
        for key in &sec.keys {
            if !key.comment.is_empty() {
                write_comment(&mut out, &key.comment, true)?;
            }
            let name = quoted_name(&key.name);
            out.extend_from_slice(name.as_bytes());
            out.extend(std::iter::repeat_n(b' ', align.saturating_sub(name.len())));
            out.extend_from_slice(b" = ");
            let v = key.value.as_slice();
            if v.contains(&b'\n') || v.contains(&b'`') {
                out.extend_from_slice(b"\"\"\"");
                out.extend_from_slice(v);
                out.extend_from_slice(b"\"\"\"");
            } else if v.contains(&b'#') || v.contains(&b';') {
                out.push(b'`');
                out.extend_from_slice(v);
                out.push(b'`');
            } else if has_outer_space(v) {
                out.push(b'"');
                out.extend_from_slice(v);
                out.push(b'"');
            } else {
                out.extend_from_slice(v);
            }
            out.push(b'\n');
        }
        if i != last {
            out.push(b'\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn round(input: &str) -> String {
        let b = load_plain(input.as_bytes()).unwrap();
        String::from_utf8(emit(&[b]).unwrap().to_vec()).unwrap()
    }

    #[test]
    fn go_ini_layout() {
        let input = "; file comment\n[db]\n; key comment\nuser = admin\npass = \"  sp  \" ; inline\nlong_key_name = `a;b`\n[other]\nx=1\n";
        assert_eq!(
            round(input),
            "; file comment\n[db]\n; key comment\nuser          = admin\n; inline\npass          = \"  sp  \"\nlong_key_name = `a;b`\n\n[other]\nx = 1\n"
        );
    }

    #[test]
    fn default_section_quotes_and_continuations() {
        let input = "top=1\n[s]\n\"a=b\" = v\nm = \"\"\"line1\nline2\"\"\"\nc = one \\\n  two\nd = 'q'\ndup = 1\ndup = 2\n";
        assert_eq!(
            round(input),
            "top = 1\n\n[s]\n`a=b` = v\nm     = \"\"\"line1\nline2\"\"\"\nc     = one two\nd     = q\ndup   = 2\n"
        );
    }

    #[test]
    fn comments_and_errors() {
        let b = load_plain(b"[s]\n;; one\n# two\nk = v\n").unwrap();
        assert_eq!(
            b[1],
            Entry::Pair(
                "s".into(),
                Value::Map(vec![
                    Entry::Pair("k".into(), Value::Str("v".into())),
                    Entry::Comment("one\n# two".into()),
                ])
            )
        );
        for bad in ["[s\n", "[]\n", "=v\n", "secretline\n", "k = \"\"\"open\n"] {
            let err = load_plain(bad.as_bytes()).unwrap_err().to_string();
            assert!(!err.contains("secret") && !err.contains("open"), "{err}");
        }
        assert!(matches!(load(b"[s]\nk=v\n"), Err(SopsError::NoMetadata)));
    }
}
