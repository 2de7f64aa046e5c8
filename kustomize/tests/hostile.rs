//! Hostile kustomization trees: deep base chains, exponential diamonds, oversized files. Each
//! must end in a result or a clear error, quickly, on the 2 MiB stack of a tokio blocking
//! thread.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use rflux_kustomize::{
    Budget, BudgetExceeded, BuildOptions, FluxOverrides, KustomizeError, Resource, build,
    build_flux_with,
};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n";

/// `l0 -> l1 -> ... -> l<links>`, each `resources: [../l<i+1>]`; the last holds one ConfigMap.
fn chain(dir: &Path, links: usize) {
    for i in 0..links {
        write(
            &dir.join(format!("l{i}/kustomization.yaml")),
            &format!("resources:\n- ../l{}\n", i + 1),
        );
    }
    write(
        &dir.join(format!("l{links}/kustomization.yaml")),
        "resources:\n- cm.yaml\n",
    );
    write(&dir.join(format!("l{links}/cm.yaml")), CM);
}

/// Runs `f` on a thread with the 2 MiB stack of a tokio blocking thread.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

fn build_with(dir: &Path, budget: Budget) -> Result<Vec<Resource>, KustomizeError> {
    let opts = BuildOptions {
        budget,
        ..Default::default()
    };
    let dir = dir.to_path_buf();
    on_small_stack(move || build(&dir, &opts))
}

#[test]
fn deep_chain_builds_on_a_small_stack() {
    // The recursive build overflowed a 2 MiB stack after about 110 levels in a debug build
    // and 780 in a release build, aborting the process.
    let t = tempfile::tempdir().unwrap();
    chain(t.path(), 3000);
    let out = build_with(&t.path().join("l0"), Budget::default()).unwrap();
    assert_eq!(out.len(), 1);
}

#[test]
fn chain_deeper_than_the_bound_is_an_error() {
    let t = tempfile::tempdir().unwrap();
    chain(t.path(), 150);
    let budget = Budget {
        max_depth: 100,
        ..Budget::default()
    };
    // 100 nested kustomizations (l51 to l150) are allowed ...
    assert_eq!(
        build_with(&t.path().join("l51"), budget.clone())
            .unwrap()
            .len(),
        1
    );
    // ... 101 are not.
    let e = build_with(&t.path().join("l50"), budget.clone()).unwrap_err();
    assert!(
        matches!(e, KustomizeError::Budget(BudgetExceeded::Depth(100))),
        "{e}"
    );
    assert!(e.to_string().contains("nested more than 100 deep"), "{e}");
    let e = build_with(&t.path().join("l0"), budget).unwrap_err();
    assert!(matches!(
        e,
        KustomizeError::Budget(BudgetExceeded::Depth(100))
    ));
}

/// Level `i` uses level `i + 1` twice, as a base and as a `transformers:` directory; the last
/// level is one LabelTransformer configuration. The output is that one object, labelled, but
/// built along every path it is 2^levels builds.
fn transformer_diamond(dir: &Path, levels: usize) {
    for i in 0..levels {
        write(
            &dir.join(format!("l{i}/kustomization.yaml")),
            &format!(
                "resources:\n- ../l{n}\ntransformers:\n- ../l{n}\n",
                n = i + 1
            ),
        );
    }
    write(
        &dir.join(format!("l{levels}/kustomization.yaml")),
        "resources:\n- lt.yaml\n",
    );
    write(
        &dir.join(format!("l{levels}/lt.yaml")),
        "apiVersion: builtin\nkind: LabelTransformer\nmetadata:\n  name: lt\nlabels:\n  x: y\n\
         fieldSpecs:\n- path: metadata/labels\n  create: true\n",
    );
}

#[test]
fn diamond_of_reused_bases_builds_fast() {
    // 14 levels took a minute before (each base was built along every path); 30 would take
    // days.
    let t = tempfile::tempdir().unwrap();
    transformer_diamond(t.path(), 30);
    let start = Instant::now();
    let out = build_with(&t.path().join("l0"), Budget::default()).unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].obj["metadata"]["labels"]["x"], "y");
}

/// Level `i` includes two overlays (`namePrefix: a-` and `b-`) of level `i + 1`: the output
/// doubles with every level.
fn doubling_diamond(dir: &Path, levels: usize) {
    for i in 0..levels {
        write(
            &dir.join(format!("l{i}/kustomization.yaml")),
            &format!("resources:\n- ../a{i}\n- ../b{i}\n"),
        );
        for side in ["a", "b"] {
            write(
                &dir.join(format!("{side}{i}/kustomization.yaml")),
                &format!("namePrefix: {side}-\nresources:\n- ../l{}\n", i + 1),
            );
        }
    }
    write(
        &dir.join(format!("l{levels}/kustomization.yaml")),
        "resources:\n- cm.yaml\n",
    );
    write(&dir.join(format!("l{levels}/cm.yaml")), CM);
}

#[test]
fn doubling_diamond_runs_into_the_object_budget() {
    let t = tempfile::tempdir().unwrap();
    doubling_diamond(t.path(), 4);
    let out = build_with(&t.path().join("l0"), Budget::default()).unwrap();
    assert_eq!(out.len(), 16);
    assert!(out.iter().any(|r| r.name() == "a-b-b-a-cm"));

    doubling_diamond(t.path(), 25);
    let budget = Budget {
        max_resources: 5_000,
        ..Budget::default()
    };
    let start = Instant::now();
    let e = build_with(&t.path().join("l0"), budget).unwrap_err();
    assert!(
        matches!(e, KustomizeError::Budget(BudgetExceeded::Resources(5_000))),
        "{e}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn component_diamond_runs_into_the_deadline() {
    // Components work on their includer's objects, so they are applied along every path:
    // 2^25 applications. The deadline ends it.
    let t = tempfile::tempdir().unwrap();
    let levels = 25;
    write(
        &t.path().join("top/kustomization.yaml"),
        "resources:\n- cm.yaml\ncomponents:\n- ../k0a\n- ../k0b\n",
    );
    write(&t.path().join("top/cm.yaml"), CM);
    for i in 0..levels {
        for side in ["a", "b"] {
            let next = if i + 1 < levels {
                format!("components:\n- ../k{n}a\n- ../k{n}b\n", n = i + 1)
            } else {
                String::new()
            };
            write(
                &t.path().join(format!("k{i}{side}/kustomization.yaml")),
                &format!(
                    "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n\
                     commonAnnotations:\n  k{i}{side}: x\n{next}"
                ),
            );
        }
    }
    let budget = Budget {
        timeout: Duration::from_secs(1),
        ..Budget::default()
    };
    let start = Instant::now();
    let e = build_with(&t.path().join("top"), budget).unwrap_err();
    assert!(
        matches!(e, KustomizeError::Budget(BudgetExceeded::Time(_))),
        "{e}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn bytes_read_are_bounded() {
    let t = tempfile::tempdir().unwrap();
    let mut resources = String::from("resources:\n");
    for i in 0..20 {
        let cm = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i}\ndata:\n  k: {}\n",
            "x".repeat(1000)
        );
        write(&t.path().join(format!("c{i}.yaml")), &cm);
        resources.push_str(&format!("- c{i}.yaml\n"));
    }
    write(&t.path().join("kustomization.yaml"), &resources);
    assert_eq!(build_with(t.path(), Budget::default()).unwrap().len(), 20);
    let budget = Budget {
        max_bytes: 10_000,
        ..Budget::default()
    };
    let e = build_with(t.path(), budget).unwrap_err();
    assert!(
        matches!(e, KustomizeError::Budget(BudgetExceeded::Bytes(10_000))),
        "{e}"
    );
}

/// A file of `len` bytes that takes no disk space (and no time to write).
fn sparse(path: &Path, len: u64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::File::create(path).unwrap().set_len(len).unwrap();
}

#[test]
fn oversized_files_are_refused_without_reading_them() {
    const HUGE: u64 = 8 << 30;
    let cases: &[(&str, &str)] = &[
        ("resources:\n- big.yaml\n", "big.yaml"),
        (
            "configMapGenerator:\n- name: g\n  files:\n  - big.bin\n",
            "big.bin",
        ),
        (
            "configMapGenerator:\n- name: g\n  envs:\n  - big.env\n",
            "big.env",
        ),
        (
            "resources:\n- cm.yaml\npatches:\n- path: big.yaml\n",
            "big.yaml",
        ),
        (
            "resources:\n- cm.yaml\npatchesStrategicMerge:\n- big.yaml\n",
            "big.yaml",
        ),
    ];
    for (kustomization, big) in cases {
        let t = tempfile::tempdir().unwrap();
        write(&t.path().join("kustomization.yaml"), kustomization);
        write(&t.path().join("cm.yaml"), CM);
        sparse(&t.path().join(big), HUGE);
        let start = Instant::now();
        let e = build_with(t.path(), Budget::default()).unwrap_err();
        assert!(e.to_string().contains("larger than the limit"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(5), "{kustomization}");
    }
    // A kustomization file too.
    let t = tempfile::tempdir().unwrap();
    sparse(&t.path().join("kustomization.yaml"), HUGE);
    let e = build_with(t.path(), Budget::default()).unwrap_err();
    assert!(e.to_string().contains("larger than the limit"), "{e}");
}

#[test]
fn flux_generated_kustomization_refuses_oversized_files() {
    // Without a kustomization file, every YAML file below the path is read (and must parse).
    let t = tempfile::tempdir().unwrap();
    write(&t.path().join("app/cm.yaml"), CM);
    sparse(&t.path().join("app/deep/big.yaml"), 8 << 30);
    let start = Instant::now();
    let root = t.path().to_path_buf();
    let e = on_small_stack(move || {
        build_flux_with(
            &root,
            Path::new("app"),
            &FluxOverrides::default(),
            &Budget::default(),
        )
    })
    .unwrap_err();
    assert!(e.to_string().contains("larger than the limit"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn flux_generated_kustomization_walks_deep_trees_on_a_small_stack() {
    let t = tempfile::tempdir().unwrap();
    let mut dir = t.path().join("app");
    for _ in 0..1000 {
        dir.push("d");
    }
    write(&dir.join("cm.yaml"), CM);
    let root = t.path().to_path_buf();
    let out = on_small_stack(move || {
        build_flux_with(
            &root,
            Path::new("app"),
            &FluxOverrides::default(),
            &Budget::default(),
        )
    })
    .unwrap();
    assert_eq!(out.len(), 1);
}

/// A JSON 6902 patch that nests `/spec` one level deeper `levels` times.
fn nesting_patch(levels: usize) -> String {
    let mut ops = String::from("- op: add\n  path: /spec\n  value: {x: 1}\n");
    for _ in 0..levels {
        ops.push_str(
            "- op: add\n  path: /data\n  value: {}\n\
             - op: move\n  from: /spec\n  path: /data/s\n\
             - op: move\n  from: /data\n  path: /spec\n",
        );
    }
    ops
}

#[test]
fn patches_cannot_nest_objects_without_bound() {
    let t = tempfile::tempdir().unwrap();
    write(&t.path().join("cm.yaml"), CM);
    write(
        &t.path().join("kustomization.yaml"),
        "resources: [cm.yaml]\npatches:\n- path: p.yaml\n  target: {kind: ConfigMap}\n",
    );
    // Deep but within the bound: builds, prints and is dropped on a small stack.
    write(&t.path().join("p.yaml"), &nesting_patch(500));
    let dir = t.path().to_path_buf();
    let printed = on_small_stack(move || {
        let out = build(&dir, &BuildOptions::default()).unwrap();
        let objs: Vec<serde_json::Value> = out.iter().map(|r| r.obj.clone()).collect();
        rflux_kustomize::to_yaml_stream(&objs).len()
    });
    assert!(printed > 500);
    // Deeper: a clear error (it aborted the process at about 10 000 levels before).
    write(&t.path().join("p.yaml"), &nesting_patch(20_000));
    let e = build_with(t.path(), Budget::default()).unwrap_err();
    assert!(e.to_string().contains("nested more than 512 deep"), "{e}");
}

#[test]
fn field_paths_are_bounded() {
    let deep_slash = vec!["a"; 20_000].join("/");
    let deep_dot = vec!["a"; 20_000].join(".");
    let cases = [
        (
            "resources: [cm.yaml]\nconfigurations: [c.yaml]\ncommonLabels: {x: y}\n".to_string(),
            format!("commonLabels:\n- path: {deep_slash}\n  create: true\n"),
            "more than 512 segments",
        ),
        (
            "resources: [cm.yaml]\ntransformers: [c.yaml]\n".to_string(),
            format!(
                "apiVersion: builtin\nkind: ValueAddTransformer\nmetadata:\n  name: v\n\
                 value: z\ntargets:\n- fieldPath: {deep_slash}\n"
            ),
            "more than 512 segments",
        ),
        (
            format!(
                "resources: [cm.yaml]\nreplacements:\n- source: {{kind: ConfigMap, name: cm}}\n  \
                 targets:\n  - select: {{kind: ConfigMap}}\n    fieldPaths: [{deep_dot}]\n    \
                 options: {{create: true}}\n"
            ),
            String::new(),
            "nested more than 512 deep",
        ),
    ];
    for (kustomization, extra, message) in cases {
        let t = tempfile::tempdir().unwrap();
        write(&t.path().join("cm.yaml"), CM);
        write(&t.path().join("kustomization.yaml"), &kustomization);
        write(&t.path().join("c.yaml"), &extra);
        // These aborted the process on a 2 MiB stack before.
        let e = build_with(t.path(), Budget::default()).unwrap_err();
        assert!(e.to_string().contains(message), "{e}");
    }
}

#[test]
fn ladder_of_shared_bases_builds_fast() {
    // Directory `i` includes `i + 1` and `i + 2`: built along every path this is a Fibonacci
    // number of builds; the bookkeeping of reused results stays linear in the tree.
    let t = tempfile::tempdir().unwrap();
    let n = 400;
    for i in 0..n {
        write(
            &t.path().join(format!("d{i}/kustomization.yaml")),
            &format!("resources:\n- ../d{}\n- ../d{}\n", i + 1, i + 2),
        );
    }
    for i in [n, n + 1] {
        write(
            &t.path().join(format!("d{i}/kustomization.yaml")),
            "resources: []\n",
        );
    }
    let start = Instant::now();
    let out = build_with(&t.path().join("d0"), Budget::default()).unwrap();
    assert!(out.is_empty());
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_reused_base_still_detects_cycles() {
    // `x` is built twice (through `a` and `b`) and remembered; the third inclusion comes from
    // inside `p`, which `x` includes: a cycle there, as kubectl reports it too.
    let t = tempfile::tempdir().unwrap();
    let files = [
        (
            "a/kustomization.yaml",
            "namePrefix: a-\nresources: [../x]\n",
        ),
        (
            "b/kustomization.yaml",
            "namePrefix: b-\nresources: [../x]\n",
        ),
        (
            "p/q/overlay/kustomization.yaml",
            "namePrefix: o-\nresources: [../../../x]\n",
        ),
        ("x/kustomization.yaml", "resources: [../p]\n"),
        ("p/kustomization.yaml", "resources: [cm.yaml]\n"),
        ("p/cm.yaml", CM),
        ("top/kustomization.yaml", "resources: [../a, ../b]\n"),
    ];
    for (p, text) in files {
        write(&t.path().join(p), text);
    }
    let out = build_with(&t.path().join("top"), Budget::default()).unwrap();
    assert_eq!(out.len(), 2);
    write(
        &t.path().join("top/kustomization.yaml"),
        "resources: [../a, ../b, ../p/q/overlay]\n",
    );
    let e = build_with(&t.path().join("top"), Budget::default()).unwrap_err();
    assert!(e.to_string().contains("cycle detected"), "{e}");
}
