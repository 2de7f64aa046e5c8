//! Shared by the fault-injection suites `faults_source.rs` and `faults_tenants.rs`: controller
//! processes started here (not through `support::procs`, whose fixed flags cannot be overridden:
//! these tests restart source-controller alone, point `--storage-adv-addr` at a proxy, put the
//! storage on a tmpfs and turn leader election on), byte-exact HTTP GETs, a slow TCP proxy,
//! `/proc` readings and samplers for `/healthz` and Lease renewals.
#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rflux_e2e::ControlPlane;
use rflux_e2e::process::log_tail;
use sha2::Digest as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `RFLUX_FAULTS=1` runs the whole fault-injection suite.
pub fn full_suite(test: &str) -> bool {
    let on = std::env::var("RFLUX_FAULTS").is_ok_and(|v| v == "1");
    if !on {
        eprintln!("skipped {test}: part of the fault-injection suite, run it with RFLUX_FAULTS=1");
    }
    on
}

/// `target/<profile>/<name>` next to the running test executable.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let deps = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().map(Path::to_path_buf).unwrap_or(deps)
    } else {
        deps
    };
    dir.join(name)
}

pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], rflux_e2e::free_port().unwrap()))
}

/// One controller process of ours; SIGKILLed on drop.
pub struct Proc {
    pub name: &'static str,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub log: PathBuf,
    pub health: SocketAddr,
    pub child: Option<Child>,
    pub starts: u32,
}

impl Proc {
    /// A controller `name` (`source-controller` or `kustomize-controller`) with the flags every
    /// test needs (loopback metrics and health, watch label, all namespaces, log level) plus
    /// `extra`. Not started yet.
    pub fn new(
        cp: &ControlPlane,
        name: &'static str,
        label: &str,
        leader_election: bool,
        runtime_ns: &str,
        extra: &[String],
    ) -> Proc {
        let health = loopback();
        let mut args = vec![
            format!("--metrics-addr={}", loopback()),
            format!("--health-addr={health}"),
            format!("--enable-leader-election={leader_election}"),
            "--watch-all-namespaces=true".into(),
            format!("--watch-label-selector={WATCH_LABEL}={label}"),
            "--log-level=info".into(),
        ];
        if leader_election {
            args.extend([
                "--leader-election-lease-duration=15s".into(),
                "--leader-election-renew-deadline=10s".into(),
                "--leader-election-retry-period=2s".into(),
            ]);
        }
        args.extend(extra.iter().cloned());
        let dir = cp.state_dir().join("logs");
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(format!("{name}-faults-{}.log", rflux_e2e::random_suffix(6)));
        Proc {
            name,
            program: binary(name),
            args,
            env: vec![
                (
                    "KUBECONFIG".into(),
                    cp.kubeconfig_path().display().to_string(),
                ),
                ("RUNTIME_NAMESPACE".into(), runtime_ns.into()),
            ],
            log,
            health,
            child: None,
            starts: 0,
        }
    }

    /// Starts (or restarts) the process, appending to its log; waits for `/readyz`.
    pub async fn start(&mut self) -> anyhow::Result<()> {
        if !self.program.is_file() {
            bail!(
                "{} is missing: cargo build -p source-controller -p kustomize-controller",
                self.program.display()
            );
        }
        let out = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", self.program.display()))?;
        self.starts += 1;
        eprintln!(
            "{} started (pid {}, start #{}), log {}",
            self.name,
            child.id(),
            self.starts,
            self.log.display()
        );
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.check_alive()?;
            if matches!(http_get_bytes(self.health, "/readyz").await, Ok((200, _))) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{} not ready in 60s:\n{}", self.name, self.tail(30));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Errors with the log tail if the process exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(c) = self.child.as_mut()
            && let Some(status) = c.try_wait()?
        {
            bail!("{} exited ({status}):\n{}", self.name, self.tail(40));
        }
        Ok(())
    }

    /// Errors with the log tail if the process is gone or a zombie (read from `/proc`, so a
    /// shared reference is enough).
    pub fn alive(&self) -> anyhow::Result<()> {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        let state = stat.rsplit(") ").next().and_then(|r| r.chars().next());
        if self.child.is_none() || matches!(state, None | Some('Z' | 'X')) {
            bail!(
                "{} (pid {}) is not running:\n{}",
                self.name,
                self.pid(),
                self.tail(40)
            );
        }
        Ok(())
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then SIGKILL after 10 s.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-s", "TERM", &c.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn tail(&self, lines: usize) -> String {
        format!(
            "--- {} ({}):\n{}",
            self.name,
            self.log.display(),
            log_tail(&self.log, lines)
        )
    }

    /// Peak resident set (VmHWM) in KiB.
    pub fn vm_hwm_kib(&self) -> Option<u64> {
        proc_status_kib(self.pid(), "VmHWM:")
    }

    pub fn rss_kib(&self) -> Option<u64> {
        proc_status_kib(self.pid(), "VmRSS:")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

pub const WATCH_LABEL: &str = "e2e.rflux.dev/controllers";

/// A `/proc/<pid>/status` field in KiB.
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// source-controller's flags for a storage directory and a storage address (advertised as
/// `adv`).
pub fn storage_args(storage: &Path, addr: SocketAddr, adv: SocketAddr) -> Vec<String> {
    vec![
        format!("--storage-path={}", storage.display()),
        format!("--storage-addr={addr}"),
        format!("--storage-adv-addr={adv}"),
    ]
}

/// `GET path` over HTTP/1.0: status and the body bytes, exactly.
pub async fn http_get_bytes(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, Vec<u8>)> {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        let end = buf
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .context("no end of the response head")?;
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let code = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .context("no status code")?;
        anyhow::Ok((code, buf[end + 4..].to_vec()))
    };
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .context("GET timed out")?
}

/// `GET url` (`http://host:port/path`).
pub async fn get_url(url: &str) -> anyhow::Result<(u16, Vec<u8>)> {
    let rest = url.strip_prefix("http://").context("not an http URL")?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let addr: SocketAddr = tokio::net::lookup_host(host)
        .await?
        .next()
        .context("no address")?;
    http_get_bytes(addr, if path.is_empty() { "/" } else { path }).await
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex(&sha2::Sha256::digest(data))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `n` bytes that do not compress (xorshift).
pub fn incompressible(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(n);
    out
}

/// One request relayed by [`SlowProxy`]: connection number, request path, when it came and
/// when the next request on the connection (or its end) came.
#[derive(Clone, Debug)]
pub struct Relayed {
    pub conn: u64,
    pub path: String,
    pub start: Instant,
    pub end: Option<Instant>,
}

/// A TCP proxy to `target` that sends at most about `bytes_per_sec` towards the client; a
/// connection that has carried `cut_after` bytes to the client (0: never) is closed right
/// there, tearing the response in flight; on odd-numbered connections the byte at offset
/// `corrupt_at` of what goes to the client (0: none) is flipped.
pub struct SlowProxy {
    pub addr: SocketAddr,
    pub connections: Arc<AtomicU64>,
    pub cut: Arc<AtomicU64>,
    pub corrupted: Arc<AtomicU64>,
    pub requests: Arc<std::sync::Mutex<Vec<Relayed>>>,
    task: tokio::task::JoinHandle<()>,
}

impl SlowProxy {
    pub async fn start(
        target: SocketAddr,
        bytes_per_sec: u64,
        cut_after: u64,
        corrupt_at: u64,
    ) -> SlowProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicU64::new(0));
        let cut = Arc::new(AtomicU64::new(0));
        let corrupted = Arc::new(AtomicU64::new(0));
        let requests = Arc::new(std::sync::Mutex::new(Vec::<Relayed>::new()));
        let (conns, cuts, reqs) = (connections.clone(), cut.clone(), requests.clone());
        let flips = corrupted.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let conn = conns.fetch_add(1, Ordering::SeqCst) + 1;
                let (cuts, reqs, flips) = (cuts.clone(), reqs.clone(), flips.clone());
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.split();
                    let (mut sr, mut sw) = server.split();
                    let close_last = |reqs: &std::sync::Mutex<Vec<Relayed>>| {
                        if let Ok(mut r) = reqs.lock()
                            && let Some(last) = r
                                .iter_mut()
                                .rev()
                                .find(|x| x.conn == conn && x.end.is_none())
                        {
                            last.end = Some(Instant::now());
                        }
                    };
                    let up = async {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            let n = match cr.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                            for line in text.lines().filter(|l| l.starts_with("GET ")) {
                                let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                                close_last(&reqs);
                                if let Ok(mut r) = reqs.lock() {
                                    r.push(Relayed {
                                        conn,
                                        path,
                                        start: Instant::now(),
                                        end: None,
                                    });
                                }
                            }
                            if sw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        std::future::pending::<()>().await;
                    };
                    let down = async {
                        let slice = (bytes_per_sec / 20).max(1) as usize;
                        let mut buf = vec![0u8; slice];
                        let mut sent = 0u64;
                        loop {
                            let n = match sr.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            let n = if cut_after > 0 {
                                n.min((cut_after - sent) as usize)
                            } else {
                                n
                            };
                            if conn % 2 == 1
                                && corrupt_at > 0
                                && (sent..sent + n as u64).contains(&corrupt_at)
                            {
                                buf[(corrupt_at - sent) as usize] ^= 0x55;
                                flips.fetch_add(1, Ordering::SeqCst);
                            }
                            if cw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                            sent += n as u64;
                            if cut_after > 0 && sent >= cut_after {
                                cuts.fetch_add(1, Ordering::SeqCst);
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        let _ = cw.shutdown().await;
                    };
                    tokio::select! {
                        _ = down => {}
                        _ = up => {}
                    }
                    close_last(&reqs);
                });
            }
        });
        SlowProxy {
            addr,
            connections,
            cut,
            corrupted,
            requests,
            task,
        }
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Samples `GET /healthz` on `addrs` every 200 ms until stopped; keeps the worst latency and
/// the failures per address.
pub struct HealthSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<(SocketAddr, Duration, u32, u32)>>,
}

impl HealthSampler {
    pub fn start(addrs: Vec<SocketAddr>) -> HealthSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut stats: Vec<(SocketAddr, Duration, u32, u32)> =
                addrs.iter().map(|a| (*a, Duration::ZERO, 0, 0)).collect();
            while !flag.load(Ordering::SeqCst) {
                for s in &mut stats {
                    let t = Instant::now();
                    let ok = matches!(http_get_bytes(s.0, "/healthz").await, Ok((200, _)));
                    s.1 = s.1.max(t.elapsed());
                    s.2 += 1;
                    if !ok {
                        s.3 += 1;
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            stats
        });
        HealthSampler { stop, task }
    }

    /// Stops; `(addr, max latency, samples, failures)` per address.
    pub async fn finish(self) -> Vec<(SocketAddr, Duration, u32, u32)> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap()
    }
}

/// Samples the Leases of `ns` every 250 ms: per Lease, the largest gap between two observed
/// renewTime changes (and since the last change, at the end).
pub struct LeaseSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<(String, Duration, u32)>>,
}

impl LeaseSampler {
    pub fn start(client: kube::Client, ns: &str) -> LeaseSampler {
        use k8s_openapi::api::coordination::v1::Lease;
        let api: kube::Api<Lease> = kube::Api::namespaced(client, ns);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            // name -> (last renewTime, when it changed, max gap, renewals)
            let mut seen: std::collections::BTreeMap<String, (String, Instant, Duration, u32)> =
                Default::default();
            while !flag.load(Ordering::SeqCst) {
                if let Ok(list) = api.list(&Default::default()).await {
                    for l in list.items {
                        let name = l.metadata.name.clone().unwrap_or_default();
                        let renew = l
                            .spec
                            .and_then(|s| s.renew_time)
                            .map(|t| format!("{:?}", t.0))
                            .unwrap_or_default();
                        let now = Instant::now();
                        let e = seen
                            .entry(name)
                            .or_insert_with(|| (renew.clone(), now, Duration::ZERO, 0));
                        if e.0 != renew {
                            e.2 = e.2.max(now - e.1);
                            e.0 = renew;
                            e.1 = now;
                            e.3 += 1;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            let now = Instant::now();
            seen.into_iter()
                .map(|(n, (_, at, gap, count))| (n, gap.max(now - at), count))
                .collect()
        });
        LeaseSampler { stop, task }
    }

    /// Stops; `(lease, max gap between renewals, renewals seen)`.
    pub async fn finish(self) -> Vec<(String, Duration, u32)> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap()
    }
}
