//! Packfile decoding, in the format git's `gitformat-pack` documentation describes:
//! version 2/3 packs with commit, tree, blob and tag entries, `OFS_DELTA` and `REF_DELTA`
//! deltas, zlib-compressed bodies and a trailing SHA-1 over the whole pack.
//!
//! Decoding is bounded by [`Limits`] and never panics on corrupt input: every size a pack
//! declares (of an entry, of a delta's result) is checked against the limits before memory
//! is allocated for it, inflation stops one byte past the declared size, and the bytes of
//! every inflated entry and every delta-resolved object count against
//! [`Limits::max_total_bytes`].

mod delta;

use std::collections::HashMap;

use flate2::{Decompress, FlushDecompress, Status};
use sha1::{Digest, Sha1};

pub use self::delta::apply_delta;
use crate::error::GitError;
pub use crate::limits::Limits;
use crate::object::ObjectKind;
use crate::oid::ObjectId;

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
    GitError::corrupt_pack(msg)
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
            return Err(total_limit(limits));
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
    Ok((resolve(entries, &offset_index, limits, total)?, stats))
}

fn total_limit(limits: &Limits) -> GitError {
    GitError::Limit(format!(
        "the objects decoded from the pack exceed the limit of {} bytes in all",
        limits.max_total_bytes
    ))
}

/// Resolves deltas and hashes every object. `total` is what decoding has counted against
/// [`Limits::max_total_bytes`] so far; each delta's declared result size is added to it
/// before the delta is applied.
fn resolve(
    entries: Vec<Entry>,
    offset_index: &HashMap<usize, usize>,
    limits: &Limits,
    mut total: u64,
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
            // The declared result size is counted before anything is allocated for it.
            let left = limits.max_total_bytes.saturating_sub(total);
            let max_size = limits.max_object_bytes.min(left);
            let target = delta::apply_checked(base, &delta, max_size, |size| {
                if size > limits.max_object_bytes {
                    GitError::Limit(format!(
                        "delta result of {size} bytes exceeds the limit of {} bytes",
                        limits.max_object_bytes
                    ))
                } else {
                    total_limit(limits)
                }
            })?;
            total = total.saturating_add(target.len() as u64);
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

/// First allocation for inflated data; the buffer then doubles up to the declared size.
const INFLATE_INITIAL_CAPACITY: usize = 1 << 20;

/// Inflates one zlib stream that must produce exactly `size` bytes; returns
/// the data and the compressed bytes consumed.
///
/// The output buffer never grows beyond `size + 1` bytes (one spare byte detects a stream
/// that is longer than declared), so a zlib bomb costs at most its declared size, which
/// the caller has already checked against the limits.
fn inflate(input: &[u8], size: u64) -> Result<(Vec<u8>, usize), GitError> {
    let size = usize::try_from(size).map_err(|_| corrupt("object size too large"))?;
    let max_len = size.saturating_add(1);
    let mut z = Decompress::new(true);
    let mut out: Vec<u8> = Vec::with_capacity(max_len.min(INFLATE_INITIAL_CAPACITY));
    loop {
        if out.len() == out.capacity() {
            let grown = out.capacity().saturating_mul(2).clamp(1, max_len);
            out.reserve_exact(grown.saturating_sub(out.len()));
        }
        let before_in = z.total_in();
        let before_out = z.total_out();
        let consumed = usize::try_from(before_in).map_err(|_| corrupt("zlib offset"))?;
        let status = z
            .decompress_vec(
                input.get(consumed..).unwrap_or_default(),
                &mut out,
                FlushDecompress::None,
            )
            .map_err(|e| corrupt(format!("zlib: {e}")))?;
        if out.len() > size {
            return Err(corrupt(format!(
                "object inflates to more than its declared size of {size} bytes"
            )));
        }
        match status {
            Status::StreamEnd => break,
            Status::Ok | Status::BufError => {
                if z.total_in() == before_in && z.total_out() == before_out {
                    return Err(corrupt("truncated zlib stream"));
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
}
