//! The unit the engine works on: one Kubernetes object plus the identity it was loaded with.

use rflux_core::split_api_version;
use serde_json::Value;

/// The deepest nesting of maps and lists that patches, replacements and field specs may give an
/// object, and the most segments a field path may have. Parsed YAML is at most 256 deep; every
/// operation that could nest an object deeper than this is refused, so the code that walks
/// objects recursively (merging, copying, printing) needs a bounded stack.
pub const MAX_DEPTH: usize = 512;

/// How deeply maps and lists nest in a value: a scalar is 0, `{}` and `[]` are 1.
pub fn depth(v: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(a) => Box::new(a.iter()),
            Value::Object(m) => Box::new(m.values()),
            _ => continue,
        };
        deepest = deepest.max(d + 1);
        stack.extend(children.map(|c| (c, d + 1)));
    }
    deepest
}

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
        metadata_str(&self.obj, "name").unwrap_or("")
    }

    pub fn namespace(&self) -> Option<&str> {
        metadata_str(&self.obj, "namespace")
    }
}

/// The identity of an object as it is now.
/// `metadata.<key>` of an object.
pub fn metadata_field<'a>(obj: &'a Value, key: &str) -> Option<&'a Value> {
    obj.get("metadata")?.get(key)
}

/// `metadata.<key>` of an object, when it is a string.
pub fn metadata_str<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    metadata_field(obj, key)?.as_str()
}

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
        // `get` rather than `pointer`: serde_json's pointer allocates for every path segment,
        // and ids are taken for every object many times per build.
        name: metadata_str(obj, "name").unwrap_or("").to_string(),
        namespace: metadata_str(obj, "namespace").map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn depth_counts_nested_maps_and_lists() {
        assert_eq!(depth(&json!("x")), 0);
        assert_eq!(depth(&json!({})), 1);
        assert_eq!(depth(&json!({"a": [1, {"b": []}], "c": 2})), 4);
    }
}
