//! `target:` / `select:` / `reject:` selectors, as kustomize matches them.

use std::borrow::Cow;

use regex::Regex;
use rflux_core::{LabelSelector, split_api_version};
use serde_json::Value;

use super::PatchError;
use crate::resource::Resource;
pub use crate::scope::{effective_namespace, is_cluster_scoped};

/// A resource selector. `group`, `version`, `kind`, `name` and `namespace` are regular
/// expressions anchored at both ends (empty or absent: match anything); `name` and `namespace`
/// match when either the original or the current identity matches; namespaces are compared in
/// their effective form (`default` for an unset namespace, a sentinel for cluster-scoped kinds).
/// `label_selector` / `annotation_selector` use Kubernetes label-selector syntax.
#[derive(Debug, Clone, Default)]
pub struct Selector {
    pub group: Option<String>,
    pub version: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub annotation_selector: Option<String>,
    compiled: Compiled,
}

#[derive(Debug, Clone, Default)]
struct Compiled {
    group: Option<Regex>,
    version: Option<Regex>,
    kind: Option<Regex>,
    name: Option<Regex>,
    namespace: Option<Regex>,
    labels: LabelSelector,
    annotations: LabelSelector,
}

fn anchored(field: &str, pattern: &Option<String>) -> Result<Option<Regex>, PatchError> {
    match pattern.as_deref() {
        None | Some("") => Ok(None),
        Some(p) => {
            Regex::new(&format!("^(?:{p})$"))
                .map(Some)
                .map_err(|e| PatchError::InvalidSelector {
                    field: field.to_string(),
                    reason: e.to_string(),
                })
        }
    }
}

impl Selector {
    /// Builds a selector from its fields, compiling the regular expressions and label selectors.
    pub fn new(
        group: Option<String>,
        version: Option<String>,
        kind: Option<String>,
        name: Option<String>,
        namespace: Option<String>,
        label_selector: Option<String>,
        annotation_selector: Option<String>,
    ) -> Result<Selector, PatchError> {
        let compiled = Compiled {
            group: anchored("group", &group)?,
            version: anchored("version", &version)?,
            kind: anchored("kind", &kind)?,
            name: anchored("name", &name)?,
            namespace: anchored("namespace", &namespace)?,
            labels: label_selector_of("labelSelector", &label_selector)?,
            annotations: label_selector_of("annotationSelector", &annotation_selector)?,
        };
        Ok(Selector {
            group,
            version,
            kind,
            name,
            namespace,
            label_selector,
            annotation_selector,
            compiled,
        })
    }

    /// Parses a selector map (`{group, version, kind, name, namespace, labelSelector,
    /// annotationSelector}`); unknown fields are an error, as in kustomize's strict decoding.
    pub fn from_value(v: &Value) -> Result<Selector, PatchError> {
        let m = v.as_object().ok_or_else(|| PatchError::InvalidSelector {
            field: "<selector>".into(),
            reason: "selector is not a map".into(),
        })?;
        let mut f: [Option<String>; 7] = Default::default();
        const NAMES: [&str; 7] = [
            "group",
            "version",
            "kind",
            "name",
            "namespace",
            "labelSelector",
            "annotationSelector",
        ];
        for (k, val) in m {
            let Some(i) = NAMES.iter().position(|n| n == k) else {
                return Err(PatchError::InvalidSelector {
                    field: k.clone(),
                    reason: "unknown selector field".into(),
                });
            };
            f[i] = match val {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                Value::Bool(b) => Some(b.to_string()),
                _ => {
                    return Err(PatchError::InvalidSelector {
                        field: k.clone(),
                        reason: "must be a string".into(),
                    });
                }
            };
        }
        let [g, ve, ki, n, ns, l, a] = f;
        Selector::new(g, ve, ki, n, ns, l, a)
    }

    /// Whether the selector selects the resource.
    pub fn matches(&self, r: &Resource) -> bool {
        let c = &self.compiled;
        let cur = r.id();
        if let Some(re) = &c.namespace
            && !re.is_match(&effective_namespace(&r.original))
            && !re.is_match(&effective_namespace(&cur))
        {
            return false;
        }
        if let Some(re) = &c.name
            && !re.is_match(&r.original.name)
            && !re.is_match(&cur.name)
        {
            return false;
        }
        let (group, version) = split_api_version(r.api_version());
        if c.group.as_ref().is_some_and(|re| !re.is_match(group))
            || c.version.as_ref().is_some_and(|re| !re.is_match(version))
            || c.kind.as_ref().is_some_and(|re| !re.is_match(r.kind()))
        {
            return false;
        }
        c.labels
            .matches_by(lookup(crate::resource::metadata_field(&r.obj, "labels")))
            && c.annotations
                .matches_by(lookup(crate::resource::metadata_field(
                    &r.obj,
                    "annotations",
                )))
    }
}

/// Parses a `labelSelector` / `annotationSelector` in the Kubernetes selector grammar.
fn label_selector_of(field: &str, expr: &Option<String>) -> Result<LabelSelector, PatchError> {
    LabelSelector::parse_strict(expr.as_deref().unwrap_or("")).map_err(|source| {
        PatchError::LabelSelector {
            field: field.to_string(),
            source,
        }
    })
}

/// Reads the values of a label or annotation map as text: a null value is the empty string and
/// another scalar its JSON text.
fn lookup<'a>(map: Option<&'a Value>) -> impl Fn(&str) -> Option<Cow<'a, str>> + 'a {
    move |k| {
        map.and_then(|m| m.get(k)).map(|v| match v {
            Value::String(s) => Cow::Borrowed(s.as_str()),
            Value::Null => Cow::Borrowed(""),
            other => Cow::Owned(other.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_syntax() {
        let r = Resource::new(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"a": "x", "n": 7, "z": null}}
        }));
        let ok = |s: &str| {
            Selector::from_value(&json!({ "labelSelector": s })).map(|sel| sel.matches(&r))
        };
        assert_eq!(ok("a=x").ok(), Some(true));
        assert_eq!(ok("a==x,n").ok(), Some(true));
        assert_eq!(ok("a!=x").ok(), Some(false));
        assert_eq!(ok("a in (x, y)").ok(), Some(true));
        assert_eq!(ok("a notin (x)").ok(), Some(false));
        assert_eq!(ok("!b").ok(), Some(true));
        // Numbers are read as their text, null as the empty string.
        assert_eq!(ok("n>6,n<8").ok(), Some(true));
        assert_eq!(ok("n=7").ok(), Some(true));
        assert_eq!(ok("z=").ok(), Some(true));
        assert_eq!(ok("").ok(), Some(true));
        assert!(ok("a in x").is_err());
        assert!(ok("n>z").is_err());
        let e = ok("a=x,").unwrap_err();
        assert!(
            e.to_string().contains("labelSelector") && e.to_string().contains("empty"),
            "{e}"
        );
    }
}
