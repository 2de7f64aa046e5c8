//! Detached child processes: spawn in their own process group with output in
//! a log file, check liveness through /proc, stop with SIGTERM then SIGKILL.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// One process started by the launcher, as recorded in a state file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Role, e.g. `etcd` or `kube-apiserver`.
    pub name: String,
    /// Process id; also the process group id (each process leads its group).
    pub pid: u32,
    /// The executable that was started.
    pub program: PathBuf,
    /// File receiving stdout and stderr.
    pub log: PathBuf,
}

/// Starts `program` detached from the caller: new process group, stdin from
/// /dev/null, stdout+stderr appended to `log`. The process outlives the caller.
pub fn spawn(
    name: &str,
    program: &Path,
    args: &[String],
    dir: &Path,
    log: &Path,
) -> anyhow::Result<ProcessInfo> {
    use std::os::unix::process::CommandExt;
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening log {}", log.display()))?;
    let err = out.try_clone()?;
    let child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {name} ({})", program.display()))?;
    // The Child handle is dropped without waiting: the process is detached and
    // is reaped by init once the caller exits.
    Ok(ProcessInfo {
        name: name.to_string(),
        pid: child.id(),
        program: program.to_path_buf(),
        log: log.to_path_buf(),
    })
}

/// Whether the process is running (not a zombie) and still runs `program`.
pub fn is_alive(info: &ProcessInfo) -> bool {
    let stat = match std::fs::read_to_string(format!("/proc/{}/stat", info.pid)) {
        Ok(s) => s,
        Err(_) => return false,
    };
    // The state follows the parenthesised command name.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    if matches!(state, Some('Z' | 'X' | 'x') | None) {
        return false;
    }
    // Guard against pid reuse: the executable (or, when it cannot be read,
    // argv[0], which e.g. sshd rewrites into a title) must match.
    let Some(want) = info.program.file_name() else {
        return true;
    };
    if let Ok(exe) = std::fs::read_link(format!("/proc/{}/exe", info.pid)) {
        return exe.file_name() == Some(want);
    }
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", info.pid)).unwrap_or_default();
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    String::from_utf8_lossy(argv0).contains(&*want.to_string_lossy())
}

fn signal(pid: u32, sig: &str) {
    // Signal the whole group first (children of the process too), then the pid.
    let group = Command::new("kill")
        .args(["-s", sig, "--", &format!("-{pid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !group.is_ok_and(|s| s.success()) {
        let _ = Command::new("kill")
            .args(["-s", sig, "--", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Stops the processes: SIGTERM to each (in the order given), then SIGKILL
/// to those still alive after `grace`. Returns the names that needed SIGKILL.
pub fn stop(procs: &[ProcessInfo], grace: Duration) -> Vec<String> {
    let alive: Vec<&ProcessInfo> = procs.iter().filter(|p| is_alive(p)).collect();
    for p in &alive {
        signal(p.pid, "TERM");
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && alive.iter().any(|p| is_alive(p)) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut killed = Vec::new();
    for p in alive.iter().filter(|p| is_alive(p)) {
        signal(p.pid, "KILL");
        killed.push(p.name.clone());
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && alive.iter().any(|p| is_alive(p)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    killed
}

/// The last `lines` lines of a log file (for error messages).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Resident set size of a process in KiB (VmRSS from /proc), if it runs.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn spawn_check_and_stop() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sleep.log");
        let p = spawn(
            "sleep",
            Path::new("/bin/sh"),
            &["-c".into(), "echo started; exec sleep 30".into()],
            dir.path(),
            &log,
        )
        .unwrap();
        let start = Instant::now();
        while !log_tail(&log, 1).contains("started") && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(log_tail(&log, 5), "started");
        // The executable is now `sleep` (exec), not the program we recorded.
        let sleeping = ProcessInfo {
            program: PathBuf::from("sleep"),
            ..p.clone()
        };
        // "started" is printed just before the exec: wait for the exec itself.
        let start = Instant::now();
        while !is_alive(&sleeping) && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(is_alive(&sleeping));
        assert!(!is_alive(&p), "pid reuse guard must compare argv[0]");
        assert!(rss_kib(p.pid).is_some());
        let killed = stop(std::slice::from_ref(&sleeping), Duration::from_secs(5));
        assert!(killed.is_empty(), "sleep obeys SIGTERM");
        assert!(!is_alive(&sleeping));
    }
}
