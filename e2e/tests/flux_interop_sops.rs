//! SOPS decryption interop with Flux's own kustomize-controller (v1.9.x, built from the Go
//! module proxy by e2e/flux/build.sh): one git repository of SOPS fixtures, encrypted at test
//! time by the real `sops` CLI, reconciled by Flux's controllers in one namespace and by ours
//! in another, with the same decryption Secret (`*.agekey` + `*.asc`). Every Secret of the
//! Kustomization's inventory must hold byte-identical `data` on both sides.
//!
//! The fixtures, in three directories (`age/` for the age key only, `pgp/` for the OpenPGP key
//! only, `both/` for both; `both/` keeps the generator's name hash, so the hash of the decrypted
//! data is compared too):
//! - a YAML and a JSON Secret object encrypted with `--encrypted-regex '^(data|stringData)$'`;
//! - a secretGenerator with YAML, JSON, INI and binary files and a dotenv env file, each with
//!   the awkward parts of its format (comments, block scalars, YAML 1.1 values, HTML escapes
//!   in JSON, a DEFAULT INI section, bytes that are not UTF-8);
//! - a plain Secret whose `data` values are base64 SOPS documents (dotenv, YAML, JSON, INI),
//!   and the same Secret opted out with `kustomize.toolkit.fluxcd.io/decrypt: Disabled`.
//!
//! Slow (Flux's binaries, four controller processes), so it runs only with `RFLUX_INTEROP=1`
//! (`make interop`); otherwise it prints a note and passes.
#![allow(clippy::unwrap_used)]

mod flux_common;
#[path = "../../sops/tests/common/mod.rs"]
mod sops_cli;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use flux_common::{Env, Impl, TEST_LABEL, interop_enabled as enabled, ready_status};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(240);
const NAME: &str = "sops";
const KEY_SECRET: &str = "sops-keys";

/// A generator input: key in the Secret, file in the repository, sops type, plaintext.
struct Input {
    key: &'static str,
    file: &'static str,
    sops_type: &'static str,
    plain: &'static [u8],
}

const CONFIG_YAML: &str = r#"# database settings
database:
  host: db.internal # inline comment
  port: 5432
  replicas: [a, b]
  users:
    - name: admin
      roles: [read, write]
    - name: "yes"
      roles: []
# a block scalar
motd: |
  line one
  line two
folded: >
  folded text
  continues
quoted: "n"
empty:
tilde: ~
octal: 0755
date: 2024-01-01
long: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa bbb ccc"
unicode: "héllo ✓"
enabled: true
ratio: 0.5
---
second: document
"#;

const SETTINGS_JSON: &[u8] = br#"{"token": "t0k3n", "retries": 3, "nested": {"on": false, "list": [1, 2.5, "x", null, true]}, "html": "<b>&</b>", "unicode": "h\u00e9llo", "big": 12345678901234, "float": 1e21, "small": 0.000001, "empty": {}, "emptylist": []}"#;

const APP_INI: &[u8] = b"; top comment\nglobal = yes\n\n[server]\nhost = example.invalid\nport = 8443\n; comment in section\nname = a value with spaces\n\n[auth]\nsecret = hunter2\ntoken=abc=def\n";

const BLOB_BIN: &[u8] = b"raw bytes \x01 \xff\xfe not utf-8\n";

const VARS_ENV: &[u8] =
    b"# a comment\nDB_USER=admin\nDB_PASS=p@ss=word\nQUOTED=\"with quotes\"\nEMPTY=\n";

const INPUTS: [Input; 5] = [
    Input {
        key: "config.yaml",
        file: "config.enc.yaml",
        sops_type: "yaml",
        plain: CONFIG_YAML.as_bytes(),
    },
    Input {
        key: "settings.json",
        file: "settings.enc.json",
        sops_type: "json",
        plain: SETTINGS_JSON,
    },
    Input {
        key: "app.ini",
        file: "app.enc.ini",
        sops_type: "ini",
        plain: APP_INI,
    },
    Input {
        key: "blob.bin",
        file: "blob.enc.bin",
        sops_type: "binary",
        plain: BLOB_BIN,
    },
    // the env file of the generator (its key is only used for the data-doc Secret)
    Input {
        key: "app.env",
        file: "vars.enc.env",
        sops_type: "dotenv",
        plain: VARS_ENV,
    },
];

/// Data keys of the `doc` Secret and the generator input whose encrypted text they hold.
const DATA_DOCS: [(&str, &str); 4] = [
    ("app.env", "vars.enc.env"),
    ("conf.yaml", "config.enc.yaml"),
    ("conf.json", "settings.enc.json"),
    ("conf.ini", "app.enc.ini"),
];

const SECRET_YAML: &[u8] = b"apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  labels:\n    app: demo\ntype: Opaque\nstringData:\n  user: admin\n  password: s3cr3t\n  multi: |\n    line1\n    line2\ndata:\n  token: dG9rZW4=\n";

const SECRET_JSON: &[u8] = br#"{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-json"}, "stringData": {"password": "from-json", "html": "<a&b>"}, "data": {"bin": "AAEC/w=="}}"#;

/// The fixture directories and which keys their files are encrypted for.
const DIRS: [(&str, bool, bool); 3] = [
    ("age", true, false),
    ("pgp", false, true),
    ("both", true, true),
];

/// `sops encrypt` of `plain` (written to `work/<name>`) as `sops_type`, for the chosen keys.
#[allow(clippy::too_many_arguments)]
fn encrypt(
    tools: &sops_cli::Tools,
    work: &Path,
    name: &str,
    plain: &[u8],
    sops_type: &str,
    age: Option<&str>,
    pgp: Option<&sops_cli::PgpKey>,
    extra: &[&str],
) -> Vec<u8> {
    std::fs::write(work.join(name), plain).unwrap();
    let mut args = vec!["--input-type", sops_type, "--output-type", sops_type];
    if let Some(r) = age {
        args.extend(["--age", r]);
    }
    if let Some(k) = pgp {
        args.extend(["--pgp", k.fingerprint.as_str()]);
    }
    args.extend_from_slice(extra);
    tools.encrypt_with(work, name, &args, pgp.map(|k| k.home.as_path()))
}

fn dir_kustomization(dir: &str, hash: bool) -> String {
    let options = if hash {
        String::new()
    } else {
        "  options: {disableNameSuffixHash: true}\n".to_string()
    };
    let files: String = INPUTS
        .iter()
        .filter(|i| i.sops_type != "dotenv")
        .map(|i| format!("  - {}={}\n", i.key, i.file))
        .collect();
    format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamePrefix: {dir}-\n\
         resources: [secret.enc.yaml, secret.enc.json, data-doc.yaml]\n\
         secretGenerator:\n- name: gen\n{options}  files:\n{files}  envs: [vars.enc.env]\n"
    )
}

fn data_doc(encrypted: &BTreeMap<&str, Vec<u8>>) -> String {
    let data: String = DATA_DOCS
        .iter()
        .map(|(key, file)| format!("  {key}: {}\n", STANDARD.encode(&encrypted[file])))
        .collect();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: doc\ndata:\n{data}---\n\
         apiVersion: v1\nkind: Secret\nmetadata:\n  name: opted-out\n  annotations:\n    \
         kustomize.toolkit.fluxcd.io/decrypt: Disabled\ndata:\n{data}"
    )
}

/// Creates the GitRepository and the Kustomization `sops` (path `./sops`, with
/// `spec.decryption`) in `env`'s namespace, both carrying the test's label.
async fn create_sops_app(env: &Env, url: &str) {
    let labels = json!({ TEST_LABEL: env.run });
    let gr: GitRepository = serde_json::from_value(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": NAME, "namespace": env.ns, "labels": labels},
        "spec": {"url": url, "interval": "10m", "timeout": "30s", "ref": {"branch": "main"}}
    }))
    .unwrap();
    env.gitrepositories()
        .create(&PostParams::default(), &gr)
        .await
        .unwrap();
    let ks: Kustomization = serde_json::from_value(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": NAME, "namespace": env.ns, "labels": labels},
        "spec": {"interval": "10m", "retryInterval": "20s", "timeout": "2m", "prune": true,
                 "path": "./sops", "targetNamespace": env.ns,
                 "sourceRef": {"kind": "GitRepository", "name": NAME},
                 "decryption": {"provider": "sops", "secretRef": {"name": KEY_SECRET}}}
    }))
    .unwrap();
    let created = env
        .kustomizations()
        .create(&PostParams::default(), &ks)
        .await
        .unwrap();
    assert!(
        created.spec.decryption.is_some(),
        "the API server dropped spec.decryption: the Kustomization CRD on the control plane \
         \"flux\" is too old (stop it: rflux-e2e down --name flux)"
    );
}

/// The decryption Secret: the age identity and the armored OpenPGP secret key.
async fn create_key_secret(env: &Env, age_identity: &str, pgp_armored: &str) {
    let s: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": KEY_SECRET, "namespace": env.ns,
                     "labels": { TEST_LABEL: env.run }},
        "stringData": {"identity.agekey": age_identity, "private.asc": pgp_armored}
    }))
    .unwrap();
    Api::<Secret>::namespaced(env.client.clone(), &env.ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

/// Waits until the Kustomization is Ready=True at `rev`; on timeout panics with its status
/// and the controller logs.
async fn wait_applied(env: &Env, rev: &str) -> Kustomization {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let ks = env.kustomizations().get(NAME).await.unwrap();
        let at = ks
            .status
            .as_ref()
            .and_then(|s| s.last_applied_revision.as_deref())
            == Some(rev);
        if at && ready_status(&ks).as_deref() == Some("True") {
            return ks;
        }
        if Instant::now() > deadline {
            panic!(
                "{}: Kustomization {NAME} not Ready at {rev} after {TIMEOUT:?}; status:\n{}\n{}",
                env.ns,
                serde_json::to_string_pretty(&ks.status).unwrap(),
                env.logs_tail(40)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The name a Secret is compared under: `both-gen-<hash>` → `both-gen` (the hash is compared
/// through the inventory).
fn stable_name(name: &str) -> String {
    match name.strip_prefix("both-gen-") {
        Some(_) => "both-gen".to_string(),
        None => name.to_string(),
    }
}

/// The Secrets of the Kustomization's inventory: (inventory ids with the namespace replaced by
/// `NS`, Secrets by stable name).
async fn inventory_secrets(
    env: &Env,
    ks: &Kustomization,
) -> (BTreeSet<String>, BTreeMap<String, Secret>) {
    let entries = &ks
        .status
        .as_ref()
        .unwrap()
        .inventory
        .as_ref()
        .unwrap()
        .entries;
    let api: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    let mut ids = BTreeSet::new();
    let mut secrets = BTreeMap::new();
    for e in entries {
        ids.insert(format!("{} {}", e.id.replace(&env.ns, "NS"), e.v));
        let parts: Vec<&str> = e.id.split('_').collect();
        if let [ns, name, "", "Secret"] = parts.as_slice() {
            assert_eq!(*ns, env.ns, "inventory entry {}", e.id);
            let s = api.get(name).await.unwrap();
            secrets.insert(stable_name(name), s);
        }
    }
    (ids, secrets)
}

fn data_of(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    s.data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}

fn show(b: &[u8]) -> String {
    format!("\"{}\" ({} bytes)", b.escape_ascii(), b.len())
}

#[tokio::test]
async fn flux_and_rflux_decrypt_the_same_secret_bytes() {
    if !enabled("flux_and_rflux_decrypt_the_same_secret_bytes") {
        return;
    }
    let Some(tools) = sops_cli::tools() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let Some(pgp) = sops_cli::pgp_key() else {
        return;
    };
    let age = tools.age_key(w);
    let regex = ["--encrypted-regex", "^(data|stringData)$"];

    // The fixtures: one directory per key choice, under ./sops.
    let mut files: Vec<(String, Vec<u8>)> = vec![(
        "sops/kustomization.yaml".into(),
        b"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [age, pgp, both]\n"
            .to_vec(),
    )];
    for (dir, with_age, with_pgp) in DIRS {
        let a = with_age.then_some(age.recipient.as_str());
        let p = with_pgp.then_some(&pgp);
        let mut encrypted: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
        for i in &INPUTS {
            let enc = encrypt(&tools, w, i.key, i.plain, i.sops_type, a, p, &[]);
            encrypted.insert(i.file, enc);
        }
        let secret_yaml = encrypt(&tools, w, "secret.yaml", SECRET_YAML, "yaml", a, p, &regex);
        let secret_json = encrypt(&tools, w, "secret.json", SECRET_JSON, "json", a, p, &regex);
        files.push((format!("sops/{dir}/secret.enc.yaml"), secret_yaml));
        files.push((format!("sops/{dir}/secret.enc.json"), secret_json));
        files.push((
            format!("sops/{dir}/data-doc.yaml"),
            data_doc(&encrypted).into_bytes(),
        ));
        files.push((
            format!("sops/{dir}/kustomization.yaml"),
            dir_kustomization(dir, dir == "both").into_bytes(),
        ));
        for (file, enc) in encrypted {
            files.push((format!("sops/{dir}/{file}"), enc));
        }
    }
    // What `sops decrypt` prints for each document (from the age-only copies), shown next to
    // a difference.
    let mut reference: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for i in &INPUTS {
        let (_, enc) = files
            .iter()
            .find(|(p, _)| p == &format!("sops/age/{}", i.file))
            .unwrap();
        std::fs::write(w.join(i.file), enc).unwrap();
        let t = ["--input-type", i.sops_type, "--output-type", i.sops_type];
        let plain = tools.decrypt(w, i.file, &age.identity, &t).unwrap();
        reference.insert(i.file.to_string(), plain);
    }
    let reference_of = |key: &str| -> Option<&Vec<u8>> {
        let file = INPUTS
            .iter()
            .find(|i| i.key == key && i.sops_type != "dotenv")
            .map(|i| i.file)
            .or_else(|| DATA_DOCS.iter().find(|(k, _)| *k == key).map(|(_, f)| *f))?;
        reference.get(file)
    };

    // Namespace A: Flux's controllers. Namespace B: ours. Same repository, same keys.
    let mut a = Env::new("interop-sops-flux", true).await;
    let mut b = Env::new("interop-sops-rflux", true).await;
    for (path, bytes) in &files {
        let full = a.repo.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, bytes).unwrap();
    }
    let sha = a.repo.commit("sops fixtures").unwrap();
    a.repo.push("main").unwrap();
    let rev = format!("main@sha1:{}", sha.trim());
    let url = a.git.http_url(a.repo.name());
    for env in [&a, &b] {
        create_key_secret(env, &age.identity, &pgp.armored_secret).await;
    }
    let _procs = [
        a.start_source_controller(Impl::Flux),
        a.start_kustomize_controller(Impl::Flux),
        b.start_source_controller(Impl::Rflux),
        b.start_kustomize_controller(Impl::Rflux),
    ];
    create_sops_app(&a, &url).await;
    create_sops_app(&b, &url).await;
    let flux_ks = wait_applied(&a, &rev).await;
    let ours_ks = wait_applied(&b, &rev).await;

    let (flux_ids, flux) = inventory_secrets(&a, &flux_ks).await;
    let (ours_ids, ours) = inventory_secrets(&b, &ours_ks).await;
    eprintln!(
        "inventory (Flux): {flux_ids:#?}\nSecrets compared: {:?}",
        flux.keys().collect::<Vec<_>>()
    );
    let mut diffs = Vec::new();
    if flux_ids != ours_ids {
        diffs.push(format!(
            "inventory: only Flux {:?}; only ours {:?}",
            flux_ids.difference(&ours_ids).collect::<Vec<_>>(),
            ours_ids.difference(&flux_ids).collect::<Vec<_>>()
        ));
    }
    // The fixtures were decrypted at all (on Flux's side), so the comparison means something.
    for dir in ["age", "pgp"] {
        let db = data_of(&flux[&format!("{dir}-db")]);
        assert_eq!(db["password"], b"s3cr3t", "Flux did not decrypt {dir}-db");
        let generated = data_of(&flux[&format!("{dir}-gen")]);
        assert_eq!(
            generated["DB_PASS"], b"p@ss=word",
            "Flux did not decrypt {dir}-gen"
        );
    }
    assert_eq!(
        flux.len(),
        15,
        "Secrets in Flux's inventory: {:?}",
        flux.keys()
    );
    // For the record: which decrypted documents are byte for byte what `sops decrypt` prints.
    for (secret, keys) in [
        (
            "age-gen",
            ["config.yaml", "settings.json", "app.ini", "blob.bin"],
        ),
        ("age-doc", ["app.env", "conf.yaml", "conf.json", "conf.ini"]),
    ] {
        let d = data_of(&flux[secret]);
        let same: Vec<String> = keys
            .iter()
            .map(|k| format!("{k}={}", d.get(*k) == reference_of(k)))
            .collect();
        eprintln!(
            "Flux's {secret} equal to `sops decrypt`: {}",
            same.join(" ")
        );
    }
    for name in flux.keys().chain(ours.keys()).collect::<BTreeSet<_>>() {
        let (Some(f), Some(o)) = (flux.get(name), ours.get(name)) else {
            diffs.push(format!("Secret {name}: present only on one side"));
            continue;
        };
        if f.type_ != o.type_ {
            diffs.push(format!(
                "Secret {name}: type flux={:?} rflux={:?}",
                f.type_, o.type_
            ));
        }
        let (fd, od) = (data_of(f), data_of(o));
        for key in fd.keys().chain(od.keys()).collect::<BTreeSet<_>>() {
            let (fv, ov) = (fd.get(key), od.get(key));
            if fv == ov {
                continue;
            }
            let mut d = format!(
                "Secret {name} data[{key}]:\n  flux:  {}\n  rflux: {}",
                fv.map_or("<absent>".into(), |v| show(v)),
                ov.map_or("<absent>".into(), |v| show(v))
            );
            if let Some(r) = reference_of(key) {
                d.push_str(&format!(
                    "\n  sops decrypt: {} (flux {}, rflux {})",
                    show(r),
                    if fv == Some(r) { "equal" } else { "differs" },
                    if ov == Some(r) { "equal" } else { "differs" },
                ));
            }
            diffs.push(d);
        }
    }
    // Same Ready condition (the revision is the same commit).
    let ready = |ks: &Kustomization| {
        let c = ks
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready").cloned());
        c.map(|c| (c.status, c.reason, c.message))
    };
    if ready(&flux_ks) != ready(&ours_ks) {
        diffs.push(format!(
            "Ready condition: flux={:?} rflux={:?}",
            ready(&flux_ks),
            ready(&ours_ks)
        ));
    }
    assert!(
        diffs.is_empty(),
        "{} difference(s) between Flux and rflux:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}
