//! The whole OCI loop with real binaries: a real registry (distribution, `e2e/registry/build.sh`),
//! the real `flux` CLI pushing to it and driving our controllers, and our `source-controller`
//! and `kustomize-controller` as PROCESSES (like `full_loop.rs` for Git). Nothing is patched by
//! hand.
//!
//! One test on the control plane `loop`, the controllers watching only this test's label:
//! 1. `flux push artifact` (tag `latest`) → our OCIRepository is Ready at `latest@sha256:<D1>`,
//!    its artifact served by our source-controller with the digest it claims;
//! 2. a Kustomization with `sourceRef.kind: OCIRepository` applies the objects (`wait: true`):
//!    `lastAppliedRevision` = the OCI revision, `lastAppliedOriginRevision` = the pushed
//!    `--revision`;
//! 3. `flux get sources oci` and `flux get kustomizations` print Flux's columns (NAME, REVISION
//!    truncated to 8 hex digits, SUSPENDED, READY, MESSAGE);
//! 4. a second push is NOT seen on its own (interval 10m), then `flux reconcile source oci`
//!    fetches it (the artifact is at the new digest when the command returns) and the
//!    Kustomization follows through its source watch;
//! 5. a third push, then `flux reconcile kustomization --with-source`: applied when it returns;
//! 6. `flux suspend source oci` / `flux resume source oci` (the SUSPENDED column);
//! 7. deleting the Kustomization prunes, deleting the OCIRepository removes its storage.
//!
//! The same object served by Flux's own source-controller, and the `flux get sources oci` rows
//! compared between Flux's and ours: `flux_interop_oci.rs` (`make interop`).
//!
//! Skipped, with the reason printed, when the registry or the flux CLI is missing. Needs the
//! controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams};
use rflux_common::api::kustomization::Kustomization;
use rflux_common::api::ocirepository::OciRepository;
use rflux_e2e::ControlPlane;
use rflux_e2e::flux::{CliOutput, FluxCli};
use rflux_e2e::registry::push::{flux_cli, push_artifact};
use rflux_e2e::registry::{Registry, RegistryMode};
use serde_json::json;
use sha2::{Digest as _, Sha256};
use support::procs::{
    ControllerOptions, Controllers, apply_value, install_crds, ks_condition, ks_ready, wait_for,
    wait_ks, wait_list_empty,
};

const TIMEOUT: Duration = Duration::from_secs(90);
const SOURCE: &str = "https://git.example/loop.git";
const REPO: &str = "apps/loop";

/// Why this test cannot run here, or `None`.
fn skip_reason() -> Option<String> {
    rflux_e2e::registry::skip_reason().or_else(|| flux_cli().err().map(|e| e.to_string()))
}

/// The origin revision of push `n` (what `flux push --revision` records).
fn origin(n: u32) -> String {
    format!("main@sha1:{n:040x}")
}

/// The pushed tree: a ConfigMap with `value` and a Deployment whose env is `value`, in `deploy/`.
fn write_content(dir: &Path, value: &str) {
    let deploy = dir.join("deploy");
    std::fs::create_dir_all(&deploy).unwrap();
    std::fs::write(
        deploy.join("config.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-config\ndata:\n  value: \"{value}\"\n"
        ),
    )
    .unwrap();
    std::fs::write(
        deploy.join("app.yaml"),
        format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  replicas: 1
  selector:
    matchLabels:
      app: app
  template:
    metadata:
      labels:
        app: app
    spec:
      containers:
      - name: app
        image: registry.invalid/app:1
        env:
        - name: MODE
          value: "{value}"
"#
        ),
    )
    .unwrap();
}

/// `flux push artifact` of a tree holding `value` to `<reg>/apps/loop:latest` (origin
/// revision [`origin`]`(n)`); returns the manifest digest.
async fn push(reg: &std::sync::Arc<Registry>, value: &str, n: u32) -> String {
    let reg = reg.clone();
    let value = value.to_string();
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        write_content(dir.path(), &value);
        push_artifact(&reg, REPO, "latest", dir.path(), SOURCE, &origin(n)).unwrap()
    })
    .await
    .unwrap()
}

/// Flux's `utils.TruncateHex` (regexp `\b[a-f0-9]{40,128}\b`): every word made only of 40 to
/// 128 lowercase hex digits is cut to its first 8.
fn truncate_hex(s: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let hex = word
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if hex && (40..=128).contains(&word.len()) {
            out.push_str(&word[..8]);
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// The CLI plus the test's namespace.
struct Cli {
    cli: FluxCli,
    ns: String,
}

impl Cli {
    async fn run(&self, args: &[&str]) -> CliOutput {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--namespace", self.ns.as_str()]);
        let out = self.cli.run_async(&all).await.unwrap();
        eprintln!("{out}");
        out
    }
}

/// The columns of the stdout row whose first column is `name` (a `flux get` table).
fn row_columns(out: &CliOutput, name: &str) -> Vec<String> {
    assert!(out.success(), "{out}");
    let header = out.stdout.lines().next().unwrap_or_default();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["NAME", "REVISION", "SUSPENDED", "READY", "MESSAGE"],
        "{out}"
    );
    let row = out
        .stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in:\n{out}"));
    // NAME REVISION SUSPENDED READY, then the message (which has spaces) as one column.
    let mut cols: Vec<String> = row.split_whitespace().take(4).map(str::to_string).collect();
    let msg: Vec<&str> = row.split_whitespace().skip(4).collect();
    cols.push(msg.join(" "));
    cols
}

fn oci_condition<'a>(
    o: &'a OciRepository,
    t: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    o.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == t)
}

fn oci_revision(o: &OciRepository) -> Option<&str> {
    Some(o.status.as_ref()?.artifact.as_ref()?.revision.as_str())
}

/// Waits until the OCIRepository is Ready=True at `revision`; panics with its status and the
/// controller logs otherwise.
async fn wait_oci_ready(
    api: &Api<OciRepository>,
    ctl: &Controllers,
    name: &str,
    revision: &str,
) -> OciRepository {
    let res = wait_for(
        TIMEOUT,
        &format!("OCIRepository Ready at {revision}"),
        || async {
            let o = api.get(name).await?;
            let ready = oci_condition(&o, "Ready").is_some_and(|c| c.status == "True");
            Ok((ready && oci_revision(&o) == Some(revision)).then_some(o))
        },
    )
    .await;
    match res {
        Ok(o) => o,
        Err(e) => {
            let status = api
                .get(name)
                .await
                .map(|o| serde_json::to_string_pretty(&o.status).unwrap_or_default())
                .unwrap_or_default();
            panic!("{e}\nstatus: {status}\n{}", ctl.log_tails(40))
        }
    }
}

async fn wait_applied(
    api: &Api<Kustomization>,
    ctl: &mut Controllers,
    revision: &str,
) -> Kustomization {
    wait_ks(
        api,
        ctl,
        TIMEOUT,
        "app",
        &format!("app applied at {revision}"),
        |ks| {
            ks_ready(ks)
                && ks
                    .status
                    .as_ref()
                    .and_then(|s| s.last_applied_revision.as_deref())
                    == Some(revision)
        },
    )
    .await
}

async fn cm_value(cms: &Api<ConfigMap>, name: &str) -> Option<String> {
    cms.get_opt(name)
        .await
        .ok()
        .flatten()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .and_then(|c| c.data)
        .and_then(|d| d.get("value").cloned())
}

/// GET `url` (our artifact server).
async fn download(url: &str) -> Vec<u8> {
    let resp = reqwest::get(url).await.unwrap();
    assert!(resp.status().is_success(), "GET {url}: {}", resp.status());
    resp.bytes().await.unwrap().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oci_full_loop_with_the_flux_cli_and_both_controller_processes() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let cp = ControlPlane::shared_named("loop").await.unwrap();
    let client: Client = cp.client().await.unwrap();
    install_crds(&client).await.unwrap();
    let ns = cp.create_namespace("oci-loop").await.unwrap();
    let mut ctl = Controllers::start(cp, ControllerOptions::default())
        .await
        .unwrap();
    let reg = std::sync::Arc::new(
        tokio::task::spawn_blocking(|| Registry::start(RegistryMode::Http))
            .await
            .unwrap()
            .unwrap(),
    );
    let cli = Cli {
        cli: FluxCli::new(&flux_cli().unwrap(), cp.kubeconfig_path()),
        ns: ns.clone(),
    };
    let repos: Api<OciRepository> = Api::namespaced(client.clone(), &ns);
    let ks_api: Api<Kustomization> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &ns);

    // 1. flux push → our OCIRepository is Ready at latest@D1.
    let d1 = push(&reg, "one", 1).await;
    let rev1 = format!("latest@{d1}");
    let url = reg.url(REPO);
    let mut oci = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
        "metadata": {"name": "loop", "namespace": ns},
        "spec": {"url": url, "interval": "10m", "timeout": "60s"}
    });
    ctl.label_object(&mut oci);
    let created = Instant::now();
    apply_value(&client, &oci, "e2e").await.unwrap();
    let obj = wait_oci_ready(&repos, &ctl, "loop", &rev1).await;
    println!(
        "measured: OCIRepository created -> Ready {:.2}s",
        created.elapsed().as_secs_f64()
    );
    let status = obj.status.clone().unwrap();
    let art = status.artifact.clone().unwrap();
    assert_eq!(
        oci_condition(&obj, "Ready").unwrap().message,
        format!("stored artifact for digest '{rev1}'")
    );
    let meta = art.metadata.clone().unwrap();
    assert_eq!(meta["org.opencontainers.image.source"], SOURCE);
    assert_eq!(meta["org.opencontainers.image.revision"], origin(1));
    assert!(
        art.url.starts_with(&format!(
            "http://{}/ocirepository/{ns}/loop/",
            ctl.storage_addr
        )),
        "served by our source-controller: {}",
        art.url
    );
    let bytes = download(&art.url).await;
    assert_eq!(
        format!("sha256:{:x}", Sha256::digest(&bytes)),
        art.digest,
        "the served artifact has the digest the status claims"
    );
    assert_eq!(art.size, Some(bytes.len() as i64));

    // 2. A Kustomization with sourceRef OCIRepository applies the objects.
    let mut ks = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "app", "namespace": ns},
        "spec": {"interval": "10m", "retryInterval": "5s", "timeout": "60s", "prune": true,
                 "wait": true, "path": "./deploy", "targetNamespace": ns,
                 "sourceRef": {"kind": "OCIRepository", "name": "loop"}}
    });
    ctl.label_object(&mut ks);
    apply_value(&client, &ks, "e2e").await.unwrap();
    let k = wait_applied(&ks_api, &mut ctl, &rev1).await;
    let st = k.status.clone().unwrap();
    assert_eq!(st.last_attempted_revision.as_deref(), Some(rev1.as_str()));
    assert_eq!(
        st.last_applied_origin_revision.as_deref(),
        Some(origin(1).as_str())
    );
    let ready = ks_condition(&k, "Ready").unwrap();
    assert_eq!(ready.reason, "ReconciliationSucceeded");
    assert_eq!(ready.message, format!("Applied revision: {rev1}"));
    assert_eq!(
        ks_condition(&k, "Healthy").map(|c| c.status.as_str()),
        Some("True")
    );
    assert_eq!(cm_value(&cms, "app-config").await.as_deref(), Some("one"));
    let inventory: Vec<String> = st
        .inventory
        .unwrap()
        .entries
        .iter()
        .map(|e| e.id.clone())
        .collect();
    assert_eq!(
        inventory,
        [
            format!("{ns}_app-config__ConfigMap"),
            format!("{ns}_app_apps_Deployment")
        ]
    );

    // 3. `flux get` prints our objects as it prints Flux's.
    let short1 = truncate_hex(&rev1);
    assert_eq!(short1.len(), "latest@sha256:".len() + 8, "{short1}");
    let out = cli.run(&["get", "sources", "oci"]).await;
    assert_eq!(
        row_columns(&out, "loop"),
        [
            "loop".to_string(),
            short1.clone(),
            "False".into(),
            "True".into(),
            format!("stored artifact for digest '{short1}'"),
        ]
    );
    let out = cli.run(&["get", "kustomizations"]).await;
    assert_eq!(
        row_columns(&out, "app"),
        [
            "app".to_string(),
            short1.clone(),
            "False".into(),
            "True".into(),
            format!("Applied revision: {short1}"),
        ]
    );
    let out = cli.run(&["get", "all"]).await;
    assert!(out.success(), "{out}");
    assert!(out.stdout.contains("ocirepository/loop"), "{out}");
    assert!(out.stdout.contains("kustomization/app"), "{out}");

    // 4. A new push is not seen until asked (interval 10m); `flux reconcile source oci` fetches it.
    let d2 = push(&reg, "two", 2).await;
    assert_ne!(d2, d1);
    let rev2 = format!("latest@{d2}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        oci_revision(&repos.get("loop").await.unwrap()),
        Some(rev1.as_str()),
        "the new push was picked up before it was asked for"
    );
    let pushed = Instant::now();
    let out = cli
        .run(&["reconcile", "source", "oci", "loop", "--timeout=2m"])
        .await;
    assert!(out.success(), "{out}");
    assert!(
        out.stderr.contains(&format!("fetched revision {rev2}")),
        "{out}"
    );
    // When the command returns, the artifact is already at the new digest (no polling here).
    let obj = repos.get("loop").await.unwrap();
    assert_eq!(oci_revision(&obj), Some(rev2.as_str()));
    assert_eq!(
        obj.status.unwrap().artifact.unwrap().metadata.unwrap()["org.opencontainers.image.revision"],
        origin(2)
    );
    // The Kustomization follows through its OCIRepository watch (its interval is 10m).
    wait_applied(&ks_api, &mut ctl, &rev2).await;
    println!(
        "measured: flux reconcile source oci -> Kustomization applied {:.2}s",
        pushed.elapsed().as_secs_f64()
    );
    assert_eq!(cm_value(&cms, "app-config").await.as_deref(), Some("two"));

    // 5. `flux reconcile kustomization --with-source`: the third push is applied when it returns.
    let d3 = push(&reg, "three", 3).await;
    let rev3 = format!("latest@{d3}");
    let out = cli
        .run(&[
            "reconcile",
            "kustomization",
            "app",
            "--with-source",
            "--timeout=2m",
        ])
        .await;
    assert!(out.success(), "{out}");
    assert!(
        out.stderr.contains(&format!("fetched revision {rev3}")),
        "{out}"
    );
    assert!(
        out.stderr.contains(&format!("applied revision {rev3}")),
        "{out}"
    );
    let k = ks_api.get("app").await.unwrap();
    let st = k.status.unwrap();
    assert_eq!(st.last_applied_revision.as_deref(), Some(rev3.as_str()));
    assert_eq!(
        st.last_applied_origin_revision.as_deref(),
        Some(origin(3).as_str())
    );
    assert_eq!(cm_value(&cms, "app-config").await.as_deref(), Some("three"));
    let env = deploys
        .get("app")
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers[0]
        .env
        .clone()
        .unwrap();
    assert_eq!(env[0].value.as_deref(), Some("three"));

    // 6. Suspend and resume the source through the CLI.
    let out = cli.run(&["suspend", "source", "oci", "loop"]).await;
    assert!(out.success(), "{out}");
    assert_eq!(repos.get("loop").await.unwrap().spec.suspend, Some(true));
    let out = cli.run(&["get", "sources", "oci"]).await;
    let short3 = truncate_hex(&rev3);
    assert_eq!(
        row_columns(&out, "loop")[1..3],
        [short3.clone(), "True".into()]
    );
    let out = cli.run(&["reconcile", "source", "oci", "loop"]).await;
    assert!(
        !out.success(),
        "a suspended source is not reconciled: {out}"
    );
    assert!(out.stderr.contains("resource is suspended"), "{out}");
    let out = cli
        .run(&["resume", "source", "oci", "loop", "--timeout=2m"])
        .await;
    assert!(out.success(), "{out}");
    let out = cli.run(&["get", "sources", "oci"]).await;
    assert_eq!(
        row_columns(&out, "loop")[1..4],
        [short3, "False".into(), "True".into()]
    );

    // 7. Deleting the Kustomization prunes; deleting the OCIRepository removes its storage.
    ks_api
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    wait_list_empty(&ks_api, &ctl, TIMEOUT, "Kustomization finalized").await;
    assert_eq!(cm_value(&cms, "app-config").await, None);
    let res = wait_for(TIMEOUT, "Deployment pruned", || async {
        Ok(deploys
            .get_opt("app")
            .await?
            .is_none_or(|d| d.metadata.deletion_timestamp.is_some())
            .then_some(()))
    })
    .await;
    if let Err(e) = res {
        panic!("{e}\n{}", ctl.log_tails(40));
    }
    let dir = ctl
        .storage
        .path()
        .join("ocirepository")
        .join(&ns)
        .join("loop");
    assert!(dir.is_dir(), "{} missing", dir.display());
    repos
        .delete("loop", &DeleteParams::default())
        .await
        .unwrap();
    wait_list_empty(&repos, &ctl, TIMEOUT, "OCIRepository finalized").await;
    assert!(
        !dir.exists(),
        "storage of a deleted OCIRepository is removed"
    );
    ctl.check_alive().unwrap();
    ctl.stop();
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    nss.delete(&ns, &DeleteParams::default()).await.unwrap();
}

#[test]
fn truncate_hex_is_fluxs() {
    let d = "a".repeat(64);
    assert_eq!(
        truncate_hex(&format!("latest@sha256:{d}")),
        "latest@sha256:aaaaaaaa"
    );
    assert_eq!(
        truncate_hex(&format!("stored artifact for digest 'latest@sha256:{d}'")),
        "stored artifact for digest 'latest@sha256:aaaaaaaa'"
    );
    // Shorter runs stay (39 digits), and so do upper-case ones and hex inside a longer word.
    let short = "b".repeat(39);
    assert_eq!(truncate_hex(&short), short);
    assert_eq!(truncate_hex(&"A".repeat(64)), "A".repeat(64));
    assert_eq!(truncate_hex(&format!("x{d}")), format!("x{d}"));
    assert_eq!(
        truncate_hex(&format!("main@sha1:{}", "c".repeat(40))),
        "main@sha1:cccccccc"
    );
}
