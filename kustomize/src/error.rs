//! The error type of the engine.

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while building a kustomization.
#[derive(Debug, thiserror::Error)]
pub enum KustomizeError {
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },

    #[error("invalid YAML in {origin}: {message}")]
    Yaml { origin: String, message: String },

    #[error("{origin}: YAML limit exceeded: {message}")]
    YamlLimit { origin: String, message: String },

    #[error("security: file '{path}' is not in or below '{root}'")]
    OutsideRoot { path: PathBuf, root: PathBuf },

    #[error(
        "unable to find one of 'kustomization.yaml', 'kustomization.yml' or 'Kustomization' in directory '{0}'"
    )]
    MissingKustomization(PathBuf),

    #[error("found multiple kustomization files under: {0}")]
    MultipleKustomizations(PathBuf),

    #[error("{file}: invalid kustomization: {message}")]
    InvalidKustomization { file: PathBuf, message: String },

    #[error("{file}: field '{field}': {message}")]
    Field {
        file: PathBuf,
        field: String,
        message: String,
    },

    #[error("{file}: '{entry}' in '{field}': {message}")]
    Unsupported {
        file: PathBuf,
        field: String,
        entry: String,
        message: String,
    },

    #[error("{file}: accumulating resources from '{entry}': {message}")]
    Resource {
        file: PathBuf,
        entry: String,
        message: String,
    },

    #[error("may not add resource with an already registered id: {id}")]
    DuplicateId { id: String },

    #[error("{file}: invalid resource in '{origin}': {message}")]
    InvalidResource {
        file: PathBuf,
        origin: String,
        message: String,
    },

    #[error("{file}: generator '{name}': {message}")]
    Generator {
        file: PathBuf,
        name: String,
        message: String,
    },

    #[error("{file}: {field}: no matches for target {target}")]
    PatchTargetNotFound {
        file: PathBuf,
        field: String,
        target: String,
    },

    #[error("{file}: {field}: {message}")]
    Patch {
        file: PathBuf,
        field: String,
        message: String,
    },

    #[error("{context}: {message}")]
    Transform { context: String, message: String },

    #[error("build budget exceeded: {0}")]
    Budget(BudgetExceeded),
}

/// Which limit of a build's budget (`rflux_kustomize::Budget`) a build ran into.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetExceeded {
    #[error("the build took longer than {0:?}")]
    Time(Duration),
    #[error("the build produced more than {0} objects")]
    Resources(usize),
    #[error("the build read more than {0} bytes")]
    Bytes(u64),
    #[error("kustomizations are nested more than {0} deep")]
    Depth(usize),
}

pub type Result<T> = std::result::Result<T, KustomizeError>;
