# rflux: a Flux-compatible GitOps toolkit in Rust.
# `make run` starts everything locally; `make test` runs every test (unit + e2e on a real control plane).

SHELL := /bin/bash
CARGO ?= cargo
export CARGO_TARGET_DIR ?= $(HOME)/.cache/rflux/target
export RFLUX_E2E_BIN ?= $(HOME)/.cache/gitops-e2e/bin
E2E := $(CARGO_TARGET_DIR)/debug/rflux-e2e

.PHONY: all build lint test unit e2e-bins env-up env-down env-status run bench bench-fleet bench-remote manifests deps clean-env static flux-cli flux-bins interop fuzz faults

all: build

## deps: install what the tests need from Debian (sshd for the SSH git server, prometheus for the dashboards test,
## gpg for the SOPS OpenPGP fixtures)
deps:
	@command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null; }
	@command -v prometheus >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	@command -v gpg >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gnupg >/dev/null; }

## build: every crate, debug
build:
	$(CARGO) build --workspace --all-targets

## lint: formatting, clippy with warnings denied, and the structure rules (no import circle
## between the files of a crate, no source file over 800 lines: scripts/check-structure.py)
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	python3 scripts/check-structure.py

## e2e-bins: build kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok, the git server,
## the sops and age CLIs (SOPS fixtures are encrypted at test time), the distribution OCI registry,
## the cosign CLI (OCIRepository artifacts are pushed and signed at test time) and flux-operator's CLI
## and manager (the ResourceSet oracle; Go 1.27 toolchain from the module proxy) from Go modules
e2e-bins:
	e2e/k8s/build.sh
	e2e/gitserver/build.sh
	e2e/sops/build.sh
	e2e/registry/build.sh
	e2e/cosign/build.sh
	e2e/flux-operator/build.sh

## env-up / env-down: a local control plane and git server for interactive use
env-up: deps e2e-bins
	$(CARGO) build -p rflux-e2e --bin rflux-e2e
	$(E2E) up
	@$(E2E) env

env-down:
	-for f in .e2e/controllers/*.pid; do [ -f "$$f" ] && kill "$$(cat $$f)" 2>/dev/null; rm -f "$$f"; done; true
	-$(E2E) down

env-status:
	$(E2E) status

## test: unit tests and e2e tests; starts (and afterwards stops) the control plane and git server
test: deps lint e2e-bins flux-cli
	$(CARGO) build --workspace --all-targets
	$(E2E) up
	set -o pipefail; status=0; \
	  $(CARGO) test --workspace --no-fail-fast 2>&1 | tee $(CARGO_TARGET_DIR)/test.log || status=$$?; \
	  $(E2E) down; \
	  [ -d ../shared ] || echo "note: ../shared is absent, so the kustomize corpus and the comparisons with Flux's CRDs, samples and dashboards were skipped (run cargo test -- --nocapture to see each reason)"; \
	  grep -E '^test result:' $(CARGO_TARGET_DIR)/test.log | awk '{p+=$$4; f+=$$6; i+=$$8} END {printf "tests: %d passed, %d failed, %d skipped\n", p, f, i}'; \
	  exit $$status

## unit: only the tests that need no cluster
unit:
	$(CARGO) test -p rflux-kustomize -p rflux-sops -p rflux-common -p source-controller -p kustomize-controller -p resourceset-controller

## run: the main job on the local embedded default
run: env-up
	scripts/run.sh

## bench: benchmarks (kustomize build vs kubectl kustomize, build time in the controller vs Flux, packaging throughput,
## SOPS decryption vs Flux, OCIRepository pull and package vs Flux);
## `make bench FLEET=1` also runs the long fleet benchmark against Flux (bench-fleet)
bench:
	scripts/bench.sh
	@if [ "$(FLEET)" = 1 ]; then $(MAKE) bench-fleet; fi

## bench-fleet: N Kustomizations, ours vs Flux side by side (docs/benchmarks.md); FLEET_N="100 500 1000"
FLEET_N ?= 100
bench-fleet: e2e-bins
	FLEET_PLOT=1 scripts/bench-fleet.sh $(FLEET_N)

## bench-remote: 50 remote clusters (kubeconfig Secrets, distinct users), ours vs Flux, interleaved
## repetitions (docs/benchmarks.md); REMOTE_CLUSTERS=50 REMOTE_REPS=3
bench-remote: e2e-bins
	scripts/bench-remote.sh

## manifests: regenerate the CRDs from the Rust types
manifests:
	$(CARGO) run -q -p rflux-common --bin crdgen

## static: release binaries of the controllers, statically linked (glibc, crt-static), as the images
## carry them; then checks them (file/ldd say static, --help runs). Takes minutes: not part of `make test`.
STATIC_TARGET ?= x86_64-unknown-linux-gnu
static:
	RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build --release --target $(STATIC_TARGET) -p source-controller -p kustomize-controller -p resourceset-controller
	scripts/check-static.sh $(CARGO_TARGET_DIR)/$(STATIC_TARGET)/release/source-controller $(CARGO_TARGET_DIR)/$(STATIC_TARGET)/release/kustomize-controller $(CARGO_TARGET_DIR)/$(STATIC_TARGET)/release/resourceset-controller

## flux-cli: only Flux's `flux` CLI (the flux_cli e2e tests of `make test` drive our controllers with it)
flux-cli:
	e2e/flux/build.sh flux

## flux-bins: build Flux's `flux` CLI, source-controller and kustomize-controller from the Go module proxy
## into ~/.cache/gitops-e2e/flux-bin (e2e/flux/build.sh; skips what is up to date; the first build is long)
flux-bins:
	e2e/flux/build.sh

## interop: the `flux` CLI tests and the interop tests against Flux's own controllers (RFLUX_INTEROP=1),
## on the control plane named "flux", which is stopped afterwards (docs/flux-compat.md)
interop: deps e2e-bins flux-bins
	$(CARGO) build -p source-controller -p kustomize-controller -p rflux-e2e --bin rflux-e2e
	status=0; RFLUX_INTEROP=1 $(CARGO) test -p rflux-e2e --test flux_cli --test flux_interop --test flux_interop_sops --test flux_interop_oci --test flux_interop_argo -- --test-threads=4 || status=$$?; \
	  $(E2E) down --name flux; exit $$status

## fuzz: libFuzzer on the stable toolchain (fuzz/, scripts/fuzz.sh): every target for FUZZ_SECONDS
## (default 600) one at a time; FUZZ_TARGETS="yaml untar" selects; crashers go to fuzz/artifacts/
## and the run fails. Not part of `make test` (its seeds and crashers are replayed there).
FUZZ_SECONDS ?= 600
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh

## faults: the whole fault-injection suite on the real control plane (docs/reliability.md): SIGKILLs
## mid-apply, mid-prune and mid-artifact-write, an error-injecting apiserver proxy, forced 410s,
## apiserver and etcd restarts, leader failover, hostile git servers, a full artifact volume, GC during
## a slow download, a hostile tenant bundle, ownership conflicts. `make test` runs one fast case of each.
faults: deps e2e-bins
	$(CARGO) build -p source-controller -p kustomize-controller -p rflux-e2e --bin rflux-e2e
	$(CARGO) test -p rflux-e2e --no-run --test faults_apply --test faults_source --test faults_tenants --test faults_cluster --test ks_ownership --test ks_gates
	$(E2E) up
	status=0; RFLUX_FAULTS=1 $(CARGO) test -p rflux-e2e --test faults_apply --test faults_source --test faults_tenants --test faults_cluster --test ks_ownership --test ks_gates -- --test-threads=1 --nocapture || status=$$?; \
	  $(E2E) down; exit $$status
