//! Sync options (§4.5): per object (`argocd.argoproj.io/sync-options`), and at the
//! Kustomization level (our `rflux.dev/*` annotations: the opt-in, Application-level options,
//! `managedNamespaceMetadata`).
//!
//! Argo matches each comma-list item as an exact string (`Prune=false`; `prune=false` or
//! `Prune = false` mean nothing) and ignores unknown items; we do the same. Each known item is
//! honoured, mapped onto an rflux mechanism, or refused (an error: ignoring it would do
//! something other than what the object asks).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::annotations::{annotation_csv, csv};
use super::error::{ArgoError, quote};
use super::keys::{
    APP_SYNC_OPTIONS, MANAGED_NAMESPACE_METADATA, OPT_IN, OPT_IN_DISABLED, OPT_IN_ENABLED,
    SYNC_OPTIONS,
};

/// The sync options of one object, after mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncOptions {
    /// `false` with `Prune=false` (read on the live object): never pruned, like
    /// `kustomize.toolkit.fluxcd.io/prune: disabled`.
    pub prune: bool,
    /// `PruneLast=true` (live object): pruned in an extra wave after every Sync wave (§1.3).
    pub prune_last: bool,
    /// `false` with `Delete=false` (live object): kept when the Kustomization is deleted.
    pub delete: bool,
    /// `Replace=true` or `Force=true` (desired object), mapped onto our force path (like
    /// `kustomize.toolkit.fluxcd.io/force: enabled`: recreate on immutable-field errors).
    pub force: bool,
    /// `SkipDryRunOnMissingResource=true` (desired object): no dry-run when the kind is not
    /// known to the API server yet.
    pub skip_dry_run_on_missing_resource: bool,
}

impl Default for SyncOptions {
    fn default() -> Self {
        SyncOptions {
            prune: true,
            prune_last: false,
            delete: true,
            force: false,
            skip_dry_run_on_missing_resource: false,
        }
    }
}

/// Which copy of an object the options are read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The desired object (apply): every refused option is an error.
    Desired,
    /// The live object (prune, deletion): only the refused prune/delete options are errors.
    Live,
}

/// What we do with one per-object item.
enum Verdict {
    Set(fn(&mut SyncOptions)),
    /// Known, and already what rflux does (or Argo's default).
    Accept,
    /// Known, not implemented; `live` says whether it matters on the live side.
    Refuse {
        reason: &'static str,
        live: bool,
    },
    /// An Application-level option: Argo ignores it on objects.
    AppOnly,
}

/// Option names that Argo reads only on the Application.
const APP_ONLY: &[&str] = &[
    "CreateNamespace=",
    "ApplyOutOfSyncOnly=",
    "PrunePropagationPolicy=",
    "RespectIgnoreDifferences=",
    "FailOnSharedResource=",
];

fn object_verdict(item: &str) -> Option<Verdict> {
    use Verdict::*;
    Some(match item {
        "Prune=false" => Set(|o| o.prune = false),
        "Prune=confirm" => Refuse {
            reason: "prune confirmation is not implemented; use Prune=false, or the \
                     Kustomization's kustomize.toolkit.fluxcd.io/prune-confirm guard",
            live: true,
        },
        "PruneLast=true" => Set(|o| o.prune_last = true),
        "Delete=false" => Set(|o| o.delete = false),
        "Delete=confirm" => Refuse {
            reason: "deletion confirmation is not implemented; use Delete=false",
            live: true,
        },
        "Replace=true" | "Force=true" => Set(|o| o.force = true),
        "SkipDryRunOnMissingResource=true" => Set(|o| o.skip_dry_run_on_missing_resource = true),
        "ServerSideApply=false" => Refuse {
            reason: "rflux applies with server-side apply only",
            live: false,
        },
        "ClientSideApplyMigration=false" => Refuse {
            reason: "the controller always takes over the fields of kubectl's client-side apply \
                     (see --override-manager); this cannot be turned off per object",
            live: false,
        },
        // Argo's defaults, or already what the controller does (server-side apply; no strict
        // field validation is asked for, so `Validate=false` changes nothing).
        "Prune=true"
        | "PruneLast=false"
        | "Delete=true"
        | "Replace=false"
        | "Force=false"
        | "SkipDryRunOnMissingResource=false"
        | "ServerSideApply=true"
        | "Validate=false"
        | "Validate=true"
        | "ClientSideApplyMigration=true" => Accept,
        _ if APP_ONLY.iter().any(|p| item.starts_with(p)) => AppOnly,
        _ => return None,
    })
}

/// The sync options of an object (`label` names it in errors and notes).
pub fn object_sync_options(
    obj: &Value,
    side: Side,
    label: &str,
    notes: &mut Vec<String>,
) -> Result<SyncOptions, ArgoError> {
    let mut options = SyncOptions::default();
    for item in annotation_csv(obj, SYNC_OPTIONS) {
        match object_verdict(item) {
            Some(Verdict::Set(set)) => set(&mut options),
            Some(Verdict::Accept) => {}
            Some(Verdict::Refuse { reason, live }) => {
                if side == Side::Desired || live {
                    return Err(ArgoError::RefusedSyncOption {
                        object: label.to_string(),
                        option: quote(item),
                        reason,
                    });
                }
            }
            Some(Verdict::AppOnly) => notes.push(format!(
                "{SYNC_OPTIONS}: {:?} is an Application-level option; ignored on an object, \
                 as Argo does",
                quote(item)
            )),
            None => notes.push(format!(
                "{SYNC_OPTIONS}: {:?} is not a known sync option; ignored as Argo does",
                quote(item)
            )),
        }
    }
    Ok(options)
}

/// Argo's `managedNamespaceMetadata`: what the created namespace carries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceMetadata {
    /// Labels of the namespace.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations of the namespace.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// The Kustomization-level settings of an opted-in Kustomization.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArgoSettings {
    /// `CreateNamespace=true`: the target namespace is created (§4.7).
    pub create_namespace: bool,
    /// `PruneLast=true` for every pruned object (§1.3).
    pub prune_last: bool,
    /// What the created namespace carries; used with `create_namespace` only, as in Argo.
    pub managed_namespace_metadata: Option<NamespaceMetadata>,
}

/// Reads the Kustomization's annotations. `Ok(None)`: Flux semantics, either because the
/// feature gate is off (then nothing is read, even invalid values), or because the opt-in is
/// absent or `disabled`.
pub fn settings(
    gate_enabled: bool,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<ArgoSettings>, ArgoError> {
    if !gate_enabled {
        return Ok(None);
    }
    let Some(annotations) = annotations else {
        return Ok(None);
    };
    match annotations.get(OPT_IN).map(String::as_str) {
        None | Some(OPT_IN_DISABLED) => return Ok(None),
        Some(OPT_IN_ENABLED) => {}
        Some(other) => {
            return Err(ArgoError::InvalidAnnotation {
                key: OPT_IN,
                value: quote(other),
                expected: format!("use {OPT_IN_ENABLED} or {OPT_IN_DISABLED}"),
            });
        }
    }
    let mut out = ArgoSettings::default();
    if let Some(value) = annotations.get(APP_SYNC_OPTIONS) {
        for item in csv(value) {
            match item {
                "CreateNamespace=true" => out.create_namespace = true,
                "PruneLast=true" => out.prune_last = true,
                "CreateNamespace=false" | "PruneLast=false" | "ServerSideApply=true" => {}
                other => {
                    return Err(ArgoError::RefusedAppOption {
                        key: APP_SYNC_OPTIONS,
                        option: quote(other),
                        reason: app_refusal(other),
                    });
                }
            }
        }
    }
    if let Some(value) = annotations.get(MANAGED_NAMESPACE_METADATA) {
        out.managed_namespace_metadata = Some(namespace_metadata(value)?);
    }
    Ok(Some(out))
}

/// Parses [`MANAGED_NAMESPACE_METADATA`]: a JSON object (serde would also take an array for a
/// struct, so the shape is checked first).
fn namespace_metadata(value: &str) -> Result<NamespaceMetadata, ArgoError> {
    let invalid = |why: String| ArgoError::InvalidAnnotation {
        key: MANAGED_NAMESPACE_METADATA,
        value: quote(value),
        expected: format!(
            "a JSON object {{\"labels\": {{..}}, \"annotations\": {{..}}}} of strings ({why})"
        ),
    };
    let parsed: Value = serde_json::from_str(value).map_err(|e| invalid(e.to_string()))?;
    if !parsed.is_object() {
        return Err(invalid("not an object".into()));
    }
    serde_json::from_value(parsed).map_err(|e| invalid(e.to_string()))
}

/// Why a Kustomization-level option is refused, and what to use instead.
fn app_refusal(item: &str) -> &'static str {
    match item.split_once('=').map_or(item, |(k, _)| k) {
        "Prune" => "use the Kustomization's spec.prune, or Prune=false on objects",
        "Replace" | "Force" => "use the Kustomization's spec.force, or Replace=true on objects",
        "ServerSideApply" => "rflux applies with server-side apply only",
        "Validate" => "the controller asks for no strict field validation already",
        "SkipDryRunOnMissingResource" | "Delete" => "set it on the objects instead",
        "ApplyOutOfSyncOnly" => "the controller applies only drifted objects already",
        "RespectIgnoreDifferences" => {
            "use the Kustomization's spec.ignore (it already keeps \
                                       live values of ignored fields)"
        }
        _ => "not supported at the Kustomization level",
    }
}

#[cfg(test)]
#[path = "options_tests.rs"]
mod tests;
