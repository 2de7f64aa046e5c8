#!/usr/bin/env bash
# make run: the main job on the local embedded default.
# Expects `make env-up` to have started the control plane and the git server (make run does).
# Then: pushes examples/sample/app to a repository on the local git server, installs the CRDs,
# starts the controllers (source, kustomize, resourceset) against the local control plane, applies the sample GitRepository and
# Kustomization, and prints how to watch them. `make env-down` stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
e2e="$target/debug/rflux-e2e"
eval "$("$e2e" env)"
state=$RFLUX_E2E_STATE
ctl="$state/controllers"
mkdir -p "$ctl" "$state/storage"

echo "==> building the controllers"
cargo build -q -p source-controller -p kustomize-controller -p resourceset-controller

echo "==> pushing the sample repository to the local git server"
bare="$state/git/repos/sample.git"
rm -rf "$bare" "$ctl/sample-work"
git init -q --bare -b main "$bare"
git -C "$bare" config http.receivepack true
cp -r examples/sample "$ctl/sample-work"
(
  cd "$ctl/sample-work"
  rm -rf cluster
  git init -q -b main .
  git add -A
  git -c user.name=rflux -c user.email=rflux@localhost commit -q -m "sample app"
  git push -q "$bare" main
)
sample_url="$RFLUX_E2E_GIT_HTTP/sample.git"

echo "==> installing the CRDs"
kubectl apply --server-side -f manifests/crds/gitrepositories.yaml -f manifests/crds/ocirepositories.yaml \
  -f manifests/crds/kustomizations.yaml -f manifests/crds/resourcesets.yaml \
  -f manifests/crds/resourcesetinputproviders.yaml >/dev/null
kubectl create namespace flux-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null

start() {
  local name=$1; shift
  if [[ -f "$ctl/$name.pid" ]] && kill -0 "$(cat "$ctl/$name.pid")" 2>/dev/null; then
    kill "$(cat "$ctl/$name.pid")" 2>/dev/null || true
    sleep 1
  fi
  setsid "$target/debug/$name" "$@" >"$ctl/$name.log" 2>&1 < /dev/null &
  echo $! >"$ctl/$name.pid"
}
echo "==> starting the controllers (logs in $ctl)"
export RUNTIME_NAMESPACE=flux-system
start source-controller --metrics-addr=127.0.0.1:18080 --health-addr=127.0.0.1:19440 \
  --storage-path="$state/storage" --storage-addr=127.0.0.1:19090 --storage-adv-addr=127.0.0.1:19090 \
  --watch-all-namespaces=true
start kustomize-controller --metrics-addr=127.0.0.1:18081 --health-addr=127.0.0.1:19441 \
  --watch-all-namespaces=true
start resourceset-controller --metrics-addr=127.0.0.1:18082 --health-addr=127.0.0.1:19442 \
  --watch-all-namespaces=true

echo "==> applying the sample GitRepository and Kustomization"
sed "s#SAMPLE_GIT_URL#$sample_url#" examples/sample/cluster/sample.yaml | kubectl apply -f - >/dev/null
echo "==> waiting for the sample to become Ready (up to 2 minutes)"
if ! kubectl -n flux-system wait kustomization/sample --for=condition=Ready --timeout=120s >/dev/null; then
  echo "the sample is not Ready yet; look at the controller logs in $ctl"
fi
kubectl get gitrepositories,kustomizations,resourcesets,resourcesetinputproviders -A || true
kubectl -n sample get deploy,svc,cm || true
cat <<EOT

The local control plane, the git server and the controllers are running.
  export KUBECONFIG=$KUBECONFIG
  kubectl get gitrepositories,kustomizations -A -w      # watch them
  kubectl -n sample get deploy,svc,cm                   # what the sample deploys
  tail -f $ctl/*.log                                    # controller logs
  curl -s 127.0.0.1:18080/metrics | grep gotk_          # metrics
  git clone $sample_url                                  # push a change and watch it roll out
Stop everything with: make env-down
EOT
