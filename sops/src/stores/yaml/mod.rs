//! The YAML store: what sops' YAML store (built on go-yaml v3) reads and writes.
//!
//! # Why a parser of our own
//! sops keeps comments as items of the tree, and *where* a comment lands (which map or list,
//! before or after which entry, as a line comment or not) follows go-yaml v3's comment rules,
//! which are tied to its scanner: token positions, the indentation stack, blank lines, the
//! two-token look-ahead. yaml-rust2 drops comments and gives no end positions, and
//! re-finding comments in the text around its events would only approximate those rules.
//! So this module re-implements go-yaml's pipeline, written afresh from its behaviour:
//! `scanner` with `scalars` and `comments` (tokens and comment blocks) → `parser`
//! with `flow` (events, comment routing) → `compose` (nodes, anchors) → `totree` (sops'
//! conversion to the tree, and the checks of sops' first decoding pass). Scalars are typed
//! by `resolve`. Emission is the mirror image: `nodes` builds go-yaml nodes from the tree
//! as sops does, `emitter` with `analyze` and `writer` writes them as go-yaml's
//! emitter does (indent 4, no line folding). Both directions were checked against sops
//! 3.13.3 on generated documents (tree, output and error text).
//!
//! # Where sops and this store differ
//! A map key that is not a string (`1: x`, `~: x`) fails here when loading; sops loads it
//! and fails when it walks the tree. Integers beyond the signed 64-bit range fail (sops
//! loads them but cannot encrypt or hash them). UTF-16 input is refused. Error texts leave
//! out the values go-yaml quotes.
//!
//! # Hostile input
//! Input must be UTF-8 without control characters (go-yaml's rule). Every loop advances or
//! stops at the end of input; nesting is limited to 256 levels (scanner, composer and tree
//! conversion, also through aliases); alias expansion may add at most one million items
//! and a self-containing anchor is an error; comment look-ahead is bounded (512 characters,
//! as in go-yaml), simple keys to 1024 characters. Nothing panics on input; errors name
//! lines, never values. Plaintext copies made while emitting are wiped.

mod analyze;
mod comments;
mod compose;
mod emitter;
mod flow;
mod nodes;
mod parser;
mod resolve;
mod scalars;
mod scanner;
mod totree;
mod writer;

use scanner::Fail;

use crate::error::SopsError;
use crate::tree::{Branch, Entry, Value};
use zeroize::Zeroizing;

/// Decodes the input as go-yaml's reader does: UTF-8 (an initial BOM is dropped), no
/// control characters other than tab, line feed and carriage return.
fn decode_input(bytes: &[u8]) -> Result<Vec<char>, SopsError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if bytes.starts_with(b"\xFF\xFE") || bytes.starts_with(b"\xFE\xFF") {
        return Err(SopsError::Load(
            "yaml: UTF-16 input is not supported".into(),
        ));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|e| SopsError::Load(format!("yaml: invalid UTF-8 at byte {}", e.valid_up_to())))?;
    let mut out = Vec::with_capacity(text.len() + 1);
    for c in text.chars() {
        let ok = matches!(c, '\t' | '\n' | '\r' | '\u{85}')
            || (' '..='~').contains(&c)
            || ('\u{A0}'..='\u{D7FF}').contains(&c)
            || ('\u{E000}'..='\u{FFFD}').contains(&c)
            || c >= '\u{10000}';
        if !ok {
            return Err(SopsError::Load(
                "yaml: control characters are not allowed".into(),
            ));
        }
        out.push(c);
    }
    Ok(out)
}

/// Parses every document of a plaintext YAML stream into branches, as sops'
/// `LoadPlainFile` does (no `sops` block needed). An empty input has no branch.
#[doc(hidden)]
pub fn load_plain(bytes: &[u8]) -> Result<Vec<Branch>, SopsError> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let chars = decode_input(bytes)?;
    let mut composer = compose::Composer::new(parser::Parser::new(scanner::Scanner::new(chars)));
    // sops first decodes the first document alone (its errors come unprefixed), then every
    // document.
    let first = match composer.next_document() {
        Ok(Some(d)) => d,
        // No document at all: the first decoding pass reports the end of input.
        Ok(None) => return Err(SopsError::Load("EOF".into())),
        Err(e) => return Err(SopsError::Load(e.message())),
    };
    totree::check_first_document(&composer.nodes, first)
        .map_err(|e| SopsError::Load(e.message()))?;
    let prefixed =
        |e: Fail| SopsError::Load(format!("Error unmarshaling input YAML: {}", e.message()));
    // Each document is converted once parsed, as sops does.
    let mut branches = Vec::new();
    let mut spent = 0;
    let mut key_error = None;
    let mut doc = Some(first);
    while let Some(d) = doc {
        let mut conv = totree::Converter::new(&composer.nodes, spent);
        branches.push(conv.document(d).map_err(prefixed)?);
        spent = conv.spent();
        key_error = key_error.or(conv.key_error);
        doc = composer.next_document().map_err(prefixed)?;
    }
    match key_error {
        Some(e) => Err(SopsError::Load(e)),
        None => Ok(branches),
    }
}

/// Parses an encrypted YAML file: its branches without the `sops` key, and the `sops`
/// mapping of the first document (comments left out).
pub fn load(bytes: &[u8]) -> Result<(Vec<Branch>, Value), SopsError> {
    let mut branches = load_plain(bytes)?;
    let mut meta = None;
    for (i, branch) in branches.iter_mut().enumerate() {
        let mut found = Vec::new();
        branch.retain_mut(|e| match e {
            Entry::Pair(k, v) if k == "sops" => {
                found.push(std::mem::replace(v, Value::Null));
                false
            }
            _ => true,
        });
        if i == 0 {
            let mut found = found.into_iter();
            if let Some(v) = found.next() {
                if found.next().is_some() {
                    return Err(SopsError::Load("Found duplicate sops entry".into()));
                }
                match v {
                    Value::Map(entries) => meta = Some(strip_comments(Value::Map(entries))),
                    _ => {
                        return Err(SopsError::Load(
                            "Found sops entry that is not a mapping".into(),
                        ));
                    }
                }
            }
        }
    }
    let meta = meta.ok_or(SopsError::NoMetadata)?;
    Ok((branches, meta))
}

/// The metadata without comment items (sops ignores them).
fn strip_comments(v: Value) -> Value {
    match v {
        Value::Map(entries) => Value::Map(
            entries
                .into_iter()
                .filter_map(|e| match e {
                    Entry::Pair(k, v) => Some(Entry::Pair(k, strip_comments(v))),
                    _ => None,
                })
                .collect(),
        ),
        Value::List(items) => Value::List(
            items
                .into_iter()
                .filter(|v| !matches!(v, Value::Comment(_) | Value::LineComment(_)))
                .map(strip_comments)
                .collect(),
        ),
        other => other,
    }
}

/// Writes plaintext branches as sops' YAML store does with default settings: go-yaml v3,
/// indent 4, comments re-attached, documents separated by `---`.
pub fn emit(branches: &[Branch]) -> Result<Zeroizing<Vec<u8>>, SopsError> {
    let events = nodes::events(branches)?;
    emitter::emit(&events)
}

#[cfg(test)]
mod tests;
