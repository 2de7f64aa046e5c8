//! A ResourceSet built without a cluster, as Flux Operator's CLI does it
//! (`flux-operator build resourceset -f rset.yaml --inputs-from-provider rsip.yaml`): Static
//! providers export their `defaultValues` with `id` = Adler-32 of the provider's name (in a
//! cluster: of its uid), and the owner labels are set after `commonMetadata`.

use kube::ResourceExt;
use rflux_common::api::resourceset::{OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL, ResourceSet};
use rflux_common::api::resourcesetinputprovider::ResourceSetInputProvider;
use serde_json::{Map, Value};

use crate::build::{self, StepObjects};
use crate::inputs::{self, Provider, adler32_id};
use crate::resourceset::prepare;

/// Why an offline build failed.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error("failed to compute inputs: {0}")]
    Inputs(String),
    #[error("{0}")]
    Build(#[from] build::BuildError),
}

/// Builds `rs` with `providers` (Static ones; the ones `inputsFrom` selects are used).
pub fn build_offline(
    rs: &ResourceSet,
    providers: &[ResourceSetInputProvider],
) -> Result<Vec<StepObjects>, OfflineError> {
    let ns = rs.namespace().unwrap_or_default();
    let mut all = vec![Provider {
        kind: "ResourceSet".into(),
        name: rs.name_any(),
        namespace: ns.clone(),
        sets: rs.spec.inputs().to_vec(),
    }];
    for from in rs.spec.inputs_from() {
        for p in providers {
            let p_ns = p.namespace().unwrap_or_else(|| ns.clone());
            if p_ns != ns {
                continue;
            }
            let picked = match (&from.name, &from.selector) {
                (Some(n), None) => &p.name_any() == n,
                (None, Some(sel)) => selects(sel, p.labels()),
                _ => {
                    return Err(OfflineError::Inputs(
                        "an inputsFrom entry needs exactly one of name and selector".into(),
                    ));
                }
            };
            if picked {
                let mut set: Map<String, Value> = p.spec.default_values();
                set.insert("id".into(), Value::String(adler32_id(&p.name_any())));
                all.push(Provider {
                    kind: "ResourceSetInputProvider".into(),
                    name: p.name_any(),
                    namespace: p_ns,
                    sets: vec![set],
                });
            }
        }
    }
    let has_providers = !rs.spec.inputs_from().is_empty();
    let sets = inputs::combine(
        all,
        rs.spec.input_strategy(),
        rs.spec.include_empty_providers(),
    )
    .map_err(|e| OfflineError::Inputs(e.to_string()))?;
    let sets = (!sets.is_empty() || has_providers).then_some(sets);
    let mut steps = build::build(&rs.spec, sets.as_deref(), &rflux_gotmpl::Options::default())?;
    let labels = rs.spec.common_labels();
    let annotations = rs.spec.common_annotations();
    for s in &mut steps {
        for o in &mut s.objects {
            prepare::prepare(o, ("", ""), &labels, &annotations);
            if let Some(l) = o
                .pointer_mut("/metadata/labels")
                .and_then(Value::as_object_mut)
            {
                l.insert(OWNER_NAME_LABEL.into(), Value::String(rs.name_any()));
                l.insert(OWNER_NAMESPACE_LABEL.into(), Value::String(ns.clone()));
            }
        }
    }
    Ok(steps)
}

/// Whether a label selector picks `labels`.
pub fn selects(
    sel: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    let ok_labels = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let ok_exprs = sel.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        let got = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => got.is_some_and(|v| values.contains(v)),
            "NotIn" => got.is_none_or(|v| !values.contains(v)),
            "Exists" => got.is_some(),
            "DoesNotExist" => got.is_none(),
            _ => false,
        }
    });
    ok_labels && ok_exprs
}
