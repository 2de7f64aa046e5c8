#![allow(clippy::unwrap_used)] // tests may unwrap (project rule)
//! `configMapGenerator` / `secretGenerator` with `behavior: merge` or `replace` across bases:
//! which options (hash suffix, labels, annotations, immutable, type) the result keeps. Every
//! case under `tests/generator_merge/` holds a kustomization tree and the output
//! `kubectl kustomize` (Kustomize v5.5.0) printed for it; `tests/generator_merge/gen.py`
//! rewrites them.

#[path = "generator_merge/runner.rs"]
mod runner;

#[test]
fn generator_merge_and_replace_match_kubectl() {
    let n = runner::run_cases("tests/generator_merge");
    // every case written by gen.py is there (a missing directory would otherwise pass silently)
    assert!(n >= 40, "only {n} cases found");
}
