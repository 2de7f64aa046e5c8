//! The one error type of the patch module.

/// Everything that can go wrong while patching, selecting, replacing or substituting.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// A patch document is not usable (wrong shape, bad directive, ...).
    #[error("invalid patch at {path}: {reason}")]
    InvalidPatch { path: String, reason: String },
    /// An element of a merge-keyed list lacks the merge key or has a bad one.
    #[error("merge key {key:?} at {path}: {reason}")]
    MergeKey {
        path: String,
        key: String,
        reason: String,
    },
    /// A JSON 6902 operation failed (index is the position in the op list).
    #[error("json patch op {index} ({op} {path}): {reason}")]
    Json6902 {
        index: usize,
        op: String,
        path: String,
        reason: String,
    },
    /// A selector (`target`, `select`, `reject`) is malformed.
    #[error("invalid selector field {field}: {reason}")]
    InvalidSelector { field: String, reason: String },
    /// The `labelSelector` or `annotationSelector` of a selector does not parse.
    #[error("invalid selector field {field}: {source}")]
    LabelSelector {
        field: String,
        #[source]
        source: rflux_core::SelectorParseError,
    },
    /// An OpenAPI document or CRD given to the schema is malformed.
    #[error("invalid schema: {reason}")]
    Schema { reason: String },
    /// A `replacements:` entry failed (index is its position in the list).
    #[error("replacement {index}: {reason}")]
    Replacement { index: usize, reason: String },
    /// A field path (`spec.template.spec.containers.[name=app].image`) is malformed or unusable.
    #[error("field path {path:?}: {reason}")]
    FieldPath { path: String, reason: String },
    /// A `vars:` entry could not be resolved.
    #[error("var {name}: {reason}")]
    Var { name: String, reason: String },
}
