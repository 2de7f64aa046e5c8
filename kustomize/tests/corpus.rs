#![allow(clippy::unwrap_used)]
//! Builds every case of the shared kustomize corpus (../shared/kustomize-corpus) and of our own
//! corpus (tests/own_corpus) and compares the objects with the reference output (same
//! sequence, deep-equal values; mapping key order ignored), then the printed text byte for byte.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rflux_kustomize::yaml::parse_stream;
use rflux_kustomize::{BuildOptions, LoadRestrictor, build};
use serde_json::Value;

/// The shared corpus; `KUSTOMIZE_CORPUS_DIR` points the test at another tree of the same layout.
fn corpus_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KUSTOMIZE_CORPUS_DIR") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("..")
        .join("shared")
        .join("kustomize-corpus")
}

fn toml_str(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        if k.trim() != key {
            return None;
        }
        let v = v.trim();
        Some(v.strip_prefix('"')?.strip_suffix('"')?.to_string())
    })
}

fn key(v: &Value) -> String {
    let s = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    format!(
        "{}/{}/{}/{}",
        s("/apiVersion"),
        s("/kind"),
        s("/metadata/namespace"),
        s("/metadata/name")
    )
}

fn first_diff(path: &str, a: &Value, b: &Value) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => {
                        if let Some(d) = first_diff(&format!("{path}/{k}"), p, q) {
                            return Some(d);
                        }
                    }
                    (p, q) => return Some(format!("{path}/{k}: got {p:?}, expected {q:?}")),
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_diff(&format!("{path}/{i}"), p, q)),
        _ if a == b => None,
        (Value::String(x), Value::String(y)) => {
            let at = x.chars().zip(y.chars()).take_while(|(p, q)| p == q).count();
            let ctx = |s: &str| {
                s.chars()
                    .skip(at.saturating_sub(20))
                    .take(60)
                    .collect::<String>()
            };
            Some(format!(
                "{path}: strings differ at char {at}: got {:?}, expected {:?}",
                ctx(x),
                ctx(y)
            ))
        }
        _ => {
            let trunc = |v: &Value| {
                let s = v.to_string();
                if s.len() > 300 {
                    format!("{}...", &s[..300])
                } else {
                    s
                }
            };
            Some(format!("{path}: got {}, expected {}", trunc(a), trunc(b)))
        }
    }
}

fn compare(got: &[Value], expected: &[Value]) -> Option<String> {
    if got == expected {
        return None;
    }
    let gk: BTreeSet<String> = got.iter().map(key).collect();
    let ek: BTreeSet<String> = expected.iter().map(key).collect();
    let missing: Vec<&String> = ek.difference(&gk).take(5).collect();
    let extra: Vec<&String> = gk.difference(&ek).take(5).collect();
    let mut msg = format!("got {} objects, expected {}", got.len(), expected.len());
    if !missing.is_empty() || !extra.is_empty() {
        msg.push_str(&format!("; missing {missing:?}; unexpected {extra:?}"));
    }
    if got.len() == expected.len() {
        for (g, e) in got.iter().zip(expected) {
            if key(g) != key(e) {
                msg.push_str(&format!(
                    "; order differs first at {} vs expected {}",
                    key(g),
                    key(e)
                ));
                break;
            }
            if let Some(d) = first_diff(&key(g), g, e) {
                msg.push_str(&format!("; first difference {d}"));
                break;
            }
        }
    }
    Some(msg)
}

/// How one case came out: `None` when the objects and the printed text both match.
struct Outcome {
    objects_match: bool,
    bytes_match: bool,
    problem: Option<String>,
}

fn run_case(case: &Path, only: bool) -> Outcome {
    let meta = std::fs::read_to_string(case.join("case.toml")).unwrap();
    let input = toml_str(&meta, "input").unwrap();
    let kdir = toml_str(&meta, "kustomization_dir").unwrap();
    let restrictor = match toml_str(&meta, "load_restrictor").as_deref() {
        Some("none") => LoadRestrictor::None,
        _ => LoadRestrictor::RootOnly,
    };
    let build_dir = case.join(&input).join(&kdir);
    let expected_text = std::fs::read_to_string(case.join("expected.yaml")).unwrap();
    let expected = parse_stream(&expected_text, "expected.yaml").unwrap();
    let opts = BuildOptions {
        load_restrictor: restrictor,
        ..Default::default()
    };
    let fail = |p: String| Outcome {
        objects_match: false,
        bytes_match: false,
        problem: Some(p),
    };
    let objs = match build(&build_dir, &opts) {
        Err(e) => return fail(format!("build error: {e}")),
        Ok(objs) => objs,
    };
    let got: Vec<Value> = objs.into_iter().map(|r| r.obj).collect();
    // compare through our own YAML text, so the printer is covered too
    let text = rflux_kustomize::to_yaml_stream(&got);
    if only {
        std::fs::write("/tmp/corpus-got.yaml", &text).unwrap();
    }
    let back = match parse_stream(&text, "output") {
        Err(e) => return fail(format!("output does not parse back: {e}")),
        Ok(back) => back,
    };
    if let Some(p) = compare(&back, &expected) {
        return fail(p);
    }
    // strict check: the same objects must also print byte for byte alike
    if text != expected_text {
        let line = text
            .lines()
            .zip(expected_text.lines())
            .position(|(a, b)| a != b);
        return Outcome {
            objects_match: true,
            bytes_match: false,
            problem: Some(format!(
                "same objects but the text differs (first at line {})",
                line.map_or(0, |l| l + 1)
            )),
        };
    }
    Outcome {
        objects_match: true,
        bytes_match: true,
        problem: None,
    }
}

/// Runs every case under `<dir>/cases/<owner>__<repo>/<case>` and checks the result against
/// the known-failures file: a case fails when its objects or its printed text differ.
fn run_corpus(label: &str, dir: &Path, known_failures: &str) {
    let known_text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests")
            .join(known_failures),
    )
    .unwrap_or_default();
    let known: BTreeSet<String> = known_text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();

    let mut cases = Vec::new();
    for owner in std::fs::read_dir(dir.join("cases")).unwrap() {
        let owner = owner.unwrap().path();
        for case in std::fs::read_dir(&owner).unwrap() {
            cases.push(case.unwrap().path());
        }
    }
    cases.sort();
    // CORPUS_CASE=<substring> runs only matching cases and writes the output to
    // /tmp/corpus-got.yaml.
    let only = std::env::var("CORPUS_CASE").ok();
    if let Some(o) = &only {
        cases.retain(|c| c.display().to_string().contains(o.as_str()));
    }
    let (mut passed, mut failed, mut objects_ok, mut bytes_ok) = (0, 0, 0, 0);
    let mut unexpected_failures = Vec::new();
    let mut unexpected_passes = Vec::new();
    let mut total_ms = 0u128;
    for case in &cases {
        let name = case
            .strip_prefix(dir.join("cases"))
            .unwrap()
            .display()
            .to_string();
        let start = std::time::Instant::now();
        let outcome = run_case(case, only.is_some());
        total_ms += start.elapsed().as_millis();
        objects_ok += usize::from(outcome.objects_match);
        bytes_ok += usize::from(outcome.bytes_match);
        match outcome.problem {
            None => {
                passed += 1;
                if known.contains(&name) {
                    unexpected_passes.push(name);
                }
            }
            Some(p) => {
                failed += 1;
                println!("FAIL {name}: {p}");
                if !known.contains(&name) {
                    unexpected_failures.push(name);
                }
            }
        }
    }
    println!(
        "{label}: {passed} passed, {failed} failed of {} cases; objects equal in {objects_ok}, \
         text byte-identical in {bytes_ok} ({total_ms} ms building)",
        cases.len()
    );
    if only.is_some() {
        return;
    }
    assert!(
        unexpected_failures.is_empty(),
        "cases failing that are not in {known_failures}: {unexpected_failures:#?}"
    );
    assert!(
        unexpected_passes.is_empty(),
        "cases listed in {known_failures} that now pass: {unexpected_passes:#?}"
    );
}

#[test]
fn corpus_parity() {
    let dir = corpus_dir();
    if !dir.join("cases").is_dir() {
        println!("skipped: kustomize corpus not found at {}", dir.display());
        return;
    }
    run_corpus("corpus", &dir, "corpus-known-failures.txt");
}

/// Our own corpus (tests/own_corpus, see its README.md): always present, never skipped.
#[test]
fn own_corpus_parity() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/own_corpus");
    assert!(dir.join("cases").is_dir(), "missing {}", dir.display());
    run_corpus("own corpus", &dir, "own-corpus-known-failures.txt");
}
