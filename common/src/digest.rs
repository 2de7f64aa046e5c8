//! Artifact digest algorithms (`<algo>:<hex>`), shared by the source controller, which digests
//! the archives it writes, and the kustomize controller, which checks what it downloads.

use std::fmt;
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

/// An incremental hash of one of the [`DigestAlgorithm`]s.
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

    /// The digest as lower-case hex.
    pub fn finish_hex(self) -> String {
        match self {
            Hasher::Sha256(h) => hex::encode(h.finalize()),
            Hasher::Sha384(h) => hex::encode(h.finalize()),
            Hasher::Sha512(h) => hex::encode(h.finalize()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert_eq!(h.finish_hex().len(), algo.hex_len());
        }
        assert_eq!(
            "md5".parse::<DigestAlgorithm>(),
            Err(UnsupportedDigestAlgorithm("md5".into()))
        );
    }
}
