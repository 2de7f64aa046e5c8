//! Refusals on documents made by the real `sops` and then damaged: wrong key, tampered
//! values, MAC problems, broken metadata, unsupported key sources. Where the `sops` CLI is
//! a fair referee, it must refuse too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod helpers;

use std::path::Path;

use rflux_sops::{Format, Keys, MacCheck, SopsError, decrypt};
use serde_json::{Value, json};

struct Fixture {
    tools: common::Tools,
    dir: tempfile::TempDir,
    key: common::AgeKey,
    /// The encrypted JSON document.
    enc: Value,
}

const PLAIN: &str = r#"{"user": "admin", "password": "hunter2-secret", "nested": {"token": "tok-secret"}, "note_unencrypted": "public"}"#;

fn fixture() -> Option<Fixture> {
    let tools = common::tools()?;
    let dir = tempfile::tempdir().unwrap();
    let key = tools.age_key(dir.path());
    helpers::write(dir.path(), "doc.json", PLAIN.as_bytes());
    let enc = tools.encrypt(dir.path(), "doc.json", &["--age", &key.recipient]);
    Some(Fixture {
        enc: helpers::json(&enc),
        tools,
        dir,
        key,
    })
}

impl Fixture {
    fn keys(&self) -> Keys {
        let mut keys = Keys::default();
        keys.add_age_identities(&self.key.identity).unwrap();
        keys
    }

    fn ours(&self, doc: &Value, mac: MacCheck) -> Result<String, SopsError> {
        let bytes = helpers::to_json_bytes(doc);
        decrypt(&bytes, Format::Json, Format::Json, &self.keys(), mac)
            .map(|p| String::from_utf8(p.to_vec()).unwrap())
    }

    /// `sops decrypt` of `doc` (written to a file): does the CLI accept it?
    fn sops_accepts(&self, doc: &Value, extra: &[&str]) -> bool {
        helpers::write(self.dir.path(), "edited.json", &helpers::to_json_bytes(doc));
        self.tools
            .decrypt(self.dir.path(), "edited.json", &self.key.identity, extra)
            .is_ok()
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Changes one base64 character in the middle of `ENC[…,data:<b64>,…]`.
fn tamper(value: &str) -> String {
    let start = value.find("data:").unwrap() + 5;
    let end = value[start..].find(',').unwrap() + start;
    let mid = start + (end - start) / 2;
    let mut bytes = value.as_bytes().to_vec();
    bytes[mid] = if bytes[mid] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap()
}

fn assert_no_plaintext(err: &str) {
    for secret in ["hunter2", "tok-secret", "admin"] {
        assert!(!err.contains(secret), "plaintext in error: {err}");
    }
}

#[test]
fn untouched_document_decrypts() {
    let Some(f) = fixture() else { return };
    let out = f.ours(&f.enc, MacCheck::Verify).unwrap();
    assert_eq!(
        helpers::json(out.as_bytes()),
        helpers::json(PLAIN.as_bytes())
    );
}

#[test]
fn wrong_age_key() {
    let Some(f) = fixture() else { return };
    let other = f.tools.age_key(f.path());
    let mut keys = Keys::default();
    keys.add_age_identities(&other.identity).unwrap();
    let bytes = helpers::to_json_bytes(&f.enc);
    let err = decrypt(&bytes, Format::Json, Format::Json, &keys, MacCheck::Skip).unwrap_err();
    assert!(matches!(err, SopsError::DataKey(_)));
    let text = err.to_string();
    assert!(text.starts_with("cannot get sops data key: Failed to get the data key required to decrypt the SOPS file.\n\nGroup 0: FAILED\n"), "{text}");
    assert!(
        text.contains(&format!("  {}: FAILED\n", f.key.recipient)),
        "{text}"
    );
    assert!(
        text.contains("no identity matched any of the recipients"),
        "{text}"
    );
    assert!(
        text.contains("Recovery failed because no master key was able to decrypt the file."),
        "{text}"
    );
    // No key at all.
    let err = decrypt(
        &bytes,
        Format::Json,
        Format::Json,
        &Keys::default(),
        MacCheck::Skip,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("failed to load age identities"), "{err}");
}

#[test]
fn tampered_ciphertext() {
    let Some(f) = fixture() else { return };
    let mut doc = f.enc.clone();
    let v = doc["nested"]["token"].as_str().unwrap().to_string();
    doc["nested"]["token"] = Value::String(tamper(&v));
    assert!(!f.sops_accepts(&doc, &[]));
    let err = f.ours(&doc, MacCheck::Skip).unwrap_err();
    assert!(matches!(err, SopsError::Value(_)));
    let text = err.to_string();
    assert!(text.contains("message authentication failed"), "{text}");
    assert!(text.contains("nested:token:"), "{text}");
    assert_no_plaintext(&text);
}

#[test]
fn ciphertext_moved_to_another_path() {
    let Some(f) = fixture() else { return };
    let mut doc = f.enc.clone();
    doc["user"] = doc["password"].clone();
    let err = f.ours(&doc, MacCheck::Skip).unwrap_err().to_string();
    assert!(
        err.contains("message authentication failed") && err.contains("user:"),
        "{err}"
    );
}

#[test]
fn plain_value_under_an_encrypted_path() {
    let Some(f) = fixture() else { return };
    let mut doc = f.enc.clone();
    doc["nested"]["added"] = json!("hunter2-by-patch");
    assert!(!f.sops_accepts(&doc, &[]));
    let err = f.ours(&doc, MacCheck::Skip).unwrap_err().to_string();
    assert!(
        err.contains("Input string <redacted> does not match sops' data format"),
        "{err}"
    );
    assert!(err.contains("nested:added:"), "{err}");
    assert_no_plaintext(&err);
    // A number where a ciphertext belongs.
    doc["nested"]["added"] = json!(5);
    let err = f.ours(&doc, MacCheck::Skip).unwrap_err().to_string();
    assert!(
        err.contains("Expected encrypted value as string, but got int"),
        "{err}"
    );
}

#[test]
fn mac_mismatch_under_verify_only() {
    let Some(f) = fixture() else { return };
    // Swapping two entries keeps every value valid but changes the MAC (walk order).
    let obj = f.enc.as_object().unwrap();
    let mut swapped = serde_json::Map::new();
    swapped.insert("password".into(), obj["password"].clone());
    for (k, v) in obj {
        if k != "password" {
            swapped.insert(k.clone(), v.clone());
        }
    }
    let doc = Value::Object(swapped);
    assert!(!f.sops_accepts(&doc, &[]));
    assert!(f.sops_accepts(&doc, &["--ignore-mac"]));
    let err = f.ours(&doc, MacCheck::Verify).unwrap_err();
    assert!(matches!(err, SopsError::MacMismatch { .. }), "{err}");
    assert!(
        err.to_string().starts_with("MAC mismatch. File has "),
        "{err}"
    );
    f.ours(&doc, MacCheck::Skip).unwrap();

    // A plain `_unencrypted` value is covered by the MAC too.
    let mut doc = f.enc.clone();
    doc["note_unencrypted"] = json!("changed");
    assert!(!f.sops_accepts(&doc, &[]));
    assert!(f.ours(&doc, MacCheck::Verify).is_err());
    assert!(f.ours(&doc, MacCheck::Skip).unwrap().contains("changed"));
}

#[test]
fn empty_or_foreign_mac() {
    let Some(f) = fixture() else { return };
    let mut doc = f.enc.clone();
    doc["sops"]["mac"] = json!("");
    assert!(!f.sops_accepts(&doc, &[]));
    let err = f.ours(&doc, MacCheck::Verify).unwrap_err().to_string();
    assert!(
        err.starts_with("MAC mismatch. File has no MAC, computed "),
        "{err}"
    );
    f.ours(&doc, MacCheck::Skip).unwrap();

    // A MAC encrypted under another lastmodified (additional data) does not decrypt.
    let mut doc = f.enc.clone();
    doc["sops"]["lastmodified"] = json!("2001-02-03T04:05:06Z");
    assert!(!f.sops_accepts(&doc, &[]));
    let err = f.ours(&doc, MacCheck::Verify).unwrap_err().to_string();
    assert!(err.contains("undecryptable MAC"), "{err}");
    f.ours(&doc, MacCheck::Skip).unwrap();
}

#[test]
fn broken_metadata() {
    let Some(f) = fixture() else { return };
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "no lastmodified",
            Box::new(|d| {
                d["sops"].as_object_mut().unwrap().remove("lastmodified");
            }),
            "parsing time",
        ),
        (
            "bad lastmodified",
            Box::new(|d| d["sops"]["lastmodified"] = json!("yesterday")),
            "parsing time",
        ),
        (
            "no keys",
            Box::new(|d| {
                d["sops"].as_object_mut().unwrap().remove("age");
            }),
            "No keys found in file",
        ),
        (
            "two rules",
            Box::new(|d| d["sops"]["encrypted_regex"] = json!("^password$")),
            "Cannot use more than one of encrypted_suffix, unencrypted_suffix",
        ),
        (
            "rule of the wrong type",
            Box::new(|d| d["sops"]["encrypted_regex"] = json!({"a": 1})),
            "expected type 'string'",
        ),
    ];
    for (name, edit, want) in cases {
        let mut doc = f.enc.clone();
        edit(&mut doc);
        assert!(!f.sops_accepts(&doc, &[]), "{name}: sops accepted it");
        let err = f.ours(&doc, MacCheck::Skip).unwrap_err().to_string();
        assert!(err.contains(want), "{name}: {err}");
    }
    let mut doc = f.enc.clone();
    doc.as_object_mut().unwrap().remove("sops");
    assert!(matches!(
        f.ours(&doc, MacCheck::Skip),
        Err(SopsError::NoMetadata)
    ));
    let err = decrypt(
        b"[1, 2]",
        Format::Json,
        Format::Json,
        &f.keys(),
        MacCheck::Skip,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("top-level object"), "{err}");
}

#[test]
fn weakly_typed_metadata_is_accepted() {
    let Some(f) = fixture() else { return };
    let mut doc = f.enc.clone();
    doc["sops"]["mac_only_encrypted"] = json!("false");
    doc["sops"]["unknown_future_key"] = json!({"x": [1]});
    assert!(f.sops_accepts(&doc, &[]));
    f.ours(&doc, MacCheck::Verify).unwrap();
    // `version` is ignored by decryption (the sops CLI alone parses it, for an AWS KMS
    // workaround that Flux's library path never runs).
    doc["sops"]["version"] = json!(3.7);
    f.ours(&doc, MacCheck::Verify).unwrap();
}

#[test]
fn cloud_only_key_sources_are_named() {
    let Some(f) = fixture() else { return };
    let cases = [
        (
            "hc_vault",
            json!([{
                "vault_address": "https://vault.example:8200",
                "engine_path": "sops",
                "key_name": "firstkey",
                "created_at": "2024-01-01T00:00:00Z",
                "enc": "vault:v1:AAAA"
            }]),
            "hc_vault",
            "https://vault.example:8200/v1/sops/keys/firstkey: FAILED",
        ),
        (
            "kms",
            json!([{
                "arn": "arn:aws:kms:eu-west-1:123456789012:key/abc",
                "created_at": "2024-01-01T00:00:00Z",
                "enc": "AQID",
                "aws_profile": ""
            }]),
            "aws kms",
            "arn:aws:kms:eu-west-1:123456789012:key/abc: FAILED",
        ),
        (
            "gcp_kms",
            json!([{
                "resource_id": "projects/p/locations/global/keyRings/r/cryptoKeys/k",
                "created_at": "2024-01-01T00:00:00Z",
                "enc": "AQID"
            }]),
            "gcp kms",
            "cryptoKeys/k: FAILED",
        ),
        (
            "azure_kv",
            json!([{
                "vault_url": "https://v.vault.azure.net",
                "name": "k",
                "version": "1",
                "created_at": "2024-01-01T00:00:00Z",
                "enc": "AQID"
            }]),
            "azure_kv",
            "https://v.vault.azure.net/keys/k/1: FAILED",
        ),
    ];
    for (field, entry, provider, line) in cases {
        let mut doc = f.enc.clone();
        let sops = doc["sops"].as_object_mut().unwrap();
        sops.remove("age");
        sops.insert(field.into(), entry);
        let err = f.ours(&doc, MacCheck::Skip).unwrap_err();
        assert!(matches!(err, SopsError::DataKey(_)), "{field}: {err}");
        let text = err.to_string();
        assert!(text.contains(provider), "{field}: {text}");
        assert!(text.contains(line), "{field}: {text}");
        assert!(text.contains("not supported"), "{field}: {text}");
    }
    // A bad created_at is refused while loading, as sops does.
    let mut doc = f.enc.clone();
    doc["sops"]["hc_vault"] = json!([{"vault_address": "a", "engine_path": "b", "key_name": "c", "created_at": "never", "enc": "x"}]);
    assert!(!f.sops_accepts(&doc, &[]));
    assert!(
        f.ours(&doc, MacCheck::Skip)
            .unwrap_err()
            .to_string()
            .contains("parsing time")
    );
}

#[test]
fn bad_keys_are_refused() {
    let mut keys = Keys::default();
    let err = keys
        .add_age_identities("not a key")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "failed to parse and add to age identities: unknown identity type"
    );
    assert!(
        keys.add_pgp_armored(
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nnope\n-----END PGP PRIVATE KEY BLOCK-----\n"
        )
        .is_err()
    );
    assert!(keys.is_empty());
}

#[test]
fn damaged_dotenv_and_ini() {
    let Some(f) = fixture() else { return };
    helpers::write(f.path(), "d.env", b"SECRET=hunter2\n");
    let enc = f
        .tools
        .encrypt(f.path(), "d.env", &["--age", &f.key.recipient]);
    let text = String::from_utf8(enc).unwrap();
    // A key with a hole in a flattened list.
    let holed = text.replace("sops_age__list_0__", "sops_age__list_1__");
    let err = decrypt(
        holed.as_bytes(),
        Format::Dotenv,
        Format::Dotenv,
        &f.keys(),
        MacCheck::Skip,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("Incomplete list"), "{err}");
    let no_meta: String = text
        .lines()
        .filter(|l| !l.starts_with("sops_"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(matches!(
        decrypt(
            no_meta.as_bytes(),
            Format::Dotenv,
            Format::Dotenv,
            &f.keys(),
            MacCheck::Skip
        ),
        Err(SopsError::NoMetadata)
    ));

    helpers::write(f.path(), "d.ini", b"[s]\nk = hunter2\n");
    let enc = f
        .tools
        .encrypt(f.path(), "d.ini", &["--age", &f.key.recipient]);
    let text = String::from_utf8(enc).unwrap();
    let broken = text.replacen("[s]", "[s", 1);
    let err = decrypt(
        broken.as_bytes(),
        Format::Ini,
        Format::Ini,
        &f.keys(),
        MacCheck::Skip,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("unclosed section"), "{err}");
    assert_no_plaintext(&err);
}
