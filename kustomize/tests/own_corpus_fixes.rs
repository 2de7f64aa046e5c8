#![allow(clippy::unwrap_used)] // tests may unwrap (project rule)
//! Regressions found by the own corpus (`tests/own_corpus`): each case under
//! `tests/own_corpus_fixes/` is a small tree with the output `kubectl kustomize` (Kustomize
//! v5.5.0) printed for it (`expected.yaml`), or its error (`expected-error.txt`) where kubectl
//! failed; `tests/own_corpus_fixes/gen.sh` rewrites them.
//!
//! - `smp-*`: a strategic-merge patch names a cluster-scoped object with a namespace
//!   (kubernetes-sigs/security-profiles-operator `deploy/overlays/webhook`); kustomize ignores
//!   namespaces of cluster-scoped types when it looks the object up.
//! - `json6902-*`: `patches:` JSON 6902 ops may add keys under a missing
//!   `metadata.annotations` (security-profiles-operator `deploy/overlays/helm`), but not under
//!   missing labels, and not through the older `patchesJson6902:` field.

#[path = "generator_merge/runner.rs"]
mod runner;

#[test]
fn own_corpus_fixes_match_kubectl() {
    let n = runner::run_cases("tests/own_corpus_fixes");
    assert!(n >= 7, "only {n} cases found");
}
