//! The encrypted fixtures and one implementation's namespace, controllers and objects.

use std::path::Path;

use anyhow::Context;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, PostParams};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::flux::flux_bin_dir;
use rflux_e2e::{ControlPlane, TestRepo, free_ports};
use serde_json::json;

use crate::cluster::{Latest, create_namespace, follow};
use crate::procs::{Proc, wait_readyz};
use crate::{Args, LABEL, NAME, REV_ANNOTATION, sops_cli};

/// One implementation under test.
pub struct Side {
    pub name: String,
    pub ns: String,
    pub ks: Latest<Kustomization>,
    pub gr: Latest<GitRepository>,
    pub kc: Proc,
    pub _sc: Proc,
}

/// The Secret manifest `i` (before encryption).
fn secret_manifest(i: usize) -> String {
    let pw = rflux_e2e::random_suffix(32);
    let key = rflux_e2e::random_suffix(344);
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: app-{i:03}\n  labels:\n    app: app-{i:03}\n\
         type: Opaque\nstringData:\n  username: user-{i}\n  password: {pw}\n  config.yaml: |\n    \
         endpoint: https://svc-{i}.example.invalid\n    retries: 3\ndata:\n  tls.key: {key}\n"
    )
}

pub fn kustomization_yaml(n: usize, rev: usize) -> String {
    let resources: String = (0..n)
        .map(|i| format!("- secrets/app-{i:03}.enc.yaml\n"))
        .collect();
    format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         commonAnnotations:\n  {REV_ANNOTATION}: \"{rev}\"\nresources:\n{resources}"
    )
}

/// Encrypts `n` Secret manifests with the real sops CLI (two at a time) into the repository.
pub fn write_fixtures(
    repo: &TestRepo,
    n: usize,
    work: &Path,
    recipient: &str,
) -> anyhow::Result<()> {
    let tools = sops_cli::tools().context("the sops CLI is not built (e2e/sops/build.sh)")?;
    let regex = "^(data|stringData)$";
    let chunks: Vec<Vec<usize>> = (0..2).map(|w| (w..n).step_by(2).collect()).collect();
    let outputs: Vec<Vec<(usize, Vec<u8>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|idx| {
                let tools = &tools;
                s.spawn(move || {
                    idx.iter()
                        .map(|&i| {
                            let f = format!("app-{i:03}.yaml");
                            std::fs::write(work.join(&f), secret_manifest(i)).unwrap();
                            let args = ["--age", recipient, "--encrypted-regex", regex];
                            (i, tools.encrypt(work, &f, &args))
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, enc) in outputs.into_iter().flatten() {
        repo.write(
            &format!("secrets/app-{i:03}.enc.yaml"),
            std::str::from_utf8(&enc)?,
        )?;
    }
    repo.write("kustomization.yaml", &kustomization_yaml(n, 0))?;
    Ok(())
}

/// Namespace, key Secret, controllers, GitRepository and Kustomization of one implementation.
pub async fn start_side(
    args: &Args,
    client: &Client,
    cp: &ControlPlane,
    name: &str,
    url: &str,
    age_identity: &str,
    dir: &Path,
) -> anyhow::Result<Side> {
    let ns = format!("sops-{name}");
    create_namespace(client, &ns).await?;
    let labels = json!({ LABEL: name });
    let key: Secret = serde_json::from_value(json!({
        "metadata": {"name": "sops-age", "namespace": ns, "labels": labels},
        "stringData": {"identity.agekey": age_identity}
    }))?;
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &key)
        .await?;
    let flux_dir = args.flux_bin.clone().unwrap_or_else(flux_bin_dir);
    let (sc_bin, kc_bin) = match name {
        "flux" => (
            flux_dir.join("flux-source-controller"),
            flux_dir.join("flux-kustomize-controller"),
        ),
        _ => (
            args.ours_bin.join("source-controller"),
            args.ours_bin.join("kustomize-controller"),
        ),
    };
    let storage = dir.join(format!("storage-{name}"));
    std::fs::create_dir_all(&storage)?;
    let common = vec![
        "--watch-all-namespaces=true".to_string(),
        format!("--watch-label-selector={LABEL}={name}"),
        "--enable-leader-election=false".to_string(),
        format!("--concurrent={}", args.concurrent),
    ];
    let [sp] = free_ports::<1>()?;
    let mut sc_args = common.clone();
    sc_args.extend([
        format!("--storage-path={}", storage.display()),
        format!("--storage-addr=127.0.0.1:{sp}"),
        format!("--storage-adv-addr=127.0.0.1:{sp}"),
    ]);
    let mut kc_args = common;
    if name == "ours-notracker" {
        kc_args.push("--feature-gates=WatchAppliedObjects=false".into());
    }
    kc_args.extend(args.kc_args.split_whitespace().map(str::to_string));
    let kubeconfig = cp.kubeconfig_path();
    let (mut sc, sh) = Proc::start(
        &format!("{name}-source-controller"),
        &sc_bin,
        &sc_args,
        kubeconfig,
        dir,
    )?;
    let (mut kc, kh) = Proc::start(
        &format!("{name}-kustomize-controller"),
        &kc_bin,
        &kc_args,
        kubeconfig,
        dir,
    )?;
    wait_readyz(&mut sc, sh).await?;
    wait_readyz(&mut kc, kh).await?;
    let ks = follow::<Kustomization>(client, &ns);
    let gr = follow::<GitRepository>(client, &ns);
    let gr_obj: GitRepository = serde_json::from_value(json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": NAME, "namespace": ns, "labels": labels},
        "spec": {"url": url, "interval": "1h", "timeout": "60s", "ref": {"branch": "main"}}
    }))?;
    Api::<GitRepository>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &gr_obj)
        .await?;
    let ks_obj: Kustomization = serde_json::from_value(json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": NAME, "namespace": ns, "labels": labels},
        "spec": {"interval": "1h", "retryInterval": "1h", "timeout": "5m", "prune": true,
                 "path": "./", "targetNamespace": ns,
                 "sourceRef": {"kind": "GitRepository", "name": NAME},
                 "decryption": {"provider": "sops", "secretRef": {"name": "sops-age"}}}
    }))?;
    Api::<Kustomization>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &ks_obj)
        .await?;
    Ok(Side {
        name: name.to_string(),
        ns,
        ks,
        gr,
        kc,
        _sc: sc,
    })
}
