//! The errors of post-build substitution (the texts are Flux's where Flux has one).

use super::budget::{BudgetError, MAX_NESTING};

/// An envsubst parse or evaluation error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvsubstError {
    #[error("bad substitution")]
    BadSubstitution,
    #[error("missing closing brace")]
    MissingClosingBrace,
    #[error("unable to parse variable name")]
    ParseVariableName,
    #[error("unable to parse substitution within function")]
    ParseFuncSubstitution,
    #[error("unable to parse default function")]
    ParseDefaultFunction,
    /// Expressions nested deeper than [`MAX_NESTING`] (a guard against stack exhaustion).
    #[error("bad substitution: expressions nested more than {MAX_NESTING} levels deep")]
    TooDeep,
    /// Strict mode: the variable is referenced without a default and is not defined.
    #[error("variable not set (strict mode): \"{0}\"")]
    VarNotSet(String),
    /// The substitution exceeded its budget (see [`super::Limits`]).
    #[error(transparent)]
    Budget(#[from] BudgetError),
}

/// Why substituting one object failed (rendered after `post build failed for '<id>': `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostBuildError {
    /// A variable name does not match [`super::VAR_NAME_PATTERN`].
    #[error(
        "envsubst error: '{0}' var name is invalid, must match '^[_[:alpha:]][_[:alpha:][:digit:]]*$'"
    )]
    InvalidVarName(String),
    /// The envsubst expression could not be parsed or evaluated.
    #[error("envsubst error: variable substitution failed: {0}")]
    Eval(#[source] EnvsubstError),
    /// The substituted text is not valid YAML.
    #[error("envsubst error: YAMLToJSON: {0}")]
    Yaml(String),
    /// Reading the `substituteFrom` sources failed.
    #[error(transparent)]
    Vars(#[from] VarsError),
    /// The blocking task that substitutes the objects failed (it panicked or was aborted).
    #[error("envsubst error: substitution task failed: {0}")]
    Task(String),
}

/// Reading a `substituteFrom` source failed (Flux's text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("substitute from '{kind}/{name}' error: {message}")]
pub struct VarsError {
    /// `ConfigMap` or `Secret`.
    pub kind: &'static str,
    pub name: String,
    /// The API error (for the API server's errors, its status message).
    pub message: String,
    /// True when the object does not exist.
    pub not_found: bool,
}

/// Substitution of a built object failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("post build failed for '{id}': {source}")]
pub struct SubstituteError {
    /// The object as kustomize prints it: `<Kind>.<version>.<group|[noGrp]>/<name>`.
    pub id: String,
    #[source]
    pub source: PostBuildError,
}
