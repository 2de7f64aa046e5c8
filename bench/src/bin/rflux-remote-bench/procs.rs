//! The controller processes of a run (started on the hub, stopped when dropped) and small host
//! readings: CPU time and memory from `/proc`, the load average.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use rflux_e2e::{free_ports, metrics};

pub use crate::ctlproc::{Proc, log};

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
        let bin = bin_dir.join(format!("{prefix}{name}"));
        log(format!("starting {} {}", bin.display(), args.join(" ")));
        Proc::spawn(
            name,
            &bin,
            args,
            &[
                ("KUBECONFIG", kubeconfig.as_os_str()),
                ("TMPDIR", tmp.as_os_str()),
            ],
            &dir.join(format!("{name}.log")),
        )
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
