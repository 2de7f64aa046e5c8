//! The run: a fresh control plane, the workload, the controllers, and the measured phases
//! (api, fleet, idle, change, drift).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use rflux_e2e::{ControlPlane, GitServer, TestRepo, metrics};
use serde_json::{Value, json};

use crate::cli::{Implementation, RunArgs, cp_name};
use crate::cluster::{REQUESTED_AT, apply_all, kubectl, push_rev, request_reconcile, scrape};
use crate::fixtures::{self, BIG_NS, FLEET_NS, Variant};
use crate::floor::Floor;
use crate::procs::{Controllers, load_average, register_pid, start_controllers};
use crate::report::{Pair, RunResult};
use crate::util::{log, percentile};
use crate::watch::{Tracker, git_resource, ks_resource};

pub async fn run(args: &RunArgs) -> anyhow::Result<RunResult> {
    let label = args.implementation.label();
    let cp_name = cp_name(args);
    let dir = std::path::absolute(args.work_dir.join(format!(
        "{label}-n{}-{}-{}",
        args.n,
        match args.variant {
            Variant::A => "a",
            Variant::B => "b",
        },
        args.profile
    )))?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)?;
    let mut result = RunResult {
        implementation: label.to_string(),
        profile: args.profile.clone(),
        variant: match args.variant {
            Variant::A => "a".into(),
            Variant::B => "b".into(),
        },
        n: args.n,
        concurrent: args.concurrent,
        extra_args: (args.sc_args.clone(), args.kc_args.clone()),
        session: args.session.clone(),
        rep: args.rep,
        ..Default::default()
    };
    let load_before = load1();

    log(format!("starting a fresh control plane {cp_name:?}"));
    tokio::task::spawn_blocking(rflux_e2e::ensure_binaries).await??;
    let cp = ControlPlane::start(&cp_name).await?;
    let outcome = async {
        let git = tokio::task::spawn_blocking(GitServer::ensure).await??;
        let repo = git.create_repo("fleet")?;
        let sha1 = push_rev(&repo, 1)?;
        let url = git.http_url(repo.name());
        log(format!("repository {url} at {sha1}"));

        let kubeconfig = cp.kubeconfig_path().to_path_buf();
        crate::kubectl::install_crds(&kubeconfig, &args.crds)?;
        for ns in [FLEET_NS, BIG_NS, "flux-system"] {
            kubectl(&kubeconfig, &["create", "namespace", ns])?;
        }
        let client = cp.client().await?;
        let tracker = Tracker::start(client.clone());
        if args.implementation == Implementation::Floor {
            // No controllers: the floor sends the fleet's requests itself (fleet phase only).
            let rev1 = fixtures::branch_revision(&sha1);
            let floor = Floor::start(client.clone(), args.concurrent, rev1.clone(), &dir)?;
            let burst = fleet_burst(args, &client, &tracker, &url, &rev1, &mut result).await;
            floor.stop();
            if let Err(e) = &burst {
                result.notes.push(format!("aborted: {e:#}"));
            }
            return Ok(());
        }
        let mut ctl = start_controllers(args, &kubeconfig, &dir).await?;
        let phases = run_phases(
            args,
            &client,
            &tracker,
            &mut ctl,
            &repo,
            &url,
            &sha1,
            &mut result,
        )
        .await;
        if let Err(e) = &phases {
            result.notes.push(format!("aborted: {e:#}"));
            log(format!("phase failed: {e:#}"));
        }
        result.peak_rss_mib = ctl.mem("VmHWM");
        if args.keep {
            log("--keep: leaving the controllers and the control plane running");
            std::mem::forget(ctl);
        } else {
            ctl.stop();
        }
        Ok::<(), anyhow::Error>(())
    }
    .await;
    if !args.keep {
        log(format!("stopping control plane {cp_name:?}"));
        let name = cp_name.clone();
        tokio::task::spawn_blocking(move || ControlPlane::stop(&name)).await??;
    }
    outcome?;
    if let (Some(before), Some(after)) = (load_before, load1()) {
        result.load = Some((before, after));
    }
    Ok(result)
}

/// The 1-minute load average.
fn load1() -> Option<f64> {
    load_average().parse().ok()
}

#[allow(clippy::too_many_arguments)]
async fn run_phases(
    args: &RunArgs,
    client: &Client,
    tracker: &Tracker,
    ctl: &mut Controllers,
    repo: &TestRepo,
    url: &str,
    sha1: &str,
    result: &mut RunResult,
) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(args.timeout_secs);
    let rev1 = fixtures::branch_revision(sha1);
    let want = |p: &str| args.phases.iter().any(|x| x == p);
    let fleet_keys: Vec<String> = (0..args.n)
        .map(|i| format!("{FLEET_NS}/{}", fixtures::app_name(i)))
        .collect();

    if want("api") {
        api_phase(client, tracker, ctl, url, &rev1, result).await?;
    }

    if want("fleet") {
        if args.perf {
            let data = std::path::absolute(args.work_dir.join(format!(
                "perf-{}-n{}.data",
                args.implementation.label(),
                args.n
            )))?;
            let p = Command::new("perf")
                .args(["record", "-F", "499", "-e", "cpu-clock", "-g", "-o"])
                .arg(&data)
                .args(["-p", &ctl.kc.pid().to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            match p {
                Ok(p) => {
                    register_pid(p.id());
                    ctl.perf = Some(p);
                }
                Err(e) => result.notes.push(format!("perf record failed: {e}")),
            }
        }
        let cpu0 = ctl.cpu();
        let load0 = load_average();
        let burst = fleet_burst(args, client, tracker, url, &rev1, result).await;
        ctl.stop_perf();
        ctl.check_alive()?;
        let cpu1 = ctl.cpu();
        result.notes.push(format!(
            "machine load average (1 min) at the fleet start/end: {load0}/{}",
            load_average()
        ));
        if let (Some(a), Some(b)) = (cpu0, cpu1) {
            result.fleet_cpu_secs = Some(Pair {
                sc: b.sc - a.sc,
                kc: b.kc - a.kc,
            });
        }
        log(format!("fleet: cpu {:?}", result.fleet_cpu_secs));
        burst?;
        tokio::time::sleep(Duration::from_secs(10)).await;
        result.steady_rss_mib = ctl.mem("VmRSS");
        log(format!("steady RSS MiB: {:?}", result.steady_rss_mib));
    }

    if want("idle") {
        let c0 = ctl.cpu();
        let t = Instant::now();
        log(format!("idle: measuring CPU for {}s", args.idle_secs));
        tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
        ctl.check_alive()?;
        let c1 = ctl.cpu();
        let mins = t.elapsed().as_secs_f64() / 60.0;
        if let (Some(a), Some(b)) = (c0, c1) {
            result.idle_cpu_per_min = Some(Pair {
                sc: (b.sc - a.sc) / mins,
                kc: (b.kc - a.kc) / mins,
            });
        }
        result.idle_window_secs = Some(t.elapsed().as_secs_f64());
        log(format!("idle CPU s/min: {:?}", result.idle_cpu_per_min));
    }

    if want("change") && want("fleet") {
        let sha2 = push_rev(repo, 2)?;
        let rev2 = fixtures::branch_revision(&sha2);
        let t0 = Instant::now();
        let sources: Vec<String> = match args.variant {
            Variant::A => (0..args.n).map(fixtures::app_name).collect(),
            Variant::B => vec!["fleet".to_string()],
        };
        let token = jiff::Timestamp::now().to_string();
        request_reconcile(client, &git_resource(), FLEET_NS, &sources, &token).await?;
        log(format!(
            "change: pushed {sha2}, requested reconcile of {} GitRepositories",
            sources.len()
        ));
        let (_, missing) = tracker
            .wait_all(&fleet_keys, t0, timeout, |s| {
                s.ready && s.last_applied == rev2
            })
            .await;
        if missing.is_empty() {
            result.change_secs = Some(t0.elapsed().as_secs_f64());
        } else {
            result.notes.push(format!(
                "change: {} had not applied it at the timeout",
                missing.len()
            ));
        }
        log(format!("change propagation: {:?}s", result.change_secs));
    }

    if want("drift") && want("fleet") {
        drift_phase(args, client, tracker, result).await?;
    }
    Ok(())
}

/// The fleet burst: applies every GitRepository and Kustomization at once and waits until all
/// N Kustomizations are Ready at `rev1`; records the times.
pub(crate) async fn fleet_burst(
    args: &RunArgs,
    client: &Client,
    tracker: &Tracker,
    url: &str,
    rev1: &str,
    result: &mut RunResult,
) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(args.timeout_secs);
    let fleet_keys: Vec<String> = (0..args.n)
        .map(|i| format!("{FLEET_NS}/{}", fixtures::app_name(i)))
        .collect();
    let objs = fixtures::fleet_objects(args.variant, args.n, url);
    log(format!("fleet: applying {} objects", objs.len()));
    let m0 = scrape(client).await?;
    let t0 = Instant::now();
    apply_all(client, objs, 32).await?;
    log(format!(
        "fleet: burst applied in {:.1}s; waiting for {} Kustomizations",
        t0.elapsed().as_secs_f64(),
        args.n
    ));
    let (mut times, missing) = tracker
        .wait_all(&fleet_keys, t0, timeout, |s| {
            s.ready && s.observed_generation == s.generation && s.last_applied == rev1
        })
        .await;
    times.sort_by(f64::total_cmp);
    result.fleet_not_ready = missing.len();
    if missing.is_empty() {
        result.fleet_secs = times.last().copied();
    } else {
        result.notes.push(format!(
            "fleet: {} not Ready after {}s, e.g. {:?}",
            missing.len(),
            args.timeout_secs,
            &missing[..missing.len().min(3)]
        ));
    }
    result.fleet_p50_p90 = Some((percentile(&times, 0.5), percentile(&times, 0.9)));
    if missing.is_empty() {
        // Requests that trail the last Ready (events, late status writes) are counted too.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let m1 = scrape(client).await?;
        result.fleet_requests = crate::report::per_kustomization(&metrics::diff(&m0, &m1), args.n);
    }
    log(format!(
        "fleet: {} Ready; all after {:?}s, p50/p90 {:?}",
        times.len(),
        result.fleet_secs,
        result.fleet_p50_p90,
    ));
    if !missing.is_empty() {
        bail!("fleet did not become Ready");
    }
    Ok(())
}

async fn api_phase(
    client: &Client,
    tracker: &Tracker,
    ctl: &mut Controllers,
    url: &str,
    rev1: &str,
    result: &mut RunResult,
) -> anyhow::Result<()> {
    log("api: applying the 100-object Kustomization");
    let t0 = Instant::now();
    apply_all(
        client,
        vec![
            fixtures::git_repository("big", BIG_NS, url),
            fixtures::big_kustomization("big"),
        ],
        2,
    )
    .await?;
    let key = vec![format!("{BIG_NS}/big")];
    let (_, missing) = tracker
        .wait_all(&key, t0, Duration::from_secs(300), |s| {
            s.ready && s.last_applied == rev1
        })
        .await;
    if !missing.is_empty() {
        bail!("the 100-object Kustomization did not become Ready");
    }
    log(format!(
        "api: Ready after {:.1}s",
        t0.elapsed().as_secs_f64()
    ));
    // Let follow-up work (events, status writes, health polling) settle.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let window = Duration::from_secs(10);
    let ks_api: Api<DynamicObject> = Api::namespaced_with(client.clone(), BIG_NS, &ks_resource());
    let mut samples: Vec<(f64, metrics::Counts)> = Vec::new();
    for round in 0..3 {
        // Idle baseline window.
        let m0 = scrape(client).await?;
        tokio::time::sleep(window).await;
        let m1 = scrape(client).await?;
        let baseline = metrics::diff(&m0, &m1);
        // Reconcile window of the same length.
        let m2 = scrape(client).await?;
        let started = Instant::now();
        let token = format!("fleet-noop-{round}-{}", jiff::Timestamp::now().as_second());
        ks_api
            .patch(
                "big",
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"annotations": {REQUESTED_AT: token}}})),
            )
            .await?;
        let (_, missing) = tracker
            .wait_all(&key, started, Duration::from_secs(60), |s| {
                s.last_handled == token && s.ready
            })
            .await;
        if !missing.is_empty() {
            bail!("the no-op reconcile was not handled within 60s");
        }
        let took = started.elapsed();
        if took < window {
            tokio::time::sleep(window - took).await;
        }
        let m3 = scrape(client).await?;
        let mut reconcile = metrics::subtract(&metrics::diff(&m2, &m3), &baseline);
        // Our own annotation patch.
        let own = "PATCH kustomize.toolkit.fluxcd.io/kustomizations".to_string();
        if let Some(v) = reconcile.get_mut(&own) {
            *v -= 1.0;
        }
        reconcile.retain(|_, v| v.abs() > 0.0);
        let n = metrics::total(&reconcile);
        log(format!(
            "api: round {round}: {n} requests (handled in {:.2}s): {reconcile:?}",
            took.as_secs_f64()
        ));
        samples.push((n, reconcile));
        ctl.check_alive()?;
    }
    samples.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (median, breakdown) = samples.swap_remove(1);
    result.api_requests_per_noop = Some(median);
    result.api_breakdown = breakdown.into_iter().collect();
    Ok(())
}

async fn drift_phase(
    args: &RunArgs,
    client: &Client,
    tracker: &Tracker,
    result: &mut RunResult,
) -> anyhow::Result<()> {
    let name = fixtures::app_name(0);
    let key = format!("{FLEET_NS}/{name}");
    let interval = args.drift_interval_secs;
    let ks_api: Api<DynamicObject> = Api::namespaced_with(client.clone(), FLEET_NS, &ks_resource());
    let t0 = Instant::now();
    ks_api
        .patch(
            &name,
            &PatchParams::apply("rflux-fleet").force(),
            &Patch::Apply(&json!({
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                "kind": "Kustomization",
                "metadata": {"name": name, "namespace": FLEET_NS},
                "spec": fixtures::fleet_kustomization(args.variant, 0)["spec"].clone()
                    .as_object()
                    .map(|o| {
                        let mut o = o.clone();
                        o.insert("interval".into(), json!(format!("{interval}s")));
                        Value::Object(o)
                    })
                    .ok_or_else(|| anyhow!("no spec"))?,
            })),
        )
        .await?;
    let generation = ks_api.get(&name).await?.metadata.generation.unwrap_or(0);
    let (_, missing) = tracker
        .wait_all(
            std::slice::from_ref(&key),
            t0,
            Duration::from_secs(120),
            |s| s.ready && s.observed_generation >= generation,
        )
        .await;
    if !missing.is_empty() {
        bail!("drift: the Kustomization did not reconcile its new interval");
    }
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), FLEET_NS);
    let current = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(fixtures::DRIFT_ANNOTATION).cloned())
            .unwrap_or_default()
    };
    let pp = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..Default::default()
    };
    deploys
        .patch(
            &name,
            &pp,
            &Patch::Merge(&json!({"spec": {"template": {"metadata": {"annotations": {
                fixtures::DRIFT_ANNOTATION: "drifted"}}}}})),
        )
        .await?;
    let t_drift = Instant::now();
    log(format!(
        "drift: patched deployment {name}; waiting for the revert (interval {interval}s)"
    ));
    let limit = Duration::from_secs(3 * interval + 30);
    result.drift_interval_secs = Some(interval as f64);
    loop {
        let d = deploys.get(&name).await?;
        if current(&d) == "v1" {
            result.drift_secs = Some(t_drift.elapsed().as_secs_f64());
            break;
        }
        if t_drift.elapsed() > limit {
            result
                .notes
                .push(format!("drift: not reverted within {}s", limit.as_secs()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let since_ready = tracker
        .get(&key)
        .and_then(|s| s.seen)
        .map(|s| s.elapsed().as_secs_f64());
    log(format!(
        "drift: reverted after {:?}s (last Kustomization status {since_ready:?}s ago)",
        result.drift_secs
    ));
    Ok(())
}
