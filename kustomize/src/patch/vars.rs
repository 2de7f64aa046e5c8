//! Legacy `vars:`: resolving each var to a field value, then substituting `$(NAME)` in the
//! var-reference fields, with kustomize v5.5 semantics.
//!
//! - A var `{name, objref: {apiVersion | group+version, kind, name, namespace}, fieldref:
//!   {fieldPath}}` names exactly one resource: group, version, kind and name must be equal
//!   (an objref without `apiVersion` only matches resources with an empty group and version);
//!   the namespace is compared (in effective form) only when the objref gives one or the kind
//!   is cluster scoped. Any identity the resource had counts. `fieldPath` defaults to
//!   `metadata.name` and accepts `a.b[0].c`, `a.[k=v].c` and `\.` for a literal dot.
//! - Values keep their type: a field that is exactly `$(NAME)` becomes the number / boolean /
//!   string the var has; inside a longer string the value is formatted in.
//! - `$$` is an escaped `$` (it becomes `$` in every substituted field, even without vars).
//!   `$(UNKNOWN)` stays as it is. Map or list values are never substituted.
//! - Only string scalars are touched: at the leaf of a field spec, a string, every string
//!   value of a map (labels, annotations) or every item of a list (which must all be strings).

use std::collections::BTreeMap;

use rflux_core::split_api_version;
use serde_json::Value;

use super::PatchError;
use super::list_elements::scalar_str;
use super::replacements::split_field_path;
use crate::fieldspec::{FieldSpec, split_path};
use crate::resource::{ResId, Resource};
use crate::scope::{effective_namespace, id_is_cluster_scoped};

/// kustomize's built-in `varReference` field specs (the fields `$(VAR)` is substituted in).
pub fn default_var_reference_paths() -> Vec<FieldSpec> {
    const WORKLOADS: [(&str, &str); 7] = [
        ("CronJob", "spec/jobTemplate/spec/template/spec"),
        ("DaemonSet", "spec/template/spec"),
        ("Deployment", "spec/template/spec"),
        ("Job", "spec/template/spec"),
        ("Pod", "spec"),
        ("ReplicaSet", "spec/template/spec"),
        ("StatefulSet", "spec/template/spec"),
    ];
    let mut out = Vec::new();
    let spec = |kind: &str, path: String| FieldSpec::new("", "", kind, &path, false);
    for (kind, pod) in WORKLOADS {
        for c in ["containers", "initContainers"] {
            for leaf in ["args", "command", "env/value", "volumeMounts/mountPath"] {
                out.push(spec(kind, format!("{pod}/{c}/{leaf}")));
            }
        }
        // kustomize's own table: the CronJob entry lacks the pod `spec/` step, and the
        // StatefulSet one points into volumeClaimTemplates.
        let nfs = match kind {
            "CronJob" => "spec/jobTemplate/spec/template/volumes/nfs/server".to_string(),
            "StatefulSet" => "spec/volumeClaimTemplates/spec/nfs/server".to_string(),
            _ => format!("{pod}/volumes/nfs/server"),
        };
        out.push(spec(kind, nfs));
    }
    out.push(spec(
        "Deployment",
        "spec/template/metadata/annotations".into(),
    ));
    for p in ["spec/rules/host", "spec/tls/hosts", "spec/tls/secretName"] {
        out.push(spec("Ingress", p.into()));
    }
    out.push(spec("Service", "spec/ports/port".into()));
    out.push(spec("Service", "spec/ports/targetPort".into()));
    out.push(spec("PersistentVolume", "spec/nfs/server".into()));
    out.push(spec("", "metadata/labels".into()));
    out.push(spec("", "metadata/annotations".into()));
    out
}

/// The value at a var's `fieldref.fieldPath` (scalars keep their type; maps and lists are
/// returned too, though they are never substituted).
pub fn field_value(obj: &Value, field_path: &str) -> Result<Value, PatchError> {
    let err = |reason: &str| PatchError::FieldPath {
        path: field_path.to_string(),
        reason: reason.to_string(),
    };
    let mut parts = Vec::new();
    for p in split_field_path(field_path) {
        // `ports[0]` is `ports` then `0`.
        if let Some(open) = p.rfind('[').filter(|_| p.ends_with(']')) {
            let idx = &p[open + 1..p.len() - 1];
            if !idx.is_empty() && idx.chars().all(|c| c.is_ascii_digit()) {
                if open > 0 {
                    parts.push(p[..open].to_string());
                }
                parts.push(idx.to_string());
                continue;
            }
        }
        parts.push(p);
    }
    let mut cur = obj;
    for p in &parts {
        cur = match cur {
            Value::Object(m) => m.get(p.as_str()).ok_or_else(|| err("field not found"))?,
            Value::Array(items) => {
                if let Ok(i) = p.parse::<usize>() {
                    items.get(i).ok_or_else(|| err("list index out of range"))?
                } else if p.starts_with('[') && p.ends_with(']') {
                    let inner = &p[1..p.len() - 1];
                    let (k, v) = inner
                        .split_once('=')
                        .ok_or_else(|| err("list selector without `=`"))?;
                    items
                        .iter()
                        .find(|e| {
                            if k.is_empty() {
                                scalar_str(e) == v
                            } else {
                                e.get(k).is_some_and(|x| scalar_str(x) == v)
                            }
                        })
                        .ok_or_else(|| err("no list element matches"))?
                } else {
                    return Err(err("field looked up in a list"));
                }
            }
            _ => return Err(err("field not found")),
        };
    }
    Ok(cur.clone())
}

/// Resolves `vars` (the parsed `vars:` list) against the resources, identified by their
/// current identity and `original`.
pub fn resolve(
    resources: &[Resource],
    vars: &[Value],
) -> Result<BTreeMap<String, Value>, PatchError> {
    resolve_with_ids(resources, &[], vars)
}

/// Like [`resolve`], with every identity each resource has had (`ids[i]` for `resources[i]`;
/// the current identity and `original` are always included).
pub fn resolve_with_ids(
    resources: &[Resource],
    ids: &[Vec<ResId>],
    vars: &[Value],
) -> Result<BTreeMap<String, Value>, PatchError> {
    let mut out = BTreeMap::new();
    for v in vars {
        let name = v.get("name").map(scalar_str).unwrap_or_default();
        let err = |reason: String| PatchError::Var {
            name: name.clone(),
            reason,
        };
        if name.is_empty() {
            return Err(err("var without a name".into()));
        }
        if out.contains_key(&name) {
            return Err(err("var already encountered".into()));
        }
        let objref = v
            .get("objref")
            .ok_or_else(|| err("var without objref".into()))?;
        let s = |k: &str| objref.get(k).map(scalar_str).unwrap_or_default();
        let (mut group, mut version) = (s("group"), s("version"));
        let api_version = s("apiVersion");
        if !api_version.is_empty() {
            let (g, ver) = split_api_version(&api_version);
            if api_version.contains('/') {
                group = g.to_string();
            }
            version = ver.to_string();
        }
        let target = ResId {
            group,
            version,
            kind: s("kind"),
            name: s("name"),
            namespace: Some(s("namespace")).filter(|n| !n.is_empty()),
        };
        let check_ns = target.namespace.is_some() || id_is_cluster_scoped(&target);
        let target_ns = effective_namespace(&target);
        let matches = |id: &ResId| {
            id.group == target.group
                && id.version == target.version
                && id.kind == target.kind
                && id.name == target.name
                && (!check_ns || effective_namespace(id) == target_ns)
        };
        let mut found: Vec<usize> = Vec::new();
        for (i, r) in resources.iter().enumerate() {
            let mut rids = vec![r.id(), r.original.clone()];
            if let Some(extra) = ids.get(i) {
                rids.extend(extra.iter().cloned());
            }
            if rids.iter().any(&matches) {
                found.push(i);
            }
        }
        if found.len() > 1 {
            return Err(err(format!(
                "found {} resId matches for var (unable to disambiguate)",
                found.len()
            )));
        }
        let Some(&i) = found.first() else {
            return Err(err(
                "var cannot be mapped to a field in the set of known resources".into(),
            ));
        };
        let path = v
            .pointer("/fieldref/fieldPath")
            .or_else(|| v.pointer("/fieldref/fieldpath"))
            .map(scalar_str);
        let path = path
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "metadata.name".to_string());
        let value = field_value(&resources[i].obj, &path).map_err(|e| {
            err(format!(
                "field specified in var not found in corresponding resource: {e}"
            ))
        })?;
        out.insert(name, value);
    }
    Ok(out)
}

/// The text a var value has inside a longer string.
fn value_text(v: &Value) -> String {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        other => scalar_str(other),
    }
}

fn substitutable(v: &Value) -> bool {
    matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_))
}

/// Expands `$(NAME)` references and `$$` escapes in one string. A string that is exactly one
/// known `$(NAME)` becomes the var's value with its type. `used` counts substitutions.
pub fn expand(
    input: &str,
    values: &BTreeMap<String, Value>,
    used: &mut BTreeMap<String, usize>,
) -> Value {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            let advance;
            match rest.as_bytes()[0] {
                b'$' => {
                    out.push('$');
                    advance = 1;
                }
                b'(' => match rest.find(')') {
                    Some(close) => {
                        let name = &rest[1..close];
                        let mapped = values.get(name).filter(|v| substitutable(v));
                        if mapped.is_some() {
                            *used.entry(name.to_string()).or_default() += 1;
                        }
                        if input.len() == name.len() + 3 && cursor == 0 {
                            return mapped
                                .cloned()
                                .unwrap_or_else(|| Value::String(input.to_string()));
                        }
                        match mapped {
                            Some(v) => out.push_str(&value_text(v)),
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        advance = close + 1;
                    }
                    None => {
                        out.push_str("$(");
                        advance = 1;
                    }
                },
                _ => {
                    // `$` followed by any other character is kept, with that character.
                    let ch_len = rest.chars().next().map_or(1, char::len_utf8);
                    out.push('$');
                    out.push_str(&rest[..ch_len]);
                    advance = ch_len;
                }
            }
            cursor += advance + 1;
            checkpoint = cursor;
            continue;
        }
        cursor += 1;
    }
    out.push_str(&input[checkpoint.min(input.len())..]);
    Value::String(out)
}

/// Substitutes the var `values` in every resource at the given field specs (use
/// [`default_var_reference_paths`] plus any `configurations:` additions). Returns the names of
/// the vars that were never used (kustomize only logs them). kustomize skips this step
/// entirely when no var is defined (so `$$` then stays `$$`): call it only when `values` is
/// not empty.
pub fn substitute(
    resources: &mut [Resource],
    values: &BTreeMap<String, Value>,
    specs: &[FieldSpec],
) -> Result<Vec<String>, PatchError> {
    let mut used = BTreeMap::new();
    for r in resources.iter_mut() {
        for spec in specs {
            if !spec.gvk.selects_obj(&r.obj) {
                continue;
            }
            let segs = split_path(&spec.path);
            walk(&mut r.obj, &segs, values, &mut used).map_err(|reason| PatchError::FieldPath {
                path: spec.path.clone(),
                reason: format!("{reason} (object {}/{})", r.kind(), r.name()),
            })?;
        }
    }
    Ok(values
        .keys()
        .filter(|k| !used.contains_key(*k))
        .cloned()
        .collect())
}

fn walk(
    node: &mut Value,
    segs: &[String],
    values: &BTreeMap<String, Value>,
    used: &mut BTreeMap<String, usize>,
) -> Result<(), String> {
    let Some((first, rest)) = segs.split_first() else {
        return set(node, values, used);
    };
    match node {
        Value::Null => Ok(()),
        Value::Array(items) => {
            for item in items {
                walk(item, segs, values, used)?;
            }
            Ok(())
        }
        Value::Object(m) => {
            let name = first.strip_suffix("[]").unwrap_or(first);
            if name.is_empty() {
                return Err("cannot set or create an empty field name".into());
            }
            match m.get_mut(name) {
                Some(child) => walk(child, rest, values, used),
                None => Ok(()),
            }
        }
        _ => Err("expected sequence or mapping node".into()),
    }
}

fn set(
    node: &mut Value,
    values: &BTreeMap<String, Value>,
    used: &mut BTreeMap<String, usize>,
) -> Result<(), String> {
    match node {
        Value::Null => Ok(()),
        Value::String(s) => {
            *node = expand(s, values, used);
            Ok(())
        }
        Value::Object(m) => {
            for (_, v) in m.iter_mut() {
                if let Value::String(s) = v {
                    *v = expand(s, values, used);
                }
            }
            Ok(())
        }
        Value::Array(items) => {
            for item in items.iter_mut() {
                let Value::String(s) = item else {
                    return Err("invalid value type expect a string".into());
                };
                *item = expand(s, values, used);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}
