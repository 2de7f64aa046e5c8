#!/usr/bin/env bash
# Builds flux-operator (github.com/controlplaneio-fluxcd/flux-operator, AGPL-3.0) from the Go
# module proxy, as a test oracle for our ResourceSet engine: the `flux-operator` CLI
# (`build resourceset` renders offline with the real builder) and the operator manager
# (`flux-operator-manager`, run out-of-cluster against the e2e control plane).
# Nothing fetched here is committed: the module source is unpacked under $HOME/.cache.
#
# The module's go.mod says `go 1.27.0`, so the toolchain comes from the proxy
# (golang.org/toolchain, GOTOOLCHAIN=go1.27.x). The manager embeds `web/dist/*`, an npm build
# output that the module zip lacks: we build from a writable copy of the module with a
# one-line placeholder page (the web UI is disabled in tests with --web-server-port=0).
# The manager refuses to start unless FIPS 140-3 mode is on: it is built with GOFIPS140=latest.
# Also builds `flux-operator-yaml2json` (yaml2json/, sigs.k8s.io/yaml only, our code): the Rust
# helper (e2e/src/flux_operator.rs) turns the CLI's YAML output into JSON with it.
# Output: $RFLUX_FLUX_OPERATOR_BIN (default $HOME/.cache/gitops-e2e/flux-operator-bin).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${RFLUX_FLUX_OPERATOR_BIN:-$HOME/.cache/gitops-e2e/flux-operator-bin}
src=${RFLUX_FLUX_OPERATOR_SRC:-$HOME/.cache/gitops-e2e/flux-operator-src}
version=${FLUX_OPERATOR_VERSION:-v0.59.0}
# The newest go1.27 patch that proxy.golang.org serves as golang.org/toolchain (2026-12).
toolchain=${FLUX_OPERATOR_GOTOOLCHAIN:-go1.27.4}
mod=github.com/controlplaneio-fluxcd/flux-operator
# proxy.golang.org refuses (403 "not available") the zip of one dependency pinned by v0.59.0,
# github.com/google/go-containerregistry/pkg/authn/kubernetes@v0.0.0-20260604213829-6849394e8a65
# (only the manager imports it), while its .info/.mod are served. We replace it with the newest
# version the proxy lists (same package API). Empty: no replacement.
k8schain_mod=github.com/google/go-containerregistry/pkg/authn/kubernetes
k8schain_version=${FLUX_OPERATOR_K8SCHAIN_VERSION-v0.0.0-20260224031529-85f2bf5f7303}
export GOTOOLCHAIN=$toolchain CGO_ENABLED=0 GOFLAGS=-mod=mod
go=$(command -v go || echo /usr/local/go/bin/go)
mkdir -p "$out" "$src"

# yaml2json: the Go toolchain at hand is enough; rebuilt when its sources change.
stamp="$out/.flux-operator-yaml2json.stamp"
want_y2j=$(cat "$here/yaml2json/go.mod" "$here/yaml2json/go.sum" "$here"/yaml2json/*.go | sha256sum | cut -c1-16)
if [[ -x "$out/flux-operator-yaml2json" && -f "$stamp" && "$(cat "$stamp")" == "$want_y2j" ]]; then
  echo "flux-operator-yaml2json up to date in $out"
else
  (cd "$here/yaml2json" && GOTOOLCHAIN=local "$go" build -trimpath -ldflags "-s -w" -o "$out/flux-operator-yaml2json" .)
  echo "$want_y2j" > "$stamp"
  echo "built $out/flux-operator-yaml2json"
fi

want="$mod@$version $toolchain${k8schain_version:+ $k8schain_mod@$k8schain_version}"
up_to_date() {
  local bin=$1 stamp="$out/.$1.stamp"
  [[ -x "$out/$bin" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]
}
if up_to_date flux-operator && up_to_date flux-operator-manager; then
  echo "flux-operator and flux-operator-manager $version up to date in $out"
  exit 0
fi

t_all=$SECONDS
echo "downloading $mod@$version (toolchain $toolchain from the Go module proxy if absent) ..."
t0=$SECONDS
dir=$(cd "$src" && "$go" mod download -json "$mod@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[[ -n "$dir" && -d "$dir" ]] || { echo "go mod download $mod@$version gave no directory" >&2; exit 1; }
echo "module source in $dir ($((SECONDS - t0)) s)"

# A writable copy of the module with the web UI placeholder.
work="$src/flux-operator-$version"
rm -rf "$work"
cp -r "$dir" "$work"
chmod -R u+w "$work"
mkdir -p "$work/web/dist"
echo '<html><body>web UI not bundled (rflux test build)</body></html>' > "$work/web/dist/index.html"
if [[ -n "$k8schain_version" ]]; then
  echo "replacing $k8schain_mod with $k8schain_version (the pinned version's zip is refused by the proxy)"
  (cd "$work" && "$go" mod edit -replace="$k8schain_mod=$k8schain_mod@$k8schain_version")
fi

# build <binary> <package> [extra env...]
build() {
  local bin=$1 pkg=$2
  shift 2
  if up_to_date "$bin"; then
    echo "$bin $version up to date in $out"
    return
  fi
  echo "building $bin ($mod $pkg @$version, $toolchain) ..."
  local t0=$SECONDS
  (cd "$work" && env "$@" "$go" build -trimpath -ldflags "-s -w -X main.VERSION=${version#v}" -o "$out/$bin.tmp" "$pkg")
  mv "$out/$bin.tmp" "$out/$bin"
  echo "$want" > "$out/.$bin.stamp"
  echo "$bin built in $((SECONDS - t0)) s"
}

build flux-operator ./cmd/cli
build flux-operator-manager ./cmd/operator GOFIPS140=latest
echo "flux-operator $version built in $((SECONDS - t_all)) s total; binaries in $out"
"$out/flux-operator" version --client 2>/dev/null || "$out/flux-operator" --version 2>/dev/null || true
