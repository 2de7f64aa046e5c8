//! The default suite's representative of `make fuzz` (issue 14): every committed seed
//! (`fuzz/seeds/<target>/`) and every saved crasher, timeout or OOM input
//! (`fuzz/artifacts/<target>/`) goes through the same target function libFuzzer runs
//! (`rflux_fuzz`, in `fuzz/src/`), without libFuzzer. A crash found by fuzzing, once saved,
//! stays a regression test here. The long runs themselves are `make fuzz`
//! (`scripts/fuzz.sh`, FUZZ_SECONDS per target).
#![allow(clippy::unwrap_used)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    files
}

#[test]
fn fuzz_seeds_and_crashers_replay() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut failures = Vec::new();
    for (name, target) in rflux_fuzz::TARGETS {
        let seeds = inputs(&fuzz.join("seeds").join(name));
        assert!(
            !seeds.is_empty(),
            "fuzz target {name} has no committed seed in fuzz/seeds/{name}"
        );
        let artifacts = inputs(&fuzz.join("artifacts").join(name));
        let start = Instant::now();
        for path in seeds.iter().chain(&artifacts) {
            let data = std::fs::read(path).unwrap();
            if catch_unwind(AssertUnwindSafe(|| target(&data))).is_err() {
                failures.push(path.display().to_string());
            }
        }
        eprintln!(
            "fuzz target {name}: {} seeds and {} saved artifacts replayed in {:?}",
            seeds.len(),
            artifacts.len(),
            start.elapsed()
        );
    }
    assert!(failures.is_empty(), "fuzz inputs that panic: {failures:#?}");
}
