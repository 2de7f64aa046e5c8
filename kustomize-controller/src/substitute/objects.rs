//! Substitution of built objects: each object is serialised to YAML, the text goes through
//! the envsubst evaluator, and the result is parsed back. Pure and synchronous: the caller on
//! an async runtime runs it on a blocking thread (see [`super::post_build`]).

use std::borrow::Cow;
use std::collections::BTreeMap;

use rflux_common::api::kustomization::{PostBuild, SubstituteStrategy};
use serde_json::Value;

use super::budget::Budget;
use super::envsubst::eval_text;
use super::error::{PostBuildError, SubstituteError};

/// Label or annotation that opts an object out of substitution (exact value `disabled`).
pub const SUBSTITUTE_KEY: &str = "kustomize.toolkit.fluxcd.io/substitute";
/// The only value of [`SUBSTITUTE_KEY`] that disables substitution (case-sensitive).
pub const DISABLED_VALUE: &str = "disabled";
/// The pattern variable names must match (Go RE2 syntax, as Flux prints it).
pub const VAR_NAME_PATTERN: &str = "^[_[:alpha:]][_[:alpha:][:digit:]]*$";
/// The feature gate that turns strict substitution on (default true since Flux 1.9).
pub const STRICT_GATE: &str = "StrictPostBuildSubstitutions";

/// How to substitute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubstituteOptions {
    /// Undefined variables without a default fail (feature gate `StrictPostBuildSubstitutions`).
    pub strict: bool,
    /// Substitute even when no variable is defined (`substituteStrategy: Always`); otherwise an
    /// empty variable set leaves the objects untouched (`WithVariables`).
    pub always: bool,
}

impl Default for SubstituteOptions {
    fn default() -> Self {
        SubstituteOptions {
            strict: true,
            always: false,
        }
    }
}

impl SubstituteOptions {
    /// Options for a Kustomization's `postBuild` and the strict feature gate.
    pub fn for_post_build(post_build: &PostBuild, strict: bool) -> Self {
        SubstituteOptions {
            strict,
            always: post_build.substitute_strategy == Some(SubstituteStrategy::Always),
        }
    }
}

/// Strict mode from the effective feature gates (`parse_feature_gates` output); true when the
/// gate is absent.
pub fn strict_from_gates(gates: &[(String, bool)]) -> bool {
    gates
        .iter()
        .find(|(name, _)| name == STRICT_GATE)
        .is_none_or(|(_, on)| *on)
}

/// True when the object opts out with the label or annotation
/// `kustomize.toolkit.fluxcd.io/substitute: disabled`.
pub fn substitution_disabled(obj: &Value) -> bool {
    ["labels", "annotations"].iter().any(|field| {
        obj.get("metadata")
            .and_then(|m| m.get(*field))
            .and_then(|m| m.get(SUBSTITUTE_KEY))
            .and_then(Value::as_str)
            == Some(DISABLED_VALUE)
    })
}

/// kustomize's `<Kind>.<version>.<group>/<name>` for an object (`[noGrp]`, `[noVer]` and
/// `[noKind]` stand for empty parts).
pub fn object_id(obj: &Value) -> String {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let (group, version) = match api_version.rsplit_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let or = |s: &'static str, v: &str| {
        if v.is_empty() {
            s.to_string()
        } else {
            v.to_string()
        }
    };
    format!(
        "{}.{}.{}/{}",
        or("[noKind]", kind),
        or("[noVer]", version),
        or("[noGrp]", group),
        name
    )
}

/// Substitutes `vars` into every object with the default `WithVariables` strategy (nothing
/// happens when `vars` is empty). `vars` is used as given (see [`super::collect_vars`] for
/// Flux's newline stripping).
pub fn substitute(
    objects: Vec<Value>,
    vars: &BTreeMap<String, String>,
    strict: bool,
) -> Result<Vec<Value>, SubstituteError> {
    substitute_with(
        objects,
        vars,
        SubstituteOptions {
            strict,
            always: false,
        },
    )
}

/// [`substitute`] with explicit options, within the default [`super::Limits`].
pub fn substitute_with(
    objects: Vec<Value>,
    vars: &BTreeMap<String, String>,
    opts: SubstituteOptions,
) -> Result<Vec<Value>, SubstituteError> {
    substitute_with_budget(objects, vars, opts, &mut Budget::default())
}

/// [`substitute_with`] accounting every object to `budget` (each object starts a new
/// per-object account).
pub fn substitute_with_budget(
    objects: Vec<Value>,
    vars: &BTreeMap<String, String>,
    opts: SubstituteOptions,
    budget: &mut Budget,
) -> Result<Vec<Value>, SubstituteError> {
    let invalid = vars.keys().find(|k| !valid_var_name(k));
    objects
        .into_iter()
        .map(|obj| substitute_one(obj, vars, invalid, opts, budget))
        .collect()
}

/// Substitutes one object (returned unchanged when it opts out or there is nothing to do).
pub fn substitute_object(
    obj: Value,
    vars: &BTreeMap<String, String>,
    opts: SubstituteOptions,
) -> Result<Value, SubstituteError> {
    let invalid = vars.keys().find(|k| !valid_var_name(k));
    substitute_one(obj, vars, invalid, opts, &mut Budget::default())
}

fn substitute_one(
    obj: Value,
    vars: &BTreeMap<String, String>,
    invalid_name: Option<&String>,
    opts: SubstituteOptions,
    budget: &mut Budget,
) -> Result<Value, SubstituteError> {
    if substitution_disabled(&obj) || (vars.is_empty() && !opts.always) {
        return Ok(obj);
    }
    substitute_text_of(&obj, vars, invalid_name, opts.strict, budget).map_err(|source| {
        SubstituteError {
            id: object_id(&obj),
            source,
        }
    })
}

fn substitute_text_of(
    obj: &Value,
    vars: &BTreeMap<String, String>,
    invalid_name: Option<&String>,
    strict: bool,
    budget: &mut Budget,
) -> Result<Value, PostBuildError> {
    if let Some(bad) = invalid_name {
        return Err(PostBuildError::InvalidVarName(bad.clone()));
    }
    let eval_err = |e| PostBuildError::Eval(e);
    budget.begin_object().map_err(|e| eval_err(e.into()))?;
    let text = rflux_kustomize::yaml::to_yaml(obj);
    let lookup = |name: &str| vars.get(name).map(|v| Cow::Borrowed(v.as_str()));
    let out = eval_text(&text, &lookup, strict, budget).map_err(eval_err)?;
    rflux_kustomize::yaml::parse_one(&out, "post-build substitution")
        .map_err(|e| PostBuildError::Yaml(e.to_string()))
}

/// `^[_[:alpha:]][_[:alpha:][:digit:]]*$` with RE2's ASCII classes.
pub fn valid_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c == '_' || c.is_ascii_alphabetic() => {}
        _ => return false,
    }
    chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}
