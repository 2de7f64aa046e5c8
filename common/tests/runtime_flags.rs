//! Flags: Flux names, defaults, pflag-style booleans, durations, feature gates, addresses.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use rflux_common::runtime::flags::{
    AddrError, FeatureGateError, KUSTOMIZE_FEATURE_GATES, SOURCE_FEATURE_GATES,
    parse_feature_gates, parse_listen_addr, runtime_namespace_from,
};
use rflux_common::runtime::leader::lease_name;
use rflux_common::runtime::{
    KustomizeControllerFlags, LogEncoding, LogLevel, SourceControllerFlags,
};

#[derive(Debug, Parser)]
struct Kc {
    #[command(flatten)]
    flags: KustomizeControllerFlags,
}

#[derive(Debug, Parser)]
struct Sc {
    #[command(flatten)]
    flags: SourceControllerFlags,
}

fn kc(args: &[&str]) -> Result<KustomizeControllerFlags, clap::Error> {
    let mut all = vec!["kustomize-controller"];
    all.extend_from_slice(args);
    Kc::try_parse_from(all).map(|c| c.flags)
}

fn sc(args: &[&str]) -> Result<SourceControllerFlags, clap::Error> {
    let mut all = vec!["source-controller"];
    all.extend_from_slice(args);
    Sc::try_parse_from(all).map(|c| c.flags)
}

#[test]
fn kustomize_defaults_match_flux() {
    let f = kc(&[]).unwrap();
    let r = &f.runtime;
    assert_eq!(r.metrics_addr, ":8080");
    assert_eq!(r.health_addr, ":9440");
    assert!(!r.leader_election.enable);
    assert!(r.leader_election.release_on_cancel);
    assert_eq!(r.leader_election.lease_duration, Duration::from_secs(35));
    assert_eq!(r.leader_election.renew_deadline, Duration::from_secs(30));
    assert_eq!(r.leader_election.retry_period, Duration::from_secs(5));
    assert_eq!(r.log_level, LogLevel::Info);
    assert_eq!(r.log_encoding, LogEncoding::Json);
    assert!(r.watch_all_namespaces);
    assert_eq!(r.watch_label_selector, "");
    assert!((r.kube_api_qps - 50.0).abs() < f32::EPSILON);
    assert_eq!(r.kube_api_burst, 300);
    assert_eq!(r.interval_jitter_percentage, 5);
    assert_eq!(r.requeue_dependency, Duration::from_secs(30));
    assert_eq!(r.min_retry_delay, Duration::from_millis(750));
    assert_eq!(r.max_retry_delay, Duration::from_secs(900));
    assert_eq!(f.concurrent, 4);
    assert_eq!(f.concurrent_ssa, 4);
    assert_eq!(f.http_retry, 9);
    assert!(!f.no_cross_namespace_refs);
    assert_eq!(
        f.watch_configs_label_selector,
        "reconcile.fluxcd.io/watch=Enabled"
    );
    assert!(f.inert_flags_in_use().is_empty());
    let f = kc(&["--token-cache-max-size=5", "--sops-age-secret=sops-age"]).unwrap();
    assert_eq!(
        f.inert_flags_in_use(),
        vec!["--token-cache-max-size", "--sops-age-secret"]
    );
}

#[test]
fn source_defaults_match_flux() {
    // Env vars with the same names would change the defaults; this test only runs meaningfully
    // without them (they are not set in CI).
    if std::env::var_os("STORAGE_PATH").is_some() || std::env::var_os("STORAGE_ADDRESS").is_some() {
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
    assert_eq!(f.advertised_storage_addr("pod-1"), "pod-1:9090");
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
    assert!(f.runtime.watch_all_namespaces);
    assert!(f.inert_flags_in_use().is_empty());
    assert_eq!(
        f.runtime.events_addr,
        "http://notification-controller.flux-system.svc.cluster.local./"
    );

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
    assert_eq!(
        s.advertised_storage_addr("ignored"),
        "source-controller.flux-system.svc.cluster.local."
    );
}

#[test]
fn pflag_style_booleans_and_values() {
    let f = kc(&[
        "--watch-all-namespaces=false",
        "--leader-election-release-on-cancel=false",
        "--enable-leader-election=true",
        "--no-cross-namespace-refs",
        "--concurrent",
        "10",
        "--log-encoding",
        "console",
        "--log-level=debug",
        "--leader-election-lease-duration=1m",
        "--leader-election-renew-deadline=45s",
        "--leader-election-retry-period=2500ms",
        "--requeue-dependency=5s",
        "--kube-api-qps=20.5",
        "--kube-api-burst=40",
        "--override-manager=kubectl,helm",
        "--override-manager=argocd",
        "--watch-label-selector=sharding.fluxcd.io/key=shard1",
    ])
    .unwrap();
    let r = &f.runtime;
    assert!(!r.watch_all_namespaces);
    assert!(!r.leader_election.release_on_cancel);
    assert!(r.leader_election.enable);
    assert!(f.no_cross_namespace_refs);
    assert_eq!(f.concurrent, 10);
    assert_eq!(r.log_encoding, LogEncoding::Console);
    assert_eq!(r.log_level, LogLevel::Debug);
    assert_eq!(r.leader_election.lease_duration, Duration::from_secs(60));
    assert_eq!(r.leader_election.renew_deadline, Duration::from_secs(45));
    assert_eq!(r.leader_election.retry_period, Duration::from_millis(2500));
    assert_eq!(r.requeue_dependency, Duration::from_secs(5));
    assert!((r.kube_api_qps - 20.5).abs() < f32::EPSILON);
    assert_eq!(r.kube_api_burst, 40);
    assert_eq!(f.override_manager, vec!["kubectl", "helm", "argocd"]);
    assert_eq!(r.watch_label_selector, "sharding.fluxcd.io/key=shard1");
}

#[test]
fn invalid_values_are_rejected() {
    assert!(kc(&["--interval-jitter-percentage=100"]).is_err());
    assert!(kc(&["--interval-jitter-percentage=99"]).is_ok());
    assert!(kc(&["--requeue-dependency=30"]).is_err());
    assert!(kc(&["--log-level=verbose"]).is_err());
    assert!(kc(&["--log-encoding=xml"]).is_err());
    assert!(kc(&["--watch-all-namespaces=maybe"]).is_err());
    assert!(kc(&["--no-such-flag"]).is_err());
    // pflag does not take a separate value for booleans: "false" becomes a stray argument.
    assert!(kc(&["--watch-all-namespaces", "false"]).is_err());
}

#[test]
fn source_inert_flags_are_reported() {
    let s = sc(&[
        "--helm-cache-max-size=10",
        "--ssh-kex-algos=curve25519-sha256",
    ])
    .unwrap();
    let inert = s.inert_flags_in_use();
    assert!(inert.contains(&"--helm-cache-max-size"));
    assert!(inert.contains(&"--ssh-kex-algos"));
    assert!(!inert.contains(&"--helm-cache-ttl"));
}

#[test]
fn feature_gates() {
    let gates = parse_feature_gates("", KUSTOMIZE_FEATURE_GATES).unwrap();
    assert_eq!(gates.len(), KUSTOMIZE_FEATURE_GATES.len());
    assert!(gates.contains(&("StrictPostBuildSubstitutions".to_string(), true)));
    let gates = parse_feature_gates(
        "StrictPostBuildSubstitutions=false,GroupChangeLog=true",
        KUSTOMIZE_FEATURE_GATES,
    )
    .unwrap();
    assert!(gates.contains(&("StrictPostBuildSubstitutions".to_string(), false)));
    assert!(gates.contains(&("GroupChangeLog".to_string(), true)));
    assert_eq!(
        parse_feature_gates("GroupChangeLog=true", SOURCE_FEATURE_GATES),
        Err(FeatureGateError::Unknown("GroupChangeLog".into()))
    );
    assert!(matches!(
        parse_feature_gates("CacheSecretsAndConfigMaps", SOURCE_FEATURE_GATES),
        Err(FeatureGateError::Malformed(_))
    ));
    assert!(matches!(
        parse_feature_gates("CacheSecretsAndConfigMaps=yes", SOURCE_FEATURE_GATES),
        Err(FeatureGateError::Malformed(_))
    ));
}

#[test]
fn listen_addresses() {
    let any8080 = parse_listen_addr(":8080").unwrap().unwrap();
    assert_eq!(any8080.port(), 8080);
    assert!(any8080.ip().is_unspecified());
    assert_eq!(
        parse_listen_addr("127.0.0.1:9440").unwrap(),
        Some("127.0.0.1:9440".parse::<SocketAddr>().unwrap())
    );
    assert_eq!(
        parse_listen_addr("[::1]:80").unwrap(),
        Some("[::1]:80".parse::<SocketAddr>().unwrap())
    );
    let local = parse_listen_addr("localhost:9090").unwrap().unwrap();
    assert!(local.ip().is_loopback());
    assert_eq!(parse_listen_addr("0").unwrap(), None);
    assert_eq!(parse_listen_addr("").unwrap(), None);
    assert!(matches!(
        parse_listen_addr("8080"),
        Err(AddrError::Invalid(_))
    ));
    assert!(matches!(
        parse_listen_addr(":http"),
        Err(AddrError::Invalid(_))
    ));
    assert!(matches!(
        parse_listen_addr(":99999"),
        Err(AddrError::Invalid(_))
    ));
}

#[test]
fn lease_names_follow_flux() {
    assert_eq!(
        lease_name("kustomize-controller", ""),
        "kustomize-controller-leader-election"
    );
    assert_eq!(
        lease_name("source-controller", "  "),
        "source-controller-leader-election"
    );
    let sharded = lease_name("kustomize-controller", "sharding.fluxcd.io/key=shard1");
    let suffix = sharded
        .strip_prefix("kustomize-controller-leader-election-")
        .unwrap();
    assert_eq!(suffix.len(), 8);
    assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(
        sharded,
        lease_name("kustomize-controller", "sharding.fluxcd.io/key=shard2")
    );
}

#[test]
fn runtime_namespace_default() {
    assert_eq!(runtime_namespace_from(None), "flux-system");
    assert_eq!(runtime_namespace_from(Some(String::new())), "flux-system");
    assert_eq!(runtime_namespace_from(Some("gitops".into())), "gitops");
}
