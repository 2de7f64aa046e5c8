//! Flux feature gates of kustomize-controller that act or are refused, with both controller
//! processes on the shared control plane and repositories on the real git server
//! (common/src/runtime/flags.rs, kustomize-controller/src/main.rs, reconcile/triggers.rs,
//! config_watch.rs):
//! 1. gates whose Flux behaviour is not implemented stop the controllers at start-up;
//! 2. `CancelHealthCheckOnNewRevision=true`: a fixing commit cancels a running health check
//!    (without the gate the check goes on until its timeout);
//! 3. config watchers: a change of a labelled ConfigMap used by `substituteFrom` reconciles
//!    the Kustomization at once (not with `DisableConfigWatchers=true`).
//!
//! By default: the start-up refusals and the config watcher (a few seconds each). With
//! `RFLUX_FAULTS=1` also the health-check cancellation and `DisableConfigWatchers=true`: they
//! wait 20 s to show that nothing happens without the gate. Times are printed (measured, not
//! asserted).
//!
//! Needs the controller binaries built: `cargo build -p source-controller -p kustomize-controller`.
#![allow(clippy::unwrap_used)]

mod ks_env;
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use ks_env::{Env, TIMEOUT, ready_at, ready_message};
use kube::api::{Api, ListParams, Patch, PatchParams};
use rflux_e2e::ControlPlane;
use serde_json::json;
use support::procs::{Binaries, apply_value, ks_ready, wait_for};

/// Whether the slower gate tests run (`RFLUX_FAULTS=1`); prints why not when they do not.
fn slow_enabled(test: &str) -> bool {
    let on = std::env::var("RFLUX_FAULTS").is_ok_and(|v| !v.is_empty() && v != "0");
    if !on {
        eprintln!("skipping {test}: it waits 20 s to show an absence; runs with RFLUX_FAULTS=1");
    }
    on
}

/// Runs `program` with `args` (and a kubeconfig for the shared control plane); waits up to
/// `wait` for it to exit. Returns the exit status, the time it took and its output.
fn run_refused(
    cp: &ControlPlane,
    program: &std::path::Path,
    args: &[String],
    wait: Duration,
) -> (Option<std::process::ExitStatus>, Duration, String) {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.log");
    let out = std::fs::File::create(&out_path).unwrap();
    let port = || rflux_e2e::free_port().unwrap();
    let mut all = vec![
        format!("--metrics-addr=127.0.0.1:{}", port()),
        format!("--health-addr=127.0.0.1:{}", port()),
        "--enable-leader-election=false".to_string(),
    ];
    all.extend(args.iter().cloned());
    let t = Instant::now();
    let mut child = Command::new(program)
        .args(&all)
        .env("KUBECONFIG", cp.kubeconfig_path())
        .env("RUNTIME_NAMESPACE", "default")
        .env("TMPDIR", dir.path())
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t.elapsed() > wait {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let elapsed = t.elapsed();
    (
        status,
        elapsed,
        std::fs::read_to_string(&out_path).unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_gates_are_refused_at_start_up() {
    let cp = ControlPlane::shared().await.unwrap();
    let bins = Binaries::ours();
    for bin in [&bins.kustomize, &bins.source] {
        assert!(
            bin.is_file(),
            "{} is missing: build it first",
            bin.display()
        );
    }
    let storage = tempfile::tempdir().unwrap();
    let source_extra = vec![
        format!("--storage-path={}", storage.path().display()),
        format!(
            "--storage-addr=127.0.0.1:{}",
            rflux_e2e::free_port().unwrap()
        ),
    ];
    let cases: Vec<(&std::path::Path, &str, Vec<String>)> = vec![
        (&bins.kustomize, "CacheSecretsAndConfigMaps=true", vec![]),
        (&bins.kustomize, "MigrateAPIVersion=true", vec![]),
        (
            &bins.source,
            "ObjectLevelWorkloadIdentity=true",
            source_extra.clone(),
        ),
    ];
    for (program, gate, extra) in cases {
        let mut args = vec![format!("--feature-gates={gate}")];
        args.extend(extra);
        let (status, took, output) = run_refused(cp, program, &args, Duration::from_secs(20));
        let name = program.file_name().unwrap().to_string_lossy().into_owned();
        println!("{name} --feature-gates={gate}: {status:?} after {took:?}");
        let status =
            status.unwrap_or_else(|| panic!("{name} with {gate} still runs after 20 s:\n{output}"));
        assert!(!status.success(), "{name} with {gate} exited 0:\n{output}");
        let expected = format!("feature gate {gate} is not supported");
        assert!(
            output.contains(&expected),
            "{name} with {gate}: no {expected:?} in:\n{output}"
        );
    }
    // The same gates at their default values start fine (the refusal is about the value).
    let (status, took, output) = run_refused(
        cp,
        &bins.kustomize,
        &["--feature-gates=CacheSecretsAndConfigMaps=false,MigrateAPIVersion=false".into()],
        Duration::from_secs(5),
    );
    println!("kustomize-controller with the defaults spelled out: {status:?} after {took:?}");
    assert!(
        status.is_none(),
        "exited with the default values: {status:?}\n{output}"
    );
}

const STUCK: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: REPLICAS
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      nodeSelector:
        no-such-node: "true"
      containers:
      - name: app
        image: registry.invalid/web:1
"#;

/// A Kustomization that waits (5 m) for a Deployment that no node can run; then a commit that
/// fixes it (replicas 0). Returns the env, the fixing revision and when it was pushed.
async fn stuck_then_fixed(prefix: &str, gates: &str) -> (Env, String, Instant) {
    let files = [("deploy/web.yaml", STUCK.replace("REPLICAS", "1"))];
    let env = Env::start(prefix, gates, &files).await;
    env.create_ks(
        "app",
        "./deploy",
        json!({"wait": true, "timeout": "5m"}),
        json!({}),
    )
    .await;
    let deploys: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.client.clone(), &env.ns);
    let res = wait_for(TIMEOUT, "Deployment applied", || async {
        Ok(deploys.get_opt("web").await?.map(|_| ()))
    })
    .await;
    if let Err(e) = res {
        panic!("{e}\n{}", env.ctl.log_tails(40));
    }
    // Let the health check start waiting.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let k = env.ks.get("app").await.unwrap();
    assert!(
        !ks_ready(&k),
        "Ready with an unschedulable Deployment: {}",
        ready_message(&k)
    );
    env.repo
        .write("deploy/web.yaml", &STUCK.replace("REPLICAS", "0"))
        .unwrap();
    let pushed = Instant::now();
    let rev = env.push("scale to zero").await;
    (env, rev, pushed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_health_check_on_new_revision() {
    if !slow_enabled("cancel_health_check_on_new_revision") {
        return;
    }
    let (mut env, rev, pushed) =
        stuck_then_fixed("cancelhc", "CancelHealthCheckOnNewRevision=true").await;
    let rev_c = rev.clone();
    env.wait_ks("app", "Ready at the fixing revision", move |k| {
        ready_at(k, &rev_c)
    })
    .await;
    println!(
        "with the gate: Ready at the fixing revision {:.1} s after the push (timeout 5 m)",
        pushed.elapsed().as_secs_f64()
    );
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    let evs = events
        .list(&ListParams::default().fields("involvedObject.name=app"))
        .await
        .unwrap();
    let canceled: Vec<&Event> = evs
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("HealthCheckCanceled"))
        .collect();
    assert!(
        canceled
            .iter()
            .any(|e| e.message.as_deref().is_some_and(|m| m.starts_with(
                "Health checks canceled due to new reconciliation triggered by GitRepository/"
            ))),
        "no HealthCheckCanceled event with Flux's message: {:?}",
        evs.items
            .iter()
            .map(|e| (&e.reason, &e.message))
            .collect::<Vec<_>>()
    );
    println!(
        "event: {:?}",
        canceled.first().and_then(|e| e.message.as_ref())
    );

    // Without the gate (the default) the health check of the broken revision goes on.
    drop(env); // stops its controllers and frees the CRD lock
    let (env, rev, pushed) = stuck_then_fixed("nocancelhc", "").await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let k = env.ks.get("app").await.unwrap();
    println!(
        "without the gate, {:.1} s after the push: Ready {}",
        pushed.elapsed().as_secs_f64(),
        ready_message(&k)
    );
    assert!(
        !ready_at(&k, &rev),
        "without CancelHealthCheckOnNewRevision the fixing revision went through at once"
    );
}

async fn vars_env(prefix: &str, gates: &str) -> (Env, String) {
    let files = [(
        "deploy/subst.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: subst\ndata:\n  value: \"${VALUE}\"\n"
            .to_string(),
    )];
    let mut env = Env::start(prefix, gates, &files).await;
    let rev = format!("main@sha1:{}", env.repo.head().unwrap());
    let vars = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "vars", "namespace": env.ns,
                     "labels": {"reconcile.fluxcd.io/watch": "Enabled"}},
        "data": {"VALUE": "one"}});
    apply_value(&env.client, &vars, "e2e").await.unwrap();
    env.create_ks(
        "app",
        "./deploy",
        json!({"postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]}}),
        json!({}),
    )
    .await;
    let rev_c = rev.clone();
    env.wait_ks("app", "Ready", move |k| ready_at(k, &rev_c))
        .await;
    assert_eq!(env.data("subst", "value").await.as_deref(), Some("one"));
    // Let the first reconcile's own watch events settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.cms
        .patch(
            "vars",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"VALUE": "two"}})),
        )
        .await
        .unwrap();
    (env, rev)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_watchers_trigger_reconciles() {
    let (env, _) = vars_env("cfgwatch", "").await;
    let changed = Instant::now();
    let res = wait_for(TIMEOUT, "substituted value two", || async {
        Ok((env.data("subst", "value").await.as_deref() == Some("two")).then_some(()))
    })
    .await;
    if let Err(e) = res {
        panic!("{e}\n{}", env.ctl.log_tails(40));
    }
    println!(
        "watched ConfigMap change applied {:.2} s after the edit (interval 1 h)",
        changed.elapsed().as_secs_f64()
    );

    if !slow_enabled("config_watchers_trigger_reconciles (DisableConfigWatchers part)") {
        return;
    }
    drop(env);
    let (env, _) = vars_env("cfgnowatch", "DisableConfigWatchers=true").await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        env.data("subst", "value").await.as_deref(),
        Some("one"),
        "DisableConfigWatchers=true, yet the ConfigMap change was applied"
    );
    println!("with DisableConfigWatchers=true: still 'one' 20 s after the edit");
}
