//! Go `text/template` with slim-sprig v3's hermetic functions, for Flux Operator's ResourceSet
//! templates (issue 19).
//!
//! [`parse`] turns template text into a reusable [`Template`]; [`Template::render`] executes it
//! with the current input set, which templates reach through the niladic function `inputs`
//! (the data `.` is nil). Output and error texts follow Go's `text/template` (with
//! `missingkey=error` by default), slim-sprig v3's `HermeticTxtFuncMap`, and Flux Operator's own
//! functions `inputs`, `slugify` (gosimple/slug, max 63, smart truncate), `toYaml` and
//! `mustToYaml` (sigs.k8s.io/yaml output).
//!
//! Differences from Go, on purpose or known:
//! - The date functions slim-sprig keeps in its hermetic map (`ago duration durationRound toDate
//!   mustToDate unixEpoch mustDateModify must_date_modify`) parse but fail when called with
//!   "date functions are not supported by rflux".
//! - `keys` and `values` return keys in sorted order (Go: random map order).
//! - Regular expressions use the `regex` crate (RE2 semantics like Go); `\d \w \s \b` are
//!   Unicode-aware there, and regex syntax error texts differ from Go's.
//! - `call` always fails (templates cannot hold function values here).
//! - Strings are UTF-8: byte slicing (`trunc`, `substr`) that cuts a character yields U+FFFD.
//! - Complex number constants (`1+2i`) are rejected at execution.
//! - `toYaml`: strings holding U+FEFF or U+0085 print differently from go-yaml's
//!   reader/emitter quirks; keys longer than 128 characters are not written in `? key` form.
//! - `fromJson`/`mustFromJson` syntax error texts differ from encoding/json's (except
//!   "unexpected end of JSON input").
//! - `None` inputs behave as an empty map (`toJson inputs` prints `{}` where Go prints `null`).
//!
//! Bounds (hostile tenants write these templates), all reported as errors naming the limit:
//! output bytes, evaluation steps (every node, every range iteration, and functions' work
//! proportional to what they produce), `template` recursion depth and parse nesting depth.

#![forbid(unsafe_code)]

mod ast;
mod encoding;
mod exec;
mod funcs;
mod gofmt;
mod json;
mod lex;
mod options;
mod parse;
mod printf;
mod slug;
mod strlit;
mod urls;
mod value;
mod yaml;

pub use options::{Options, TemplateError};
use value::Value;

/// A parsed template set (the main template plus its `define`s), reusable and shareable.
#[derive(Debug, Clone)]
pub struct Template {
    name: String,
    text: String,
    trees: parse::TreeSet,
    opts: Options,
}

/// Parses `text` as template `name`.
pub fn parse(name: &str, text: &str, opts: &Options) -> Result<Template, TemplateError> {
    if opts.left.is_empty() || opts.right.is_empty() {
        return Err(TemplateError::Options(
            "delimiters must not be empty".into(),
        ));
    }
    let trees = parse::parse(
        name,
        text,
        &opts.left,
        &opts.right,
        opts.max_depth,
        &funcs::exists,
    )
    .map_err(TemplateError::Parse)?;
    Ok(Template {
        name: name.to_string(),
        text: text.to_string(),
        trees,
        opts: opts.clone(),
    })
}

impl Template {
    /// Renders the template; `inputs` is what the `inputs` function returns (`None`: an empty
    /// map, like Flux Operator's nil input set).
    pub fn render(&self, inputs: Option<&serde_json::Value>) -> Result<String, TemplateError> {
        let inputs = match inputs {
            Some(v) => Value::from_json(v),
            None => Value::map(Default::default()),
        };
        let Some(root) = self.trees.get(&self.name) else {
            return Err(TemplateError::Exec(format!(
                "template: {}: {} is an incomplete or empty template",
                self.name,
                gofmt::quote(&self.name)
            )));
        };
        gofmt::set_print_cap(self.opts.max_output_bytes);
        let mut state = exec::State::new(&self.trees, &self.text, &self.name, &self.opts, inputs);
        state.run(root)?;
        Ok(state.out)
    }
}

/// `sigs.k8s.io/yaml.JSONToYAML` for a decoded JSON value: what Flux Operator does to each
/// `resources[]` item before using the text as a template (same printer as `toYaml`).
pub fn json_to_yaml(value: &serde_json::Value) -> Result<String, TemplateError> {
    yaml::marshal(&Value::from_json(value)).map_err(TemplateError::Exec)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
