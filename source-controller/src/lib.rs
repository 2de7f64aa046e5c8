//! source-controller: GitRepository and OCIRepository reconciliation and artifact storage.

pub mod artifact;
pub mod flags;
pub mod gitrepository;
pub mod ocirepository;
pub mod source;
