//! Deterministic gzip-compressed tarballs, byte for byte what Flux's `Storage.Archive` writes at
//! the tar level.
//!
//! Layout:
//! * entries in Go `filepath.Walk` order: the root first as a directory entry named `.`, then
//!   each directory's entries in byte order of their names, depth first;
//! * only regular files and directories; symlinks, sockets, devices and FIFOs are skipped (a
//!   symlink is neither followed nor stored);
//! * names relative to the root, `/`-separated, no `./` prefix, no trailing `/` on directories;
//! * uid/gid 0, empty uname/gname, mtime 0, mode 0750 for directories, 0700 for files with any
//!   execute bit, 0600 for other files; USTAR headers (prefix/name split for long ASCII names)
//!   or a PAX extended header when the name cannot be stored in USTAR (non-ASCII, or too long
//!   to split) or the size needs more than 11 octal digits, with Go `archive/tar`'s field
//!   formatting (octal fields zero padded and NUL terminated, checksum `NNNNNN\0 `);
//! * the archive ends with two zero blocks, without padding to a record size;
//! * gzip at the default level (6), no file name and mtime 0 in the gzip header, compressed in
//!   fixed 1 MiB chunks on several threads (see [`super::pgz`]); the bytes do not depend on the
//!   thread count.
//!
//! The digest is computed over the compressed bytes while they are written.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::error::ArtifactError;
use super::ignore::IgnoreRules;
use super::pgz::with_parallel_gz;

/// Mode of directory entries.
pub const DIR_MODE: u32 = 0o750;
/// Mode of regular, non-executable file entries.
pub const FILE_MODE: u32 = 0o600;
/// Mode of regular files with any execute bit.
pub const EXE_FILE_MODE: u32 = 0o700;

const BLOCK: usize = 512;
const NAME_SIZE: usize = 100;
const PREFIX_SIZE: usize = 155;
/// File contents are copied through a buffer of this size (64 KiB: larger reads gain nothing on
/// the small files of a repository, and the buffer is resident while packaging).
const COPY_BUF: usize = 64 * 1024;

pub use rflux_common::digest::{Digest, DigestAlgorithm, HashingWriter};

/// What packaging wrote: the digest of the compressed bytes and their number.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Packaged {
    /// Digest of the compressed archive.
    pub digest: Digest,
    /// Size of the compressed archive in bytes.
    pub size: u64,
}

impl fmt::Display for Packaged {
    /// The digest, `<algo>:<hex>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.digest.fmt(f)
    }
}

// ---------------------------------------------------------------------------------------------
// Tar header encoding (Go archive/tar compatible)
// ---------------------------------------------------------------------------------------------

/// Entry type of an archive member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Dir,
    File,
}

impl EntryKind {
    fn typeflag(self) -> u8 {
        match self {
            EntryKind::Dir => b'5',
            EntryKind::File => b'0',
        }
    }
}

/// Writes `value` as zero-padded octal followed by a NUL, like Go's `formatOctal`. Returns false
/// (and writes zeros) when the value does not fit.
fn put_octal(field: &mut [u8], value: u64) -> bool {
    let digits = field.len() - 1;
    let fits = digits >= 22 || value < (1u64 << (3 * digits as u32));
    let v = if fits { value } else { 0 };
    let s = format!("{v:0digits$o}");
    field[..digits].copy_from_slice(s.as_bytes());
    field[digits] = 0;
    fits
}

/// Copies `s` into `field` (truncating) with Go's `formatString` NUL rules.
fn put_str(field: &mut [u8], s: &[u8]) {
    let n = s.len().min(field.len());
    field[..n].copy_from_slice(&s[..n]);
    if s.len() < field.len() {
        field[s.len()] = 0;
    }
    if s.len() > field.len() && field[field.len() - 1] == b'/' {
        let mut end = field.len();
        while end > 0 && s[end - 1] == b'/' {
            end -= 1;
        }
        field[end] = 0;
    }
}

fn set_magic_and_checksum(b: &mut [u8; BLOCK]) {
    b[257..263].copy_from_slice(b"ustar\0");
    b[263..265].copy_from_slice(b"00");
    let sum: u64 = b
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            if (148..156).contains(&i) {
                32
            } else {
                u64::from(c)
            }
        })
        .sum();
    put_octal(&mut b[148..155], sum);
    b[155] = b' ';
}

fn to_ascii(s: &[u8]) -> Vec<u8> {
    s.iter().copied().filter(|&c| c < 0x80 && c != 0).collect()
}

/// Go's `splitUSTARPath`: a prefix (≤155 bytes) and a name (≤100 bytes) split at a `/`.
fn split_ustar(name: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut length = name.len();
    if length <= NAME_SIZE || !name.is_ascii() {
        return None;
    } else if length > PREFIX_SIZE + 1 {
        length = PREFIX_SIZE + 1;
    } else if name[length - 1] == b'/' {
        length -= 1;
    }
    let i = name[..length].iter().rposition(|&c| c == b'/')?;
    let nlen = name.len() - i - 1;
    if i == 0 || nlen > NAME_SIZE || nlen == 0 || i > PREFIX_SIZE {
        return None;
    }
    Some((&name[..i], &name[i + 1..]))
}

/// The main header block with Go `templateV7Plus` field formatting.
fn main_block(name: &[u8], prefix: &[u8], mode: u32, size: u64, kind: EntryKind) -> [u8; BLOCK] {
    let mut b = [0u8; BLOCK];
    put_str(&mut b[0..100], name);
    put_octal(&mut b[100..108], u64::from(mode));
    put_octal(&mut b[108..116], 0);
    put_octal(&mut b[116..124], 0);
    put_octal(&mut b[124..136], size);
    put_octal(&mut b[136..148], 0);
    b[156] = kind.typeflag();
    put_octal(&mut b[329..337], 0);
    put_octal(&mut b[337..345], 0);
    put_str(&mut b[345..500], prefix);
    set_magic_and_checksum(&mut b);
    b
}

fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    let base = key.len() + value.len() + 3;
    let mut size = base + base.to_string().len();
    if base + size.to_string().len() != size {
        size = base + size.to_string().len();
    }
    let mut rec = format!("{size} {key}=").into_bytes();
    rec.extend_from_slice(value);
    rec.push(b'\n');
    rec
}

/// Encodes the header block(s) (and PAX data) for one entry.
pub fn encode_header(name: &[u8], kind: EntryKind, mode: u32, size: u64) -> Vec<u8> {
    let needs_path_record = !name.is_ascii() || name.len() > NAME_SIZE;
    let split = split_ustar(name);
    let size_fits = size < (1u64 << 33);
    if size_fits && (!needs_path_record || split.is_some()) {
        let (prefix, short) = split.unwrap_or((&[], name));
        return main_block(short, prefix, mode, size, kind).to_vec();
    }
    // PAX: records sorted by key ("path" < "size").
    let mut data = Vec::new();
    if needs_path_record {
        data.extend(pax_record("path", name));
    }
    if !size_fits {
        data.extend(pax_record("size", size.to_string().as_bytes()));
    }
    let (dir, file) = match name.iter().rposition(|&c| c == b'/') {
        Some(i) => (&name[..=i], &name[i + 1..]),
        None => (&name[..0], name),
    };
    let mut xname = dir.to_vec();
    xname.extend_from_slice(b"PaxHeaders.0/");
    xname.extend_from_slice(file);
    let mut xname = to_ascii(&xname);
    xname.truncate(NAME_SIZE);
    while xname.last() == Some(&b'/') {
        xname.pop();
    }
    let mut x = [0u8; BLOCK];
    put_str(&mut x[0..100], &xname);
    put_octal(&mut x[100..108], 0);
    put_octal(&mut x[108..116], 0);
    put_octal(&mut x[116..124], 0);
    put_octal(&mut x[124..136], data.len() as u64);
    put_octal(&mut x[136..148], 0);
    x[156] = b'x';
    set_magic_and_checksum(&mut x);

    let mut out = x.to_vec();
    out.extend_from_slice(&data);
    out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
    let main = main_block(&to_ascii(name), &[], mode, size, kind);
    out.extend_from_slice(&main);
    out
}

/// Normalized archive mode for a file system mode.
pub fn normalized_mode(kind: EntryKind, fs_mode: u32) -> u32 {
    match kind {
        EntryKind::Dir => DIR_MODE,
        EntryKind::File if fs_mode & 0o111 != 0 => EXE_FILE_MODE,
        EntryKind::File => FILE_MODE,
    }
}

// ---------------------------------------------------------------------------------------------
// Packaging
// ---------------------------------------------------------------------------------------------

struct Packer<'a, W: Write> {
    out: W,
    rules: &'a IgnoreRules,
    prune: bool,
    comps: Vec<Vec<u8>>,
    name: Vec<u8>,
    buf: Vec<u8>,
}

impl<W: Write> Packer<'_, W> {
    fn header(&mut self, kind: EntryKind, mode: u32, size: u64) -> Result<(), ArtifactError> {
        let name: &[u8] = if self.comps.is_empty() {
            b"."
        } else {
            &self.name
        };
        let h = encode_header(name, kind, mode, size);
        self.out.write_all(&h).map_err(ArtifactError::Write)
    }

    fn set_name(&mut self) {
        self.name.clear();
        for (i, c) in self.comps.iter().enumerate() {
            if i > 0 {
                self.name.push(b'/');
            }
            self.name.extend_from_slice(c);
        }
    }

    fn file(&mut self, path: &Path, md: &fs::Metadata) -> Result<(), ArtifactError> {
        let size = md.len();
        let mode = normalized_mode(EntryKind::File, md.permissions().mode());
        // Open before writing the header so an unreadable file fails cleanly.
        let mut f = File::open(path).map_err(|e| ArtifactError::io("open", path, e))?;
        self.header(EntryKind::File, mode, size)?;
        let mut copied: u64 = 0;
        loop {
            let n = match f.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ArtifactError::io("read", path, e)),
            };
            if copied + n as u64 > size {
                return Err(ArtifactError::FileChanged {
                    path: path.to_path_buf(),
                    expected: size,
                    actual: copied + n as u64,
                });
            }
            self.out
                .write_all(&self.buf[..n])
                .map_err(ArtifactError::Write)?;
            copied += n as u64;
        }
        if copied != size {
            return Err(ArtifactError::FileChanged {
                path: path.to_path_buf(),
                expected: size,
                actual: copied,
            });
        }
        let pad = (BLOCK - (size % BLOCK as u64) as usize) % BLOCK;
        if pad > 0 {
            self.out
                .write_all(&[0u8; BLOCK][..pad])
                .map_err(ArtifactError::Write)?;
        }
        Ok(())
    }

    fn walk(&mut self, dir: &Path) -> Result<(), ArtifactError> {
        let rd = fs::read_dir(dir).map_err(|e| ArtifactError::io("read dir", dir, e))?;
        let mut names = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| ArtifactError::io("read dir", dir, e))?;
            names.push(entry.file_name());
        }
        names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        for name in names {
            let path = dir.join(&name);
            let md =
                fs::symlink_metadata(&path).map_err(|e| ArtifactError::io("stat", &path, e))?;
            let ft = md.file_type();
            let is_dir = ft.is_dir();
            if !is_dir && !ft.is_file() {
                continue;
            }
            self.comps.push(name.as_bytes().to_vec());
            let excluded = self.rules.is_excluded(&self.comps, is_dir);
            let r = if !excluded {
                self.set_name();
                if is_dir {
                    self.header(EntryKind::Dir, DIR_MODE, 0)
                        .and_then(|()| self.walk(&path))
                } else {
                    self.file(&path, &md)
                }
            } else if is_dir && !self.prune {
                // Flux keeps walking below an excluded directory: a `!` rule may re-include.
                self.walk(&path)
            } else {
                Ok(())
            };
            self.comps.pop();
            r?;
        }
        Ok(())
    }
}

/// Streams the tar (uncompressed) of `dir` into `out`.
pub fn write_tar(dir: &Path, ignore: &IgnoreRules, out: impl Write) -> Result<(), ArtifactError> {
    let md = fs::metadata(dir).map_err(|_| ArtifactError::InvalidDir(dir.to_path_buf()))?;
    if !md.is_dir() {
        return Err(ArtifactError::InvalidDir(dir.to_path_buf()));
    }
    let mut p = Packer {
        out,
        rules: ignore,
        prune: ignore.can_prune_excluded_dirs(),
        comps: Vec::new(),
        name: Vec::new(),
        buf: vec![0u8; COPY_BUF],
    };
    p.header(EntryKind::Dir, DIR_MODE, 0)?;
    p.walk(dir)?;
    p.out
        .write_all(&[0u8; 2 * BLOCK])
        .map_err(ArtifactError::Write)?;
    p.out.flush().map_err(ArtifactError::Write)
}

/// Packages `dir` as a deterministic tar.gz into `out` and returns the sha256 digest and size of
/// the compressed bytes.
pub fn package_dir(
    dir: &Path,
    ignore: &IgnoreRules,
    out: &mut impl Write,
) -> Result<Packaged, ArtifactError> {
    package_dir_with(dir, ignore, DigestAlgorithm::Sha256, out)
}

/// [`package_dir`] with a chosen digest algorithm, compressing on up to
/// [`default_threads`] threads (the bytes do not depend on the thread count).
pub fn package_dir_with(
    dir: &Path,
    ignore: &IgnoreRules,
    algorithm: DigestAlgorithm,
    out: &mut impl Write,
) -> Result<Packaged, ArtifactError> {
    package_dir_threads(dir, ignore, algorithm, default_threads(), out)
}

/// Number of compression threads used by default: the available parallelism, at most 8.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1)
        .min(8)
}

/// [`package_dir_with`] with an explicit number of compression threads (1 = inline).
pub fn package_dir_threads(
    dir: &Path,
    ignore: &IgnoreRules,
    algorithm: DigestAlgorithm,
    threads: usize,
    out: &mut impl Write,
) -> Result<Packaged, ArtifactError> {
    let hashing = HashingWriter::new(out, algorithm);
    let ((), hashing) = with_parallel_gz(hashing, threads, |gz| write_tar(dir, ignore, gz))?;
    let (_, digest, size) = hashing.finish();
    Ok(Packaged { digest, size })
}

/// Packages `dir` into the file `out` atomically (temporary file in the same directory, mode
/// 0600, then rename), using [`IgnoreRules::load`] with `ignore_spec` as `spec.ignore`.
/// Returns the digest as `sha256:<hex>`.
pub fn package_to_file(
    dir: &Path,
    out: &Path,
    ignore_spec: Option<&str>,
) -> Result<String, ArtifactError> {
    let rules = IgnoreRules::load(dir, ignore_spec)?;
    package_to_file_with(dir, out, &rules, DigestAlgorithm::Sha256).map(|d| d.to_string())
}

/// [`package_to_file`] with explicit rules and algorithm; returns digest and size.
pub fn package_to_file_with(
    dir: &Path,
    out: &Path,
    rules: &IgnoreRules,
    algorithm: DigestAlgorithm,
) -> Result<Packaged, ArtifactError> {
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".rflux-archive-")
        .suffix(".tmp")
        .tempfile_in(&parent)
        .map_err(|e| ArtifactError::io("create temp file in", &parent, e))?;
    let digest = package_dir_with(dir, rules, algorithm, tmp.as_file_mut())?;
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o600))
        .map_err(|e| ArtifactError::io("chmod", tmp.path(), e))?;
    tmp.persist(out)
        .map_err(|e| ArtifactError::io("rename temp file to", out, e.error))?;
    Ok(digest)
}

/// Result of [`bench_package`].
#[derive(Debug, Clone, PartialEq)]
pub struct BenchResult {
    /// Bytes of file content packaged per iteration.
    pub input_bytes: u64,
    /// Compressed bytes per iteration.
    pub output_bytes: u64,
    pub iterations: u32,
    pub elapsed: Duration,
}

impl BenchResult {
    /// Input megabytes (10^6) per second.
    pub fn mb_per_sec(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs <= 0.0 {
            return 0.0;
        }
        (self.input_bytes as f64 * f64::from(self.iterations)) / 1e6 / secs
    }
}

/// Packages `dir` `iterations` times into a sink (no ignore rules) and measures the time.
pub fn bench_package(dir: &Path, iterations: u32) -> Result<BenchResult, ArtifactError> {
    let rules = IgnoreRules::none();
    let input_bytes = content_size(dir)?;
    let start = Instant::now();
    let mut output_bytes = 0;
    for _ in 0..iterations.max(1) {
        let d = package_dir(dir, &rules, &mut io::sink())?;
        output_bytes = d.size;
    }
    Ok(BenchResult {
        input_bytes,
        output_bytes,
        iterations: iterations.max(1),
        elapsed: start.elapsed(),
    })
}

fn content_size(dir: &Path) -> Result<u64, ArtifactError> {
    let mut total = 0;
    let rd = fs::read_dir(dir).map_err(|e| ArtifactError::io("read dir", dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| ArtifactError::io("read dir", dir, e))?;
        let md = fs::symlink_metadata(entry.path())
            .map_err(|e| ArtifactError::io("stat", entry.path(), e))?;
        if md.is_dir() {
            total += content_size(&entry.path())?;
        } else if md.is_file() {
            total += md.len();
        }
    }
    Ok(total)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn field(b: &[u8], r: std::ops::Range<usize>) -> &[u8] {
        &b[r]
    }

    #[test]
    fn octal_fields_like_go() {
        let mut f = [0xffu8; 8];
        assert!(put_octal(&mut f, 0o750));
        assert_eq!(&f, b"0000750\0");
        let mut f = [0xffu8; 12];
        assert!(put_octal(&mut f, 12345));
        assert_eq!(&f, b"00000030071\0");
        assert!(!put_octal(&mut f, 1 << 33));
        assert_eq!(&f, b"00000000000\0");
    }

    #[test]
    fn ustar_header_fields() {
        let h = encode_header(b"dir/file.yaml", EntryKind::File, 0o600, 5);
        assert_eq!(h.len(), 512);
        assert_eq!(&h[..14], b"dir/file.yaml\0");
        assert_eq!(field(&h, 100..108), b"0000600\0");
        assert_eq!(field(&h, 108..116), b"0000000\0");
        assert_eq!(field(&h, 124..136), b"00000000005\0");
        assert_eq!(field(&h, 136..148), b"00000000000\0");
        assert_eq!(h[156], b'0');
        assert_eq!(field(&h, 257..265), b"ustar\x0000");
        assert!(field(&h, 265..329).iter().all(|&c| c == 0));
        assert_eq!(field(&h, 329..337), b"0000000\0");
        // checksum: 6 octal digits, NUL, space; and it must be the sum with spaces in place.
        assert_eq!(h[154], 0);
        assert_eq!(h[155], b' ');
        let sum: u32 = h
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u32::from(c)
                }
            })
            .sum();
        let stored = u32::from_str_radix(std::str::from_utf8(&h[148..154]).unwrap(), 8).unwrap();
        assert_eq!(stored, sum);
    }

    #[test]
    fn long_ascii_names_split_into_prefix() {
        let name = format!("{}/{}", "d".repeat(120), "f".repeat(90));
        let h = encode_header(name.as_bytes(), EntryKind::File, 0o600, 0);
        assert_eq!(h.len(), 512);
        assert_eq!(&h[..90], "f".repeat(90).as_bytes());
        assert_eq!(&h[345..465], "d".repeat(120).as_bytes());
    }

    #[test]
    fn unsplittable_and_non_ascii_names_use_pax() {
        let name = "x".repeat(150);
        let h = encode_header(name.as_bytes(), EntryKind::File, 0o600, 3);
        assert_eq!(h.len(), 3 * 512);
        assert_eq!(h[156], b'x');
        assert_eq!(&h[..13], b"PaxHeaders.0/");
        let rec = format!("160 path={name}\n");
        assert_eq!(rec.len(), 160);
        assert_eq!(&h[512..512 + rec.len()], rec.as_bytes());
        assert_eq!(h[1024 + 156], b'0');

        let h = encode_header("d/é.yaml".as_bytes(), EntryKind::File, 0o600, 3);
        assert_eq!(&h[..20], b"d/PaxHeaders.0/.yaml");
        assert_eq!(&h[1024..1032], b"d/.yaml\0");
    }

    #[test]
    fn pax_record_length_counts_itself() {
        assert_eq!(pax_record("path", b"a"), b"9 path=a\n");
        let v = "y".repeat(92);
        let r = pax_record("path", v.as_bytes());
        // 99 bytes without the length field; "101 " would make it 102 long, so Go writes 102.
        assert_eq!(r.len(), 102);
        assert!(r.starts_with(b"102 path="));
    }

    #[test]
    fn packaged_displays_its_digest_and_counts_the_compressed_bytes() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.yaml"), "a: 1\n").unwrap();
        let mut out = Vec::new();
        let p = package_dir(dir.path(), &IgnoreRules::none(), &mut out).unwrap();
        assert_eq!(p.size, out.len() as u64);
        assert_eq!(p.digest, Digest::of_bytes(DigestAlgorithm::Sha256, &out));
        assert_eq!(p.to_string(), p.digest.to_string());
        assert!(p.to_string().starts_with("sha256:"));
    }
}
