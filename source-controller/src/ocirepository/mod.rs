//! OCIRepository reconciliation: Flux's OCI artifacts pulled from a registry (`rflux-oci`),
//! verified with cosign keys, extracted or copied, and stored like GitRepository artifacts.

pub mod auth;
pub mod controller;
mod pull;
pub mod reconcile;
pub mod refs;
mod run;
mod stages;
pub mod status;
mod store;
pub mod verify;
mod verify_stage;

pub use controller::run_ocirepository_controller;
pub use reconcile::{KIND_DIR, reconcile};

use rflux_common::untar::UntarLimits;

/// Bounds on what a registry sends (Flux has none; a hostile registry must not exhaust the
/// controller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OciSettings {
    /// Largest layer blob downloaded (`--oci-max-layer-size`).
    pub max_layer_bytes: u64,
    /// Bounds on the extracted tree.
    pub untar: UntarLimits,
}

impl Default for OciSettings {
    fn default() -> Self {
        OciSettings {
            max_layer_bytes: 1 << 30,
            untar: UntarLimits::default(),
        }
    }
}
