#![allow(clippy::unwrap_used)] // tests may unwrap (project rule)
//! Which types `namespace:` applies to, as kustomize v5.5 decides it: cluster scoped are exactly
//! the cluster-scoped (apiVersion, kind) pairs of kustomize's built-in schema; every other type
//! (a newer API version of a built-in kind, a custom resource) counts as namespaced. Every case
//! under `tests/scope_cases/` holds a kustomization and the output `kubectl kustomize`
//! (Kustomize v5.5.0) printed for it; `tests/scope_cases/gen.py` rewrites them.

#[path = "generator_merge/runner.rs"]
mod runner;

#[test]
fn namespace_scope_matches_kubectl() {
    let n = runner::run_cases("tests/scope_cases");
    assert!(n >= 56, "only {n} cases found");
}
