//! The built-in transformers that are driven by field specs: namespace, name prefix/suffix,
//! labels, annotations, images and replicas. Each is a pure function over the build's items.

use serde_json::{Map, Value, json};

use crate::error::{KustomizeError, Result};
use crate::fieldspec::{FieldSpec, visit_path};
use crate::item::Item;
use crate::resource::ResId;
use crate::scope::{effective, is_cluster_scoped};

fn terr(context: &str, message: impl Into<String>) -> KustomizeError {
    KustomizeError::Transform {
        context: context.to_string(),
        message: message.into(),
    }
}

/// Applies `f` at every field a spec list selects in `obj`.
pub fn apply_specs(
    obj: &mut Value,
    specs: &[FieldSpec],
    leaf_default: &dyn Fn() -> Value,
    f: &mut dyn FnMut(&mut Value) -> Result<()>,
) -> Result<()> {
    for fs in specs {
        if !fs.gvk.selects_obj(obj) {
            continue;
        }
        visit_path(obj, &fs.segments(), fs.create, leaf_default, f)?;
    }
    Ok(())
}

/// Which subjects of a (Cluster)RoleBinding a namespace transformer sets (kustomize's
/// `setRoleBindingSubjects`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Subjects {
    /// Subjects named `default` (the default).
    #[default]
    DefaultOnly,
    /// Every subject of kind `ServiceAccount`.
    AllServiceAccounts,
    /// None.
    None,
}

/// How a namespace transformer sets namespaces.
#[derive(Debug, Clone, Copy, Default)]
pub struct NamespaceOptions {
    /// Set a namespace field only where it is missing or empty.
    pub unset_only: bool,
    pub subjects: Subjects,
}

/// `namespace:`: sets the namespace of every namespaced object and the fields that carry one.
pub fn namespace(items: &mut [Item], ns: &str, specs: &[FieldSpec]) -> Result<()> {
    namespace_with(items, ns, specs, NamespaceOptions::default())
}

/// Sets `v` to the namespace, unless only unset fields are to be set and `v` holds one.
fn set_ns(v: &mut Value, ns: &str, unset_only: bool) {
    let unset = match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        _ => false,
    };
    if !unset_only || unset {
        *v = json!(ns);
    }
}

/// The namespace transformer with kustomize's `unsetOnly` and `setRoleBindingSubjects`.
pub fn namespace_with(
    items: &mut [Item],
    ns: &str,
    specs: &[FieldSpec],
    opts: NamespaceOptions,
) -> Result<()> {
    for item in items.iter_mut() {
        if !item.res.obj.is_object() {
            continue;
        }
        item.store_previous_id();
        let obj = &mut item.res.obj;
        let kind = obj
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let api_version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if !is_cluster_scoped(&api_version, &kind) {
            let mut cur = crate::resource::metadata_field(obj, "namespace")
                .cloned()
                .unwrap_or(Value::Null);
            set_ns(&mut cur, ns, opts.unset_only);
            set_meta(obj, "namespace", cur);
        }
        let is_binding = kind == "RoleBinding" || kind == "ClusterRoleBinding";
        if is_binding && let Some(Value::Array(subjects)) = obj.get_mut("subjects") {
            for s in subjects {
                let field = match opts.subjects {
                    Subjects::DefaultOnly => "name",
                    Subjects::AllServiceAccounts => "kind",
                    Subjects::None => break,
                };
                let want = if field == "name" {
                    "default"
                } else {
                    "ServiceAccount"
                };
                if s.get(field).and_then(Value::as_str) == Some(want)
                    && let Value::Object(m) = s
                {
                    set_ns(
                        m.entry("namespace").or_insert(Value::Null),
                        ns,
                        opts.unset_only,
                    );
                }
            }
        }
        let specs: Vec<FieldSpec> = specs
            .iter()
            .filter(|fs| fs.path != "metadata/namespace")
            .filter(|fs| api_version == "v1" || fs.path != "metadata/name")
            .filter(|fs| !(is_binding && fs.path == "subjects/namespace"))
            .cloned()
            .collect();
        apply_specs(obj, &specs, &|| json!(""), &mut |v| {
            if v.is_object() || v.is_array() {
                return Err(terr(
                    "namespace",
                    "namespace field specs must target scalar nodes",
                ));
            }
            set_ns(v, ns, opts.unset_only);
            Ok(())
        })?;
    }
    check_unique(items, "namespace transformation produces ID conflict")
}

fn check_unique(items: &[Item], msg: &str) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for item in items {
        let id = effective(item.res.id());
        if !seen.insert(id.clone()) {
            return Err(terr(msg, format!("{id:?}")));
        }
    }
    Ok(())
}

/// Sets `metadata.<key>` of an object, creating `metadata` when needed.
pub fn set_meta(obj: &mut Value, key: &str, value: Value) {
    if let Value::Object(m) = obj {
        let meta = m
            .entry("metadata".to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        if let Value::Object(mm) = meta {
            mm.insert(key.to_string(), value);
        }
    }
}

/// Kinds whose names `namePrefix`/`nameSuffix` leave alone.
fn skips_name_change(id: &ResId) -> bool {
    id.kind == "CustomResourceDefinition"
        || id.kind == "Namespace"
        || (id.kind == "APIService" && id.group == "apiregistration.k8s.io")
}

/// `namePrefix:` / `nameSuffix:`.
pub fn prefix_suffix(
    items: &mut [Item],
    prefix: &str,
    suffix: &str,
    specs: &[FieldSpec],
) -> Result<()> {
    for item in items.iter_mut() {
        let org = item.org_id();
        if skips_name_change(&org) {
            continue;
        }
        for fs in specs {
            if !fs.gvk.selects_id(&org) {
                continue;
            }
            if fs.path == "metadata/name" {
                if !prefix.is_empty() {
                    item.prefixes.push(prefix.to_string());
                    item.store_previous_id();
                }
                if !suffix.is_empty() {
                    item.suffixes.push(suffix.to_string());
                    item.store_previous_id();
                }
            }
            visit_path(
                &mut item.res.obj,
                &fs.segments(),
                fs.create,
                &|| json!(""),
                &mut |v| {
                    if let Value::String(s) = v {
                        *s = format!("{prefix}{s}{suffix}");
                    }
                    Ok(())
                },
            )?;
        }
    }
    Ok(())
}

/// Sets `pairs` in every map the specs select (labels or annotations).
pub fn set_map_entries(
    items: &mut [Item],
    pairs: &[(String, String)],
    specs: &[FieldSpec],
    what: &str,
) -> Result<()> {
    if pairs.is_empty() {
        return Ok(());
    }
    for item in items.iter_mut() {
        apply_specs(
            &mut item.res.obj,
            specs,
            &|| Value::Object(Map::new()),
            &mut |v| {
                if v.is_null() {
                    *v = Value::Object(Map::new());
                }
                let Value::Object(m) = v else {
                    return Err(terr(
                        what,
                        format!("expected a map at a {what} field, found {v}"),
                    ));
                };
                for (k, val) in pairs {
                    m.insert(k.clone(), json!(val));
                }
                Ok(())
            },
        )?;
    }
    Ok(())
}

/// One `images:` entry.
#[derive(Debug, Clone, Default)]
pub struct ImageRule {
    pub name: String,
    pub new_name: Option<String>,
    pub new_tag: Option<String>,
    pub digest: Option<String>,
}

/// Splits an image reference into name, tag and digest.
pub fn split_image(image: &str) -> (String, Option<String>, Option<String>) {
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d.to_string())),
        None => (image, None),
    };
    let slash = rest.rfind('/').map_or(0, |i| i + 1);
    match rest[slash..].rfind(':') {
        Some(i) => (
            rest[..slash + i].to_string(),
            Some(rest[slash + i + 1..].to_string()),
            digest,
        ),
        None => (rest.to_string(), None, digest),
    }
}

fn update_image(value: &str, rule: &ImageRule) -> Option<String> {
    let (mut name, mut tag, mut digest) = split_image(value);
    if name != rule.name {
        return None;
    }
    if let Some(n) = &rule.new_name {
        name = n.clone();
    }
    match (&rule.new_tag, &rule.digest) {
        (Some(t), Some(d)) => {
            tag = Some(t.clone());
            digest = Some(d.clone());
        }
        (Some(t), None) => {
            tag = Some(t.clone());
            digest = None;
        }
        (None, Some(d)) => {
            tag = None;
            digest = Some(d.clone());
        }
        (None, None) => {}
    }
    let mut out = name;
    if let Some(t) = tag.filter(|t| !t.is_empty()) {
        out.push(':');
        out.push_str(&t);
    }
    if let Some(d) = digest.filter(|d| !d.is_empty()) {
        out.push('@');
        out.push_str(&d);
    }
    Some(out)
}

fn update_containers_anywhere(v: &mut Value, rule: &ImageRule) {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                if (k == "containers" || k == "initContainers")
                    && let Value::Array(list) = child
                {
                    for c in list.iter_mut() {
                        if let Some(Value::String(img)) = c.get_mut("image")
                            && let Some(new) = update_image(img, rule)
                        {
                            *img = new;
                        }
                    }
                }
                update_containers_anywhere(child, rule);
            }
        }
        Value::Array(a) => {
            for x in a {
                update_containers_anywhere(x, rule);
            }
        }
        _ => {}
    }
}

/// `images:`: rewrites container images (in any `containers`/`initContainers` list, and at
/// the configured image fields).
pub fn images(items: &mut [Item], rules: &[ImageRule], specs: &[FieldSpec]) -> Result<()> {
    for rule in rules {
        for item in items.iter_mut() {
            update_containers_anywhere(&mut item.res.obj, rule);
            for fs in specs {
                if !fs.gvk.selects_obj(&item.res.obj) {
                    continue;
                }
                // `create` on image specs only matters for existing parents; never add images.
                visit_path(
                    &mut item.res.obj,
                    &fs.segments(),
                    false,
                    &|| Value::Null,
                    &mut |v| {
                        if let Value::String(img) = v
                            && let Some(new) = update_image(img, rule)
                        {
                            *img = new;
                        }
                        Ok(())
                    },
                )?;
            }
        }
    }
    Ok(())
}

/// `replicas:`: sets `spec.replicas` of the named objects. Returns how many objects of that
/// name a spec's kind selects.
pub fn replicas(
    items: &mut [Item],
    name: &str,
    count: &Value,
    specs: &[FieldSpec],
) -> Result<usize> {
    let mut matched = 0;
    for item in items.iter_mut() {
        if item.res.name() != name
            && !item.prev_ids.iter().any(|p| p.name == name)
            && item.org_id().name != name
        {
            continue;
        }
        if specs.iter().any(|fs| fs.gvk.selects_obj(&item.res.obj)) {
            matched += 1;
        }
        apply_specs(&mut item.res.obj, specs, &|| Value::Null, &mut |v| {
            *v = count.clone();
            Ok(())
        })?;
    }
    Ok(matched)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_split_and_update() {
        assert_eq!(split_image("nginx"), ("nginx".into(), None, None));
        assert_eq!(
            split_image("reg:5000/nginx:1.2"),
            ("reg:5000/nginx".into(), Some("1.2".into()), None)
        );
        assert_eq!(
            split_image("nginx@sha256:abc"),
            ("nginx".into(), None, Some("sha256:abc".into()))
        );
        let rule = ImageRule {
            name: "nginx".into(),
            new_tag: Some("2".into()),
            ..Default::default()
        };
        assert_eq!(
            update_image("nginx:1@sha256:x", &rule).as_deref(),
            Some("nginx:2")
        );
        assert_eq!(update_image("docker.io/nginx:1", &rule), None);
        let rule = ImageRule {
            name: "nginx".into(),
            digest: Some("sha256:d".into()),
            new_name: Some("r/n".into()),
            ..Default::default()
        };
        assert_eq!(
            update_image("nginx:1", &rule).as_deref(),
            Some("r/n@sha256:d")
        );
    }
}
