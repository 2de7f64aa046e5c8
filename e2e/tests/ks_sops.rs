//! SOPS decryption (`spec.decryption`) on the real control plane, with fixtures encrypted at
//! test time by the real `sops` CLI (age keys from `age-keygen`, OpenPGP keys from `gpg`):
//! 1. every format (YAML and JSON Secret objects, secretGenerator YAML, JSON, INI and binary
//!    files, a dotenv env file, Secret data values that are SOPS documents), once with an age
//!    key and once with an OpenPGP key: the Secrets in the cluster hold the plaintext, byte for
//!    byte what `sops decrypt` prints; the `decrypt: Disabled` opt-out is applied as it is;
//! 2. bad inputs, each ending in a Ready=False condition (and event) naming the file or object,
//!    with nothing of that Kustomization applied, and the last good state kept.
//!
//! Needs the controller binaries (`cargo build -p source-controller -p kustomize-controller`),
//! `e2e/sops/build.sh` (sops, age-keygen) and gpg.
#![allow(clippy::unwrap_used)]

mod ks_env;
#[path = "../../sops/tests/common/mod.rs"]
mod sops_cli;
mod support;

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::{Event, Secret};
use ks_env::{Env, failed_with, ready_at, ready_message};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

const AGE_KEY_SECRET: &str = "sops-age";
const PGP_KEY_SECRET: &str = "sops-pgp";

/// Plaintext inputs of the generator: (key in the Secret, file name in the repo, sops type).
const GENERATED: [(&str, &str, &str); 4] = [
    ("config.yaml", "config.enc.yaml", "yaml"),
    ("settings.json", "settings.enc.json", "json"),
    ("app.ini", "app.enc.ini", "ini"),
    ("blob.bin", "blob.enc.bin", "binary"),
];

fn plaintext(name: &str) -> &'static str {
    match name {
        "config.yaml" => {
            "# database settings\ndatabase:\n  host: db.internal\n  port: 5432\n  replicas: [a, b]\nenabled: true\nratio: 0.5\n"
        }
        "settings.json" => "{\"token\": \"t0k3n\", \"retries\": 3, \"nested\": {\"on\": false}}",
        "app.ini" => "[server]\nhost = example.invalid\nport = 8443\n\n[auth]\nsecret = hunter2\n",
        "blob.bin" => "raw bytes \u{1} not a document\n",
        "vars.env" => "DB_USER=admin\nDB_PASS=p@ss=word\n",
        "secret.yaml" => {
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  user: admin\n  password: s3cr3t\ndata:\n  token: dG9rZW4=\n"
        }
        "secret-json.json" => {
            "{\"apiVersion\": \"v1\", \"kind\": \"Secret\", \"metadata\": {\"name\": \"db-json\"}, \"stringData\": {\"password\": \"from-json\"}}"
        }
        "doc.env" => "INNER=inside-a-secret\n",
        _ => unreachable!("{name}"),
    }
}

/// Encrypts the plaintext `name` as `sops_type` for both keys; the encrypted text.
fn encrypt(
    tools: &sops_cli::Tools,
    work: &Path,
    name: &str,
    sops_type: &str,
    age: &str,
    pgp: &sops_cli::PgpKey,
    extra: &[&str],
) -> String {
    std::fs::write(work.join(name), plaintext(name)).unwrap();
    let mut args = vec![
        "--input-type",
        sops_type,
        "--output-type",
        sops_type,
        "--age",
        age,
        "--pgp",
        &pgp.fingerprint,
    ];
    args.extend_from_slice(extra);
    String::from_utf8(tools.encrypt_with(work, name, &args, Some(&pgp.home))).unwrap()
}

fn kustomization(resources: &[&str], generator: &str) -> String {
    format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [{}]\n{generator}",
        resources.join(", ")
    )
}

const SENTINEL: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sentinel\ndata:\n  a: b\n";

async fn secret_data(api: &Api<Secret>, name: &str) -> BTreeMap<String, Vec<u8>> {
    api.get(name)
        .await
        .unwrap()
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

async fn key_secret(env: &Env, name: &str, entries: Value) {
    let mut s = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": env.ns}, "stringData": entries});
    env.ctl.label_object(&mut s);
    support::procs::apply_value(&env.client, &s, "e2e")
        .await
        .unwrap();
}

fn decryption(secret: &str) -> Value {
    json!({"decryption": {"provider": "sops", "secretRef": {"name": secret}}})
}

#[tokio::test]
async fn sops_documents_of_every_format_are_decrypted_and_bad_ones_refused() {
    let Some(tools) = sops_cli::tools() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let Some(pgp) = sops_cli::pgp_key() else {
        return;
    };
    let age = tools.age_key(work.path());
    let other_age = tools.age_key(work.path());
    let w = work.path();
    let regex = ["--encrypted-regex", "^(data|stringData)$"];

    // 1. the good tree, the same for both keys
    let mut files: Vec<(String, String)> = Vec::new();
    let mut generated = String::from(
        "secretGenerator:\n- name: gen\n  options: {disableNameSuffixHash: true}\n  files:\n",
    );
    for (key, file, _) in GENERATED {
        generated.push_str(&format!("  - {key}={file}\n"));
    }
    generated.push_str("  envs: [vars.enc.env]\n");
    let doc = encrypt(&tools, w, "doc.env", "dotenv", &age.recipient, &pgp, &[]);
    let data_doc = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: doc\ndata:\n  app.env: {}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: opted-out\n  annotations:\n    kustomize.toolkit.fluxcd.io/decrypt: Disabled\ndata:\n  app.env: {}\n",
        STANDARD.encode(&doc),
        STANDARD.encode(&doc)
    );
    for dir in ["age", "pgp"] {
        files.push((
            format!("{dir}/kustomization.yaml"),
            kustomization(
                &["secret.enc.yaml", "secret.enc.json", "data-doc.yaml"],
                &generated,
            ),
        ));
        for (key, file, t) in GENERATED {
            files.push((
                format!("{dir}/{file}"),
                encrypt(&tools, w, key, t, &age.recipient, &pgp, &[]),
            ));
        }
        let enc = |n, t, extra: &[&str]| encrypt(&tools, w, n, t, &age.recipient, &pgp, extra);
        files.push((
            format!("{dir}/vars.enc.env"),
            enc("vars.env", "dotenv", &[]),
        ));
        files.push((
            format!("{dir}/secret.enc.yaml"),
            enc("secret.yaml", "yaml", &regex),
        ));
        files.push((
            format!("{dir}/secret.enc.json"),
            enc("secret-json.json", "json", &regex),
        ));
        files.push((format!("{dir}/data-doc.yaml"), data_doc.clone()));
    }
    // the reference plaintext: what `sops decrypt` prints for each generator file
    let reference: BTreeMap<String, Vec<u8>> = GENERATED
        .iter()
        .map(|(key, file, t)| {
            let enc_path = w.join(file);
            let text = files
                .iter()
                .find(|(p, _)| p == &format!("age/{file}"))
                .unwrap();
            std::fs::write(&enc_path, &text.1).unwrap();
            let plain = tools
                .decrypt(
                    w,
                    file,
                    &age.identity,
                    &["--input-type", t, "--output-type", t],
                )
                .unwrap();
            (key.to_string(), plain)
        })
        .collect();

    // 2. bad inputs, one Kustomization each, with a sentinel that must not be applied
    let enc_env =
        |extra: &[&str]| encrypt(&tools, w, "vars.env", "dotenv", &age.recipient, &pgp, extra);
    let gen_env = "secretGenerator:\n- name: gen\n  options: {disableNameSuffixHash: true}\n  envs: [vars.enc.env]\n";
    let good_env = enc_env(&[]);
    let tampered = tamper_value(&good_env);
    let wrong_mac = {
        std::fs::write(w.join("mac.env"), "DB_USER=admin\nNOTE_unencrypted=hello\n").unwrap();
        let t = tools.encrypt_with(
            w,
            "mac.env",
            &[
                "--input-type",
                "dotenv",
                "--output-type",
                "dotenv",
                "--age",
                &age.recipient,
            ],
            None,
        );
        String::from_utf8(t)
            .unwrap()
            .replace("NOTE_unencrypted=hello", "NOTE_unencrypted=changed")
    };
    let truncated: String = good_env
        .lines()
        .filter(|l| !l.starts_with("sops_lastmodified"))
        .map(|l| format!("{l}\n"))
        .collect();
    let other_key_secret = encrypt(
        &tools,
        w,
        "secret.yaml",
        "yaml",
        &other_age.recipient,
        &pgp,
        &regex,
    );
    let bad: [(&str, Vec<(&str, String)>); 6] = [
        (
            "nodecrypt",
            vec![(
                "secret.enc.yaml",
                files
                    .iter()
                    .find(|(p, _)| p == "age/secret.enc.yaml")
                    .unwrap()
                    .1
                    .clone(),
            )],
        ),
        ("wrongkey", vec![("secret.enc.yaml", other_key_secret)]),
        ("tampered", vec![("vars.enc.env", good_env.clone())]),
        ("mac", vec![("vars.enc.env", wrong_mac)]),
        ("truncated", vec![("vars.enc.env", truncated)]),
        ("outside", vec![]),
    ];
    for (name, extra) in &bad {
        let (resources, generator): (Vec<&str>, String) = match *name {
            "nodecrypt" | "wrongkey" => (vec!["sentinel.yaml", "secret.enc.yaml"], String::new()),
            "outside" => (
                vec!["sentinel.yaml"],
                "secretGenerator:\n- name: gen\n  envs: [../../../etc/vars.env]\n".into(),
            ),
            _ => (vec!["sentinel.yaml"], gen_env.into()),
        };
        files.push((
            format!("bad/{name}/kustomization.yaml"),
            kustomization(&resources, &generator),
        ));
        files.push((format!("bad/{name}/sentinel.yaml"), SENTINEL.into()));
        for (f, text) in extra {
            files.push((format!("bad/{name}/{f}"), text.clone()));
        }
    }
    let file_refs: Vec<(&str, String)> =
        files.iter().map(|(p, t)| (p.as_str(), t.clone())).collect();
    // --sops-age-secret: a Secret in the controller's namespace ("default" here) for the
    // Kustomizations whose decryption names no Secret; only its `*.agekey` entries count
    let global_secret = rflux_e2e::unique_name("sops-global");
    let mut env = Env::start_with_args(
        "ks-sops",
        vec![format!("--sops-age-secret={global_secret}")],
        &file_refs,
    )
    .await;
    let mut global = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": global_secret, "namespace": "default"},
        "stringData": {"identity.agekey": age.identity, "ignored.asc": "not read"}});
    env.ctl.label_object(&mut global);
    support::procs::apply_value(&env.client, &global, "e2e")
        .await
        .unwrap();
    key_secret(&env, AGE_KEY_SECRET, json!({"keys.agekey": age.identity})).await;
    key_secret(&env, PGP_KEY_SECRET, json!({"key.asc": pgp.armored_secret})).await;
    key_secret(
        &env,
        "sops-other",
        json!({"keys.agekey": age.identity, "sops.aws-kms": "aws_access_key_id: x\n"}),
    )
    .await;
    let rev = env
        .repo
        .head()
        .map(|sha| format!("main@sha1:{sha}"))
        .unwrap();

    // every Kustomization prefixes its objects with its own name: no two own one object
    let prefixed = |mut spec: Value, prefix: &str| {
        spec["namePrefix"] = json!(format!("{prefix}-"));
        spec
    };
    for (name, secret) in [("age", AGE_KEY_SECRET), ("pgp", PGP_KEY_SECRET)] {
        env.create_ks(
            name,
            &format!("./{name}"),
            prefixed(decryption(secret), name),
            json!({}),
        )
        .await;
    }
    // no secretRef: the controller-wide age Secret
    env.create_ks(
        "global",
        "./age",
        prefixed(json!({"decryption": {"provider": "sops"}}), "global"),
        json!({}),
    )
    .await;
    // the unsupported key source uses the good tree
    env.create_ks(
        "unsupported",
        "./age",
        prefixed(decryption("sops-other"), "unsupported"),
        json!({}),
    )
    .await;
    for (name, _) in &bad {
        let spec = if *name == "nodecrypt" {
            json!({})
        } else {
            decryption(AGE_KEY_SECRET)
        };
        let ks = format!("bad-{name}");
        env.create_ks(
            &ks,
            &format!("./bad/{name}"),
            prefixed(spec, &ks),
            json!({}),
        )
        .await;
    }

    // 1. every format, with each key
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    for name in ["age", "pgp", "global"] {
        env.wait_ks(name, "Ready at the first revision", |k| ready_at(k, &rev))
            .await;
    }
    assert_eq!(
        secret_data(&secrets, "global-db").await["password"],
        b"s3cr3t",
        "--sops-age-secret"
    );
    for p in ["age", "pgp"] {
        let get = |n: &str| format!("{p}-{n}");
        let generated = secret_data(&secrets, &get("gen")).await;
        for (key, want) in &reference {
            assert_eq!(generated.get(key), Some(want), "generator key {key}");
        }
        assert_eq!(generated["DB_USER"], b"admin");
        assert_eq!(generated["DB_PASS"], b"p@ss=word");
        let db = secret_data(&secrets, &get("db")).await;
        assert_eq!(db["user"], b"admin");
        assert_eq!(db["password"], b"s3cr3t");
        assert_eq!(db["token"], b"token");
        assert_eq!(
            secret_data(&secrets, &get("db-json")).await["password"],
            b"from-json"
        );
        assert_eq!(
            secret_data(&secrets, &get("doc")).await["app.env"],
            b"INNER=inside-a-secret\n"
        );
        // opted out: applied as it is, still encrypted
        assert_eq!(
            secret_data(&secrets, &get("opted-out")).await["app.env"],
            doc.as_bytes()
        );
    }
    // no plaintext in the Kustomizations' status
    for name in ["age", "pgp"] {
        let k = env.ks.get(name).await.unwrap();
        let status = serde_json::to_string(&k.status).unwrap();
        assert!(
            !status.contains("s3cr3t") && !status.contains("hunter2"),
            "{status}"
        );
    }

    // 2. bad inputs
    let cases: [(&str, &str, &[&str]); 7] = [
        (
            "bad-nodecrypt",
            "ReconciliationFailed",
            &[
                "Secret/",
                "/bad-nodecrypt-db is SOPS encrypted, configuring decryption is required",
            ],
        ),
        (
            "bad-wrongkey",
            "BuildFailed",
            &[
                "decryption failed for 'Secret.v1.[noGrp]/bad-wrongkey-db'",
                "cannot get sops data key",
            ],
        ),
        ("bad-tampered", "BuildFailed", &[]),
        (
            "bad-mac",
            "BuildFailed",
            &["bad/mac/vars.enc.env", "MAC mismatch"],
        ),
        (
            "bad-truncated",
            "BuildFailed",
            &["bad/truncated/vars.enc.env"],
        ),
        (
            "bad-outside",
            "BuildFailed",
            &["../../../etc/vars.env", "out of the artifact root"],
        ),
        (
            "unsupported",
            "BuildFailed",
            &["sops.aws-kms", "AWS KMS", "not supported"],
        ),
    ];
    for (name, reason, needles) in cases {
        if name == "bad-tampered" {
            continue;
        }
        let k = env
            .wait_ks(name, &format!("{reason} {needles:?}"), |k| {
                failed_with(k, reason, needles)
            })
            .await;
        let msg = ready_message(&k);
        assert!(!msg.contains("s3cr3t") && !msg.contains("admin"), "{msg}");
    }
    // nothing of a failed Kustomization was applied
    for (name, _, _) in cases {
        if name.starts_with("bad-") && name != "bad-tampered" {
            let sentinel = format!("{name}-sentinel");
            assert!(
                env.cm(&sentinel).await.is_none(),
                "{name} applied {sentinel}"
            );
        }
    }
    // the failure is an event too, naming the object
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    let found = support::procs::wait_for(
        ks_env::TIMEOUT,
        "a Warning event naming the object",
        || async {
            let listed = events
                .list(&ListParams::default().fields("involvedObject.name=bad-wrongkey"))
                .await?;
            Ok(listed
                .items
                .iter()
                .any(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains("Secret.v1.[noGrp]/bad-wrongkey-db"))
                })
                .then_some(()))
        },
    )
    .await;
    if let Err(e) = found {
        let listed = events.list(&ListParams::default()).await.unwrap();
        let all: Vec<_> = listed
            .items
            .iter()
            .map(|e| {
                (
                    e.involved_object.name.clone(),
                    e.type_.clone(),
                    e.message.clone(),
                )
            })
            .collect();
        panic!("{e}: {all:#?}");
    }

    // the last good state is kept: bad-tampered was good at first; a tampered value fails it
    env.wait_ks("bad-tampered", "Ready with the good env file", |k| {
        ready_at(k, &rev)
    })
    .await;
    let before = secret_data(&secrets, "bad-tampered-gen").await;
    assert_eq!(before["DB_PASS"], b"p@ss=word");
    env.repo
        .write("bad/tampered/vars.enc.env", &tampered)
        .unwrap();
    let bad_rev = env.push("tamper a value").await;
    env.request("bad-tampered", json!({})).await;
    let k = env
        .wait_ks("bad-tampered", "BuildFailed on the tampered file", |k| {
            failed_with(
                k,
                "BuildFailed",
                &["bad/tampered/vars.enc.env", "Could not decrypt value"],
            ) && k
                .status
                .as_ref()
                .and_then(|s| s.last_attempted_revision.as_deref())
                == Some(bad_rev.as_str())
        })
        .await;
    assert_eq!(
        k.status
            .as_ref()
            .and_then(|s| s.last_applied_revision.as_deref()),
        Some(rev.as_str())
    );
    assert_eq!(
        secret_data(&secrets, "bad-tampered-gen").await,
        before,
        "the applied Secret changed"
    );
    // no plaintext in the controllers' logs (every failure above was logged)
    let logs = env.ctl.log_tails(100_000);
    for plain in ["s3cr3t", "hunter2", "t0k3n", "p@ss=word", "inside-a-secret"] {
        assert!(
            !logs.contains(plain),
            "the logs hold the plaintext '{plain}'"
        );
    }
}

/// The same document with one character of the first encrypted value's ciphertext changed.
fn tamper_value(doc: &str) -> String {
    let at = doc.find("ENC[AES256_GCM,data:").unwrap() + "ENC[AES256_GCM,data:".len();
    let mut bytes = doc.as_bytes().to_vec();
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap()
}
