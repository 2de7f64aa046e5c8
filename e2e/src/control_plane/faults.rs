//! Fault injection on an instance of one's own: stop and start etcd or kube-apiserver alone
//! (same flags, ports, data and certificates; the other processes keep running), the audit log,
//! and extra client identities (certificates from the instance CA) so that an audit log can tell
//! processes apart.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine;

use super::state::AUDIT_LOG;
use super::{ControlPlane, args, kubeconfig_yaml};
use crate::bin_dir;
use crate::pki::{self, CertPair, Usage};
use crate::process;

/// A control plane process that can be stopped and started alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// etcd (its data directory is kept).
    Etcd,
    /// kube-apiserver.
    ApiServer,
}

impl Component {
    /// The process name recorded in the state file.
    pub fn process_name(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::ApiServer => "kube-apiserver",
        }
    }
}

impl ControlPlane {
    /// Stops one component (SIGTERM, SIGKILL after `grace`) and forgets its pid; the others
    /// keep running. Returns whether it needed SIGKILL. Do not use on the shared instance.
    pub fn stop_component(&mut self, c: Component, grace: Duration) -> anyhow::Result<bool> {
        let name = c.process_name();
        let (mine, rest): (Vec<_>, Vec<_>) = self
            .state
            .processes
            .iter()
            .cloned()
            .partition(|p| p.name == name);
        if mine.is_empty() {
            bail!("{name} is not recorded as running in {:?}", self.state.name);
        }
        let killed = process::stop(&mine, grace);
        self.state.processes = rest;
        self.save()?;
        Ok(!killed.is_empty())
    }

    /// Starts a component stopped by [`ControlPlane::stop_component`] with the flags it had,
    /// and waits until it serves: etcd `/health`, then (when kube-apiserver runs) `/readyz`;
    /// kube-apiserver `/readyz`.
    pub async fn start_component(&mut self, c: Component) -> anyhow::Result<()> {
        let name = c.process_name();
        if self.state.processes.iter().any(|p| p.name == name) {
            bail!("{name} already runs in {:?}", self.state.name);
        }
        let args = match c {
            Component::Etcd => args::etcd(&self.state),
            Component::ApiServer => args::apiserver(&self.state),
        };
        self.spawn(&bin_dir(), name, &args)?;
        if c == Component::Etcd {
            self.wait_etcd_healthy().await?;
        }
        let apiserver_runs = self
            .state
            .processes
            .iter()
            .any(|p| p.name == Component::ApiServer.process_name());
        if apiserver_runs {
            self.wait_apiserver_ready().await?;
        }
        Ok(())
    }

    /// Path of the audit log, when the instance was started with an audit policy
    /// ([`super::ControlPlaneOptions::audit_policy`]).
    pub fn audit_log_path(&self) -> Option<PathBuf> {
        self.state
            .extra_apiserver_args
            .iter()
            .any(|a| a.starts_with("--audit-log-path="))
            .then(|| self.state.dir.join("logs").join(AUDIT_LOG))
    }

    /// Writes `<state>/users/<user>.kubeconfig`: a client certificate `CN=<user>` with one
    /// `O=` per group, signed by the instance CA, against this instance. The API server sees
    /// `user` as the user name (e.g. in the audit log); `system:masters` makes it an admin.
    pub fn user_kubeconfig(&self, user: &str, groups: &[&str]) -> anyhow::Result<PathBuf> {
        let safe = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | ':' | '.' | '_'))
        };
        if !safe(user) || !groups.iter().all(|g| safe(g)) {
            bail!("user and group names must be [A-Za-z0-9-:._]+: {user:?} {groups:?}");
        }
        let dir = self.state.dir.join("users");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let pki_dir = self.state.dir.join("pki");
        let ca = CertPair {
            cert: pki_dir.join("ca.crt"),
            key: pki_dir.join("ca.key"),
        };
        let subject: String = groups
            .iter()
            .map(|g| format!("/O={g}"))
            .chain(std::iter::once(format!("/CN={user}")))
            .collect();
        let pair = pki::issue(&ca, &dir, user, &subject, &[], Usage::Client)?;
        let b64 = |p: &std::path::Path| -> anyhow::Result<String> {
            Ok(base64::engine::general_purpose::STANDARD.encode(std::fs::read(p)?))
        };
        let path = dir.join(format!("{user}.kubeconfig"));
        std::fs::write(
            &path,
            kubeconfig_yaml(
                &self.state.name,
                &self.state.server,
                &b64(&ca.cert)?,
                &format!(
                    "    client-certificate-data: {}\n    client-key-data: {}\n",
                    b64(&pair.cert)?,
                    b64(&pair.key)?
                ),
            ),
        )
        .with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}
