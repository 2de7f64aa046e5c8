//! `kustomize-controller build --decrypt-key`: a user decrypts locally what the controller will
//! apply, with a key file, from a tree encrypted by the real `sops` CLI (age and OpenPGP).
#![allow(clippy::unwrap_used)]

#[path = "../../sops/tests/common/mod.rs"]
mod sops_cli;

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_kustomize-controller");

#[test]
fn build_decrypts_with_a_local_key_file() {
    let Some(tools) = sops_cli::tools() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let Some(pgp) = sops_cli::pgp_key() else {
        return;
    };
    let age = tools.age_key(t.path());
    let dir = t.path().join("app");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        t.path().join("secret.yaml"),
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: s3cr3t\n",
    )
    .unwrap();
    std::fs::write(t.path().join("vars.env"), "TOKEN=t0k3n\n").unwrap();
    for (src, dst, kind, extra) in [
        (
            "secret.yaml",
            "secret.enc.yaml",
            "yaml",
            &["--encrypted-regex", "^(data|stringData)$"][..],
        ),
        ("vars.env", "vars.enc.env", "dotenv", &[][..]),
    ] {
        let mut args = vec![
            "--input-type",
            kind,
            "--output-type",
            kind,
            "--age",
            &age.recipient,
        ];
        args.extend(["--pgp", pgp.fingerprint.as_str()]);
        args.extend_from_slice(extra);
        let enc = tools.encrypt_with(t.path(), src, &args, Some(&pgp.home));
        std::fs::write(dir.join(dst), enc).unwrap();
    }
    std::fs::write(
        dir.join("kustomization.yaml"),
        "resources: [secret.enc.yaml]\nsecretGenerator:\n- name: vars\n  envs: [vars.enc.env]\n  options: {disableNameSuffixHash: true}\n",
    )
    .unwrap();
    let age_file = t.path().join("age.txt");
    std::fs::write(&age_file, &age.identity).unwrap();
    let pgp_file = t.path().join("key.asc");
    std::fs::write(&pgp_file, &pgp.armored_secret).unwrap();

    for key in [&age_file, &pgp_file] {
        let out = Command::new(BIN)
            .arg("build")
            .arg(&dir)
            .arg("--decrypt-key")
            .arg(key)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("password: s3cr3t"), "{stdout}");
        // TOKEN=t0k3n, base64
        assert!(stdout.contains("TOKEN: dDBrM24="), "{stdout}");
        assert!(!stdout.contains("sops:"), "{stdout}");
    }
    // a file that holds no key is refused, naming it
    let out = Command::new(BIN)
        .arg("build")
        .arg(&dir)
        .arg("--decrypt-key")
        .arg(t.path().join("secret.yaml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("secret.yaml"), "{stderr}");
    // and a wrong key fails on the first encrypted file, naming it
    let other = tools.age_key(t.path());
    let other_file = t.path().join("other.txt");
    std::fs::write(&other_file, &other.identity).unwrap();
    let out = Command::new(BIN)
        .arg("build")
        .arg(&dir)
        .arg("--decrypt-key")
        .arg(&other_file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("vars.enc.env") && stderr.contains("cannot get sops data key"),
        "{stderr}"
    );
}
