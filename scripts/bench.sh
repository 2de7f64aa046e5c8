#!/usr/bin/env bash
# make bench: release builds, then each benchmark prints its table (kustomize engine, build
# time inside the controller vs Flux, source-controller clone+package, SOPS and OCIRepository
# against Flux). Results:
# target/bench/*.md
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
mkdir -p "$target/bench"
cargo build --release -p kustomize-controller
export RFLUX_BUILD_BIN="$target/release/kustomize-controller"
echo "# kustomize engine" | tee "$target/bench/kustomize.md"
cargo bench -p rflux-kustomize --bench kustomize 2>/dev/null | tee -a "$target/bench/kustomize.md"
# Build time inside the controller, ours vs Flux (issue 15): the Flux side needs Go.
if command -v go >/dev/null || [[ -x /usr/local/go/bin/go ]]; then
  scripts/bench-buildtime.sh
else
  echo "# build time inside the controller: skipped (no Go toolchain for the Flux harness)"
fi
scripts/bench-source.sh
scripts/bench-sops.sh
scripts/bench-oci.sh
