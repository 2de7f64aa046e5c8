#!/usr/bin/env bash
# Builds Flux's own binaries from the Go module proxy, for interop tests and side-by-side
# benchmarks: the `flux` CLI (flux2), source-controller and kustomize-controller.
# Nothing fetched here is committed: module sources are unpacked under $HOME/.cache.
#
# Each module's go.mod has `replace ./api` (a nested module that is not in the module zip),
# so `go install mod@version` refuses them; we copy the module source, drop that replace
# (the published api module of the same version is required anyway) and build.
# source-controller is v1.9.3, the newest v1.9.x whose dependencies the module proxy serves here
# (v1.9.4+ need github.com/fluxcd/pkg/artifact v0.18.2+, refused with 403).
set -euo pipefail
out=${RFLUX_FLUX_BIN:-$HOME/.cache/gitops-e2e/flux-bin}
src=${RFLUX_FLUX_SRC:-$HOME/.cache/gitops-e2e/flux-src}
flux_version=${FLUX_VERSION:-v2.9.5}
sc_version=${FLUX_SOURCE_CONTROLLER_VERSION:-v1.9.3}
kc_version=${FLUX_KUSTOMIZE_CONTROLLER_VERSION:-v1.9.6}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$out" "$src"

# build <binary> <module> <version> <package-in-module> [replace-to-drop]
build() {
  local bin=$1 mod=$2 ver=$3 pkg=$4 drop=${5:-}
  local stamp="$out/.$bin.stamp"
  if [[ -x "$out/$bin" && -f "$stamp" && "$(cat "$stamp")" == "$mod@$ver" ]]; then
    echo "$bin $ver up to date in $out"
    return
  fi
  echo "building $bin ($mod@$ver) ..."
  local dir
  dir=$(cd "$src" && go mod download -json "$mod@$ver" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [[ -n "$dir" ]] || { echo "go mod download $mod@$ver gave no directory" >&2; exit 1; }
  local work="$src/$bin-$ver"
  rm -rf "$work"
  cp -r "$dir" "$work"
  chmod -R u+w "$work"
  cd "$work"
  if [[ -n "$drop" ]]; then go mod edit -dropreplace="$drop"; fi
  if [[ $bin == flux ]]; then
    # `flux install` embeds manifests that Flux's Makefile generates; we never use that
    # command, so an empty file satisfies the embed pattern.
    mkdir -p cmd/flux/manifests
    echo "# not bundled: rflux builds this CLI for tests only" > cmd/flux/manifests/placeholder.yaml
  fi
  local t0=$SECONDS
  go build -trimpath -ldflags "-s -w -X main.VERSION=${ver#v}" -o "$out/$bin" "$pkg"
  echo "$bin built in $((SECONDS - t0)) s"
  echo "$mod@$ver" > "$stamp"
  cd - >/dev/null
}

want=${*:-flux source-controller kustomize-controller}
for b in $want; do
  case $b in
    flux) build flux github.com/fluxcd/flux2/v2 "$flux_version" ./cmd/flux ;;
    source-controller) build flux-source-controller github.com/fluxcd/source-controller "$sc_version" . github.com/fluxcd/source-controller/api ;;
    kustomize-controller) build flux-kustomize-controller github.com/fluxcd/kustomize-controller "$kc_version" . github.com/fluxcd/kustomize-controller/api ;;
    *) echo "unknown binary $b (flux, source-controller, kustomize-controller)" >&2; exit 2 ;;
  esac
done
ls -la "$out"
