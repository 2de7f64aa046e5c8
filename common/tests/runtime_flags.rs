//! Shared flags: Flux names, defaults, pflag-style booleans, durations, feature gates, addresses.
//! Each controller tests its own flags next to them (`source-controller/src/flags.rs`,
//! `kustomize-controller/src/flags.rs`).
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use rflux_common::runtime::flags::{
    AddrError, FeatureGateError, KUSTOMIZE_FEATURE_GATES, SOURCE_FEATURE_GATES,
    parse_feature_gates, parse_listen_addr, runtime_namespace_from,
};
use rflux_common::runtime::leader::lease_name;
use rflux_common::runtime::{LogEncoding, LogLevel, RuntimeFlags};

/// A binary with only the shared flags (each controller flattens them into its own).
#[derive(Debug, Parser)]
struct Rt {
    #[command(flatten)]
    runtime: RuntimeFlags,
}

fn rt(args: &[&str]) -> Result<RuntimeFlags, clap::Error> {
    let mut all = vec!["controller"];
    all.extend_from_slice(args);
    Rt::try_parse_from(all).map(|c| c.runtime)
}

#[test]
fn runtime_defaults_match_flux() {
    let r = rt(&[]).unwrap();
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
    assert!(r.inert_flags_in_use().is_empty());
    let r = rt(&["--token-cache-max-size=5", "--token-cache-max-duration=2h"]).unwrap();
    assert_eq!(
        r.inert_flags_in_use(),
        vec!["--token-cache-max-size", "--token-cache-max-duration"]
    );
}

#[test]
fn flux_deployment_args_parse() {
    // The shared args Flux's install manifests pass to both controllers.
    let r = rt(&[
        "--events-addr=http://notification-controller.flux-system.svc.cluster.local./",
        "--watch-all-namespaces=true",
        "--log-level=info",
        "--log-encoding=json",
        "--enable-leader-election",
    ])
    .unwrap();
    assert!(r.leader_election.enable);
    assert!(r.watch_all_namespaces);
    assert!(r.inert_flags_in_use().is_empty());
    assert_eq!(
        r.events_addr,
        "http://notification-controller.flux-system.svc.cluster.local./"
    );
}

#[test]
fn pflag_style_booleans_and_values() {
    let r = rt(&[
        "--watch-all-namespaces=false",
        "--leader-election-release-on-cancel=false",
        "--enable-leader-election=true",
        "--log-encoding",
        "console",
        "--log-level=debug",
        "--leader-election-lease-duration=1m",
        "--leader-election-renew-deadline=45s",
        "--leader-election-retry-period=2500ms",
        "--requeue-dependency=5s",
        "--kube-api-qps=20.5",
        "--kube-api-burst=40",
        "--watch-label-selector=sharding.fluxcd.io/key=shard1",
    ])
    .unwrap();
    assert!(!r.watch_all_namespaces);
    assert!(!r.leader_election.release_on_cancel);
    assert!(r.leader_election.enable);
    assert_eq!(r.log_encoding, LogEncoding::Console);
    assert_eq!(r.log_level, LogLevel::Debug);
    assert_eq!(r.leader_election.lease_duration, Duration::from_secs(60));
    assert_eq!(r.leader_election.renew_deadline, Duration::from_secs(45));
    assert_eq!(r.leader_election.retry_period, Duration::from_millis(2500));
    assert_eq!(r.requeue_dependency, Duration::from_secs(5));
    assert!((r.kube_api_qps - 20.5).abs() < f32::EPSILON);
    assert_eq!(r.kube_api_burst, 40);
    assert_eq!(r.watch_label_selector, "sharding.fluxcd.io/key=shard1");
}

#[test]
fn invalid_values_are_rejected() {
    assert!(rt(&["--interval-jitter-percentage=100"]).is_err());
    assert!(rt(&["--interval-jitter-percentage=99"]).is_ok());
    assert!(rt(&["--requeue-dependency=30"]).is_err());
    assert!(rt(&["--log-level=verbose"]).is_err());
    assert!(rt(&["--log-encoding=xml"]).is_err());
    assert!(rt(&["--watch-all-namespaces=maybe"]).is_err());
    assert!(rt(&["--no-such-flag"]).is_err());
    // pflag does not take a separate value for booleans: "false" becomes a stray argument.
    assert!(rt(&["--watch-all-namespaces", "false"]).is_err());
}

#[test]
fn feature_gates() {
    let gates = parse_feature_gates("", KUSTOMIZE_FEATURE_GATES).unwrap();
    assert_eq!(gates.len(), KUSTOMIZE_FEATURE_GATES.len());
    assert!(gates.contains(&("StrictPostBuildSubstitutions".to_string(), true)));
    assert!(gates.contains(&("ArgoSyncSemantics".to_string(), false)));
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
fn gates_that_would_be_ignored_are_refused() {
    use rflux_common::runtime::flags::{
        KUSTOMIZE_UNSUPPORTED_GATES, SOURCE_UNSUPPORTED_GATES, refuse_unsupported,
    };
    // The defaults are all supported.
    let defaults = parse_feature_gates("", KUSTOMIZE_FEATURE_GATES).unwrap();
    assert_eq!(
        refuse_unsupported(&defaults, KUSTOMIZE_UNSUPPORTED_GATES),
        Ok(())
    );
    let defaults = parse_feature_gates("", SOURCE_FEATURE_GATES).unwrap();
    assert_eq!(
        refuse_unsupported(&defaults, SOURCE_UNSUPPORTED_GATES),
        Ok(())
    );
    for (name, value, _) in KUSTOMIZE_UNSUPPORTED_GATES {
        let gates =
            parse_feature_gates(&format!("{name}={value}"), KUSTOMIZE_FEATURE_GATES).unwrap();
        let err = refuse_unsupported(&gates, KUSTOMIZE_UNSUPPORTED_GATES).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("feature gate {name}={value} is not supported: ")),
            "{err}"
        );
    }
    // The gates that act are accepted both ways.
    for name in [
        "CancelHealthCheckOnNewRevision",
        "DisableFailFastBehavior",
        "GroupChangeLog",
        "DisableConfigWatchers",
        "DirectSourceFetch",
        "StrictPostBuildSubstitutions",
        "AdditiveCELDependencyCheck",
        "WatchAppliedObjects",
        "RefuseOwnershipConflicts",
        "ArgoSyncSemantics",
    ] {
        for value in [true, false] {
            let gates =
                parse_feature_gates(&format!("{name}={value}"), KUSTOMIZE_FEATURE_GATES).unwrap();
            assert_eq!(
                refuse_unsupported(&gates, KUSTOMIZE_UNSUPPORTED_GATES),
                Ok(()),
                "{name}={value}"
            );
        }
    }
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
