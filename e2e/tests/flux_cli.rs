//! The real `flux` CLI (flux2, built by e2e/flux/build.sh) against our controllers.
//!
//! Each test gets its own namespace on the control plane named `flux`, a repository on the test
//! git server, and our two controller binaries as processes that watch only the test's label.
//! The CLI talks to the cluster through KUBECONFIG, exactly as an operator's would. What each
//! command shows is checked against the cluster state our controllers produced.
#![allow(clippy::unwrap_used)]

mod flux_common;
mod support;

use std::time::Duration;

use flux_common::{Env, Impl, wait_for};
use rflux_e2e::flux::{Controller, FluxBinary, FluxCli, ensure_flux_binaries};

/// A running app: our controllers, the `flux` CLI, the Kustomization `demo` Ready at `sha`.
struct Running {
    env: Env,
    cli: FluxCli,
    sha: String,
    // Dropped last: the processes stop when the test ends (also on panic).
    _procs: Vec<Controller>,
}

async fn setup(prefix: &str) -> Running {
    let mut env = Env::new(prefix, false).await;
    let flux = tokio::task::spawn_blocking(|| ensure_flux_binaries(&[FluxBinary::Cli]))
        .await
        .unwrap()
        .unwrap();
    let cli = FluxCli::new(&flux[0], env.cp.kubeconfig_path());
    let sc = env.start_source_controller(Impl::Rflux);
    let kc = env.start_kustomize_controller(Impl::Rflux);
    env.create_app("demo", "./deploy").await;
    let sha = env.repo.head().unwrap();
    let started = std::time::Instant::now();
    env.wait_ks_applied("demo", &sha, Duration::from_secs(120))
        .await;
    eprintln!("demo Ready in {:.1?}", started.elapsed());
    Running {
        env,
        cli,
        sha,
        _procs: vec![sc, kc],
    }
}

impl Running {
    async fn flux(&self, args: &[&str]) -> rflux_e2e::flux::CliOutput {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--namespace", self.env.ns.as_str()]);
        let out = self.cli.run_async(&all).await.unwrap();
        eprintln!("{out}");
        out
    }

    /// The stdout line that starts with `name` (a `flux get` table row).
    fn row<'a>(out: &'a str, name: &str) -> &'a str {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row {name} in:\n{out}"))
    }
}

/// Asserts that a `flux get` command succeeded and that its `demo` row reads (NAME REVISION
/// SUSPENDED READY MESSAGE) revision `rev`, not suspended, ready; returns the row.
fn ready_row<'a>(out: &'a rflux_e2e::flux::CliOutput, rev: &str) -> &'a str {
    assert!(out.success(), "{out}");
    let row = Running::row(&out.stdout, "demo");
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1], rev, "{row}");
    assert_eq!(cols[2], "False", "{row}");
    assert_eq!(cols[3], "True", "{row}");
    row
}

#[tokio::test]
async fn flux_get_sources_and_kustomizations() {
    let r = setup("fluxcli-get").await;
    // `flux get` shortens the commit to 8 hex digits.
    let rev = format!("main@sha1:{}", &r.sha[..8]);

    let out = r.flux(&["get", "sources", "git"]).await;
    let row = ready_row(&out, &rev);
    assert!(
        row.contains(&format!("stored artifact for revision '{rev}'")),
        "{row}"
    );

    let out = r.flux(&["get", "kustomizations"]).await;
    let row = ready_row(&out, &rev);
    assert!(row.contains(&format!("Applied revision: {rev}")), "{row}");

    // `flux get all` lists both kinds.
    let out = r.flux(&["get", "all"]).await;
    assert!(out.success(), "{out}");
    assert!(out.stdout.contains("gitrepository/demo"), "{out}");
    assert!(out.stdout.contains("kustomization/demo"), "{out}");
}

#[tokio::test]
async fn flux_reconcile_with_source_and_failure() {
    let r = setup("fluxcli-rec").await;
    let new_sha = r.env.push_value("two");

    let out = r
        .flux(&[
            "reconcile",
            "kustomization",
            "demo",
            "--with-source",
            "--timeout=2m",
        ])
        .await;
    assert!(out.success(), "{out}");
    eprintln!("flux reconcile --with-source took {:.1?}", out.elapsed);
    // When the command returns, the new commit is already applied (no polling here).
    let ks = r.env.kustomizations().get("demo").await.unwrap();
    let st = ks.status.unwrap();
    assert_eq!(
        st.last_applied_revision.as_deref(),
        Some(format!("main@sha1:{new_sha}").as_str())
    );
    assert_eq!(r.env.cm_value("demo-a").await.as_deref(), Some("two"));
    assert!(out.stderr.contains("applied revision main@sha1:"), "{out}");

    // A broken path: the command fails (non-zero). Like Flux's controller, ours keeps
    // `Reconciling=True` (ProgressingWithRetry) while it retries, which kstatus reads as "in
    // progress", so the CLI waits until its --timeout (docs/flux-compat.md).
    r.env
        .patch_ks_spec("demo", serde_json::json!({"path": "./does-not-exist"}))
        .await;
    let out = r
        .flux(&["reconcile", "kustomization", "demo", "--timeout=20s"])
        .await;
    eprintln!("failing flux reconcile took {:.1?}", out.elapsed);
    assert!(!out.success(), "{out}");
    // `flux get` shows our failure with Flux's reason and message.
    let out = r.flux(&["get", "kustomizations", "demo"]).await;
    assert!(out.success(), "{out}");
    let row = Running::row(&out.stdout, "demo");
    assert_eq!(row.split_whitespace().nth(3), Some("False"), "{row}");
    assert!(row.contains("kustomization path not found"), "{row}");
    let ks = r.env.kustomizations().get("demo").await.unwrap();
    let ready = ks
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.reason, "ArtifactFailed");
    // The applied objects stay.
    assert_eq!(r.env.cm_value("demo-a").await.as_deref(), Some("two"));
}

#[tokio::test]
async fn flux_suspend_and_resume() {
    let r = setup("fluxcli-sus").await;
    let out = r.flux(&["suspend", "kustomization", "demo"]).await;
    assert!(out.success(), "{out}");
    let ks = r.env.kustomizations().get("demo").await.unwrap();
    assert_eq!(ks.spec.suspend, Some(true));
    let out = r.flux(&["get", "kustomizations"]).await;
    let row = Running::row(&out.stdout, "demo");
    assert_eq!(
        row.split_whitespace().nth(2),
        Some("True"),
        "SUSPENDED: {row}"
    );

    // A new commit reaches the source but a suspended Kustomization does not apply it, even
    // when asked to reconcile.
    let new_sha = r.env.push_value("three");
    let out = r.flux(&["reconcile", "source", "git", "demo"]).await;
    assert!(out.success(), "{out}");
    r.env
        .wait_source("demo", &new_sha, Duration::from_secs(30))
        .await;
    r.env.request_reconcile("demo").await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let ks = r.env.kustomizations().get("demo").await.unwrap();
    assert_eq!(
        ks.status.unwrap().last_applied_revision.as_deref(),
        Some(format!("main@sha1:{}", r.sha).as_str()),
        "suspended Kustomization was reconciled"
    );
    assert_eq!(r.env.cm_value("demo-a").await.as_deref(), Some("one"));
    // `flux reconcile` refuses a suspended object.
    let out = r.flux(&["reconcile", "kustomization", "demo"]).await;
    assert!(!out.success(), "{out}");
    assert!(out.stderr.contains("resource is suspended"), "{out}");

    // Resume waits until the object is reconciled and Ready.
    let out = r
        .flux(&["resume", "kustomization", "demo", "--timeout=2m"])
        .await;
    assert!(out.success(), "{out}");
    let ks = r.env.kustomizations().get("demo").await.unwrap();
    assert_ne!(ks.spec.suspend, Some(true));
    assert_eq!(
        ks.status.unwrap().last_applied_revision.as_deref(),
        Some(format!("main@sha1:{new_sha}").as_str())
    );
    assert_eq!(r.env.cm_value("demo-a").await.as_deref(), Some("three"));
}

#[tokio::test]
async fn flux_tree_lists_our_inventory() {
    let r = setup("fluxcli-tree").await;
    let ns = &r.env.ns;
    let out = r.flux(&["tree", "kustomization", "demo"]).await;
    assert!(out.success(), "{out}");
    let text = &out.stdout;
    assert!(text.contains(&format!("Kustomization/{ns}/demo")), "{out}");
    for obj in [
        format!("ConfigMap/{ns}/demo-a"),
        format!("ConfigMap/{ns}/demo-b"),
        format!("ServiceAccount/{ns}/demo"),
    ] {
        assert!(text.contains(&obj), "{obj} missing: {out}");
    }
    // One line per inventory entry, plus the root.
    let ks = r.env.kustomizations().get("demo").await.unwrap();
    let entries = ks.status.unwrap().inventory.unwrap().entries;
    assert_eq!(entries.len(), 3, "{entries:?}");
    assert_eq!(
        text.lines().filter(|l| !l.trim().is_empty()).count(),
        4,
        "{out}"
    );
}

#[tokio::test]
async fn flux_events_shows_our_events() {
    let r = setup("fluxcli-ev").await;
    // The success event is recorded after the status; wait for it to reach the API.
    let out = wait_for(Duration::from_secs(30), "the success event", || async {
        let out = r.flux(&["events", "--for", "Kustomization/demo"]).await;
        (out.success() && out.stdout.contains("ReconciliationSucceeded")).then_some(out)
    })
    .await;
    let text = &out.stdout;
    assert!(text.contains("Kustomization/demo"), "{out}");
    assert!(
        text.contains("Reconciliation finished in"),
        "Flux's success message: {out}"
    );
    // The change set event (Flux: reason Progressing, one line per object, the first on the
    // event's row and the rest on continuation rows).
    let ns = &r.env.ns;
    assert!(
        text.lines()
            .any(|l| l.contains("Progressing") && l.contains("Kustomization/demo")),
        "{out}"
    );
    for obj in [
        format!("ConfigMap/{ns}/demo-a created"),
        format!("ConfigMap/{ns}/demo-b created"),
        format!("ServiceAccount/{ns}/demo created"),
    ] {
        assert!(text.contains(&obj), "{obj}: {out}");
    }
    // Waiting for the source's first artifact is logged, not recorded as an event (as Flux).
    assert!(!text.contains("ArtifactFailed"), "{out}");
    // --for includes the source's events (GitRepository reason NewArtifact).
    assert!(
        text.lines()
            .any(|l| l.contains("NewArtifact") && l.contains("GitRepository/demo")),
        "{out}"
    );
}

#[tokio::test]
async fn flux_diff_and_build_against_our_objects() {
    let r = setup("fluxcli-diff").await;
    let ns = &r.env.ns;
    let dir = r.env.repo.path().join("deploy");
    let dir = dir.to_str().unwrap();

    let out = r
        .flux(&["build", "kustomization", "demo", "--path", dir])
        .await;
    assert!(out.success(), "{out}");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&out.stdout).unwrap();
    assert_eq!(docs.len(), 3, "{out}");
    for d in &docs {
        assert_eq!(
            d["metadata"]["namespace"], *ns,
            "targetNamespace applied: {d}"
        );
        assert_eq!(
            d["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"], "demo",
            "{d}"
        );
    }

    // What our controller applied is exactly what Flux would apply: no drift.
    let out = r
        .flux(&["diff", "kustomization", "demo", "--path", dir])
        .await;
    assert_eq!(out.code, Some(0), "{out}");
    assert!(!out.stdout.contains("drifted"), "{out}");

    // A local change shows up as drift on that one object (exit 1).
    let config = r.env.repo.path().join("deploy/config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("\"one\"", "\"local\"")).unwrap();
    let out = r
        .flux(&["diff", "kustomization", "demo", "--path", dir])
        .await;
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stdout
            .contains(&format!("ConfigMap/{ns}/demo-a drifted")),
        "{out}"
    );
    assert!(!out.stdout.contains("demo-b drifted"), "{out}");
}

#[tokio::test]
async fn flux_trace_stats_and_export() {
    let r = setup("fluxcli-trace").await;
    let ns = &r.env.ns;
    // trace: from an applied object to its Kustomization and source, through our labels.
    let out = r
        .flux(&["trace", "demo-a", "--kind=ConfigMap", "--api-version=v1"])
        .await;
    assert!(out.success(), "{out}");
    let text = &out.stdout;
    assert!(text.contains("Kustomization:"), "{out}");
    assert!(text.contains("demo"), "{out}");
    assert!(text.contains("GitRepository:"), "{out}");
    assert!(
        text.contains(&format!("main@sha1:{}", r.sha)),
        "applied and source revisions: {out}"
    );

    // stats: one ready GitRepository and one ready Kustomization in the namespace.
    let out = r.flux(&["stats"]).await;
    assert!(out.success(), "{out}");
    let row = |kind: &str| -> Vec<String> {
        out.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(kind))
            .unwrap_or_else(|| panic!("no {kind} row: {out}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    // RECONCILERS RUNNING FAILING SUSPENDED STORAGE
    assert_eq!(row("GitRepository")[1..4], ["1", "0", "0"], "{out}");
    assert_eq!(row("Kustomization")[1..4], ["1", "0", "0"], "{out}");

    // export: the object as YAML, without status, readable back.
    let out = r.flux(&["export", "kustomization", "demo"]).await;
    assert!(out.success(), "{out}");
    let doc: serde_json::Value = serde_saphyr::from_str(&out.stdout).unwrap();
    assert_eq!(doc["kind"], "Kustomization");
    assert_eq!(doc["metadata"]["namespace"], *ns);
    assert_eq!(doc["spec"]["path"], "./deploy");
    assert!(doc.get("status").is_none(), "{out}");
}
