#!/usr/bin/env bash
# Builds the real `sops` CLI and age's `age`/`age-keygen` from the Go module proxy: the SOPS
# tests encrypt their fixtures with them at test time (nothing encrypted is committed).
# gpg comes from Debian (`make deps`). Output: $RFLUX_SOPS_BIN (default
# $HOME/.cache/gitops-e2e/sops-bin).
set -euo pipefail
out=${RFLUX_SOPS_BIN:-$HOME/.cache/gitops-e2e/sops-bin}
sops_version=${SOPS_VERSION:-v3.13.3}
age_version=${AGE_VERSION:-v1.3.1}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$out"
go=$(command -v go || echo /usr/local/go/bin/go)
mkdir -p "$out"

# install <binary> <module path>@<version>
install() {
  local bin=$1 what=$2 stamp="$out/.$1.stamp"
  if [[ -x "$out/$bin" && -f "$stamp" && "$(cat "$stamp")" == "$what" ]]; then
    echo "$bin up to date in $out"
    return
  fi
  echo "building $bin ($what) ..."
  local t0=$SECONDS
  (cd /tmp && "$go" install -trimpath -ldflags "-s -w" "$what")
  echo "$what" > "$stamp"
  echo "$bin built in $((SECONDS - t0)) s"
}

install age-keygen "filippo.io/age/cmd/...@$age_version"
install sops "github.com/getsops/sops/v3/cmd/sops@$sops_version"
