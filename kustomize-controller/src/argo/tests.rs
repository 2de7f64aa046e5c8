//! Plan tests: the ordering rules of §1.2–§1.3 and §1.7, hooks in the plan (§2), sync options
//! in the plan (§4.5), CreateNamespace (§4.7).

use serde_json::{Value, json};

use super::keys::{HOOK, SYNC_OPTIONS, SYNC_WAVE};
use super::*;

fn obj(api: &str, kind: &str, ns: &str, name: &str, annotations: Value) -> Value {
    let mut o = json!({"apiVersion": api, "kind": kind,
                       "metadata": {"name": name, "annotations": annotations}});
    if !ns.is_empty() {
        o["metadata"]["namespace"] = json!(ns);
    }
    o
}

fn cm(name: &str, wave: &str) -> Value {
    obj("v1", "ConfigMap", "app", name, json!({SYNC_WAVE: wave}))
}

/// `(phase wave, [Kind/name...])` per step.
fn layout(plan: &Plan) -> Vec<(String, Vec<String>)> {
    plan.steps
        .iter()
        .map(|s| {
            let names = s
                .prune
                .iter()
                .map(|t| format!("-{}/{}", t.kind, t.name))
                .chain(s.apply.iter().map(|t| format!("{}/{}", t.kind, t.name)))
                .collect();
            (s.to_string(), names)
        })
        .collect()
}

fn step(label: &str, names: &[&str]) -> (String, Vec<String>) {
    (
        label.to_string(),
        names.iter().map(|n| n.to_string()).collect(),
    )
}

#[test]
fn sort_key_is_phase_then_wave_then_kind_then_name() {
    // §1.3: (1) phase, (2) wave, (3) kind rank, (4) name.
    let objects = vec![
        obj("apps/v1", "Deployment", "app", "a", json!({})),
        obj("v1", "Service", "app", "b", json!({})),
        cm("z", "0"),
        cm("y", "0"),
        obj("example.com/v1", "Widget", "app", "a", json!({})),
        cm("first", "-2"),
    ];
    let p = plan(&objects).expect("plan");
    assert_eq!(
        layout(&p),
        vec![
            step("Sync wave -2", &["ConfigMap/first"]),
            step(
                "Sync wave 0",
                &[
                    "ConfigMap/y",
                    "ConfigMap/z",
                    "Service/b",
                    "Deployment/a",
                    "Widget/a"
                ]
            ),
        ]
    );
    assert!(p.is_multi_step());
}

#[test]
fn waves_are_per_phase() {
    // §1.7: "wave -5 in Sync still runs after every PreSync task".
    let objects = vec![
        cm("sync", "-5"),
        obj(
            "batch/v1",
            "Job",
            "app",
            "pre",
            json!({HOOK: "PreSync", SYNC_WAVE: "3"}),
        ),
        obj(
            "batch/v1",
            "Job",
            "app",
            "post",
            json!({HOOK: "PostSync", SYNC_WAVE: "-9"}),
        ),
        obj("batch/v1", "Job", "app", "fail", json!({HOOK: "SyncFail"})),
    ];
    let p = plan(&objects).expect("plan");
    assert_eq!(
        layout(&p),
        vec![
            step("PreSync wave 3", &["Job/pre"]),
            step("Sync wave -5", &["ConfigMap/sync"]),
            step("PostSync wave -9", &["Job/post"]),
            step("SyncFail wave 0", &["Job/fail"]),
        ]
    );
    assert_eq!(p.sync_fail().len(), 1);
}

#[test]
fn namespace_takes_the_wave_of_its_first_object() {
    // §1.3: "A Namespace annotated wave 5 whose Deployment sits in wave 0 therefore syncs in
    // wave 0."
    let objects = vec![
        obj("v1", "Namespace", "", "app", json!({SYNC_WAVE: "5"})),
        obj("apps/v1", "Deployment", "app", "web", json!({})),
        obj("v1", "ConfigMap", "other", "c", json!({SYNC_WAVE: "7"})),
    ];
    let p = plan(&objects).expect("plan");
    assert_eq!(
        layout(&p),
        vec![
            step("Sync wave 0", &["Namespace/app", "Deployment/web"]),
            step("Sync wave 7", &["ConfigMap/c"]),
        ]
    );
    let ns = p.tasks().find(|t| t.kind == "Namespace").expect("ns");
    assert_eq!((ns.own_wave, ns.wave), (5, 0));
}

#[test]
fn namespace_can_move_into_an_earlier_phase() {
    let objects = vec![
        obj("v1", "Namespace", "", "app", json!({})),
        obj(
            "batch/v1",
            "Job",
            "app",
            "pre",
            json!({HOOK: "PreSync", SYNC_WAVE: "-1"}),
        ),
    ];
    let p = plan(&objects).expect("plan");
    assert_eq!(
        layout(&p),
        vec![step("PreSync wave -1", &["Namespace/app", "Job/pre"])]
    );
    assert_eq!(p.tasks().next().map(|t| t.phase), Some(Phase::PreSync));
}

#[test]
fn an_earlier_namespace_does_not_move() {
    let objects = vec![
        obj("v1", "Namespace", "", "app", json!({SYNC_WAVE: "-3"})),
        obj("apps/v1", "Deployment", "app", "web", json!({})),
    ];
    let p = plan(&objects).expect("plan");
    assert_eq!(p.steps[0].wave, -3);
}

#[test]
fn a_non_core_namespace_kind_is_not_a_dependency() {
    let objects = vec![
        obj(
            "example.com/v1",
            "Namespace",
            "",
            "app",
            json!({SYNC_WAVE: "5"}),
        ),
        obj("apps/v1", "Deployment", "app", "web", json!({})),
    ];
    let p = plan(&objects).expect("plan");
    assert_eq!(p.steps.len(), 2);
}

#[test]
fn destination_namespace_links_objects_without_one() {
    let objects = vec![
        obj("v1", "Namespace", "", "dest", json!({SYNC_WAVE: "5"})),
        obj("v1", "ConfigMap", "", "c", json!({})),
    ];
    let opts = PlanOptions {
        destination_namespace: Some("dest".into()),
        ..PlanOptions::default()
    };
    let p = plan_with(&objects, &[], &opts).expect("plan");
    assert_eq!(
        layout(&p),
        vec![step("Sync wave 0", &["Namespace/dest", "ConfigMap/c"])]
    );
    // Without it, the ConfigMap needs no namespace.
    assert_eq!(plan(&objects).expect("plan").steps.len(), 2);
}

fn crd(wave: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.example.com", "annotations": {SYNC_WAVE: wave}},
           "spec": {"group": "example.com", "names": {"kind": "Widget"}}})
}

#[test]
fn crd_moves_before_its_first_custom_resource() {
    // §1.3: "CRD defining G/K: moved before the first object of group G and kind K, taking
    // its phase and wave."
    let objects = vec![
        crd("3"),
        obj(
            "example.com/v1",
            "Widget",
            "app",
            "w",
            json!({SYNC_WAVE: "-1"}),
        ),
        obj(
            "other.com/v1",
            "Widget",
            "app",
            "not-it",
            json!({SYNC_WAVE: "-2"}),
        ),
    ];
    let p = plan(&objects).expect("plan");
    assert_eq!(
        layout(&p),
        vec![
            step("Sync wave -2", &["Widget/not-it"]),
            step(
                "Sync wave -1",
                &["CustomResourceDefinition/widgets.example.com", "Widget/w"]
            ),
        ]
    );
}

#[test]
fn crds_and_namespaces_come_first_within_their_step() {
    // Argo ranks CRDs after ConfigMaps; inside a step rflux puts Namespaces, then CRDs, first.
    let objects = vec![
        crd("0"),
        cm("a", "0"),
        obj("v1", "ServiceAccount", "app", "sa", json!({})),
        obj("v1", "Namespace", "", "app", json!({})),
        obj(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            "",
            "r",
            json!({}),
        ),
    ];
    let p = plan(&objects).expect("plan");
    assert_eq!(
        layout(&p),
        vec![step(
            "Sync wave 0",
            &[
                "Namespace/app",
                "CustomResourceDefinition/widgets.example.com",
                "ServiceAccount/sa",
                "ConfigMap/a",
                "ClusterRole/r"
            ]
        )]
    );
}

#[test]
fn equal_keys_are_ordered_deterministically() {
    // Argo's sort leaves these unordered; ours breaks the tie by namespace.
    let a = obj("v1", "ConfigMap", "b-ns", "same", json!({}));
    let b = obj("v1", "ConfigMap", "a-ns", "same", json!({}));
    let p1 = plan(&[a.clone(), b.clone()]).expect("plan");
    let p2 = plan(&[b, a]).expect("plan");
    let order = |p: &Plan| p.tasks().map(|t| t.namespace.clone()).collect::<Vec<_>>();
    assert_eq!(order(&p1), vec!["a-ns", "b-ns"]);
    assert_eq!(order(&p1), order(&p2));
}

#[test]
fn extreme_waves_compare_without_overflow() {
    let p = plan(&[
        cm("max", "9223372036854775807"),
        cm("min", "-9223372036854775808"),
    ])
    .expect("plan");
    assert_eq!(p.steps[0].wave, i64::MIN);
    assert_eq!(p.steps[1].wave, i64::MAX);
}

#[test]
fn invalid_waves_fall_back_and_leave_a_note() {
    let p = plan(&[cm("a", " 1"), cm("b", "1.5"), cm("c", "+1")]).expect("plan");
    assert_eq!(
        layout(&p),
        vec![
            step("Sync wave 0", &["ConfigMap/a", "ConfigMap/b"]),
            step("Sync wave 1", &["ConfigMap/c"]),
        ]
    );
    assert_eq!(p.notes.len(), 2, "{:?}", p.notes);
    assert_eq!(p.notes[0].object, "ConfigMap/app/a");
}

#[test]
fn hooks_and_skipped_objects_are_not_managed() {
    // §2.1: hooks are never part of the managed set; Skip is neither synced nor counted.
    let objects = vec![
        cm("c", "0"),
        obj("batch/v1", "Job", "app", "pre", json!({HOOK: "PreSync"})),
        obj("v1", "Secret", "app", "s", json!({HOOK: "Skip"})),
        obj(
            "batch/v1",
            "Job",
            "app",
            "cleanup",
            json!({HOOK: "PreDelete"}),
        ),
        obj("v1", "Pod", "app", "test", json!({"helm.sh/hook": "test"})),
    ];
    let p = plan(&objects).expect("plan");
    assert_eq!(p.managed(), vec![0]);
    let reasons: Vec<(String, LeftOutReason)> = p
        .left_out
        .iter()
        .map(|l| (l.object.clone(), l.reason))
        .collect();
    assert_eq!(
        reasons,
        vec![
            ("Secret/app/s".to_string(), LeftOutReason::Skip),
            ("Job/app/cleanup".to_string(), LeftOutReason::NoSyncPhase),
            ("Pod/app/test".to_string(), LeftOutReason::NoSyncPhase),
        ]
    );
    assert_eq!(p.tasks().count(), 2);
}

#[test]
fn a_hook_with_several_phases_has_one_task_and_name_per_phase() {
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"generateName": "check-", "namespace": "app",
                     "annotations": {HOOK: "PostSync,PreSync", "argocd.argoproj.io/hook-delete-policy": "HookSucceeded"}}});
    let opts = PlanOptions {
        hook_naming: Some(HookNaming {
            revision: hook::commit_of_revision("main@sha1:0123456789abcdef").to_string(),
            started_at_unix: 1_700_000_000,
        }),
        ..PlanOptions::default()
    };
    let p = plan_with(std::slice::from_ref(&job), &[], &opts).expect("plan");
    assert_eq!(
        layout(&p),
        vec![
            step("PreSync wave 0", &["Job/check-0123456-presync-1700000000"]),
            step(
                "PostSync wave 0",
                &["Job/check-0123456-postsync-1700000000"]
            ),
        ]
    );
    let t = p.tasks().next().expect("task");
    assert!(t.generated_name);
    let h = t.hook.as_ref().expect("hook");
    assert_eq!(h.delete_policies, vec![DeletePolicy::HookSucceeded]);
    // Without naming, the generateName prefix is kept (build --argo-order).
    let p = plan(&[job]).expect("plan");
    assert!(p.tasks().all(|t| t.name == "check-" && t.generated_name));
}

#[test]
fn an_ordinary_object_needs_a_name() {
    let bad = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "c-"}});
    assert_eq!(
        plan(&[bad]),
        Err(ArgoError::MissingField {
            index: 0,
            field: "metadata.name"
        })
    );
    assert!(matches!(
        plan(&[json!({"kind": "ConfigMap"})]),
        Err(ArgoError::MissingField {
            field: "apiVersion",
            ..
        })
    ));
}

#[test]
fn prune_waves_are_mirrored() {
    // §1.3: "Prune tasks in waves {0,5,10} become {10,5,0}"; apply tasks keep their waves.
    let live = vec![
        cm("p0", "0"),
        cm("p5", "5"),
        cm("p10", "10"),
        cm("p10b", "10"),
    ];
    let desired = vec![cm("keep", "5")];
    let p = plan_with(&desired, &live, &PlanOptions::default()).expect("plan");
    assert_eq!(
        layout(&p),
        vec![
            step("Sync wave 0", &["-ConfigMap/p10", "-ConfigMap/p10b"]),
            step("Sync wave 5", &["-ConfigMap/p5", "ConfigMap/keep"]),
            step("Sync wave 10", &["-ConfigMap/p0"]),
        ]
    );
    let steps = prune_order(&live).expect("prune");
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[0].prune.len(), 2);
}

#[test]
fn prune_last_goes_after_every_sync_wave() {
    // §1.3 PruneLast: (highest Sync-phase wave, after mirroring) + 1; before PostSync.
    let mut last = cm("last", "-4");
    last["metadata"]["annotations"][SYNC_OPTIONS] = json!("PruneLast=true");
    let live = vec![last, cm("p", "1")];
    let desired = vec![
        cm("a", "3"),
        obj(
            "batch/v1",
            "Job",
            "app",
            "post",
            json!({HOOK: "PostSync", SYNC_WAVE: "99"}),
        ),
    ];
    let p = plan_with(&desired, &live, &PlanOptions::default()).expect("plan");
    assert_eq!(
        layout(&p),
        vec![
            // The two prune waves {-4, 1} are mirrored first: p goes to -4.
            step("Sync wave -4", &["-ConfigMap/p"]),
            step("Sync wave 3", &["ConfigMap/a"]),
            step("Sync wave 4", &["-ConfigMap/last"]),
            step("PostSync wave 99", &["Job/post"]),
        ]
    );
    // Kustomization-level PruneLast applies to every prune; Argo counts from wave 0.
    let opts = PlanOptions {
        prune_last: true,
        ..PlanOptions::default()
    };
    let p = plan_with(&[cm("a", "-7")], &[cm("p", "-3")], &opts).expect("plan");
    assert_eq!(
        layout(&p),
        vec![
            step("Sync wave -7", &["ConfigMap/a"]),
            step("Sync wave 1", &["-ConfigMap/p"]),
        ]
    );
}

#[test]
fn hooks_are_never_pruned_and_prune_false_is_kept_in_the_plan() {
    let mut keep = cm("keep", "0");
    keep["metadata"]["annotations"][SYNC_OPTIONS] = json!("Prune=false");
    let live = vec![
        obj(
            "batch/v1",
            "Job",
            "app",
            "old-hook",
            json!({HOOK: "PreSync"}),
        ),
        keep,
    ];
    let p = plan_with(&[], &live, &PlanOptions::default()).expect("plan");
    assert_eq!(p.left_out.len(), 1);
    assert_eq!(p.left_out[0].reason, LeftOutReason::NotPrunable);
    // The Prune=false task stays (Argo reports it "ignored (no prune)"); the executor skips it.
    let t = p.tasks().next().expect("task");
    assert!(t.is_prune() && !t.options.prune);
}

#[test]
fn sync_options_reach_the_tasks() {
    let mut o = obj("batch/v1", "Job", "app", "j", json!({}));
    o["metadata"]["annotations"][SYNC_OPTIONS] =
        json!("Replace=true, SkipDryRunOnMissingResource=true");
    let p = plan(&[o]).expect("plan");
    let t = p.tasks().next().expect("task");
    assert!(t.options.force && t.options.skip_dry_run_on_missing_resource);
}

#[test]
fn refused_options_name_the_object() {
    let mut o = cm("c", "0");
    o["metadata"]["annotations"][SYNC_OPTIONS] = json!("ServerSideApply=false");
    let err = plan(&[o]).expect_err("refused");
    assert!(
        err.to_string().starts_with("ConfigMap/app/c: sync option"),
        "{err}"
    );
    // A refused option on a Skip object does not matter: it is never applied.
    let mut s = cm("s", "0");
    s["metadata"]["annotations"][HOOK] = json!("Skip");
    s["metadata"]["annotations"][SYNC_OPTIONS] = json!("ServerSideApply=false");
    assert!(plan(&[s]).is_ok());
}

#[test]
fn managed_namespace_is_a_presync_task() {
    // §4.7: the namespace is applied by a PreSync task.
    let settings = ArgoSettings {
        create_namespace: true,
        ..ArgoSettings::default()
    };
    let desired = vec![obj("apps/v1", "Deployment", "app", "web", json!({}))];
    let Some(NamespaceAction::CreateIfMissing(ns)) =
        managed_namespace(&settings, Some("app"), &desired)
    else {
        panic!("expected a namespace to create");
    };
    let opts = PlanOptions {
        managed_namespace: Some(ns),
        ..PlanOptions::default()
    };
    let p = plan_with(&desired, &[], &opts).expect("plan");
    assert_eq!(
        layout(&p),
        vec![
            step("PreSync wave 0", &["Namespace/app"]),
            step("Sync wave 0", &["Deployment/web"]),
        ]
    );
    assert_eq!(p.steps[0].apply[0].source, Source::ManagedNamespace);
    assert_eq!(p.managed(), vec![0]);
}

#[test]
fn deletion_goes_one_wave_at_a_time_highest_first() {
    // §1.7: highest wave first; Delete=false and helm.sh/resource-policy: keep are kept.
    let mut kept = cm("kept", "9");
    kept["metadata"]["annotations"][SYNC_OPTIONS] = json!("Delete=false");
    let mut helm_kept = cm("helm", "9");
    helm_kept["metadata"]["annotations"]["helm.sh/resource-policy"] = json!("keep");
    let live = vec![cm("a", "0"), kept, cm("b", "3"), helm_kept, cm("c", "3")];
    let d = deletion_order(&live).expect("order");
    assert_eq!(d.waves, vec![(3, vec![2, 4]), (0, vec![0])]);
    assert_eq!(d.kept, vec![1, 3]);
    let mut confirm = cm("x", "0");
    confirm["metadata"]["annotations"][SYNC_OPTIONS] = json!("Delete=confirm");
    assert!(deletion_order(&[confirm]).is_err());
}

#[test]
fn a_single_step_is_not_multi_step() {
    // §1.7: a single (phase, wave) and no hooks is a plain apply.
    let p = plan(&[cm("a", "0"), cm("b", "0")]).expect("plan");
    assert_eq!(p.steps.len(), 1);
    assert!(!p.is_multi_step());
    assert!(plan(&[]).expect("plan").steps.is_empty());
}
