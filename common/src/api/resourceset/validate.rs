//! The spec rules the ResourceSet controller checks itself before it builds, although the
//! CRD's CEL rules already enforce them on admission: an object stored under an older CRD (or
//! built offline) may break them.
//!
//! Emptiness follows the controller, not CEL: an empty `steps` list counts as no steps and an
//! empty step (no templates, or an empty list and an empty string) is refused. The one rule
//! the controller does not repeat ("at least one of steps, resources or resourcesTemplate") is
//! checked on presence, like the CEL rule, so `resources: []` stays valid (it prunes
//! everything).

use std::collections::BTreeSet;

use super::{InputProviderReference, ResourceSetSpec, ResourceSetStep};

/// A broken spec rule, with the message the controller reports (after `build failed: `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// `steps` is set together with `resources` or `resourcesTemplate`.
    #[error("spec.steps is mutually exclusive with spec.resources and spec.resourcesTemplate")]
    StepsWithResources,
    /// A step has neither `resources` nor `resourcesTemplate`.
    #[error("step {name:?}: at least one of resources or resourcesTemplate must be set")]
    EmptyStep {
        /// Name of the step.
        name: String,
    },
    /// None of `steps`, `resources` and `resourcesTemplate` is set.
    #[error("at least one of steps, resources or resourcesTemplate must be set")]
    NothingToBuild,
    /// Two steps share a name.
    #[error("step names must be unique: step {name:?} is defined more than once")]
    DuplicateStep {
        /// The repeated name.
        name: String,
    },
    /// A dependency has `readyExpr` without `ready`.
    #[error("dependency {dependency}: ready must be set when readyExpr is set")]
    ReadyExprWithoutReady {
        /// `apiVersion/Kind/namespace/name` of the dependency.
        dependency: String,
    },
    /// An `inputsFrom` entry has neither `name` nor `selector`.
    #[error("input provider reference must have either name or selector set")]
    ProviderRefEmpty,
    /// An `inputsFrom` entry has both `name` and `selector`.
    #[error("cannot set both name and selector for input provider references (name {name:?})")]
    ProviderRefAmbiguous {
        /// The name of the entry.
        name: String,
    },
}

fn step_is_empty(step: &ResourceSetStep) -> bool {
    step.resources.as_ref().is_none_or(Vec::is_empty)
        && step
            .resources_template
            .as_ref()
            .is_none_or(String::is_empty)
}

impl ResourceSetSpec {
    /// Re-checks the rules on what to build (steps against resources and templates, step
    /// contents and names) and on `dependsOn`; the first broken rule is returned.
    pub fn validate(&self) -> Result<(), SpecError> {
        let has_resources = self.resources.as_ref().is_some_and(|r| !r.is_empty())
            || self
                .resources_template
                .as_ref()
                .is_some_and(|t| !t.is_empty());
        if self.has_steps() && has_resources {
            return Err(SpecError::StepsWithResources);
        }
        if let Some(step) = self.steps().iter().find(|s| step_is_empty(s)) {
            return Err(SpecError::EmptyStep {
                name: step.name.clone(),
            });
        }
        if self.steps.is_none() && self.resources.is_none() && self.resources_template.is_none() {
            return Err(SpecError::NothingToBuild);
        }
        let mut seen = BTreeSet::new();
        if let Some(step) = self.steps().iter().find(|s| !seen.insert(s.name.as_str())) {
            return Err(SpecError::DuplicateStep {
                name: step.name.clone(),
            });
        }
        if let Some(dep) = self
            .depends_on()
            .iter()
            .find(|d| d.ready_expr.is_some() && d.ready.is_none())
        {
            return Err(SpecError::ReadyExprWithoutReady {
                dependency: dep.display_ref(),
            });
        }
        Ok(())
    }

    /// Checks each `inputsFrom` entry names exactly one of `name` and `selector`; the
    /// controller reports a failure as `failed to compute inputs: …`.
    pub fn validate_inputs_from(&self) -> Result<(), SpecError> {
        self.inputs_from()
            .iter()
            .try_for_each(InputProviderReference::validate)
    }
}

impl InputProviderReference {
    /// Exactly one of `name` (non-empty) and `selector` must be set.
    pub fn validate(&self) -> Result<(), SpecError> {
        match (self.name.as_deref(), &self.selector) {
            (Some(name), Some(_)) => Err(SpecError::ProviderRefAmbiguous {
                name: name.to_string(),
            }),
            (Some(name), None) if !name.is_empty() => Ok(()),
            (_, Some(_)) => Ok(()),
            _ => Err(SpecError::ProviderRefEmpty),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> ResourceSetSpec {
        serde_json::from_value(v).unwrap()
    }

    fn cm() -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "y"}})
    }

    #[test]
    fn valid_specs_pass() {
        for v in [
            json!({"resources": [cm()]}),
            json!({"resourcesTemplate": "---\n"}),
            json!({"resources": [cm()], "resourcesTemplate": "---\n"}),
            json!({"resources": []}),
            json!({"steps": [{"name": "a", "resources": [cm()]}, {"name": "b", "resourcesTemplate": "x"}]}),
            json!({"resources": [cm()], "dependsOn": [{"apiVersion": "v1", "kind": "Namespace", "name": "n", "ready": false, "readyExpr": "true"}]}),
        ] {
            assert_eq!(spec(v.clone()).validate(), Ok(()), "{v}");
        }
    }

    #[test]
    fn steps_exclude_resources_and_templates() {
        for extra in [
            json!({"resources": [cm()]}),
            json!({"resourcesTemplate": "t"}),
        ] {
            let mut v = json!({"steps": [{"name": "a", "resources": [cm()]}]});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let err = spec(v).validate().unwrap_err();
            assert_eq!(err, SpecError::StepsWithResources);
            assert_eq!(
                err.to_string(),
                "spec.steps is mutually exclusive with spec.resources and spec.resourcesTemplate"
            );
        }
    }

    #[test]
    fn something_must_be_built() {
        let err = spec(json!({"inputs": [{"a": 1}]})).validate().unwrap_err();
        assert_eq!(err, SpecError::NothingToBuild);
        assert_eq!(
            err.to_string(),
            "at least one of steps, resources or resourcesTemplate must be set"
        );
    }

    #[test]
    fn each_step_needs_templates() {
        for step in [
            json!({"name": "empty"}),
            json!({"name": "empty", "resources": []}),
            json!({"name": "empty", "resourcesTemplate": ""}),
        ] {
            let v = json!({"steps": [{"name": "ok", "resources": [cm()]}, step]});
            let err = spec(v).validate().unwrap_err();
            assert_eq!(
                err.to_string(),
                "step \"empty\": at least one of resources or resourcesTemplate must be set"
            );
        }
    }

    #[test]
    fn step_names_are_unique() {
        let v = json!({"steps": [
            {"name": "a", "resources": [cm()]},
            {"name": "b", "resources": [cm()]},
            {"name": "a", "resourcesTemplate": "t"}
        ]});
        assert_eq!(
            spec(v).validate(),
            Err(SpecError::DuplicateStep { name: "a".into() })
        );
    }

    #[test]
    fn ready_expr_needs_ready() {
        let v = json!({"resources": [cm()], "dependsOn": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "gate", "namespace": "ns", "readyExpr": "data.x == 'y'"}
        ]});
        let err = spec(v).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "dependency v1/ConfigMap/ns/gate: ready must be set when readyExpr is set"
        );
    }

    #[test]
    fn provider_refs_need_exactly_one_of_name_and_selector() {
        let ok = spec(json!({"resources": [], "inputsFrom": [
            {"name": "a"}, {"selector": {"matchLabels": {"x": "y"}}}, {"selector": {}}
        ]}));
        assert_eq!(ok.validate_inputs_from(), Ok(()));
        let empty = spec(
            json!({"resources": [], "inputsFrom": [{"name": "a"}, {"kind": "ResourceSetInputProvider"}]}),
        );
        assert_eq!(
            empty.validate_inputs_from(),
            Err(SpecError::ProviderRefEmpty)
        );
        let blank = spec(json!({"resources": [], "inputsFrom": [{"name": ""}]}));
        assert_eq!(
            blank.validate_inputs_from(),
            Err(SpecError::ProviderRefEmpty)
        );
        let both = spec(json!({"resources": [], "inputsFrom": [{"name": "a", "selector": {}}]}));
        assert_eq!(
            both.validate_inputs_from(),
            Err(SpecError::ProviderRefAmbiguous { name: "a".into() })
        );
    }
}
