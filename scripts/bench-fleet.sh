#!/usr/bin/env bash
# Fleet benchmark (issues 8 and 20): our controllers, Flux's and the apiserver floor (a minimal
# client that sends only the requests any implementation must send: bench/src/floor.rs), each on a
# fresh named control plane. Repetitions interleave the implementations (ours, Flux, floor, ours,
# Flux, floor, …); every run records the load average before and after it, and the table refuses a
# repetition whose runs' loads differ by more than FLEET_LOAD_TOLERANCE. Prints
# "figure | ours | Flux | floor | ratios" with medians and spreads; docs/benchmarks.md explains the
# workload and the figures.
#
#   scripts/bench-fleet.sh [N ...]          # default N: 100
#
# Environment knobs:
#   FLEET_PROFILES   equal and/or best (default "equal best")
#   FLEET_VARIANTS   a (one GitRepository per Kustomization) and/or b (one shared) (default "a")
#   FLEET_IMPLS      ours, flux and/or floor (default "ours flux floor")
#   FLEET_REPS       repetitions of each N (default 3)
#   FLEET_LOAD_TOLERANCE  refuse a repetition whose 1-min loads before its runs differ by more
#                    (default 1.0)
#   FLEET_QUIET_LOAD before each run, wait (at most FLEET_QUIET_SECS, default 300) until the
#                    1-min load average is below this (default 1.0): the previous run's work
#                    must not load the next one
#   FLEET_PHASES     phases of the equal profile (default api,fleet,idle,change,drift)
#   FLEET_BEST_PHASES phases of the best profile (default fleet,change)
#   FLEET_IDLE_SECS  idle CPU window (default 120)
#   FLEET_RESULTS    results file (default <target>/bench/fleet/results.jsonl; appended)
#   FLEET_OURS_BIN   directory with our release binaries (default: build them into <target>/release)
#   FLEET_PERF=1     record a perf profile of our kustomize-controller during the fleet phase
#   FLEET_PLOT=1     also draw <target>/bench/fleet/fleet.png (scripts/plot-fleet.py)
# Flux's binaries come from e2e/flux/build.sh ($HOME/.cache/gitops-e2e/flux-bin); without them
# only our side runs.
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
out_dir="$target/bench/fleet"
mkdir -p "$out_dir"
results=${FLEET_RESULTS:-$out_dir/results.jsonl}
flux_bin=${RFLUX_FLUX_BIN:-$HOME/.cache/gitops-e2e/flux-bin}
flux_src=${RFLUX_FLUX_SRC:-$HOME/.cache/gitops-e2e/flux-src}
sizes=${*:-100}
profiles=${FLEET_PROFILES:-equal best}
variants=${FLEET_VARIANTS:-a}
impls=${FLEET_IMPLS:-ours flux floor}
reps=${FLEET_REPS:-3}
session=$(date -u +%Y%m%dT%H%M%SZ)
phases=${FLEET_PHASES:-api,fleet,idle,change,drift}
best_phases=${FLEET_BEST_PHASES:-fleet,change}
idle=${FLEET_IDLE_SECS:-120}

echo "==> building the harness (and, for ours, our controllers in release mode)"
ours_bin=${FLEET_OURS_BIN:-}
if [[ " $impls " == *" ours "* && -z $ours_bin ]]; then
  cargo build -q --release -p source-controller -p kustomize-controller
fi
cargo build -q -p rflux-bench --bin rflux-fleet
fleet="$target/debug/rflux-fleet"

if [[ " $impls " == *" flux "* ]]; then
  if [[ ! -x "$flux_bin/flux-source-controller" || ! -x "$flux_bin/flux-kustomize-controller" ]]; then
    echo "Flux's controllers are not in $flux_bin (run e2e/flux/build.sh); running ours only"
    impls=${impls//flux/}
  fi
fi
# Flux's own CRDs (all source kinds: its controllers watch them), from the module sources the
# Flux build unpacked, of the versions it built (the stamps say which).
flux_crds=()
for b in source-controller kustomize-controller; do
  ver=$(sed -n 's/.*@//p' "$flux_bin/.flux-$b.stamp" 2>/dev/null || true)
  d="$flux_src/flux-$b-$ver/config/crd/bases"
  if [[ -n $ver && -d $d ]]; then flux_crds+=("$d"); fi
done

# Flags per implementation and profile. "equal": Flux's defaults for both (4 workers each).
# "best": the same raised settings for both (20 workers, client rate limits raised, dependency
# requeue 5s); override with FLEET_BEST_CONCURRENT / FLEET_BEST_SC_ARGS / FLEET_BEST_KC_ARGS.
flags() { # impl profile -> sets concurrent, sc_args, kc_args
  concurrent=4 sc_args="" kc_args=""
  if [[ $2 == best ]]; then
    concurrent=${FLEET_BEST_CONCURRENT:-20}
    sc_args=${FLEET_BEST_SC_ARGS:---kube-api-qps=500 --kube-api-burst=1000}
    kc_args=${FLEET_BEST_KC_ARGS:---kube-api-qps=500 --kube-api-burst=1000 --requeue-dependency=5s}
  fi
}

for n in $sizes; do
  for variant in $variants; do
    for profile in $profiles; do
      ph=$phases; [[ $profile == best ]] && ph=$best_phases
      for rep in $(seq 1 "$reps"); do
      for impl in $impls; do
        flags "$impl" "$profile"
        if [[ $impl == ours || $impl == floor ]]; then
          bin="${ours_bin:-$target/release}" crds=(manifests/crds/gitrepositories.yaml manifests/crds/ocirepositories.yaml manifests/crds/kustomizations.yaml manifests/crds/resourcesets.yaml manifests/crds/resourcesetinputproviders.yaml)
        else
          bin="$flux_bin" crds=("${flux_crds[@]}")
        fi
        perf=(); [[ $impl == ours && ${FLEET_PERF:-0} == 1 ]] && perf=(--perf)
        waited=0
        while awk -v q="${FLEET_QUIET_LOAD:-1.0}" '{exit !($1 >= q)}' /proc/loadavg \
          && (( waited < ${FLEET_QUIET_SECS:-300} )); do
          sleep 5; waited=$((waited + 5))
        done
        echo "==> $impl, N=$n, variant $variant, $profile settings, repetition $rep of $reps (load $(cut -d' ' -f1 /proc/loadavg))"
        "$fleet" run --implementation "$impl" --bin-dir "$bin" --crds "${crds[@]}" \
          --n "$n" --variant "$variant" --profile "$profile" --concurrent "$concurrent" \
          --sc-args="$sc_args" --kc-args="$kc_args" --phases "$ph" --idle-secs "$idle" \
          --session "$session" --rep "$rep" \
          --work-dir "$out_dir" --out "$results" "${perf[@]}" || echo "run failed: $impl N=$n $variant $profile rep $rep"
      done
      done
    done
  done
done

echo "# Fleet benchmark (results: $results)" | tee "$out_dir/fleet.md"
"$fleet" table --load-tolerance "${FLEET_LOAD_TOLERANCE:-1.0}" "$results" | tee -a "$out_dir/fleet.md"
if [[ ${FLEET_PLOT:-0} == 1 ]]; then
  scripts/plot-fleet.py "$results" "$out_dir/fleet.png"
fi
