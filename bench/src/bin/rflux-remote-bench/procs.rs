//! The controller processes of a run (started on the hub, stopped when dropped) and small host
//! readings: CPU time and memory from `/proc`, the load average.

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

/// The load averages (1, 5, 15 min) from `/proc/loadavg`; -1 when unreadable.
pub fn loadavg() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut it = text
        .split_whitespace()
        .map(|s| s.parse::<f64>().unwrap_or(-1.0));
    [(); 3].map(|_| it.next().unwrap_or(-1.0))
}

/// Busy CPU ticks of the whole machine so far (`/proc/stat`: user, nice, system, irq,
/// softirq, steal; 100 per second).
pub fn machine_busy_ticks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal
    Some([0, 1, 2, 5, 6, 7].iter().filter_map(|&i| f.get(i)).sum())
}

/// CPU ticks (user + system) of the process `pid` so far; 0 when it is gone.
pub fn pid_ticks(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| metrics::cpu_ticks_from_stat(&s))
        .unwrap_or(0)
}

/// One controller process; SIGTERM (then SIGKILL after 15 s) when dropped.
pub struct Proc {
    name: String,
    child: Child,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU seconds used so far (user + system; 100 ticks per second).
    pub fn cpu_secs(&self) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
            .ok()
            .and_then(|s| metrics::cpu_ticks_from_stat(&s))
            .map_or(f64::NAN, |t| t as f64 / 100.0)
    }

    /// A `/proc/<pid>/status` memory field (`VmRSS`, `VmHWM`) in KiB.
    pub fn mem_kib(&self, field: &str) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .ok()
            .and_then(|s| metrics::status_kib(&s, field))
            .map_or(f64::NAN, |k| k as f64)
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
            .args(["-TERM", &self.pid().to_string()])
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

/// The two controllers of one implementation on the hub.
pub struct Controllers {
    pub kc: Proc,
    pub sc: Proc,
}

/// Starts `source-controller` and `kustomize-controller` from `bin_dir` (`flux-` prefixed for
/// Flux) against `kubeconfig` with Flux's defaults (`--concurrent=4`, no leader election) and
/// waits for both `/readyz`.
pub async fn start_controllers(
    flux: bool,
    bin_dir: &Path,
    kubeconfig: &Path,
    concurrent: u16,
    dir: &Path,
) -> anyhow::Result<Controllers> {
    let prefix = if flux { "flux-" } else { "" };
    let storage = dir.join("storage");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&storage)?;
    std::fs::create_dir_all(&tmp)?;
    let [sm, sh, sp, km, kh] = free_ports::<5>()?;
    let common = |m: u16, h: u16| {
        vec![
            format!("--metrics-addr=127.0.0.1:{m}"),
            format!("--health-addr=127.0.0.1:{h}"),
            "--enable-leader-election=false".to_string(),
            format!("--concurrent={concurrent}"),
        ]
    };
    let mut sc_args = common(sm, sh);
    sc_args.extend([
        format!("--storage-path={}", storage.display()),
        format!("--storage-addr=127.0.0.1:{sp}"),
        format!("--storage-adv-addr=127.0.0.1:{sp}"),
    ]);
    let kc_args = common(km, kh);
    let spawn = |name: &str, args: &[String]| -> anyhow::Result<Proc> {
        use std::os::unix::process::CommandExt as _;
        let bin = bin_dir.join(format!("{prefix}{name}"));
        let out = std::fs::File::create(dir.join(format!("{name}.log")))?;
        log(format!("starting {} {}", bin.display(), args.join(" ")));
        let child = Command::new(&bin)
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUNTIME_NAMESPACE", "flux-system")
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Proc {
            name: name.to_string(),
            child,
        })
    };
    let sc = spawn("source-controller", &sc_args)?;
    let kc = spawn("kustomize-controller", &kc_args)?;
    let mut ctl = Controllers { kc, sc };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        ctl.sc.check_alive()?;
        ctl.kc.check_alive()?;
        let ok = |port: u16| {
            rflux_e2e::flux::http_status(&format!("127.0.0.1:{port}"), "/readyz")
                .is_ok_and(|s| s == 200)
        };
        if ok(sh) && ok(kh) {
            return Ok(ctl);
        }
        if Instant::now() > deadline {
            bail!(
                "the controllers are not ready after 60 s (logs in {})",
                dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
