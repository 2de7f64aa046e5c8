//! One run of one implementation: a fresh hub and target control plane, the clusters' users
//! and kubeconfig Secrets, the controllers on the hub, and the measured phases (all Ready,
//! memory, the no-op round and its requests on both apiservers).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::Kustomization;
use rflux_e2e::ControlPlane;
use rflux_e2e::metrics::{self, Counts};
use serde_json::json;

use crate::kubectl::install_crds;
use crate::procs::{Controllers, loadavg, log, machine_busy_ticks, pid_ticks, start_controllers};
use crate::report::RunResult;
use crate::watch::KsWatch;
use crate::workload::{self, HUB_NS, OBJECTS_PER_CLUSTER};

/// What every run of a session shares.
pub struct Session {
    pub id: String,
    pub clusters: usize,
    pub concurrent: u16,
    pub timeout: Duration,
    /// Seconds to let a controller settle before a memory reading.
    pub settle: Duration,
    pub crds: Vec<PathBuf>,
    pub url: String,
    /// `main@sha1:<sha>` of the repository.
    pub revision: String,
    pub work_dir: PathBuf,
    pub hub_name: String,
    pub target_name: String,
}

/// One implementation: its binaries and how the table names it.
pub struct Implementation {
    pub label: String,
    pub flux: bool,
    pub bin_dir: PathBuf,
    pub version: String,
}

/// Runs `imp` once (repetition `rep`) on fresh control planes, stopped at the end. A failed
/// phase is a note in the result (`complete` false), not an error.
pub async fn run(s: &Session, imp: &Implementation, rep: usize) -> anyhow::Result<RunResult> {
    let mut result = RunResult {
        bench: "remote".into(),
        session: s.id.clone(),
        implementation: imp.label.clone(),
        rep,
        clusters: s.clusters,
        objects_per_cluster: OBJECTS_PER_CLUSTER,
        concurrent: s.concurrent,
        kc_version: imp.version.clone(),
        all_ready_s: f64::NAN,
        noop_s: f64::NAN,
        kc_rss0_kib: f64::NAN,
        kc_rss_kib: f64::NAN,
        kc_peak_rss_kib: f64::NAN,
        kc_cpu_fleet_s: f64::NAN,
        kc_cpu_noop_s: f64::NAN,
        ..Default::default()
    };
    let dir = std::path::absolute(s.work_dir.join(format!("{}-rep{rep}", imp.label)))?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)?;
    let outcome = async {
        log(format!(
            "{} rep {rep}: fresh control planes {:?} and {:?}",
            imp.label, s.hub_name, s.target_name
        ));
        let hub = ControlPlane::start(&s.hub_name).await?;
        let target = ControlPlane::start(&s.target_name).await?;
        measure(s, imp, &hub, &target, &dir, &mut result).await
    }
    .await;
    if let Err(e) = outcome {
        log(format!("{} rep {rep} aborted: {e:#}", imp.label));
        result.notes.push(format!("aborted: {e:#}"));
    }
    for name in [&s.hub_name, &s.target_name] {
        let name = name.clone();
        tokio::task::spawn_blocking(move || ControlPlane::stop(&name)).await??;
    }
    Ok(result)
}

async fn measure(
    s: &Session,
    imp: &Implementation,
    hub: &ControlPlane,
    target: &ControlPlane,
    dir: &Path,
    result: &mut RunResult,
) -> anyhow::Result<()> {
    let hc = hub.client().await?;
    let tc = target.client().await?;
    let names: Vec<String> = (0..s.clusters).map(workload::cluster_name).collect();

    // The target: one namespace and one user (client certificate, system:masters) per cluster;
    // the hub: the CRDs and one kubeconfig Secret per cluster.
    install_crds(hub.kubeconfig_path(), &s.crds)?;
    for ns in ["flux-system", HUB_NS] {
        create_namespace(&hc, ns).await?;
    }
    let secrets: Api<Secret> = Api::namespaced(hc.clone(), HUB_NS);
    for (i, name) in names.iter().enumerate() {
        create_namespace(&tc, name).await?;
        let path = target.user_kubeconfig(&workload::cluster_user(i), &["system:masters"])?;
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let secret: Secret = serde_json::from_value(workload::kubeconfig_secret(i, &text))?;
        secrets.create(&PostParams::default(), &secret).await?;
    }
    log(format!(
        "{} namespaces and users on the target, Secrets on the hub",
        s.clusters
    ));

    let mut ks_watch = KsWatch::start(&hc, HUB_NS);
    // The benchmark's own processes: both control planes and this harness (the controllers
    // are added at the end: they start after this reading).
    let own_pids: Vec<u32> = [hub, target]
        .iter()
        .flat_map(|cp| cp.state().processes.iter().map(|p| p.pid))
        .chain([std::process::id()])
        .collect();
    let own_ticks = |pids: &[u32]| pids.iter().map(|p| pid_ticks(*p)).sum::<u64>();
    let busy0 = machine_busy_ticks();
    let window = Instant::now();
    let own0 = own_ticks(&own_pids);
    result.load_before = loadavg();
    let mut ctl = start_controllers(
        imp.flux,
        &imp.bin_dir,
        hub.kubeconfig_path(),
        s.concurrent,
        dir,
    )
    .await?;
    let phases = phases(s, &hc, &tc, &mut ctl, &mut ks_watch, &names, result).await;
    result.kc_peak_rss_kib = ctl.kc.mem_kib("VmHWM");
    result.load_after = loadavg();
    let own1 = own_ticks(&own_pids) + pid_ticks(ctl.kc.pid()) + pid_ticks(ctl.sc.pid());
    if let (Some(b0), Some(b1)) = (busy0, machine_busy_ticks()) {
        let foreign = b1.saturating_sub(b0) as f64 - own1.saturating_sub(own0) as f64;
        result.foreign_cpu_s = foreign.max(0.0) / 100.0;
        result.window_s = window.elapsed().as_secs_f64();
    }
    let alive = ctl.kc.check_alive().and(ctl.sc.check_alive());
    drop(ctl);
    phases?;
    alive?;
    result.complete = true;
    Ok(())
}

async fn phases(
    s: &Session,
    hc: &Client,
    tc: &Client,
    ctl: &mut Controllers,
    ks_watch: &mut KsWatch,
    names: &[String],
    result: &mut RunResult,
) -> anyhow::Result<()> {
    // Memory with no Kustomization, settled.
    tokio::time::sleep(s.settle).await;
    result.kc_rss0_kib = ctl.kc.mem_kib("VmRSS");

    // The source first (not timed), then the burst of Kustomizations.
    let gr: GitRepository = serde_json::from_value(workload::git_repository(&s.url))?;
    let grs: Api<GitRepository> = Api::namespaced(hc.clone(), HUB_NS);
    grs.create(&PostParams::default(), &gr).await?;
    let deadline = Instant::now() + s.timeout;
    loop {
        let g = grs.get(workload::SOURCE).await?;
        let rev = g
            .status
            .as_ref()
            .and_then(|st| st.artifact.as_ref())
            .map(|a| a.revision.as_str());
        if rev == Some(s.revision.as_str()) {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the GitRepository has no artifact at {}",
            s.revision
        );
        ctl.sc.check_alive()?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let cpu0 = ctl.kc.cpu_secs();
    let t0 = Instant::now();
    let kss: Api<Kustomization> = Api::namespaced(hc.clone(), HUB_NS);
    futures::stream::iter(0..s.clusters)
        .map(|i| {
            let kss = kss.clone();
            async move {
                let k: Kustomization = serde_json::from_value(workload::kustomization(i))?;
                kss.create(&PostParams::default(), &k)
                    .await
                    .with_context(|| format!("creating Kustomization {i}"))?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await?;
    let rev = s.revision.clone();
    let t1 = ks_watch
        .wait_all(names, s.timeout, "all Kustomizations Ready", |k| {
            k.ready && k.last_applied.as_deref() == Some(rev.as_str())
        })
        .await?;
    result.all_ready_s = (t1 - t0).as_secs_f64();
    result.kc_cpu_fleet_s = ctl.kc.cpu_secs() - cpu0;
    log(format!(
        "all {} Ready after {:.1} s",
        s.clusters, result.all_ready_s
    ));

    // Memory with every cluster Ready, settled.
    tokio::time::sleep(s.settle).await;
    ctl.kc.check_alive()?;
    result.kc_rss_kib = ctl.kc.mem_kib("VmRSS");

    // The no-op round: `requestedAt` on every Kustomization, nothing changed.
    let h0 = metrics::scrape_request_total(hc).await?;
    let g0 = metrics::scrape_request_total(tc).await?;
    let cpu1 = ctl.kc.cpu_secs();
    let token = format!("noop-{}", rflux_e2e::random_suffix(8));
    let t0 = Instant::now();
    let patch = json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}});
    futures::stream::iter(names.iter().cloned())
        .map(|name| {
            let kss = kss.clone();
            let patch = patch.clone();
            async move {
                kss.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .with_context(|| format!("annotating {name}"))?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await?;
    let t1 = ks_watch
        .wait_all(names, s.timeout, "the no-op requests handled", |k| {
            k.ready && k.last_handled.as_deref() == Some(token.as_str())
        })
        .await?;
    result.noop_s = (t1 - t0).as_secs_f64();
    // Trailing requests (events) of the last reconciles.
    tokio::time::sleep(Duration::from_secs(2)).await;
    result.kc_cpu_noop_s = ctl.kc.cpu_secs() - cpu1;
    let h1 = metrics::scrape_request_total(hc).await?;
    let g1 = metrics::scrape_request_total(tc).await?;
    result.hub_noop_requests = controller_requests(&metrics::diff(&h0, &h1), names.len());
    result.target_noop_requests = controller_requests(&metrics::diff(&g0, &g1), 0);
    log(format!(
        "no-op round {:.1} s; hub {:?}; target {:?}",
        result.noop_s, result.hub_noop_requests, result.target_noop_requests
    ));
    Ok(())
}

/// The controller's share of a request-count difference: without the lease renewals and node
/// heartbeats of the control plane's own components, the `/metrics` scrapes, and the
/// harness's own `harness_patches` merge patches of Kustomizations (the `requestedAt`s).
pub fn controller_requests(delta: &Counts, harness_patches: usize) -> Counts {
    let mut out: Counts = delta
        .iter()
        .filter(|(k, _)| {
            let resource = k.split_whitespace().nth(1).unwrap_or("");
            !(resource.ends_with("/leases")
                || resource == "nodes"
                || resource == "nodes/status"
                || resource.ends_with("/metrics"))
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let key = "PATCH kustomize.toolkit.fluxcd.io/kustomizations";
    if let Some(v) = out.get_mut(key) {
        *v -= harness_patches as f64;
    }
    out.retain(|_, v| v.abs() > 0.0);
    out
}

async fn create_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("creating namespace {name}"))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_the_controllers_requests_are_kept() {
        let delta: Counts = [
            ("PUT coordination.k8s.io/leases", 12.0),
            ("PATCH nodes/status", 2.0),
            ("GET -//metrics", 1.0),
            ("PATCH kustomize.toolkit.fluxcd.io/kustomizations", 50.0),
            (
                "PATCH kustomize.toolkit.fluxcd.io/kustomizations/status",
                50.0,
            ),
            ("PATCH configmaps (dry-run)", 50.0),
            ("GET -//apis", 50.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let kept = controller_requests(&delta, 50);
        assert_eq!(kept.len(), 3, "{kept:?}");
        assert_eq!(
            kept["PATCH kustomize.toolkit.fluxcd.io/kustomizations/status"],
            50.0
        );
        assert_eq!(kept["GET -//apis"], 50.0);
        assert!(!kept.contains_key("PATCH kustomize.toolkit.fluxcd.io/kustomizations"));
    }
}
