//! kustomize-controller library: the Kustomization reconciler and the layers it stands on.
//!
//! - [`reconcile`]: the reconciler, one named function per stage (`reconcile/pipeline.rs`),
//!   with the pure status mapping in `reconcile/status.rs`;
//! - [`ssa`]: server-side apply, drift, waits, deletion: Kustomization-agnostic, like Flux's
//!   `ssa` package;
//! - [`tracker`]: the applied-object tracker (watch-fed fingerprints), plugged into `ssa`
//!   through its `AppliedCache` trait;
//! - [`fetch`], [`substitute`], [`cel`], [`inventory`], [`source_watch`]: the stages' own
//!   building blocks; [`identity`]: how this controller marks what it applies.

pub mod argo;
pub mod config_watch;
pub mod decrypt;
pub mod fetch;
pub mod flags;
pub mod identity;
pub mod inventory;
pub mod reconcile;
pub mod remote;
pub mod source_watch;
pub mod substitute;
pub mod tracker;

/// The server-side apply layer, shared with the other controllers (`ssa/`, `rflux-ssa`).
pub use rflux_ssa as ssa;
/// CEL health expressions and `readyExpr` (in `rflux-ssa`, shared with the other appliers).
pub use rflux_ssa::cel;
