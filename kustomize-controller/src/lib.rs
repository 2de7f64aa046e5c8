//! kustomize-controller library: the reconcile stages (fetch, substitute, apply, inventory,
//! prune, health) as functions the controller binary and the e2e tests call.

pub mod apply;
pub mod cel;
pub mod fetch;
pub mod health;
pub mod inventory;
pub mod kstatus;
pub mod prune;
pub mod reconcile;
pub mod source_watch;
pub mod substitute;
pub mod tracker;
