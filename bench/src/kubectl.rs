//! `kubectl` for the benchmark harnesses: the fleet benchmark (`src/main.rs`) and the SOPS one
//! (`src/bin/rflux-sops-bench/`, through `#[path]`) share it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// `kubectl <args>` against `kubeconfig`: its stdout, or an error with its stderr.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .context("running kubectl")?;
    if !out.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Applies every CRD file (server-side) and waits until all CRDs are established.
pub fn install_crds(kubeconfig: &Path, crds: &[PathBuf]) -> anyhow::Result<()> {
    for f in crds {
        kubectl(
            kubeconfig,
            &["apply", "--server-side", "-f", &f.display().to_string()],
        )?;
    }
    kubectl(
        kubeconfig,
        &[
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            "--timeout=60s",
        ],
    )?;
    Ok(())
}
