//! `sigs.k8s.io/yaml.Marshal` for JSON values: the revision of exported input sets. The
//! printer is `rflux-gotmpl`'s (the one `toYaml` uses), which bounds the depth it prints.

use serde_json::Value;

/// Why a value could not be printed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum YamlError {
    /// The printer refused the value (it nests too deep).
    #[error("{0}")]
    Printer(String),
}

/// `sigs.k8s.io/yaml.Marshal(v)` for a JSON value.
pub fn to_yaml(v: &Value) -> Result<String, YamlError> {
    rflux_gotmpl::json_to_yaml(v).map_err(|e| YamlError::Printer(e.to_string()))
}

#[cfg(test)]
#[path = "yaml_tests.rs"]
mod tests;
