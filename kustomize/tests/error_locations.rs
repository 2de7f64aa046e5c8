//! Build errors name the file and line that caused them (`docs/kustomize.md`, "Error
//! locations"). Each case is a small broken tree: the error must start with the expected
//! `file:line` prefix (paths relative to the tree) and still name the cause, in kustomize's
//! words where kustomize has them.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use rflux_kustomize::{BuildOptions, KustomizeError, build, build_flux};

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n";

const DEPLOY: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  template:
    spec:
      containers:
      - name: web
        image: nginx
";

struct Case {
    name: &'static str,
    /// The directory built, relative to the tree.
    dir: &'static str,
    files: &'static [(&'static str, &'static str)],
    /// What the error message starts with (tree paths relative).
    prefix: &'static str,
    /// What else it must say (the cause).
    contains: &'static [&'static str],
}

const CASES: &[Case] = &[
    // 1. YAML syntax errors, in every kind of file
    Case {
        name: "yaml syntax error in the kustomization",
        dir: "",
        files: &[(
            "kustomization.yaml",
            "resources:\n- a.yaml\nnamePrefix: [x\n",
        )],
        prefix: "kustomization.yaml:4:1: invalid YAML: ",
        contains: &["while parsing a flow sequence, expected ',' or ']'"],
    },
    Case {
        name: "yaml syntax error in a resource",
        dir: "",
        files: &[
            ("kustomization.yaml", "resources:\n- cm.yaml\n- bad.yaml\n"),
            ("cm.yaml", CM),
            (
                "bad.yaml",
                "apiVersion: v1\nkind: [ConfigMap\nmetadata: {}\n",
            ),
        ],
        prefix: "kustomization.yaml:3: resources[1] 'bad.yaml': bad.yaml:3:9: invalid YAML: ",
        contains: &["illegal placement of ':' indicator"],
    },
    Case {
        name: "yaml syntax error in a patch file",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- cm.yaml\npatches:\n- path: p.yaml\n",
            ),
            ("cm.yaml", CM),
            ("p.yaml", "apiVersion: v1\nkind: ConfigMap\n  bad: indent\n"),
        ],
        prefix: "kustomization.yaml:4: patches[0] (path 'p.yaml'): p.yaml:3:6: invalid YAML: ",
        contains: &["mapping values are not allowed"],
    },
    Case {
        name: "duplicate key in a base's kustomization",
        dir: "overlay",
        files: &[
            ("overlay/kustomization.yaml", "resources:\n- ../base\n"),
            (
                "base/kustomization.yaml",
                "namePrefix: a-\nnamePrefix: b-\n",
            ),
        ],
        prefix: "overlay/kustomization.yaml:2: resources[0] '../base': base/kustomization.yaml:2:1: invalid YAML: ",
        contains: &["mapping key \"namePrefix\" already defined"],
    },
    // 2. kustomization fields
    Case {
        name: "unknown field",
        dir: "",
        files: &[(
            "kustomization.yaml",
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresourcse:\n- a.yaml\n",
        )],
        prefix: "kustomization.yaml:3: invalid kustomization: ",
        contains: &["json: unknown field \"resourcse\""],
    },
    Case {
        name: "wrong kind",
        dir: "",
        files: &[("kustomization.yaml", "resources: []\n\nkind: Deployment\n")],
        prefix: "kustomization.yaml:3: invalid kustomization: ",
        contains: &["kind should be Kustomization or Component"],
    },
    Case {
        name: "resources entry that is not a string",
        dir: "",
        files: &[(
            "kustomization.yaml",
            "resources:\n- cm.yaml\n- {path: x.yaml}\n",
        )],
        prefix: "kustomization.yaml:3: resources[1] (path 'x.yaml'): field 'resources': ",
        contains: &["expected a list of strings"],
    },
    Case {
        name: "namespace that is not a string",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- cm.yaml\nnamespace:\n  name: x\n",
            ),
            ("cm.yaml", CM),
        ],
        prefix: "kustomization.yaml:3: field 'namespace': ",
        contains: &["expected a string"],
    },
    Case {
        name: "images entry with a number for newTag",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- cm.yaml\nimages:\n- name: busybox\n  newTag: latest\n- name: nginx\n  newTag: 1.20\n",
            ),
            ("cm.yaml", CM),
        ],
        prefix: "kustomization.yaml:6: images[1] (name 'nginx'): ",
        contains: &["'newTag' must be a string"],
    },
    Case {
        name: "replicas entry without a name",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- cm.yaml\nreplicas:\n- name: web\n  count: 2\n- count: 3\n",
            ),
            ("cm.yaml", CM),
        ],
        prefix: "kustomization.yaml:6: replicas[1]: ",
        contains: &["entry without name"],
    },
    Case {
        name: "patches entry with neither patch nor path",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- cm.yaml\npatches:\n- target:\n    kind: ConfigMap\n",
            ),
            ("cm.yaml", CM),
        ],
        prefix: "kustomization.yaml:4: patches[0]: ",
        contains: &["must specify one of patch and path"],
    },
    Case {
        name: "labels entry with a number for a value",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- cm.yaml\nlabels:\n- pairs:\n    app: web\n- pairs:\n    tier: 3\n",
            ),
            ("cm.yaml", CM),
        ],
        prefix: "kustomization.yaml:6: labels[1]: ",
        contains: &["value of 'tier' must be a string"],
    },
    Case {
        name: "transformers entry naming an external plugin",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- cm.yaml\ntransformers:\n- t.yaml\n",
            ),
            ("cm.yaml", CM),
            (
                "t.yaml",
                "apiVersion: example.com/v1\nkind: Mine\nmetadata:\n  name: t\n",
            ),
        ],
        prefix: "kustomization.yaml:4: transformers[0] 't.yaml': ",
        contains: &["external plugins are not supported"],
    },
    Case {
        name: "generators entry of a non-generator kind",
        dir: "",
        files: &[(
            "kustomization.yaml",
            "generators:\n- |\n  apiVersion: builtin\n  kind: LabelTransformer\n  metadata:\n    name: l\n",
        )],
        // a block scalar entry starts on the line after its `- |`
        prefix: "kustomization.yaml:3: generators[0] 'apiVersion: builtin…': ",
        contains: &["not a generator"],
    },
    Case {
        name: "unknown buildMetadata option",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- cm.yaml\nbuildMetadata:\n- originAnnotations\n- bogus\n",
            ),
            ("cm.yaml", CM),
        ],
        prefix: "kustomization.yaml:3: field 'buildMetadata': ",
        contains: &["unknown option 'bogus'"],
    },
    Case {
        name: "configurations entry naming a missing file",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- cm.yaml\nconfigurations:\n- nothere.yaml\n",
            ),
            ("cm.yaml", CM),
        ],
        prefix: "kustomization.yaml:4: configurations[0] 'nothere.yaml': ",
        contains: &["No such file or directory"],
    },
    // 3. resources and components entries that fail
    Case {
        name: "bases entry naming a missing directory",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- cm.yaml\nbases:\n- ../nothere\n",
            ),
            ("cm.yaml", CM),
        ],
        prefix: "kustomization.yaml:4: bases[0]: ",
        contains: &["accumulating resources from '../nothere'", "does not exist"],
    },
    Case {
        name: "missing resource file",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- cm.yaml\n- nothere.yaml\n",
            ),
            ("cm.yaml", CM),
        ],
        prefix: "kustomization.yaml:3: resources[1]: ",
        contains: &[
            "accumulating resources from 'nothere.yaml'",
            "does not exist",
        ],
    },
    Case {
        name: "resource outside the kustomization's directory",
        dir: "app",
        files: &[
            (
                "app/kustomization.yaml",
                "resources:\n- ../shared/cm.yaml\n",
            ),
            ("shared/cm.yaml", CM),
        ],
        prefix: "app/kustomization.yaml:2: resources[0] '../shared/cm.yaml': ",
        contains: &["security: file", "is not in or below"],
    },
    Case {
        name: "error deep in a base, placed at every includer",
        dir: "overlays/prod",
        files: &[
            (
                "overlays/prod/kustomization.yaml",
                "namePrefix: prod-\nresources:\n- ../../base\n",
            ),
            (
                "base/kustomization.yaml",
                "resources:\n- cm.yaml\npatches:\n- path: p.yaml\n",
            ),
            ("base/cm.yaml", CM),
            (
                "base/p.yaml",
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: a\n",
            ),
        ],
        prefix: "overlays/prod/kustomization.yaml:3: resources[0] '../../base': base/kustomization.yaml:4: patches[0] (path 'p.yaml'): base/p.yaml:1: ",
        contains: &["no matches for target Secret.v1.[noGrp]/a.[noNs]"],
    },
    Case {
        name: "component entry that is not a component",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- cm.yaml\ncomponents:\n- comp\n",
            ),
            ("cm.yaml", CM),
            ("comp/kustomization.yaml", "namePrefix: x-\n"),
        ],
        prefix: "kustomization.yaml:4: components[0] 'comp': ",
        contains: &["expected kind 'Component'"],
    },
    // 4. invalid resource documents
    Case {
        name: "resource document without a kind",
        dir: "",
        files: &[
            ("kustomization.yaml", "resources:\n- two.yaml\n"),
            (
                "two.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n# second\napiVersion: v1\nmetadata:\n  name: b\n",
            ),
        ],
        prefix: "kustomization.yaml:2: resources[0] 'two.yaml': two.yaml:7: ",
        contains: &["invalid resource", "missing 'kind'"],
    },
    Case {
        name: "List item without a name",
        dir: "",
        files: &[
            ("kustomization.yaml", "resources:\n- list.yaml\n"),
            (
                "list.yaml",
                "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {}\n",
            ),
        ],
        prefix: "kustomization.yaml:2: resources[0] 'list.yaml': list.yaml:8: ",
        contains: &["missing metadata.name"],
    },
    Case {
        name: "resource document that is not a mapping",
        dir: "",
        files: &[
            ("kustomization.yaml", "resources:\n- s.yaml\n"),
            ("s.yaml", "---\n- a\n- b\n"),
        ],
        prefix: "kustomization.yaml:2: resources[0] 's.yaml': s.yaml:2: ",
        contains: &["expected a mapping"],
    },
    // 5. duplicate ids
    Case {
        name: "duplicate id in two files",
        dir: "",
        files: &[
            ("kustomization.yaml", "resources:\n- a.yaml\n- b.yaml\n"),
            ("a.yaml", CM),
            (
                "b.yaml",
                "# again\n\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
            ),
        ],
        prefix: "kustomization.yaml:3: resources[1] 'b.yaml': b.yaml:3: ",
        contains: &[
            "may not add resource with an already registered id: ConfigMap.v1.[noGrp]/a.[noNs]",
            "(first defined at a.yaml:1)",
        ],
    },
    Case {
        name: "duplicate id from two bases",
        dir: "",
        files: &[
            ("kustomization.yaml", "resources:\n- one\n- two\n"),
            ("one/kustomization.yaml", "resources:\n- cm.yaml\n"),
            ("one/cm.yaml", CM),
            ("two/kustomization.yaml", "resources:\n- cm.yaml\n"),
            ("two/cm.yaml", CM),
        ],
        prefix: "kustomization.yaml:3: resources[1] 'two': two/cm.yaml:1: ",
        contains: &["already registered id", "(first defined at one/cm.yaml:1)"],
    },
    // 6. patches and replacements
    Case {
        name: "strategic merge patch file whose target is missing",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- cm.yaml\npatchesStrategicMerge:\n- p.yaml\n",
            ),
            ("cm.yaml", CM),
            (
                "p.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nope\n",
            ),
        ],
        prefix: "kustomization.yaml:4: patchesStrategicMerge[0] 'p.yaml': p.yaml:6: ",
        contains: &["no matches for target ConfigMap.v1.[noGrp]/nope.[noNs]"],
    },
    Case {
        name: "inline JSON 6902 patch that fails",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- deploy.yaml\npatches:\n- target:\n    kind: Deployment\n  patch: |\n    - op: remove\n      path: /spec/paused\n",
            ),
            ("deploy.yaml", DEPLOY),
        ],
        prefix: "kustomization.yaml:4: patches[0]: ",
        contains: &["json patch op 0"],
    },
    Case {
        name: "replacement whose source is missing",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- cm.yaml\n- deploy.yaml\nreplacements:\n- source:\n    kind: ConfigMap\n    name: a\n    fieldPath: data.k\n  targets:\n  - select:\n      kind: Deployment\n    fieldPaths:\n    - spec.template.spec.containers.0.image\n- source:\n    kind: Secret\n    name: gone\n  targets:\n  - select:\n      kind: Deployment\n    fieldPaths:\n    - metadata.annotations.x\n",
            ),
            ("cm.yaml", CM),
            ("deploy.yaml", DEPLOY),
        ],
        prefix: "kustomization.yaml:14: replacements[1]: ",
        contains: &["replacement 1", "gone"],
    },
    // 7. generators
    Case {
        name: "env file with a bad line",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "configMapGenerator:\n- name: ok\n  literals: [a=b]\n- name: env\n  envs:\n  - app.env\n",
            ),
            ("app.env", "# settings\nA=1\nB C=2\n"),
        ],
        prefix: "kustomization.yaml:4: configMapGenerator[1] (name 'env'): ",
        contains: &["env file 'app.env': app.env:3: invalid key 'B C'"],
    },
    Case {
        name: "generator file that does not exist",
        dir: "",
        files: &[(
            "kustomization.yaml",
            "secretGenerator:\n- name: s\n  files:\n  - tls.crt\n",
        )],
        prefix: "kustomization.yaml:2: secretGenerator[0] (name 's'): ",
        contains: &["tls.crt"],
    },
    Case {
        name: "generator merge without a base object",
        dir: "",
        files: &[
            (
                "kustomization.yaml",
                "resources:\n- cm.yaml\nconfigMapGenerator:\n- name: a\n  behavior: merge\n  literals: [x=y]\n- name: other\n  behavior: merge\n  literals: [x=y]\n",
            ),
            ("cm.yaml", CM),
        ],
        prefix: "kustomization.yaml:7: configMapGenerator[1] (name 'other'): ",
        contains: &["does not exist; cannot merge or replace"],
    },
];

/// The error's text with the tree's (real) path taken out.
fn error_text(root: &Path, e: &KustomizeError) -> String {
    let real = root.canonicalize().unwrap();
    e.to_string()
        .replace(&format!("{}/", real.display()), "")
        .replace(&format!("{}/", root.display()), "")
}

fn run(case: &Case) -> Result<(), String> {
    let t = tempfile::tempdir().unwrap();
    for (p, content) in case.files {
        let full = t.path().join(p);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, content).unwrap();
    }
    let dir = t.path().join(case.dir);
    let e = match build(&dir, &BuildOptions::default()) {
        Ok(_) => return Err(format!("{}: the build succeeded", case.name)),
        Err(e) => e,
    };
    let msg = error_text(t.path(), &e);
    if std::env::var_os("SHOW_ERRORS").is_some() {
        eprintln!("{}\n    {msg}", case.name);
    }
    if !msg.starts_with(case.prefix) {
        return Err(format!(
            "{}:\n  expected prefix {:?}\n  got             {msg:?}",
            case.name, case.prefix
        ));
    }
    for c in case.contains {
        if !msg.contains(c) {
            return Err(format!("{}: {msg:?} does not say {c:?}", case.name));
        }
    }
    Ok(())
}

#[test]
fn errors_name_file_and_line() {
    assert!(CASES.len() >= 15);
    let failures: Vec<String> = CASES.iter().filter_map(|c| run(c).err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

#[test]
fn location_and_cause_are_reachable() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(
        t.path().join("kustomization.yaml"),
        "resources:\n- cm.yaml\n- nothere.yaml\n",
    )
    .unwrap();
    std::fs::write(t.path().join("cm.yaml"), CM).unwrap();
    let e = build(t.path(), &BuildOptions::default()).unwrap_err();
    let at = e.location().expect("a location");
    assert_eq!(at.line, 3);
    assert!(at.file.ends_with("kustomization.yaml"));
    assert!(matches!(e.cause(), KustomizeError::Resource { .. }), "{e}");
}

#[test]
fn flux_build_places_errors_too() {
    // a Flux-generated kustomization has no file to point into; the resource still is
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("a.yaml"), CM).unwrap();
    std::fs::write(
        t.path().join("b.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
    )
    .unwrap();
    let e = build_flux(t.path(), Path::new("."), &Default::default()).unwrap_err();
    let msg = error_text(t.path(), &e);
    assert!(
        msg.starts_with("./b.yaml:1: may not add resource with an already registered id")
            && msg.contains("(first defined at ./a.yaml:1)"),
        "{msg}"
    );
}

#[test]
fn entries_flux_appends_are_not_placed_in_the_file() {
    // `spec.patches` entries are in no file: the error names the field, with no line
    let t = tempfile::tempdir().unwrap();
    std::fs::write(
        t.path().join("kustomization.yaml"),
        "resources:\n- cm.yaml\npatches:\n- patch: |\n    apiVersion: v1\n    kind: ConfigMap\n    metadata:\n      name: a\n",
    )
    .unwrap();
    std::fs::write(t.path().join("cm.yaml"), CM).unwrap();
    let overrides = rflux_kustomize::FluxOverrides {
        patches: vec![serde_json::json!({
            "patch": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gone\n"
        })],
        ..Default::default()
    };
    let e = build_flux(t.path(), Path::new("."), &overrides).unwrap_err();
    let msg = error_text(t.path(), &e);
    assert!(e.location().is_none(), "{msg}");
    assert!(
        msg.starts_with("kustomization.yaml: patches: no matches for target"),
        "{msg}"
    );
}
