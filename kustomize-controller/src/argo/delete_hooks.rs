//! PreDelete and PostDelete hooks (§2.1, §2.7): which rendered objects run when a
//! Kustomization is deleted, under which name, with which delete policies. Pure; the
//! controller's `reconcile/argo_delete.rs` creates and waits for them.

use serde_json::Value;

use super::hook::{DeletePolicy, HookNaming, HookType, Role, classify};

/// The stage of a deletion a hook runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteStage {
    /// Before any object is deleted.
    PreDelete,
    /// After every object is gone.
    PostDelete,
}

impl DeleteStage {
    /// The name Argo uses.
    pub fn as_str(self) -> &'static str {
        match self {
            DeleteStage::PreDelete => "PreDelete",
            DeleteStage::PostDelete => "PostDelete",
        }
    }

    fn hook_type(self) -> HookType {
        match self {
            DeleteStage::PreDelete => HookType::PreDelete,
            DeleteStage::PostDelete => HookType::PostDelete,
        }
    }
}

impl std::fmt::Display for DeleteStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One deletion hook, ready to apply.
#[derive(Clone, Debug, PartialEq)]
pub struct DeleteHook {
    /// The object as applied: `metadata.name` set, `generateName` dropped.
    pub object: Value,
    /// `Kind/namespace/name`.
    pub label: String,
    /// Its delete policies (never empty).
    pub policies: Vec<DeletePolicy>,
}

/// The hooks of `stage` among the rendered `objects`, in their order. A hook without
/// `metadata.name` is named `<generateName><first 7 of revision>-<stage>-<start>` (lowercase,
/// as §2.3 for sync hooks); pass the deletion's start (the deletion timestamp) so every retry
/// of one deletion uses the same name and a hook is never created twice.
pub fn delete_hooks(objects: &[Value], stage: DeleteStage, naming: &HookNaming) -> Vec<DeleteHook> {
    let mut out = Vec::new();
    for obj in objects {
        let Role::Hook(hook) = classify(obj, &mut Vec::new()) else {
            continue;
        };
        if !hook.types.contains(&stage.hook_type()) {
            continue;
        }
        let mut object = obj.clone();
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| {
                let prefix = obj
                    .pointer("/metadata/generateName")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let revision: String = naming.revision.chars().take(7).collect();
                let suffix = format!("{revision}-{stage}-{}", naming.started_at_unix);
                format!("{prefix}{}", suffix.to_lowercase())
            });
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("name".into(), name.clone().into());
            meta.remove("generateName");
        }
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let namespace = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let label = if namespace.is_empty() {
            format!("{kind}/{name}")
        } else {
            format!("{kind}/{namespace}/{name}")
        };
        out.push(DeleteHook {
            object,
            label,
            policies: hook.delete_policies,
        });
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn naming() -> HookNaming {
        HookNaming {
            revision: "ABCDEF0123".into(),
            started_at_unix: 1_735_689_600,
        }
    }

    fn job(meta: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta})
    }

    #[test]
    fn selects_the_hooks_of_each_stage() {
        let objects = vec![
            job(json!({"name": "pre", "namespace": "app",
                "annotations": {"argocd.argoproj.io/hook": "PreDelete"}})),
            job(json!({"name": "post", "namespace": "app",
                "annotations": {"argocd.argoproj.io/hook": "PostDelete",
                                "argocd.argoproj.io/hook-delete-policy": "HookSucceeded"}})),
            job(json!({"name": "both", "namespace": "app",
                "annotations": {"argocd.argoproj.io/hook": "PreDelete, PostDelete"}})),
            job(json!({"name": "sync", "namespace": "app",
                "annotations": {"argocd.argoproj.io/hook": "PreSync"}})),
            job(json!({"name": "helm", "namespace": "app",
                "annotations": {"helm.sh/hook": "post-delete"}})),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}}),
        ];
        let pre = delete_hooks(&objects, DeleteStage::PreDelete, &naming());
        let labels: Vec<&str> = pre.iter().map(|h| h.label.as_str()).collect();
        assert_eq!(labels, ["Job/app/pre", "Job/app/both"]);
        assert_eq!(pre[0].policies, [DeletePolicy::BeforeHookCreation]);
        let post = delete_hooks(&objects, DeleteStage::PostDelete, &naming());
        let labels: Vec<&str> = post.iter().map(|h| h.label.as_str()).collect();
        assert_eq!(labels, ["Job/app/post", "Job/app/both", "Job/app/helm"]);
        assert_eq!(post[0].policies, [DeletePolicy::HookSucceeded]);
    }

    #[test]
    fn generated_names_are_stable_per_deletion() {
        let objects = vec![job(json!({"generateName": "Cleanup-", "namespace": "app",
            "annotations": {"argocd.argoproj.io/hook": "PostDelete"}}))];
        let a = delete_hooks(&objects, DeleteStage::PostDelete, &naming());
        let b = delete_hooks(&objects, DeleteStage::PostDelete, &naming());
        assert_eq!(a, b);
        assert_eq!(
            a[0].object["metadata"]["name"],
            "Cleanup-abcdef0-postdelete-1735689600"
        );
        assert!(a[0].object["metadata"].get("generateName").is_none());
        let later = HookNaming {
            started_at_unix: 1_735_689_601,
            ..naming()
        };
        let c = delete_hooks(&objects, DeleteStage::PostDelete, &later);
        assert_ne!(a[0].label, c[0].label);
    }
}
