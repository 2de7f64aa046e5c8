#!/usr/bin/env bash
# GitRepository fetch + package benchmark (source-controller/benches/clone.rs) against
# `git clone --depth 1` + `tar -c | gzip`, served by the e2e git server (started if needed).
# Result: target/bench/source.md. Knobs: RFLUX_BENCH_FILES, RFLUX_BENCH_FILE_KIB, RFLUX_BENCH_RUNS.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
mkdir -p "$target/bench"
echo "# source-controller: clone and package" | tee "$target/bench/source.md"
cargo bench -p source-controller --bench clone 2>/dev/null | tee -a "$target/bench/source.md"
