//! The unit the engine works on: one Kubernetes object plus the identity it was loaded with.

use serde_json::Value;

/// Group/version/kind plus name and namespace: how kustomize identifies an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ResId {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub name: String,
    pub namespace: Option<String>,
}

/// One object of a build.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// The object itself (`apiVersion`, `kind`, `metadata`, ...).
    pub obj: Value,
    /// The identity the object had when it was loaded or generated, before namespace,
    /// prefix, suffix or hash changes. Name references and vars resolve against it.
    pub original: ResId,
}

impl Resource {
    /// Wraps an object and records its current identity as the original one.
    pub fn new(obj: Value) -> Self {
        let original = id_of(&obj);
        Resource { obj, original }
    }

    /// The object's current identity.
    pub fn id(&self) -> ResId {
        id_of(&self.obj)
    }

    pub fn kind(&self) -> &str {
        self.obj.get("kind").and_then(Value::as_str).unwrap_or("")
    }

    pub fn api_version(&self) -> &str {
        self.obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    pub fn name(&self) -> &str {
        self.obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    pub fn namespace(&self) -> Option<&str> {
        self.obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
    }
}

/// Splits `apiVersion` into group and version (`v1` has the empty group).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.rsplit_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// The identity of an object as it is now.
pub fn id_of(obj: &Value) -> ResId {
    let (group, version) =
        split_api_version(obj.get("apiVersion").and_then(Value::as_str).unwrap_or(""));
    ResId {
        group: group.to_string(),
        version: version.to_string(),
        kind: obj
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        name: obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        namespace: obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string),
    }
}
