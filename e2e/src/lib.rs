//! E2E fixtures: a real local Kubernetes control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok, all built from Go modules)
//! and a real git server (`git http-backend` over HTTP/HTTPS/mTLS, plus sshd).
//!
//! Tests use [`ControlPlane::shared`] and [`GitServer::shared`]: they reuse the
//! instance that `rflux-e2e up` (or an earlier test binary) started, or start
//! one under a file lock and leave it running. `rflux-e2e down` stops it all.
//!
//! Layout: state lives in `<repo>/.e2e/` (override: `RFLUX_E2E_STATE`), one
//! directory per control plane (`default`, `remote`, …) and `git/` for the git
//! server. Binaries live in `$HOME/.cache/gitops-e2e/bin` (override:
//! `RFLUX_E2E_BIN`).

mod control_plane;
pub mod fault_proxy;
pub mod flux;
pub mod flux_operator;
mod git_server;
pub mod hostile_git;
pub mod metrics;
mod pki;
pub mod process;
pub mod registry;
mod test_repo;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use rand::Rng;

pub use control_plane::{
    Component, ControlPlane, ControlPlaneOptions, DEFAULT_INSTANCE, instance_names,
};
pub use git_server::{GIT_INSTANCE, GitServer};
pub use test_repo::TestRepo;

/// Kubernetes version the control plane is built from (`e2e/k8s/build.sh`).
pub const KUBERNETES_VERSION: &str = "v1.35.4";

/// Root of the source repository (the Cargo workspace).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Directory holding all e2e state (`RFLUX_E2E_STATE`, default `<repo>/.e2e`).
pub fn state_root() -> PathBuf {
    match std::env::var_os("RFLUX_E2E_STATE") {
        Some(dir) if !dir.is_empty() => {
            // Absolute, since sshd and the state files need absolute paths.
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                std::env::current_dir().map_or(dir.clone(), |cwd| cwd.join(&dir))
            }
        }
        _ => repo_root().join(".e2e"),
    }
}

/// Directory of the control-plane and git-server binaries (`RFLUX_E2E_BIN`,
/// default `$HOME/.cache/gitops-e2e/bin`).
pub fn bin_dir() -> PathBuf {
    match std::env::var_os("RFLUX_E2E_BIN") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let home =
                std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
            home.join(".cache/gitops-e2e/bin")
        }
    }
}

/// Names of the binaries the fixtures need in [`bin_dir`].
pub const BINARIES: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "rflux-gitserver",
];

/// Builds missing or stale binaries: runs `e2e/k8s/build.sh` and
/// `e2e/gitserver/build.sh` (both skip the build when their stamp matches, so
/// this is cheap when everything is up to date). Serialised by a file lock in
/// the bin dir so parallel test binaries build only once.
pub fn ensure_binaries() -> anyhow::Result<()> {
    run_build_scripts(&["e2e/k8s/build.sh", "e2e/gitserver/build.sh"])?;
    let bin = bin_dir();
    for name in BINARIES {
        let path = bin.join(name);
        if !path.is_file() {
            bail!("{} is missing after the build", path.display());
        }
    }
    Ok(())
}

/// Builds only `rflux-gitserver` (what [`GitServer`] needs) when stale.
pub fn ensure_gitserver_binary() -> anyhow::Result<()> {
    run_build_scripts(&["e2e/gitserver/build.sh"])
}

fn run_build_scripts(scripts: &[&str]) -> anyhow::Result<()> {
    let bin = bin_dir();
    std::fs::create_dir_all(&bin).with_context(|| format!("creating {}", bin.display()))?;
    let _lock = lock_file(&bin.join(".build.lock"))?;
    let root = repo_root();
    for script in scripts {
        let path = root.join(script);
        // Build output goes to our stderr so a long cold build shows progress.
        let status = Command::new("bash")
            .arg(&path)
            .env("RFLUX_E2E_BIN", &bin)
            .stdout(std::io::stderr())
            .status()
            .with_context(|| format!("running {}", path.display()))?;
        if !status.success() {
            bail!("{} failed with {status}", path.display());
        }
    }
    Ok(())
}

/// Opens (creating) `path` and takes an exclusive advisory lock on it; the lock
/// is released when the returned file is dropped.
pub fn lock_file(path: &Path) -> anyhow::Result<File> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening lock file {}", path.display()))?;
    file.lock()
        .with_context(|| format!("locking {}", path.display()))?;
    Ok(file)
}

/// A random lowercase alphanumeric string of `len` characters (DNS-label safe).
pub fn random_suffix(len: usize) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(CHARS[rng.random_range(0..CHARS.len())]))
        .collect()
}

/// `prefix-<random>`, trimmed so that it stays a valid DNS label (≤ 63 chars).
pub fn unique_name(prefix: &str) -> String {
    let clean: String = prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let clean = clean.trim_matches('-');
    let clean = if clean.is_empty() { "e2e" } else { clean };
    let max = 63 - 7;
    let trimmed = if clean.len() > max {
        clean[..max].trim_end_matches('-')
    } else {
        clean
    };
    format!("{trimmed}-{}", random_suffix(6))
}

/// Asks the kernel for a free TCP port on 127.0.0.1.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// `N` distinct free loopback ports (all held open until every one is chosen, so two calls in a
/// row cannot return the same port).
pub fn free_ports<const N: usize>() -> anyhow::Result<[u16; N]> {
    let mut held = Vec::with_capacity(N);
    let mut ports = [0u16; N];
    for p in &mut ports {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a free port")?;
        *p = listener.local_addr()?.port();
        held.push(listener);
    }
    Ok(ports)
}

/// Runs a command, returning its stdout; on failure the error carries stderr.
pub(crate) fn run_cmd(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} {:?} failed ({}): {}{}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Writes `contents` to `path` atomically (temp file + rename).
pub(crate) fn write_atomic(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

/// Seconds since the Unix epoch.
pub(crate) fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_are_dns_labels() {
        let long = "X".repeat(100);
        for prefix in ["flux", "Some_Prefix", "", "--", long.as_str()] {
            let name = unique_name(prefix);
            assert!(name.len() <= 63, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{name}"
            );
            assert!(!name.starts_with('-') && !name.ends_with('-'), "{name}");
        }
        assert_ne!(unique_name("a"), unique_name("a"));
    }

    #[test]
    fn free_ports_are_bindable() {
        let port = free_port().unwrap();
        assert_ne!(port, 0);
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    }
}
