//! Kustomize build engine in pure Rust.
//!
//! [`build`] builds a kustomization directory like `kubectl kustomize` (kustomize v5.5);
//! [`build_flux`] does what Flux's kustomize-controller does for a `Kustomization` object
//! (generating a kustomization when the path has none, applying the spec's overrides);
//! [`to_yaml_stream`] prints the result the way kustomize does.
//!
//! A kustomization tree is untrusted input: every build runs within a [`Budget`] (time,
//! objects produced, bytes read, nesting depth), set through [`BuildOptions::budget`] or
//! [`build_flux_with`], and fails with [`KustomizeError::Budget`] when it runs out. The build
//! keeps its own stack of kustomizations, so it needs little thread stack whatever the depth.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod acc;
mod budget;
mod build;
mod builtin_config;
mod error;
mod fieldspec;
pub mod flux;
mod generate_name;
mod generator;
mod glue;
mod item;
mod kustomization;
mod loader;
mod located;
mod nameref;
mod objects;
mod par;
pub mod patch;
mod patching;
mod pipeline;
mod plugins;
pub mod resource;
mod scope;
mod sort;
mod transform;
mod walk;
pub mod yaml;

pub use budget::{
    Budget, DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, DEFAULT_MAX_RESOURCES, DEFAULT_TIMEOUT,
};
pub use build::{MANAGED_BY, build};
pub use error::{BudgetExceeded, KustomizeError, Location};
pub use fieldspec::{FieldSpec, Gvk};
pub use flux::{FluxOverrides, build_flux, build_flux_overlaid, build_flux_with};
pub use generate_name::{GENERATE_NAME_ANNOTATION, restore_generate_names};
pub use kustomization::KUSTOMIZATION_FILE_NAMES;
pub use loader::{BuildOptions, DEFAULT_MAX_FILE_BYTES, FileOverlay, LoadRestrictor};
pub use resource::{ResId, Resource};
pub use yaml::to_yaml_stream;
