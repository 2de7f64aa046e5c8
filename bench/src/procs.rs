//! The controller processes of a run: starting, measuring and stopping them, and the registry
//! of their pids that the SIGINT/SIGTERM handler kills.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rflux_e2e::{free_ports, metrics};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cli::RunArgs;
use crate::report::Pair;
use crate::util::log;

/// Pids of the controller (and perf) processes of the current run, killed on SIGINT/SIGTERM.
static PIDS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

pub fn register_pid(pid: u32) {
    if let Ok(mut g) = PIDS.lock() {
        g.push(pid);
    }
}

pub fn kill_registered() {
    let pids = PIDS.lock().map(|g| g.clone()).unwrap_or_default();
    for pid in pids {
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
}

pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

pub struct Proc {
    name: String,
    child: Child,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn cpu_secs(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?;
        let ticks = metrics::cpu_ticks_from_stat(&stat)?;
        Some(ticks as f64 / clock_ticks())
    }

    fn status_mib(&self, field: &str) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        metrics::status_kib(&status, field).map(|k| k as f64 / 1024.0)
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn stop(&mut self) {
        if !self.alive() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if !self.alive() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        log(format!("{} did not stop on SIGTERM; killing it", self.name));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The 1-minute load average (`/proc/loadavg`), as text.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".to_string())
}

/// `getconf CLK_TCK` (100 on Linux nearly everywhere).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

fn spawn_proc(
    name: &str,
    bin: &Path,
    args: &[String],
    env: &[(&str, String)],
    log_path: &Path,
) -> anyhow::Result<Proc> {
    use std::os::unix::process::CommandExt as _;
    let out = std::fs::File::create(log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    register_pid(child.id());
    Ok(Proc {
        name: name.to_string(),
        child,
    })
}

/// `GET path` on 127.0.0.1:port; true on a 200.
async fn http_ok(port: u16, path: &str) -> bool {
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
            .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<bool, std::io::Error>(
            buf.starts_with(b"HTTP/1.0 200") || buf.starts_with(b"HTTP/1.1 200"),
        )
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), attempt).await,
        Ok(Ok(true))
    )
}

pub struct Controllers {
    pub sc: Proc,
    pub kc: Proc,
    pub perf: Option<Child>,
}

impl Controllers {
    pub fn cpu(&self) -> Option<Pair> {
        Some(Pair {
            sc: self.sc.cpu_secs()?,
            kc: self.kc.cpu_secs()?,
        })
    }

    pub fn mem(&self, field: &str) -> Option<Pair> {
        Some(Pair {
            sc: self.sc.status_mib(field)?,
            kc: self.kc.status_mib(field)?,
        })
    }

    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        for p in [&mut self.sc, &mut self.kc] {
            if !p.alive() {
                bail!("{} exited (see its log)", p.name);
            }
        }
        Ok(())
    }

    pub fn stop_perf(&mut self) {
        if let Some(mut p) = self.perf.take() {
            let _ = Command::new("kill")
                .args(["-INT", &p.id().to_string()])
                .status();
            let _ = p.wait();
        }
    }

    pub fn stop(&mut self) {
        self.stop_perf();
        self.kc.stop();
        self.sc.stop();
    }
}

fn split_args(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

pub async fn start_controllers(
    args: &RunArgs,
    kubeconfig: &Path,
    dir: &Path,
) -> anyhow::Result<Controllers> {
    let (sc_bin, kc_bin) = args.implementation.binaries();
    let storage = dir.join("storage");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&storage)?;
    std::fs::create_dir_all(&tmp)?;
    let env = [
        ("KUBECONFIG", kubeconfig.display().to_string()),
        ("RUNTIME_NAMESPACE", "flux-system".to_string()),
        ("TMPDIR", tmp.display().to_string()),
    ];
    let [sm, sh, sp, km, kh] = free_ports::<5>()?;
    let mut sc_args = vec![
        format!("--metrics-addr=127.0.0.1:{sm}"),
        format!("--health-addr=127.0.0.1:{sh}"),
        format!("--storage-path={}", storage.display()),
        format!("--storage-addr=127.0.0.1:{sp}"),
        format!("--storage-adv-addr=127.0.0.1:{sp}"),
        "--enable-leader-election=false".to_string(),
        format!("--concurrent={}", args.concurrent),
    ];
    sc_args.extend(split_args(&args.sc_args));
    let mut kc_args = vec![
        format!("--metrics-addr=127.0.0.1:{km}"),
        format!("--health-addr=127.0.0.1:{kh}"),
        "--enable-leader-election=false".to_string(),
        format!("--concurrent={}", args.concurrent),
    ];
    kc_args.extend(split_args(&args.kc_args));
    log(format!("starting {sc_bin} {}", sc_args.join(" ")));
    let sc = spawn_proc(
        "source-controller",
        &args.bin_dir.join(sc_bin),
        &sc_args,
        &env,
        &dir.join("source-controller.log"),
    )?;
    log(format!("starting {kc_bin} {}", kc_args.join(" ")));
    let kc = spawn_proc(
        "kustomize-controller",
        &args.bin_dir.join(kc_bin),
        &kc_args,
        &env,
        &dir.join("kustomize-controller.log"),
    )?;
    let mut ctl = Controllers { sc, kc, perf: None };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        ctl.check_alive()?;
        if http_ok(sh, "/readyz").await && http_ok(kh, "/readyz").await {
            break;
        }
        if Instant::now() > deadline {
            log("controllers not ready after 60s; continuing");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(ctl)
}
