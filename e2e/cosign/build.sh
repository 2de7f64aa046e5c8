#!/usr/bin/env bash
# Builds the real `cosign` CLI (sigstore) from the Go module proxy, for the OCIRepository
# `spec.verify` tests: they generate a key pair and sign a pushed artifact with it at test time
# (nothing signed is committed). Output: $RFLUX_OCI_BIN (default $HOME/.cache/gitops-e2e/oci-bin),
# next to the distribution `registry` binary the same tests start.
# cosign v3's go.mod has no `replace`, so `go install mod@version` works as is.
set -euo pipefail
out=${RFLUX_OCI_BIN:-$HOME/.cache/gitops-e2e/oci-bin}
cosign_version=${COSIGN_VERSION:-v3.1.3}
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0 GOBIN="$out"
go=$(command -v go || echo /usr/local/go/bin/go)
mkdir -p "$out"

what="github.com/sigstore/cosign/v3/cmd/cosign@$cosign_version"
stamp="$out/.cosign.stamp"
if [[ -x "$out/cosign" && -f "$stamp" && "$(cat "$stamp")" == "$what" ]]; then
  echo "cosign up to date in $out"
  exit 0
fi
echo "building cosign ($what) ..."
t0=$SECONDS
(cd /tmp && "$go" install -trimpath -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$cosign_version" "$what")
echo "$what" > "$stamp"
echo "cosign built in $((SECONDS - t0)) s"
