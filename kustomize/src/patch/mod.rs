//! Patches: strategic merge, JSON 6902, target selection, replacements and vars.
//!
//! Everything here is pure: functions take parsed objects (`serde_json::Value`) and change them
//! in place. Loading files, deciding which resources a patch applies to and dropping deleted
//! resources is the caller's job (the build pipeline); this module gives it the pieces:
//!
//! - [`strategic_merge`] / [`strategic_merge_with`]: kustomize's strategic merge patch of
//!   one object, using merge keys from a [`Schema`]. Returns [`PatchOutcome::Deleted`] when the
//!   patch says `$patch: delete` at top level: drop the object. [`MergeOptions`] lets a caller
//!   whose YAML parser remembers which nulls were written empty (`key:`) drop them like kustomize.
//! - [`Schema::builtin`] is the schema of a normal build. A kustomization with
//!   `openapi: {path: ...}` uses [`Schema::from_openapi`] *instead* (kustomize then forgets the
//!   built-in kinds). `crds:` entries do not affect patching in kustomize: do not feed them to
//!   [`Schema::add_crd`] (an extension for real CRD objects).
//! - [`json6902`]: RFC 6902 operations (already parsed into a JSON array) applied to one object.
//! - [`is_json6902`]: tells whether an inline/file patch of `patches:` is a JSON 6902 op list
//!   (a sequence) rather than a strategic merge patch (a map), as kustomize decides it.
//! - [`Selector`]: the `target:` / `select:` / `reject:` selector (regexes anchored at both ends
//!   for group, version, kind, name and namespace; label/annotation selectors in Kubernetes syntax).
//! - [`replacements::apply`] / [`replacements::apply_with_ids`]: the `replacements:`
//!   transformer (`path:` entries must be expanded by the caller first).
//! - [`vars`]: the legacy `vars:` feature: [`vars::resolve`] / [`vars::resolve_with_ids`] turn
//!   the `vars:` list into typed values, [`vars::substitute`] replaces `$(VAR)` at the
//!   var-reference field specs ([`vars::default_var_reference_paths`] are kustomize's built-in
//!   ones) and returns the unused var names.
//! - [`selector::is_cluster_scoped`] / [`selector::effective_namespace`]: kustomize's view of
//!   namespaces when comparing identities (cluster scope by exact `apiVersion` and `kind`, the
//!   same rule the namespace transformer uses).
//!
//! No operation here nests an object deeper than [`crate::resource::MAX_DEPTH`]; one that would
//! fails instead.
//!
//! The `*_with_ids` variants take, per resource, every identity it has had (kustomize's
//! "previous ids"); the plain ones use the current identity and `Resource::original`.
//!
//! After [`strategic_merge`] the caller restores `metadata.name`, `metadata.namespace` and
//! `kind` unless the patch options allow name/kind changes (kustomize does that outside the
//! merge itself).

mod error;
mod json6902;
mod list_elements;
pub mod replacements;
pub mod schema;
pub mod selector;
mod smp;
pub mod vars;

pub use error::PatchError;
pub use json6902::{is_json6902, json6902};
pub use schema::Schema;
pub use selector::Selector;
pub use smp::{
    MergeOptions, NullFilter, PatchOutcome, strategic_merge, strategic_merge_consuming,
    strategic_merge_with,
};
