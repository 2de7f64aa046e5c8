#!/usr/bin/env bash
# GitRepository benchmarks, served by the e2e git server (started if needed):
# 1. fetch + package (source-controller/benches/clone.rs) against `git clone --depth 1` +
#    `tar -c | gzip`. Knobs: RFLUX_BENCH_FILES, RFLUX_BENCH_FILE_KIB, RFLUX_BENCH_RUNS.
# 2. polling cost (source-controller/benches/poll.rs): CPU seconds of the release
#    source-controller PROCESS polling 1000 unchanged GitRepositories, on its own control plane
#    "bench-src" (stopped afterwards). Knobs: RFLUX_BENCH_POLL_OBJECTS, RFLUX_BENCH_POLL_INTERVAL,
#    RFLUX_BENCH_POLL_MINUTES, RFLUX_BENCH_POLL_REPOS, RFLUX_BENCH_POLL_CONCURRENT;
#    RFLUX_BENCH_POLL=0 skips it. It also reports the process' peak (VmHWM) and current RSS (anon
#    + file) when all are Ready and at the end. RFLUX_BENCH_POLL_WRAP is a command prefix for
#    profiling the controller (`heaptrack -o /tmp/sc`, `perf record -e cpu-clock -g -o F`).
# Results: target/bench/source.md and target/bench/source-poll.md.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
mkdir -p "$target/bench"
echo "# source-controller: clone and package" | tee "$target/bench/source.md"
cargo bench -p source-controller --bench clone 2>/dev/null | tee -a "$target/bench/source.md"

if [[ "${RFLUX_BENCH_POLL:-1}" != 0 ]]; then
  cargo build --release -p source-controller --bin source-controller
  cargo build -p rflux-e2e --bin rflux-e2e
  export RFLUX_SOURCE_BIN="$target/release/source-controller"
  echo "# source-controller: CPU while polling unchanged GitRepositories" | tee "$target/bench/source-poll.md"
  status=0
  cargo bench -p source-controller --bench poll 2>/dev/null | tee -a "$target/bench/source-poll.md" || status=$?
  "$target/debug/rflux-e2e" down --name bench-src >/dev/null 2>&1 || true
  exit "$status"
fi
