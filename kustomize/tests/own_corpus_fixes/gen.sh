#!/bin/sh
# Rewrites expected.yaml (or expected-error.txt when the build fails) of every case here
# from `kubectl kustomize` (Kustomize v5.5.0).
cd "$(dirname "$0")" || exit 1
for d in */; do
  d=${d%/}
  rm -f "$d/expected.yaml" "$d/expected-error.txt"
  if ! kubectl kustomize "$d" > "$d/expected.yaml" 2> "$d/stderr.txt"; then
    rm "$d/expected.yaml"
    grep -v '^# Warning' "$d/stderr.txt" | sed 's/^E[0-9]* [0-9:.]* *[0-9]* run.go:[0-9]*\] //' > "$d/expected-error.txt"
  fi
  rm "$d/stderr.txt"
done
