//! Schema pieces of the `fluxcd.controlplane.io` kinds that the derive cannot express:
//! free-form JSON kept by the API server (`x-kubernetes-preserve-unknown-fields`), label
//! selectors with Kubernetes' atomic list and map markers, and integers without a format.

use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

/// An object whose values are arbitrary JSON (`inputs[]`, `defaultValues`, `exportedInputs[]`).
pub fn free_form_map() -> Value {
    json!({
        "type": "object",
        "additionalProperties": { "x-kubernetes-preserve-unknown-fields": true }
    })
}

/// A list of input sets (`spec.inputs`, `status.exportedInputs`).
pub fn input_sets_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Input sets: objects whose values are arbitrary JSON.",
        "type": "array",
        "items": free_form_map()
    })
}

/// A map of arbitrary JSON values (`spec.defaultValues`).
pub fn free_form_map_schema(_: &mut SchemaGenerator) -> Schema {
    let mut map = free_form_map();
    if let Some(m) = map.as_object_mut() {
        m.insert(
            "description".into(),
            json!("Values of arbitrary JSON, by key."),
        );
    }
    Schema::try_from(map).unwrap_or_default()
}

/// A list of object templates kept as they are (`resources`).
pub fn resource_templates_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Object templates, kept as written.",
        "type": "array",
        "items": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true
        }
    })
}

/// The properties of a `metav1.LabelSelector`, with the API machinery's list markers.
pub fn label_selector_properties() -> Value {
    json!({
        "matchExpressions": {
            "description": "Label selector requirements, ANDed.",
            "type": "array",
            "items": {
                "description": "A key, an operator and values.",
                "type": "object",
                "properties": {
                    "key": { "description": "The label key.", "type": "string" },
                    "operator": {
                        "description": "In, NotIn, Exists or DoesNotExist.",
                        "type": "string"
                    },
                    "values": {
                        "description": "Values for In and NotIn; empty for Exists and DoesNotExist.",
                        "type": "array",
                        "items": { "type": "string" },
                        "x-kubernetes-list-type": "atomic"
                    }
                },
                "required": ["key", "operator"]
            },
            "x-kubernetes-list-type": "atomic"
        },
        "matchLabels": {
            "description": "Labels that must all be present with these values.",
            "type": "object",
            "additionalProperties": { "type": "string" }
        }
    })
}

/// A `metav1.LabelSelector` (atomic map).
pub fn label_selector_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "A label query; an empty selector matches everything.",
        "type": "object",
        "properties": label_selector_properties(),
        "x-kubernetes-map-type": "atomic"
    })
}

/// The `matchExpressions` list of a selector.
pub fn label_selector_requirements_schema(_: &mut SchemaGenerator) -> Schema {
    Schema::try_from(label_selector_properties()["matchExpressions"].clone()).unwrap_or_default()
}

/// `filter.limit` of a ResourceSetInputProvider: a Go `int` (no format), default 100, at
/// most 10000.
pub fn filter_limit_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Most results exported.",
        "type": "integer",
        "default": 100,
        "maximum": 10000
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_objects() {
        let mut generator = SchemaGenerator::default();
        let selector = label_selector_schema(&mut generator);
        assert_eq!(
            selector.get("x-kubernetes-map-type"),
            Some(&json!("atomic"))
        );
        let reqs = label_selector_requirements_schema(&mut generator);
        assert_eq!(reqs.get("x-kubernetes-list-type"), Some(&json!("atomic")));
        let map = free_form_map_schema(&mut generator);
        assert_eq!(
            map.get("additionalProperties"),
            Some(&json!({"x-kubernetes-preserve-unknown-fields": true}))
        );
    }
}
