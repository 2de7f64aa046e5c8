//! Post-build variable substitution (flux-spec §4.6), compatible with Flux's `postBuild`.
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

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use rflux_common::api::kustomization::{
    PostBuild, SubstituteKind, SubstituteReference, SubstituteStrategy,
};
use serde_json::Value;

/// Label or annotation that opts an object out of substitution (exact value `disabled`).
pub const SUBSTITUTE_KEY: &str = "kustomize.toolkit.fluxcd.io/substitute";
/// The only value of [`SUBSTITUTE_KEY`] that disables substitution (case-sensitive).
pub const DISABLED_VALUE: &str = "disabled";
/// Deepest nesting of `${...}` inside another expression's arguments.
pub const MAX_NESTING: usize = 64;
/// The pattern variable names must match (Go RE2 syntax, as Flux prints it).
pub const VAR_NAME_PATTERN: &str = "^[_[:alpha:]][_[:alpha:][:digit:]]*$";

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// An envsubst parse or evaluation error (the texts are Flux's).
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
}

/// Why substituting one object failed (rendered after `post build failed for '<id>': `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostBuildError {
    /// A variable name does not match [`VAR_NAME_PATTERN`].
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

// ---------------------------------------------------------------------------------------------
// Options and object-level API
// ---------------------------------------------------------------------------------------------

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

/// The feature gate that turns strict substitution on (default true since Flux 1.9).
pub const STRICT_GATE: &str = "StrictPostBuildSubstitutions";

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
/// happens when `vars` is empty). `vars` is used as given (see [`collect_vars`] for Flux's
/// newline stripping).
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

/// [`substitute`] with explicit options.
pub fn substitute_with(
    objects: Vec<Value>,
    vars: &BTreeMap<String, String>,
    opts: SubstituteOptions,
) -> Result<Vec<Value>, SubstituteError> {
    objects
        .into_iter()
        .map(|obj| substitute_object(obj, vars, opts))
        .collect()
}

/// Substitutes one object (returned unchanged when it opts out or there is nothing to do).
pub fn substitute_object(
    obj: Value,
    vars: &BTreeMap<String, String>,
    opts: SubstituteOptions,
) -> Result<Value, SubstituteError> {
    if substitution_disabled(&obj) || (vars.is_empty() && !opts.always) {
        return Ok(obj);
    }
    substitute_text_of(&obj, vars, opts.strict).map_err(|source| SubstituteError {
        id: object_id(&obj),
        source,
    })
}

fn substitute_text_of(
    obj: &Value,
    vars: &BTreeMap<String, String>,
    strict: bool,
) -> Result<Value, PostBuildError> {
    if let Some(bad) = vars.keys().find(|k| !valid_var_name(k)) {
        return Err(PostBuildError::InvalidVarName(bad.clone()));
    }
    let text = rflux_kustomize::yaml::to_yaml(obj);
    let out =
        envsubst(&text, |name| vars.get(name).cloned(), strict).map_err(PostBuildError::Eval)?;
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

// ---------------------------------------------------------------------------------------------
// Variable collection (I/O)
// ---------------------------------------------------------------------------------------------

/// Flux's variable set for a Kustomization in `namespace`: each `substituteFrom` source in
/// order (later ones override earlier ones; an `optional` source that does not exist is
/// skipped), then the inline `substitute` map over everything. Newlines are removed from every
/// value. Reads use `client` as is (Flux uses the controller's own client, not the
/// impersonated one).
pub async fn collect_vars(
    client: &kube::Client,
    namespace: &str,
    post_build: &PostBuild,
) -> Result<BTreeMap<String, String>, VarsError> {
    let mut vars = BTreeMap::new();
    for reference in post_build.substitute_from.iter().flatten() {
        let Some(data) = read_source(client, namespace, reference).await? else {
            continue;
        };
        for (k, v) in data {
            vars.insert(k, strip_newlines(&v));
        }
    }
    for (k, v) in post_build.substitute.iter().flatten() {
        vars.insert(k.clone(), strip_newlines(v));
    }
    Ok(vars)
}

fn strip_newlines(v: &str) -> String {
    v.replace('\n', "")
}

async fn read_source(
    client: &kube::Client,
    namespace: &str,
    reference: &SubstituteReference,
) -> Result<Option<Vec<(String, String)>>, VarsError> {
    let optional = reference.optional.unwrap_or(false);
    let (kind, result) = match reference.kind {
        SubstituteKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            let r = api
                .get(&reference.name)
                .await
                .map(|cm| cm.data.unwrap_or_default().into_iter().collect::<Vec<_>>());
            ("ConfigMap", r)
        }
        SubstituteKind::Secret => {
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            let r = api.get(&reference.name).await.map(|s| {
                s.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                    .collect::<Vec<_>>()
            });
            ("Secret", r)
        }
    };
    match result {
        Ok(data) => Ok(Some(data)),
        Err(e) => {
            let (not_found, message) = match &e {
                kube::Error::Api(status) => (status.is_not_found(), status.message.clone()),
                other => (false, other.to_string()),
            };
            if not_found && optional {
                return Ok(None);
            }
            Err(VarsError {
                kind,
                name: reference.name.clone(),
                message,
                not_found,
            })
        }
    }
}

/// The whole post-build substitution step of a reconcile: with `post_build` unset the objects
/// are returned as they are; otherwise the variables are collected and substituted. As in
/// Flux, an error reading the variables is reported against the first object that does not
/// opt out (and is not reported when every object opts out).
pub async fn post_build(
    client: &kube::Client,
    namespace: &str,
    post_build: Option<&PostBuild>,
    objects: Vec<Value>,
    strict: bool,
) -> Result<Vec<Value>, SubstituteError> {
    let Some(pb) = post_build else {
        return Ok(objects);
    };
    let vars = match collect_vars(client, namespace, pb).await {
        Ok(v) => v,
        Err(e) => {
            return match objects.iter().find(|o| !substitution_disabled(o)) {
                Some(first) => Err(SubstituteError {
                    id: object_id(first),
                    source: PostBuildError::Vars(e),
                }),
                None => Ok(objects),
            };
        }
    };
    substitute_with(
        objects,
        &vars,
        SubstituteOptions::for_post_build(pb, strict),
    )
}

// ---------------------------------------------------------------------------------------------
// envsubst: parser
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Text(String),
    Expr(Expr),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Expr {
    /// Variable name.
    param: String,
    /// Operator as written: "" for `${var}`, `#` for `${#var}` and the prefix trim, `:` for
    /// substrings, `/`, `//`, `/#`, `/%`, `%`, `%%`, `##`, casing (`^`, `^^`, `,`, `,,`) or a
    /// default operator (`=`, `:=`, `:-`, `:?`, `:+`).
    op: String,
    args: Vec<Node>,
}

/// Operators that supply a value for an unset variable (exempt from the strict check).
fn is_default_op(op: &str) -> bool {
    matches!(op, "-" | "+" | "=" | "?" | ":-" | ":+" | ":=" | ":?")
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

struct Parser {
    s: Vec<char>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.s.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.s.get(self.pos + offset).copied()
    }

    fn at_open(&self) -> bool {
        self.peek() == Some('$') && self.peek_at(1) == Some('{')
    }

    /// Top level: text (with `$$` escapes) and `${...}` expressions.
    fn parse_all(&mut self) -> Result<Vec<Node>, EnvsubstError> {
        let mut nodes = Vec::new();
        let mut text = String::new();
        while let Some(c) = self.peek() {
            if self.at_open() {
                if !text.is_empty() {
                    nodes.push(Node::Text(std::mem::take(&mut text)));
                }
                self.pos += 2;
                nodes.push(Node::Expr(self.parse_expr()?));
                continue;
            }
            if c == '$' && self.peek_at(1) == Some('$') {
                text.push('$');
                self.pos += 2;
                continue;
            }
            text.push(c);
            self.pos += 1;
        }
        if !text.is_empty() {
            nodes.push(Node::Text(text));
        }
        Ok(nodes)
    }

    fn expect_close(&mut self) -> Result<(), EnvsubstError> {
        if self.peek() == Some('}') {
            self.pos += 1;
            Ok(())
        } else {
            Err(EnvsubstError::BadSubstitution)
        }
    }

    fn ident(&mut self) -> String {
        let start = self.pos;
        while self.peek().is_some_and(is_ident_char) {
            self.pos += 1;
        }
        self.s[start..self.pos].iter().collect()
    }

    /// After `${`.
    fn parse_expr(&mut self) -> Result<Expr, EnvsubstError> {
        if self.depth >= MAX_NESTING {
            return Err(EnvsubstError::TooDeep);
        }
        self.depth += 1;
        let r = self.parse_expr_inner();
        self.depth -= 1;
        r
    }

    fn parse_expr_inner(&mut self) -> Result<Expr, EnvsubstError> {
        if self.peek() == Some('#') {
            self.pos += 1;
            let param = self.ident();
            if param.is_empty() {
                return Err(EnvsubstError::BadSubstitution);
            }
            self.expect_close()?;
            return Ok(Expr {
                param,
                op: "#".into(),
                args: Vec::new(),
            });
        }
        let param = self.ident();
        if param.is_empty() {
            return Err(EnvsubstError::ParseVariableName);
        }
        match self.peek() {
            Some(':') => {
                if matches!(self.peek_at(1), Some('=' | '-' | '?' | '+')) {
                    let op: String = self.s[self.pos..self.pos + 2].iter().collect();
                    self.pos += 2;
                    self.parse_default(param, op)
                } else {
                    self.pos += 1;
                    self.parse_substr(param)
                }
            }
            Some('=') => {
                self.pos += 1;
                self.parse_default(param, "=".into())
            }
            Some(',' | '^') => {
                let op = self.take_op(|c| c == ',' || c == '^');
                self.expect_close()?;
                Ok(Expr {
                    param,
                    op,
                    args: Vec::new(),
                })
            }
            Some('/') => self.parse_replace(param),
            Some('#') => {
                let op = self.take_op(|c| c == '#');
                self.parse_trim(param, op)
            }
            Some('%') => {
                let op = self.take_op(|c| c == '%');
                self.parse_trim(param, op)
            }
            Some('}') => {
                self.pos += 1;
                Ok(Expr {
                    param,
                    op: String::new(),
                    args: Vec::new(),
                })
            }
            _ => Err(EnvsubstError::MissingClosingBrace),
        }
    }

    /// Up to two operator characters accepted by `accept`.
    fn take_op(&mut self, accept: impl Fn(char) -> bool) -> String {
        let mut op = String::new();
        while op.chars().count() < 2 {
            match self.peek() {
                Some(c) if accept(c) => {
                    op.push(c);
                    self.pos += 1;
                }
                _ => break,
            }
        }
        op
    }

    /// One argument: a nested `${...}`, or text up to a character `stop` rejects (or a
    /// `${`). With `escapes`, `$$`, `\/` and `\\` put the second character in literally.
    fn parse_arg(
        &mut self,
        stop: impl Fn(char) -> bool,
        escapes: bool,
    ) -> Result<Node, EnvsubstError> {
        if self.at_open() {
            self.pos += 2;
            return Ok(Node::Expr(self.parse_expr()?));
        }
        let mut text = String::new();
        while let Some(c) = self.peek() {
            if self.at_open() {
                break;
            }
            if escapes {
                let next = self.peek_at(1);
                let escaped = match c {
                    '$' => next == Some('$'),
                    '\\' => matches!(next, Some('/' | '\\')),
                    _ => false,
                };
                if escaped {
                    if let Some(n) = next {
                        text.push(n);
                    }
                    self.pos += 2;
                    continue;
                }
            }
            if stop(c) {
                break;
            }
            text.push(c);
            self.pos += 1;
        }
        if text.is_empty() {
            return Err(EnvsubstError::ParseFuncSubstitution);
        }
        Ok(Node::Text(text))
    }

    /// `${var:pos}` / `${var:pos:len}` after the first `:`.
    fn parse_substr(&mut self, param: String) -> Result<Expr, EnvsubstError> {
        let mut args = vec![self.parse_arg(|c| c == ':' || c == '}', false)?];
        match self.peek() {
            Some('}') => {
                self.pos += 1;
                return Ok(Expr {
                    param,
                    op: ":".into(),
                    args,
                });
            }
            Some(':') => {
                while self.peek() == Some(':') {
                    self.pos += 1;
                }
            }
            _ => return Err(EnvsubstError::BadSubstitution),
        }
        args.push(self.parse_arg(|c| c == '}', false)?);
        self.expect_close()?;
        Ok(Expr {
            param,
            op: ":".into(),
            args,
        })
    }

    fn parse_trim(&mut self, param: String, op: String) -> Result<Expr, EnvsubstError> {
        let arg = self.parse_arg(|c| c == '}', false)?;
        self.expect_close()?;
        Ok(Expr {
            param,
            op,
            args: vec![arg],
        })
    }

    /// `${var/p/r}` and friends, at the first `/`.
    fn parse_replace(&mut self, param: String) -> Result<Expr, EnvsubstError> {
        let mut op = String::from("/");
        self.pos += 1;
        if let Some(c @ ('/' | '#' | '%')) = self.peek() {
            op.push(c);
            self.pos += 1;
        }
        let mut args = Vec::new();
        if self.peek() == Some('/') {
            args.push(Node::Text(String::new()));
        } else {
            args.push(self.parse_arg(|c| c == '/', true)?);
        }
        if self.peek() != Some('/') {
            return Err(EnvsubstError::BadSubstitution);
        }
        while self.peek() == Some('/') {
            self.pos += 1;
        }
        if self.peek() != Some('}') {
            args.push(self.parse_arg(|c| c == '}', true)?);
        }
        self.expect_close()?;
        Ok(Expr { param, op, args })
    }

    /// Default operators: the arguments (text and nested expressions) up to `}` are joined.
    fn parse_default(&mut self, param: String, op: String) -> Result<Expr, EnvsubstError> {
        let mut args = Vec::new();
        loop {
            if self.peek() == Some('}') {
                self.pos += 1;
                return Ok(Expr { param, op, args });
            }
            args.push(self.parse_arg(|c| c == '}', false)?);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// envsubst: evaluation
// ---------------------------------------------------------------------------------------------

/// Evaluates `text` with variables from `lookup` (`None` = undefined). In strict mode an
/// undefined variable used without a default-style operator is an error; otherwise it reads
/// as the empty string.
pub fn envsubst(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
    strict: bool,
) -> Result<String, EnvsubstError> {
    let mut p = Parser {
        s: text.chars().collect(),
        pos: 0,
        depth: 0,
    };
    let nodes = p.parse_all()?;
    let mut out = String::with_capacity(text.len());
    for n in &nodes {
        eval_node(n, &lookup, strict, &mut out)?;
    }
    Ok(out)
}

/// [`envsubst`] over a map.
pub fn envsubst_map(
    text: &str,
    vars: &BTreeMap<String, String>,
    strict: bool,
) -> Result<String, EnvsubstError> {
    envsubst(text, |k| vars.get(k).cloned(), strict)
}

fn eval_node(
    node: &Node,
    lookup: &dyn Fn(&str) -> Option<String>,
    strict: bool,
    out: &mut String,
) -> Result<(), EnvsubstError> {
    match node {
        Node::Text(t) => out.push_str(t),
        Node::Expr(e) => {
            let mut args = Vec::with_capacity(e.args.len());
            for a in &e.args {
                let mut s = String::new();
                eval_node(a, lookup, strict, &mut s)?;
                args.push(s);
            }
            let value = match lookup(&e.param) {
                Some(v) => v,
                None if strict && !is_default_op(&e.op) => {
                    return Err(EnvsubstError::VarNotSet(e.param.clone()));
                }
                None => String::new(),
            };
            out.push_str(&apply(&e.op, &value, &args));
        }
    }
    Ok(())
}

fn apply(op: &str, s: &str, args: &[String]) -> String {
    let arg = |i: usize| args.get(i).map(String::as_str);
    match op {
        "," => first_char_mapped(s, false),
        ",," => s.to_lowercase(),
        "^" => first_char_mapped(s, true),
        "^^" => s.to_uppercase(),
        "#" => match arg(0) {
            None => s.len().to_string(),
            Some(p) => trim_prefix(s, p, false),
        },
        "##" => arg(0).map_or_else(|| s.to_string(), |p| trim_prefix(s, p, true)),
        "%" => arg(0).map_or_else(|| s.to_string(), |p| trim_suffix(s, p, false)),
        "%%" => arg(0).map_or_else(|| s.to_string(), |p| trim_suffix(s, p, true)),
        ":" => substring(s, args),
        "/" => match args {
            [] => s.to_string(),
            [p] => s.replacen(p.as_str(), "", 1),
            [p, r, ..] => s.replacen(p.as_str(), r, 1),
        },
        "//" => match args {
            [] => s.to_string(),
            [p] => s.replace(p.as_str(), ""),
            [p, r, ..] => s.replace(p.as_str(), r),
        },
        "/#" => match args {
            [p, r] => match s.strip_prefix(p.as_str()) {
                Some(rest) => format!("{r}{rest}"),
                None => s.to_string(),
            },
            _ => s.to_string(),
        },
        "/%" => match args {
            [p, r] => match s.strip_suffix(p.as_str()) {
                Some(rest) => format!("{rest}{r}"),
                None => s.to_string(),
            },
            _ => s.to_string(),
        },
        // Plain `${var}`, default operators and unknown casing combinations.
        _ => {
            if s.is_empty() && !args.is_empty() {
                args.concat()
            } else {
                s.to_string()
            }
        }
    }
}

fn first_char_mapped(s: &str, upper: bool) -> String {
    let mut chars = s.chars();
    match chars.next() {
        None => String::new(),
        Some(c) => {
            let mut out: String = if upper {
                c.to_uppercase().collect()
            } else {
                c.to_lowercase().collect()
            };
            out.push_str(chars.as_str());
            out
        }
    }
}

/// Bash-like substring on bytes (as Flux does); a position or length that is not an integer
/// leaves the value unchanged.
fn substring(s: &str, args: &[String]) -> String {
    let bytes = s.as_bytes();
    let len = bytes.len() as i64;
    let slice = |a: i64, b: i64| -> String {
        let a = a.clamp(0, len) as usize;
        let b = b.clamp(0, len) as usize;
        if a >= b {
            return String::new();
        }
        String::from_utf8_lossy(&bytes[a..b]).into_owned()
    };
    let Some(first) = args.first() else {
        return s.to_string();
    };
    let Ok(mut pos) = first.parse::<i64>() else {
        return s.to_string();
    };
    if pos < 0 {
        pos = len.saturating_add(pos).max(0);
    }
    let Some(second) = args.get(1) else {
        return if pos < len {
            slice(pos, len)
        } else {
            String::new()
        };
    };
    let Ok(length) = second.parse::<i64>() else {
        return s.to_string();
    };
    if length < 0 {
        let end = len.saturating_add(length);
        if end < pos {
            return String::new();
        }
        return slice(pos, end);
    }
    if pos.saturating_add(length) >= len {
        return if pos < len {
            slice(pos, len)
        } else {
            String::new()
        };
    }
    slice(pos, pos + length)
}

/// Char-boundary byte offsets of `s`, from 0 to `s.len()` inclusive.
fn boundaries(s: &str) -> Vec<usize> {
    let mut b: Vec<usize> = s.char_indices().map(|(i, _)| i).collect();
    b.push(s.len());
    b
}

/// Removes the shortest (or longest) non-empty prefix matching `pattern`.
fn trim_prefix(s: &str, pattern: &str, longest: bool) -> String {
    let Ok(glob) = Glob::parse(pattern) else {
        return s.to_string();
    };
    let ends: Vec<usize> = boundaries(s).into_iter().filter(|&e| e > 0).collect();
    let found = if longest {
        ends.iter().rev().find(|&&e| glob.matches(&s[..e]))
    } else {
        ends.iter().find(|&&e| glob.matches(&s[..e]))
    };
    match found {
        Some(&e) => s[e..].to_string(),
        None => s.to_string(),
    }
}

/// Removes the shortest (or longest) non-empty suffix matching `pattern`.
fn trim_suffix(s: &str, pattern: &str, longest: bool) -> String {
    let Ok(glob) = Glob::parse(pattern) else {
        return s.to_string();
    };
    let starts: Vec<usize> = boundaries(s).into_iter().filter(|&b| b < s.len()).collect();
    let found = if longest {
        starts.iter().find(|&&b| glob.matches(&s[b..]))
    } else {
        starts.iter().rev().find(|&&b| glob.matches(&s[b..]))
    };
    match found {
        Some(&b) => s[..b].to_string(),
        None => s.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Shell glob (Go path.Match syntax, but `*` also matches `/`)
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum GlobTok {
    Star,
    Any,
    Lit(char),
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

#[derive(Debug)]
struct BadPattern;

struct Glob(Vec<GlobTok>);

impl Glob {
    fn parse(pattern: &str) -> Result<Glob, BadPattern> {
        let p: Vec<char> = pattern.chars().collect();
        let mut toks = Vec::new();
        let mut i = 0;
        while i < p.len() {
            match p[i] {
                '*' => {
                    if toks.last() != Some(&GlobTok::Star) {
                        toks.push(GlobTok::Star);
                    }
                    i += 1;
                }
                '?' => {
                    toks.push(GlobTok::Any);
                    i += 1;
                }
                '\\' => {
                    let c = *p.get(i + 1).ok_or(BadPattern)?;
                    toks.push(GlobTok::Lit(c));
                    i += 2;
                }
                '[' => {
                    i += 1;
                    let mut negated = false;
                    if p.get(i) == Some(&'^') {
                        negated = true;
                        i += 1;
                    }
                    let mut ranges = Vec::new();
                    loop {
                        match p.get(i) {
                            None => return Err(BadPattern),
                            Some(']') if !ranges.is_empty() => {
                                i += 1;
                                break;
                            }
                            _ => {}
                        }
                        let (lo, next) = class_char(&p, i)?;
                        i = next;
                        let mut hi = lo;
                        if p.get(i) == Some(&'-') {
                            let (h, next) = class_char(&p, i + 1)?;
                            hi = h;
                            i = next;
                        }
                        ranges.push((lo, hi));
                    }
                    toks.push(GlobTok::Class { negated, ranges });
                }
                c => {
                    toks.push(GlobTok::Lit(c));
                    i += 1;
                }
            }
        }
        Ok(Glob(toks))
    }

    fn matches(&self, s: &str) -> bool {
        let chars: Vec<char> = s.chars().collect();
        // Iterative wildcard matching with single-star backtracking.
        let toks = &self.0;
        let (mut t, mut c) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        while c < chars.len() {
            if t < toks.len() {
                match &toks[t] {
                    GlobTok::Star => {
                        star = Some((t, c));
                        t += 1;
                        continue;
                    }
                    tok if tok_matches(tok, chars[c]) => {
                        t += 1;
                        c += 1;
                        continue;
                    }
                    _ => {}
                }
            }
            match star {
                Some((st, sc)) => {
                    t = st + 1;
                    c = sc + 1;
                    star = Some((st, sc + 1));
                }
                None => return false,
            }
        }
        toks[t..].iter().all(|tok| *tok == GlobTok::Star)
    }
}

/// A character inside `[...]` (possibly `\`-escaped); `-` and `]` must be escaped.
fn class_char(p: &[char], i: usize) -> Result<(char, usize), BadPattern> {
    match p.get(i) {
        None | Some('-' | ']') => Err(BadPattern),
        Some('\\') => p.get(i + 1).map(|&c| (c, i + 2)).ok_or(BadPattern),
        Some(&c) => Ok((c, i + 1)),
    }
}

fn tok_matches(tok: &GlobTok, c: char) -> bool {
    match tok {
        GlobTok::Star => true,
        GlobTok::Any => true,
        GlobTok::Lit(l) => *l == c,
        GlobTok::Class { negated, ranges } => {
            ranges.iter().any(|(lo, hi)| *lo <= c && c <= *hi) != *negated
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn glob_basics() {
        let m = |p: &str, s: &str| Glob::parse(p).map(|g| g.matches(s)).unwrap_or(false);
        assert!(m("*", ""));
        assert!(m("*/", "path/to/"));
        assert!(m("a?c", "abc"));
        assert!(!m("a?c", "ac"));
        assert!(m("[a-c]x", "bx"));
        assert!(!m("[^a-c]x", "bx"));
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "a"));
        assert!(m("*.txt", "a.b.txt"));
        assert!(Glob::parse("[a").is_err());
        assert!(Glob::parse("x\\").is_err());
    }

    #[test]
    fn parser_builds_nested_default() {
        let mut p = Parser {
            s: "${a=x${b}y}".chars().collect(),
            pos: 0,
            depth: 0,
        };
        let nodes = p.parse_all().unwrap();
        assert_eq!(
            nodes,
            vec![Node::Expr(Expr {
                param: "a".into(),
                op: "=".into(),
                args: vec![
                    Node::Text("x".into()),
                    Node::Expr(Expr {
                        param: "b".into(),
                        op: String::new(),
                        args: vec![]
                    }),
                    Node::Text("y".into()),
                ],
            })]
        );
    }
}
