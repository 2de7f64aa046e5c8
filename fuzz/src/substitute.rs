//! `substitute`: postBuild variable substitution (kustomize-controller `substitute`).
//!
//! The evaluator only (`envsubst.rs` and what it uses; see `controller`): the object-level
//! wrapper needs the controller crate's API types.
//!
//! Property: no panic on any text and variable map, within a small budget; for texts made
//! of plain literals and `${name}` references to defined variables, the result is the
//! literals with the values spliced in (a tiny reference evaluator).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::controller::substitute::budget::{Budget, Limits};
use crate::controller::substitute::envsubst::envsubst_map_with;
use arbitrary::{Arbitrary, Unstructured};

#[derive(Debug, Arbitrary)]
enum Piece {
    /// Literal text; every `$` is dropped so that it stays a literal.
    Lit(String),
    /// `${name}` of variable number `n` (modulo the defined ones).
    Var(u8),
}

#[derive(Debug, Arbitrary)]
struct Input {
    /// Free text with any `${...}` syntax.
    text: String,
    vars: Vec<(String, String)>,
    strict: bool,
    /// A text of the simple form, checked against the reference.
    simple: Vec<Piece>,
}

fn budget() -> Budget {
    Budget::new(Limits {
        object_bytes: 1 << 20,
        total_bytes: 4 << 20,
        object_work: 2_000_000,
        total_work: 8_000_000,
        timeout: Some(Duration::from_secs(5)),
    })
}

pub fn substitute(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let vars: BTreeMap<String, String> = input.vars.into_iter().collect();
    let free = envsubst_map_with(&input.text, &vars, input.strict, &mut budget());
    if crate::debug() {
        eprintln!("{:?} with {vars:?} -> {free:?}", input.text);
    }

    // The reference: literals and ${name} of defined variables with valid names.
    let names: Vec<&String> = vars.keys().filter(|k| valid_name(k)).collect();
    let mut text = String::new();
    let mut expected = String::new();
    for p in &input.simple {
        match p {
            Piece::Lit(s) => {
                let s: String = s.chars().filter(|&c| c != '$').collect();
                text.push_str(&s);
                expected.push_str(&s);
            }
            Piece::Var(n) if !names.is_empty() => {
                let name = names[usize::from(*n) % names.len()];
                text.push_str(&format!("${{{name}}}"));
                expected.push_str(&vars[name]);
            }
            Piece::Var(_) => {}
        }
    }
    match envsubst_map_with(&text, &vars, true, &mut budget()) {
        Ok(got) => assert_eq!(got, expected, "text {text:?} vars {vars:?}"),
        Err(e) => panic!("simple text {text:?} failed: {e}"),
    }
}

/// `^[_[:alpha:]][_[:alpha:][:digit:]]*$`, the names the reference uses.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}
