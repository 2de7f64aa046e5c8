//! Controller processes and small host helpers, shared by the benchmark binaries
//! (`rflux-sops-bench`, `rflux-oci-bench`, `rflux-remote-bench`; each includes this file with
//! `#[path]`).
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rflux_e2e::{free_ports, metrics};

pub fn log(msg: impl AsRef<str>) {
    eprintln!(
        "[{}] {}",
        jiff::Timestamp::now().strftime("%H:%M:%S"),
        msg.as_ref()
    );
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// A controller process; SIGTERM (then SIGKILL) when dropped.
pub struct Proc {
    name: String,
    child: Child,
}

impl Proc {
    /// Spawns `bin` with `args` and `envs` (plus `RUNTIME_NAMESPACE=flux-system`), its output in
    /// `log_file`, in a process group of its own.
    pub fn spawn(
        name: &str,
        bin: &Path,
        args: &[String],
        envs: &[(&str, &std::ffi::OsStr)],
        log_file: &Path,
    ) -> anyhow::Result<Proc> {
        use std::os::unix::process::CommandExt as _;
        let log = std::fs::File::create(log_file)?;
        let child = Command::new(bin)
            .args(args)
            .env("RUNTIME_NAMESPACE", "flux-system")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Proc {
            name: name.to_string(),
            child,
        })
    }

    /// Starts `bin` with free metrics and health ports; returns the health port too.
    pub fn start(
        name: &str,
        bin: &Path,
        args: &[String],
        kubeconfig: &Path,
        logs: &Path,
    ) -> anyhow::Result<(Proc, u16)> {
        let [metrics_port, health] = free_ports::<2>()?;
        let mut all = args.to_vec();
        all.push(format!("--metrics-addr=127.0.0.1:{metrics_port}"));
        all.push(format!("--health-addr=127.0.0.1:{health}"));
        let proc = Proc::spawn(
            name,
            bin,
            &all,
            &[("KUBECONFIG", kubeconfig.as_os_str())],
            &logs.join(format!("{name}.log")),
        )?;
        Ok((proc, health))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A `/proc/<pid>/status` memory field (`VmRSS`, `VmHWM`) in KiB (NaN when unreadable).
    pub fn mem_kib(&self, field: &str) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| metrics::status_kib(&s, field))
            .map_or(f64::NAN, |k| k as f64)
    }

    /// CPU seconds used so far (user + system).
    pub fn cpu_secs(&self) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .ok()
            .and_then(|s| metrics::cpu_ticks_from_stat(&s))
            .map_or(0.0, |t| t as f64 / 100.0)
    }

    /// Peak resident set (`VmHWM`), MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        self.mem_kib("VmHWM") / 1024.0
    }

    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Ok(Some(st)) = self.child.try_wait() {
            bail!("{} exited with {st} (see its log)", self.name);
        }
        Ok(())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..150 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn wait_readyz(p: &mut Proc, port: u16) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        p.check_alive()?;
        let addr = format!("127.0.0.1:{port}");
        if rflux_e2e::flux::http_status(&addr, "/readyz").is_ok_and(|s| s == 200) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{} not ready after 60 s", p.name);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
