//! The kustomization file: finding it, reading it, and normalising its fields.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::{KustomizeError, Result};
use crate::loader::Loader;
use crate::yaml::parse_one;

/// File names kustomize recognises, in its order.
pub const KUSTOMIZATION_FILE_NAMES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// Every field of a kustomization, spelled the canonical way. Field names in files are matched
/// case-insensitively (`patchesJSON6902` is `patchesJson6902`).
const KNOWN_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "openAPI",
    "namePrefix",
    "nameSuffix",
    "namespace",
    "commonLabels",
    "labels",
    "commonAnnotations",
    "patchesStrategicMerge",
    "patchesJson6902",
    "patches",
    "images",
    "imageTags",
    "replacements",
    "replicas",
    "vars",
    "sortOptions",
    "resources",
    "components",
    "crds",
    "bases",
    "configMapGenerator",
    "secretGenerator",
    "helmGlobals",
    "helmCharts",
    "helmChartInflationGenerator",
    "generatorOptions",
    "configurations",
    "generators",
    "transformers",
    "validators",
    "buildMetadata",
];

/// A parsed kustomization: the file it came from and its fields under canonical names.
#[derive(Debug, Clone)]
pub struct Kustomization {
    pub file: PathBuf,
    pub fields: Map<String, Value>,
}

impl Kustomization {
    /// Normalises a parsed kustomization document.
    pub fn from_value(file: &Path, doc: Value) -> Result<Self> {
        let obj = match doc {
            Value::Object(o) => o,
            Value::Null => Map::new(),
            _ => {
                return Err(KustomizeError::InvalidKustomization {
                    file: file.to_path_buf(),
                    message: "the document is not a mapping".to_string(),
                });
            }
        };
        let mut fields = Map::new();
        for (k, v) in obj {
            let canonical = KNOWN_FIELDS
                .iter()
                .find(|f| f.eq_ignore_ascii_case(&k))
                .map(|f| (*f).to_string());
            let Some(name) = canonical else {
                return Err(KustomizeError::InvalidKustomization {
                    file: file.to_path_buf(),
                    message: format!("json: unknown field \"{k}\""),
                });
            };
            fields.insert(name, v);
        }
        let k = Kustomization {
            file: file.to_path_buf(),
            fields,
        };
        if let Some(kind) = k.str_field("kind")?
            && kind != "Kustomization"
            && kind != "Component"
        {
            return Err(KustomizeError::InvalidKustomization {
                file: file.to_path_buf(),
                message: format!("kind should be Kustomization or Component, not '{kind}'"),
            });
        }
        for unsupported in ["helmCharts", "helmChartInflationGenerator", "helmGlobals"] {
            if k.fields.get(unsupported).is_some_and(|v| !v.is_null()) {
                return Err(KustomizeError::Unsupported {
                    file: file.to_path_buf(),
                    field: unsupported.to_string(),
                    entry: String::new(),
                    message: "Helm chart inflation is not supported".to_string(),
                });
            }
        }
        for plugins in ["validators"] {
            if k.fields
                .get(plugins)
                .is_some_and(|v| v.as_array().is_some_and(|a| !a.is_empty()))
            {
                return Err(KustomizeError::Unsupported {
                    file: file.to_path_buf(),
                    field: plugins.to_string(),
                    entry: String::new(),
                    message: "validator plugins are not supported".to_string(),
                });
            }
        }
        Ok(k)
    }

    pub fn is_component(&self) -> bool {
        self.fields.get("kind").and_then(Value::as_str) == Some("Component")
    }

    pub fn get(&self, field: &str) -> Option<&Value> {
        self.fields.get(field).filter(|v| !v.is_null())
    }

    pub fn field_err(&self, field: &str, message: impl Into<String>) -> KustomizeError {
        KustomizeError::Field {
            file: self.file.clone(),
            field: field.to_string(),
            message: message.into(),
        }
    }

    /// A string field (absent or null gives `None`).
    pub fn str_field(&self, field: &str) -> Result<Option<String>> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.field_err(field, format!("expected a string, got {other}"))),
        }
    }

    /// A list of strings.
    pub fn str_list(&self, field: &str) -> Result<Vec<String>> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| match i {
                    Value::String(s) => Ok(s.clone()),
                    other => {
                        Err(self
                            .field_err(field, format!("expected a list of strings, found {other}")))
                    }
                })
                .collect(),
            Some(other) => Err(self.field_err(field, format!("expected a list, got {other}"))),
        }
    }

    /// A list of arbitrary entries.
    pub fn list(&self, field: &str) -> Result<Vec<Value>> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => Ok(items.clone()),
            Some(other) => Err(self.field_err(field, format!("expected a list, got {other}"))),
        }
    }

    /// A map of strings (labels, annotations). Non-string scalars are written as text.
    pub fn str_map(&self, field: &str) -> Result<Vec<(String, String)>> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(v) => str_map_of(v).map_err(|m| self.field_err(field, m)),
        }
    }
}

/// Finds and parses the kustomization file of a loader's directory.
pub fn load_kustomization(ldr: &Loader) -> Result<Kustomization> {
    let found: Vec<&str> = KUSTOMIZATION_FILE_NAMES
        .iter()
        .copied()
        .filter(|n| ldr.root.join(n).is_file())
        .collect();
    match found.as_slice() {
        [] => Err(KustomizeError::MissingKustomization(ldr.root.clone())),
        [name] => {
            let (path, text) = ldr.read_text(name)?;
            let doc = parse_one(&text, &path.display().to_string())?;
            Kustomization::from_value(&path, doc)
        }
        _ => Err(KustomizeError::MultipleKustomizations(ldr.root.clone())),
    }
}

/// Reads a `map[string]string` the way kustomize's JSON decoding does: values must be strings
/// (null counts as the empty string); a number or boolean is an error.
pub fn str_map_of(v: &Value) -> std::result::Result<Vec<(String, String)>, String> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                Value::Null => Ok((k.clone(), String::new())),
                other => Err(format!("value of '{k}' must be a string, got {other}")),
            })
            .collect(),
        other => Err(format!("expected a map of strings, got {other}")),
    }
}

/// Reads a `map[string]string` the way go-yaml decodes plugin configurations: any scalar is
/// taken as its text.
pub fn str_map_lenient(v: &Value) -> std::result::Result<Vec<(String, String)>, String> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| match scalar_text(v) {
                Some(s) => Ok((k.clone(), s)),
                None => Err(format!("value of '{k}' must be a string, got {v}")),
            })
            .collect(),
        other => Err(format!("expected a map of strings, got {other}")),
    }
}

/// The text of a scalar, as Go's YAML-to-string decoding gives it.
pub fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(crate::yaml::number_text(n)),
        Value::Null => Some(String::new()),
        _ => None,
    }
}
