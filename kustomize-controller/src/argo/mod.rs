//! Argo CD sync semantics inside one Kustomization (issue 17), as pure planning: no I/O, no
//! client. The reference is `argo-semantics.md` §1–§4 (cited as §n); docs/argo-compat.md
//! lists every Argo annotation and what rflux does with it.
//!
//! Opt-in twice, off by default: the controller feature gate [`keys::FEATURE_GATE`] and the
//! Kustomization annotation [`keys::OPT_IN`]`: enabled` ([`options::settings`]). Without both,
//! the Argo annotations of the objects are inert, as in Flux.
//!
//! - [`annotations`]: reading annotations, Argo's comma lists, Go's `Atoi`, the wave;
//! - [`hook`]: phases, hook types (Argo's and Helm's), delete policies, `generateName` names;
//! - [`options`]: per-object sync options (honoured, mapped or refused) and the
//!   Kustomization-level settings;
//! - [`order`]: the kind rank, the sort key and the Namespace/CRD fix-ups;
//! - [`plan`](mod@plan): tasks grouped into (phase, wave) steps, mirrored prune waves, `PruneLast`,
//!   the deletion order;
//! - [`delete_hooks`]: the PreDelete/PostDelete hooks of a Kustomization's deletion;
//! - [`namespace`]: `CreateNamespace=true` and `managedNamespaceMetadata`;
//! - [`print`](mod@print): `kustomize-controller build --argo-order`.

pub mod annotations;
pub mod delete_hooks;
pub mod error;
pub mod hook;
pub mod keys;
pub mod namespace;
pub mod options;
pub mod order;
pub mod plan;
pub mod print;
pub mod task;

pub use delete_hooks::{DeleteHook, DeleteStage, delete_hooks};
pub use error::ArgoError;
pub use hook::{DeletePolicy, Hook, HookNaming, HookType, Phase, Role};
pub use namespace::{NamespaceAction, managed_namespace};
pub use options::{ArgoSettings, NamespaceMetadata, SyncOptions, settings};
pub use plan::{
    Deletion, LeftOut, LeftOutReason, Note, Plan, PlanOptions, Step, deletion_order, plan,
    plan_with, prune_order,
};
pub use print::{OrderedStream, ordered_stream};
pub use task::{Source, Task};

#[cfg(test)]
mod tests;
