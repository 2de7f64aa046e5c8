//! Post-build variable substitution, compatible with Flux's `postBuild`.
//!
//! Each built object is serialised to YAML, the text goes through an envsubst evaluator that
//! follows the syntax of `fluxcd/pkg/envsubst` (a fork of drone/envsubst), and the result is
//! parsed back. Because the substitution happens on YAML text, it can change types: an unquoted
//! `${replicas}` with `replicas=3` becomes the integer 3.
//!
//! Syntax (only the braced form is recognised; a bare `$var` is left alone):
//!
//! | form | result |
//! |---|---|
//! | `${var}` | the value |
//! | `${#var}` | length in bytes |
//! | `${var^}` `${var^^}` `${var,}` `${var,,}` | upper-case first / all, lower-case first / all |
//! | `${var:pos}` `${var:pos:len}` | substring (negative `pos` counts from the end; negative `len` stops that many bytes before the end) |
//! | `${var#glob}` `${var##glob}` | strip the shortest / longest matching prefix |
//! | `${var%glob}` `${var%%glob}` | strip the shortest / longest matching suffix |
//! | `${var/p/r}` `${var//p/r}` `${var/#p/r}` `${var/%p/r}` | replace first / all / prefix / suffix (`\/` and `\\` escape) |
//! | `${var:-d}` `${var:=d}` `${var=d}` (and `${var:+d}` `${var:?d}`) | `d` when the value is empty |
//! | `$${...}`, `$$` | a literal `${...}`, `$` |
//!
//! Like Flux, `${var-d}` and `${var+d}` are not recognised (they fail with "missing closing
//! brace"), and every default-style operator substitutes the default when the value is empty,
//! set or not. Globs are shell patterns in which `*` also matches `/`.
//!
//! Strict mode (Flux feature gate `StrictPostBuildSubstitutions`, on by default) makes a
//! reference to an undefined variable without a default-style operator an error.
//!
//! Variables and manifests come from the tenant, so every operator runs in linear time (or
//! within the work budget, for globs with `?` or classes), and a run is bounded by [`Limits`]:
//! bytes produced and work per object and in total, a deadline and cancellation. In a
//! reconcile, [`post_build`] runs the substitution on a blocking thread.
//!
//! Files: `budget.rs` (limits and accounting), `error.rs`, `parse.rs` and `envsubst.rs` (the
//! pure evaluator), `glob.rs` (pattern matching), `objects.rs` (the object-level API, pure) and
//! `sources.rs` (reading `substituteFrom`, and the async `post_build` step). Everything public
//! is re-exported here.

mod budget;
mod envsubst;
mod error;
mod glob;
mod objects;
mod parse;
mod sources;

pub use budget::{
    Budget, BudgetError, DEFAULT_TIMEOUT, Limits, MAX_NESTING, MAX_OBJECT_BYTES, MAX_OBJECT_WORK,
    MAX_TOTAL_BYTES, MAX_TOTAL_WORK,
};
pub use envsubst::{envsubst, envsubst_map, envsubst_map_with, envsubst_with};
pub use error::{EnvsubstError, PostBuildError, SubstituteError, VarsError};
pub use objects::{
    DISABLED_VALUE, STRICT_GATE, SUBSTITUTE_KEY, SubstituteOptions, VAR_NAME_PATTERN, object_id,
    strict_from_gates, substitute, substitute_object, substitute_with, substitute_with_budget,
    substitution_disabled, valid_var_name,
};
pub use sources::{collect_vars, post_build, substitute_blocking};
