#!/usr/bin/env bash
# Builds the e2e git server (Go standard library only) into $RFLUX_E2E_BIN.
# Skips the build when the sources have not changed since the last one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${RFLUX_E2E_BIN:-$HOME/.cache/gitops-e2e/bin}
mkdir -p "$out"
stamp="$out/.gitserver.stamp"
want=$(cat "$here/go.mod" "$here"/*.go | sha256sum | cut -c1-16)
if [[ -x "$out/rflux-gitserver" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "rflux-gitserver up to date in $out"
  exit 0
fi
cd "$here"
GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$out/rflux-gitserver" .
echo "$want" > "$stamp"
echo "built $out/rflux-gitserver"
