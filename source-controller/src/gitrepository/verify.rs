//! Git signature verification for `spec.verify` (flux-spec §1.2, §1.6 SourceVerified).
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
#[allow(clippy::unwrap_used)]
mod tests {
    //! Keys and signatures are made at test time with `gpg`, `ssh-keygen` and `git` (temp
    //! GNUPGHOME, no passphrases). Without those tools the tests print why and pass.

    use super::*;
    use rflux_git::{Commit, Tag};
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::OnceLock;

    /// Keys and raw Git objects signed with them.
    struct Fixture {
        _dir: tempfile::TempDir,
        /// Alice: primary key (sign) plus a signing subkey.
        alice_pub: String,
        alice_id: String,
        /// Bob: an unrelated PGP key.
        bob_pub: String,
        ssh_pub: String,
        ssh_fingerprint: String,
        other_ssh_pub: String,
        commit_pgp_primary: (String, Vec<u8>),
        commit_pgp_subkey: (String, Vec<u8>),
        commit_ssh: (String, Vec<u8>),
        commit_unsigned: (String, Vec<u8>),
        tag_pgp: (String, Vec<u8>),
        tag_ssh: (String, Vec<u8>),
        tag_unsigned: (String, Vec<u8>),
        /// Keys made in 2020 (one expiring after a day) and their signatures of `dated_payload`,
        /// made in 2020 too.
        expired_pub: String,
        expired_sig: String,
        forever_pub: String,
        forever_sig: String,
        dated_payload: Vec<u8>,
    }

    fn have(tool: &str) -> bool {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
            || Command::new(tool)
                .arg("-?")
                .output()
                .is_ok_and(|o| !o.stderr.is_empty())
    }

    fn run(cmd: &mut Command) -> Vec<u8> {
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    fn gpg(home: &Path) -> Command {
        let mut c = Command::new("gpg");
        c.env("GNUPGHOME", home).args([
            "--batch",
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "",
        ]);
        c
    }

    fn fingerprint(home: &Path, uid: &str) -> String {
        let out = run(gpg(home).args(["--with-colons", "--list-keys", uid]));
        let text = String::from_utf8(out).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("fpr:"))
            .map(|l| l.trim_matches(':').to_string())
            .unwrap()
    }

    fn new_pgp_key(home: &Path, uid: &str) -> String {
        run(gpg(home).args(["--quick-gen-key", uid, "ed25519", "sign", "never"]));
        fingerprint(home, uid)
    }

    fn git(repo: &Path, gnupghome: &Path) -> Command {
        let mut c = Command::new("git");
        c.arg("-C")
            .arg(repo)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GNUPGHOME", gnupghome)
            .args([
                "-c",
                "user.name=Tester",
                "-c",
                "user.email=tester@example.com",
            ]);
        c
    }

    fn text(v: Vec<u8>) -> String {
        String::from_utf8(v).unwrap().trim().to_string()
    }

    fn fixture() -> Option<&'static Fixture> {
        static F: OnceLock<Option<Fixture>> = OnceLock::new();
        F.get_or_init(|| {
            for tool in ["gpg", "gpgconf", "ssh-keygen", "git"] {
                if !have(tool) {
                    eprintln!("skipping: `{tool}` is not available to make signed test objects");
                    return None;
                }
            }
            Some(make_fixture())
        })
        .as_ref()
    }

    fn make_fixture() -> Fixture {
        let dir = tempfile::Builder::new().prefix("rfv").tempdir().unwrap();
        let home: PathBuf = dir.path().join("g");
        std::fs::create_dir(&home).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let alice = new_pgp_key(&home, "Alice <alice@example.com>");
        run(gpg(&home).args(["--quick-add-key", &alice, "ed25519", "sign", "never"]));
        let bob = new_pgp_key(&home, "Bob <bob@example.com>");
        let alice_pub = text(run(gpg(&home).args(["--armor", "--export", &alice])));
        let bob_pub = text(run(gpg(&home).args(["--armor", "--export", &bob])));

        let key = dir.path().join("id_ed25519");
        let other = dir.path().join("other_ed25519");
        for k in [&key, &other] {
            run(Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", "tester", "-f"])
                .arg(k));
        }
        let ssh_pub = text(std::fs::read(key.with_extension("pub")).unwrap());
        let other_ssh_pub = text(std::fs::read(other.with_extension("pub")).unwrap());
        let fp_line = text(run(Command::new("ssh-keygen")
            .args(["-l", "-E", "sha256", "-f"])
            .arg(key.with_extension("pub"))));
        let ssh_fingerprint = fp_line.split_whitespace().nth(1).unwrap().to_string();

        let repo = dir.path().join("repo");
        run(Command::new("git").args(["init", "-q"]).arg(&repo));
        let key_s = key.to_str().unwrap();
        let pgp_primary = format!("user.signingkey={alice}!");
        let pgp_default = format!("user.signingkey={alice}");
        let ssh_key = format!("user.signingkey={key_s}");
        let commit = |cfg: &[&str], msg: &str| -> (String, Vec<u8>) {
            let mut c = git(&repo, &home);
            c.args(cfg)
                .args(["commit", "-q", "--allow-empty", "-m", msg]);
            run(&mut c);
            let id = text(run(git(&repo, &home).args(["rev-parse", "HEAD"])));
            (
                id,
                run(git(&repo, &home).args(["cat-file", "commit", "HEAD"])),
            )
        };
        let commit_pgp_primary = commit(&["-c", &pgp_primary, "-c", "commit.gpgsign=true"], "pgp");
        let commit_pgp_subkey = commit(&["-c", &pgp_default, "-c", "commit.gpgsign=true"], "sub");
        let commit_ssh = commit(
            &[
                "-c",
                "gpg.format=ssh",
                "-c",
                &ssh_key,
                "-c",
                "commit.gpgsign=true",
            ],
            "ssh",
        );
        let commit_unsigned = commit(&[], "plain");
        let tag = |cfg: &[&str], name: &str, sign: bool| -> (String, Vec<u8>) {
            let mut c = git(&repo, &home);
            c.args(cfg)
                .args(["tag", if sign { "-s" } else { "-a" }, "-m", name, name]);
            run(&mut c);
            let id = text(run(git(&repo, &home).args(["rev-parse", name])));
            (id, run(git(&repo, &home).args(["cat-file", "tag", name])))
        };
        let tag_pgp = tag(&["-c", &pgp_primary], "v1.0.0", true);
        let tag_ssh = tag(&["-c", "gpg.format=ssh", "-c", &ssh_key], "v2.0.0", true);
        let tag_unsigned = tag(&[], "v3.0.0", false);
        // Keys and signatures dated 2020-01-01; one key expires a day later.
        let dated_payload = b"tree 0000\n\ndated\n".to_vec();
        let payload_file = dir.path().join("payload");
        std::fs::write(&payload_file, &dated_payload).unwrap();
        let dated = |uid: &str, expire: &str| -> (String, String) {
            run(gpg(&home).args([
                "--faked-system-time",
                "20200101T000000",
                "--quick-gen-key",
                uid,
                "ed25519",
                "sign",
                expire,
            ]));
            let fpr = fingerprint(&home, uid);
            let public = text(run(gpg(&home).args(["--armor", "--export", &fpr])));
            let sig = text(run(gpg(&home)
                .args(["--faked-system-time", "20200101T010000", "--local-user"])
                .arg(&fpr)
                .args(["--armor", "--detach-sign", "--output", "-"])
                .arg(&payload_file)));
            (public, sig)
        };
        let (expired_pub, expired_sig) = dated("Old <old@example.com>", "1d");
        let (forever_pub, forever_sig) = dated("Forever <forever@example.com>", "never");
        // The agent is no longer needed: stop it now (it would outlive the test process).
        let _ = Command::new("gpgconf")
            .env("GNUPGHOME", &home)
            .args(["--kill", "gpg-agent"])
            .status();
        Fixture {
            _dir: dir,
            alice_id: alice[alice.len() - 16..].to_string(),
            alice_pub,
            bob_pub,
            ssh_pub,
            ssh_fingerprint,
            other_ssh_pub,
            commit_pgp_primary,
            commit_pgp_subkey,
            commit_ssh,
            commit_unsigned,
            tag_pgp,
            tag_ssh,
            tag_unsigned,
            expired_pub,
            expired_sig,
            forever_pub,
            forever_sig,
            dated_payload,
        }
    }

    fn commit_of((id, raw): &(String, Vec<u8>)) -> CommitToVerify {
        let c = Commit::parse(raw).unwrap();
        CommitToVerify {
            hash: id.clone(),
            signature: c.gpgsig.clone(),
            payload: c.signed_payload(),
        }
    }

    fn tag_of((id, raw): &(String, Vec<u8>)) -> ReferencingTag {
        let t = Tag::parse(raw).unwrap();
        ReferencingTag {
            name: t.name.clone(),
            hash: Some(id.clone()),
            signature: t.signature.clone(),
            payload: t.signed_payload().to_vec(),
        }
    }

    fn keys(pgp: &[&str], ssh: &[&str]) -> TrustedKeys {
        TrustedKeys {
            pgp_keyrings: pgp.iter().map(|s| s.to_string()).collect(),
            ssh_authorized_keys: ssh.iter().map(|s| s.to_string()).collect(),
        }
    }

    const HEAD: GitVerificationMode = GitVerificationMode::Head;

    #[test]
    fn secret_keys_are_sorted_by_suffix() {
        let mut data = BTreeMap::new();
        data.insert("alice.asc".to_string(), b"A".to_vec());
        data.insert("legacy".to_string(), b"L".to_vec());
        data.insert("me.sshpub".to_string(), b"S".to_vec());
        let k = TrustedKeys::from_secret_data(&data);
        assert_eq!(k.pgp_keyrings, vec!["A".to_string(), "L".to_string()]);
        assert_eq!(k.ssh_authorized_keys, vec!["S".to_string()]);
    }

    #[test]
    fn signature_types() {
        assert_eq!(
            SignatureType::detect("\n-----BEGIN PGP SIGNATURE-----\nx"),
            SignatureType::OpenPgp
        );
        assert_eq!(
            SignatureType::detect("-----BEGIN SSH SIGNATURE-----"),
            SignatureType::Ssh
        );
        assert_eq!(
            SignatureType::detect("-----BEGIN SIGNED MESSAGE-----"),
            SignatureType::X509
        );
        assert_eq!(SignatureType::detect(""), SignatureType::Empty);
        assert_eq!(SignatureType::detect("garbage"), SignatureType::Unknown);
    }

    #[test]
    fn tag_reference_only_for_tag_checkouts() {
        assert_eq!(
            tag_reference(&RefSelector::Tag("v1".into()), "v1").as_deref(),
            Some("v1")
        );
        assert_eq!(
            tag_reference(&RefSelector::Semver(">=1".into()), "v1.2.0").as_deref(),
            Some("v1.2.0")
        );
        assert_eq!(
            tag_reference(
                &RefSelector::Name("refs/tags/v1^{}".into()),
                "refs/tags/v1^{}"
            )
            .as_deref(),
            Some("v1")
        );
        assert_eq!(
            tag_reference(&RefSelector::Name("refs/heads/main".into()), "x"),
            None
        );
        assert_eq!(
            tag_reference(&RefSelector::Branch("main".into()), "main"),
            None
        );
        let commit = RefSelector::Commit {
            sha: "a".repeat(40),
            branch: None,
        };
        assert_eq!(tag_reference(&commit, ""), None);
    }

    #[test]
    fn head_pgp_signed_by_primary_and_by_subkey() {
        let Some(f) = fixture() else { return };
        let k = keys(&[&f.alice_pub], &[]);
        for raw in [&f.commit_pgp_primary, &f.commit_pgp_subkey] {
            let c = commit_of(raw);
            let msg = verify_source(HEAD, &c, None, &k).unwrap();
            assert_eq!(
                msg,
                format!(
                    "verified signature of\n\t- commit '{}' with key '{}'",
                    c.hash, f.alice_id
                )
            );
        }
        // The second commit really is signed by the subkey (issuer differs from the primary).
        let sub = commit_of(&f.commit_pgp_subkey);
        let (sig, _) =
            DetachedSignature::from_armor_single(sub.signature.as_deref().unwrap().as_bytes())
                .unwrap();
        let issuers: Vec<String> = sig
            .signature
            .issuer_key_id()
            .iter()
            .map(hex::encode_upper)
            .collect();
        assert!(
            !issuers.is_empty() && !issuers.contains(&f.alice_id),
            "{issuers:?}"
        );
        // `head` is an alias of HEAD; a bad keyring next to the good one does not matter.
        let k = keys(&["not a key ring", &f.bob_pub, &f.alice_pub], &[]);
        let c = commit_of(&f.commit_pgp_subkey);
        assert!(verify_source(GitVerificationMode::LowercaseHead, &c, None, &k).is_ok());
    }

    #[test]
    fn head_pgp_wrong_key_tampered_and_unreadable() {
        let Some(f) = fixture() else { return };
        let c = commit_of(&f.commit_pgp_primary);
        let err = verify_source(HEAD, &c, None, &keys(&[&f.bob_pub], &[])).unwrap_err();
        assert_eq!(err.reason(), "InvalidCommitSignature");
        assert!(!err.is_stalling());
        assert_eq!(
            err.to_string(),
            format!(
                "signature verification of commit '{}' failed: unable to verify Git commit: \
                 unable to verify payload with any of the given key rings: no matching key",
                c.hash
            )
        );
        let mut tampered = c.clone();
        tampered.payload.extend_from_slice(b"more\n");
        assert!(verify_source(HEAD, &tampered, None, &keys(&[&f.alice_pub], &[])).is_err());
        let err = verify_source(HEAD, &c, None, &keys(&["garbage"], &[])).unwrap_err();
        assert!(
            err.to_string()
                .contains("unable to verify Git commit: unable to read armored key ring: "),
            "{err}"
        );
    }

    #[test]
    fn head_unsigned_or_missing_key_type() {
        let Some(f) = fixture() else { return };
        let all = keys(&[&f.alice_pub], &[&f.ssh_pub]);
        let c = commit_of(&f.commit_unsigned);
        let err = verify_source(HEAD, &c, None, &all).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "signature verification of commit '{}' failed: unsupported signature type: empty",
                c.hash
            )
        );
        let ssh = commit_of(&f.commit_ssh);
        let err = verify_source(HEAD, &ssh, None, &keys(&[&f.alice_pub], &[])).unwrap_err();
        assert!(err.to_string().ends_with(
            "SSH signature detected but no SSH public keys found in secret (keys with .sshpub suffix)"
        ));
        let pgp = commit_of(&f.commit_pgp_primary);
        let err = verify_source(HEAD, &pgp, None, &keys(&[], &[&f.ssh_pub])).unwrap_err();
        assert!(err.to_string().ends_with(
            "PGP signature detected but no PGP public keys found in secret (keys with .asc suffix)"
        ));
    }

    #[test]
    fn head_ssh_signed() {
        let Some(f) = fixture() else { return };
        let c = commit_of(&f.commit_ssh);
        let authorized = format!("# team keys\n\n{}\n{}\n", f.other_ssh_pub, f.ssh_pub);
        let msg = verify_source(HEAD, &c, None, &keys(&[], &[&authorized])).unwrap();
        assert_eq!(
            msg,
            format!(
                "verified signature of\n\t- commit '{}' with key '{}'",
                c.hash, f.ssh_fingerprint
            )
        );
        assert!(f.ssh_fingerprint.starts_with("SHA256:"));
        let err = verify_source(HEAD, &c, None, &keys(&[], &[&f.other_ssh_pub])).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "signature verification of commit '{}' failed: unable to verify Git commit SSH \
                 signature: unable to verify payload with any of the given authorized keys: no \
                 matching key\npublic key does not match",
                c.hash
            )
        );
        let mut tampered = c.clone();
        tampered.payload.extend_from_slice(b"x");
        let err = verify_source(HEAD, &tampered, None, &keys(&[], &[&f.ssh_pub])).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("no matching key\nssh: signature did not verify")
        );
        let err = verify_source(HEAD, &c, None, &keys(&[], &["not-a-key"])).unwrap_err();
        assert!(
            err.to_string()
                .contains("unable to parse authorized keys: "),
            "{err}"
        );
    }

    #[test]
    fn tag_mode() {
        let Some(f) = fixture() else { return };
        let all = keys(&[&f.alice_pub], &[&f.ssh_pub]);
        // Unsigned HEAD does not matter in Tag mode.
        let c = commit_of(&f.commit_unsigned);
        let t = tag_of(&f.tag_pgp);
        let msg = verify_source(GitVerificationMode::Tag, &c, Some(&t), &all).unwrap();
        assert_eq!(
            msg,
            format!(
                "verified signature of\n\t- tag 'v1.0.0@{}' with key '{}'",
                f.tag_pgp.0, f.alice_id
            )
        );
        let t = tag_of(&f.tag_ssh);
        let msg = verify_source(GitVerificationMode::Tag, &c, Some(&t), &all).unwrap();
        assert!(
            msg.ends_with(&format!("with key '{}'", f.ssh_fingerprint)),
            "{msg}"
        );
        let err = verify_source(
            GitVerificationMode::Tag,
            &c,
            Some(&t),
            &keys(&[&f.alice_pub], &[&f.other_ssh_pub]),
        )
        .unwrap_err();
        assert_eq!(err.reason(), "InvalidTagSignature");
        assert!(err.to_string().starts_with(&format!(
            "signature verification of tag 'v2.0.0@{}' failed: unable to verify Git tag SSH signature: ",
            f.tag_ssh.0
        )));
        let t = tag_of(&f.tag_unsigned);
        let err = verify_source(GitVerificationMode::Tag, &c, Some(&t), &all).unwrap_err();
        assert_eq!(err.reason(), "InvalidGitObject");
        assert_eq!(
            err.to_string(),
            format!(
                "cannot verify signature of tag 'v3.0.0@{}' since it is not signed",
                f.tag_unsigned.0
            )
        );
        let lightweight = ReferencingTag {
            name: "v0".into(),
            hash: None,
            signature: None,
            payload: vec![],
        };
        let err =
            verify_source(GitVerificationMode::Tag, &c, Some(&lightweight), &all).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot verify signature of tag 'v0' since it is not signed"
        );
        let err = verify_source(GitVerificationMode::Tag, &c, None, &all).unwrap_err();
        assert_eq!(err.reason(), "InvalidVerificationMode");
        assert!(err.is_stalling());
        assert_eq!(
            err.to_string(),
            "cannot verify tag object's signature if a tag reference is not specified"
        );
    }

    #[test]
    fn tag_and_head_mode() {
        let Some(f) = fixture() else { return };
        let all = keys(&[&f.alice_pub], &[&f.ssh_pub]);
        let t = tag_of(&f.tag_pgp);
        let c = commit_of(&f.commit_ssh);
        let msg = verify_source(GitVerificationMode::TagAndHead, &c, Some(&t), &all).unwrap();
        assert_eq!(
            msg,
            format!(
                "verified signature of\n\t- tag 'v1.0.0@{}' with key '{}'\n\t- commit '{}' with key '{}'",
                f.tag_pgp.0, f.alice_id, c.hash, f.ssh_fingerprint
            )
        );
        // A good tag does not excuse an unsigned commit.
        let unsigned = commit_of(&f.commit_unsigned);
        let err =
            verify_source(GitVerificationMode::TagAndHead, &unsigned, Some(&t), &all).unwrap_err();
        assert_eq!(err.reason(), "InvalidCommitSignature");
        // Nor does a good commit excuse a tag signed with an unknown key.
        let err = verify_source(
            GitVerificationMode::TagAndHead,
            &c,
            Some(&t),
            &keys(&[&f.bob_pub], &[&f.ssh_pub]),
        )
        .unwrap_err();
        assert_eq!(err.reason(), "InvalidTagSignature");
        let err = verify_source(GitVerificationMode::TagAndHead, &c, None, &all).unwrap_err();
        assert_eq!(err.reason(), "InvalidVerificationMode");
    }

    #[test]
    fn expired_key_does_not_verify() {
        let Some(f) = fixture() else { return };
        // The signature made in 2020 by a key that never expires still verifies...
        let id = verify_pgp(
            &f.forever_sig,
            &f.dated_payload,
            std::slice::from_ref(&f.forever_pub),
        )
        .unwrap();
        assert_eq!(id.len(), 16);
        // ...one by a key that expired on 2020-01-02 does not.
        assert_eq!(
            verify_pgp(
                &f.expired_sig,
                &f.dated_payload,
                &[f.expired_pub.clone(), f.forever_pub.clone()]
            ),
            Err(SignatureError::NoMatchingPgpKey)
        );
    }

    #[test]
    fn payload_and_signature_edge_cases() {
        assert_eq!(
            verify_pgp("", b"x", &[]),
            Err(SignatureError::EmptySignature)
        );
        assert_eq!(
            verify_pgp("-----BEGIN PGP SIGNATURE-----", b"", &[]),
            Err(SignatureError::EmptyPayload)
        );
        assert_eq!(
            verify_ssh("-----BEGIN PGP SIGNATURE-----", b"x", &[]),
            Err(SignatureError::NotSsh(SignatureType::OpenPgp))
        );
        assert!(matches!(
            verify_ssh(
                "-----BEGIN SSH SIGNATURE-----\nnope\n-----END SSH SIGNATURE-----",
                b"x",
                &[]
            ),
            Err(SignatureError::SshArmor(_))
        ));
        // A corrupt PGP signature matches no key.
        let Some(f) = fixture() else { return };
        assert_eq!(
            verify_pgp(
                "-----BEGIN PGP SIGNATURE-----\n\nAAAA\n-----END PGP SIGNATURE-----",
                b"x",
                std::slice::from_ref(&f.alice_pub)
            ),
            Err(SignatureError::NoMatchingPgpKey)
        );
    }
}
