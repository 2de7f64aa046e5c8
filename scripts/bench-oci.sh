#!/usr/bin/env bash
# OCIRepository pull-and-package benchmark: one artifact of OCI_BENCH_MIB (default 30) MiB of
# pseudo-random bytes in OCI_BENCH_FILES (default 1000) files, pushed by the real `flux push
# artifact` to a local registry (distribution), pulled and packaged by our source-controller and
# by Flux's on one control plane ("oci-bench", started fresh and stopped afterwards), interleaved
# rounds, a new push per round (bench/src/bin/rflux-oci-bench/main.rs says what is timed).
# Needs e2e/registry/build.sh (registry), the flux CLI (e2e/flux/build.sh flux) and, for the
# Flux column, Flux's source-controller (e2e/flux/build.sh; without it only ours runs).
#
# Knobs: OCI_BENCH_MIB, OCI_BENCH_FILES, OCI_BENCH_RUNS (rounds, default 5), OCI_BENCH_IMPLS
# (flux,ours).
# Results: $CARGO_TARGET_DIR/bench/oci.md (table), oci.jsonl (every sample, appended),
# oci.logs/ (controller logs).
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
out="$target/bench"
mkdir -p "$out"
e2e/registry/build.sh >&2
e2e/flux/build.sh flux >&2
cargo build --release -p source-controller
cargo build -p rflux-bench --bin rflux-oci-bench
rm -rf "$out/oci.logs"
"$target/debug/rflux-oci-bench" --ours-bin "$target/release" \
  --mib "${OCI_BENCH_MIB:-30}" --files "${OCI_BENCH_FILES:-1000}" \
  --runs "${OCI_BENCH_RUNS:-5}" --impls "${OCI_BENCH_IMPLS:-flux,ours}" \
  --out "$out/oci.jsonl" | tee "$out/oci.md"
