//! Feature and error tests of the build engine. Expected outputs in `fixtures/*/expected.yaml`
//! were produced by `kubectl kustomize` (kustomize v5.5.0) from the same inputs.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use rflux_kustomize::yaml::parse_stream;
use rflux_kustomize::{
    BuildOptions, FluxOverrides, KustomizeError, LoadRestrictor, build, build_flux, to_yaml_stream,
};
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn build_yaml(dir: &Path, opts: &BuildOptions) -> String {
    let objs: Vec<Value> = build(dir, opts)
        .unwrap()
        .into_iter()
        .map(|r| r.obj)
        .collect();
    to_yaml_stream(&objs)
}

/// Writes files (path, content) under a fresh temporary directory.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (p, content) in files {
        let full = dir.path().join(p);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, content).unwrap();
    }
    dir
}

fn build_err(dir: &Path) -> KustomizeError {
    build(dir, &BuildOptions::default()).unwrap_err()
}

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n";

#[test]
fn overlay_with_generators_prefix_namespace_labels_images_replicas_components() {
    let dir = fixtures().join("overlay-basic");
    let got = build_yaml(&dir.join("overlay"), &BuildOptions::default());
    let expected = std::fs::read_to_string(dir.join("expected.yaml")).unwrap();
    // byte-for-byte, which also checks the printer against kubectl's
    pretty_assertions::assert_eq!(got, expected);
}

#[test]
fn fifo_order_inline_patches_and_template_labels() {
    let dir = fixtures().join("fifo-patches");
    let got = build_yaml(&dir, &BuildOptions::default());
    let expected = std::fs::read_to_string(dir.join("expected.yaml")).unwrap();
    pretty_assertions::assert_eq!(got, expected);
}

/// More kubectl-checked fixtures: (directory, what it covers).
#[test]
fn more_fixtures_match_kubectl_byte_for_byte() {
    for dir in [
        // vars from a base, custom nameReference configuration, JSON 6902 rename, SMP patch
        // without target, replacements with create, local-config objects dropped
        "vars-replacements-nameref",
        // generator replace across layers, allowNameChange, nameSuffix, RBAC subjects in other
        // namespaces, Ingress/StatefulSet/StorageClass/ServiceAccount references, labels with
        // selectors
        "namespaces-suffix-generators",
        // images with registry ports and digests, HPA/Role/projected-volume references, long
        // strings folded at 80 columns, PDB/NetworkPolicy selectors
        "images-folding",
        // labels with custom fields, sortOptions with custom orderFirst/orderLast
        "labels-fields-sort",
        // quoting and block styles of awkward strings, key order, folding
        "scalar-styles",
        // an `openapi:` schema replaces the built-in one: containers are no longer merged by name
        "openapi-replaces-builtin",
        // a base included three times along different paths (its result is reused), with a
        // generator, a configuration, replacements, components and origin annotations
        "diamond-reuse",
        // `namespace:` and cluster scope, decided by exact apiVersion and kind
        "cluster-scope",
    ] {
        let d = fixtures().join(dir);
        let got = build_yaml(&d, &BuildOptions::default());
        let expected = std::fs::read_to_string(d.join("expected.yaml")).unwrap();
        pretty_assertions::assert_eq!(got, expected, "fixture {dir}");
    }
}

#[test]
fn build_metadata_origin_and_managed_by() {
    let t = tree(&[
        (
            "base/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
        ),
        ("base/kustomization.yaml", "resources:\n- cm.yaml\n"),
        (
            "kustomization.yaml",
            "resources:\n- base\nbuildMetadata: [originAnnotations, managedByLabel]\nconfigMapGenerator:\n- name: g\n  literals: [a=b]\n",
        ),
    ]);
    let out = build(t.path(), &BuildOptions::default()).unwrap();
    let a = out.iter().find(|r| r.name() == "a").unwrap();
    assert_eq!(
        a.obj["metadata"]["annotations"]["config.kubernetes.io/origin"],
        json!("path: base/cm.yaml\n")
    );
    assert_eq!(
        a.obj["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        json!("kustomize-(devel)")
    );
    let g = out.iter().find(|r| r.name() == "g-4h2mbtbbt6").unwrap();
    assert_eq!(
        g.obj["metadata"]["annotations"]["config.kubernetes.io/origin"],
        json!(
            "configuredIn: kustomization.yaml\nconfiguredBy:\n  apiVersion: builtin\n  kind: ConfigMapGenerator\n"
        )
    );
}

#[test]
fn generator_hash_matches_kustomize() {
    // kubectl kustomize gives my-map-4h2mbtbbt6 for this generator
    let t = tree(&[(
        "kustomization.yaml",
        "configMapGenerator:\n- name: my-map\n  literals:\n  - a=b\n",
    )]);
    let out = build(t.path(), &BuildOptions::default()).unwrap();
    assert_eq!(out[0].name(), "my-map-4h2mbtbbt6");
    assert_eq!(out[0].obj["data"], json!({"a": "b"}));
}

#[test]
fn generator_files_envs_and_options() {
    let t = tree(&[
        ("app.env", "# comment\nA=1\nB=two words\n"),
        ("conf/settings.json", "{\"x\": 1}\n"),
        ("bin.dat", "\u{0}"),
        (
            "kustomization.yaml",
            "generatorOptions:\n  disableNameSuffixHash: true\n  labels:\n    gen: \"yes\"\nconfigMapGenerator:\n- name: c\n  envs: [app.env]\n  files: [conf/settings.json, renamed=conf/settings.json]\n  options:\n    immutable: true\n    annotations:\n      note: x\nsecretGenerator:\n- name: s\n  type: kubernetes.io/tls\n  literals: [tls.crt=abc, tls.key=def]\n",
        ),
    ]);
    let out = build(t.path(), &BuildOptions::default()).unwrap();
    let c = out.iter().find(|r| r.kind() == "ConfigMap").unwrap();
    assert_eq!(c.name(), "c");
    assert_eq!(
        c.obj["data"],
        json!({"A": "1", "B": "two words", "settings.json": "{\"x\": 1}\n", "renamed": "{\"x\": 1}\n"})
    );
    assert_eq!(c.obj["immutable"], json!(true));
    assert_eq!(c.obj["metadata"]["labels"], json!({"gen": "yes"}));
    assert_eq!(c.obj["metadata"]["annotations"], json!({"note": "x"}));
    let s = out.iter().find(|r| r.kind() == "Secret").unwrap();
    assert_eq!(s.obj["type"], json!("kubernetes.io/tls"));
    assert_eq!(s.obj["data"], json!({"tls.crt": "YWJj", "tls.key": "ZGVm"}));
}

#[test]
fn generator_duplicate_key_is_an_error() {
    let t = tree(&[(
        "kustomization.yaml",
        "configMapGenerator:\n- name: c\n  literals: [a=1, a=2]\n",
    )]);
    let e = build_err(t.path()).to_string();
    assert!(
        e.contains("kustomization.yaml") && e.contains("'c'") && e.contains("already exists"),
        "{e}"
    );
}

#[test]
fn merge_without_base_generator_is_an_error() {
    let t = tree(&[(
        "kustomization.yaml",
        "configMapGenerator:\n- name: c\n  behavior: merge\n  literals: [a=1]\n",
    )]);
    let e = build_err(t.path()).to_string();
    assert!(e.contains("cannot merge or replace"), "{e}");
}

#[test]
fn name_references_follow_renames_across_layers() {
    let t = tree(&[
        (
            "base/res.yaml",
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc\n---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: ing\nspec:\n  rules:\n  - http:\n      paths:\n      - path: /\n        backend:\n          service:\n            name: svc\n            port:\n              number: 80\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\n---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\nspec:\n  serviceName: svc\n  template:\n    spec:\n      volumes:\n      - name: d\n        persistentVolumeClaim:\n          claimName: data\n      - name: other\n        persistentVolumeClaim:\n          claimName: not-ours\n",
        ),
        (
            "base/kustomization.yaml",
            "resources: [res.yaml]\nnamePrefix: b-\n",
        ),
        ("kustomization.yaml", "resources: [base]\nnameSuffix: -x\n"),
    ]);
    let out = build(t.path(), &BuildOptions::default()).unwrap();
    let ing = out.iter().find(|r| r.kind() == "Ingress").unwrap();
    assert_eq!(ing.name(), "b-ing-x");
    assert_eq!(
        ing.obj
            .pointer("/spec/rules/0/http/paths/0/backend/service/name")
            .unwrap(),
        "b-svc-x"
    );
    let sts = out.iter().find(|r| r.kind() == "StatefulSet").unwrap();
    assert_eq!(sts.obj["spec"]["serviceName"], "b-svc-x");
    assert_eq!(
        sts.obj
            .pointer("/spec/template/spec/volumes/0/persistentVolumeClaim/claimName")
            .unwrap(),
        "b-data-x"
    );
    assert_eq!(
        sts.obj
            .pointer("/spec/template/spec/volumes/1/persistentVolumeClaim/claimName")
            .unwrap(),
        "not-ours"
    );
}

#[test]
fn cluster_scoped_kinds_keep_no_namespace() {
    let t = tree(&[
        (
            "r.yaml",
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: r\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: old\n",
        ),
        (
            "kustomization.yaml",
            "resources: [r.yaml]\nnamespace: team\n",
        ),
    ]);
    let out = build(t.path(), &BuildOptions::default()).unwrap();
    let ns = out.iter().find(|r| r.kind() == "Namespace").unwrap();
    // kustomize renames a v1 Namespace to the target namespace
    assert_eq!(ns.name(), "team");
    assert!(ns.namespace().is_none());
    let role = out.iter().find(|r| r.kind() == "ClusterRole").unwrap();
    assert!(role.namespace().is_none());
}

#[test]
fn list_kinds_and_multi_documents_are_flattened() {
    let t = tree(&[
        (
            "list.yaml",
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: one\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: two\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: three\n",
        ),
        ("kustomization.yml", "resources: [list.yaml]\n"),
    ]);
    let out = build(t.path(), &BuildOptions::default()).unwrap();
    let names: Vec<&str> = out.iter().map(|r| r.name()).collect();
    assert_eq!(names, vec!["one", "three", "two"]);
}

#[test]
fn field_names_are_case_insensitive() {
    let t = tree(&[
        ("cm.yaml", CM),
        (
            "kustomization.yaml",
            "RESOURCES: [cm.yaml]\nnameprefix: p-\n",
        ),
    ]);
    let out = build(t.path(), &BuildOptions::default()).unwrap();
    assert_eq!(out[0].name(), "p-a");
}

#[test]
fn missing_resource_names_file_and_entry() {
    let t = tree(&[("kustomization.yaml", "resources:\n- nothere.yaml\n")]);
    let e = build_err(t.path());
    let msg = e.to_string();
    assert!(
        matches!(e.cause(), KustomizeError::Resource { .. }),
        "{msg}"
    );
    assert!(
        msg.contains("kustomization.yaml") && msg.contains("nothere.yaml"),
        "{msg}"
    );
}

#[test]
fn missing_kustomization_file() {
    let t = tree(&[("cm.yaml", CM)]);
    assert!(matches!(
        build_err(t.path()),
        KustomizeError::MissingKustomization(_)
    ));
}

#[test]
fn invalid_yaml_reports_file_and_line() {
    let t = tree(&[
        (
            "bad.yaml",
            "apiVersion: v1\nkind: [ConfigMap\nmetadata: {}\n",
        ),
        ("kustomization.yaml", "resources: [bad.yaml]\n"),
    ]);
    let msg = build_err(t.path()).to_string();
    assert!(msg.contains("bad.yaml:3:9: invalid YAML"), "{msg}");
}

#[test]
fn unknown_kustomization_field_is_an_error() {
    let t = tree(&[("kustomization.yaml", "resourcez: [a.yaml]\n")]);
    let msg = build_err(t.path()).to_string();
    assert!(msg.contains("resourcez"), "{msg}");
}

#[test]
fn duplicate_ids_are_rejected() {
    let t = tree(&[
        ("a.yaml", CM),
        ("b.yaml", CM),
        ("kustomization.yaml", "resources: [a.yaml, b.yaml]\n"),
    ]);
    let msg = build_err(t.path()).to_string();
    assert!(
        msg.contains("may not add resource with an already registered id"),
        "{msg}"
    );
}

#[test]
fn patch_without_target_object_is_an_error() {
    let t = tree(&[
        ("cm.yaml", CM),
        (
            "p.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nope\ndata:\n  k: w\n",
        ),
        (
            "kustomization.yaml",
            "resources: [cm.yaml]\npatchesStrategicMerge: [p.yaml]\n",
        ),
    ]);
    let e = build_err(t.path());
    assert!(
        matches!(e.cause(), KustomizeError::PatchTargetNotFound { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("nope"), "{e}");
}

#[test]
fn strategic_merge_patch_with_delete_drops_the_object() {
    let t = tree(&[
        ("cm.yaml", CM),
        (
            "p.yaml",
            "$patch: delete\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
        ),
        (
            "kustomization.yaml",
            "resources: [cm.yaml]\npatches:\n- path: p.yaml\n",
        ),
    ]);
    let out = build(t.path(), &BuildOptions::default()).unwrap();
    assert!(out.is_empty());
}

#[test]
fn remote_resources_and_helm_are_refused() {
    let t = tree(&[(
        "kustomization.yaml",
        "resources:\n- https://github.com/org/repo//dir?ref=v1\n",
    )]);
    let e = build_err(t.path());
    assert!(
        matches!(e.cause(), KustomizeError::Unsupported { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("remote"), "{e}");
    let t = tree(&[("kustomization.yaml", "helmCharts:\n- name: x\n")]);
    assert!(build_err(t.path()).to_string().contains("Helm"));
}

#[test]
fn dotdot_file_escape_needs_load_restrictions_none() {
    let t = tree(&[
        ("shared/cm.yaml", CM),
        (
            "app/kustomization.yaml",
            "resources:\n- ../shared/cm.yaml\n",
        ),
    ]);
    let e = build_err(&t.path().join("app"));
    assert!(
        matches!(e.cause(), KustomizeError::OutsideRoot { .. }),
        "{e}"
    );
    let none = BuildOptions {
        load_restrictor: LoadRestrictor::None,
        ..Default::default()
    };
    assert_eq!(build(&t.path().join("app"), &none).unwrap().len(), 1);
    // but a fence holds whatever the restrictor says
    let fenced = BuildOptions {
        load_restrictor: LoadRestrictor::None,
        root_fence: Some(t.path().join("app")),
        ..Default::default()
    };
    assert!(matches!(
        build(&t.path().join("app"), &fenced).unwrap_err().cause(),
        KustomizeError::OutsideRoot { .. }
    ));
}

#[cfg(unix)]
#[test]
fn symlink_escape_is_refused_by_default() {
    let outside = tree(&[("secret.yaml", CM)]);
    let t = tree(&[("kustomization.yaml", "resources:\n- link.yaml\n")]);
    std::os::unix::fs::symlink(
        outside.path().join("secret.yaml"),
        t.path().join("link.yaml"),
    )
    .unwrap();
    assert!(matches!(
        build_err(t.path()).cause(),
        KustomizeError::OutsideRoot { .. }
    ));
    let none = BuildOptions {
        load_restrictor: LoadRestrictor::None,
        ..Default::default()
    };
    assert_eq!(build(t.path(), &none).unwrap().len(), 1);
    let fenced = BuildOptions {
        load_restrictor: LoadRestrictor::None,
        root_fence: Some(t.path().to_path_buf()),
        ..Default::default()
    };
    assert!(matches!(
        build(t.path(), &fenced).unwrap_err().cause(),
        KustomizeError::OutsideRoot { .. }
    ));
}

#[cfg(unix)]
#[test]
fn symlink_inside_root_is_fine() {
    let t = tree(&[
        ("real/cm.yaml", CM),
        ("kustomization.yaml", "resources:\n- link.yaml\n"),
    ]);
    std::os::unix::fs::symlink(t.path().join("real/cm.yaml"), t.path().join("link.yaml")).unwrap();
    assert_eq!(build(t.path(), &BuildOptions::default()).unwrap().len(), 1);
}

#[test]
fn huge_file_is_refused() {
    let big = format!("{CM}  pad: \"{}\"\n", "x".repeat(4096));
    let t = tree(&[
        ("cm.yaml", &big),
        ("kustomization.yaml", "resources: [cm.yaml]\n"),
    ]);
    let opts = BuildOptions {
        max_file_bytes: Some(1024),
        ..Default::default()
    };
    let e = build(t.path(), &opts).unwrap_err();
    assert!(e.to_string().contains("larger than the limit"), "{e}");
}

#[test]
fn alias_bomb_in_resource_is_bounded() {
    let mut text = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\nx0: &a0 [x, x, x, x, x, x, x, x, x, x]\n",
    );
    for i in 1..12 {
        let p = i - 1;
        text.push_str(&format!(
            "x{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let t = tree(&[
        ("bomb.yaml", &text),
        ("kustomization.yaml", "resources: [bomb.yaml]\n"),
    ]);
    let e = build_err(t.path());
    assert!(matches!(e.cause(), KustomizeError::YamlLimit { .. }), "{e}");
}

#[test]
fn base_cycle_is_detected() {
    let t = tree(&[
        ("a/kustomization.yaml", "resources: [../b]\n"),
        ("b/kustomization.yaml", "resources: [../a]\n"),
    ]);
    let msg = build_err(&t.path().join("a")).to_string();
    assert!(msg.contains("cycle"), "{msg}");
}

#[test]
fn yaml_scalars_resolve_like_kustomize() {
    let t = tree(&[
        (
            "cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: yes\n  c: 0777\n  d: 1e3\n  e: ~\n  o: 2020-01-01\n",
        ),
        ("kustomization.yaml", "resources: [cm.yaml]\n"),
    ]);
    let got = build_yaml(t.path(), &BuildOptions::default());
    // kubectl kustomize prints exactly this
    assert_eq!(
        got,
        "apiVersion: v1\ndata:\n  a: \"yes\"\n  c: 511\n  d: 1000\n  e: null\n  o: \"2020-01-01T00:00:00Z\"\nkind: ConfigMap\nmetadata:\n  name: x\n"
    );
}

#[test]
fn flux_generates_a_kustomization_when_missing() {
    let t = tree(&[
        ("apps/one.yaml", CM),
        (
            "apps/nested/two.yml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: two\n",
        ),
        ("apps/notes.txt", "ignored"),
        (
            "apps/sub/kustomization.yaml",
            "resources: [three.yaml]\nnamePrefix: sub-\n",
        ),
        (
            "apps/sub/three.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: three\n",
        ),
        ("apps/sub/ignored-by-kustomization.yaml", "not: [valid"),
    ]);
    let out = build_flux(t.path(), Path::new("./apps"), &FluxOverrides::default()).unwrap();
    let names: Vec<&str> = out.iter().map(|r| r.name()).collect();
    // Flux's build keeps the order of the generated resources list (a lexical walk), unsorted.
    assert_eq!(names, vec!["two", "a", "sub-three"]);
}

#[test]
fn flux_overrides_apply() {
    let t = tree(&[
        (
            "deploy/d.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        image: nginx:1\n",
        ),
        (
            "deploy/kustomization.yaml",
            "resources: [d.yaml]\nimages:\n- name: nginx\n  newTag: \"2\"\n",
        ),
    ]);
    let o = FluxOverrides {
        target_namespace: Some("apps".into()),
        name_prefix: Some("p-".into()),
        common_labels: vec![("owner".into(), "flux".into())],
        common_annotations: vec![("note".into(), "x".into())],
        images: vec![json!({"name": "nginx", "newTag": "3"})],
        patches: vec![
            json!({"patch": "- op: add\n  path: /spec/replicas\n  value: 2\n", "target": {"kind": "Deployment"}}),
        ],
        ..Default::default()
    };
    let out = build_flux(t.path(), Path::new("deploy"), &o).unwrap();
    let d = &out[0].obj;
    assert_eq!(d["metadata"]["name"], "p-web");
    assert_eq!(d["metadata"]["namespace"], "apps");
    assert_eq!(d["metadata"]["labels"]["owner"], "flux");
    assert_eq!(d["metadata"]["annotations"]["note"], "x");
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(
        d.pointer("/spec/template/spec/containers/0/image").unwrap(),
        "nginx:3"
    );
}

#[test]
fn flux_path_cannot_escape_the_root() {
    let outer = tree(&[
        ("outside/kustomization.yaml", "resources: [cm.yaml]\n"),
        ("outside/cm.yaml", CM),
        ("root/app/cm.yaml", CM),
    ]);
    let root = outer.path().join("root");
    // `../outside` is clamped to the root, so it names root/outside, which does not exist
    assert!(build_flux(&root, Path::new("../outside"), &FluxOverrides::default()).is_err());
    // a base outside the root is refused even though Flux uses LoadRestrictionsNone
    std::fs::write(
        root.join("app/kustomization.yaml"),
        "resources: [cm.yaml, ../../outside]\n",
    )
    .unwrap();
    let e = build_flux(&root, Path::new("app"), &FluxOverrides::default()).unwrap_err();
    assert!(
        matches!(e.cause(), KustomizeError::OutsideRoot { .. }),
        "{e}"
    );
}

#[test]
fn output_reparses_to_the_same_objects() {
    let dir = fixtures().join("overlay-basic");
    let objs: Vec<Value> = build(&dir.join("overlay"), &BuildOptions::default())
        .unwrap()
        .into_iter()
        .map(|r| r.obj)
        .collect();
    let back = parse_stream(&to_yaml_stream(&objs), "out").unwrap();
    assert_eq!(back, objs);
}

#[test]
fn flux_images_merge_by_name_and_components_are_checked() {
    let t = tree(&[
        (
            "app/d.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: nginx:1\n",
        ),
        (
            "app/kustomization.yaml",
            "resources: [d.yaml]\nimages:\n- name: nginx\n  newName: my/nginx\n  newTag: \"2\"\n",
        ),
        (
            "app/comp/kustomization.yaml",
            "kind: Component\ncommonAnnotations:\n  c: \"1\"\n",
        ),
    ]);
    let o = FluxOverrides {
        images: vec![json!({"name": "nginx", "newTag": "3"})],
        components: vec!["comp".into(), "missing".into()],
        ignore_missing_components: true,
        ..Default::default()
    };
    let out = build_flux(t.path(), Path::new("app"), &o).unwrap();
    assert_eq!(
        out[0].obj.pointer("/spec/containers/0/image").unwrap(),
        "my/nginx:3"
    );
    assert_eq!(out[0].obj["metadata"]["annotations"]["c"], "1");
    let bad = FluxOverrides {
        components: vec!["/etc".into()],
        ..Default::default()
    };
    let e = build_flux(t.path(), Path::new("app"), &bad).unwrap_err();
    assert!(e.to_string().contains("must be local and relative"), "{e}");
    let missing = FluxOverrides {
        components: vec!["missing".into()],
        ..Default::default()
    };
    assert!(build_flux(t.path(), Path::new("app"), &missing).is_err());
}

#[test]
fn label_values_must_be_strings() {
    let t = tree(&[
        ("cm.yaml", CM),
        (
            "kustomization.yaml",
            "resources: [cm.yaml]\ncommonLabels:\n  a: 1\n",
        ),
    ]);
    let msg = build_err(t.path()).to_string();
    assert!(msg.contains("commonLabels") && msg.contains("'a'"), "{msg}");
}

#[test]
fn an_overlay_replaces_file_contents_in_memory_only() {
    use rflux_kustomize::{FileOverlay, FluxOverrides, build_flux_overlaid};
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    std::fs::write(
        root.join("kustomization.yaml"),
        "secretGenerator:\n- name: s\n  envs: [s.env]\n  options: {disableNameSuffixHash: true}\n",
    )
    .unwrap();
    std::fs::write(root.join("s.env"), "A=on-disk\n").unwrap();
    let mut files = FileOverlay::default();
    files.insert(
        root.join("s.env").canonicalize().unwrap(),
        b"A=in-memory\n".to_vec(),
    );
    let budget = rflux_kustomize::Budget::default();
    let built = build_flux_overlaid(
        root,
        std::path::Path::new("."),
        &FluxOverrides::default(),
        &budget,
        Some(std::sync::Arc::new(files)),
    )
    .unwrap();
    // base64 of "in-memory"
    assert_eq!(built[0].obj["data"]["A"], "aW4tbWVtb3J5");
    // the disk is untouched, and a build without the overlay reads it
    assert_eq!(
        std::fs::read_to_string(root.join("s.env")).unwrap(),
        "A=on-disk\n"
    );
    let plain = build_flux_overlaid(
        root,
        std::path::Path::new("."),
        &FluxOverrides::default(),
        &budget,
        None,
    )
    .unwrap();
    assert_eq!(plain[0].obj["data"]["A"], "b24tZGlzaw==");
}
