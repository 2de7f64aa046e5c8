//! What `up` records about a running instance, and the options a test may start one with.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::process::ProcessInfo;

/// What `up` records about a running instance (`<state>/<name>/state.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ControlPlaneState {
    pub name: String,
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub server: String,
    pub ca_cert: PathBuf,
    pub admin_token: String,
    pub etcd_client_port: u16,
    pub etcd_peer_port: u16,
    pub apiserver_port: u16,
    pub kwok_port: u16,
    pub processes: Vec<ProcessInfo>,
    pub started_at: u64,
    /// Set once the Node is Ready and the `default` ServiceAccount exists.
    pub ready: bool,
    /// Flags appended to kube-apiserver's command line (kept for restarts).
    #[serde(default)]
    pub extra_apiserver_args: Vec<String>,
}

/// How to start an instance ([`super::ControlPlane::start_with`]).
#[derive(Clone, Debug, Default)]
pub struct ControlPlaneOptions {
    /// Flags appended to kube-apiserver's command line.
    pub apiserver_args: Vec<String>,
    /// An audit policy (YAML, `audit.k8s.io/v1` Policy). When set it is written to
    /// `<state>/audit-policy.yaml` and kube-apiserver writes JSON lines to
    /// `<state>/logs/audit.log` ([`super::ControlPlane::audit_log_path`]), synchronously
    /// (`--audit-log-mode=blocking`).
    pub audit_policy: Option<String>,
}

/// Name of the audit log under `<state>/logs/`.
pub(super) const AUDIT_LOG: &str = "audit.log";

/// The extra kube-apiserver flags for `opts` in the state directory `dir`; writes the audit
/// policy file when there is one.
pub(super) fn apiserver_flags_for(
    opts: &ControlPlaneOptions,
    dir: &Path,
) -> anyhow::Result<Vec<String>> {
    let mut flags = opts.apiserver_args.clone();
    if let Some(policy) = &opts.audit_policy {
        let path = dir.join("audit-policy.yaml");
        std::fs::write(&path, policy)?;
        flags.extend([
            format!("--audit-policy-file={}", path.display()),
            format!(
                "--audit-log-path={}",
                dir.join("logs").join(AUDIT_LOG).display()
            ),
            "--audit-log-format=json".to_string(),
            "--audit-log-mode=blocking".to_string(),
            "--audit-log-maxsize=0".to_string(),
        ]);
    }
    Ok(flags)
}
