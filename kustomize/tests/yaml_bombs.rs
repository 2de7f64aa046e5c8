//! Hostile YAML: alias bombs ("billion laughs"), anchor copies, deep nesting, alias cycles.
//!
//! Each hostile case runs in a child process (this test binary re-run with `child_entry` and
//! the case name in `RFLUX_YAML_BOMB_CASE`) under `ulimit -v` and a wall-clock timeout, so a
//! regression ends in a failed test instead of an exhausted machine. The child parses on a
//! thread with a 2 MiB stack (the size of tokio's blocking threads) and reports the outcome,
//! the time taken and how far its peak resident memory rose during the parse.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rflux_kustomize::KustomizeError;
use rflux_kustomize::yaml::{
    Limits, MAX_DEPTH_CEILING, parse_one, parse_one_with, parse_stream, parse_stream_tracked,
    parse_stream_with, to_yaml,
};
use sha2::{Digest as _, Sha256};

const CHILD_ENV: &str = "RFLUX_YAML_BOMB_CASE";
/// Address-space limit of a child, in KiB (a safety net, not the property under test).
const CHILD_VM_KB: u64 = 3 * 1024 * 1024;
/// A child that runs longer than this is killed.
const CHILD_TIMEOUT: Duration = Duration::from_secs(90);
/// Stack of the parsing thread.
const SMALL_STACK: usize = 2 * 1024 * 1024;

/// Upper bounds for a rejected bomb: generous for an unoptimised build on a busy machine.
const MAX_MS: u128 = 5_000;
const MAX_PEAK_KB: u64 = 96 * 1024;

// ---------------------------------------------------------------------------------------------
// Inputs

/// The classic: ten lists of ten aliases of the previous list, about 800 bytes, 10^10 nodes.
fn laughs_classic() -> String {
    let mut t = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let p = format!("*a{}", i - 1);
        t.push_str(&format!("a{i}: &a{i} [{}]\n", vec![p; 10].join(", ")));
    }
    t
}

/// About 1 KB: a 600-byte scalar aliased through six levels of ten (600 MB expanded), with
/// few enough nodes (a million) that a node count alone does not stop it.
fn laughs_big_scalar_1kb() -> String {
    let mut t = format!("s: &s {}\n", "x".repeat(600));
    let mut prev = "s".to_string();
    for i in 1..7 {
        t.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            vec![format!("*{prev}"); 10].join(", ")
        ));
        prev = format!("a{i}");
    }
    t
}

/// About 1 MB: a 900 KiB scalar, then nine levels of ten aliases.
fn laughs_1mb() -> String {
    let mut t = format!("s: &s \"{}\"\n", "lol ".repeat(900 * 256));
    let mut prev = "s".to_string();
    for i in 1..10 {
        t.push_str(&format!(
            "a{i}: &a{i} [{}]\n",
            vec![format!("*{prev}"); 10].join(", ")
        ));
        prev = format!("a{i}");
    }
    t
}

/// About 1 MB: one 1 KiB scalar aliased 250 000 times in a flat list (250 MB expanded).
fn many_aliases_1mb() -> String {
    let mut t = format!("s: &s {}\nl: [", "y".repeat(1024));
    t.push_str(&vec!["*s"; 250_000].join(", "));
    t.push_str("]\n");
    t
}

/// No alias at all, but 200 nested anchored lists around a 1 MiB scalar: each anchor keeps a
/// copy of its node for later aliases.
fn nested_anchor_copies() -> String {
    let n = 200;
    let mut t = String::from("v: ");
    for i in 0..n {
        t.push_str(&format!("&a{i} ["));
    }
    t.push_str(&"z".repeat(1 << 20));
    t.push_str(&"]".repeat(n));
    t.push('\n');
    t
}

/// 20 000 `key:` values 250 levels deep in 170 KB: tracked parsing records the full path of
/// each (320 MB of paths).
fn tracked_empties() -> String {
    let depth = 250;
    let mut t = String::new();
    for i in 0..depth {
        t.push_str(&format!("{{k{i}: "));
    }
    let empties: Vec<String> = (0..20_000).map(|i| format!("e{i}:")).collect();
    t.push('{');
    t.push_str(&empties.join(", "));
    t.push('}');
    t.push_str(&"}".repeat(depth));
    t.push('\n');
    t
}

fn deep_flow_seq() -> String {
    format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000))
}

fn deep_flow_map() -> String {
    format!("{}1{}", "{a: ".repeat(100_000), "}".repeat(100_000))
}

fn deep_block_seq() -> String {
    format!("{}x\n", "- ".repeat(100_000))
}

/// Block mappings nested 3000 deep (indentation makes this 4.5 MB).
fn deep_block_map() -> String {
    let mut t = String::new();
    for i in 0..3000 {
        t.push_str(&" ".repeat(i));
        t.push_str("k:\n");
    }
    t
}

fn case_input(case: &str) -> String {
    match case {
        "laughs_classic" => laughs_classic(),
        "laughs_big_scalar_1kb" => laughs_big_scalar_1kb(),
        "laughs_1mb" => laughs_1mb(),
        "many_aliases_1mb" => many_aliases_1mb(),
        "nested_anchor_copies" => nested_anchor_copies(),
        "tracked_empties" => tracked_empties(),
        "deep_flow_seq" => deep_flow_seq(),
        "deep_flow_map" => deep_flow_map(),
        "deep_block_seq" | "deep_block_seq_raised_limit" => deep_block_seq(),
        "deep_block_map" => deep_block_map(),
        "deep_ceiling_print" => String::new(),
        other => panic!("unknown case {other}"),
    }
}

/// Parses the case's input; `Ok` is a short description of a successful parse.
fn run_case(case: &str, input: &str) -> Result<String, KustomizeError> {
    let origin = format!("{case}.yaml");
    match case {
        "tracked_empties" => {
            let docs = parse_stream_tracked(input, &origin)?;
            Ok(format!("{} docs", docs.len()))
        }
        "deep_ceiling_print" => deep_ceiling_print(),
        "deep_block_seq_raised_limit" => {
            let limits = Limits {
                max_depth: usize::MAX,
                ..Limits::default()
            };
            let docs = parse_stream_with(input, &origin, limits)?;
            Ok(format!("{} docs", docs.len()))
        }
        _ => {
            let v = parse_one(input, &origin)?;
            Ok(format!(
                "parsed a {}",
                if v.is_object() { "map" } else { "value" }
            ))
        }
    }
}

/// The deepest documents accepted parse, print, clone, compare and drop on a small stack.
fn deep_ceiling_print() -> Result<String, KustomizeError> {
    let limits = Limits {
        max_depth: MAX_DEPTH_CEILING,
        ..Limits::default()
    };
    let seq = format!("{}x\n", "- ".repeat(MAX_DEPTH_CEILING));
    let mut map = String::new();
    for i in 0..MAX_DEPTH_CEILING {
        map.push_str(&" ".repeat(i));
        map.push_str(if i + 1 == MAX_DEPTH_CEILING {
            "k: x\n"
        } else {
            "k:\n"
        });
    }
    let mut printed = 0;
    for text in [seq, map] {
        let docs = parse_stream_with(&text, "deep_ceiling_print.yaml", limits)?;
        let out = to_yaml(&docs[0]);
        let back = parse_stream_with(&out, "printed", limits)?;
        let copy = back.clone();
        assert_eq!(copy, docs);
        printed += out.len();
    }
    Ok(format!("printed {printed} bytes"))
}

// ---------------------------------------------------------------------------------------------
// Child process harness

/// Resident set size and its peak, in KiB, from /proc (None elsewhere).
fn rss_kb() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Runs in the child: the test is a no-op unless the harness set the case.
#[test]
fn child_entry() {
    let Ok(case) = std::env::var(CHILD_ENV) else {
        return;
    };
    let input = case_input(&case);
    // Resets the peak resident size to the current one (Linux).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = rss_kb().map_or(0, |(rss, _)| rss);
    let start = Instant::now();
    let name = case.clone();
    let outcome = std::thread::Builder::new()
        .stack_size(SMALL_STACK)
        .spawn(move || {
            run_case(&name, &input).map_err(|e| {
                let kind = if matches!(e, KustomizeError::YamlLimit { .. }) {
                    "limit"
                } else {
                    "error"
                };
                format!("{kind}: {e}")
            })
        })
        .expect("spawn parser thread")
        .join()
        .unwrap_or_else(|_| Err("panic".to_string()));
    let ms = start.elapsed().as_millis();
    let peak = rss_kb().map_or(0, |(_, hwm)| hwm.saturating_sub(before));
    let (status, text) = match outcome {
        Ok(s) => ("ok", s),
        Err(s) => ("err", s),
    };
    println!("YAMLBOMB|{status}|{ms}|{peak}|{}", text.replace('\n', " "));
}

struct Report {
    ok: bool,
    text: String,
    ms: u128,
    peak_kb: u64,
}

fn in_child(case: &str) -> Report {
    let exe = std::env::current_exe().expect("current exe");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {CHILD_VM_KB} && exec \"$0\" \"$@\""))
        .arg(&exe)
        .args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, case)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for child") {
            break s;
        }
        if start.elapsed() > CHILD_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{case}: still running after {CHILD_TIMEOUT:?}, killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    let err_tail: String = err
        .chars()
        .rev()
        .take(600)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    // libtest prints `test child_entry ... ` before the line on the same line
    let found = out
        .split_once("YAMLBOMB|")
        .map(|(_, rest)| rest.lines().next().unwrap_or(""));
    let Some(line) = found else {
        panic!(
            "{case}: child died ({status}) after {:?}; stderr: {err_tail}",
            start.elapsed()
        );
    };
    let mut parts = line.splitn(4, '|');
    let ok = parts.next() == Some("ok");
    let ms = parts
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(u128::MAX);
    let peak_kb = parts
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX);
    let text = parts.next().unwrap_or_default().to_string();
    eprintln!(
        "{case}: ok={ok} {ms} ms, peak +{} MiB: {text:.200}",
        peak_kb / 1024
    );
    Report {
        ok,
        text,
        ms,
        peak_kb,
    }
}

/// The case ends in a limit error that names the origin, quickly and in little memory.
fn assert_rejected(case: &str, needle: &str) -> Report {
    let r = in_child(case);
    assert!(!r.ok, "{case}: parsed instead of failing: {}", r.text);
    assert!(
        r.text.starts_with("limit: "),
        "{case}: not a limit error: {}",
        r.text
    );
    assert!(
        r.text.contains(&format!("{case}.yaml")),
        "{case}: no origin: {}",
        r.text
    );
    assert!(
        r.text.contains(needle),
        "{case}: expected {needle:?} in: {}",
        r.text
    );
    assert!(r.ms <= MAX_MS, "{case}: took {} ms", r.ms);
    assert!(
        r.peak_kb <= MAX_PEAK_KB,
        "{case}: peak rose by {} KiB",
        r.peak_kb
    );
    r
}

const EXPANDS: &str = "expands to more than";

#[test]
fn billion_laughs_classic_is_rejected() {
    assert!(laughs_classic().len() < 1024);
    assert_rejected("laughs_classic", EXPANDS);
}

#[test]
fn billion_laughs_1kb_big_scalar_is_rejected() {
    assert!(laughs_big_scalar_1kb().len() <= 1100);
    let r = assert_rejected("laughs_big_scalar_1kb", EXPANDS);
    assert!(r.text.contains("through aliases"), "{}", r.text);
}

#[test]
fn billion_laughs_1mb_is_rejected() {
    assert!(laughs_1mb().len() <= 1 << 20);
    assert_rejected("laughs_1mb", EXPANDS);
}

#[test]
fn many_aliases_1mb_is_rejected() {
    assert!(many_aliases_1mb().len() <= 1 << 20);
    assert_rejected("many_aliases_1mb", EXPANDS);
}

#[test]
fn nested_anchor_copies_are_bounded() {
    assert_rejected("nested_anchor_copies", EXPANDS);
}

#[test]
fn tracked_empty_value_paths_are_bounded() {
    assert!(tracked_empties().len() <= 200_000);
    assert_rejected("tracked_empties", EXPANDS);
}

/// Deep nesting ends in an error naming the origin (the parser's own flow limit or ours),
/// never a stack overflow.
fn assert_deep_rejected(case: &str) {
    let r = in_child(case);
    assert!(!r.ok, "{case}: parsed: {}", r.text);
    assert!(
        r.text.contains(&format!("{case}.yaml")),
        "{case}: {}",
        r.text
    );
    assert!(
        r.text.contains("nesting deeper than") || r.text.contains("recursion limit exceeded"),
        "{case}: {}",
        r.text
    );
    assert!(r.ms <= MAX_MS, "{case}: took {} ms", r.ms);
}

#[test]
fn deep_flow_sequence_is_rejected() {
    assert_deep_rejected("deep_flow_seq");
}

#[test]
fn deep_flow_mapping_is_rejected() {
    assert_deep_rejected("deep_flow_map");
}

#[test]
fn deep_block_sequence_is_rejected() {
    assert_deep_rejected("deep_block_seq");
}

#[test]
fn deep_block_mapping_is_rejected() {
    assert_deep_rejected("deep_block_map");
}

#[test]
fn deepest_accepted_documents_print_on_a_small_stack() {
    let r = in_child("deep_ceiling_print");
    assert!(r.ok, "{}", r.text);
}

/// A caller that raises the depth limit still cannot make the parser overflow its stack.
#[test]
fn raised_depth_limit_still_cannot_overflow() {
    assert_deep_rejected("deep_block_seq_raised_limit");
}

// ---------------------------------------------------------------------------------------------
// In-process cases (bounded with today's code too)

/// An alias to its own, unfinished anchor is an error, not a cycle.
#[test]
fn self_referencing_aliases_are_errors() {
    for text in [
        "a: &a [*a]\n",
        "a: &a {k: *a}\n",
        "a: &a 1\nb: &a [x, *a]\n",
        "&a [1, [2, *a]]\n",
        "a: &a\n  <<: *a\n",
    ] {
        let e = parse_one(text, "cycle.yaml").expect_err(text).to_string();
        assert!(
            e.contains("cycle.yaml") && e.contains("unknown anchor"),
            "{text}: {e}"
        );
    }
}

/// Helm-style values: 300 anchored blocks, each reused three times (two aliases and a merge
/// key), and the same document written out without aliases.
fn helmish(with_aliases: bool) -> String {
    let mut t = String::from("defaults:\n");
    let block = |i: usize, ind: &str| {
        format!(
            "{ind}image: registry.example.com/team/app-{i}:v1.{i}.0\n\
             {ind}pullPolicy: IfNotPresent\n\
             {ind}resources: {{limits: {{cpu: {i}m, memory: {i}Mi}}, requests: {{cpu: 10m}}}}\n\
             {ind}ports: [80, 443, {}]\n\
             {ind}labels:\n{ind}  app: app-{i}\n{ind}  tier: \"{}\"\n",
            8000 + i,
            i % 3
        )
    };
    for i in 0..300 {
        if with_aliases {
            t.push_str(&format!("  d{i}: &d{i}\n"));
        } else {
            t.push_str(&format!("  d{i}:\n"));
        }
        t.push_str(&block(i, "    "));
    }
    t.push_str("services:\n");
    for i in 0..300 {
        t.push_str(&format!("  s{i}:\n"));
        if with_aliases {
            t.push_str(&format!("    main: *d{i}\n    sidecar: *d{i}\n"));
            t.push_str(&format!(
                "    merged:\n      <<: *d{i}\n      pullPolicy: Always\n"
            ));
        } else {
            t.push_str("    main:\n");
            t.push_str(&block(i, "      "));
            t.push_str("    sidecar:\n");
            t.push_str(&block(i, "      "));
            t.push_str("    merged:\n      pullPolicy: Always\n");
            t.push_str(&block(i, "      ").replace("      pullPolicy: IfNotPresent\n", ""));
        }
    }
    t
}

#[test]
fn many_legitimate_aliases_parse_and_print_as_before() {
    let aliased = helmish(true);
    let inline = helmish(false);
    let a = parse_one(&aliased, "values.yaml").expect("aliased values parse");
    let b = parse_one(&inline, "values.yaml").expect("inline values parse");
    assert_eq!(a, b);
    let printed = to_yaml(&a);
    assert_eq!(printed, to_yaml(&b));
    // The printed text as the parser and printer gave it before alias expansion was bounded.
    let digest = hex::encode(Sha256::digest(printed.as_bytes()));
    assert_eq!(digest, GOLDEN_HELMISH, "printed {} bytes", printed.len());
    assert_eq!(parse_stream(&printed, "out").expect("reparse"), vec![a]);
}

const GOLDEN_HELMISH: &str = "7945ba15ace6dd121f39df5da1d94d9e7cd37b80e5dd973d35bd90239be3dfb0";

/// Aliases inside a multi-document stream, each document with its own anchors.
#[test]
fn aliases_per_document() {
    let docs = parse_stream("a: &x [1, 2]\nb: *x\n---\na: &x {k: v}\nb: *x\n", "s.yaml")
        .expect("stream parses");
    assert_eq!(docs[0]["b"], serde_json::json!([1, 2]));
    assert_eq!(docs[1]["b"], serde_json::json!({"k": "v"}));
    let e = parse_stream("a: &x 1\n---\nb: *x\n", "s.yaml").expect_err("anchor of another doc");
    assert!(e.to_string().contains("unknown anchor"), "{e}");
}

#[test]
fn expansion_limit_is_configurable() {
    let text = format!("s: &s {}\nl: [*s, *s, *s, *s]\n", "v".repeat(1000));
    let tight = Limits {
        expansion_allowance: 0,
        expansion_factor: 4,
        ..Limits::default()
    };
    let e = parse_one_with(&text, "tight.yaml", tight).expect_err("over a tight budget");
    assert!(matches!(e, KustomizeError::YamlLimit { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("tight.yaml") && msg.contains("through aliases"),
        "{msg}"
    );
    assert_eq!(tight.expansion_budget(text.len()), 4 * text.len());
    let v = parse_one_with(&text, "roomy.yaml", Limits::default()).expect("default budget");
    assert_eq!(v["l"][3].as_str().map(str::len), Some(1000));
}
