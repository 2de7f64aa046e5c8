//! The kustomization file: finding it, reading it, and normalising its fields.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::{KustomizeError, Location, Result};
use crate::loader::Loader;
use crate::yaml::positions::positions;
use crate::yaml::{PathSeg, parse_one};

/// File names kustomize recognises, in its order.
pub const KUSTOMIZATION_FILE_NAMES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// Every field of a kustomization, spelled the canonical way. Field names in files are matched
/// case-insensitively (`patchesJSON6902` is `patchesJson6902`).
pub(crate) const KNOWN_FIELDS: &[&str] = &[
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
    /// The file's text, to find the line of a field or entry when one fails.
    pub(crate) text: Option<Arc<str>>,
    /// The entry of a field being worked on (field index in `KNOWN_FIELDS`, entry index);
    /// see `located.rs`.
    pub(crate) cursor: Cell<Option<(usize, usize)>>,
}

impl Kustomization {
    /// A kustomization made up by the engine (no file text to place errors in).
    pub(crate) fn synthetic(file: PathBuf, fields: Map<String, Value>) -> Self {
        Kustomization {
            file,
            fields,
            text: None,
            cursor: Cell::new(None),
        }
    }

    /// Normalises a parsed kustomization document; `text` is the file's text, used to place
    /// errors at their line.
    pub fn from_value(file: &Path, doc: Value, text: Option<Arc<str>>) -> Result<Self> {
        // the line of a top-level key (or of the document), for errors
        let at = |key: Option<&str>, e: KustomizeError| -> KustomizeError {
            let Some(doc) = text
                .as_deref()
                .and_then(|t| positions(t).into_iter().next())
            else {
                return e;
            };
            let line = match key {
                Some(k) => doc.get(&[PathSeg::Key(k.to_string())]).map(|p| p.0),
                None => Some(doc.line),
            };
            match line {
                Some(line) => e.at(
                    Location {
                        file: file.to_path_buf(),
                        line,
                        col: None,
                    },
                    "",
                ),
                None => e,
            }
        };
        let obj = match doc {
            Value::Object(o) => o,
            Value::Null => Map::new(),
            _ => {
                return Err(at(
                    None,
                    KustomizeError::InvalidKustomization {
                        file: file.to_path_buf(),
                        message: "the document is not a mapping".to_string(),
                    },
                ));
            }
        };
        let mut fields = Map::new();
        for (k, v) in obj {
            let canonical = KNOWN_FIELDS
                .iter()
                .find(|f| f.eq_ignore_ascii_case(&k))
                .map(|f| (*f).to_string());
            let Some(name) = canonical else {
                let e = KustomizeError::InvalidKustomization {
                    file: file.to_path_buf(),
                    message: format!("json: unknown field \"{k}\""),
                };
                return Err(at(Some(&k), e));
            };
            fields.insert(name, v);
        }
        let k = Kustomization {
            file: file.to_path_buf(),
            fields,
            text: None,
            cursor: Cell::new(None),
        };
        if let Some(kind) = k.str_field("kind").map_err(|e| at(Some("kind"), e))?
            && kind != "Kustomization"
            && kind != "Component"
        {
            let e = KustomizeError::InvalidKustomization {
                file: file.to_path_buf(),
                message: format!("kind should be Kustomization or Component, not '{kind}'"),
            };
            return Err(at(Some("kind"), e));
        }
        for unsupported in ["helmCharts", "helmChartInflationGenerator", "helmGlobals"] {
            if k.fields.get(unsupported).is_some_and(|v| !v.is_null()) {
                let e = KustomizeError::Unsupported {
                    file: file.to_path_buf(),
                    field: unsupported.to_string(),
                    entry: String::new(),
                    message: "Helm chart inflation is not supported".to_string(),
                };
                return Err(at(Some(unsupported), e));
            }
        }
        for plugins in ["validators"] {
            if k.fields
                .get(plugins)
                .is_some_and(|v| v.as_array().is_some_and(|a| !a.is_empty()))
            {
                let e = KustomizeError::Unsupported {
                    file: file.to_path_buf(),
                    field: plugins.to_string(),
                    entry: String::new(),
                    message: "validator plugins are not supported".to_string(),
                };
                return Err(at(Some(plugins), e));
            }
        }
        Ok(Kustomization { text, ..k })
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

    /// A list of strings; a bad entry is an error placed at its line.
    pub fn str_list(&self, field: &str) -> Result<Vec<String>> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(n, i)| match i {
                    Value::String(s) => Ok(s.clone()),
                    other => {
                        let msg = format!("expected a list of strings, found {other}");
                        Err(self.at_entry(None, field, n, self.field_err(field, msg)))
                    }
                })
                .collect(),
            Some(other) => Err(self.field_err(field, format!("expected a list, got {other}"))),
        }
    }

    /// The entries of a list field, recording the one being worked on so that an error
    /// leaving the loop is placed at its line (see `located.rs`).
    pub(crate) fn entries(&self, field: &str) -> Result<Entries<'_, Value>> {
        Ok(Entries::new(self, field, self.list(field)?))
    }

    /// [`Kustomization::entries`] of a list of strings.
    pub(crate) fn str_entries(&self, field: &str) -> Result<Entries<'_, String>> {
        Ok(Entries::new(self, field, self.str_list(field)?))
    }

    /// Forgets the entry being worked on.
    pub(crate) fn clear_cursor(&self) {
        self.cursor.set(None);
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
            Kustomization::from_value(&path, doc, Some(Arc::from(text)))
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

/// The name `entries` records for a field (its index among the known fields).
pub(crate) fn field_index(field: &str) -> Option<usize> {
    KNOWN_FIELDS
        .iter()
        .position(|f| f.eq_ignore_ascii_case(field))
}

/// Iterates a field's entries, recording the one being worked on (see the module comment).
pub(crate) struct Entries<'a, T> {
    cursor: &'a Cell<Option<(usize, usize)>>,
    field: Option<usize>,
    next: usize,
    items: std::vec::IntoIter<T>,
}

impl<'a, T> Entries<'a, T> {
    pub(crate) fn new(k: &'a Kustomization, field: &str, items: Vec<T>) -> Self {
        Entries {
            cursor: &k.cursor,
            field: field_index(field),
            next: 0,
            items: items.into_iter(),
        }
    }
}

impl<T> Iterator for Entries<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        let Some(item) = self.items.next() else {
            self.cursor.set(None);
            return None;
        };
        self.cursor.set(self.field.map(|f| (f, self.next)));
        self.next += 1;
        Some(item)
    }
}
