//! SHA-1 object ids.

use std::fmt;
use std::str::FromStr;

use sha1::{Digest, Sha1};

use crate::error::GitError;
use crate::kind::ObjectKind;

/// A SHA-1 object id (20 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub [u8; 20]);

impl ObjectId {
    /// The all-zero id git uses for "no object".
    pub const ZERO: ObjectId = ObjectId([0; 20]);

    /// Parses 40 hex digits.
    pub fn from_hex(s: &[u8]) -> Result<Self, GitError> {
        if s.len() != 40 {
            return Err(GitError::protocol(format!(
                "object id must be 40 hex digits, got {} bytes",
                s.len()
            )));
        }
        let mut out = [0u8; 20];
        hex::decode_to_slice(s, &mut out)
            .map_err(|_| GitError::protocol("object id is not valid hex"))?;
        Ok(ObjectId(out))
    }

    /// Takes 20 raw bytes.
    pub fn from_bytes(b: &[u8]) -> Result<Self, GitError> {
        let arr: [u8; 20] = b
            .try_into()
            .map_err(|_| GitError::protocol("raw object id must be 20 bytes"))?;
        Ok(ObjectId(arr))
    }

    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Whether this is the all-zero id.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 20]
    }

    /// The id git gives an object of `kind` with `data`: SHA-1 of `"<kind> <len>\0" + data`.
    pub fn hash_object(kind: ObjectKind, data: &[u8]) -> ObjectId {
        let mut h = Sha1::new();
        h.update(kind.as_str().as_bytes());
        h.update(b" ");
        h.update(data.len().to_string().as_bytes());
        h.update([0u8]);
        h.update(data);
        ObjectId(h.finalize().into())
    }
}

impl FromStr for ObjectId {
    type Err = GitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ObjectId::from_hex(s.as_bytes())
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({})", self.to_hex())
    }
}
