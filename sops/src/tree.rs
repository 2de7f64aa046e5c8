//! The document tree SOPS works on: ordered maps, lists, typed scalars and comments, the same
//! for every format (a store parses into it and emits from it).
//!
//! Comments are items of the tree, as in sops: in a map they take an entry's place
//! ([`Entry::Comment`]), in a list they are elements ([`Value::Comment`]). They are encrypted
//! and decrypted like values, but never hashed into the MAC.

/// A value of the tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// A YAML timestamp, kept as RFC 3339 text with nanoseconds (`2024-01-01T00:00:00Z`).
    Time(String),
    /// Raw bytes: a decrypted `str` value that is not UTF-8 (a binary file), or a `bytes` value.
    /// Emitted as the bytes themselves where the format allows it.
    Bytes(Vec<u8>),
    /// A comment that is an element of a list; its text is what follows `#`.
    Comment(String),
    /// A YAML comment written at the end of the line of the list element that follows it
    /// (`- value # text`; sops' "inline" comment). Walked like [`Value::Comment`]; once
    /// decrypted it becomes a [`Value::Comment`] (sops drops the flag), otherwise it stays.
    LineComment(String),
    Map(Vec<Entry>),
    List(Vec<Value>),
}

/// One item of a map.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Pair(String, Value),
    /// A comment between a map's entries; its text is what follows `#` (or `;` in INI).
    Comment(String),
    /// A YAML comment written at the end of the line of the entry that follows it
    /// (`key: value # text`; sops' "inline" comment). Walked like [`Entry::Comment`]; once
    /// decrypted it becomes an [`Entry::Comment`] (sops drops the flag), otherwise it stays.
    LineComment(String),
}

/// One document (a YAML file has one per `---` document; every other format has one): a map.
pub type Branch = Vec<Entry>;

impl Value {
    /// The map's value at `key`, if this is a map that has it.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(entries) => lookup(entries, key),
            _ => None,
        }
    }

    /// The text of a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// The value at `key` in a map's entries.
pub fn lookup<'a>(entries: &'a [Entry], key: &str) -> Option<&'a Value> {
    entries.iter().find_map(|e| match e {
        Entry::Pair(k, v) if k == key => Some(v),
        _ => None,
    })
}

/// Takes the entry `key` out of a map's entries (every occurrence), returning the first value.
pub fn remove(entries: &mut Branch, key: &str) -> Option<Value> {
    let mut found = None;
    entries.retain_mut(|e| match e {
        Entry::Pair(k, v) if k == key => {
            if found.is_none() {
                found = Some(std::mem::replace(v, Value::Null));
            }
            false
        }
        _ => true,
    });
    found
}
