//! `yaml`: the YAML reader and printer of rflux-kustomize.
//!
//! Property: parsing never panics; a stream that parses prints (`to_yaml_stream`) to text
//! that parses back to the same values. Numbers compare by value: a float with an integral
//! value below 1e21 prints without a decimal point (as Go's encoding/json prints it) and reads
//! back as an integer, as it does with kustomize.

use rflux_kustomize::yaml::{Limits, parse_stream_tracked, parse_stream_with, to_yaml_stream};
use serde_json::Value;

/// Limits small enough that a libFuzzer run stays fast, large enough for real documents.
fn limits() -> Limits {
    Limits {
        max_bytes: 1 << 20,
        max_nodes: 100_000,
        max_depth: 64,
        expansion_allowance: 1 << 20,
        expansion_factor: 16,
        yaml11: false,
    }
}

pub fn yaml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The tracked parser (what kustomization inputs go through) must not panic either.
    let _ = parse_stream_tracked(text, "fuzz");
    let Ok(docs) = parse_stream_with(text, "fuzz", limits()) else {
        return;
    };
    let printed = to_yaml_stream(&docs);
    // The printed text may be larger than the input (aliases expanded), so it gets room for
    // that expansion; within that, it must parse back to the same values.
    let back_limits = Limits {
        max_bytes: usize::MAX,
        max_nodes: usize::MAX,
        expansion_allowance: printed.len().saturating_mul(4) + (1 << 20),
        ..limits()
    };
    let back = match parse_stream_with(&printed, "printed", back_limits) {
        Ok(b) => b,
        Err(e) => {
            panic!("printed YAML does not parse: {e}\n--- input\n{text}\n--- printed\n{printed}")
        }
    };
    assert!(
        back.len() == docs.len() && back.iter().zip(&docs).all(|(a, b)| same(a, b)),
        "round trip changed the values\n--- input\n{text}\n--- printed\n{printed}\n--- parsed\n{docs:?}\n--- reparsed\n{back:?}"
    );
}

/// Equal values, numbers compared by value when either is a float.
pub(crate) fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            x.as_f64() == y.as_f64()
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}
