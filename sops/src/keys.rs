//! Master keys held in memory (age identities, OpenPGP secret keys) and the recovery of the
//! 32-byte data key from a document's key groups (reference §7).

mod report;
mod shamir;

use std::io::Read;
use std::str::FromStr;

use pgp::composed::{Deserializable, Message, SignedSecretKey};
use pgp::types::Password;
use zeroize::Zeroizing;

use crate::error::SopsError;
use crate::metadata::{KeyKind, MasterKey, Metadata};

/// The largest data key (or Shamir part) a master key may unwrap; real ones are 32/33 bytes.
const MAX_UNWRAPPED: u64 = 1024;

/// Decryption keys, as Flux imports them from the decryption Secret. Held only in memory.
#[derive(Default)]
pub struct Keys {
    age: Vec<age::x25519::Identity>,
    /// Identity lines sops accepts but rflux cannot use (post-quantum, plugins).
    age_unusable: Vec<&'static str>,
    pgp: Vec<SignedSecretKey>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("age_identities", &self.age.len())
            .field("age_unusable", &self.age_unusable)
            .field("pgp_keys", &self.pgp.len())
            .finish()
    }
}

impl Keys {
    /// Adds the identities of an age identity file: one per line, empty lines and `#`
    /// lines skipped (no other trimming, as sops). `AGE-SECRET-KEY-1…` is used;
    /// `AGE-SECRET-KEY-PQ-1…` and `AGE-PLUGIN-…` are accepted but cannot decrypt here;
    /// anything else is refused as sops refuses it.
    pub fn add_age_identities(&mut self, text: &str) -> Result<(), SopsError> {
        let mut parsed = Vec::new();
        let mut unusable = Vec::new();
        for line in text.split('\n') {
            // Go's line scanner drops one trailing `\r`.
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line.starts_with("AGE-PLUGIN-") {
                unusable.push("age plugin identities (AGE-PLUGIN-…)");
            } else if line.starts_with("AGE-SECRET-KEY-PQ-1") {
                unusable.push("post-quantum age identities (AGE-SECRET-KEY-PQ-1…)");
            } else if line.starts_with("AGE-SECRET-KEY-1") {
                let id = age::x25519::Identity::from_str(line).map_err(|e| {
                    SopsError::Key(format!(
                        "failed to parse and add to age identities: malformed secret key: {e}"
                    ))
                })?;
                parsed.push(id);
            } else {
                return Err(SopsError::Key(
                    "failed to parse and add to age identities: unknown identity type".into(),
                ));
            }
        }
        self.age.extend(parsed);
        for u in unusable {
            if !self.age_unusable.contains(&u) {
                self.age_unusable.push(u);
            }
        }
        Ok(())
    }

    /// Adds every secret key of armored OpenPGP keyrings (`gpg --export-secret-keys -a`;
    /// several blocks may follow each other). Keys must be passphrase-less to be of use.
    /// Armored public key blocks are accepted and ignored (gpg would import them, and they
    /// can decrypt nothing).
    pub fn add_pgp_armored(&mut self, text: &str) -> Result<(), SopsError> {
        const PRIVATE: &str = "-----BEGIN PGP PRIVATE KEY BLOCK-----";
        const PUBLIC: &str = "-----BEGIN PGP PUBLIC KEY BLOCK-----";
        let fail = |e: &dyn std::fmt::Display| {
            SopsError::Key(format!("failed to import OpenPGP secret key: {e}"))
        };
        let starts: Vec<usize> = text.match_indices(PRIVATE).map(|(i, _)| i).collect();
        if starts.is_empty() {
            return if text.contains(PUBLIC) {
                Ok(())
            } else {
                Err(fail(&"no valid OpenPGP data found"))
            };
        }
        let mut found = Vec::new();
        for (n, start) in starts.iter().enumerate() {
            let end = starts.get(n + 1).copied().unwrap_or(text.len());
            let block = text.get(*start..end).unwrap_or_default();
            let (keys, _) = SignedSecretKey::from_string_many(block).map_err(|e| fail(&e))?;
            for key in keys {
                found.push(key.map_err(|e| fail(&e))?);
            }
        }
        if found.is_empty() {
            return Err(fail(&"no valid OpenPGP data found"));
        }
        self.pgp.extend(found);
        Ok(())
    }

    /// Whether no usable key was added.
    pub fn is_empty(&self) -> bool {
        self.age.is_empty() && self.pgp.is_empty()
    }

    /// Recovers the data key: every group is tried (keys in sops' order, the first that
    /// works wins); one group gives the key, several are combined with Shamir.
    pub fn data_key(&self, meta: &Metadata) -> Result<Zeroizing<[u8; 32]>, SopsError> {
        let mut results: report::GroupResults = Vec::with_capacity(meta.key_groups.len());
        let mut parts = Vec::new();
        for group in &meta.key_groups {
            match self.decrypt_group(group) {
                Ok(part) => {
                    parts.push(part);
                    results.push(None);
                }
                Err(failures) => results.push(Some(failures)),
            }
        }
        let failure =
            || SopsError::DataKey(report::data_key_failure(&results, meta.shamir_threshold));
        let key = if meta.key_groups.len() > 1 {
            let needed = usize::try_from(meta.shamir_threshold).unwrap_or(0);
            if parts.len() < needed {
                return Err(failure());
            }
            shamir::combine(&parts).map_err(|e| {
                SopsError::DataKey(format!("could not get data key from shamir parts: {e}"))
            })?
        } else {
            match parts.pop() {
                Some(part) => part,
                None => return Err(failure()),
            }
        };
        let mut out = Zeroizing::new([0u8; 32]);
        if key.len() != out.len() {
            return Err(SopsError::DataKey(format!(
                "the recovered data key has {} bytes, expected 32",
                key.len()
            )));
        }
        out.copy_from_slice(&key);
        Ok(out)
    }

    /// The part wrapped by the first key of the group that works, or every key's failure.
    fn decrypt_group(
        &self,
        group: &[MasterKey],
    ) -> Result<Zeroizing<Vec<u8>>, Vec<(String, String)>> {
        let mut failures = Vec::new();
        for key in group {
            let attempt = match key {
                MasterKey::Age { enc, .. } => self.decrypt_age(enc),
                MasterKey::Pgp { enc, .. } => self.decrypt_pgp(enc),
                other => Err(unsupported(other.kind())),
            };
            match attempt {
                Ok(part) => return Ok(part),
                Err(reason) => failures.push((key.name(), reason)),
            }
        }
        Err(failures)
    }

    fn decrypt_age(&self, enc: &str) -> Result<Zeroizing<Vec<u8>>, String> {
        let unusable = if self.age_unusable.is_empty() {
            String::new()
        } else {
            format!(
                " ({} are not supported by rflux)",
                self.age_unusable.join(" and ")
            )
        };
        if self.age.is_empty() {
            return Err(format!("failed to load age identities{unusable}"));
        }
        let reader_err = |e: age::DecryptError| {
            let why = match e {
                age::DecryptError::NoMatchingKeys => {
                    "no identity matched any of the recipients".to_string()
                }
                other => other.to_string(),
            };
            format!(
                "failed to create reader for decrypting sops data key with age: {why}{unusable}"
            )
        };
        let decryptor =
            age::Decryptor::new_buffered(age::armor::ArmoredReader::new(enc.as_bytes()))
                .map_err(reader_err)?;
        let reader = decryptor
            .decrypt(self.age.iter().map(|i| i as &dyn age::Identity))
            .map_err(reader_err)?;
        read_capped(reader)
            .map_err(|e| format!("failed to copy age decrypted data into bytes.Buffer: {e}"))
    }

    fn decrypt_pgp(&self, enc: &str) -> Result<Zeroizing<Vec<u8>>, String> {
        let fail =
            |e: &dyn std::fmt::Display| format!("could not decrypt data key with PGP key: {e}");
        if self.pgp.is_empty() {
            return Err(fail(&"no OpenPGP secret key was given"));
        }
        let (msg, _) = Message::from_string(enc).map_err(|e| fail(&e))?;
        let password = Password::empty();
        let mut msg = msg
            .decrypt_with_keys(vec![&password], self.pgp.iter().collect())
            .map_err(|e| fail(&e))?;
        // gpg compresses the key (ZLIB); allow a little nesting, no more.
        for _ in 0..4 {
            if !msg.is_compressed() {
                break;
            }
            msg = msg.decompress().map_err(|e| fail(&e))?;
        }
        if msg.is_compressed() || msg.is_encrypted() {
            return Err(fail(&"unexpected nesting in the OpenPGP message"));
        }
        let data = read_capped(&mut msg).map_err(|e| fail(&e))?;
        if data.is_empty() {
            return Err(fail(&"zero bytes returned"));
        }
        Ok(data)
    }
}

/// Reads a decrypted key, refusing anything larger than a key could be.
fn read_capped(reader: impl Read) -> std::io::Result<Zeroizing<Vec<u8>>> {
    let mut out = Zeroizing::new(Vec::new());
    reader.take(MAX_UNWRAPPED + 1).read_to_end(&mut out)?;
    if out.len() as u64 > MAX_UNWRAPPED {
        return Err(std::io::Error::other("the unwrapped data key is too large"));
    }
    Ok(out)
}

fn unsupported(kind: KeyKind) -> String {
    format!(
        "the {} key source is not supported by rflux (only age and pgp keys can decrypt)",
        kind.provider()
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn age_identity_lines() {
        let mut keys = Keys::default();
        assert!(keys.is_empty());
        let err = keys.add_age_identities("# c\n\nnot-a-key\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "failed to parse and add to age identities: unknown identity type"
        );
        // A line with trailing blanks is not trimmed (sops refuses it as malformed).
        let err = keys
            .add_age_identities("AGE-SECRET-KEY-1QQQQ  \n")
            .unwrap_err();
        assert!(err.to_string().contains("malformed secret key"), "{err}");
        keys.add_age_identities("AGE-SECRET-KEY-PQ-1ABC\r\n")
            .unwrap();
        assert!(keys.is_empty());
        assert!(format!("{keys:?}").contains("post-quantum"));
    }

    #[test]
    fn public_key_blocks_are_ignored() {
        let mut keys = Keys::default();
        keys.add_pgp_armored(
            "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nxx\n-----END PGP PUBLIC KEY BLOCK-----\n",
        )
        .unwrap();
        assert!(keys.is_empty());
        assert!(keys.add_pgp_armored("garbage").is_err());
    }
}
