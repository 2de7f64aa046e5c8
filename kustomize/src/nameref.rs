//! Name-reference fixing: after names changed (prefix, suffix, hash, namespace), rewrite every
//! field that refers to a renamed object, following kustomize's `nameReference` configuration
//! and its rules for choosing among several candidates.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::budget::Meter;
use crate::error::{KustomizeError, Result};
use crate::fieldspec::{FieldSpec, Gvk, NameBackRef, visit_path};
use crate::item::Item;
use crate::resource::ResId;
use crate::scope::{effective, id_is_cluster_scoped};

/// What the fixer needs to know about a possible referral target.
#[derive(Debug, Clone)]
struct Cand {
    kind: String,
    name: String,
    namespace: String,
    eff_ns: Option<String>,
    org_ns: String,
    prev: Vec<ResId>,
    prefixes: Vec<String>,
    suffixes: Vec<String>,
    cluster: bool,
}

fn snapshot(item: &Item) -> Cand {
    let id = item.res.id();
    let org_ns = match item.prev_ids.first() {
        Some(p) => p.namespace.clone().unwrap_or_default(),
        None => id.namespace.clone().unwrap_or_default(),
    };
    Cand {
        kind: id.kind.clone(),
        name: id.name.clone(),
        namespace: id.namespace.clone().unwrap_or_default(),
        eff_ns: effective(id.clone()).namespace,
        org_ns,
        prev: item.prev_ids.clone(),
        prefixes: item.prefixes.clone(),
        suffixes: item.suffixes.clone(),
        cluster: id_is_cluster_scoped(&id),
    }
}

fn same_ending(a: &[String], b: &[String]) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    if short.is_empty() {
        return long.is_empty();
    }
    let diff = long.len() - short.len();
    short.iter().enumerate().all(|(i, s)| &long[i + diff] == s)
}

fn prefix_suffix_equals(c: &Cand, r: &Cand, allow_empty: bool) -> bool {
    if allow_empty {
        let p =
            c.prefixes.is_empty() || r.prefixes.is_empty() || same_ending(&c.prefixes, &r.prefixes);
        let s =
            c.suffixes.is_empty() || r.suffixes.is_empty() || same_ending(&c.suffixes, &r.suffixes);
        p && s
    } else {
        same_ending(&c.prefixes, &r.prefixes) && same_ending(&c.suffixes, &r.suffixes)
    }
}

struct Ctx<'a> {
    referrer: &'a Cand,
    referrer_obj: &'a Value,
    target: &'a Gvk,
    spec: &'a FieldSpec,
}

impl Ctx<'_> {
    fn select<'c>(
        &self,
        old: &str,
        cands: Vec<&'c Cand>,
        with_ns: bool,
    ) -> Result<Option<&'c Cand>> {
        let mut c: Vec<&Cand> = cands
            .into_iter()
            .filter(|c| c.prev.iter().any(|p| p.name == old))
            .filter(|c| {
                c.prev
                    .iter()
                    .any(|p| self.target.selects(&p.group, &p.version, &p.kind))
            })
            .collect();
        if self.spec.path.ends_with("roleRef/name") {
            let group = self
                .referrer_obj
                .pointer("/roleRef/apiGroup")
                .and_then(Value::as_str);
            let kind = self
                .referrer_obj
                .pointer("/roleRef/kind")
                .and_then(Value::as_str);
            if let (Some(g), Some(k)) = (group, kind) {
                let sel = Gvk::new(g, "", k);
                c.retain(|c| {
                    c.prev
                        .iter()
                        .any(|p| sel.selects(&p.group, &p.version, &p.kind))
                });
            }
        }
        if !self.referrer.cluster {
            c.retain(|c| {
                c.cluster || c.kind == "ServiceAccount" || c.eff_ns == self.referrer.eff_ns
            });
        }
        if c.len() == 1 {
            return Ok(c.pop());
        }
        c.retain(|c| prefix_suffix_equals(c, self.referrer, true));
        if c.len() > 1 {
            c.retain(|c| prefix_suffix_equals(c, self.referrer, false));
        }
        match c.len() {
            0 => Ok(None),
            1 => Ok(c.pop()),
            _ => {
                let first = c[0];
                let identical = c
                    .iter()
                    .all(|x| x.name == first.name && (!with_ns || x.namespace == first.namespace));
                if identical {
                    Ok(Some(first))
                } else {
                    let ids: Vec<String> = c
                        .iter()
                        .map(|x| format!("{}/{}/{}", x.kind, x.namespace, x.name))
                        .collect();
                    Err(KustomizeError::Transform {
                        context: format!(
                            "name reference '{}' of {}/{}",
                            self.spec.path, self.referrer.kind, self.referrer.name
                        ),
                        message: format!("found multiple possible referrals: {}", ids.join(", ")),
                    })
                }
            }
        }
    }
}

/// Rewrites name references in all items, within the build's time budget.
pub fn fix_back_references(
    items: &mut [Item],
    backrefs: &[NameBackRef],
    meter: &Meter,
) -> Result<()> {
    let cands: Vec<Cand> = items.iter().map(snapshot).collect();
    // Only objects whose name or namespace changed can make a reference stale.
    if cands.iter().all(|c| c.prev.is_empty()) {
        return Ok(());
    }
    for i in 0..items.len() {
        meter.check_time()?;
        let org = items[i].org_id();
        // Objects of kinds that refer to nothing by name need no list of candidates.
        if !backrefs
            .iter()
            .any(|br| br.referrers.iter().any(|fs| fs.gvk.selects_id(&org)))
        {
            continue;
        }
        let referrer = &cands[i];
        let visible: Vec<&Cand> = if referrer.cluster {
            cands.iter().collect()
        } else {
            let rb_ns = rolebinding_namespaces(&items[i].res.obj);
            cands
                .iter()
                .filter(|c| {
                    c.cluster || c.eff_ns == referrer.eff_ns || rb_ns.contains(&c.namespace)
                })
                .collect()
        };
        // only `roleRef` of the referrer is consulted while its fields are rewritten
        let referrer_obj = match items[i].res.obj.get("roleRef") {
            Some(r) => json!({ "roleRef": r }),
            None => Value::Null,
        };
        for br in backrefs {
            for fs in &br.referrers {
                if !fs.gvk.selects_id(&org) {
                    continue;
                }
                let ctx = Ctx {
                    referrer,
                    referrer_obj: &referrer_obj,
                    target: &br.gvk,
                    spec: fs,
                };
                visit_path(
                    &mut items[i].res.obj,
                    &fs.segments(),
                    false,
                    &|| Value::Null,
                    &mut |node| set_node(&ctx, node, &visible),
                )?;
            }
        }
    }
    Ok(())
}

fn rolebinding_namespaces(obj: &Value) -> HashSet<String> {
    let mut out = HashSet::new();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != "RoleBinding" && kind != "ClusterRoleBinding" {
        return out;
    }
    if let Some(Value::Array(subjects)) = obj.get("subjects") {
        for s in subjects {
            if s.get("kind").and_then(Value::as_str) == Some("ServiceAccount")
                && let Some(ns) = s.get("namespace").and_then(Value::as_str)
                && !ns.is_empty()
            {
                out.insert(ns.to_string());
            }
        }
    }
    out
}

fn set_node(ctx: &Ctx<'_>, node: &mut Value, visible: &[&Cand]) -> Result<()> {
    match node {
        Value::Null => Ok(()),
        Value::String(old) => {
            if let Some(r) = ctx.select(old, visible.to_vec(), false)?
                && r.name != *old
            {
                *old = r.name.clone();
            }
            Ok(())
        }
        Value::Object(m) => {
            let Some(old) = m.get("name").and_then(Value::as_str).map(str::to_string) else {
                return Err(KustomizeError::Transform {
                    context: format!(
                        "name reference '{}' of {}/{}",
                        ctx.spec.path, ctx.referrer.kind, ctx.referrer.name
                    ),
                    message: "path config error; no 'name' field in node".to_string(),
                });
            };
            let cands: Vec<&Cand> = match m.get("namespace").and_then(Value::as_str) {
                None => visible.to_vec(),
                Some(ns) => {
                    let by_org: Vec<&Cand> =
                        visible.iter().copied().filter(|c| c.org_ns == ns).collect();
                    if by_org.is_empty() {
                        visible
                            .iter()
                            .copied()
                            .filter(|c| c.namespace == ns)
                            .collect()
                    } else {
                        by_org
                    }
                }
            };
            let Some(r) = ctx.select(&old, cands, true)? else {
                return Ok(());
            };
            if r.name == old && r.namespace.is_empty() {
                return Ok(());
            }
            m.insert("name".into(), json!(r.name));
            if !r.namespace.is_empty() {
                m.insert("namespace".into(), json!(r.namespace));
            }
            Ok(())
        }
        Value::Array(items) => {
            for x in items {
                set_node(ctx, x, visible)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}
