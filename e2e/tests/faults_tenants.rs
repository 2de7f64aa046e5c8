//! The hostile tenant bundle (issue 14): tenant namespaces that each carry one attack from the
//! defect list of docs/reliability.md, all at once, next to three normal tenants who push
//! commits during the attack. Both controllers run as processes with leader election on.
//!
//! Checked: neither controller exits (same pids, alive at the end), the normal tenants'
//! Kustomizations reach Ready at each new revision (push-to-Ready delays printed), `/healthz` of
//! both, sampled every 200 ms, always answers (worst latency printed), both leader Leases keep
//! being renewed (largest gap printed), and every attacked object ends with a condition that
//! says what is wrong (printed).
//!
//! Part of the fault-injection suite: runs with `RFLUX_FAULTS=1`.
#![allow(clippy::unwrap_used)]

mod faults_source_common;
mod support;

use std::time::{Duration, Instant};

use faults_source_common::{
    HealthSampler, LeaseSampler, Proc, WATCH_LABEL, full_suite, loopback, storage_args,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, PostParams};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::hostile_git::{Behavior, HostileGit};
use rflux_e2e::{ControlPlane, GitServer};
use serde_json::{Value, json};
use support::procs::{apply_value, install_crds, ks_condition, ks_ready, wait_for};

const TIMEOUT: Duration = Duration::from_secs(180);

fn cm_yaml(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

/// Files of the deep base chain: `d000` → `d001` → … → `d{n-1}` holding a ConfigMap.
fn deep_chain(n: usize) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = (0..n - 1)
        .map(|i| {
            (
                format!("d{i:03}/kustomization.yaml"),
                format!("resources:\n- ../d{:03}\n", i + 1),
            )
        })
        .collect();
    files.push((
        format!("d{:03}/kustomization.yaml", n - 1),
        "resources:\n- cm.yaml\n".into(),
    ));
    files.push((format!("d{:03}/cm.yaml", n - 1), cm_yaml("deep", "bottom")));
    files
}

/// Exponential diamonds: level `i` includes two bases that both include level `i+1`
/// (`2^levels` paths to the bottom).
fn diamonds(levels: usize) -> Vec<(String, String)> {
    let mut files = Vec::new();
    for i in 0..levels {
        files.push((
            format!("l{i:02}/kustomization.yaml"),
            "resources:\n- a\n- b\n".into(),
        ));
        for side in ["a", "b"] {
            files.push((
                format!("l{i:02}/{side}/kustomization.yaml"),
                format!("resources:\n- ../../l{:02}\n", i + 1),
            ));
        }
    }
    files.push((
        format!("l{levels:02}/kustomization.yaml"),
        "resources:\n- cm.yaml\n".into(),
    ));
    files.push((
        format!("l{levels:02}/cm.yaml"),
        cm_yaml("diamond", "bottom"),
    ));
    files
}

/// The classic billion laughs inside a ConfigMap: 10^9 strings once expanded.
fn alias_bomb() -> String {
    let mut s = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: lol\ndata:\n  a0: &a0 \"lol\"\n",
    );
    let mut doc = String::from("x:\n");
    doc.push_str("  l0: &l0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    for i in 1..10 {
        let prev = format!("*l{}", i - 1);
        let items = [prev.as_str(); 10].join(",");
        doc.push_str(&format!("  l{i}: &l{i} [{items}]\n"));
    }
    s.push_str("  bomb: \"x\"\n");
    // The bomb is a top-level field of the same document.
    s.push_str(&doc);
    s
}

struct Tenant {
    ns: String,
    name: &'static str,
    repo: Option<rflux_e2e::TestRepo>,
    expect: &'static [&'static str],
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_tenant_bundle_does_not_starve_the_others() {
    if !full_suite("a_hostile_tenant_bundle_does_not_starve_the_others") {
        return;
    }
    let cp = ControlPlane::shared_named("loop").await.unwrap();
    let client: Client = cp.client().await.unwrap();
    install_crds(&client).await.unwrap();
    let git = GitServer::shared().await.unwrap();
    let runtime_ns = cp.create_namespace("faults-rt").await.unwrap();
    let label = rflux_e2e::unique_name("tenants");

    let storage = tempfile::tempdir().unwrap();
    let addr = loopback();
    let mut sc = Proc::new(
        cp,
        "source-controller",
        &label,
        true,
        &runtime_ns,
        &storage_args(storage.path(), addr, addr),
    );
    let ks_tmp = tempfile::tempdir().unwrap();
    let mut kc = Proc::new(
        cp,
        "kustomize-controller",
        &label,
        true,
        &runtime_ns,
        &["--requeue-dependency=2s".to_string()],
    );
    kc.env
        .push(("TMPDIR".into(), ks_tmp.path().display().to_string()));
    sc.start().await.unwrap();
    kc.start().await.unwrap();
    let (sc_pid, kc_pid) = (sc.pid(), kc.pid());
    let health = HealthSampler::start(vec![sc.health, kc.health]);
    let leases = LeaseSampler::start(client.clone(), &runtime_ns);

    let labels = json!({WATCH_LABEL: label});
    let bomb = HostileGit::start(Behavior::DeltaBomb {
        steps: 19,
        fanout: 6,
    })
    .unwrap();
    let endless = HostileGit::start(Behavior::EndlessRefs).unwrap();
    let token_dir = tempfile::tempdir().unwrap();
    let token = token_dir.path().join("token");
    std::fs::write(&token, "the-controllers-token").unwrap();

    // (tenant, files of its repository or a hostile URL, Kustomization path, extra spec,
    //  words one of which the final condition message must hold)
    type Attack = (
        &'static str,
        Result<Vec<(String, String)>, String>,
        &'static str,
        Value,
        &'static [&'static str],
    );
    let v_1mb = "a".repeat(1_000_000);
    let substituted: String = (0..5)
        .map(|i| format!("  k{i}: \"${{V##*b}}\"\n"))
        .collect();
    let attacks: Vec<Attack> = vec![
        ("deep", Ok(deep_chain(300)), "./d000", json!({}), &[""]),
        (
            "alias",
            Ok(vec![
                (
                    "kustomization.yaml".into(),
                    "resources:\n- cm.yaml\n".into(),
                ),
                ("cm.yaml".into(), alias_bomb()),
            ]),
            "./",
            json!({}),
            &["alias"],
        ),
        (
            "diamond",
            Ok(diamonds(24)),
            "./l00",
            json!({}),
            &["already registered", "duplicate", "conflict"],
        ),
        (
            "subst",
            Ok(vec![
                (
                    "kustomization.yaml".into(),
                    "resources:\n- cm.yaml\n".into(),
                ),
                (
                    "cm.yaml".into(),
                    format!(
                        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: subst\ndata:\n{substituted}"
                    ),
                ),
            ]),
            "./",
            json!({"postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]}}),
            &["limit", "budget", "too large", "too long", "exceed"],
        ),
        (
            "cel",
            Ok(vec![
                (
                    "kustomization.yaml".into(),
                    "resources:\n- cm.yaml\n".into(),
                ),
                ("cm.yaml".into(), cm_yaml("costly", &"a".repeat(2000))),
            ]),
            "./",
            json!({
                "healthCheckExprs": [{"apiVersion": "v1", "kind": "ConfigMap",
                    "current": "data.value.split('a').all(x, data.value.split('a').all(y, x == y))"}],
                "healthChecks": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "costly"}]
            }),
            &["cost limit"],
        ),
        (
            "bomb",
            Err(bomb.url("bomb")),
            "./",
            json!({}),
            &["limit", "timed out"],
        ),
        (
            "endless",
            Err(endless.url("endless")),
            "./",
            json!({}),
            &["limit"],
        ),
        (
            "kubeconfig",
            Ok(vec![
                (
                    "kustomization.yaml".into(),
                    "resources:\n- cm.yaml\n".into(),
                ),
                ("cm.yaml".into(), cm_yaml("stolen", "x")),
            ]),
            "./",
            json!({"kubeConfig": {"secretRef": {"name": "remote"}}}),
            &["file references are not allowed"],
        ),
    ];

    let mut tenants: Vec<Tenant> = Vec::new();
    for (name, source, path, extra, expect) in attacks {
        let ns = cp.create_namespace(&format!("t-{name}")).await.unwrap();
        let (url, repo) = match source {
            Ok(files) => {
                let repo = git.create_repo(name).unwrap();
                for (p, c) in &files {
                    repo.write(p, c).unwrap();
                }
                repo.commit("attack").unwrap();
                repo.push("main").unwrap();
                (git.http_url(repo.name()), Some(repo))
            }
            Err(url) => (url, None),
        };
        if name == "subst" {
            let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
            let vars: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": "vars"}, "data": {"V": v_1mb}}))
                    .unwrap();
            cms.create(&PostParams::default(), &vars).await.unwrap();
        }
        if name == "kubeconfig" {
            let kubeconfig = format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:1\ncontexts:\n- name: c\n  context:\n    cluster: k\n    user: u\nusers:\n- name: u\n  user:\n    tokenFile: {}\n",
                token.display()
            );
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
            let s: Secret = serde_json::from_value(
                json!({"metadata": {"name": "remote"}, "stringData": {"value": kubeconfig}}),
            )
            .unwrap();
            secrets.create(&PostParams::default(), &s).await.unwrap();
        }
        apply_tenant(&client, &ns, &labels, &url, path, extra, "60s").await;
        tenants.push(Tenant {
            ns,
            name,
            repo,
            expect,
        });
    }

    // The normal tenants.
    let mut normal = Vec::new();
    for i in 0..3 {
        let ns = cp.create_namespace(&format!("t-normal{i}")).await.unwrap();
        let repo = git.create_repo(&format!("normal{i}")).unwrap();
        repo.write("deploy/kustomization.yaml", "resources:\n- cm.yaml\n")
            .unwrap();
        repo.write("deploy/cm.yaml", &cm_yaml("app", "0")).unwrap();
        let sha = repo.commit("v0").unwrap();
        repo.push("main").unwrap();
        apply_tenant(
            &client,
            &ns,
            &labels,
            &git.http_url(repo.name()),
            "./deploy",
            json!({}),
            "20s",
        )
        .await;
        normal.push((ns, repo, format!("main@sha1:{sha}"), Instant::now()));
    }
    for round in 0..5 {
        let mut delays = Vec::new();
        for (ns, repo, rev, at) in &mut normal {
            if round > 0 {
                repo.write("deploy/cm.yaml", &cm_yaml("app", &round.to_string()))
                    .unwrap();
                let sha = repo.commit(&format!("v{round}")).unwrap();
                *at = Instant::now();
                repo.push("main").unwrap();
                *rev = format!("main@sha1:{sha}");
            }
            let _ = ns;
        }
        for (ns, _, rev, at) in &normal {
            let ks_api: Api<Kustomization> = Api::namespaced(client.clone(), ns);
            let res = wait_for(TIMEOUT, &format!("{ns} Ready at {rev}"), || async {
                sc.alive()?;
                kc.alive()?;
                let k = ks_api.get("app").await?;
                Ok((ks_ready(&k)
                    && k.status
                        .as_ref()
                        .and_then(|s| s.last_applied_revision.as_deref())
                        == Some(rev.as_str()))
                .then(|| at.elapsed()))
            })
            .await;
            match res {
                Ok(d) => delays.push(d),
                Err(e) => panic!("{e}\n{}\n{}", sc.tail(30), kc.tail(40)),
            }
        }
        eprintln!("round {round}: normal tenants Ready at the new revision after {delays:?}");
        tokio::time::sleep(Duration::from_secs(3)).await;
    }

    // Every attacked tenant ends with a condition that says what is wrong.
    for t in &tenants {
        let ks_api: Api<Kustomization> = Api::namespaced(client.clone(), &t.ns);
        let repos: Api<GitRepository> = Api::namespaced(client.clone(), &t.ns);
        let res = wait_for(TIMEOUT, &format!("{} settled", t.name), || async {
            let k = ks_api.get("app").await?;
            let r = repos.get("app").await?;
            let ks_ready = ks_condition(&k, "Ready").cloned();
            let repo_ready = r
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready").cloned());
            let msgs = [&ks_ready, &repo_ready]
                .iter()
                .filter_map(|c| c.as_ref())
                .filter(|c| c.status == "False")
                .map(|c| format!("{}: {}", c.reason, c.message))
                .collect::<Vec<_>>()
                .join(" | ");
            let lower = msgs.to_lowercase();
            let settled = if t.expect == [""] {
                ks_ready.as_ref().is_some_and(|c| c.status != "Unknown")
            } else {
                t.expect.iter().any(|w| lower.contains(w))
            };
            let stalled = ks_condition(&k, "Stalled").is_some_and(|c| c.status == "True");
            Ok(settled.then_some((ks_ready, repo_ready, stalled)))
        })
        .await;
        match res {
            Ok((ks_ready, repo_ready, stalled)) => eprintln!(
                "tenant {}: Kustomization Ready={:?} {}: {} (Stalled={stalled}); GitRepository Ready={:?} {}",
                t.name,
                ks_ready.as_ref().map(|c| c.status.clone()),
                ks_ready
                    .as_ref()
                    .map(|c| c.reason.clone())
                    .unwrap_or_default(),
                ks_ready
                    .as_ref()
                    .map(|c| cut(&c.message))
                    .unwrap_or_default(),
                repo_ready.as_ref().map(|c| c.status.clone()),
                repo_ready
                    .as_ref()
                    .map(|c| cut(&c.message))
                    .unwrap_or_default(),
            ),
            Err(e) => {
                let k = ks_api.get("app").await.unwrap();
                panic!(
                    "tenant {}: {e}\n{}\n{}\n{}",
                    t.name,
                    serde_json::to_string_pretty(&k.status).unwrap(),
                    sc.tail(20),
                    kc.tail(30)
                );
            }
        }
        let _ = &t.repo;
    }

    let health = health.finish().await;
    let leases = leases.finish().await;
    for (addr, worst, samples, failures) in &health {
        eprintln!("/healthz {addr}: {samples} samples, worst {worst:?}, {failures} failed");
    }
    for (name, gap, renewals) in &leases {
        eprintln!("Lease {name}: {renewals} renewals seen, largest gap {gap:?}");
    }
    eprintln!(
        "peak RSS: source-controller {} MiB, kustomize-controller {} MiB",
        sc.vm_hwm_kib().unwrap_or(0) / 1024,
        kc.vm_hwm_kib().unwrap_or(0) / 1024
    );
    sc.alive().unwrap();
    kc.alive().unwrap();
    assert_eq!((sc.pid(), kc.pid()), (sc_pid, kc_pid));
    assert_eq!((sc.starts, kc.starts), (1, 1));
    for (addr, _, samples, failures) in &health {
        assert!(
            *samples > 0 && *failures == 0,
            "/healthz {addr} failed {failures} of {samples}"
        );
    }
    assert_eq!(
        leases.len(),
        2,
        "expected the two controllers' Leases: {leases:?}"
    );
    for (name, _, renewals) in &leases {
        assert!(*renewals >= 2, "Lease {name} was renewed {renewals} times");
    }
    let stolen = Api::<ConfigMap>::namespaced(client.clone(), &tenants.last().unwrap().ns)
        .get_opt("stolen")
        .await
        .unwrap();
    assert!(
        stolen.is_none(),
        "the kubeconfig tenant's object was applied locally"
    );
}

fn cut(s: &str) -> String {
    if s.len() > 300 {
        let mut end = 300;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    } else {
        s.to_string()
    }
}

/// A tenant's GitRepository and Kustomization, both named `app`.
async fn apply_tenant(
    client: &Client,
    ns: &str,
    labels: &Value,
    url: &str,
    path: &str,
    extra: Value,
    git_timeout: &str,
) {
    let repo = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
        "metadata": {"name": "app", "namespace": ns, "labels": labels},
        "spec": {"url": url, "interval": "5s", "timeout": git_timeout, "ref": {"branch": "main"}}
    });
    apply_value(client, &repo, "e2e").await.unwrap();
    let mut ks = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "app", "namespace": ns, "labels": labels},
        "spec": {"interval": "10m", "retryInterval": "10s", "timeout": "30s", "prune": true,
                 "path": path, "targetNamespace": ns,
                 "sourceRef": {"kind": "GitRepository", "name": "app"}}
    });
    if let (Some(s), Some(e)) = (ks["spec"].as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    apply_value(client, &ks, "e2e").await.unwrap();
}
