//! Errors, worded as sops and Flux word them where users search for the text.

/// Why a document could not be decrypted. No variant carries plaintext.
#[derive(Debug, thiserror::Error)]
pub enum SopsError {
    /// The document could not be parsed in its format, or its shape is not a SOPS document.
    #[error("{0}")]
    Load(String),
    /// No `sops` metadata in the document.
    #[error("sops metadata not found")]
    NoMetadata,
    /// The `sops` block is malformed (a bad time, two encryption rules, no key, …).
    #[error("{0}")]
    Metadata(String),
    /// No master key could recover the data key. The text is sops' own: "Failed to get the
    /// data key required to decrypt the SOPS file.", a `Group N: FAILED` block per key group
    /// (each key's name and why it failed; an unsupported key source is named, e.g.
    /// `hc_vault`, `aws kms`), then the recovery trailer (which differs with Shamir).
    #[error("cannot get sops data key: {0}")]
    DataKey(String),
    /// A value could not be decrypted (tampered ciphertext, wrong key, not in `ENC[…]` form).
    /// The path names where; never the value.
    #[error("error decrypting sops tree: Error walking tree: Could not decrypt value: {0}")]
    Value(String),
    /// The stored MAC does not match the decrypted values.
    #[error("MAC mismatch. File has {stored}, computed {computed}")]
    MacMismatch { stored: String, computed: String },
    /// The plaintext tree cannot be written in the output format.
    #[error("{0}")]
    Emit(String),
    /// A key given to [`crate::Keys`] could not be read.
    #[error("{0}")]
    Key(String),
}
