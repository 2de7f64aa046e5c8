//! resourceset-controller's command-line flags: the flags every rflux controller shares
//! ([`RuntimeFlags`]) with Flux Operator's defaults where they differ (`--concurrent` 10,
//! `--requeue-dependency` 5s), and Flux Operator's own flags that matter here.

use std::time::Duration;

use clap::{ArgAction, Args};
use rflux_common::runtime::RuntimeFlags;
use rflux_common::runtime::duration::clap_duration;

/// Flags of resourceset-controller, including the common ones.
#[derive(Debug, Clone, Args)]
#[command(mut_arg("requeue_dependency", |a| a.default_value("5s")))]
pub struct ResourceSetControllerFlags {
    /// Common flags.
    #[command(flatten)]
    pub runtime: RuntimeFlags,
    /// Number of concurrent reconciles per kind (Flux Operator's default: 10).
    #[arg(long, default_value_t = 10)]
    pub concurrent: u16,
    /// Label selector of the ConfigMaps and Secrets whose changes reconcile the ResourceSets
    /// that copy, convert or checksum them (empty: no such watch).
    #[arg(long, default_value = WATCH_CONFIGS_DEFAULT)]
    pub watch_configs_label_selector: String,
    /// Field managers whose fields are taken over on apply (repeatable; accepted, has no
    /// effect yet).
    #[arg(long, value_delimiter = ',', action = ArgAction::Append)]
    pub override_manager: Vec<String>,
    /// Flux Operator's FluxReport interval (no FluxReport here; accepted).
    #[arg(long, default_value = "5m", value_parser = clap_duration)]
    pub reporting_interval: Duration,
    /// Flux Operator's storage path (nothing is stored; accepted).
    #[arg(long, default_value = "/data")]
    pub storage_path: String,
    /// Flux Operator's web UI port (no web UI here; accepted).
    #[arg(long, default_value_t = 9080)]
    pub web_server_port: u32,
    /// Default service account for workload identity (no cloud identity here; accepted).
    #[arg(long, default_value = "")]
    pub default_workload_identity_service_account: String,
}

/// The default of `--watch-configs-label-selector`.
const WATCH_CONFIGS_DEFAULT: &str = "reconcile.fluxcd.io/watch=Enabled";

impl ResourceSetControllerFlags {
    /// Names of flags that were given a non-default value but have no effect in this
    /// implementation (they are accepted so Flux Operator's Deployment args keep working).
    pub fn inert_flags_in_use(&self) -> Vec<&'static str> {
        let mut out = self.runtime.inert_flags_in_use();
        if !self.override_manager.is_empty() {
            out.push("--override-manager");
        }
        if self.reporting_interval != Duration::from_secs(300) {
            out.push("--reporting-interval");
        }
        if self.storage_path != "/data" {
            out.push("--storage-path");
        }
        if self.web_server_port != 9080 {
            out.push("--web-server-port");
        }
        if !self.default_workload_identity_service_account.is_empty() {
            out.push("--default-workload-identity-service-account");
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
    struct Cli {
        #[command(flatten)]
        flags: ResourceSetControllerFlags,
    }

    fn parse(args: &[&str]) -> Result<ResourceSetControllerFlags, clap::Error> {
        let mut all = vec!["resourceset-controller"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).map(|c| c.flags)
    }

    #[test]
    fn defaults_are_flux_operators() {
        let f = parse(&[]).unwrap();
        assert_eq!(f.concurrent, 10);
        assert_eq!(f.runtime.requeue_dependency, Duration::from_secs(5));
        assert_eq!(f.runtime.default_service_account, "");
        assert_eq!(f.watch_configs_label_selector, WATCH_CONFIGS_DEFAULT);
        assert!(f.inert_flags_in_use().is_empty());
    }

    #[test]
    fn flux_operator_args_parse() {
        let f = parse(&[
            "--concurrent=4",
            "--requeue-dependency=10s",
            "--default-service-account=tenant",
            "--watch-configs-label-selector=team=a",
            "--override-manager=kubectl",
            "--enable-leader-election",
            "--log-level=debug",
            "--storage-path=/tmp/x",
        ])
        .unwrap();
        assert_eq!(f.concurrent, 4);
        assert_eq!(f.runtime.requeue_dependency, Duration::from_secs(10));
        assert_eq!(f.runtime.default_service_account, "tenant");
        assert!(f.runtime.leader_election.enable);
        let inert = f.inert_flags_in_use();
        assert!(!inert.contains(&"--watch-configs-label-selector"));
        for name in ["--override-manager", "--storage-path"] {
            assert!(inert.contains(&name), "{name} in {inert:?}");
        }
        assert!(!inert.contains(&"--reporting-interval"));
    }
}
