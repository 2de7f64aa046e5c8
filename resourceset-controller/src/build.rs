//! Rendering a ResourceSet's templates into objects (Flux Operator's builder), pure.
//!
//! - Each `resources[]` item is turned into YAML text (keys sorted, as sigs.k8s.io/yaml does),
//!   which is the template; each render must give one object.
//! - `resourcesTemplate` is a multi-document template; documents without `apiVersion`, `kind`
//!   or `metadata.name` are dropped, `List`s are expanded, kustomize `Kustomization`s dropped.
//! - With input sets, `resources[]` are rendered template by template, input by input, then the
//!   template input by input; an object annotated `fluxcd.controlplane.io/reconcile: disabled`
//!   is left out, and the first object of a (group, kind, namespace, name) wins. Without input
//!   sets each template is rendered once with no inputs, and `resources[]` are neither filtered
//!   nor de-duplicated (Flux Operator's behaviour).
//! - Steps are built one by one; an object in two steps is an error.
//!
//! Bounds: the template engine's own (output bytes, steps, depth), plus a cap on the objects
//! and on the bytes rendered by the whole build.

use rflux_common::api::resourceset::{ResourceSetSpec, ResourceSetStep};
use rflux_gotmpl::{Options, Template};
use serde_json::{Map, Value};

/// Most objects one build may produce.
pub const MAX_OBJECTS: usize = 50_000;
/// Most bytes all renders of one build may produce.
pub const MAX_RENDERED_BYTES: usize = 64 << 20;

const TEMPLATE_NAME: &str = "resourceset";
const RECONCILE_ANNOTATION: &str = "fluxcd.controlplane.io/reconcile";

/// The objects of one step (a steps-less ResourceSet is one anonymous step).
#[derive(Debug, Clone, PartialEq)]
pub struct StepObjects {
    /// Empty for the anonymous step.
    pub name: String,
    /// The step's `timeout`, as written.
    pub timeout: Option<String>,
    pub objects: Vec<Value>,
}

/// Why the templates gave no objects; the text is Flux Operator's.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BuildError {
    #[error("spec.steps is mutually exclusive with spec.resources and spec.resourcesTemplate")]
    StepsExclusive,
    #[error("step {0:?}: at least one of resources or resourcesTemplate must be set")]
    EmptyStep(String),
    #[error("step {step:?}: {source}")]
    InStep {
        step: String,
        #[source]
        source: Box<BuildError>,
    },
    #[error("duplicate resource {object} in step {step:?}, already defined in step {previous:?}")]
    DuplicateInSteps {
        object: String,
        step: String,
        previous: String,
    },
    #[error("failed to build resource: {0}")]
    Resource(String),
    #[error("failed to build resources[{index}]: {message}")]
    ResourceAt { index: usize, message: String },
    #[error("failed to build resources: {0}")]
    Resources(String),
    #[error("the build exceeds the limit of {0}")]
    Limit(String),
}

/// Builds every step of `spec` with `inputs` (the combined input sets). `None` inputs: the
/// templates are rendered once with no inputs (a ResourceSet without `inputsFrom` and without
/// inline inputs).
pub fn build(
    spec: &ResourceSetSpec,
    inputs: Option<&[Map<String, Value>]>,
    opts: &Options,
) -> Result<Vec<StepObjects>, BuildError> {
    validate(spec)?;
    let mut budget = Budget::default();
    let steps = spec.steps.as_deref().unwrap_or_default();
    if steps.is_empty() {
        let objects = build_set(
            spec.resources.as_deref().unwrap_or_default(),
            spec.resources_template.as_deref().unwrap_or_default(),
            inputs,
            opts,
            &mut budget,
        )?;
        return Ok(vec![StepObjects {
            name: String::new(),
            timeout: None,
            objects,
        }]);
    }
    let mut out: Vec<StepObjects> = Vec::with_capacity(steps.len());
    let mut step_of: std::collections::HashMap<String, String> = Default::default();
    for step in steps {
        let objects =
            build_step(step, inputs, opts, &mut budget).map_err(|e| BuildError::InStep {
                step: step.name.clone(),
                source: Box::new(e),
            })?;
        for o in &objects {
            let key = object_key(o);
            match step_of.get(&key) {
                Some(prev) if prev == &step.name => {}
                Some(prev) => {
                    return Err(BuildError::DuplicateInSteps {
                        object: subject(o),
                        step: step.name.clone(),
                        previous: prev.clone(),
                    });
                }
                None => {
                    step_of.insert(key, step.name.clone());
                }
            }
        }
        out.push(StepObjects {
            name: step.name.clone(),
            timeout: step.timeout.clone(),
            objects,
        });
    }
    Ok(out)
}

/// Flux Operator's spec checks (the CRD's CEL rules, repeated for clusters without them).
pub fn validate(spec: &ResourceSetSpec) -> Result<(), BuildError> {
    let steps = spec.steps.as_deref().unwrap_or_default();
    let has_resources = spec.resources.as_ref().is_some_and(|r| !r.is_empty())
        || spec
            .resources_template
            .as_ref()
            .is_some_and(|t| !t.is_empty());
    if !steps.is_empty() && has_resources {
        return Err(BuildError::StepsExclusive);
    }
    for s in steps {
        if s.resources.as_ref().is_none_or(Vec::is_empty)
            && s.resources_template.as_ref().is_none_or(String::is_empty)
        {
            return Err(BuildError::EmptyStep(s.name.clone()));
        }
    }
    Ok(())
}

fn build_step(
    step: &ResourceSetStep,
    inputs: Option<&[Map<String, Value>]>,
    opts: &Options,
    budget: &mut Budget,
) -> Result<Vec<Value>, BuildError> {
    build_set(
        step.resources.as_deref().unwrap_or_default(),
        step.resources_template.as_deref().unwrap_or_default(),
        inputs,
        opts,
        budget,
    )
}

#[derive(Default)]
struct Budget {
    objects: usize,
    bytes: usize,
}

impl Budget {
    fn add(&mut self, rendered: &str, objects: usize) -> Result<(), BuildError> {
        self.bytes = self.bytes.saturating_add(rendered.len());
        self.objects = self.objects.saturating_add(objects);
        if self.bytes > MAX_RENDERED_BYTES {
            return Err(BuildError::Limit(format!(
                "{MAX_RENDERED_BYTES} rendered bytes"
            )));
        }
        if self.objects > MAX_OBJECTS {
            return Err(BuildError::Limit(format!("{MAX_OBJECTS} objects")));
        }
        Ok(())
    }
}

/// One set of templates (a step, or the whole spec).
fn build_set(
    resources: &[Map<String, Value>],
    resources_template: &str,
    inputs: Option<&[Map<String, Value>]>,
    opts: &Options,
    budget: &mut Budget,
) -> Result<Vec<Value>, BuildError> {
    let mut objects: Vec<Value> = Vec::new();
    let mut keys = std::collections::HashSet::new();
    let sets: Vec<Option<Value>> = match inputs {
        Some(s) if !s.is_empty() => s.iter().map(|m| Some(Value::Object(m.clone()))).collect(),
        _ => vec![None],
    };
    let with_inputs = sets.first().is_some_and(Option::is_some);
    for (i, item) in resources.iter().enumerate() {
        let text = rflux_gotmpl::json_to_yaml(&Value::Object(item.clone())).map_err(|e| {
            BuildError::Resource(format!("failed to convert template to YAML: {e}"))
        })?;
        let at = |message: String| {
            if with_inputs {
                BuildError::ResourceAt { index: i, message }
            } else {
                BuildError::Resource(message)
            }
        };
        let tpl = rflux_gotmpl::parse(TEMPLATE_NAME, &text, opts)
            .map_err(|e| at(format!("failed to parse template: {e}")))?;
        for set in &sets {
            let rendered = render(&tpl, set.as_ref())
                .map_err(|e| at(format!("failed to execute template: {e}")))?;
            budget.add(&rendered, 1)?;
            let object =
                read_object(&rendered).map_err(|e| at(format!("failed to read object: {e}")))?;
            if with_inputs && (disabled(&object) || !keys.insert(object_key(&object))) {
                continue;
            }
            if !with_inputs {
                keys.insert(object_key(&object));
            }
            objects.push(object);
        }
    }
    if !resources_template.is_empty() {
        let wrap = |message: String| {
            if with_inputs {
                BuildError::Resources(message)
            } else {
                BuildError::Resource(message)
            }
        };
        let tpl = rflux_gotmpl::parse(TEMPLATE_NAME, resources_template, opts)
            .map_err(|e| wrap(format!("failed to parse multi-doc YAML template: {e}")))?;
        let mut from_template = Vec::new();
        for set in &sets {
            let rendered = render(&tpl, set.as_ref())
                .map_err(|e| wrap(format!("failed to execute multi-doc YAML template: {e}")))?;
            let objs = read_objects(&rendered)
                .map_err(|e| wrap(format!("failed to read objects from multi-doc YAML: {e}")))?;
            budget.add(&rendered, objs.len())?;
            from_template.extend(objs);
        }
        for object in from_template {
            if disabled(&object) || !keys.insert(object_key(&object)) {
                continue;
            }
            objects.push(object);
        }
    }
    Ok(objects)
}

fn render(tpl: &Template, inputs: Option<&Value>) -> Result<String, rflux_gotmpl::TemplateError> {
    tpl.render(inputs)
}

/// Whether a rendered object is excluded (`fluxcd.controlplane.io/reconcile: disabled`).
fn disabled(o: &Value) -> bool {
    o.pointer("/metadata/annotations")
        .and_then(|a| a.get(RECONCILE_ANNOTATION))
        .and_then(Value::as_str)
        == Some("disabled")
}

/// (group, kind, namespace, name): the version is not part of an object's identity.
pub fn object_key(o: &Value) -> String {
    let api_version = o.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let text = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or("");
    format!(
        "{group}/{}/{}/{}",
        text("/kind"),
        text("/metadata/namespace"),
        text("/metadata/name")
    )
}

/// `Kind/namespace/name` (`Kind/name` when cluster-scoped), as Flux prints objects.
pub fn subject(o: &Value) -> String {
    let text = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or("");
    let ns = text("/metadata/namespace");
    if ns.is_empty() {
        format!("{}/{}", text("/kind"), text("/metadata/name"))
    } else {
        format!("{}/{ns}/{}", text("/kind"), text("/metadata/name"))
    }
}

/// Rendered templates are read as YAML 1.1, as Flux Operator reads them (sigs.k8s.io/yaml).
fn yaml11() -> rflux_kustomize::yaml::Limits {
    rflux_kustomize::yaml::Limits {
        yaml11: true,
        ..rflux_kustomize::yaml::Limits::default()
    }
}

/// One object from a render of a `resources[]` item.
fn read_object(text: &str) -> Result<Value, String> {
    let v = rflux_kustomize::yaml::parse_one_with(text, TEMPLATE_NAME, yaml11())
        .map_err(|e| e.to_string())?;
    match v {
        Value::Object(_)
            if v.get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| !k.is_empty()) =>
        {
            Ok(v)
        }
        Value::Object(_) => Err("Object 'Kind' is missing".to_string()),
        other => Err(format!("expected an object, got {other}")),
    }
}

/// The objects of a render of `resourcesTemplate`.
fn read_objects(text: &str) -> Result<Vec<Value>, String> {
    let docs = rflux_kustomize::yaml::parse_stream_with(text, TEMPLATE_NAME, yaml11())
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for doc in docs {
        if !doc.is_object() {
            return Err(format!("expected an object, got {doc}"));
        }
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
        if kind.ends_with("List") && doc.get("items").is_some_and(Value::is_array) {
            if let Some(Value::Array(items)) = doc.get("items") {
                out.extend(items.iter().filter(|i| i.is_object()).cloned());
            }
            continue;
        }
        let has = |p: &str| {
            doc.pointer(p)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        };
        let kustomization = kind == "Kustomization"
            && doc
                .get("apiVersion")
                .and_then(Value::as_str)
                .is_some_and(|v| v.starts_with("kustomize.config.k8s.io/"));
        if has("/apiVersion") && has("/kind") && has("/metadata/name") && !kustomization {
            out.push(doc);
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "build_tests.rs"]
mod tests;
