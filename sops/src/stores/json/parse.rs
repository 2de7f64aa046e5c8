//! A JSON reader that builds the tree as sops' JSON store does with Go's token decoder:
//! key order and duplicate keys kept, a number is an int when it fits in 64 bits and a float
//! otherwise, invalid UTF-8 in strings becomes U+FFFD, and bytes after the top-level object
//! are never looked at.

use crate::tree::{Branch, Entry, Value};
use crate::walk::MAX_DEPTH;

/// A syntax error, with the byte offset; never shows the input.
#[derive(Debug)]
pub(crate) struct SyntaxError {
    pub(crate) what: &'static str,
    pub(crate) offset: usize,
}

type Res<T> = Result<T, SyntaxError>;

pub(crate) struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
}

/// What the input starts with, when it is not an object.
pub(crate) enum TopLevel {
    Object(Branch),
    Other(&'static str),
}

impl<'a> Parser<'a> {
    pub(crate) fn new(s: &'a [u8]) -> Parser<'a> {
        Parser { s, pos: 0 }
    }

    fn err<T>(&self, what: &'static str) -> Res<T> {
        Err(SyntaxError {
            what,
            offset: self.pos,
        })
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.pos).copied()
    }

    fn expect(&mut self, c: u8, what: &'static str) -> Res<()> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            self.err(what)
        }
    }

    /// The top-level value: an object becomes the branch.
    pub(crate) fn top(&mut self) -> Res<TopLevel> {
        match self.peek() {
            None => self.err("unexpected end of JSON input"),
            Some(b'{') => {
                self.pos += 1;
                Ok(TopLevel::Object(self.object_body(0)?))
            }
            Some(b'[') => Ok(TopLevel::Other("an array")),
            Some(b'"') => Ok(TopLevel::Other("a string")),
            Some(b't' | b'f') => Ok(TopLevel::Other("a boolean")),
            Some(b'n') => Ok(TopLevel::Other("null")),
            Some(b'-' | b'0'..=b'9') => Ok(TopLevel::Other("a number")),
            Some(_) => self.err("invalid character looking for beginning of value"),
        }
    }

    fn object_body(&mut self, depth: usize) -> Res<Branch> {
        if depth > MAX_DEPTH {
            return self.err("nesting too deep");
        }
        let mut entries = Vec::new();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(entries);
        }
        loop {
            if self.peek() != Some(b'"') {
                return self.err("invalid character looking for beginning of object key string");
            }
            let key = self.string()?;
            self.expect(b':', "invalid character after object key")?;
            let value = self.value(depth + 1)?;
            entries.push(Entry::Pair(key, value));
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(entries);
                }
                None => return self.err("unexpected end of JSON input"),
                Some(_) => return self.err("invalid character after object key:value pair"),
            }
        }
    }

    fn array_body(&mut self, depth: usize) -> Res<Vec<Value>> {
        if depth > MAX_DEPTH {
            return self.err("nesting too deep");
        }
        let mut items = Vec::new();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(items);
        }
        loop {
            items.push(self.value(depth + 1)?);
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(items);
                }
                None => return self.err("unexpected end of JSON input"),
                Some(_) => return self.err("invalid character after array element"),
            }
        }
    }

    fn value(&mut self, depth: usize) -> Res<Value> {
        match self.peek() {
            None => self.err("unexpected end of JSON input"),
            Some(b'{') => {
                self.pos += 1;
                self.object_body(depth).map(Value::Map)
            }
            Some(b'[') => {
                self.pos += 1;
                self.array_body(depth).map(Value::List)
            }
            Some(b'"') => self.string().map(Value::Str),
            Some(b't') => self.literal(b"true", Value::Bool(true)),
            Some(b'f') => self.literal(b"false", Value::Bool(false)),
            Some(b'n') => self.literal(b"null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => self.err("invalid character looking for beginning of value"),
        }
    }

    fn literal(&mut self, word: &[u8], v: Value) -> Res<Value> {
        if self.s[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(v)
        } else {
            self.err("invalid character in literal")
        }
    }

    fn number(&mut self) -> Res<Value> {
        let start = self.pos;
        let digits = |p: &mut Parser<'_>| {
            let from = p.pos;
            while p.s.get(p.pos).is_some_and(u8::is_ascii_digit) {
                p.pos += 1;
            }
            p.pos - from
        };
        if self.s.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        match self.s.get(self.pos) {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return self.err("invalid character in numeric literal"),
        }
        if self.s.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            if digits(self) == 0 {
                return self.err("invalid character after decimal point in numeric literal");
            }
        }
        if let Some(b'e' | b'E') = self.s.get(self.pos) {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.s.get(self.pos) {
                self.pos += 1;
            }
            if digits(self) == 0 {
                return self.err("invalid character in exponent of numeric literal");
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or("");
        if let Ok(i) = text.parse::<i64>() {
            return Ok(Value::Int(i));
        }
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Value::Float(f)),
            _ => Err(SyntaxError {
                what: "number out of range",
                offset: start,
            }),
        }
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        let h = self.s.get(at..at + 4)?;
        let text = std::str::from_utf8(h).ok()?;
        if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(text, 16).ok()
    }

    /// A string token (the opening quote is next).
    fn string(&mut self) -> Res<String> {
        self.pos += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let Some(&b) = self.s.get(self.pos) else {
                return self.err("unexpected end of JSON input");
            };
            match b {
                b'"' => {
                    self.pos += 1;
                    break;
                }
                b'\\' => {
                    let Some(&e) = self.s.get(self.pos + 1) else {
                        return self.err("unexpected end of JSON input");
                    };
                    self.pos += 2;
                    let simple = match e {
                        b'"' => Some(b'"'),
                        b'\\' => Some(b'\\'),
                        b'/' => Some(b'/'),
                        b'b' => Some(0x08),
                        b'f' => Some(0x0c),
                        b'n' => Some(b'\n'),
                        b'r' => Some(b'\r'),
                        b't' => Some(b'\t'),
                        b'u' => None,
                        _ => return self.err("invalid character in string escape code"),
                    };
                    if let Some(c) = simple {
                        out.push(c);
                        continue;
                    }
                    let Some(mut cp) = self.hex4(self.pos) else {
                        return self.err("invalid character in \\u hexadecimal character escape");
                    };
                    self.pos += 4;
                    if (0xD800..0xE000).contains(&cp) {
                        // A surrogate pair, or U+FFFD when it is not one.
                        let low = if self.s.get(self.pos..self.pos + 2) == Some(b"\\u") {
                            self.hex4(self.pos + 2)
                        } else {
                            None
                        };
                        match low {
                            Some(lo) if cp < 0xDC00 && (0xDC00..0xE000).contains(&lo) => {
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                                self.pos += 6;
                            }
                            _ => cp = 0xFFFD,
                        }
                    }
                    let c = char::from_u32(cp).unwrap_or('\u{FFFD}');
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                0..=0x1f => return self.err("invalid character in string literal"),
                _ => {
                    out.push(b);
                    self.pos += 1;
                }
            }
        }
        Ok(match String::from_utf8(out) {
            Ok(s) => s,
            Err(e) => replace_invalid(e.as_bytes()),
        })
    }
}

/// Replaces every byte of an invalid UTF-8 sequence with U+FFFD, as Go's decoder does.
fn replace_invalid(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for _ in chunk.invalid() {
            out.push('\u{FFFD}');
        }
    }
    out
}
