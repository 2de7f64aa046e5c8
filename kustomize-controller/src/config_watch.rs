//! Config watchers, like Flux's: ConfigMaps and Secrets that carry the
//! `--watch-configs-label-selector` label (`reconcile.fluxcd.io/watch=Enabled`) reconcile at
//! once the Kustomizations that use them (`postBuild.substituteFrom`, `kubeConfig` and
//! `decryption` references) when they change. `DisableConfigWatchers=true` turns this off.

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use rflux_common::api::kustomization::{Kustomization, SubstituteKind};

/// The two kinds watched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigKind {
    ConfigMap,
    Secret,
}

impl ConfigKind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKind::ConfigMap => "ConfigMap",
            ConfigKind::Secret => "Secret",
        }
    }
}

/// Whether `ks` refers to the `kind` named `name` in its own namespace (Flux's indexes: a
/// ConfigMap through `kubeConfig.configMapRef` or a ConfigMap `substituteFrom`; a Secret
/// through `decryption.secretRef`, `kubeConfig.secretRef` or a Secret `substituteFrom`).
pub fn uses(ks: &Kustomization, kind: ConfigKind, name: &str) -> bool {
    let spec = &ks.spec;
    let from = spec
        .post_build
        .as_ref()
        .and_then(|p| p.substitute_from.as_ref())
        .into_iter()
        .flatten()
        .any(|r| {
            r.name == name
                && match kind {
                    ConfigKind::ConfigMap => r.kind == SubstituteKind::ConfigMap,
                    ConfigKind::Secret => r.kind == SubstituteKind::Secret,
                }
        });
    let kube_config = spec.kube_config.as_ref();
    from || match kind {
        ConfigKind::ConfigMap => kube_config
            .and_then(|k| k.config_map_ref.as_ref())
            .is_some_and(|r| r.name == name),
        ConfigKind::Secret => {
            kube_config
                .and_then(|k| k.secret_ref.as_ref())
                .is_some_and(|r| r.name == name)
                || spec
                    .decryption
                    .as_ref()
                    .and_then(|d| d.secret_ref.as_ref())
                    .is_some_and(|r| r.name == name)
        }
    }
}

/// The Kustomizations of `namespace` that use the `kind` named `name`.
pub fn config_dependents<'a>(
    kind: ConfigKind,
    namespace: &str,
    name: &str,
    kustomizations: impl IntoIterator<Item = &'a Kustomization>,
) -> Vec<ObjectRef<Kustomization>> {
    kustomizations
        .into_iter()
        .filter(|ks| ks.namespace().as_deref() == Some(namespace) && uses(ks, kind, name))
        .map(ObjectRef::from_obj)
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ks(ns: &str, name: &str, spec_extra: serde_json::Value) -> Kustomization {
        let mut spec = json!({"interval": "1m", "prune": true,
            "sourceRef": {"kind": "GitRepository", "name": "r"}});
        if let (Some(s), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
            for (k, v) in extra {
                s.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}))
        .unwrap()
    }

    #[test]
    fn references_are_matched_by_kind_name_and_namespace() {
        let all = [
            ks(
                "apps",
                "vars",
                json!({"postBuild": {"substituteFrom": [
                {"kind": "ConfigMap", "name": "settings"}, {"kind": "Secret", "name": "creds"}]}}),
            ),
            ks(
                "apps",
                "remote",
                json!({"kubeConfig": {"secretRef": {"name": "kc"}}}),
            ),
            ks(
                "apps",
                "sops",
                json!({"decryption": {"provider": "sops", "secretRef": {"name": "age"}}}),
            ),
            ks(
                "other",
                "vars",
                json!({"postBuild": {"substituteFrom": [
                {"kind": "ConfigMap", "name": "settings"}]}}),
            ),
        ];
        let names = |kind, ns, name| -> Vec<String> {
            config_dependents(kind, ns, name, all.iter())
                .into_iter()
                .map(|r| r.name)
                .collect()
        };
        assert_eq!(
            names(ConfigKind::ConfigMap, "apps", "settings"),
            vec!["vars"]
        );
        assert_eq!(names(ConfigKind::Secret, "apps", "creds"), vec!["vars"]);
        // A ConfigMap is not a Secret of the same name.
        assert!(names(ConfigKind::Secret, "apps", "settings").is_empty());
        assert_eq!(names(ConfigKind::Secret, "apps", "kc"), vec!["remote"]);
        assert_eq!(names(ConfigKind::Secret, "apps", "age"), vec!["sops"]);
        assert_eq!(
            names(ConfigKind::ConfigMap, "other", "settings"),
            vec!["vars"]
        );
        assert!(names(ConfigKind::ConfigMap, "apps", "unused").is_empty());
    }
}
