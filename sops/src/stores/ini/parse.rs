//! An INI reader with go-ini's rules (`ini.LoadSources` with non-unique sections, as sops
//! calls it): a `DEFAULT` section first, comments gathered for the next section or key,
//! inline comments, quoted and continued values, duplicate keys keeping their first place.

use std::collections::HashMap;

/// One parsed section.
pub(crate) struct Section {
    pub(crate) name: Vec<u8>,
    pub(crate) comment: Vec<u8>,
    /// Keys in first-seen order: (name, value, comment).
    pub(crate) keys: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)>,
    index: HashMap<Vec<u8>, usize>,
}

impl Section {
    fn new(name: Vec<u8>) -> Section {
        Section {
            name,
            comment: Vec::new(),
            keys: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// go-ini's `NewKey`: a repeated name keeps its place and takes the new value.
    fn set(&mut self, name: Vec<u8>, value: Vec<u8>, comment: Vec<u8>) {
        match self.index.get(&name).and_then(|i| self.keys.get_mut(*i)) {
            Some(existing) => {
                existing.1 = value;
                existing.2 = comment;
            }
            None => {
                self.index.insert(name.clone(), self.keys.len());
                self.keys.push((name, value, comment));
            }
        }
    }
}

/// Why a line was refused; the text never includes the line.
pub(crate) struct ParseError {
    pub(crate) what: &'static str,
    pub(crate) line: usize,
}

/// Go's `unicode.IsSpace` for a character starting at `b`, and its length.
fn space_at(b: &[u8]) -> Option<usize> {
    match b.first()? {
        b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ' => Some(1),
        0x80.. => {
            let len = match b[0] {
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf7 => 4,
                _ => return None,
            };
            let c = std::str::from_utf8(b.get(..len)?).ok()?.chars().next()?;
            c.is_whitespace().then_some(len)
        }
        _ => None,
    }
}

pub(crate) fn trim_left(mut b: &[u8]) -> &[u8] {
    while let Some(n) = space_at(b) {
        b = &b[n..];
    }
    b
}

/// The length of a white-space character ending `b` (Go's `unicode.IsSpace`).
fn space_before(b: &[u8]) -> Option<usize> {
    (1..=4).find(|&len| {
        len <= b.len()
            && std::str::from_utf8(&b[b.len() - len..]).is_ok_and(|s| {
                let mut cs = s.chars();
                matches!((cs.next(), cs.next()), (Some(c), None) if c.is_whitespace())
            })
    })
}

/// Go's `bytes.TrimSpace`.
pub(crate) fn trim(b: &[u8]) -> &[u8] {
    let mut b = trim_left(b);
    while let Some(n) = space_before(b) {
        b = &b[..b.len() - n];
    }
    b
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

fn find_any(hay: &[u8], set: &[u8]) -> Option<usize> {
    hay.iter().position(|b| set.contains(b))
}

struct Reader<'a> {
    rest: &'a [u8],
    line: usize,
    eof: bool,
    comment: Vec<u8>,
}

impl<'a> Reader<'a> {
    /// The next line with its `\n` (the last may lack it).
    fn next_line(&mut self) -> &'a [u8] {
        self.line += 1;
        match self.rest.iter().position(|b| *b == b'\n') {
            Some(i) => {
                let (l, r) = self.rest.split_at(i + 1);
                self.rest = r;
                l
            }
            None => {
                self.eof = true;
                std::mem::take(&mut self.rest)
            }
        }
    }

    fn err<T>(&self, what: &'static str) -> Result<T, ParseError> {
        Err(ParseError {
            what,
            line: self.line,
        })
    }

    /// A key's name and where its value starts.
    fn key_name(&self, line: &[u8]) -> Result<(Vec<u8>, usize), ParseError> {
        let quote: &[u8] = match line.first() {
            Some(b'"') if line.len() > 6 && line.starts_with(b"\"\"\"") => b"\"\"\"",
            Some(b'"') => b"\"",
            Some(b'`') => b"`",
            _ => b"",
        };
        if !quote.is_empty() {
            let start = quote.len();
            let Some(pos) = find(&line[start..], quote).map(|p| p + start) else {
                return self.err("missing closing key quote");
            };
            let Some(i) = line.get(pos + start..).and_then(|r| find_any(r, b"=:")) else {
                return self.err("key-value delimiter not found");
            };
            return Ok((trim(&line[start..pos]).to_vec(), pos + i + start + 1));
        }
        match find_any(line, b"=:") {
            None => self.err("key-value delimiter not found"),
            Some(0) => self.err("empty key name"),
            Some(end) => Ok((trim(&line[..end]).to_vec(), end + 1)),
        }
    }

    fn value(&mut self, input: &[u8]) -> Result<Vec<u8>, ParseError> {
        let line = trim_left(input);
        if line.is_empty() {
            return Ok(Vec::new());
        }
        let quote: &[u8] = if line.len() > 3 && line.starts_with(b"\"\"\"") {
            b"\"\"\""
        } else if line[0] == b'`' {
            b"`"
        } else {
            b""
        };
        if !quote.is_empty() {
            let start = quote.len();
            return match rfind(&line[start..], quote) {
                Some(pos) => Ok(line[start..start + pos].to_vec()),
                None => self.multiline(line[start..].to_vec(), quote),
            };
        }
        let mut line = trim(line);
        if line.last() == Some(&b'\\') {
            return self.continuation(line[..line.len() - 1].to_vec());
        }
        if let Some(i) = find_any(line, b"#;") {
            self.comment.extend_from_slice(&line[i..]);
            line = trim(&line[..i]);
        }
        let surrounded = |q: u8| {
            line.len() >= 2
                && line[0] == q
                && line[line.len() - 1] == q
                && line[1..].iter().position(|b| *b == q) == Some(line.len() - 2)
        };
        if surrounded(b'\'') || surrounded(b'"') {
            line = &line[1..line.len() - 1];
        }
        Ok(line.to_vec())
    }

    fn multiline(&mut self, mut val: Vec<u8>, quote: &[u8]) -> Result<Vec<u8>, ParseError> {
        loop {
            let next = self.next_line();
            if let Some(pos) = rfind(next, quote) {
                let after = &next[pos + quote.len()..];
                let end = after
                    .iter()
                    .rposition(|b| *b != b'\r' && *b != b'\n')
                    .map_or(0, |p| p + 1);
                if trim(&after[..end]).last() == Some(&b'\\') {
                    val.extend_from_slice(next);
                    continue;
                }
                val.extend_from_slice(&next[..pos]);
                if let Some(i) = find_any(&next[pos..], b"#;") {
                    self.comment.extend_from_slice(trim(&next[pos + i..]));
                }
                return Ok(val);
            }
            val.extend_from_slice(next);
            if self.eof {
                return self.err("missing closing key quote");
            }
        }
    }

    fn continuation(&mut self, mut val: Vec<u8>) -> Result<Vec<u8>, ParseError> {
        loop {
            let next = trim(self.next_line());
            if next.is_empty() {
                break;
            }
            val.extend_from_slice(next);
            if val.last() != Some(&b'\\') {
                break;
            }
            val.pop();
        }
        Ok(val)
    }
}

/// Parses INI bytes into sections (the first is always `DEFAULT`).
pub(crate) fn parse(input: &[u8]) -> Result<Vec<Section>, ParseError> {
    let input = if input.starts_with(&[0xef, 0xbb, 0xbf]) {
        &input[3..]
    } else if input.starts_with(&[0xfe, 0xff]) || input.starts_with(&[0xff, 0xfe]) {
        &input[2..]
    } else {
        input
    };
    let mut r = Reader {
        rest: input,
        line: 0,
        eof: false,
        comment: Vec::new(),
    };
    let mut sections = vec![Section::new(b"DEFAULT".to_vec())];
    let mut auto = 1usize;
    while !r.eof {
        let line = trim_left(r.next_line());
        if line.is_empty() {
            continue;
        }
        if line[0] == b'#' || line[0] == b';' {
            r.comment.extend_from_slice(line);
            continue;
        }
        if line[0] == b'[' {
            let Some(close) = line.iter().rposition(|b| *b == b']') else {
                return r.err("unclosed section");
            };
            let name = line[1..close].to_vec();
            if name.is_empty() {
                return r.err("empty section name");
            }
            if let Some(i) = find_any(&line[close + 1..], b"#;") {
                r.comment.extend_from_slice(&line[close + 1 + i..]);
            }
            let mut section = Section::new(name);
            section.comment = trim(&r.comment).to_vec();
            r.comment.clear();
            auto = 1;
            sections.push(section);
            continue;
        }
        let (mut name, offset) = r.key_name(line)?;
        if name == b"-" {
            name = format!("#{auto}").into_bytes();
            auto += 1;
        }
        let value = r.value(line.get(offset..).unwrap_or(&[]))?;
        if name.is_empty() {
            return r.err("empty key name");
        }
        let comment = trim(&r.comment).to_vec();
        r.comment.clear();
        let Some(section) = sections.last_mut() else {
            return r.err("no section");
        };
        section.set(name, value, comment);
    }
    Ok(sections)
}
