//! Kustomize build engine in pure Rust.

pub mod patch;
