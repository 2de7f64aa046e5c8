#!/usr/bin/env bash
# SOPS decrypt-and-apply benchmark: one Kustomization with SOPS_BENCH_SECRETS (default 200)
# Secret manifests encrypted by the real sops CLI for an age key, reconciled by our
# kustomize-controller and by Flux's on one control plane ("sops-bench", started fresh and
# stopped afterwards), interleaved rounds (bench/src/bin/rflux-sops-bench/main.rs says what
# is timed). Needs e2e/sops/build.sh (sops, age-keygen) and, for the Flux column,
# e2e/flux/build.sh (without Flux's binaries only ours runs).
#
# Knobs: SOPS_BENCH_SECRETS, SOPS_BENCH_RUNS (rounds, default 7), SOPS_BENCH_MODES
# (revision,noop), SOPS_BENCH_IMPLS (flux,ours,ours-notracker), SOPS_BENCH_KC_ARGS (extra
# arguments of every kustomize-controller, e.g. "--kube-api-qps=1000 --kube-api-burst=2000":
# Flux's controllers turn their client-side rate limit off when the apiserver has API Priority
# and Fairness enabled, and ignore these two flags then).
# Results: $CARGO_TARGET_DIR/bench/sops.md (table), sops.jsonl (every sample, appended),
# sops.logs/ (controller logs).
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
out="$target/bench"
mkdir -p "$out"
e2e/sops/build.sh >&2
cargo build --release -p source-controller -p kustomize-controller
cargo build -p rflux-bench --bin rflux-sops-bench
rm -rf "$out/sops.logs"
"$target/debug/rflux-sops-bench" --ours-bin "$target/release" \
  --secrets "${SOPS_BENCH_SECRETS:-200}" --runs "${SOPS_BENCH_RUNS:-7}" \
  --modes "${SOPS_BENCH_MODES:-revision,noop}" --impls "${SOPS_BENCH_IMPLS:-flux,ours,ours-notracker}" \
  --kc-args="${SOPS_BENCH_KC_ARGS:-}" \
  --out "$out/sops.jsonl" | tee "$out/sops.md"
