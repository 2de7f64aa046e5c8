//! Hooks (§2): sync phases, hook types (Argo's and Helm's), delete policies, hook names.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

use super::annotations::{annotation, annotation_csv, csv};
use super::keys::{HELM_HOOK, HELM_HOOK_DELETE_POLICY, HOOK, HOOK_DELETE_POLICY};

/// A sync phase, in Argo's order (§1.1): `PreSync < Sync < PostSync < SyncFail`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Before any Sync-phase task.
    PreSync,
    /// The ordinary objects, and `Sync` hooks.
    Sync,
    /// After every Sync-phase task succeeded and is healthy.
    PostSync,
    /// Only when the sync fails; all at once, waves ignored (§1.6).
    SyncFail,
}

impl Phase {
    /// The name Argo uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::PreSync => "PreSync",
            Phase::Sync => "Sync",
            Phase::PostSync => "PostSync",
            Phase::SyncFail => "SyncFail",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A known hook type (§2.1). Values are case-sensitive; unknown values are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookType {
    /// Runs in the PreSync phase.
    PreSync,
    /// Runs in the Sync phase.
    Sync,
    /// Runs in the PostSync phase.
    PostSync,
    /// Runs when the sync fails.
    SyncFail,
    /// Never applied, when it is the only type.
    Skip,
    /// Application deletion, before the objects go: not a sync phase.
    PreDelete,
    /// Application deletion, after the objects are gone: not a sync phase.
    PostDelete,
}

impl HookType {
    /// Parses an Argo hook type.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "PreSync" => HookType::PreSync,
            "Sync" => HookType::Sync,
            "PostSync" => HookType::PostSync,
            "SyncFail" => HookType::SyncFail,
            "Skip" => HookType::Skip,
            "PreDelete" => HookType::PreDelete,
            "PostDelete" => HookType::PostDelete,
            _ => return None,
        })
    }

    /// Maps a Helm hook type the way Argo does (§2.1); other Helm types (`test`,
    /// `pre-rollback`, `crd-install`, ...) give `None`.
    pub fn from_helm(text: &str) -> Option<Self> {
        Some(match text {
            "pre-install" | "pre-upgrade" => HookType::PreSync,
            "post-install" | "post-upgrade" => HookType::PostSync,
            "pre-delete" => HookType::PreDelete,
            "post-delete" => HookType::PostDelete,
            _ => return None,
        })
    }

    /// The sync phase this type runs in, if it is one.
    pub fn phase(self) -> Option<Phase> {
        match self {
            HookType::PreSync => Some(Phase::PreSync),
            HookType::Sync => Some(Phase::Sync),
            HookType::PostSync => Some(Phase::PostSync),
            HookType::SyncFail => Some(Phase::SyncFail),
            HookType::Skip | HookType::PreDelete | HookType::PostDelete => None,
        }
    }
}

/// When a hook is deleted (§2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeletePolicy {
    /// A live hook of the same name is deleted before the hook is created (the default).
    BeforeHookCreation,
    /// Deleted when the whole operation succeeds.
    HookSucceeded,
    /// Deleted when the operation fails or is terminated.
    HookFailed,
}

impl DeletePolicy {
    /// Parses an Argo policy name.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "BeforeHookCreation" => DeletePolicy::BeforeHookCreation,
            "HookSucceeded" => DeletePolicy::HookSucceeded,
            "HookFailed" => DeletePolicy::HookFailed,
            _ => return None,
        })
    }

    /// Parses a Helm policy name (§2.1).
    pub fn from_helm(text: &str) -> Option<Self> {
        Some(match text {
            "before-hook-creation" => DeletePolicy::BeforeHookCreation,
            "hook-succeeded" => DeletePolicy::HookSucceeded,
            "hook-failed" => DeletePolicy::HookFailed,
            _ => return None,
        })
    }
}

/// What a hook is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hook {
    /// Its known types, Argo's when any is set, else Helm's mapped ones.
    pub types: Vec<HookType>,
    /// The sync phases it runs in (no duplicates, in phase order); empty: never applied.
    pub phases: Vec<Phase>,
    /// Its delete policies (never empty: `BeforeHookCreation` when none is valid).
    pub delete_policies: Vec<DeletePolicy>,
    /// The types come from `helm.sh/hook`.
    pub from_helm: bool,
}

/// How an object takes part in a sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// An ordinary (managed) object: one Sync-phase task, inventory, prune.
    Resource,
    /// A hook: one task per phase; never in the inventory, never pruned.
    Hook(Hook),
    /// `hook: Skip` alone: never applied, no status.
    Skip,
}

/// An object's role (§2.1), with messages for the values Argo ignores.
///
/// - Argo types: the known values of `argocd.argoproj.io/hook` (comma list, trimmed, no
///   duplicates). When none is known, the Helm types of `helm.sh/hook` are used.
/// - `Skip` only when it is the only known type.
/// - A hook: the Argo annotation is present (whatever its values), or else `helm.sh/hook` is
///   present and is not exactly `crd-install`.
pub fn classify(obj: &Value, notes: &mut Vec<String>) -> Role {
    let argo = annotation(obj, HOOK);
    let mut types: Vec<HookType> = Vec::new();
    for item in argo.map(csv).unwrap_or_default() {
        match HookType::parse(item) {
            Some(t) => types.push(t),
            None => notes.push(ignored(HOOK, item)),
        }
    }
    let helm = annotation(obj, HELM_HOOK);
    let from_helm = types.is_empty() && helm.is_some();
    if types.is_empty() {
        for item in helm.map(csv).unwrap_or_default() {
            match HookType::from_helm(item) {
                Some(t) if !types.contains(&t) => types.push(t),
                Some(_) => {}
                None if item == "crd-install" => {}
                None => notes.push(format!(
                    "{HELM_HOOK}: {:?} has no Argo equivalent; the hook never runs",
                    super::error::quote(item)
                )),
            }
        }
    }
    if types == [HookType::Skip] {
        return Role::Skip;
    }
    let is_hook = match argo {
        Some(_) => true,
        None => helm.is_some_and(|v| v != "crd-install"),
    };
    if !is_hook {
        return Role::Resource;
    }
    let phases: BTreeSet<Phase> = types.iter().filter_map(|t| t.phase()).collect();
    Role::Hook(Hook {
        types,
        phases: phases.into_iter().collect(),
        delete_policies: delete_policies(obj, notes),
        from_helm,
    })
}

/// A hook's delete policies (§2.2): Argo's and Helm's merged, `BeforeHookCreation` when
/// neither gives a valid one.
pub fn delete_policies(obj: &Value, notes: &mut Vec<String>) -> Vec<DeletePolicy> {
    let mut set = BTreeSet::new();
    for item in annotation_csv(obj, HOOK_DELETE_POLICY) {
        match DeletePolicy::parse(item) {
            Some(p) => {
                set.insert(p);
            }
            None => notes.push(ignored(HOOK_DELETE_POLICY, item)),
        }
    }
    for item in annotation_csv(obj, HELM_HOOK_DELETE_POLICY) {
        match DeletePolicy::from_helm(item) {
            Some(p) => {
                set.insert(p);
            }
            None => notes.push(ignored(HELM_HOOK_DELETE_POLICY, item)),
        }
    }
    if set.is_empty() {
        set.insert(DeletePolicy::BeforeHookCreation);
    }
    set.into_iter().collect()
}

fn ignored(key: &str, item: &str) -> String {
    format!(
        "{key}: {:?} is not a known value; ignored as Argo does",
        super::error::quote(item)
    )
}

/// What a hook without `metadata.name` is named (§2.3): one sync operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookNaming {
    /// The revision synced; its first 7 characters are used. Pass the commit, not Flux's
    /// `<ref>@sha1:<commit>` form (see [`commit_of_revision`]).
    pub revision: String,
    /// When the operation started, in Unix seconds (UTC); kept across its retries.
    pub started_at_unix: i64,
}

/// A hook's name in one phase (§2.3): its `metadata.name` when set, else
/// `<generateName><suffix>` with suffix = lowercase(`<first 7 of revision>-<phase>-<start>`).
/// The same inputs always give the same name, so the steps of one operation and its retries
/// never create a hook twice.
pub fn hook_name(obj: &Value, phase: Phase, naming: &HookNaming) -> String {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !name.is_empty() {
        return name.to_string();
    }
    let prefix = obj
        .pointer("/metadata/generateName")
        .and_then(Value::as_str)
        .unwrap_or("");
    let revision: String = naming.revision.chars().take(7).collect();
    let suffix = format!("{revision}-{phase}-{}", naming.started_at_unix).to_lowercase();
    format!("{prefix}{suffix}")
}

/// The commit part of a Flux revision: `main@sha1:1a2b…` and `sha1:1a2b…` give `1a2b…`;
/// a revision without `:` is returned as is.
pub fn commit_of_revision(revision: &str) -> &str {
    match revision.rsplit_once(':') {
        Some((_, commit)) => commit,
        None => revision,
    }
}

#[cfg(test)]
#[path = "hook_tests.rs"]
mod tests;
