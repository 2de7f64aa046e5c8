//! Controller replicas with leader election, each with its own client identity (a client
//! certificate `CN=rflux-<replica>` in `system:masters`, so the audit log tells them apart) and
//! `HOSTNAME=<replica>` (so the Lease holder, `<hostname>_<random>`, names the replica).
//! `support::procs::Controllers` starts controllers without leader election, hence this.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use rflux_e2e::ControlPlane;
use rflux_e2e::process::log_tail;

use crate::support::procs::{Binaries, http_status};

/// Namespace of the Leases (`RUNTIME_NAMESPACE`).
pub const LEASE_NAMESPACE: &str = "default";

/// `--leader-election-*` of every replica: short, so that a failover fits a test.
pub const LEASE_FLAGS: [&str; 3] = [
    "--leader-election-lease-duration=6s",
    "--leader-election-renew-deadline=4s",
    "--leader-election-retry-period=1s",
];

/// The two controllers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Source,
    Kustomize,
}

impl Kind {
    pub fn binary_name(self) -> &'static str {
        match self {
            Kind::Source => "source-controller",
            Kind::Kustomize => "kustomize-controller",
        }
    }

    /// Flux's lease name without a watch label selector.
    pub fn lease(self) -> String {
        format!("{}-leader-election", self.binary_name())
    }

    pub fn short(self) -> &'static str {
        match self {
            Kind::Source => "sc",
            Kind::Kustomize => "kc",
        }
    }
}

/// One running replica; killed (SIGCONT first, then SIGKILL) when dropped.
pub struct Replica {
    pub kind: Kind,
    /// `sc-a`, `kc-b`, …: its HOSTNAME.
    pub name: String,
    /// Its user name towards the API server.
    pub user: String,
    pub child: Child,
    pub log: PathBuf,
    pub health: SocketAddr,
    _storage: tempfile::TempDir,
    _tmp: tempfile::TempDir,
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], rflux_e2e::free_port().expect("port")))
}

impl Replica {
    /// Starts replica `<kind>-<letter>` against `cp` and waits for its `/readyz`.
    pub async fn start(cp: &ControlPlane, kind: Kind, letter: &str) -> Replica {
        let name = format!("{}-{letter}", kind.short());
        let user = format!("rflux-{name}");
        let kubeconfig = cp
            .user_kubeconfig(&user, &["system:masters"])
            .expect("client certificate");
        let bins = Binaries::ours();
        let program = match kind {
            Kind::Source => bins.source,
            Kind::Kustomize => bins.kustomize,
        };
        assert!(
            program.is_file(),
            "{} is missing: cargo build -p source-controller -p kustomize-controller",
            program.display()
        );
        let storage = tempfile::tempdir().expect("tempdir");
        let tmp = tempfile::tempdir().expect("tempdir");
        let health = loopback();
        let mut args = vec![
            format!("--metrics-addr={}", loopback()),
            format!("--health-addr={health}"),
            "--enable-leader-election=true".to_string(),
            "--watch-all-namespaces=true".to_string(),
            "--requeue-dependency=2s".to_string(),
            "--log-level=info".to_string(),
        ];
        args.extend(LEASE_FLAGS.iter().map(|s| s.to_string()));
        if kind == Kind::Source {
            let addr = loopback();
            args.extend([
                format!("--storage-path={}", storage.path().display()),
                format!("--storage-addr={addr}"),
                format!("--storage-adv-addr={addr}"),
            ]);
        }
        let log = cp.state_dir().join("logs").join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = Command::new(&program)
            .args(&args)
            .env("KUBECONFIG", &kubeconfig)
            .env("RUNTIME_NAMESPACE", LEASE_NAMESPACE)
            .env("HOSTNAME", &name)
            .env("TMPDIR", tmp.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn replica");
        let mut replica = Replica {
            kind,
            name,
            user,
            child,
            log,
            health,
            _storage: storage,
            _tmp: tmp,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_status(health, "/readyz").await != Some(200) {
            assert!(
                replica.running(),
                "{} exited:\n{}",
                replica.name,
                replica.tail(30)
            );
            assert!(
                Instant::now() < deadline,
                "{} not ready:\n{}",
                replica.name,
                replica.tail(30)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!(
            "replica {} (pid {}, user {}) ready; log {}",
            replica.name,
            replica.child.id(),
            replica.user,
            replica.log.display()
        );
        replica
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Still running (a stopped process counts as running).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The exit status, if it exited.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args(["-s", sig, &self.pid().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -s {sig} {}", self.pid());
    }

    pub fn tail(&self, lines: usize) -> String {
        format!(
            "--- {} ({}):\n{}",
            self.name,
            self.log.display(),
            log_tail(&self.log, lines)
        )
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if self.running() {
            let _ = Command::new("kill")
                .args(["-s", "CONT", &self.pid().to_string()])
                .status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The replica name holding `kind`'s Lease (the holder identity up to `_`), if any.
pub async fn lease_holder(client: &Client, kind: Kind) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let lease = leases.get_opt(&kind.lease()).await.ok()??;
    let holder = lease.spec?.holder_identity?;
    holder
        .split_once('_')
        .map(|(h, _)| h.to_string())
        .filter(|h| !h.is_empty())
}
