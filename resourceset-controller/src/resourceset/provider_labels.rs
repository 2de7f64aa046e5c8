//! Which ResourceSets a provider event concerns. A ResourceSet reads a provider by name or by
//! label selector; when a provider's labels change (e.g. `environment: production` →
//! `staging`), the ResourceSets that selected it by its OLD labels must run too, to drop its
//! inputs and garbage-collect what they generated from them. The watch event carries only the
//! new object, so the labels each provider had when last seen are kept here.
//!
//! (Flux Operator reconciles ResourceSets on a change of a provider's exported inputs only; a
//! relabelled provider leaves the ResourceSet that selected it at its next interval.)

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use rflux_common::api::resourceset::ResourceSet;

type Labels = BTreeMap<String, String>;

/// Providers remembered at most; past it the memory starts afresh (a provider relabelled
/// right then reaches its former ResourceSets at their interval, as in Flux Operator).
const MAX_PROVIDERS: usize = 100_000;

/// The labels of each provider (namespace, name) when last seen.
#[derive(Debug, Default)]
pub(super) struct SeenLabels {
    seen: Mutex<HashMap<(String, String), Labels>>,
}

impl SeenLabels {
    /// Records `labels` as provider `ns/name`'s; returns the labels it had before when they
    /// differ (`None` for a provider seen for the first time or unchanged).
    pub(super) fn swap(&self, ns: &str, name: &str, labels: &Labels) -> Option<Labels> {
        let mut seen = match self.seen.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let key = (ns.to_string(), name.to_string());
        if seen.get(&key) == Some(labels) {
            return None;
        }
        if seen.len() >= MAX_PROVIDERS && !seen.contains_key(&key) {
            seen.clear();
        }
        seen.insert(key, labels.clone())
    }
}

/// Whether `rs` takes inputs from provider `name` with `labels` (by name or label selector).
pub(super) fn reads(rs: &ResourceSet, name: &str, labels: &Labels) -> bool {
    rs.spec
        .inputs_from()
        .iter()
        .any(|from| match (&from.name, &from.selector) {
            (Some(n), _) => n == name,
            (None, Some(sel)) => crate::offline::selects(sel, labels),
            _ => false,
        })
}

/// Whether a provider event concerns `rs`: it reads the provider now, or read it with the
/// labels the provider had `before`.
pub(super) fn concerns(
    rs: &ResourceSet,
    name: &str,
    labels: &Labels,
    before: Option<&Labels>,
) -> bool {
    reads(rs, name, labels) || before.is_some_and(|old| reads(rs, name, old))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(env: &str) -> Labels {
        [("environment".to_string(), env.to_string())].into()
    }

    fn rset(env: &str) -> ResourceSet {
        serde_json::from_value(json!({
            "apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet",
            "metadata": {"name": env, "namespace": "fleet"},
            "spec": {"inputsFrom": [{"selector": {"matchLabels": {"environment": env}}}],
                     "resourcesTemplate": "x"}
        }))
        .unwrap()
    }

    #[test]
    fn swap_returns_the_previous_labels_only_when_they_changed() {
        let seen = SeenLabels::default();
        assert_eq!(seen.swap("fleet", "spoke1", &labels("production")), None);
        assert_eq!(seen.swap("fleet", "spoke1", &labels("production")), None);
        assert_eq!(
            seen.swap("fleet", "spoke1", &labels("staging")),
            Some(labels("production"))
        );
        // Keyed by namespace and name.
        assert_eq!(seen.swap("other", "spoke1", &labels("dev")), None);
        assert_eq!(seen.swap("fleet", "spoke1", &labels("staging")), None);
    }

    #[test]
    fn a_relabelled_provider_concerns_the_old_and_the_new_resourceset() {
        let (production, staging, dev) = (rset("production"), rset("staging"), rset("dev"));
        let seen = SeenLabels::default();
        let now = labels("production");
        let before = seen.swap("fleet", "spoke1", &now);
        assert!(concerns(&production, "spoke1", &now, before.as_ref()));
        assert!(!concerns(&staging, "spoke1", &now, before.as_ref()));
        let now = labels("staging");
        let before = seen.swap("fleet", "spoke1", &now);
        assert!(concerns(&production, "spoke1", &now, before.as_ref()));
        assert!(concerns(&staging, "spoke1", &now, before.as_ref()));
        assert!(!concerns(&dev, "spoke1", &now, before.as_ref()));
        // The next event (e.g. its status) concerns only the new one again.
        let before = seen.swap("fleet", "spoke1", &now);
        assert!(!concerns(&production, "spoke1", &now, before.as_ref()));
        assert!(concerns(&staging, "spoke1", &now, before.as_ref()));
    }

    #[test]
    fn by_name_is_label_independent() {
        let rs: ResourceSet = serde_json::from_value(json!({
            "apiVersion": "fluxcd.controlplane.io/v1", "kind": "ResourceSet",
            "metadata": {"name": "a", "namespace": "fleet"},
            "spec": {"inputsFrom": [{"name": "spoke1"}], "resourcesTemplate": "x"}
        }))
        .unwrap();
        assert!(concerns(&rs, "spoke1", &Labels::new(), None));
        assert!(!concerns(&rs, "spoke2", &labels("production"), None));
    }
}
