//! Artifact digests (`<algo>:<hex>`), shared by the source controller, which digests the
//! archives it writes and checks the ones it keeps, and the kustomize controller, which checks
//! what it downloads.
//!
//! [`Digest`] is the one parsed form: a [`DigestAlgorithm`] and the lower-case hex of a hash of
//! that algorithm's length. It is computed with [`Digest::of_bytes`], [`Digest::of_reader`], a
//! [`Hasher`] or a [`HashingWriter`], and checked with [`Digest::verify_bytes`],
//! [`Digest::verify_reader`] or, for a stream that arrives in pieces, a [`Verifier`].

use std::fmt;
use std::io::{self, Read, Write};
use std::str::FromStr;

use sha2::Digest as _;

/// The algorithms Flux allows in `artifact.digest` and `--artifact-digest-algo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum DigestAlgorithm {
    #[default]
    Sha256,
    Sha384,
    Sha512,
}

/// A name that is not one of [`DigestAlgorithm`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported digest algorithm '{0}' (supported: sha256, sha384, sha512)")]
pub struct UnsupportedDigestAlgorithm(pub String);

impl DigestAlgorithm {
    /// The name used in `<algo>:<hex>`.
    pub fn as_str(self) -> &'static str {
        match self {
            DigestAlgorithm::Sha256 => "sha256",
            DigestAlgorithm::Sha384 => "sha384",
            DigestAlgorithm::Sha512 => "sha512",
        }
    }

    /// Length of the lower-case hex encoding of a digest.
    pub fn hex_len(self) -> usize {
        match self {
            DigestAlgorithm::Sha256 => 64,
            DigestAlgorithm::Sha384 => 96,
            DigestAlgorithm::Sha512 => 128,
        }
    }

    /// A fresh hasher for this algorithm.
    pub fn hasher(self) -> Hasher {
        match self {
            DigestAlgorithm::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            DigestAlgorithm::Sha384 => Hasher::Sha384(sha2::Sha384::new()),
            DigestAlgorithm::Sha512 => Hasher::Sha512(sha2::Sha512::new()),
        }
    }
}

impl FromStr for DigestAlgorithm {
    type Err = UnsupportedDigestAlgorithm;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sha256" => Ok(DigestAlgorithm::Sha256),
            "sha384" => Ok(DigestAlgorithm::Sha384),
            "sha512" => Ok(DigestAlgorithm::Sha512),
            other => Err(UnsupportedDigestAlgorithm(other.to_string())),
        }
    }
}

impl fmt::Display for DigestAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An incremental hash of one of the [`DigestAlgorithm`]s. As an [`io::Write`] it hashes what
/// is written to it (`io::copy(&mut reader, &mut hasher)`).
pub enum Hasher {
    Sha256(sha2::Sha256),
    Sha384(sha2::Sha384),
    Sha512(sha2::Sha512),
}

impl Hasher {
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::Sha384(h) => h.update(bytes),
            Hasher::Sha512(h) => h.update(bytes),
        }
    }

    /// The algorithm this hasher computes.
    pub fn algorithm(&self) -> DigestAlgorithm {
        match self {
            Hasher::Sha256(_) => DigestAlgorithm::Sha256,
            Hasher::Sha384(_) => DigestAlgorithm::Sha384,
            Hasher::Sha512(_) => DigestAlgorithm::Sha512,
        }
    }

    /// The digest as lower-case hex.
    pub fn finish_hex(self) -> String {
        match self {
            Hasher::Sha256(h) => hex::encode(h.finalize()),
            Hasher::Sha384(h) => hex::encode(h.finalize()),
            Hasher::Sha512(h) => hex::encode(h.finalize()),
        }
    }

    /// The digest of everything hashed.
    pub fn finish(self) -> Digest {
        Digest {
            algorithm: self.algorithm(),
            hex: self.finish_hex(),
        }
    }
}

impl Write for Hasher {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Why a string is not a digest. The short texts of [`DigestError::reason`] are the ones Flux
/// reports for a malformed `artifact.digest`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// Nothing was given.
    #[error("empty digest")]
    Empty,
    /// No `<algo>:` prefix, or the hex part holds something other than `0-9a-f`.
    #[error("invalid checksum digest format")]
    Format,
    /// The algorithm is not one of [`DigestAlgorithm`]'s.
    #[error(transparent)]
    Unsupported(#[from] UnsupportedDigestAlgorithm),
    /// The hex part does not have the algorithm's length.
    #[error("invalid checksum digest length")]
    Length,
}

impl DigestError {
    /// The reason without the offending value: `empty digest`, `invalid checksum digest
    /// format`, `unsupported digest algorithm` or `invalid checksum digest length`.
    pub fn reason(&self) -> &'static str {
        match self {
            DigestError::Empty => "empty digest",
            DigestError::Format => "invalid checksum digest format",
            DigestError::Unsupported(_) => "unsupported digest algorithm",
            DigestError::Length => "invalid checksum digest length",
        }
    }
}

/// A digest `<algo>:<hex>`: a supported algorithm and lower-case hex of that algorithm's
/// length. Built only by parsing or hashing, so it is always well formed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Digest {
    algorithm: DigestAlgorithm,
    hex: String,
}

impl Digest {
    /// A digest from its parts, checking the hex (lower case, the algorithm's length).
    pub fn new(algorithm: DigestAlgorithm, hex: &str) -> Result<Digest, DigestError> {
        if !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(DigestError::Format);
        }
        if hex.len() != algorithm.hex_len() {
            return Err(DigestError::Length);
        }
        Ok(Digest {
            algorithm,
            hex: hex.to_string(),
        })
    }

    /// Parses `<algo>:<hex>` (the `artifact.digest` form).
    pub fn parse(s: &str) -> Result<Digest, DigestError> {
        if s.is_empty() {
            return Err(DigestError::Empty);
        }
        let (algo, hex) = s.split_once(':').ok_or(DigestError::Format)?;
        Digest::new(algo.parse()?, hex)
    }

    /// [`Digest::parse`], except that a bare hex string (no `<algo>:`) is a sha256 digest, as
    /// Flux's artifact fetcher accepts it.
    pub fn parse_allow_bare(s: &str) -> Result<Digest, DigestError> {
        if !s.is_empty() && !s.contains(':') {
            return Digest::new(DigestAlgorithm::Sha256, s);
        }
        Digest::parse(s)
    }

    /// The algorithm.
    pub fn algorithm(&self) -> DigestAlgorithm {
        self.algorithm
    }

    /// The lower-case hex of the hash.
    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// The digest of `bytes`.
    pub fn of_bytes(algorithm: DigestAlgorithm, bytes: &[u8]) -> Digest {
        let mut h = algorithm.hasher();
        h.update(bytes);
        h.finish()
    }

    /// The digest of everything `reader` yields.
    pub fn of_reader(algorithm: DigestAlgorithm, reader: &mut impl Read) -> io::Result<Digest> {
        let mut h = algorithm.hasher();
        io::copy(reader, &mut h)?;
        Ok(h.finish())
    }

    /// Checks `bytes` against this digest.
    pub fn verify_bytes(&self, bytes: &[u8]) -> Result<(), DigestMismatch> {
        self.check(Digest::of_bytes(self.algorithm, bytes))
    }

    /// Checks everything `reader` yields against this digest.
    pub fn verify_reader(&self, reader: &mut impl Read) -> Result<(), VerifyError> {
        let actual = Digest::of_reader(self.algorithm, reader)?;
        Ok(self.check(actual)?)
    }

    /// A streaming check: feed it the pieces, then [`Verifier::finish`].
    pub fn verifier(&self) -> Verifier {
        Verifier {
            expected: self.clone(),
            hasher: self.algorithm.hasher(),
            len: 0,
        }
    }

    fn check(&self, actual: Digest) -> Result<(), DigestMismatch> {
        if actual == *self {
            Ok(())
        } else {
            Err(DigestMismatch {
                expected: self.clone(),
                actual,
            })
        }
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm, self.hex)
    }
}

impl FromStr for Digest {
    type Err = DigestError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Digest::parse(s)
    }
}

/// Bytes whose digest is not the expected one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("computed digest doesn't match '{expected}' (got '{actual}')")]
pub struct DigestMismatch {
    pub expected: Digest,
    pub actual: Digest,
}

/// Why [`Digest::verify_reader`] failed.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// Reading failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// What was read has another digest.
    #[error(transparent)]
    Mismatch(#[from] DigestMismatch),
}

/// Checks a stream that arrives in pieces against an expected [`Digest`]
/// ([`Digest::verifier`]). As an [`io::Write`] it takes what is written to it.
pub struct Verifier {
    expected: Digest,
    hasher: Hasher,
    len: u64,
}

impl Verifier {
    /// Hashes the next piece.
    pub fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
        self.len = self.len.saturating_add(bytes.len() as u64);
    }

    /// Number of bytes seen so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was seen yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Compares the digest of everything seen with the expected one; returns the byte count.
    pub fn finish(self) -> Result<u64, DigestMismatch> {
        let len = self.len;
        self.expected.check(self.hasher.finish()).map(|()| len)
    }
}

impl Write for Verifier {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A writer that hashes and counts what passes through it to `inner`.
pub struct HashingWriter<W> {
    inner: W,
    hasher: Hasher,
    written: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W, algorithm: DigestAlgorithm) -> Self {
        HashingWriter {
            inner,
            hasher: algorithm.hasher(),
            written: 0,
        }
    }

    /// Returns the inner writer, the digest of everything written and its length in bytes.
    pub fn finish(self) -> (W, Digest, u64) {
        (self.inner, self.hasher.finish(), self.written)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const ABC_SHA256: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn names_round_trip_and_lengths_match_the_hash() {
        for algo in [
            DigestAlgorithm::Sha256,
            DigestAlgorithm::Sha384,
            DigestAlgorithm::Sha512,
        ] {
            assert_eq!(algo.as_str().parse::<DigestAlgorithm>(), Ok(algo));
            let mut h = algo.hasher();
            h.update(b"abc");
            assert_eq!(h.algorithm(), algo);
            assert_eq!(h.finish_hex().len(), algo.hex_len());
        }
        assert_eq!(
            "md5".parse::<DigestAlgorithm>(),
            Err(UnsupportedDigestAlgorithm("md5".into()))
        );
    }

    #[test]
    fn parse_and_display_round_trip() {
        let s = format!("sha256:{ABC_SHA256}");
        let d = Digest::parse(&s).unwrap();
        assert_eq!(d.algorithm(), DigestAlgorithm::Sha256);
        assert_eq!(d.hex(), ABC_SHA256);
        assert_eq!(d.to_string(), s);
        assert_eq!(s.parse::<Digest>().unwrap(), d);
        let long = format!("sha512:{}", "0".repeat(128));
        assert_eq!(Digest::parse(&long).unwrap().to_string(), long);
    }

    #[test]
    fn parse_refuses_malformed_digests() {
        assert_eq!(Digest::parse(""), Err(DigestError::Empty));
        assert_eq!(Digest::parse(ABC_SHA256), Err(DigestError::Format));
        assert_eq!(Digest::parse("sha256:xyz"), Err(DigestError::Format));
        assert_eq!(Digest::parse("sha256:abc"), Err(DigestError::Length));
        assert_eq!(Digest::parse("sha256:"), Err(DigestError::Length));
        let upper = format!("sha256:{}", ABC_SHA256.to_uppercase());
        assert_eq!(Digest::parse(&upper), Err(DigestError::Format));
        let md5 = Digest::parse(&format!("md5:{ABC_SHA256}")).unwrap_err();
        assert_eq!(
            md5,
            DigestError::Unsupported(UnsupportedDigestAlgorithm("md5".into()))
        );
        assert_eq!(md5.reason(), "unsupported digest algorithm");
        // The hex of another algorithm's length is refused.
        assert_eq!(
            Digest::parse(&format!("sha512:{ABC_SHA256}")),
            Err(DigestError::Length)
        );
    }

    #[test]
    fn bare_hex_is_sha256_only_when_allowed() {
        let d = Digest::parse_allow_bare(ABC_SHA256).unwrap();
        assert_eq!(d.to_string(), format!("sha256:{ABC_SHA256}"));
        assert_eq!(Digest::parse_allow_bare(""), Err(DigestError::Empty));
        assert_eq!(
            Digest::parse_allow_bare(&"A".repeat(64)),
            Err(DigestError::Format)
        );
        assert_eq!(Digest::parse_allow_bare("abc"), Err(DigestError::Length));
    }

    #[test]
    fn computes_and_verifies_bytes_readers_and_streams() {
        let d = Digest::of_bytes(DigestAlgorithm::Sha256, b"abc");
        assert_eq!(d.hex(), ABC_SHA256);
        assert_eq!(
            Digest::of_reader(DigestAlgorithm::Sha256, &mut &b"abc"[..]).unwrap(),
            d
        );
        assert!(d.verify_bytes(b"abc").is_ok());
        let err = d.verify_bytes(b"abd").unwrap_err();
        assert_eq!(err.expected, d);
        assert_eq!(
            err.to_string(),
            format!("computed digest doesn't match '{d}' (got '{}')", err.actual)
        );
        assert!(d.verify_reader(&mut &b"abc"[..]).is_ok());
        assert!(matches!(
            d.verify_reader(&mut &b"ab"[..]),
            Err(VerifyError::Mismatch(_))
        ));

        let mut v = d.verifier();
        assert!(v.is_empty());
        v.update(b"a");
        v.write_all(b"bc").unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v.finish(), Ok(3));
        let mut v = d.verifier();
        v.update(b"abcd");
        assert!(v.finish().is_err());
    }

    #[test]
    fn hashing_writer_passes_bytes_through_and_counts_them() {
        let mut w = HashingWriter::new(Vec::new(), DigestAlgorithm::Sha384);
        w.write_all(b"ab").unwrap();
        w.write_all(b"c").unwrap();
        let (out, d, n) = w.finish();
        assert_eq!(out, b"abc");
        assert_eq!(n, 3);
        assert_eq!(d, Digest::of_bytes(DigestAlgorithm::Sha384, b"abc"));
    }
}
