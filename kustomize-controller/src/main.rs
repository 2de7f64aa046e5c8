//! kustomize-controller: Kustomization reconciliation (build, apply, prune, health).
//!
//! Without a subcommand the binary runs the controller (Flux's flags and defaults); subcommands
//! are one-shot tools.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{predicates, watcher};
use kustomize_controller::argo::ordered_stream;
use kustomize_controller::config_watch::{ConfigKind, config_dependents};
use kustomize_controller::decrypt::keys::keys_from_files;
use kustomize_controller::decrypt::{decrypt_objects, decrypt_sources};
use kustomize_controller::fetch::{ArtifactFetcher, FetcherOptions};
use kustomize_controller::flags::KustomizeControllerFlags;
use kustomize_controller::reconcile::source::ArtifactSource;
use kustomize_controller::reconcile::triggers::Triggers;
use kustomize_controller::reconcile::{Context, reconcile};
use kustomize_controller::remote::RemotePool;
use kustomize_controller::source_watch::{source_events, watch_sources};
use kustomize_controller::ssa::parse_custom_stage_kinds;
use kustomize_controller::tracker::Tracker;
use rflux_common::api::gitrepository::GitRepository;
use rflux_common::api::kustomization::{KUSTOMIZATION_KIND, KUSTOMIZE_GROUP, Kustomization};
use rflux_common::api::ocirepository::OciRepository;
use rflux_common::runtime::client::load_config;
use rflux_common::runtime::controller::ControllerSettings;
use rflux_common::runtime::flags::{
    KUSTOMIZE_FEATURE_GATES, KUSTOMIZE_UNSUPPORTED_GATES, gate_enabled, parse_feature_gates,
    refuse_unsupported,
};
use rflux_common::runtime::process;
use rflux_common::runtime::{Manager, RuntimeError, init_logging, run_controller_sharded};
use rflux_kustomize::{BuildOptions, LoadRestrictor};

const CONTROLLER_NAME: &str = "kustomize-controller";

/// Flux-compatible kustomize-controller.
#[derive(Debug, Parser)]
#[command(name = CONTROLLER_NAME, version, about)]
struct Cli {
    /// One-shot tool; without a subcommand the controller runs.
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    flags: KustomizeControllerFlags,
}

/// One-shot subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Build a kustomization directory and write the objects as multi-document YAML to
    /// stdout, like `kustomize build`.
    Build {
        /// The directory that holds kustomization.yaml.
        dir: PathBuf,
        /// `LoadRestrictionsRootOnly` (kustomize's default) or `LoadRestrictionsNone`.
        #[arg(long, default_value = "LoadRestrictionsRootOnly")]
        load_restrictor: String,
        /// Decrypt SOPS documents as the controller does with `spec.decryption`, with the keys
        /// of this file: an age identity file (`age-keygen` output) or an armored OpenPGP
        /// secret key (`*.asc`). Repeatable. The plaintext goes to stdout only.
        #[arg(long = "decrypt-key", value_name = "FILE")]
        decrypt_keys: Vec<PathBuf>,
        /// With `--decrypt-key`: the root that files decrypted before the build must stay in
        /// (the artifact root in the controller); default: the directory built.
        #[arg(long)]
        root: Option<PathBuf>,
        /// Print the objects in the order of an Argo CD sync (phases, waves, hooks), each
        /// (phase, wave) step after a `# <Phase> wave <n>` comment line (docs/argo-compat.md).
        #[arg(long)]
        argo_order: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(cmd) = cli.command {
        return match cmd {
            Command::Build {
                dir,
                load_restrictor,
                decrypt_keys,
                root,
                argo_order,
            } => build_command(
                &dir,
                &load_restrictor,
                &decrypt_keys,
                root.as_deref(),
                argo_order,
            ),
        };
    }
    process::cap_malloc_arenas(CONTROLLER_NAME);
    let runtime = match process::build_runtime(cli.flags.concurrent) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{CONTROLLER_NAME}: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.flags)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "unable to run {CONTROLLER_NAME}");
            eprintln!("{CONTROLLER_NAME}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `kustomize-controller build <dir>`: the engine as a command.
fn build_command(
    dir: &Path,
    load_restrictor: &str,
    decrypt_keys: &[PathBuf],
    root: Option<&Path>,
    argo_order: bool,
) -> ExitCode {
    let restrictor = match load_restrictor {
        "LoadRestrictionsRootOnly" | "rootOnly" => LoadRestrictor::RootOnly,
        "LoadRestrictionsNone" | "none" => LoadRestrictor::None,
        other => {
            eprintln!(
                "Error: unknown load restrictor '{other}' (use LoadRestrictionsRootOnly or LoadRestrictionsNone)"
            );
            return ExitCode::FAILURE;
        }
    };
    let mut opts = BuildOptions {
        load_restrictor: restrictor,
        // the Argo plan may hold hooks named by `generateName` alone
        generate_names: argo_order,
        ..BuildOptions::default()
    };
    let keys = if decrypt_keys.is_empty() {
        None
    } else {
        let keys = match keys_from_files(decrypt_keys) {
            Ok(k) => k,
            Err(e) => {
                eprintln!("Error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let root = root.unwrap_or(dir);
        let rel = dir.strip_prefix(root).unwrap_or(Path::new("."));
        match decrypt_sources(root, &rel.to_string_lossy(), &keys) {
            Ok(files) => opts.overlay = Some(Arc::new(files)),
            Err(e) => {
                eprintln!("Error: {e}");
                return ExitCode::FAILURE;
            }
        }
        Some(keys)
    };
    match rflux_kustomize::build(dir, &opts) {
        Ok(resources) => {
            let mut objects: Vec<serde_json::Value> =
                resources.into_iter().map(|r| r.obj).collect();
            if let Some(keys) = &keys
                && let Err(e) = decrypt_objects(&mut objects, keys)
            {
                eprintln!("Error: {e}");
                return ExitCode::FAILURE;
            }
            let text = if argo_order {
                match ordered_stream(&objects, rflux_kustomize::to_yaml_stream) {
                    Ok(ordered) => {
                        for line in ordered.left_out.iter().chain(&ordered.notes) {
                            eprintln!("note: {line}");
                        }
                        ordered.text
                    }
                    Err(e) => {
                        eprintln!("Error: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            } else {
                rflux_kustomize::to_yaml_stream(&objects)
            };
            let mut stdout = std::io::stdout().lock();
            let code = match stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("Error: writing output: {e}");
                    ExitCode::FAILURE
                }
            };
            // The process ends here: freeing every object one by one would only delay it
            // (milliseconds on a large build), the kernel takes the memory back at once.
            std::mem::forget(objects);
            std::mem::forget(text);
            code
        }
        Err(e) => {
            eprintln!("Error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(flags: KustomizeControllerFlags) -> Result<(), RuntimeError> {
    init_logging(flags.runtime.log_level, flags.runtime.log_encoding)?;
    let gates = parse_feature_gates(&flags.runtime.feature_gates, KUSTOMIZE_FEATURE_GATES)?;
    refuse_unsupported(&gates, KUSTOMIZE_UNSUPPORTED_GATES)?;
    for name in flags.inert_flags_in_use() {
        tracing::info!(
            flag = name,
            "flag accepted for Flux compatibility but has no effect yet"
        );
    }
    tracing::info!(
        concurrent = flags.concurrent,
        no_cross_namespace_refs = flags.no_cross_namespace_refs,
        feature_gates = ?gates,
        "starting {CONTROLLER_NAME}"
    );
    let (manager, tasks) = Manager::start(CONTROLLER_NAME, &flags.runtime).await?;
    // The base configuration of the impersonating (service account) clients.
    let config = load_config(flags.runtime.kubeconfig.as_ref()).await?;
    let cache_dir = std::env::temp_dir().join("kustomize-controller-artifacts");
    let mut fetch_opts = FetcherOptions::new(cache_dir).with_env_host_override();
    fetch_opts.retries = flags.http_retry;
    let fetcher = ArtifactFetcher::new(fetch_opts)
        .map_err(|e| RuntimeError::Controller(format!("artifact fetcher: {e}")))?;
    let strict = gate_enabled(&gates, "StrictPostBuildSubstitutions");
    let additive_cel = gate_enabled(&gates, "AdditiveCELDependencyCheck");
    let watch_applied = gate_enabled(&gates, "WatchAppliedObjects");
    let refuse_conflicts = gate_enabled(&gates, "RefuseOwnershipConflicts");
    let cancel_health = gate_enabled(&gates, "CancelHealthCheckOnNewRevision");
    let fail_fast = !gate_enabled(&gates, "DisableFailFastBehavior");
    let direct_source_fetch = gate_enabled(&gates, "DirectSourceFetch");
    let group_change_log = gate_enabled(&gates, "GroupChangeLog");
    let argo_sync_semantics = gate_enabled(&gates, "ArgoSyncSemantics");
    let watch_configs = !gate_enabled(&gates, "DisableConfigWatchers");
    if direct_source_fetch {
        tracing::info!(
            "DirectSourceFetch feature gate is enabled, sources will be fetched directly from the API server bypassing the cache"
        );
    }
    // Registered before leadership, like controller-runtime: non-leaders expose zeroed series.
    let controller_metrics = manager
        .metrics
        .register_controller("kustomization", flags.concurrent);
    let concurrent = flags.concurrent;
    manager
        .run(tasks, move |mgr, stop| async move {
            let mut ctx = Context::new(mgr.client.clone(), config, mgr.recorder.clone(), fetcher);
            ctx.jitter_percentage = mgr.flags.interval_jitter_percentage;
            ctx.requeue_dependency = mgr.flags.requeue_dependency;
            ctx.no_cross_namespace_refs = flags.no_cross_namespace_refs;
            ctx.default_service_account = mgr.flags.default_service_account.clone();
            ctx.strict_substitutions = strict;
            ctx.additive_cel_dependency_check = additive_cel;
            ctx.refuse_conflicts = refuse_conflicts;
            ctx.fence = mgr.fence.clone();
            ctx.cancel_health_on_new_revision = cancel_health;
            ctx.fail_fast = fail_fast;
            ctx.direct_source_fetch = direct_source_fetch;
            ctx.group_change_log = group_change_log;
            ctx.argo_sync_semantics = argo_sync_semantics;
            let triggers = ctx.triggers.clone();
            // Objects changed by someone else reconcile their Kustomization at once.
            // --concurrent bounds the working stages; with the tracker, health waits run
            // beside them on its watches (see Context::work_slots).
            ctx.work_slots = Arc::new(tokio::sync::Semaphore::new(usize::from(concurrent.max(1))));
            // One stream of Kustomizations to reconcile now: drift seen by the trackers (the
            // local one and each remote cluster's), changed kubeconfig Secrets, remote clusters
            // unreachable or back (`remote/`).
            let (sink, drift) = futures::channel::mpsc::unbounded();
            if watch_applied {
                ctx.tracker = Some(Tracker::with_sink(
                    mgr.client.clone(),
                    flags.override_manager.clone(),
                    sink.clone(),
                    None,
                ));
            }
            ctx.remote = RemotePool::new(mgr.client.clone(), Some(sink));
            ctx.override_managers = flags.override_manager.clone();
            ctx.sops_age_secret = (!flags.sops_age_secret.is_empty())
                .then(|| (mgr.namespace.clone(), flags.sops_age_secret.clone()));
            ctx.custom_stage_kinds = parse_custom_stage_kinds(
                &flags
                    .custom_apply_stage_kinds
                    .split(',')
                    .map(str::to_string)
                    .collect::<Vec<_>>(),
            );
            let settings = ControllerSettings {
                name: "kustomization".into(),
                group: KUSTOMIZE_GROUP.into(),
                kind: KUSTOMIZATION_KIND.into(),
                concurrency: if watch_applied { u16::MAX } else { concurrent },
                label_selector: mgr.flags.watch_label_selector.clone(),
            };
            // A new source revision reconciles the Kustomizations that use it at once; the
            // same watches keep the source caches the reconciles read their artifact from.
            let (git_cache, git_events) = source_events(mgr.watch_api::<GitRepository>());
            let (oci_cache, oci_events) = source_events(mgr.watch_api::<OciRepository>());
            let _ = GitRepository::cache(&ctx).set(git_cache);
            let _ = OciRepository::cache(&ctx).set(oci_cache);
            // Config watchers (Flux's): labelled ConfigMaps and Secrets, metadata only.
            let configs = (
                mgr.watch_api::<PartialObjectMeta<ConfigMap>>(),
                flags.watch_configs_label_selector.clone(),
            );
            let secrets = (
                mgr.watch_api::<PartialObjectMeta<Secret>>(),
                flags.watch_configs_label_selector.clone(),
            );
            // With --auto-sharding: only the Kustomizations of the shards this replica holds.
            let shards = mgr.shards.clone();
            run_controller_sharded(
                mgr.watch_api::<Kustomization>(),
                settings,
                controller_metrics,
                mgr.flags.min_retry_delay,
                mgr.flags.max_retry_delay,
                Arc::new(ctx),
                reconcile,
                stop.clone(),
                shards,
                move |controller| {
                    let controller = if watch_configs {
                        let store = controller.store();
                        let cm_store = store.clone();
                        let cm_triggers = triggers.clone();
                        let secret_store = store.clone();
                        let secret_triggers = triggers.clone();
                        controller
                            .watches_stream(config_events::<ConfigMap>(&configs), move |m| {
                                config_trigger(&m, ConfigKind::ConfigMap, &cm_store, &cm_triggers)
                            })
                            .watches_stream(config_events::<Secret>(&secrets), move |m| {
                                config_trigger(
                                    &m,
                                    ConfigKind::Secret,
                                    &secret_store,
                                    &secret_triggers,
                                )
                            })
                    } else {
                        controller
                    };
                    let controller = watch_sources(controller, git_events, triggers.clone());
                    let controller = watch_sources(controller, oci_events, triggers);
                    controller.reconcile_on(
                        drift.map(|(ns, name)| ObjectRef::<Kustomization>::new(&name).within(&ns)),
                    )
                },
            )
            .await;
            Ok(())
        })
        .await
}

/// Changes of the labelled objects of one config kind (metadata only; a relist that changes
/// nothing triggers nothing).
fn config_events<K>(
    (api, selector): &(kube::Api<PartialObjectMeta<K>>, String),
) -> impl futures::Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default,
    PartialObjectMeta<K>: serde::de::DeserializeOwned,
{
    watcher::watcher(api.clone(), watcher::Config::default().labels(selector))
        .default_backoff()
        .touched_objects()
        .predicate_filter(predicates::resource_version, Default::default())
}

/// The Kustomizations to reconcile for a changed config object; their running health checks
/// are cancelled first (CancelHealthCheckOnNewRevision, like Flux's requeue wrapper).
fn config_trigger<K: kube::Resource>(
    meta: &PartialObjectMeta<K>,
    kind: ConfigKind,
    store: &reflector::Store<Kustomization>,
    triggers: &Triggers,
) -> Vec<ObjectRef<Kustomization>> {
    let ns = meta.metadata.namespace.clone().unwrap_or_default();
    let name = meta.metadata.name.clone().unwrap_or_default();
    let all = store.state();
    let deps = config_dependents(kind, &ns, &name, all.iter().map(AsRef::as_ref));
    let by = format!("{}/{ns}/{name}", kind.as_str());
    for d in &deps {
        triggers.fire(&(ns.clone(), d.name.clone()), &by);
    }
    deps
}
