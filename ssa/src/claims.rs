//! Ownership conflicts: who else claims a live object before we apply it. Flux and Argo CD
//! both take over any object they are given (server-side apply with force), so two owners of
//! one object fight forever. Here a live object that another owner holds is not applied: the
//! classification follows the detection order of `argo-semantics.md` 6.5, on the live object:
//! 1. Argo CD (strong): a self-referencing `argocd.argoproj.io/tracking-id` annotation;
//! 2. another Kustomization's owner labels (the caller checks whether it still lists the object:
//!    stale labels are no claim);
//! 3. Flux Operator's ResourceSet or helm-controller labels;
//! 4. Argo CD (label tracking): `app.kubernetes.io/instance` with an `argocd-controller` manager;
//! 5. other appliers: managers with operation `Apply` besides ours, the override managers and
//!    kubectl. They are a conflict only when their fields overlap ours, which the caller finds
//!    with a dry-run apply without force (409).
//!
//! Objects that carry our own owner labels are ours, whatever else they carry. A takeover is
//! allowed by `<group>/takeover: enabled` on the desired object (in Git) or on the owner (the
//! Kustomization): never by the live object, which would let the previous owner take it back.

use serde_json::Value;

use super::object::ObjectRef;
use super::owner::{Owner, has_meta_value};

/// Argo CD's tracking annotation.
pub const ARGO_TRACKING_ID: &str = "argocd.argoproj.io/tracking-id";
/// Argo CD's default instance label (label tracking).
pub const ARGO_INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Argo CD's field manager.
pub const ARGO_MANAGER: &str = "argocd-controller";
/// The suffix of the takeover annotation (`<group>/takeover`).
pub const TAKEOVER_SUFFIX: &str = "takeover";

/// Someone other than the owner holding a live object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// An Argo CD application (its instance name: `app` or `namespace_app`).
    ArgoCd { app: String },
    /// Another owner of our kind (a Kustomization), named by its labels.
    Owner { namespace: String, name: String },
    /// Another Flux controller's owner labels (`kind` says which).
    OtherFlux {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    /// Field managers that applied fields we would take over.
    Managers(Vec<String>),
}

impl Claim {
    /// "Kustomization ns/name", "Argo CD application guestbook"…
    pub fn describe(&self, owner_kind: &str) -> String {
        match self {
            Claim::ArgoCd { app } => format!("Argo CD application {app}"),
            Claim::Owner { namespace, name } => format!("{owner_kind} {namespace}/{name}"),
            Claim::OtherFlux {
                kind,
                namespace,
                name,
            } => format!("{kind} {namespace}/{name}"),
            Claim::Managers(m) => format!("field manager(s) {}", m.join(", ")),
        }
    }
}

fn meta_str<'a>(obj: &'a Value, map: &str, key: &str) -> Option<&'a str> {
    obj.pointer(&format!("/metadata/{map}"))
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Whether `desired` or the owner object asks to take over objects others hold.
pub fn takeover_allowed(owner: &Owner, desired: &Value, owner_obj: Option<&Value>) -> bool {
    let key = owner.key(TAKEOVER_SUFFIX);
    has_meta_value(desired, &key, "enabled")
        || owner_obj.is_some_and(|o| has_meta_value(o, &key, "enabled"))
}

/// The Argo CD application of a tracking id, if the id points at `id` (Argo's self-reference
/// rule: group, kind and name match, and the namespace matches or the object is cluster-scoped).
pub fn argo_app_of(tracking: &str, id: &ObjectRef) -> Option<String> {
    let mut parts = tracking.splitn(3, ':');
    let (app, gk, nn) = (parts.next()?, parts.next()?, parts.next()?);
    let (group, kind) = gk.split_once('/')?;
    let (namespace, name) = nn.split_once('/')?;
    if app.is_empty() || kind.contains('/') || name.contains('/') {
        return None;
    }
    let same = group == id.group
        && kind == id.kind
        && name == id.name
        && (namespace == id.namespace || id.namespace.is_empty());
    same.then(|| app.to_string())
}

fn has_manager(live: &Value, manager: &str) -> bool {
    managed_fields(live).any(|(m, _)| m == manager)
}

fn managed_fields(live: &Value) -> impl Iterator<Item = (&str, &str)> {
    live.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e.get("manager")?.as_str()?,
                e.get("operation").and_then(Value::as_str).unwrap_or(""),
            ))
        })
}

/// Rules 1–4: who holds `live`, by its marks, unless it is ours. A [`Claim::Owner`] may be
/// stale: the caller checks it.
pub fn marked_claim(live: &Value, id: &ObjectRef, owner: &Owner) -> Option<Claim> {
    if owner.owns(live) {
        return None;
    }
    if let Some(app) =
        meta_str(live, "annotations", ARGO_TRACKING_ID).and_then(|t| argo_app_of(t, id))
    {
        return Some(Claim::ArgoCd { app });
    }
    let pair = |group: &str| {
        Some((
            meta_str(live, "labels", &format!("{group}/namespace"))?.to_string(),
            meta_str(live, "labels", &format!("{group}/name"))?.to_string(),
        ))
    };
    if let Some((namespace, name)) = pair(&owner.group) {
        return Some(Claim::Owner { namespace, name });
    }
    for (group, kind) in [
        ("resourceset.fluxcd.controlplane.io", "ResourceSet"),
        ("helm.toolkit.fluxcd.io", "HelmRelease"),
    ] {
        if group != owner.group
            && let Some((namespace, name)) = pair(group)
        {
            return Some(Claim::OtherFlux {
                kind,
                namespace,
                name,
            });
        }
    }
    if let Some(app) = meta_str(live, "labels", ARGO_INSTANCE_LABEL)
        && has_manager(live, ARGO_MANAGER)
    {
        return Some(Claim::ArgoCd {
            app: app.to_string(),
        });
    }
    None
}

/// Rule 5: the managers other than ours that applied fields of `live` (operation `Apply`),
/// leaving out the override managers and kubectl (`kubectl apply --server-side` is how objects
/// are usually created before a GitOps tool adopts them). Empty for objects that are ours.
pub fn foreign_appliers(live: &Value, owner: &Owner, override_managers: &[String]) -> Vec<String> {
    if owner.owns(live) {
        return Vec::new();
    }
    let mut out: Vec<String> = managed_fields(live)
        .filter(|(m, op)| {
            *op == "Apply"
                && *m != owner.manager
                && !m.starts_with("kubectl")
                && !override_managers.iter().any(|o| o == m)
        })
        .map(|(m, _)| m.to_string())
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::owner::test_owner as owner;

    fn id(kind: &str, ns: &str, name: &str) -> ObjectRef {
        ObjectRef {
            group: if kind == "Deployment" { "apps" } else { "" }.into(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn labelled(ns: &str, name: &str) -> Value {
        json!({"metadata": {"labels": {
            "kustomize.toolkit.fluxcd.io/name": name,
            "kustomize.toolkit.fluxcd.io/namespace": ns}}})
    }

    #[test]
    fn our_own_labels_are_no_claim_whatever_else_is_there() {
        let mut live = labelled("flux-system", "app");
        live["metadata"]["annotations"] =
            json!({ARGO_TRACKING_ID: "guestbook:apps/Deployment:default/web"});
        assert_eq!(
            marked_claim(&live, &id("Deployment", "default", "web"), &owner()),
            None
        );
    }

    #[test]
    fn another_kustomization_is_named() {
        let live = labelled("team-b", "other");
        assert_eq!(
            marked_claim(&live, &id("ConfigMap", "default", "x"), &owner()),
            Some(Claim::Owner {
                namespace: "team-b".into(),
                name: "other".into()
            })
        );
        // The same name in another namespace is another Kustomization.
        let live = labelled("team-b", "app");
        assert!(marked_claim(&live, &id("ConfigMap", "default", "x"), &owner()).is_some());
    }

    #[test]
    fn argo_tracking_ids_count_only_when_they_point_at_the_object() {
        let web = id("Deployment", "default", "web");
        assert_eq!(
            argo_app_of("guestbook:apps/Deployment:default/web", &web),
            Some("guestbook".into())
        );
        assert_eq!(
            argo_app_of("guestbook:apps/Deployment:default/other", &web),
            None
        );
        assert_eq!(argo_app_of("guestbook:/ConfigMap:default/web", &web), None);
        assert_eq!(argo_app_of("garbage", &web), None);
        // Cluster-scoped objects carry the app's destination namespace.
        let ns = ObjectRef {
            kind: "Namespace".into(),
            ..id("Namespace", "", "team")
        };
        assert_eq!(
            argo_app_of("argocd_app:/Namespace:dest/team", &ns),
            Some("argocd_app".into())
        );
        let live = json!({"metadata": {"annotations": {ARGO_TRACKING_ID: "guestbook:apps/Deployment:default/web"}}});
        assert_eq!(
            marked_claim(&live, &web, &owner()),
            Some(Claim::ArgoCd {
                app: "guestbook".into()
            })
        );
        // A copied annotation naming another object is no claim.
        let copied = json!({"metadata": {"annotations": {ARGO_TRACKING_ID: "guestbook:apps/Deployment:default/api"}}});
        assert_eq!(marked_claim(&copied, &web, &owner()), None);
    }

    #[test]
    fn the_instance_label_alone_is_not_argo() {
        let web = id("Deployment", "default", "web");
        let helm_chart = json!({"metadata": {"labels": {ARGO_INSTANCE_LABEL: "web"},
            "managedFields": [{"manager": "helm", "operation": "Update"}]}});
        assert_eq!(marked_claim(&helm_chart, &web, &owner()), None);
        let argo = json!({"metadata": {"labels": {ARGO_INSTANCE_LABEL: "web"},
            "managedFields": [{"manager": ARGO_MANAGER, "operation": "Apply"}]}});
        assert_eq!(
            marked_claim(&argo, &web, &owner()),
            Some(Claim::ArgoCd { app: "web".into() })
        );
    }

    #[test]
    fn other_flux_owners_are_named() {
        let live = json!({"metadata": {"labels": {
            "helm.toolkit.fluxcd.io/name": "podinfo",
            "helm.toolkit.fluxcd.io/namespace": "apps"}}});
        assert_eq!(
            marked_claim(&live, &id("ConfigMap", "apps", "x"), &owner())
                .map(|c| c.describe("Kustomization")),
            Some("HelmRelease apps/podinfo".into())
        );
    }

    #[test]
    fn foreign_appliers_leave_out_us_kubectl_updates_and_overrides() {
        let live = json!({"metadata": {"managedFields": [
            {"manager": "kustomize-controller", "operation": "Apply"},
            {"manager": "kubectl", "operation": "Apply"},
            {"manager": "kube-controller-manager", "operation": "Update"},
            {"manager": "team-tool", "operation": "Apply"},
            {"manager": "argocd-controller", "operation": "Apply"},
            {"manager": "argocd-controller", "operation": "Apply"}]}});
        assert_eq!(
            foreign_appliers(&live, &owner(), &["team-tool".into()]),
            vec!["argocd-controller".to_string()]
        );
        let mut ours = labelled("flux-system", "app");
        ours["metadata"]["managedFields"] = live["metadata"]["managedFields"].clone();
        assert!(foreign_appliers(&ours, &owner(), &[]).is_empty());
    }

    #[test]
    fn takeover_comes_from_git_or_the_owner_never_from_the_live_object() {
        let o = owner();
        let plain = json!({"metadata": {}});
        let asks = json!({"metadata": {"annotations": {"kustomize.toolkit.fluxcd.io/takeover": "enabled"}}});
        assert!(!takeover_allowed(&o, &plain, None));
        assert!(takeover_allowed(&o, &asks, None));
        assert!(takeover_allowed(&o, &plain, Some(&asks)));
    }
}
