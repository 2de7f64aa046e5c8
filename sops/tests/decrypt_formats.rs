//! Documents encrypted by the real `sops` CLI, decrypted by rflux-sops with the MAC checked,
//! compared byte for byte with `sops decrypt` (reference §4, §6–§8, §10).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod helpers;

use std::path::Path;

use rflux_sops::{Format, Keys, MacCheck, decrypt};

fn format_of(type_name: &str) -> Format {
    match type_name {
        "json" => Format::Json,
        "dotenv" => Format::Dotenv,
        "ini" => Format::Ini,
        "binary" => Format::Binary,
        "yaml" => Format::Yaml,
        other => panic!("{other}"),
    }
}

fn age_keys(identities: &[&str]) -> Keys {
    let mut keys = Keys::default();
    for id in identities {
        keys.add_age_identities(id).unwrap();
    }
    keys
}

/// Encrypts `content` with `sops encrypt <global> encrypt --age … <args>`, then checks that
/// rflux's plaintext equals `sops decrypt`'s.
#[allow(clippy::too_many_arguments)]
fn check_parity(
    tools: &common::Tools,
    dir: &Path,
    key: &common::AgeKey,
    name: &str,
    content: &[u8],
    type_name: &str,
    global: &[&str],
    args: &[&str],
) -> Vec<u8> {
    helpers::write(dir, name, content);
    let mut argv: Vec<&str> = global.to_vec();
    argv.push("encrypt");
    // Without a `.sops.yaml` here, the key comes from the command line.
    if !dir.join(".sops.yaml").exists() {
        argv.extend(["--age", &key.recipient]);
    }
    argv.extend(["--input-type", type_name, "--output-type", type_name]);
    argv.extend(args);
    argv.push(name);
    let enc = tools.run(dir, &argv, &[]).unwrap();
    let enc_name = format!("enc-{name}");
    helpers::write(dir, &enc_name, &enc);
    let want = tools
        .decrypt(
            dir,
            &enc_name,
            &key.identity,
            &["--input-type", type_name, "--output-type", type_name],
        )
        .unwrap();
    let fmt = format_of(type_name);
    let got = decrypt(
        &enc,
        fmt,
        fmt,
        &age_keys(&[&key.identity]),
        MacCheck::Verify,
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want),
        "{name}"
    );
    assert_eq!(got.as_slice(), want.as_slice(), "{name}");
    enc
}

const JSON_DOC: &str = r#"{
  "str": "hello <world> & \"friends\"\n\ttab \u2028 \u0001 é 😀",
  "int": 42, "neg": -7, "max": 9223372036854775807, "huge": 18446744073709551616,
  "float": 1.5, "whole": 100.0, "big": 1e21, "tiny": 1e-7, "third": 0.3333333333333333, "negzero": -0.0,
  "yes": true, "no": false, "nothing": null, "empty": "",
  "list": [1, "two", 3.5, false, null, [], {}, {"deep": ["x"]}],
  "obj": {"a": {"b": {"c": "d"}}, "e": []},
  "dup": 1, "dup": "two",
  "pw_unencrypted": "plain text",
  "uni_ключ": "значение"
}"#;

#[test]
fn json_matches_sops() {
    let Some(t) = common::tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let key = t.age_key(dir.path());
    check_parity(
        &t,
        dir.path(),
        &key,
        "doc.json",
        JSON_DOC.as_bytes(),
        "json",
        &[],
        &[],
    );
}

#[test]
fn dotenv_matches_sops() {
    let Some(t) = common::tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let key = t.age_key(dir.path());
    let doc = "# a comment\nA=1\nB=multi\\nline\nC=x=y\nEMPTY=\n\nUNI=héllo wörld\n#second comment\nD_unencrypted=plain\nSPACES=  padded  \n";
    check_parity(
        &t,
        dir.path(),
        &key,
        "doc.env",
        doc.as_bytes(),
        "dotenv",
        &[],
        &[],
    );
}

#[test]
fn ini_matches_sops() {
    let Some(t) = common::tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let key = t.age_key(dir.path());
    let doc = "top = in default\n; file comment\n[db]\n; key comment\nuser = admin\npass = \"  padded  \" ; inline\nhash = `a#b;c`\nlong_key_name: colon\nempty =\n\"quoted=key\" = v\nmulti = \"\"\"line one\nline two\"\"\"\ncont = one \\\n  two\ndup = first\ndup = second\n# hash comment\n\n[other]\nx=1\nuni = héllo\n";
    check_parity(
        &t,
        dir.path(),
        &key,
        "doc.ini",
        doc.as_bytes(),
        "ini",
        &[],
        &[],
    );
}

#[test]
fn binary_matches_sops() {
    let Some(t) = common::tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let key = t.age_key(dir.path());
    let mut bytes: Vec<u8> = (0..=255u8).collect();
    bytes.extend_from_slice(b"\r\nand some text\n");
    check_parity(&t, dir.path(), &key, "blob.bin", &bytes, "binary", &[], &[]);
    check_parity(
        &t,
        dir.path(),
        &key,
        "text.txt",
        b"just text\r\n",
        "binary",
        &[],
        &[],
    );
}

#[test]
fn encryption_rules_match_sops() {
    let Some(t) = common::tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let key = t.age_key(dir.path());
    let env = "# sops:enc\nA=1\nB_enc=2\n# plain marker\nC=3\nD=4\n";
    // The comment rules come from a `.sops.yaml` creation rule: sops 3.13.3 ignores the
    // global `--…-comment-regex` flags with the `encrypt` subcommand.
    let cases: [(&str, &str, &[&str]); 6] = [
        ("suffix", "", &["--encrypted-suffix", "_enc"]),
        ("unsuffix", "", &["--unencrypted-suffix", "_enc"]),
        ("regex", "", &["--encrypted-regex", r"^[AB]\w*$"]),
        ("unregex", "", &["--unencrypted-regex", "^(C|D)$"]),
        ("comment", "encrypted_comment_regex: 'sops:enc'", &[]),
        ("uncomment", "unencrypted_comment_regex: 'plain'", &[]),
    ];
    for (name, rule, args) in cases {
        let sub = dir.path().join(name);
        std::fs::create_dir(&sub).unwrap();
        if !rule.is_empty() {
            let config = format!("creation_rules:\n  - age: {}\n    {rule}\n", key.recipient);
            helpers::write(&sub, ".sops.yaml", config.as_bytes());
        }
        let enc = check_parity(
            &t,
            &sub,
            &key,
            &format!("{name}.env"),
            env.as_bytes(),
            "dotenv",
            &[],
            args,
        );
        // The rule really left something in clear text and encrypted something else.
        let text = String::from_utf8(enc).unwrap();
        assert!(text.contains("=ENC["), "{name}: {text}");
        assert!(
            text.lines()
                .any(|l| !l.starts_with("sops_") && !l.contains("ENC[")),
            "{name}: {text}"
        );
    }
    let ini = "[s]\n; sops:enc\nsecret = a\nplain = b\n[t]\nother = c\n";
    let enc = check_parity(
        &t,
        &dir.path().join("comment"),
        &key,
        "comment.ini",
        ini.as_bytes(),
        "ini",
        &[],
        &[],
    );
    assert!(String::from_utf8(enc).unwrap().contains("plain  = ENC["));
}

#[test]
fn mac_only_encrypted_matches_sops() {
    let Some(t) = common::tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let key = t.age_key(dir.path());
    let enc = check_parity(
        &t,
        dir.path(),
        &key,
        "m.json",
        br#"{"secret": "s", "public": "p", "n": 3}"#,
        "json",
        &["--mac-only-encrypted"],
        &["--encrypted-regex", "^secret$"],
    );
    assert!(
        String::from_utf8(enc)
            .unwrap()
            .contains("\"mac_only_encrypted\": true")
    );
}

#[test]
fn kubernetes_secret_object_like_flux() {
    let Some(t) = common::tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let key = t.age_key(dir.path());
    let secret = r#"{
  "apiVersion": "v1",
  "kind": "Secret",
  "metadata": {"name": "db", "namespace": "apps", "labels": {"b": "2", "a": "1"}},
  "type": "Opaque",
  "data": {"password": "aHVudGVyMg==", "user": "YWRtaW4="},
  "stringData": {"token": "t0k3n", "port": 5432, "tls": true}
}"#;
    let enc = check_parity(
        &t,
        dir.path(),
        &key,
        "secret.json",
        secret.as_bytes(),
        "json",
        &[],
        &["--encrypted-regex", "^(data|stringData)$"],
    );
    let obj = helpers::json(&enc);
    assert_eq!(obj["metadata"]["name"], "db", "metadata stays plain");
    assert!(
        obj["data"]["password"]
            .as_str()
            .unwrap()
            .starts_with("ENC[")
    );
    let plain = rflux_sops::decrypt_object(&obj, &age_keys(&[&key.identity])).unwrap();
    let want: serde_json::Value = serde_json::from_str(secret).unwrap();
    assert_eq!(plain, want);
    assert!(plain.get("sops").is_none());
    // Keys come back sorted, as Flux hands the object over.
    let keys: Vec<&String> = plain.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "apiVersion",
            "data",
            "kind",
            "metadata",
            "stringData",
            "type"
        ]
    );
}

#[test]
fn pgp_keys_match_sops() {
    let Some(t) = common::tools() else { return };
    for algo in ["default", "future-default"] {
        let Some(gpg) = common::pgp_key_with(algo) else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let age = t.age_key(dir.path());
        helpers::write(dir.path(), "p.json", br#"{"k": "v", "n": [1, 2]}"#);
        let env = [("GNUPGHOME", gpg.home_str())];
        // Encrypted to a PGP key only, and to age + PGP.
        for (name, extra) in [
            ("pgp", vec![]),
            ("both", vec!["--age", age.recipient.as_str()]),
        ] {
            let mut args = vec!["encrypt", "--pgp", gpg.fingerprint.as_str()];
            args.extend(extra.iter().copied());
            args.push("p.json");
            let enc = t.run(dir.path(), &args, &env).unwrap();
            helpers::write(dir.path(), &format!("{name}.enc.json"), &enc);
            let want = t
                .run(dir.path(), &["decrypt", &format!("{name}.enc.json")], &env)
                .unwrap();
            let mut keys = Keys::default();
            keys.add_pgp_armored(&gpg.armored_secret).unwrap();
            assert!(!keys.is_empty());
            let got = decrypt(&enc, Format::Json, Format::Json, &keys, MacCheck::Verify)
                .unwrap_or_else(|e| panic!("{algo}/{name}: {e}"));
            assert_eq!(got.as_slice(), want.as_slice(), "{algo}/{name}");
        }
    }
}

#[test]
fn pgp_keyrings_with_several_blocks() {
    let Some(t) = common::tools() else { return };
    let (Some(first), Some(second)) = (
        common::pgp_key_with("default"),
        common::pgp_key_with("future-default"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    helpers::write(dir.path(), "p.json", br#"{"k": "v"}"#);
    let env = [("GNUPGHOME", second.home_str())];
    let enc = t
        .run(
            dir.path(),
            &["encrypt", "--pgp", &second.fingerprint, "p.json"],
            &env,
        )
        .unwrap();
    let mut keys = Keys::default();
    // A keyring Secret entry holding two exported blocks.
    keys.add_pgp_armored(&format!(
        "{}\n{}",
        first.armored_secret, second.armored_secret
    ))
    .unwrap();
    let got = decrypt(&enc, Format::Json, Format::Json, &keys, MacCheck::Verify).unwrap();
    assert_eq!(got.as_slice(), b"{\n\t\"k\": \"v\"\n}\n");
    // Only the first key: the failure names the fingerprint sops recorded.
    let mut keys = Keys::default();
    keys.add_pgp_armored(&first.armored_secret).unwrap();
    let err = decrypt(&enc, Format::Json, Format::Json, &keys, MacCheck::Verify)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("{}: FAILED", second.fingerprint)),
        "{err}"
    );
    assert!(
        err.contains("could not decrypt data key with PGP key"),
        "{err}"
    );
}

/// A `.sops.yaml` splitting the data key over one age key per group.
fn shamir_config(recipients: &[&str], threshold: usize) -> String {
    let mut s = String::from("creation_rules:\n  - key_groups:\n");
    for r in recipients {
        s.push_str(&format!("      - age:\n          - {r}\n"));
    }
    s.push_str(&format!("    shamir_threshold: {threshold}\n"));
    s
}

#[test]
fn key_groups_with_shamir() {
    let Some(t) = common::tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<common::AgeKey> = (0..3).map(|_| t.age_key(dir.path())).collect();
    let recipients: Vec<&str> = keys.iter().map(|k| k.recipient.as_str()).collect();
    helpers::write(
        dir.path(),
        ".sops.yaml",
        shamir_config(&recipients, 2).as_bytes(),
    );
    helpers::write(dir.path(), "s.json", br#"{"secret": "shared"}"#);
    let enc = t.encrypt(dir.path(), "s.json", &[]);
    let text = String::from_utf8(enc.clone()).unwrap();
    assert!(text.contains("\"key_groups\"") && text.contains("\"shamir_threshold\": 2"));
    helpers::write(dir.path(), "s.enc.json", &enc);

    let all = format!("{}\n{}", keys[0].identity, keys[2].identity);
    let want = t.decrypt(dir.path(), "s.enc.json", &all, &[]).unwrap();
    // Groups 0 and 2 (x = 1 and 3) are enough.
    let got = decrypt(
        &enc,
        Format::Json,
        Format::Json,
        &age_keys(&[&keys[0].identity, &keys[2].identity]),
        MacCheck::Verify,
    )
    .unwrap();
    assert_eq!(got.as_slice(), want.as_slice());

    // One group is not: sops fails too, and the message explains the threshold.
    assert!(
        t.decrypt(dir.path(), "s.enc.json", &keys[1].identity, &[])
            .is_err()
    );
    let err = decrypt(
        &enc,
        Format::Json,
        Format::Json,
        &age_keys(&[&keys[1].identity]),
        MacCheck::Verify,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("Group 0: FAILED"), "{err}");
    assert!(err.contains("Group 1: SUCCESS"), "{err}");
    assert!(err.contains("Group 2: FAILED"), "{err}");
    assert!(err.contains("Shamir threshold of"), "{err}");
    assert!(
        err.contains("only 1 part(s) were successfully recovered"),
        "{err}"
    );
    assert!(err.contains(&keys[0].recipient), "{err}");
}

#[test]
fn output_format_differs_from_input() {
    let Some(t) = common::tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let key = t.age_key(dir.path());
    helpers::write(dir.path(), "e.env", b"A=1\nB=two words\n#c\n");
    let enc = t.encrypt(dir.path(), "e.env", &["--age", &key.recipient]);
    helpers::write(dir.path(), "e.enc.env", &enc);
    let want = t
        .decrypt(
            dir.path(),
            "e.enc.env",
            &key.identity,
            &["--input-type", "dotenv", "--output-type", "json"],
        )
        .unwrap();
    let got = decrypt(
        &enc,
        Format::Dotenv,
        Format::Json,
        &age_keys(&[&key.identity]),
        MacCheck::Verify,
    )
    .unwrap();
    assert_eq!(got.as_slice(), want.as_slice());
}

#[test]
fn tricky_documents_match_sops() {
    let Some(t) = common::tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let key = t.age_key(dir.path());
    let cases: [(&str, &[u8], &str); 7] = [
        (
            "spaced.ini",
            b"   ; indented comment\n[ spaced ] ; header comment\na: colon value\nb = one \\\n  two \\\n  three\nc = `multi\nline` ; after\nd = \"\"\"x\ny\"\"\" # tail\ne = \"a#b\"\nf = 'quoted'\n[ spaced ]\ng = dup section\n[DEFAULT]\nh = explicit default\n[empty]\n[last]\nk = v\n; trailing comment\n",
            "ini",
        ),
        (
            "keys.ini",
            "k1 = say \"hi\"\nk2 = \"a\" b \"c\"\n`back\"tick` = v\nkey`q = w\nключ = unicode key\nspaces =    \ntabs\t=\tval\t\n[s]\n; first\n\n# second\n  ; third\nk = v\nk = v2\n; c for k3\nk3 = x\nk3 = y\nlonely = \\\n".as_bytes(),
            "ini",
        ),
        ("crlf.ini", b"top = 1\r\n[s]\r\nk = v\r\n; c\r\nk2 = v2\r\n", "ini"),
        (
            "bom.ini",
            b"\xef\xbb\xbf[s]\nk = \xc2\xa0nbsp\xc2\xa0\nq = \" spaced \"\nempty =\n",
            "ini",
        ),
        ("odd.env", b"A=1\r\nexport B=2\n C = 3\n=novalue\nD=has\\\\nbackslash\nE=x#no\n#\n##double\nF=tab\there\nG=cr\rmid\n", "dotenv"),
        (
            "numbers.json",
            br#"{"l":[1e-7,123e-2,1.0,-1e21,2.5e-6,1e20,100,0.000001,1E5,1e+5,-1.0e-3,5e-324,1.7976931348623157e308,123456789012345678901234567890],"c":"\u0000\u001f\u007f\u00ad\ufeff\ud83d\ude00\/","":"empty key"}"#,
            "json",
        ),
        ("empty.json", b"{}", "json"),
    ];
    for (name, content, ty) in cases {
        check_parity(&t, dir.path(), &key, name, content, ty, &[], &[]);
    }
}

#[test]
fn typed_values_into_other_formats() {
    let Some(t) = common::tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let key = t.age_key(dir.path());
    let cases = [
        (
            "sections.json",
            r#"{"sec":{"i":1,"f":1234567.0,"g":0.5,"h":100.0,"b":true,"n":null,"s":"x#y","e":"","t":" pad"},"s2":{}}"#,
            "ini",
            Format::Ini,
        ),
        (
            "flat.json",
            r#"{"i":1,"f":1234567.0,"g":0.5,"h":100.0,"k":1e-5,"b":false,"n":null,"s":"multi\nline","e":""}"#,
            "dotenv",
            Format::Dotenv,
        ),
        (
            "data.json",
            r#"{"data":"only data"}"#,
            "binary",
            Format::Binary,
        ),
    ];
    for (name, content, out_type, out_fmt) in cases {
        helpers::write(dir.path(), name, content.as_bytes());
        let enc = t.encrypt(dir.path(), name, &["--age", &key.recipient]);
        helpers::write(dir.path(), "enc.json", &enc);
        let want = t
            .decrypt(
                dir.path(),
                "enc.json",
                &key.identity,
                &["--output-type", out_type],
            )
            .unwrap();
        let got = decrypt(
            &enc,
            Format::Json,
            out_fmt,
            &age_keys(&[&key.identity]),
            MacCheck::Verify,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "{name}"
        );
    }
    // Where sops cannot write the tree in a format, neither can we.
    helpers::write(dir.path(), "nested.json", br#"{"a":{"b":1}}"#);
    let enc = t.encrypt(dir.path(), "nested.json", &["--age", &key.recipient]);
    helpers::write(dir.path(), "enc.json", &enc);
    assert!(
        t.decrypt(
            dir.path(),
            "enc.json",
            &key.identity,
            &["--output-type", "dotenv"]
        )
        .is_err()
    );
    let err = decrypt(
        &enc,
        Format::Json,
        Format::Dotenv,
        &age_keys(&[&key.identity]),
        MacCheck::Verify,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot use complex value in dotenv file"),
        "{err}"
    );
}

#[test]
fn keys_can_be_shared_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Keys>();
    send_sync::<rflux_sops::metadata::Metadata>();
}
