//! Unit tests of `hook.rs` (§2.1–§2.3).

use super::*;
use serde_json::json;

fn obj(annotations: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "j", "annotations": annotations}})
}

fn role(annotations: Value) -> Role {
    classify(&obj(annotations), &mut Vec::new())
}

fn hook(annotations: Value) -> Hook {
    match role(annotations) {
        Role::Hook(h) => h,
        other => panic!("not a hook: {other:?}"),
    }
}

#[test]
fn no_annotation_is_a_resource() {
    assert_eq!(role(json!({})), Role::Resource);
    assert_eq!(
        classify(&json!({"kind": "Job"}), &mut Vec::new()),
        Role::Resource
    );
}

#[test]
fn one_phase_per_known_type() {
    assert_eq!(hook(json!({HOOK: "PreSync"})).phases, vec![Phase::PreSync]);
    assert_eq!(hook(json!({HOOK: "Sync"})).phases, vec![Phase::Sync]);
    assert_eq!(
        hook(json!({HOOK: "SyncFail"})).phases,
        vec![Phase::SyncFail]
    );
}

#[test]
fn several_phases_are_deduplicated_and_ordered() {
    // §1.2: "A hook with several types (PreSync,PostSync) yields one task per phase
    // (duplicates removed)".
    let h = hook(json!({HOOK: " PostSync, PreSync ,PostSync"}));
    assert_eq!(h.phases, vec![Phase::PreSync, Phase::PostSync]);
    assert_eq!(h.types, vec![HookType::PostSync, HookType::PreSync]);
}

#[test]
fn skip_only_when_it_is_the_only_type() {
    // §2.1: "only if Skip is the ONLY value; with other values, Skip is ignored".
    assert_eq!(role(json!({HOOK: "Skip"})), Role::Skip);
    assert_eq!(role(json!({HOOK: "Skip, Skip"})), Role::Skip);
    let h = hook(json!({HOOK: "Skip,PreSync"}));
    assert_eq!(h.phases, vec![Phase::PreSync]);
    // Unknown values are ignored first, so Skip is then the only type.
    let mut notes = Vec::new();
    assert_eq!(
        classify(&obj(json!({HOOK: "Skip,Bogus"})), &mut notes),
        Role::Skip
    );
    assert_eq!(notes.len(), 1, "{notes:?}");
}

#[test]
fn unknown_or_delete_only_types_make_a_hook_that_never_syncs() {
    // §2.1: present but no known sync phase: a hook with no phase, not applied.
    for value in ["PreDelete", "PostDelete", "", "presync", "Bogus"] {
        let h = hook(json!({HOOK: value}));
        assert!(h.phases.is_empty(), "{value:?}");
    }
    let mut notes = Vec::new();
    classify(&obj(json!({HOOK: "presync"})), &mut notes);
    assert!(notes[0].contains("\"presync\""), "{notes:?}");
}

#[test]
fn helm_hooks_map_when_no_argo_type_is_set() {
    let h = hook(json!({HELM_HOOK: "pre-install,pre-upgrade"}));
    assert_eq!(h.phases, vec![Phase::PreSync]);
    assert!(h.from_helm);
    let h = hook(json!({HELM_HOOK: "post-install"}));
    assert_eq!(h.phases, vec![Phase::PostSync]);
    let h = hook(json!({HELM_HOOK: "pre-delete"}));
    assert_eq!(h.types, vec![HookType::PreDelete]);
    assert!(h.phases.is_empty());
    // Other Helm types: a hook that never runs.
    let mut notes = Vec::new();
    let r = classify(&obj(json!({HELM_HOOK: "test"})), &mut notes);
    assert!(matches!(r, Role::Hook(ref h) if h.phases.is_empty()));
    assert_eq!(notes.len(), 1);
}

#[test]
fn helm_crd_install_is_not_a_hook() {
    assert_eq!(role(json!({HELM_HOOK: "crd-install"})), Role::Resource);
    // Only the exact value: with another type it is a hook.
    assert_eq!(
        hook(json!({HELM_HOOK: "crd-install,pre-install"})).phases,
        vec![Phase::PreSync]
    );
}

#[test]
fn argo_types_win_over_helm_types() {
    let h = hook(json!({HOOK: "Sync", HELM_HOOK: "pre-install"}));
    assert_eq!(h.phases, vec![Phase::Sync]);
    assert!(!h.from_helm);
    // An Argo annotation with no known type falls back to Helm's types.
    let h = hook(json!({HOOK: "Bogus", HELM_HOOK: "pre-install"}));
    assert_eq!(h.phases, vec![Phase::PreSync]);
}

#[test]
fn delete_policy_defaults_to_before_hook_creation() {
    let h = hook(json!({HOOK: "PreSync"}));
    assert_eq!(h.delete_policies, vec![DeletePolicy::BeforeHookCreation]);
    // Only unknown values: still the default.
    let h = hook(json!({HOOK: "PreSync", HOOK_DELETE_POLICY: "hook-succeeded, Never"}));
    assert_eq!(h.delete_policies, vec![DeletePolicy::BeforeHookCreation]);
}

#[test]
fn hook_succeeded_alone_drops_the_default() {
    // §2.2: "giving only HookSucceeded removes the implicit BeforeHookCreation".
    let h = hook(json!({HOOK: "PreSync", HOOK_DELETE_POLICY: "HookSucceeded"}));
    assert_eq!(h.delete_policies, vec![DeletePolicy::HookSucceeded]);
    let h = hook(json!({HOOK: "PreSync", HOOK_DELETE_POLICY: "HookSucceeded,BeforeHookCreation"}));
    assert_eq!(
        h.delete_policies,
        vec![
            DeletePolicy::BeforeHookCreation,
            DeletePolicy::HookSucceeded
        ]
    );
}

#[test]
fn argo_and_helm_delete_policies_merge() {
    // §2.1: "delete policies from both are merged", even when the types are Argo's.
    let h = hook(json!({
        HOOK: "PostSync",
        HOOK_DELETE_POLICY: "HookFailed",
        HELM_HOOK_DELETE_POLICY: "hook-succeeded,hook-failed",
    }));
    assert_eq!(
        h.delete_policies,
        vec![DeletePolicy::HookSucceeded, DeletePolicy::HookFailed]
    );
}

fn naming() -> HookNaming {
    HookNaming {
        revision: "1a2b3c4d5e6f7a8b9c0d".into(),
        started_at_unix: 1_735_689_600,
    }
}

#[test]
fn generate_name_gets_the_spec_suffix() {
    // §2.3 example: generateName db-migrate- gives db-migrate-1a2b3c4-presync-1735689600.
    let job = json!({"kind": "Job", "metadata": {"generateName": "db-migrate-"}});
    assert_eq!(
        hook_name(&job, Phase::PreSync, &naming()),
        "db-migrate-1a2b3c4-presync-1735689600"
    );
    // One name per phase, stable across calls.
    assert_eq!(
        hook_name(&job, Phase::PostSync, &naming()),
        "db-migrate-1a2b3c4-postsync-1735689600"
    );
    assert_eq!(
        hook_name(&job, Phase::PreSync, &naming()),
        hook_name(&job, Phase::PreSync, &naming())
    );
}

#[test]
fn generate_name_suffix_is_lowercase_and_short_revisions_are_whole() {
    let job = json!({"kind": "Job", "metadata": {"generateName": "Up-"}});
    let n = HookNaming {
        revision: "ABC".into(),
        started_at_unix: 5,
    };
    // Only the suffix is lowercased.
    assert_eq!(hook_name(&job, Phase::SyncFail, &n), "Up-abc-syncfail-5");
}

#[test]
fn a_set_name_is_kept_and_no_name_at_all_gives_the_suffix() {
    let job = json!({"kind": "Job", "metadata": {"name": "fixed", "generateName": "g-"}});
    assert_eq!(hook_name(&job, Phase::PreSync, &naming()), "fixed");
    let bare = json!({"kind": "Job", "metadata": {}});
    assert_eq!(
        hook_name(&bare, Phase::Sync, &naming()),
        "1a2b3c4-sync-1735689600"
    );
}

#[test]
fn commit_of_flux_revisions() {
    assert_eq!(commit_of_revision("main@sha1:1a2b3c4d"), "1a2b3c4d");
    assert_eq!(commit_of_revision("sha256:abcd"), "abcd");
    assert_eq!(commit_of_revision("v1.0@sha1:ff00"), "ff00");
    assert_eq!(commit_of_revision("1a2b3c4d"), "1a2b3c4d");
}

#[test]
fn phase_order_is_argos() {
    assert!(Phase::PreSync < Phase::Sync);
    assert!(Phase::Sync < Phase::PostSync);
    assert!(Phase::PostSync < Phase::SyncFail);
    assert_eq!(Phase::PostSync.to_string(), "PostSync");
}
