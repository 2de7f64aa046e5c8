//! Kustomize build engine in pure Rust.
//!
//! [`build`] builds a kustomization directory like `kubectl kustomize` (kustomize v5.5);
//! [`build_flux`] does what Flux's kustomize-controller does for a `Kustomization` object
//! (generating a kustomization when the path has none, applying the spec's overrides);
//! [`to_yaml_stream`] prints the result the way kustomize does.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod build;
pub mod error;
pub mod fieldspec;
pub mod flux;
pub mod generator;
mod glue;
pub mod kustomization;
pub mod loader;
mod nameref;
pub mod patch;
mod plugins;
pub mod resource;
pub mod sort;
pub mod transform;
mod varref;
pub mod yaml;

pub use build::build;
pub use error::KustomizeError;
pub use flux::{FluxOverrides, build_flux};
pub use loader::{BuildOptions, LoadRestrictor};
pub use resource::{ResId, Resource};
pub use yaml::to_yaml_stream;
