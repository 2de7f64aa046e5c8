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
pub mod cel;
pub mod config_watch;
pub mod decrypt;
pub mod fetch;
pub mod flags;
pub mod identity;
pub mod inventory;
pub mod reconcile;
pub mod source_watch;
pub mod ssa;
pub mod substitute;
pub mod tracker;
