//! Decrypting a document tree in place (reference §2, §5, §8): a depth-first walk in
//! document order, every value the rule selects decrypted with its path as additional data,
//! and (on request) the MAC recomputed over the plaintext and compared with the stored one.

mod rules;

use sha2::{Digest, Sha512};
use zeroize::Zeroize;

use crate::cipher::{self, CipherError};
use crate::error::SopsError;
use crate::metadata::Metadata;
use crate::tree::{Branch, Entry, Value};

/// Whether the MAC stored in the document is checked against the decrypted values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacCheck {
    /// Flux's behaviour: never checked.
    Skip,
    /// Checked; a mismatch (or an empty `mac`) is an error.
    Verify,
}

/// Maps and lists nested deeper than this are refused.
pub const MAX_DEPTH: usize = 256;

/// SHA-256("sops"), fed first to the MAC when it covers only encrypted values.
const MAC_ONLY_ENCRYPTED_INIT: [u8; 32] = [
    0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe, 0x0b,
    0x0b, 0x97, 0x5b, 0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69,
];

/// Decrypts every selected value of `branches` in place. Comments that fail to decrypt are
/// kept as they are. With [`MacCheck::Verify`] the MAC must match. Errors name the path,
/// never a value; on error the partly decrypted tree is wiped.
pub fn decrypt_branches(
    branches: &mut [Branch],
    meta: &Metadata,
    key: &[u8; 32],
    mac: MacCheck,
) -> Result<(), SopsError> {
    let result = decrypt_inner(branches, meta, key, mac);
    if result.is_err() {
        wipe(branches);
    }
    result
}

fn decrypt_inner(
    branches: &mut [Branch],
    meta: &Metadata,
    key: &[u8; 32],
    mac: MacCheck,
) -> Result<(), SopsError> {
    let mut walker = Walker {
        rules: rules::Rules::new(&meta.rule),
        key,
        hash: match mac {
            MacCheck::Verify => Some(Sha512::new()),
            MacCheck::Skip => None,
        },
        mac_only_encrypted: meta.mac_only_encrypted,
        encrypting: false,
        comments: Vec::new(),
    };
    let Some(computed) = walker.run(branches)? else {
        return Ok(());
    };
    let stored = if meta.mac.is_empty() {
        Err("no MAC".to_string())
    } else {
        match cipher::decrypt(&meta.mac, key, &meta.mac_additional_data) {
            Ok(Value::Str(s)) => Ok(s),
            Ok(other) => Err(format!("a MAC of type {}", cipher::go_type(&other))),
            Err(e) => Err(format!("an undecryptable MAC ({e})")),
        }
    };
    match stored {
        Ok(s) if s == computed => Ok(()),
        Ok(s) => Err(SopsError::MacMismatch {
            stored: s,
            computed,
        }),
        Err(s) => Err(SopsError::MacMismatch {
            stored: s,
            computed,
        }),
    }
}

struct Walker<'k> {
    rules: rules::Rules,
    key: &'k [u8; 32],
    hash: Option<Sha512>,
    mac_only_encrypted: bool,
    /// Encrypting (building a document) rather than decrypting.
    encrypting: bool,
    /// The comments seen at each open map/list level (sops' comments stack).
    comments: Vec<Vec<String>>,
}

/// Encrypts every value the document's rule selects, in place, as `sops encrypt` does
/// (random IVs), and returns the MAC over the plaintext (uppercase hex) for the caller to
/// encrypt with [`Metadata::mac_additional_data`]. For tests and benchmarks.
pub fn encrypt_branches(
    branches: &mut [Branch],
    meta: &Metadata,
    key: &[u8; 32],
) -> Result<String, SopsError> {
    let mut walker = Walker {
        rules: rules::Rules::new(&meta.rule),
        key,
        hash: Some(Sha512::new()),
        mac_only_encrypted: meta.mac_only_encrypted,
        encrypting: true,
        comments: Vec::new(),
    };
    Ok(walker.run(branches)?.unwrap_or_default())
}

/// The additional data of a path: its keys joined by `:`, plus a trailing `:`.
fn additional_data(path: &[&str]) -> String {
    let mut ad = path.join(":");
    ad.push(':');
    ad
}

fn too_deep() -> SopsError {
    SopsError::Value(format!(
        "the document is nested deeper than {MAX_DEPTH} levels"
    ))
}

impl Walker<'_> {
    /// Walks every branch; returns the MAC (uppercase hex) when hashing.
    fn run(&mut self, branches: &mut [Branch]) -> Result<Option<String>, SopsError> {
        if self.mac_only_encrypted
            && let Some(h) = self.hash.as_mut()
        {
            h.update(MAC_ONLY_ENCRYPTED_INIT);
        }
        for branch in branches.iter_mut() {
            self.comments.clear();
            let mut path = Vec::new();
            self.map(branch, &mut path, 0)?;
        }
        Ok(self
            .hash
            .take()
            .map(|h| h.finalize().iter().map(|b| format!("{b:02X}")).collect()))
    }

    fn map<'a>(
        &mut self,
        entries: &'a mut [Entry],
        path: &mut Vec<&'a str>,
        depth: usize,
    ) -> Result<(), SopsError> {
        if depth > MAX_DEPTH {
            return Err(too_deep());
        }
        self.comments.push(Vec::new());
        for entry in entries {
            match entry {
                Entry::Comment(_) | Entry::LineComment(_) => self.map_comment(entry, path)?,
                Entry::Pair(k, v) => {
                    let k: &'a String = k;
                    let value_is_comment = if let Value::Comment(c) | Value::LineComment(c) = &*v {
                        self.note_comment(c);
                        true
                    } else {
                        false
                    };
                    path.push(k.as_str());
                    let r = self.value(v, path, depth + 1);
                    path.pop();
                    r?;
                    if !value_is_comment {
                        self.clear_comments();
                    }
                }
            }
        }
        self.comments.pop();
        Ok(())
    }

    /// A comment between map entries: walked at the map's path. Decrypted as `comment` it
    /// becomes a plain comment; decrypted as `str` it keeps its line/own-line kind.
    fn map_comment(&mut self, entry: &mut Entry, path: &[&str]) -> Result<(), SopsError> {
        let (text, line) = match entry {
            Entry::Comment(t) => (std::mem::take(t), false),
            Entry::LineComment(t) => (std::mem::take(t), true),
            Entry::Pair(..) => return Ok(()),
        };
        self.note_comment(&text);
        let mut v = if line {
            Value::LineComment(text)
        } else {
            Value::Comment(text)
        };
        self.leaf(&mut v, path, true)?;
        let same_kind = |t: String| {
            if line {
                Entry::LineComment(t)
            } else {
                Entry::Comment(t)
            }
        };
        *entry = match v {
            Value::Comment(t) => Entry::Comment(t),
            Value::LineComment(t) => Entry::LineComment(t),
            Value::Str(t) => same_kind(t),
            Value::Bytes(b) => same_kind(String::from_utf8_lossy(&b).into_owned()),
            other => {
                return Err(SopsError::Value(format!(
                    "walkValue of Comment should be either Comment or string, was {} (at {})",
                    cipher::go_type(&other),
                    additional_data(path)
                )));
            }
        };
        Ok(())
    }

    fn list<'a>(
        &mut self,
        items: &'a mut [Value],
        path: &mut Vec<&'a str>,
        depth: usize,
    ) -> Result<(), SopsError> {
        if depth > MAX_DEPTH {
            return Err(too_deep());
        }
        self.comments.push(Vec::new());
        for item in items {
            let is_comment = if let Value::Comment(c) | Value::LineComment(c) = &*item {
                self.note_comment(c);
                true
            } else {
                false
            };
            self.value(item, path, depth + 1)?;
            if !is_comment {
                self.clear_comments();
            }
        }
        self.comments.pop();
        Ok(())
    }

    fn value<'a>(
        &mut self,
        v: &'a mut Value,
        path: &mut Vec<&'a str>,
        depth: usize,
    ) -> Result<(), SopsError> {
        match v {
            Value::Map(entries) => self.map(entries, path, depth),
            Value::List(items) => self.list(items, path, depth),
            Value::Null => Ok(()),
            Value::Comment(_) | Value::LineComment(_) => self.leaf(v, path, true),
            _ => self.leaf(v, path, false),
        }
    }

    fn note_comment(&mut self, text: &str) {
        if let Some(level) = self.comments.last_mut() {
            level.push(text.to_string());
        }
    }

    fn clear_comments(&mut self) {
        if let Some(level) = self.comments.last_mut() {
            level.clear();
        }
    }

    /// One scalar or comment: decrypt it if selected, then hash its plaintext.
    fn leaf(&mut self, v: &mut Value, path: &[&str], is_comment: bool) -> Result<(), SopsError> {
        let encrypted = self.rules.encrypted(path, &self.comments, is_comment);
        if self.encrypting {
            self.hash_value(v, encrypted);
            if encrypted {
                let ad = additional_data(path);
                let sealed = cipher::encrypt(v, self.key, &ad).map_err(|e| value_error(&e, &ad))?;
                *v = Value::Str(sealed);
            }
            return Ok(());
        }
        if encrypted {
            let ad = additional_data(path);
            match v {
                Value::Comment(text) | Value::LineComment(text) => {
                    // A comment that does not decrypt was never encrypted: keep it.
                    if let Ok(plain) = cipher::decrypt(text, self.key, &ad) {
                        *v = plain;
                    }
                }
                Value::Str(text) => {
                    let plain =
                        cipher::decrypt(text, self.key, &ad).map_err(|e| value_error(&e, &ad))?;
                    *v = plain;
                }
                other => {
                    return Err(SopsError::Value(format!(
                        "Expected encrypted value as string, but got {} (at {ad})",
                        cipher::go_type(other)
                    )));
                }
            }
        }
        self.hash_value(v, encrypted);
        Ok(())
    }

    /// Feeds a plaintext value to the MAC (comments never; plain values unless the MAC
    /// covers only encrypted ones).
    fn hash_value(&mut self, v: &Value, encrypted: bool) {
        if let Some(hash) = self.hash.as_mut() {
            let comment = matches!(v, Value::Comment(_) | Value::LineComment(_));
            if (!self.mac_only_encrypted || encrypted)
                && !comment
                && let Some(bytes) = cipher::plain_bytes(v)
            {
                hash.update(&bytes);
            }
        }
    }
}

fn value_error(e: &CipherError, ad: &str) -> SopsError {
    SopsError::Value(format!("{e} (at {ad})"))
}

/// Overwrites every string, byte string and number of the tree with zeros, keys included.
pub fn wipe(branches: &mut [Branch]) {
    fn push_entries<'x>(entries: &'x mut [Entry], stack: &mut Vec<&'x mut Value>) {
        for e in entries {
            match e {
                Entry::Pair(k, v) => {
                    k.zeroize();
                    stack.push(v);
                }
                Entry::Comment(c) | Entry::LineComment(c) => c.zeroize(),
            }
        }
    }
    let mut stack: Vec<&mut Value> = Vec::new();
    for branch in branches.iter_mut() {
        push_entries(branch, &mut stack);
        while let Some(v) = stack.pop() {
            match v {
                Value::Str(s) | Value::Time(s) | Value::Comment(s) | Value::LineComment(s) => {
                    s.zeroize();
                }
                Value::Bytes(b) => b.zeroize(),
                Value::Int(i) => *i = 0,
                Value::Float(f) => *f = 0.0,
                Value::Bool(b) => *b = false,
                Value::Null => {}
                Value::Map(entries) => push_entries(entries, &mut stack),
                Value::List(items) => stack.extend(items.iter_mut()),
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::metadata::Rule;

    const KEY: [u8; 32] = [3u8; 32];

    fn enc(v: Value, ad: &str) -> Value {
        Value::Str(cipher::encrypt(&v, &KEY, ad).unwrap())
    }

    fn meta(rule: Rule, mac: String, mac_only: bool) -> Metadata {
        Metadata {
            key_groups: Vec::new(),
            shamir_threshold: 0,
            last_modified: jiff::Timestamp::UNIX_EPOCH,
            mac_additional_data: "2024-01-01T00:00:00Z".into(),
            mac,
            rule,
            mac_only_encrypted: mac_only,
            version: String::new(),
        }
    }

    fn mac_of(parts: &[&[u8]], only: bool) -> String {
        let mut h = Sha512::new();
        if only {
            h.update(MAC_ONLY_ENCRYPTED_INIT);
        }
        for p in parts {
            h.update(p);
        }
        let hex: String = h.finalize().iter().map(|b| format!("{b:02X}")).collect();
        cipher::encrypt(&Value::Str(hex), &KEY, "2024-01-01T00:00:00Z").unwrap()
    }

    fn doc() -> Vec<Branch> {
        vec![vec![
            Entry::Comment(cipher::encrypt(&Value::Comment(" top".into()), &KEY, ":").unwrap()),
            Entry::Comment("plain comment".into()),
            Entry::Pair(
                "data".into(),
                Value::Map(vec![
                    Entry::Pair("n".into(), enc(Value::Int(7), "data:n:")),
                    Entry::Pair(
                        "l".into(),
                        Value::List(vec![
                            enc(Value::Str("a".into()), "data:l:"),
                            enc(Value::Bool(true), "data:l:"),
                            Value::Null,
                        ]),
                    ),
                    Entry::Pair("empty".into(), Value::Str(String::new())),
                ]),
            ),
            Entry::Pair("x_unencrypted".into(), Value::Str("plain".into())),
        ]]
    }

    #[test]
    fn decrypts_paths_comments_and_checks_the_mac() {
        let m = meta(
            Rule::UnencryptedSuffix("_unencrypted".into()),
            mac_of(&[b"7", b"a", b"True", b"plain"], false),
            false,
        );
        let mut b = doc();
        decrypt_branches(&mut b, &m, &KEY, MacCheck::Verify).unwrap();
        assert_eq!(b[0][0], Entry::Comment(" top".into()));
        assert_eq!(b[0][1], Entry::Comment("plain comment".into()));
        let Entry::Pair(_, data) = &b[0][2] else {
            panic!()
        };
        assert_eq!(data.get("n"), Some(&Value::Int(7)));
        assert_eq!(
            data.get("l"),
            Some(&Value::List(vec![
                Value::Str("a".into()),
                Value::Bool(true),
                Value::Null
            ]))
        );
        wipe(&mut b);
        let Entry::Pair(k, _) = &b[0][3] else {
            panic!()
        };
        assert!(k.is_empty());
    }

    #[test]
    fn mac_variants() {
        // mac_only_encrypted leaves the plain value out and starts with SHA-256("sops").
        let m = meta(
            Rule::UnencryptedSuffix("_unencrypted".into()),
            mac_of(&[b"7", b"a", b"True"], true),
            true,
        );
        decrypt_branches(&mut doc(), &m, &KEY, MacCheck::Verify).unwrap();
        // Wrong MAC: refused under Verify, accepted under Skip.
        let m = meta(
            Rule::UnencryptedSuffix("_unencrypted".into()),
            mac_of(&[b"7"], false),
            false,
        );
        let mut b = doc();
        assert!(matches!(
            decrypt_branches(&mut b, &m, &KEY, MacCheck::Verify),
            Err(SopsError::MacMismatch { .. })
        ));
        decrypt_branches(&mut doc(), &m, &KEY, MacCheck::Skip).unwrap();
        let m = meta(
            Rule::UnencryptedSuffix("_unencrypted".into()),
            String::new(),
            false,
        );
        let err = decrypt_branches(&mut doc(), &m, &KEY, MacCheck::Verify).unwrap_err();
        assert!(
            err.to_string().starts_with("MAC mismatch. File has no MAC"),
            "{err}"
        );
    }

    #[test]
    fn errors_name_the_path_not_the_value() {
        let m = meta(
            Rule::UnencryptedSuffix("_unencrypted".into()),
            String::new(),
            false,
        );
        let mut b = vec![vec![Entry::Pair(
            "s".into(),
            Value::Map(vec![Entry::Pair("pw".into(), Value::Str("hunter2".into()))]),
        )]];
        let err = decrypt_branches(&mut b, &m, &KEY, MacCheck::Skip).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("s:pw:"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        let mut b = vec![vec![Entry::Pair("n".into(), Value::Int(1))]];
        let err = decrypt_branches(&mut b, &m, &KEY, MacCheck::Skip).unwrap_err();
        assert!(err.to_string().contains("but got int"), "{err}");
    }

    #[test]
    fn encrypt_then_decrypt_round_trip() {
        let plain = vec![vec![
            Entry::Comment(" note".into()),
            Entry::Pair(
                "data".into(),
                Value::Map(vec![
                    Entry::Pair("n".into(), Value::Int(7)),
                    Entry::Pair(
                        "l".into(),
                        Value::List(vec![Value::Str("a".into()), Value::Null]),
                    ),
                ]),
            ),
            Entry::Pair("x_unencrypted".into(), Value::Str("plain".into())),
        ]];
        let mut m = meta(
            Rule::UnencryptedSuffix("_unencrypted".into()),
            String::new(),
            false,
        );
        let mut b = plain.clone();
        let mac = encrypt_branches(&mut b, &m, &KEY).unwrap();
        assert_ne!(b, plain);
        let Entry::Comment(c) = &b[0][0] else {
            panic!()
        };
        assert!(c.starts_with("ENC["), "{c}");
        m.mac = cipher::encrypt(&Value::Str(mac), &KEY, &m.mac_additional_data).unwrap();
        decrypt_branches(&mut b, &m, &KEY, MacCheck::Verify).unwrap();
        assert_eq!(b, plain);
    }

    #[test]
    fn depth_is_bounded() {
        let mut v = Value::Null;
        for _ in 0..(MAX_DEPTH + 5) {
            v = Value::List(vec![v]);
        }
        let m = meta(
            Rule::UnencryptedSuffix("_unencrypted".into()),
            String::new(),
            false,
        );
        let mut b = vec![vec![Entry::Pair("deep".into(), v)]];
        assert!(decrypt_branches(&mut b, &m, &KEY, MacCheck::Skip).is_err());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod comment_kind_tests {
    use super::*;
    use crate::metadata::Metadata;
    use crate::tree::{Entry, Value};

    fn meta() -> Metadata {
        let block = Value::Map(vec![
            Entry::Pair(
                "age".into(),
                Value::List(vec![Value::Map(vec![
                    Entry::Pair("recipient".into(), Value::Str("age1x".into())),
                    Entry::Pair("enc".into(), Value::Str("x".into())),
                ])]),
            ),
            Entry::Pair(
                "lastmodified".into(),
                Value::Str("2026-12-01T00:00:00Z".into()),
            ),
        ]);
        Metadata::from_tree(&block).unwrap()
    }

    /// As sops 3.13.3 does (checked with the CLI: `l: [#, a]` written as YAML encrypts to
    /// `- ""` and decrypts to `- ""`): an empty comment in a list becomes an empty string,
    /// while a comment with text stays a comment. The `sops` fuzz target relies on this.
    #[test]
    fn an_empty_comment_in_a_list_becomes_an_empty_string_as_in_sops() {
        let key = [3u8; 32];
        let plain = vec![vec![Entry::Pair(
            "l".into(),
            Value::List(vec![
                Value::Comment(String::new()),
                Value::Str("a".into()),
                Value::Comment(" x".into()),
            ]),
        )]];
        let mut b = plain.clone();
        encrypt_branches(&mut b, &meta(), &key).unwrap();
        decrypt_branches(&mut b, &meta(), &key, MacCheck::Skip).unwrap();
        let want = vec![vec![Entry::Pair(
            "l".into(),
            Value::List(vec![
                Value::Str(String::new()),
                Value::Str("a".into()),
                Value::Comment(" x".into()),
            ]),
        )]];
        assert_eq!(b, want);
    }
}
