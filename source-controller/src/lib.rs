//! source-controller: GitRepository reconciliation and artifact storage.

pub mod artifact;
pub mod flags;
pub mod gitrepository;
