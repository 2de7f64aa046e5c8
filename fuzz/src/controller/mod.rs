//! The artifact extraction both controllers use (rflux-common's `untar.rs`) and
//! kustomize-controller's postBuild evaluator, compiled here from
//! their source files. Depending on the kustomize-controller crate would build kube,
//! k8s-openapi, cel and the rest of its ~170 extra crates under the fuzzing instrumentation;
//! these files need none of them (std, flate2, tar, thiserror). The object-level substitution
//! (`objects.rs`, which needs rflux-common's API types) is not included.

#[path = "../../../common/src/untar.rs"]
#[allow(dead_code)]
pub mod untar;

#[allow(dead_code, unused_imports)]
pub mod substitute;
