//! Input sets (Flux Operator's `getInputs` and its two strategies), pure.
//!
//! Providers come in a fixed order: the ResourceSet itself (its inline `spec.inputs`) first, then
//! the ResourceSetInputProviders sorted by kind, namespace and name (the order of `inputsFrom`
//! does not matter). Every set gets a `provider` key naming where it came from.
//! - Flatten (the default): all sets, in provider order.
//! - Permute: the cartesian product of the providers' sets (the last provider varies fastest),
//!   each set wrapped under its provider's normalized name, with an `id` made from the indices.

use serde_json::{Map, Value};

use rflux_common::api::resourceset::InputStrategy;

/// The largest number of permutations (Flux Operator's limit).
pub const MAX_PERMUTATIONS: usize = 10_000;

/// Where input sets come from.
#[derive(Debug, Clone, PartialEq)]
pub struct Provider {
    /// `ResourceSet` or `ResourceSetInputProvider`.
    pub kind: String,
    pub name: String,
    pub namespace: String,
    /// The provider's sets: the ResourceSet's `spec.inputs`, an RSIP's `status.exportedInputs`.
    pub sets: Vec<Map<String, Value>>,
}

/// Why no input sets could be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InputsError {
    #[error("failed to normalize provider name '{0}': the result is empty")]
    EmptyName(String),
    #[error(
        "adding provider '{name}' with {inputs} inputs would exceed the maximum allowed permutations. max: {MAX_PERMUTATIONS}, got: {got}"
    )]
    TooManyPermutations {
        name: String,
        inputs: usize,
        got: usize,
    },
}

/// Adler-32 of `data`, in decimal: how Flux Operator makes every `id`.
pub fn adler32_id(data: &str) -> String {
    crate::id::input_id(data)
}

/// A provider name as a template key: lowercase; whitespace and punctuation become `_`;
/// anything else outside `[a-z0-9_]` is dropped; runs of `_` collapse and ends are trimmed.
pub fn normalize_name(name: &str) -> Result<String, InputsError> {
    let mut mapped = String::with_capacity(name.len());
    for c in name.chars().flat_map(char::to_lowercase) {
        if c.is_whitespace() || c.is_ascii_punctuation() || is_unicode_punctuation(c) {
            mapped.push('_');
        } else if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
            mapped.push(c);
        }
    }
    let parts: Vec<&str> = mapped.split('_').filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        return Err(InputsError::EmptyName(name.to_string()));
    }
    Ok(parts.join("_"))
}

/// Unicode punctuation outside ASCII (general categories P*), for the common blocks.
fn is_unicode_punctuation(c: char) -> bool {
    matches!(c,
        '\u{00A1}' | '\u{00A7}' | '\u{00AB}' | '\u{00B6}' | '\u{00B7}' | '\u{00BB}' | '\u{00BF}'
        | '\u{2010}'..='\u{2027}' | '\u{2030}'..='\u{205E}' | '\u{3001}'..='\u{3003}'
        | '\u{3008}'..='\u{3011}' | '\u{FF01}'..='\u{FF0F}')
}

/// The `provider` value added to every set of `p`.
fn provider_ref(p: &Provider) -> Value {
    let mut m = Map::new();
    m.insert(
        "apiVersion".into(),
        Value::String("fluxcd.controlplane.io/v1".into()),
    );
    m.insert("kind".into(), Value::String(p.kind.clone()));
    m.insert("name".into(), Value::String(p.name.clone()));
    m.insert("namespace".into(), Value::String(p.namespace.clone()));
    Value::Object(m)
}

/// Sorts the providers as Flux Operator does (the ResourceSet first, then by kind, namespace,
/// name) and drops duplicates.
pub fn order_providers(mut providers: Vec<Provider>) -> Vec<Provider> {
    let rank = |p: &Provider| usize::from(p.kind != "ResourceSet");
    providers.sort_by(|a, b| {
        (rank(a), &a.kind, &a.namespace, &a.name).cmp(&(rank(b), &b.kind, &b.namespace, &b.name))
    });
    providers.dedup_by(|a, b| a.kind == b.kind && a.namespace == b.namespace && a.name == b.name);
    providers
}

/// The input sets the templates are rendered with. `providers` in any order.
pub fn combine(
    providers: Vec<Provider>,
    strategy: InputStrategy,
    include_empty_providers: bool,
) -> Result<Vec<Map<String, Value>>, InputsError> {
    let providers: Vec<Provider> = order_providers(providers)
        .into_iter()
        .map(|mut p| {
            let r = provider_ref(&p);
            for set in &mut p.sets {
                set.insert("provider".into(), r.clone());
            }
            p
        })
        .collect();
    match strategy {
        InputStrategy::Flatten => Ok(providers.into_iter().flat_map(|p| p.sets).collect()),
        InputStrategy::Permute => permute(providers, include_empty_providers),
    }
}

fn permute(
    providers: Vec<Provider>,
    include_empty: bool,
) -> Result<Vec<Map<String, Value>>, InputsError> {
    // (normalized name, wrapped sets)
    let mut columns: Vec<(String, Vec<Map<String, Value>>)> = Vec::new();
    let mut total: usize = 1;
    for p in providers {
        // The ResourceSet is a provider only when it has inline inputs.
        if p.sets.is_empty() {
            if include_empty {
                return Ok(Vec::new());
            }
            continue;
        }
        let name = normalize_name(&p.name)?;
        let got = total.saturating_mul(p.sets.len());
        if got > MAX_PERMUTATIONS {
            return Err(InputsError::TooManyPermutations {
                name: p.name,
                inputs: p.sets.len(),
                got,
            });
        }
        total = got;
        columns.push((name, p.sets));
    }
    if columns.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(total);
    let mut idx = vec![0usize; columns.len()];
    loop {
        let mut set = Map::new();
        let mut key = Vec::with_capacity(columns.len());
        for (c, (name, sets)) in columns.iter().enumerate() {
            set.insert(name.clone(), Value::Object(sets[idx[c]].clone()));
            key.push(format!("{name}={}", idx[c]));
        }
        set.insert("id".into(), Value::String(adler32_id(&key.join("/"))));
        out.push(set);
        // Odometer: the last column varies fastest.
        let mut c = columns.len();
        loop {
            if c == 0 {
                return Ok(out);
            }
            c -= 1;
            idx[c] += 1;
            if idx[c] < columns[c].1.len() {
                break;
            }
            idx[c] = 0;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn p(kind: &str, name: &str, sets: Vec<Value>) -> Provider {
        Provider {
            kind: kind.into(),
            name: name.into(),
            namespace: "default".into(),
            sets: sets.into_iter().map(set).collect(),
        }
    }

    #[test]
    fn ids_are_adler32_in_decimal() {
        // The values Flux Operator's docs give.
        assert_eq!(adler32_id("foo"), "42074437");
        assert_eq!(adler32_id("6.0.4"), "48955639");
        assert_eq!(adler32_id(""), "1");
        // The spec's E8: my_rset=0/git_tag=0/oci_tag=0.
        assert_eq!(adler32_id("my_rset=0/git_tag=0/oci_tag=0"), "2714045022");
        assert_eq!(adler32_id("my_rset=1/git_tag=0/oci_tag=0"), "2715421279");
        // The CLI's Static ids in E7 are Adler-32 of the provider names.
        assert_eq!(adler32_id("app1-tenant1"), "478151771");
        assert_eq!(adler32_id("app1-tenant2"), "478217308");
        // Long inputs cross the modulo reduction.
        let long = "x".repeat(20_000);
        let (mut a, mut b) = (1u64, 0u64);
        for byte in long.bytes() {
            a = (a + u64::from(byte)) % 65_521;
            b = (b + a) % 65_521;
        }
        assert_eq!(adler32_id(&long), ((b << 16) | a).to_string());
    }

    #[test]
    fn names_are_normalized() {
        assert_eq!(normalize_name("my-rset").unwrap(), "my_rset");
        assert_eq!(normalize_name("team1-apps").unwrap(), "team1_apps");
        assert_eq!(normalize_name("A.b--c d").unwrap(), "a_b_c_d");
        assert_eq!(normalize_name("-x-").unwrap(), "x");
        assert_eq!(normalize_name("ünï").unwrap(), "n");
        assert!(normalize_name("--").is_err());
    }

    #[test]
    fn flatten_orders_providers_and_marks_the_provider() {
        let out = combine(
            vec![
                p("ResourceSetInputProvider", "b", vec![json!({"x": 3})]),
                p("ResourceSetInputProvider", "a", vec![json!({"x": 2})]),
                p(
                    "ResourceSet",
                    "rs",
                    vec![json!({"x": 1, "provider": "mine"})],
                ),
            ],
            InputStrategy::Flatten,
            false,
        )
        .unwrap();
        let xs: Vec<i64> = out.iter().map(|s| s["x"].as_i64().unwrap()).collect();
        assert_eq!(xs, [1, 2, 3]);
        assert_eq!(
            out[0]["provider"],
            json!({"apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet",
                   "name": "rs", "namespace": "default"})
        );
        assert_eq!(out[2]["provider"]["name"], "b");
    }

    #[test]
    fn permute_is_a_product_with_ids() {
        let out = combine(
            vec![
                p(
                    "ResourceSetInputProvider",
                    "oci-tag",
                    vec![json!({"digest": "d"})],
                ),
                p(
                    "ResourceSetInputProvider",
                    "git-tag",
                    vec![json!({"sha": "s"})],
                ),
                p(
                    "ResourceSet",
                    "my-rset",
                    vec![
                        json!({"id": "id1", "someField": "foo"}),
                        json!({"id": "id2", "someField": "bar"}),
                    ],
                ),
            ],
            InputStrategy::Permute,
            false,
        )
        .unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["id"], "2714045022");
        assert_eq!(out[1]["id"], "2715421279");
        assert_eq!(out[0]["my_rset"]["someField"], "foo");
        assert_eq!(out[1]["my_rset"]["id"], "id2");
        assert_eq!(out[0]["git_tag"]["sha"], "s");
        assert_eq!(out[0]["oci_tag"]["provider"]["name"], "oci-tag");
    }

    #[test]
    fn permute_varies_the_last_provider_fastest() {
        let out = combine(
            vec![
                p(
                    "ResourceSetInputProvider",
                    "a",
                    vec![json!({"v": 1}), json!({"v": 2})],
                ),
                p(
                    "ResourceSetInputProvider",
                    "b",
                    vec![json!({"v": 3}), json!({"v": 4})],
                ),
            ],
            InputStrategy::Permute,
            false,
        )
        .unwrap();
        let pairs: Vec<(i64, i64)> = out
            .iter()
            .map(|s| (s["a"]["v"].as_i64().unwrap(), s["b"]["v"].as_i64().unwrap()))
            .collect();
        assert_eq!(pairs, [(1, 3), (1, 4), (2, 3), (2, 4)]);
        assert_eq!(out[3]["id"], adler32_id("a=1/b=1"));
    }

    #[test]
    fn empty_providers_are_skipped_unless_included() {
        let provs = || {
            vec![
                p("ResourceSet", "rs", vec![]),
                p("ResourceSetInputProvider", "a", vec![json!({"v": 1})]),
            ]
        };
        assert_eq!(
            combine(provs(), InputStrategy::Permute, false)
                .unwrap()
                .len(),
            1
        );
        assert!(
            combine(provs(), InputStrategy::Permute, true)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn permutations_are_bounded() {
        let many: Vec<Value> = (0..101).map(|i| json!({"i": i})).collect();
        let err = combine(
            vec![
                p("ResourceSetInputProvider", "a", many.clone()),
                p("ResourceSetInputProvider", "b", many),
            ],
            InputStrategy::Permute,
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "adding provider 'b' with 101 inputs would exceed the maximum allowed permutations. max: 10000, got: 10201"
        );
    }
}
