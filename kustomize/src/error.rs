//! The error type of the engine.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A place in a file: 1-based line, and 1-based column when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: PathBuf,
    pub line: usize,
    pub col: Option<usize>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)?;
        if let Some(c) = self.col {
            write!(f, ":{c}")?;
        }
        Ok(())
    }
}

/// Everything that can go wrong while building a kustomization.
#[derive(Debug, thiserror::Error)]
pub enum KustomizeError {
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },

    #[error("{origin}:{line}{}: invalid YAML: {message}", col.map(|c| format!(":{c}")).unwrap_or_default())]
    Yaml {
        origin: String,
        /// 1-based line and column of the error.
        line: usize,
        col: Option<usize>,
        message: String,
    },

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

    #[error(
        "may not add resource with an already registered id: {id}{}",
        first.as_ref().map(|l| format!(" (first defined at {l})")).unwrap_or_default()
    )]
    DuplicateId {
        id: String,
        /// Where the object already registered was written, when known.
        first: Option<Location>,
    },

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

    /// An error placed at the line of the file that caused it: `at` is the field or entry of
    /// a kustomization (`context` names it, e.g. `resources[2] 'svc.yaml'`) or the document
    /// of a resource or patch file. [`KustomizeError::cause`] gives the error inside.
    #[error("{}", Chain(self))]
    Located {
        at: Location,
        context: String,
        inner: Box<KustomizeError>,
    },
}

impl KustomizeError {
    /// The error without the locations wrapped around it.
    pub fn cause(&self) -> &KustomizeError {
        let mut e = self;
        while let KustomizeError::Located { inner, .. } = e {
            e = inner;
        }
        e
    }

    /// The outermost location of the error, if it has one.
    pub fn location(&self) -> Option<&Location> {
        match self {
            KustomizeError::Located { at, .. } => Some(at),
            _ => None,
        }
    }

    /// Places the error at `at`, with `context` naming what is there (may be empty).
    pub fn at(self, at: Location, context: impl Into<String>) -> KustomizeError {
        KustomizeError::Located {
            at,
            context: context.into(),
            inner: Box::new(self),
        }
    }
}

/// Prints a chain of locations, then the innermost error without the file names the chain
/// already printed in front of it (`k.yaml:3: patches[0]: patches: ...`, not
/// `k.yaml:3: patches[0]: k.yaml: patches: ...`).
struct Chain<'a>(&'a KustomizeError);

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut files: Vec<&Path> = Vec::new();
        let mut e = self.0;
        while let KustomizeError::Located { at, context, inner } = e {
            write!(f, "{at}: ")?;
            if !context.is_empty() {
                write!(f, "{context}: ")?;
            }
            files.push(&at.file);
            e = inner;
        }
        let msg = e.to_string();
        let rest = files
            .iter()
            .find_map(|p| {
                msg.strip_prefix(&*p.display().to_string())
                    .and_then(|r| r.strip_prefix(": "))
            })
            .unwrap_or(&msg);
        f.write_str(rest)
    }
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
