//! Git signature verification for `spec.verify`, the `SourceVerified` condition's source.
//!
//! Pure: the caller hands in the signed payloads (the raw commit without its `gpgsig` header,
//! the raw tag up to its signature block), the armored signatures and the trusted keys read
//! from the `verify.secretRef` Secret; the result is the verified key identity or a typed
//! error whose text follows Flux's messages.
//!
//! * OpenPGP: every Secret value whose key does not end in `.sshpub` is read as an armored key
//!   ring (`.asc` is the documented suffix; other keys are read as PGP for compatibility). The
//!   identity is the signer's primary key ID, 16 upper-case hex digits, as Flux reports it.
//!   Signatures by a subkey count when the subkey is bound to the primary key for signing.
//! * SSH: values under `*.sshpub` keys are `authorized_keys` text. The signature must be an
//!   SSHSIG in namespace `git`; the identity is the key's `SHA256:…` fingerprint.

use std::collections::BTreeMap;
use std::fmt;

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::packet::Signature as PgpSignature;
use pgp::types::{KeyDetails, Tag as PacketTag};
use rflux_common::api::gitrepository::GitVerificationMode;
use rflux_git::FetchedCommit;
use ssh_key::{HashAlg, PublicKey as SshPublicKey, SshSig};

use super::refs::RefSelector;

/// Secret data key suffix for armored OpenPGP public keys.
pub const PGP_KEY_SUFFIX: &str = ".asc";
/// Secret data key suffix for SSH public keys (`authorized_keys` format).
pub const SSH_KEY_SUFFIX: &str = ".sshpub";
/// The SSHSIG namespace Git signs with.
pub const SSH_NAMESPACE: &str = "git";

/// `SourceVerified=False` reasons.
pub const REASON_INVALID_VERIFICATION_MODE: &str = "InvalidVerificationMode";
pub const REASON_INVALID_GIT_OBJECT: &str = "InvalidGitObject";
pub const REASON_INVALID_TAG_SIGNATURE: &str = "InvalidTagSignature";
pub const REASON_INVALID_COMMIT_SIGNATURE: &str = "InvalidCommitSignature";

const PGP_SIGNATURE_PREFIX: &str = "-----BEGIN PGP SIGNATURE-----";
const SSH_SIGNATURE_PREFIX: &str = "-----BEGIN SSH SIGNATURE-----";
const X509_SIGNATURE_PREFIX: &str = "-----BEGIN SIGNED MESSAGE-----";

/// Trusted public keys from the verification Secret.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedKeys {
    /// Armored OpenPGP key rings, one per Secret value.
    pub pgp_keyrings: Vec<String>,
    /// `authorized_keys` texts, one per Secret value.
    pub ssh_authorized_keys: Vec<String>,
}

impl TrustedKeys {
    /// Sorts the Secret values by key suffix: `*.sshpub` are SSH keys, everything else
    /// (`*.asc` and, as Flux does for backward compatibility, any other key) PGP key rings.
    pub fn from_secret_data(data: &BTreeMap<String, Vec<u8>>) -> Self {
        let mut keys = TrustedKeys::default();
        for (k, v) in data {
            let text = String::from_utf8_lossy(v).into_owned();
            if k.ends_with(SSH_KEY_SUFFIX) {
                keys.ssh_authorized_keys.push(text);
            } else {
                keys.pgp_keyrings.push(text);
            }
        }
        keys
    }
}

/// The kind of an armored signature, as Flux names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureType {
    OpenPgp,
    Ssh,
    X509,
    Empty,
    Unknown,
}

impl SignatureType {
    /// Detects the type from the armor header (surrounding whitespace ignored).
    pub fn detect(signature: &str) -> Self {
        let s = signature.trim();
        if s.starts_with(PGP_SIGNATURE_PREFIX) {
            SignatureType::OpenPgp
        } else if s.starts_with(SSH_SIGNATURE_PREFIX) {
            SignatureType::Ssh
        } else if s.starts_with(X509_SIGNATURE_PREFIX) {
            SignatureType::X509
        } else if signature.is_empty() {
            SignatureType::Empty
        } else {
            SignatureType::Unknown
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SignatureType::OpenPgp => "openpgp",
            SignatureType::Ssh => "ssh",
            SignatureType::X509 => "x509",
            SignatureType::Empty => "empty",
            SignatureType::Unknown => "unknown",
        }
    }
}

impl fmt::Display for SignatureType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a signature did not verify against a payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("unable to verify payload: signature is empty")]
    EmptySignature,
    #[error("unable to verify payload: payload is empty")]
    EmptyPayload,
    #[error(
        "unable to verify openPGP signature, detected signature format: {0}: signature format mismatch"
    )]
    NotPgp(SignatureType),
    #[error(
        "unable to verify SSH signature, detected signature format: {0}: signature format mismatch"
    )]
    NotSsh(SignatureType),
    /// No key ring could be read at all (the first read error).
    #[error("unable to read armored key ring: {0}")]
    KeyRing(String),
    #[error("unable to verify payload with any of the given key rings: no matching key")]
    NoMatchingPgpKey,
    #[error("unable to unarmor SSH signature: {0}")]
    SshArmor(String),
    /// No authorized_keys text could be parsed at all (the first parse error).
    #[error("unable to parse authorized keys: unable to parse authorized key: {0}")]
    AuthorizedKeys(String),
    /// Tried every key; the distinct per-key failures follow, one per line.
    #[error(
        "unable to verify payload with any of the given authorized keys: no matching key{}",
        lines(.0)
    )]
    NoMatchingSshKey(Vec<String>),
}

fn lines(v: &[String]) -> String {
    v.iter().map(|l| format!("\n{l}")).collect()
}

/// Which Git object is verified (for messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitObject {
    Commit,
    Tag,
}

impl fmt::Display for GitObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GitObject::Commit => "commit",
            GitObject::Tag => "tag",
        })
    }
}

/// Why a commit or tag signature did not verify (dispatch on the signature type).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    #[error(
        "PGP signature detected but no PGP public keys found in secret (keys with .asc suffix)"
    )]
    NoPgpKeys,
    #[error(
        "SSH signature detected but no SSH public keys found in secret (keys with .sshpub suffix)"
    )]
    NoSshKeys,
    #[error("unsupported signature type: {0}")]
    Unsupported(SignatureType),
    #[error("unable to verify Git {object}: {source}")]
    Pgp {
        object: GitObject,
        source: SignatureError,
    },
    #[error("unable to verify Git {object} SSH signature: {source}")]
    Ssh {
        object: GitObject,
        source: SignatureError,
    },
}

/// Why `spec.verify` failed; [`VerificationError::reason`] is the SourceVerified reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerificationError {
    /// Tag verification was asked for, but the checkout is not a tag.
    #[error("cannot verify tag object's signature if a tag reference is not specified")]
    NoTagReference,
    #[error("cannot verify signature of tag '{0}' since it is not signed")]
    TagNotSigned(String),
    #[error("signature verification of tag '{tag}' failed: {source}")]
    Tag { tag: String, source: ObjectError },
    #[error("signature verification of commit '{commit}' failed: {source}")]
    Commit { commit: String, source: ObjectError },
}

impl VerificationError {
    /// The `SourceVerified=False` reason.
    pub fn reason(&self) -> &'static str {
        match self {
            VerificationError::NoTagReference => REASON_INVALID_VERIFICATION_MODE,
            VerificationError::TagNotSigned(_) => REASON_INVALID_GIT_OBJECT,
            VerificationError::Tag { .. } => REASON_INVALID_TAG_SIGNATURE,
            VerificationError::Commit { .. } => REASON_INVALID_COMMIT_SIGNATURE,
        }
    }

    /// A spec change is needed (Flux stalls on an invalid verification mode).
    pub fn is_stalling(&self) -> bool {
        matches!(self, VerificationError::NoTagReference)
    }
}

/// The tag the checkout went through (Flux's `Commit.ReferencingTag`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferencingTag {
    /// The tag name (from the tag object, or the ref for a lightweight tag).
    pub name: String,
    /// The tag object id (hex); `None` for a lightweight tag.
    pub hash: Option<String>,
    /// The signature block, if the tag is signed.
    pub signature: Option<String>,
    /// The signed bytes: the raw tag up to its signature block.
    pub payload: Vec<u8>,
}

impl fmt::Display for ReferencingTag {
    /// `<name>@<hex>` for an annotated tag, `<name>` for a lightweight one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.hash {
            Some(h) => write!(f, "{}@{h}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// The commit to verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitToVerify {
    /// Commit id (hex).
    pub hash: String,
    /// The `gpgsig` header, if any.
    pub signature: Option<String>,
    /// The raw commit without its `gpgsig` header.
    pub payload: Vec<u8>,
}

/// The tag name when the checkout goes through a tag: `ref.tag`, the tag `ref.semver`
/// selected, or a `ref.name` under `refs/tags/`. `resolved_name` is the revision prefix the
/// selector resolved to.
pub fn tag_reference(selector: &RefSelector, resolved_name: &str) -> Option<String> {
    match selector {
        RefSelector::Tag(_) | RefSelector::Semver(_) => Some(resolved_name.to_string()),
        RefSelector::Name(n) => n
            .strip_prefix("refs/tags/")
            .map(|t| t.strip_suffix("^{}").unwrap_or(t).to_string()),
        RefSelector::Commit { .. } | RefSelector::Branch(_) => None,
    }
}

/// The commit and (when `tag_name` is set) its referencing tag out of a fetch.
pub fn objects_of(
    fetched: &FetchedCommit,
    tag_name: Option<&str>,
) -> (CommitToVerify, Option<ReferencingTag>) {
    let commit = CommitToVerify {
        hash: fetched.id.to_hex(),
        signature: fetched.commit.gpgsig.clone(),
        payload: fetched.commit.signed_payload(),
    };
    let tag = tag_name.map(|name| match fetched.tags.first() {
        Some((oid, t)) => ReferencingTag {
            name: t.name.clone(),
            hash: Some(oid.to_hex()),
            signature: t.signature.clone(),
            payload: t.signed_payload().to_vec(),
        },
        None => ReferencingTag {
            name: name.to_string(),
            hash: None,
            signature: None,
            payload: Vec::new(),
        },
    });
    (commit, tag)
}

/// Verifies what `mode` asks for and returns the SourceVerified=True message, e.g.
/// `verified signature of\n\t- tag 'v1@<hex>' with key '<id>'\n\t- commit '<hex>' with key '<id>'`.
pub fn verify_source(
    mode: GitVerificationMode,
    commit: &CommitToVerify,
    tag: Option<&ReferencingTag>,
    keys: &TrustedKeys,
) -> Result<String, VerificationError> {
    let mode = mode.normalized();
    let verify_tag = matches!(
        mode,
        GitVerificationMode::Tag | GitVerificationMode::TagAndHead
    );
    let verify_head = !matches!(mode, GitVerificationMode::Tag);
    let mut message = String::new();
    if verify_tag {
        let tag = tag.ok_or(VerificationError::NoTagReference)?;
        let Some(sig) = tag.signature.as_deref().filter(|s| !s.is_empty()) else {
            return Err(VerificationError::TagNotSigned(tag.to_string()));
        };
        let id =
            verify_git_object(GitObject::Tag, Some(sig), &tag.payload, keys).map_err(|source| {
                VerificationError::Tag {
                    tag: tag.to_string(),
                    source,
                }
            })?;
        message.push_str(&format!(
            "verified signature of\n\t- tag '{tag}' with key '{id}'"
        ));
    }
    if verify_head {
        let id = verify_git_object(
            GitObject::Commit,
            commit.signature.as_deref(),
            &commit.payload,
            keys,
        )
        .map_err(|source| VerificationError::Commit {
            commit: commit.hash.clone(),
            source,
        })?;
        if message.is_empty() {
            message.push_str("verified signature of");
        }
        message.push_str(&format!("\n\t- commit '{}' with key '{id}'", commit.hash));
    }
    Ok(message)
}

/// Verifies one object's signature with the keys of its type; returns the key identity.
pub fn verify_git_object(
    object: GitObject,
    signature: Option<&str>,
    payload: &[u8],
    keys: &TrustedKeys,
) -> Result<String, ObjectError> {
    let signature = signature.unwrap_or("");
    match SignatureType::detect(signature) {
        SignatureType::OpenPgp => {
            if keys.pgp_keyrings.is_empty() {
                return Err(ObjectError::NoPgpKeys);
            }
            verify_pgp(signature, payload, &keys.pgp_keyrings)
                .map_err(|source| ObjectError::Pgp { object, source })
        }
        SignatureType::Ssh => {
            if keys.ssh_authorized_keys.is_empty() {
                return Err(ObjectError::NoSshKeys);
            }
            verify_ssh(signature, payload, &keys.ssh_authorized_keys)
                .map_err(|source| ObjectError::Ssh { object, source })
        }
        other => Err(ObjectError::Unsupported(other)),
    }
}

/// Verifies an armored detached OpenPGP signature over `payload` with any key of any key
/// ring; returns the signer's primary key ID (16 upper-case hex digits).
pub fn verify_pgp(
    signature: &str,
    payload: &[u8],
    keyrings: &[String],
) -> Result<String, SignatureError> {
    let signature = signature.trim();
    if signature.is_empty() {
        return Err(SignatureError::EmptySignature);
    }
    if payload.is_empty() {
        return Err(SignatureError::EmptyPayload);
    }
    let kind = SignatureType::detect(signature);
    if kind != SignatureType::OpenPgp {
        return Err(SignatureError::NotPgp(kind));
    }
    // A signature that does not parse cannot match any key (as with a wrong key).
    let sig = DetachedSignature::from_armor_single(signature.as_bytes())
        .ok()
        .map(|(s, _)| s.signature);
    let mut read_error: Option<String> = None;
    let mut attempted = false;
    for ring in keyrings {
        let keys = match read_keyring(ring) {
            Ok(k) => k,
            Err(e) => {
                read_error.get_or_insert(e);
                continue;
            }
        };
        attempted = true;
        let Some(sig) = &sig else { continue };
        for key in &keys {
            if signed_by(sig, key, payload) {
                return Ok(hex::encode_upper(key.primary_key.legacy_key_id()));
            }
        }
    }
    match read_error {
        Some(e) if !attempted => Err(SignatureError::KeyRing(e)),
        _ => Err(SignatureError::NoMatchingPgpKey),
    }
}

/// The public keys of an armored key ring (one or more armored blocks).
fn read_keyring(text: &str) -> Result<Vec<SignedPublicKey>, String> {
    let mut keys = Vec::new();
    let mut first_error = None;
    let (iter, _) = SignedPublicKey::from_armor_many(text.as_bytes()).map_err(|e| e.to_string())?;
    for k in iter {
        match k {
            Ok(k) => keys.push(k),
            Err(e) => {
                first_error.get_or_insert(e.to_string());
            }
        }
    }
    if keys.is_empty() {
        return Err(first_error.unwrap_or_else(|| "no keys found".to_string()));
    }
    Ok(keys)
}

/// Whether `sig` over `payload` was made by `key`'s primary key or one of its signing subkeys,
/// and the key is usable now: at least one self-certification (or direct-key signature)
/// verifies, no verifying revocation, neither the key nor the signature has expired (key
/// lifetime from the newest valid self-signature or subkey binding), and a subkey carries a
/// valid signing binding.
fn signed_by(sig: &PgpSignature, key: &SignedPublicKey, payload: &[u8]) -> bool {
    let now = u64::from(pgp::types::Timestamp::now().as_secs());
    if expired(sig.created(), sig.signature_expiration_time(), now) {
        return false;
    }
    let primary = &key.primary_key;
    let revoked = key
        .details
        .revocation_signatures
        .iter()
        .any(|r| r.verify_key(primary).is_ok());
    if revoked {
        return false;
    }
    let self_sigs: Vec<&PgpSignature> = key
        .details
        .users
        .iter()
        .flat_map(|u| {
            u.signatures.iter().filter(|s| {
                s.verify_certification(primary, PacketTag::UserId, &u.id)
                    .is_ok()
            })
        })
        .chain(
            key.details
                .direct_signatures
                .iter()
                .filter(|s| s.verify_key(primary).is_ok()),
        )
        .collect();
    let Some(latest) = newest(&self_sigs) else {
        return false;
    };
    if expired(
        Some(primary.created_at()),
        latest.key_expiration_time(),
        now,
    ) {
        return false;
    }
    if sig.verify(primary, payload).is_ok() {
        return true;
    }
    key.public_subkeys.iter().any(|sub| {
        let bindings: Vec<&PgpSignature> = sub.signatures.iter().collect();
        let usable = newest(&bindings).is_some_and(|b| {
            b.key_flags().sign()
                && !expired(Some(sub.key.created_at()), b.key_expiration_time(), now)
        });
        usable && sub.verify_bindings(primary).is_ok() && sig.verify(&sub.key, payload).is_ok()
    })
}

/// The most recently created signature.
fn newest<'a>(sigs: &[&'a PgpSignature]) -> Option<&'a PgpSignature> {
    sigs.iter()
        .copied()
        .max_by_key(|s| s.created().map_or(0, |t| t.as_secs()))
}

/// `start + lifetime <= now` (a zero or absent lifetime never expires).
fn expired(
    start: Option<pgp::types::Timestamp>,
    lifetime: Option<pgp::types::Duration>,
    now: u64,
) -> bool {
    match (start, lifetime) {
        (Some(t), Some(d)) if d.as_secs() > 0 => {
            u64::from(t.as_secs()) + u64::from(d.as_secs()) <= now
        }
        _ => false,
    }
}

/// Verifies an armored SSHSIG (namespace `git`) over `payload` with any authorized key;
/// returns the key's `SHA256:…` fingerprint.
pub fn verify_ssh(
    signature: &str,
    payload: &[u8],
    authorized_keys: &[String],
) -> Result<String, SignatureError> {
    let signature = signature.trim();
    if signature.is_empty() {
        return Err(SignatureError::EmptySignature);
    }
    if payload.is_empty() {
        return Err(SignatureError::EmptyPayload);
    }
    let kind = SignatureType::detect(signature);
    if kind != SignatureType::Ssh {
        return Err(SignatureError::NotSsh(kind));
    }
    let sig = SshSig::from_pem(signature).map_err(|e| SignatureError::SshArmor(e.to_string()))?;
    let mut parse_error: Option<String> = None;
    let mut attempted = false;
    let mut failures: Vec<String> = Vec::new();
    for text in authorized_keys {
        let keys = match parse_authorized_keys(text) {
            Ok(k) => k,
            Err(e) => {
                parse_error.get_or_insert(e);
                continue;
            }
        };
        attempted = true;
        for key in keys {
            match ssh_verify_one(&key, &sig, payload) {
                Ok(()) => return Ok(key.fingerprint(HashAlg::Sha256).to_string()),
                Err(e) => {
                    if !failures.contains(&e) {
                        failures.push(e);
                    }
                }
            }
        }
    }
    match parse_error {
        Some(e) if !attempted => Err(SignatureError::AuthorizedKeys(e)),
        _ => Err(SignatureError::NoMatchingSshKey(failures)),
    }
}

fn ssh_verify_one(key: &SshPublicKey, sig: &SshSig, payload: &[u8]) -> Result<(), String> {
    if key.key_data() != sig.public_key() {
        return Err("public key does not match".to_string());
    }
    if sig.namespace() != SSH_NAMESPACE {
        return Err("namespace does not match".to_string());
    }
    key.verify(SSH_NAMESPACE, payload, sig)
        .map_err(|e| match e {
            ssh_key::Error::Crypto => "ssh: signature did not verify".to_string(),
            other => other.to_string(),
        })
}

/// Parses `authorized_keys` text: blank lines and `#` comments are skipped; any other line
/// that is not a public key (options allowed) fails the whole text.
pub fn parse_authorized_keys(text: &str) -> Result<Vec<SshPublicKey>, String> {
    let mut keys = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let entry: ssh_key::authorized_keys::Entry = line.parse().map_err(|e| format!("{e}"))?;
        keys.push(entry.public_key().clone());
    }
    Ok(keys)
}

/// Everything the reconciler needs in one call: the trusted keys from the Secret data, the
/// commit (and referencing tag, for tag checkouts) of the fetch, verified as `mode` asks.
/// Returns the SourceVerified=True message.
pub fn verify_fetched(
    mode: GitVerificationMode,
    selector: &RefSelector,
    resolved_name: &str,
    fetched: &FetchedCommit,
    secret_data: &BTreeMap<String, Vec<u8>>,
) -> Result<String, VerificationError> {
    let tag_name = tag_reference(selector, resolved_name);
    let (commit, tag) = objects_of(fetched, tag_name.as_deref());
    verify_source(
        mode,
        &commit,
        tag.as_ref(),
        &TrustedKeys::from_secret_data(secret_data),
    )
}

#[cfg(test)]
mod tests;
