#!/usr/bin/env bash
# Remote-cluster fleet benchmark (issue 19): N clusters (kubeconfig Secrets with distinct users
# against a target apiserver), one Kustomization each with kubeConfig.secretRef, reconciled from
# a hub by our controllers and by Flux's, in interleaved repetitions on fresh control planes.
# Prints "figure | ours | Flux | ratio" (median and min–max) with the load average of every run;
# docs/benchmarks.md ("Remote clusters") explains the workload and the figures.
#
#   scripts/bench-remote.sh
#
# Environment knobs:
#   REMOTE_CLUSTERS        clusters (default 50)
#   REMOTE_REPS            repetitions, each ours then Flux (default 3)
#   REMOTE_IMPLS           implementations in run order (default "ours,flux")
#   REMOTE_LOAD_TOLERANCE  refuse a pair whose 1-min load differs by more (default 1.0)
#   REMOTE_RESULTS         results file (default <target>/bench/remote/results.jsonl; appended)
#   REMOTE_OURS_BIN        directory with our release binaries (default: build them into <target>/release)
# Flux's binaries come from e2e/flux/build.sh ($HOME/.cache/gitops-e2e/flux-bin); without them
# only our side runs.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
out_dir="$target/bench/remote"
mkdir -p "$out_dir"
results=${REMOTE_RESULTS:-$out_dir/results.jsonl}

echo "==> building the harness (and our controllers in release mode)"
ours_bin=${REMOTE_OURS_BIN:-}
if [[ -z $ours_bin ]]; then
  cargo build -q --release -p source-controller -p kustomize-controller
  ours_bin="$target/release"
fi
cargo build -q -p rflux-bench --bin rflux-remote-bench

"$target/debug/rflux-remote-bench" run --ours-bin "$ours_bin" \
  --clusters "${REMOTE_CLUSTERS:-50}" --reps "${REMOTE_REPS:-3}" \
  --impls "${REMOTE_IMPLS:-ours,flux}" --load-tolerance "${REMOTE_LOAD_TOLERANCE:-1.0}" \
  --work-dir "$out_dir" --out "$results" | tee "$out_dir/remote.md"
echo "(results appended to $results; the table above is in $out_dir/remote.md)"
