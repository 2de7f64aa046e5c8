//! Tests of signature verification. Keys and signatures are made at test time with `gpg`,
//! `ssh-keygen` and `git` (temp GNUPGHOME, no passphrases). Without those tools the tests print
//! why and pass.
#![allow(clippy::unwrap_used)]

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
    c.env("GNUPGHOME", home)
        .args(["--batch", "--pinentry-mode", "loopback", "--passphrase", ""]);
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
        DetachedSignature::from_armor_single(sub.signature.as_deref().unwrap().as_bytes()).unwrap();
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
    let err = verify_source(GitVerificationMode::Tag, &c, Some(&lightweight), &all).unwrap_err();
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
