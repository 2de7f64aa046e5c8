//! Profiling aid: builds a kustomization `N` times in one process and prints the YAML once,
//! so `perf record` sees the engine without process start-up.
//! `cargo run --release -p rflux-kustomize --example kbuild -- <dir> [N] [none]`

use std::path::PathBuf;
use std::time::Instant;

use rflux_kustomize::{BuildOptions, LoadRestrictor, build, to_yaml_stream};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("usage: kbuild <dir> [N] [none]")?);
    let n: usize = args.next().map_or(Ok(1), |s| s.parse())?;
    let load_restrictor = match args.next().as_deref() {
        Some("none") => LoadRestrictor::None,
        _ => LoadRestrictor::RootOnly,
    };
    let opts = BuildOptions {
        load_restrictor,
        ..BuildOptions::default()
    };
    let (mut build_s, mut print_s, mut bytes) = (0.0, 0.0, 0);
    for _ in 0..n {
        let t = Instant::now();
        let objects: Vec<serde_json::Value> =
            build(&dir, &opts)?.into_iter().map(|r| r.obj).collect();
        let t2 = Instant::now();
        bytes = to_yaml_stream(&objects).len();
        build_s += (t2 - t).as_secs_f64();
        print_s += t2.elapsed().as_secs_f64();
    }
    let mut files = Vec::new();
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                files.push(std::fs::read_to_string(&p)?);
            }
        }
    }
    let t = Instant::now();
    let parse_rounds = if std::env::var_os("KBUILD_PARSE").is_some() {
        n
    } else {
        0
    };
    for _ in 0..parse_rounds {
        for f in &files {
            let _ = rflux_kustomize::yaml::parse_stream(f, "x");
        }
    }
    eprintln!(
        "parse alone: {:.2} ms per build ({} files)",
        t.elapsed().as_secs_f64() * 1e3 / parse_rounds.max(1) as f64,
        files.len()
    );
    eprintln!(
        "{n} builds: build {:.2} ms, print {:.2} ms per build; {bytes} bytes",
        build_s * 1e3 / n as f64,
        print_s * 1e3 / n as f64
    );
    Ok(())
}
