//! OCIRepository `spec.verify` (cosign with public keys) on the real control plane: artifacts
//! pushed by the real flux CLI and signed by the real cosign CLI (v3, `e2e/cosign/build.sh`)
//! in both its formats (the classic `.sig` tag and the Sigstore bundle referrer). A signed
//! artifact is accepted (`SourceVerified=True`); one signed by another key or not signed at all
//! is refused with Flux's condition and the previous artifact kept. Keyless and notation are
//! refused with a clear condition. Skipped, with the reason, when a binary is missing.

#![allow(clippy::unwrap_used)]

mod oci_common;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use oci_common::*;
use rflux_e2e::ControlPlane;
use rflux_e2e::registry::push::push_artifact;
use rflux_e2e::registry::{Registry, RegistryMode};
use serde_json::json;
use source_controller::ocirepository::OciSettings;

const SOURCE: &str = "https://git.example/signed.git";

fn cosign_bin() -> PathBuf {
    rflux_e2e::registry::registry_bin_dir().join("cosign")
}

fn skip() -> bool {
    let reason = rflux_e2e::registry::skip_reason()
        .or_else(|| {
            rflux_e2e::registry::push::flux_cli()
                .err()
                .map(|e| e.to_string())
        })
        .or_else(|| {
            (!cosign_bin().is_file()).then(|| {
                format!(
                    "{} is missing: run e2e/cosign/build.sh",
                    cosign_bin().display()
                )
            })
        });
    if let Some(r) = reason {
        eprintln!("skipped: {r}");
        return true;
    }
    false
}

/// Runs cosign offline in `dir` (its own HOME, no password on keys).
fn cosign(dir: &Path, args: &[&str]) {
    let out = Command::new(cosign_bin())
        .args(args)
        .current_dir(dir)
        .env("COSIGN_PASSWORD", "")
        .env("HOME", dir)
        .env("DOCKER_CONFIG", dir.join(".docker"))
        .env("TUF_ROOT", dir.join(".sigstore"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cosign {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn key_pair() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    cosign(dir.path(), &["generate-key-pair"]);
    dir
}

fn sign(keys: &Path, reference: &str, classic: bool) {
    let mut args = vec![
        "sign",
        "--key",
        "cosign.key",
        "--use-signing-config=false",
        "--tlog-upload=false",
        "--yes",
    ];
    if classic {
        args.push("--new-bundle-format=false");
    }
    args.push(reference);
    cosign(keys, &args);
}

#[tokio::test]
async fn cosign_signatures_gate_the_artifact() {
    if skip() {
        return;
    }
    let cp = ControlPlane::shared().await.unwrap();
    let _lock = support::lock_crds().await;
    let h = OciHarness::start(cp, "ociverify", OciSettings::default()).await;
    let reg = Registry::start(RegistryMode::Http).unwrap();
    let trusted = key_pair();
    let other = key_pair();
    let pub_key = std::fs::read_to_string(trusted.path().join("cosign.pub")).unwrap();
    let other_pub = std::fs::read_to_string(other.path().join("cosign.pub")).unwrap();
    h.secret("cosign-keys", "Opaque", json!({"cosign.pub": pub_key}))
        .await;
    h.secret("other-keys", "Opaque", json!({"other.pub": other_pub}))
        .await;

    let v1 = content_dir(&[("cm.yaml", "kind: ConfigMap\nmetadata: {name: v1}\n")]);
    let v2 = content_dir(&[("cm.yaml", "kind: ConfigMap\nmetadata: {name: v2}\n")]);
    let v3 = content_dir(&[("cm.yaml", "kind: ConfigMap\nmetadata: {name: v3}\n")]);
    let rev = |n: u8| format!("main@sha1:{}", format!("{n}").repeat(40));

    // Classic signature format.
    let classic = "signed/classic";
    let d1 = push_artifact(&reg, classic, "latest", v1.path(), SOURCE, &rev(1)).unwrap();
    sign(
        trusted.path(),
        &format!("{}/{classic}@{d1}", reg.host()),
        true,
    );
    // Bundle format (cosign v3's default).
    let bundle = "signed/bundle";
    let b1 = push_artifact(&reg, bundle, "latest", v1.path(), SOURCE, &rev(1)).unwrap();
    sign(
        trusted.path(),
        &format!("{}/{bundle}@{b1}", reg.host()),
        false,
    );

    let verify = json!({"verify": {"provider": "cosign", "secretRef": {"name": "cosign-keys"}}});
    h.create("classic", &reg.url(classic), verify.clone()).await;
    h.create("bundle", &reg.url(bundle), verify.clone()).await;
    for (name, d) in [("classic", &d1), ("bundle", &b1)] {
        let obj = h.wait_ready(name, &format!("latest@{d}")).await;
        let c = condition(&obj, "SourceVerified").unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "Succeeded")
        );
        assert_eq!(
            c.message,
            format!("verified signature of revision latest@{d}")
        );
    }

    // The wrong key: refused, nothing pulled.
    h.create(
        "wrong-key",
        &reg.url(classic),
        json!({"verify": {"provider": "cosign", "secretRef": {"name": "other-keys"}}}),
    )
    .await;
    let obj = h.wait_failed("wrong-key", "VerificationError").await;
    let c = condition(&obj, "SourceVerified").unwrap();
    assert_eq!(c.status, "False");
    assert_eq!(
        c.message,
        format!(
            "failed to verify the signature using provider 'cosign': no matching signatures were \
             found for '{}/{classic}@{d1}'",
            reg.host()
        )
    );
    assert!(
        obj.status.as_ref().unwrap().artifact.is_none(),
        "nothing was stored"
    );

    // A new unsigned push, then one signed by another key: both refused, the old artifact kept.
    let kept = h
        .api
        .get("classic")
        .await
        .unwrap()
        .status
        .unwrap()
        .artifact
        .unwrap();
    let d2 = push_artifact(&reg, classic, "latest", v2.path(), SOURCE, &rev(2)).unwrap();
    h.request("classic").await;
    let obj = h
        .wait("classic", "unsigned refused", |o| {
            condition(o, "SourceVerified").is_some_and(|c| c.status == "False")
        })
        .await;
    assert_eq!(
        condition(&obj, "Ready").unwrap().reason,
        "VerificationError"
    );
    assert_eq!(obj.status.as_ref().unwrap().artifact.as_ref(), Some(&kept));
    let d3 = push_artifact(&reg, classic, "latest", v3.path(), SOURCE, &rev(3)).unwrap();
    sign(
        other.path(),
        &format!("{}/{classic}@{d3}", reg.host()),
        true,
    );
    h.request("classic").await;
    let obj = h
        .wait("classic", "foreign signature refused", |o| {
            condition(o, "SourceVerified")
                .is_some_and(|c| c.status == "False" && c.message.contains(&d3))
        })
        .await;
    assert_eq!(obj.status.as_ref().unwrap().artifact.as_ref(), Some(&kept));
    let _ = d2;
    // Signed by the trusted key: accepted.
    sign(
        trusted.path(),
        &format!("{}/{classic}@{d3}", reg.host()),
        true,
    );
    h.request("classic").await;
    h.wait_ready("classic", &format!("latest@{d3}")).await;

    // Keyless and notation cannot work here: stalled, with the provider named.
    h.create(
        "keyless",
        &reg.url(classic),
        json!({"verify": {"provider": "cosign"}}),
    )
    .await;
    let obj = h
        .wait("keyless", "Stalled", |o| is_true(o, "Stalled"))
        .await;
    assert!(
        condition(&obj, "Ready")
            .unwrap()
            .message
            .starts_with("failed to verify the signature using provider 'cosign keyless':")
    );
    h.create(
        "notation",
        &reg.url(classic),
        json!({"verify": {"provider": "notation", "secretRef": {"name": "cosign-keys"}}}),
    )
    .await;
    let obj = h
        .wait("notation", "Stalled", |o| is_true(o, "Stalled"))
        .await;
    assert!(
        condition(&obj, "Ready")
            .unwrap()
            .message
            .starts_with("failed to verify the signature using provider 'notation':")
    );
    h.shutdown().await;
}
