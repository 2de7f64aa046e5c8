//! resourceset-controller: Flux Operator's `ResourceSet` and `ResourceSetInputProvider`
//! (`fluxcd.controlplane.io/v1`, issue 19), on the shared `ssa` layer and runtime.
//!
//! - [`inputs`]: input sets from the ResourceSet and its providers, Flatten and Permute (pure);
//! - [`build`]: rendering the templates into objects, de-duplication, steps (pure);
//! - [`resourceset`]: the ResourceSet reconciler, one function per stage;
//! - [`offline`]: a build without a cluster, as Flux Operator's CLI does it;
//! - [`provider`]: the ResourceSetInputProvider reconciler (`type: Static`).

pub mod build;
pub mod id;
pub mod inputs;
pub mod offline;
pub mod provider;
pub mod resourceset;

/// The name events and the field manager carry, as Flux Operator's.
pub const CONTROLLER_NAME: &str = "flux-operator";
