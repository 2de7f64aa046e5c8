//! Shared contract of the toolkit: Flux-compatible API types, CRD generation,
//! and the controller plumbing (flags, health, metrics, logs, leader election), and the safe
//! extraction of tarballs both controllers receive (`untar`).

pub mod api;
pub mod digest;
pub mod runtime;
#[cfg(feature = "testing")]
pub mod testing;
pub mod untar;
