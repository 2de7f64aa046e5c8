//! The mass-deletion guard (opt-in, ours): a revision that would prune more than a configured
//! share of the inventory at once (an empty directory pushed by mistake, a broken path) stops
//! before anything is applied or deleted, until someone confirms that revision. Flux and
//! Argo CD both prune everything in that case.
//!
//! - `kustomize.toolkit.fluxcd.io/prune-limit: "50%"` (a share of the inventory) or `"20"` (a
//!   number of objects) on the Kustomization turns the guard on;
//! - `kustomize.toolkit.fluxcd.io/prune-confirm: <revision>` lets that one revision through.

use rflux_common::api::kustomization::ResourceInventory;
use rflux_common::runtime::conditions::READY;
use rflux_common::runtime::{Severity, StageError};
use serde_json::Value;

use crate::inventory;
use crate::ssa::{ObjectRef, Owner};

/// The annotation that turns the guard on.
pub const LIMIT_SUFFIX: &str = "prune-limit";
/// The annotation that confirms one revision.
pub const CONFIRM_SUFFIX: &str = "prune-confirm";
/// The Ready reason while a revision waits for confirmation (ours).
pub const PRUNE_LIMIT_REASON: &str = "PruneLimitExceeded";

/// A parsed `prune-limit`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    /// At most this share (0–100 %) of the inventory.
    Percent(f64),
    /// At most this many objects.
    Count(usize),
}

/// Parses `"50%"` or `"20"`.
pub fn parse_limit(v: &str) -> Result<Limit, String> {
    let v = v.trim();
    if let Some(p) = v.strip_suffix('%') {
        match p.trim().parse::<f64>() {
            Ok(p) if (0.0..=100.0).contains(&p) => Ok(Limit::Percent(p)),
            _ => Err(format!(
                "invalid {LIMIT_SUFFIX} {v:?}: expected 0%–100% or a count"
            )),
        }
    } else {
        v.parse::<usize>()
            .map(Limit::Count)
            .map_err(|_| format!("invalid {LIMIT_SUFFIX} {v:?}: expected 0%–100% or a count"))
    }
}

/// Whether pruning `stale` of `total` objects goes past `limit`.
pub fn exceeds(limit: Limit, stale: usize, total: usize) -> bool {
    match limit {
        Limit::Count(n) => stale > n,
        Limit::Percent(p) => total > 0 && (stale as f64) * 100.0 > p * (total as f64),
    }
}

/// Checks the objects a revision would apply against the inventory. `annotations` are the
/// Kustomization's; nothing to check without a limit, without `prune` or an inventory.
pub fn check(
    owner: &Owner,
    annotations: &std::collections::BTreeMap<String, String>,
    prune: bool,
    old: Option<&ResourceInventory>,
    objects: &[Value],
    revision: &str,
) -> Result<(), StageError> {
    let Some(raw) = annotations.get(&owner.key(LIMIT_SUFFIX)) else {
        return Ok(());
    };
    let Some(old) = old.filter(|o| prune && !o.entries.is_empty()) else {
        return Ok(());
    };
    let misconfigured =
        |m: String| StageError::new(Severity::Stalling, READY, PRUNE_LIMIT_REASON, m);
    let limit = parse_limit(raw).map_err(misconfigured)?;
    let ids: Vec<ObjectRef> = objects
        .iter()
        // The same identity apply gives the prepared object (prepare keeps kind, name and
        // namespace).
        .filter_map(|o| ObjectRef::from_value(o).ok())
        .collect();
    let stale = inventory::diff(old, &inventory::build(ids.iter()))
        .map_err(|e| misconfigured(e.to_string()))?;
    if !exceeds(limit, stale.len(), old.entries.len()) {
        return Ok(());
    }
    if annotations
        .get(&owner.key(CONFIRM_SUFFIX))
        .map(String::as_str)
        == Some(revision)
    {
        return Ok(());
    }
    let sample: Vec<String> = stale.iter().take(5).map(ObjectRef::subject).collect();
    Err(StageError::new(
        Severity::Misconfigured,
        READY,
        PRUNE_LIMIT_REASON,
        format!(
            "revision {revision} would prune {} of {} objects ({}{}), more than {}: {raw}; nothing was applied or deleted. To go ahead, annotate this Kustomization with '{}: {revision}'",
            stale.len(),
            old.entries.len(),
            sample.join(", "),
            if stale.len() > sample.len() {
                ", …"
            } else {
                ""
            },
            owner.key(LIMIT_SUFFIX),
            owner.key(CONFIRM_SUFFIX),
        ),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    use crate::ssa::owner::test_owner as owner;

    fn cm(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "apps"}})
    }

    fn inventory_of(names: &[&str]) -> ResourceInventory {
        let ids: Vec<ObjectRef> = names
            .iter()
            .map(|n| ObjectRef::from_value(&cm(n)).unwrap())
            .collect();
        inventory::build(ids.iter())
    }

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (format!("kustomize.toolkit.fluxcd.io/{k}"), v.to_string()))
            .collect()
    }

    #[test]
    fn limits_parse_as_shares_or_counts() {
        assert_eq!(parse_limit("50%"), Ok(Limit::Percent(50.0)));
        assert_eq!(parse_limit(" 20 "), Ok(Limit::Count(20)));
        assert!(parse_limit("150%").is_err());
        assert!(parse_limit("-1").is_err());
        assert!(parse_limit("half").is_err());
        assert!(exceeds(Limit::Percent(50.0), 6, 10));
        assert!(!exceeds(Limit::Percent(50.0), 5, 10));
        assert!(exceeds(Limit::Count(2), 3, 100));
        assert!(!exceeds(Limit::Count(2), 2, 3));
    }

    #[test]
    fn an_empty_revision_stops_until_that_revision_is_confirmed() {
        let old = inventory_of(&["a", "b", "c", "d"]);
        let limit = ann(&[("prune-limit", "50%")]);
        let e = check(&owner(), &limit, true, Some(&old), &[], "main@sha1:abc").unwrap_err();
        assert_eq!(e.reason, PRUNE_LIMIT_REASON);
        assert_eq!(e.severity, Severity::Misconfigured);
        assert!(
            e.message.contains("would prune 4 of 4 objects"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("prune-confirm: main@sha1:abc"),
            "{}",
            e.message
        );
        // Confirming another revision does not count.
        let other = ann(&[("prune-limit", "50%"), ("prune-confirm", "main@sha1:old")]);
        assert!(check(&owner(), &other, true, Some(&old), &[], "main@sha1:abc").is_err());
        let confirmed = ann(&[("prune-limit", "50%"), ("prune-confirm", "main@sha1:abc")]);
        assert!(check(&owner(), &confirmed, true, Some(&old), &[], "main@sha1:abc").is_ok());
    }

    #[test]
    fn small_prunes_and_unguarded_kustomizations_go_through() {
        let old = inventory_of(&["a", "b", "c", "d"]);
        let limit = ann(&[("prune-limit", "50%")]);
        let kept = [cm("a"), cm("b"), cm("c")];
        assert!(check(&owner(), &limit, true, Some(&old), &kept, "r").is_ok());
        // Off without the annotation, without prune, or without an inventory.
        assert!(check(&owner(), &BTreeMap::new(), true, Some(&old), &[], "r").is_ok());
        assert!(check(&owner(), &limit, false, Some(&old), &[], "r").is_ok());
        assert!(check(&owner(), &limit, true, None, &[], "r").is_ok());
        // A bad limit stalls.
        let bad = ann(&[("prune-limit", "lots")]);
        let e = check(&owner(), &bad, true, Some(&old), &[], "r").unwrap_err();
        assert_eq!(e.severity, Severity::Stalling);
    }
}
