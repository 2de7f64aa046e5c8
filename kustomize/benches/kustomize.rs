#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `make bench` part for the kustomize engine.
//!
//! 1. Whole-process time of `kustomize-controller build` against `kubectl kustomize` on the 10
//!    largest cases (by output size) of each corpus (the shared one, and our own
//!    `tests/own_corpus`), median of interleaved runs, as a ratio; the goal is 20x per case.
//! 2. In-process build throughput over the whole corpus (objects per second).
//!
//! The corpus lives in `../shared/kustomize-corpus`; without it the bench uses the project's own
//! fixtures for (2) and says that (1) was skipped. Set `RFLUX_BUILD_BIN` to the release binary of
//! kustomize-controller (scripts/bench.sh does).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rflux_kustomize::{BuildOptions, LoadRestrictor, build};

struct Case {
    name: String,
    dir: PathBuf,
    restrictor: LoadRestrictor,
    output_bytes: u64,
}

fn toml_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

fn corpus_cases(root: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    let Ok(repos) = std::fs::read_dir(root.join("cases")) else {
        return cases;
    };
    for repo in repos.flatten() {
        for case in std::fs::read_dir(repo.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let Ok(meta) = std::fs::read_to_string(case.path().join("case.toml")) else {
                continue;
            };
            let (Some(input), Some(kdir)) = (
                toml_value(&meta, "input"),
                toml_value(&meta, "kustomization_dir"),
            ) else {
                continue;
            };
            let restrictor = if toml_value(&meta, "load_restrictor") == Some("none") {
                LoadRestrictor::None
            } else {
                LoadRestrictor::RootOnly
            };
            cases.push(Case {
                name: format!(
                    "{}/{}",
                    repo.file_name().to_string_lossy(),
                    case.file_name().to_string_lossy()
                ),
                dir: case.path().join(input).join(kdir),
                restrictor,
                output_bytes: toml_value(&meta, "output_bytes")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            });
        }
    }
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    cases
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time_once(cmd: &mut Command) -> Option<Duration> {
    let start = Instant::now();
    let out = cmd.output().ok()?;
    let took = start.elapsed();
    if !out.status.success() {
        eprintln!(
            "  command failed: {:?}: {}",
            cmd,
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    Some(took)
}

/// Runs the two commands alternately `runs` times (so both see the same machine load) and
/// returns the median time of each.
fn time_interleaved(a: &mut Command, b: &mut Command, runs: usize) -> Option<(Duration, Duration)> {
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        sa.push(time_once(a)?);
        sb.push(time_once(b)?);
    }
    Some((median(sa), median(sb)))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn restrictor_flag(r: LoadRestrictor) -> &'static str {
    match r {
        LoadRestrictor::None => "LoadRestrictionsNone",
        _ => "LoadRestrictionsRootOnly",
    }
}

/// The speed-up `make bench` asks of every case among the 10 largest of each corpus.
const GOAL: f64 = 20.0;

fn whole_process(corpus: &str, cases: &[Case]) {
    let Some(bin) = std::env::var_os("RFLUX_BUILD_BIN").map(PathBuf::from) else {
        println!(
            "whole-process comparison skipped: RFLUX_BUILD_BIN is not set (run scripts/bench.sh)"
        );
        return;
    };
    let kubectl_ok = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !kubectl_ok {
        println!("whole-process comparison skipped: kubectl is not installed");
        return;
    }
    let mut largest: Vec<&Case> = cases.iter().collect();
    largest.sort_by_key(|c| std::cmp::Reverse(c.output_bytes));
    largest.truncate(10);
    let runs = 7;
    println!(
        "\n## {corpus}: whole-process build time, 10 largest cases (median of {runs} interleaved runs)\n"
    );
    println!("load average before: {}\n", loadavg());
    println!("| case | output KiB | kubectl kustomize ms | rflux build ms | speed-up |");
    println!("|---|---:|---:|---:|---:|");
    let (mut total_ref, mut total_ours) = (Duration::ZERO, Duration::ZERO);
    let mut lowest: Option<(f64, &str)> = None;
    for case in largest {
        let flag = restrictor_flag(case.restrictor);
        let mut reference = Command::new("kubectl");
        reference
            .arg("kustomize")
            .arg("--load-restrictor")
            .arg(flag)
            .arg(&case.dir);
        let mut ours = Command::new(&bin);
        ours.arg("build")
            .arg("--load-restrictor")
            .arg(flag)
            .arg(&case.dir);
        let Some((r, o)) = time_interleaved(&mut reference, &mut ours, runs) else {
            println!("| {} | failed | | | |", case.name);
            continue;
        };
        total_ref += r;
        total_ours += o;
        let ratio = r.as_secs_f64() / o.as_secs_f64();
        if lowest.is_none_or(|(l, _)| ratio < l) {
            lowest = Some((ratio, &case.name));
        }
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1}x |",
            case.name,
            case.output_bytes / 1024,
            r.as_secs_f64() * 1e3,
            o.as_secs_f64() * 1e3,
            ratio
        );
    }
    println!("\nload average after: {}", loadavg());
    if !total_ours.is_zero() {
        println!(
            "sum over the 10 cases: kubectl {:.0} ms, rflux {:.0} ms, ratio {:.1}x",
            total_ref.as_secs_f64() * 1e3,
            total_ours.as_secs_f64() * 1e3,
            total_ref.as_secs_f64() / total_ours.as_secs_f64()
        );
    }
    if let Some((ratio, name)) = lowest {
        let verdict = if ratio >= GOAL { "met" } else { "NOT met" };
        println!("lowest speed-up {ratio:.1}x ({name}): goal >= {GOAL}x on every case {verdict}");
    }
}

fn throughput(cases: &[Case]) {
    let rounds = 3;
    let mut objects = 0usize;
    let mut bytes = 0u64;
    let start = Instant::now();
    for _ in 0..rounds {
        for case in cases {
            let opts = BuildOptions {
                load_restrictor: case.restrictor,
                ..BuildOptions::default()
            };
            if let Ok(res) = build(&case.dir, &opts) {
                objects += res.len();
                bytes += case.output_bytes;
            }
        }
    }
    let took = start.elapsed().as_secs_f64();
    println!("\n## In-process build throughput\n");
    println!(
        "{} builds of {} cases: {} objects in {:.2} s = {:.0} objects/s ({:.1} MB/s of output YAML)",
        rounds * cases.len(),
        cases.len(),
        objects,
        took,
        objects as f64 / took,
        bytes as f64 / took / 1e6
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` would pass test filters: ignore both.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shared = manifest.join("../../shared/kustomize-corpus");
    let own = manifest.join("tests/own_corpus");
    let shared_cases = corpus_cases(&shared);
    let own_cases = corpus_cases(&own);
    if shared_cases.is_empty() {
        println!(
            "shared corpus not found at {}: its comparison is skipped",
            shared.display()
        );
    } else {
        whole_process("shared corpus", &shared_cases);
    }
    if !own_cases.is_empty() {
        whole_process("own corpus (kustomize/tests/own_corpus)", &own_cases);
    }
    let mut cases: Vec<Case> = shared_cases.into_iter().chain(own_cases).collect();
    if cases.is_empty() {
        println!("no corpus found: throughput measured on the project's fixtures");
        let fixtures = manifest.join("tests/fixtures");
        for entry in std::fs::read_dir(&fixtures).into_iter().flatten().flatten() {
            cases.push(Case {
                name: entry.file_name().to_string_lossy().into_owned(),
                dir: entry.path(),
                restrictor: LoadRestrictor::RootOnly,
                output_bytes: std::fs::metadata(entry.path().join("expected.yaml"))
                    .map(|m| m.len())
                    .unwrap_or(0),
            });
        }
    }
    throughput(&cases);
}
