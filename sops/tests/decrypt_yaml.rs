//! A small YAML check: a Kubernetes Secret encrypted by `sops` with Flux's recommended
//! `--encrypted-regex`, decrypted by rflux-sops (MAC checked) and compared with
//! `sops decrypt`. The YAML store has its own, fuller tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod helpers;

use rflux_sops::{Format, Keys, MacCheck, decrypt};

#[test]
fn kubernetes_secret_yaml_matches_sops() {
    let Some(t) = common::tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let key = t.age_key(dir.path());
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db # the database\n  namespace: apps\ntype: Opaque\ndata:\n  password: aHVudGVyMg==\nstringData:\n  token: t0k3n\n  port: 5432\n";
    helpers::write(dir.path(), "secret.yaml", secret.as_bytes());
    let enc = t.encrypt(
        dir.path(),
        "secret.yaml",
        &[
            "--age",
            &key.recipient,
            "--encrypted-regex",
            "^(data|stringData)$",
        ],
    );
    helpers::write(dir.path(), "secret.enc.yaml", &enc);
    let want = t
        .decrypt(dir.path(), "secret.enc.yaml", &key.identity, &[])
        .unwrap();
    let mut keys = Keys::default();
    keys.add_age_identities(&key.identity).unwrap();
    let got = decrypt(&enc, Format::Yaml, Format::Yaml, &keys, MacCheck::Verify).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    // The same document written as JSON, as Flux does for a Secret data key `*.json`.
    let want = t
        .decrypt(
            dir.path(),
            "secret.enc.yaml",
            &key.identity,
            &["--output-type", "json"],
        )
        .unwrap();
    let got = decrypt(&enc, Format::Yaml, Format::Json, &keys, MacCheck::Verify).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
}
