//! source-controller's command-line flags: Flux's names and defaults, on top of the flags both
//! controllers share ([`RuntimeFlags`]).

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args};
use rflux_common::runtime::RuntimeFlags;
use rflux_common::runtime::duration::clap_duration;

use crate::artifact::{ArtifactError, advertised_address};

/// Flags of source-controller, including the common ones.
#[derive(Debug, Clone, Args)]
pub struct SourceControllerFlags {
    /// Common flags.
    #[command(flatten)]
    pub runtime: RuntimeFlags,
    /// Number of concurrent reconciles per kind.
    #[arg(long, default_value_t = 2)]
    pub concurrent: u16,
    /// The local storage path for artifacts.
    #[arg(long, env = "STORAGE_PATH", default_value = "/data")]
    pub storage_path: PathBuf,
    /// The address the artifact file server binds to.
    #[arg(long, env = "STORAGE_ADDRESS", default_value = ":9090")]
    pub storage_addr: String,
    /// The advertised address of the artifact server (defaults to `--storage-addr` with an
    /// empty host read as `localhost` and `0.0.0.0` as the host name).
    #[arg(long, env = "STORAGE_ADV_ADDR", default_value = "")]
    pub storage_adv_addr: String,
    /// How long superseded artifacts are kept.
    #[arg(long, default_value = "60s", value_parser = clap_duration)]
    pub artifact_retention_ttl: Duration,
    /// How many artifacts are kept per object.
    #[arg(long, default_value_t = 2)]
    pub artifact_retention_records: u32,
    /// Digest algorithm of artifacts.
    #[arg(long, default_value = "sha256")]
    pub artifact_digest_algo: String,
    /// SSH key-exchange algorithms (accepted; not used yet).
    #[arg(long, value_delimiter = ',', action = ArgAction::Append)]
    pub ssh_kex_algos: Vec<String>,
    /// SSH host key algorithms (accepted; not used yet).
    #[arg(long, value_delimiter = ',', action = ArgAction::Append)]
    pub ssh_hostkey_algos: Vec<String>,
    /// Largest OCI layer pulled, in bytes (an rflux extension; Flux has no bound).
    #[arg(long, default_value_t = 1 << 30)]
    pub oci_max_layer_size: u64,
    /// Helm (not supported; accepted so Flux's Deployment args work).
    #[arg(long, default_value = "")]
    pub helm_index_max_size: String,
    /// Helm (not supported).
    #[arg(long, default_value = "")]
    pub helm_chart_max_size: String,
    /// Helm (not supported).
    #[arg(long, default_value = "")]
    pub helm_chart_file_max_size: String,
    /// Helm (not supported).
    #[arg(long, default_value = "0")]
    pub helm_cache_max_size: String,
    /// Helm (not supported).
    #[arg(long, default_value = "15m")]
    pub helm_cache_ttl: String,
    /// Helm (not supported).
    #[arg(long, default_value = "1m")]
    pub helm_cache_purge_interval: String,
}

impl SourceControllerFlags {
    /// Names of flags that were given a non-default value but have no effect in this
    /// implementation yet (see [`RuntimeFlags::inert_flags_in_use`]).
    pub fn inert_flags_in_use(&self) -> Vec<&'static str> {
        let mut out = self.runtime.inert_flags_in_use();
        if !self.ssh_kex_algos.is_empty() {
            out.push("--ssh-kex-algos");
        }
        if !self.ssh_hostkey_algos.is_empty() {
            out.push("--ssh-hostkey-algos");
        }
        for (name, value, default) in [
            ("--helm-index-max-size", &self.helm_index_max_size, ""),
            ("--helm-chart-max-size", &self.helm_chart_max_size, ""),
            (
                "--helm-chart-file-max-size",
                &self.helm_chart_file_max_size,
                "",
            ),
            ("--helm-cache-max-size", &self.helm_cache_max_size, "0"),
            ("--helm-cache-ttl", &self.helm_cache_ttl, "15m"),
            (
                "--helm-cache-purge-interval",
                &self.helm_cache_purge_interval,
                "1m",
            ),
        ] {
            if value != default {
                out.push(name);
            }
        }
        out
    }

    /// The advertised storage address: `--storage-adv-addr`, or `--storage-addr` with its host
    /// filled in (see [`advertised_address`]).
    pub fn advertised_storage_addr(&self) -> Result<String, ArtifactError> {
        advertised_address(&self.storage_addr, &self.storage_adv_addr)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Sc {
        #[command(flatten)]
        flags: SourceControllerFlags,
    }

    fn sc(args: &[&str]) -> Result<SourceControllerFlags, clap::Error> {
        let mut all = vec!["source-controller"];
        all.extend_from_slice(args);
        Sc::try_parse_from(all).map(|c| c.flags)
    }

    #[test]
    fn defaults_match_flux() {
        // Env vars with the same names would change the defaults; this test only runs
        // meaningfully without them (they are not set in CI).
        if std::env::var_os("STORAGE_PATH").is_some()
            || std::env::var_os("STORAGE_ADDRESS").is_some()
            || std::env::var_os("STORAGE_ADV_ADDR").is_some()
        {
            eprintln!("skipped: STORAGE_* env set");
            return;
        }
        let f = sc(&[]).unwrap();
        assert_eq!(f.concurrent, 2);
        assert_eq!(f.storage_path.to_str(), Some("/data"));
        assert_eq!(f.storage_addr, ":9090");
        assert_eq!(f.artifact_retention_ttl, Duration::from_secs(60));
        assert_eq!(f.artifact_retention_records, 2);
        assert_eq!(f.artifact_digest_algo, "sha256");
        assert_eq!(f.advertised_storage_addr().unwrap(), "localhost:9090");
        assert!(f.inert_flags_in_use().is_empty());
    }

    #[test]
    fn flux_deployment_args_parse() {
        // The args Flux's install manifests pass to source-controller.
        let s = sc(&[
            "--events-addr=http://notification-controller.flux-system.svc.cluster.local./",
            "--watch-all-namespaces=true",
            "--log-level=info",
            "--log-encoding=json",
            "--enable-leader-election",
            "--storage-path=/data",
            "--storage-adv-addr=source-controller.flux-system.svc.cluster.local.",
        ])
        .unwrap();
        assert!(s.runtime.leader_election.enable);
        assert_eq!(
            s.advertised_storage_addr().unwrap(),
            "source-controller.flux-system.svc.cluster.local."
        );
        assert!(s.inert_flags_in_use().is_empty());
    }

    #[test]
    fn inert_flags_are_reported() {
        let s = sc(&[
            "--helm-cache-max-size=10",
            "--ssh-kex-algos=curve25519-sha256",
            "--token-cache-max-size=5",
        ])
        .unwrap();
        let inert = s.inert_flags_in_use();
        assert!(inert.contains(&"--helm-cache-max-size"));
        assert!(inert.contains(&"--ssh-kex-algos"));
        assert!(inert.contains(&"--token-cache-max-size"));
        assert!(!inert.contains(&"--helm-cache-ttl"));
    }
}
