//! Git objects: kinds, commits, annotated tags and trees.

use crate::error::GitError;
pub use crate::kind::ObjectKind;
use crate::oid::ObjectId;

/// An identity line: `Name <email> <unix seconds> <+hhmm>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub name: String,
    pub email: String,
    /// Seconds since the Unix epoch.
    pub time: i64,
    /// Time zone offset as written, e.g. `+0200`.
    pub tz: String,
}

impl Signature {
    /// Parses an identity; lenient about what follows the email.
    pub fn parse(raw: &[u8]) -> Result<Self, GitError> {
        let s = String::from_utf8_lossy(raw);
        let lt = s
            .find('<')
            .ok_or_else(|| GitError::protocol("identity without '<'"))?;
        let gt = s[lt..]
            .find('>')
            .map(|i| i + lt)
            .ok_or_else(|| GitError::protocol("identity without '>'"))?;
        let name = s[..lt].trim_end().to_string();
        let email = s[lt + 1..gt].to_string();
        let mut rest = s[gt + 1..].split_whitespace();
        let time = rest.next().and_then(|t| t.parse().ok()).unwrap_or(0);
        let tz = rest.next().unwrap_or("+0000").to_string();
        Ok(Signature {
            name,
            email,
            time,
            tz,
        })
    }
}

/// A commit object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub tree: ObjectId,
    pub parents: Vec<ObjectId>,
    pub author: Signature,
    pub committer: Signature,
    /// The `encoding` header, if any.
    pub encoding: Option<String>,
    /// The `gpgsig` header (OpenPGP or SSH signature), continuation lines joined with `\n`.
    pub gpgsig: Option<String>,
    /// Other headers (e.g. `mergetag`, `gpgsig-sha256`), unparsed.
    pub extra_headers: Vec<(String, String)>,
    pub message: String,
    /// The raw object bytes, for signature verification.
    pub raw: Vec<u8>,
}

/// An annotated tag object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    pub object: ObjectId,
    pub kind: ObjectKind,
    pub name: String,
    pub tagger: Option<Signature>,
    /// The message without the trailing signature block.
    pub message: String,
    /// The signature block appended to the message (PGP/SSH/X.509), if any.
    pub signature: Option<String>,
    /// The raw object bytes, for signature verification.
    pub raw: Vec<u8>,
}

/// Header lines (with continuation lines folded back) and the message.
fn split_headers(raw: &[u8]) -> Result<(Vec<(String, String)>, String), GitError> {
    let mut headers: Vec<(String, String)> = Vec::new();
    let mut pos = 0;
    loop {
        let end = raw[pos..].iter().position(|&b| b == b'\n').map(|i| i + pos);
        let line = match end {
            Some(e) => &raw[pos..e],
            None => &raw[pos..],
        };
        let next = end.map_or(raw.len(), |e| e + 1);
        if line.is_empty() {
            let message = String::from_utf8_lossy(&raw[next.min(raw.len())..]).into_owned();
            return Ok((headers, message));
        }
        if let Some(cont) = line.strip_prefix(b" ") {
            let last = headers
                .last_mut()
                .ok_or_else(|| GitError::protocol("continuation line before any header"))?;
            last.1.push('\n');
            last.1.push_str(&String::from_utf8_lossy(cont));
        } else {
            let sp = line.iter().position(|&b| b == b' ').unwrap_or(line.len());
            let key = String::from_utf8_lossy(&line[..sp]).into_owned();
            let value =
                String::from_utf8_lossy(line.get(sp + 1..).unwrap_or_default()).into_owned();
            headers.push((key, value));
        }
        if end.is_none() {
            return Ok((headers, String::new()));
        }
        pos = next;
    }
}

impl Commit {
    pub fn parse(raw: &[u8]) -> Result<Self, GitError> {
        let (headers, message) = split_headers(raw)?;
        let mut tree = None;
        let mut parents = Vec::new();
        let mut author = None;
        let mut committer = None;
        let mut encoding = None;
        let mut gpgsig = None;
        let mut extra_headers = Vec::new();
        for (k, v) in headers {
            match k.as_str() {
                "tree" if tree.is_none() => tree = Some(ObjectId::from_hex(v.as_bytes())?),
                "parent" => parents.push(ObjectId::from_hex(v.as_bytes())?),
                "author" if author.is_none() => author = Some(Signature::parse(v.as_bytes())?),
                "committer" if committer.is_none() => {
                    committer = Some(Signature::parse(v.as_bytes())?)
                }
                "encoding" => encoding = Some(v),
                "gpgsig" => gpgsig = Some(v),
                _ => extra_headers.push((k, v)),
            }
        }
        Ok(Commit {
            tree: tree.ok_or_else(|| GitError::protocol("commit without tree"))?,
            parents,
            author: author.ok_or_else(|| GitError::protocol("commit without author"))?,
            committer: committer.ok_or_else(|| GitError::protocol("commit without committer"))?,
            encoding,
            gpgsig,
            extra_headers,
            message,
            raw: raw.to_vec(),
        })
    }

    /// The bytes a commit signature covers: the raw commit without its `gpgsig` header.
    pub fn signed_payload(&self) -> Vec<u8> {
        strip_header(&self.raw, b"gpgsig")
    }
}

/// Removes header `name` (with its continuation lines) from a raw object.
fn strip_header(raw: &[u8], name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut pos = 0;
    let mut in_headers = true;
    let mut skipping = false;
    while pos < raw.len() {
        let end = raw[pos..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(raw.len(), |i| i + pos + 1);
        let line = &raw[pos..end];
        if in_headers {
            if line == b"\n" {
                in_headers = false;
                skipping = false;
            } else if line.starts_with(b" ") {
                if skipping {
                    pos = end;
                    continue;
                }
            } else {
                skipping = line.starts_with(name) && line.get(name.len()) == Some(&b' ');
                if skipping {
                    pos = end;
                    continue;
                }
            }
        }
        out.extend_from_slice(line);
        pos = end;
    }
    out
}

const SIGNATURE_MARKERS: [&str; 4] = [
    "-----BEGIN PGP SIGNATURE-----",
    "-----BEGIN PGP MESSAGE-----",
    "-----BEGIN SSH SIGNATURE-----",
    "-----BEGIN SIGNED MESSAGE-----",
];

/// Offset of the message (after the first blank line), or the end.
fn message_start(raw: &[u8]) -> usize {
    if raw.starts_with(b"\n") {
        return 1;
    }
    raw.windows(2)
        .position(|w| w == b"\n\n")
        .map_or(raw.len(), |i| i + 2)
}

/// Offset of the first signature block that starts a line of the message.
fn signature_start(raw: &[u8]) -> Option<usize> {
    let msg = message_start(raw);
    SIGNATURE_MARKERS
        .iter()
        .filter_map(|m| {
            let m = m.as_bytes();
            (msg..raw.len().saturating_sub(m.len() - 1))
                .find(|&i| raw[i..].starts_with(m) && (i == msg || raw[i - 1] == b'\n'))
        })
        .min()
}

impl Tag {
    pub fn parse(raw: &[u8]) -> Result<Self, GitError> {
        let (headers, full_message) = split_headers(raw)?;
        let mut object = None;
        let mut kind = None;
        let mut name = None;
        let mut tagger = None;
        for (k, v) in headers {
            match k.as_str() {
                "object" => object = Some(ObjectId::from_hex(v.as_bytes())?),
                "type" => kind = Some(ObjectKind::parse(v.as_bytes())?),
                "tag" => name = Some(v),
                "tagger" => tagger = Some(Signature::parse(v.as_bytes())?),
                _ => {}
            }
        }
        let (message, signature) = match signature_start(raw) {
            Some(i) => (
                String::from_utf8_lossy(&raw[message_start(raw)..i]).into_owned(),
                Some(String::from_utf8_lossy(&raw[i..]).into_owned()),
            ),
            None => (full_message, None),
        };
        Ok(Tag {
            object: object.ok_or_else(|| GitError::protocol("tag without object"))?,
            kind: kind.ok_or_else(|| GitError::protocol("tag without type"))?,
            name: name.ok_or_else(|| GitError::protocol("tag without name"))?,
            tagger,
            message,
            signature,
            raw: raw.to_vec(),
        })
    }

    /// The bytes a tag signature covers: the raw tag up to the signature block.
    pub fn signed_payload(&self) -> &[u8] {
        match signature_start(&self.raw) {
            Some(i) => &self.raw[..i],
            None => &self.raw,
        }
    }
}

/// File modes that can appear in a tree.
pub mod mode {
    pub const TREE: u32 = 0o040000;
    pub const BLOB: u32 = 0o100644;
    pub const BLOB_EXECUTABLE: u32 = 0o100755;
    pub const SYMLINK: u32 = 0o120000;
    pub const GITLINK: u32 = 0o160000;
}

/// One entry of a tree object, borrowing its name from the tree data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeEntry<'a> {
    pub mode: u32,
    pub name: &'a [u8],
    pub oid: ObjectId,
}

impl TreeEntry<'_> {
    pub fn is_tree(&self) -> bool {
        self.mode == mode::TREE
    }
    pub fn is_gitlink(&self) -> bool {
        self.mode == mode::GITLINK
    }
}

/// Iterates over the entries of a raw tree object, in stored (git) order.
pub struct TreeIter<'a> {
    data: &'a [u8],
    failed: bool,
}

/// Entries of a raw tree object.
pub fn tree_entries(data: &[u8]) -> TreeIter<'_> {
    TreeIter {
        data,
        failed: false,
    }
}

impl<'a> Iterator for TreeIter<'a> {
    type Item = Result<TreeEntry<'a>, GitError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.data.is_empty() || self.failed {
            return None;
        }
        let r = parse_entry(self.data);
        match r {
            Ok((entry, used)) => {
                self.data = &self.data[used..];
                Some(Ok(entry))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

fn parse_entry(data: &[u8]) -> Result<(TreeEntry<'_>, usize), GitError> {
    let sp = data
        .iter()
        .position(|&b| b == b' ')
        .ok_or_else(|| GitError::protocol("tree entry without mode"))?;
    let mode_str = &data[..sp];
    if mode_str.is_empty()
        || mode_str.len() > 7
        || !mode_str.iter().all(|b| (b'0'..=b'7').contains(b))
    {
        return Err(GitError::protocol("tree entry with invalid mode"));
    }
    let mut mode = 0u32;
    for b in mode_str {
        mode = (mode << 3) | u32::from(b - b'0');
    }
    let rest = &data[sp + 1..];
    let nul = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| GitError::protocol("tree entry without NUL after name"))?;
    let name = &rest[..nul];
    if name.is_empty() {
        return Err(GitError::protocol("tree entry with empty name"));
    }
    let oid_bytes = rest
        .get(nul + 1..nul + 21)
        .ok_or_else(|| GitError::protocol("tree entry truncated in object id"))?;
    let oid = ObjectId::from_bytes(oid_bytes)?;
    Ok((TreeEntry { mode, name, oid }, sp + 1 + nul + 21))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const COMMIT: &str = "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\
parent 1111111111111111111111111111111111111111\n\
parent 2222222222222222222222222222222222222222\n\
author A U Thor <a@example.com> 1700000000 +0200\n\
committer C O Mitter <c@example.com> 1700000100 -0130\n\
gpgsig -----BEGIN SSH SIGNATURE-----\n \
U1NIU0lH\n \
-----END SSH SIGNATURE-----\n\
\n\
subject line\n\nbody\n";

    #[test]
    fn parses_commit_with_signature() {
        let c = Commit::parse(COMMIT.as_bytes()).unwrap();
        assert_eq!(c.tree.to_hex(), "4b825dc642cb6eb9a060e54bf8d69288fbee4904");
        assert_eq!(c.parents.len(), 2);
        assert_eq!(c.author.name, "A U Thor");
        assert_eq!(c.author.email, "a@example.com");
        assert_eq!(c.author.time, 1_700_000_000);
        assert_eq!(c.committer.tz, "-0130");
        assert_eq!(
            c.gpgsig.as_deref(),
            Some("-----BEGIN SSH SIGNATURE-----\nU1NIU0lH\n-----END SSH SIGNATURE-----")
        );
        assert_eq!(c.message, "subject line\n\nbody\n");
        let payload = String::from_utf8(c.signed_payload()).unwrap();
        assert!(!payload.contains("SSH SIGNATURE"));
        assert!(payload.contains("committer C O Mitter"));
        assert!(payload.ends_with("\n\nsubject line\n\nbody\n"));
    }

    #[test]
    fn rejects_broken_commits() {
        assert!(Commit::parse(b"").is_err());
        assert!(Commit::parse(b"tree nothex\n\n").is_err());
        assert!(Commit::parse(b" continuation first\n").is_err());
        assert!(Commit::parse(b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\nmsg").is_err());
    }

    #[test]
    fn parses_signed_tag() {
        let raw = "object 4b825dc642cb6eb9a060e54bf8d69288fbee4904\ntype commit\ntag v1.0.0\n\
tagger T <t@x> 1700000000 +0000\n\nrelease\n-----BEGIN PGP SIGNATURE-----\nabc\n-----END PGP SIGNATURE-----\n";
        let t = Tag::parse(raw.as_bytes()).unwrap();
        assert_eq!(t.kind, ObjectKind::Commit);
        assert_eq!(t.name, "v1.0.0");
        assert_eq!(t.message, "release\n");
        assert!(
            t.signature
                .as_deref()
                .unwrap()
                .starts_with("-----BEGIN PGP")
        );
        assert!(
            std::str::from_utf8(t.signed_payload())
                .unwrap()
                .ends_with("release\n")
        );
        assert_eq!(t.tagger.unwrap().email, "t@x");

        // Non-UTF-8 message bytes do not shift the signed payload.
        let mut raw = b"object 4b825dc642cb6eb9a060e54bf8d69288fbee4904\ntype commit\ntag v2\n\nmsg \xff\xfe\n".to_vec();
        let payload_len = raw.len();
        raw.extend_from_slice(b"-----BEGIN SSH SIGNATURE-----\nx\n-----END SSH SIGNATURE-----\n");
        let t = Tag::parse(&raw).unwrap();
        assert_eq!(t.signed_payload(), &raw[..payload_len]);
        assert!(
            t.signature
                .unwrap()
                .starts_with("-----BEGIN SSH SIGNATURE-----")
        );
        assert!(t.tagger.is_none());
        // A marker inside a line is not a signature.
        let t = Tag::parse(b"object 4b825dc642cb6eb9a060e54bf8d69288fbee4904\ntype commit\ntag v3\n\nsee -----BEGIN PGP SIGNATURE-----\n").unwrap();
        assert!(t.signature.is_none());
    }

    #[test]
    fn parses_tree_entries_and_rejects_garbage() {
        let mut data = Vec::new();
        data.extend_from_slice(b"100644 a.txt\0");
        data.extend_from_slice(&[1u8; 20]);
        data.extend_from_slice(b"40000 dir\0");
        data.extend_from_slice(&[2u8; 20]);
        let entries: Vec<_> = tree_entries(&data).collect::<Result<_, _>>().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].mode, mode::BLOB);
        assert_eq!(entries[0].name, b"a.txt");
        assert!(entries[1].is_tree());
        assert_eq!(entries[1].oid, ObjectId([2; 20]));

        for bad in [
            &data[..data.len() - 3],
            b"100644 x",
            b"1x0644 a\0",
            b"100644 \0",
        ] {
            let r: Result<Vec<_>, _> = tree_entries(bad).collect();
            assert!(r.is_err(), "{bad:?}");
        }
    }
}
