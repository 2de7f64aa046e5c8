//! Helpers of `faults_cluster.rs`: a control plane of the test's own (stopped on drop, its logs
//! copied aside when the test panics), the `RFLUX_FAULTS` gate, a fleet of GitRepositories and
//! Kustomizations with one ConfigMap each (plus an `extra` ConfigMap that a later commit removes),
//! waits for convergence, uid snapshots, and a reader of controller logs written since a mark.
#![allow(dead_code, clippy::unwrap_used)]

pub mod audit;
pub mod replicas;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::{ControlPlane, ControlPlaneOptions, GitServer, TestRepo};
use serde_json::{Map, Value, json};

use crate::support::procs::ks_ready;
use crate::support::{OUR_CRDS, ensure_crd};

/// Whether the long fault suite runs (`RFLUX_FAULTS=1`); prints why a test skips otherwise.
pub fn enabled(test: &str) -> bool {
    let on = std::env::var("RFLUX_FAULTS").is_ok_and(|v| v == "1");
    if !on {
        eprintln!("{test}: skipped (long fault-injection scenario; run with RFLUX_FAULTS=1)");
    }
    on
}

/// Serialises the scenarios of this binary: each restarts processes and loads the machine.
pub async fn serial() -> std::fs::File {
    let path = rflux_e2e::state_root().join("faults-cluster.lock");
    tokio::task::spawn_blocking(move || rflux_e2e::lock_file(&path))
        .await
        .expect("lock task")
        .expect("faults-cluster lock")
}

/// A control plane started for one test and stopped when dropped. When the test panics (or
/// `RFLUX_FAULTS_KEEP_LOGS=1`) its `logs/` (control plane, controllers, audit log) are first
/// copied to `/tmp/rflux-faults-<name>-<pid>/`.
pub struct OwnPlane {
    pub cp: ControlPlane,
}

impl OwnPlane {
    /// Starts `name` fresh (building missing binaries) with `opts`, and installs our CRDs.
    pub async fn start(name: &str, opts: ControlPlaneOptions) -> OwnPlane {
        tokio::task::spawn_blocking(rflux_e2e::ensure_binaries)
            .await
            .expect("build task")
            .expect("control plane binaries");
        let cp = ControlPlane::start_with(name, &opts)
            .await
            .expect("starting the control plane");
        let plane = OwnPlane { cp };
        let client = plane.cp.client().await.expect("client");
        for (crd, file) in OUR_CRDS {
            ensure_crd(&client, crd, file).await.expect("CRD");
        }
        plane
    }
}

impl Drop for OwnPlane {
    fn drop(&mut self) {
        let keep = std::env::var("RFLUX_FAULTS_KEEP_LOGS").is_ok_and(|v| v == "1");
        if std::thread::panicking() || keep {
            let to = PathBuf::from(format!(
                "/tmp/rflux-faults-{}-{}",
                self.cp.name(),
                std::process::id()
            ));
            let from = self.cp.state_dir().join("logs");
            if std::fs::create_dir_all(&to).is_ok() {
                for entry in std::fs::read_dir(&from).into_iter().flatten().flatten() {
                    let _ = std::fs::copy(entry.path(), to.join(entry.file_name()));
                }
                eprintln!("logs of {:?} copied to {}", self.cp.name(), to.display());
            }
        }
        if let Err(e) = ControlPlane::stop(self.cp.name()) {
            eprintln!("stopping control plane {:?}: {e:#}", self.cp.name());
        }
    }
}

/// The end of a log file at some moment, to read what was written after it.
#[derive(Clone, Debug)]
pub struct LogMark {
    pub path: PathBuf,
    pub offset: u64,
}

impl LogMark {
    pub fn now(path: &Path) -> LogMark {
        let offset = std::fs::metadata(path).map_or(0, |m| m.len());
        LogMark {
            path: path.to_path_buf(),
            offset,
        }
    }

    /// Lines written since the mark.
    pub fn lines_since(&self) -> Vec<String> {
        let bytes = std::fs::read(&self.path).unwrap_or_default();
        let start = usize::try_from(self.offset)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        String::from_utf8_lossy(&bytes[start..])
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// Words by which an error line says the API server (or its storage) did not answer.
const UNREACHABLE: &[&str] = &[
    "connect",
    "refused",
    "timed out",
    "timeout",
    "deadline",
    "etcd",
    "unavailable",
    "eof",
    "broken pipe",
    "reset",
    "500",
    "503",
    "504",
];

/// Error or warning lines since `marks` that say the API was unreachable.
pub fn unreachable_lines(marks: &[LogMark]) -> Vec<String> {
    marks
        .iter()
        .flat_map(LogMark::lines_since)
        .filter(|l| {
            let low = l.to_ascii_lowercase();
            (low.contains("error") || low.contains("warn"))
                && UNREACHABLE.iter().any(|w| low.contains(w))
        })
        .collect()
}

/// A ConfigMap manifest.
pub fn cm_yaml(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

/// One Kustomization of a fleet: its name is also its directory in its repository, which holds
/// `cm.yaml` (ConfigMap `<name>-cm`) and, while `extra` is set, `extra.yaml` (`<name>-extra`).
#[derive(Clone, Debug)]
pub struct Member {
    pub name: String,
    pub repo: usize,
}

/// GitRepositories and the Kustomizations that apply from them, in one namespace.
pub struct Fleet {
    pub ns: String,
    pub repos: Vec<TestRepo>,
    pub members: Vec<Member>,
    /// The revision (`main@sha1:…`) each repository's HEAD was last pushed at.
    pub revisions: Vec<String>,
}

impl Fleet {
    /// `repos` repositories with `per_repo` members each; every member starts with `value` and
    /// an extra ConfigMap when `extra(index)` holds. Pushes the first commit.
    pub fn create(
        git: &GitServer,
        ns: &str,
        repos: usize,
        per_repo: usize,
        value: &str,
        extra: impl Fn(usize) -> bool,
    ) -> Fleet {
        let mut fleet = Fleet {
            ns: ns.to_string(),
            repos: Vec::new(),
            members: Vec::new(),
            revisions: Vec::new(),
        };
        for r in 0..repos {
            fleet
                .repos
                .push(git.create_repo(&format!("faults-{r}")).expect("repo"));
            for j in 0..per_repo {
                fleet.members.push(Member {
                    name: format!("ks-{r}-{j}"),
                    repo: r,
                });
            }
        }
        for (i, m) in fleet.members.iter().enumerate() {
            let repo = &fleet.repos[m.repo];
            repo.write(&format!("{}/cm.yaml", m.name), &cm_yaml(&cm_name(m), value))
                .expect("write");
            if extra(i) {
                repo.write(
                    &format!("{}/extra.yaml", m.name),
                    &cm_yaml(&extra_name(m), value),
                )
                .expect("write");
            }
        }
        fleet.commit_and_push("initial");
        fleet
    }

    /// Sets every member's value and removes every extra ConfigMap; commits and pushes each
    /// repository. Returns the ConfigMaps removed from Git.
    pub fn change_all(&mut self, value: &str) -> Vec<String> {
        let mut removed = Vec::new();
        for m in &self.members {
            let repo = &self.repos[m.repo];
            repo.write(&format!("{}/cm.yaml", m.name), &cm_yaml(&cm_name(m), value))
                .expect("write");
            if repo.path().join(&m.name).join("extra.yaml").exists() {
                repo.remove(&format!("{}/extra.yaml", m.name))
                    .expect("remove");
                removed.push(extra_name(m));
            }
        }
        self.commit_and_push(&format!("value {value}"));
        removed
    }

    fn commit_and_push(&mut self, msg: &str) {
        self.revisions = self
            .repos
            .iter()
            .map(|repo| {
                let sha = repo.commit(msg).expect("commit");
                repo.push("main").expect("push");
                format!("main@sha1:{sha}")
            })
            .collect();
    }

    /// Server-side applies the GitRepositories (`repo-<i>`) and Kustomizations.
    pub async fn apply(&self, client: &Client, git: &GitServer, labels: &Map<String, Value>) {
        let repos: Api<GitRepository> = Api::namespaced(client.clone(), &self.ns);
        let ks: Api<Kustomization> = Api::namespaced(client.clone(), &self.ns);
        let pp = PatchParams::apply("e2e").force();
        for (i, repo) in self.repos.iter().enumerate() {
            let obj = json!({
                "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                "metadata": {"name": format!("repo-{i}"), "namespace": self.ns, "labels": labels},
                "spec": {"url": git.http_url(repo.name()), "interval": "3s",
                         "ref": {"branch": "main"}}
            });
            repos
                .patch(&format!("repo-{i}"), &pp, &Patch::Apply(&obj))
                .await
                .expect("apply GitRepository");
        }
        for m in &self.members {
            let obj = json!({
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                "metadata": {"name": m.name, "namespace": self.ns, "labels": labels},
                "spec": {"interval": "10m", "retryInterval": "3s", "timeout": "30s",
                         "prune": true, "path": format!("./{}", m.name),
                         "targetNamespace": self.ns,
                         "sourceRef": {"kind": "GitRepository", "name": format!("repo-{}", m.repo)}}
            });
            ks.patch(&m.name, &pp, &Patch::Apply(&obj))
                .await
                .expect("apply Kustomization");
        }
    }

    /// Polls (1 s) until every member is Ready at its repository's latest revision; returns
    /// the time it took. On timeout panics with the count, a few laggards and `diag()`.
    pub async fn wait_converged(
        &self,
        client: &Client,
        timeout: Duration,
        diag: impl Fn() -> String,
    ) -> Duration {
        let api: Api<Kustomization> = Api::namespaced(client.clone(), &self.ns);
        let want: BTreeMap<&str, &str> = self
            .members
            .iter()
            .map(|m| (m.name.as_str(), self.revisions[m.repo].as_str()))
            .collect();
        let started = Instant::now();
        loop {
            let last = match api.list(&ListParams::default()).await {
                Ok(list) => {
                    let lagging: Vec<&Kustomization> = list
                        .items
                        .iter()
                        .filter(|k| {
                            let rev = k
                                .status
                                .as_ref()
                                .and_then(|s| s.last_applied_revision.as_deref());
                            want.contains_key(k.name_any().as_str())
                                && !(ks_ready(k) && rev == want.get(k.name_any().as_str()).copied())
                        })
                        .collect();
                    let seen = list
                        .items
                        .iter()
                        .filter(|k| want.contains_key(k.name_any().as_str()))
                        .count();
                    if lagging.is_empty() && seen == want.len() {
                        return started.elapsed();
                    }
                    format!(
                        "{} of {} not Ready at the latest revision; e.g. {}",
                        lagging.len() + want.len() - seen,
                        want.len(),
                        lagging
                            .iter()
                            .take(3)
                            .map(|k| format!(
                                "{}: {}",
                                k.name_any(),
                                serde_json::to_string(&k.status).unwrap_or_default()
                            ))
                            .collect::<Vec<_>>()
                            .join("\n")
                    )
                }
                Err(e) => format!("list: {e}"),
            };
            if started.elapsed() > timeout {
                panic!("not converged after {timeout:?}: {last}\n{}", diag());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// How many members are Ready at their repository's latest revision.
    pub async fn count_converged(&self, client: &Client) -> usize {
        let api: Api<Kustomization> = Api::namespaced(client.clone(), &self.ns);
        let Ok(list) = api.list(&ListParams::default()).await else {
            return 0;
        };
        let want: BTreeMap<&str, &str> = self
            .members
            .iter()
            .map(|m| (m.name.as_str(), self.revisions[m.repo].as_str()))
            .collect();
        list.items
            .iter()
            .filter(|k| {
                let rev = k
                    .status
                    .as_ref()
                    .and_then(|s| s.last_applied_revision.as_deref());
                ks_ready(k) && rev.is_some() && rev == want.get(k.name_any().as_str()).copied()
            })
            .count()
    }

    /// name → uid of every ConfigMap a member applies (in Git or not).
    pub async fn cm_uids(&self, client: &Client) -> BTreeMap<String, String> {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &self.ns);
        cms.list(&ListParams::default())
            .await
            .expect("list ConfigMaps")
            .items
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter(|c| c.name_any().starts_with("ks-"))
            .map(|c| (c.name_any(), c.uid().unwrap_or_default()))
            .collect()
    }

    /// name → value of every member's ConfigMap.
    pub async fn cm_values(&self, client: &Client) -> BTreeMap<String, String> {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &self.ns);
        cms.list(&ListParams::default())
            .await
            .expect("list ConfigMaps")
            .items
            .into_iter()
            .filter(|c| c.name_any().starts_with("ks-"))
            .map(|c| {
                let v = c
                    .data
                    .as_ref()
                    .and_then(|d| d.get("value").cloned())
                    .unwrap_or_default();
                (c.name_any(), v)
            })
            .collect()
    }

    /// Asserts the invariants after a fault cleared: every ConfigMap still in Git has the uid
    /// it had in `before` and `value`; every one in `removed` is gone.
    pub async fn assert_invariants(
        &self,
        client: &Client,
        before: &BTreeMap<String, String>,
        removed: &[String],
        value: &str,
    ) {
        let now = self.cm_uids(client).await;
        let values = self.cm_values(client).await;
        for m in &self.members {
            let name = cm_name(m);
            assert_eq!(
                now.get(&name),
                before.get(&name),
                "ConfigMap {name} was deleted or recreated (uid before vs now)"
            );
            assert_eq!(values.get(&name).map(String::as_str), Some(value), "{name}");
        }
        for name in removed {
            assert!(
                !now.contains_key(name),
                "{name} was removed from Git but survives with prune: true"
            );
        }
        for (name, uid) in &now {
            if !removed.contains(name) {
                assert_eq!(Some(uid), before.get(name), "{name}: uid changed");
            }
        }
    }
}

pub fn cm_name(m: &Member) -> String {
    format!("{}-cm", m.name)
}

pub fn extra_name(m: &Member) -> String {
    format!("{}-extra", m.name)
}
