# rflux: a Flux-compatible GitOps toolkit in Rust.
# `make run` starts everything locally; `make test` runs every test (unit + e2e on a real control plane).

SHELL := /bin/bash
CARGO ?= cargo
export CARGO_TARGET_DIR ?= $(HOME)/.cache/rflux/target
export RFLUX_E2E_BIN ?= $(HOME)/.cache/gitops-e2e/bin
E2E := $(CARGO_TARGET_DIR)/debug/rflux-e2e

.PHONY: all build lint test unit e2e-bins env-up env-down env-status run bench manifests deps clean-env

all: build

## deps: install what the tests need from Debian (sshd for the SSH git server)
deps:
	@command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null; }

## build: every crate, debug
build:
	$(CARGO) build --workspace --all-targets

## lint: formatting and clippy with warnings denied
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## e2e-bins: build kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok and the git server from Go modules
e2e-bins:
	e2e/k8s/build.sh
	e2e/gitserver/build.sh

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
test: deps lint e2e-bins
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
	$(CARGO) test -p rflux-kustomize -p rflux-common -p source-controller -p kustomize-controller

## run: the main job on the local embedded default
run: env-up
	scripts/run.sh

## bench: benchmarks (kustomize build vs kubectl kustomize, packaging throughput)
bench:
	scripts/bench.sh

## manifests: regenerate the CRDs from the Rust types
manifests:
	$(CARGO) run -q -p rflux-common --bin crdgen
