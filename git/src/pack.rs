//! Packfile decoding (gitformat-pack): version 2/3 packs with commit, tree,
//! blob and tag entries, `OFS_DELTA` and `REF_DELTA` deltas, zlib-compressed
//! bodies and a trailing SHA-1 over the whole pack.
//!
//! Decoding is bounded by [`Limits`] and never panics on corrupt input.

use std::collections::HashMap;

use flate2::{Decompress, FlushDecompress, Status};
use sha1::{Digest, Sha1};

use crate::error::GitError;
use crate::object::ObjectKind;
use crate::oid::ObjectId;

/// Bounds applied while receiving and decoding a pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest pack accepted, in bytes.
    pub max_pack_bytes: u64,
    /// Most objects a pack may hold.
    pub max_objects: u32,
    /// Largest single (inflated or delta-resolved) object, in bytes.
    pub max_object_bytes: u64,
    /// Largest sum of all inflated objects, in bytes.
    pub max_total_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_pack_bytes: 2 << 30,
            max_objects: 2_000_000,
            max_object_bytes: 512 << 20,
            max_total_bytes: 4 << 30,
        }
    }
}

/// An in-memory object database keyed by object id.
#[derive(Debug, Default, Clone)]
pub struct ObjectStore {
    objects: HashMap<ObjectId, (ObjectKind, Vec<u8>)>,
}

impl ObjectStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// The kind and data of an object.
    pub fn get(&self, id: &ObjectId) -> Option<(ObjectKind, &[u8])> {
        self.objects.get(id).map(|(k, d)| (*k, d.as_slice()))
    }

    /// The data of an object of the given kind, or a `NotFound`/`Protocol` error.
    pub fn get_kind(&self, id: &ObjectId, kind: ObjectKind) -> Result<&[u8], GitError> {
        match self.objects.get(id) {
            Some((k, d)) if *k == kind => Ok(d),
            Some((k, _)) => Err(GitError::protocol(format!(
                "object {id} is a {}, expected a {}",
                k.as_str(),
                kind.as_str()
            ))),
            None => Err(GitError::NotFound(format!(
                "{} {id} is not in the fetched pack",
                kind.as_str()
            ))),
        }
    }

    /// Adds an object, computing its id.
    pub fn insert(&mut self, kind: ObjectKind, data: Vec<u8>) -> ObjectId {
        let id = ObjectId::hash_object(kind, &data);
        self.objects.insert(id, (kind, data));
        id
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    pub fn ids(&self) -> impl Iterator<Item = &ObjectId> {
        self.objects.keys()
    }
}

enum EntryKind {
    Base(ObjectKind),
    Ofs(usize),
    Ref(ObjectId),
}

struct Entry {
    kind: EntryKind,
    /// Inflated object data or delta instructions.
    data: Vec<u8>,
}

fn corrupt(msg: impl std::fmt::Display) -> GitError {
    GitError::Protocol(format!("corrupt pack: {msg}"))
}

/// Counts of what a pack held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PackStats {
    pub objects: u32,
    pub ofs_deltas: u32,
    pub ref_deltas: u32,
}

/// Decodes a complete pack (trailer included) into an [`ObjectStore`].
pub fn parse_pack(pack: &[u8], limits: &Limits) -> Result<ObjectStore, GitError> {
    parse_pack_stats(pack, limits).map(|(s, _)| s)
}

/// Like [`parse_pack`], also counting delta entries.
pub fn parse_pack_stats(
    pack: &[u8],
    limits: &Limits,
) -> Result<(ObjectStore, PackStats), GitError> {
    if pack.len() as u64 > limits.max_pack_bytes {
        return Err(GitError::Limit(format!(
            "pack of {} bytes exceeds the limit of {} bytes",
            pack.len(),
            limits.max_pack_bytes
        )));
    }
    if pack.len() < 32 {
        return Err(corrupt("shorter than header and trailer"));
    }
    if &pack[..4] != b"PACK" {
        return Err(corrupt("missing PACK signature"));
    }
    let version = u32::from_be_bytes([pack[4], pack[5], pack[6], pack[7]]);
    if version != 2 && version != 3 {
        return Err(corrupt(format!("unsupported version {version}")));
    }
    let count = u32::from_be_bytes([pack[8], pack[9], pack[10], pack[11]]);
    if count > limits.max_objects {
        return Err(GitError::Limit(format!(
            "pack holds {count} objects, the limit is {}",
            limits.max_objects
        )));
    }
    let body_end = pack.len() - 20;
    let digest: [u8; 20] = Sha1::digest(&pack[..body_end]).into();
    if digest[..] != pack[body_end..] {
        return Err(corrupt("trailing SHA-1 does not match"));
    }

    let mut entries: Vec<Entry> = Vec::with_capacity((count as usize).min(1 << 16));
    let mut offset_index: HashMap<usize, usize> = HashMap::new();
    let mut total: u64 = 0;
    let mut pos = 12;
    let mut stats = PackStats {
        objects: count,
        ..PackStats::default()
    };
    for _ in 0..count {
        let start = pos;
        let (type_code, size, used) = read_entry_header(&pack[pos..body_end])?;
        pos += used;
        let kind = match type_code {
            1 => EntryKind::Base(ObjectKind::Commit),
            2 => EntryKind::Base(ObjectKind::Tree),
            3 => EntryKind::Base(ObjectKind::Blob),
            4 => EntryKind::Base(ObjectKind::Tag),
            6 => {
                let (rel, used) = read_ofs(&pack[pos..body_end])?;
                pos += used;
                let base = start
                    .checked_sub(rel)
                    .filter(|&b| b >= 12 && rel > 0)
                    .ok_or_else(|| corrupt("OFS_DELTA base offset out of range"))?;
                stats.ofs_deltas += 1;
                EntryKind::Ofs(base)
            }
            7 => {
                let raw = pack
                    .get(pos..pos + 20)
                    .filter(|_| pos + 20 <= body_end)
                    .ok_or_else(|| corrupt("truncated REF_DELTA base id"))?;
                pos += 20;
                stats.ref_deltas += 1;
                EntryKind::Ref(ObjectId::from_bytes(raw)?)
            }
            t => return Err(corrupt(format!("invalid object type {t}"))),
        };
        if size > limits.max_object_bytes {
            return Err(GitError::Limit(format!(
                "object of {size} bytes exceeds the limit of {} bytes",
                limits.max_object_bytes
            )));
        }
        total = total.saturating_add(size);
        if total > limits.max_total_bytes {
            return Err(GitError::Limit(format!(
                "inflated objects exceed the limit of {} bytes",
                limits.max_total_bytes
            )));
        }
        let (data, used) = inflate(&pack[pos..body_end], size)?;
        pos += used;
        offset_index.insert(start, entries.len());
        entries.push(Entry { kind, data });
    }
    if pos != body_end {
        return Err(corrupt(format!(
            "{} unexpected bytes after the last object",
            body_end - pos
        )));
    }
    Ok((resolve(entries, &offset_index, limits)?, stats))
}

/// Resolves deltas and hashes every object.
fn resolve(
    entries: Vec<Entry>,
    offset_index: &HashMap<usize, usize>,
    limits: &Limits,
) -> Result<ObjectStore, GitError> {
    let n = entries.len();
    let mut resolved: Vec<Option<(ObjectKind, ObjectId)>> = vec![None; n];
    let mut store = ObjectStore::new();
    // Dependents waiting for a base, by base entry index and by base object id.
    let mut waiting_idx: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut waiting_oid: HashMap<ObjectId, Vec<usize>> = HashMap::new();
    let mut work: Vec<usize> = Vec::new();
    let mut deltas: Vec<Option<Vec<u8>>> = Vec::with_capacity(n);

    for (i, e) in entries.into_iter().enumerate() {
        match e.kind {
            EntryKind::Base(k) => {
                let id = store.insert(k, e.data);
                resolved[i] = Some((k, id));
                work.push(i);
                deltas.push(None);
            }
            EntryKind::Ofs(off) => {
                let b = *offset_index
                    .get(&off)
                    .ok_or_else(|| corrupt("OFS_DELTA base is not at an object boundary"))?;
                waiting_idx.entry(b).or_default().push(i);
                deltas.push(Some(e.data));
            }
            EntryKind::Ref(oid) => {
                waiting_oid.entry(oid).or_default().push(i);
                deltas.push(Some(e.data));
            }
        }
    }

    let mut done = work.len();
    while let Some(i) = work.pop() {
        let Some((kind, id)) = resolved[i] else {
            continue;
        };
        let mut dependents = waiting_idx.remove(&i).unwrap_or_default();
        if let Some(more) = waiting_oid.remove(&id) {
            dependents.extend(more);
        }
        for d in dependents {
            if resolved[d].is_some() {
                continue;
            }
            let delta = deltas[d]
                .take()
                .ok_or_else(|| corrupt("delta used twice"))?;
            let base = store
                .get(&id)
                .map(|(_, data)| data)
                .ok_or_else(|| corrupt("delta base vanished"))?;
            let target = apply_delta(base, &delta, limits.max_object_bytes)?;
            let did = store.insert(kind, target);
            resolved[d] = Some((kind, did));
            work.push(d);
            done += 1;
        }
    }
    if done != n {
        let missing: Vec<String> = waiting_oid.keys().take(3).map(|o| o.to_hex()).collect();
        return Err(corrupt(format!(
            "{} deltas could not be resolved (missing bases, e.g. {:?}); thin packs are not supported",
            n - done,
            missing
        )));
    }
    Ok(store)
}

/// Type and size of a pack entry header; returns (type, size, bytes used).
fn read_entry_header(b: &[u8]) -> Result<(u8, u64, usize), GitError> {
    let first = *b.first().ok_or_else(|| corrupt("truncated entry header"))?;
    let t = (first >> 4) & 0x7;
    let mut size = u64::from(first & 0x0f);
    let mut shift = 4u32;
    let mut i = 1;
    let mut c = first;
    while c & 0x80 != 0 {
        c = *b.get(i).ok_or_else(|| corrupt("truncated entry header"))?;
        i += 1;
        if shift > 57 {
            return Err(corrupt("entry size overflows"));
        }
        size |= u64::from(c & 0x7f) << shift;
        shift += 7;
    }
    Ok((t, size, i))
}

/// The negative base offset of an OFS_DELTA; returns (offset, bytes used).
fn read_ofs(b: &[u8]) -> Result<(usize, usize), GitError> {
    let mut i = 0;
    let mut c = *b
        .first()
        .ok_or_else(|| corrupt("truncated OFS_DELTA offset"))?;
    i += 1;
    let mut off = usize::from(c & 0x7f);
    while c & 0x80 != 0 {
        c = *b
            .get(i)
            .ok_or_else(|| corrupt("truncated OFS_DELTA offset"))?;
        i += 1;
        off = off
            .checked_add(1)
            .and_then(|o| o.checked_mul(128))
            .map(|o| o | usize::from(c & 0x7f))
            .ok_or_else(|| corrupt("OFS_DELTA offset overflows"))?;
    }
    Ok((off, i))
}

/// Inflates one zlib stream that must produce exactly `size` bytes; returns
/// the data and the compressed bytes consumed.
fn inflate(input: &[u8], size: u64) -> Result<(Vec<u8>, usize), GitError> {
    let size = usize::try_from(size).map_err(|_| corrupt("object size too large"))?;
    let mut z = Decompress::new(true);
    // One spare byte so an overlong stream is detected instead of truncated;
    // start small so a lying header cannot make us reserve much up front.
    let mut out: Vec<u8> = Vec::with_capacity(size.saturating_add(1).min(1 << 20));
    loop {
        let before_in = z.total_in();
        let before_out = z.total_out();
        let consumed = usize::try_from(before_in).map_err(|_| corrupt("zlib offset"))?;
        let status = z
            .decompress_vec(
                &input[consumed.min(input.len())..],
                &mut out,
                FlushDecompress::None,
            )
            .map_err(|e| corrupt(format!("zlib: {e}")))?;
        if out.len() > size {
            return Err(corrupt("object inflates to more than its declared size"));
        }
        match status {
            Status::StreamEnd => break,
            Status::Ok | Status::BufError => {
                if z.total_in() == before_in && z.total_out() == before_out {
                    return Err(corrupt("truncated zlib stream"));
                }
                if out.len() == out.capacity() {
                    out.reserve(1);
                }
            }
        }
    }
    if out.len() != size {
        return Err(corrupt(format!(
            "object inflates to {} bytes, header says {size}",
            out.len()
        )));
    }
    let used = usize::try_from(z.total_in()).map_err(|_| corrupt("zlib offset"))?;
    Ok((out, used))
}

fn read_varint(d: &[u8], pos: &mut usize) -> Result<u64, GitError> {
    let mut v = 0u64;
    let mut shift = 0u32;
    loop {
        let c = *d
            .get(*pos)
            .ok_or_else(|| corrupt("truncated delta header"))?;
        *pos += 1;
        if shift > 63 {
            return Err(corrupt("delta size overflows"));
        }
        v |= u64::from(c & 0x7f) << shift;
        shift += 7;
        if c & 0x80 == 0 {
            return Ok(v);
        }
    }
}

/// Applies git delta instructions to `base`.
pub fn apply_delta(base: &[u8], delta: &[u8], max_size: u64) -> Result<Vec<u8>, GitError> {
    let mut pos = 0;
    let src_size = read_varint(delta, &mut pos)?;
    if src_size != base.len() as u64 {
        return Err(corrupt(format!(
            "delta expects a base of {src_size} bytes, base has {}",
            base.len()
        )));
    }
    let dst_size = read_varint(delta, &mut pos)?;
    if dst_size > max_size {
        return Err(GitError::Limit(format!(
            "delta result of {dst_size} bytes exceeds the limit of {max_size} bytes"
        )));
    }
    let dst_size = usize::try_from(dst_size).map_err(|_| corrupt("delta size too large"))?;
    let mut out = Vec::with_capacity(dst_size);
    while pos < delta.len() {
        let op = delta[pos];
        pos += 1;
        if op & 0x80 != 0 {
            let mut offset = 0usize;
            let mut len = 0usize;
            for (bit, shift) in [(0x01, 0), (0x02, 8), (0x04, 16), (0x08, 24)] {
                if op & bit != 0 {
                    let b = *delta.get(pos).ok_or_else(|| corrupt("truncated copy op"))?;
                    pos += 1;
                    offset |= usize::from(b) << shift;
                }
            }
            for (bit, shift) in [(0x10, 0), (0x20, 8), (0x40, 16)] {
                if op & bit != 0 {
                    let b = *delta.get(pos).ok_or_else(|| corrupt("truncated copy op"))?;
                    pos += 1;
                    len |= usize::from(b) << shift;
                }
            }
            if len == 0 {
                len = 0x10000;
            }
            let src = offset
                .checked_add(len)
                .and_then(|end| base.get(offset..end))
                .ok_or_else(|| corrupt("delta copy outside the base"))?;
            if out.len() + src.len() > dst_size {
                return Err(corrupt("delta writes past its declared size"));
            }
            out.extend_from_slice(src);
        } else if op != 0 {
            let n = usize::from(op);
            let src = delta
                .get(pos..pos + n)
                .ok_or_else(|| corrupt("truncated insert op"))?;
            pos += n;
            if out.len() + n > dst_size {
                return Err(corrupt("delta writes past its declared size"));
            }
            out.extend_from_slice(src);
        } else {
            return Err(corrupt("reserved delta opcode 0"));
        }
    }
    if out.len() != dst_size {
        return Err(corrupt(format!(
            "delta produced {} bytes, header says {dst_size}",
            out.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::{Command, Stdio};

    fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
        let out = Command::new("git")
            .current_dir(dir)
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// A repository with two commits of similar files (so git makes deltas)
    /// and an annotated tag.
    fn repo() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        git(p, &["init", "-q", "-b", "main"]);
        git(p, &["config", "user.name", "T"]);
        git(p, &["config", "user.email", "t@x"]);
        let base: String = (0..400)
            .map(|i| format!("line {i} of a fairly long file\n"))
            .collect();
        std::fs::create_dir_all(p.join("dir/sub")).unwrap();
        std::fs::write(p.join("big.txt"), &base).unwrap();
        std::fs::write(p.join("dir/sub/copy.txt"), format!("{base}extra\n")).unwrap();
        std::fs::write(p.join("empty"), "").unwrap();
        git(p, &["add", "-A"]);
        git(p, &["commit", "-q", "-m", "one"]);
        std::fs::write(p.join("big.txt"), base.replace("line 200", "LINE 200")).unwrap();
        git(p, &["add", "-A"]);
        git(p, &["commit", "-q", "-m", "two"]);
        git(p, &["tag", "-a", "-m", "tag msg", "v1"]);
        d
    }

    fn pack_objects(dir: &Path, extra: &[&str]) -> Vec<u8> {
        let ids = git(dir, &["rev-list", "--objects", "--all"]);
        let ids: Vec<u8> = ids
            .split(|&b| b == b'\n')
            .filter(|l| l.len() >= 40)
            .flat_map(|l| l[..40].iter().copied().chain([b'\n']))
            .collect();
        let mut args = vec!["pack-objects", "--stdout", "-q"];
        args.extend_from_slice(extra);
        let mut child = Command::new("git")
            .current_dir(dir)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&ids).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        out.stdout
    }

    fn check_against_git(dir: &Path, store: &ObjectStore) {
        let all = git(dir, &["rev-list", "--objects", "--all"]);
        let ids: Vec<&[u8]> = all
            .split(|&b| b == b'\n')
            .filter(|l| l.len() >= 40)
            .map(|l| &l[..40])
            .collect();
        // rev-list --objects --all lists the annotated tag object too.
        assert_eq!(store.len(), ids.len());
        assert!(
            store
                .ids()
                .any(|id| store.get(id).unwrap().0 == ObjectKind::Tag)
        );
        for id in ids {
            let oid = ObjectId::from_hex(id).unwrap();
            let (kind, data) = store.get(&oid).unwrap();
            let hex = std::str::from_utf8(id).unwrap();
            let ty = git(dir, &["cat-file", "-t", hex]);
            assert_eq!(kind.as_str().as_bytes(), ty.trim_ascii_end());
            assert_eq!(
                data,
                &git(dir, &["cat-file", ty.trim_ascii_end().to_str(), hex])[..]
            );
        }
    }

    trait ToStr {
        fn to_str(&self) -> &str;
    }
    impl ToStr for [u8] {
        fn to_str(&self) -> &str {
            std::str::from_utf8(self).unwrap()
        }
    }

    #[test]
    fn parses_packs_with_ofs_deltas() {
        let d = repo();
        let pack = pack_objects(d.path(), &["--delta-base-offset"]);
        let (store, stats) = parse_pack_stats(&pack, &Limits::default()).unwrap();
        assert!(stats.ofs_deltas > 0 && stats.ref_deltas == 0, "{stats:?}");
        check_against_git(d.path(), &store);
    }

    #[test]
    fn parses_packs_with_ref_deltas() {
        let d = repo();
        // Without --delta-base-offset git writes REF_DELTA entries.
        let pack = pack_objects(d.path(), &[]);
        let (store, stats) = parse_pack_stats(&pack, &Limits::default()).unwrap();
        assert!(stats.ref_deltas > 0 && stats.ofs_deltas == 0, "{stats:?}");
        check_against_git(d.path(), &store);
    }

    #[test]
    fn enforces_limits() {
        let d = repo();
        let pack = pack_objects(d.path(), &["--delta-base-offset"]);
        let base = Limits::default();
        for l in [
            Limits {
                max_pack_bytes: 100,
                ..base
            },
            Limits {
                max_objects: 3,
                ..base
            },
            Limits {
                max_object_bytes: 1000,
                ..base
            },
            Limits {
                max_total_bytes: 5000,
                ..base
            },
        ] {
            assert!(
                matches!(parse_pack(&pack, &l), Err(GitError::Limit(_))),
                "{l:?}"
            );
        }
    }

    fn fix_trailer(p: &mut [u8]) {
        let n = p.len() - 20;
        let digest: [u8; 20] = Sha1::digest(&p[..n]).into();
        p[n..].copy_from_slice(&digest);
    }

    #[test]
    fn never_panics_on_truncated_or_garbled_packs() {
        let d = repo();
        let pack = pack_objects(d.path(), &["--delta-base-offset"]);
        let limits = Limits::default();
        // Truncation at every length, with and without a recomputed trailer.
        for n in 0..pack.len() {
            assert!(parse_pack(&pack[..n], &limits).is_err());
            if n >= 32 && n < pack.len() - 20 {
                let mut t = pack[..n].to_vec();
                t.extend_from_slice(&[0; 20]);
                fix_trailer(&mut t);
                assert!(parse_pack(&t, &limits).is_err(), "truncated at {n}");
            }
        }
        // A wrong trailer is rejected.
        let mut bad = pack.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(parse_pack(&bad, &limits).is_err());
        // Random byte flips with a valid trailer: must return (Ok or Err), never panic.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut errors = 0;
        for _ in 0..3000 {
            let mut g = pack.clone();
            for _ in 0..(1 + next() % 4) {
                let i = 12 + (next() as usize) % (g.len() - 32);
                g[i] ^= (1 + next() % 255) as u8;
            }
            fix_trailer(&mut g);
            if parse_pack(&g, &limits).is_err() {
                errors += 1;
            }
        }
        assert!(errors > 0);
        // Pure garbage.
        for len in [0usize, 12, 31, 32, 100, 5000] {
            let mut g: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if len >= 4 {
                g[..4].copy_from_slice(b"PACK");
            }
            assert!(parse_pack(&g, &limits).is_err());
        }
    }

    #[test]
    fn applies_deltas_and_rejects_bad_ones() {
        let base = b"0123456789abcdef";
        // src 16, dst 9: copy offset 2 len 4, insert "XY", copy offset 10 len 3.
        let delta = [16, 9, 0x91, 2, 4, 2, b'X', b'Y', 0x91, 10, 3];
        assert_eq!(apply_delta(base, &delta, 100).unwrap(), b"2345XYabc");
        // Copy past the base.
        assert!(apply_delta(base, &[16, 4, 0x91, 14, 4], 100).is_err());
        // Wrong base size.
        assert!(apply_delta(b"short", &delta, 100).is_err());
        // Output longer than declared.
        assert!(apply_delta(base, &[16, 1, 2, b'a', b'b'], 100).is_err());
        // Output shorter than declared.
        assert!(apply_delta(base, &[16, 5, 1, b'a'], 100).is_err());
        // Reserved opcode, truncated insert, over the limit.
        assert!(apply_delta(base, &[16, 1, 0], 100).is_err());
        assert!(apply_delta(base, &[16, 3, 3, b'a'], 100).is_err());
        assert!(matches!(
            apply_delta(base, &[16, 0x80, 0x08], 100),
            Err(GitError::Limit(_))
        ));
        // Truncated header.
        assert!(apply_delta(base, &[0x80], 100).is_err());
    }
}
