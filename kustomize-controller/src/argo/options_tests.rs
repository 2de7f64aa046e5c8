//! Unit tests of `options.rs` (§4.5, §4.7, the opt-in).

use super::*;
use serde_json::json;

fn obj(options: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "c", "annotations": {SYNC_OPTIONS: options}}})
}

fn parse(options: &str, side: Side) -> (Result<SyncOptions, ArgoError>, Vec<String>) {
    let mut notes = Vec::new();
    let r = object_sync_options(&obj(options), side, "ConfigMap/c", &mut notes);
    (r, notes)
}

fn ok(options: &str) -> SyncOptions {
    let (r, _) = parse(options, Side::Desired);
    r.expect("options")
}

#[test]
fn defaults_without_annotation() {
    let mut notes = Vec::new();
    let o = object_sync_options(&json!({"kind": "X"}), Side::Desired, "X/x", &mut notes)
        .expect("options");
    assert_eq!(o, SyncOptions::default());
    assert!(o.prune && o.delete && !o.force && !o.prune_last);
    assert!(notes.is_empty());
}

#[test]
fn honoured_and_mapped_options() {
    let o = ok("Prune=false, Delete=false,PruneLast=true,SkipDryRunOnMissingResource=true");
    assert!(!o.prune);
    assert!(!o.delete);
    assert!(o.prune_last);
    assert!(o.skip_dry_run_on_missing_resource);
    assert!(!o.force);
    // Replace=true and Force=true map onto the force path.
    assert!(ok("Replace=true").force);
    assert!(ok("Force=true").force);
}

#[test]
fn matching_is_exact_as_in_argo() {
    // Lowercase or inner spaces: not an option, so the object is pruned as usual.
    let (r, notes) = parse("prune=false,Prune = false", Side::Desired);
    assert!(r.expect("options").prune);
    assert_eq!(notes.len(), 2, "{notes:?}");
}

#[test]
fn defaults_and_already_true_options_are_accepted_silently() {
    let (r, notes) = parse(
        "Prune=true,ServerSideApply=true,Validate=false,Replace=false",
        Side::Desired,
    );
    assert_eq!(r.expect("options"), SyncOptions::default());
    assert!(notes.is_empty(), "{notes:?}");
}

#[test]
fn refused_options_are_errors_naming_the_object() {
    for item in [
        "Prune=confirm",
        "Delete=confirm",
        "ServerSideApply=false",
        "ClientSideApplyMigration=false",
    ] {
        let (r, _) = parse(item, Side::Desired);
        match r {
            Err(ArgoError::RefusedSyncOption { object, option, .. }) => {
                assert_eq!(object, "ConfigMap/c");
                assert_eq!(option, item);
            }
            other => panic!("{item}: {other:?}"),
        }
    }
}

#[test]
fn live_side_refuses_only_prune_and_delete_confirmations() {
    assert!(parse("ServerSideApply=false", Side::Live).0.is_ok());
    assert!(parse("Prune=confirm", Side::Live).0.is_err());
    assert!(parse("Delete=confirm", Side::Live).0.is_err());
}

#[test]
fn application_options_on_objects_are_ignored_with_a_note() {
    let (r, notes) = parse(
        "CreateNamespace=true,ApplyOutOfSyncOnly=true",
        Side::Desired,
    );
    assert_eq!(r.expect("options"), SyncOptions::default());
    assert_eq!(notes.len(), 2);
    assert!(notes[0].contains("Application-level"), "{notes:?}");
}

fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn gate_off_makes_everything_inert() {
    let a = ann(&[(OPT_IN, "garbage"), (APP_SYNC_OPTIONS, "Bogus=1")]);
    assert_eq!(settings(false, Some(&a)), Ok(None));
    let a = ann(&[(OPT_IN, "enabled")]);
    assert_eq!(settings(false, Some(&a)), Ok(None));
}

#[test]
fn opt_in_values() {
    assert_eq!(settings(true, None), Ok(None));
    assert_eq!(settings(true, Some(&ann(&[]))), Ok(None));
    assert_eq!(
        settings(true, Some(&ann(&[(OPT_IN, "disabled")]))),
        Ok(None)
    );
    assert_eq!(
        settings(true, Some(&ann(&[(OPT_IN, "enabled")]))),
        Ok(Some(ArgoSettings::default()))
    );
    for bad in ["Enabled", "true", " enabled", ""] {
        assert!(
            matches!(
                settings(true, Some(&ann(&[(OPT_IN, bad)]))),
                Err(ArgoError::InvalidAnnotation { key: OPT_IN, .. })
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn application_level_options() {
    let a = ann(&[
        (OPT_IN, "enabled"),
        (
            APP_SYNC_OPTIONS,
            "CreateNamespace=true, PruneLast=true,ServerSideApply=true",
        ),
    ]);
    let s = settings(true, Some(&a)).expect("valid").expect("on");
    assert!(s.create_namespace && s.prune_last);
    for refused in [
        "Prune=false",
        "Replace=true",
        "Bogus",
        "createnamespace=true",
    ] {
        let a = ann(&[(OPT_IN, "enabled"), (APP_SYNC_OPTIONS, refused)]);
        assert!(
            matches!(
                settings(true, Some(&a)),
                Err(ArgoError::RefusedAppOption { .. })
            ),
            "{refused}"
        );
    }
}

#[test]
fn managed_namespace_metadata_is_json_of_strings() {
    let a = ann(&[
        (OPT_IN, "enabled"),
        (APP_SYNC_OPTIONS, "CreateNamespace=true"),
        (
            MANAGED_NAMESPACE_METADATA,
            r#"{"labels": {"team": "a"}, "annotations": {"owner": "b"}}"#,
        ),
    ]);
    let s = settings(true, Some(&a)).expect("valid").expect("on");
    let m = s.managed_namespace_metadata.expect("metadata");
    assert_eq!(m.labels.get("team").map(String::as_str), Some("a"));
    assert_eq!(m.annotations.get("owner").map(String::as_str), Some("b"));
    let only_labels = ann(&[
        (OPT_IN, "enabled"),
        (MANAGED_NAMESPACE_METADATA, r#"{"labels": {}}"#),
    ]);
    assert!(settings(true, Some(&only_labels)).is_ok());
    for bad in [
        r#"{"labels": {"a": 1}}"#,
        r#"{"finalizers": []}"#,
        "labels: {a: b}",
        "[]",
    ] {
        let a = ann(&[(OPT_IN, "enabled"), (MANAGED_NAMESPACE_METADATA, bad)]);
        assert!(
            matches!(
                settings(true, Some(&a)),
                Err(ArgoError::InvalidAnnotation {
                    key: MANAGED_NAMESPACE_METADATA,
                    ..
                })
            ),
            "{bad}"
        );
    }
}
