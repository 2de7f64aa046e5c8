//! The controller "manager": what both binaries' `main` do before and around their reconcilers
//! (signals, metrics and health servers, client, leader election, graceful shutdown).

use std::future::Future;

use kube::api::Api;
use kube::{Client, Resource};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::RuntimeError;
use super::client::{ClientOptions, build_clients};
use super::events::EventRecorder;
use super::fence::WriteFence;
use super::flags::{RuntimeFlags, parse_listen_addr, runtime_namespace};
use super::leader::{LeaderElectionConfig, LeaderElector, default_identity, lease_name};
use super::metrics::Metrics;
use super::server::{Readiness, bind, health_router, metrics_router, serve};
use super::sharding::{SHARDED_CONTROLLERS, ShardConfig, ShardLoop, Shards};
use super::shutdown::shutdown_on_signal;

/// Everything a controller needs at run time.
#[derive(Clone)]
pub struct Manager {
    /// Controller name (`source-controller`, `kustomize-controller`).
    pub name: String,
    /// Kubernetes client (throttled, instrumented).
    pub client: Client,
    /// Metrics registry.
    pub metrics: Metrics,
    /// `/readyz` state.
    pub readiness: Readiness,
    /// Cancelled on SIGTERM/SIGINT.
    pub shutdown: CancellationToken,
    /// Common flags.
    pub flags: RuntimeFlags,
    /// `RUNTIME_NAMESPACE` (default `flux-system`).
    pub namespace: String,
    /// Event recorder.
    pub recorder: EventRecorder,
    /// Pod identity (hostname + random suffix).
    pub identity: String,
    /// The write fence of every client the controllers use: with leader election, writes pass
    /// only while this replica certainly holds the lease ([`super::fence`]).
    pub fence: WriteFence,
    /// With `--auto-sharding`: the slots this replica holds (pass them to
    /// [`super::controller::run_controller_sharded`]).
    pub shards: Option<Shards>,
    /// The elector's own client (its Lease writes are what opens the fence).
    lease_client: Client,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// The leader-election task.
pub type ElectorHandle = JoinHandle<Result<(), super::leader::LeaderError>>;

/// Background tasks started by [`Manager::start`].
#[derive(Debug)]
pub struct ManagerTasks {
    servers: Vec<JoinHandle<Result<(), super::server::ServerError>>>,
    /// The shard lease loop (it releases the slots on shutdown).
    shard_loop: Option<JoinHandle<()>>,
}

impl Manager {
    /// Starts the plumbing: signal handling, metrics + health servers (bind errors fail here),
    /// the Kubernetes client (fails with a clear error when there is no configuration or the API
    /// server is unreachable), readiness.
    pub async fn start(
        name: &str,
        flags: &RuntimeFlags,
    ) -> Result<(Self, ManagerTasks), RuntimeError> {
        let shutdown = shutdown_on_signal();
        Self::start_with_shutdown(name, flags, shutdown).await
    }

    /// Like [`Manager::start`] with an externally owned shutdown token (tests, embedding).
    pub async fn start_with_shutdown(
        name: &str,
        flags: &RuntimeFlags,
        shutdown: CancellationToken,
    ) -> Result<(Self, ManagerTasks), RuntimeError> {
        let sharding = flags.sharding.auto_sharding;
        if sharding && !SHARDED_CONTROLLERS.contains(&name) {
            return Err(RuntimeError::Controller(format!(
                "--auto-sharding is not implemented by {name} yet (only {})",
                SHARDED_CONTROLLERS.join(", ")
            )));
        }
        let metrics = Metrics::new()?;
        let readiness = Readiness::new();
        let mut servers = Vec::new();
        if let Some(addr) = parse_listen_addr(&flags.metrics_addr)? {
            let listener = bind(addr).await?;
            tracing::info!(addr = %addr, "starting metrics server");
            servers.push(tokio::spawn(serve(
                listener,
                metrics_router(metrics.clone()),
                shutdown.clone(),
            )));
        }
        if let Some(addr) = parse_listen_addr(&flags.health_addr)? {
            let listener = bind(addr).await?;
            tracing::info!(addr = %addr, "starting health probes server");
            servers.push(tokio::spawn(serve(
                listener,
                health_router(readiness.clone()),
                shutdown.clone(),
            )));
        }
        let client_opts = ClientOptions {
            kubeconfig: flags.kubeconfig.clone(),
            qps: flags.kube_api_qps,
            burst: flags.kube_api_burst,
        };
        // With automatic sharding each slot lease fences its own objects' reconciles; the
        // process-wide leader fence stays open.
        let fence = if flags.leader_election.enable && !sharding {
            WriteFence::closed()
        } else {
            WriteFence::open()
        };
        let (client, lease_client) =
            build_clients(&client_opts, Some(metrics.clone()), fence.clone()).await?;
        readiness.set_ready(true);
        let identity = default_identity();
        let instance = identity
            .split_once('_')
            .map_or(identity.as_str(), |(h, _)| h)
            .to_string();
        // Events go out from a bounded queue on their own task and connection (the lease
        // client: never behind the reconciles' requests), through client-go's spam filter and
        // aggregation; a full queue drops events (counted), never blocks a reconcile.
        let recorder = EventRecorder::new(client.clone(), name, &instance)
            .with_webhook(&flags.events_addr)?
            .with_client(lease_client.clone())
            .with_queue(super::events::EVENT_QUEUE_CAPACITY)
            .register_metrics(metrics.registry())
            .map_err(|e| RuntimeError::Controller(format!("registering event metrics: {e}")))?;
        let namespace = runtime_namespace();
        let (shards, shard_loop) = if sharding {
            let le = &flags.leader_election;
            let cfg = LeaderElectionConfig {
                lease_name: String::new(),
                namespace: namespace.clone(),
                identity: identity.clone(),
                lease_duration: le.lease_duration,
                renew_deadline: le.renew_deadline,
                retry_period: le.retry_period,
                release_on_cancel: true,
            };
            cfg.validate()?;
            let shards = Shards::new(name, flags.sharding.shards, Some(&metrics))?;
            let lp = ShardLoop::new(
                lease_client.clone(),
                ShardConfig {
                    controller: name.to_string(),
                    namespace: namespace.clone(),
                    identity: identity.clone(),
                    lease_duration: le.lease_duration,
                    renew_deadline: le.renew_deadline,
                    retry_period: le.retry_period,
                    drain_grace: super::controller::SHUTDOWN_DRAIN_GRACE,
                },
                shards.clone(),
            );
            let handle = tokio::spawn(lp.run(shutdown.clone()));
            (Some(shards), Some(handle))
        } else {
            (None, None)
        };
        Ok((
            Self {
                name: name.to_string(),
                client,
                metrics,
                readiness,
                shutdown,
                flags: flags.clone(),
                namespace,
                recorder,
                identity,
                fence,
                shards,
                lease_client,
            },
            ManagerTasks {
                servers,
                shard_loop,
            },
        ))
    }

    /// The API to watch for kind `K`: all namespaces, or only `RUNTIME_NAMESPACE` when
    /// `--watch-all-namespaces=false`.
    pub fn watch_api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
    {
        if self.flags.watch_all_namespaces {
            Api::all(self.client.clone())
        } else {
            Api::namespaced(self.client.clone(), &self.namespace)
        }
    }

    /// Starts leader election when `--enable-leader-election` is set; the receiver is `true`
    /// while leading. Without leader election (or with `--auto-sharding`, whose slot leases
    /// replace it) it is always `true`.
    pub fn elect(&self) -> Result<(watch::Receiver<bool>, Option<ElectorHandle>), RuntimeError> {
        let le = &self.flags.leader_election;
        if !le.enable || self.shards.is_some() {
            let (tx, rx) = watch::channel(true);
            // Keep the sender alive for the life of the process so the channel stays open.
            tokio::spawn({
                let shutdown = self.shutdown.clone();
                async move {
                    shutdown.cancelled().await;
                    drop(tx);
                }
            });
            return Ok((rx, None));
        }
        let cfg = LeaderElectionConfig {
            lease_name: lease_name(&self.name, &self.flags.watch_label_selector),
            namespace: self.namespace.clone(),
            identity: self.identity.clone(),
            lease_duration: le.lease_duration,
            renew_deadline: le.renew_deadline,
            retry_period: le.retry_period,
            release_on_cancel: le.release_on_cancel,
        };
        let elector =
            LeaderElector::new(self.lease_client.clone(), cfg, Some(self.metrics.clone()))?
                .with_fence(self.fence.clone());
        let (rx, handle) = elector.spawn(self.shutdown.clone());
        Ok((rx, Some(handle)))
    }

    /// Runs `controllers` once this replica leads, until SIGTERM/SIGINT (then waits for the
    /// controllers to drain) or until leadership is lost (error: the process must exit, as
    /// controller-runtime does). `controllers` gets the manager and a token cancelled on
    /// shutdown or leadership loss.
    pub async fn run<F, Fut>(self, tasks: ManagerTasks, controllers: F) -> Result<(), RuntimeError>
    where
        F: FnOnce(Manager, CancellationToken) -> Fut,
        Fut: Future<Output = Result<(), RuntimeError>> + Send + 'static,
    {
        let (mut leader_rx, elector) = self.elect()?;
        let stop = self.shutdown.child_token();
        tracing::info!(name = %self.name, "waiting for leadership");
        let leading = tokio::select! {
            () = self.shutdown.cancelled() => false,
            l = super::leader::wait_until_leader(&mut leader_rx) => l,
        };
        let mut result = Ok(());
        if leading && !self.shutdown.is_cancelled() {
            tracing::info!(name = %self.name, "starting controllers");
            let mut ctrl = tokio::spawn(controllers(self.clone(), stop.clone()));
            let lost = async {
                // Leadership lost: the receiver flips to false or the elector ends.
                let _ = leader_rx.wait_for(|l| !*l).await;
            };
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => {
                    stop.cancel();
                    result = flatten(ctrl.await);
                }
                r = &mut ctrl => {
                    result = flatten(r);
                }
                () = lost => {
                    stop.cancel();
                    if self.shutdown.is_cancelled() {
                        result = flatten(ctrl.await);
                    } else {
                        // Like controller-runtime: no drain, the process exits. The fence has
                        // already refused every write since the lease window ended.
                        ctrl.abort();
                        result = Err(RuntimeError::LeadershipLost);
                    }
                }
            }
        }
        self.shutdown.cancel();
        // Events still queued go out before the process ends (bounded).
        let _ =
            tokio::time::timeout(std::time::Duration::from_secs(2), self.recorder.flush()).await;
        if let Some(h) = elector {
            match h.await {
                Ok(Err(e)) if result.is_ok() => result = Err(e.into()),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "leader election task failed"),
            }
        }
        if let Some(h) = tasks.shard_loop
            && let Err(e) = h.await
        {
            tracing::warn!(error = %e, "shard lease loop failed");
        }
        for s in tasks.servers {
            match s.await {
                Ok(Err(e)) => tracing::error!(error = %e, "server error"),
                Ok(Ok(())) => {}
                Err(e) => tracing::warn!(error = %e, "server task failed"),
            }
        }
        tracing::info!(name = %self.name, "stopped");
        result
    }
}

fn flatten(
    r: Result<Result<(), RuntimeError>, tokio::task::JoinError>,
) -> Result<(), RuntimeError> {
    match r {
        Ok(inner) => inner,
        Err(e) => Err(RuntimeError::Controller(format!(
            "controller task failed: {e}"
        ))),
    }
}
