//! Byte-for-byte comparison with Go: every case in `tests/cases/*.json` is rendered by the Go
//! program in `tests/oracle` (Go's text/template + slim-sprig v3 + the Flux Operator functions)
//! and by rflux-gotmpl. Skips, with a printed reason, when Go or the module proxy is missing.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rflux_gotmpl::{Options, parse};

fn go_binary() -> Option<PathBuf> {
    let p = PathBuf::from("/usr/local/go/bin/go");
    if p.exists() {
        return Some(p);
    }
    let out = Command::new("go").arg("version").output().ok()?;
    out.status.success().then(|| PathBuf::from("go"))
}

fn build_oracle() -> Result<PathBuf, String> {
    let go = go_binary().ok_or("no Go toolchain (/usr/local/go/bin/go or go in PATH)")?;
    let home = std::env::var("HOME").map_err(|_| "HOME is not set")?;
    let dir = Path::new(&home).join(".cache/gitops-e2e");
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let bin = dir.join("gotmpl-oracle");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle");
    let mut cmd = Command::new(go);
    cmd.args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(&src);
    cmd.env("GOFLAGS", "-mod=mod");
    if std::env::var_os("GOPROXY").is_none() {
        cmd.env("GOPROXY", "https://proxy.golang.org");
    }
    let out = cmd.output().map_err(|e| format!("run go build: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "go build failed (module proxy unavailable?): {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(bin)
}

struct Case {
    file: String,
    name: String,
    template: String,
    inputs: Option<serde_json::Value>,
}

fn load_cases() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let list: Vec<serde_json::Value> =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for c in list {
            cases.push(Case {
                file: f.file_name().unwrap().to_string_lossy().into_owned(),
                name: c["name"].as_str().unwrap().to_string(),
                template: c["template"].as_str().unwrap().to_string(),
                inputs: c.get("inputs").cloned().filter(|v| !v.is_null()),
            });
        }
    }
    cases
}

fn run_oracle(bin: &Path, cases: &[Case]) -> Vec<(String, Option<String>)> {
    let input: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| serde_json::json!({"template": c.template, "inputs": c.inputs}))
        .collect();
    let mut child = Command::new(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start oracle");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(serde_json::to_string(&input).unwrap().as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().expect("oracle output");
    assert!(out.status.success(), "oracle failed");
    let results: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("oracle JSON");
    results
        .into_iter()
        .map(|r| {
            (
                r["output"].as_str().unwrap_or("").to_string(),
                r.get("error").and_then(|e| e.as_str()).map(str::to_string),
            )
        })
        .collect()
}

#[test]
fn matches_go_byte_for_byte() {
    let bin = match build_oracle() {
        Ok(b) => b,
        Err(reason) => {
            println!("SKIP go_oracle: {reason}");
            return;
        }
    };
    let cases = load_cases();
    assert!(cases.len() >= 200, "only {} cases", cases.len());
    let want = run_oracle(&bin, &cases);
    assert_eq!(want.len(), cases.len());
    let opts = Options::default();
    let mut failures = Vec::new();
    for (c, (w_out, w_err)) in cases.iter().zip(want) {
        let got =
            parse("resourceset", &c.template, &opts).and_then(|t| t.render(c.inputs.as_ref()));
        let ok = match (&got, &w_err) {
            (Ok(g), None) => *g == w_out,
            (Err(g), Some(w)) => g.to_string() == *w,
            _ => false,
        };
        if !ok {
            failures.push(format!(
                "[{}] {}\n  template: {:?}\n  go:   {}\n  rust: {}",
                c.file,
                c.name,
                c.template,
                match &w_err {
                    Some(e) => format!("ERROR {e:?}"),
                    None => format!("{w_out:?}"),
                },
                match &got {
                    Ok(g) => format!("{g:?}"),
                    Err(e) => format!("ERROR {:?}", e.to_string()),
                }
            ));
        }
    }
    println!("{} cases, {} mismatches", cases.len(), failures.len());
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from Go:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
