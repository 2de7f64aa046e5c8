//! The engine's settings and its error type.

/// Parse or execution failure; the text is Go's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The template text is malformed: `template: name:line: ...`.
    #[error("{0}")]
    Parse(String),
    /// Execution failed: `template: name:line:col: executing "name" at <...>: ...`.
    #[error("{0}")]
    Exec(String),
    /// An option is unusable (e.g. empty delimiters).
    #[error("invalid template options: {0}")]
    Options(String),
}

/// Parse and execution settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Left action delimiter (Flux Operator: `<<`).
    pub left: String,
    /// Right action delimiter (Flux Operator: `>>`).
    pub right: String,
    /// Go's `missingkey=error`: a missing map key is an error (else `<no value>`).
    pub missing_key_error: bool,
    /// Maximum bytes of output (and of any single string a function builds).
    pub max_output_bytes: usize,
    /// Maximum evaluation steps.
    pub max_steps: u64,
    /// Maximum nesting: `template` call depth, and control/parenthesis nesting when parsing.
    pub max_depth: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            left: "<<".into(),
            right: ">>".into(),
            missing_key_error: true,
            max_output_bytes: 16 << 20,
            max_steps: 10_000_000,
            max_depth: 100,
        }
    }
}
