#!/usr/bin/env bash
# Builds the OCI registry the OCIRepository tests run on loopback: distribution's `registry`
# (github.com/distribution/distribution/v3, from the Go module proxy) and `rflux-htpasswd`, a
# bcrypt htpasswd-line helper (htpasswd/, golang.org/x/crypto only) used when Apache's
# `htpasswd` is not installed. Output: $RFLUX_REGISTRY_BIN when it names a directory (default
# $HOME/.cache/gitops-e2e/oci-bin). Each binary is skipped when it is already up to date.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${RFLUX_REGISTRY_BIN:-$HOME/.cache/gitops-e2e/oci-bin}
# RFLUX_REGISTRY_BIN may also name the registry binary itself (the launcher accepts both).
if [[ -f "$out" ]]; then out=$(dirname "$out"); fi
version=${REGISTRY_VERSION:-v3.1.2}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$out"
go=$(command -v go || echo /usr/local/go/bin/go)
mkdir -p "$out"

# distribution's registry; `registry --version` prints
# `<path> github.com/distribution/distribution/v3 v3.1.2+unknown`.
if [[ -x "$out/registry" ]] && "$out/registry" --version 2>/dev/null | grep -q " $version\(+unknown\)\?\$"; then
  echo "registry $version up to date in $out"
else
  echo "building registry (github.com/distribution/distribution/v3/cmd/registry@$version) ..."
  t0=$SECONDS
  (cd /tmp && "$go" install -trimpath -ldflags "-s -w" "github.com/distribution/distribution/v3/cmd/registry@$version")
  echo "registry built in $((SECONDS - t0)) s"
fi

# rflux-htpasswd, rebuilt when its sources change.
stamp="$out/.rflux-htpasswd.stamp"
want=$(cat "$here/htpasswd/go.mod" "$here/htpasswd/go.sum" "$here"/htpasswd/*.go | sha256sum | cut -c1-16)
if [[ -x "$out/rflux-htpasswd" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "rflux-htpasswd up to date in $out"
else
  (cd "$here/htpasswd" && GOFLAGS=-mod=mod "$go" build -trimpath -ldflags "-s -w" -o "$out/rflux-htpasswd" .)
  echo "$want" > "$stamp"
  echo "built $out/rflux-htpasswd"
fi
