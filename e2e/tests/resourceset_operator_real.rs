//! The in-cluster oracle: flux-operator's own manager (built by `e2e/flux-operator/build.sh`)
//! run out-of-cluster against a real control plane, reconciling the ResourceSets of
//! `tests/data/resourceset/`. It records what the real operator created (objects, labels,
//! annotations, inventory, conditions) under `<e2e state>/flux-operator-oracle/records/` and checks it
//! against the CLI build of the same case. Cases: E3 and E1 (inline inputs; E1 first without the
//! CRDs of what it generates), E7 and E8 (Static providers by selector, Permute).
//!
//! The control plane is a dedicated instance (`flux-operator`): the operator watches every
//! namespace and its CRDs share the `fluxcd.controlplane.io` group with ours, so it must not run
//! where the other tests install rflux's ResourceSet CRDs. Skips (with the reason printed) when
//! the manager is not built.
#![allow(clippy::unwrap_used)]

#[path = "resourceset_operator_real/support.rs"]
mod support;

use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use kube::api::{Api, Patch, PatchParams};
use rflux_e2e::flux_operator;
use serde_json::json;
use support::*;

/// The manager and the CRD directory, or `None` after printing why `test` is skipped.
fn built(test: &str) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    match (
        flux_operator::manager(),
        flux_operator::cli(),
        flux_operator::crd_dir(),
    ) {
        (Some(manager), Some(_), Some(crds)) => Some((manager, crds)),
        _ => {
            eprintln!(
                "skipping {test}: flux-operator is not built in {} (run e2e/flux-operator/build.sh)",
                flux_operator::bin_dir().display()
            );
            None
        }
    }
}

fn key(ns: &str, name: &str) -> (String, String) {
    (ns.to_string(), name.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_operator_reconciles_e3_and_e1() {
    let Some((manager, crd_dir)) = built("flux_operator_reconciles_e3_and_e1") else {
        return;
    };
    let (_lock, client, op) = start_operator(manager, &crd_dir).await;

    // Leftovers of an earlier run; E1 must first meet a cluster without its CRDs.
    let (e3, e1) = (key("default", "tenants"), key("default", "podinfo"));
    delete_rset(&client, &e3, &op).await;
    delete_rset(&client, &e1, &op).await;
    delete_crd(&client, "helmreleases.helm.toolkit.fluxcd.io").await;
    delete_crd(&client, "ocirepositories.source.toolkit.fluxcd.io").await;
    for ns in ["team1", "team2"] {
        wait_namespace_gone(&client, ns).await;
    }

    // E3: Namespaces and ServiceAccounts only, so it becomes Ready.
    assert_eq!(apply_rset(&client, "e3-exclusion").await, e3);
    let rset = wait_rset(
        &client,
        &e3,
        &op,
        "E3 Ready",
        is_status("True", "ReconciliationSucceeded"),
    )
    .await;
    record_and_compare(&client, "e3-exclusion", &rset, &[], &[]).await;
    // Inventory order: the apply order (Namespaces first), not the build order.
    assert_eq!(
        inventory(&rset),
        [
            "_team1__Namespace",
            "_team2__Namespace",
            "team1_flux__ServiceAccount"
        ]
    );
    let sa2: Api<ServiceAccount> = Api::namespaced(client.clone(), "team2");
    assert!(
        sa2.get_opt("flux").await.unwrap().is_none(),
        "the excluded team2/flux ServiceAccount was created"
    );
    assert!(
        rset.data["status"]["lastAppliedRevision"]
            .as_str()
            .is_some_and(|r| r.starts_with("sha256:")),
        "{}",
        rset.data["status"]
    );

    // The operator made its entitlement Secret in the runtime namespace at start.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), RUNTIME_NAMESPACE);
    assert!(
        secrets
            .get_opt("flux-operator-entitlement")
            .await
            .unwrap()
            .is_some()
    );

    // E1 without the OCIRepository and HelmRelease CRDs: the apply fails.
    assert_eq!(apply_rset(&client, "e1-inline-inputs").await, e1);
    let failed = wait_rset(
        &client,
        &e1,
        &op,
        "E1 failing without CRDs",
        is_status("False", "ReconciliationFailed"),
    )
    .await;
    eprintln!(
        "e1-inline-inputs without CRDs: {}",
        ready(&failed).unwrap()["message"]
    );

    // With both CRDs and a reconcile request it becomes Ready.
    install_flux_crds(&client).await;
    let requested = rflux_e2e::unique_name("requested");
    rset_api(&client, &e1.0)
        .patch(
            &e1.1,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "reconcile.fluxcd.io/requestedAt": requested}}})),
        )
        .await
        .unwrap();
    // Ready after the requested reconcile (a retry may make it Ready before that).
    let succeeded = is_status("True", "ReconciliationSucceeded");
    let rset = wait_rset(&client, &e1, &op, "E1 Ready after the request", |o| {
        succeeded(o) && o.data["status"]["lastHandledReconcileAt"] == requested.as_str()
    })
    .await;
    let record = record_and_compare(&client, "e1-inline-inputs", &rset, &[], &[]).await;
    assert_eq!(record["objects"].as_array().unwrap().len(), 4);
    // Inventory order: by kind (HelmRelease before OCIRepository), not the build order.
    assert_eq!(
        inventory(&rset),
        [
            "default_podinfo-team1_helm.toolkit.fluxcd.io_HelmRelease",
            "default_podinfo-team2_helm.toolkit.fluxcd.io_HelmRelease",
            "default_podinfo-team1_source.toolkit.fluxcd.io_OCIRepository",
            "default_podinfo-team2_source.toolkit.fluxcd.io_OCIRepository",
        ]
    );
    assert_eq!(
        rset.data["status"]["lastHandledReconcileAt"],
        json!(requested)
    );
    // One history snapshot per (digest, status): the failed attempt and the success.
    let history = rset.data["status"]["history"].as_array().unwrap();
    let statuses: Vec<&str> = history
        .iter()
        .map(|h| h["lastReconciledStatus"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["ReconciliationSucceeded", "ReconciliationFailed"]
    );
    assert_eq!(history[0]["digest"], history[1]["digest"]);
    assert_eq!(
        history[0]["metadata"],
        json!({"inputs": "2", "resources": "4"})
    );

    // Deleting the ResourceSets garbage-collects what they created.
    delete_rset(&client, &e1, &op).await;
    delete_rset(&client, &e3, &op).await;
    let built = flux_operator::build_resourceset(&case_dir("e1-inline-inputs")).unwrap();
    for manifest in &built {
        assert!(
            live(&client, manifest).await.is_none(),
            "{} survived its ResourceSet",
            manifest["metadata"]["name"]
        );
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in ["team1", "team2"] {
        let gone_or_terminating = namespaces
            .get_opt(ns)
            .await
            .unwrap()
            .is_none_or(|n| n.metadata.deletion_timestamp.is_some());
        assert!(
            gone_or_terminating,
            "namespace {ns} survived its ResourceSet"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_operator_reads_static_providers() {
    let Some((manager, crd_dir)) = built("flux_operator_reads_static_providers") else {
        return;
    };
    let (_lock, client, op) = start_operator(manager, &crd_dir).await;
    install_flux_crds(&client).await;
    ensure_namespace(&client, "apps").await;
    let (e7, e8) = (key("apps", "app1"), key("default", "my-rset"));
    delete_rset(&client, &e7, &op).await;
    delete_rset(&client, &e8, &op).await;

    // E7: providers picked by selector. In a cluster a Static provider's id is the Adler-32 of
    // its uid, and it exports its defaultValues plus that id.
    let providers = apply_rsips(&client, "e7-static-selector", &op).await;
    for p in &providers {
        let exported = &p.data["status"]["exportedInputs"];
        let uid = p.metadata.uid.as_deref().unwrap();
        assert_eq!(exported.as_array().unwrap().len(), 1, "{exported}");
        assert_eq!(exported[0]["id"], json!(adler32(uid)), "{exported}");
        assert_eq!(exported[0]["app"], p.data["spec"]["defaultValues"]["app"]);
    }
    assert_eq!(apply_rset(&client, "e7-static-selector").await, e7);
    let rset = wait_rset(
        &client,
        &e7,
        &op,
        "E7 Ready",
        is_status("True", "ReconciliationSucceeded"),
    )
    .await;
    let record = record_and_compare(&client, "e7-static-selector", &rset, &[], &[]).await;
    assert_eq!(record["objects"].as_array().unwrap().len(), 4);

    // E8: Permute; object names match the CLI's, the provider ids are uid-based.
    let providers = apply_rsips(&client, "e8-permute", &op).await;
    let uid_id = |name: &str| {
        let p = providers
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .unwrap();
        adler32(p.metadata.uid.as_deref().unwrap())
    };
    assert_eq!(apply_rset(&client, "e8-permute").await, e8);
    let rset = wait_rset(
        &client,
        &e8,
        &op,
        "E8 Ready",
        is_status("True", "ReconciliationSucceeded"),
    )
    .await;
    let differ = ["/data/rsipGitID", "/data/rsipOCIID"];
    let record = record_and_compare(&client, "e8-permute", &rset, &differ, &[]).await;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "default");
    for name in ["my-cm-2714045022", "my-cm-2715421279"] {
        let data = cms.get(name).await.unwrap().data.unwrap();
        assert_eq!(data["rsipGitID"], uid_id("git-tag"), "{name}");
        assert_eq!(data["rsipOCIID"], uid_id("oci-tag"), "{name}");
    }
    assert_eq!(record["objects"].as_array().unwrap().len(), 2);

    delete_rset(&client, &e7, &op).await;
    delete_rset(&client, &e8, &op).await;
}

/// How a case ends on the cluster.
enum Outcome {
    /// Ready; every object the CLI builds exists, except these (`Kind ns/name`), which the apply
    /// skips.
    Ready(&'static [&'static str]),
    /// Ready=False `ReconciliationFailed` with this text in the message.
    Fails(&'static str),
}

/// `(case, fields the CLI computes differently (provider ids), outcome)`.
type SweepCase = (&'static str, &'static [&'static str], Outcome);

/// The cases whose objects need no controller to be Ready (no Job, no `wait`), with namespaces
/// `default`, `apps` and `other` and the OCIRepository, HelmRelease, GitRepository and
/// Kustomization CRDs present.
const SWEEP: &[SweepCase] = &[
    ("e2-dedup", &[], Outcome::Ready(&[])),
    ("e4-resources-template", &[], Outcome::Ready(&[])),
    ("e5a-toyaml-nindent", &[], Outcome::Ready(&[])),
    ("e5c-slugify", &[], Outcome::Ready(&[])),
    ("e6-multi-cluster", &[], Outcome::Ready(&[])),
    ("steps-resources-beat-template", &[], Outcome::Ready(&[])),
    // The apply skips a `reconcile: disabled` label too, and the value in any case.
    (
        "exclusion-template",
        &[],
        Outcome::Ready(&[
            "ConfigMap default/label-a",
            "ConfigMap default/caps-b",
            "ConfigMap default/label-b",
        ]),
    ),
    ("noinputs-no-exclusion", &[], Outcome::Ready(&[])),
    (
        "permute-three",
        &["/data/alphaID", "/data/zetaID"],
        Outcome::Ready(&[]),
    ),
    ("flatten-provider-order", &["/data/id"], Outcome::Ready(&[])),
    ("functions-mix", &[], Outcome::Ready(&[])),
    ("dedup-across", &[], Outcome::Ready(&[])),
    ("list-and-dropped", &[], Outcome::Ready(&[])),
    (
        "static-selector-filters",
        &["/data/id"],
        Outcome::Ready(&[]),
    ),
    ("slugify-truncate", &[], Outcome::Ready(&[])),
    // A ConfigMap value read as a YAML 1.1 boolean is not a string: the apply fails.
    (
        "yaml11-keys",
        &[],
        Outcome::Fails(".data.flag: expected string"),
    ),
    ("number-types", &[], Outcome::Ready(&[])),
    ("toyaml-quoting", &[], Outcome::Ready(&[])),
    ("default-empty", &[], Outcome::Ready(&[])),
    ("permute-providers-only", &[], Outcome::Ready(&[])),
    ("long-string-folding", &[], Outcome::Ready(&[])),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_operator_matches_the_cli_on_the_other_cases() {
    let Some((manager, crd_dir)) = built("flux_operator_matches_the_cli_on_the_other_cases") else {
        return;
    };
    let (_lock, client, op) = start_operator(manager, &crd_dir).await;
    install_flux_crds(&client).await;
    for file in ["gitrepositories.yaml", "kustomizations.yaml"] {
        let crd = rflux_e2e::repo_root().join("manifests/crds").join(file);
        apply_crd(&client, &read_yaml(&crd)).await;
    }
    for ns in ["apps", "other"] {
        ensure_namespace(&client, ns).await;
    }
    let mut failures = Vec::new();
    let mut applied = Vec::new();
    for (case, differ, outcome) in SWEEP {
        let rset = read_yaml(&case_dir(case).join("rset.yaml"));
        let id = key(
            rset["metadata"]["namespace"].as_str().unwrap(),
            rset["metadata"]["name"].as_str().unwrap(),
        );
        delete_rset(&client, &id, &op).await;
        if case_dir(case).join("rsip.yaml").is_file() {
            apply_rsips(&client, case, &op).await;
        }
        assert_eq!(apply_rset(&client, case).await, id);
        applied.push(id.clone());
        let done = |o: &kube::api::DynamicObject| {
            ready(o).is_some_and(|c| c["status"] == "True" || c["reason"] == "ReconciliationFailed")
        };
        let rset = wait_rset(&client, &id, &op, case, done).await;
        let condition = ready(&rset).unwrap().clone();
        let result = match outcome {
            Outcome::Ready(skipped) if condition["status"] == "True" => {
                let compared = tokio::spawn({
                    let client = client.clone();
                    let rset = rset.clone();
                    async move {
                        record_and_compare(&client, case, &rset, differ, skipped).await;
                    }
                })
                .await;
                compared.map_err(panic_text).and_then(|()| {
                    // Skipped objects stay in the inventory, an object built twice is in it twice.
                    let built = flux_operator::build_resourceset(&case_dir(case)).unwrap();
                    let mut want: Vec<String> = built.iter().map(inventory_id).collect();
                    want.sort();
                    let mut got = inventory(&rset);
                    got.sort();
                    (got == want)
                        .then_some(())
                        .ok_or_else(|| format!("inventory {got:?}, want {want:?}"))
                })
            }
            Outcome::Fails(text)
                if condition["status"] == "False"
                    && condition["message"].as_str().unwrap_or("").contains(text) =>
            {
                Ok(())
            }
            _ => Err(format!("unexpected Ready condition {condition}")),
        };
        match result {
            Ok(()) => eprintln!("{case}: ok; inventory {:?}", inventory(&rset)),
            Err(e) => failures.push(format!("{case}: {e}")),
        }
    }
    for id in &applied {
        delete_rset(&client, id, &op).await;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The message of a panicked task.
fn panic_text(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panicked".to_string()),
        Err(e) => e.to_string(),
    }
}
