//! kustomize-controller's command-line flags: Flux's names and defaults, on top of the flags
//! both controllers share ([`RuntimeFlags`]).

use clap::{ArgAction, Args};
use rflux_common::runtime::RuntimeFlags;

/// Flags of kustomize-controller, including the common ones.
#[derive(Debug, Clone, Args)]
pub struct KustomizeControllerFlags {
    /// Common flags.
    #[command(flatten)]
    pub runtime: RuntimeFlags,
    /// Number of concurrent Kustomization reconciles.
    #[arg(long, default_value_t = 4)]
    pub concurrent: u16,
    /// Number of concurrent server-side apply operations.
    #[arg(long, default_value_t = 4)]
    pub concurrent_ssa: u16,
    /// Refuse remote bases in kustomization.yaml.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value_t = false)]
    pub no_remote_bases: bool,
    /// Artifact download retries.
    #[arg(long, default_value_t = 9)]
    pub http_retry: u32,
    /// Forbid references to objects in other namespaces (multi-tenancy lockdown).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value_t = false)]
    pub no_cross_namespace_refs: bool,
    /// Default service account for SOPS decryption.
    #[arg(long, default_value = "")]
    pub default_decryption_service_account: String,
    /// Default service account for remote kubeconfigs.
    #[arg(long, default_value = "")]
    pub default_kubeconfig_service_account: String,
    /// Secret in RUNTIME_NAMESPACE with SOPS age keys.
    #[arg(long, default_value = "")]
    pub sops_age_secret: String,
    /// ConfigMap in RUNTIME_NAMESPACE with SOPS Vault settings.
    #[arg(long, default_value = "")]
    pub sops_vault_configmap: String,
    /// Extra field managers whose fields are taken over on apply (repeatable).
    #[arg(long, value_delimiter = ',', action = ArgAction::Append)]
    pub override_manager: Vec<String>,
    /// Extra kinds applied in the first apply stage (`group/Kind,...`).
    #[arg(long, default_value = "")]
    pub custom_apply_stage_kinds: String,
    /// Allow exec in kubeconfigs.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value_t = false)]
    pub insecure_kubeconfig_exec: bool,
    /// Allow insecure TLS in kubeconfigs.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value_t = false)]
    pub insecure_kubeconfig_tls: bool,
    /// Label selector of ConfigMaps/Secrets that trigger reconciles when they change.
    #[arg(long, default_value = "reconcile.fluxcd.io/watch=Enabled")]
    pub watch_configs_label_selector: String,
}

impl KustomizeControllerFlags {
    /// Names of flags that were given a non-default value but have no effect in this
    /// implementation yet (see [`RuntimeFlags::inert_flags_in_use`]).
    pub fn inert_flags_in_use(&self) -> Vec<&'static str> {
        let mut out = self.runtime.inert_flags_in_use();
        if self.concurrent_ssa != 4 {
            out.push("--concurrent-ssa");
        }
        if !self.default_decryption_service_account.is_empty() {
            out.push("--default-decryption-service-account");
        }
        if !self.default_kubeconfig_service_account.is_empty() {
            out.push("--default-kubeconfig-service-account");
        }
        if !self.sops_vault_configmap.is_empty() {
            out.push("--sops-vault-configmap");
        }
        if self.insecure_kubeconfig_exec {
            out.push("--insecure-kubeconfig-exec");
        }
        if self.insecure_kubeconfig_tls {
            out.push("--insecure-kubeconfig-tls");
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Kc {
        #[command(flatten)]
        flags: KustomizeControllerFlags,
    }

    fn kc(args: &[&str]) -> Result<KustomizeControllerFlags, clap::Error> {
        let mut all = vec!["kustomize-controller"];
        all.extend_from_slice(args);
        Kc::try_parse_from(all).map(|c| c.flags)
    }

    #[test]
    fn defaults_match_flux() {
        let f = kc(&[]).unwrap();
        assert_eq!(f.runtime.metrics_addr, ":8080");
        assert_eq!(f.concurrent, 4);
        assert_eq!(f.concurrent_ssa, 4);
        assert_eq!(f.http_retry, 9);
        assert!(!f.no_remote_bases);
        assert!(!f.no_cross_namespace_refs);
        assert_eq!(
            f.watch_configs_label_selector,
            "reconcile.fluxcd.io/watch=Enabled"
        );
        assert!(f.override_manager.is_empty());
        assert!(f.inert_flags_in_use().is_empty());
        let f = kc(&["--token-cache-max-size=5", "--sops-vault-configmap=vault"]).unwrap();
        assert_eq!(
            f.inert_flags_in_use(),
            vec!["--token-cache-max-size", "--sops-vault-configmap"]
        );
    }

    #[test]
    fn flux_deployment_args_parse() {
        // The args Flux's install manifests pass to kustomize-controller.
        let f = kc(&[
            "--events-addr=http://notification-controller.flux-system.svc.cluster.local./",
            "--watch-all-namespaces=true",
            "--log-level=info",
            "--log-encoding=json",
            "--enable-leader-election",
        ])
        .unwrap();
        assert!(f.runtime.leader_election.enable);
        assert!(f.inert_flags_in_use().is_empty());
    }

    #[test]
    fn pflag_style_booleans_and_lists() {
        let f = kc(&[
            "--no-cross-namespace-refs",
            "--no-remote-bases=true",
            "--concurrent",
            "10",
            "--override-manager=kubectl,helm",
            "--override-manager=argocd",
            "--insecure-kubeconfig-tls",
        ])
        .unwrap();
        assert!(f.no_cross_namespace_refs);
        assert!(f.no_remote_bases);
        assert_eq!(f.concurrent, 10);
        assert_eq!(f.override_manager, vec!["kubectl", "helm", "argocd"]);
        assert_eq!(f.inert_flags_in_use(), vec!["--insecure-kubeconfig-tls"]);
        // pflag does not take a separate value for booleans.
        assert!(kc(&["--no-cross-namespace-refs", "false"]).is_err());
        assert!(kc(&["--concurrent-ssa=x"]).is_err());
    }
}
