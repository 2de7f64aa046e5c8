//! Names: every Argo CD annotation the spec (`argo-semantics.md`) describes on managed objects,
//! the Helm annotations Argo reads, and our own opt-in names.
//!
//! Our names live in our own domain, `rflux.dev`, on purpose:
//! - not `argocd.argoproj.io/*`: when Argo CD itself applies the Kustomization object, Argo
//!   reads its own annotations on it (a `sync-options` or `sync-wave` there would change how
//!   ARGO syncs the Kustomization);
//! - not `kustomize.toolkit.fluxcd.io/*`: that domain is Flux's, and a later Flux key could take
//!   the same name with another meaning.
//!
//! Flux's controller ignores all of these names, so a Kustomization that carries them stays valid
//! for Flux, where the Argo annotations of its objects stay inert.

// Argo CD annotations read on the objects of a sync (spec §1–§4).

/// The wave of an object or hook (§1.1): a Go `Atoi` integer, default 0.
pub const SYNC_WAVE: &str = "argocd.argoproj.io/sync-wave";
/// The hook types of an object (§2.1): a comma list.
pub const HOOK: &str = "argocd.argoproj.io/hook";
/// When a hook is deleted (§2.2): a comma list, default `BeforeHookCreation`.
pub const HOOK_DELETE_POLICY: &str = "argocd.argoproj.io/hook-delete-policy";
/// Per-object sync options (§4.5): a comma list of `Key=Value`.
pub const SYNC_OPTIONS: &str = "argocd.argoproj.io/sync-options";
/// Compare options (§4.6), for example `IgnoreExtraneous`.
pub const COMPARE_OPTIONS: &str = "argocd.argoproj.io/compare-options";
/// Argo's ownership mark (§6.1, §6.2).
pub const TRACKING_ID: &str = "argocd.argoproj.io/tracking-id";
/// The Argo installation that owns an object (§6.1).
pub const INSTALLATION_ID: &str = "argocd.argoproj.io/installation-id";
/// `"true"`: the object is left out of the health of the Application (§7.1).
pub const IGNORE_HEALTHCHECK: &str = "argocd.argoproj.io/ignore-healthcheck";
/// `"true"` on a Pod: health ignores `restartPolicy`; NOT honoured on hook Pods (§2.5).
pub const IGNORE_RESTART_POLICY: &str = "argocd.argoproj.io/ignore-restart-policy";
/// On an Application: the approval time of `Prune=confirm` / `Delete=confirm` (§4.5).
pub const DELETION_APPROVED: &str = "argocd.argoproj.io/deletion-approved";
/// The finalizer Argo puts on each hook it creates (§2.4); a finalizer, not an annotation.
pub const HOOK_FINALIZER: &str = "argocd.argoproj.io/hook-finalizer";
/// Argo's default instance label for label tracking (§6.1).
pub const APP_INSTANCE_LABEL: &str = "app.kubernetes.io/instance";

// Helm annotations Argo honours (§2.1, §1.1, §1.7).

/// Helm hook types, used when no Argo hook type is set.
pub const HELM_HOOK: &str = "helm.sh/hook";
/// Helm hook weight: the wave when `sync-wave` is absent or does not parse.
pub const HELM_HOOK_WEIGHT: &str = "helm.sh/hook-weight";
/// Helm hook delete policies, merged with Argo's.
pub const HELM_HOOK_DELETE_POLICY: &str = "helm.sh/hook-delete-policy";
/// `keep`: the object is not deleted with the Application.
pub const HELM_RESOURCE_POLICY: &str = "helm.sh/resource-policy";

// Our own names.

/// The controller feature gate (off by default): without it every name below is inert, and so
/// are the Argo annotations of the objects, as in Flux.
pub const FEATURE_GATE: &str = "ArgoSyncSemantics";
/// The per-Kustomization opt-in: [`OPT_IN_ENABLED`] or [`OPT_IN_DISABLED`] (the default).
pub const OPT_IN: &str = "rflux.dev/argo-semantics";
/// The value of [`OPT_IN`] that turns Argo semantics on.
pub const OPT_IN_ENABLED: &str = "enabled";
/// The value of [`OPT_IN`] that keeps Flux semantics (the same as no annotation).
pub const OPT_IN_DISABLED: &str = "disabled";
/// Application-level sync options on the Kustomization (Argo's `spec.syncPolicy.syncOptions`),
/// as a comma list: `CreateNamespace=true`, `PruneLast=true`, `ServerSideApply=true`.
pub const APP_SYNC_OPTIONS: &str = "rflux.dev/argo-sync-options";
/// Argo's `spec.syncPolicy.managedNamespaceMetadata` on the Kustomization, as JSON:
/// `{"labels": {..}, "annotations": {..}}`. Used with `CreateNamespace=true` only.
pub const MANAGED_NAMESPACE_METADATA: &str = "rflux.dev/argo-managed-namespace-metadata";
