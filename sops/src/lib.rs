//! SOPS decryption, as Flux's kustomize-controller runs it (`../shared/reference/sops.md`).
//!
//! Pipeline: a store parses the document into a [`tree`] → the `sops` block becomes
//! [`metadata::Metadata`] → [`keys::Keys`] recover the 32-byte data key from an age or OpenPGP
//! master key (Shamir over key groups) → [`walk`] decrypts every value the encryption rules
//! select (AES-256-GCM, [`cipher`]) and, when asked, checks the MAC → the store emits the
//! plaintext tree in the output format.
//!
//! Everything here is pure (no file or network I/O) and bounded by its input. Plaintext leaves
//! only as [`Zeroizing`] bytes or as the caller's own JSON object.

pub mod cipher;
pub mod error;
pub mod keys;
pub mod metadata;
pub mod stores;
pub mod tree;
pub mod walk;

pub use error::SopsError;
pub use keys::Keys;
pub use stores::Format;
pub use walk::MacCheck;
pub use zeroize::Zeroizing;

/// Decrypts a whole SOPS document read as `input` and emits the plaintext as `output`
/// (Flux's `sops decrypt --input-type … --output-type …` with default store settings).
pub fn decrypt(
    bytes: &[u8],
    input: Format,
    output: Format,
    keys: &Keys,
    mac: MacCheck,
) -> Result<Zeroizing<Vec<u8>>, SopsError> {
    let (mut branches, block) = stores::load(input, bytes)?;
    let meta = metadata::Metadata::from_tree(&block)?;
    let data_key = keys.data_key(&meta)?;
    walk::decrypt_branches(&mut branches, &meta, &data_key, mac)?;
    let out = stores::emit(output, &branches);
    walk::wipe(&mut branches);
    out
}

/// Decrypts a Kubernetes object that carries a top-level `sops` block (Flux's step 1 of
/// `DecryptResource`): read through the JSON store with its keys sorted, as Flux's kyaml
/// marshalling hands it over, and returned without the `sops` field. The MAC is not checked
/// (the build changed the object).
pub fn decrypt_object(
    obj: &serde_json::Value,
    keys: &Keys,
) -> Result<serde_json::Value, SopsError> {
    let sorted = stores::json::sorted(obj);
    let text = Zeroizing::new(
        serde_json::to_vec(&sorted)
            .map_err(|e| SopsError::Load(format!("failed to load encrypted JSON data: {e}")))?,
    );
    let plain = decrypt(&text, Format::Json, Format::Json, keys, MacCheck::Skip)?;
    serde_json::from_slice(&plain)
        .map_err(|e| SopsError::Emit(format!("failed to read the decrypted JSON: {e}")))
}
